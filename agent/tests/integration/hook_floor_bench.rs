//! Benchmark 9f of `cargo xtask bench`, in the VM with BPF LSM: what the `file_open` hook
//! costs an open before any guard reads anything, as a BPF LSM program and, once more, as
//! an fmod_ret program on `security_file_open`. The rows of 9 include it; these rows tell
//! the hook's share from the open guard's.

use volguard::kernel::loader::{self, LoadedObject, SecurityHooks};

use crate::syscall_bench::{Alternated, calibrate, open_close_loop, pairs, report_against};

/// Pairs of open+close loops without and with the `file_open` hook running a program that
/// returns at once (attached by the test itself, no agent), each first in every other pair;
/// for each way the hook attaches.
#[test]
#[ignore = "a benchmark: cargo xtask bench runs it in the VM"]
fn open_hook_floor() {
    for via in [SecurityHooks::BpfLsm, SecurityHooks::FModRet] {
        open_hook_floor_as(via);
    }
}

fn open_hook_floor_as(via: SecurityHooks) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let iterations = calibrate(|n| open_close_loop(&file, n), 10_000);
    let with_hook = || {
        let mut object = LoadedObject::load().expect("load the embedded eBPF object");
        object
            .attach(&[loader::open_hook_floor(via)])
            .unwrap_or_else(|e| panic!("attach the file_open floor ({via}): {e}"));
        open_close_loop(&file, iterations)
    };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for pair in 0..pairs() {
        let hook_first = pair % 2 == 1;
        let early = hook_first.then(with_hook);
        without.push(open_close_loop(&file, iterations));
        with.push(early.unwrap_or_else(with_hook));
    }
    let (backend, mode) = ("none".to_owned(), format!("hook only, {via}"));
    let runs = Alternated { without: vec![without], with: vec![with], backend, mode, program_runs: Default::default() };
    let case = [("a program that returns at once", iterations)];
    report_against("no hook", "open_floor", &runs, &case, |_| serde_json::json!({}));
}
