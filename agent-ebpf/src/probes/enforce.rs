//! ReadWriteOncePod enforcement on the LSM mount hooks.
//!
//! The first publish of a single-pod volume claims it for the publishing pod atomically
//! (BPF_NOEXIST insert into `OWNERS`); a publish of an owned volume into another pod is
//! refused with EBUSY before anything is mounted. The claim is rolled back if the
//! claiming syscall fails, and released when the owner's publish target is unmounted;
//! both are settled at syscall exit (`settle_claim`, called by the exit tracepoint or the
//! fexit program, whichever backend traces the syscall). The same exit records the root
//! of each tree its owner publishes (`record_published_root`), so that a tree taken from
//! inside it is recognised (`refuse_cross_pod_source`).
//!
//! match-proto: int security_sb_mount(const char *dev_name, const struct path *path,
//!                                    const char *type, unsigned long flags, void *data)
//! match-proto: int security_move_mount(const struct path *from_path, const struct path *to_path)
//! match-proto: int security_sb_umount(struct vfsmount *mnt, int flags)

use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_NOEXIST, BPF_RB_FORCE_WAKEUP},
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    programs::LsmContext,
};
use volguard_common::{
    counters::Counter,
    enforce::{
        CONFLICT_EVENT_KIND, ConflictEvent, EnforceConfig, KernelLayout, MAX_NEWEST_CHILDREN, MAX_SOURCE_DEPTH,
        MountOp, MountTreeLayout, Owner, POD_UID_LEN, POD_UID_WORDS, PendingPublish, PodUid, PublishedRoot, RootKey, claim_kind,
        conflict_action, conflict_hook, kernel_mode,
    },
    lsm_probe::DENY_ERRNO,
};

use super::{
    caller_pod::caller_pod,
    kernel_path::{identity, inode_number, on_kubelet_root_fs, owning_pod, parent, publish_identity, read_field},
};
use crate::{
    helpers::{count, ctx_arg_address},
    maps::{
        CLAIMS, CONFIG, ENFORCE_SCRATCH, EVENTS, EXEMPT_PODS, EnforceScratch, MOUNT_TREE_LAYOUT, OWNERS,
        PUBLISH_MOUNTS, PUBLISHED_ROOTS, PUBLISHES, PUBLISHING, SINGLE_POD_VOLUMES,
    },
};

security_hook!("sb_mount", sb_mount_enforce, sb_mount_enforce_fmod_ret, sb_mount_decision);
security_hook!("move_mount", move_mount_enforce, move_mount_enforce_fmod_ret, move_mount_decision);
security_hook!("sb_umount", sb_umount_release, sb_umount_release_fmod_ret, sb_umount_decision);

#[inline(always)]
fn sb_mount_decision(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(5);
    if previous != 0 {
        return previous;
    }
    let flags: u64 = ctx.arg(3);
    if !MountOp::of(flags).attaches() {
        return 0;
    }
    decide(arg_address(&ctx, 1), conflict_hook::SB_MOUNT)
}

#[inline(always)]
fn move_mount_decision(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(2);
    if previous != 0 {
        return previous;
    }
    let (from_path, to_path) = (arg_address(&ctx, 0), arg_address(&ctx, 1));
    match decide(to_path, conflict_hook::MOVE_MOUNT) {
        0 => refuse_cross_pod_source(from_path, to_path),
        refused => refused,
    }
}

