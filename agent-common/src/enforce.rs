//! ReadWriteOncePod enforcement: map keys and values, the configuration userspace gives
//! the LSM programs, the conflict record, and the decision on mount flags.
//!
//! Identity comes from the resolved mount target: the kernel walks the target dentry's
//! parents and recognises kubelet's publish paths under the kubelet root, which it
//! identifies by inode and device (never by a string the caller passed):
//! - `<root>/pods/<podUID>/volumes/kubernetes.io~csi/<specName>/mount` (filesystem), and
//! - `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<specName>/<podUID>` (block).

use crate::mount_flags::{MS_BIND, MS_MOVE, MS_PRIVATE, MS_REMOUNT, MS_SHARED, MS_SLAVE, MS_UNBINDABLE};

/// Bytes of a volume (spec) name key, NUL padded. PV names are at most 253 bytes.
pub const VOLUME_NAME_LEN: usize = 256;
/// Bytes of a pod UID, NUL padded (36 for API pods, 32 for static pods' hashes).
pub const POD_UID_LEN: usize = 64;
/// Bytes of a directory name the kernel reads to compare with a fixed layout name.
pub const LAYOUT_NAME_LEN: usize = 32;

/// A single-pod volume's name, the key of `SINGLE_POD_VOLUMES` and `OWNERS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeKey {
    pub name: [u8; VOLUME_NAME_LEN],
}

/// A pod UID as it appears in kubelet's paths. Aligned to 8 so that the programs compare
/// two as eight words (every struct that holds one has it at an offset of 8 already).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodUid {
    pub uid: [u8; POD_UID_LEN],
}

/// A [`PodUid`] as the words the programs compare.
pub const POD_UID_WORDS: usize = POD_UID_LEN / 8;

impl PodUid {
    /// The UID's bytes as words, in memory order.
    #[inline(always)]
    pub fn words(&self) -> &[u64; POD_UID_WORDS] {
        // SAFETY: the same size, and `PodUid` is aligned as `u64` is.
        unsafe { &*self.uid.as_ptr().cast::<[u64; POD_UID_WORDS]>() }
    }
}

/// Key of `PUBLISHED_ROOTS`: the root directory of a published single-pod volume's tree,
/// by inode and kernel device.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RootKey {
    pub ino: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// Value of `PUBLISHED_ROOTS`: the volume whose tree starts there, and its owner.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PublishedRoot {
    pub volume: VolumeKey,
    pub owner: PodUid,
}

/// A publish of an owned volume by its owner, waiting for its syscall's exit to record
/// the new mount's root (value of `PUBLISHES`, by `pid_tgid`). The attach point is kept
/// as the LSM hook saw it: the mount the target lies on and the target dentry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PendingPublish {
    pub root: PublishedRoot,
    /// `struct vfsmount *` the new mount is attached to.
    pub parent_vfsmount: u64,
    /// `struct dentry *` it is attached at.
    pub mountpoint: u64,
}

/// Children of the attach point's mount examined, newest first, for the mount a publish
/// attached (other mounts attached there in the same instant push it back).
pub const MAX_NEWEST_CHILDREN: usize = 16;

/// Ancestors of a bind source examined for a published root (deeper sources are not
/// recognised, and allowed).
pub const MAX_SOURCE_DEPTH: usize = 24;
/// Ancestors of a target examined for `<kubelet-root>/pods/<uid>`.
pub const MAX_TARGET_DEPTH: usize = 12;

/// Why a volume is single-pod (value of `SINGLE_POD_VOLUMES`).
pub mod single_pod_reason {
    /// The PV's access modes contain ReadWriteOncePod.
    pub const READ_WRITE_ONCE_POD: u32 = 1;
    /// The PVC carries volguard's opt-in annotation.
    pub const ANNOTATED: u32 = 2;
}

/// Value of `OWNERS`: which pod holds a single-pod volume.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Owner {
    pub pod: PodUid,
    /// `pid_tgid` and time of the claiming syscall, so only that claim is rolled back.
    pub claim_pid_tgid: u64,
    pub claimed_ns: u64,
}

/// What a thread's pending syscall will do to `OWNERS` when it returns (value of `CLAIMS`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PendingClaim {
    pub volume: VolumeKey,
    pub pod: PodUid,
    /// One of [`claim_kind`].
    pub kind: u32,
    pub _pad: u32,
    pub claimed_ns: u64,
}

/// Values of [`PendingClaim::kind`].
pub mod claim_kind {
    /// A new claim: roll it back if the syscall fails.
    pub const CLAIM: u32 = 1;
    /// The owner unmounts its publish target: release if the syscall succeeds.
    pub const RELEASE: u32 = 2;
}

