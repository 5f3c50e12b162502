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

/// An agent with a 4 KiB ring buffer and its routine reconciliation 10 minutes away (so
/// that only the read a loss starts can find what was lost), and pod A owning pv-rwop.
struct OwnedByPodA {
    tree: KubeletTree,
    ns: MountNs,
    pins: std::path::PathBuf,
    agent: Agent,
    volume: std::path::PathBuf,
    a: std::path::PathBuf,
    b: std::path::PathBuf,
}

impl OwnedByPodA {
    fn new(pins: &str) -> Self {
        let (tree, ns, pins) = (KubeletTree::new(), MountNs::new(), pin_root(pins));
        let backend = syscall_backend();
        let extra = ["--ring-buffer-size", "4096", "--reconcile-interval", "600s", backend[0], backend[1]];
        let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &extra);
        let (volume, a, b) =
            (tree.volume("pv-rwop"), tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
        ns.bind(&volume, &a).expect("pod A's publish");
        // From its event, or (another test's burst filled this small buffer) from the table.
        agent.wait_for_line("pod A's ownership", |l| {
            l.contains("volume pv-rwop claimed by pod pod-a")
                || l.contains("volume pv-rwop is published for pod pod-a (mount table)")
        });
        Self { tree, ns, pins, agent, volume, a, b }
    }

    /// Runs `change` in the namespace while the agent's reader is stopped (SIGSTOP, as on
    /// a starved node) and its buffer full of failed mounts: the events of `change` are lost.
    fn while_the_reader_is_stopped<T: Send + 'static>(&self, change: impl FnOnce() -> T + Send + 'static) -> T {
        let pid = Pid::from_raw(self.agent.pid() as i32);
        let missing = self.tree.tmp.path().join("missing");
        kill(pid, Signal::SIGSTOP).expect("stopping the agent");
        let result = self.ns.run(move || {
            for _ in 0..3000 {
                let failed = mount(Some(&missing), &missing, None::<&str>, MsFlags::MS_BIND, None::<&str>);
                assert_eq!(failed, Err(Errno::ENOENT));
            }
            change()
        });
        kill(pid, Signal::SIGCONT).expect("resuming the agent");
        self.agent.wait_for_line("the loss", |l| l.contains("events lost: the ring buffer was full"));
        result
    }

    fn finish(self) {
        self.agent.stop();
        while self.ns.umount(&self.b).is_ok() {}
        while self.ns.umount(&self.a).is_ok() {}
        if self.pins.exists() {
            uninstall(&self.pins);
        }
    }
}

fn bind(source: &std::path::Path, target: &std::path::Path) -> nix::Result<()> {
    mount(Some(source), target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
}

/// A second pod's publish whose event the full ring buffer dropped is quarantined all the
/// same: the loss starts a reconciliation at once, and the publish the mount table shows
/// is judged as its event would have been.
#[test]
fn a_second_pods_publish_whose_event_was_lost_is_quarantined_after_the_loss() {
    if !have_root("a_second_pods_publish_whose_event_was_lost_is_quarantined_after_the_loss") {
        return;
    }
    let node = OwnedByPodA::new("overflow-lost-publish");
    let (source, target) = (node.volume.clone(), node.b.clone());
    assert_eq!(node.while_the_reader_is_stopped(move || bind(&source, &target)), Ok(()), "pod B's publish");

    node.agent.wait_for_line("pod B's publish found in the mount table", |l| {
        l.contains("published for pod pod-b (mount table, its event was lost): Quarantine")
    });
    node.agent.wait_for_line("the quarantine", |l| {
        l.contains("CONFLICT quarantined") && l.contains("owned by pod pod-a; pod pod-b published it")
    });
    let (ns, b) = (&node.ns, &node.b);
    let top = ns.mount_at(b).expect("pod B's target is a mount point");
    assert_eq!(top.1, "volguard-quarantine", "pod B's target is masked: {top:?}");
    assert_eq!(ns.mounts_at(b).len(), 1, "pod B's publish detached beneath the mask: {:?}", ns.mounts_at(b));
    assert!(ns.mount_at(&node.a).is_some(), "pod A keeps its publish");
    node.finish();
}

/// A replacement pod's publish lost together with the owner's unmount is not taken for a
/// conflict: the owner is missing from the table too, so the publish is left alone (the
/// two-pass rule releases the owner).
#[test]
fn a_replacements_publish_lost_with_the_owners_unmount_is_left_alone() {
    if !have_root("a_replacements_publish_lost_with_the_owners_unmount_is_left_alone") {
        return;
    }
    let node = OwnedByPodA::new("overflow-lost-replacement");
    let (source, a, b) = (node.volume.clone(), node.a.clone(), node.b.clone());
    let replaced = node.while_the_reader_is_stopped(move || {
        nix::mount::umount(&a)?;
        bind(&source, &b)
    });
    assert_eq!(replaced, Ok(()), "pod A's unmount and pod B's publish");

    node.agent.wait_for_line("pod B's publish found and left", |l| {
        l.contains("published for pod pod-b (mount table, its event was lost); not judged: its owner pod pod-a's")
    });
    let top = node.ns.mount_at(&node.b).expect("pod B's target is a mount point");
    assert_ne!(top.1, "volguard-quarantine", "pod B keeps its publish: {top:?}");
    assert_eq!(node.agent.count_lines(|l| l.contains("CONFLICT")), 0, "no conflict told");
    node.finish();
}