/// A tree inside one pod's published single-pod volume may reach no other pod: not under
/// another pod's directory, and not anywhere by a process of another pod (a hostPath into
/// the volume, bound by the reader's runtime with the new mount API; a clone). Readers the
/// operator exempts may; a node process's clone is left to its syscall's exit, where the
/// agent reports it (or detaches it, with `--detach-node-access`). Only move_mount(2) is
/// covered: it is the one mount hook that gets the source resolved (mount(2) hands the LSM
/// the caller's source string; such binds are detached at their syscall's exit).
#[inline(always)]
fn refuse_cross_pod_source(from_path: *const u8, to_path: *const u8) -> i32 {
    let Some(cfg) = config() else { return 0 };
    let l = &cfg.layout;
    let (Some(from), Some(to)) =
        (read_field::<*const u8>(from_path, l.path_dentry), read_field::<*const u8>(to_path, l.path_dentry))
    else {
        count(Counter::EnforceErrors);
        return 0;
    };
    let Some((_, dev)) = identity(l, from) else { return 0 };
    let Ok(Some((_, root))) = published_root_above::<MAX_SOURCE_DEPTH>(l, from, dev) else { return 0 };
    let Some(s) = scratch() else { return 0 };
    // The pod whose directory the tree lands in, else the caller's.
    let reader = (on_kubelet_root_fs(cfg, to) && owning_pod(cfg, to, &mut s.pod)) || caller_pod(s);
    if !reader || same_pod(&root.owner, &s.pod) {
        return 0;
    }
    // SAFETY: read-only lookup.
    if unsafe { EXEMPT_PODS.get(&s.pod) }.is_some() {
        return 0;
    }
    // Trust a recorded root only while its pod still owns the volume.
    // SAFETY: read-only lookup.
    let Some(owner) = (unsafe { OWNERS.get(&root.volume) }) else { return 0 };
    if !same_pod(&owner.pod, &root.owner) {
        return 0;
    }
    s.volume = root.volume;
    let blocked = cfg.mode == kernel_mode::ENFORCE;
    report_conflict(s, &root.owner, conflict_hook::MOVE_MOUNT_SOURCE, blocked);
    if blocked { -DENY_ERRNO } else { 0 }
}

/// How a walk up reads dentries: with `bpf_probe_read_kernel` at the offsets of the
/// [`KernelLayout`] in `CONFIG` (the mount programs, whose pointers are plain addresses), or
/// with plain loads through BTF-typed pointers (the open guard, `guard_reads`).
pub(super) trait DentryReads {
    /// The inode number of the dentry's inode.
    fn inode_number(&self, dentry: *const u8) -> Option<u64>;
    /// The parent dentry (the dentry itself at a filesystem's root).
    fn parent(&self, dentry: *const u8) -> Option<*const u8>;
}

impl DentryReads for KernelLayout {
    #[inline(always)]
    fn inode_number(&self, dentry: *const u8) -> Option<u64> {
        inode_number(self, dentry)
    }

    #[inline(always)]
    fn parent(&self, dentry: *const u8) -> Option<*const u8> {
        parent(self, dentry)
    }
}

/// The published root at or above `dentry` with its key, walking at most `DEPTH` levels up
/// its filesystem (`dev`): `Ok(None)` once the filesystem's root is passed.
#[inline(always)]
pub(super) fn published_root_above<const DEPTH: usize>(
    reads: &impl DentryReads,
    dentry: *const u8,
    dev: u32,
) -> Result<Option<(RootKey, &'static PublishedRoot)>, WalkStopped> {
    let mut d = dentry;
    for _ in 0..DEPTH {
        let ino = reads.inode_number(d).ok_or(WalkStopped::Unreadable)?;
        let key = RootKey { ino, dev, _pad: 0 };
        // SAFETY: read-only lookup.
        if let Some(root) = unsafe { PUBLISHED_ROOTS.get(&key) } {
            return Ok(Some((key, root)));
        }
        let up = reads.parent(d).ok_or(WalkStopped::Unreadable)?;
        if up == d {
            return Ok(None);
        }
        d = up;
    }
    Err(WalkStopped::TooDeep)
}

/// Why a walk up gave no answer.
pub(super) enum WalkStopped {
    /// It ran out of levels before the filesystem's root.
    TooDeep,
    /// A kernel read failed on the way.
    Unreadable,
}

/// Never refuses: notes a release to settle if the unmount succeeds.
#[inline(always)]
fn sb_umount_decision(ctx: LsmContext) -> i32 {
    let previous: i32 = ctx.arg(2);
    if previous != 0 {
        return previous;
    }
    let _ = note_release(arg_address(&ctx, 0));
    0
}

/// Hook argument `n` as a plain address (see [`ctx_arg_address`]).
#[inline(always)]
fn arg_address(ctx: &LsmContext, n: usize) -> *const u8 {
    ctx_arg_address(ctx.as_ptr(), n)
}

