//! Another pod's opens of an owned volume's files where no BPF LSM can refuse them (this
//! host: quarantine): the real agent watches, with fanotify, the owner's publish and its
//! container's mount of the volume, and a volume that is a filesystem of its own as a
//! whole. Other pods' reads through `/proc/<pid>/root` of A's container, a setns into A's
//! namespace, A's publish target and another mount of A's filesystem are each reported
//! (route `open`), naming the reader's pod; pod A's own reads and a node process's are not
//! (the node process's is counted under its command).
//! With `--deny-foreign-open` the same routes, and `/proc/<pid>/cwd` and `/proc/<pid>/fd/N`
//! of A's process, are refused (`EPERM`) and reported; A reads and writes throughout, and a
//! node process reads; so do the refused reader through the same routes to files beside
//! the volume, and a CSI node plugin. Through another pod's mount of a directory above A's volume, only
//! the opens of A's files are reported or refused (file by file), and none of a CSI node
//! plugin's.

use std::path::Path;

use crate::support::{
    have_root,
    kubelet::{Agent, KubeletTree, MountNs, pin_root},
    pod_cgroup::PodCgroup,
    pod_process::{Container, HELD_FD},
};

const TEST: &str = "another_pods_opens_of_an_owned_volume_are_reported_where_no_bpf_lsm_refuses_them";
/// Pod UIDs as kubelet writes them (the cgroup path names them so): the owner, and a
/// reader pod per route (reports are rate-limited per reader and volume).
const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a2";
const READERS: [&str; 4] = [
    "0c3c2d5e-0000-4a6e-9f00-0000000000c2",
    "0c3c2d5e-0000-4a6e-9f00-0000000000c3",
    "0c3c2d5e-0000-4a6e-9f00-0000000000c4",
    "0c3c2d5e-0000-4a6e-9f00-0000000000c5",
];

/// Readers through another pod's mount above the volume: one beside the volume, one in it.
const BESIDE_READER: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c6";
const VOLUME_READER: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c7";
/// A CSI node plugin's pod.
const DRIVER_POD: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c8";

/// The agent's report of `reader`'s open of `volume`.
fn reported(volume: &str, reader: &str) -> impl Fn(&str) -> bool {
    let (volume, reader) = (format!("volume {volume:?}"), format!("pod {reader} opened"));
    move |l: &str| l.contains("CONFLICT reported file_open") && l.contains(&volume) && l.contains(&reader)
}

#[test]
fn another_pods_opens_of_an_owned_volume_are_reported_where_no_bpf_lsm_refuses_them() {
    if !have_root(TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let pod_a = PodCgroup::new(&cgroups, POD_A);
    let readers = READERS.map(|uid| PodCgroup::new(&cgroups, uid));
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    // The scan that finds A's container runs at each reconciliation.
    let extra = ["--reconcile-interval", "300ms"];
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("open-reports"), &["pv-rwop", "pv-blk"], &extra);
    assert_eq!(agent.mode(), "quarantine", "precondition: no BPF LSM on this host");

    let volume = tree.volume("pv-rwop");
    std::fs::write(volume.join("data"), b"pod A's data").unwrap();
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    ns.bind(&volume, &a_target).unwrap();
    let container = pod_a.container(&ns, &tree.tmp.path().join("rootfs-a"), &a_target);
    let in_container = a_target.join("data");
    let through_root = container.path(&in_container);
    let container_watched = format!("/proc/{}/root", container.pid());
    agent.wait_for_line("the container's mount watched", |l| {
        l.contains("open reports: volume pv-rwop's files watched at") && l.contains(&container_watched)
    });

    // Pod A's own reads, and a node process's, come first: were they reported, their
    // lines would come before the readers' (one queue per volume, read in order).
    assert_eq!(pod_a.try_read(&ns, &through_root), 0, "pod A reads through its container's root");
    assert_eq!(pod_a.try_read(&ns, &a_target.join("data")), 0, "pod A reads at its publish target");
    let at_target = a_target.join("data");
    assert!(ns.run(move || std::fs::read(at_target).is_ok()), "a node process reads");
    // Readers that stay, so that their pod is read from their cgroup (a reader that has
    // exited by then is reported as such, with no pod).
    let _through_root = readers[0].holding_open(&ns, &through_root);
    agent.wait_for_line("an open through /proc/<pid>/root reported", reported("pv-rwop", READERS[0]));
    let _after_setns = readers[1].holding_open_in(&ns, Some(container.pid()), &in_container);
    agent.wait_for_line("an open after a setns into A's namespace reported", reported("pv-rwop", READERS[1]));
    let _at_target = readers[2].holding_open(&ns, &a_target.join("data"));
    agent.wait_for_line("an open at A's publish target reported", reported("pv-rwop", READERS[2]));
    let by_owner = format!("pod {POD_A} opened");
    assert_eq!(agent.count_lines(|l| l.contains(&by_owner)), 0, "pod A's own opens are not reported");
    // The node process's open (judged before the readers') is counted under its command:
    // its process's, which fanotify names (the test binary).
    let command = std::fs::read_to_string("/proc/self/comm").unwrap();
    let node_opens = format!("volguard_node_process_opens_total{{command=\"{}\"}}", command.trim_end());
    assert!(agent.metric(&node_opens) >= 1.0, "the node process's open is counted under its command");

    // A volume with a filesystem of its own: any mount of it is watched.
    let (staging, blk_file) = tree.staged_filesystem(&ns, "pv-blk", b"pod A's block data");
    let blk_target = tree.publish_dir(POD_A, "pv-blk");
    ns.bind(&staging, &blk_target).unwrap();
    agent.wait_for_line("pv-blk's filesystem watched", |l| {
        l.contains("open reports: volume pv-blk's files watched at") && l.contains("Filesystem")
    });
    let _through_staging = readers[3].holding_open(&ns, &blk_file);
    agent.wait_for_line("an open of pv-blk through its staging reported", reported("pv-blk", READERS[3]));
    let counted = agent.metric_family_sum_where("volguard_conflicts_total", "route=\"open\"");
    assert!(counted >= 4.0, "each report is counted with route open: {counted}");

    drop((_through_root, _after_setns, _at_target, _through_staging, container));
    agent.stop();
    for point in [&a_target, &blk_target, &staging] {
        let _ = ns.umount_detach(Path::new(point));
    }
}

