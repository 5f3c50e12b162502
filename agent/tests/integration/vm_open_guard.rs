//! The open guard with BPF LSM (runs in the VM: `cargo xtask vm-test`): pod A owns a
//! single-pod volume; processes of pod C (a cgroup named as kubelet names a pod's) open its
//! files by every route that needs no mount of their own — the volume's backing directory
//! (what a hostPath on an ancestor amounts to), `/proc/<pid>/root` of A's container, a
//! setns into A's namespace, `/proc/<pid>/cwd` and `/proc/<pid>/fd/N` of A's process, the
//! publish target, and, for a volume with a filesystem of its own, another mount of that
//! filesystem — and each open is refused with EACCES, while A reads and writes throughout,
//! a node process reads (counted), and an exempt reader reads. The pinned program keeps
//! refusing while no agent runs.

mod block_device;
mod descriptors;

use std::path::{Path, PathBuf};

use crate::support::{
    kernel_refuses,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, uninstall},
    pod_cgroup::PodCgroup,
    pod_process::{HELD_FD, SETNS_FAILED},
    volume_changes::{CHANGES, Change, ChangePaths},
};

const TEST: &str = "enforce_refuses_another_pods_open_of_an_owned_volumes_files_on_every_route";
/// Pod UIDs as kubelet writes them (the cgroup path names them so).
const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a1";
const POD_C: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c1";
/// A backup agent the operator exempts (namespace backup, ServiceAccount restic).
const POD_EXEMPT: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000e1";
const EACCES: i32 = libc::EACCES;

// Long by design: every route against one owner, which reads and writes throughout.
#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_another_pods_open_of_an_owned_volumes_files_on_every_route() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let (pod_a, pod_c, exempt) =
        (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C), PodCgroup::new(&cgroups, POD_EXEMPT));
    let tree = KubeletTree::new();
    let pins = pin_root("open-guard");
    let ns = MountNs::new();
    let facts = tree.tmp.path().join("inventory.yaml");
    std::fs::write(
        &facts,
        format!(
            "pods:\n  - {{uid: {POD_A}, namespace: shop, name: db-0}}\n  \
             - {{uid: {POD_C}, namespace: shop, name: debugger}}\n  \
             - {{uid: {POD_EXEMPT}, namespace: backup, name: restic-x7, serviceAccount: restic}}\n"
        ),
    )
    .unwrap();
    let inventory = facts.to_str().unwrap();
    let extra = ["--inventory", inventory, "--exempt-reader", "backup/restic"];
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop", "pv-blk"], &extra);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));

    // A directory volume of a shared filesystem (csi-driver-host-path's kind).
    let volume = tree.volume("pv-rwop");
    let file = volume.join("data");
    std::fs::write(&file, b"pod A's data").unwrap();
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    assert_eq!(ns.bind(&volume, &a_target), Ok(()), "kubelet publishes pv-rwop for pod A");
    // A volume with a filesystem of its own (a block volume's): staged, then published.
    let (staging, blk_file) = tree.staged_filesystem(&ns, "pv-blk", b"pod A's block data");
    let blk_target = tree.publish_dir(POD_A, "pv-blk");
    assert_eq!(ns.bind(&staging, &blk_target), Ok(()), "kubelet publishes pv-blk for pod A");
    let recorded = "volguard_kernel_events_total{counter=\"published_roots_recorded\"}";
    assert_eq!(agent.metric(recorded), 2.0, "both publishes recorded their roots at their exit");

    // Pod A's container sees its volume at its publish target's path.
    let container = pod_a.container(&ns, &tree.tmp.path().join("rootfs-a"), &a_target);
    let in_container = a_target.join("data");
    let holder = pod_a.holding_open(&ns, &a_target.join("data"));
    let pid = container.pid();
    let routes: [(&str, PathBuf); 6] = [
        ("the volume's backing directory (a hostPath on an ancestor)", file.clone()),
        ("pod A's publish target", a_target.join("data")),
        ("/proc/<pid>/root of pod A's container", container.path(&in_container)),
        ("/proc/<pid>/cwd of pod A's process", PathBuf::from(format!("/proc/{}/cwd/data", holder.pid()))),
        ("/proc/<pid>/fd/N of pod A's process", PathBuf::from(format!("/proc/{}/fd/{HELD_FD}", holder.pid()))),
        ("another mount of pv-blk's filesystem (its staging)", blk_file.clone()),
    ];
    for (route, path) in &routes {
        assert_eq!(pod_c.try_read(&ns, path), EACCES, "pod C opened pod A's file through {route}");
        owner_keeps_working(&pod_a, &ns, path, route);
    }
    let setns = pod_c.try_read_in_namespace_of(&ns, pid, &in_container);
    assert_ne!(setns, SETNS_FAILED, "pod C could not enter pod A's namespace at all");
    assert_eq!(setns, EACCES, "pod C opened pod A's file after a setns into A's namespace");
    assert_eq!(pod_a.try_read_in_namespace_of(&ns, pid, &in_container), 0, "pod A's own setns (kubectl exec)");

    agent.wait_for_line("the refused open", |l| {
        l.contains("CONFLICT blocked (EACCES) file_open") && l.contains("\"pv-rwop\"") && l.contains(POD_C)
    });
    agent.wait_for_line("the refused open of pv-blk", |l| l.contains("file_open") && l.contains("\"pv-blk\""));
    let refused = agent.metric_family_sum_where("volguard_conflicts_total", "route=\"open\"");
    assert!(refused >= 2.0, "refused opens are counted with route open: {refused}");

    // Node processes (kubelet's fsGroup walk, the runtime) and the exempt reader may.
    let read = std::fs::read(&file).unwrap();
    assert!(read.starts_with(b"pod A's data"), "a node process reads pod A's file: {read:?}");
    let by_node = agent.metric("volguard_kernel_events_total{counter=\"opens_by_node_processes\"}");
    assert!(by_node >= 1.0, "node processes' opens are counted: {by_node}");
    // Under the command of the thread that opened (the kernel reads the thread's).
    let command = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let node_opens = format!("volguard_node_process_opens_total{{command=\"{}\"}}", command.trim_end());
    assert!(agent.metric(&node_opens) >= 1.0, "the node process's open is counted under its command");
    assert_eq!(exempt.try_read(&ns, &file), 0, "the exempt backup agent reads");
    // An unrelated file on the same filesystem is no one's.
    let unrelated = tree.tmp.path().join("unrelated");
    std::fs::write(&unrelated, b"x").unwrap();
    assert_eq!(pod_c.try_read(&ns, &unrelated), 0, "pod C reads a file outside the volume");

    // The pinned program keeps refusing while no agent runs.
    agent.sigkill();
    assert_eq!(pod_c.try_read(&ns, &file), EACCES, "refused with no agent running");
    assert_eq!(pod_c.try_read(&ns, &blk_file), EACCES, "refused with no agent running (pv-blk)");
    owner_keeps_working(&pod_a, &ns, &file, "the backing directory, with no agent running");

    // Once A's publish is gone, the volume is no one's.
    drop((holder, container));
    ns.umount(&a_target).unwrap();
    ns.umount(&blk_target).unwrap();
    assert_eq!(pod_c.try_read(&ns, &file), 0, "after pod A's unpublish its files are no one's");
    uninstall(&pins);
    let _ = ns.umount(&staging);
}

