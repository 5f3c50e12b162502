//! `cargo xtask test`: set-up where needed, then every test, then a summary.

use std::time::Instant;

use anyhow::bail;

/// The file the tests append their skips to (`volguard::sys::test_skip::SKIP_LOG_ENV`).
const SKIP_LOG_ENV: &str = "VOLGUARD_SKIP_LOG";

use crate::{
    dashboards, deploy, disk, e2e, fuzz, layers,
    proc::{cargo, require_root, run_cmd, target_dir},
    setup, vm,
};

pub fn run() -> anyhow::Result<()> {
    require_root("test")?;
    disk::check_room(&target_dir())?;
    // Every test that cannot run here appends a line (`volguard::sys::test_skip`); under
    // CI (`CI=true`, as `.ci/run` sets it) a skip fails its test instead.
    let skip_log = target_dir().join("test-skips.log");
    let _ = std::fs::remove_file(&skip_log);
    // SAFETY: set before any thread is started; the cargo runs below inherit it.
    unsafe { std::env::set_var(SKIP_LOG_ENV, &skip_log) };
    let mut steps: Vec<(&str, anyhow::Result<()>, f64)> = Vec::new();
    let mut step = |name, f: &mut dyn FnMut() -> anyhow::Result<()>| {
        println!("\n=== {name}");
        let started = Instant::now();
        let result = f();
        if let Err(e) = &result {
            println!("=== {name}: FAILED: {e:#}");
        }
        let ok = result.is_ok();
        steps.push((name, result, started.elapsed().as_secs_f64()));
        ok
    };

    if step("setup", &mut setup::run) {
        step(
            "layers (imports point down agent/src/lib.rs's table, no cycle inside a folder; aya only in the kernel boundary)",
            &mut || layers::run(&crate::proc::workspace_root()),
        );
        step("unit and host eBPF tests (root, private mount namespaces)", &mut || {
            // Root tests must not skip themselves here.
            run_cmd(cargo().env("VOLGUARD_REQUIRE_ROOT_TESTS", "1").args(["test", "--workspace", "--no-fail-fast"]))
        });
        step("quarantine, node model and masks again with syscall tracepoints (auto picks fanotify here)", &mut || {
            run_cmd(
                cargo()
                    .env("VOLGUARD_REQUIRE_ROOT_TESTS", "1")
                    .env("VOLGUARD_TRACE_BACKEND", "tracepoints")
                    .args(["test", "-p", "volguard", "--test", "integration", "--no-fail-fast", "--"])
                    .args(["host_quarantine::", "host_node_model::", "host_mask_lifecycle::"]),
            )
        });
        step("dashboards (Grafana schema types, PromQL, metric names)", &mut dashboards::run);
        step("deploy (helm lint/template, schemas, yamllint, manifests, RBAC vs code)", &mut || deploy::run(false));
        step(
            "two real nodes in one cluster (this kernel, and the VM's with BPF LSM; one helm install; scenarios 1-8, F1-F4)",
            &mut || e2e::run(&e2e::Options { fleet: true, ..Default::default() }),
        );
        step(
            "Kubernetes' storage e2e suite on the real node, CI subset, without and then with volguard (compared)",
            &mut || e2e::run(&e2e::Options { storage_suite: Some(e2e::SuiteSet::Ci), ..Default::default() }),
        );
        step("fuzzing (each parser of untrusted input, 20 s a target, unoptimized build)", &mut || {
            fuzz::run(&fuzz::Options { seconds: 20, dev: true, targets: Vec::new() })
        });
        step("VM tests (BPF LSM, qemu)", &mut || vm::run(&vm::Options { timeout: 1200, ..Default::default() }));
    }

    println!("\n=== summary");
    for (name, result, seconds) in &steps {
        println!("{:<6} {seconds:>7.1} s  {name}", if result.is_ok() { "ok" } else { "FAILED" });
    }
    let skipped = std::fs::read_to_string(&skip_log).unwrap_or_default();
    println!("skipped tests: {}", skipped.lines().count());
    for line in skipped.lines() {
        println!("  {line}");
    }
    if steps.iter().any(|(_, r, _)| r.is_err()) {
        bail!("some tests failed");
    }
    println!("all tests passed");
    Ok(())
}
