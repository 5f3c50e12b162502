//! Kubelet's on-disk layout, from path strings: which mount points are CSI publish targets,
//! staging directories, raw-block maps or subPath binds (and of which volume and pod), and
//! which are container-runtime rootfs binds. The kernel recognises the two publish forms
//! from the resolved dentry; this is the userspace view, for paths from events and from the
//! mount table, where identity must be rebuilt without the kernel's help.
//!
//! Names are returned as they are on disk: kubelet escapes `/` as `~` in the spec names of
//! pod directories, but not in the legacy staging form's PV name, so the two can differ for
//! one volume (the vSphere migration fixture shows this).

use std::path::{Component, Path, PathBuf};

pub use volguard_common::kubelet::CSI_POD_PLUGIN_DIR;
use volguard_common::kubelet::{
    BLOCK_PUBLISH_DIR, CSI_PLUGIN_DIRS, PLUGINS_DIR, POD_VOLUMES_DIR, PODS_DIR, PUBLISH_TARGET_DIR, VOLUME_DEVICES_DIR,
};

/// Containerd state directories whose task bundles hold container rootfs mounts: upstream's
/// default, k3s/RKE2's, and MicroK8s's. A custom `state` in containerd's config is not
/// recognised (classified [`PathKind::Other`]); the list is fixed because a loose match on
/// the plugin directory name alone would also accept look-alike trees inside volumes.
pub const CONTAINERD_STATE_DIRS: &[&str] =
    &["/run/containerd", "/run/k3s/containerd", "/var/snap/microk8s/common/run/containerd"];

/// The containerd namespace of CRI (Kubernetes) containers; other namespaces (`moby`,
/// `default`) hold containers that belong to no pod.
pub const CRI_CONTAINERD_NAMESPACE: &str = "k8s.io";

/// containers/storage's default overlay directory, where CRI-O mounts each container's
/// rootfs at `<layerID>/merged` (podman shares the layout, so a match is not proof of a pod).
pub const CRIO_OVERLAY_DIR: &str = "/var/lib/containers/storage/overlay";

/// The directory of the legacy (Kubernetes ≤ 1.23) staging form `pv/<pvName>/globalmount`.
const LEGACY_STAGING_DIR: &str = "pv";

/// A CSI publish target: volume `volume` published into pod `pod_uid`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PublishTarget {
    pub pod_uid: String,
    /// The spec name: the PV name, or the pod's volume name for inline volumes.
    pub volume: String,
    /// The raw-block form (`volumeDevices/publish/<volume>/<pod>`).
    pub block: bool,
}

/// Which containerd runtime layout a task bundle is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerdRuntime {
    /// `io.containerd.runtime.v1.linux` (containerd ≤ 1.x shim v1; old k3s).
    V1Linux,
    /// `io.containerd.runtime.v2.task` (shim v2, every current containerd).
    V2Task,
}

impl ContainerdRuntime {
    /// The bundle directory name under the containerd state directory.
    pub const fn dir_name(self) -> &'static str {
        match self {
            Self::V1Linux => "io.containerd.runtime.v1.linux",
            Self::V2Task => "io.containerd.runtime.v2.task",
        }
    }

    fn from_dir_name(name: &str) -> Option<Self> {
        [Self::V1Linux, Self::V2Task].into_iter().find(|r| r.dir_name() == name)
    }
}

