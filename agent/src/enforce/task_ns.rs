//! Finding a live task in the mount namespace a syscall was made in. The kernel records
//! the namespace's inode with each event; mount(8) has usually exited by the time we
//! look, so any task still in that namespace will do.

use std::{fs, os::unix::fs::MetadataExt, path::PathBuf};

use crate::kernel::decode::Caller;

/// `/proc/<pid>/task/<tid>` of a live task in the caller's mount namespace: its `ns/mnt`
/// enters the namespace, its `root` resolves paths in it.
pub fn task_in_namespace(caller: &Caller) -> Option<PathBuf> {
    let (tgid, tid, wanted) = (caller.tgid, caller.pid, u64::from(caller.mnt_ns));
    let in_namespace =
        |task: &PathBuf| fs::metadata(task.join("ns/mnt")).is_ok_and(|m| wanted == 0 || m.ino() == wanted);
    let own = PathBuf::from(format!("/proc/{tgid}/task/{tid}"));
    if in_namespace(&own) {
        return Some(own);
    }
    if wanted == 0 {
        return None;
    }
    fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|process| fs::read_dir(process.path().join("task")).ok())
        .flat_map(|tasks| tasks.flatten().map(|t| t.path()))
        .find(in_namespace)
}
