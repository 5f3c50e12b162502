//! The tracing backend chosen at start-up (root): trampolines where the kernel allows
//! them, else fanotify mount notifications where they work (quarantine mode), else
//! syscall tracepoints, and the agent says which and why. This host's kernel refuses
//! trampolines (BPF_PROG_LOAD of fentry: EPERM) and has mount notifications (6.18), so
//! here auto picks fanotify; the VM's kernels allow trampolines (`cargo xtask vm-test`
//! runs this area there too).

use std::{path::Path, process::Command};

use volguard::kernel::{
    loader::LoadedObject,
    trace_backend::{self, Backend, BackendChoice, FanotifyProbe, TrampolineProbe},
};

use crate::support::{
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, syscall_backend},
};

fn in_vm() -> bool {
    std::env::var_os("VOLGUARD_IN_VM").is_some()
}

#[test]
fn auto_takes_trampolines_where_allowed_else_fanotify_else_tracepoints_and_the_agent_says_why() {
    if !have_root("auto_takes_trampolines_where_allowed_else_fanotify_else_tracepoints_and_the_agent_says_why") {
        return;
    }
    let probe = trace_backend::probe(&mut LoadedObject::load().unwrap());
    // The agent below reads the host's mount table, so it watches the host's namespace.
    let fanotify = trace_backend::needs_fanotify_probe(BackendChoice::Auto, false, Some(&probe))
        .then(|| trace_backend::probe_fanotify(Path::new("/proc/1/ns/mnt")).0);
    let decision = trace_backend::decide(BackendChoice::Auto, false, Some(&probe), fanotify.as_ref()).unwrap();
    eprintln!("probes: {probe:?}, {fanotify:?}; decision: {} ({decision})", decision.backend);
    let refused = match &probe {
        TrampolineProbe::Refused(why) => Some(why.clone()),
        TrampolineProbe::Works { .. } => None,
    };
    let label = decision.reason.label();
    match (&refused, &fanotify) {
        (Some(why), Some(FanotifyProbe::Works)) => {
            assert!(!in_vm(), "the VM's kernels allow trampolines: {why}");
            assert_eq!((decision.backend, label), (Backend::Fanotify, "trampolines_refused_fanotify_works"));
            assert!(decision.to_string().contains(why.as_str()), "{decision}");
        }
        (Some(why), _) => {
            assert!(!in_vm(), "the VM's kernels allow trampolines: {why}");
            assert_eq!((decision.backend, label), (Backend::Tracepoints, "trampolines_and_fanotify_refused"));
            assert!(decision.to_string().contains(why.as_str()), "{decision}");
        }
        (None, _) => {
            assert_eq!((decision.backend, label), (Backend::Trampolines, "trampolines_work"));
            assert!(decision.fallbacks.is_empty(), "every syscall function is in BTF: {:?}", decision.fallbacks);
        }
    }

    // The real agent, told `auto` whatever the harness forces: ready line, status, metric.
    let tree = KubeletTree::new();
    let agent =
        Agent::start_with(&tree.root(), &pin_root("trace-backend"), &[], "quarantine", &["--trace-backend", "auto"]);
    let expected = decision.backend.to_string();
    assert_eq!(agent.trace_backend(), expected);
    agent.wait_for_line("the backend's log line", |l| l.contains(&format!("tracing backend {expected}: auto")));
    let (_, status) = http_get(&agent.address("debug API"), "/debug/status");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["traceBackend"], expected.as_str(), "{status}");
    let reason = status["traceBackendReason"].as_str().unwrap_or_default();
    match &refused {
        Some(why) => assert!(reason.contains("refuses trampolines") && reason.contains(why.as_str()), "{reason}"),
        None => assert!(reason.contains("fentry/fexit load and attach"), "{reason}"),
    }
    let losses = status["traceBackendLosses"].as_array().map_or(0, Vec::len);
    assert_eq!(losses > 0, decision.backend == Backend::Fanotify, "what is lost is said: {status}");
    if decision.backend == Backend::Fanotify {
        agent.wait_for_line("what fanotify loses", |l| l.contains("fanotify does not report: the caller"));
    }
    let (_, metrics) = http_get(&agent.address("metrics"), "/metrics");
    let series = format!("volguard_trace_backend{{backend=\"{expected}\",reason=\"{label}\"}} 1");
    assert!(metrics.contains(&series), "{series} not in {metrics}");
    agent.stop();

    // Forcing trampolines where the kernel refuses them stops the start, saying why.
    if let Some(why) = refused {
        let out = Command::new(agent_binary())
            .args(["run", "--mode", "quarantine", "--trace-backend", "trampolines", "--kubelet-root"])
            .arg(tree.root())
            .args(["--metrics-address", "127.0.0.1:0", "--debug-address", "127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("--trace-backend trampolines: the kernel refuses trampolines") && stderr.contains(&why),
            "{stderr}"
        );
    }
}