/// What a path is in kubelet's (or a container runtime's) layout. Every string field is one
/// path component as found on disk (or, for `pv_name`, several joined by `/`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathKind {
    /// `<root>/pods/<pod_uid>/volumes/kubernetes.io~csi/<volume>/mount`: NodePublishVolume's
    /// target for a filesystem volume. `volume` is the escaped spec name.
    CsiPublish { pod_uid: String, volume: String },
    /// `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod_uid>`:
    /// NodePublishVolume's target (a file) for a raw-block volume.
    CsiBlockPublish { volume: String, pod_uid: String },
    /// `<root>/plugins/kubernetes.io/csi/<driver>/<handle_sha256>/globalmount`: the staging
    /// directory since Kubernetes 1.24; the hash is sha256 of the volume handle, so the PV
    /// name is not in the path.
    CsiStaging { driver: String, handle_sha256: String },
    /// `<root>/plugins/kubernetes.io/csi/pv/<pv_name>/globalmount`: the staging directory up
    /// to Kubernetes 1.23. `pv_name` is everything in between and may hold `/` (migrated
    /// in-tree volumes: `ebs.csi.aws.com-aws:/us-west-2a/vol-…`; `//` was collapsed to `/`
    /// by kubelet's `filepath.Join`, so it can differ from the API object's name).
    CsiStagingLegacy { pv_name: String },
    /// `<root>/plugins/kubernetes.io/csi/volumeDevices/staging/<volume>`: NodeStageVolume's
    /// target for a raw-block volume.
    CsiBlockStaging { volume: String },
    /// `<root>/plugins/kubernetes.io/csi/volumeDevices/<volume>/dev/<pod_uid>`: the global
    /// map file that kubelet bind-mounts from the block publish target.
    CsiBlockGlobalMap { volume: String, pod_uid: String },
    /// `<root>/pods/<pod_uid>/volumeDevices/kubernetes.io~csi/<volume>`: the pod's device
    /// map (a symlink to the publish target, so rarely a mount point itself).
    CsiPodDeviceMap { pod_uid: String, volume: String },
    /// `<root>/pods/<pod_uid>/volume-subpaths/<volume>/<container>/<index>`: kubelet's bind
    /// of a subPath; `index` is the position in the container's `volumeMounts`. Any volume
    /// plugin, not only CSI.
    SubPath { pod_uid: String, volume: String, container: String, index: u32 },
    /// `<state>/<runtime dir>/k8s.io/<container_id>/rootfs[/<inner>]` under one of
    /// [`CONTAINERD_STATE_DIRS`]: a container's rootfs, or a bind into it (`inner` is the
    /// path inside the container, empty for the rootfs itself).
    ContainerdRootfs { runtime: ContainerdRuntime, container_id: String, inner: PathBuf },
    /// `/var/lib/containers/storage/overlay/<layer_id>/merged[/<inner>]`: a CRI-O (or podman)
    /// container rootfs, or a bind into it. The layer ID is not the container ID.
    CrioRootfs { layer_id: String, inner: PathBuf },
    /// Anything else, including relative paths, paths with `..`, and non-UTF-8 names where a
    /// kubelet or runtime name is expected (those come from API objects, which are UTF-8).
    Other,
}

/// Classifies `path` against kubelet's layout under `kubelet_root` and the container
/// runtimes' fixed layouts. Pure and total: any bytes give an answer, never a panic.
/// `.` components and repeated or trailing `/` are ignored (as the kernel would resolve
/// them); `..` makes the path [`PathKind::Other`], since it could name anything.
pub fn classify(kubelet_root: &Path, path: &Path) -> PathKind {
    if !is_plain_absolute(path) {
        return PathKind::Other;
    }
    let under_kubelet = path.strip_prefix(kubelet_root).ok().and_then(classify_kubelet_relative);
    under_kubelet.or_else(|| containerd_rootfs(path)).or_else(|| crio_rootfs(path)).unwrap_or(PathKind::Other)
}

/// Recognises `<root>/pods/<pod>/volumes/kubernetes.io~csi/<volume>/mount` and
/// `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod>`.
/// Paths must be absolute, without `..` and with UTF-8 names, as kubelet writes them (`.`
/// and repeated or trailing `/` are ignored). The publish-target view of [`classify`].
pub fn publish_target(kubelet_root: &Path, path: &Path) -> Option<PublishTarget> {
    classify(kubelet_root, path).publish_target()
}

impl PathKind {
    /// The publish target this path is, for the two publish forms.
    pub fn publish_target(&self) -> Option<PublishTarget> {
        let (pod_uid, volume, block) = match self {
            PathKind::CsiPublish { pod_uid, volume } => (pod_uid, volume, false),
            PathKind::CsiBlockPublish { volume, pod_uid } => (pod_uid, volume, true),
            _ => return None,
        };
        Some(PublishTarget { pod_uid: pod_uid.clone(), volume: volume.clone(), block })
    }
}

