//! The names of the eBPF programs, which are the names of their functions in agent-ebpf
//! (`probes/*.rs`). The loader attaches by these names; a unit test of the agent parses
//! the built object and checks that each one is in it.

/// Entry tracepoint program of syscall `name` is `sys_enter_<name>` (one per syscall).
pub const SYSCALL_ENTER_PREFIX: &str = "sys_enter_";
/// The one exit program, attached to every traced syscall's exit tracepoint.
pub const SYSCALL_EXIT: &str = "sys_exit";
/// fentry program of syscall `name` is `fentry_<name>`, attached to the kernel's syscall
/// function ([`SYSCALL_FUNCTION_PREFIX`]`<name>`); its fexit program is `fexit_<name>`.
pub const FENTRY_PREFIX: &str = "fentry_";
pub const FEXIT_PREFIX: &str = "fexit_";
/// x86-64 syscall functions are `__x64_sys_<name>` (arch/x86/include/asm/syscall_wrapper.h);
/// each takes the caller's `const struct pt_regs *`.
pub const SYSCALL_FUNCTION_PREFIX: &str = "__x64_sys_";

/// Byte offsets in x86-64 `struct pt_regs` of the registers that carry syscall arguments
/// 0..6: di, si, dx, r10, r8, r9 (arch/x86/include/asm/ptrace.h; the layout is the
/// ptrace ABI's, and a unit test of the agent checks it against the running kernel's BTF).
pub const PT_REGS_ARG_OFFSETS: [usize; 6] = [112, 104, 96, 56, 72, 64];
/// The register names, in the same order, as BTF names the members.
pub const PT_REGS_ARG_NAMES: [&str; 6] = ["di", "si", "dx", "r10", "r8", "r9"];
/// Each program on a security hook below is built twice from one body: as a BPF LSM
/// program (the name given) and as an fmod_ret program on the kernel's `security_<hook>`
/// function, named with this suffix (`agent-ebpf/src/probes/security_hook.rs`).
pub const FMOD_RET_SUFFIX: &str = "_fmod_ret";
/// The kernel function an fmod_ret twin attaches to: `security_<hook>`.
pub const SECURITY_FUNCTION_PREFIX: &str = "security_";
/// LSM `sb_mount`: refuses a second pod's mount of a single-pod volume.
pub const SB_MOUNT_ENFORCE: &str = "sb_mount_enforce";
/// LSM `move_mount`: the same for the new mount API.
pub const MOVE_MOUNT_ENFORCE: &str = "move_mount_enforce";
/// LSM `sb_umount`: notes the owner's unmount so its claim is released at exit.
pub const SB_UMOUNT_RELEASE: &str = "sb_umount_release";
/// LSM `file_open`: refuses another pod's open of an owned volume's file.
pub const FILE_OPEN_GUARD: &str = "file_open_guard";
/// LSM `path_<op>` hooks of `crate::open_guard::OPERATION_HOOKS`: the program on hook `h`
/// is `<h>` with this suffix (`path_unlink_guard`).
pub const OPERATION_GUARD_SUFFIX: &str = "_guard";
/// LSM `file_open` with a program that decides nothing: never attached by the agent; the
/// benchmark's floor of any guard on that hook (row 9f).
pub const FILE_OPEN_FLOOR: &str = "file_open_floor";
/// fexit of `d_move` and `d_exchange`: a directory that moved stales the open guard's
/// answers per directory.
pub const D_MOVE_FORGET_VERDICTS: &str = "d_move_forget_verdicts";
pub const D_EXCHANGE_FORGET_VERDICTS: &str = "d_exchange_forget_verdicts";
/// LSM `sb_mount`: the start-up self-test that proves BPF LSM runs.
pub const SB_MOUNT_PROBE: &str = "sb_mount_probe";
