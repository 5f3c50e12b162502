//! Benchmarks 1, 8 and 9 of `cargo xtask bench`, run where the kernel under test is: on the
//! host (`cargo xtask bench` runs this binary once per backend the host has) and in the
//! VM with BPF LSM (the bench boot, once per backend; not 9d, for nodes without it). The tracing backend is the one
//! `VOLGUARD_TRACE_BACKEND` forces; each test prints `volguard-bench:` JSON lines naming
//! it and the mode, which `cargo xtask bench` turns into rows.
//!
//! Each measure is a series of pairs, a run without the agent and a run with a fresh real
//! agent attached, back to back (which of the two first alternates from pair to pair); or,
//! for `cargo xtask bench --base REV`, a run with a fresh agent of that older build and one
//! with this build's.
//! The ratio is taken within each pair: this machine's syscall path switches between
//! speeds ~30 % apart that last for seconds, so a pair mostly sees one speed where the
//! medians of two sides can each land on a different one. The measures:
//! - `mount_cycle_overhead` (1): bind + umount cycles for two cases, a bind outside the
//!   kubelet tree (the programs look at the target and let it go) and the owner
//!   publishing its ReadWriteOncePod volume (the full decision: in enforce mode a claim at
//!   each bind and a release at each unmount).
//! - `tax_on_unrelated_syscalls` (8): what the backend costs syscalls that have nothing to
//!   do with mounts. Syscall tracepoints put every thread of the node on the kernel's slow
//!   syscall entry path; trampolines and fanotify should cost nothing. Two loops on one
//!   pinned CPU: `getppid` (the cheapest syscall, so the entry path is most of its cost)
//!   and a 4 KiB `read` of /dev/zero + `write` to /dev/null.
//! - `open_guard_cost` (9): open + close of a file on a filesystem that holds no owned
//!   volume (what most opens on a node pay: one lookup by device), then of files on a
//!   filesystem that holds an owned volume's published directory — outside the volume
//!   (what any open on that filesystem pays: the guard's answer for the file's
//!   directory), inside it through the publish
//!   target by a node process (the guard finds the volume and the caller's pod; without
//!   BPF LSM the open reporter gets a notice of each and drops it), and the same by the
//!   owner pod's process (what the owner's own work pays).
//! - `open_refusal_cost` (9d, no BPF LSM): the last case with `--deny-foreign-open`, whose
//!   opens each wait for the agent's answer, against an agent that only reports them.
//! - `agent_cpu_while_the_owner_opens_files` (9e, no BPF LSM): the agent's CPU while the
//!   owner's pod opens 10,000 files a second through its publish (each a notice the
//!   agent reads), against the same agent idle, and its `/healthz` answers meanwhile.

use std::{
    collections::BTreeMap,
    fs::File,
    io::{Read, Write},
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use nix::{sched::CpuSet, unistd::Pid};

use crate::support::{
    http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, quiet_agents, uninstall},
    pod_cgroup::PodCgroup,
};

/// Pairs per measure unless `VOLGUARD_BENCH_PAIRS` says otherwise (`cargo xtask bench`
/// asks the host for more): what the VM affords, where a fresh agent takes up to ~10 s to
/// start (its programs verified under emulation); 15 pairs there take ~15 minutes.
const PAIRS: usize = 15;
/// How long one run of a loop takes without the agent (loop lengths are calibrated to it:
/// the VM's software emulation is some ten times slower than the host). Short, so that
/// the two runs of a pair are close in time.
const RUN_TIME: Duration = Duration::from_millis(250);
/// The CPU the tax loops run on (the agent is free to run on the other).
const LOOP_CPU: usize = 0;

/// The seconds of each case's runs, with the baseline (`without`) and with the agent, and
/// the agent's backend and mode.
pub(crate) struct Alternated {
    pub(crate) without: Vec<Vec<f64>>,
    pub(crate) with: Vec<Vec<f64>>,
    pub(crate) backend: String,
    pub(crate) mode: String,
    /// With `--bpf-stats`: each program's runs and seconds over the last agent's life.
    pub(crate) program_runs: BTreeMap<String, (f64, f64)>,
}

