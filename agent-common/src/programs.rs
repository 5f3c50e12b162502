//! The names of the eBPF programs, which are the names of their functions in agent-ebpf
//! (`probes/*.rs`). The loader attaches by these names; a unit test of the agent parses
//! the built object and checks that each one is in it.

/// Entry tracepoint program of syscall `name` is `sys_enter_<name>` (one per syscall).
pub const SYSCALL_ENTER_PREFIX: &str = "sys_enter_";
/// The one exit program, attached to every traced syscall's exit tracepoint.
pub const SYSCALL_EXIT: &str = "sys_exit";
/// LSM `sb_mount`: refuses a second pod's mount of a single-pod volume.
pub const SB_MOUNT_ENFORCE: &str = "sb_mount_enforce";
/// LSM `move_mount`: the same for the new mount API.
pub const MOVE_MOUNT_ENFORCE: &str = "move_mount_enforce";
/// LSM `sb_umount`: notes the owner's unmount so its claim is released at exit.
pub const SB_UMOUNT_RELEASE: &str = "sb_umount_release";
/// LSM `sb_mount`: the start-up self-test that proves BPF LSM runs.
pub const SB_MOUNT_PROBE: &str = "sb_mount_probe";
