//! `cargo xtask e2e`: volguard on a real single-node cluster made only of upstream
//! components (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
//! containerd with runc), with csi-driver-host-path and its sidecars deployed as upstream
//! deploys them, and volguard installed from its own chart and image as the README says.
//!
//! The node runs in mount, PID and network namespaces of its own (`unshare`): the host's
//! mount table is never touched, and when the node's first process ends the kernel ends
//! every process, mount and pin of the node with it, on success, failure or Ctrl-C. What
//! the node leaves in the host's kernel (kubelet's sysctls and cgroup directories) is
//! put back here afterwards.
//!
//! `--vm` puts the node in a VM instead (vm_node.rs), the control plane staying here;
//! `--fleet` runs both nodes in one cluster, one `helm install` for both (fleet.rs).

mod after_failure;
mod components;
mod fleet;
mod fleet_audit;
mod fleet_metrics;
mod hostpath_driver;
mod images;
mod kube;
mod node;
mod out_of_band;
mod pki;
mod prometheus;
mod runner;
mod scenarios;
mod secure_metrics;
mod storage_suite;
mod suite_files;
mod upstream;
mod vm_node;
mod vm_scenarios;
mod workload;

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context, bail};
use storage_suite::SuiteNode;
pub use storage_suite::SuiteSet;
use vm_node::PodNetwork;

use crate::proc::{require_root, target_dir};

/// The node's name, as kubelet registers it: the node in these namespaces.
pub const NODE_NAME: &str = "volguard-e2e";
/// The name the node in the VM registers as (`--vm`, and the fleet's second node).
pub const VM_NODE_NAME: &str = "volguard-e2e-vm";
/// Addresses that exist only on the loopback device of the node's own network namespace:
/// the node's InternalIP (kubelet refuses a loopback node IP) and the `kubernetes`
/// Service's ClusterIP (no kube-proxy: the address itself answers).
pub const NODE_IP: &str = "10.0.1.1";
pub const SERVICE_IP: &str = "10.0.0.1";
pub const SERVICE_CIDR: &str = "10.0.0.0/24";
/// The chart's `metricsPort`: the agent uses the host network, so its node's address.
pub const METRICS_PORT: u16 = 9728;