pub(super) fn config() -> Option<&'static EnforceConfig> {
    let cfg = CONFIG.get(0)?;
    (cfg.mode != kernel_mode::OFF).then_some(cfg)
}

/// The per-CPU scratch as the last program left it, for a caller that writes every field
/// it then reads.
#[inline(always)]
pub(super) fn scratch_as_is() -> Option<&'static mut EnforceScratch> {
    let s = ENFORCE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU, used only while this program runs.
    Some(unsafe { &mut *s })
}

/// A zeroed scratch area for this CPU.
#[inline(always)]
pub(super) fn scratch() -> Option<&'static mut EnforceScratch> {
    let s = scratch_as_is()?;
    s.volume.name = [0; volguard_common::enforce::VOLUME_NAME_LEN];
    s.pod.uid = [0; POD_UID_LEN];
    Some(s)
}

#[inline(always)]
pub(super) fn same_pod(a: &PodUid, b: &PodUid) -> bool {
    // By words: the owner's every open compares the whole UID.
    let (a, b) = (a.words(), b.words());
    for i in 0..POD_UID_WORDS {
        if a[i] != b[i] {
            return false;
        }
    }
    true
}

/// The verdict for attaching something at `path` (a `struct path *`).
#[inline(always)]
fn decide(path: *const u8, hook: u32) -> i32 {
    let Some(cfg) = config() else { return 0 };
    let Some(dentry) = read_field::<*const u8>(path, cfg.layout.path_dentry) else {
        count(Counter::EnforceErrors);
        return 0;
    };
    if !on_kubelet_root_fs(cfg, dentry) {
        return 0;
    }
    let Some(s) = scratch() else {
        count(Counter::EnforceErrors);
        return 0;
    };
    if !publish_identity(cfg, dentry, &mut s.volume, &mut s.pod) {
        return 0;
    }
    // SAFETY: read-only lookup; values are plain data.
    if unsafe { SINGLE_POD_VOLUMES.get(&s.volume) }.is_none() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let claim = Owner { pod: s.pod, claim_pid_tgid: pid_tgid, claimed_ns: now };
    if OWNERS.insert(&s.volume, &claim, BPF_NOEXIST as u64).is_ok() {
        count(Counter::Claims);
        s.claim.volume = s.volume;
        s.claim.pod = s.pod;
        s.claim.kind = claim_kind::CLAIM;
        s.claim.claimed_ns = now;
        if CLAIMS.insert(&pid_tgid, &s.claim, 0).is_err() {
            count(Counter::EnforceErrors);
        }
        note_publish(path, dentry, s);
        return 0;
    }
    // Owned already (or claimed by a racing thread an instant ago).
    // SAFETY: read-only lookup.
    let Some(owner) = (unsafe { OWNERS.get(&s.volume) }) else {
        count(Counter::EnforceErrors);
        return 0;
    };
    if same_pod(&owner.pod, &s.pod) {
        note_publish(path, dentry, s);
        return 0;
    }
    let blocked = cfg.mode == kernel_mode::ENFORCE;
    report_conflict(s, &owner.pod, hook, blocked);
    if blocked { -DENY_ERRNO } else { 0 }
}

/// Notes that this thread's syscall publishes `s.volume` for its owner `s.pod` at `path`
/// (resolved to `dentry`), so that its exit records the new tree's root.
#[inline(always)]
fn note_publish(path: *const u8, dentry: *const u8, s: &mut EnforceScratch) {
    let Some(tree) = mount_tree_layout() else { return };
    let Some(vfsmount) = read_field::<*const u8>(path, tree.path_mnt) else {
        count(Counter::EnforceErrors);
        return;
    };
    s.publish.root.volume = s.volume;
    s.publish.root.owner = s.pod;
    s.publish.parent_vfsmount = vfsmount as u64;
    s.publish.mountpoint = dentry as u64;
    let pid_tgid = bpf_get_current_pid_tgid();
    if PUBLISHES.insert(&pid_tgid, &s.publish, 0).is_err() || PUBLISHING.insert(&s.volume, &pid_tgid, 0).is_err() {
        count(Counter::EnforceErrors);
    }
}

