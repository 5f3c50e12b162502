//! `cargo xtask bench`: the benchmarks of issue 8. Builds the agent in release, runs every
//! benchmark against a baseline measured in the same run, and writes BENCHMARKS.md.
//!
//! Everything happens in a private mount namespace of this process (made before any
//! thread exists), on a tmpfs of its own; the host's mount table is never touched. The
//! agent is started as a child, so it lives in that namespace too.
//!
//! This module holds the entry point, the table rows and the report (BENCHMARKS.md); each
//! benchmark is a module of its own, an `impl Bench` block with its measure and what it
//! adds to the report:
//!
//! - [`syscalls`]: 1, mount syscall overhead, and 8, the tax on unrelated syscalls, per
//!   tracing backend, on the host and (1b) in the VM with the LSM hooks, on each VM kernel
//!   of the matrix; with `--base REV`, 1r and 8r: the same against that commit's agent
//!   ([`base`] builds it).
//! - [`memory`]: 3, agent memory idle and loaded (its loaded agent serves 4).
//! - [`cluster_memory`]: 3c, agent memory with 100,000 PVs and PVCs behind a fake API server.
//! - [`responses`]: 4, /metrics and /debug/volumes response times.
//! - [`startup`]: 5, start-up to ready with a large mount table.
//! - [`event_rate`]: 2, lossless event rate.
//! - [`quarantine`]: 6, quarantine reaction (6c under load).
//! - [`at_rest`]: 7, the loaded agent's CPU and probe latency at rest.
//!
//! Shared helpers: [`agent`] (the agent child), [`holder`](mod@holder) (the mount-holder child),
//! [`sys`](mod@sys) (namespace and mount syscalls), [`http`] (GET) and [`stats`] (medians,
//! percentiles).

mod agent;
mod at_rest;
mod base;
mod cluster_memory;
mod event_rate;
mod holder;
mod http;
mod memory;
mod owner_work;
mod quarantine;
mod responses;
mod startup;
mod stats;
mod sys;
mod syscalls;

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    proc::{cargo, require_root, run_cmd, target_dir, workspace_root},
    vm::VmKernel,
};

pub use holder::holder;

use agent::{Agent, Loaded, agent_args};
use stats::Verdict;
use sys::{cpath, private_namespace, sys};

const REPS: usize = 5;
/// The verdict of a step that failed.
const NOT_MEASURED: &str = "**FAILED** (not measured)";
/// The targets of 1 and 8, for a row saying one of them was not measured.
const SYSCALL_TARGETS: &str = "mount cycle ≤ 1.10×; tax ≤ 1.01× (trampolines, fanotify); open outside an owned volume ≤ 1.02×; the owner's opens ≤ 1.10×";
/// 10's targets, as the issue of the owner's cost (69) set them.
const OWNER_WORK_TARGETS: &str = "the owner's work ≤ 1.03× (kernel guard), ≤ 1.05× (fanotify reporting), ≤ 1.5× (--deny-foreign-open); a stream and work outside any volume ≤ 1.01×";
/// The targets of 1r and 8r: the agent may not make the mount cycles more than 5 % dearer
/// than the base agent did, nor add to unrelated syscalls.
const REGRESSION_TARGETS: &str = "mount cycle ≤ 1.05×, tax ≤ 1.01× against the base";

/// One line of the table.
struct Row {
    name: String,
    baseline: String,
    measured: String,
    figure: String,
    target: String,
    met: String,
    /// Missed, or unresolved (its interval spans the target).
    short_of_target: bool,
}

impl Row {
    fn new(name: &str, baseline: String, measured: String, figure: String, target: &str, met: Option<bool>) -> Self {
        let verdict = met.map(|met| if met { Verdict::Met } else { Verdict::Missed });
        Self::judged(name, baseline, measured, figure, target, verdict)
    }

    /// A row judged against its target: met, missed or (a paired ratio whose interval
    /// spans the target) unresolved; `None` where there is no target.
    fn judged(
        name: &str,
        baseline: String,
        measured: String,
        figure: String,
        target: &str,
        verdict: Option<Verdict>,
    ) -> Self {
        let met = match verdict {
            Some(Verdict::Met) => "yes",
            Some(Verdict::Missed) => "**NO**",
            Some(Verdict::Unresolved) => "unresolved",
            None => "—",
        };
        let short_of_target = matches!(verdict, Some(Verdict::Missed | Verdict::Unresolved));
        Self { name: name.into(), baseline, measured, figure, target: target.into(), met: met.into(), short_of_target }
    }

