//! What a pod's processes do in the tests: mounts made by a forked child that joins the
//! pod's cgroup ([`PodCgroup`]) and a mount namespace, and containers made as a runtime
//! makes them (a namespace of their own, a pivot into a new root).

use std::{
    ffi::CString,
    os::{fd::AsRawFd, unix::fs::MetadataExt},
    path::{Path, PathBuf},
};

use super::{cstr, kubelet::MountNs, pod_cgroup::PodCgroup};

/// What a pod's processes do in these tests: mounts made by a forked child in its cgroup.
impl PodCgroup {
    /// A bind (`MS_BIND`, plus `MS_REC` where `recursive`) of `source` onto `target`, made in
    /// `ns` by a process of this pod.
    pub fn bind(&self, ns: &MountNs, source: &Path, target: &Path, recursive: bool) {
        let (s, t) = (cstr(source), cstr(target));
        let flags = libc::MS_BIND | if recursive { libc::MS_REC } else { 0 };
        self.run_in(ns, move || {
            // SAFETY: valid NUL-terminated strings.
            unsafe { libc::mount(s.as_ptr(), t.as_ptr(), std::ptr::null(), flags, std::ptr::null()) }
        });
    }

    /// A bind of `source` onto `/proc/thread-self/fd/N` for an `O_PATH` fd of `target`, as
    /// runc binds a container's volumes (a hostPath among them), in `ns` by this pod.
    pub fn bind_via_fd(&self, ns: &MountNs, source: &Path, target: &Path) {
        let (s, t) = (cstr(source), cstr(target));
        let through_fd = bind_fd_path();
        self.run_in(ns, move || {
            // SAFETY: raw syscalls with valid NUL-terminated strings.
            unsafe {
                if !hold_as_bind_fd(t.as_ptr()) {
                    return -1;
                }
                libc::mount(s.as_ptr(), through_fd.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null())
            }
        });
    }

    /// A clone of `source` (`open_tree(OPEN_TREE_CLONE)`) moved onto `target`
    /// (`move_mount`), in `ns` by a process of this pod.
    pub fn clone_tree(&self, ns: &MountNs, source: &Path, target: &Path) {
        assert_eq!(self.try_clone_tree(ns, source, target), 0, "the pod's clone failed");
    }

