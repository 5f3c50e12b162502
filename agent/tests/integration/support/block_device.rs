//! A block volume's device for the tests: ext4 on a loop device (`mkfs.ext4`, `losetup`;
//! the VM carries both), and its mounts.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::kubelet::MountNs;

/// An ext4 filesystem on a loop device over a file; the device is released when dropped.
pub struct LoopDevice {
    pub path: PathBuf,
}

impl LoopDevice {
    pub fn with_ext4(image: &Path) -> Self {
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

/// A new mount of `device`'s ext4 at `at` in `ns`, by a node process.
pub fn mount_ext4(ns: &MountNs, device: &Path, at: &Path) -> nix::Result<()> {
    let (dev, at) = (device.to_owned(), at.to_owned());
    ns.run(move || nix::mount::mount(Some(&dev), &at, Some("ext4"), nix::mount::MsFlags::empty(), None::<&str>))
}
