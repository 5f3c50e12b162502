//! Access that never goes through kubelet's publish (root, cgroup v2, a syscall backend):
//! pod A owns a single-pod volume; processes of pod C (a cgroup named as kubelet names a
//! pod's) reach its data by a bind of A's publish target to a directory outside the
//! kubelet tree (what a hostPath volume amounts to), a bind of the volume's staging, a
//! recursive bind of kubelet's `pods/`, a clone with the new mount API, and a bind into C's
//! own emptyDir, and a container runtime's bind through `/proc/thread-self/fd/N`. The real
//! agent detaches each (in any mode but audit) and reports it once
//! with its route; A's own binds, and kubelet's publish, stay silent; a node process's
//! bind is reported and left in place. A reader the operator exempts (`--exempt-reader`)
//! reads, and `--detach-node-access=true` detaches the node process's bind. A publish that
//! reaches C's container by propagation alone is detached there; so is C's bind of a
//! raw-block volume's device node. A hostPath above A's volume directory is left in place:
//! its reads refused by the open guard, or the mount reported where there is none.

mod bidirectional;

use std::{
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
};

use crate::support::{
    have_root,
    kubelet::{Agent, KubeletTree, MountNs, pin_root, syscall_backend, uninstall},
    pod_cgroup::PodCgroup,
};

const TEST: &str = "a_second_pods_mounts_outside_kubelets_publish_are_detached_and_reported_with_their_route";
/// Pod UIDs as kubelet writes them (the cgroup path names them so).
pub(crate) const POD_A: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000a1";
const POD_C: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000c1";

/// Pod A's single-pod volume `pv-rwop`, staged (a bind standing for the driver's mount)
/// and published for A in a private mount namespace, with the agent running there.
pub(crate) struct Published {
    tree: KubeletTree,
    pub(crate) ns: MountNs,
    volume: PathBuf,
    staging: PathBuf,
    pub(crate) a_target: PathBuf,
    pub(crate) agent: Agent,
    /// The agent's pins: left by default when it exits (a new agent adopts them), so
    /// removed by [`Published::finish`] (each agent's kernel maps weigh tens of MB).
    pins: PathBuf,
}

impl Published {
    /// The agent runs with the syscall backend under test and `extra` arguments.
    pub(crate) fn new(pin: &str, extra: &[&str]) -> Self {
        Self::with_tree(KubeletTree::new(), MountNs::new(), pin, &syscall_backend(), extra)
    }

    /// As [`Published::new`], in a tree and namespace the test has prepared, with `backend`.
    pub(crate) fn with_tree(tree: KubeletTree, ns: MountNs, pin: &str, backend: &[&str], extra: &[&str]) -> Self {
        Self::with_tree_in_mode(tree, ns, pin, backend, extra, "auto")
    }

    /// As [`Published::with_tree`], the agent in `mode`.
    fn with_tree_in_mode(
        tree: KubeletTree,
        ns: MountNs,
        pin: &str,
        backend: &[&str],
        extra: &[&str],
        mode: &str,
    ) -> Self {
        let volume = tree.volume("pv-rwop");
        let handle_sha256 = "5f0e".repeat(16);
        let staging =
            tree.root().join(format!("plugins/kubernetes.io/csi/hostpath.csi.k8s.io/{handle_sha256}/globalmount"));
        std::fs::create_dir_all(&staging).unwrap();
        ns.bind(&volume, &staging).unwrap();
        let a_target = tree.publish_dir(POD_A, "pv-rwop");
        let mountinfo = ns.mountinfo();
        let args: Vec<&str> = ["--mountinfo", mountinfo.as_str()].iter().chain(backend).chain(extra).copied().collect();
        let pins = pin_root(pin);
        let agent = Agent::start_with(&tree.root(), &pins, &["pv-rwop"], mode, &args);
        agent.mode();
        ns.bind(&staging, &a_target).unwrap();
        agent.wait_for_line("the claim", claimed_by_a("pv-rwop"));
        Self { tree, ns, volume, staging, a_target, agent, pins }
    }

