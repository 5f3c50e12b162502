//! Access to a single-pod volume by what a mount is, not where it lands. A mount shows the
//! directory `root` of the filesystem `device` (mountinfo's fourth and third fields, the
//! kernel's own account of the mount): one whose filesystem is an owned volume's and whose
//! root lies inside the directory the owner's publish shows reaches that volume's data,
//! whatever its mount point and in whichever mount namespace. Pure: the agent reads the
//! tables and acts.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::node_files::{
    kubelet::{PathKind, classify},
    mount_table::{Mount, MountTable},
};

/// What an owned single-pod volume's publish shows: its filesystem and the directory in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeTree {
    pub volume: String,
    pub owner: String,
    pub device: String,
    pub root: PathBuf,
    /// Where the owner's publish is mounted, in the table's namespace.
    pub publish_point: PathBuf,
    /// Every pod kubelet's publish of the volume still shows it to, the owner first: a
    /// second pod's publish that stands (made while no agent ran, or left in audit mode)
    /// is that pod's own, and so are its containers' binds of it.
    pub published_to: Vec<String>,
}

impl VolumeTree {
    /// Whether the owner's publish shows the volume's whole filesystem (a block volume's),
    /// not a directory of a shared one.
    pub fn whole_filesystem(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Whether `mount` shows this volume's data (the whole tree or a directory in it).
    pub fn shown_by(&self, mount: &Mount) -> bool {
        self.shows(&mount.device, &mount.root)
    }

    /// Whether a mount of the filesystem `device` (`major:minor`) showing its directory
    /// `root` shows this volume's data.
    pub fn shows(&self, device: &str, root: &Path) -> bool {
        device == self.device && root.starts_with(&self.root)
    }

    /// Whether `mount` shows a directory above this volume's on the same filesystem (a
    /// hostPath on a CSI driver's data directory, on `/var/lib`, on `/`): the volume's
    /// files are reachable through it, among much else.
    pub fn above(&self, mount: &Mount) -> bool {
        mount.device == self.device && mount.root != self.root && self.root.starts_with(&mount.root)
    }

    /// Where the volume's directory lies in `mount`'s namespace, when `mount` is
    /// [above](Self::above) it: the mount point, then the volume's root below the mount's.
    pub fn dir_below(&self, mount: &Mount) -> Option<PathBuf> {
        let below = self.root.strip_prefix(&mount.root).ok().filter(|_| self.above(mount))?;
        Some(mount.mount_point.join(below))
    }

    /// Whether `pod` has a publish of its own that shows this volume: a copy in its mount
    /// namespace is what kubelet gave it, not a way around kubelet's publish.
    pub fn published_to(&self, pod: &str) -> bool {
        self.published_to.iter().any(|p| p == pod)
    }
}

/// The trees of the owned volumes, from a table where kubelet's publishes are (the agent's):
/// the owner's publish mount of each. `owners`: volume → owner pod UID.
pub fn owned_trees(table: &MountTable, kubelet_root: &Path, owners: &BTreeMap<String, String>) -> Vec<VolumeTree> {
    let mut trees: Vec<VolumeTree> = Vec::new();
    for mount in &table.mounts {
        let Some(target) = classify(kubelet_root, &mount.mount_point).publish_target() else { continue };
        if owners.get(&target.volume) != Some(&target.pod_uid) {
            continue;
        }
        let tree = VolumeTree {
            volume: target.volume,
            published_to: vec![target.pod_uid.clone()],
            owner: target.pod_uid,
            device: mount.device.clone(),
            root: mount.root.clone(),
            publish_point: mount.mount_point.clone(),
        };
        if !trees.contains(&tree) {
            trees.push(tree);
        }
    }
    // The other pods whose publish of an owned volume still shows its data (a quarantined
    // publish shows the mask instead, a refused one nothing).
    for mount in &table.mounts {
        let Some(target) = classify(kubelet_root, &mount.mount_point).publish_target() else { continue };
        for tree in trees.iter_mut().filter(|t| t.volume == target.volume && t.shown_by(mount)) {
            if !tree.published_to(&target.pod_uid) {
                tree.published_to.push(target.pod_uid.clone());
            }
        }
    }
    trees
}

/// Whether `pod` holds a publish of its own of `volume` (see [`VolumeTree::published_to`]).
pub fn holds_publish(trees: &[VolumeTree], volume: &str, pod: &str) -> bool {
    trees.iter().any(|t| t.volume == volume && t.published_to(pod))
}

/// How a mount outside kubelet's publish reached a volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Route {
    /// kubelet's publish (NodePublishVolume) into a second pod.
    Publish,
    /// A bind mount (`mount --bind`, a hostPath volume's bind) of a directory in the volume.
    Bind,
    /// A clone with the new mount API (`open_tree(OPEN_TREE_CLONE)` + `move_mount`).
    Clone,
    /// A copy inside a recursive bind or clone of an ancestor (kubelet's `pods/`, say).
    Recursive,
    /// A new mount of a volume that is a filesystem of its own: its block device mounted
    /// again (`mount /dev/… /dir`), which shows the same filesystem.
    Device,
    /// A copy found in a pod's namespace by the scan rather than at a mount call: one that
    /// propagation brought there (a hostPath on kubelet's tree with `HostToContainer`), or
    /// one made before the agent started.
    Propagated,
    /// An open of the volume's files with no mount of its own: through `/proc/<pid>/root`,
    /// a setns, a hostPath on an ancestor directory, a second mount of its device.
    Open,
    /// A mount in a pod's namespace that shows a directory above the volume's on the same
    /// filesystem (a hostPath on the driver's data directory): found by the scan.
    Ancestor,
}

