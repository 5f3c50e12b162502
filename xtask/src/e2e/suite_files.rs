//! Where Kubernetes' storage e2e suite's binaries live and which images its specs run: the
//! leaf the node's containerd configuration and the image builds read, without the suite
//! itself (storage_suite.rs).

use std::path::{Path, PathBuf};

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
