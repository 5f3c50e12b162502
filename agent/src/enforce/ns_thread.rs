//! Running a quarantine's work inside a mount namespace: `setns(CLONE_NEWNS)` moves only
//! the calling thread, so the work runs on a thread of its own. [`once`] starts one per
//! call (the syscall backends: a different namespace each time); a [`KeptThread`] stays in
//! the one namespace the agent watches, so that a quarantine there starts no thread (under
//! load a new thread waited up to 5 ms for its first turn on a core, bench 6c).

use std::{
    fs::File,
    sync::{Mutex, mpsc},
};

use nix::sched::{CloneFlags, setns, unshare};

use super::quarantine_error::QuarantineError;

/// Runs `work` on a new thread named `thread` inside the mount namespace `ns` (its file
/// and, for errors, its name), and returns what it returned as soon as it returns: the
/// thread's exit (up to 2 ms under load) is not waited for.
pub fn once<T: Send + 'static>(
    thread: &str,
    ns: File,
    ns_name: String,
    work: impl FnOnce() -> Result<T, QuarantineError> + Send + 'static,
) -> Result<T, QuarantineError> {
    let (done, result) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let _ = done.send(enter(&ns, ns_name).and_then(|()| work()));
        })
        .map_err(|_| QuarantineError::Thread)?;
    // A panic on the thread drops the sender: an error.
    result.recv().map_err(|_| QuarantineError::Thread)?
}

type Job = Box<dyn FnOnce() + Send>;

/// A thread kept inside one mount namespace, running one piece of work at a time; it ends
/// when this is dropped. Started at once (it inherits the creating thread's scheduling
/// policy: create it on the event loop's thread) and, after a failure, on next use.
#[derive(Debug)]
pub struct KeptThread {
    thread: String,
    ns: File,
    ns_name: String,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
}

impl KeptThread {
    pub fn new(thread: &str, ns: File, ns_name: String) -> Self {
        let kept = Self { thread: thread.to_owned(), ns, ns_name, jobs: Mutex::new(None) };
        // A failure here is met again, and reported, on first use.
        *kept.jobs.lock().unwrap_or_else(|e| e.into_inner()) = kept.start().ok();
        kept
    }

    /// Runs `work` on the thread and returns what it returned.
    pub fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, QuarantineError> + Send + 'static,
    ) -> Result<T, QuarantineError> {
        let (done, result) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = done.send(work());
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(|e| e.into_inner());
        let sender = match jobs.take() {
            Some(sender) => sender,
            None => self.start()?,
        };
        if sender.send(job).is_err() {
            return Err(QuarantineError::Thread); // it panicked: started again next time
        }
        *jobs = Some(sender);
        drop(jobs);
        result.recv().map_err(|_| {
            // The work panicked and took the thread with it.
            *self.jobs.lock().unwrap_or_else(|e| e.into_inner()) = None;
            QuarantineError::Thread
        })?
    }

    /// Starts the thread and waits until it is inside the namespace.
    fn start(&self) -> Result<mpsc::Sender<Job>, QuarantineError> {
        let ns = self.ns.try_clone().map_err(|e| QuarantineError::Namespace(self.ns_name.clone(), e))?;
        let ns_name = self.ns_name.clone();
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, entered) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(self.thread.clone())
            .spawn(move || {
                let inside = enter(&ns, ns_name);
                let ok = inside.is_ok();
                let _ = ready.send(inside);
                if ok {
                    for job in queue {
                        job();
                    }
                }
            })
            .map_err(|_| QuarantineError::Thread)?;
        entered.recv().map_err(|_| QuarantineError::Thread)??;
        Ok(jobs)
    }
}

/// Moves the calling thread into the mount namespace `ns`.
fn enter(ns: &File, ns_name: String) -> Result<(), QuarantineError> {
    // setns(CLONE_NEWNS) needs a thread that shares no fs state with the others.
    unshare(CloneFlags::CLONE_FS).map_err(|e| QuarantineError::Setns(ns_name.clone(), e))?;
    setns(ns, CloneFlags::CLONE_NEWNS).map_err(|e| QuarantineError::Setns(ns_name, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_namespace() -> (File, String) {
        let name = crate::sys::mountns::OWN_NAMESPACE.to_owned();
        (File::open(&name).unwrap(), name)
    }

    fn thread_id() -> Result<i64, QuarantineError> {
        // SAFETY: gettid takes no arguments.
        Ok(unsafe { libc::syscall(libc::SYS_gettid) })
    }

    #[test]
    fn a_kept_thread_runs_every_piece_of_work_on_the_same_thread_and_survives_a_panic() {
        if !crate::sys::test_skip::have_root("a_kept_thread_runs_every_piece_of_work_on_the_same_thread") {
            return;
        }
        let (ns, name) = own_namespace();
        let kept = KeptThread::new("vg-test-kept", ns, name);
        let first = kept.run(thread_id).unwrap();
        assert_eq!(kept.run(thread_id).unwrap(), first);
        assert!(matches!(
            kept.run(|| -> Result<(), QuarantineError> { panic!("work panicked") }),
            Err(QuarantineError::Thread)
        ));
        let after = kept.run(thread_id).unwrap();
        assert_ne!(after, first, "a new thread after the panic");
        assert_ne!(after, thread_id().unwrap());
    }

    #[test]
    fn a_namespace_that_cannot_be_entered_is_an_error_each_time_not_a_hang() {
        // Not a namespace file: setns fails with EINVAL (or EPERM without root).
        let file = File::open("/proc/self/status").unwrap();
        let kept = KeptThread::new("vg-test-bad", file, "/proc/self/status".into());
        for _ in 0..2 {
            assert!(matches!(kept.run(thread_id), Err(QuarantineError::Setns(..))));
        }
        let file = File::open("/proc/self/status").unwrap();
        assert!(matches!(once("vg-test-once", file, "x".into(), thread_id), Err(QuarantineError::Setns(..))));
    }
}