fn owner_keeps_working(pod_a: &PodCgroup, ns: &MountNs, path: &Path, route: &str) {
    assert_eq!(pod_a.try_read(ns, path), 0, "pod A reads its own file through {route}");
    if !path.starts_with("/proc") || path.to_string_lossy().contains("/root/") {
        assert_eq!(pod_a.try_write(ns, path), 0, "pod A writes its own file through {route}");
    }
}

const KEPT_ANSWERS: &str = "the_guards_kept_answers_change_when_a_directory_moves_in_or_a_volume_is_published_above";

/// The guard keeps, per directory, the root it found above it. Each answer is first kept
/// as "no volume" by an allowed open of pod C; then a directory moves into the volume
/// (rename, and `RENAME_EXCHANGE`), a volume is published around the directory, or a
/// published volume becomes single-pod (an inventory edit: the agent seeds its root): pod
/// C's next open there must be refused, not answered from what was kept.
#[test]
#[ignore = "needs BPF LSM: runs in the VM (cargo xtask vm-test)"]
fn the_guards_kept_answers_change_when_a_directory_moves_in_or_a_volume_is_published_above() {
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let Some(cgroups) = PodCgroup::hierarchy(KEPT_ANSWERS) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let tree = KubeletTree::new();
    let pins = pin_root("open-guard-kept");
    // Volumes of their own: the other test's agent, running beside this one, judges its own.
    let ns = MountNs::new();
    let facts = tree.tmp.path().join("inventory.yaml");
    std::fs::write(&facts, edited_facts("ReadWriteOnce")).unwrap();
    let extra = ["--inventory", facts.to_str().unwrap()];
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-kept", "pv-later"], &extra);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));
    let volume = tree.volume("pv-kept");
    assert_eq!(ns.bind(&volume, &tree.publish_dir(POD_A, "pv-kept")), Ok(()), "kubelet publishes pv-kept for A");

    // A directory outside the volume, on its filesystem, moves in.
    let outside = tree.tmp.path().join("elsewhere");
    let moved = outside.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    std::fs::write(moved.join("file"), b"soon pod A's").unwrap();
    assert_eq!(pod_c.try_read(&ns, &moved.join("file")), 0, "pod C reads a file outside the volume");
    std::fs::rename(&moved, volume.join("moved")).unwrap();
    assert_eq!(pod_c.try_read(&ns, &volume.join("moved/file")), EACCES, "read in a directory renamed into the volume");
    assert_eq!(pod_a.try_read(&ns, &volume.join("moved/file")), 0, "pod A reads the directory it was given");

    // Two directories trade places: the outside one is now in the volume.
    let (swapped_out, swapped_in) = (outside.join("swap"), volume.join("swap"));
    for dir in [&swapped_out, &swapped_in] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("file"), dir.to_string_lossy().as_bytes()).unwrap();
    }
    assert_eq!(pod_c.try_read(&ns, &swapped_out.join("file")), 0, "pod C reads the outside directory's file");
    exchange(&swapped_out, &swapped_in);
    assert_eq!(pod_c.try_read(&ns, &swapped_in.join("file")), EACCES, "read in a directory exchanged into the volume");
    assert_eq!(pod_c.try_read(&ns, &swapped_out.join("file")), 0, "the directory exchanged out is no one's");

    // A volume published around a directory whose answer was kept.
    let later = tree.volume("pv-later");
    std::fs::create_dir_all(later.join("sub")).unwrap();
    std::fs::write(later.join("sub/file"), b"pod A's, once published").unwrap();
    assert_eq!(pod_c.try_read(&ns, &later.join("sub/file")), 0, "before its publish pv-later is no one's");
    assert_eq!(ns.bind(&later, &tree.publish_dir(POD_A, "pv-later")), Ok(()), "kubelet publishes pv-later for A");
    assert_eq!(pod_c.try_read(&ns, &later.join("sub/file")), EACCES, "read in a volume published since");

    // A volume published while no one owned it, made single-pod by an edit of the facts:
    // the kernel saw no single-pod publish, so the agent seeds the root (and stales the
    // answers: its own epoch slot).
    let edited = tree.volume("pv-edit");
    std::fs::create_dir_all(edited.join("sub")).unwrap();
    std::fs::write(edited.join("sub/file"), b"pod A's, once single-pod").unwrap();
    assert_eq!(ns.bind(&edited, &tree.publish_dir(POD_A, "pv-edit")), Ok(()), "kubelet publishes pv-edit for A");
    assert_eq!(pod_c.try_read(&ns, &edited.join("sub/file")), 0, "a ReadWriteOnce volume's files are anyone's");
    std::fs::write(&facts, edited_facts("ReadWriteOncePod")).unwrap();
    agent.wait_for_line("the seeded root", |l| {
        l.contains("open guard: volume pv-edit's files are opened by pod") && l.contains(POD_A)
    });
    assert_eq!(pod_c.try_read(&ns, &edited.join("sub/file")), EACCES, "read in a volume made single-pod since");
    assert_eq!(pod_a.try_read(&ns, &edited.join("sub/file")), 0, "pod A reads the volume it now owns");

    drop(agent);
    uninstall(&pins);
}

