//! The open guard's answers per directory: which published root lies at or above it.
//!
//! Without them every open on a filesystem that holds a directory volume walks up to that
//! filesystem's root (the node's root filesystem, for csi-driver-host-path). An answer is
//! kept under the directory's identity with the epoch it was found at, and used while the
//! epoch is unchanged. The epoch changes when a root is recorded (here at a publish's exit,
//! or seeded by the agent) and when a directory moves on a guarded filesystem (`d_move`,
//! `d_exchange`: a rename changes the ancestors of everything below the directory). A
//! directory's own inode number could name another directory after an `rmdir`: its
//! `i_generation` is part of the key. Hard links cannot make a directory's ancestors
//! ambiguous (directories have none).
//!
//! match-proto: void d_move(struct dentry *dentry, struct dentry *target)
//! match-proto: void d_exchange(struct dentry *dentry1, struct dentry *dentry2)

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::fexit, programs::FExitContext};
use volguard_common::{
    counters::Counter,
    enforce::{PublishedRoot, RootKey},
    open_guard::{DirectoryKey, DirectoryVerdict, Epoch, MAX_OPEN_DEPTH, S_IFDIR, S_IFMT, VerdictEpoch},
};

use super::{
    enforce::{DentryReads as _, WalkStopped, config, published_root_above},
    guard_reads::{self, GuardReads},
};
use crate::{
    helpers::count,
    maps::{DIRECTORY_VERDICTS, GUARDED_DEVICES, PUBLISHED_ROOTS, VERDICT_EPOCH},
};

/// The published root at or above directory `dir` of filesystem `dev`: the kept answer
/// where it is of this epoch, else a walk up, whose answer is kept.
#[inline(always)]
pub fn root_above_directory(dir: *const u8, dev: u32) -> Option<&'static PublishedRoot> {
    // Read before the walk: an answer found while a root is added or a directory moves is
    // kept under the epoch before the change, so it is never used.
    let epoch = epoch()?;
    let key = directory_key(dir, dev)?;
    // SAFETY: read-only lookup; the value is plain data.
    if let Some(kept) = unsafe { DIRECTORY_VERDICTS.get(&key) }
        && kept.epoch == epoch
    {
        if kept.root.ino == 0 {
            return None;
        }
        // A root removed since (its publish ended) is walked past again.
        // SAFETY: read-only lookup.
        if let Some(root) = unsafe { PUBLISHED_ROOTS.get(&kept.root) } {
            return Some(root);
        }
    }
    match published_root_above::<MAX_OPEN_DEPTH>(&GuardReads, dir, dev) {
        Ok(found) => {
            let root = found.map_or(RootKey { ino: 0, dev, _pad: 0 }, |(key, _)| key);
            let _ = DIRECTORY_VERDICTS.insert(&key, &DirectoryVerdict { epoch, root }, 0);
            found.map(|(_, root)| root)
        }
        Err(WalkStopped::TooDeep) => {
            count(Counter::OpensTooDeep);
            None
        }
        Err(WalkStopped::Unreadable) => None,
    }
}

/// Makes every kept answer stale.
#[inline(always)]
pub fn forget_all() {
    if let Some(slot) = VERDICT_EPOCH.get_ptr_mut(VerdictEpoch::Kernel as u32) {
        // SAFETY: helper without preconditions.
        let now = unsafe { bpf_ktime_get_ns() };
        // SAFETY: a map value that lives as long as the map. Racing writers each write a
        // time later than any epoch read before their change: whichever wins, it is new.
        unsafe { *slot = now };
    }
}

/// The epoch slots now.
#[inline(always)]
fn epoch() -> Option<Epoch> {
    let kernel = *VERDICT_EPOCH.get(VerdictEpoch::Kernel as u32)?;
    let agent = *VERDICT_EPOCH.get(VerdictEpoch::Agent as u32)?;
    Some(Epoch { kernel, agent })
}

#[inline(always)]
fn directory_key(dir: *const u8, dev: u32) -> Option<DirectoryKey> {
    let ino = GuardReads.inode_number(dir)?;
    let i_generation = guard_reads::generation(guard_reads::inode(dir)?)?;
    Some(DirectoryKey { ino, dev, i_generation })
}

/// After a rename: a directory that moved on a guarded filesystem stales every answer.
#[fexit(function = "d_move")]
pub fn d_move_forget_verdicts(ctx: FExitContext) -> u32 {
    forget_if_moved_directory(ctx.arg(0));
    0
}

/// After `RENAME_EXCHANGE`: either dentry may be a directory (both are on one filesystem).
#[fexit(function = "d_exchange")]
pub fn d_exchange_forget_verdicts(ctx: FExitContext) -> u32 {
    if !forget_if_moved_directory(ctx.arg(0)) {
        forget_if_moved_directory(ctx.arg(1));
    }
    0
}

/// Forgets every answer if `dentry` is a directory on a filesystem that holds directory
/// volumes. Renames of files (the common case: a write to a temporary name, then a
/// rename) keep them: a file's answer is its directory's.
#[inline(always)]
fn forget_if_moved_directory(dentry: *const u8) -> bool {
    if !guard_reads::layout_set() || config().is_none() {
        return false;
    }
    let Some(dev) = guard_reads::device(dentry) else { return false };
    // SAFETY: read-only lookup.
    if !unsafe { GUARDED_DEVICES.get(&dev) }.is_some_and(|device| device.directory_roots != 0) {
        return false;
    }
    // A read that fails is taken for a directory: forgetting too much is safe.
    let mode = guard_reads::inode(dentry).and_then(guard_reads::mode).unwrap_or(S_IFDIR);
    if mode & S_IFMT != S_IFDIR {
        return false;
    }
    forget_all();
    true
}