/// How many pairs to measure.
pub(crate) fn pairs() -> usize {
    let asked = std::env::var("VOLGUARD_BENCH_PAIRS").ok();
    asked.map_or(PAIRS, |n| n.parse().unwrap_or_else(|_| panic!("VOLGUARD_BENCH_PAIRS={n}: not a count")))
}

/// What the other run of each pair has: no agent, or with `VOLGUARD_BENCH_BASE_AGENT_BIN`
/// a fresh agent of another build (`cargo xtask bench --base REV`: did a change make the
/// agent dearer?).
fn base_agent() -> Option<PathBuf> {
    std::env::var_os("VOLGUARD_BENCH_BASE_AGENT_BIN").map(PathBuf::from)
}

/// What the baseline run of a pair had, as the bench lines name it.
fn baseline_name() -> &'static str {
    if base_agent().is_some() { "base agent" } else { "no agent" }
}

/// One run of every case with a fresh agent of `binary` attached.
struct AgentRun {
    seconds: Vec<f64>,
    backend: String,
    mode: String,
    program_runs: BTreeMap<String, (f64, f64)>,
}

fn with_agent(
    binary: &Path,
    tree: &KubeletTree,
    ns: &MountNs,
    pins: &Path,
    extra: &[&str],
    each_case: &dyn Fn() -> Vec<f64>,
) -> AgentRun {
    let agent = Agent::start_binary_in(binary, ns, &tree.root(), pins, &["pv-rwop"], extra);
    let (backend, mode) = (agent.trace_backend(), agent.mode_and_security_hooks());
    let seconds = each_case();
    let program_runs =
        if bpf_stats() { program_runs(&http_get(&agent.address("metrics"), "/metrics").1) } else { BTreeMap::new() };
    agent.stop();
    // Enforcement outlives a clean stop (pinned): remove it for the next run.
    uninstall(pins);
    AgentRun { seconds, backend, mode, program_runs }
}

/// Measures every case in pairs: once with the baseline (no agent, or the base agent) and
/// once with a fresh agent attached, the agent's run first in every other pair, so that
/// neither side always runs just after an agent started or stopped.
fn alternate(tree: &KubeletTree, ns: &MountNs, test: &str, cases: usize, measure: impl Fn(usize) -> f64) -> Alternated {
    // The agent's log lines are not part of what is measured (they reach the test's
    // stderr, in the VM through the emulated serial console).
    quiet_agents();
    let pins = pin_root(test);
    let mut runs = Alternated {
        without: vec![Vec::new(); cases],
        with: vec![Vec::new(); cases],
        backend: String::new(),
        mode: String::new(),
        program_runs: BTreeMap::new(),
    };
    let each_case = || (0..cases).map(&measure).collect::<Vec<f64>>();
    let base = base_agent();
    let baseline = || match &base {
        Some(binary) => with_agent(binary, tree, ns, &pins, &[], &each_case).seconds,
        None => each_case(),
    };
    for pair in 0..pairs() {
        let agent_first = pair % 2 == 1;
        let baseline_first = (!agent_first).then(&baseline);
        let run = with_agent(&agent_binary(), tree, ns, &pins, &[], &each_case);
        (runs.backend, runs.mode, runs.program_runs) = (run.backend, run.mode, run.program_runs);
        if lsm_enforces() {
            assert!(
                runs.mode.starts_with("enforce"),
                "where BPF LSM works, the security hooks are part of what is measured"
            );
        }
        let without = baseline_first.unwrap_or_else(&baseline);
        for (case, (baseline, agent)) in without.iter().zip(&run.seconds).enumerate() {
            runs.without[case].push(*baseline);
            runs.with[case].push(*agent);
        }
        eprintln!(
            "{test} pair {pair} ({} {}, agent {}): {} {:?} s, agent {:?} s",
            runs.backend,
            runs.mode,
            if agent_first { "first" } else { "second" },
            baseline_name(),
            runs.without.iter().map(|v| v[pair]).collect::<Vec<_>>(),
            runs.with.iter().map(|v| v[pair]).collect::<Vec<_>>()
        );
    }
    runs
}