    /// A step that failed: short of its target, and the bench exits non-zero.
    fn not_measured(name: &str, target: &str, why: &str) -> Self {
        Self {
            name: name.into(),
            baseline: "—".into(),
            measured: format!("not measured: {}", why.replace('|', "/").replace('\n', " ")),
            figure: "—".into(),
            target: target.into(),
            met: NOT_MEASURED.into(),
            short_of_target: true,
        }
    }

    /// A backend this kernel does not allow: a fact about the machine, not a failed step.
    fn refused_by_kernel(name: &str, why: &str) -> Self {
        Self {
            name: name.into(),
            baseline: "—".into(),
            measured: format!("refused by this kernel: {}", why.replace('|', "/").replace('\n', " ")),
            figure: "—".into(),
            target: "—".into(),
            met: "—".into(),
            short_of_target: false,
        }
    }

    fn failed(&self) -> bool {
        self.met == NOT_MEASURED
    }
}

/// What each benchmark adds to the report.
#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    details: String,
    commands: Vec<String>,
}

pub fn run(only: Option<&str>, base: Option<&str>) -> anyhow::Result<()> {
    require_root("bench")?;
    let started = Instant::now();
    println!("== build volguard (release)");
    run_cmd(cargo().args(["build", "--locked", "--release", "-p", "volguard", "-p", "volguard-bench-work"]))?;
    let agent = target_dir().join("release/volguard");
    let bench_work = target_dir().join("release/volguard-bench-work");
    let base = base.map(base::build).transpose()?;
    let built = started.elapsed();

    // Before any thread exists: a private mount namespace for this process and its children.
    private_namespace()?;
    let dir = PathBuf::from(format!("/tmp/volguard-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    sys(
        // SAFETY: valid NUL-terminated strings.
        unsafe {
            libc::mount(
                c"volguard-bench".as_ptr(),
                cpath(&dir).as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=256m".as_ptr().cast(),
            )
        },
        "mounting the bench tmpfs",
    )?;
    let bench = Bench { agent, base, dir: dir.clone(), bench_work, report: Report::default() };
    let result = bench.all(started, built, only);
    // SAFETY: valid path.
    unsafe { libc::umount2(cpath(&dir).as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir_all(&dir);
    result
}

struct Bench {
    agent: PathBuf,
    /// `--base REV`: the older agent 1r and 8r measure against.
    base: Option<base::BaseAgent>,
    dir: PathBuf,
    /// `volguard-bench-work`, the real work of 10.
    bench_work: PathBuf,
    report: Report,
}

type Step = fn(&mut Bench) -> anyhow::Result<Option<Loaded>>;
type LoadedStep = fn(&mut Bench, &Loaded) -> anyhow::Result<()>;

impl Bench {
    /// The benchmarks served by the loaded agent of 3: (heading, row when not measured,
    /// target, step).
    fn on_loaded(&mut self, loaded: &Loaded) {
        let steps: [(&str, &str, &str, LoadedStep); 2] = [
            ("4. /metrics and /debug/volumes response time", "4. /metrics response time", "≤ 5 ms", Self::responses),
            (
                "7. the loaded agent at rest",
                "7. the loaded agent at rest",
                "≤ 1 % CPU, /healthz worst ≤ 10 ms",
                Self::at_rest,
            ),
        ];
        for (heading, row, target, step) in steps {
            println!("\n== {heading}");
            if let Err(e) = step(self, loaded) {
                println!("{heading}: not measured: {e:#}");
                self.report.rows.push(Row::not_measured(row, target, &format!("{e:#}")));
            }
        }
    }

    fn all(mut self, started: Instant, built: Duration, only: Option<&str>) -> anyhow::Result<()> {
        let mut steps: Vec<(&str, &str, Step)> =
            vec![("1. mount and unrelated syscalls, per backend (host)", SYSCALL_TARGETS, Self::host_syscalls)];
        if self.base.is_some() {
            steps.push(("1r. syscalls against the base agent (host)", REGRESSION_TARGETS, Self::host_regression));
        }
        steps.push(("10. real work, per backend (host)", OWNER_WORK_TARGETS, Self::host_owner_work));
        // Every kernel of the VM matrix with BPF LSM (5.10, below the floor, runs no agent).
        steps.extend::<[(&str, &str, Step); 9]>([
            (
                "1b. mount and unrelated syscalls, per backend, with the LSM hooks (VM, Linux 6.1)",
                SYSCALL_TARGETS,
                |bench| bench.vm_syscalls(VmKernel::Linux61),
            ),
            (
                "1b. mount and unrelated syscalls, per backend, with the LSM hooks (VM, Linux 6.12)",
                SYSCALL_TARGETS,
                |bench| bench.vm_syscalls(VmKernel::Linux612),
            ),
            (
                "1b. mount and unrelated syscalls, per backend, with the LSM hooks (VM, Linux 7.3)",
                SYSCALL_TARGETS,
                |bench| bench.vm_syscalls(VmKernel::Linux73),
            ),
            ("3. agent memory", "≤ 16 MiB idle, ≤ 40 MiB loaded", Self::memory),
            ("3c. agent memory with a large cluster (fake API server)", "≤ idle + 5 MiB", Self::cluster_memory),
            ("5. start-up to ready", "≤ 500 ms", Self::startup),
            ("2. lossless event rate", "≥ 100,000 events/s", Self::event_rate),
            ("6. quarantine reaction", "p99 ≤ 2 ms", Self::quarantine),
            ("6c. quarantine reaction under load", "p99 ≤ 2 ms", Self::quarantine_under_load),
        ]);
        let mut timings = Vec::new();
        for (name, target, step) in steps {
            if only.is_some_and(|prefix| !name.starts_with(prefix)) {
                continue;
            }
            println!("\n== {name}");
            let t = Instant::now();
            match step(&mut self) {
                Ok(loaded) => {
                    // The loaded agent of 3 serves benchmark 4.
                    if let Some(loaded) = loaded {
                        self.on_loaded(&loaded);
                    }
                }
                Err(e) => {
                    println!("{name}: not measured: {e:#}");
                    self.report.rows.push(Row::not_measured(name, target, &format!("{e:#}")));
                }
            }
            timings.push((name, t.elapsed()));
        }
        let total = started.elapsed();
        if only.is_some() {
            println!("\n{}", table(&self.report.rows));
            println!("(--only: BENCHMARKS.md not written)");
        } else {
            let text = self.markdown(&timings, built, total);
            let path = workspace_root().join("BENCHMARKS.md");
            std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
            println!("\n{}", table(&self.report.rows));
            println!("wrote {} ({:.0} s in all)", path.display(), total.as_secs_f64());
        }
        // What was measured is written first; a step that failed still fails the bench.
        let failed: Vec<&str> = self.report.rows.iter().filter(|r| r.failed()).map(|r| r.name.as_str()).collect();
        if !failed.is_empty() {
            bail!("{} bench step(s) failed: {}", failed.len(), failed.join("; "));
        }
        Ok(())
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn write_inventory(&self, name: &str, text: &str) -> anyhow::Result<PathBuf> {
        let p = self.path(name);
        std::fs::write(&p, text)?;
        Ok(p)
    }

    fn kubelet(&self) -> anyhow::Result<PathBuf> {
        let k = self.path("kubelet");
        std::fs::create_dir_all(&k)?;
        Ok(k)
    }

    /// Starts the agent as a user would (`--trace-backend auto`: fanotify on this host).
    fn start(&mut self, inventory: &Path, mountinfo: &str) -> anyhow::Result<Agent> {
        self.start_traced_by(inventory, mountinfo, "auto")
    }

    /// Starts the agent with the tracing backend `backend`.
    fn start_traced_by(&mut self, inventory: &Path, mountinfo: &str, backend: &str) -> anyhow::Result<Agent> {
        let mut args = agent_args(&self.kubelet()?, inventory, mountinfo);
        args.extend(["--trace-backend".to_owned(), backend.to_owned()]);
        // Relative to the checkout: the report names no path of the machine it ran on.
        let binary = self.agent.strip_prefix(workspace_root()).unwrap_or(&self.agent);
        // And the bench's own directory by a name, not this run's path.
        let line = format!("RUST_LOG=info {} {}", binary.display(), args.join(" "))
            .replace(&self.dir.display().to_string(), "$BENCH_DIR");
        if !self.report.commands.iter().any(|c| c.split(" --inventory").next() == line.split(" --inventory").next()) {
            self.report.commands.push(line);
        }
        Agent::start(&self.agent, &args)
    }

    fn markdown(&self, timings: &[(&str, Duration)], built: Duration, total: Duration) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# volguard benchmarks\n\nWritten by `cargo xtask bench` (run as root); the figures below are from \
             its last run. Each figure is measured against a baseline from the same run, {REPS} repetitions \
             (or as stated), median reported; rows 1 and 8 are ratios within pairs of runs (see there), their \
             median given with an interval, and a target counts as met or missed only when the whole interval \
             is on one side of it (\"unresolved\" when it spans it).\n"
        );
        let _ = writeln!(s, "## Machine\n\n{}\n", machine());
        let _ = writeln!(s, "## Commands\n\n```\nsudo -E cargo xtask bench\n$ cargo build --release -p volguard");
        for c in &self.report.commands {
            let _ = writeln!(s, "$ {c}");
        }
        let _ = writeln!(
            s,
            "```\n\nThe bench runs in a private mount namespace of its own (`unshare(CLONE_NEWNS)`, `/` made \
             rprivate) on a tmpfs (`$BENCH_DIR` above), and the agent is its child in that namespace; the host's mount table is not \
             touched. `--mode auto` resolves to quarantine on a host without BPF LSM, and \
             `--trace-backend auto` to trampolines where the kernel allows them, else fanotify mount notifications \
             where they work, else syscall tracepoints. Rows 3, 5 and 6 measure the agent as auto starts it on \
             this machine (its kernel is above); row 2 (the ring buffer) forces tracepoints; rows 1 and 8 name \
             their backend.\n"
        );
        let _ = writeln!(s, "## Results\n\n{}", table(&self.report.rows));
        let _ = writeln!(s, "{}", short_of_target(&self.report.rows));
        let _ = writeln!(s, "## How each figure is measured\n\n{}", self.report.details);
        let _ = writeln!(s, "## Time\n\n- build: {:.0} s", built.as_secs_f64());
        for (name, d) in timings {
            let _ = writeln!(s, "- {name}: {:.0} s", d.as_secs_f64());
        }
        let _ = writeln!(s, "- whole run: {:.0} s", total.as_secs_f64());
        s
    }
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| benchmark | baseline | measured | ratio / figure | target | met? |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ =
            writeln!(s, "| {} | {} | {} | {} | {} | {} |", r.name, r.baseline, r.measured, r.figure, r.target, r.met);
    }
    s
}

/// The rows that missed their target, whose interval spans it, or that failed, pointing to
/// where the manual says why each is short.
fn short_of_target(rows: &[Row]) -> String {
    let mut s = String::from("## Targets not met in this run\n\n");
    let short: Vec<&Row> = rows.iter().filter(|r| r.short_of_target).collect();
    if short.is_empty() {
        s.push_str("None.\n");
        return s;
    }
    s.push_str(
        "Missed, unresolved (the interval spans the target), or failed (not measured). Where the time goes: \
         docs/performance.md, \"Where the time goes\".\n\n| benchmark | ratio / figure | target | met? |\n\
         |---|---|---|---|\n",
    );
    for r in short {
        let _ = writeln!(s, "| {} | {} | {} | {} |", r.name, r.figure, r.target, r.met);
    }
    s
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .map(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()).unwrap_or(0.0) / 1024.0 / 1024.0)
        .unwrap_or(0.0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    format!(
        "- CPU: {model}, {cores} cores\n- kernel: {}\n- memory: {mem:.1} GiB\n- load average at the end of the run: {}",
        kernel.trim(),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    )
}

const EMPTY_INVENTORY: &str = "nodeName: bench-node\npods: []\npersistentVolumes: []\npersistentVolumeClaims: []\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, verdict: Option<Verdict>) -> Row {
        Row::judged(name, "b".into(), "m".into(), "1.2×".into(), "≤ 1.10×", verdict)
    }

    #[test]
    fn the_short_list_holds_missed_and_unresolved_rows_only() {
        let rows = [
            row("met", Some(Verdict::Met)),
            row("missed", Some(Verdict::Missed)),
            row("spans", Some(Verdict::Unresolved)),
            row("reported", None),
            Row::not_measured("refused", "≤ 1.10×", "EPERM"),
        ];
        let text = short_of_target(&rows);
        let listed: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("| ")?.split(" |").next()).collect();
        assert_eq!(listed, ["benchmark", "missed", "spans", "refused"], "a failed step is short of its target");
        assert!(rows[4].failed() && !rows[1].failed());
        assert!(short_of_target(&rows[..1]).ends_with("None.\n"));
    }
}
