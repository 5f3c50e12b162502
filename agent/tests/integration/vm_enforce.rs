//! ReadWriteOncePod enforcement in the kernel, with the real agent. BPF LSM and trampolines
//! are refused on this host, so these run in the VM (`cargo xtask vm-test`): with `bpf` in
//! `lsm=` the BPF LSM programs refuse; without it the same tests run with the programs
//! attached as fmod_ret, and where the boot turns fmod_ret off auto mode must fall back to
//! quarantine and say why.

use std::{fs, path::Path};

use nix::errno::Errno;
use volguard::kernel::{
    loader::SecurityHooks,
    maps::EnforcementMaps,
    pins::{Pins, loaded_program_ids},
};
use volguard_common::programs::SB_MOUNT_ENFORCE;

use crate::support::{
    bpf_in_lsm_list,
    bpf_programs::{BPF_PROG_TYPE_TRACING, loaded_programs},
    expected_security_hooks, kernel_refuses,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, uninstall},
    stories::quarantine_end_to_end,
};

fn pinned_owners(pin_root: &Path) -> Vec<(String, String)> {
    EnforcementMaps::open_pinned(&Pins::new(pin_root)).unwrap().owners().unwrap()
}

fn pinned_links(pins: &Path) -> Vec<String> {
    let mut links: Vec<String> = fs::read_dir(pins.join("links"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    links.sort();
    links
}

/// The pinned link of the `sb_mount` program, attached as this boot's agents attach it.
fn sb_mount_link() -> String {
    let via = match expected_security_hooks().as_str() {
        "fmod_ret" => SecurityHooks::FModRet,
        _ => SecurityHooks::BpfLsm,
    };
    volguard::kernel::loader::enforce_hooks(via)[0].link_name()
}

fn owners(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(v, p)| (v.to_string(), p.to_string())).collect()
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_a_second_pod_on_every_route_and_settles_claims() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("enforce");
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop", "pv-blk", "pv-other"], &[]);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));
    let (rwop, rwo) = (tree.volume("pv-rwop"), tree.volume("pv-rwo"));
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));

    assert_eq!(ns.bind(&rwop, &a), Ok(()), "the first publish claims the volume");
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "mount(2) bind into another pod");
    assert_eq!(
        ns.bind_via_fd(&rwop, &b),
        Err(Errno::EBUSY),
        "runc's /proc/thread-self/fd/N target resolves to pod-b's"
    );
    assert_eq!(ns.clone_and_move(&rwop, &b), Err(Errno::EBUSY), "open_tree + move_mount into another pod");
    assert_eq!(ns.mount_tmpfs(&b), Err(Errno::EBUSY), "a new mount (not a bind) into another pod");
    let staging = tree.tmp.path().join("to-move");
    fs::create_dir_all(&staging).unwrap();
    assert_eq!(ns.move_onto(&staging, &b), Err(Errno::EBUSY), "mount(2) MS_MOVE into another pod");
    assert_eq!(ns.fsmount_and_move(&b), Err(Errno::EBUSY), "fsmount + move_mount into another pod");
    assert_eq!(ns.mount_at(&b), None, "nothing was mounted on pod-b's target");
    agent.wait_for_line("the conflict", |l| {
        l.contains("CONFLICT blocked") && l.contains("\"pv-rwop\"") && l.contains("pod-a") && l.contains("pod-b")
    });
    assert_eq!(ns.bind(&rwop, &a), Ok(()), "the owner may publish again");

    // A ReadWriteOnce volume is never touched.
    let (rwo_a, rwo_b) = (tree.publish_dir("pod-a", "pv-rwo"), tree.publish_dir("pod-b", "pv-rwo"));
    assert_eq!((ns.bind(&rwo, &rwo_a), ns.bind(&rwo, &rwo_b)), (Ok(()), Ok(())));

    // The raw-block publish form.
    let device = tree.tmp.path().join("fake-device");
    fs::write(&device, b"").unwrap();
    let (blk_a, blk_b) = (tree.block_publish_file("pod-a", "pv-blk"), tree.block_publish_file("pod-b", "pv-blk"));
    assert_eq!(ns.bind(&device, &blk_a), Ok(()));
    assert_eq!(ns.bind(&device, &blk_b), Err(Errno::EBUSY), "block publish into another pod");

    // A claim whose mount fails is rolled back: another pod may publish.
    let missing = tree.tmp.path().join("no-such-volume");
    assert_eq!(ns.bind(&missing, &tree.publish_dir("pod-c", "pv-other")), Err(Errno::ENOENT));
    assert_eq!(ns.bind(&tree.volume("pv-other"), &tree.publish_dir("pod-d", "pv-other")), Ok(()));

    assert_eq!(pinned_owners(&pins), owners(&[("pv-blk", "pod-a"), ("pv-other", "pod-d"), ("pv-rwop", "pod-a")]));

    // Release only when the owner's publish target itself is unmounted (the owner's
    // second mount is stacked on the first).
    ns.umount(&a).unwrap();
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "still published under the stacked mount");
    ns.umount(&a).unwrap();
    assert_eq!(ns.bind(&rwop, &b), Ok(()), "after the owner unmounts, another pod may publish");
    assert!(pinned_owners(&pins).contains(&("pv-rwop".into(), "pod-b".into())));

    agent.stop();
    uninstall(&pins);
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_moving_a_tree_from_inside_an_owned_volume_under_another_pod() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("source");
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    let volume = tree.volume("pv-rwop");
    fs::create_dir(volume.join("data")).unwrap();
    let a = tree.publish_dir("pod-a", "pv-rwop");
    assert_eq!(ns.bind(&volume, &a), Ok(()));
    // Recorded by the kernel at the bind's own exit: the refusals below need no wait.
    let recorded = "volguard_kernel_events_total{counter=\"published_roots_recorded\"}";
    assert_eq!(agent.metric(recorded), 1.0, "the owner's publish recorded its tree root");
    let subpath = |pod: &str| {
        let dir = tree.root().join(format!("pods/{pod}/volume-subpaths/pv-rwop/app/0"));
        fs::create_dir_all(&dir).unwrap();
        dir
    };
    let (into_a, into_b) = (subpath("pod-a"), subpath("pod-b"));

    assert_eq!(ns.clone_and_move(&a.join("data"), &into_b), Err(Errno::EBUSY), "through pod-a's publish target");
    assert_eq!(ns.clone_and_move(&volume.join("data"), &into_b), Err(Errno::EBUSY), "the same tree by another path");
    agent.wait_for_line("the conflict", |l| l.contains("CONFLICT blocked") && l.contains("tree inside the volume"));
    assert_eq!(ns.clone_and_move(&a.join("data"), &into_a), Ok(()), "the owner's own pod may");
    assert_eq!(ns.clone_and_move(&tree.volume("unrelated"), &into_b), Ok(()), "other trees may");
    // Documented gap: mount(2) hands the LSM only the source *string*, so a classic bind
    // from inside the volume is not recognised in the kernel.
    assert_eq!(ns.bind(&a.join("data"), &into_b), Ok(()));

    // After the owner unmounts, its tree may go anywhere.
    ns.umount(&into_a).unwrap();
    ns.umount(&into_b).unwrap();
    ns.umount(&into_b).unwrap();
    ns.umount(&a).unwrap();
    assert_eq!(ns.clone_and_move(&volume.join("data"), &into_b), Ok(()));
    agent.stop();
    uninstall(&pins);
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforcement_survives_sigkill_and_a_new_agent_adopts_it() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("restart");
    let ns = MountNs::new();
    let rwop = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));

    let first = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    assert_eq!(ns.bind(&rwop, &a), Ok(()));
    first.sigkill();
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "still enforced with no agent running");

    let second = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    second.wait_for_line("adoption", |l| {
        l.contains("adopted the pinned enforcement state") && l.contains("1 owned volumes")
    });
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "enforced by the new agent");
    assert_eq!(pinned_owners(&pins), owners(&[("pv-rwop", "pod-a")]), "exactly one owner, unchanged");
    let links = pinned_links(&pins);
    assert!(links.iter().all(|l| !l.ends_with("~new")), "no half-swapped pins: {links:?}");
    assert!(links.contains(&sb_mount_link()), "{links:?}");

    second.stop();
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "a clean stop keeps enforcement too");
    uninstall(&pins);
    assert!(!pins.exists());
    assert_eq!(ns.bind(&rwop, &b), Ok(()), "uninstall removes enforcement");
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforce_seeds_owners_already_mounted_before_the_first_agent_started() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("seed");
    let ns = MountNs::new();
    let volume = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    assert_eq!(ns.bind(&volume, &a), Ok(()), "published before any agent runs");
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    assert_eq!(pinned_owners(&pins), owners(&[("pv-rwop", "pod-a")]), "seeded from the mount table");
    assert_eq!(ns.bind(&volume, &b), Err(Errno::EBUSY));
    agent.stop();
    uninstall(&pins);
}