/// Whether the agent runs with `--bpf-stats` (it reads this variable).
fn bpf_stats() -> bool {
    std::env::var("VOLGUARD_BPF_STATS").is_ok_and(|v| v == "true")
}

/// Each program's (runs, seconds) from the agent's /metrics.
fn program_runs(metrics: &str) -> BTreeMap<String, (f64, f64)> {
    let mut runs = BTreeMap::<String, (f64, f64)>::new();
    for line in metrics.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Some(program) = series.split("program=\"").nth(1).and_then(|p| p.split('"').next()) else { continue };
        let value: f64 = value.parse().unwrap_or(0.0);
        if series.starts_with("volguard_bpf_program_runs_total{") {
            runs.entry(program.to_owned()).or_default().0 += value;
        } else if series.starts_with("volguard_bpf_program_run_seconds_total{") {
            runs.entry(program.to_owned()).or_default().1 += value;
        }
    }
    runs.retain(|_, (n, _)| *n > 0.0);
    runs
}

/// Whether BPF LSM is active (the VM's bench boot; the host has no securityfs mounted).
fn lsm_enforces() -> bool {
    std::fs::read_to_string(volguard::kernel::lsm_probe::LSM_LIST)
        .is_ok_and(|l| l.trim().split(',').any(|l| l == "bpf"))
}

/// Prints one `volguard-bench:` line per case, against the pairs' usual baseline.
fn report(bench: &str, runs: &Alternated, cases: &[(&str, u64)], extra: impl Fn(usize) -> serde_json::Value) {
    report_against(baseline_name(), bench, runs, cases, extra);
}

/// As [`report`], naming the baseline the `without` runs had.
pub(crate) fn report_against(
    baseline: &str,
    bench: &str,
    runs: &Alternated,
    cases: &[(&str, u64)],
    extra: impl Fn(usize) -> serde_json::Value,
) {
    for (i, (case, iterations)) in cases.iter().enumerate() {
        let line = serde_json::json!({
            "bench": bench,
            "backend": runs.backend,
            "mode": runs.mode,
            "bpf_stats": bpf_stats(),
            "baseline": baseline,
            "case": case,
            "iterations": iterations,
            "without_s": runs.without[i],
            "with_s": runs.with[i],
            "extra": extra(i),
        });
        println!("volguard-bench: {line}");
    }
}

/// The iterations of `run` that take about `RUN_TIME` here (at least `floor`).
pub(crate) fn calibrate(run: impl Fn(u64) -> f64, floor: u64) -> u64 {
    let probe = floor / 10;
    let seconds = run(probe).max(1e-9);
    ((probe as f64 * RUN_TIME.as_secs_f64() / seconds) as u64).max(floor)
}

/// Seconds for `n` bind + umount cycles of `source` onto `target`, inside `ns`. (An
/// unmount finds the mount busy while anything else holds it, e.g. an agent that stats it;
/// kubelet retries such an unmount, so does this loop, and `retries` counts them: none
/// expected since the kernel records an owner's tree root itself.)
fn cycles(ns: &MountNs, source: &Path, target: &Path, n: u64, retries: &AtomicU64) -> f64 {
    let (source, target) = (source.to_path_buf(), target.to_path_buf());
    let (seconds, busy) = ns.run(move || {
        let mut busy = 0;
        let started = Instant::now();
        for _ in 0..n {
            let flags = nix::mount::MsFlags::MS_BIND;
            nix::mount::mount(Some(&source), &target, None::<&str>, flags, None::<&str>).expect("bind");
            loop {
                match nix::mount::umount2(&target, nix::mount::MntFlags::empty()) {
                    Ok(()) => break,
                    Err(nix::errno::Errno::EBUSY) if busy < 100_000 => busy += 1,
                    Err(e) => panic!("umount: {e}"),
                }
            }
        }
        (started.elapsed().as_secs_f64(), busy)
    });
    retries.fetch_add(busy, Ordering::Relaxed);
    seconds
}

