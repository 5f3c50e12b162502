//! Quarantine (no BPF LSM): a conflicting publish has already succeeded when we see its
//! syscall exit, so detach it at once and mask the target with an empty read-only tmpfs:
//! the second pod can write neither into the volume nor, silently, onto the node's disk.
//!
//! It is done in the mount namespace where the mount was made, found by the inode the
//! kernel recorded with the event: the mounting thread's, or, since mount(8) has usually
//! exited by now, any live task's in that namespace. If none is left, the namespace and
//! its mounts are gone; a copy propagated into the agent's own namespace is handled there.
//! A mount notification names no caller, but it comes from the one namespace the agent
//! watches, which it holds open: the quarantine acts there.

use std::{
    fs::File,
    path::{Path, PathBuf},
    time::Instant,
};

use nix::{
    errno::Errno,
    mount::{MntFlags, MsFlags, mount, umount2},
};

use super::{
    ns_thread::{self, KeptThread},
    task_ns::open_namespace,
};
use crate::kernel::decode::Caller;
use crate::{
    model::mounts::MASK_SOURCE,
    node_files::mount_table::MountTable,
    sys::{mountns::namespace_of, statmount::unique_mount_id},
};

/// Most mounts stacked on one target that we detach.
const MAX_STACKED: usize = 16;

pub use super::quarantine_error::QuarantineError;

/// What was done, for the log and the metrics.
#[derive(Debug)]
pub struct Quarantined {
    /// Mounts detached from the target.
    pub detached: usize,
    /// Their unique mount ids, where the kernel gives them (Linux 6.8): a mount notice
    /// naming one of these is of the agent's own detach, not an unpublish.
    pub detached_ids: Vec<u64>,
    /// The mask's unique mount id, where the kernel gives it.
    pub mask_id: Option<u64>,
    /// The target was gone before the mask: kubelet removes a publish target when the
    /// driver's publish fails, as it does once the bind it made is detached. Nothing is
    /// masked; kubelet's retry is quarantined again.
    pub target_gone: bool,
    /// The namespace file it was done in.
    pub namespace: String,
    /// Microseconds from the call to the mask being in place.
    pub micros: u128,
}

/// A mount namespace the agent holds open (the one it watches for mount notifications),
/// with a thread kept inside it for the quarantines there.
#[derive(Debug)]
pub struct HeldNamespace {
    /// Its file's path, for messages.
    pub name: String,
    thread: KeptThread,
}

impl HeldNamespace {
    pub fn new(name: String, file: File) -> Self {
        Self { thread: KeptThread::new("vg-quarantine", file, name.clone()), name }
    }

    /// Detaches the mount with the unique id `mnt_id` from `point` in this namespace if it
    /// is still the top mount there (never one stacked since). 1 if detached, else 0.
    pub fn detach(&self, mnt_id: u64, point: PathBuf) -> Result<usize, QuarantineError> {
        let namespace = self.name.clone();
        self.thread.run(move || {
            if unique_mount_id(&point).ok().flatten() != Some(mnt_id) {
                return Ok(0);
            }
            match umount2(&point, MntFlags::MNT_DETACH) {
                Ok(()) => Ok(1),
                Err(Errno::EINVAL | Errno::ENOENT) => Ok(0),
                Err(source) => {
                    Err(QuarantineError::Detach { target: point.display().to_string(), namespace, detached: 0, source })
                }
            }
        })
    }
}

