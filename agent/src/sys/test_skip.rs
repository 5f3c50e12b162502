//! For tests only: a check that cannot run on this machine says so where people look, and
//! never passes quietly where it must run. Under CI (`CI` set, as `.ci/run` and the VM
//! boots set it) a skip fails the test: a missing kernel feature moves the test to a boot
//! that has it, it does not pass vacuously. Elsewhere the skip is written past libtest's
//! capture (which hides the output of passing tests) and appended to the file
//! `$VOLGUARD_SKIP_LOG`, which `cargo xtask test` counts in its summary.

use std::io::Write as _;

/// The file `cargo xtask test` has each skip appended to.
pub const SKIP_LOG_ENV: &str = "VOLGUARD_SKIP_LOG";

/// Whether a skip is a failure here: `CI` is set (to anything but empty, `0` or `false`).
pub fn skips_fail() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// `test` cannot run its check here, because `why`. Panics under CI; otherwise tells the
/// console and the skip log, and the caller returns.
#[track_caller]
pub fn skip(test: &str, why: &str) {
    assert!(!skips_fail(), "{test} cannot run here, and under CI a test may not skip: {why}");
    let line = format!("SKIPPED {test}: {why}\n");
    // Straight to the stream, not through eprintln!: libtest captures only the macros.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG_ENV) {
        let appended = std::fs::OpenOptions::new().create(true).append(true).open(&log);
        if let Err(e) = appended.and_then(|mut f| f.write_all(line.as_bytes())) {
            let _ = std::io::stderr().write_all(format!("appending to {}: {e}\n", log.to_string_lossy()).as_bytes());
        }
    }
}

/// True when running as root; otherwise skips `test`, which needs root.
#[track_caller]
pub fn have_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    skip(test, "needs root (loads eBPF programs, makes mounts); run `cargo xtask test` as root");
    false
}