/// A reader's attempt by one route: 0, or the errno.
type ReadBy<'a> = Box<dyn Fn() -> i32 + 'a>;

const DENY_TEST: &str = "with_deny_foreign_open_another_pods_opens_are_refused_and_the_owner_works_throughout";

/// The agent's refusal of `reader`'s open of `volume`.
fn refused(volume: &str, reader: &str) -> impl Fn(&str) -> bool {
    let (volume, reader) = (format!("volume {volume:?}"), format!("pod {reader} tried to open"));
    move |l: &str| l.contains("CONFLICT refused (EPERM) file_open") && l.contains(&volume) && l.contains(&reader)
}

// Long by design: one owner works throughout while every route is tried against it.
#[test]
fn with_deny_foreign_open_another_pods_opens_are_refused_and_the_owner_works_throughout() {
    if !have_root(DENY_TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(DENY_TEST) else { return };
    let pod_a = PodCgroup::new(&cgroups, POD_A);
    let reader = PodCgroup::new(&cgroups, READERS[0]);
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let extra = ["--reconcile-interval", "300ms", "--deny-foreign-open", "true"];
    let agent = Agent::start_in(&ns, &tree.root(), &pin_root("deny-open"), &["pv-rwop"], &extra);
    assert_eq!(agent.mode(), "quarantine", "precondition: no BPF LSM on this host");
    agent.wait_for_line("the refusing reporter", |l| {
        l.contains("another pod's opens of an owned volume's files are refused (fanotify)")
    });

    let volume = tree.volume("pv-rwop");
    std::fs::write(volume.join("data"), b"pod A's data").unwrap();
    let a_target = tree.publish_dir(POD_A, "pv-rwop");
    ns.bind(&volume, &a_target).unwrap();
    let container = pod_a.container(&ns, &tree.tmp.path().join("rootfs-a"), &a_target);
    let in_container = a_target.join("data");
    let through_root = container.path(&in_container);
    let container_watched = format!("/proc/{}/root", container.pid());
    agent.wait_for_line("the container's mount watched", |l| {
        l.contains("open reports: volume pv-rwop's files watched at") && l.contains(&container_watched)
    });
    // A pod with a hostPath on the directory that holds A's volume, and a CSI node
    // plugin's pod with one too (its mounts `Bidirectional`), both found by the scan.
    let data_dir = volume.parent().unwrap().to_owned();
    std::fs::write(data_dir.join("beside"), b"not the volume's").unwrap();
    let above = reader.container(&ns, &tree.tmp.path().join("rootfs-reader"), &data_dir);
    let driver = PodCgroup::new(&cgroups, DRIVER_POD);
    let driver_container = driver.driver_container(&ns, &tree.tmp.path().join("rootfs-driver"), &data_dir);
    let above_watched = above.path(&data_dir).display().to_string();
    agent.wait_for_line("the reader's mount above the volume watched", |l| {
        l.contains("open reports: volume pv-rwop's files watched at") && l.contains(&above_watched)
    });
    agent.wait_for_line("the driver found", |l| {
        l.contains(&format!("pod {DRIVER_POD} has a mount in a shared peer group"))
    });
    let in_data_dir = data_dir.join("pv-rwop/data");
    // A process of A holding the file open, its working directory beside it.
    let holder = pod_a.holding_open(&ns, &a_target.join("data"));
    let (fd_link, cwd) = (format!("/proc/{}/fd/{HELD_FD}", holder.pid()), format!("/proc/{}/cwd/data", holder.pid()));

    let owner_works = |when: &str| {
        assert_eq!(pod_a.try_read(&ns, &through_root), 0, "{when}: pod A reads through its container's root");
        assert_eq!(pod_a.try_write(&ns, &a_target.join("data")), 0, "{when}: pod A writes at its publish target");
    };
    owner_works("before the readers");
    let routes: [(&str, ReadBy); 6] = [
        ("/proc/<pid>/root of A's container", Box::new(|| reader.try_read(&ns, &through_root))),
        (
            "a setns into A's namespace",
            Box::new(|| reader.try_read_in_namespace_of(&ns, container.pid(), &in_container)),
        ),
        ("A's publish target", Box::new(|| reader.try_read(&ns, &a_target.join("data")))),
        ("/proc/<pid>/fd/N of A's process", Box::new(|| reader.try_read(&ns, Path::new(&fd_link)))),
        ("/proc/<pid>/cwd of A's process", Box::new(|| reader.try_read(&ns, Path::new(&cwd)))),
        ("a hostPath above A's volume", Box::new(|| reader.try_read_in_namespace_of(&ns, above.pid(), &in_data_dir))),
    ];
    for (route, read) in &routes {
        assert_eq!(read(), libc::EPERM, "another pod's open through {route} is refused");
        owner_works(&format!("after the open through {route}"));
    }
    agent.wait_for_line("the refusal reported", refused("pv-rwop", READERS[0]));
    let beside = data_dir.join("beside");
    assert_eq!(reader.try_read_in_namespace_of(&ns, above.pid(), &beside), 0, "a file beside the volume was refused");
    let by_driver = driver.try_read_in_namespace_of(&ns, driver_container.pid(), &in_data_dir);
    assert_eq!(by_driver, 0, "the CSI node plugin reads through its mount above the volume");
    let at_publish = driver.try_read(&ns, &a_target.join("data"));
    assert_eq!(at_publish, 0, "the CSI node plugin reads at A's publish target");
    // A node process reads, by every path the reader was refused (so each path leads to
    // the file, and only the reader's pod is refused).
    let node_paths = [
        through_root.clone(),
        a_target.join("data"),
        fd_link.clone().into(),
        cwd.clone().into(),
        above.path(&in_data_dir),
    ];
    for path in node_paths {
        let shown = path.display().to_string();
        assert!(ns.run(move || std::fs::read(path).is_ok()), "a node process reads through {shown}");
    }
    let blocked = agent.metric_family_sum_where("volguard_conflicts_total", "action=\"blocked\",route=\"open\"");
    assert!(blocked >= 1.0, "the refusal is counted as blocked with route open: {blocked}");
    let by_owner = format!("pod {POD_A} tried to open");
    assert_eq!(agent.count_lines(|l| l.contains(&by_owner)), 0, "pod A's own opens are not refused");
    let of_driver = format!("pod {DRIVER_POD} tried to open");
    assert_eq!(agent.count_lines(|l| l.contains(&of_driver)), 0, "the CSI node plugin's opens are not refused");

    drop(routes);
    drop((holder, container, above, driver_container));
    agent.stop();
    let _ = ns.umount_detach(&a_target);
}

/// Opens through a pod's mount of a directory above `pv-rwop`'s (`container`'s hostPath
/// `data_dir`, which holds the volume's directory), where no BPF LSM guards them: judged
/// file by file. A pod's open of a file beside the volume through that mount is not
/// reported; another pod's open of the volume's file through it is, naming that pod (one
/// queue per volume, read in order: the open beside came first). Shared with
/// host_out_of_band's test of such a mount.
pub(crate) fn opens_through_a_mount_above_are_judged_file_by_file(
    agent: &Agent,
    ns: &MountNs,
    cgroups: &Path,
    container: &Container,
    data_dir: &Path,
) {
    let watched = container.path(data_dir).display().to_string();
    agent.wait_for_line("the mount above the volume watched", |l| {
        l.contains("open reports: volume pv-rwop's files watched at") && l.contains(&watched)
    });
    std::fs::write(data_dir.join("beside"), b"not the volume's").unwrap();
    let (beside, inside) = (PodCgroup::new(cgroups, BESIDE_READER), PodCgroup::new(cgroups, VOLUME_READER));
    let _beside = beside.holding_open_in(ns, Some(container.pid()), &data_dir.join("beside"));
    let _inside = inside.holding_open_in(ns, Some(container.pid()), &data_dir.join("pv-rwop/marker"));
    agent.wait_for_line("the open of the volume's file through the mount above it", reported("pv-rwop", VOLUME_READER));
    let beside_reported = format!("pod {BESIDE_READER} opened");
    assert_eq!(agent.count_lines(|l| l.contains(&beside_reported)), 0, "an open beside the volume was reported");
}