/// The mode and tracing backend the VM boot's row of the compatibility table says auto
/// picks on this kernel (`cargo xtask vm-test` exports them; docs/compatibility.md).
fn expected_choice() -> (String, String, String) {
    let read = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the VM boot"));
    (read("VOLGUARD_EXPECT_MODE"), read("VOLGUARD_EXPECT_HOOKS"), read("VOLGUARD_EXPECT_BACKEND"))
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn with_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says() {
    assert!(bpf_in_lsm_list(), "precondition: booted with bpf in lsm=");
    let tree = KubeletTree::new();
    let pins = pin_root("auto-choice");
    // Auto for both, whatever backend the run forces on other agents.
    let agent = Agent::start_with(&tree.root(), &pins, &[], "auto", &["--trace-backend", "auto"]);
    assert_eq!((agent.mode(), agent.security_hooks(), agent.trace_backend()), expected_choice());
    agent.stop();
    uninstall(&pins);
}

/// Quarantine acts on what the backend sees: auto must take the one that sees the most.
#[test]
#[ignore = "needs a kernel booted without bpf in lsm=: runs in the VM (cargo xtask vm-test)"]
fn without_bpf_in_lsm_auto_picks_the_mode_and_backend_the_matrix_says() {
    assert!(!bpf_in_lsm_list(), "precondition: booted without bpf in lsm=");
    let tree = KubeletTree::new();
    let pins = pin_root("auto-choice-nobpf");
    let agent = Agent::start_with(&tree.root(), &pins, &[], "auto", &["--trace-backend", "auto"]);
    assert_eq!((agent.mode(), agent.security_hooks(), agent.trace_backend()), expected_choice());
    agent.stop();
    // Enforce by fmod_ret pins its programs; quarantine pins nothing (and removes nothing).
    uninstall(&pins);
}

#[test]
#[ignore = "needs a kernel booted without bpf in lsm=: runs in the VM (cargo xtask vm-test)"]
fn without_bpf_in_lsm_auto_mode_picks_quarantine_and_says_why() {
    assert!(!bpf_in_lsm_list(), "precondition: booted without bpf in lsm=");
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("nobpf"), &["pv-rwop"], &[]);
    let ready = agent.wait_for_line("the mode", |l| l.contains("mode=quarantine"));
    assert!(ready.contains("never ran"), "the reason names the cause: {ready}");
    quarantine_end_to_end(&tree, &ns, &agent);
    agent.stop();
}

