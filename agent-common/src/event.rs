//! Event records written by the kernel into the `EVENTS` ring buffer.
//!
//! Every mount-family syscall produces one [`SyscallEvent`]: a common [`EventHeader`], the
//! syscall's integer arguments, and up to three of its string arguments. Which arguments
//! are strings, and where each string goes, is the syscall's [`SyscallSpec`], defined
//! here once for the kernel (what to copy) and userspace (what it means).
//!
//! Never captured: `mount(2)`'s `data` and `fsconfig(2)`'s `value`, which can carry
//! credentials (CIFS passwords, Ceph keys).

/// Bytes of the task command name (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;
/// Bytes kept of each path argument, including the terminating NUL.
pub const PATH_LEN: usize = 256;
/// Bytes kept of a short name argument (filesystem type, fsconfig key), with its NUL.
pub const NAME_LEN: usize = 32;
/// Integer arguments kept per syscall (the syscall ABI's maximum).
pub const MAX_ARGS: usize = 6;

/// Raw values of [`EventHeader::kind`]: one per traced syscall. Numbers are never reused.
pub mod kind {
    pub const MOUNT: u32 = 100;
    pub const UMOUNT: u32 = 101;
    pub const OPEN_TREE: u32 = 102;
    pub const OPEN_TREE_ATTR: u32 = 103;
    pub const MOVE_MOUNT: u32 = 104;
    pub const FSOPEN: u32 = 105;
    pub const FSCONFIG: u32 = 106;
    pub const FSMOUNT: u32 = 107;
    pub const FSPICK: u32 = 108;
    pub const MOUNT_SETATTR: u32 = 109;
}

