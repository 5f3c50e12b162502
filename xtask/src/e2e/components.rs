//! The upstream components of the real node, built from the Go modules that
//! `e2e/components/go.mod` pins (versions there, checksums in its go.sum), and cached
//! under [`COMPONENTS_DIR`]: a re-run with the same go.mod and go.sum skips the
//! build.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::bail;

use crate::{
    go::{self, Stamp},
    proc::{output, run_logged, workspace_root},
};

/// Where the built binaries live (outside target/, so `cargo clean` keeps them).
pub const COMPONENTS_DIR: &str = "/var/cache/volguard-dev/node";
/// The module that declares every Go component, relative to the workspace.
const MODULE_DIR: &str = "e2e/components";

/// Every binary the node runs.
pub const BINARIES: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "loopback",
    "prometheus",
];

pub fn bin(name: &str) -> PathBuf {
    Path::new(COMPONENTS_DIR).join("bin").join(name)
}

/// The version go.mod pins for `module` (e.g. `k8s.io/kubernetes` → `v1.34.4`).
pub fn pinned_version(module: &str) -> anyhow::Result<String> {
    go::required_version(&workspace_root().join(MODULE_DIR), module)
}

/// What the build depends on: the checksums of go.mod and go.sum, the
/// flags and the Go version. Kept as the stamp of a finished build.
fn build_inputs(ldflags: &str) -> anyhow::Result<String> {
    let module = workspace_root().join(MODULE_DIR);
    let sums = output(Command::new("sha256sum").current_dir(&module).args(["go.mod", "go.sum"]))?;
    Ok(format!(
        "{sums}ldflags: {ldflags}
{}",
        go::version()?
    ))
}

/// Builds every component unless a build from the same inputs is there.
pub fn ensure() -> anyhow::Result<()> {
    let kubernetes = pinned_version("k8s.io/kubernetes")?;
    let containerd = pinned_version("github.com/containerd/containerd/v2")?;
    let minor = kubernetes.trim_start_matches('v').split('.').nth(1).unwrap_or("0").to_owned();
    // Version stamps as the upstream release builds set them, so the node reports
    // v1.34.4 (volguard check reads the kubelet's version) instead of v0.0.0-master.
    let ldflags = format!(
        "-s -w -X k8s.io/component-base/version.gitVersion={kubernetes} \
         -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor} \
         -X k8s.io/component-base/version.gitTreeState=clean \
         -X github.com/containerd/containerd/v2/version.Version={containerd}"
    );
    let stamp = Stamp { file: Path::new(COMPONENTS_DIR).join("build.stamp"), inputs: build_inputs(&ldflags)? };
    let outputs: Vec<PathBuf> = BINARIES.iter().map(|b| bin(b)).collect();
    if stamp.is_current(&outputs) {
        println!("e2e: components present in {COMPONENTS_DIR} (Kubernetes {kubernetes}, containerd {containerd})");
        return Ok(());
    }
    println!("e2e: building Kubernetes {kubernetes}, etcd, containerd {containerd} and Prometheus from Go modules");
    println!("e2e: (cold, 7 to 11 minutes on 2 cores with the downloads; the result is cached in {COMPONENTS_DIR})");
    stamp.clear();
    let out = Path::new(COMPONENTS_DIR).join("bin");
    fs::create_dir_all(&out)?;
    let module = workspace_root().join(MODULE_DIR);
    let go = |args: &[&str]| -> anyhow::Result<Command> {
        let mut cmd = go::go(&module)?;
        cmd.env("GOFLAGS", "-mod=mod").args(args);
        Ok(cmd)
    };
    // Every tool in go.mod in one `go build`, so that its binaries share Kubernetes'
    // packages in the build cache.
    let out_arg = format!("{}/", out.display());
    run_logged(
        &mut go(&["build", "-trimpath", "-tags", "no_btrfs", "-ldflags", &ldflags, "-o", &out_arg, "tool"])?,
        "e2e: building the node's components",
        "setup/kubernetes",
    )?;
    // etcd's main package is the module root: it comes out named after it.
    if out.join("server").is_file() {
        fs::rename(out.join("server"), bin("etcd"))?;
    }
    for name in BINARIES {
        if !bin(name).is_file() {
            bail!("the build left no {}", bin(name).display());
        }
    }
    stamp.write()
}