    /// As [`Self::clone_tree`]; the errno the clone failed with (0: it went through).
    pub fn try_clone_tree(&self, ns: &MountNs, source: &Path, target: &Path) -> i32 {
        let (s, t) = (cstr(source), cstr(target));
        self.exit_code_in(ns, move || {
            // SAFETY: raw syscalls with valid NUL-terminated strings.
            unsafe {
                let fd = libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, s.as_ptr(), OPEN_TREE_CLONE);
                if fd < 0 {
                    return -1;
                }
                let empty = c"";
                let moved = libc::syscall(
                    libc::SYS_move_mount,
                    fd,
                    empty.as_ptr(),
                    libc::AT_FDCWD,
                    t.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                );
                if moved < 0 { *libc::__errno_location() } else { 0 }
            }
        })
    }

    /// Opens `file` in `ns` as a process of this pod and reads a byte from it: 0, or the
    /// errno the open or the read failed with.
    pub fn try_read(&self, ns: &MountNs, file: &Path) -> i32 {
        let file = cstr(file);
        // SAFETY: raw syscalls on a NUL-terminated string made before the fork.
        self.exit_code_in(ns, move || unsafe { read_a_byte(file.as_ptr()) })
    }

    /// Appends a byte to `file` in `ns` as a process of this pod: 0, or the errno.
    pub fn try_write(&self, ns: &MountNs, file: &Path) -> i32 {
        let file = cstr(file);
        // SAFETY: raw syscalls on a NUL-terminated string made before the fork.
        self.exit_code_in(ns, move || unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_APPEND);
            if fd < 0 || libc::write(fd, c"w".as_ptr().cast(), 1) != 1 {
                return *libc::__errno_location();
            }
            0
        })
    }

    /// As [`Self::try_read`], after entering the mount namespace of process `pid` (what
    /// `nsenter -t <pid> -m` does): `file` as that process sees it.
    pub fn try_read_in_namespace_of(&self, ns: &MountNs, pid: i32, file: &Path) -> i32 {
        let (namespace, file) = (cstr(Path::new(&format!("/proc/{pid}/ns/mnt"))), cstr(file));
        // SAFETY: raw syscalls on NUL-terminated strings made before the fork.
        self.exit_code_in(ns, move || unsafe {
            let fd = libc::open(namespace.as_ptr(), libc::O_RDONLY);
            if fd < 0 || libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                return SETNS_FAILED;
            }
            read_a_byte(file.as_ptr())
        })
    }

    /// A process of this pod that holds `file` open (as fd [`HELD_FD`]) with its working
    /// directory where the file is: `/proc/<pid>/fd/<HELD_FD>` and `/proc/<pid>/cwd` lead there.
    pub fn holding_open(&self, ns: &MountNs, file: &Path) -> Container {
        self.holding_open_in(ns, None, file)
    }

    /// As [`Self::holding_open`], after entering the mount namespace of process
    /// `namespace_of` where one is given (`file` as that process sees it). A reader that
    /// stays: its pod can still be read from its cgroup when its open is judged.
    pub fn holding_open_in(&self, ns: &MountNs, namespace_of: Option<i32>, file: &Path) -> Container {
        let namespace = namespace_of.map(|pid| cstr(Path::new(&format!("/proc/{pid}/ns/mnt"))));
        let (dir, path) = (cstr(file.parent().unwrap()), cstr(file));
        let child = self.fork_in(
            ns,
            // SAFETY: raw syscalls on NUL-terminated strings made before the fork.
            move || unsafe {
                if let Some(namespace) = &namespace {
                    let fd = libc::open(namespace.as_ptr(), libc::O_RDONLY);
                    if fd < 0 || libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                        return SETNS_FAILED;
                    }
                }
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                let held = fd >= 0 && libc::dup2(fd, HELD_FD) == HELD_FD;
                if held && libc::chdir(dir.as_ptr()) == 0 { 0 } else { 1 }
            },
            true,
        );
        let held = format!("/proc/{child}/fd/{HELD_FD}");
        ready_when(child, "open the file", || std::fs::symlink_metadata(&held).is_ok())
    }

    /// Runs `op` (raw syscalls only: it runs in a forked child of a threaded process) in a
    /// child that first joins this cgroup and `ns`; fails the test if `op` returns non-zero.
    pub fn run_in(&self, ns: &MountNs, op: impl FnOnce() -> i32) {
        assert_eq!(self.exit_code_in(ns, op), 0, "the pod's mount failed");
    }

    /// Runs `op` as [`Self::run_in`] does; its result (or 255 if the child could not join
    /// this cgroup and `ns`).
    pub fn exit_code_in(&self, ns: &MountNs, op: impl FnOnce() -> i32) -> i32 {
        let child = self.fork_in(ns, op, false);
        match super::stuck::wait_child(child, "the pod's process", super::stuck::CALL_LIMIT) {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("the pod's process ended with {other:?}"),
        }
    }

    /// A container of this pod: a process that joins `ns`, makes a namespace of its own
    /// whose mounts receive `ns`'s propagation (as a `HostToContainer` hostPath does), and
    /// pivots, as a runtime does, into a root of its own (`rootfs`, a new tmpfs) holding
    /// that hostPath (`host_path`, recursively bound at the same path); there it stays
    /// until dropped. Until the pivot its namespace shows the node's root, which the agent
    /// leaves alone (a container being created).
    pub fn container(&self, ns: &MountNs, rootfs: &Path, host_path: &Path) -> Container {
        self.container_with(ns, rootfs, host_path, Sharing::None, Stage::Pivoted)
    }

    /// A CSI node plugin's container: as [`Self::container`], its hostPath `Bidirectional`
    /// (a shared peer group of its own, as such a mount has in the container).
    pub fn driver_container(&self, ns: &MountNs, rootfs: &Path, host_path: &Path) -> Container {
        self.container_with(ns, rootfs, host_path, Sharing::HostPath, Stage::Pivoted)
    }

    /// A container of this pod being made by runc with its hostPath (`host_path`, with
    /// mounts below it: kubelet's `pods/` and the publishes in it) already bound, before
    /// the pivot into its root: there the agent judges the bind with the namespace as it
    /// is then. The bind is runc's: recursive, onto `/proc/thread-self/fd/N` (the call names
    /// no path). `Bidirectional` where `bidirectional_from` names a mount point at or above
    /// `host_path`: its mounts are made shared in the container's namespace before the
    /// bind, as runc's `rshared` root makes them, so every copy the bind makes is in a
    /// shared peer group from the moment it exists. Stays until dropped.
    pub fn runtime_bound(
        &self,
        ns: &MountNs,
        rootfs: &Path,
        host_path: &Path,
        bidirectional_from: Option<&Path>,
    ) -> Container {
        let sharing = bidirectional_from.map_or(Sharing::None, |above| Sharing::Below(cstr(above)));
        self.container_with(ns, rootfs, host_path, sharing, Stage::BoundBeforePivot)
    }

    fn container_with(
        &self,
        ns: &MountNs,
        rootfs: &Path,
        host_path: &Path,
        sharing: Sharing,
        stage: Stage,
    ) -> Container {
        std::fs::create_dir_all(rootfs).unwrap();
        let steps = RuntimeSteps::new(rootfs, host_path, sharing, stage);
        // SAFETY: the steps are raw syscalls on strings made before the fork.
        let child = self.fork_in(ns, move || unsafe { steps.run() }, true);
        if stage == Stage::BoundBeforePivot {
            // Ready once the hostPath is bound in its namespace.
            let own = format!("/proc/{child}/mountinfo");
            let bound = format!(" {} ", rootfs.join(host_path.strip_prefix("/").unwrap()).display());
            return ready_when(child, "bind its hostPath", || {
                std::fs::read_to_string(&own).is_ok_and(|table| table.contains(&bound))
            });
        }
        // Ready once its root is no longer the node's.
        let identity = |m: std::fs::Metadata| (m.dev(), m.ino());
        let node_root =
            identity(std::fs::metadata(format!("/proc/{}/task/{}/root/", std::process::id(), ns.tid)).unwrap());
        let own = format!("/proc/{child}/root/");
        ready_when(child, "pivot into its root", || std::fs::metadata(&own).is_ok_and(|m| identity(m) != node_root))
    }

    /// A container of this pod being created: its runtime has made its namespace (a copy
    /// of `ns`, receiving `ns`'s propagation) and has not pivoted into its root yet.
    pub fn being_created(&self, ns: &MountNs) -> Container {
        let child = self.fork_in(
            ns,
            || {
                // SAFETY: raw syscalls with valid NUL-terminated strings.
                unsafe {
                    let null = std::ptr::null();
                    let own = libc::unshare(libc::CLONE_NEWNS);
                    own | libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null.cast())
                }
            },
            true,
        );
        // Ready once its namespace is no longer the one it joined.
        let joined = std::fs::metadata(format!("/proc/{}/task/{}/ns/mnt", std::process::id(), ns.tid)).unwrap().ino();
        let own = format!("/proc/{child}/ns/mnt");
        ready_when(child, "make its namespace", || std::fs::metadata(&own).is_ok_and(|m| m.ino() != joined))
    }

    /// A process of this pod that ran `op` (raw syscalls only) and stays, paused, until
    /// dropped: a caller whose pod can still be read from its cgroup when the agent judges
    /// what it did. Fails the test, with the errno, if `op` failed.
    pub fn staying_after(&self, ns: &MountNs, what: &str, op: impl FnOnce() -> i32) -> Container {
        let child = self.fork_in(ns, op, true);
        let syscall = format!("/proc/{child}/syscall");
        let paused = format!("{} ", libc::SYS_pause);
        for _ in 0..500 {
            if let Ok(nix::sys::wait::WaitStatus::Exited(_, code)) =
                nix::sys::wait::waitpid(child, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
            {
                panic!("{what} failed: {}", std::io::Error::from_raw_os_error(code));
            }
            if std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with(&paused)) {
                return Container { pid: child };
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("{what}: the pod's process neither finished nor failed");
    }

    /// Forks a child that joins this cgroup and `ns` and runs `op`; then exits with its
    /// outcome, or (`stay`) pauses until killed.
    pub fn fork_in(&self, ns: &MountNs, op: impl FnOnce() -> i32, stay: bool) -> nix::unistd::Pid {
        let procs = cstr(&self.procs());
        let namespace = std::fs::File::open(format!("/proc/{}/task/{}/ns/mnt", std::process::id(), ns.tid)).unwrap();
        // SAFETY: the child makes only async-signal-safe calls (open, write, setns, the
        // mount syscalls, pause, _exit) on data prepared before the fork.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => unsafe {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                let joined = fd >= 0 && libc::write(fd, c"0".as_ptr().cast(), 1) == 1;
                let entered = libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNS) == 0;
                let code = if joined && entered { op() } else { 255 };
                if stay && code == 0 {
                    loop {
                        libc::pause();
                    }
                }
                libc::_exit(code)
            },
            nix::unistd::ForkResult::Parent { child } => child,
        }
    }
}

