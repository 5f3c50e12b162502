//! `cargo xtask setup`: installs every system dependency, idempotently, as root.

use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::{
    proc::{output, require_root, run_logged},
    vm_kernels::DEMO_KERNEL,
};

mod kernels;

/// What a Debian package is installed for: the demo installs only what it plays.
#[derive(Clone, Copy, PartialEq, Eq)]
enum For {
    /// Building the agent and its eBPF programs (everything needs it).
    Build,
    /// Booting a VM kernel (the VM tests, the e2e's second node, `demo --vm`).
    Vm,
    /// The tests alone.
    Tests,
}

/// Debian packages, each with what it is for and why we need it.
const APT_PACKAGES: &[(&str, For, &str)] = &[
    ("rustc-web", For::Build, "Debian's rustc, which has a prebuilt core for the BPF targets"),
    ("libstd-rust-web-dev-bpf", For::Build, "that prebuilt core for bpfel-unknown-none"),
    ("llvm-22-dev", For::Build, "LLVM 22, the same major as rustc-web, to build bpf-linker"),
    ("libpolly-22-dev", For::Build, "needed to link bpf-linker against LLVM 22"),
    ("libzstd-dev", For::Build, "needed to link bpf-linker"),
    ("zlib1g-dev", For::Build, "needed to link bpf-linker"),
    ("qemu-system-x86", For::Vm, "boots the VM kernel for BPF LSM tests"),
    ("busybox-static", For::Vm, "the VM's userland"),
    ("cpio", For::Vm, "packs the VM initramfs"),
    ("gzip", For::Vm, "compresses the VM initramfs"),
    ("binutils", For::Vm, "strips test binaries for the VM"),
    ("buildah", For::Tests, "builds the container images of the real-node test (no registry: FROM scratch)"),
    ("runc", For::Tests, "the OCI runtime under containerd in the real-node test"),
    ("curl", For::Tests, "health checks of the real-node test's components and Prometheus queries"),
    ("iproute2", For::Tests, "the real-node test's loopback addresses in its network namespace"),
    ("e2fsprogs", For::Tests, "mkfs.ext4 for the block volume on a loop device (host_device_mounts)"),
    (
        "prometheus",
        For::Tests,
        "promtool parses the dashboards' PromQL; the server scrapes the agent in the metrics tests",
    ),
    (
        "nodejs",
        For::Tests,
        "runs tsc for the dashboards' and the deploy checks (Debian 12: node 18; typescript 5 needs >= 14.17)",
    ),
    ("npm", For::Tests, "installs typescript, @grafana/schema and prometheus-operator's CRD models for those checks"),
    ("python3-venv", For::Tests, "a venv for the deploy check's PyPI tools (kubernetes-validate, yamllint)"),
];

/// Installed without their Recommends: we need the binaries, not services.
const WITHOUT_RECOMMENDS: &[&str] = &["prometheus"];

/// Packages that count as present when their command is on PATH from elsewhere: a
/// NodeSource nodejs bundles npm and conflicts with Debian's npm package.
const PRESENT_AS_COMMAND: &[(&str, &str)] = &[("nodejs", "node"), ("npm", "npm")];

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// Everything every command and test needs, the real node's components included
/// (`cargo xtask setup`).
pub fn run() -> anyhow::Result<()> {
    for_tests(true)
}

/// What `cargo xtask test` runs on: everything, and cargo-fuzz only where the run fuzzes
/// (`--full`; building it is a minute of a run from nothing).
pub fn for_tests(fuzzing: bool) -> anyhow::Result<()> {
    require_root("setup")?;
    for part in parts_for_tests(fuzzing) {
        match part {
            Part::AptPackages => install_apt_packages(&[For::Build, For::Vm, For::Tests])?,
            Part::BpfLinker => install_bpf_linker()?,
            Part::CargoFuzz => install_cargo_fuzz()?,
            Part::DashboardTools => crate::dashboards::install_tools()?,
            Part::DeployTools => crate::deploy::install_tools()?,
            Part::Kernels => kernels::install()?,
            Part::NodeComponents => crate::e2e::build_components()?,
        }
    }
    println!("setup: done, the real node's components included");
    Ok(())
}

/// What the tests' setup installs or builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    AptPackages,
    BpfLinker,
    CargoFuzz,
    DashboardTools,
    DeployTools,
    Kernels,
    NodeComponents,
}

/// The parts of the tests' setup, in order: cargo-fuzz only where the run fuzzes.
fn parts_for_tests(fuzzing: bool) -> Vec<Part> {
    let fuzzer = fuzzing.then_some(Part::CargoFuzz);
    [Some(Part::AptPackages), Some(Part::BpfLinker), fuzzer]
        .into_iter()
        .flatten()
        .chain([Part::DashboardTools, Part::DeployTools, Part::Kernels, Part::NodeComponents])
        .collect()
}

