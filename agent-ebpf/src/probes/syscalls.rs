//! Mount-family syscalls, traced with syscall tracepoints: each `sys_enter_<name>`
//! program remembers its syscall's arguments per thread (as its `SyscallSpec` says); the
//! one `sys_exit` program, attached to every matching `sys_exit_<name>`, adds the result
//! and duration and emits one event. The records are built by [`enter`] and [`exit`],
//! which the trampoline backend (`trampolines.rs`) shares.
//!
//! Syscall tracepoint records put argument i at offset 16 + 8 * i and the exit's `ret`
//! at 16 (see /sys/kernel/tracing/events/syscalls/*/format); stable since they exist.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use volguard_common::{
    counters::Counter,
    event::{self, MAX_ARGS, SyscallEvent, SyscallSpec, truncated},
};

use super::{
    enforce::{record_published_root, settle_claim},
    kernel_path::current_mnt_ns,
    wakeup,
};
use crate::{
    helpers::{count, read_user_str},
    maps::{CONFIG, EVENTS, PENDING, SCRATCH},
};

const ARG0: usize = 16;
const ARG_SIZE: usize = 8;
const EXIT_RET: usize = 16;

/// Defines one entry program per spec; names must match `sys_enter_<spec.name>`.
macro_rules! enter_programs {
    ($($program:ident => $spec:path;)*) => {$(
        #[tracepoint]
        pub fn $program(ctx: TracePointContext) -> u32 {
            // SAFETY: reading this tracepoint's own argument slots (enter asks for i < nargs).
            let _ = enter(&$spec, |i| unsafe { ctx.read_at::<u64>(ARG0 + i * ARG_SIZE) }.unwrap_or(0));
            0
        }
    )*};
}

enter_programs! {
    sys_enter_mount => event::MOUNT;
    sys_enter_umount => event::UMOUNT;
    sys_enter_open_tree => event::OPEN_TREE;
    sys_enter_open_tree_attr => event::OPEN_TREE_ATTR;
    sys_enter_move_mount => event::MOVE_MOUNT;
    sys_enter_fsopen => event::FSOPEN;
    sys_enter_fsconfig => event::FSCONFIG;
    sys_enter_fsmount => event::FSMOUNT;
    sys_enter_fspick => event::FSPICK;
    sys_enter_mount_setattr => event::MOUNT_SETATTR;
}

/// Parks this thread's record of a `spec` call in `PENDING`; `arg(i)` reads argument `i`
/// (asked only for `i < spec.nargs`).
#[inline(always)]
pub fn enter(spec: &SyscallSpec, arg: impl Fn(usize) -> u64) -> Result<(), i32> {
    let event = SCRATCH.get_ptr_mut(0).ok_or(0)?;
    // SAFETY: per-CPU scratch entry, used only for the duration of this program.
    let event = unsafe { &mut *event };
    let pid_tgid = bpf_get_current_pid_tgid();

    for i in 0..MAX_ARGS {
        event.args[i] = if i < spec.nargs { arg(i) } else { 0 };
    }
    let header = &mut event.header;
    header.kind = spec.kind;
    header.pid = pid_tgid as u32;
    header.tgid = (pid_tgid >> 32) as u32;
    header.mnt_ns = CONFIG.get(0).map_or(0, |cfg| current_mnt_ns(&cfg.layout));
    header._pad = 0;
    // SAFETY: helper without preconditions.
    header.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    header.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    header.duration_ns = 0;
    header.ret = 0;
    header.truncated = 0;
    let mut cut = 0;
    if copy_arg(&event.args, spec.path0, &mut event.path0) {
        cut |= truncated::PATH0;
    }
    if copy_arg(&event.args, spec.path1, &mut event.path1) {
        cut |= truncated::PATH1;
    }
    if copy_arg(&event.args, spec.name_arg, &mut event.name) {
        cut |= truncated::NAME;
    }
    event.header.truncated = cut;
    // Taken last so the duration does not include our own string copies.
    // SAFETY: helper without preconditions.
    event.header.start_ns = unsafe { bpf_ktime_get_ns() };

    if PENDING.insert(&pid_tgid, &*event, 0).is_err() {
        count(Counter::PendingInsertFailed);
    }
    Ok(())
}

/// Copies the string argument `index` (if the spec has one) into `dst`; true if cut.
#[inline(always)]
fn copy_arg(args: &[u64; MAX_ARGS], index: Option<usize>, dst: &mut [u8]) -> bool {
    match index {
        Some(i) if i < MAX_ARGS => read_user_str(args[i] as *const u8, dst),
        _ => {
            dst[0] = 0;
            false
        }
    }
}

/// Shared by every `sys_exit_<name>` of the traced syscalls.
#[tracepoint]
pub fn sys_exit(ctx: TracePointContext) -> u32 {
    // SAFETY: reading this tracepoint's own return-value slot.
    if let Ok(ret) = unsafe { ctx.read_at::<i64>(EXIT_RET) } {
        exit(ret);
    }
    0
}

/// At the exit of a traced call that returned `ret`: settles this thread's claim and
/// records the root of its owner's publish, then completes and emits the record its entry
/// parked.
#[inline(always)]
pub fn exit(ret: i64) {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    settle_claim(pid_tgid, ret);
    record_published_root(pid_tgid, ret);
    let Some(event) = PENDING.get_ptr_mut(&pid_tgid) else {
        count(Counter::ExitWithoutEntry);
        return;
    };
    // SAFETY: this thread's own entry; no other thread uses its key.
    let event = unsafe { &mut *event };
    event.header.ret = ret;
    event.header.duration_ns = now.saturating_sub(event.header.start_ns);
    if EVENTS.output::<SyscallEvent>(&*event, wakeup::flags(event)).is_err() {
        count(Counter::EventsLost);
    }
    let _ = PENDING.remove(&pid_tgid);
}
