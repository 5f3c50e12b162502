//! Scenario 6's node: kubelet, containerd, runc, the CSI driver, volguard and the pods in
//! Debian's 6.1 cloud kernel, booted without `bpf` in `lsm=` (the agent refuses with
//! fmod_ret programs; [`VM_BPF_LSM_ENV`] boots it with BPF LSM), under qemu (software
//! emulation); etcd, the API server, controller-manager and scheduler stay in the node's
//! namespaces outside, at native speed.
//!
//! qemu's user-mode network joins the two. qemu runs in a network namespace of its own,
//! linked to the node's by a veth pair, as a second machine on the node's network: a
//! connection from the guest to an address of the node's namespace (the `kubernetes`
//! Service's 10.0.0.1:443, where the API server listens) is made by qemu from its
//! namespace over the link, and the API server (exec, logs) and Prometheus (the agent's
//! /metrics) reach the guest's address over the link, where qemu forwards kubelet's
//! port and the agent's metrics port to the guest. In its own namespace qemu's listeners
//! take no port of the node's: the fleet's node there (kubelet, the agent) listens on
//! the same ports on every address.
//! The guest's root is an initramfs holding every binary, image and certificate at the
//! path it has outside, so the configurations written for the node serve the VM as well.

use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use super::{
    METRICS_PORT, SERVICE_IP, VM_NODE_NAME,
    components::bin,
    node::{self, API_PORT, CGROUP_ROOT, Node, Root, STATE},
    suite_files,
};
use crate::{
    proc::{run_cmd, target_dir},
    vm::{self, KERNEL_FILESYSTEMS},
    vm_kernels::{GUEST_MODULES, find_vm_kernel, vm_kernel_modules},
};

/// The guest's address on qemu's user-mode network (its default), which kubelet registers
/// as the node's InternalIP.
pub(super) const GUEST_IP: &str = "10.0.2.15";
/// qemu's own address on that network: the guest's gateway.
const GATEWAY: &str = "10.0.2.2";
/// qemu's DNS forwarder on that network (for the guest's resolv.conf; nothing resolves).
const DNS: &str = "10.0.2.3";
/// qemu's network namespace, and the veth pair that links it to the node's: the node's
/// end and address, qemu's end and address.
const NETNS: &str = "volguard-vm";
const LINK_NODE: (&str, &str) = ("vg-node", "10.0.3.1");
const LINK_VM: (&str, &str) = ("vg-vm", "10.0.3.2");
/// The node binaries the guest runs (the rest stay outside).
const GUEST_BINARIES: &[&str] = &["kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "loopback"];
/// Where the guest keeps the kernel modules it loads ([`GUEST_MODULES`]).
const GUEST_MODULE_DIR: &str = "/lib/modules-vm";
/// Where the guest keeps the image archives it imports into containerd.
const GUEST_IMAGES: &str = "/images";
/// The guest's memory: containerd's content store and snapshots live in it, and the
/// storage suite's volumes (csi-driver-host-path keeps them in the guest's root).
const GUEST_MEMORY_MIB: u32 = 4096;
/// The guest's CPUs (qemu emulates them as the VM tests' 6.1 boots do: [`vm::VmKernel`]).
const GUEST_CPUS: u32 = 2;
/// How long the emulated node may take to register and become Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(900);

/// The network of the VM's node: qemu's namespace, linked to the node's; the guest's
/// address routed over the link from the node's namespace, and a local route in qemu's,
/// where its forwards listen (a route, not an address: qemu presents the connections to
/// the guest as its gateway's, and a source of the guest's own address would be dropped).
/// The node's namespace's end of all this goes with it.
fn link_the_vm_network() -> anyhow::Result<()> {
    let ((node_end, node_ip), (vm_end, vm_ip)) = (LINK_NODE, LINK_VM);
    let script = format!(
        "ip netns add {NETNS}
ip link add {node_end} type veth peer name {vm_end} netns {NETNS}
ip addr add {node_ip}/30 dev {node_end}
ip link set {node_end} up
ip route add {GUEST_IP}/32 via {vm_ip} dev {node_end}
ip -n {NETNS} link set lo up
ip -n {NETNS} addr add {vm_ip}/30 dev {vm_end}
ip -n {NETNS} link set {vm_end} up
ip -n {NETNS} route add default via {node_ip}
ip -n {NETNS} route add local {GUEST_IP}/32 dev lo table local
"
    );
    run_cmd(Command::new("sh").args(["-ec", &script])).context("linking the VM's network namespace to the node's")
}

/// Set to `1` to boot the node in the VM with `bpf` in `lsm=` (its agent then refuses with
/// BPF LSM programs) rather than without it (fmod_ret programs).
pub const VM_BPF_LSM_ENV: &str = "VOLGUARD_E2E_VM_BPF_LSM";

/// How the node in the VM refuses in the kernel, and so its `lsm=`. Without `bpf` by
/// default, as many distribution kernels boot: the agent's programs attach as fmod_ret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmRefusal {
    BpfLsm,
    FModRet,
}

