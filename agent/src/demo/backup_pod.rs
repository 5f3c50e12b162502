//! The demo's other pods: processes in a pod's cgroup (named as kubelet's cgroupfs driver
//! names it, `kubepods/besteffort/pod<uid>`). The backup pod makes a container as a runtime
//! does (a mount namespace of its own, a new root) holding a bind of another pod's volume,
//! with no kubelet publish: what a hostPath volume on that pod's volume directory amounts
//! to. The debug pod opens a file by a node path, as a `kubectl debug node/…` pod does.
//! Each is killed, and its cgroup removed, when dropped.

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    time::Duration,
};

use nix::{
    sys::{signal, wait},
    unistd::{ForkResult, Pid, fork},
};

/// Where the container shows the other pod's volume.
pub const MOUNT_POINT: &str = "/data";

pub struct BackupPod {
    pid: Pid,
    cgroup_top: PathBuf,
    cgroup: PathBuf,
}

impl BackupPod {
    /// Starts the container of pod `uid` under the cgroup v2 hierarchy at `hierarchy`, its
    /// root a new tmpfs at `rootfs`, with `volume_dir` (another pod's publish target) bound
    /// at [`MOUNT_POINT`]; returns once it has pivoted into its root.
    pub fn start(hierarchy: &Path, uid: &str, rootfs: &Path, volume_dir: &Path) -> std::io::Result<Self> {
        let (cgroup_top, cgroup) = pod_cgroup(hierarchy, uid)?;
        std::fs::create_dir_all(rootfs)?;
        let cstr = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other);
        let procs = cstr(&cgroup.join("cgroup.procs"))?;
        let (root, at, old_root) = (cstr(rootfs)?, cstr(&rootfs.join("data"))?, cstr(&rootfs.join("old-root"))?);
        let source = cstr(volume_dir)?;
        // SAFETY: the child makes only async-signal-safe calls (prctl, open, write, unshare,
        // mount, mkdir, pivot_root, chdir, chroot, pause, _exit) on strings made before the fork.
        let pid = match unsafe { fork() }.map_err(std::io::Error::from)? {
            ForkResult::Child => unsafe {
                // Dies with the demo, even when the demo is killed with no clean-up of its own.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let null = std::ptr::null();
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                let joined = fd >= 0 && libc::write(fd, c"0".as_ptr().cast(), 1) == 1;
                let made = joined
                    && libc::unshare(libc::CLONE_NEWNS) == 0
                    && libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null.cast()) == 0
                    && libc::mount(c"vg-demo-rootfs".as_ptr(), root.as_ptr(), c"tmpfs".as_ptr(), 0, null.cast()) == 0
                    && libc::mkdir(at.as_ptr(), 0o755) == 0
                    && libc::mkdir(old_root.as_ptr(), 0o755) == 0
                    && libc::mount(source.as_ptr(), at.as_ptr(), null, libc::MS_BIND | libc::MS_REC, null.cast()) == 0;
                // pivot_root, or where / is an initramfs (a VM's), which pivot_root refuses,
                // runc's no-pivot way: move the new root onto / and chroot into it.
                let pivoted = made
                    && ((libc::syscall(libc::SYS_pivot_root, root.as_ptr(), old_root.as_ptr()) == 0
                        && libc::chdir(c"/".as_ptr()) == 0
                        && libc::umount2(c"/old-root".as_ptr(), libc::MNT_DETACH) == 0)
                        || (libc::chdir(root.as_ptr()) == 0
                            && libc::mount(root.as_ptr(), c"/".as_ptr(), null, libc::MS_MOVE, null.cast()) == 0
                            && libc::chroot(c".".as_ptr()) == 0
                            && libc::chdir(c"/".as_ptr()) == 0));
                if pivoted {
                    loop {
                        libc::pause();
                    }
                }
                libc::_exit(1)
            },
            ForkResult::Parent { child } => child,
        };
        let pod = Self { pid, cgroup_top, cgroup };
        pod.wait_for_its_root()?;
        Ok(pod)
    }

    /// The container's process (for the agent's log lines about it).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }

    /// `path` as the container sees it, from outside.
    pub fn path(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.pid))
    }

    /// Until its `/` is no longer the one it was forked with (it pivoted), or it died.
    fn wait_for_its_root(&self) -> std::io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let ours = std::fs::metadata("/")?;
        for _ in 0..500 {
            match wait::waitpid(self.pid, Some(wait::WaitPidFlag::WNOHANG)) {
                Ok(wait::WaitStatus::StillAlive) | Err(_) => {}
                Ok(_) => return Err(std::io::Error::other("the backup pod's container could not be made")),
            }
            if std::fs::metadata(self.path("/")).is_ok_and(|m| (m.dev(), m.ino()) != (ours.dev(), ours.ino())) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::Error::other("the backup pod's container did not pivot within 5 s"))
    }
}

