//! Quarantine end to end on the host (root), whose kernel refuses BPF LSM programs: the
//! real agent picks quarantine by itself, and a second pod's publish of a single-pod
//! volume is detached and masked in the namespace where it was made.

mod support;

use support::{
    have_root,
    kubelet::{Agent, KubeletTree, pin_root, quarantine_end_to_end},
};

#[test]
fn without_bpf_lsm_auto_mode_quarantines_a_second_pods_publish() {
    if !have_root("without_bpf_lsm_auto_mode_quarantines_a_second_pods_publish") {
        return;
    }
    if volguard::lsm_probe::probe(&mut volguard::bpf::loader::load().unwrap()).unwrap().status
        == volguard::lsm_probe::LsmStatus::Active
    {
        eprintln!("BPF LSM works on this kernel: quarantine is covered by the VM's no-bpf boot instead");
        return;
    }
    let tree = KubeletTree::new();
    let agent = Agent::start(&tree.root(), &pin_root("quarantine"), &["pv-rwop"], "auto");
    agent.wait_for_line("the mode", |l| l.contains("mode=quarantine"));
    quarantine_end_to_end(&tree, &agent);
    agent.stop();
}
