//! `cargo xtask setup`: installs every system dependency, idempotently, as root.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, bail};

use crate::proc::{output, require_root, run_cmd};

/// Debian packages, each with why we need it.
const APT_PACKAGES: &[(&str, &str)] = &[
    ("rustc-web", "Debian's rustc, which has a prebuilt core for the BPF targets"),
    ("libstd-rust-web-dev-bpf", "that prebuilt core for bpfel-unknown-none"),
    ("llvm-22-dev", "LLVM 22, the same major as rustc-web, to build bpf-linker"),
    ("libpolly-22-dev", "needed to link bpf-linker against LLVM 22"),
    ("libzstd-dev", "needed to link bpf-linker"),
    ("zlib1g-dev", "needed to link bpf-linker"),
    ("qemu-system-x86", "boots the VM kernel for BPF LSM tests"),
    ("busybox-static", "the VM's userland"),
    ("cpio", "packs the VM initramfs"),
    ("gzip", "compresses the VM initramfs"),
    ("binutils", "strips test binaries for the VM"),
    ("buildah", "builds the container images of the real-node test (no registry: FROM scratch)"),
    ("runc", "the OCI runtime under containerd in the real-node test"),
    ("curl", "health checks of the real-node test's components and Prometheus queries"),
    ("iproute2", "the real-node test's loopback addresses in its network namespace"),
    ("prometheus", "promtool parses the dashboards' PromQL; the server scrapes the agent in the metrics tests"),
    ("nodejs", "runs tsc for the dashboards' and the deploy checks (Debian 12: node 18; typescript 5 needs >= 14.17)"),
    ("npm", "installs typescript, @grafana/schema and prometheus-operator's CRD models for those checks"),
    ("python3-venv", "a venv for the deploy check's PyPI tools (kubernetes-validate, yamllint)"),
];

/// Installed without their Recommends: we need the binaries, not services.
const WITHOUT_RECOMMENDS: &[&str] = &["prometheus"];

/// Packages that count as present when their command is on PATH from elsewhere: a
/// NodeSource nodejs bundles npm and conflicts with Debian's npm package.
const PRESENT_AS_COMMAND: &[(&str, &str)] = &[("nodejs", "node"), ("npm", "npm")];

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

/// The Debian cloud kernel package (CONFIG_BPF_LSM=y, BTF) whose vmlinuz the VM boots.
const VM_KERNEL_META_PACKAGE: &str = "linux-image-cloud-amd64";
/// Where setup keeps what it downloads and builds (kept between runs).
pub const CACHE_ROOT: &str = "/var/cache/volguard-dev";
/// Where VM kernels are kept (outside target/, so `cargo clean` keeps them).
pub const VM_KERNEL_DIR: &str = "/var/cache/volguard-dev/vm-kernels";

/// The second VM kernel: Debian's 6.12 cloud kernel from bookworm-backports (BPF LSM,
/// BTF), pinned by package version and the SHA-256 of its .deb.
const BACKPORTS_KERNEL_PACKAGE: &str = "linux-image-6.12.95+deb12-cloud-amd64";
const BACKPORTS_KERNEL_VERSION: &str = "6.12.95-1~bpo12+1";
const BACKPORTS_KERNEL_SHA256: &str = "69c92f43b23821de79576fa4d7c86e2924ae2c1b247a47cc5ed9339e220fbcb7";
/// The apt sources file of the project's set-up that adds bookworm-backports.
const BACKPORTS_SOURCES: &str = "/etc/apt/sources.list.d/volguard-dev-backports.sources";
/// The machine's own Debian sources, whose mirror and components the backports suite uses.
const DEBIAN_SOURCES: &str = "/etc/apt/sources.list.d/debian.sources";

/// Everything every command and test needs, the real node's components included.
pub fn run() -> anyhow::Result<()> {
    run_without_real_node()?;
    crate::e2e::build_components()?;
    println!("setup: done, the real node's components included");
    Ok(())
}

/// Everything but the real node's Kubernetes components (the demo needs no cluster, and
/// their cold build takes about 11 minutes).
pub fn run_without_real_node() -> anyhow::Result<()> {
    require_root("setup")?;
    let mut apt = Apt::default();
    install_apt_packages(&mut apt)?;
    install_bpf_linker()?;
    install_cargo_fuzz()?;
    crate::dashboards::install_tools()?;
    crate::deploy::install_tools()?;
    let kernel = install_vm_kernel(&mut apt)?;
    let backports = install_backports_kernel(&mut apt)?;
    println!("setup: done (VM kernels {} and {})", kernel.display(), backports.display());
    Ok(())
}

