//! Quarantine end to end on the host (root), whose kernel refuses BPF LSM programs: the
//! real agent picks quarantine by itself, and a second pod's publish of a single-pod
//! volume is detached and masked in the namespace where it was made.

use crate::support::{
    have_root,
    kubelet::{Agent, KubeletTree, MountNs, pin_root},
    skip,
    stories::quarantine_end_to_end,
};

#[test]
fn without_bpf_lsm_auto_mode_quarantines_a_second_pods_publish() {
    if !have_root("without_bpf_lsm_auto_mode_quarantines_a_second_pods_publish") {
        return;
    }
    if crate::support::agents_refuse_here() {
        skip(
            "without_bpf_lsm_auto_mode_quarantines_a_second_pods_publish",
            "the kernel refuses here (BPF LSM or fmod_ret): the VM's lsm-no-bpf boot runs this test",
        );
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("quarantine"), &["pv-rwop"], &[]);
    agent.wait_for_line("the mode", |l| l.contains("mode=quarantine"));
    quarantine_end_to_end(&tree, &ns, &agent);
    agent.stop();
}

#[test]
fn an_owner_already_mounted_before_the_agent_started_is_known_from_the_mount_table() {
    if !have_root("an_owner_already_mounted_before_the_agent_started_is_known_from_the_mount_table") {
        return;
    }
    if crate::support::agents_refuse_here() {
        skip(
            "an_owner_already_mounted_before_the_agent_started_is_known_from_the_mount_table",
            "the kernel refuses here (BPF LSM or fmod_ret): the VM's lsm-no-bpf boot runs this test",
        );
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let volume = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    ns.bind(&volume, &a).unwrap();
    // The agent starts after pod-a's publish: it never sees that event.
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("rebuild"), &["pv-rwop"], &[]);
    agent.wait_for_line("the rebuilt owner", |l| l.contains("volume pv-rwop is published for pod pod-a (mount table"));
    ns.bind(&volume, &b).unwrap();
    agent.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("owned by pod pod-a"));
    assert_eq!(ns.mount_at(&b).map(|(fstype, _, ro)| (fstype, ro)), Some(("tmpfs".to_owned(), true)));
    agent.stop();
}
