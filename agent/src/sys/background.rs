//! Background work: CPU-heavy passes (judging every volume, building views, preparing
//! facts, reading the mount table) run on tokio's blocking pool under `SCHED_IDLE`, so
//! the event loop's thread and the quarantine's, which keep the agent's own policy, take
//! the core from them the moment an event arrives (a niced thread only gets its turn
//! at the end of the running slice: 1 to 5 ms on this host, measured by bench 6c).
//!
//! `SCHED_IDLE` cannot starve that work on a busy node: in the agent's pod the threads
//! compete with the pod's own threads only, the pod's cgroup with the other pods by its
//! CPU weight. Where the policy is refused (a seccomp profile), the thread is niced
//! instead.

use std::{cell::Cell, time::Duration};

/// The nice value of a background thread where `SCHED_IDLE` is refused.
pub const BACKGROUND_NICE: i32 = 10;

/// A pass redone on every change (the debug view, the CSI judgement) rests this many
/// times its own duration before the next, whatever waits: under a storm of changes it
/// takes at most a fifth of a core, the changes of the rest coalesce into one pass, and
/// its result lags by at most five passes. On 10,000 volumes a view took 13–29 ms and a
/// judgement 66 ms; redone back to back during a quarantine storm they kept a core busy,
/// faulting in ~60,000 fresh pages a second, and an event's wake-up could wait behind one
/// of them in the kernel (bench 6c). A small node's passes take microseconds: no lag.
const REST_PER_WORK: u32 = 4;

/// The longest rest, however slow a pass was.
const MAX_REST: Duration = Duration::from_secs(2);

/// How long a repeated pass that took `work` rests before the next (see [`REST_PER_WORK`]).
pub fn rest_after(work: Duration) -> Duration {
    work.saturating_mul(REST_PER_WORK).min(MAX_REST)
}

thread_local! {
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` on the blocking pool at the background priority.
pub fn spawn<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> tokio::task::JoinHandle<T> {
    spawn_on(&tokio::runtime::Handle::current(), work)
}

/// Runs `work` on `runtime`'s blocking pool at the background priority (from the event
/// loop's thread, whose own runtime runs the loop alone).
pub fn spawn_on<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    work: impl FnOnce() -> T + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    runtime.spawn_blocking(move || {
        lower_this_thread();
        work()
    })
}

/// Lowers the calling thread's priority, once per thread (on Linux both calls affect the
/// given thread only). A failure of both leaves the thread as it was: slower reactions
/// under load, nothing worse.
fn lower_this_thread() {
    LOWERED.with(|lowered| {
        if lowered.replace(true) {
            return;
        }
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: gettid takes no arguments; sched_setscheduler reads `param`, which lives
        // across the call; setpriority takes no pointers.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::pid_t;
            if libc::sched_setscheduler(tid, libc::SCHED_IDLE, &param) != 0 {
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKGROUND_NICE);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_repeated_pass_rests_four_times_its_duration_up_to_a_bound() {
        use std::time::Duration;
        assert_eq!(super::rest_after(Duration::from_micros(50)), Duration::from_micros(200));
        assert_eq!(super::rest_after(Duration::from_millis(18)), Duration::from_millis(72));
        assert_eq!(super::rest_after(Duration::from_secs(5)), super::MAX_REST);
        assert_eq!(super::rest_after(Duration::MAX), super::MAX_REST, "no overflow");
    }

    #[tokio::test]
    async fn background_work_runs_at_a_lower_priority() {
        let (policy, nice) = super::spawn(|| {
            // SAFETY: as above; 0 is the calling thread.
            unsafe { (libc::sched_getscheduler(0), libc::getpriority(libc::PRIO_PROCESS, 0)) }
        })
        .await
        .unwrap();
        assert!(policy == libc::SCHED_IDLE || nice == super::BACKGROUND_NICE, "policy {policy}, nice {nice}");
        // SAFETY: as above.
        let here = unsafe { libc::sched_getscheduler(0) };
        assert_eq!(here, libc::SCHED_OTHER, "the test's own thread keeps its policy");
    }
}