impl Route {
    /// The `route` label of `volguard_conflicts_total` (a closed set).
    pub fn label(self) -> &'static str {
        match self {
            Self::Publish => "publish",
            Self::Bind => "bind",
            Self::Clone => "clone",
            Self::Recursive => "recursive",
            Self::Device => "device",
            Self::Propagated => "propagated",
            Self::Open => "open",
            Self::Ancestor => "ancestor",
        }
    }
}

/// One mount that reaches an owned volume's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub volume: String,
    pub owner: String,
    /// Where, in the namespace whose table it was found in.
    pub mount_point: PathBuf,
    /// The mount's id in that table (a detach checks it is still the one there).
    pub mount_id: i32,
    pub route: Route,
}

/// How the new mount at the call's target was attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachKind {
    /// `mount(2)` with `MS_BIND` (with `MS_REC`: a recursive bind).
    Bind,
    /// `move_mount(2)` of a detached tree (`open_tree` clone, or `fsmount`).
    Move,
    /// `mount(2)` of a filesystem from its source (a device): a new mount, no bind.
    NewMount,
}

/// Which of the caller's mounts a call answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The top mount at the call's target and every mount beneath it.
    CallTree,
    /// Every mount of the namespace: where the call's target names no path (a container
    /// runtime binds onto `/proc/thread-self/fd/N`, then pivots into the container's root,
    /// so the target is nowhere by the time the table is read) in a namespace of the
    /// caller's own (a container's), never the node's.
    Namespace,
}

/// The mounts the call attached (`table`: the caller's namespace, read after its call;
/// `scope`: which of them it answers for) that reach an owned volume, except kubelet's
/// own places for it: the owner's publish target and subPath binds, the pod's device map,
/// and the volume's staging. The route: the top mount at
/// `target` is the call's own (`Bind` or `Clone`); a mount beneath it is a copy in a
/// recursive bind, as is one whose parent bind shows an ancestor of a kubelet place for
/// the owner; any other is a `Bind`.
pub fn accesses(
    table: &MountTable,
    target: &Path,
    attach: AttachKind,
    scope: Scope,
    kubelet_root: &Path,
    trees: &[VolumeTree],
) -> Vec<Access> {
    let whole_namespace = scope == Scope::Namespace;
    let top = table.mounts.iter().rev().find(|m| m.mount_point == target).map(|m| m.id);
    let mut beneath_top: Vec<i32> = top.into_iter().collect();
    let mut found = Vec::new();
    // Children come after their parent in mountinfo: one pass collects the call's tree.
    for mount in &table.mounts {
        let in_call = Some(mount.id) != top && beneath_top.contains(&mount.parent);
        if in_call {
            beneath_top.push(mount.id);
        }
        if !(whole_namespace || in_call || Some(mount.id) == top) {
            continue;
        }
        // A new mount makes one mount, the top one: nothing beneath it is the call's.
        if attach == AttachKind::NewMount && Some(mount.id) != top {
            continue;
        }
        let Some(tree) = trees.iter().find(|t| t.shown_by(mount)) else { continue };
        // Kubelet's places for any pod whose publish of the volume stands (the owner's, and
        // a second pod's made while no agent ran): a runtime's namespace before its pivot
        // shows every node mount at its node path, these among them.
        if tree.published_to.iter().any(|pod| kubelet_place_for(kubelet_root, &mount.mount_point, pod)) {
            continue;
        }
        let route = match (Some(mount.id) == top, attach) {
            (true, AttachKind::Bind) => Route::Bind,
            (true, AttachKind::Move) => Route::Clone,
            (true, AttachKind::NewMount) => Route::Device,
            _ if in_call || copied_from_kubelet_place(table, mount, kubelet_root, &tree.owner) => Route::Recursive,
            _ => Route::Bind,
        };
        found.push(Access {
            volume: tree.volume.clone(),
            owner: tree.owner.clone(),
            mount_point: mount.mount_point.clone(),
            mount_id: mount.id,
            route,
        });
    }
    found
}

