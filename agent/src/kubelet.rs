//! Kubelet's on-disk layout, as far as enforcement needs it: which paths are CSI publish
//! targets, and of which volume into which pod. (The kernel recognises the same two forms
//! from the resolved dentry; this is the userspace view, from path strings.)

use std::path::{Component, Path};

/// The escaped in-tree CSI plugin directory under a pod (`kubernetes.io/csi`, `/` → `~`).
pub const CSI_POD_PLUGIN_DIR: &str = "kubernetes.io~csi";

/// A CSI publish target: volume `volume` published into pod `pod_uid`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PublishTarget {
    pub pod_uid: String,
    /// The spec name: the PV name, or the pod's volume name for inline volumes.
    pub volume: String,
    /// The raw-block form (`volumeDevices/publish/<volume>/<pod>`).
    pub block: bool,
}

/// Recognises `<root>/pods/<pod>/volumes/kubernetes.io~csi/<volume>/mount` and
/// `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod>`.
/// Paths must be absolute and plain (no `.`/`..`, valid UTF-8), as kubelet writes them.
pub fn publish_target(kubelet_root: &Path, path: &Path) -> Option<PublishTarget> {
    let rest = path.strip_prefix(kubelet_root).ok()?;
    if !path.is_absolute() || rest.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let parts: Vec<&str> = rest.iter().map(|c| c.to_str()).collect::<Option<_>>()?;
    match parts.as_slice() {
        ["pods", pod, "volumes", CSI_POD_PLUGIN_DIR, volume, "mount"] => {
            Some(PublishTarget { pod_uid: (*pod).to_owned(), volume: (*volume).to_owned(), block: false })
        }
        ["plugins", "kubernetes.io", "csi", "volumeDevices", "publish", volume, pod] => {
            Some(PublishTarget { pod_uid: (*pod).to_owned(), volume: (*volume).to_owned(), block: true })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/var/lib/kubelet";

    fn classify(path: &str) -> Option<PublishTarget> {
        publish_target(Path::new(ROOT), Path::new(path))
    }

    #[test]
    fn filesystem_and_block_publish_targets() {
        let fs = classify("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount").unwrap();
        assert_eq!(fs, PublishTarget { pod_uid: "6a1f".into(), volume: "pvc-42".into(), block: false });
        let block = classify("/var/lib/kubelet/plugins/kubernetes.io/csi/volumeDevices/publish/pvc-7/6a1f").unwrap();
        assert_eq!(block, PublishTarget { pod_uid: "6a1f".into(), volume: "pvc-7".into(), block: true });
    }

    #[test]
    fn everything_else_is_not_a_publish_target() {
        for path in [
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42",
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount/sub",
            "/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~empty-dir/cache/mount",
            "/var/lib/kubelet/pods/6a1f/volume-subpaths/pvc-42/app/0",
            "/var/lib/kubelet/plugins/kubernetes.io/csi/pd.csi.storage.gke.io/0123/globalmount",
            "/var/lib/kubelet/pods/../pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "/other/root/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount",
            "/proc/thread-self/fd/7",
            "",
        ] {
            assert_eq!(classify(path), None, "{path}");
        }
    }

    #[test]
    fn dot_components_and_trailing_slashes_name_the_same_target() {
        let plain = classify("/var/lib/kubelet/pods/6a1f/volumes/kubernetes.io~csi/pvc-42/mount");
        assert!(plain.is_some());
        assert_eq!(classify("/var/lib/kubelet/pods/./6a1f/volumes/kubernetes.io~csi/pvc-42/mount/"), plain);
    }

    #[test]
    fn a_custom_kubelet_root_and_odd_but_valid_names() {
        let root = Path::new("/data/k8s/kubelet");
        let path = Path::new("/data/k8s/kubelet/pods/uid with space/volumes/kubernetes.io~csi/pv:a/mount");
        let t = publish_target(root, path).unwrap();
        assert_eq!((t.pod_uid.as_str(), t.volume.as_str()), ("uid with space", "pv:a"));
    }
}