#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforce_lets_no_second_publish_through_while_the_agent_is_sigkilled_mid_storm_and_restarted() {
    use std::sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    };

    use nix::mount::{MntFlags, MsFlags, mount, umount2};

    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("storm");
    let ns = MountNs::new();
    let rwop = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    let first = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    assert_eq!(ns.bind(&rwop, &a), Ok(()));
    // fmod_ret: a call may skip the program (see `support::bpf_programs`); each agent's
    // sb_mount program is held to read how many did.
    let fmod_ret = expected_security_hooks() == "fmod_ret";
    let sb_mount_programs = || loaded_programs(BPF_PROG_TYPE_TRACING, SB_MOUNT_ENFORCE);
    let mut held = if fmod_ret { sb_mount_programs() } else { Vec::new() };
    assert!(!fmod_ret || !held.is_empty(), "the first agent's fmod_ret sb_mount program is loaded");

    let stop = Arc::new(AtomicBool::new(false));
    let (through, refused) = std::thread::scope(|scope| {
        // Pod B publishes again and again, from the namespace's own thread.
        let storm = scope.spawn(|| {
            let (source, target, stop) = (rwop.clone(), b.clone(), stop.clone());
            ns.run(move || {
                let (mut through, mut refused) = (0u32, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    match mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>) {
                        Ok(()) => {
                            through += 1;
                            let _ = umount2(&target, MntFlags::MNT_DETACH);
                        }
                        Err(Errno::EBUSY) => refused += 1,
                        Err(other) => panic!("pod B's publish failed with {other}, not EBUSY"),
                    }
                }
                (through, refused)
            })
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        first.sigkill();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let second = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
        second.wait_for_line("adoption", |l| l.contains("adopted the pinned enforcement state"));
        std::thread::sleep(std::time::Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        let counts = storm.join().unwrap();
        if fmod_ret {
            let new: Vec<_> = sb_mount_programs().into_iter().filter(|p| held.iter().all(|h| h.id != p.id)).collect();
            held.extend(new);
        }
        second.stop();
        counts
    });
    // The kernel's own count of the calls that skipped the program: 0 with BPF LSM.
    let skipped: u64 = held.iter().map(|p| p.recursion_misses()).sum();
    assert!(
        u64::from(through) <= skipped,
        "not one of pod B's {refused} publishes got through, before, during or after the restart, but for calls \
         the kernel skipped the program for ({through} through, {skipped} skipped)"
    );
    assert!(refused > 10, "the storm ran ({refused} refusals)");
    assert_eq!(pinned_owners(&pins), owners(&[("pv-rwop", "pod-a")]), "ownership unchanged");
    uninstall(&pins);
    assert_eq!(ns.umount(&a), Ok(()));
}

/// An upgrade that changes the tracing backend (tracepoints → trampolines → tracepoints)
/// loses no owner, and claims keep being settled at exit (rollback of a failed claim,
/// release on the owner's unmount) by the new backend's exit programs.
#[test]
#[ignore = "needs BPF LSM and trampolines: runs in the VM (cargo xtask vm-test)"]
fn upgrade_across_a_change_of_tracing_backend_keeps_owners_and_settles_claims() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("backend-switch");
    let ns = MountNs::new();
    let rwop = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));
    let single_pod = ["pv-rwop", "pv-other"];
    let start = |backend: &str| Agent::start_in(&ns, &tree.root(), &pins, &single_pod, &["--trace-backend", backend]);

    // Agent A, on tracepoints, sees pod-a claim pv-rwop.
    let first = start("tracepoints");
    assert_eq!(first.trace_backend(), "tracepoints");
    assert_eq!(ns.bind(&rwop, &a), Ok(()));
    first.wait_for_line("pod-a's publish", |l| l.contains("volume pv-rwop published for pod pod-a"));
    assert!(pinned_links(&pins).contains(&"tp-sys_exit_mount".to_owned()), "{:?}", pinned_links(&pins));
    first.stop();

    // Agent B, on trampolines, adopts it: same owner, still enforced.
    let second = start("trampolines");
    assert_eq!(second.trace_backend(), "trampolines");
    second.wait_for_line("adoption", |l| l.contains("adopted the pinned enforcement state") && l.contains("1 owned"));
    // A's exit tracepoints went last, once no claim waited for them.
    second.wait_for_line("the drain", |l| l.contains("earlier exit program(s)") && l.contains("0 claim(s) pending"));
    let links = pinned_links(&pins);
    assert!(links.contains(&"tramp-fexit_mount".to_owned()) && links.contains(&"tramp-fentry_umount".to_owned()));
    assert!(links.iter().all(|l| !l.starts_with("tp-") && !l.ends_with("~new")), "stale or half-swapped: {links:?}");
    assert_eq!(pinned_owners(&pins), owners(&[("pv-rwop", "pod-a")]), "the owner survived the switch");
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "enforced across the switch");
    // Settled by fexit: a failed claim is rolled back, and the events reach the agent.
    let missing = tree.tmp.path().join("no-such-volume");
    assert_eq!(ns.bind(&missing, &tree.publish_dir("pod-c", "pv-other")), Err(Errno::ENOENT));
    assert_eq!(ns.bind(&tree.volume("pv-other"), &tree.publish_dir("pod-d", "pv-other")), Ok(()), "rolled back");
    second.wait_for_line("pod-d's publish, traced by fentry/fexit", |l| {
        l.contains("volume pv-other published for pod pod-d")
    });
    // The owner's unmount releases its claim.
    ns.umount(&a).unwrap();
    assert_eq!(ns.bind(&rwop, &b), Ok(()), "released at fexit of umount");
    second.stop();

    // And back to tracepoints: nothing of the trampolines is left, the owners stay.
    let third = start("tracepoints");
    let links = pinned_links(&pins);
    assert!(links.iter().all(|l| !l.starts_with("tramp-") && !l.ends_with("~new")), "stale: {links:?}");
    assert_eq!(pinned_owners(&pins), owners(&[("pv-other", "pod-d"), ("pv-rwop", "pod-b")]));
    assert_eq!(ns.bind(&rwop, &a), Err(Errno::EBUSY));
    ns.umount(&b).unwrap();
    assert_eq!(ns.bind(&rwop, &a), Ok(()), "released at the exit tracepoint again");
    third.stop();
    uninstall(&pins);
}

