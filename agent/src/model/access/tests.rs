use super::*;

const KUBELET: &str = "/var/lib/kubelet";
const A_TARGET: &str = "/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount";

/// A mountinfo line: id, parent, device, root, mount point.
fn line(id: i32, parent: i32, device: &str, root: &str, at: &str) -> String {
    format!("{id} {parent} {device} {root} {at} rw,relatime shared:1 - ext4 /dev/x rw\n")
}

/// The same, for a mount that only receives propagation (`master:1`).
fn slave_line(id: i32, parent: i32, device: &str, root: &str, at: &str) -> String {
    format!("{id} {parent} {device} {root} {at} rw,relatime master:1 - ext4 /dev/x rw\n")
}

/// The agent's table: the root filesystem, the data disk, A's publish of pv-1 (a bind of
/// /data/pv-1 on 8:16) and an unrelated publish of pv-2.
fn node_table() -> MountTable {
    let text = [
        line(20, 1, "8:1", "/", "/"),
        line(30, 20, "8:16", "/", "/data"),
        line(40, 20, "8:16", "/pv-1", A_TARGET),
        line(41, 20, "8:16", "/pv-2", "/var/lib/kubelet/pods/pod-b/volumes/kubernetes.io~csi/pv-2/mount"),
    ]
    .concat();
    MountTable::parse(text.as_bytes())
}

fn trees() -> Vec<VolumeTree> {
    let owners = BTreeMap::from([("pv-1".to_owned(), "pod-a".to_owned())]);
    owned_trees(&node_table(), Path::new(KUBELET), &owners)
}

fn found(extra: &[String], target: &str, attach: AttachKind) -> Vec<(String, String, Route)> {
    let scope = if target.starts_with("/proc") { Scope::Namespace } else { Scope::CallTree };
    let mut text: String = [line(20, 1, "8:1", "/", "/"), line(40, 20, "8:16", "/pv-1", A_TARGET)].concat();
    text.push_str(&extra.concat());
    let table = MountTable::parse(text.as_bytes());
    accesses(&table, Path::new(target), attach, scope, Path::new(KUBELET), &trees())
        .into_iter()
        .map(|a| (a.volume, a.mount_point.display().to_string(), a.route))
        .collect()
}

#[test]
fn only_the_owners_publish_makes_a_tree() {
    assert_eq!(
        trees(),
        [VolumeTree {
            volume: "pv-1".into(),
            owner: "pod-a".into(),
            device: "8:16".into(),
            root: "/pv-1".into(),
            publish_point: A_TARGET.into(),
            published_to: vec!["pod-a".into()],
        }]
    );
}

#[test]
fn a_second_pods_publish_that_stands_is_its_own_and_a_masked_one_is_not() {
    let second = "/var/lib/kubelet/pods/pod-b/volumes/kubernetes.io~csi/pv-1/mount";
    let masked = "/var/lib/kubelet/pods/pod-c/volumes/kubernetes.io~csi/pv-1/mount";
    let text = [
        line(20, 1, "8:1", "/", "/"),
        line(40, 20, "8:16", "/pv-1", A_TARGET),
        line(41, 20, "8:16", "/pv-1", second),
        line(42, 20, "0:99", "/", masked),
    ]
    .concat();
    let owners = BTreeMap::from([("pv-1".to_owned(), "pod-a".to_owned())]);
    let trees = owned_trees(&MountTable::parse(text.as_bytes()), Path::new(KUBELET), &owners);
    assert_eq!(trees.len(), 1);
    assert_eq!(trees[0].published_to, ["pod-a", "pod-b"]);
    assert!(holds_publish(&trees, "pv-1", "pod-b"));
    assert!(!holds_publish(&trees, "pv-1", "pod-c"), "a masked publish shows no data");
    assert!(!holds_publish(&trees, "pv-2", "pod-b"));
}

