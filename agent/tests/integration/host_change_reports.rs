//! Another pod's changes of an owned volume where no kernel hook can refuse them (this
//! host: quarantine), on either tracing backend: the real agent marks the volume's
//! directories (a directory volume) or its whole filesystem (a volume that is one) with
//! fanotify, and each change another pod's process makes — unlink, rmdir, rename within
//! and into, mkdir, create, symlink, truncate, chmod, chown, xattrs set and removed,
//! `utimensat` — through the volume's backing directory (a hostPath above it) or through
//! `/proc/<pid>/root` of the owner's container, including in a directory the owner made
//! after the watch began, is reported with its kind and entry, naming the reader's pod
//! (route `change`). The owner's changes are not.

use std::path::Path;

use crate::support::{
    have_root,
    kubelet::{Agent, KubeletTree, MountNs, pin_root},
    pod_cgroup::PodCgroup,
    volume_changes::{CHANGES, Change, ChangePaths},
};

const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a3";

/// A reader pod of its own for each route and change (reports are rate-limited per reader,
/// volume and kind), named as kubelet names a pod's cgroup.
fn reader_uid(route: usize, change: usize) -> String {
    format!("0c3c2d5e-0000-4a6e-9f00-0000000{route}{change:04}")
}

/// The kind a change is reported as.
fn kind_of(change: Change) -> &'static str {
    match change {
        Change::Unlink | Change::Rmdir => "delete",
        Change::RenameWithin | Change::RenameIn => "rename",
        Change::Mkdir | Change::Create | Change::Symlink => "create",
        Change::Truncate => "contents",
        Change::Chmod | Change::Chown | Change::SetXattr | Change::RemoveXattr | Change::Utimes => "attributes",
        Change::LinkOut => unreachable!("a link out of a directory volume is not told (docs/enforcement.md)"),
    }
}

/// The agent's report of `reader`'s change of kind `kind` in `volume`.
fn reported(volume: &str, reader: &str, kind: &str) -> impl Fn(&str) -> bool {
    let (head, volume, reader) =
        (format!("CONFLICT reported change ({kind})"), format!("volume {volume:?}"), format!("pod {reader} changed"));
    move |l: &str| l.contains(&head) && l.contains(&volume) && l.contains(&reader)
}

/// Makes `change` as a process of `pod` that stays until its report is seen (its pod is
/// read from its cgroup when the agent reads the notice).
fn change_and_wait(
    agent: &Agent,
    ns: &MountNs,
    (pod, uid): (&PodCgroup, &str),
    change: Change,
    route: &str,
    paths: ChangePaths,
) {
    let what = format!("pod {uid}'s {change:?} through {route}");
    // SAFETY: raw syscalls in the forked child.
    let process = pod.staying_after(ns, &what, move || unsafe { change.apply(&paths) });
    agent.wait_for_line(&format!("{what} reported"), reported("pv-rwop", uid, kind_of(change)));
    drop(process);
}

