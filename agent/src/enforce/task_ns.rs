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
    tasks_in_namespace(caller).next()
}

/// Every task [`open_namespace`] would take, the calling thread first, then the others
/// in `/proc`'s order, found lazily. A task can be in the namespace yet half gone: an
/// exiting task keeps its namespace a moment after its root is dropped, so its
/// `mountinfo` no longer opens; the caller then takes the next.
pub fn tasks_in_namespace(caller: &Caller) -> impl Iterator<Item = (PathBuf, File)> {
    let (tgid, tid, wanted) = (caller.tgid, caller.pid, u64::from(caller.mnt_ns));
    let own = PathBuf::from(format!("/proc/{tgid}/task/{tid}"));
    let open_if_in_namespace = move |task: PathBuf| -> Option<(PathBuf, File)> {
        let file = File::open(task.join("ns/mnt")).ok()?;
        let inode = file.metadata().ok()?.ino();
        (wanted == 0 || inode == wanted).then_some((task, file))
    };
    // Without the namespace's number (an event that could not read it) only the caller
    // itself is known to be in it.
    let others = (wanted != 0).then(|| {
        let skip = own.clone();
        fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            // Processes only: `self` and `thread-self` name the agent's own again.
            .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit())))
            .filter_map(|process| fs::read_dir(process.path().join("task")).ok())
            .flat_map(|tasks| tasks.flatten().map(|t| t.path()))
            .filter(move |task| *task != skip)
    });
    std::iter::once(own).chain(others.into_iter().flatten()).filter_map(open_if_in_namespace)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use nix::sched::{CloneFlags, unshare};

    use super::*;

    /// A thread of this process alone in a new mount namespace, until `done` is dropped.
    fn thread_in_new_namespace() -> (u32, u32, mpsc::Sender<()>) {
        let (ready, started) = mpsc::channel();
        let (done, wait) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            unshare(CloneFlags::CLONE_NEWNS).unwrap();
            let inode = fs::metadata("/proc/thread-self/ns/mnt").unwrap().ino() as u32;
            ready.send((nix::unistd::gettid().as_raw() as u32, inode)).unwrap();
            let _ = wait.recv();
        });
        let (tid, inode) = started.recv().unwrap();
        (tid, inode, done)
    }

    #[test]
    fn a_caller_gone_is_stood_in_for_by_another_task_in_its_namespace_and_only_that_one() {
        if !crate::sys::test_skip::have_root("a_caller_gone_is_stood_in_for_by_another_task") {
            return;
        }
        let (tid, mnt_ns, _done) = thread_in_new_namespace();
        // pid_max is at most 2^22: this tid names no task.
        let gone = Caller { pid: 1 << 23, tgid: 1 << 23, mnt_ns, ..Caller::default() };
        let found: Vec<PathBuf> = tasks_in_namespace(&gone).map(|(task, _)| task).collect();
        assert_eq!(found, [PathBuf::from(format!("/proc/{}/task/{tid}", std::process::id()))]);
        // Without the namespace's number nothing stands in for a caller gone.
        assert!(open_namespace(&Caller { mnt_ns: 0, ..gone }).is_none());
    }

    #[test]
    fn a_live_caller_comes_first_and_is_not_found_twice() {
        if !crate::sys::test_skip::have_root("a_live_caller_comes_first_and_is_not_found_twice") {
            return;
        }
        let (tid, mnt_ns, _done) = thread_in_new_namespace();
        let pid = std::process::id();
        let caller = Caller { pid: tid, tgid: pid, mnt_ns, ..Caller::default() };
        let found: Vec<PathBuf> = tasks_in_namespace(&caller).map(|(task, _)| task).collect();
        assert_eq!(found, [PathBuf::from(format!("/proc/{pid}/task/{tid}"))]);
    }
}