#[test]
fn a_bind_of_the_volume_or_a_directory_in_it_anywhere_is_access() {
    let hostpath = [line(50, 20, "8:16", "/pv-1", "/srv/c-hostpath")];
    assert_eq!(
        found(&hostpath, "/srv/c-hostpath", AttachKind::Bind),
        [("pv-1".into(), "/srv/c-hostpath".into(), Route::Bind)]
    );
    let subdir = [line(50, 20, "8:16", "/pv-1/logs", "/srv/logs")];
    assert_eq!(found(&subdir, "/srv/logs", AttachKind::Bind).len(), 1);
    let clone = [line(50, 20, "8:16", "/pv-1", "/srv/clone")];
    assert_eq!(found(&clone, "/srv/clone", AttachKind::Move)[0].2, Route::Clone);
    // Into another pod's emptyDir, inside the kubelet tree.
    let empty_dir = "/var/lib/kubelet/pods/pod-c/volumes/kubernetes.io~empty-dir/scratch";
    assert_eq!(found(&[line(50, 20, "8:16", "/pv-1", empty_dir)], empty_dir, AttachKind::Bind).len(), 1);
}

#[test]
fn other_directories_of_the_same_disk_and_other_disks_are_not() {
    let sibling = [line(50, 20, "8:16", "/pv-10", "/srv/x")];
    assert_eq!(found(&sibling, "/srv/x", AttachKind::Bind), []);
    let other_disk = [line(50, 20, "8:32", "/pv-1", "/srv/x")];
    assert_eq!(found(&other_disk, "/srv/x", AttachKind::Bind), []);
}

#[test]
fn a_recursive_bind_of_the_pods_directory_reaches_each_owned_volume_once_as_a_copy() {
    let rbind = [
        line(60, 20, "8:1", "/var/lib/kubelet/pods", "/backup"),
        line(61, 60, "8:16", "/pv-1", "/backup/pod-a/volumes/kubernetes.io~csi/pv-1/mount"),
        line(62, 60, "8:16", "/pv-2", "/backup/pod-b/volumes/kubernetes.io~csi/pv-2/mount"),
    ];
    assert_eq!(
        found(&rbind, "/backup", AttachKind::Bind),
        [("pv-1".into(), "/backup/pod-a/volumes/kubernetes.io~csi/pv-1/mount".into(), Route::Recursive)]
    );
}

#[test]
fn a_call_onto_a_path_answers_for_its_own_mounts_only() {
    let earlier = [line(63, 20, "8:16", "/pv-1", "/elsewhere"), line(64, 20, "0:50", "/", "/srv/tmp")];
    assert_eq!(found(&earlier, "/srv/tmp", AttachKind::Bind), [], "an earlier mount is not this call's");
}

#[test]
fn the_whole_namespace_is_looked_at_as_a_runtime_binds_through_an_fd_then_pivots() {
    // A container after runc: a hostPath at /data (bound onto /proc/thread-self/fd/7,
    // then pivoted), and a hostPath of kubelet's pods/ at /host/pods, recursive.
    let container = [
        line(70, 70, "0:90", "/", "/"),
        line(71, 70, "8:16", "/pv-1", "/data"),
        line(72, 70, "8:1", "/var/lib/kubelet/pods", "/host/pods"),
        line(73, 72, "8:16", "/pv-1", "/host/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount"),
    ];
    assert_eq!(
        found(&container, "/proc/thread-self/fd/7", AttachKind::Bind),
        [
            ("pv-1".into(), "/data".into(), Route::Bind),
            ("pv-1".into(), "/host/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount".into(), Route::Recursive),
        ]
    );
}

#[test]
fn kubelets_own_places_for_the_owner_are_not_access() {
    // The owner's publish itself, and kubelet's subPath bind for it.
    assert_eq!(found(&[], A_TARGET, AttachKind::Bind), []);
    let subpath = "/var/lib/kubelet/pods/pod-a/volume-subpaths/pv-1/app/0";
    assert_eq!(found(&[line(50, 20, "8:16", "/pv-1/sub", subpath)], subpath, AttachKind::Bind), []);
    // The same place for another pod is access.
    let other = "/var/lib/kubelet/pods/pod-c/volume-subpaths/pv-1/app/0";
    assert_eq!(found(&[line(50, 20, "8:16", "/pv-1/sub", other)], other, AttachKind::Bind).len(), 1);
}