/// Bits of [`EventHeader::truncated`]: which string fields were cut at their bound.
pub mod truncated {
    pub const PATH0: u32 = 1 << 0;
    pub const PATH1: u32 = 1 << 1;
    pub const NAME: u32 = 1 << 2;
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
    /// Inode of the caller's mount namespace (0 when unknown).
    pub mnt_ns: u32,
    pub _pad: u32,
    /// cgroup v2 id of the calling task (the inode number of its cgroup directory).
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns()` at syscall entry.
    pub start_ns: u64,
    /// Syscall exit minus entry, in nanoseconds.
    pub duration_ns: u64,
    /// The syscall's return value: a negative errno on failure; a new fd for the fd-making calls.
    pub ret: i64,
    /// Command name of the calling task, NUL padded.
    pub comm: [u8; COMM_LEN],
}

/// One mount-family syscall, entry and exit paired in the kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SyscallEvent {
    pub header: EventHeader,
    /// The integer arguments as passed (string arguments' slots hold the user pointer,
    /// which means nothing to userspace; unused slots are 0).
    pub args: [u64; MAX_ARGS],
    /// NUL-terminated string of the spec's `path0` argument ("" when none or NULL).
    pub path0: [u8; PATH_LEN],
    /// NUL-terminated string of the spec's `path1` argument.
    pub path1: [u8; PATH_LEN],
    /// NUL-terminated string of the spec's `name` argument.
    pub name: [u8; NAME_LEN],
}

const _: () = assert!(core::mem::size_of::<EventHeader>() == 72);
const _: () = assert!(core::mem::size_of::<SyscallEvent>() == 72 + 8 * MAX_ARGS + 2 * PATH_LEN + NAME_LEN);

/// A traced syscall between its entry and its exit (the thread's `PENDING` value):
/// only what the entry alone knows. The rest, strings included, is read at exit straight
/// into the ring buffer's record, so a call costs no copy of a whole record.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PendingCall {
    /// One of the [`kind`] values.
    pub kind: u32,
    /// Argument indices of the strings for `path0`, `path1` and `name` ([`NO_STRING`]:
    /// none), from the call's [`SyscallSpec`]; the fourth is padding.
    pub strings: [u8; 4],
    /// `bpf_ktime_get_ns()` at entry.
    pub start_ns: u64,
    /// The arguments as passed (0 past the call's own).
    pub args: [u64; MAX_ARGS],
}

/// [`PendingCall::strings`] entry for "no such string".
pub const NO_STRING: u8 = u8::MAX;

const _: () = assert!(core::mem::size_of::<PendingCall>() == 16 + 8 * MAX_ARGS);

impl SyscallSpec {
    /// The argument indices of its strings, as [`PendingCall::strings`] keeps them.
    pub const fn string_args(&self) -> [u8; 4] {
        const fn index(arg: Option<usize>) -> u8 {
            match arg {
                Some(i) => i as u8,
                None => NO_STRING,
            }
        }
        [index(self.path0), index(self.path1), index(self.name_arg), NO_STRING]
    }
}

/// How to capture one syscall: its tracepoints, how many arguments it has, and which of
/// them are strings to copy into `path0`, `path1` and `name`.
#[derive(Clone, Copy, Debug)]
pub struct SyscallSpec {
    pub kind: u32,
    /// Name in `syscalls/sys_enter_<name>` and `sys_exit_<name>`.
    pub name: &'static str,
    pub nargs: usize,
    pub path0: Option<usize>,
    pub path1: Option<usize>,
    pub name_arg: Option<usize>,
}

const fn spec(
    kind: u32,
    name: &'static str,
    nargs: usize,
    path0: Option<usize>,
    path1: Option<usize>,
    name_arg: Option<usize>,
) -> SyscallSpec {
    SyscallSpec { kind, name, nargs, path0, path1, name_arg }
}

/// mount(source, target, fstype, flags, data): `data` is not captured.
pub const MOUNT: SyscallSpec = spec(kind::MOUNT, "mount", 5, Some(0), Some(1), Some(2));
/// umount2(target, flags) (the tracepoint is named after the kernel's `umount`).
pub const UMOUNT: SyscallSpec = spec(kind::UMOUNT, "umount", 2, Some(0), None, None);
/// open_tree(dfd, path, flags).
pub const OPEN_TREE: SyscallSpec = spec(kind::OPEN_TREE, "open_tree", 3, Some(1), None, None);
/// open_tree_attr(dfd, path, flags, attr, size) (Linux 6.15+).
pub const OPEN_TREE_ATTR: SyscallSpec = spec(kind::OPEN_TREE_ATTR, "open_tree_attr", 5, Some(1), None, None);
/// move_mount(from_dfd, from_path, to_dfd, to_path, flags).
pub const MOVE_MOUNT: SyscallSpec = spec(kind::MOVE_MOUNT, "move_mount", 5, Some(1), Some(3), None);
/// fsopen(fs_name, flags).
pub const FSOPEN: SyscallSpec = spec(kind::FSOPEN, "fsopen", 2, None, None, Some(0));
/// fsconfig(fd, cmd, key, value, aux): `value` is not captured.
pub const FSCONFIG: SyscallSpec = spec(kind::FSCONFIG, "fsconfig", 5, None, None, Some(2));
/// fsmount(fs_fd, flags, attr_flags).
pub const FSMOUNT: SyscallSpec = spec(kind::FSMOUNT, "fsmount", 3, None, None, None);
/// fspick(dfd, path, flags).
pub const FSPICK: SyscallSpec = spec(kind::FSPICK, "fspick", 3, Some(1), None, None);
/// mount_setattr(dfd, path, flags, attr, size).
pub const MOUNT_SETATTR: SyscallSpec = spec(kind::MOUNT_SETATTR, "mount_setattr", 5, Some(1), None, None);

/// Every traced syscall.
pub const SYSCALLS: [SyscallSpec; 10] =
    [MOUNT, UMOUNT, OPEN_TREE, OPEN_TREE_ATTR, MOVE_MOUNT, FSOPEN, FSCONFIG, FSMOUNT, FSPICK, MOUNT_SETATTR];