/// What a container's runtime does in the container's first process, as runc does it:
/// its own mount namespace (a slave of the node's), a root of its own (a new tmpfs), the
/// hostPath bound recursively at its place in that root, then the pivot (as far as
/// `stage` goes). Every string is made before the fork.
struct RuntimeSteps {
    root: CString,
    /// Every directory from the new root down to the hostPath's place in it, and the old
    /// root's: made after the fork with mkdir alone.
    dirs: Vec<CString>,
    old_root: CString,
    source: CString,
    at: CString,
    through_fd: CString,
    sharing: Sharing,
    stage: Stage,
}

impl RuntimeSteps {
    fn new(rootfs: &Path, host_path: &Path, sharing: Sharing, stage: Stage) -> Self {
        let in_root = |path: &Path| cstr(&rootfs.join(path.strip_prefix("/").unwrap()));
        let mut dirs: Vec<CString> = host_path.ancestors().filter(|a| *a != Path::new("/")).map(in_root).collect();
        dirs.reverse();
        let old_root = cstr(&rootfs.join("old-root"));
        dirs.push(old_root.clone());
        Self {
            root: cstr(rootfs),
            dirs,
            old_root,
            source: cstr(host_path),
            at: in_root(host_path),
            through_fd: bind_fd_path(),
            sharing,
            stage,
        }
    }

