//! The open guard (see `volguard_common::open_guard`): an open of a file in an owned
//! single-pod volume by a process of another pod is refused with EACCES in enforce mode,
//! reported in audit mode. The owner's processes, exempt readers and node processes (no
//! pod: kubelet's fsGroup walk, the runtime) are let through; node processes are counted.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_ktime_get_ns},
    programs::LsmContext,
};
use volguard_common::{
    counters::Counter,
    enforce::{PodUid, PublishedRoot, RootKey, conflict_hook, kernel_mode},
    open_guard::{CachedCallerPod, DeviceGuard, OPEN_DENY_ERRNO, OPEN_REPORT_INTERVAL_NS, S_IFBLK, S_IFMT, S_IFREG},
};

use super::{
    caller_pod::caller_pod,
    directory_verdicts::root_above_directory,
    enforce::{DentryReads as _, config, count_conflict, same_pod, scratch, scratch_as_is, send_conflict},
    guard_reads::{self, GuardReads},
};
use crate::{
    helpers::count,
    maps::{CALLER_PODS, EXEMPT_PODS, EnforceScratch, GUARDED_DEVICES, NODE_OPENS, OPEN_REPORTS, OWNERS, PUBLISHED_ROOTS},
};

security_hook!("file_open", file_open_guard, file_open_guard_fmod_ret, file_open_decision);

#[inline(always)]
fn file_open_decision(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(1);
    if previous != 0 {
        return previous;
    }
    // Read as its BTF type (`struct file *`): `guard_reads` loads through it.
    guard(ctx.arg(0))
}

/// The hook with a program that returns at once: what any guard on `file_open` costs
/// before it reads anything. Never attached by the agent; `cargo xtask bench` attaches it
/// alone (row 9f) to tell the hook's own cost from the guard's.
security_hook!("file_open", file_open_floor, file_open_floor_fmod_ret, previous_verdict);

#[inline(always)]
fn previous_verdict(ctx: LsmContext) -> i32 {
    ctx.arg(1)
}

#[inline(always)]
fn guard(file: *const u8) -> i32 {
    if !guard_reads::layout_set() {
        return 0;
    }
    let Some(dentry) = guard_reads::file_dentry(file) else { return 0 };
    guard_dentry(dentry, conflict_hook::FILE_OPEN)
}

/// The guard's decision on `dentry` (a file opened, an entry changed, or the directory a
/// new entry goes into), reported as `hook`: refused with EACCES where another pod
/// reaches an owned volume's tree in enforce mode, reported in audit mode.
#[inline(always)]
pub(super) fn guard_dentry(dentry: *const u8, hook: u32) -> i32 {
    let Some(dev) = guard_reads::device(dentry) else { return 0 };
    // SAFETY: read-only lookup. The one lookup most opens on the node pay.
    let root = match unsafe { GUARDED_DEVICES.get(&dev) } {
        Some(device) => volume_root(device, dentry, dev),
        None if hook == conflict_hook::FILE_OPEN || hook == conflict_hook::FILE_RECEIVE => device_node_root(dentry),
        None => None,
    };
    let Some(root) = root else { return 0 };
    let Some(cfg) = config() else { return 0 };
    // The owner's own opens, the common case inside a volume, end at the first test.
    let reader = match caller() {
        None => return 0,
        Some(Caller::Pod(pod)) if same_pod(pod, &root.owner) => return 0,
        Some(Caller::Pod(pod)) => *pod,
        Some(Caller::Node) => {
            if hook == conflict_hook::FILE_OPEN && still_owned(root) {
                count(Counter::OpensByNodeProcesses);
                count_node_open();
            }
            return 0;
        }
    };
    if !still_owned(root) {
        return 0;
    }
    // SAFETY: read-only lookup.
    if unsafe { EXEMPT_PODS.get(&reader) }.is_some() {
        return 0;
    }
    let Some(s) = scratch_as_is() else { return 0 };
    s.volume = root.volume;
    s.pod = reader;
    let blocked = cfg.mode == kernel_mode::ENFORCE;
    count_conflict(blocked);
    if due_for_report(s) {
        send_conflict(s, &root.owner, hook, blocked);
    }
    if blocked { -OPEN_DENY_ERRNO } else { 0 }
}

/// Whether a recorded root is to be trusted: only while its pod owns the volume.
#[inline(always)]
fn still_owned(root: &PublishedRoot) -> bool {
    // SAFETY: read-only lookup.
    unsafe { OWNERS.get(&root.volume) }.is_some_and(|owner| same_pod(&owner.pod, &root.owner))
}

