//! The fanotify backend on the host (root, Linux 6.15+): the raw mount notifications and
//! statmount/listmount in a private namespace, then the agent with no tracing program
//! attached, auto picking fanotify, and the queue overflow that forces a resync.

use std::{fs::File, path::Path, time::Duration};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use volguard::sys::{
    fanotify::{MountWatch, Notice, parse},
    mountns::run_in_private_mount_ns,
    statmount::{StatmountError, listmount, namespace_id, statmount},
};

use crate::host_out_of_band::Published;
use crate::support::{
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, pin_root},
    skip,
    stories::quarantine_end_to_end,
};

/// Whether this kernel has fanotify mount notifications; says why not when it has none,
/// and fails where root tests are required on the host (`cargo xtask test`: this host's
/// 6.18 has them; of the VM's kernels only 7.3 has them, and only its boot runs this area).
pub fn fanotify_works(test: &str) -> bool {
    let ns = File::open("/proc/self/ns/mnt").unwrap();
    match MountWatch::new(&ns, "/proc/self/ns/mnt") {
        Ok(_) => true,
        Err(e) => {
            skip(test, &format!("this kernel has no fanotify mount notifications ({e})"));
            false
        }
    }
}

/// Reads notices until `want` many came, or 5 s passed.
fn notices(watch: &MountWatch, want: usize) -> Vec<Notice> {
    let mut found = Vec::new();
    let mut buf = vec![0u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while found.len() < want && std::time::Instant::now() < deadline {
        match watch.read(&mut buf) {
            Ok(n) => found.extend(parse(&buf[..n]).into_iter().map(Result::unwrap)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => panic!("reading notices: {e}"),
        }
    }
    found
}

#[test]
fn a_bind_and_its_unmount_are_notified_and_statmount_reads_the_mount() {
    let test = "a_bind_and_its_unmount_are_notified_and_statmount_reads_the_mount";
    if !have_root(test) || !fanotify_works(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (source, target) = (dir.path().join("source"), dir.path().join("target"));
    std::fs::create_dir_all(&source).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    run_in_private_mount_ns("vg-fan-test", move || {
        let ns = File::open("/proc/thread-self/ns/mnt").unwrap();
        let ns_id = namespace_id(&ns).unwrap();
        let watch = MountWatch::new(&ns, "/proc/thread-self/ns/mnt").unwrap();
        let before = listmount(ns_id).unwrap();
        assert!(!before.is_empty());

        mount(Some("vg-fan-source"), &source, Some("tmpfs"), MsFlags::empty(), None::<&str>).unwrap();
        mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
        let attached = notices(&watch, 2);
        let [Notice::Attached(tmpfs), Notice::Attached(bind)] = attached[..] else { panic!("{attached:?}") };
        let facts = statmount(bind, ns_id).unwrap();
        assert_eq!((facts.mnt_id, facts.mount_point.as_path(), facts.ns_id), (bind, target.as_path(), ns_id));
        assert_eq!((facts.fs_type.as_str(), facts.source.as_deref()), ("tmpfs", Some("vg-fan-source")));
        assert_eq!(facts.root, Path::new("/"));
        let table = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
        assert!(table.lines().any(|l| l.starts_with(&format!("{} ", facts.mnt_id_old))), "the mountinfo id");
        assert_eq!(listmount(ns_id).unwrap().len(), before.len() + 2);

        umount2(&target, MntFlags::empty()).unwrap();
        umount2(&source, MntFlags::MNT_DETACH).unwrap();
        assert_eq!(notices(&watch, 2), [Notice::Detached(bind), Notice::Detached(tmpfs)]);
        assert!(matches!(statmount(bind, ns_id), Err(StatmountError::Gone { mnt_id }) if mnt_id == bind));
    })
    .unwrap();
}

/// BPF objects (programs, links, maps) the process holds open, from its fd table.
fn bpf_fds(pid: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap();
    fds.flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("anon_inode:bpf"))
        .count()
}

#[test]
fn the_fanotify_agent_attaches_no_program_and_quarantines_a_second_publish() {
    let test = "the_fanotify_agent_attaches_no_program_and_quarantines_a_second_publish";
    if !have_root(test) || !fanotify_works(test) {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    // The syscall backend holds programs and links: the count below can tell.
    let traced =
        Agent::start_in(&ns, &tree.root(), &pin_root("fan-contrast"), &[], &["--trace-backend", "tracepoints"]);
    assert!(bpf_fds(traced.pid()) > 0, "a tracepoint agent holds BPF objects");
    traced.stop();

    let agent =
        Agent::start_in(&ns, &tree.root(), &pin_root("fanotify"), &["pv-rwop"], &["--trace-backend", "fanotify"]);
    assert_eq!((agent.mode(), agent.trace_backend()), ("quarantine".to_owned(), "fanotify".to_owned()));
    assert_eq!(bpf_fds(agent.pid()), 0, "no BPF program, link or map at all");
    agent.wait_for_line("the watched namespace", |l| {
        l.contains(&format!("watching mount namespace /proc/{}/task/{}/ns/mnt", std::process::id(), ns.tid))
    });
    quarantine_end_to_end(&tree, &ns, &agent);

    // The agent's own detach and mask came back as notices: pod-b's quarantine stands
    // once the view has caught up with the last change (pod-c's claim). The view is
    // rebuilt in the background: a read can still show an earlier state whose counts
    // look alike (pod-a's claim, before the quarantine), so wait for the whole end state.
    let status = || -> serde_json::Value {
        serde_json::from_str(&http_get(&agent.address("debug API"), "/debug/status").1).unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let settled = |s: &serde_json::Value| s["ownedVolumes"] == 1 && s["quarantinedPublishes"] == 1;
    let status = loop {
        let status = status();
        if settled(&status) {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pod-c's claim beside pod-b's quarantine never reached the view: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status["traceBackendLosses"].as_array().is_some_and(|l| !l.is_empty()), "{status}");
    let (_, conflicts) = http_get(&agent.address("debug API"), "/debug/conflicts");
    let conflicts: serde_json::Value = serde_json::from_str(&conflicts).unwrap();
    let quarantined = &conflicts["conflicts"][0];
    assert_eq!(quarantined["action"], "quarantined", "{conflicts}");
    assert!(quarantined["by"].is_null(), "a notice names no caller, and none is made up: {quarantined}");
    assert!(agent.metric("volguard_mount_notifications_total{event=\"attach\"}") >= 4.0);
    assert_eq!(agent.metric_family_sum("volguard_mount_syscalls_total"), 0.0, "fanotify traces no syscall");
    agent.stop();
    for target in ["pod-a", "pod-b", "pod-c"].map(|pod| tree.publish_dir(pod, "pv-rwop")) {
        while ns.umount(&target).is_ok() {}
    }
}

#[test]
fn an_overflowed_notice_queue_is_resynced_and_loses_no_owner() {
    let test = "an_overflowed_notice_queue_is_resynced_and_loses_no_owner";
    if !have_root(test) || !fanotify_works(test) {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let extra = ["--trace-backend", "fanotify", "--reconcile-interval", "60m"];
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("fan-overflow"), &["pv-rwop"], &extra);
    let (volume, a, b) =
        (tree.volume("pv-rwop"), tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    let scratch = tree.tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();

    // The agent stopped, more notices than the kernel queues (16384), then pod A's
    // publish: its notice is dropped, and only the overflow is queued.
    let stopped = nix::unistd::Pid::from_raw(agent.pid() as i32);
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let (source, target) = (scratch.clone(), a.clone());
    ns.run(move || {
        for _ in 0..9000 {
            mount(Some(&source), &source, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
            umount2(&source, MntFlags::empty()).unwrap();
        }
        mount(Some(&volume), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>).unwrap();
    });
    nix::sys::signal::kill(stopped, nix::sys::signal::Signal::SIGCONT).unwrap();

    agent.wait_for_line("the overflow", |l| l.contains("mount notification queue") && l.contains("overflowed"));
    // The resync reads the mount table at once (the periodic pass is an hour away).
    agent.wait_for_line("pod A's ownership", |l| l.contains("volume pv-rwop is published for pod pod-a (mount table)"));
    assert_eq!(agent.metric("volguard_mount_notification_resyncs_total"), 1.0);
    assert!(agent.metric("volguard_mount_notifications_skipped_total{reason=\"gone_before_read\"}") > 0.0);
    ns.bind(&tree.volume("pv-rwop"), &b).unwrap();
    agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("owned by pod pod-a"));
    agent.stop();
    while ns.umount(&b).is_ok() {}
    while ns.umount(&a).is_ok() {}
}

/// Copies that propagation brings into a pod's namespace are found without any tracing
/// program: the owner's publish is notified, and the namespace scan that follows finds them.
#[test]
fn a_publish_propagated_into_another_pods_namespace_is_detached_there_with_fanotify() {
    const TEST: &str = "a_publish_propagated_into_another_pods_namespace_is_detached_there_with_fanotify";
    if fanotify_works(TEST) {
        crate::host_out_of_band::propagated_copies_are_detached(TEST, &["--trace-backend", "fanotify"]);
    }
}

/// A pod's hostPath above an owned volume's directory is found by the namespace scan with
/// fanotify too: left in place, and reported where no BPF LSM refuses the reads.
#[test]
fn a_hostpath_above_a_volumes_directory_is_left_and_reported_with_fanotify() {
    const TEST: &str = "a_hostpath_above_a_volumes_directory_is_left_and_reported_with_fanotify";
    if fanotify_works(TEST) {
        crate::host_out_of_band::hostpath_above_a_volume_is_left(TEST, &["--trace-backend", "fanotify"]);
    }
}

/// With fanotify the namespace scan is the only check: it must leave a pod's own publish,
/// made while no agent ran, in that pod's container.
#[test]
fn a_second_pods_publish_made_while_no_agent_ran_stays_readable_with_fanotify() {
    const TEST: &str = "a_second_pods_publish_made_while_no_agent_ran_stays_readable_with_fanotify";
    if fanotify_works(TEST) {
        crate::host_out_of_band::publish_made_in_the_gap_stays(TEST, &["--trace-backend", "fanotify"]);
    }
}

/// A mount made in the watched namespace (the node's) names no caller with fanotify, and no
/// pod's container lives there: one that shows an owned volume is judged as a node
/// process's by what it shows. Reported and left by default, detached with
/// `--detach-node-access=true`; a bind of anything else is nothing.
#[test]
fn a_node_namespace_mount_of_an_owned_volume_is_judged_without_a_caller_with_fanotify() {
    const TEST: &str = "a_node_namespace_mount_of_an_owned_volume_is_judged_without_a_caller_with_fanotify";
    if !have_root(TEST) || !fanotify_works(TEST) {
        return;
    }
    for (pin, extra) in [("fan-node-report", &[][..]), ("fan-node-detach", &["--detach-node-access=true"][..])] {
        let detaches = !extra.is_empty();
        let published = Published::with_tree(KubeletTree::new(), MountNs::new(), pin, FANOTIFY, extra);
        let (ns, agent) = (&published.ns, &published.agent);
        // A bind of a directory that is no volume's, then one of A's publish target.
        let (unrelated, elsewhere) = (published.dir("node-src"), published.dir("node-elsewhere"));
        ns.bind(&unrelated, &elsewhere).unwrap();
        let admin = published.dir("node-admin");
        ns.bind(&published.a_target, &admin).unwrap();
        let told = format!("a bind mount at {} by a caller unknown", admin.display());
        if detaches {
            agent.wait_for_line("the node's bind detached", |l| l.contains("CONFLICT detached") && l.contains(&told));
            assert!(published.marker(&admin).is_err(), "the node's bind is left with the opt-in");
        } else {
            agent.wait_for_line("the node's bind reported", |l| {
                l.contains("CONFLICT reported (a node process") && l.contains(&told)
            });
            assert_eq!(published.marker(&admin).ok().as_deref(), Some("pv-rwop"), "the node's bind was taken");
        }
        let action = if detaches { "detached" } else { "observed" };
        let counted =
            agent.metric_family_sum_where("volguard_conflicts_total", &format!("action=\"{action}\",route=\"bind\""));
        assert_eq!(counted, 1.0, "the node's bind is counted once, with route bind");
        assert_eq!(agent.count_lines(|l| l.contains("CONFLICT")), 1, "only the bind of A's volume is a conflict");
        published.finish(&[&admin, &elsewhere]);
    }
}

const FANOTIFY: &[&str] = &["--trace-backend", "fanotify"];