/// Sysctls kubelet sets on start (protectKernelDefaults is off); restored afterwards.
const KUBELET_SYSCTLS: &[&str] = &[
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

#[derive(clap::Args, Default)]
pub struct Options {
    /// Keep the node up after the scenarios until Ctrl-C (KUBECONFIG is printed).
    #[arg(long)]
    pub hold: bool,
    /// Install the chart with this `traceBackend` (auto, trampolines, tracepoints, fanotify)
    /// instead of the chart's default: the README's install plus one `--set`.
    #[arg(long)]
    pub trace_backend: Option<String>,
    /// Scenario 6 instead of 1-5: kubelet, containerd, the CSI driver, volguard and the
    /// pods in the VM kernel (qemu, software emulation; fmod_ret, or BPF LSM with
    /// `VOLGUARD_E2E_VM_BPF_LSM=1`), the control plane outside; volguard enforces in the
    /// kernel. With `--storage-suite`, the suite runs
    /// on that node instead of scenario 6.
    #[arg(long)]
    pub vm: bool,
    /// Two nodes in one cluster: the node in these namespaces (quarantine) and the node in
    /// the VM (enforce, by fmod_ret), one `helm install`; scenarios 1-8 on their nodes, then
    /// what only a fleet shows (per-node watches and Events, Prometheus per node, a
    /// ReadWriteOncePod claim wanted on both nodes).
    #[arg(long, conflicts_with = "vm")]
    pub fleet: bool,
    /// Kubernetes' storage e2e suite (its External Storage testsuites, upstream's
    /// test-driver.yaml for csi-driver-host-path) instead of the scenarios: run without
    /// volguard, then with volguard installed from its chart, and compared. `ci` is the
    /// subset `cargo xtask test` runs, `full` the whole chosen set (docs/testing.md).
    /// On the node here (quarantine), or with `--vm` on the node in the VM (enforce).
    #[arg(long, value_name = "SET", conflicts_with = "fleet")]
    pub storage_suite: Option<storage_suite::SuiteSet>,
}

impl Options {
    /// The run's name, and its logs' folder under `target/e2e/logs`.
    pub fn run_name(&self) -> String {
        match (self.fleet, self.vm, self.storage_suite) {
            (true, _, _) => "fleet".to_owned(),
            (_, true, Some(set)) => format!("storage-suite-{}-vm", set.name()),
            (_, true, None) => "vm".to_owned(),
            (_, _, Some(set)) => format!("storage-suite-{}", set.name()),
            _ => "node".to_owned(),
        }
    }
}

/// Builds what the node runs (`cargo xtask setup`, and the e2e before it starts): the
/// Kubernetes components from their Go modules, the CSI driver and sidecars from
/// upstream's released sources.
pub fn build_components() -> anyhow::Result<()> {
    components::ensure()?;
    upstream::ensure()?;
    storage_suite::ensure()
}

/// The image tags: the install, and the `helm upgrade` that restarts the agent.
pub const TAG: &str = "e2e";
pub const UPGRADE_TAG: &str = "e2e-upgrade";

pub fn run(options: &Options) -> anyhow::Result<()> {
    require_root("e2e")?;
    let started = Instant::now();
    build_components()?;
    let out = target_dir().join("e2e");
    // A folder per kind of run: `cargo xtask test` runs several, and a failed one's logs
    // must outlive the runs after it. The same kind's run before is kept beside it
    // (`<run>.previous`): a failure is often followed at once by a try again.
    let logs = out.join("logs").join(options.run_name());
    if logs.exists() {
        let previous = logs.with_extension("previous");
        let _ = fs::remove_dir_all(&previous);
        if fs::rename(&logs, &previous).is_err() {
            let _ = fs::remove_dir_all(&logs);
        }
    }
    fs::create_dir_all(&logs)?;
    println!("e2e: building the images (buildah, FROM scratch)");
    let mut archives = vec![
        images::volguard(images::VOLGUARD_REPOSITORY, TAG, &out)?,
        images::volguard(images::VOLGUARD_REPOSITORY, UPGRADE_TAG, &out)?,
    ];
    archives.extend(images::support_images(&out)?);
    archives.extend(images::upstream_images(&out)?);
    if options.storage_suite.is_some() {
        archives.extend(images::suite_images(&out)?);
    }

    let sysctls = snapshot_sysctls();
    // Ctrl-C reaches unshare, which then kills the node (--kill-child); we stay to clean up.
    // SAFETY: setting a signal disposition to SIG_IGN.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    let mut inner = Command::new("unshare");
    inner
        .args(["--mount", "--pid", "--net", "--fork", "--mount-proc", "--propagation", "private", "--kill-child", "--"])
        .arg(std::env::current_exe()?)
        .arg("e2e-node")
        .arg("--logs")
        .arg(&logs);
    for archive in &archives {
        inner.arg("--image").arg(archive);
    }
    if options.hold {
        inner.arg("--hold");
    }
    if let Some(backend) = &options.trace_backend {
        inner.arg("--trace-backend").arg(backend);
    }
    if options.vm {
        inner.arg("--vm");
    }
    if options.fleet {
        inner.arg("--fleet");
    }
    if let Some(set) = options.storage_suite {
        inner.arg("--storage-suite").arg(set.name());
    }
    let status = inner.status().context("starting the node's namespaces with unshare")?;
    // SAFETY: back to the default disposition.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
    // In the VM kubelet's sysctls and cgroups are the guest's: nothing of them outside (the
    // fleet's node here sets them as the host-only node does).
    let restored = if options.vm { Ok(()) } else { restore_host(&sysctls) };
    let cleanup = restored.and_then(|()| nothing_left_behind());
    println!("e2e: {:.0} s in all; component logs in {}", started.elapsed().as_secs_f64(), logs.display());
    if !status.success() {
        bail!("the real-node test failed ({status}); component logs in {}", logs.display());
    }
    cleanup
}

#[derive(clap::Args)]
pub struct ImageOptions {
    /// The image's repository.
    #[arg(long, default_value = "ghcr.io/volguard/volguard")]
    repository: String,
    /// The image's tag (the chart's appVersion by default).
    #[arg(long, default_value = "0.1.0")]
    tag: String,
}

/// `cargo xtask image`: deploy/Containerfile built offline with buildah, saved as an
/// archive that `ctr images import`, `podman load` and `docker load` take.
pub fn image(options: &ImageOptions) -> anyhow::Result<()> {
    let out = target_dir().join("image");
    fs::create_dir_all(&out)?;
    let archive = images::volguard(&options.repository, &options.tag, &out)?;
    println!("image: {}:{} saved to {}", options.repository, options.tag, archive.display());
    Ok(())
}

/// Inside the namespaces: the node, the chart, the scenarios.
#[derive(clap::Args)]
pub struct NodeOptions {
    #[arg(long)]
    logs: PathBuf,
    #[arg(long = "image")]
    images: Vec<PathBuf>,
    #[arg(long)]
    hold: bool,
    #[arg(long)]
    trace_backend: Option<String>,
    #[arg(long)]
    vm: bool,
    #[arg(long)]
    fleet: bool,
    #[arg(long)]
    storage_suite: Option<storage_suite::SuiteSet>,
}

pub fn node_main(options: &NodeOptions) -> anyhow::Result<()> {
    end_the_node_on_interrupt();
    node::prepare_namespaces()?;
    let started = Instant::now();
    let (mut node, nodes) = if options.fleet {
        // The VM boots (minutes, emulated) while the node here comes up.
        let mut node = node::start_control_plane(&options.logs)?;
        // The emulated node imports only the images its pods may run (a minute less).
        let mut images = Vec::new();
        for image in &options.images {
            if fleet::DRIVER_DEPLOYMENT.may_run(image)? {
                images.push(image.clone());
            }
        }
        let booted = vm_node::boot(&mut node, &images, PodNetwork::HostOnly)?;
        node::start_host_node(&mut node, &options.images)?;
        println!("e2e: node {NODE_NAME} Ready after {:.1} s", started.elapsed().as_secs_f64());
        vm_node::wait_ready(&mut node, booted)?;
        (node, vec![NODE_NAME, VM_NODE_NAME])
    } else if options.vm {
        let mut node = node::start_control_plane(&options.logs)?;
        // The storage suite's pods, unlike the scenarios', need a network of their own.
        let network = if options.storage_suite.is_some() { PodNetwork::Bridge } else { PodNetwork::HostOnly };
        let booted = vm_node::boot(&mut node, &options.images, network)?;
        vm_node::wait_ready(&mut node, booted)?;
        (node, vec![VM_NODE_NAME])
    } else {
        (node::start(&options.logs, &options.images)?, vec![NODE_NAME])
    };
    println!("e2e: node(s) {} Ready after {:.1} s", nodes.join(", "), started.elapsed().as_secs_f64());
    print_versions(&node, &nodes)?;
    let backend = options.trace_backend.as_deref();
    let result = if options.fleet {
        fleet::run(&mut node, &options.logs, backend)
    } else if let Some(set) = options.storage_suite {
        let on = if options.vm { SuiteNode::Vm } else { SuiteNode::Host };
        storage_suite::run(&mut node, &options.logs, set, on, backend)
    } else if options.vm {
        vm_scenarios::run(&node, &options.logs)
    } else {
        scenarios::run(&mut node, &options.logs, backend)
    };
    if options.hold {
        println!(
            "e2e: holding; KUBECONFIG={} (inside this namespace); Ctrl-C ends it",
            node.pki.kubeconfig("admin").display()
        );
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
    result
}

/// Ctrl-C (and SIGTERM) end the node. The node's first process is PID 1 of its PID
/// namespace, which the kernel delivers only the signals it has a handler for (and it
/// inherited SIGINT ignored from `run`); exiting makes the kernel kill every process of
/// the namespace, and with them every mount and pin of the node.
fn end_the_node_on_interrupt() {
    extern "C" fn exit_now(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing an async-signal-safe handler.
        unsafe { libc::signal(signal, exit_now as *const () as libc::sighandler_t) };
    }
}

fn print_versions(node: &node::Node, nodes: &[&str]) -> anyhow::Result<()> {
    let admin = node.admin();
    let server: serde_json::Value = serde_json::from_str(&admin.run(&["get", "--raw", "/version"])?)?;
    let mut kubelets = Vec::new();
    for name in nodes {
        kubelets.push(format!("{name}: {}", admin.run(&[
            "get",
            "node",
            name,
            "-o",
            "jsonpath={.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion} on Linux {.status.nodeInfo.kernelVersion}",
        ])?));
    }
    let kubelet = kubelets.join("; ");
    let runc = crate::proc::output(Command::new("/usr/sbin/runc").arg("--version"))?;
    println!(
        "e2e: versions: kube-apiserver {}, kubelet and runtime {kubelet}, etcd {}, runc {}, helm {}",
        server["gitVersion"].as_str().unwrap_or("?"),
        components::pinned_version("go.etcd.io/etcd/server/v3")?,
        runc.lines().next().unwrap_or("?").trim_start_matches("runc version "),
        crate::proc::output(Command::new(crate::deploy::helm_binary()).args(["version", "--short"]))?.trim(),
    );
    Ok(())
}

fn snapshot_sysctls() -> Vec<(PathBuf, String)> {
    KUBELET_SYSCTLS
        .iter()
        .map(|s| Path::new("/proc/sys").join(s))
        .filter_map(|p| fs::read_to_string(&p).ok().map(|v| (p, v)))
        .collect()
}

/// Puts back kubelet's sysctls and removes the node's cgroup directories.
fn restore_host(sysctls: &[(PathBuf, String)]) -> anyhow::Result<()> {
    for (path, value) in sysctls {
        if fs::read_to_string(path).is_ok_and(|now| now != *value) {
            fs::write(path, value).with_context(|| format!("restoring {}", path.display()))?;
        }
    }
    let mut left = Vec::new();
    for hierarchy in fs::read_dir("/sys/fs/cgroup")? {
        let root = hierarchy?.path().join(node::CGROUP_ROOT);
        if root.is_dir() && remove_cgroup_tree(&root).is_err() {
            left.push(root);
        }
    }
    if !left.is_empty() {
        bail!("cgroup directories left behind: {left:?}");
    }
    Ok(())
}

/// After the node's namespaces are gone: no process of the node's binaries runs and no
/// mount of the node reached the host's table.
fn nothing_left_behind() -> anyhow::Result<()> {
    let mut running = Vec::new();
    // Only the node's qemu (its initrd is under target/e2e): other builders on the machine
    // boot VMs of their own (`xtask vm-test`).
    let our_vm = target_dir().join("e2e").display().to_string();
    for entry in fs::read_dir("/proc")? {
        let process = entry?.path();
        if let Ok(target) = fs::read_link(process.join("exe"))
            && (target.starts_with(components::COMPONENTS_DIR)
                || target.starts_with(upstream::UPSTREAM_DIR)
                || target.starts_with(suite_files::SUITE_DIR)
                || is_the_nodes_agent(&target)
                || (target.ends_with("qemu-system-x86_64")
                    && fs::read(process.join("cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&our_vm))))
        {
            running.push(target);
        }
    }
    let mounts: Vec<String> = fs::read_to_string("/proc/self/mountinfo")?
        .lines()
        .filter(|l| l.contains("/var/lib/kubelet") || l.contains("volguard"))
        .map(str::to_owned)
        .collect();
    if !running.is_empty() || !mounts.is_empty() {
        bail!("the node left processes {running:?} and mounts {mounts:?} behind");
    }
    println!("e2e: nothing left behind (processes, mounts, cgroups, sysctls checked)");
    Ok(())
}

/// The agent as the node ran it: its image's binary, or this checkout's build. Another
/// checkout's agent (a developer's test beside the run) is not the node's.
fn is_the_nodes_agent(exe: &Path) -> bool {
    exe.file_name().is_some_and(|n| n == "volguard")
        && (exe == Path::new(images::AGENT_IN_IMAGE) || exe.starts_with(target_dir()))
}

/// rmdir, deepest first; cgroups of processes that just died may need a moment.
fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            remove_cgroup_tree(&path)?;
        }
    }
    for _ in 0..50 {
        if fs::remove_dir(dir).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    fs::remove_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failed run's logs must outlive the runs of other kinds after it (`cargo xtask
    /// test` runs several): every kind of run gets a folder of its own.
    #[test]
    fn each_kind_of_run_logs_into_a_folder_of_its_own() {
        let kinds = [
            Options::default(),
            Options { vm: true, ..Default::default() },
            Options { fleet: true, ..Default::default() },
            Options { storage_suite: Some(SuiteSet::Ci), ..Default::default() },
            Options { storage_suite: Some(SuiteSet::Full), ..Default::default() },
            Options { storage_suite: Some(SuiteSet::Guard), ..Default::default() },
            Options { vm: true, storage_suite: Some(SuiteSet::Guard), ..Default::default() },
            Options { vm: true, storage_suite: Some(SuiteSet::Ci), ..Default::default() },
        ];
        let names: std::collections::BTreeSet<String> = kinds.iter().map(Options::run_name).collect();
        assert_eq!(names.len(), kinds.len(), "{names:?}");
        assert!(names.contains("storage-suite-guard-vm") && names.contains("storage-suite-ci"), "{names:?}");
    }
}