/// Where a conflicting mount was made.
#[derive(Clone, Copy, Debug)]
pub enum MadeIn<'a> {
    /// The namespace of the process that made the syscall (its inode, from the event).
    Caller(&'a Caller),
    /// The watched namespace the notification came from.
    Watched(&'a HeldNamespace),
    /// The namespace whose mount table (`/proc/<pid>/mountinfo`) showed the publish.
    Table(&'a Path),
}

/// Detaches every mount on `target` in the namespace it was mounted in, and masks it
/// read-only.
pub fn quarantine(made_in: MadeIn<'_>, target: PathBuf) -> Result<Quarantined, QuarantineError> {
    let started = Instant::now();
    let caller = match made_in {
        MadeIn::Caller(caller) => caller,
        MadeIn::Watched(held) => {
            let namespace = held.name.clone();
            let ids = held.thread.run(move || detach_and_mask(&target, namespace))?;
            return Ok(Quarantined::new(ids, held.name.clone(), started));
        }
        MadeIn::Table(mountinfo) => {
            let (name, file) = open_table_namespace(mountinfo)?;
            let namespace = name.clone();
            let ids =
                ns_thread::once("vg-quarantine", file, name.clone(), move || detach_and_mask(&target, namespace))?;
            return Ok(Quarantined::new(ids, name, started));
        }
    };
    let (namespace, file) = match find_namespace(caller) {
        Some(found) => found,
        None if MountTable::read(Path::new("/proc/self/mountinfo")).is_ok_and(|t| t.is_mount_point(&target)) => {
            let own = "/proc/self/ns/mnt".to_owned();
            let file = File::open(&own)
                .map_err(|e| QuarantineError::Setns(own.clone(), Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
            (own, file)
        }
        None => {
            return Err(QuarantineError::Gone {
                mnt_ns: caller.mnt_ns,
                tgid: caller.tgid,
                target: target.display().to_string(),
            });
        }
    };
    let name = namespace.clone();
    let ids = ns_thread::once("vg-quarantine", file, namespace.clone(), move || detach_and_mask(&target, name))?;
    Ok(Quarantined::new(ids, namespace, started))
}

impl Quarantined {
    fn new(ids: MountIds, namespace: String, started: Instant) -> Self {
        let detached = ids.detached.len();
        let detached_ids = ids.detached.into_iter().flatten().collect();
        let micros = started.elapsed().as_micros();
        Self { detached, detached_ids, mask_id: ids.mask, target_gone: ids.target_gone, namespace, micros }
    }
}

/// The unique ids of the mounts a quarantine detached and of its mask (`None` where the
/// kernel does not give them), and whether the target was gone before the mask.
struct MountIds {
    detached: Vec<Option<u64>>,
    mask: Option<u64>,
    target_gone: bool,
}

/// Detaches every mount stacked on `target`, then mounts the mask; run inside the mount
/// namespace named `namespace` (for errors).
fn detach_and_mask(target: &Path, namespace: String) -> Result<MountIds, QuarantineError> {
    let text = || target.display().to_string();
    let mut detached = Vec::new();
    while detached.len() < MAX_STACKED {
        // The mount on top is the one umount2 detaches.
        let id = unique_mount_id(target).ok().flatten();
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => detached.push(id),
            Err(Errno::EINVAL) => break, // no longer a mount point
            // Removed by kubelet once the driver's publish failed (its remount of the bind
            // detached here): nothing is left to detach or to mask.
            Err(Errno::ENOENT) => return Ok(MountIds { detached, mask: None, target_gone: true }),
            Err(source) => {
                return Err(QuarantineError::Detach { target: text(), namespace, detached: detached.len(), source });
            }
        }
    }
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    match mount(Some(MASK_SOURCE), target, Some("tmpfs"), flags, Some("size=4k,mode=0555")) {
        Ok(()) => Ok(MountIds { detached, mask: unique_mount_id(target).ok().flatten(), target_gone: false }),
        Err(Errno::ENOENT) => Ok(MountIds { detached, mask: None, target_gone: true }),
        Err(source) => Err(QuarantineError::Mask { target: text(), source }),
    }
}

/// A mask [`unmask`] removed.
#[derive(Debug)]
pub struct MaskRemoved {
    /// The mask's unique mount id, where the kernel gives it (see [`Quarantined`]).
    pub mnt_id: Option<u64>,
}

/// Removes volguard's mask from `target` in the namespace of the mount table `mountinfo`,
/// if the mask is what is mounted on top there (never anyone else's mount). `None` if the
/// target's top mount was not a mask (or nothing was mounted).
pub fn unmask(mountinfo: &Path, target: &Path) -> Result<Option<MaskRemoved>, QuarantineError> {
    let (ns_name, file) = open_table_namespace(mountinfo)?;
    let target = target.to_owned();
    ns_thread::once("vg-unmask", file, ns_name.clone(), move || {
        // This thread's own view, now the namespace's.
        let table = MountTable::read(Path::new("/proc/thread-self/mountinfo"))
            .map_err(|e| QuarantineError::Namespace(ns_name, e))?;
        let top = table.mounts.iter().rev().find(|m| m.mount_point == target);
        if top.is_none_or(|m| m.source != MASK_SOURCE) {
            return Ok(None);
        }
        let mnt_id = unique_mount_id(&target).ok().flatten();
        umount2(&target, MntFlags::MNT_DETACH)
            .map(|()| Some(MaskRemoved { mnt_id }))
            .map_err(|source| QuarantineError::Unmask { target: target.display().to_string(), source })
    })
}

/// The mount namespace whose table `mountinfo` is: its path, and the open file.
fn open_table_namespace(mountinfo: &Path) -> Result<(String, File), QuarantineError> {
    let ns_path = namespace_of(mountinfo);
    let ns_name = ns_path.display().to_string();
    let file = File::open(&ns_path).map_err(|e| QuarantineError::Namespace(ns_name.clone(), e))?;
    Ok((ns_name, file))
}

/// An open mount-namespace file of the caller's namespace, and its path.
fn find_namespace(caller: &Caller) -> Option<(String, File)> {
    let (task, file) = open_namespace(caller)?;
    Some((task.join("ns/mnt").display().to_string(), file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_kubelet_removed_is_gone_not_an_error_and_nothing_is_mounted_there() {
        if !crate::sys::test_skip::have_root("a_target_kubelet_removed_is_gone_not_an_error") {
            return;
        }
        // kubelet removes a failed publish's target; umount2 and mount then say ENOENT.
        let target = std::env::temp_dir().join(format!("volguard-test-removed-target-{}", std::process::id()));
        assert!(!target.exists());
        let ids = detach_and_mask(&target, "this process's".into()).unwrap();
        assert!(ids.target_gone && ids.detached.is_empty() && ids.mask.is_none());
        assert!(!target.exists(), "nothing was made where the target was");
    }
}
