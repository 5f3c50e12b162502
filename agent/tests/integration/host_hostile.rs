//! Hostile inputs against a real agent: mounts at paths near PATH_MAX, with newlines,
//! spaces, non-UTF-8 bytes, `..` and symlinks, made in a private mount namespace while
//! the agent runs. The agent must stay up, refuse or quarantine nothing legitimate, and
//! still stop the one real conflict; a hung or flooding CSI socket does not stall it; mount options
//! (which can hold credentials) never reach its logs, metrics or debug API. Bad start-up
//! input fails with a clear message.

use std::{
    ffi::OsStr,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::Command,
};

use nix::errno::Errno;

use crate::support::{
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, uninstall},
};

/// A path of exactly `len` bytes below `base`, made of components of at most 200 bytes.
fn path_of_length(base: &Path, len: usize) -> PathBuf {
    let mut path = base.to_path_buf();
    while path.as_os_str().len() + 201 < len {
        path.push("d".repeat(200));
    }
    path.push("e".repeat(len - path.as_os_str().len() - 1));
    assert_eq!(path.as_os_str().len(), len);
    path
}

/// Serves a CSI socket that floods every connection with junk until the peer hangs up
/// (or 256 MiB went out, so the test's thread ends on its own).
fn serve_flood(socket: &Path) {
    use std::io::Write;
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        for mut connection in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let junk = vec![0xa5u8; 64 * 1024];
                for _ in 0..4096 {
                    if connection.write_all(&junk).is_err() {
                        break;
                    }
                }
            });
        }
    });
}

