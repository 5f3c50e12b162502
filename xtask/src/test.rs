//! `cargo xtask test`: set-up where needed, then every test, then a summary.

use std::time::Instant;

use anyhow::bail;

use crate::{
    dashboards, deploy, disk, e2e, fuzz, layers,
    proc::{cargo, require_root, run_cmd, target_dir},
    setup, vm,
};

pub fn run() -> anyhow::Result<()> {
    require_root("test")?;
    disk::check_room(&target_dir())?;
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
        step("layers (imports point down agent/src/lib.rs's table; aya only in the kernel boundary)", &mut || {
            layers::run(&crate::proc::workspace_root())
        });
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
        step("real node (Kubernetes, containerd, a CSI driver; volguard from its chart and image)", &mut || {
            e2e::run(&e2e::Options::default())
        });
        step("real node with BPF LSM in the VM (scenario 6: refused in the kernel, then handed over)", &mut || {
            e2e::run(&e2e::Options { vm: true, ..Default::default() })
        });
        step("fuzzing (each parser of untrusted input, 20 s a target, unoptimized build)", &mut || {
            fuzz::run(&fuzz::Options { seconds: 20, dev: true, targets: Vec::new() })
        });
        step("VM tests (BPF LSM, qemu)", &mut || vm::run(&vm::Options { timeout: 1200, ..Default::default() }));
    }

    println!("\n=== summary");
    for (name, result, seconds) in &steps {
        println!("{:<6} {seconds:>7.1} s  {name}", if result.is_ok() { "ok" } else { "FAILED" });
    }
    if steps.iter().any(|(_, r, _)| r.is_err()) {
        bail!("some tests failed");
    }
    println!("all tests passed");
    Ok(())
}
