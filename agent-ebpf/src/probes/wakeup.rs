//! The ring-buffer flags of each syscall record: whether it wakes the agent at once (see
//! `volguard_common::wakeup` for the rule and why).

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE};
use volguard_common::event::SyscallEvent;

use crate::maps::{EVENTS, LAZY_UNREAD, WAKEUP_FILTER};

/// Flags for writing `event`: no wake-up for a record the agent's filter lets wait (a
/// mount or unmount that cannot concern the kubelet tree; any record where the LSM hooks
/// decide conflicts) while the ring is less than half full. Any other record takes the
/// kernel's own rule (wake the reader if the record is the first unread one), unless a
/// record written without a wake-up may be unread ahead of it: then the wake-up is forced,
/// since the kernel would not wake the reader for a record behind unread ones. Forcing
/// every time instead made an owner's bind+umount cycle cost 2.00× rather than 1.63× on
/// the host (medians of three bench runs each): a forced wake-up also reaches a reader
/// that is already awake and draining. For the same reason unmounts under the kubelet
/// tree still wake the agent, although nothing waits on them: written without a wake-up,
/// they made the next publish force one, and an owner's cycle cost 1.76× instead of 1.61×.
#[inline(always)]
pub fn flags(event: &SyscallEvent) -> u64 {
    let Some(filter) = WAKEUP_FILTER.get(0) else { return 0 };
    if !filter.is_set() {
        return 0;
    }
    let lazy =
        filter.may_wait(event) && EVENTS.query(BPF_RB_AVAIL_DATA as u64) < EVENTS.query(BPF_RB_RING_SIZE as u64) / 2;
    let Some(lazy_unread) = LAZY_UNREAD.get_ptr_mut(0) else {
        return if lazy { BPF_RB_NO_WAKEUP as u64 } else { BPF_RB_FORCE_WAKEUP as u64 };
    };
    // SAFETY: a u32 in an array map. Writers on other CPUs race with this one: the worst
    // case is the one `volguard_common::wakeup` states (a record waits for the next drain).
    unsafe {
        if lazy {
            if *lazy_unread == 0 {
                *lazy_unread = 1;
            }
            BPF_RB_NO_WAKEUP as u64
        } else if *lazy_unread != 0 {
            *lazy_unread = 0;
            BPF_RB_FORCE_WAKEUP as u64
        } else {
            0
        }
    }
}