impl Drop for BackupPod {
    fn drop(&mut self) {
        end(self.pid, &self.cgroup_top, &self.cgroup);
    }
}

/// The debug pod's process: it has opened a file (or failed to) and stays, so that the
/// agent can still read its pod from its cgroup when it judges the open.
pub struct DebugPod {
    pid: Pid,
    cgroup_top: PathBuf,
    cgroup: PathBuf,
}

impl DebugPod {
    /// Opens `file` from a process of pod `uid` (its cgroup under `hierarchy`); returns the
    /// pod and what the open got: `Ok` or the errno it failed with.
    pub fn open(hierarchy: &Path, uid: &str, file: &Path) -> std::io::Result<(Self, Result<(), nix::errno::Errno>)> {
        let (cgroup_top, cgroup) = pod_cgroup(hierarchy, uid)?;
        let procs = CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let path = CString::new(file.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let (read_end, write_end) = nix::unistd::pipe()?;
        // SAFETY: the child makes only async-signal-safe calls (prctl, open, write, pause,
        // _exit) on strings and descriptors made before the fork.
        let pid = match unsafe { fork() }.map_err(std::io::Error::from)? {
            ForkResult::Child => unsafe {
                use std::os::fd::AsRawFd;
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                let joined = fd >= 0 && libc::write(fd, c"0".as_ptr().cast(), 1) == 1;
                let errno: i32 = if !joined {
                    -1
                } else if libc::open(path.as_ptr(), libc::O_RDONLY) < 0 {
                    *libc::__errno_location()
                } else {
                    0
                };
                libc::write(write_end.as_raw_fd(), (&raw const errno).cast(), 4);
                loop {
                    libc::pause();
                }
            },
            ForkResult::Parent { child } => child,
        };
        drop(write_end);
        let pod = Self { pid, cgroup_top, cgroup };
        let mut errno = [0u8; 4];
        std::io::Read::read_exact(&mut std::fs::File::from(read_end), &mut errno)?;
        let opened = match i32::from_ne_bytes(errno) {
            0 => Ok(()),
            -1 => return Err(std::io::Error::other("the debug pod's process could not join its cgroup")),
            errno => Err(nix::errno::Errno::from_raw(errno)),
        };
        Ok((pod, opened))
    }

    pub fn pid(&self) -> u32 {
        self.pid.as_raw().unsigned_abs()
    }
}

impl Drop for DebugPod {
    fn drop(&mut self) {
        end(self.pid, &self.cgroup_top, &self.cgroup);
    }
}

/// Pod `uid`'s cgroup under the demo's own directory in `hierarchy`: (that directory, the
/// pod's), made.
fn pod_cgroup(hierarchy: &Path, uid: &str) -> std::io::Result<(PathBuf, PathBuf)> {
    let top = hierarchy.join(format!("volguard-demo-{}", std::process::id()));
    let cgroup = top.join(format!("kubepods/besteffort/pod{uid}"));
    std::fs::create_dir_all(&cgroup)?;
    Ok((top, cgroup))
}

/// Kills a pod's process and removes its cgroup (the demo's directory too, once empty).
fn end(pid: Pid, top: &Path, cgroup: &Path) {
    let _ = signal::kill(pid, signal::Signal::SIGKILL);
    let _ = wait::waitpid(pid, None);
    let mut dir = cgroup.to_path_buf();
    while dir.starts_with(top) {
        let _ = std::fs::remove_dir(&dir);
        dir = dir.parent().map(Path::to_owned).unwrap_or_default();
    }
}