    /// A new directory outside the kubelet tree.
    pub(crate) fn dir(&self, name: &str) -> PathBuf {
        let d = self.tree.tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// What A's volume's marker file reads through `dir`.
    pub(crate) fn marker(&self, dir: &Path) -> std::io::Result<String> {
        self.ns.read(&dir.join("marker"))
    }

    /// Stops the agent and takes the test's mounts down.
    pub(crate) fn finish(self, points: &[&Path]) {
        self.agent.stop();
        uninstall(&self.pins);
        for point in points.iter().copied().chain([self.a_target.as_path(), self.staging.as_path()]) {
            let _ = self.ns.umount_detach(point);
        }
    }
}

/// The agent's line for A's claim of `volume`: "claimed by" where userspace decides,
/// "published for …, its owner" where the kernel does (and not the start-up line that
/// mentions owners).
fn claimed_by_a(volume: &str) -> impl Fn(&str) -> bool {
    let claimed = format!("volume {volume} claimed by pod {POD_A}");
    let published = format!("volume {volume} published for pod {POD_A}, its owner");
    move |line: &str| line.contains(&claimed) || line.contains(&published)
}

/// The agent's line for a detach at `point`.
pub(crate) fn detached_at(point: &Path) -> impl Fn(&str) -> bool {
    let point = point.display().to_string();
    move |l: &str| l.contains("CONFLICT detached") && l.contains(&format!(" at {point} by "))
}

// Long by design: the numbered routes share one agent, one owner and its mounts.
#[test]
fn a_second_pods_mounts_outside_kubelets_publish_are_detached_and_reported_with_their_route() {
    if !have_root(TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(TEST) else { return };
    let (pod_a, pod_c) = (PodCgroup::new(&cgroups, POD_A), PodCgroup::new(&cgroups, POD_C));
    let published = Published::new("out-of-band", &[]);
    let Published { tree, ns, volume, staging, a_target, agent, .. } = &published;
    let marker = |dir: &Path| published.marker(dir);
    let dir = |name: &str| published.dir(name);

    // 1. A hostPath on A's publish target: a bind of it outside the kubelet tree.
    let hostpath = dir("c-hostpath");
    pod_c.bind(ns, a_target, &hostpath, false);
    agent.wait_for_line("the bind's detach", detached_at(&hostpath));
    assert!(marker(&hostpath).is_err(), "C reads A's data through its bind");
    // 2. The volume's staging, bound elsewhere.
    let staged = dir("c-staging");
    pod_c.bind(ns, staging, &staged, false);
    agent.wait_for_line("the staging bind's detach", detached_at(&staged));
    assert!(marker(&staged).is_err(), "C reads A's data through the staging");
    // 3. A backup agent's recursive bind of kubelet's pods/: the copy of A's volume goes,
    // the rest of the tree stays.
    let backup = dir("c-backup");
    pod_c.bind(ns, &tree.root().join("pods"), &backup, true);
    let copy = backup.join(format!("{POD_A}/volumes/kubernetes.io~csi/pv-rwop/mount"));
    agent.wait_for_line("the recursive copy's detach", detached_at(&copy));
    assert!(marker(&copy).is_err(), "C reads A's data through its recursive bind");
    let left = copy.clone();
    assert!(ns.run(move || left.is_dir()), "the directory where the volume was is left, empty");
    let in_kernel = agent.mode() == "enforce";
    if in_kernel {
        // The copy sat on A's publish target's directory: its detach is no release.
        let releases = agent.metric_family_sum_where("volguard_kernel_events_total", "counter=\"releases\"");
        assert_eq!(releases, 0.0, "detaching a copy of A's publish released A's volume in the kernel");
    }
    // 4. A clone with the new mount API (open_tree + move_mount): refused in the kernel
    // where it decides (its hook has the clone's source, and C's pod from its cgroup),
    // detached at the syscall's exit elsewhere.
    let cloned = dir("c-clone");
    if in_kernel {
        assert_eq!(pod_c.try_clone_tree(ns, a_target, &cloned), libc::EBUSY, "C's clone is refused");
        agent.wait_for_line("the clone's refusal", |l| {
            l.contains("CONFLICT blocked (EBUSY)") && l.contains(&format!("pod {POD_C} tried to clone it"))
        });
    } else {
        pod_c.clone_tree(ns, a_target, &cloned);
        agent.wait_for_line("the clone's detach", detached_at(&cloned));
    }
    assert!(marker(&cloned).is_err(), "C reads A's data through its clone");
    // 5. A bind onto C's own emptyDir, inside the kubelet tree.
    let empty_dir = tree.root().join(format!("pods/{POD_C}/volumes/kubernetes.io~empty-dir/scratch"));
    std::fs::create_dir_all(&empty_dir).unwrap();
    pod_c.bind(ns, a_target, &empty_dir, false);
    agent.wait_for_line("the emptyDir bind's detach", detached_at(&empty_dir));
    assert!(marker(&empty_dir).is_err(), "C reads A's data through its emptyDir");

    // 6. A container runtime's bind of a hostPath for C, in C's container's own namespace:
    // onto /proc/thread-self/fd/N, so the call names no path; the mount is found in that
    // namespace by what it is (the volume's directory, bound as a hostPath on it would be).
    let container = MountNs::new();
    let runtime = dir("c-runtime-hostpath");
    pod_c.bind_via_fd(&container, volume, &runtime);
    agent.wait_for_line("the runtime bind's detach", detached_at(&runtime));
    assert!(container.read(&runtime.join("marker")).is_err(), "C reads A's data through its runtime's bind");

    // Each once, with its route, as a detach (or the clone's refusal) in the metric and the
    // debug API.
    let detached = if in_kernel { 5 } else { 6 };
    assert_eq!(agent.count_lines(|l| l.contains("CONFLICT detached")), detached, "one report per mount");
    let route_total =
        |route: &str| agent.metric_family_sum_where("volguard_conflicts_total", &format!("route=\"{route}\""));
    assert_eq!((route_total("bind"), route_total("clone"), route_total("recursive")), (4.0, 1.0, 1.0));
    let (_, body) = crate::support::http_get(&agent.address("debug API"), "/debug/conflicts");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let routes: Vec<&str> = json["conflicts"].as_array().unwrap().iter().filter_map(|c| c["route"].as_str()).collect();
    assert_eq!(routes.len(), 6, "{body}");
    assert!(json["conflicts"][0]["pod"]["uid"] == POD_C && json["conflicts"][0]["action"] == "detached", "{body}");

    // Allowed and silent: A's own bind (its runtime's into its container), which reads.
    let own = dir("a-container");
    pod_a.bind(ns, a_target, &own, false);
    // A node process (not in any pod): reported, left in place.
    let admin = dir("node-admin");
    ns.bind(a_target, &admin).unwrap();
    let admin_point = admin.display().to_string();
    agent.wait_for_line("the node process's report", |l| {
        l.contains("CONFLICT reported (a node process") && l.contains(&format!(" at {admin_point} by "))
    });
    assert_eq!(marker(&own).ok().as_deref(), Some("pv-rwop"), "the owner's own bind is left alone");
    assert_eq!(marker(&admin).ok().as_deref(), Some("pv-rwop"), "a node process's bind is reported, not detached");
    assert_eq!(agent.count_lines(|l| l.contains("CONFLICT detached")), detached, "nothing more was detached");
    assert_eq!(agent.count_lines(|l| l.contains("CONFLICT") && l.contains("a-container")), 0, "{own:?}");
    published.finish(&[&own, &admin, &backup]);
}

const AUDIT_TEST: &str = "in_audit_mode_another_pods_clone_is_reported_once_and_left";

/// In audit mode with BPF LSM, the `move_mount` hook and the syscall's exit both see another
/// pod's clone; the kernel's record reports it and the exit check does not again. Without
/// BPF LSM the exit check is the one that reports it.
#[test]
fn in_audit_mode_another_pods_clone_is_reported_once_and_left() {
    if !have_root(AUDIT_TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(AUDIT_TEST) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_C);
    let published = Published::with_tree_in_mode(
        KubeletTree::new(),
        MountNs::new(),
        "out-of-band-audit",
        &syscall_backend(),
        &[],
        "audit",
    );
    let (ns, agent) = (&published.ns, &published.agent);
    let cloned = published.dir("c-clone");
    pod_c.clone_tree(ns, &published.a_target, &cloned);
    // The records are handled in order: once a later bind is reported, the clone's hook
    // and exit records both have been.
    let later = published.dir("c-later");
    pod_c.bind(ns, &published.staging, &later, false);
    let later_point = later.display().to_string();
    agent.wait_for_line("the later bind's report", |l| {
        l.contains("CONFLICT reported (audit mode)") && l.contains(&format!(" at {later_point} by "))
    });
    assert_eq!(published.marker(&cloned).ok().as_deref(), Some("pv-rwop"), "audit mode leaves the clone");
    let route_total =
        |route: &str| agent.metric_family_sum_where("volguard_conflicts_total", &format!("route=\"{route}\""));
    assert_eq!((route_total("clone"), route_total("bind")), (1.0, 1.0), "each access reported once");
    let (_, body) = crate::support::http_get(&agent.address("debug API"), "/debug/conflicts");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["conflicts"].as_array().unwrap().len(), 2, "{body}");
    published.finish(&[&cloned, &later]);
}

const EXEMPT_TEST: &str = "an_exempt_reader_reads_and_the_opt_in_detaches_a_node_processs_access";
/// A backup agent the operator exempts (namespace backup, ServiceAccount restic), and
/// another pod of that namespace that is not exempt (ServiceAccount nightly).
const POD_EXEMPT: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000e1";
const POD_D: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000d1";
/// A pod whose container receives the kubelet tree's propagation.
const POD_P: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000f1";

#[test]
fn an_exempt_reader_reads_and_the_opt_in_detaches_a_node_processs_access() {
    if !have_root(EXEMPT_TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(EXEMPT_TEST) else { return };
    let (exempt, pod_d) = (PodCgroup::new(&cgroups, POD_EXEMPT), PodCgroup::new(&cgroups, POD_D));
    let facts = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        facts.path(),
        format!(
            "pods:\n  - {{uid: {POD_A}, namespace: shop, name: db-0}}\n  \
             - {{uid: {POD_EXEMPT}, namespace: backup, name: restic-x7, serviceAccount: restic}}\n  \
             - {{uid: {POD_D}, namespace: backup, name: nightly-q2, serviceAccount: nightly}}\n"
        ),
    )
    .unwrap();
    let inventory = facts.path().to_str().unwrap();
    let published = Published::new(
        "exempt-reader",
        &["--inventory", inventory, "--exempt-reader", "backup/restic", "--detach-node-access=true"],
    );
    let (ns, agent) = (&published.ns, &published.agent);

    // The exempt backup agent's recursive bind of pods/: A's volume is readable in it.
    let backup = published.dir("exempt-backup");
    exempt.bind(ns, &published.tree.root().join("pods"), &backup, true);
    // The same namespace with another ServiceAccount is not exempt: detached.
    let other = published.dir("other-hostpath");
    pod_d.bind(ns, &published.a_target, &other, false);
    agent.wait_for_line("the other pod's detach", detached_at(&other));
    // Clones too: the exempt reader's goes through (in the kernel as well, which has the
    // exempt pods from the facts); the other pod's is refused where the kernel decides,
    // detached elsewhere.
    let exempt_clone = published.dir("exempt-clone");
    exempt.clone_tree(ns, &published.a_target, &exempt_clone);
    let other_clone = published.dir("other-clone");
    if agent.mode() == "enforce" {
        assert_eq!(pod_d.try_clone_tree(ns, &published.a_target, &other_clone), libc::EBUSY, "D's clone");
        agent.wait_for_line("the other pod's clone refused", |l| {
            l.contains("CONFLICT blocked (EBUSY)") && l.contains(&format!("pod {POD_D} tried to clone it"))
        });
    } else {
        pod_d.clone_tree(ns, &published.a_target, &other_clone);
        agent.wait_for_line("the other pod's clone detached", detached_at(&other_clone));
    }
    // A node process, with --detach-node-access=true: detached too.
    let admin = published.dir("node-admin");
    ns.bind(&published.a_target, &admin).unwrap();
    agent.wait_for_line("the node process's detach", detached_at(&admin));

    let copy = backup.join(format!("{POD_A}/volumes/kubernetes.io~csi/pv-rwop/mount"));
    assert_eq!(published.marker(&copy).ok().as_deref(), Some("pv-rwop"), "the exempt reader reads A's volume");
    assert!(published.marker(&other).is_err(), "a pod of the exempt namespace but not its ServiceAccount reads");
    assert!(published.marker(&admin).is_err(), "the node process's bind is left with the opt-in");
    assert_eq!(published.marker(&exempt_clone).ok().as_deref(), Some("pv-rwop"), "the exempt reader's clone");
    assert!(published.marker(&other_clone).is_err(), "D reads A's volume through its clone");
    assert_eq!(agent.count_lines(|l| l.contains("CONFLICT")), 3, "only D's bind and clone and the node's are");
    assert_eq!(agent.count_lines(|l| l.contains("CONFLICT") && l.contains("exempt-")), 0);
    published.finish(&[&backup, &other, &admin, &exempt_clone, &other_clone]);
}

const PROPAGATED_TEST: &str = "a_publish_propagated_into_another_pods_namespace_is_detached_there";

#[test]
fn a_publish_propagated_into_another_pods_namespace_is_detached_there() {
    propagated_copies_are_detached(PROPAGATED_TEST, &syscall_backend());
}

/// Pod C's container, made before A's publish, receives the kubelet tree's propagation;
/// the agent (with `backend`) detaches the copies of A's volume there right after the
/// publish. Shared with the fanotify backend's tests (host_fanotify.rs).
pub fn propagated_copies_are_detached(test: &str, backend: &[&str]) {
    if !have_root(test) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(test) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_P);
    // The kubelet root shared, as on a node (systemd makes / shared), and pod C's container
    // made before A's publish, receiving what is mounted there (a hostPath on kubelet's
    // tree with HostToContainer): no mount call of C's brings A's volume in.
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let root = tree.root();
    ns.bind(&root, &root).unwrap();
    let shared = root.clone();
    ns.run(move || {
        nix::mount::mount(None::<&str>, &shared, None::<&str>, nix::mount::MsFlags::MS_SHARED, None::<&str>)
    })
    .unwrap();
    // And another container of C's, being created: made first, so that the agent's scan
    // (in the order of /proc) looks at it before the one above.
    let being_created = pod_c.being_created(&ns);
    let container = pod_c.container(&ns, &tree.tmp.path().join("c-rootfs"), &root);
    let published = Published::with_tree(tree, ns, &format!("propagated-{}", backend.join("-")), backend, &[]);
    let a_target = published.a_target.clone();
    let copy = container.path(&a_target);
    // Both copies: the staging's (made before A owned the volume) and the publish's.
    let staging = published.staging.clone();
    published.agent.wait_for_line("the propagated publish's detach", detached_at(&a_target));
    published.agent.wait_for_line("the propagated staging's detach", detached_at(&staging));
    assert!(std::fs::read_to_string(copy.join("marker")).is_err(), "C reads A's data through the propagated copy");
    let staged_copy = container.path(&staging).join("marker");
    assert!(std::fs::read_to_string(staged_copy).is_err(), "C reads A's data through the staging's copy");
    assert_eq!(published.marker(&a_target).ok().as_deref(), Some("pv-rwop"), "A's own publish is left");
    let route = published.agent.metric_family_sum_where("volguard_conflicts_total", "route=\"propagated\"");
    assert_eq!(route, 2.0, "two propagated copies, each reported once");
    // The container being created still shows the node's root, and every node mount with
    // it: nothing there to judge (the runtime's pivot drops them).
    let unpivoted = std::fs::read_to_string(being_created.path(&a_target).join("marker"));
    assert_eq!(unpivoted.ok().as_deref(), Some("pv-rwop"), "a container being created was judged");
    if published.agent.mode() == "enforce" {
        // The copy sat on A's publish target's directory, in C's namespace: no release.
        let releases = published.agent.metric_family_sum_where("volguard_kernel_events_total", "counter=\"releases\"");
        assert_eq!(releases, 0.0, "detaching the propagated copy released A's volume in the kernel");
    }
    drop((container, being_created));
    published.finish(&[&root]);
}