/// A node switched from quarantine to refusal in the kernel and back: the in-kernel agent
/// takes the owner from the mount table and refuses; the quarantining agent after it
/// removes the pinned programs (they would keep refusing from maps no agent updates) and
/// quarantines as before; once the second pod's publish is gone no mask stays, and no
/// program of the in-kernel agent is left in the kernel.
#[test]
#[ignore = "needs a kernel that refuses (BPF LSM or fmod_ret): runs in the VM (cargo xtask vm-test)"]
fn enforce_after_quarantine_and_quarantine_after_it_leave_no_program_and_no_mask_behind() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let tree = KubeletTree::new();
    let pins = pin_root("mode-switch");
    let ns = MountNs::new();
    let rwop = tree.volume("pv-rwop");
    let (a, b) = (tree.publish_dir("pod-a", "pv-rwop"), tree.publish_dir("pod-b", "pv-rwop"));

    let quarantine = Agent::start_in_mode(&ns, &tree.root(), &pins, &["pv-rwop"], "quarantine");
    assert_eq!(ns.bind(&rwop, &a), Ok(()));
    quarantine.wait_for_line("the claim", |l| l.contains("volume pv-rwop claimed by pod pod-a"));
    quarantine.stop();
    assert!(!pins.exists(), "a quarantining agent pins nothing");

    let before = loaded_program_ids();
    let enforce = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    assert_eq!(enforce.mode(), "enforce");
    assert_eq!(enforce.security_hooks(), expected_security_hooks());
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "the owner the quarantining agent saw is refused in the kernel");
    enforce.stop();
    let pinned: Vec<u32> = loaded_program_ids().difference(&before).copied().collect();
    assert!(!pinned.is_empty(), "a clean stop keeps the in-kernel agent's programs pinned");
    assert_eq!(ns.bind(&rwop, &b), Err(Errno::EBUSY), "and they keep refusing");

    let quarantine = Agent::start_in_mode(&ns, &tree.root(), &pins, &["pv-rwop"], "quarantine");
    quarantine.wait_for_line("the pins' removal", |l| l.contains("removed the pinned programs and state"));
    assert!(!pins.exists(), "no pin left");
    let still: Vec<u32> = pinned.iter().filter(|id| loaded_program_ids().contains(id)).copied().collect();
    assert!(still.is_empty(), "programs of the in-kernel agent still loaded: {still:?}");
    assert_eq!(ns.bind(&rwop, &b), Ok(()), "nothing refuses in the kernel any more");
    quarantine.wait_for_line("the quarantine", |l| l.contains("CONFLICT quarantined") && l.contains("pod pod-b"));
    // The driver's unpublish of pod-b's target takes the mask and the publish under it.
    while ns.mount_at(&b).is_some() {
        ns.umount(&b).unwrap();
    }
    quarantine.stop();
    let mountinfo = std::fs::read_to_string(ns.mountinfo()).unwrap();
    let masks = mountinfo.lines().filter(|l| l.contains(volguard::model::mounts::MASK_SOURCE)).count();
    assert_eq!(masks, 0, "no mask left:\n{mountinfo}");
    assert_eq!(ns.read(&a.join("marker")).unwrap(), "pv-rwop", "the owner kept its volume throughout");
}
