//! `volguard demo` plays its whole story and leaves nothing behind: no mount in the
//! host's table, no pins. On a kernel with BPF LSM (the VM) the second pod is refused in
//! the kernel; elsewhere it is quarantined.

use std::process::Command;

use crate::support::{have_root, kernel_refuses, kubelet::agent_binary};

#[test]
fn the_demo_plays_every_step_and_cleans_up() {
    if !have_root("the_demo_plays_every_step_and_cleans_up") {
        return;
    }
    let out = Command::new(agent_binary()).arg("demo").env("NO_COLOR", "1").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the demo failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for step in 1..=8 {
        assert!(stdout.contains(&format!("── {step}/8")), "step {step} missing:\n{stdout}");
    }
    assert!(stdout.contains("backup-0 finds nothing at /data/README"), "the backup pod's access:\n{stdout}");
    let enforce = stdout.contains("The agent started: mode=enforce");
    let debug_pod = match enforce {
        true => "open(2) failed with EACCES",
        false => "reported the open with the reader's pod",
    };
    assert!(stdout.contains(debug_pod), "the debug pod's open: expected {debug_pod:?}:\n{stdout}");
    if std::env::var_os("VOLGUARD_IN_VM").is_some() {
        assert_eq!(enforce, kernel_refuses(), "enforce exactly when the kernel refuses:\n{stdout}");
    }
    let second_pod = match enforce {
        true => "mount(2) failed with EBUSY: refused in the kernel",
        false => "the agent undid it in",
    };
    assert!(stdout.contains(second_pod), "expected {second_pod:?}:\n{stdout}");
    assert!(stdout.contains("(PVC shop/data) is single-pod and already in use by pod shop/db-0"), "{stdout}");
    assert!(stdout.contains("csi_rwop_not_enforced_by_driver"), "the CSI finding:\n{stdout}");
    assert!(
        stdout.lines().any(|l| l.contains("pv-data") && l.contains("SINGLE_NODE_WRITER")),
        "volguard volumes shows the access mode kubelet sends the driver:\n{stdout}"
    );
    assert!(
        stdout.contains("pv-cache") && stdout.contains("shop/web-0,shop/web-1"),
        "the RWO volume shared:\n{stdout}"
    );
    assert!(stdout.contains("volguard_conflicts_total{namespace=\"shop\",persistentvolumeclaim=\"data\""), "{stdout}");
    assert!(stdout.contains("Cleaned up"), "{stdout}");

    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.contains("volguard-demo"), "a demo mount leaked into the host's table");
    assert!(!std::path::Path::new("/sys/fs/bpf/volguard-demo").exists(), "the demo's pins were left behind");
}

/// What `volguard demo --hold` prints once it holds at its end.
const HOLDING: &str = "Ctrl-C to finish.";

/// Runs `volguard demo --hold`, sends SIGINT once a stdout line contains `marker`, and
/// returns the exit status, everything printed and the demo's pid.
fn interrupt_demo_after(marker: &str) -> (std::process::ExitStatus, String, u32) {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(agent_binary())
        .args(["demo", "--hold"])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut printed = String::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        printed.push_str(&line);
        printed.push('\n');
        // The demo holds at its end until interrupted: a marker not seen by then never comes.
        if line.contains(marker) || line.contains(HOLDING) {
            break;
        }
    }
    assert!(printed.contains(marker), "the demo ended before {marker:?}:\n{printed}");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    for line in lines {
        printed.push_str(&line.unwrap());
        printed.push('\n');
    }
    (child.wait().unwrap(), printed, child.id())
}

/// Ctrl-C in the middle of the story, or while it holds at the end, stops the agent and
/// removes every demo mount and pin too.
#[test]
fn ctrl_c_at_any_point_cleans_up() {
    if !have_root("ctrl_c_at_any_point_cleans_up") {
        return;
    }
    for marker in ["── 2/8", "── 5/8", HOLDING] {
        let (status, printed, demo) = interrupt_demo_after(marker);
        assert!(status.success() || status.code() == Some(130), "after {marker:?}: {status}\n{printed}");
        assert!(printed.contains("Cleaned up"), "after {marker:?}:\n{printed}");
        let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!host.contains("volguard-demo"), "after {marker:?}: a demo mount leaked into the host's table");
        assert!(!std::path::Path::new("/sys/fs/bpf/volguard-demo").exists(), "after {marker:?}: pins left behind");
        let hierarchy =
            volguard::node_files::caller_pod::unified_root().expect("the demo's backup pod needs cgroup v2");
        // This demo's own (another test's demo may be running beside it, with its pods).
        let own = hierarchy.join(format!("volguard-demo-{demo}"));
        assert!(!own.exists(), "after {marker:?}: the backup pod's cgroup was left behind: {}", own.display());
    }
}