impl VmRefusal {
    /// The run's choice ([`VM_BPF_LSM_ENV`]).
    pub fn chosen() -> Self {
        match std::env::var(VM_BPF_LSM_ENV).as_deref() {
            Ok("1") => Self::BpfLsm,
            _ => Self::FModRet,
        }
    }

    fn lsm(self) -> &'static str {
        match self {
            Self::BpfLsm => "lockdown,capability,bpf",
            Self::FModRet => "lockdown,capability",
        }
    }

    /// The security hooks the agent's ready line names there.
    fn hooks(self) -> &'static str {
        match self {
            Self::BpfLsm => "bpf_lsm",
            Self::FModRet => "fmod_ret",
        }
    }

    /// The `reason` label of the agent's `volguard_enforcement_mode` there (`--mode auto`).
    pub fn reason_label(self) -> &'static str {
        match self {
            Self::BpfLsm => "lsm_active",
            Self::FModRet => "fmod_ret_active",
        }
    }
}

/// qemu's command line after its binary: the emulated machine with the guest's kernel and
/// root, qemu's network (kubelet's port and the agent's metrics port forwarded from the
/// guest's address), the console and two log ports.
fn qemu_args(kernel: &Path, initrd: &Path, logs: &Path, refusal: VmRefusal) -> Vec<String> {
    let serial = |name: &str| format!("file:{}", logs.join(format!("{name}.log")).display());
    let forwards = [10250, METRICS_PORT].map(|port| format!("hostfwd=tcp:{GUEST_IP}:{port}-:{port}")).join(",");
    let linux = vm::VmKernel::Linux61;
    [
        "-accel",
        linux.qemu_accel(GUEST_CPUS),
        "-cpu",
        linux.qemu_cpu(),
        "-smp",
        &GUEST_CPUS.to_string(),
        "-m",
        &GUEST_MEMORY_MIB.to_string(),
        "-nographic",
        "-no-reboot",
        "-kernel",
        &kernel.display().to_string(),
        "-initrd",
        &initrd.display().to_string(),
        "-append",
        // A soft lockup panics: the VM ends at once, its stuck stack printed (panic
        // prints everything, `quiet` or not), rather than hanging the node for the
        // scenarios' timeouts.
        &format!("console=ttyS0 quiet lsm={} rdinit=/init panic=-1 softlockup_panic=1", refusal.lsm()),
        "-netdev",
        &format!("user,id=net0,{forwards}"),
        "-device",
        "virtio-net-pci,netdev=net0",
        "-serial",
        "mon:stdio",
        "-serial",
        &serial("vm-containerd"),
        "-serial",
        &serial("vm-kubelet"),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// What the guest's pods get for a network.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PodNetwork {
    /// None: every pod of the scenarios uses the host's network.
    HostOnly,
    /// A bridge with an address per pod, as the storage suite's pods need
    /// ([`suite_files::pod_network`]).
    Bridge,
}

/// Boots the VM as one of the node's processes, in qemu's network namespace (its console
/// in `<logs>/vm.log`, containerd's and kubelet's logs on the second and third serial
/// ports), and returns when it was started; [`wait_ready`] waits for its node.
pub fn boot(node: &mut Node, images: &[PathBuf], network: PodNetwork) -> anyhow::Result<Instant> {
    let kernel = find_vm_kernel().context("no VM kernel: run `cargo xtask setup` as root")?;
    let modules = vm_kernel_modules(&kernel);
    let initrd = build_initramfs(node, images, &modules, network)?;
    link_the_vm_network()?;
    let mut args = vec![format!("--net=/run/netns/{NETNS}"), "--".into(), "qemu-system-x86_64".into()];
    let refusal = VmRefusal::chosen();
    args.extend(qemu_args(&kernel, &initrd, &node.logs, refusal));
    println!(
        "e2e: booting {} with lsm={}: the agent refuses with {} (qemu, software emulation); console in vm.log",
        kernel.display(),
        refusal.lsm(),
        refusal.hooks()
    );
    let started = Instant::now();
    node.spawn("vm", Path::new("nsenter"), &args)?;
    Ok(started)
}

/// Waits until the node in the VM, booted at `started`, is Ready.
pub fn wait_ready(node: &mut Node, started: Instant) -> anyhow::Result<()> {
    let admin = node.admin();
    // Its own loop: a VM that stopped (kubelet exited) ends the wait with the console's end.
    loop {
        node.check_alive().with_context(|| format!("the VM's console ends:\n{}", node.log_tail("vm", 30)))?;
        let ready = admin.run(&[
            "get",
            "node",
            VM_NODE_NAME,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ]);
        if ready.is_ok_and(|s| s.trim() == "True") {
            break;
        }
        if started.elapsed() > READY_TIMEOUT {
            bail!(
                "the node in the VM was not Ready after {READY_TIMEOUT:?}; the console ends:\n{}",
                node.log_tail("vm", 30)
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    println!("e2e: the node in the VM is Ready {:.0} s after boot", started.elapsed().as_secs_f64());
    Ok(())
}

/// Lays out the guest's root and packs it, uncompressed (the emulated kernel unpacks it
/// faster than it would inflate it), into `target/e2e/vm/initrd`.
fn build_initramfs(node: &Node, images: &[PathBuf], modules: &Path, network: PodNetwork) -> anyhow::Result<PathBuf> {
    let work = target_dir().join("e2e/vm");
    let root = work.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root)?;
    let inside = |path: &Path| root.join(path.strip_prefix("/").unwrap_or(path));
    let copy = |from: &Path, at: &Path| -> anyhow::Result<()> {
        let to = inside(at);
        fs::create_dir_all(to.parent().expect("a file in a directory"))?;
        fs::copy(from, &to).with_context(|| format!("copying {} into the VM's root", from.display()))?;
        Ok(())
    };
    for dir in ["proc", "sys", "dev", "tmp", "etc", "var/lib", "run"] {
        fs::create_dir_all(root.join(dir))?;
    }
    copy(Path::new("/bin/busybox"), Path::new("/bin/busybox")).context("busybox-static")?;
    symlink("busybox", root.join("bin/sh"))?;
    let mut programs: Vec<PathBuf> = GUEST_BINARIES.iter().map(|b| bin(b)).collect();
    programs.push(PathBuf::from("/usr/sbin/runc"));
    if network == PodNetwork::Bridge {
        programs.extend(suite_files::POD_NETWORK_PLUGINS.iter().map(|p| suite_files::bin(p)));
    }
    for program in &programs {
        copy(program, program)?;
        // The Go components are static: ldd fails on them, and they need nothing.
        for library in vm::shared_libraries(program).unwrap_or_default() {
            copy(&library, &library)?;
        }
    }
    for module in GUEST_MODULES {
        let file = modules.join(format!("{module}.ko"));
        copy(&file, &Path::new(GUEST_MODULE_DIR).join(format!("{module}.ko")))
            .with_context(|| format!("the VM's module {module} (re-run `cargo xtask setup`)"))?;
    }
    for image in images {
        copy(image, &Path::new(GUEST_IMAGES).join(image.file_name().expect("an archive file")))?;
    }

    // The node's certificates and the configurations, written in a directory of the node's
    // state (outside, nothing runs from them; the fleet's node there has its own beside
    // it) and copied at the same paths. kubelet's kubeconfig (its own certificate, for
    // its own node name) names the API server by the `kubernetes` Service's address,
    // which the guest reaches through qemu.
    let state = Path::new(STATE).join("vm");
    let state = state.as_path();
    fs::create_dir_all(state)?;
    let containerd_config = node::write_containerd_config(state, Root::Initramfs)?;
    if network == PodNetwork::Bridge {
        suite_files::pod_network(&state.join("cni"))?;
    }
    let kubelet_config = node::write_kubelet_config(state, &node.pki)?;
    let guest_kubeconfig = state.join("kubelet-in-vm.kubeconfig");
    let kubeconfig = fs::read_to_string(node.pki.kubelet_kubeconfig(VM_NODE_NAME))?
        .replace(&format!("https://127.0.0.1:{API_PORT}"), &format!("https://{SERVICE_IP}:{API_PORT}"));
    fs::write(&guest_kubeconfig, kubeconfig)?;
    let mut files = vec![containerd_config.clone(), kubelet_config.clone(), guest_kubeconfig.clone()];
    for dir in [node.pki.dir.clone(), state.join("cni")] {
        for entry in fs::read_dir(dir)? {
            files.push(entry?.path());
        }
    }
    for file in &files {
        copy(file, file)?;
    }
    fs::write(root.join("etc/resolv.conf"), format!("nameserver {DNS}\n"))?;
    fs::write(root.join("etc/hosts"), "127.0.0.1 localhost\n")?;
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")?;
    fs::write(root.join("etc/group"), "root:x:0:\n")?;
    fs::write(root.join("etc/machine-id"), "0e2e0e2e0e2e0e2e0e2e0e2e0e2e0e2e\n")?;

    let kubelet = node::kubelet_args(&kubelet_config, &guest_kubeconfig, VM_NODE_NAME, GUEST_IP).join(" ");
    let initrd = work.join("initrd");
    vm::pack_initramfs(&root, &init_script(&containerd_config, &kubelet), &initrd, vm::Compression::None)?;
    Ok(initrd)
}

/// The guest's PID 1: the mounts a node has (cgroup v2, bpffs shared for the agent's pins,
/// a shared kubelet root for the CSI driver's Bidirectional mount), the network, then
/// containerd (images imported) and kubelet. It runs until qemu is stopped; a kubelet
/// that exits powers the VM off, which the node notices at once.
fn init_script(containerd_config: &Path, kubelet_args: &str) -> String {
    let modules = GUEST_MODULES.join(" ");
    let bin_dir = bin("kubelet").parent().expect("bin dir").display().to_string();
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/sbin:{bin_dir}
say() {{ echo "volguard-vm-node: $*"; }}
{KERNEL_FILESYSTEMS}
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# kubelet wants every controller the kernel has (hugetlb included) in its cgroup root.
echo $(sed 's/[^ ]*/+&/g' /sys/fs/cgroup/cgroup.controllers) > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/{CGROUP_ROOT}
mount -t bpf bpf /sys/fs/bpf && mount --make-shared /sys/fs/bpf
for dir in /var/lib/kubelet /var/lib/containerd /run /var/log /tmp; do
  mkdir -p $dir && mount -t tmpfs -o mode=0755 volguard-e2e $dir
done
mount --make-rshared /var/lib/kubelet
for module in {modules}; do insmod {GUEST_MODULE_DIR}/$module.ko || say "insmod $module failed"; done
ip link set lo up
ip link set eth0 up
ip addr add {GUEST_IP}/24 dev eth0
ip route add default via {GATEWAY}
say "kernel $(uname -r), active LSMs: $(cat /sys/kernel/security/lsm), $(nproc) CPUs"
containerd --config {containerd} > /dev/ttyS1 2>&1 &
until ctr version > /dev/null 2>&1; do sleep 1; done
for image in {GUEST_IMAGES}/*.tar; do
  ctr -n k8s.io images import $image > /dev/null || say "importing $image failed"
done
say "containerd up, images imported; starting kubelet"
kubelet {kubelet_args} > /dev/ttyS2 2>&1
say "kubelet exited ($?)"
poweroff -f
"#,
        containerd = containerd_config.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_forwards_kubelets_and_the_agents_metrics_port_from_the_guests_address() {
        let args = qemu_args(Path::new("/k/vmlinuz"), Path::new("/t/initrd"), Path::new("/logs"), VmRefusal::FModRet);
        let netdev = args.iter().position(|a| a == "-netdev").map(|i| args[i + 1].as_str());
        assert_eq!(
            netdev,
            Some("user,id=net0,hostfwd=tcp:10.0.2.15:10250-:10250,hostfwd=tcp:10.0.2.15:9728-:9728"),
            "{args:?}"
        );
        assert!(args.iter().any(|a| a.contains("lsm=lockdown,capability rdinit")), "bpf left out: {args:?}");
        let args = qemu_args(Path::new("/k/vmlinuz"), Path::new("/t/initrd"), Path::new("/logs"), VmRefusal::BpfLsm);
        assert!(args.iter().any(|a| a.contains("lsm=lockdown,capability,bpf")), "BPF LSM on: {args:?}");
        assert!(args.contains(&"file:/logs/vm-kubelet.log".to_owned()), "{args:?}");
    }
}
