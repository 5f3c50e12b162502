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
//! The walk's answer is kept per directory (`DIRECTORY_VERDICTS`) until a root is added or
//! a directory moves on a guarded filesystem (each changes an [`Epoch`]), so most opens
//! on such a filesystem cost a few reads and lookups, not a walk to its root.
//!
//! The same decision guards the changes of a volume's names and attributes, on the path
//! and xattr hooks ([`OPERATION_HOOKS`]): the entry they change, or for a new entry its
//! directory; and an open file of a volume passed to another pod (`file_receive`).
//!
//! match-proto: int security_file_open(struct file *file)
//! match-proto: int security_path_unlink(const struct path *dir, struct dentry *dentry)
//! match-proto: int security_path_rmdir(const struct path *dir, struct dentry *dentry)
//! match-proto: int security_path_rename(const struct path *old_dir, struct dentry *old_dentry,
//!                                       const struct path *new_dir, struct dentry *new_dentry,
//!                                       unsigned int flags)
//! match-proto: int security_path_link(struct dentry *old_dentry, const struct path *new_dir,
//!                                     struct dentry *new_dentry)
//! match-proto: int security_path_mkdir(const struct path *dir, struct dentry *dentry, umode_t mode)
//! match-proto: int security_path_mknod(const struct path *dir, struct dentry *dentry, umode_t mode,
//!                                      unsigned int dev)
//! match-proto: int security_path_symlink(const struct path *dir, struct dentry *dentry,
//!                                        const char *old_name)
//! match-proto: int security_path_truncate(const struct path *path)
//! match-proto: int security_path_chmod(const struct path *path, umode_t mode)
//! match-proto: int security_path_chown(const struct path *path, kuid_t uid, kgid_t gid)
//! match-proto: int security_file_receive(struct file *file)
//! match-proto: int security_inode_setattr(struct mnt_idmap *idmap, struct dentry *dentry,
//!                                         struct iattr *attr)
//! match-proto: int security_inode_setxattr(struct mnt_idmap *idmap, struct dentry *dentry,
//!                                          const char *name, const void *value, size_t size,
//!                                          int flags)
//! match-proto: int security_inode_removexattr(struct mnt_idmap *idmap, struct dentry *dentry,
//!                                             const char *name)

use crate::enforce::conflict_hook;

/// The hooks beyond `file_open` that guard an owned volume's names, attributes and open
/// files: (the LSM hook, its `conflict_hook` value, what the caller tried, as a conflict's
/// line says it). Each program is `<hook>_guard` (and its fmod_ret twin,
/// `volguard_common::programs`).
pub const OPERATION_HOOKS: [(&str, u32, &str); 14] = [
    ("path_unlink", conflict_hook::PATH_UNLINK, "unlink a file of"),
    ("path_rmdir", conflict_hook::PATH_RMDIR, "remove a directory of"),
    ("path_rename", conflict_hook::PATH_RENAME, "rename into or out of"),
    ("path_link", conflict_hook::PATH_LINK, "hard-link into or out of"),
    ("path_mkdir", conflict_hook::PATH_MKDIR, "make a directory in"),
    ("path_mknod", conflict_hook::PATH_MKNOD, "create a file in"),
    ("path_symlink", conflict_hook::PATH_SYMLINK, "make a symlink in"),
    ("path_truncate", conflict_hook::PATH_TRUNCATE, "truncate a file of"),
    ("path_chmod", conflict_hook::PATH_CHMOD, "chmod a file of"),
    ("path_chown", conflict_hook::PATH_CHOWN, "chown a file of"),
    ("inode_setxattr", conflict_hook::INODE_SETXATTR, "set an extended attribute in"),
    ("inode_removexattr", conflict_hook::INODE_REMOVEXATTR, "remove an extended attribute in"),
    ("file_receive", conflict_hook::FILE_RECEIVE, "take an open file (pidfd_getfd, SCM_RIGHTS) of"),
    ("inode_setattr", conflict_hook::INODE_SETATTR, "change the times or attributes of"),
];

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

