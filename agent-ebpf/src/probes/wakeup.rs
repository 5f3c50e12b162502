//! The ring-buffer flags of each syscall record: whether it wakes the agent at once (see
//! `volguard_common::wakeup` for the rule and why).

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE};
use volguard_common::event::SyscallEvent;

use crate::maps::{EVENTS, WAKEUP_FILTER};

/// Flags for writing `event`: no wake-up for a mount or unmount that cannot concern the
/// kubelet tree while the ring is less than half full; a forced one otherwise (a record
/// written without a wake-up may be waiting, and the kernel wakes the reader only for the
/// first unread record). 0 (the kernel's own rule) until the agent sets the filter.
#[inline(always)]
pub fn flags(event: &SyscallEvent) -> u64 {
    let Some(filter) = WAKEUP_FILTER.get(0) else { return 0 };
    if !filter.is_set() {
        return 0;
    }
    let lazy = event.header.truncated == 0
        && !filter.may_concern_kubelet(event)
        && EVENTS.query(BPF_RB_AVAIL_DATA as u64) < EVENTS.query(BPF_RB_RING_SIZE as u64) / 2;
    if lazy { BPF_RB_NO_WAKEUP as u64 } else { BPF_RB_FORCE_WAKEUP as u64 }
}
