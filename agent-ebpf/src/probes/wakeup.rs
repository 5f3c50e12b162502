//! The ring-buffer flags of each syscall record: whether it wakes the agent at once (see
//! `volguard_common::wakeup` for the rule and why).

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE};
use volguard_common::{
    event::{PATH_LEN, SyscallEvent, kind},
    mount_flags::{MS_BIND, MS_MOVE},
    wakeup::{FD_PATHS, WakeupFilter},
};

use crate::maps::{EVENTS, WAKEUP_FILTER};

/// Flags for writing `event`: no wake-up for a mount or unmount that cannot concern the
/// kubelet tree while the ring is less than half full; a forced one otherwise (a record
/// written without a wake-up may be waiting, and the kernel wakes the reader only for the
/// first unread record). 0 (the kernel's own rule) until the agent sets the filter.
#[inline(always)]
pub fn flags(event: &SyscallEvent) -> u64 {
    let Some(filter) = WAKEUP_FILTER.get(0) else { return 0 };
    if filter.len == 0 {
        return 0;
    }
    let lazy = event.header.truncated == 0
        && !may_concern_kubelet(filter, event)
        && EVENTS.query(BPF_RB_AVAIL_DATA as u64) < EVENTS.query(BPF_RB_RING_SIZE as u64) / 2;
    if lazy { BPF_RB_NO_WAKEUP as u64 } else { BPF_RB_FORCE_WAKEUP as u64 }
}

/// False only for a mount(2) or umount2(2) whose paths are known to lie outside the
/// kubelet root (a new mount's source is a device or a name, not a path: not looked at).
#[inline(always)]
fn may_concern_kubelet(filter: &WakeupFilter, event: &SyscallEvent) -> bool {
    match event.header.kind {
        kind::MOUNT => {
            let source_is_a_path = event.args[3] & (MS_BIND | MS_MOVE) != 0;
            may_be_kubelets(filter, &event.path1) || (source_is_a_path && may_be_kubelets(filter, &event.path0))
        }
        kind::UMOUNT => may_be_kubelets(filter, &event.path0),
        _ => true,
    }
}

/// Whether `path` could name something under the kubelet root: unless it is absolute,
/// outside `/proc`, free of `/.` (no `..` to climb back in) and not under the root.
#[inline(always)]
fn may_be_kubelets(filter: &WakeupFilter, path: &[u8; PATH_LEN]) -> bool {
    path[0] != b'/' || starts_with(path, FD_PATHS) || has_dot_component(path) || under_root(filter, path)
}

/// Byte by byte: a slice comparison becomes a call to `memcmp`, a subprogram whose
/// pointer argument Linux 6.1's verifier refuses.
#[inline(always)]
fn starts_with(path: &[u8; PATH_LEN], prefix: &[u8]) -> bool {
    if prefix.len() > PATH_LEN {
        return false;
    }
    for i in 0..prefix.len() {
        if path[i] != prefix[i] {
            return false;
        }
    }
    true
}

#[inline(always)]
fn has_dot_component(path: &[u8; PATH_LEN]) -> bool {
    for i in 0..PATH_LEN - 1 {
        if path[i] == 0 {
            return false;
        }
        if path[i] == b'/' && path[i + 1] == b'.' {
            return true;
        }
    }
    false
}

/// Whether `path` starts with the kubelet root (a sibling such as `<root>-plugins` counts
/// too: waking for it costs only a wake-up).
#[inline(always)]
fn under_root(filter: &WakeupFilter, path: &[u8; PATH_LEN]) -> bool {
    for i in 0..PATH_LEN {
        if i >= filter.len as usize {
            return true;
        }
        if path[i] != filter.kubelet_root[i] {
            return false;
        }
    }
    true
}