// Long by design: one agent sees every hostile path in turn, then the real conflict.
#[test]
fn hostile_paths_are_traced_without_a_wrong_refusal_and_the_real_conflict_is_still_stopped() {
    if !have_root("hostile_paths_are_traced_without_a_wrong_refusal_and_the_real_conflict_is_still_stopped") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let pins = pin_root("hostile");
    // A CSI socket that accepts and then never answers: the checks' deadlines must hold.
    let hung = tree.root().join("plugins/hung.csi.volguard.io/csi.sock");
    std::fs::create_dir_all(hung.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&hung).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for connection in listener.incoming() {
            held.push(connection);
        }
    });
    // One that floods every caller with junk: its deadline and message limits must hold too.
    let flood = tree.root().join("plugins/flood.csi.volguard.io/csi.sock");
    std::fs::create_dir_all(flood.parent().unwrap()).unwrap();
    serve_flood(&flood);
    let agent =
        Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &["--reconcile-interval", "200ms", "--print-events"]);
    let source = tree.volume("pv-rwop");
    let scratch = tree.tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();

    let mut targets: Vec<PathBuf> = vec![
        // PATH_MAX - 1, the longest path the kernel takes: far longer than the 255 bytes
        // the kernel side copies.
        path_of_length(&scratch.join("long"), 4095),
        scratch.join("new\nline"),
        scratch.join("with spaces and\ttabs"),
        scratch.join(OsStr::from_bytes(b"not-utf8-\xff\xfe")),
        // Publish-target look-alikes that are not one: extra components, `..`.
        tree.root().join("pods/pod-x/volumes/kubernetes.io~csi/pv-rwop/mount/sub"),
        tree.root().join("pods/pod-y/volumes/kubernetes.io~csi/pv-rwop/other"),
    ];
    for t in &targets {
        std::fs::create_dir_all(t).unwrap();
    }
    let dotdot = tree.root().join("pods/pod-z/volumes/kubernetes.io~csi/pv-rwop/mount/../mount");
    std::fs::create_dir_all(tree.root().join("pods/pod-z/volumes/kubernetes.io~csi/pv-rwop/mount")).unwrap();
    targets.push(dotdot);
    // A symlink from outside the kubelet tree to a directory of its own.
    let real = scratch.join("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = scratch.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    targets.push(link);

    for target in &targets {
        assert_eq!(ns.bind(&scratch.join("real"), target), Ok(()), "a legitimate bind onto {target:?}");
        assert_eq!(ns.umount(target), Ok(()), "{target:?}");
    }
    // 4,096 bytes: one past what the kernel takes. It fails there, and the agent sees a failed call.
    let too_long = path_of_length(&scratch.join("long"), 4096);
    assert_eq!(ns.bind(&scratch.join("real"), &too_long), Err(Errno::ENAMETOOLONG));
    // Mount options can carry credentials: they must never leave the kernel.
    let secret_target = scratch.join("real");
    let t = secret_target.clone();
    let with_secret = ns.run(move || {
        nix::mount::mount(
            Some("vg-secret"),
            &t,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=1m,password=hunter2"),
        )
    });
    // tmpfs rejects the unknown option; the syscall (and its arguments) happened either way.
    let _ = with_secret;
    let _ = ns.umount(&secret_target);

    // The real conflict is still stopped (refused in the kernel, or quarantined).
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    assert_eq!(ns.bind(&source, &a), Ok(()));
    match ns.bind(&source, &b) {
        Err(Errno::EBUSY) => {
            agent.wait_for_line("the refusal", |l| l.contains("CONFLICT blocked") && l.contains("pod-b"));
        }
        Ok(()) => {
            agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("pod pod-b"));
        }
        other => panic!("pod B's publish: {other:?}"),
    }
    let conflicts = agent.count_lines(|l| l.contains("CONFLICT"));
    assert_eq!(conflicts, 1, "exactly one conflict: the real one, none for the hostile paths");
    assert_eq!(agent.count_lines(|l| l.contains("panicked")), 0, "no panic");
    let debug = agent.address("debug API");
    let started = std::time::Instant::now();
    let status = Command::new(agent_binary()).args(["status", "--debug-address", &debug]).output().unwrap();
    assert!(status.status.success(), "the agent still answers: {}", String::from_utf8_lossy(&status.stderr));
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "the hung CSI socket does not stall the agent");
    for driver in ["hung.csi.volguard.io", "flood.csi.volguard.io"] {
        agent.wait_for_line(driver, |l| l.contains("CSI finding") && l.contains(driver));
    }
    assert!(
        Command::new(agent_binary()).args(["status", "--debug-address", &debug]).output().unwrap().status.success(),
        "the agent still answers after the flood"
    );

    // No secret anywhere: logs (every event printed), metrics, debug API.
    assert_eq!(agent.count_lines(|l| l.contains("hunter2")), 0, "a mount option reached the agent's output");
    let metrics = agent.address("metrics");
    for (address, path) in [
        (&debug, "/debug/mounts?limit=1024"),
        (&debug, "/debug/volumes"),
        (&debug, "/debug/config"),
        (&debug, "/debug/conflicts"),
        (&metrics, "/metrics"),
    ] {
        let (_, body) = http_get(address, path);
        assert!(body.len() > 20 && !body.contains("hunter2"), "{path}: {body}");
    }

    agent.stop();
    while ns.umount(&b).is_ok() {}
    while ns.umount(&a).is_ok() {}
    if pins.exists() {
        uninstall(&pins);
    }
}

#[test]
fn bad_start_up_input_fails_with_a_clear_message() {
    if !have_root("bad_start_up_input_fails_with_a_clear_message") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(agent_binary())
            .arg("run")
            .args(args)
            .args(["--metrics-address", "127.0.0.1:0", "--debug-address", "127.0.0.1:0", "--mode", "audit"])
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--kubelet-root", "/nonexistent/volguard/kubelet"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("kubelet root /nonexistent/volguard/kubelet is not a directory"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let inventory = tmp.path().join("inv.yaml");
    std::fs::write(&inventory, "pods:\n  - uid: a\n    namespace: n\n").unwrap();
    let root = tmp.path().to_str().unwrap();
    let (code, err) = run(&["--kubelet-root", root, "--inventory", inventory.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(err.contains("line 2") && err.contains("pods[0]") && err.contains("missing field `name`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    let (code, err) = run(&["--kubelet-root", root, "--mountinfo", "/nonexistent/mountinfo"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("reading the mount table"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// An agent that exits at start (here a mode that does not exist) fails the wait at once,
/// with its error, not after the wait's 60 s (whose message would differ).
#[test]
#[should_panic(expected = "the agent exited without printing ready")]
fn an_agent_that_exits_at_start_fails_the_wait_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    crate::support::kubelet::Agent::start_with(tmp.path(), &tmp.path().join("pins"), &[], "no-such-mode", &[]);
}
