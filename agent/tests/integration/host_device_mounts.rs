//! A single-pod volume that is a filesystem of its own (a block volume: here ext4 on a loop
//! device), mounted again from its device: the new mount shows the same filesystem, the
//! volume's data. With a syscall backend, another pod's new mount is detached and reported
//! at the syscall's exit (route `device`); a node process's is reported and left in place;
//! the owner's publish stays. With fanotify a node process's mount is judged at its notice.
//! Needs a loop device (`/dev/loop-control`) and `mkfs.ext4`.

use std::path::{Path, PathBuf};

use crate::{
    host_out_of_band::detached_at,
    support::{
        block_device::{LoopDevice, mount_ext4},
        cstr, have_root,
        kubelet::{Agent, KubeletTree, MountNs, pin_root, syscall_backend, uninstall},
        pod_cgroup::PodCgroup,
    },
};

const TEST: &str = "a_second_mount_of_a_block_volumes_device_by_another_pod_is_detached";
const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a3";
const POD_C: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c9";

/// Pod A's block volume: ext4 on a loop device, staged and published for A in a private
/// mount namespace, with the agent (`backend`, `extra`) running there.
struct BlockVolume {
    tree: KubeletTree,
    ns: MountNs,
    device: LoopDevice,
    staging: PathBuf,
    target: PathBuf,
    agent: Agent,
    pins: PathBuf,
}

impl BlockVolume {
    fn published(pin: &str, backend: &[&str], extra: &[&str]) -> Self {
        assert!(Path::new("/dev/loop-control").exists(), "this test needs loop devices (/dev/loop-control)");
        let tree = KubeletTree::new();
        let ns = MountNs::new();
        let device = LoopDevice::with_ext4(&tree.tmp.path().join("pv-blk.img"));
        // The driver's staging of the block volume, then kubelet's publish for pod A.
        let staging = tree.tmp.path().join("pv-blk-staging");
        std::fs::create_dir_all(&staging).unwrap();
        mount_ext4(&ns, &device.path, &staging).expect("the staging mount of the loop device");
        let written = staging.join("data");
        ns.run(move || std::fs::write(written, b"pod A's block data")).unwrap();
        let args: Vec<&str> = backend.iter().chain(extra).copied().collect();
        let pins = pin_root(pin);
        let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-blk"], &args);
        let target = tree.publish_dir(POD_A, "pv-blk");
        ns.bind(&staging, &target).unwrap();
        let (claimed, published) = (
            format!("volume pv-blk claimed by pod {POD_A}"),
            format!("volume pv-blk published for pod {POD_A}, its owner"),
        );
        agent.wait_for_line("pod A's publish", |l| l.contains(&claimed) || l.contains(&published));
        Self { tree, ns, device, staging, target, agent, pins }
    }

    /// A new directory outside the kubelet tree.
    fn dir(&self, name: &str) -> PathBuf {
        let d = self.tree.tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn finish(self, points: &[&Path]) {
        self.agent.stop();
        uninstall(&self.pins);
        for point in points.iter().copied().chain([self.target.as_path(), self.staging.as_path()]) {
            let _ = self.ns.umount_detach(point);
        }
        drop(self.ns);
        drop(self.device);
    }
}

#[test]
fn a_second_mount_of_a_block_volumes_device_by_another_pod_is_detached() {
    if !have_root(TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_C);
    let volume = BlockVolume::published("device-mounts", &syscall_backend(), &[]);
    let (ns, agent) = (&volume.ns, &volume.agent);

    // Pod C mounts the volume's device on a directory of its own.
    let by_pod = volume.dir("c-device-mount");
    let (dev, at) = (cstr(&volume.device.path), cstr(&by_pod));
    // SAFETY: a raw syscall on NUL-terminated strings made before the fork.
    pod_c.run_in(ns, move || unsafe { libc::mount(dev.as_ptr(), at.as_ptr(), c"ext4".as_ptr(), 0, std::ptr::null()) });
    let line = agent.wait_for_line("pod C's mount of the device detached", detached_at(&by_pod));
    assert!(line.contains("a device mount"), "the route is device: {line}");
    assert!(ns.read(&by_pod.join("data")).is_err(), "pod C's mount of the device is still there");
    let counted = agent.metric_family_sum_where("volguard_conflicts_total", "action=\"detached\",route=\"device\"");
    assert_eq!(counted, 1.0, "the detach is counted with route device");

    // A node process's mount of it (an administrator's) is reported and left.
    let by_node = volume.dir("node-device-mount");
    mount_ext4(ns, &volume.device.path, &by_node).expect("a node process's mount of the device");
    let reported = format!("a device mount at {} by", by_node.display());
    agent.wait_for_line("the node process's mount reported", |l| {
        l.contains("CONFLICT reported") && l.contains(&reported)
    });
    assert_eq!(ns.read(&by_node.join("data")).unwrap(), "pod A's block data", "the node process's mount was taken");
    assert_eq!(ns.read(&volume.target.join("data")).unwrap(), "pod A's block data", "pod A's publish stays");
    volume.finish(&[&by_node]);
}

const FANOTIFY_TEST: &str =
    "a_node_namespace_mount_of_a_block_volumes_device_is_detached_with_the_opt_in_with_fanotify";

/// With fanotify a new mount of the device in the watched (node's) namespace is told by its
/// notice, with no caller: judged as a node process's by what it shows (the volume's
/// filesystem), so detached with `--detach-node-access=true` (told as a bind: a notice
/// does not say which call made it).
#[test]
fn a_node_namespace_mount_of_a_block_volumes_device_is_detached_with_the_opt_in_with_fanotify() {
    if !have_root(FANOTIFY_TEST) || !crate::host_fanotify::fanotify_works(FANOTIFY_TEST) {
        return;
    }
    let backend = ["--trace-backend", "fanotify"];
    let volume = BlockVolume::published("device-mounts-fan", &backend, &["--detach-node-access=true"]);
    let (ns, agent) = (&volume.ns, &volume.agent);
    let by_node = volume.dir("node-device-mount");
    mount_ext4(ns, &volume.device.path, &by_node).expect("a node process's mount of the device");
    let line = agent.wait_for_line("the node's mount of the device detached", detached_at(&by_node));
    assert!(line.contains("by a caller unknown"), "a notice names no caller: {line}");
    assert!(ns.read(&by_node.join("data")).is_err(), "the node's mount of the device is still there");
    assert_eq!(ns.read(&volume.target.join("data")).unwrap(), "pod A's block data", "pod A's publish stays");
    volume.finish(&[&by_node]);
}
