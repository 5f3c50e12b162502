//! `cargo xtask test`: set-up where needed, then every test, then a summary: on the
//! console, and as a table in `target/test-steps.md` that `cargo xtask timings` copies into
//! docs/testing.md.

use std::{fs, path::PathBuf, process::Command, time::Instant};

use anyhow::{bail, ensure};

/// The file the tests append their skips to (`volguard::sys::test_skip::SKIP_LOG_ENV`).
const SKIP_LOG_ENV: &str = "VOLGUARD_SKIP_LOG";

use crate::{
    dashboards, deploy, disk, e2e, fuzz, layers,
    proc::{cargo, output, require_root, run_cmd, target_dir, workspace_root},
    setup, timings, vm,
};

/// One step of the run: its name, where its output is kept beyond the console, its
/// outcome and how long it took.
struct Step {
    name: &'static str,
    logs: Option<PathBuf>,
    result: anyhow::Result<()>,
    seconds: f64,
}

#[derive(clap::Args)]
pub struct Options {
    /// Everything: also the fuzzing step and the VM boots the default run leaves out
    /// (6.1's tracing half, the quarantine fallback on 6.1 and 6.12).
    #[arg(long)]
    pub full: bool,
}

pub fn run(options: &Options) -> anyhow::Result<()> {
    require_root("test")?;
    disk::check_room(&target_dir())?;
    let tree_before = tracked_changes()?;
    // Every test that cannot run here appends a line (`volguard::sys::test_skip`); under
    // CI (`CI=true`, as `.ci/run` sets it) a skip fails its test instead.
    let skip_log = target_dir().join("test-skips.log");
    let _ = fs::remove_file(&skip_log);
    // SAFETY: set before any thread is started; the cargo runs below inherit it.
    unsafe { std::env::set_var(SKIP_LOG_ENV, &skip_log) };
    let started = Instant::now();
    let mut steps: Vec<Step> = Vec::new();
    let mut step = |name, logs: Option<PathBuf>, f: &mut dyn FnMut() -> anyhow::Result<()>| {
        println!("\n=== {name}");
        let started = Instant::now();
        let result = f();
        if let Err(e) = &result {
            println!("=== {name}: FAILED: {e:#}");
        }
        let ok = result.is_ok();
        steps.push(Step { name, logs, result, seconds: started.elapsed().as_secs_f64() });
        ok
    };
    let e2e_logs = |options: &e2e::Options| Some(target_dir().join("e2e/logs").join(options.run_name()));
    let fleet = e2e::Options { fleet: true, ..Default::default() };
    let suite = e2e::Options { storage_suite: Some(e2e::SuiteSet::Ci), ..Default::default() };

    if step("setup", Some(target_dir().join("logs/setup")), &mut || setup::for_tests(options.full)) {
        step(
            "layers (imports point down agent/src/lib.rs's table; no import cycle in agent/src or xtask/src; aya only in the kernel boundary)",
            None,
            &mut || layers::run(&crate::proc::workspace_root()),
        );
        step("unit and host eBPF tests (root, private mount namespaces)", None, &mut || {
            // Root tests must not skip themselves here.
            run_cmd(cargo().env("VOLGUARD_REQUIRE_ROOT_TESTS", "1").args([
                "test",
                "--locked",
                "--workspace",
                "--no-fail-fast",
            ]))
        });
        step(
            "quarantine, node model and masks again with syscall tracepoints (auto picks fanotify here)",
            None,
            &mut || {
                run_cmd(
                    cargo()
                        .env("VOLGUARD_REQUIRE_ROOT_TESTS", "1")
                        .env("VOLGUARD_TRACE_BACKEND", "tracepoints")
                        .args(["test", "--locked", "-p", "volguard", "--test", "integration", "--no-fail-fast", "--"])
                        .args(["host_quarantine::", "host_node_model::", "host_mask_lifecycle::"]),
                )
            },
        );
        step("dashboards (Grafana schema types, PromQL, metric names)", None, &mut dashboards::run);
        step("deploy (helm lint/template, schemas, yamllint, manifests, RBAC vs code)", None, &mut || {
            deploy::run(false)
        });
        step(
            "two real nodes in one cluster (this kernel, and the VM's without bpf in lsm=: fmod_ret; one helm install; scenarios 1-8, F1-F4)",
            e2e_logs(&fleet),
            &mut || e2e::run(&fleet),
        );
        step(
            "Kubernetes' storage e2e suite on the real node, CI subset, without and then with volguard (compared)",
            e2e_logs(&suite),
            &mut || e2e::run(&suite),
        );
        if !options.full {
            step("fuzz targets' lock file up to date (--full runs them)", None, &mut fuzz::check_lock);
        } else {
            step(
                "fuzzing (each parser of untrusted input, 20 s a target, unoptimized build)",
                Some(target_dir().join("fuzz-logs")),
                &mut || fuzz::run(&fuzz::Options { seconds: 20, dev: true, targets: Vec::new() }),
            );
        }
        let vm_step = match options.full {
            true => "VM tests (BPF LSM and fmod_ret, qemu): every boot",
            false => "VM tests (BPF LSM and fmod_ret, qemu): a boot per kernel and way (--full: all)",
        };
        step(vm_step, Some(target_dir().join("vm")), &mut || {
            vm::run(&vm::Options {
                timeout: vm::BOOT_TIMEOUT_SECONDS,
                default_set: !options.full,
                ..Default::default()
            })
        });
    }
    step("the run changed no tracked file (builds are --locked)", None, &mut || {
        let after = tracked_changes()?;
        ensure!(after == tree_before, "the run changed tracked files:\n{}", changed_files(&tree_before, &after));
        Ok(())
    });

    println!("\n=== summary");
    let rows: Vec<timings::Row> = steps
        .iter()
        .map(|s| timings::Row { name: s.name.to_owned(), passed: s.result.is_ok(), seconds: s.seconds })
        .collect();
    for (step, row) in steps.iter().zip(&rows) {
        println!("{}", row.console_line());
        if let (Err(_), Some(logs)) = (&step.result, &step.logs) {
            println!("         its logs: {}", logs.display());
        }
    }
    let total = started.elapsed().as_secs_f64();
    println!("{total:>14.1} s  in all");
    match timings::write(&rows, total) {
        Ok(file) => println!("step table: {} (`cargo xtask timings` puts it into docs/testing.md)", file.display()),
        Err(e) => println!("step table not written: {e:#}"),
    }
    let skipped = fs::read_to_string(&skip_log).unwrap_or_default();
    println!("skipped tests: {}", skipped.lines().count());
    for line in skipped.lines() {
        println!("  {line}");
    }
    if steps.iter().any(|s| s.result.is_err()) {
        bail!("some tests failed");
    }
    println!("all tests passed");
    Ok(())
}

/// The tracked files that differ from HEAD, with their diff: what the run must leave as
/// it found it (a lock file rewritten by a build that should have been --locked, say).
fn tracked_changes() -> anyhow::Result<String> {
    let git = |args: &[&str]| output(Command::new("git").current_dir(workspace_root()).args(args));
    Ok(git(&["status", "--porcelain=v1", "--untracked-files=no"])? + &git(&["diff", "HEAD"])?)
}

/// The status lines of the files whose state differs between two [`tracked_changes`].
fn changed_files(before: &str, after: &str) -> String {
    let status = |text: &str| -> Vec<String> {
        text.lines().take_while(|l| !l.starts_with("diff --git")).map(str::to_owned).collect()
    };
    let (before, after) = (status(before), status(after));
    let mut changed: Vec<String> = after.iter().filter(|l| !before.contains(l)).cloned().collect();
    if changed.is_empty() {
        changed.push("  (files changed before the run changed again)".to_owned());
    }
    changed.join("\n")
}
