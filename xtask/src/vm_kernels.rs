//! The VM kernels that the VM tests, the e2e's VM node and the demo boot: their pinned
//! table, and where `cargo xtask setup` (setup/kernels.rs) keeps each kernel and its modules.

use std::path::{Path, PathBuf};

/// Where VM kernels are kept (outside target/, so `cargo clean` keeps them).
pub const VM_KERNEL_DIR: &str = "/var/cache/volguard-dev/vm-kernels";

/// One .deb of a kernel, pinned.
pub struct Deb {
    pub package: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
}

/// A VM kernel: its Debian suite, where it is kept, and the .debs that carry its vmlinuz
/// and modules (one before 6.19; a binary and a modules package since).
pub struct PinnedKernel {
    /// The kernel's version, as the VM plan and the docs name it.
    pub version: &'static str,
    pub suite: &'static str,
    /// The directory of [`VM_KERNEL_DIR`] it is kept in. 6.1 stays at the top and 6.12 in
    /// `backports/`, where older checkouts (sharing this cache) look for them; every other
    /// kernel in a directory of its own, so their "newest vmlinuz at the top" never sees it.
    pub dir: &'static str,
    pub debs: &'static [Deb],
}

/// Every VM kernel (`apt-cache madison linux-image-cloud-amd64` with the apt options of
/// setup/kernels.rs names each suite's current one; checked 2026-11-27).
pub const KERNELS: &[PinnedKernel] = &[
    PinnedKernel {
        version: "5.10",
        suite: "bullseye",
        dir: "bullseye",
        debs: &[Deb {
            package: "linux-image-5.10.0-32-cloud-amd64",
            version: "5.10.223-1",
            sha256: "fb4a1229952d892138532c1d9f40a7fd0bd408e4dcf969c12e4524b6a89fdcb8",
        }],
    },
    PinnedKernel {
        version: "6.1",
        suite: "bookworm-security",
        dir: "",
        debs: &[Deb {
            package: "linux-image-6.1.0-56-cloud-amd64",
            version: "6.1.192-2",
            sha256: "e7d02b943971edcb8790e256c02cfab3bca6c3d37c1bf25392a57c71300615ee",
        }],
    },
    PinnedKernel {
        version: "6.12",
        suite: "bookworm-backports",
        dir: "backports",
        debs: &[Deb {
            package: "linux-image-6.12.95+deb12-cloud-amd64",
            version: "6.12.95-1~bpo12+1",
            sha256: "69c92f43b23821de79576fa4d7c86e2924ae2c1b247a47cc5ed9339e220fbcb7",
        }],
    },
    PinnedKernel {
        version: "7.3",
        suite: "trixie-backports",
        dir: "trixie-backports",
        debs: &[
            Deb {
                package: "linux-binary-7.3.4+deb13-cloud-amd64",
                version: "7.3.4-1~bpo13+1",
                sha256: "c4fbc8e404958693b28825474c20742d70594d65ca58aea7be6a279c81eb6fa0",
            },
            Deb {
                package: "linux-modules-7.3.4+deb13-cloud-amd64",
                version: "7.3.4-1~bpo13+1",
                sha256: "359f04c363b7d3c5f9ce999ccb7351e00cc8eec0a30d6bc1cda37734987fc43d",
            },
        ],
    },
];

/// The kernel modules the e2e's VM node loads, in order (Debian's cloud kernel builds
/// virtio, overlayfs, loop devices (csi-driver-host-path's block volumes), and the bridge
/// and veth pairs of the storage suite's pod network as modules); `cargo xtask setup`
/// keeps them beside each kernel.
pub const GUEST_MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_pci_modern_dev",
    "virtio_pci_legacy_dev",
    "virtio_pci",
    "failover",
    "net_failover",
    "virtio_net",
    "overlay",
    "loop",
    "llc",
    "stp",
    "bridge",
    "veth",
];

/// Written last beside a kernel's modules: the kernel is complete (and which modules it
/// ships as modules; the rest of the e2e's list are built in).
pub const MODULES_STAMP: &str = "kept";

/// Beside a kernel's modules: the [`GUEST_MODULES`] list they were kept for, one name a
/// line. A kernel kept for another list is fetched again.
pub const MODULES_WANTED: &str = "wanted";

/// [`GUEST_MODULES`] as [`MODULES_WANTED`] holds it.
pub fn wanted_modules() -> String {
    GUEST_MODULES.iter().map(|m| format!("{m}\n")).collect()
}

/// What `cargo xtask vm-test` loads in each boot: loop devices and ext4, for a block
/// volume's filesystem of its own (`host_device_mounts`), where the kernel has them as
/// modules.
pub const VM_TEST_MODULES: &[&str] = &["loop", "ext4"];

/// Beside a kernel's modules: the files of [`VM_TEST_MODULES`] and their dependencies, one
/// module name a line, in the order `insmod` takes them (none where all are built in).
pub const VM_TEST_LOAD_ORDER: &str = "vm-test-load-order";

impl PinnedKernel {
    /// The kernel release (`uname -r`), from the first package's name.
    pub fn release(&self) -> &'static str {
        let package = self.debs[0].package;
        package.trim_start_matches("linux-image-").trim_start_matches("linux-binary-")
    }

    /// Where its vmlinuz is kept.
    pub fn image_path(&self) -> PathBuf {
        Path::new(VM_KERNEL_DIR).join(self.dir).join(format!("vmlinuz-{}", self.release()))
    }

    /// Whether `cargo xtask setup` fetched it: its vmlinuz and its modules, complete.
    pub fn fetched(&self) -> bool {
        let image = self.image_path();
        let modules = vm_kernel_modules(&image);
        image.exists()
            && modules.join(MODULES_STAMP).exists()
            && modules.join(VM_TEST_LOAD_ORDER).exists()
            && std::fs::read_to_string(modules.join(MODULES_WANTED)).is_ok_and(|w| w == wanted_modules())
    }
}

/// The kernel named `version` in [`KERNELS`], once `cargo xtask setup` fetched it.
pub fn kernel_image(version: &str) -> Option<PathBuf> {
    KERNELS.iter().find(|k| k.version == version).filter(|k| k.fetched()).map(PinnedKernel::image_path)
}

/// Where the kernel modules that the e2e's VM node and `cargo xtask vm-test` load are
/// kept beside `kernel` (`modules-<release>/<name>.ko`).
pub fn vm_kernel_modules(kernel: &Path) -> PathBuf {
    let name = kernel.file_name().map(|n| n.to_string_lossy().replacen("vmlinuz-", "modules-", 1));
    kernel.with_file_name(name.unwrap_or_default())
}

/// The kernel `cargo xtask demo --vm` boots ([`find_vm_kernel`]).
pub const DEMO_KERNEL: &str = "6.1";

/// The VM kernel of the demo, the e2e's VM node and the tests' default boots (6.1), once
/// `cargo xtask setup` fetched it.
pub fn find_vm_kernel() -> Option<PathBuf> {
    kernel_image(DEMO_KERNEL)
}

#[cfg(test)]
mod tests {
    use super::KERNELS;

    #[test]
    fn each_kernel_is_kept_in_a_place_of_its_own() {
        let mut paths: Vec<_> = KERNELS.iter().map(|k| k.image_path()).collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), KERNELS.len());
    }
}