/// The offsets, once userspace has set them.
#[inline(always)]
fn mount_tree_layout() -> Option<&'static MountTreeLayout> {
    MOUNT_TREE_LAYOUT.get(0).filter(|tree| tree.mount_mnt_child != 0)
}

fn report_conflict(s: &EnforceScratch, owner: &PodUid, hook: u32, blocked: bool) {
    count_conflict(blocked);
    send_conflict(s, owner, hook, blocked);
}

#[inline(always)]
pub(super) fn count_conflict(blocked: bool) {
    count(if blocked { Counter::ConflictsBlocked } else { Counter::ConflictsAudited });
}

/// Hands userspace a conflict: `s.pod` attempted `s.volume`, which `owner` owns.
pub(super) fn send_conflict(s: &EnforceScratch, owner: &PodUid, hook: u32, blocked: bool) {
    let Some(mut entry) = EVENTS.reserve::<ConflictEvent>(0) else {
        count(Counter::EventsLost);
        return;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let event = entry.as_mut_ptr();
    // SAFETY: the reservation is ours and sized for a ConflictEvent; every field is set.
    unsafe {
        (*event).kind = CONFLICT_EVENT_KIND;
        (*event).action = if blocked { conflict_action::BLOCKED } else { conflict_action::AUDITED };
        (*event).hook = hook;
        (*event).pid = pid_tgid as u32;
        (*event).tgid = (pid_tgid >> 32) as u32;
        (*event)._pad = 0;
        (*event).cgroup_id = bpf_get_current_cgroup_id();
        (*event).time_ns = bpf_ktime_get_ns();
        (*event).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        (*event).volume = s.volume;
        (*event).owner = *owner;
        (*event).attempted_by = s.pod;
    }
    // Forced: a record written without a wake-up may be waiting (see `super::wakeup`).
    entry.submit(BPF_RB_FORCE_WAKEUP as u64);
}

/// If `vfsmount` is mounted on its owner's publish target, notes a pending release.
#[inline(always)]
fn note_release(vfsmount: *const u8) -> Option<()> {
    let cfg = config()?;
    let l = &cfg.layout;
    // container_of(vfsmount, struct mount, mnt)->mnt_mountpoint
    let mount = vfsmount.wrapping_sub(l.mount_mnt as usize);
    let mountpoint = read_field::<*const u8>(mount, l.mount_mnt_mountpoint)?;
    if !on_kubelet_root_fs(cfg, mountpoint) {
        return None;
    }
    let s = scratch()?;
    if !publish_identity(cfg, mountpoint, &mut s.volume, &mut s.pod) {
        return None;
    }
    // SAFETY: read-only lookup.
    let owner = unsafe { OWNERS.get(&s.volume) }?;
    if !same_pod(&owner.pod, &s.pod) {
        return None;
    }
    // A copy of the publish (in a recursive bind, or propagated into another namespace)
    // sits on the same directory; only the publish itself releases, where it is known.
    // SAFETY: read-only lookups.
    match unsafe { PUBLISH_MOUNTS.get(&s.volume) } {
        Some(publish) if *publish != mount as u64 => return None,
        Some(_) => {}
        // Not known yet while the owner's publish is in flight: a copy it propagated into
        // another namespace, detached there before the publish's exit recorded its mount,
        // is not the publish (and the publish cannot be unmounted before it returns).
        None if unsafe { PUBLISHING.get(&s.volume) }.is_some() => return None,
        None => {}
    }
    s.claim.volume = s.volume;
    s.claim.pod = s.pod;
    s.claim.kind = claim_kind::RELEASE;
    // SAFETY: helper without preconditions.
    s.claim.claimed_ns = unsafe { bpf_ktime_get_ns() };
    if CLAIMS.insert(&bpf_get_current_pid_tgid(), &s.claim, 0).is_err() {
        count(Counter::EnforceErrors);
    }
    Some(())
}

/// At syscall exit: rolls back this thread's claim if the syscall failed, or completes
/// its release if the unmount succeeded.
#[inline(always)]
pub fn settle_claim(pid_tgid: u64, ret: i64) {
    let Some(claim) = CLAIMS.get_ptr(&pid_tgid) else { return };
    // SAFETY: this thread's own entry.
    let claim = unsafe { &*claim };
    // SAFETY: read-only lookup.
    if let Some(owner) = unsafe { OWNERS.get(&claim.volume) } {
        let ours = owner.claim_pid_tgid == pid_tgid && owner.claimed_ns == claim.claimed_ns;
        if claim.kind == claim_kind::CLAIM && ret < 0 && ours {
            let _ = OWNERS.remove(&claim.volume);
            count(Counter::ClaimsRolledBack);
        } else if claim.kind == claim_kind::RELEASE && ret == 0 && same_pod(&owner.pod, &claim.pod) {
            let _ = OWNERS.remove(&claim.volume);
            let _ = PUBLISH_MOUNTS.remove(&claim.volume);
            count(Counter::Releases);
        }
    }
    let _ = CLAIMS.remove(&pid_tgid);
}

/// At syscall exit: if this thread's publish by a volume's owner succeeded, records the
/// root of the tree it attached (`refuse_cross_pod_source` trusts a root only while its
/// pod owns the volume, so an entry left after a release refuses nothing).
#[inline(always)]
pub fn record_published_root(pid_tgid: u64, ret: i64) {
    let Some(publish) = PUBLISHES.get_ptr(&pid_tgid) else { return };
    // SAFETY: this thread's own entry.
    let publish = unsafe { &*publish };
    // SAFETY: read-only lookup; removed only where this thread is the one in flight.
    if unsafe { PUBLISHING.get(&publish.root.volume) }.is_some_and(|thread| *thread == pid_tgid) {
        let _ = PUBLISHING.remove(&publish.root.volume);
    }
    if ret == 0 {
        match attached_root(publish) {
            Some((key, mount, whole_fs)) => {
                let recorded = PUBLISHED_ROOTS.insert(&key, &publish.root, 0).is_ok()
                    && PUBLISH_MOUNTS.insert(&publish.root.volume, &mount, 0).is_ok()
                    && super::open_guard::guard_device(&key, whole_fs);
                // Also after a failure: the root may be in before a later insert failed.
                super::directory_verdicts::forget_all();
                if recorded {
                    count(Counter::PublishedRootsRecorded);
                } else {
                    count(Counter::EnforceErrors);
                }
            }
            None => count(Counter::PublishedRootsMissed),
        }
    }
    let _ = PUBLISHES.remove(&pid_tgid);
}

/// The root (inode, device) of the mount `publish` attached, that mount (its `struct
/// mount *`), and whether its root is its filesystem's (a dentry that is its own parent):
/// the newest child of the
/// attach point's mount that sits on its mountpoint (the kernel appends each new child to
/// its parent's `mnt_mounts`).
#[inline(always)]
fn attached_root(publish: &PendingPublish) -> Option<(RootKey, u64, bool)> {
    let (cfg, tree) = (config()?, mount_tree_layout()?);
    let l = &cfg.layout;
    // container_of(vfsmount, struct mount, mnt)
    let parent_mount = (publish.parent_vfsmount as *const u8).wrapping_sub(l.mount_mnt as usize);
    let head = parent_mount.wrapping_add(tree.mount_mnt_mounts as usize);
    let mut node = read_field::<*const u8>(head, tree.list_head_prev)?;
    for _ in 0..MAX_NEWEST_CHILDREN {
        if node == head {
            return None;
        }
        let child = node.wrapping_sub(tree.mount_mnt_child as usize);
        if read_field::<*const u8>(child, l.mount_mnt_mountpoint)? as u64 == publish.mountpoint {
            let root = read_field::<*const u8>(child.wrapping_add(l.mount_mnt as usize), tree.vfsmount_mnt_root)?;
            let (ino, dev) = identity(l, root)?;
            let whole_fs = parent(l, root)? == root;
            return Some((RootKey { ino, dev, _pad: 0 }, child as u64, whole_fs));
        }
        node = read_field::<*const u8>(node, tree.list_head_prev)?;
    }
    None
}
