//! Background work: CPU-heavy passes (judging every volume, building views, preparing
//! facts, reading the mount table) run on tokio's blocking pool at a lower scheduling
//! priority, so on a busy node the event loop's thread, which stays at the agent's own
//! priority, gets a core first when an event arrives.

use std::cell::Cell;

/// The nice value of a thread doing background work (the agent's own is usually 0).
pub const BACKGROUND_NICE: i32 = 10;

thread_local! {
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` on the blocking pool at [`BACKGROUND_NICE`].
pub fn spawn<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> tokio::task::JoinHandle<T> {
    tokio::task::spawn_blocking(move || {
        lower_this_thread();
        work()
    })
}

/// Lowers the calling thread's priority, once per thread. On Linux `setpriority` with a
/// thread ID affects that thread only. A failure (a seccomp profile refusing it) leaves
/// the thread as it was: slower reactions under load, nothing worse.
fn lower_this_thread() {
    LOWERED.with(|lowered| {
        if lowered.replace(true) {
            return;
        }
        // SAFETY: gettid and setpriority take no pointers.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE);
        }
    });
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn background_work_runs_at_a_lower_priority() {
        let nice = super::spawn(|| {
            // SAFETY: as above.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::syscall(libc::SYS_gettid) as libc::id_t) }
        });
        assert_eq!(nice.await.unwrap(), super::BACKGROUND_NICE);
    }
}