#[test]
fn a_runtimes_namespace_before_its_pivot_shows_a_standing_second_publish_which_is_not_access() {
    // pod-b's publish of pv-1 stands (made while no agent ran); another pod's runtime
    // binds through its fd before pivoting: its namespace shows every node mount.
    let b_target = "/var/lib/kubelet/pods/pod-b/volumes/kubernetes.io~csi/pv-1/mount";
    let node = [
        line(20, 1, "8:1", "/", "/"),
        line(40, 20, "8:16", "/pv-1", A_TARGET),
        line(41, 20, "8:16", "/pv-1", b_target),
    ]
    .concat();
    let owners = BTreeMap::from([("pv-1".to_owned(), "pod-a".to_owned())]);
    let trees = owned_trees(&MountTable::parse(node.as_bytes()), Path::new(KUBELET), &owners);
    let unpivoted = MountTable::parse(node.as_bytes());
    let found = accesses(
        &unpivoted,
        Path::new("/proc/thread-self/fd/7"),
        AttachKind::Bind,
        Scope::Namespace,
        Path::new(KUBELET),
        &trees,
    );
    assert_eq!(found, [], "kubelet's places for a standing publish are spared");
    // The same path for a pod whose publish does not stand is access.
    let other = "/var/lib/kubelet/pods/pod-c/volumes/kubernetes.io~csi/pv-1/mount";
    assert_eq!(found_with(&[line(50, 20, "8:16", "/pv-1", other)], &trees).len(), 1);
}

fn found_with(extra: &[String], trees: &[VolumeTree]) -> Vec<Access> {
    let mut text: String = [line(20, 1, "8:1", "/", "/"), line(40, 20, "8:16", "/pv-1", A_TARGET)].concat();
    text.push_str(&extra.concat());
    let table = MountTable::parse(text.as_bytes());
    accesses(&table, Path::new("/proc/thread-self/fd/7"), AttachKind::Bind, Scope::Namespace, Path::new(KUBELET), trees)
}

#[test]
fn a_namespace_without_access_is_nothing() {
    assert_eq!(found(&[], "/srv/none", AttachKind::Bind), []);
    assert_eq!(found(&[line(50, 20, "0:50", "/", "/srv/tmp")], "/srv/tmp", AttachKind::Bind), []);
}

#[test]
fn a_pods_namespace_copies_are_found_wherever_they_sit_unless_shared_back() {
    let table = MountTable::parse(
        [
            slave_line(100, 100, "0:50", "/", "/"),
            // HostToContainer copies: under a backup path, and at the owner's own publish
            // path (a hostPath of the kubelet root at the same path).
            slave_line(101, 100, "8:16", "/pv-1", "/backup/pod-a/volumes/kubernetes.io~csi/pv-1/mount"),
            slave_line(102, 100, "8:16", "/pv-1", A_TARGET),
            // Another volume, and a Bidirectional copy (a CSI node plugin's).
            slave_line(103, 100, "8:16", "/pv-2", "/backup/pod-b/volumes/kubernetes.io~csi/pv-2/mount"),
            line(104, 100, "8:16", "/pv-1", "/plugin/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount"),
        ]
        .concat()
        .as_bytes(),
    );
    let found: Vec<(i32, Route)> =
        copies_in_namespace(&table, &trees()).into_iter().map(|a| (a.mount_id, a.route)).collect();
    assert_eq!(found, [(101, Route::Propagated), (102, Route::Propagated)]);
}