    /// 0, or the number of the step that failed.
    ///
    /// # Safety
    /// Raw syscalls only: it runs in a forked child of a threaded process.
    unsafe fn run(&self) -> i32 {
        // SAFETY: raw syscalls with valid NUL-terminated strings.
        unsafe {
            let null = std::ptr::null();
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_SLAVE, null.cast()) != 0
                || libc::mount(c"vg-rootfs".as_ptr(), self.root.as_ptr(), c"tmpfs".as_ptr(), 0, null.cast()) != 0
            {
                return 1;
            }
            for dir in &self.dirs {
                libc::mkdir(dir.as_ptr(), 0o755);
            }
            if let Sharing::Below(above) = &self.sharing
                && libc::mount(null, above.as_ptr(), null, libc::MS_REC | libc::MS_SHARED, null.cast()) != 0
            {
                return 5;
            }
            let bind_at = match self.stage {
                Stage::Pivoted => self.at.as_ptr(),
                Stage::BoundBeforePivot => {
                    if !hold_as_bind_fd(self.at.as_ptr()) {
                        return 6;
                    }
                    self.through_fd.as_ptr()
                }
            };
            if libc::mount(self.source.as_ptr(), bind_at, null, libc::MS_BIND | libc::MS_REC, null.cast()) != 0 {
                return 2;
            }
            if matches!(self.sharing, Sharing::HostPath)
                && libc::mount(null, self.at.as_ptr(), null, libc::MS_SHARED, null.cast()) != 0
            {
                return 4;
            }
            if self.stage == Stage::BoundBeforePivot {
                return 0;
            }
            // pivot_root, or where the root is an initramfs (the VM's), which pivot_root
            // refuses, what runc's no-pivot mode does: move the new root onto / and chroot
            // into it.
            let (root, null_data) = (self.root.as_ptr(), null.cast());
            let pivoted = (libc::syscall(libc::SYS_pivot_root, root, self.old_root.as_ptr()) == 0
                && libc::chdir(c"/".as_ptr()) == 0
                && libc::umount2(c"/old-root".as_ptr(), libc::MNT_DETACH) == 0)
                || (libc::chdir(root) == 0
                    && libc::mount(root, c"/".as_ptr(), null, libc::MS_MOVE, null_data) == 0
                    && libc::chroot(c".".as_ptr()) == 0
                    && libc::chdir(c"/".as_ptr()) == 0);
            if pivoted { 0 } else { 3 }
        }
    }
}

