//! The event loop's own thread and runtime. The loop's file descriptors (the ring buffer or
//! the mount notices) and timers are registered with a runtime that runs the loop alone,
//! on its own thread, which waits in that runtime's `epoll_wait`: a kernel record wakes
//! the loop's thread itself. On the shared runtime a worker thread woke first and then
//! woke the loop, one more thread hop per record: an owner's bind+umount cycle cost ~6 µs
//! more on this project's 2-core machine. Every other task runs on the shared runtime;
//! nothing else ever runs on the loop's thread.

use std::{future::Future, io};

use tokio::runtime::{Builder, Runtime};

/// The name of the loop's thread (seen in `top -H`, `perf`).
pub const LOOP_THREAD: &str = "volguard-loop";

/// Only ever `None` while being dropped.
pub(super) struct LoopRuntime(Option<Runtime>);

impl LoopRuntime {
    pub(super) fn new() -> io::Result<Self> {
        Builder::new_current_thread().enable_all().build().map(|runtime| Self(Some(runtime)))
    }

    fn runtime(&self) -> &Runtime {
        self.0.as_ref().expect("a runtime until dropped")
    }

    /// Calls `make` with this runtime as the current one: the file descriptors and timers
    /// it registers are then driven by the loop's thread.
    pub(super) fn register<T>(&self, make: impl FnOnce() -> T) -> T {
        let _current = self.runtime().enter();
        make()
    }

    /// Runs `future` on the loop's thread until it ends, blocking the caller meanwhile (the
    /// `block_on` of the shared runtime, which runs nothing else).
    pub(super) fn run<F>(self, future: F) -> io::Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name(LOOP_THREAD.into())
                .spawn_scoped(scope, move || self.runtime().block_on(future))?;
            Ok(thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
        })
    }
}

/// Without waiting: the loop's runtime holds no task but the loop, and it may be dropped
/// inside the shared runtime's asynchronous context (start-up failing after it was made),
/// where a blocking shutdown panics.
impl Drop for LoopRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_runs_on_its_own_thread_with_what_was_registered_for_it() {
        let shared = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let loop_runtime = LoopRuntime::new().unwrap();
        // A timer registered for the loop, as the feed's fds are.
        let sleep = loop_runtime.register(|| tokio::time::sleep(std::time::Duration::from_millis(1)));
        let tasks = shared.handle().clone();
        let (thread, task_thread) = shared.block_on(async move {
            loop_runtime
                .run(async move {
                    sleep.await;
                    let on_tasks = tasks.spawn(async { std::thread::current().name().map(str::to_owned) });
                    (std::thread::current().name().map(str::to_owned), on_tasks.await.unwrap())
                })
                .unwrap()
        });
        assert_eq!(thread.as_deref(), Some(LOOP_THREAD));
        assert_ne!(task_thread.as_deref(), Some(LOOP_THREAD), "spawned work runs on the shared runtime");
    }

    #[test]
    fn a_loop_runtime_that_never_ran_may_be_dropped_inside_the_shared_runtime() {
        let shared = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().unwrap();
        shared.block_on(async { drop(LoopRuntime::new().unwrap()) });
    }
}