/// The sum of a counter family's samples in a /metrics text.
fn family_sum(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn bpf_stats_on_request_count_each_programs_runs_and_time() {
    if !have_root("bpf_stats_on_request_count_each_programs_runs_and_time") {
        return;
    }
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    // Programs to count: a syscall backend (auto picks fanotify, which runs none, on this host).
    let [flag, backend] = syscall_backend();
    let agent =
        Agent::start_in(&ns, &tree.root(), &pin_root("bpf-stats"), &[], &["--bpf-stats", "true", flag, backend]);
    agent.wait_for_line("the statistics' log line", |l| l.contains("BPF run-time statistics on"));
    let (source, target) = (tree.volume("pv-a"), tree.tmp.path().join("stats-target"));
    std::fs::create_dir_all(&target).unwrap();
    ns.bind(&source, &target).unwrap();
    ns.umount(&target).unwrap();
    let metrics = || http_get(&agent.address("metrics"), "/metrics").1;
    let text = metrics();
    assert!(text.contains("volguard_bpf_stats_enabled 1"), "{text}");
    // The mount and unmount ran the tracing programs: counted, and timed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while family_sum(&metrics(), "volguard_bpf_program_runs_total") < 2.0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let text = metrics();
    assert!(family_sum(&text, "volguard_bpf_program_runs_total") >= 2.0, "{text}");
    assert!(family_sum(&text, "volguard_bpf_program_run_seconds_total") > 0.0, "{text}");
    // The same counts per program, with nanoseconds per run, for people.
    let debug = agent.address("debug API");
    let shown =
        Command::new(agent_binary()).args(["status", "--programs", "--debug-address", &debug]).output().unwrap();
    let table = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{}", String::from_utf8_lossy(&shown.stderr));
    let timed = table.lines().skip(1).filter(|l| {
        let cells: Vec<&str> = l.split_whitespace().collect();
        cells.len() == 4 && cells[1].parse::<u64>().is_ok_and(|runs| runs >= 1) && cells[2].parse::<u64>().is_ok()
    });
    assert!(timed.count() >= 1, "a program with its runs and nanoseconds per run:\n{table}");
    agent.stop();
}

#[test]
fn bpf_stats_stay_off_unless_asked() {
    if !have_root("bpf_stats_stay_off_unless_asked") {
        return;
    }
    let tree = KubeletTree::new();
    let agent = Agent::start_with(&tree.root(), &pin_root("bpf-stats-off"), &[], "quarantine", &[]);
    let text = http_get(&agent.address("metrics"), "/metrics").1;
    // The sysctl shows only what was written to it (not statistics another tool turned on
    // with BPF_ENABLE_STATS); the agent reports it as is.
    let expected = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap().trim().to_owned();
    assert!(text.contains(&format!("volguard_bpf_stats_enabled {expected}")), "{text}");
    if expected == "0" {
        assert!(!text.contains("volguard_bpf_program_runs_total"), "no counts that stand still:\n{text}");
    }
    agent.stop();
}
