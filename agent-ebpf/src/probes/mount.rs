//! `mount(2)`: the entry tracepoint remembers the arguments per thread; the exit
//! tracepoint adds the result and duration and emits one `MountEvent`.
//!
//! Argument offsets are those of /sys/kernel/tracing/events/syscalls/sys_enter_mount/format
//! (`dev_name` 16, `dir_name` 24, `type` 32, `flags` 40) and sys_exit_mount (`ret` 16),
//! stable across kernels since syscall tracepoints exist.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
    },
    macros::tracepoint,
    programs::TracePointContext,
};
use volguard_common::{
    counters::Counter,
    event::{MountEvent, kind, truncated},
};

use crate::{
    helpers::{count, read_user_str},
    maps::{EVENTS, PENDING, SCRATCH},
};

const ARG0: usize = 16;
const ARG_SIZE: usize = 8;
const EXIT_RET: usize = 16;

#[tracepoint]
pub fn sys_enter_mount(ctx: TracePointContext) -> u32 {
    let _ = try_sys_enter_mount(&ctx);
    0
}

fn try_sys_enter_mount(ctx: &TracePointContext) -> Result<(), i32> {
    let event = SCRATCH.get_ptr_mut(0).ok_or(0)?;
    // SAFETY: per-CPU scratch entry, used only for the duration of this program.
    let event = unsafe { &mut *event };
    let pid_tgid = bpf_get_current_pid_tgid();

    // SAFETY: reading this tracepoint's own argument slots.
    let (source, target, fstype, flags) = unsafe {
        (
            ctx.read_at::<*const u8>(ARG0)?,
            ctx.read_at::<*const u8>(ARG0 + ARG_SIZE)?,
            ctx.read_at::<*const u8>(ARG0 + 2 * ARG_SIZE)?,
            ctx.read_at::<u64>(ARG0 + 3 * ARG_SIZE)?,
        )
    };

    let header = &mut event.header;
    header.kind = kind::MOUNT;
    header.pid = pid_tgid as u32;
    header.tgid = (pid_tgid >> 32) as u32;
    // SAFETY: helpers without preconditions.
    header.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    header.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    header.duration_ns = 0;
    header.ret = 0;
    header.truncated = 0;
    if read_user_str(source, &mut event.source) {
        event.header.truncated |= truncated::SOURCE;
    }
    if read_user_str(target, &mut event.target) {
        event.header.truncated |= truncated::TARGET;
    }
    if read_user_str(fstype, &mut event.fstype) {
        event.header.truncated |= truncated::FSTYPE;
    }
    event.flags = flags;
    // Taken last so the duration does not include our own string copies.
    // SAFETY: helper without preconditions.
    event.header.start_ns = unsafe { bpf_ktime_get_ns() };

    if PENDING.insert(&pid_tgid, &*event, 0).is_err() {
        count(Counter::PendingInsertFailed);
    }
    Ok(())
}

#[tracepoint]
pub fn sys_exit_mount(ctx: TracePointContext) -> u32 {
    let _ = try_sys_exit_mount(&ctx);
    0
}

fn try_sys_exit_mount(ctx: &TracePointContext) -> Result<(), i32> {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(event) = PENDING.get_ptr_mut(&pid_tgid) else {
        count(Counter::ExitWithoutEntry);
        return Ok(());
    };
    // SAFETY: this thread's own entry; no other thread uses its key.
    let event = unsafe { &mut *event };
    // SAFETY: reading this tracepoint's own return-value slot.
    event.header.ret = unsafe { ctx.read_at::<i64>(EXIT_RET)? };
    event.header.duration_ns = now.saturating_sub(event.header.start_ns);
    if EVENTS.output::<MountEvent>(&*event, 0).is_err() {
        count(Counter::EventsLost);
    }
    let _ = PENDING.remove(&pid_tgid);
    Ok(())
}