/// The mounts of a pod's mount namespace (`table`, read through one of its tasks) that
/// reach an owned volume: copies of it (route `propagated`), and mounts of a directory
/// above it on its filesystem (route `ancestor`, one per volume and mount). Unlike
/// [`accesses`], kubelet's places are not spared: in a pod's namespace a mount at such a
/// path is a copy (a hostPath of the kubelet root at the same path), not kubelet's. Spared
/// are the mounts in a shared peer group: a `Bidirectional` volume, which only a
/// privileged container can have, and which CSI node plugins need (their publishes
/// propagate back to the node through it).
pub fn copies_in_namespace(table: &MountTable, trees: &[VolumeTree]) -> Vec<Access> {
    let mut found = Vec::new();
    for mount in table.mounts.iter().filter(|m| !m.shared) {
        let access = |tree: &VolumeTree, route| Access {
            volume: tree.volume.clone(),
            owner: tree.owner.clone(),
            mount_point: mount.mount_point.clone(),
            mount_id: mount.id,
            route,
        };
        match trees.iter().find(|t| t.shown_by(mount)) {
            Some(tree) => found.push(access(tree, Route::Propagated)),
            None => found.extend(trees.iter().filter(|t| t.above(mount)).map(|t| access(t, Route::Ancestor))),
        }
    }
    found
}

/// Whether the mount of `access` in `table` (a pod's own namespace) is in a shared peer
/// group: a `Bidirectional` volume's copy, which [`copies_in_namespace`] spares too.
pub fn shared_back(table: &MountTable, access: &Access) -> bool {
    table.mounts.iter().any(|m| m.id == access.mount_id && m.shared)
}

/// Whether `mount` sits where a recursive bind of a kubelet directory would copy the
/// owner's publish: its parent shows a directory whose path, followed down to `mount`,
/// is a kubelet place for `owner` (the parent's root as a node path: right where the
/// kubelet root lies on the node's root filesystem).
fn copied_from_kubelet_place(table: &MountTable, mount: &Mount, kubelet_root: &Path, owner: &str) -> bool {
    let Some(parent) = table.mounts.iter().find(|m| m.id == mount.parent && m.id != mount.id) else { return false };
    let Ok(below) = mount.mount_point.strip_prefix(&parent.mount_point) else { return false };
    kubelet_place_for(kubelet_root, &parent.root.join(below), owner)
}

/// Whether `mount_point` is one of kubelet's places for a volume owned by `owner`.
fn kubelet_place_for(kubelet_root: &Path, mount_point: &Path, owner: &str) -> bool {
    match classify(kubelet_root, mount_point) {
        PathKind::CsiPublish { pod_uid, .. }
        | PathKind::CsiBlockPublish { pod_uid, .. }
        | PathKind::CsiPodDeviceMap { pod_uid, .. }
        | PathKind::CsiBlockGlobalMap { pod_uid, .. }
        | PathKind::SubPath { pod_uid, .. } => pod_uid == owner,
        PathKind::CsiStaging { .. } | PathKind::CsiStagingLegacy { .. } | PathKind::CsiBlockStaging { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
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
        accesses(
            &table,
            Path::new("/proc/thread-self/fd/7"),
            AttachKind::Bind,
            Scope::Namespace,
            Path::new(KUBELET),
            trees,
        )
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
}
