//! Where Kubernetes' storage e2e suite's binaries live, which images its specs run and
//! the network its pods get: the leaf the node's containerd configuration, the VM's root
//! and the image builds read, without the suite itself (storage_suite.rs).

use std::{
    fs,
    path::{Path, PathBuf},
};

use serde_json::json;

/// Where the built binaries live (outside target/, so `cargo clean` keeps them).
pub const SUITE_DIR: &str = "/var/cache/volguard-dev/storage-suite";

/// A built binary of the suite (`e2e.test`, `ginkgo`, `agnhost`, the CNI plugins).
pub fn bin(name: &str) -> PathBuf {
    Path::new(SUITE_DIR).join("bin").join(name)
}

/// The images the chosen specs run, by the names Kubernetes v1.34.4's test/utils/image
/// gives them (checked against `e2e.test --list-images` before a run), and what they
/// hold here. There is no registry: each is built here FROM scratch and imported under
/// that name, and the pods' IfNotPresent pull policy finds it. agnhost is the real one,
/// from the same module, on Debian's static busybox; the others are Debian's static
/// busybox with every applet (the specs run only shell commands in them), and
/// jessie-dnsutils also Debian's coreutils dd with dash as its sh: the specs that pick that image over
/// busybox do so for GNU dd's `oflag=nocache` and `iflag=direct`, which busybox's dd
/// refuses (test/e2e/storage/utils/utils.go says so).
pub const TEST_IMAGES: &[(&str, TestImage)] = &[
    ("registry.k8s.io/e2e-test-images/busybox:1.37.0-1", TestImage::Busybox),
    ("registry.k8s.io/e2e-test-images/agnhost:2.56", TestImage::Agnhost),
    // volumes' "should allow exec of files on the volume": a shell script run from the volume.
    ("registry.k8s.io/e2e-test-images/nginx:1.14-4", TestImage::Busybox),
    // multiVolume's "concurrently access the single volume": sh, GNU dd (oflag=nocache), sha256sum.
    ("registry.k8s.io/e2e-test-images/jessie-dnsutils:1.7", TestImage::GnuDd),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestImage {
    Busybox,
    Agnhost,
    /// busybox, with Debian's coreutils dd, and dash as sh (busybox's sh would run its own dd).
    GnuDd,
}

/// The CNI plugins of the suite's pod network, built into [`SUITE_DIR`]'s `bin`.
pub const POD_NETWORK_PLUGINS: &[&str] = &["bridge", "host-local"];

/// The pods' addresses: apart from the node's and the Services' (mod.rs).
const POD_SUBNET: &str = "10.244.0.0/24";

/// Writes the suite's pod network into the CNI configuration directory `dir`. The suite's
/// pods, unlike the scenarios', do not use the host's network, and containerd gives a pod
/// a sandbox only once CNI gave it an address: a bridge in the node's own network
/// namespace, addresses from host-local. containerd reads the first configuration of its
/// directory (this one sorts before the loopback placeholder, node.rs) and reloads it
/// when it changes; its CNI bin_dirs list this build's folder.
pub fn pod_network(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)?;
    fs::write(
        dir.join("05-pods.conflist"),
        serde_json::to_string_pretty(&json!({
            "cniVersion": "1.0.0",
            "name": "storage-suite",
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "dataDir": dir.join("ipam")},
            }],
        }))?,
    )?;
    Ok(())
}