/// Which of a container's mounts are in a shared peer group (a `Bidirectional` hostPath's).
enum Sharing {
    /// None: its mounts receive the node's propagation only (`HostToContainer`).
    None,
    /// The hostPath's mount, once bound.
    HostPath,
    /// Every mount of this mount point and below, before the hostPath is bound (runc's
    /// `rshared` root).
    Below(CString),
}

/// How far a container's runtime has gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Its hostPath bound at its path, and pivoted into its root.
    Pivoted,
    /// Its hostPath bound through an fd; not pivoted yet.
    BoundBeforePivot,
}

/// The container `child` once `ready` holds (polled for up to 5 s).
fn ready_when(child: nix::unistd::Pid, what: &str, ready: impl Fn() -> bool) -> Container {
    for _ in 0..500 {
        if ready() {
            return Container { pid: child };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the pod's container did not {what}");
}

/// A pod's long-lived process in a mount namespace of its own; killed when dropped.
pub struct Container {
    pid: nix::unistd::Pid,
}

impl Container {
    /// The pod's process `pid`, kept (a child of this test, forked to stay).
    pub fn of(pid: nix::unistd::Pid) -> Self {
        Self { pid }
    }

    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// `path` as this container sees it.
    pub fn path(&self, path: &Path) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid)).join(path.strip_prefix("/").unwrap())
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// `/proc/thread-self/fd/N` for [`FD_FOR_BIND`]: where runc's binds land.
fn bind_fd_path() -> CString {
    CString::new(format!("/proc/thread-self/fd/{FD_FOR_BIND}")).unwrap()
}

/// Opens `target` `O_PATH` as [`FD_FOR_BIND`], for a bind onto [`bind_fd_path`]; false if
/// either step failed.
///
/// # Safety
/// `target` is a NUL-terminated string.
unsafe fn hold_as_bind_fd(target: *const libc::c_char) -> bool {
    // SAFETY: the caller's string.
    unsafe {
        let fd = libc::open(target, libc::O_PATH | libc::O_CLOEXEC);
        fd >= 0 && libc::dup2(fd, FD_FOR_BIND) >= 0
    }
}

/// Opens `path` and reads a byte: 0, or the errno.
///
/// # Safety
/// `path` is a NUL-terminated string.
unsafe fn read_a_byte(path: *const libc::c_char) -> i32 {
    // SAFETY: the caller's string; a buffer of our own.
    unsafe {
        let fd = libc::open(path, libc::O_RDONLY);
        let mut byte = 0u8;
        if fd < 0 || libc::read(fd, (&raw mut byte).cast(), 1) < 0 {
            return *libc::__errno_location();
        }
        0
    }
}

/// The fd number [`PodCgroup::holding_open`] holds its file as.
pub const HELD_FD: i32 = 901;
/// What [`PodCgroup::try_read_in_namespace_of`] exits with when it could not enter.
pub const SETNS_FAILED: i32 = 254;
const OPEN_TREE_CLONE: libc::c_long = 1;
/// The fd number `bind_via_fd` binds through (its path is made before the fork).
const FD_FOR_BIND: i32 = 900;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_long = 4;
