//! Mount-family syscalls, traced with trampolines: an fentry and an fexit program on each
//! syscall's kernel function (`__x64_sys_<name>`, chosen by the loader). Unlike a syscall
//! tracepoint, which puts every syscall of every thread on the slow entry path, a
//! trampoline costs only the calls of the function it is attached to.
//!
//! The records are the tracepoint backend's ([`super::syscalls::enter`] and `exit`): the
//! same `SyscallEvent`s, and the same claim settlement at exit.
//!
//! match-proto: long __x64_sys_mount(const struct pt_regs *regs)
//! (every `__x64_sys_*` takes the caller's registers; the arguments are in di, si, dx,
//! r10, r8, r9.)

use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_kernel,
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use volguard_common::{event, programs::PT_REGS_ARG_OFFSETS};

use super::syscalls::{enter, exit};
use crate::helpers::ctx_arg_address;

/// Argument `i` of the syscall whose saved registers are at `regs`.
#[inline(always)]
fn reg_arg(regs: *const u8, i: usize) -> u64 {
    if i >= PT_REGS_ARG_OFFSETS.len() {
        return 0;
    }
    // SAFETY: the helper faults cleanly on a bad address.
    unsafe { bpf_probe_read_kernel(regs.wrapping_add(PT_REGS_ARG_OFFSETS[i]) as *const u64) }.unwrap_or(0)
}

/// Defines the fentry and fexit program of each spec; names must be `fentry_<spec.name>`
/// and `fexit_<spec.name>`.
macro_rules! trampoline_programs {
    ($($entry:ident, $exit:ident => $spec:path;)*) => {$(
        #[fentry]
        pub fn $entry(ctx: FEntryContext) -> u32 {
            let regs = ctx_arg_address(ctx.as_ptr(), 0);
            enter(&$spec, |i| reg_arg(regs, i));
            0
        }

        #[fexit]
        pub fn $exit(ctx: FExitContext) -> u32 {
            // The function's one argument, then its return value.
            exit(ctx_arg_address(ctx.as_ptr(), 1) as i64);
            0
        }
    )*};
}

trampoline_programs! {
    fentry_mount, fexit_mount => event::MOUNT;
    fentry_umount, fexit_umount => event::UMOUNT;
    fentry_open_tree, fexit_open_tree => event::OPEN_TREE;
    fentry_open_tree_attr, fexit_open_tree_attr => event::OPEN_TREE_ATTR;
    fentry_move_mount, fexit_move_mount => event::MOVE_MOUNT;
    fentry_fsopen, fexit_fsopen => event::FSOPEN;
    fentry_fsconfig, fexit_fsconfig => event::FSCONFIG;
    fentry_fsmount, fexit_fsmount => event::FSMOUNT;
    fentry_fspick, fexit_fspick => event::FSPICK;
    fentry_mount_setattr, fexit_mount_setattr => event::MOUNT_SETATTR;
}
