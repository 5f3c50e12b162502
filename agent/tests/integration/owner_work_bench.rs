//! Benchmark 10 of `cargo xtask bench`: what the guard costs real work, run on the host
//! (once per tracing backend). A loop of opens is not what a pod runs; these are:
//! `volguard-bench-work` unpacking a tree of 10,000 small files and reading it back three
//! times, a sqlite database (100,000 inserts in commits of 100, 50,000 selects by key), and
//! a 1 GiB stream written with an fsync and read back. Each runs as a process of the
//! volume's owner pod in its published volume (a tmpfs of its own), and as a node process
//! on another tmpfs (what work outside any volume pays).
//!
//! Measured in rounds of every workload: without the agent, with a fresh agent, and (where
//! no BPF LSM refuses, so the agent quarantines and reports) with a fresh agent refusing
//! another pod's opens (`--deny-foreign-open`, whose fanotify permission events the owner's
//! opens wait on too); the order turns over from round to round. Each ratio is taken
//! within its round, as `syscall_bench`'s pairs are.

use std::{
    ffi::CString,
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::{Path, PathBuf},
    process::Command,
};

use crate::{
    support::{
        kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, quiet_agents, uninstall},
        pod_cgroup::PodCgroup,
    },
    syscall_bench::{Alternated, report_against},
};

/// Rounds per measure (fewer where `VOLGUARD_BENCH_PAIRS` asks for fewer): each is some
/// 15 s of work per agent flavour on the host.
const ROUNDS: usize = 9;
/// The owner pod (a cgroup named as kubelet names a pod's).
const OWNER: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000f0";

/// The workload binary: `VOLGUARD_BENCH_WORK_BIN` (what `cargo xtask bench` built), else
/// the release build beside this workspace's.
fn bench_work_binary() -> PathBuf {
    let binary = std::env::var_os("VOLGUARD_BENCH_WORK_BIN").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/volguard-bench-work"),
        PathBuf::from,
    );
    // Absolute: joining a mount namespace (before the exec) moves to its root.
    std::fs::canonicalize(&binary).unwrap_or_else(|e| {
        panic!("{}: {e}: cargo build --release -p volguard-bench-work (cargo xtask bench builds it)", binary.display())
    })
}

