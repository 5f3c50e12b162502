//! The pod of the calling process, from the name kubelet gave its pod's cgroup (v2):
//! `pod<uid>` with the cgroupfs driver, `<parent>-pod<uid, '_' for '-'>.slice` with the
//! systemd driver, found among the caller's cgroup and its ancestors. Read in the kernel
//! at each call, so a container's very first mount is placed, before userspace has heard
//! of its pod. A process in no such cgroup (a node service, or a node on cgroup v1) has
//! no pod.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes};
use volguard_common::enforce::{CallerLayout, MAX_CGROUP_DEPTH, POD_UID_LEN, POD_UID_TEXT_LEN};

use super::kernel_path::read_field;
use crate::maps::{CALLER_LAYOUT, CGROUP_NAME_END, EnforceScratch};

const POD_PREFIX: &[u8] = b"pod";
const SYSTEMD_SUFFIX: &[u8] = b".slice";

/// Writes the caller's pod into `s.pod`; false if it is in none (or the layout is unknown).
#[inline(always)]
pub fn caller_pod(s: &mut EnforceScratch) -> bool {
    let Some(l) = CALLER_LAYOUT.get(0).filter(|l| l.task_cgroups != 0) else { return false };
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let Some(css_set) = read_field::<*const u8>(task, l.task_cgroups) else { return false };
    let Some(cgroup) = read_field::<*const u8>(css_set, l.css_set_dfl_cgrp) else { return false };
    let Some(mut node) = read_field::<*const u8>(cgroup, l.cgroup_kn) else { return false };
    for _ in 0..MAX_CGROUP_DEPTH {
        if node.is_null() {
            return false;
        }
        if pod_of_cgroup(l, node, s) {
            return true;
        }
        let Some(up) = read_field::<*const u8>(node, l.kernfs_node_parent) else { return false };
        node = up;
    }
    false
}

/// Whether the cgroup's kernfs `node` is a pod's; if so its UID goes into `s.pod`.
#[inline(always)]
fn pod_of_cgroup(l: &CallerLayout, node: *const u8, s: &mut EnforceScratch) -> bool {
    let Some(name) = read_field::<*const u8>(node, l.kernfs_node_name) else { return false };
    if name.is_null() {
        return false;
    }
    // SAFETY: bounded by the buffer; faults cleanly.
    let Ok(read) = (unsafe { bpf_probe_read_kernel_str_bytes(name, &mut s.cgroup_name) }) else { return false };
    let len = read.len();
    let systemd = len > CGROUP_NAME_END && len < s.cgroup_name.len();
    if len != POD_PREFIX.len() + POD_UID_TEXT_LEN && !systemd {
        return false;
    }
    // `pod<uid>` at the start of `cgroup_name_end`, so that every index below is a
    // constant: the name's last bytes read again at a fixed size (systemd), or the name.
    if systemd {
        let end = name.wrapping_add(len - CGROUP_NAME_END).cast::<[u8; CGROUP_NAME_END]>();
        // SAFETY: the last `CGROUP_NAME_END` bytes of the name just read; faults cleanly.
        let Ok(end) = (unsafe { bpf_probe_read_kernel(end) }) else { return false };
        s.cgroup_name_end = end;
    } else {
        for i in 0..POD_PREFIX.len() + POD_UID_TEXT_LEN {
            s.cgroup_name_end[i] = s.cgroup_name[i];
        }
    }
    let e = &s.cgroup_name_end;
    for i in 0..POD_PREFIX.len() {
        if e[i] != POD_PREFIX[i] {
            return false;
        }
    }
    if systemd {
        let suffix_at = POD_PREFIX.len() + POD_UID_TEXT_LEN;
        for i in 0..SYSTEMD_SUFFIX.len() {
            if e[suffix_at + i] != SYSTEMD_SUFFIX[i] {
                return false;
            }
        }
    }
    for i in 0..POD_UID_TEXT_LEN {
        let c = e[POD_PREFIX.len() + i];
        s.pod.uid[i] = if c == b'_' { b'-' } else { c };
    }
    for i in POD_UID_TEXT_LEN..POD_UID_LEN {
        s.pod.uid[i] = 0;
    }
    true
}