/// Byte offsets of the kernel struct fields the LSM programs read, found by userspace in
/// the running kernel's BTF (Rust eBPF has no CO-RE relocations).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelLayout {
    /// `struct dentry`: `d_parent`, `d_name` (a `struct qstr`), `d_inode`, `d_sb`.
    pub dentry_d_parent: u32,
    pub dentry_d_name: u32,
    pub dentry_d_inode: u32,
    pub dentry_d_sb: u32,
    /// `struct qstr`: `len` and `name`.
    pub qstr_len: u32,
    pub qstr_name: u32,
    /// `struct inode`: `i_ino`.
    pub inode_i_ino: u32,
    /// `struct super_block`: `s_dev`.
    pub super_block_s_dev: u32,
    /// `struct path`: `dentry`.
    pub path_dentry: u32,
    /// `struct mount`: the embedded `struct vfsmount mnt`, and `mnt_mountpoint`.
    pub mount_mnt: u32,
    pub mount_mnt_mountpoint: u32,
    /// The caller's mount namespace: `task_struct.nsproxy`, `nsproxy.mnt_ns`,
    /// `mnt_namespace.ns` (a `struct ns_common`), `ns_common.inum`. 0 in
    /// `task_nsproxy` means unknown: events then carry no namespace.
    pub task_nsproxy: u32,
    pub nsproxy_mnt_ns: u32,
    pub mnt_namespace_ns: u32,
    pub ns_common_inum: u32,
    pub _pad: u32,
}

/// Offsets for finding the mount a syscall attached (see `PendingPublish`), in their own
/// unpinned map: the pinned `CONFIG` keeps its layout, so a new agent still adopts an
/// earlier agent's pins ([`crate::maps::PIN_LAYOUT_VERSION`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountTreeLayout {
    /// `struct path`: `mnt`.
    pub path_mnt: u32,
    /// `struct vfsmount`: `mnt_root`.
    pub vfsmount_mnt_root: u32,
    /// `struct mount`: `mnt_mounts` (its children, newest last) and `mnt_child` (its
    /// place among its parent's).
    pub mount_mnt_mounts: u32,
    pub mount_mnt_child: u32,
    /// `struct list_head`: `prev`.
    pub list_head_prev: u32,
    pub _pad: u32,
}

/// Offsets for finding the calling process's pod from its cgroup (v2), in their own
/// unpinned map like [`MountTreeLayout`]. 0 in `task_cgroups`: unknown, no caller has a pod.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallerLayout {
    /// `task_struct.cgroups` (a `struct css_set *`), `css_set.dfl_cgrp` (the cgroup v2
    /// one), `cgroup.kn` (its `struct kernfs_node *`).
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    /// `struct kernfs_node`: `name`, and its parent (`__parent` in newer kernels, `parent`
    /// in older ones).
    pub kernfs_node_name: u32,
    pub kernfs_node_parent: u32,
    pub _pad: u32,
}

/// Cgroups examined, from the caller's own up, for the one kubelet made for its pod
/// (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/<container>`
/// is three levels up from a container's).
pub const MAX_CGROUP_DEPTH: usize = 6;
/// Bytes of a cgroup's name the kernel reads; a pod's is at most
/// `kubepods-besteffort-pod<uid>.slice` (64).
pub const CGROUP_NAME_LEN: usize = 96;
/// Length of a pod's UID (`8-4-4-4-12` hexadecimal digits and dashes).
pub const POD_UID_TEXT_LEN: usize = 36;

/// Values of [`EnforceConfig::mode`].
pub mod kernel_mode {
    /// Programs attached but deciding nothing (the map is not filled yet).
    pub const OFF: u32 = 0;
    /// Refuse conflicting publishes with EBUSY.
    pub const ENFORCE: u32 = 1;
    /// Report conflicting publishes, refuse nothing.
    pub const AUDIT: u32 = 2;
}

/// The single `CONFIG` entry the LSM programs read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EnforceConfig {
    pub layout: KernelLayout,
    /// Inode number of the kubelet root directory.
    pub kubelet_root_ino: u64,
    /// Kernel-internal device number (`MKDEV(major, minor)`) of its filesystem.
    pub kubelet_root_dev: u32,
    /// One of [`kernel_mode`].
    pub mode: u32,
}

/// How a mount(2) call with these flags is dispatched (fs/namespace.c `path_mount`, in
/// its order): only binds, moves and new mounts can publish a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountOp {
    Remount,
    Bind,
    ChangePropagation,
    Move,
    NewMount,
}

