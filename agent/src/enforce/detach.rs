//! Mounts outside kubelet's publish that reach an owned volume: the caller's mount table,
//! read from the namespace the syscall was made in, and the detach of such mounts there.
//! Unlike a quarantine there is no mask: the mount point is no volume path of a pod, and
//! what was under it (an empty directory of a hostPath, say) shows again.

use std::path::{Path, PathBuf};

use nix::{
    errno::Errno,
    mount::{MntFlags, umount2},
};

use super::{ns_thread, quarantine_error::QuarantineError, task_ns::tasks_in_namespace};
use crate::{kernel::decode::Caller, node_files::mount_table::MountTable};

/// The mount table of the namespace `caller` made its syscall in (through a live task
/// there, `/proc/<pid>/task/<tid>`; paths as that task sees them) and that task, or `None`
/// if no task is left in it.
pub fn caller_table(caller: &Caller) -> Option<(PathBuf, MountTable)> {
    live_table(caller).map(|(task, _, table)| (task, table))
}

/// A live task in `caller`'s namespace, that namespace's file, and the table as the task
/// sees it. The task found first (the caller itself, most often) can exit before its table
/// is read: then the next task in the namespace is taken.
fn live_table(caller: &Caller) -> Option<(PathBuf, std::fs::File, MountTable)> {
    tasks_in_namespace(caller)
        .find_map(|(task, file)| MountTable::read(&task.join("mountinfo")).ok().map(|table| (task, file, table)))
}

/// The filesystem (`major:minor`, as mountinfo writes it) of the top mount at `path` as the
/// caller sees it (through its root), or `None` if the caller is gone or the path is not
/// there.
pub fn device_at(caller: &Caller, path: &Path) -> Option<String> {
    let relative = path.strip_prefix("/").ok()?;
    // The calling thread's root: a thread can have a mount namespace of its own (a setns
    // or an unshare in one thread), in which its process's main thread sees another mount.
    let thread = PathBuf::from(format!("/proc/{}/task/{}/root", caller.tgid, caller.pid));
    let root = if thread.exists() { thread } else { PathBuf::from(format!("/proc/{}/root", caller.tgid)) };
    let dev = nix::sys::stat::stat(&root.join(relative)).ok()?.st_dev;
    Some(format!("{}:{}", nix::sys::stat::major(dev), nix::sys::stat::minor(dev)))
}

/// Detaches, in `caller`'s namespace, each mount `(mount id, mount point)` that is still the
/// top mount at its point (never another mount stacked there since), deepest first. Returns
/// how many were detached: 0 when none is where it was found (a container's runtime moves
/// its whole tree when it pivots into the container's root; its next mount call finds them
/// where they are then).
pub fn detach(caller: &Caller, mounts: Vec<(i32, PathBuf)>) -> Result<usize, QuarantineError> {
    // Checked through a live task's own table here: inside a container's namespace `/proc`
    // is the container's, where this thread does not exist.
    let Some((task, file, table)) = live_table(caller) else {
        return Err(QuarantineError::Gone { mnt_ns: caller.mnt_ns, tgid: caller.tgid, target: describe(&mounts) });
    };
    let name = task.join("ns/mnt").display().to_string();
    let top_id = |point: &Path| table.mounts.iter().rev().find(|m| m.mount_point == point).map(|m| m.id);
    let mut points: Vec<PathBuf> =
        mounts.into_iter().filter(|(id, point)| top_id(point) == Some(*id)).map(|(_, point)| point).collect();
    if points.is_empty() {
        return Ok(0);
    }
    points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    ns_thread::once("vg-detach", file, name.clone(), move || {
        let mut detached = 0;
        for point in points {
            match umount2(&point, MntFlags::MNT_DETACH) {
                Ok(()) => detached += 1,
                Err(Errno::EINVAL | Errno::ENOENT) => {}
                Err(source) => {
                    let target = point.display().to_string();
                    return Err(QuarantineError::Detach { target, namespace: name, detached, source });
                }
            }
        }
        Ok(detached)
    })
}

fn describe(mounts: &[(i32, PathBuf)]) -> String {
    mounts.iter().map(|(_, p)| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
