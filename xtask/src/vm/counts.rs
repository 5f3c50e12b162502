//! Each VM run must pass exactly the tests its filter lists: the expected counts from the
//! test binary's own listing on the host, the passed counts from libtest's summary lines on
//! the console.

use std::{path::Path, process::Command};

use anyhow::bail;

use super::plan::{Boot, test_runs};
use crate::proc::output;

/// The console line each run starts with.
pub(super) const RUN_MARK: &str = "volguard-vm: running ";

/// How many tests each of `boot`'s runs must pass, from the test binary's own listing of
/// its filter (`--list`, on the host): a filter that matches nothing is an error here, and
/// a run that passes fewer (or more) tests fails the boot.
pub(super) fn expected_test_counts(boot: &Boot, test_binary: &Path) -> anyhow::Result<Vec<usize>> {
    let mut counts = Vec::new();
    for (label, _, args) in test_runs(boot) {
        let listing =
            output(Command::new(test_binary).arg("--list").args(args.iter().filter(|a| **a != "--nocapture")))?;
        let n = listing.lines().filter(|l| l.ends_with(": test")).count();
        if n == 0 {
            bail!("the VM run {label} ({}) matches no test", args.join(" "));
        }
        counts.push(n);
    }
    Ok(counts)
}

/// How many tests each run passed, by libtest's summary line after the run's mark.
fn passed_test_counts(console: &[String]) -> Vec<Option<usize>> {
    let mut counts: Vec<Option<usize>> = Vec::new();
    for line in console {
        if line.starts_with(RUN_MARK) {
            counts.push(None);
        } else if let (Some(rest), Some(last)) = (line.strip_prefix("test result: "), counts.last_mut()) {
            *last = rest
                .split("; ")
                .find_map(|part| part.split_once(" passed"))
                .and_then(|(n, _)| n.rsplit(' ').next()?.parse().ok());
        }
    }
    counts
}

/// Why the runs' passed counts differ from `expected`, if they do.
pub(super) fn count_mismatch(boot: &Boot, console: &[String], expected: &[usize]) -> Option<String> {
    let passed = passed_test_counts(console);
    let labels: Vec<String> = test_runs(boot).into_iter().map(|(label, _, _)| label).collect();
    let wrong: Vec<String> = labels
        .iter()
        .zip(expected)
        .enumerate()
        .filter(|(i, (_, want))| passed.get(*i).copied().flatten() != Some(**want))
        .map(|(i, (label, want))| match passed.get(i).copied().flatten() {
            Some(n) => format!("{label} passed {n} tests, not {want}"),
            None => format!("{label} printed no test result (expected {want} passed)"),
        })
        .collect();
    (!wrong.is_empty()).then(|| wrong.join("; "))
}
