//! Benchmark 1b of `cargo xtask bench`: what the LSM hooks add to a mount syscall. Runs in
//! the VM, where BPF LSM enforces; the host kernel refuses LSM programs. `cargo xtask
//! bench` boots the VM, runs this and reads the `volguard-bench:` lines it prints.
//!
//! N bind + umount cycles, alternating no agent / the real agent in enforce mode (tracing
//! and LSM programs attached), for two cases: a bind outside the kubelet tree (the hook
//! walks the target and lets it go) and the owner publishing its ReadWriteOncePod volume
//! (the full decision: a claim at each bind, a release at each unmount).

use std::{path::Path, time::Instant};

use crate::support::{
    bpf_in_lsm_list,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, uninstall},
};

const CYCLES: usize = 1000;
const REPS: usize = 5;

/// Seconds for `CYCLES` bind + umount cycles of `source` onto `target`, inside `ns`, and
/// how many unmounts had to be retried. (After an owner's publish the agent stats the new
/// mount to record its tree root; an unmount in the same microseconds finds it busy.
/// kubelet retries such an unmount; so does this loop, and the count is reported.)
fn cycles(ns: &MountNs, source: &Path, target: &Path) -> (f64, u64) {
    let (source, target) = (source.to_path_buf(), target.to_path_buf());
    ns.run(move || {
        let mut retries = 0;
        let started = Instant::now();
        for _ in 0..CYCLES {
            let flags = nix::mount::MsFlags::MS_BIND;
            nix::mount::mount(Some(&source), &target, None::<&str>, flags, None::<&str>).expect("bind");
            loop {
                match nix::mount::umount2(&target, nix::mount::MntFlags::empty()) {
                    Ok(()) => break,
                    Err(nix::errno::Errno::EBUSY) if retries < 100_000 => retries += 1,
                    Err(e) => panic!("umount: {e}"),
                }
            }
        }
        (started.elapsed().as_secs_f64(), retries)
    })
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask bench)"]
fn enforcement_overhead_per_mount_syscall() {
    assert!(bpf_in_lsm_list(), "precondition: booted with bpf in lsm=");
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let pins = pin_root("bench");
    let source = tree.volume("pv-rwop");
    let outside = tree.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let cases = [
        ("outside the kubelet tree", outside),
        ("owner publishes its RWOP volume", tree.publish_dir("pod-a", "pv-rwop")),
    ];
    let mut without = vec![Vec::new(); cases.len()];
    let mut with = vec![Vec::new(); cases.len()];
    let mut busy = vec![0u64; cases.len()];
    for (_, target) in &cases {
        cycles(&ns, &source, target); // warm-up
    }
    for rep in 0..REPS {
        for (i, (_, target)) in cases.iter().enumerate() {
            without[i].push(cycles(&ns, &source, target).0);
        }
        let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
        assert_eq!(agent.mode(), "enforce", "the LSM hooks must be what is measured");
        for (i, (_, target)) in cases.iter().enumerate() {
            let (seconds, retries) = cycles(&ns, &source, target);
            with[i].push(seconds);
            busy[i] += retries;
        }
        agent.stop();
        // Enforcement outlives a clean stop (pinned): remove it for the next baseline.
        uninstall(&pins);
        eprintln!(
            "rep {rep}: without {:?} s, with {:?} s",
            without.iter().map(|v| v[rep]).collect::<Vec<_>>(),
            with.iter().map(|v| v[rep]).collect::<Vec<_>>()
        );
    }
    for (i, (case, _)) in cases.iter().enumerate() {
        let line = serde_json::json!({
            "case": case,
            "cycles": CYCLES,
            "without_s": without[i],
            "with_s": with[i],
            "umount_busy_retries": busy[i],
        });
        println!("volguard-bench: {line}");
    }
}