/// Offsets the open guard reads, found in the running kernel's BTF and set by the agent at
/// load as the programs' read-only global (`OPEN_GUARD_LAYOUT` in `.rodata`, frozen). The
/// verifier knows a frozen read-only value as a constant, so each of the guard's reads is
/// one plain load through the hook's BTF-typed pointer (checked against the field it
/// names, faulting cleanly) instead of a `bpf_probe_read_kernel` call: the guard runs on
/// every open on the node. All 0 (a load without them): the guard decides nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenGuardLayout {
    /// `struct file`: `f_path.dentry`, the opened file's dentry (`f_path` plus `path.dentry`).
    pub file_dentry: u32,
    /// `struct path`: `dentry` (the path hooks' arguments).
    pub path_dentry: u32,
    /// `struct dentry`: `d_sb`, `d_inode` and `d_parent`.
    pub dentry_d_sb: u32,
    pub dentry_d_inode: u32,
    pub dentry_d_parent: u32,
    /// `struct super_block`: `s_dev`, the filesystem's kernel device.
    pub super_block_s_dev: u32,
    /// `struct inode`: `i_ino`, `i_generation` (tells a reused inode number's new directory
    /// from the old one) and `i_mode` (a `umode_t`: is a moved dentry a directory?).
    pub inode_i_ino: u32,
    pub inode_i_generation: u32,
    pub inode_i_mode: u32,
    /// `struct inode`: `i_rdev`, a device node's device (an open of a block volume's node
    /// reads its filesystem).
    pub inode_i_rdev: u32,
    /// Which argument of the `inode_setattr` hook is the dentry, for the BPF LSM program
    /// (`bpf_lsm_inode_setattr`) and for the fmod_ret one (`security_inode_setattr`): 0, or
    /// 1 after the mount's user namespace or idmap. Kernels differ, and in some the hook
    /// and the function differ.
    pub lsm_setattr_dentry_parameter: u32,
    pub fmod_ret_setattr_dentry_parameter: u32,
}

/// The name of the programs' global that holds the [`OpenGuardLayout`] (the static's own
/// name in the object: a load that sets it fails where the object has none).
pub const OPEN_GUARD_LAYOUT_GLOBAL: &str = "OPEN_GUARD_LAYOUT";

impl OpenGuardLayout {
    /// The value the object is built with: unset.
    pub const UNSET: Self = Self {
        file_dentry: 0,
        path_dentry: 0,
        dentry_d_sb: 0,
        dentry_d_inode: 0,
        dentry_d_parent: 0,
        super_block_s_dev: 0,
        inode_i_ino: 0,
        inode_i_generation: 0,
        inode_i_mode: 0,
        inode_i_rdev: 0,
        lsm_setattr_dentry_parameter: 0,
        fmod_ret_setattr_dentry_parameter: 0,
    };
}

/// Key of `DIRECTORY_VERDICTS`: a directory by inode number, that inode's `i_generation`
/// and its filesystem's kernel device.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectoryKey {
    pub ino: u64,
    pub dev: u32,
    pub i_generation: u32,
}

/// Value of `DIRECTORY_VERDICTS`: the published root at or above a directory (`root.ino`
/// 0: none), as a walk found it under `epoch`. A verdict of another epoch is not used.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DirectoryVerdict {
    pub epoch: Epoch,
    pub root: crate::enforce::RootKey,
}

/// What dates a cached verdict: the values of the `VERDICT_EPOCH` slots (see
/// [`VerdictEpoch`]) when it was found.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch {
    pub kernel: u64,
    pub agent: u64,
}

/// The slots of `VERDICT_EPOCH`; a cached verdict holds while both are unchanged. Each
/// slot has one kind of writer, so neither needs an atomic add (the eBPF target has none):
/// the programs write the monotonic clock's nanoseconds (a later change writes a later
/// time, so a value never comes back), the agent its own counter.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictEpoch {
    /// Written by the programs: a root recorded at a publish's exit, a directory moved.
    Kernel = 0,
    /// Bumped by the agent: a root seeded for a publish the programs did not see.
    Agent = 1,
}

/// Directories whose verdict the open guard keeps (least recently used ones go first).
pub const DIRECTORY_VERDICT_ENTRIES: u32 = 16_384;
/// `S_IFMT`, `S_IFDIR`, `S_IFREG` and `S_IFBLK` of `i_mode` (include/uapi/linux/stat.h).
pub const S_IFMT: u16 = 0o170_000;
pub const S_IFDIR: u16 = 0o040_000;
pub const S_IFREG: u16 = 0o100_000;
pub const S_IFBLK: u16 = 0o060_000;

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
const _: () = assert!(core::mem::size_of::<OpenGuardLayout>() == 48);
const _: () = assert!(core::mem::size_of::<DirectoryKey>() == 16);
const _: () = assert!(core::mem::size_of::<DirectoryVerdict>() == 32);
const _: () = assert!(core::mem::size_of::<CachedCallerPod>() == crate::enforce::POD_UID_LEN + 8);
