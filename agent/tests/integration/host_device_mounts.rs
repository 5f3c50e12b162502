//! A single-pod volume that is a filesystem of its own (a block volume: here ext4 on a loop
//! device), mounted again from its device: the new mount shows the same filesystem, the
//! volume's data. With a syscall backend, another pod's new mount is detached and reported
//! at the syscall's exit (route `device`); a node process's is reported and left in place;
//! the owner's publish stays. Needs a loop device (`/dev/loop-control`) and `mkfs.ext4`.

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{
    host_out_of_band::detached_at,
    support::{
        have_root,
        kubelet::{Agent, KubeletTree, MountNs, pin_root, syscall_backend},
        pod_cgroup::PodCgroup,
    },
};

const TEST: &str = "a_second_mount_of_a_block_volumes_device_by_another_pod_is_detached";
const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a3";
const POD_C: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c9";

/// An ext4 filesystem on a loop device over a file; the device is released when dropped.
struct LoopDevice {
    path: PathBuf,
}

impl LoopDevice {
    fn with_ext4(image: &Path) -> Self {
        std::fs::File::create(image).unwrap().set_len(16 << 20).unwrap();
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            let out = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
            assert!(out.status.success(), "{program} failed: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        run("mkfs.ext4", &["-q".as_ref(), "-F".as_ref(), image.as_os_str()]);
        let path = run("losetup", &["--find".as_ref(), "--show".as_ref(), image.as_os_str()]);
        Self { path: PathBuf::from(path) }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("--detach").arg(&self.path).status();
    }
}

fn cstr(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

#[test]
fn a_second_mount_of_a_block_volumes_device_by_another_pod_is_detached() {
    if !have_root(TEST) {
        return;
    }
    assert!(Path::new("/dev/loop-control").exists(), "this test needs loop devices (/dev/loop-control)");
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_C);
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let device = LoopDevice::with_ext4(&tree.tmp.path().join("pv-blk.img"));
    // The driver's staging of the block volume, then kubelet's publish for pod A.
    let staging = tree.tmp.path().join("pv-blk-staging");
    std::fs::create_dir_all(&staging).unwrap();
    let (dev, at) = (device.path.clone(), staging.clone());
    ns.run(move || nix::mount::mount(Some(&dev), &at, Some("ext4"), nix::mount::MsFlags::empty(), None::<&str>))
        .expect("the staging mount of the loop device");
    let written = staging.join("data");
    ns.run(move || std::fs::write(written, b"pod A's block data")).unwrap();
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("device-mounts"), &["pv-blk"], &syscall_backend());
    let target = tree.publish_dir(POD_A, "pv-blk");
    ns.bind(&staging, &target).unwrap();
    let (claimed, published) = (
        format!("volume pv-blk claimed by pod {POD_A}"),
        format!("volume pv-blk published for pod {POD_A}, its owner"),
    );
    agent.wait_for_line("pod A's publish", |l| l.contains(&claimed) || l.contains(&published));

    // Pod C mounts the volume's device on a directory of its own.
    let by_pod = tree.tmp.path().join("c-device-mount");
    std::fs::create_dir_all(&by_pod).unwrap();
    let (dev, at) = (cstr(&device.path), cstr(&by_pod));
    // SAFETY: a raw syscall on NUL-terminated strings made before the fork.
    pod_c.run_in(&ns, move || unsafe { libc::mount(dev.as_ptr(), at.as_ptr(), c"ext4".as_ptr(), 0, std::ptr::null()) });
    let line = agent.wait_for_line("pod C's mount of the device detached", detached_at(&by_pod));
    assert!(line.contains("a device mount"), "the route is device: {line}");
    assert!(ns.read(&by_pod.join("data")).is_err(), "pod C's mount of the device is still there");
    let counted = agent.metric_family_sum_where("volguard_conflicts_total", "action=\"detached\",route=\"device\"");
    assert_eq!(counted, 1.0, "the detach is counted with route device");

    // A node process's mount of it (an administrator's) is reported and left.
    let by_node = tree.tmp.path().join("node-device-mount");
    std::fs::create_dir_all(&by_node).unwrap();
    let (dev, at) = (device.path.clone(), by_node.clone());
    ns.run(move || nix::mount::mount(Some(&dev), &at, Some("ext4"), nix::mount::MsFlags::empty(), None::<&str>))
        .expect("a node process's mount of the device");
    let reported = format!("a device mount at {} by", by_node.display());
    agent.wait_for_line("the node process's mount reported", |l| {
        l.contains("CONFLICT reported") && l.contains(&reported)
    });
    assert_eq!(ns.read(&by_node.join("data")).unwrap(), "pod A's block data", "the node process's mount was taken");
    assert_eq!(ns.read(&target.join("data")).unwrap(), "pod A's block data", "pod A's publish stays");

    agent.stop();
    for point in [&by_node, &target, &staging] {
        let _ = ns.umount_detach(point);
    }
    drop(ns);
    drop(device);
}
