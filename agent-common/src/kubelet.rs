//! kubelet's directory names that the kernel programs (walking dentries up from a mount
//! target) and userspace (classifying path strings) both recognise: one spelling for both.
//!
//! A filesystem volume is published at
//! `<root>/pods/<pod>/volumes/kubernetes.io~csi/<volume>/mount`, a raw-block one at
//! `<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<volume>/<pod>`.

/// `<root>/pods`: one directory per pod UID.
pub const PODS_DIR: &str = "pods";
/// A pod's volume directories, by plugin.
pub const POD_VOLUMES_DIR: &str = "volumes";
/// The escaped in-tree CSI plugin directory under a pod (`kubernetes.io/csi`, `/` → `~`).
pub const CSI_POD_PLUGIN_DIR: &str = "kubernetes.io~csi";
/// The last component of a filesystem volume's publish target.
pub const PUBLISH_TARGET_DIR: &str = "mount";
/// `<root>/plugins`: the plugins' own state.
pub const PLUGINS_DIR: &str = "plugins";
/// The CSI plugin's state directory under `<root>/plugins`, component by component.
pub const CSI_PLUGIN_DIRS: [&str; 2] = ["kubernetes.io", "csi"];
/// The raw-block directory under the CSI plugin directory; never a driver name.
pub const VOLUME_DEVICES_DIR: &str = "volumeDevices";
/// Raw-block publish targets, under [`VOLUME_DEVICES_DIR`].
pub const BLOCK_PUBLISH_DIR: &str = "publish";
