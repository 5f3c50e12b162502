//! The block device under an owned volume's filesystem, opened raw.

use std::os::unix::fs::MetadataExt;

use super::{EACCES, POD_A, POD_C};
use crate::support::{
    block_device::{LoopDevice, mount_ext4},
    kernel_refuses,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, uninstall},
    pod_cgroup::PodCgroup,
};

/// Another pod reads no owned volume's blocks: pod A's volume is ext4 on a loop device;
/// pod C's open of that device, by its node or by a node of its own made with mknod (a
/// privileged pod's `/host/dev/...` is the former), is refused (EACCES) and reported with
/// hook `file_open`; pod A and a node process (the driver's mount helpers) open it.
#[test]
#[ignore = "needs a kernel that refuses (BPF LSM or fmod_ret): runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_another_pods_open_of_an_owned_volumes_block_device() {
    const DEVICE_TEST: &str = "enforce_refuses_another_pods_open_of_an_owned_volumes_block_device";
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let Some(cgroups) = PodCgroup::hierarchy(DEVICE_TEST) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let tree = KubeletTree::new();
    let pins = pin_root("block-device");
    let ns = MountNs::new();
    let device = LoopDevice::with_ext4(&tree.tmp.path().join("pv-blk.img"));
    let staging = tree.tmp.path().join("pv-blk-staging");
    std::fs::create_dir_all(&staging).unwrap();
    mount_ext4(&ns, &device.path, &staging).expect("the driver's staging mount of the loop device");
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-blk"], &[]);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));
    let target = tree.publish_dir(POD_A, "pv-blk");
    assert_eq!(ns.bind(&staging, &target), Ok(()), "kubelet publishes pv-blk for pod A");

    let made = tree.tmp.path().join("made-by-mknod");
    let rdev = std::fs::metadata(&device.path).unwrap().rdev();
    let (kind, mode) = (nix::sys::stat::SFlag::S_IFBLK, nix::sys::stat::Mode::from_bits_truncate(0o600));
    nix::sys::stat::mknod(&made, kind, mode, rdev).expect("mknod of the loop device");
    for (route, node) in [("the loop device's node", &device.path), ("a node made with mknod", &made)] {
        assert_eq!(pod_c.try_read(&ns, node), EACCES, "pod C read pv-blk's blocks through {route}");
        assert_eq!(pod_a.try_read(&ns, node), 0, "pod A reads its own volume's device through {route}");
    }
    let mut byte = [0u8; 1];
    let read = std::io::Read::read(&mut std::fs::File::open(&device.path).unwrap(), &mut byte);
    assert_eq!(read.unwrap(), 1, "a node process reads the device");
    agent.wait_for_line("the refused open of the device", |l| {
        l.contains("CONFLICT blocked (EACCES) file_open") && l.contains("\"pv-blk\"") && l.contains(POD_C)
    });

    ns.umount(&target).unwrap();
    assert_eq!(pod_c.try_read(&ns, &device.path), 0, "after pod A's unpublish the device is no one's");
    agent.stop();
    uninstall(&pins);
    ns.umount(&staging).unwrap();
    drop(device);
}