/// A CSI node plugin's container started while A's volume is published: its runtime's
/// recursive bind of kubelet's `pods/` (`Bidirectional`, so in the node's peer groups)
/// copies A's publish into it. The copy is found, and is shared back: spared by the
/// caller, as the namespace scan spares it; a private copy is not.
#[test]
fn a_bidirectional_copy_of_a_publish_is_shared_back() {
    let copy = "/rootfs/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount";
    let table = MountTable::parse(
        [
            line(20, 1, "8:1", "/", "/"),
            line(40, 20, "8:16", "/pv-1", A_TARGET),
            line(60, 20, "0:70", "/", "/rootfs/var/lib/kubelet/pods"),
            line(61, 60, "8:16", "/pv-1", copy),
            slave_line(62, 20, "8:16", "/pv-1", "/backup/pod-a/volumes/kubernetes.io~csi/pv-1/mount"),
        ]
        .concat()
        .as_bytes(),
    );
    let found = accesses(
        &table,
        Path::new("/proc/thread-self/fd/7"),
        AttachKind::Bind,
        Scope::Namespace,
        Path::new(KUBELET),
        &trees(),
    );
    let judged: Vec<(i32, bool)> = found.iter().map(|a| (a.mount_id, shared_back(&table, a))).collect();
    assert_eq!(judged, [(61, true), (62, false)]);
}

#[test]
fn a_new_mount_is_judged_by_the_one_mount_it_makes() {
    let whole = VolumeTree { root: PathBuf::from("/"), ..trees()[0].clone() };
    let table = MountTable::parse(
        [
            line(20, 1, "8:1", "/", "/"),
            // Another mount of the volume's filesystem that was there before the call.
            line(30, 20, "8:16", "/", "/elsewhere"),
            // The call's: the volume's device mounted again at /mnt/x.
            line(31, 20, "8:16", "/", "/mnt/x"),
        ]
        .concat()
        .as_bytes(),
    );
    let found = |target: &str, scope| {
        accesses(
            &table,
            Path::new(target),
            AttachKind::NewMount,
            scope,
            Path::new(KUBELET),
            std::slice::from_ref(&whole),
        )
        .into_iter()
        .map(|a| (a.mount_id, a.route))
        .collect::<Vec<_>>()
    };
    assert_eq!(found("/mnt/x", Scope::CallTree), [(31, Route::Device)]);
    assert_eq!(found("/mnt/x", Scope::Namespace), [(31, Route::Device)], "not the other mounts of the namespace");
    assert_eq!(found("/proc/thread-self/fd/7", Scope::Namespace), [], "no mount at the call's path: none is its");
}

#[test]
fn a_mount_of_a_directory_above_the_volume_is_an_ancestor_and_a_sibling_or_another_device_is_not() {
    let table = MountTable::parse(
        [
            slave_line(100, 100, "0:50", "/", "/"),
            // A hostPath on the driver's data directory (the volume is /pv-1 there).
            slave_line(101, 100, "8:16", "/", "/hp"),
            // A sibling whose name starts the same, another device's root, a shared copy.
            slave_line(102, 100, "8:16", "/pv-10", "/sibling"),
            slave_line(103, 100, "8:17", "/", "/other"),
            line(104, 100, "8:16", "/", "/plugin-data"),
        ]
        .concat()
        .as_bytes(),
    );
    let found: Vec<(i32, Route)> =
        copies_in_namespace(&table, &trees()).into_iter().map(|a| (a.mount_id, a.route)).collect();
    assert_eq!(found, [(101, Route::Ancestor)]);
    let by_id = |id| table.mounts.iter().find(|m| m.id == id).unwrap();
    assert_eq!(trees()[0].dir_below(by_id(101)), Some(PathBuf::from("/hp/pv-1")));
    assert_eq!(trees()[0].dir_below(by_id(102)), None, "a sibling is not above the volume");
    // A whole filesystem has nothing above it on its own device: every unshared mount of
    // it shows it.
    let whole = VolumeTree { root: PathBuf::from("/"), ..trees()[0].clone() };
    assert_eq!(
        copies_in_namespace(&table, &[whole]).iter().map(|a| (a.mount_id, a.route)).collect::<Vec<_>>(),
        [(101, Route::Propagated), (102, Route::Propagated)]
    );
}
