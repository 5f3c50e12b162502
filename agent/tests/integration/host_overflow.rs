//! The event ring buffer overflows on purpose (a one-page buffer and a burst of
//! syscalls around a real publish): the drops are counted and exported, and the state is
//! right afterwards anyway, because the mount table is reconciled.

use nix::{
    errno::Errno,
    mount::{MsFlags, mount},
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
