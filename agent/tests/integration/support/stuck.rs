//! Bounded waits for what a test cannot interrupt (a syscall in the test's namespace
//! thread, a forked pod process, the agent's shutdown): past the limit the test fails
//! with where each stuck thread is in the kernel, instead of hanging its VM boot until
//! the harness kills it with nothing to read. And what a failed wait for the agent shows
//! besides its lines: its kernel counters.

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use nix::{
    sys::wait::{WaitPidFlag, WaitStatus, waitpid},
    unistd::Pid,
};

/// How long one call in the test's namespace, or one pod process, may take (the VM is
/// slow; nothing a test does there takes more than seconds).
pub const CALL_LIMIT: Duration = Duration::from_secs(120);

/// How long the agent may take to exit after SIGTERM.
pub const STOP_LIMIT: Duration = Duration::from_secs(30);

/// Each thread of `pid` (or only `tid`): its name, state, wait channel and kernel stack.
pub fn kernel_stacks(pid: u32, tid: Option<u32>) -> String {
    let tasks = Path::new("/proc").join(pid.to_string()).join("task");
    let tids: Vec<String> = match tid {
        Some(tid) => vec![tid.to_string()],
        None => match std::fs::read_dir(&tasks) {
            Ok(entries) => entries.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned())).collect(),
            Err(e) => return format!("({}: {e})", tasks.display()),
        },
    };
    let mut out = String::new();
    for tid in tids {
        let read =
            |file: &str| std::fs::read_to_string(tasks.join(&tid).join(file)).unwrap_or_else(|e| format!("({e})"));
        let state = read("stat").rsplit(')').next().and_then(|s| s.split_whitespace().next()).unwrap_or("?").to_owned();
        let _ = writeln!(out, "thread {tid} ({}) state {state} wchan {}:", read("comm").trim(), read("wchan").trim());
        for line in read("stack").lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// Polls `done` every 20 ms for at most `limit`; past it, kills `pid` and fails the test
/// with `what`, where each of `pid`'s threads was in the kernel, and what `after_kill`
/// adds (it may reap the process first).
pub fn poll_until<T>(
    pid: u32,
    what: &str,
    limit: Duration,
    mut done: impl FnMut() -> Option<T>,
    after_kill: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(result) = done() {
            return result;
        }
        if Instant::now() >= deadline {
            let stacks = kernel_stacks(pid, None);
            let _ = nix::sys::signal::kill(Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            panic!("{what}: still running after {limit:?}; where it was:\n{stacks}{}", after_kill());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for `child` to exit, at most `limit` (see [`poll_until`]).
pub fn wait_child(child: Pid, what: &str, limit: Duration) -> WaitStatus {
    let exited = || match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => None,
        Ok(status) => Some(status),
        Err(e) => panic!("{what}: waitpid: {e}"),
    };
    let reap = || {
        let _ = waitpid(child, None);
        String::new()
    };
    poll_until(child.as_raw() as u32, what, limit, exited, reap)
}

/// The kernel programs' counters of the agent that printed `lines` (lost events, failed
/// inserts, exits without an entry), read from its metrics listener without waiting: what
/// a missed event left behind, for a failed wait's message.
pub fn kernel_counters(lines: &[String]) -> String {
    let prefix = "metrics on http://";
    let address = lines.iter().find_map(|l| Some(l.split(prefix).nth(1)?.trim().to_owned()));
    let Some(address) = address else { return "(no metrics listener yet)".into() };
    let Ok(socket) = address.parse() else { return format!("(metrics address {address}?)") };
    match volguard::cli::client::get(socket, "/metrics", Duration::from_secs(5)) {
        Ok(response) => {
            let counters = response.body.lines().filter(|l| l.starts_with("volguard_kernel_"));
            counters.collect::<Vec<_>>().join("\n")
        }
        Err(e) => format!("(GET /metrics: {e})"),
    }
}