fn every_change_is_reported(test: &str, backend: &str) {
    if !have_root(test) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(test) else { return };
    let pod_a = PodCgroup::new(&cgroups, POD_A);
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let extra = ["--trace-backend", backend, "--reconcile-interval", "300ms"];
    let agent =
        Agent::start_in(&ns, &tree.root(), &pin_root(&format!("changes-{backend}")), &["pv-rwop", "pv-blk"], &extra);
    assert_eq!(agent.mode(), "quarantine", "precondition: no kernel hook refuses on this host");

    let volume = tree.volume("pv-rwop");
    let outside = tree.tmp.path().join("beside-the-volume");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(volume.join("file"), b"pod A's data").unwrap();
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    ns.bind(&volume, &a_target).unwrap();
    let container = pod_a.container(&ns, &tree.tmp.path().join("rootfs-a"), &a_target);
    agent.wait_for_line("pv-rwop's changes watched", |l| {
        l.contains("change reports: volume pv-rwop's changes watched at") && l.contains("Directory")
    });

    // The owner's changes come first: were they reported, their lines would come before
    // the readers'. The owner makes a directory after the watch began; the readers'
    // changes then happen in it.
    let owner_paths = ChangePaths::new(&a_target, &outside, "a");
    assert_eq!(Change::Mkdir.try_as(&pod_a, &ns, owner_paths), 0, "pod A makes a directory");
    let later = volume.join("dir-a");
    for change in [Change::Create, Change::Chmod, Change::Unlink] {
        assert_eq!(change.try_as(&pod_a, &ns, ChangePaths::new(&a_target, &outside, "a")), 0, "pod A's {change:?}");
    }
    std::fs::write(volume.join("file"), b"pod A's data").unwrap();

    let routes = [
        ("the volume's backing directory", later.clone()),
        ("/proc/<pid>/root", container.path(&a_target.join("dir-a"))),
    ];
    for (r, (route, dir)) in routes.iter().enumerate() {
        for (c, change) in CHANGES.into_iter().enumerate().filter(|(_, c)| *c != Change::LinkOut) {
            if r == 1 && change.crosses_out() {
                continue; // EXDEV through a mount of its own, before any change
            }
            let tag = format!("{r}{c}");
            std::fs::write(later.join("file"), b"pod A's data").unwrap();
            std::fs::create_dir_all(later.join(format!("subdir-{tag}"))).unwrap();
            std::fs::write(outside.join(format!("outside-{tag}")), b"x").unwrap();
            if change == Change::RemoveXattr {
                let paths = ChangePaths::new(&later, &outside, &tag);
                // SAFETY: raw syscalls on the namespace's thread.
                assert_eq!(
                    ns.run(move || unsafe { Change::SetXattr.apply(&paths) }),
                    0,
                    "a node process sets the xattr"
                );
            }
            let uid = reader_uid(r + 1, c);
            let reader = PodCgroup::new(&cgroups, &uid);
            let paths = ChangePaths::new(dir, &outside, &tag);
            change_and_wait(&agent, &ns, (&reader, &uid), change, route, paths);
        }
    }
    let by_owner = format!("pod {POD_A} changed");
    assert_eq!(agent.count_lines(|l| l.contains(&by_owner)), 0, "pod A's own changes are not reported");
    let counted = agent.metric_family_sum_where("volguard_conflicts_total", "route=\"change\"");
    assert!(counted >= 20.0, "each report is counted with route change: {counted}");

    let (staging, blk_target) = a_filesystem_volumes_change_is_reported(&agent, &ns, &tree, &cgroups);

    drop(container);
    agent.stop();
    for point in [&a_target, &blk_target, &staging] {
        let _ = ns.umount_detach(Path::new(point));
    }
}

/// A volume with a filesystem of its own: another pod's change anywhere on it is reported.
/// Its staging and publish target, to unmount.
fn a_filesystem_volumes_change_is_reported(
    agent: &Agent,
    ns: &MountNs,
    tree: &KubeletTree,
    cgroups: &Path,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (staging, _) = tree.staged_filesystem(ns, "pv-blk", b"pod A's block data");
    let blk_target = tree.publish_dir(POD_A, "pv-blk");
    ns.bind(&staging, &blk_target).unwrap();
    agent.wait_for_line("pv-blk's filesystem watched", |l| {
        l.contains("change reports: volume pv-blk's changes watched at") && l.contains("Filesystem")
    });
    let uid = reader_uid(3, 0);
    let reader = PodCgroup::new(cgroups, &uid);
    let file = staging.join("data");
    let c_file = crate::support::cstr(&file);
    // SAFETY: a raw syscall in the forked child.
    let chmod = reader.staying_after(ns, "the chmod of pv-blk's file", move || unsafe {
        if libc::chmod(c_file.as_ptr(), 0o600) == 0 { 0 } else { *libc::__errno_location() }
    });
    agent.wait_for_line("the chmod of pv-blk's file reported", reported("pv-blk", &uid, "attributes"));
    drop(chmod);

    (staging, blk_target)
}

#[test]
fn another_pods_changes_of_an_owned_volume_are_reported_with_fanotify() {
    const TEST: &str = "another_pods_changes_of_an_owned_volume_are_reported_with_fanotify";
    every_change_is_reported(TEST, "fanotify");
}

#[test]
fn another_pods_changes_of_an_owned_volume_are_reported_with_tracepoints() {
    const TEST: &str = "another_pods_changes_of_an_owned_volume_are_reported_with_tracepoints";
    every_change_is_reported(TEST, "tracepoints");
}