/// Seconds `volguard-bench-work <args>` reports, run in `ns` by a process of `pod` (or by
/// a node process): it joins the cgroup and the namespace between fork and exec.
fn work(pod: Option<&PodCgroup>, ns: &MountNs, args: &[String]) -> f64 {
    let namespace = std::fs::File::open(format!("/proc/{}/task/{}/ns/mnt", std::process::id(), ns.tid)).unwrap();
    let namespace_fd = namespace.as_raw_fd();
    let procs = pod.map(|p| CString::new(p.procs().into_os_string().into_encoded_bytes()).unwrap());
    let mut command = Command::new(bench_work_binary());
    command.args(args);
    // SAFETY: between fork and exec the child makes only async-signal-safe calls (open,
    // write, close, setns) on a string and a descriptor made before the fork.
    unsafe {
        command.pre_exec(move || {
            if let Some(procs) = &procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            if libc::setns(namespace_fd, libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = command.output().expect("running volguard-bench-work");
    assert!(out.status.success(), "volguard-bench-work {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.trim().parse().unwrap_or_else(|e| panic!("volguard-bench-work {args:?} printed {stdout:?}: {e}"))
}

/// One workload in one place, by its owner pod or a node process.
struct Case {
    name: String,
    pod: bool,
    args: Vec<String>,
}

fn cases(archive: &Path, volume: &Path, elsewhere: &Path) -> Vec<Case> {
    let mut cases = Vec::new();
    for (place, dir, pod) in
        [("the owner, in its volume", volume, true), ("a node process, outside any volume", elsewhere, false)]
    {
        let (archive, dir) = (archive.display().to_string(), dir.display().to_string());
        for (work, args) in [
            ("unpack 10,000 files and read them 3 times", vec!["unpack".into(), archive.clone(), dir.clone()]),
            ("sqlite: 100,000 inserts in 1,000 commits, 50,000 selects", vec!["database".into(), dir.clone()]),
            ("1 GiB written with fsync and read back", vec!["stream".into(), dir.clone()]),
        ] {
            cases.push(Case { name: format!("{work}: {place}"), pod, args });
        }
    }
    cases
}

/// The owner's volume (a tmpfs), its publish target, and a place outside any volume (a
/// tmpfs too: the bench's own is small), mounted in `ns`.
fn places(tree: &KubeletTree, ns: &MountNs) -> [PathBuf; 3] {
    let volume = tree.volume("pv-rwop");
    ns.mount_tmpfs(&volume).unwrap();
    let target = tree.publish_dir(OWNER, "pv-rwop");
    ns.bind(&volume, &target).unwrap();
    let elsewhere = tree.tmp.path().join("another-filesystem");
    std::fs::create_dir_all(&elsewhere).unwrap();
    ns.mount_tmpfs(&elsewhere).unwrap();
    [volume, target, elsewhere]
}

/// What a run has attached: nothing, a fresh agent, or a fresh agent refusing other pods' opens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    NoAgent,
    Reporting,
    Refusing,
}

#[test]
#[ignore = "a benchmark: cargo xtask bench runs it on the host"]
fn real_work_of_the_owner_and_outside_any_volume() {
    let Some(cgroups) = PodCgroup::hierarchy("real_work_of_the_owner") else { return };
    let owner = PodCgroup::new(&cgroups, OWNER);
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let [volume, target, elsewhere] = places(&tree, &ns);
    let archive = tree.tmp.path().join("tree.tar");
    let made = Command::new(bench_work_binary()).args(["make-archive".as_ref(), archive.as_os_str()]).status();
    assert!(made.is_ok_and(|s| s.success()), "making the archive");
    let cases = cases(&archive, &target, &elsewhere);
    let run_all =
        || -> Vec<f64> { cases.iter().map(|case| work(case.pod.then_some(&owner), &ns, &case.args)).collect() };

    quiet_agents();
    let pins = pin_root("bench-owner-work");
    let with_agent = |extra: &[&str]| -> (Vec<f64>, String, String) {
        let agent = Agent::start_binary_in(&agent_binary(), &ns, &tree.root(), &pins, &["pv-rwop"], extra);
        let (backend, mode) = (agent.trace_backend(), agent.mode());
        if mode == "quarantine" {
            // The owner's opens cost what they cost once its publish is watched.
            agent.wait_for_line("the publish watched", |l| {
                l.contains("open reports: volume pv-rwop's files watched at")
            });
        }
        let seconds = run_all();
        agent.stop();
        uninstall(&pins);
        (seconds, backend, mode)
    };
    let (mut none, mut reporting, mut refusing) = (Vec::new(), Vec::new(), Vec::new());
    let (mut backend, mut mode) = (String::new(), String::new());
    for round in 0..ROUNDS.min(crate::syscall_bench::pairs()) {
        let mut order = vec![Flavour::NoAgent, Flavour::Reporting, Flavour::Refusing];
        if round % 2 == 1 {
            order.reverse();
        }
        for flavour in order {
            match flavour {
                Flavour::NoAgent => none.push(run_all()),
                Flavour::Reporting => {
                    let (seconds, b, m) = with_agent(&[]);
                    (backend, mode) = (b, m);
                    reporting.push(seconds);
                }
                // Where the kernel refuses (BPF LSM) the flag changes nothing: not run.
                Flavour::Refusing if mode != "quarantine" && !mode.is_empty() => {}
                Flavour::Refusing => refusing.push(with_agent(&["--deny-foreign-open", "true"]).0),
            }
        }
        eprintln!("owner work round {round} ({backend} {mode}): none {:?}, agent {:?}", none.last(), reporting.last());
    }
    // Runs per case, round by round.
    let by_case = |runs: &[Vec<f64>]| -> Vec<Vec<f64>> {
        (0..cases.len()).map(|c| runs.iter().map(|round| round[c]).collect()).collect()
    };
    let named: Vec<(&str, u64)> = cases.iter().map(|c| (c.name.as_str(), 1)).collect();
    let report = |bench: &str, with: &[Vec<f64>], without: &[Vec<f64>]| {
        let runs = Alternated {
            without: by_case(without),
            with: by_case(with),
            backend: backend.clone(),
            mode: mode.clone(),
            program_runs: Default::default(),
        };
        report_against("no agent", bench, &runs, &named, |_| serde_json::json!({}));
    };
    report("owner_work", &reporting, &none);
    if !refusing.is_empty() {
        report("owner_work_refusing", &refusing, &none);
    }
    ns.umount(&target).unwrap();
    ns.umount(&elsewhere).unwrap();
    ns.umount(&volume).unwrap();
}
