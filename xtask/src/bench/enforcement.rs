//! Benchmark 1b: the mount syscall overhead with the LSM hooks attached. This host refuses
//! LSM programs, so the measure runs in the VM (`crate::vm::bench`); this module turns the
//! VM's JSON lines into rows.

use std::{fmt::Write as _, time::Duration};

use anyhow::{Context, bail};

use super::{
    Bench, REPS, Row,
    agent::Loaded,
    stats::{list, median},
};

impl Bench {
    /// The same cycles with the LSM hooks attached: in the VM (`agent/tests/integration/vm_bench.rs`),
    /// since this host refuses LSM programs.
    pub(super) fn enforcement_overhead(&mut self) -> anyhow::Result<Option<Loaded>> {
        let lines = crate::vm::bench(Duration::from_secs(900))?;
        if lines.is_empty() {
            bail!("the VM printed no benchmark line");
        }
        self.report.commands.push(
            "qemu-system-x86_64 -smp 2 … -append 'lsm=lockdown,capability,bpf …'  # /tests/integration --ignored --exact \
             vm_bench::enforcement_overhead_per_mount_syscall (see 1b)"
                .into(),
        );
        let _ = writeln!(
            self.report.details,
            "### 1b. Mount syscall overhead with the LSM hooks\n\nIn the VM (`agent/tests/integration/vm_bench.rs`): \
             Debian's cloud kernel under qemu's software emulation (TCG, 2 vCPUs), booted with `bpf` in `lsm=`. \
             `mount(src, tgt, MS_BIND)` + `umount2(tgt, 0)` cycles in a private mount namespace, {REPS} \
             repetitions alternating no agent / the real agent in enforce mode (tracing and LSM programs \
             attached; removed with `volguard uninstall` before each baseline). Emulation makes every syscall \
             slower than on hardware; the ratio is the figure.\n"
        );
        for line in lines {
            let json: serde_json::Value =
                serde_json::from_str(&line).with_context(|| format!("a bench line from the VM: {line}"))?;
            let seconds = |key: &str| -> Vec<f64> {
                json[key].as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).collect()).unwrap_or_default()
            };
            let (name, cycles) = (json["case"].as_str().unwrap_or("?"), json["cycles"].as_f64().unwrap_or(0.0));
            let (without, with) = (seconds("without_s"), seconds("with_s"));
            if without.is_empty() || with.is_empty() || cycles == 0.0 {
                bail!("an incomplete bench line from the VM: {line}");
            }
            let (b, m) = (median(&without), median(&with));
            let per = |s: f64| s / cycles * 1e6;
            let ratio = m / b;
            println!("  {name}: {:.1} µs/cycle without, {:.1} µs/cycle with the agent: {ratio:.3}×", per(b), per(m));
            self.report.rows.push(Row::new(
                &format!("1b. mount syscall overhead, LSM hooks (VM): {name}"),
                format!("{:.1} µs/cycle (no agent)", per(b)),
                format!("{:.1} µs/cycle (enforce)", per(m)),
                format!("{ratio:.3}×"),
                "≤ 1.05×",
                Some(ratio <= 1.05),
            ));
            let _ = writeln!(
                self.report.details,
                "- {name}: {cycles} cycles; seconds per run without {}, with {}; ratio of medians {ratio:.3}; \
                 unmounts retried after EBUSY with the agent: {}",
                list(&without, 3),
                list(&with, 3),
                json["umount_busy_retries"]
            );
        }
        self.report.details.push('\n');
        Ok(None)
    }
}