impl MountOp {
    /// `flags` after the kernel dropped the MS_MGC magic (as the LSM hook sees them).
    pub const fn of(flags: u64) -> Self {
        if flags & MS_REMOUNT != 0 {
            MountOp::Remount
        } else if flags & MS_BIND != 0 {
            MountOp::Bind
        } else if flags & (MS_SHARED | MS_PRIVATE | MS_SLAVE | MS_UNBINDABLE) != 0 {
            MountOp::ChangePropagation
        } else if flags & MS_MOVE != 0 {
            MountOp::Move
        } else {
            MountOp::NewMount
        }
    }

    /// Whether this operation attaches something at the target (and can publish).
    pub const fn attaches(self) -> bool {
        matches!(self, MountOp::Bind | MountOp::Move | MountOp::NewMount)
    }
}

/// Record kind of a [`ConflictEvent`] in the ring buffer (after the syscall kinds).
pub const CONFLICT_EVENT_KIND: u32 = 200;

/// Values of [`ConflictEvent::action`].
pub mod conflict_action {
    /// Refused in the kernel with EBUSY.
    pub const BLOCKED: u32 = 1;
    /// Audit mode: would have been refused; allowed.
    pub const AUDITED: u32 = 2;
}

/// Values of [`ConflictEvent::hook`].
pub mod conflict_hook {
    /// A publish through mount(2) onto another pod's publish target.
    pub const SB_MOUNT: u32 = 1;
    /// A publish through move_mount(2) onto another pod's publish target.
    pub const MOVE_MOUNT: u32 = 2;
    /// A move_mount(2) of a tree inside an owned volume to a place under another pod.
    pub const MOVE_MOUNT_SOURCE: u32 = 3;
    /// An open of a file in an owned volume by another pod (see `crate::open_guard`).
    pub const FILE_OPEN: u32 = 4;
    /// A change of an owned volume's names or attributes by another pod: the security
    /// hook of each (see `crate::open_guard::OPERATION_HOOKS`).
    pub const PATH_UNLINK: u32 = 5;
    pub const PATH_RMDIR: u32 = 6;
    pub const PATH_RENAME: u32 = 7;
    pub const PATH_LINK: u32 = 8;
    pub const PATH_MKDIR: u32 = 9;
    pub const PATH_MKNOD: u32 = 10;
    pub const PATH_SYMLINK: u32 = 11;
    pub const PATH_TRUNCATE: u32 = 12;
    pub const PATH_CHMOD: u32 = 13;
    pub const PATH_CHOWN: u32 = 14;
    /// An open file of an owned volume received by another pod: `pidfd_getfd(2)`, or
    /// `SCM_RIGHTS` over a unix socket (the owner's descriptors, borrowed).
    pub const FILE_RECEIVE: u32 = 15;
    /// An extended attribute of an owned volume's entry set or removed by another pod.
    pub const INODE_SETXATTR: u32 = 16;
    pub const INODE_REMOVEXATTR: u32 = 17;
    /// An attribute change the path hooks do not see (`utimensat`, `ftruncate`): every
    /// `notify_change`.
    pub const INODE_SETATTR: u32 = 18;
}

/// A publish of an owned single-pod volume into another pod, seen by an LSM hook.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ConflictEvent {
    /// [`CONFLICT_EVENT_KIND`].
    pub kind: u32,
    /// One of [`conflict_action`].
    pub action: u32,
    /// One of [`conflict_hook`].
    pub hook: u32,
    pub pid: u32,
    pub tgid: u32,
    pub _pad: u32,
    pub cgroup_id: u64,
    pub time_ns: u64,
    pub comm: [u8; crate::event::COMM_LEN],
    pub volume: VolumeKey,
    pub owner: PodUid,
    pub attempted_by: PodUid,
}

const _: () = assert!(core::mem::size_of::<RootKey>() == 16);
const _: () = assert!(POD_UID_LEN.is_multiple_of(8) && core::mem::align_of::<PodUid>() == core::mem::align_of::<u64>());
const _: () = assert!(core::mem::size_of::<PublishedRoot>() == VOLUME_NAME_LEN + POD_UID_LEN);
const _: () = assert!(core::mem::size_of::<KernelLayout>() == 64);
const _: () = assert!(core::mem::size_of::<CallerLayout>() == 24);
const _: () = assert!(core::mem::size_of::<EnforceConfig>() == 80);
const _: () = assert!(core::mem::size_of::<PendingClaim>() == VOLUME_NAME_LEN + POD_UID_LEN + 16);
const _: () = assert!(core::mem::size_of::<Owner>() == POD_UID_LEN + 16);
const _: () = assert!(core::mem::size_of::<ConflictEvent>() == 40 + 16 + VOLUME_NAME_LEN + 2 * POD_UID_LEN);
