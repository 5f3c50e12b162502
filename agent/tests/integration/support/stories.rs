//! Stories more than one area's tests play (on the host and in a VM boot).

use super::kubelet::{Agent, KubeletTree, MountNs};

/// The pod-B-publishes-second story in quarantine mode, checked from inside the
/// namespace where it happened. Shared by the host test and the no-BPF-LSM VM boot.
pub fn quarantine_end_to_end(tree: &KubeletTree, ns: &MountNs, agent: &Agent) {
    let volume = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    ns.bind(&volume, &a).unwrap();
    agent.wait_for_line("the claim", |l| l.contains("volume pv-rwop claimed by pod pod-a"));
    // Without BPF LSM the mount itself succeeds...
    ns.bind(&volume, &b).unwrap();
    // ...and is detached and masked at once.
    agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("pod pod-b"));
    let (fstype, source, read_only) = ns.mount_at(&b).expect("a mask mount on pod-b's target");
    assert_eq!((fstype.as_str(), source.as_str(), read_only), ("tmpfs", volguard::model::mounts::MASK_SOURCE, true));
    assert_eq!(
        ns.read(&b.join("marker")).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound),
        "the volume is not visible"
    );
    assert_eq!(ns.write_in(&b).map_err(|e| e.raw_os_error()), Err(Some(libc::EROFS)), "nothing can be written there");
    assert_eq!(ns.read(&a.join("marker")).unwrap(), "pv-rwop", "the owner keeps its volume");
    // The owner unmounts: released, and a new pod may publish (no deadlock).
    ns.umount(&a).unwrap();
    agent.wait_for_line("the release", |l| l.contains("volume pv-rwop released"));
    let c = tree.publish_dir("pod-c", "pv-rwop");
    ns.bind(&volume, &c).unwrap();
    agent.wait_for_line("the new claim", |l| l.contains("volume pv-rwop claimed by pod pod-c"));
}
