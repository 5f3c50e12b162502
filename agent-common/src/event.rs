//! Event records written by the kernel into the `EVENTS` ring buffer.
//!
//! Every record starts with an [`EventHeader`] whose `kind` says which payload follows.
//! Kinds are numbered in ranges per syscall family and a number is never reused.

/// Bytes of the task command name (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
/// Bytes kept of each path argument, including the terminating NUL.
pub const PATH_LEN: usize = 256;
/// Bytes kept of a filesystem type argument, including the terminating NUL.
pub const FSTYPE_LEN: usize = 32;

/// Raw values of [`EventHeader::kind`].
pub mod kind {
    /// `mount(2)`: a [`super::MountEvent`].
    pub const MOUNT: u32 = 100;
}

/// Bits of [`EventHeader::truncated`]: which string fields were cut at their bound.
pub mod truncated {
    pub const SOURCE: u32 = 1 << 0;
    pub const TARGET: u32 = 1 << 1;
    pub const FSTYPE: u32 = 1 << 2;
}

/// Common prefix of every event: who made the syscall, when, how long it took, and its result.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EventHeader {
    /// One of the [`kind`] values.
    pub kind: u32,
    /// Bitset of [`truncated`] flags.
    pub truncated: u32,
    /// Thread id (the kernel's `pid`).
    pub pid: u32,
    /// Process id (the kernel's `tgid`).
    pub tgid: u32,
    /// cgroup v2 id of the calling task (the inode number of its cgroup directory).
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns()` at syscall entry.
    pub start_ns: u64,
    /// Syscall exit minus entry, in nanoseconds.
    pub duration_ns: u64,
    /// The syscall's return value (0 or a negative errno for mount).
    pub ret: i64,
    /// Command name of the calling task, NUL padded.
    pub comm: [u8; COMM_LEN],
}

/// `mount(2)`: `mount(source, target, fstype, flags, data)`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MountEvent {
    pub header: EventHeader,
    /// The `mountflags` argument as passed.
    pub flags: u64,
    /// NUL-terminated `source` (empty when the pointer was NULL).
    pub source: [u8; PATH_LEN],
    /// NUL-terminated `target` as the caller passed it (not resolved).
    pub target: [u8; PATH_LEN],
    /// NUL-terminated `filesystemtype` (empty when NULL).
    pub fstype: [u8; FSTYPE_LEN],
}

const _: () = assert!(core::mem::size_of::<EventHeader>() == 64);
const _: () = assert!(core::mem::size_of::<MountEvent>() == 64 + 8 + 2 * PATH_LEN + FSTYPE_LEN);
