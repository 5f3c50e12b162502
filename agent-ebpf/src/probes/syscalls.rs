//! Mount-family syscalls, traced with syscall tracepoints: each `sys_enter_<name>`
//! program parks its syscall's arguments in the thread's storage (a `PendingCall`; by
//! thread id where that storage cannot be created); the one
//! `sys_exit` program, attached to every matching `sys_exit_<name>`, writes the record in
//! place in the ring buffer: the strings its `SyscallSpec` names (read at exit, from the
//! memory of a caller still blocked in the call), the result, the duration. The records
//! are built by [`enter`] and [`exit`], which the trampoline backend (`trampolines.rs`)
//! shares.
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
    event::{self, MAX_ARGS, NO_STRING, PendingCall, SyscallEvent, SyscallSpec, truncated},
};

use super::{
    enforce::{record_published_root, settle_claim},
    kernel_path::current_mnt_ns,
    wakeup,
};
use crate::{
    helpers::{count, read_user_str},
    maps::{CONFIG, EVENTS, PENDING, PENDING_BY_THREAD},
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
            enter(&$spec, |i| unsafe { ctx.read_at::<u64>(ARG0 + i * ARG_SIZE) }.unwrap_or(0));
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

/// Parks what only the entry of this thread's `spec` call knows in its `PENDING` entry;
/// `arg(i)` reads argument `i` (asked only for `i < spec.nargs`).
#[inline(always)]
pub fn enter(spec: &SyscallSpec, arg: impl Fn(usize) -> u64) {
    let Some(call) = PENDING.get_or_create_current().or_else(park_by_thread) else {
        count(Counter::PendingInsertFailed);
        return;
    };
    // SAFETY: this thread's own entry (its storage, or its thread id's); nothing else
    // writes it.
    let call = unsafe { &mut *call };
    call.kind = spec.kind;
    call.strings = spec.string_args();
    for i in 0..MAX_ARGS {
        call.args[i] = if i < spec.nargs { arg(i) } else { 0 };
    }
    // SAFETY: helper without preconditions.
    call.start_ns = unsafe { bpf_ktime_get_ns() };
}

/// Copies the string argument `index` ([`NO_STRING`]: none) into `dst`; true if cut.
#[inline(always)]
fn copy_arg(args: &[u64; MAX_ARGS], index: u8, dst: &mut [u8]) -> bool {
    let i = index as usize;
    if index == NO_STRING || i >= MAX_ARGS {
        dst[0] = 0;
        return false;
    }
    read_user_str(args[i] as *const u8, dst)
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
/// records the root of its owner's publish, then emits the call's record.
#[inline(always)]
pub fn exit(ret: i64) {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    settle_claim(pid_tgid, ret);
    record_published_root(pid_tgid, ret);
    // SAFETY: this thread's own storage; nothing else writes it.
    if let Some(call) = PENDING.get_current().map(|call| unsafe { &mut *call }).filter(|call| call.kind != 0) {
        emit(call, pid_tgid, ret, now);
        call.kind = 0;
        return;
    }
    // Only where the entry could not use the thread's storage: one lookup more.
    // SAFETY: this thread's own entry; nothing else writes it.
    let Some(call) = PENDING_BY_THREAD.get_ptr(&pid_tgid).map(|call| unsafe { &*call }) else {
        count(Counter::ExitWithoutEntry);
        return;
    };
    if call.kind != 0 {
        emit(call, pid_tgid, ret, now);
    } else {
        count(Counter::ExitWithoutEntry);
    }
    let _ = PENDING_BY_THREAD.remove(&pid_tgid);
}

/// An empty entry for this thread in `PENDING_BY_THREAD`, where its task storage could not
/// be created (see that map); counted, so a node that runs this way shows it.
#[inline(always)]
fn park_by_thread() -> Option<*mut PendingCall> {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: PendingCall is plain data, valid all zero (kind 0: no call).
    let empty: PendingCall = unsafe { core::mem::zeroed() };
    PENDING_BY_THREAD.insert(&pid_tgid, &empty, 0).ok()?;
    count(Counter::PendingByThread);
    PENDING_BY_THREAD.get_ptr_mut(&pid_tgid)
}

/// Builds the record of `call` in place in the ring buffer (the caller's strings are
/// still in its memory: it is blocked in this very syscall) and submits it.
#[inline(always)]
fn emit(call: &PendingCall, pid_tgid: u64, ret: i64, now: u64) {
    // Before the reservation: while it is held, only the record is written.
    let comm = bpf_get_current_comm().unwrap_or([0; 16]);
    // SAFETY: helper without preconditions.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let mnt_ns = CONFIG.get(0).map_or(0, |cfg| current_mnt_ns(&cfg.layout));
    let Some(mut entry) = EVENTS.reserve::<SyscallEvent>(0) else {
        count(Counter::EventsLost);
        return;
    };
    // SAFETY: the reservation is ours and sized for a SyscallEvent; every field is set
    // below (each string up to its NUL, which is all userspace reads).
    let event = unsafe { &mut *entry.as_mut_ptr() };
    let header = &mut event.header;
    header.kind = call.kind;
    header.pid = pid_tgid as u32;
    header.tgid = (pid_tgid >> 32) as u32;
    header.mnt_ns = mnt_ns;
    header._pad = 0;
    header.cgroup_id = cgroup_id;
    header.start_ns = call.start_ns;
    header.duration_ns = now.saturating_sub(call.start_ns);
    header.ret = ret;
    header.comm = comm;
    event.args = call.args;
    let mut cut = 0;
    if copy_arg(&call.args, call.strings[0], &mut event.path0) {
        cut |= truncated::PATH0;
    }
    if copy_arg(&call.args, call.strings[1], &mut event.path1) {
        cut |= truncated::PATH1;
    }
    if copy_arg(&call.args, call.strings[2], &mut event.name) {
        cut |= truncated::NAME;
    }
    event.header.truncated = cut;
    let flags = wakeup::flags(event);
    entry.submit(flags);
}