/// apt-get update at most once per run.
#[derive(Default)]
struct Apt {
    updated: bool,
}

impl Apt {
    fn update(&mut self) -> anyhow::Result<()> {
        if !self.updated {
            run_cmd(Command::new("apt-get").arg("update"))?;
            self.updated = true;
        }
        Ok(())
    }
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

fn install_apt_packages(apt: &mut Apt) -> anyhow::Result<()> {
    let missing: Vec<_> = APT_PACKAGES.iter().filter(|(p, _)| !is_installed(p)).collect();
    if missing.is_empty() {
        println!("setup: apt packages present ({})", APT_PACKAGES.len());
        return Ok(());
    }
    for (package, why) in &missing {
        println!("setup: will install {package}: {why}");
    }
    apt.update()?;
    // Recommends of these would add daemons (prometheus: node-exporter and friends).
    let (lean, full): (Vec<&str>, Vec<&str>) =
        missing.iter().map(|(p, _)| *p).partition(|p| WITHOUT_RECOMMENDS.contains(p));
    for (packages, extra) in [(full, None), (lean, Some("--no-install-recommends"))] {
        if packages.is_empty() {
            continue;
        }
        run_cmd(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-q"])
                .args(extra)
                .args(&packages),
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
    run_cmd(&mut cmd)?;
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

/// The 6.12 kernel of bookworm-backports, once `cargo xtask setup` fetched it.
pub fn backports_kernel() -> Option<PathBuf> {
    let path = backports_kernel_path();
    path.exists().then_some(path)
}

/// Where the backports kernel is kept: a directory of its own, so that [`find_vm_kernel`]
/// (the demo's and the benchmarks' kernel, also in older checkouts) never picks it.
fn backports_kernel_path() -> PathBuf {
    let file = format!("vmlinuz-{}", BACKPORTS_KERNEL_PACKAGE.trim_start_matches("linux-image-"));
    Path::new(VM_KERNEL_DIR).join("backports").join(file)
}

/// The newest stable cloud kernel in [`VM_KERNEL_DIR`] (what the demo and the benchmarks
/// boot), if any.
pub fn find_vm_kernel() -> Option<PathBuf> {
    let mut kernels: Vec<PathBuf> = fs::read_dir(VM_KERNEL_DIR)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .collect();
    kernels.sort();
    kernels.pop()
}

/// Downloads the cloud kernel package and keeps only its vmlinuz and the modules the e2e's
/// VM node loads (nothing is installed into /boot: this machine's own boot is untouched).
fn install_vm_kernel(apt: &mut Apt) -> anyhow::Result<PathBuf> {
    if let Some(kernel) = find_vm_kernel()
        && guest_modules_present(&kernel)
    {
        println!("setup: VM kernel present ({})", kernel.display());
        return Ok(kernel);
    }
    let package = match cloud_kernel_package() {
        Ok(p) => p,
        Err(_) => {
            apt.update()?;
            cloud_kernel_package()?
        }
    };
    println!("setup: fetching the VM kernel (and the modules the e2e's VM node loads) from {package}");
    fetch_vmlinuz(&package, None, crate::e2e::GUEST_MODULES)
}

/// Where the kernel modules that the e2e's VM node loads are kept beside `kernel`
/// (`modules-<release>/<name>.ko`).
pub fn vm_kernel_modules(kernel: &Path) -> PathBuf {
    let name = kernel.file_name().map(|n| n.to_string_lossy().replacen("vmlinuz-", "modules-", 1));
    kernel.with_file_name(name.unwrap_or_default())
}

fn guest_modules_present(kernel: &Path) -> bool {
    let dir = vm_kernel_modules(kernel);
    crate::e2e::GUEST_MODULES.iter().all(|m| dir.join(format!("{m}.ko")).exists())
}

/// Adds bookworm-backports to apt's sources (a file of our own; the suite's priority
/// keeps it from upgrading anything) and fetches the pinned 6.12 cloud kernel from it.
fn install_backports_kernel(apt: &mut Apt) -> anyhow::Result<PathBuf> {
    let kept = backports_kernel_path();
    if kept.exists() {
        println!("setup: VM kernel present ({})", kept.display());
        return Ok(kept);
    }
    let sources = backports_sources();
    if fs::read_to_string(BACKPORTS_SOURCES).ok().as_deref() != Some(sources.as_str()) {
        println!("setup: adding bookworm-backports to apt's sources ({BACKPORTS_SOURCES}) for the 6.12 VM kernel");
        fs::write(BACKPORTS_SOURCES, &sources).with_context(|| format!("writing {BACKPORTS_SOURCES}"))?;
        apt.updated = false;
    }
    apt.update()?;
    let spec = format!("{BACKPORTS_KERNEL_PACKAGE}={BACKPORTS_KERNEL_VERSION}");
    println!("setup: fetching the second VM kernel from {spec}");
    let fetched = fetch_vmlinuz(&spec, Some(BACKPORTS_KERNEL_SHA256), &[])?;
    fs::create_dir_all(kept.parent().expect("a parent"))?;
    fs::rename(&fetched, &kept).with_context(|| format!("moving {} to {}", fetched.display(), kept.display()))?;
    Ok(kept)
}

/// A deb822 sources entry for bookworm-backports on the mirror (and with the components)
/// of the machine's Debian sources; deb.debian.org's main where they cannot be read.
fn backports_sources() -> String {
    let existing = fs::read_to_string(DEBIAN_SOURCES).unwrap_or_default();
    let field = |block: &str, name: &str| {
        block.lines().find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned())).filter(|v| !v.is_empty())
    };
    let debian = existing
        .split("\n\n")
        .find(|block| field(block, "Suites:").is_some_and(|suites| suites.split_whitespace().any(|s| s == "bookworm")));
    let uris = debian.and_then(|b| field(b, "URIs:")).unwrap_or_else(|| "http://deb.debian.org/debian".into());
    let components = debian.and_then(|b| field(b, "Components:")).unwrap_or_else(|| "main".into());
    let signed_by = debian
        .and_then(|b| field(b, "Signed-By:"))
        .unwrap_or_else(|| "/usr/share/keyrings/debian-archive-keyring.gpg".into());
    format!(
        "# Written by `cargo xtask setup` (volguard): the 6.12 cloud kernel the VM tests boot.\n\
         Types: deb\nURIs: {uris}\nSuites: bookworm-backports\nComponents: {components}\nSigned-By: {signed_by}\n"
    )
}

/// Downloads `package` (`name` or `name=version`), checks its SHA-256 when pinned, and
/// keeps only its vmlinuz and the named `modules` in [`VM_KERNEL_DIR`] (nothing is
/// installed).
fn fetch_vmlinuz(package: &str, sha256: Option<&str>, modules: &[&str]) -> anyhow::Result<PathBuf> {
    let work = Path::new(VM_KERNEL_DIR).join("download");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    run_cmd(Command::new("apt-get").current_dir(&work).args(["download", package]))?;
    let deb = fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download left no .deb")?;
    if let Some(want) = sha256 {
        let sum = output(Command::new("sha256sum").arg(&deb))?;
        let got = sum.split_whitespace().next().unwrap_or_default();
        if got != want {
            bail!("{} has SHA-256 {got}, not the pinned {want}", deb.display());
        }
    }
    let extracted = work.join("root");
    run_cmd(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&extracted))?;
    let vmlinuz = fs::read_dir(extracted.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .with_context(|| format!("{package} has no boot/vmlinuz-*"))?;
    let kept = Path::new(VM_KERNEL_DIR).join(vmlinuz.file_name().expect("a file name"));
    fs::copy(&vmlinuz, &kept).with_context(|| format!("copying {}", vmlinuz.display()))?;
    if !modules.is_empty() {
        let kept_modules = vm_kernel_modules(&kept);
        fs::create_dir_all(&kept_modules)?;
        let mut found = Vec::new();
        find_files(&extracted.join("lib/modules"), &mut found)?;
        for module in modules {
            let file = format!("{module}.ko");
            let path = found
                .iter()
                .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy() == file))
                .with_context(|| format!("{package} has no module {file}"))?;
            fs::copy(path, kept_modules.join(&file))?;
        }
    }
    fs::remove_dir_all(&work)?;
    Ok(kept)
}

fn find_files(dir: &Path, found: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_files(&path, found)?;
        } else {
            found.push(path);
        }
    }
    Ok(())
}

/// The versioned package the cloud kernel meta-package depends on.
fn cloud_kernel_package() -> anyhow::Result<String> {
    let depends = output(Command::new("apt-cache").args(["depends", VM_KERNEL_META_PACKAGE]))?;
    depends
        .split_whitespace()
        .find(|w| w.starts_with("linux-image-") && w.ends_with("-cloud-amd64") && w != &VM_KERNEL_META_PACKAGE)
        .map(str::to_owned)
        .with_context(|| format!("no versioned kernel in `apt-cache depends {VM_KERNEL_META_PACKAGE}`"))
}
