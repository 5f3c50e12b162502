//! The open guard: an owned single-pod volume's files are opened by its owner pod alone,
//! whatever path, mount or namespace leads to them (`/proc/<pid>/root`, setns, a hostPath
//! on an ancestor directory, a second mount of its block device).
//!
//! The LSM `file_open` program knows a volume by the root of its published tree, recorded
//! in `PUBLISHED_ROOTS` (by inode and kernel device). An open first looks up its file's
//! device in `GUARDED_DEVICES`, so opens on a filesystem that holds no owned volume cost
//! one lookup. A volume that is a whole filesystem (a block volume) is found at once by
//! that filesystem's root; a volume that is a directory of a shared filesystem
//! (csi-driver-host-path, local-path provisioners) by a walk up from the opened file.
//!
//! match-proto: int security_file_open(struct file *file)

/// Value of `GUARDED_DEVICES`, by kernel device: what of this filesystem is an owned
/// volume's published tree.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceGuard {
    /// Inode of the filesystem's root where a publish showed the whole filesystem (0: none).
    pub whole_fs_root_ino: u64,
    /// Non-zero where a publish showed a directory below the root: opens walk up.
    pub directory_roots: u32,
    pub _pad: u32,
}

/// Offsets the open guard reads, found in the running kernel's BTF. Unpinned: each
/// agent's program reads its own. 0 in `file_f_path`: unknown, the guard decides nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenGuardLayout {
    /// `struct file`: `f_path` (a `struct path`).
    pub file_f_path: u32,
    pub _pad: u32,
}

/// Ancestors of an opened file examined for a volume's root on a filesystem that holds
/// directory volumes (deeper files are not recognised: counted, and allowed).
pub const MAX_OPEN_DEPTH: usize = 32;

/// Value of `CALLER_PODS`, by cgroup ID: the pod a cgroup belongs to, found once by its
/// names (cgroup IDs are not reused while the system runs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CachedCallerPod {
    pub pod: crate::enforce::PodUid,
    /// Non-zero if the cgroup is a pod's.
    pub in_pod: u32,
    pub _pad: u32,
}

/// Key of `OPEN_REPORTS`: a reader pod and the volume it opened, reported at most once per
/// [`OPEN_REPORT_INTERVAL_NS`] (a refused reader retries; every refusal is counted).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenReportKey {
    pub volume: crate::enforce::VolumeKey,
    pub reader: crate::enforce::PodUid,
}

/// What a refused open fails with: EACCES, as for any permission the caller lacks.
pub const OPEN_DENY_ERRNO: i32 = 13;

/// One report per reader and volume in this long.
pub const OPEN_REPORT_INTERVAL_NS: u64 = 1_000_000_000;
/// Cgroups whose pod the guard remembers; reader and volume pairs it rate-limits.
pub const CALLER_POD_ENTRIES: u32 = 8_192;
pub const OPEN_REPORT_ENTRIES: u32 = 4_096;
/// Commands whose node-process opens are counted each by name (a bounded label set); the
/// opens of any further command are counted together, as `other`.
pub const NODE_OPEN_COMMANDS: u32 = 64;
/// The kernel's length of a task's command (`comm`, NUL included when shorter).
pub const COMMAND_LEN: usize = 16;
/// Filesystems that can hold owned volumes at once.
pub const GUARDED_DEVICE_ENTRIES: u32 = 4_096;

const _: () = assert!(core::mem::size_of::<DeviceGuard>() == 16);
const _: () = assert!(core::mem::size_of::<OpenGuardLayout>() == 8);
const _: () = assert!(core::mem::size_of::<CachedCallerPod>() == crate::enforce::POD_UID_LEN + 8);