#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host and in the VM"]
fn mount_cycle_overhead() {
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let source = tree.volume("pv-rwop");
    let outside = tree.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let targets: [(&str, PathBuf); 2] = [
        ("outside the kubelet tree", outside),
        ("owner publishes its RWOP volume", tree.publish_dir("pod-a", "pv-rwop")),
    ];
    let unused = AtomicU64::new(0);
    let iterations: Vec<u64> =
        targets.iter().map(|(_, target)| calibrate(|n| cycles(&ns, &source, target, n, &unused), 1000)).collect();
    let retries: Vec<AtomicU64> = targets.iter().map(|_| AtomicU64::new(0)).collect();
    let runs = alternate(&tree, &ns, "bench-mount", targets.len(), |case| {
        cycles(&ns, &source, &targets[case].1, iterations[case], &retries[case])
    });
    let cases: Vec<(&str, u64)> = targets.iter().zip(&iterations).map(|((name, _), n)| (*name, *n)).collect();
    // The last agent ran every case once: each program's time per cycle of all cases.
    let cycles_per_agent: u64 = iterations.iter().sum();
    let bpf_per_cycle: BTreeMap<&str, String> = runs
        .program_runs
        .iter()
        .map(|(program, (n, seconds))| {
            let per =
                format!("{:.2} runs, {:.2} µs", n / cycles_per_agent as f64, seconds * 1e6 / cycles_per_agent as f64);
            (program.as_str(), per)
        })
        .collect();
    report("mount_cycle", &runs, &cases, |case| {
        let mut extra = serde_json::json!({ "umount_busy_retries": retries[case].load(Ordering::Relaxed) });
        if !bpf_per_cycle.is_empty() {
            extra["bpf_programs_per_cycle_of_both_cases"] = serde_json::json!(bpf_per_cycle);
        }
        extra
    });
}

/// Seconds for `n` open + close of `file`, in `ns` (where the owner's publish is).
fn opens(ns: &MountNs, file: &Path, n: u64) -> f64 {
    let file = file.to_path_buf();
    ns.run(move || open_close_loop(&file, n))
}

/// Seconds for `n` open + close of `file` by this thread.
pub(crate) fn open_close_loop(file: &Path, n: u64) -> f64 {
    let started = Instant::now();
    for _ in 0..n {
        drop(std::hint::black_box(File::open(file).unwrap()));
    }
    started.elapsed().as_secs_f64()
}

/// Pod `owner`'s volume `pv-rwop`, holding `data`, published at its target once: each
/// run's fresh agent finds the owner in the mount table. Returns the target.
fn published_for_opens(owner: &str) -> (KubeletTree, MountNs, PathBuf) {
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let volume = tree.volume("pv-rwop");
    std::fs::write(volume.join("data"), b"x").unwrap();
    let target = tree.publish_dir(owner, "pv-rwop");
    ns.bind(&volume, &target).unwrap();
    (tree, ns, target)
}

/// Seconds for `n` open + close of `file` by a process of `pod` (in `ns`): a forked child
/// times its own loop and hands the seconds back through a pipe.
fn opens_by(pod: &PodCgroup, ns: &MountNs, file: &Path, n: u64) -> f64 {
    let path = std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap();
    let (from_child, to_parent) = nix::unistd::pipe().unwrap();
    let writer = to_parent.as_raw_fd();
    // SAFETY: the child makes only async-signal-safe calls (open, close, clock_gettime,
    // write) on a path and a pipe made before the fork.
    let code = pod.exit_code_in(ns, move || unsafe {
        let (mut start, mut end): (libc::timespec, libc::timespec) = (std::mem::zeroed(), std::mem::zeroed());
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut start);
        for _ in 0..n {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
            if fd < 0 {
                return 1;
            }
            libc::close(fd);
        }
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut end);
        let nanos = (end.tv_sec - start.tv_sec) * 1_000_000_000 + (end.tv_nsec - start.tv_nsec);
        let bytes = nanos.to_ne_bytes();
        if libc::write(writer, bytes.as_ptr().cast(), bytes.len()) != bytes.len() as isize {
            return 2;
        }
        0
    });
    assert_eq!(code, 0, "the pod's opens of {} failed (1: open, 2: the pipe)", file.display());
    drop(to_parent);
    let mut bytes = [0u8; 8];
    File::from(from_child).read_exact(&mut bytes).unwrap();
    i64::from_ne_bytes(bytes) as f64 / 1e9
}

