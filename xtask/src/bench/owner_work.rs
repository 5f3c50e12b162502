//! Benchmark 10: what the guard costs real work (`volguard-bench-work`: unpacking a tree,
//! a sqlite database, a stream), by the volume's owner in its volume and by a node process
//! outside any volume. The measure is `agent/tests/integration/owner_work_bench.rs`, run
//! on the host once per tracing backend; its lines become rows as 1's do.

use std::fmt::Write as _;

use anyhow::bail;

use super::{Bench, agent::Loaded, syscalls::Stats};

/// The host's backends, as 1 runs them (one the kernel refuses is reported as refused).
const BACKENDS: [&str; 3] = ["trampolines", "fanotify", "tracepoints"];

impl Bench {
    pub(super) fn host_owner_work(&mut self) -> anyhow::Result<Option<Loaded>> {
        let args = ["test", "--locked", "-p", "volguard", "--release", "--test", "integration"];
        let _ = writeln!(
            self.report.details,
            "### 10. Real work (host)\n\n`agent/tests/integration/owner_work_bench.rs` (release) runs \
             `volguard-bench-work` (release): unpacking a tar of 10,000 files of 1–4 KiB and reading every file \
             back three times; sqlite, 100,000 inserts in commits of 100 then 50,000 selects by key; 1 GiB \
             written with an fsync and read back. Each as a process of the owner pod in its published volume (a \
             tmpfs of its own, bound at the publish target), and as a node process on another tmpfs. Rounds of \
             every workload without the agent, with a fresh agent (mode auto), and where the agent quarantines \
             with a fresh agent refusing other pods' opens (`--deny-foreign-open`: 10d), the order turned over \
             each round; the figure is the median of the ratios within rounds, with its interval.\n"
        );
        let bench_work = self.bench_work.clone();
        let env = [("VOLGUARD_BENCH_WORK_BIN", bench_work.as_os_str())];
        let mut measured = 0;
        for backend in BACKENDS {
            println!("  backend {backend}");
            match self.run_syscall_bench(&args, "owner_work_bench::", backend, Stats::Off, &env) {
                Ok(lines) => {
                    measured += 1;
                    self.syscall_rows("host", &lines)?;
                }
                Err(e) => self.not_measured(&format!("10. real work (host, {backend})"), &e),
            }
        }
        self.report.details.push('\n');
        self.report.commands.push(format!(
            "VOLGUARD_TRACE_BACKEND=<backend> VOLGUARD_BENCH_WORK_BIN=target/release/volguard-bench-work cargo {} \
             owner_work_bench:: -- --ignored --nocapture --test-threads=1  # 10",
            args.join(" ")
        ));
        if measured == 0 {
            bail!("no backend could be measured on the host");
        }
        Ok(None)
    }
}
