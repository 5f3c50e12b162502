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
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use volguard_common::{event, programs::PT_REGS_ARG_OFFSETS};

use super::syscalls::{enter, exit};

/// Argument `i` of the syscall whose saved registers are at `regs`. `regs` comes straight
/// from the context, so the verifier knows it as a `struct pt_regs` pointer: each read at
/// a constant offset is a checked load (a fault reads 0), not a helper call.
#[inline(always)]
fn reg_arg(regs: *const u8, i: usize) -> u64 {
    let Some(&offset) = PT_REGS_ARG_OFFSETS.get(i) else { return 0 };
    // SAFETY: a field of the caller's saved registers, on its kernel stack for the whole
    // call; the verifier turns the load into one that cannot fault the kernel.
    unsafe { regs.add(offset).cast::<u64>().read_volatile() }
}

/// Defines the fentry and fexit program of each spec; names must be `fentry_<spec.name>`
/// and `fexit_<spec.name>`.
macro_rules! trampoline_programs {
    ($($entry:ident, $exit:ident => $spec:path;)*) => {$(
        #[fentry]
        pub fn $entry(ctx: FEntryContext) -> u32 {
            let regs: *const u8 = ctx.arg(0);
            enter(&$spec, |i| reg_arg(regs, i));
            0
        }

        #[fexit]
        pub fn $exit(ctx: FExitContext) -> u32 {
            // The function's one argument, then its return value.
            exit(ctx.arg::<i64>(1));
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