#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host and in the VM"]
fn open_guard_cost() {
    let Some(cgroups) = PodCgroup::hierarchy("open_guard_cost") else { return };
    let owner = PodCgroup::new(&cgroups, LOAD_OWNER);
    let (tree, ns, target) = published_for_opens(LOAD_OWNER);
    let outside = tree.tmp.path().join("outside-the-volume");
    std::fs::write(&outside, b"x").unwrap();
    let other_fs = tree.tmp.path().join("another-filesystem");
    std::fs::create_dir_all(&other_fs).unwrap();
    ns.mount_tmpfs(&other_fs).unwrap();
    let elsewhere = other_fs.join("file");
    let written = elsewhere.clone();
    ns.run(move || std::fs::write(written, b"x")).unwrap();
    let in_volume = target.join("data");
    let cases: [(&str, &Path, Option<&PodCgroup>); 4] = [
        ("outside any volume, on a filesystem that holds none", &elsewhere, None),
        ("outside the volume, on its filesystem", &outside, None),
        ("in the volume, through its publish target, by a node process", &in_volume, None),
        ("in the volume, through its publish target, by the owner pod", &in_volume, Some(&owner)),
    ];
    let run = |case: usize, n: u64| match cases[case] {
        (_, file, None) => opens(&ns, file, n),
        (_, file, Some(pod)) => opens_by(pod, &ns, file, n),
    };
    let iterations: Vec<u64> = (0..cases.len()).map(|case| calibrate(|n| run(case, n), 10_000)).collect();
    let runs = alternate(&tree, &ns, "bench-open", cases.len(), |case| run(case, iterations[case]));
    let named: Vec<(&str, u64)> = cases.iter().zip(&iterations).map(|((name, ..), n)| (*name, *n)).collect();
    report("open", &runs, &named, |_| serde_json::json!({}));
    ns.umount(&target).unwrap();
    ns.umount(&other_fs).unwrap();
}

/// What `--deny-foreign-open` adds to the opens of benchmark 9 where no BPF LSM refuses
/// (quarantine): every open through the owned volume's mounts waits for the agent's
/// answer. Pairs of a reporting agent (`FAN_OPEN`) and a refusing one (`FAN_OPEN_PERM`),
/// each first in every other pair. With BPF LSM the flag does nothing: no line.
#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host"]
fn open_refusal_cost() {
    let (tree, ns, target) = published_for_opens("pod-a");
    let file = target.join("data");
    let iterations = calibrate(|n| opens(&ns, &file, n), 10_000);
    quiet_agents();
    let pins = pin_root("bench-open-refusal");
    let each_case = || vec![opens(&ns, &file, iterations)];
    let (mut reporting, mut refusing) = (Vec::new(), Vec::new());
    let mut last = None;
    for pair in 0..pairs() {
        let refusing_first = pair % 2 == 1;
        let report = || with_agent(&agent_binary(), &tree, &ns, &pins, &[], &each_case).seconds[0];
        let refuse = || with_agent(&agent_binary(), &tree, &ns, &pins, &["--deny-foreign-open", "true"], &each_case);
        let early = (!refusing_first).then(report);
        let run = refuse();
        reporting.push(early.unwrap_or_else(report));
        refusing.push(run.seconds[0]);
        last = Some(run);
    }
    let run = last.expect("at least one pair");
    if run.mode != "quarantine" {
        eprintln!("open_refusal_cost: mode {}: --deny-foreign-open refuses nothing there; no line", run.mode);
        return;
    }
    let (backend, mode, program_runs) = (run.backend, run.mode, BTreeMap::new());
    let runs = Alternated { without: vec![reporting], with: vec![refusing], backend, mode, program_runs };
    let case = [("in the volume, through its publish target, by a node process", iterations)];
    report_against("agent reporting opens", "open_refusal", &runs, &case, |_| serde_json::json!({}));
    ns.umount(&target).unwrap();
}