/// An absolute path with no `..`: only such a path names one place without resolving it.
fn is_plain_absolute(path: &Path) -> bool {
    path.is_absolute() && path.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The path's components as UTF-8 names, or `None` if any is not a plain UTF-8 name (a
/// root directory left over from an empty kubelet root counts as not plain).
fn utf8_names(rest: &Path) -> Option<Vec<&str>> {
    rest.components()
        .map(|c| match c {
            Component::Normal(name) => name.to_str(),
            _ => None,
        })
        .collect()
}

/// Classifies a path relative to the kubelet root.
fn classify_kubelet_relative(rest: &Path) -> Option<PathKind> {
    match utf8_names(rest)?.as_slice() {
        [PODS_DIR, pod_uid, in_pod @ ..] => classify_pod_dir(pod_uid, in_pod),
        [PLUGINS_DIR, a, b, in_plugin @ ..] if [*a, *b] == CSI_PLUGIN_DIRS => classify_csi_plugin_dir(in_plugin),
        _ => None,
    }
}

/// Classifies a path below `<root>/pods/<pod_uid>/`.
fn classify_pod_dir(pod_uid: &str, rest: &[&str]) -> Option<PathKind> {
    let pod_uid = pod_uid.to_owned();
    match rest {
        [POD_VOLUMES_DIR, CSI_POD_PLUGIN_DIR, volume, PUBLISH_TARGET_DIR] => {
            Some(PathKind::CsiPublish { pod_uid, volume: own(volume) })
        }
        [VOLUME_DEVICES_DIR, CSI_POD_PLUGIN_DIR, volume] => {
            Some(PathKind::CsiPodDeviceMap { pod_uid, volume: own(volume) })
        }
        ["volume-subpaths", volume, container, index] => Some(PathKind::SubPath {
            pod_uid,
            volume: own(volume),
            container: own(container),
            index: parse_mount_index(index)?,
        }),
        _ => None,
    }
}

/// Classifies a path below `<root>/plugins/kubernetes.io/csi/`. The raw-block forms come
/// first: `volumeDevices/publish/dev/<x>` is both a publish target (volume `dev`) and a
/// global map (volume `publish`), and the publish reading is the one the kernel enforces.
/// A legacy `pv/…/globalmount` wins over a driver named `pv` (not a plausible driver name).
fn classify_csi_plugin_dir(rest: &[&str]) -> Option<PathKind> {
    match rest {
        [VOLUME_DEVICES_DIR, BLOCK_PUBLISH_DIR, volume, pod_uid] => {
            Some(PathKind::CsiBlockPublish { volume: own(volume), pod_uid: own(pod_uid) })
        }
        [VOLUME_DEVICES_DIR, "staging", volume] => Some(PathKind::CsiBlockStaging { volume: own(volume) }),
        [VOLUME_DEVICES_DIR, volume, "dev", pod_uid] => {
            Some(PathKind::CsiBlockGlobalMap { volume: own(volume), pod_uid: own(pod_uid) })
        }
        [LEGACY_STAGING_DIR, pv_name @ .., "globalmount"] if !pv_name.is_empty() => {
            Some(PathKind::CsiStagingLegacy { pv_name: pv_name.join("/") })
        }
        [driver, hash, "globalmount"] if *driver != VOLUME_DEVICES_DIR && is_sha256_hex(hash) => {
            Some(PathKind::CsiStaging { driver: own(driver), handle_sha256: own(hash) })
        }
        _ => None,
    }
}

/// `<state>/<runtime dir>/k8s.io/<id>/rootfs[/…]` under a known containerd state directory.
fn containerd_rootfs(path: &Path) -> Option<PathKind> {
    let rest = CONTAINERD_STATE_DIRS.iter().find_map(|dir| path.strip_prefix(dir).ok())?;
    let mut names = rest.components();
    let runtime = ContainerdRuntime::from_dir_name(next_name(&mut names)?)?;
    if next_name(&mut names)? != CRI_CONTAINERD_NAMESPACE {
        return None;
    }
    let container_id = own(next_name(&mut names)?);
    if next_name(&mut names)? != "rootfs" {
        return None;
    }
    Some(PathKind::ContainerdRootfs { runtime, container_id, inner: names.as_path().to_path_buf() })
}

/// `/var/lib/containers/storage/overlay/<layer>/merged[/…]`.
fn crio_rootfs(path: &Path) -> Option<PathKind> {
    let mut names = path.strip_prefix(CRIO_OVERLAY_DIR).ok()?.components();
    let layer_id = own(next_name(&mut names)?);
    if next_name(&mut names)? != "merged" {
        return None;
    }
    Some(PathKind::CrioRootfs { layer_id, inner: names.as_path().to_path_buf() })
}

/// The next component as a UTF-8 name; `None` at the end or on anything else.
fn next_name<'a>(names: &mut std::path::Components<'a>) -> Option<&'a str> {
    match names.next()? {
        Component::Normal(name) => name.to_str(),
        _ => None,
    }
}

/// kubelet writes the mount index with Go's `strconv.Itoa`: plain decimal, no sign, no
/// leading zeros. Anything else is not a kubelet subPath target.
fn parse_mount_index(s: &str) -> Option<u32> {
    let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if canonical { s.parse().ok() } else { None }
}

/// kubelet names the staging directory `hex.EncodeToString(sha256(handle))`: 64 lowercase hex.
fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn own(s: &str) -> String {
    s.to_owned()
}

#[cfg(test)]
mod tests;
