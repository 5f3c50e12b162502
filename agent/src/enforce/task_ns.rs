//! Finding a live task in the mount namespace a syscall was made in. The kernel records
//! the namespace's inode with each event; mount(8) has usually exited by the time we
//! look, so any task still in that namespace will do.

use std::{
    fs::{self, File},
    os::unix::fs::MetadataExt,
    path::PathBuf,
};

use crate::kernel::decode::Caller;

/// `/proc/<pid>/task/<tid>` of a live task in the caller's mount namespace (its `root`
/// resolves paths in it), with that namespace's file already open: once open it stays
/// valid, whereas a task found alive (the mounting process itself, most often) can exit
/// before its `ns/mnt` is opened. Such a task is skipped and the search goes on.
pub fn open_namespace(caller: &Caller) -> Option<(PathBuf, File)> {
    let (tgid, tid, wanted) = (caller.tgid, caller.pid, u64::from(caller.mnt_ns));
    let open_if_in_namespace = |task: PathBuf| -> Option<(PathBuf, File)> {
        let file = File::open(task.join("ns/mnt")).ok()?;
        let inode = file.metadata().ok()?.ino();
        (wanted == 0 || inode == wanted).then_some((task, file))
    };
    if let Some(own) = open_if_in_namespace(PathBuf::from(format!("/proc/{tgid}/task/{tid}"))) {
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
        .find_map(open_if_in_namespace)
}