/// The published root of the owned volume `dentry` lies in, if any: the filesystem's root
/// where a publish showed the whole filesystem, else the dentry itself where it is a
/// recorded root (a volume's root directory), else the root above its directory.
#[inline(always)]
fn volume_root(device: &DeviceGuard, dentry: *const u8, dev: u32) -> Option<&'static PublishedRoot> {
    if device.whole_fs_root_ino != 0 {
        let key = RootKey { ino: device.whole_fs_root_ino, dev, _pad: 0 };
        // SAFETY: read-only lookup.
        if let Some(root) = unsafe { PUBLISHED_ROOTS.get(&key) } {
            return Some(root);
        }
    }
    if device.directory_roots == 0 {
        return None;
    }
    // A recorded root is the directory a publish shows, or a block volume's device node
    // bound at its target: never a regular file, whose answer is its directory's alone
    // (most opens in a volume are of files: one lookup fewer).
    if guard_reads::mode(guard_reads::inode(dentry)?)? & S_IFMT != S_IFREG {
        let ino = GuardReads.inode_number(dentry)?;
        // SAFETY: read-only lookup.
        if let Some(root) = unsafe { PUBLISHED_ROOTS.get(&RootKey { ino, dev, _pad: 0 }) } {
            return Some(root);
        }
    }
    let dir = GuardReads.parent(dentry)?;
    if dir == dentry {
        return None;
    }
    root_above_directory(dir, dev)
}

/// The published root of the owned volume whose whole filesystem is on the block device
/// `dentry` names, if it is such a node (`/dev/loop0`, `/host/dev/…`, or one made with
/// mknod): an open of it reads the volume's blocks. Opens of other files pay the reads of
/// their type.
#[inline(always)]
fn device_node_root(dentry: *const u8) -> Option<&'static PublishedRoot> {
    let inode = guard_reads::inode(dentry)?;
    if guard_reads::mode(inode)? & S_IFMT != S_IFBLK {
        return None;
    }
    let dev = guard_reads::rdev(inode)?;
    // SAFETY: read-only lookup.
    let device = unsafe { GUARDED_DEVICES.get(&dev) }?;
    if device.whole_fs_root_ino == 0 {
        return None;
    }
    // SAFETY: read-only lookup.
    unsafe { PUBLISHED_ROOTS.get(&RootKey { ino: device.whole_fs_root_ino, dev, _pad: 0 }) }
}

/// Who opens: a pod's process or a node process.
enum Caller {
    Pod(&'static PodUid),
    Node,
}

/// The caller, from the cache by cgroup ID where the cgroup was met before (its names are
/// read once); `None` where the per-CPU scratch is missing.
#[inline(always)]
fn caller() -> Option<Caller> {
    // SAFETY: helper without preconditions.
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: read-only lookup; the value is plain data.
    if let Some(cached) = unsafe { CALLER_PODS.get(&cgroup) } {
        return Some(if cached.in_pod != 0 { Caller::Pod(&cached.pod) } else { Caller::Node });
    }
    let s = scratch()?;
    let in_pod = caller_pod(s);
    let entry = CachedCallerPod { pod: s.pod, in_pod: in_pod as u32, _pad: 0 };
    let _ = CALLER_PODS.insert(&cgroup, &entry, 0);
    Some(if in_pod { Caller::Pod(&s.pod) } else { Caller::Node })
}

/// Counts a node process's open under its command. Once the map holds its most commands,
/// a new one is not added: userspace counts it as `other` (from `OpensByNodeProcesses`).
#[inline(always)]
fn count_node_open() {
    let Ok(command) = bpf_get_current_comm() else { return };
    if let Some(opens) = NODE_OPENS.get_ptr_mut(command) {
        // SAFETY: per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *opens += 1 };
        return;
    }
    let _ = NODE_OPENS.insert(command, 1, u64::from(BPF_NOEXIST));
}

/// Whether this reader's open of this volume is to be reported (once per interval).
#[inline(always)]
fn due_for_report(s: &EnforceScratch) -> bool {
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let key = s.report_key();
    // SAFETY: read-only lookup.
    if let Some(last) = unsafe { OPEN_REPORTS.get(key) }
        && now.saturating_sub(*last) < OPEN_REPORT_INTERVAL_NS
    {
        return false;
    }
    let _ = OPEN_REPORTS.insert(key, &now, 0);
    true
}

/// Notes that `key`'s filesystem holds an owned volume's published tree (its whole
/// filesystem where `whole_fs`): opens there are judged. True if it is noted.
#[inline(always)]
pub fn guard_device(key: &RootKey, whole_fs: bool) -> bool {
    if let Some(device) = GUARDED_DEVICES.get_ptr_mut(&key.dev) {
        // SAFETY: a map value; a racing writer sets the same kind of mark.
        let device = unsafe { &mut *device };
        if whole_fs {
            device.whole_fs_root_ino = key.ino;
        } else {
            device.directory_roots = 1;
        }
        return true;
    }
    let device = if whole_fs {
        DeviceGuard { whole_fs_root_ino: key.ino, directory_roots: 0, _pad: 0 }
    } else {
        DeviceGuard { whole_fs_root_ino: 0, directory_roots: 1, _pad: 0 }
    };
    GUARDED_DEVICES.insert(&key.dev, &device, 0).is_ok()
}