const ANCESTOR_TEST: &str = "a_hostpath_above_a_volumes_directory_is_left_and_its_reads_refused_or_reported";

/// Pod C's container has a hostPath on the directory that holds A's volume directory (a CSI
/// driver's data directory): it shows A's files among much else. The agent leaves the
/// mount; with BPF LSM (enforce) C's read of A's file through it is refused in the kernel
/// and nothing is reported about the mount; without (quarantine) the read succeeds, the
/// mount is reported once, with route `ancestor`, and the opens through it of A's files
/// (not of the files beside them) are reported.
#[test]
fn a_hostpath_above_a_volumes_directory_is_left_and_its_reads_refused_or_reported() {
    hostpath_above_a_volume_is_left(ANCESTOR_TEST, &syscall_backend());
}

/// The test above, the agent with `backend`. Shared with the fanotify backend's tests
/// (host_fanotify.rs).
pub fn hostpath_above_a_volume_is_left(test: &str, backend: &[&str]) {
    if !have_root(test) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(test) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_C);
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let data_dir = tree.tmp.path().join("volumes");
    std::fs::create_dir_all(&data_dir).unwrap();
    // Made before A's publish: the scan after it finds the container.
    let container = pod_c.container(&ns, &tree.tmp.path().join("c-rootfs"), &data_dir);
    let published = Published::with_tree(tree, ns, &format!("ancestor-{}", backend.join("-")), backend, &[]);
    let through_data_dir = data_dir.join("pv-rwop/marker");
    let read = pod_c.try_read_in_namespace_of(&published.ns, container.pid(), &through_data_dir);
    let ancestor_line = |l: &str| {
        l.contains("CONFLICT reported") && l.contains(&format!("an ancestor mount at {}", data_dir.display()))
    };
    match published.agent.mode().as_str() {
        "enforce" => {
            assert_eq!(read, libc::EACCES, "C's read of A's file through the data directory was not refused");
            assert_eq!(published.agent.count_lines(ancestor_line), 0, "the mount was reported where opens are guarded");
        }
        mode => {
            assert_eq!(mode, "quarantine", "the agent's mode");
            published.agent.wait_for_line("the ancestor mount's report", ancestor_line);
            assert_eq!(read, 0, "C's read through the data directory failed: was its mount taken away?");
            let route = published.agent.metric_family_sum_where("volguard_conflicts_total", "route=\"ancestor\"");
            assert_eq!(route, 1.0, "the mount above A's volume, reported once");
            crate::host_open_reports::opens_through_a_mount_above_are_judged_file_by_file(
                &published.agent,
                &published.ns,
                &cgroups,
                &container,
                &data_dir,
            );
        }
    }
    assert_eq!(published.marker(&published.a_target).ok().as_deref(), Some("pv-rwop"), "A's own publish is left");
    drop(container);
    published.finish(&[]);
}