/// What the demo plays with: the eBPF toolchain, and with `vm` qemu and the demo's kernel.
pub fn for_demo(vm: bool) -> anyhow::Result<()> {
    require_root("demo")?;
    install_apt_packages(if vm { &[For::Build, For::Vm] } else { &[For::Build] })?;
    install_bpf_linker()?;
    if vm {
        kernels::install_only(|version| version == DEMO_KERNEL)?;
    }
    println!("setup: the demo's tools are present");
    Ok(())
}

fn is_installed(package: &str) -> bool {
    if let Some((_, command)) = PRESENT_AS_COMMAND.iter().find(|(p, _)| *p == package)
        && Command::new("sh")
            .args(["-c", &format!("command -v {command}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    {
        return true;
    }
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout == b"installed")
}

fn install_apt_packages(wanted: &[For]) -> anyhow::Result<()> {
    let packages = || APT_PACKAGES.iter().filter(|(_, used, _)| wanted.contains(used));
    let missing: Vec<_> = packages().filter(|(p, _, _)| !is_installed(p)).collect();
    if missing.is_empty() {
        println!("setup: apt packages present ({})", packages().count());
        return Ok(());
    }
    for (package, _, why) in &missing {
        println!("setup: will install {package}: {why}");
    }
    run_logged(Command::new("apt-get").arg("update"), "setup: apt-get update", "setup/apt-update")?;
    // Recommends of these would add daemons (prometheus: node-exporter and friends).
    let (lean, full): (Vec<&str>, Vec<&str>) =
        missing.iter().map(|(p, _, _)| *p).partition(|p| WITHOUT_RECOMMENDS.contains(p));
    for (packages, extra) in [(full, None), (lean, Some("--no-install-recommends"))] {
        if packages.is_empty() {
            continue;
        }
        run_logged(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-q"])
                .args(extra)
                .args(&packages),
            &format!("setup: installing {} apt package(s)", packages.len()),
            "setup/apt-install",
        )
        .context("installing apt packages")?;
    }
    Ok(())
}

/// `cargo install`s a tool at an exact version unless `<command> --version` already
/// names that version; `configure` adds what its build needs.
fn install_crate(
    krate: &str,
    command: &[&str],
    version: &str,
    why: &str,
    configure: impl FnOnce(&mut Command),
) -> anyhow::Result<()> {
    let present = || output(Command::new(command[0]).args(&command[1..]).arg("--version")).ok();
    if let Some(found) = present().filter(|v| v.contains(version)) {
        println!("setup: {} present", found.trim());
        return Ok(());
    }
    println!("setup: building {krate} {version}: {why}");
    let mut cmd = crate::proc::cargo();
    cmd.args(["install", krate, "--version", version, "--locked", "--force"]);
    configure(&mut cmd);
    run_logged(&mut cmd, &format!("setup: building {krate} {version}"), &format!("setup/{krate}"))?;
    match present() {
        Some(v) if v.contains(version) => Ok(()),
        other => {
            bail!("{krate} installed but `{} --version` says {other:?}; is $CARGO_HOME/bin on PATH?", command.join(" "))
        }
    }
}

fn install_bpf_linker() -> anyhow::Result<()> {
    install_crate(
        "bpf-linker",
        &["bpf-linker"],
        BPF_LINKER_VERSION,
        "links the eBPF programs, against LLVM 22 (takes a few minutes)",
        |cmd| {
            let path = format!("{LLVM_PREFIX}/bin:{}", std::env::var("PATH").unwrap_or_default());
            cmd.env("LLVM_PREFIX", LLVM_PREFIX).env("PATH", path).args([
                "--no-default-features",
                "--features",
                "llvm-22",
            ]);
        },
    )
}

fn install_cargo_fuzz() -> anyhow::Result<()> {
    install_crate(
        "cargo-fuzz",
        &["cargo", "fuzz"],
        crate::fuzz::CARGO_FUZZ_VERSION,
        "runs the fuzz targets (`cargo xtask fuzz`; nightly where rustup has it, else stable)",
        |_| {},
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/testing.md: `cargo xtask test` builds cargo-fuzz only with `--full`, the run
    /// that fuzzes; every other part is the same in both.
    #[test]
    fn only_the_run_that_fuzzes_builds_the_fuzzer() {
        let (default, full) = (parts_for_tests(false), parts_for_tests(true));
        assert!(!default.contains(&Part::CargoFuzz) && full.contains(&Part::CargoFuzz));
        let rest: Vec<Part> = full.into_iter().filter(|p| *p != Part::CargoFuzz).collect();
        assert_eq!(default, rest);
        assert_eq!(default.len(), 6);
    }
}
