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
    /// A change of the volume's names or attributes (unlink, rename, link, mkdir, create,
    /// symlink, truncate, chmod, chown, xattrs) with no mount of its own, by any path, or
    /// an open file of it taken from another process (pidfd_getfd, SCM_RIGHTS).
    Change,
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
            Self::Change => "change",
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
mod tests;
