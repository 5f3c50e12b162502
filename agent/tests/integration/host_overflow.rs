//! The event ring buffer overflows on purpose (a one-page buffer and a burst of
//! syscalls around a real publish): the drops are counted and exported, and the state is
//! right afterwards anyway, because the mount table is reconciled.

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
    sys::signal::{Signal, kill},
    unistd::Pid,
};

use volguard::cli::client;

use crate::support::{
    HTTP_TIMEOUT, have_root,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, syscall_backend, uninstall},
};

/// `name`'s value in the agent's exposition; `None` while it has none or does not answer.
fn metric(address: &str, name: &str) -> Option<f64> {
    let text = client::get(address.parse().ok()?, "/metrics", HTTP_TIMEOUT).ok()?.body;
    text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
}

#[test]
fn a_full_ring_buffer_is_counted_and_the_mount_table_puts_the_state_right() {
    if !have_root("a_full_ring_buffer_is_counted_and_the_mount_table_puts_the_state_right") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let pins = pin_root("overflow");
    let backend = syscall_backend();
    let extra = ["--ring-buffer-size", "4096", "--reconcile-interval", "300ms", backend[0], backend[1]];
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &extra);
    let metrics = agent.address("metrics");
    let (volume, a, b) =
        (tree.volume("pv-rwop"), tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    let missing = tree.tmp.path().join("missing");

    // A burst no reader keeps up with, with pod A's publish in the middle of it.
    let (source, target) = (volume.clone(), a.clone());
    let published = ns.run(move || {
        let fail = || mount(Some(&missing), &missing, None::<&str>, MsFlags::MS_BIND, None::<&str>);
        for _ in 0..3000 {
            assert_eq!(fail(), Err(Errno::ENOENT));
        }
        let published = mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>);
        for _ in 0..3000 {
            assert_eq!(fail(), Err(Errno::ENOENT));
        }
        published
    });
    assert_eq!(published, Ok(()));

    // Counted, in the log and in the metrics.
    agent.wait_for_line("the loss", |l| l.contains("events lost: the ring buffer was full"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while metric(&metrics, "volguard_events_lost_total").unwrap_or(0.0) == 0.0 {
        assert!(std::time::Instant::now() < deadline, "volguard_events_lost_total never rose");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // The kernel's count of skipped runs is exported beside it (this kernel counts them).
    assert!(metric(&metrics, "volguard_bpf_runs_skipped_total").is_some(), "volguard_bpf_runs_skipped_total missing");

    // Whether or not pod A's publish event survived, pod A owns the volume: from the event,
    // or from the mount table at the next reconciliation.
    agent.wait_for_line("pod A's ownership", |l| {
        l.contains("volume pv-rwop claimed by pod pod-a")
            || l.contains("volume pv-rwop is published for pod pod-a (mount table)")
    });
    match ns.bind(&volume, &b) {
        Err(Errno::EBUSY) => {}
        Ok(()) => {
            agent.wait_for_line("the quarantine", |l| {
                l.contains("CONFLICT quarantined") && l.contains("owned by pod pod-a")
            });
        }
        other => panic!("pod B's publish: {other:?}"),
    }
    agent.stop();
    while ns.umount(&b).is_ok() {}
    while ns.umount(&a).is_ok() {}
    if pins.exists() {
        uninstall(&pins);
    }
}

/// A second pod's publish whose event the full ring buffer dropped (the agent's reader
/// stopped, as under a CPU starved node) is quarantined all the same: the loss starts a
/// reconciliation at once (the routine one is 10 minutes away here), and the publish the
/// mount table shows is judged as its event would have been.
#[test]
fn a_second_pods_publish_whose_event_was_lost_is_quarantined_after_the_loss() {
    if !have_root("a_second_pods_publish_whose_event_was_lost_is_quarantined_after_the_loss") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let pins = pin_root("overflow-lost-publish");
    let backend = syscall_backend();
    let extra = ["--ring-buffer-size", "4096", "--reconcile-interval", "600s", backend[0], backend[1]];
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &extra);
    let (volume, a, b) =
        (tree.volume("pv-rwop"), tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    let missing = tree.tmp.path().join("missing");
    ns.bind(&volume, &a).expect("pod A's publish");
    // From its event, or (another test's burst filled this small buffer) from the table.
    agent.wait_for_line("pod A's ownership", |l| {
        l.contains("volume pv-rwop claimed by pod pod-a")
            || l.contains("volume pv-rwop is published for pod pod-a (mount table)")
    });

    // The reader stopped: the buffer fills with failed mounts, and pod B's publish is lost.
    let pid = Pid::from_raw(agent.pid() as i32);
    kill(pid, Signal::SIGSTOP).expect("stopping the agent");
    let (source, target) = (volume.clone(), b.clone());
    let published = ns.run(move || {
        for _ in 0..3000 {
            let failed = mount(Some(&missing), &missing, None::<&str>, MsFlags::MS_BIND, None::<&str>);
            assert_eq!(failed, Err(Errno::ENOENT));
        }
        mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
    });
    kill(pid, Signal::SIGCONT).expect("resuming the agent");
    assert_eq!(published, Ok(()), "pod B's publish");

    agent.wait_for_line("the loss", |l| l.contains("events lost: the ring buffer was full"));
    agent.wait_for_line("pod B's publish found in the mount table", |l| {
        l.contains("published for pod pod-b (mount table, its event was lost)")
    });
    agent.wait_for_line("the quarantine", |l| {
        l.contains("CONFLICT quarantined") && l.contains("owned by pod pod-a; pod pod-b published it")
    });
    let top = ns.mount_at(&b).expect("pod B's target is a mount point");
    assert_eq!(top.1, "volguard-quarantine", "pod B's target is masked: {top:?}");
    assert_eq!(ns.mounts_at(&b).len(), 1, "pod B's publish detached beneath the mask: {:?}", ns.mounts_at(&b));
    assert!(ns.mount_at(&a).is_some(), "pod A keeps its publish");

    agent.stop();
    while ns.umount(&b).is_ok() {}
    while ns.umount(&a).is_ok() {}
    if pins.exists() {
        uninstall(&pins);
    }
}