const BLOCK_TEST: &str = "a_raw_block_volumes_device_node_bound_by_another_pod_is_detached";

/// A raw-block volume: kubelet's publish is a bind of the device node onto a file
/// (`plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<pod uid>`); another pod's bind of
/// that node (a hostPath of type BlockDevice) reaches the same device. The node stands in a
/// directory of the test's own (a block node made with mknod; nothing opens it), as the
/// node's devtmpfs holds the real ones: what the agent compares is the same, the
/// filesystem and the path in it.
#[test]
fn a_raw_block_volumes_device_node_bound_by_another_pod_is_detached() {
    if !have_root(BLOCK_TEST) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(BLOCK_TEST) else { return };
    let pod_c = PodCgroup::new(&cgroups, POD_C);
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let dev = tree.tmp.path().join("dev");
    std::fs::create_dir_all(&dev).unwrap();
    let node = dev.join("vdb");
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    nix::sys::stat::mknod(&node, nix::sys::stat::SFlag::S_IFBLK, mode, nix::sys::stat::makedev(7, 250)).unwrap();
    let file = |path: &Path| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"").unwrap();
        path.to_owned()
    };
    let publish = file(&tree.root().join(format!("plugins/kubernetes.io/csi/volumeDevices/publish/pv-blk/{POD_A}")));
    let pins = pin_root("raw-block");
    let agent = Agent::start_in(&ns, &tree.root(), &pins, &["pv-blk"], &syscall_backend());
    agent.mode();
    ns.bind(&node, &publish).unwrap();
    agent.wait_for_line("the claim", claimed_by_a("pv-blk"));
    // Pod C binds the node's device node onto a file of its own.
    let hostpath = file(&tree.tmp.path().join("c-block"));
    pod_c.bind(&ns, &node, &hostpath, false);
    agent.wait_for_line("the device bind's detach", detached_at(&hostpath));
    let is_block = |path: PathBuf| ns.run(move || std::fs::metadata(&path).unwrap().file_type().is_block_device());
    assert!(!is_block(hostpath.clone()), "C's file is still the volume's device");
    assert!(is_block(publish.clone()), "A's publish is left");
    agent.stop();
    uninstall(&pins);
    let _ = ns.umount_detach(&publish);
}