/// Pod A (db-0) with claim shop/edit, bound to pv-edit with access mode `mode`, and pod C.
fn edited_facts(mode: &str) -> String {
    format!(
        "\
pods:
  - {{uid: {POD_A}, namespace: shop, name: db-0, volumes: [{{name: edit, persistentVolumeClaim: edit}}]}}
  - {{uid: {POD_C}, namespace: shop, name: debugger}}
persistentVolumes:
  - {{name: pv-edit, accessModes: [{mode}], claimRef: shop/edit, csi: {{driver: hostpath.csi.k8s.io, volumeHandle: h-edit}}}}
persistentVolumeClaims:
  - {{namespace: shop, name: edit, accessModes: [{mode}], volumeName: pv-edit}}
"
    )
}

/// `renameat2(RENAME_EXCHANGE)` of two directories.
fn exchange(a: &Path, b: &Path) {
    let (a, b) = (
        std::ffi::CString::new(a.as_os_str().as_encoded_bytes()).unwrap(),
        std::ffi::CString::new(b.as_os_str().as_encoded_bytes()).unwrap(),
    );
    // SAFETY: two NUL-terminated paths that outlive the call.
    let done =
        unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
    assert_eq!(done, 0, "renameat2(RENAME_EXCHANGE): {}", std::io::Error::last_os_error());
}