/// One tax loop: `n` iterations of a syscall workload.
type Workload = fn(u64);

fn getppid_loop(n: u64) {
    for _ in 0..n {
        std::hint::black_box(nix::unistd::getppid());
    }
}

fn read_write_loop(n: u64) {
    let (mut zero, mut null) = (File::open("/dev/zero").unwrap(), File::create("/dev/null").unwrap());
    let mut buf = [0u8; 4096];
    for _ in 0..n {
        zero.read_exact(&mut buf).unwrap();
        null.write_all(&buf).unwrap();
    }
}

/// Seconds for `n` iterations of `workload`, on a thread pinned to `LOOP_CPU`.
fn pinned(workload: Workload, n: u64) -> f64 {
    std::thread::spawn(move || {
        let mut cpus = CpuSet::new();
        cpus.set(LOOP_CPU).unwrap();
        nix::sched::sched_setaffinity(Pid::from_raw(0), &cpus).expect("pin the loop to one CPU");
        let started = Instant::now();
        workload(n);
        started.elapsed().as_secs_f64()
    })
    .join()
    .unwrap()
}

#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host and in the VM"]
fn tax_on_unrelated_syscalls() {
    let loops: [(&str, Workload); 2] = [("getppid", getppid_loop), ("read+write 4 KiB", read_write_loop)];
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let iterations: Vec<u64> = loops.iter().map(|(_, w)| calibrate(|n| pinned(*w, n), 100_000)).collect();
    let runs = alternate(&tree, &ns, "bench-tax", loops.len(), |case| pinned(loops[case].1, iterations[case]));
    let cases: Vec<(&str, u64)> = loops.iter().zip(&iterations).map(|((name, _), n)| (*name, *n)).collect();
    report("tax", &runs, &cases, |_| serde_json::json!({ "loop_cpu": LOOP_CPU }));
}

/// 9e: the owner's opens per millisecond, and for how long.
const OPENS_PER_MS: u64 = 10;
const LOAD_WINDOW: Duration = Duration::from_secs(10);
/// `GET /healthz` this often while the owner opens.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// The owner pod of 9e, and another pod that reads once after the load (cgroups named as
/// kubelet names a pod's).
const LOAD_OWNER: &str = "0c3c2d5e-0000-4a6e-9f00-00000000be9e";
const LOAD_READER: &str = "0c3c2d5e-0000-4a6e-9f00-00000000be9f";

/// The agent's CPU time so far (utime + stime), in seconds.
fn cpu_seconds(agent: &Agent) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", agent.pid())).unwrap();
    // The fields after the command (in parentheses, which may hold spaces): utime and
    // stime are the 12th and 13th.
    let after = stat.rsplit_once(')').unwrap().1;
    let fields: Vec<u64> = after.split_whitespace().skip(11).take(2).map(|f| f.parse().unwrap()).collect();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (fields[0] + fields[1]) as f64 / ticks
}