/// A pod whose publish came while no agent ran: its own publish, which stands.
const POD_G: &str = "0c3c2d5e-0000-4a6e-9f00-0000000000b7";

#[test]
fn a_second_pods_publish_made_while_no_agent_ran_stays_readable_in_its_container() {
    const TEST: &str = "a_second_pods_publish_made_while_no_agent_ran_stays_readable_in_its_container";
    publish_made_in_the_gap_stays(TEST, &syscall_backend());
}

/// Pod A's and then pod G's publish of the single-pod volume, both made while no agent ran
/// (a rollout's gap), and G's container running on its publish. The agent starts: it
/// reports the volume shared and leaves it (docs/enforcement.md, "Not covered"), and its
/// start-up scan of the pods' namespaces must not take G's own volume out of G's container:
/// there it is what kubelet gave G, not a way around kubelet's publish.
pub fn publish_made_in_the_gap_stays(test: &str, backend: &[&str]) {
    if !have_root(test) {
        return;
    }
    let Some(cgroups) = PodCgroup::hierarchy(test) else { return };
    let pod_g = PodCgroup::new(&cgroups, POD_G);
    let (tree, ns) = (KubeletTree::new(), MountNs::new());
    let volume = tree.volume("pv-rwop");
    let staging = tree.root().join("plugins/kubernetes.io/csi/hostpath.csi.k8s.io/gap/globalmount");
    std::fs::create_dir_all(&staging).unwrap();
    ns.bind(&volume, &staging).unwrap();
    let (a_target, g_target) = (tree.publish_dir(POD_A, "pv-rwop"), tree.publish_dir(POD_G, "pv-rwop"));
    ns.bind(&staging, &a_target).unwrap();
    ns.bind(&staging, &g_target).unwrap();
    let container = pod_g.container(&ns, &tree.tmp.path().join("g-rootfs"), &g_target);
    let read_in_g = || std::fs::read_to_string(container.path(&g_target).join("marker")).ok();
    assert_eq!(read_in_g().as_deref(), Some("pv-rwop"), "G's container does not show its publish");

    let gap_pins = pin_root(&format!("gap-{}", backend.join("-")));
    let agent = Agent::start_in(&ns, &tree.root(), &gap_pins, &["pv-rwop"], backend);
    agent.mode();
    agent.wait_for_line("the shared volume's report", |l| {
        l.contains("CONFLICT found") && l.contains(POD_G) && l.contains("left as it is")
    });
    // The start-up scan ran before the ready line (it is what took G's volume away before
    // the fix); a scan a publish asks for waits a quiet half second: past it.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(read_in_g().as_deref(), Some("pv-rwop"), "the agent took G's own publish out of G's container");
    let taken = agent.metric_family_sum_where("volguard_conflicts_total", "action=\"detached\"");
    assert_eq!(taken, 0.0, "a detach counted against a pod's own publish");
    assert_eq!(ns.read(&a_target.join("marker")).ok().as_deref(), Some("pv-rwop"), "A's publish is left");
    agent.stop();
    uninstall(&gap_pins);
    drop(container);
    for point in [&g_target, &a_target, &staging] {
        let _ = ns.umount_detach(point);
    }
}