/// Another pod changes nothing of an owned volume's names or attributes, by any path: each
/// of [`CHANGES`] through the volume's backing directory (a hostPath on an ancestor) and
/// through `/proc/<pid>/root` of the owner's container is refused (EACCES; EXDEV where
/// the kernel refuses a cross-mount change first), and reported with its hook (route
/// `change`); the owner makes its changes through its publish target, and a node process
/// (kubelet, the runtime) all of them through the backing directory; the pinned programs
/// keep refusing with no agent running.
#[test]
#[ignore = "needs a kernel that refuses (BPF LSM or fmod_ret): runs in the VM (cargo xtask vm-test)"]
fn enforce_refuses_another_pods_changes_of_an_owned_volumes_names_and_attributes() {
    const CHANGES_TEST: &str = "enforce_refuses_another_pods_changes_of_an_owned_volumes_names_and_attributes";
    assert!(kernel_refuses(), "precondition: a boot whose kernel refuses (bpf in lsm=, or fmod_ret)");
    let Some(cgroups) = PodCgroup::hierarchy(CHANGES_TEST) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let tree = KubeletTree::new();
    let pins = pin_root("changes");
    let ns = MountNs::new();
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-rwop"], &[]);
    agent.wait_for_line("the mode", |l| l.contains("mode=enforce"));

    let volume = tree.volume("pv-rwop");
    let outside = tree.tmp.path().join("beside-the-volume");
    std::fs::create_dir_all(&outside).unwrap();
    let prepare = |tag: &str| {
        std::fs::write(volume.join("file"), b"pod A's data").unwrap();
        std::fs::create_dir_all(volume.join(format!("subdir-{tag}"))).unwrap();
        std::fs::write(outside.join(format!("outside-{tag}")), b"x").unwrap();
    };
    prepare("c");
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    assert_eq!(ns.bind(&volume, &a_target), Ok(()), "kubelet publishes pv-rwop for pod A");
    let container = pod_a.container(&ns, &tree.tmp.path().join("rootfs-a"), &a_target);

    let routes = [
        ("the volume's backing directory", volume.clone(), false),
        ("/proc/<pid>/root", container.path(&a_target), true),
    ];
    for (route, dir, own_mount) in &routes {
        for change in CHANGES {
            let expected = if *own_mount && change.crosses_out() { libc::EXDEV } else { EACCES };
            let got = change.try_as(&pod_c, &ns, ChangePaths::new(dir, &outside, "c"));
            assert_eq!(got, expected, "pod C's {change:?} through {route}");
        }
    }
    assert_eq!(std::fs::read(volume.join("file")).unwrap(), b"pod A's data", "pod C changed nothing");
    agent.wait_for_line("a refused change", |l| {
        l.contains("CONFLICT blocked (EACCES) path_") && l.contains("\"pv-rwop\"") && l.contains(POD_C)
    });
    let refused = agent.metric_family_sum_where("volguard_conflicts_total", "route=\"change\"");
    assert!(refused >= 1.0, "refused changes are counted with route change: {refused}");

    // The owner through its publish target (a mount of its own: no move in or link out
    // from beside it), and a node process through the backing directory, may.
    let restore = || {
        if !volume.join("file").exists() {
            std::fs::write(volume.join("file"), b"pod A's data").unwrap();
        }
    };
    prepare("a");
    for change in CHANGES.into_iter().filter(|c| !c.crosses_out()) {
        assert_eq!(change.try_as(&pod_a, &ns, ChangePaths::new(&a_target, &outside, "a")), 0, "pod A's {change:?}");
        restore();
    }
    prepare("n");
    for change in CHANGES {
        let paths = ChangePaths::new(&volume, &outside, "n");
        // SAFETY: raw syscalls on the namespace's thread.
        assert_eq!(ns.run(move || unsafe { change.apply(&paths) }), 0, "a node process's {change:?}");
        restore();
    }

    // The pinned programs keep refusing while no agent runs.
    agent.sigkill();
    prepare("k");
    for change in [Change::Unlink, Change::Chmod] {
        let got = change.try_as(&pod_c, &ns, ChangePaths::new(&volume, &outside, "k"));
        assert_eq!(got, EACCES, "pod C's {change:?} with no agent running");
    }

    drop(container);
    ns.umount(&a_target).unwrap();
    let got = Change::Unlink.try_as(&pod_c, &ns, ChangePaths::new(&volume, &outside, "k"));
    assert_eq!(got, 0, "after pod A's unpublish the volume is no one's");
    uninstall(&pins);
}