/// 9e (no BPF LSM, where the agent reads a notice of each open through the owner's
/// publish): the agent's CPU while a process of the owner's pod opens and closes its file
/// `OPENS_PER_MS` times each millisecond for `LOAD_WINDOW`, as a share of one core, against
/// the same agent's over an idle window as long just before; and `GET /healthz` every
/// `PROBE_EVERY` meanwhile (its worst and 99th-percentile answer). Nothing may be lost: the
/// agent logs no overflow of its queue and no dropped report, and another pod's open right
/// after the load is reported. With BPF LSM the kernel answers the opens: no line.
// Long by design: the idle window, the load, the probes and the loss checks share one agent.
#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host"]
fn agent_cpu_while_the_owner_opens_files() {
    let Some(cgroups) = PodCgroup::hierarchy("agent_cpu_while_the_owner_opens_files") else { return };
    let owner = PodCgroup::new(&cgroups, LOAD_OWNER);
    let (tree, ns, target) = published_for_opens(LOAD_OWNER);
    quiet_agents();
    let pins = pin_root("bench-open-load");
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    let (backend, mode) = (agent.trace_backend(), agent.mode());
    if mode != "quarantine" {
        eprintln!("agent_cpu_while_the_owner_opens_files: mode {mode}: the kernel answers opens; no line");
    } else {
        agent.wait_for_line("the publish watched", |l| l.contains("open reports: volume pv-rwop's files watched at"));
        let started = (Instant::now(), cpu_seconds(&agent));
        std::thread::sleep(LOAD_WINDOW);
        let idle = (cpu_seconds(&agent) - started.1) / started.0.elapsed().as_secs_f64();

        let path = std::ffi::CString::new(target.join("data").into_os_string().into_encoded_bytes()).unwrap();
        let ticks = LOAD_WINDOW.as_millis() as u64;
        let started = (Instant::now(), cpu_seconds(&agent));
        // SAFETY: the child makes only async-signal-safe calls (open, close, clock_gettime,
        // clock_nanosleep) on a path made before the fork.
        let child = owner.fork_in(
            &ns,
            move || unsafe {
                let mut next: libc::timespec = std::mem::zeroed();
                libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut next);
                for _ in 0..ticks {
                    for _ in 0..OPENS_PER_MS {
                        let fd = libc::open(path.as_ptr(), libc::O_RDONLY);
                        if fd < 0 {
                            return 1;
                        }
                        libc::close(fd);
                    }
                    next.tv_nsec += 1_000_000;
                    if next.tv_nsec >= 1_000_000_000 {
                        next.tv_sec += 1;
                        next.tv_nsec -= 1_000_000_000;
                    }
                    libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &next, std::ptr::null_mut());
                }
                0
            },
            false,
        );
        let metrics = agent.address("metrics");
        let mut probes_ms = Vec::new();
        let status = loop {
            let sent = Instant::now();
            let (code, _) = http_get(&metrics, "/healthz");
            assert_eq!(code, 200, "/healthz while the owner opens its files");
            probes_ms.push(sent.elapsed().as_secs_f64() * 1e3);
            match nix::sys::wait::waitpid(child, Some(nix::sys::wait::WaitPidFlag::WNOHANG)).unwrap() {
                nix::sys::wait::WaitStatus::StillAlive => {
                    std::thread::sleep(PROBE_EVERY.saturating_sub(sent.elapsed()))
                }
                done => break done,
            }
        };
        let elapsed = started.0.elapsed().as_secs_f64();
        let loaded = (cpu_seconds(&agent) - started.1) / elapsed;
        assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0), "the owner's opens failed");
        let lost = agent.count_lines(|l| l.contains("queue overflowed") || l.contains("report(s) dropped"));
        assert_eq!(lost, 0, "the agent lost opens or reports under the owner's load");
        let reader_pod = PodCgroup::new(&cgroups, LOAD_READER);
        let reader = reader_pod.holding_open(&ns, &target.join("data"));
        let reported = format!("pod {LOAD_READER} opened");
        agent.wait_for_line("another pod's open after the load", |l| l.contains(&reported));
        drop(reader);
        probes_ms.sort_by(f64::total_cmp);
        let p99 = probes_ms[(probes_ms.len() * 99 / 100).min(probes_ms.len() - 1)];
        let line = serde_json::json!({
            "bench": "open_load",
            "backend": backend,
            "mode": mode,
            "opens_per_second": (ticks * OPENS_PER_MS) as f64 / elapsed,
            "window_s": elapsed,
            "cpu_share": loaded,
            "idle_cpu_share": idle,
            "healthz_probes": probes_ms.len(),
            "healthz_p99_ms": p99,
            "healthz_worst_ms": probes_ms.last().copied().unwrap_or_default(),
        });
        println!("volguard-bench: {line}");
    }
    agent.stop();
    uninstall(&pins);
    ns.umount(&target).unwrap();
}
