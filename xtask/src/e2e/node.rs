//! The node itself, run inside its own mount, PID and network namespaces (see mod.rs):
//! fresh mounts over the directories kubelet and containerd write, the loopback network,
//! then etcd, the API server, controller-manager, scheduler, containerd and kubelet as
//! child processes, each with its own kubeconfig and log file.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail};

use super::{
    NODE_IP, NODE_NAME, SERVICE_CIDR, SERVICE_IP, VM_NODE_NAME,
    components::bin,
    kube::{Kube, wait_for},
    pki::{self, Pki},
};
use crate::proc::output;

/// The API server's port: 443, so that the `kubernetes` Service's address, put on the
/// namespace's loopback (there is no kube-proxy), reaches it as in-cluster clients expect.
pub const API_PORT: u16 = 443;
/// Where the node keeps its state (a tmpfs inside the node's mount namespace).
pub const STATE: &str = "/var/lib/volguard-e2e";
/// kubelet's cgroup root in every hierarchy; removed after the node stops (mod.rs).
pub const CGROUP_ROOT: &str = "volguard-e2e";
/// The sandbox image containerd runs for every pod (built here, see images.rs).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The identity the chart's agents call the API server with (release `volguard` in
/// kube-system): the ServiceAccount whose requests the API server's audit log records.
pub const AGENT_USER: &str = "system:serviceaccount:kube-system:volguard";
/// The API server's audit log, in the logs directory (JSON, one event a line).
pub const AUDIT_LOG: &str = "kube-apiserver-audit.log";

/// Directories that get a fresh tmpfs in the node's mount namespace: kubelet, containerd
/// and the pods' logs write there whatever their flags say (real-node.md), and
/// csi-driver-host-path keeps its volumes in its manifest's hostPath.
const FRESH_DIRS: &[&str] =
    &["/var/lib/kubelet", "/var/lib/containerd", "/run", "/var/log", "/var/lib/csi-hostpath-data", STATE];

pub struct Node {
    pub logs: PathBuf,
    pub pki: Pki,
    processes: Vec<(String, Child)>,
}

impl Node {
    pub fn admin(&self) -> Kube {
        Kube { kubeconfig: self.pki.kubeconfig("admin") }
    }

    /// Starts `binary` with `args`, its output in `<logs>/<name>.log`.
    pub fn spawn(&mut self, name: &str, binary: &Path, args: &[String]) -> anyhow::Result<()> {
        let log = fs::File::create(self.logs.join(format!("{name}.log")))?;
        let child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        self.processes.push((name.to_owned(), child));
        Ok(())
    }

    /// Fails if a process the node started has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for (name, child) in &mut self.processes {
            if let Some(status) = child.try_wait()? {
                let log = self.logs.join(format!("{name}.log"));
                return Err(super::kube::ProcessExited { name: name.clone(), status, log }.into());
            }
        }
        Ok(())
    }

    /// Stops one process (SIGTERM, then SIGKILL after 15 s) and forgets it.
    pub fn stop(&mut self, name: &str) -> anyhow::Result<()> {
        let Some(index) = self.processes.iter().position(|(n, _)| n == name) else {
            bail!("{name} is not running");
        };
        let (_, mut child) = self.processes.remove(index);
        terminate(&mut child);
        Ok(())
    }

    /// Waits until kubelet answers its health check and the node is Ready.
    pub fn wait_ready(&mut self) -> anyhow::Result<()> {
        let admin = self.admin();
        wait_for("kubelet healthy and the node Ready", Duration::from_secs(120), || {
            self.check_alive()?;
            let healthy = output(Command::new("curl").args(["-sf", "http://127.0.0.1:10248/healthz"])).is_ok();
            let ready = admin.run(&[
                "get",
                "node",
                NODE_NAME,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            Ok(healthy && ready.is_ok_and(|s| s.trim() == "True"))
        })?;
        Ok(())
    }

    /// The last lines of a component's log, for a failure message.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        let text = fs::read_to_string(self.logs.join(format!("{name}.log"))).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

fn terminate(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    for _ in 0..150 {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Node {
    /// Stops the components in reverse order (kubelet before containerd before the API).
    fn drop(&mut self) {
        while let Some((_, mut child)) = self.processes.pop() {
            terminate(&mut child);
        }
    }
}

fn sh(script: &str) -> anyhow::Result<()> {
    output(Command::new("sh").args(["-ec", script]))?;
    Ok(())
}

/// Mounts and network of the node's namespaces. Runs as PID 1 of the new PID namespace,
/// in a private mount namespace: nothing here reaches the host's mount table.
pub fn prepare_namespaces() -> anyhow::Result<()> {
    for dir in FRESH_DIRS {
        fs::create_dir_all(dir)?;
        sh(&format!("mount -t tmpfs -o mode=0755 volguard-e2e {dir}"))?;
    }
    // Bidirectional propagation (the CSI driver's publish mounts) needs a shared kubelet root.
    sh("mount --make-rshared /var/lib/kubelet")?;
    // A bpffs of the node's own: the agent's pins go with the namespace. Shared, as
    // systemd leaves every mount: the chart mounts it with Bidirectional propagation,
    // which the runtime refuses on a private mount.
    sh("mount -t bpf bpf /sys/fs/bpf && mount --make-shared /sys/fs/bpf")?;
    for (fs_type, dir) in [("tracefs", "/sys/kernel/tracing"), ("securityfs", "/sys/kernel/security")] {
        let mounted = fs::read_to_string("/proc/self/mountinfo")?.lines().any(|l| l.contains(&format!(" {dir} ")));
        if !mounted {
            sh(&format!("mount -t {fs_type} none {dir}"))?;
        }
    }
    sh(&format!("ip link set lo up && ip addr add {SERVICE_IP}/32 dev lo && ip addr add {NODE_IP}/32 dev lo"))?;
    Ok(())
}

/// Brings the control plane, containerd and kubelet up, and waits until the node is Ready.
pub fn start(logs: &Path, images: &[PathBuf]) -> anyhow::Result<Node> {
    let mut node = start_control_plane(logs)?;
    start_host_node(&mut node, images)?;
    Ok(node)
}

/// The node in these namespaces ([`NODE_NAME`]): containerd with `images` imported, and
/// kubelet; returns once the node is Ready.
pub fn start_host_node(node: &mut Node, images: &[PathBuf]) -> anyhow::Result<()> {
    let state = Path::new(STATE);
    start_containerd(node, state)?;
    for image in images {
        output(Command::new(bin("ctr")).args(["-n", "k8s.io", "images", "import"]).arg(image))
            .with_context(|| format!("importing {}", image.display()))?;
    }
    start_kubelet(node, state)?;
    node.wait_ready()
}

/// What the API server's audit log records: the agents' lists and watches of pods (each
/// with its field selector in the request URI, and the node of the agent's pod-bound
/// token in the user's extra), and the Events they create. Nothing else: the log stays
/// small and costs the API server nothing on other requests.
pub fn audit_policy() -> String {
    format!(
        r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    users: ["{AGENT_USER}"]
    verbs: [list, watch]
    resources: [{{group: "", resources: [pods]}}]
  - level: Metadata
    users: ["{AGENT_USER}"]
    verbs: [create]
    resources: [{{group: "", resources: [events]}}, {{group: events.k8s.io, resources: [events]}}]
  - level: None
"#
    )
}

/// etcd, the API server, controller-manager and scheduler; returns once the API server
/// is ready and the default ServiceAccount exists.
pub fn start_control_plane(logs: &Path) -> anyhow::Result<Node> {
    let state = Path::new(STATE);
    let api_url = format!("https://127.0.0.1:{API_PORT}");
    let names = [
        "127.0.0.1",
        SERVICE_IP,
        NODE_IP,
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    // Certificates for both nodes' kubelets: the host's and the VM's (scenario 6, the fleet).
    let pki = pki::create(&state.join("pki"), &[NODE_NAME, VM_NODE_NAME], &names, &api_url)?;
    let mut node = Node { logs: logs.to_owned(), pki, processes: Vec::new() };
    let p = |p: PathBuf| p.display().to_string();

    node.spawn(
        "etcd",
        &bin("etcd"),
        &[
            format!("--data-dir={}", state.join("etcd").display()),
            "--listen-client-urls=http://127.0.0.1:2379".into(),
            "--advertise-client-urls=http://127.0.0.1:2379".into(),
            "--listen-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-advertise-peer-urls=http://127.0.0.1:2380".into(),
            "--initial-cluster=default=http://127.0.0.1:2380".into(),
            "--log-level=warn".into(),
        ],
    )?;
    wait_for("etcd healthy", Duration::from_secs(30), || {
        Ok(output(Command::new("curl").args(["-sf", "http://127.0.0.1:2379/health"])).is_ok_and(|o| o.contains("true")))
    })?;

    let policy = state.join("audit-policy.yaml");
    fs::write(&policy, audit_policy())?;
    let pki = &node.pki;
    let apiserver_args = vec![
        "--etcd-servers=http://127.0.0.1:2379".to_owned(),
        format!("--secure-port={API_PORT}"),
        "--bind-address=0.0.0.0".into(),
        format!("--advertise-address={NODE_IP}"),
        format!("--tls-cert-file={}", p(pki.cert("apiserver"))),
        format!("--tls-private-key-file={}", p(pki.key("apiserver"))),
        format!("--client-ca-file={}", p(pki.ca())),
        "--authorization-mode=Node,RBAC".into(),
        "--enable-admission-plugins=NodeRestriction".into(),
        "--allow-privileged=true".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(pki.dir.join("sa.pub"))),
        format!("--service-account-signing-key-file={}", p(pki.key("sa"))),
        format!("--kubelet-client-certificate={}", p(pki.cert("apiserver-kubelet-client"))),
        format!("--kubelet-client-key={}", p(pki.key("apiserver-kubelet-client"))),
        "--kubelet-preferred-address-types=InternalIP".into(),
        format!("--audit-policy-file={}", p(policy)),
        format!("--audit-log-path={}", p(logs.join(AUDIT_LOG))),
        "--audit-log-format=json".into(),
        // F4 reads Events of the first scenarios at the end of a run that may pass the
        // default hour on a slow machine.
        "--event-ttl=6h".into(),
    ];
    node.spawn("kube-apiserver", &bin("kube-apiserver"), &apiserver_args)?;
    let admin = node.admin();
    wait_for("the API server ready", Duration::from_secs(60), || {
        node.check_alive()?;
        Ok(admin.run(&["get", "--raw", "/readyz"]).is_ok_and(|o| o.trim() == "ok"))
    })?;

    let pki = &node.pki;
    let controller_manager_args = vec![
        format!("--kubeconfig={}", p(pki.kubeconfig("kube-controller-manager"))),
        format!("--authentication-kubeconfig={}", p(pki.kubeconfig("kube-controller-manager"))),
        format!("--authorization-kubeconfig={}", p(pki.kubeconfig("kube-controller-manager"))),
        format!("--service-account-private-key-file={}", p(pki.key("sa"))),
        format!("--root-ca-file={}", p(pki.ca())),
        "--use-service-account-credentials=true".into(),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
    ];
    let scheduler_args = vec![
        format!("--kubeconfig={}", p(pki.kubeconfig("kube-scheduler"))),
        format!("--authentication-kubeconfig={}", p(pki.kubeconfig("kube-scheduler"))),
        format!("--authorization-kubeconfig={}", p(pki.kubeconfig("kube-scheduler"))),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
    ];
    node.spawn("kube-controller-manager", &bin("kube-controller-manager"), &controller_manager_args)?;
    node.spawn("kube-scheduler", &bin("kube-scheduler"), &scheduler_args)?;
    // The default ServiceAccount exists once the controller-manager's token controller ran.
    wait_for("the default ServiceAccount", Duration::from_secs(60), || {
        Ok(admin.run(&["get", "serviceaccount", "default", "-n", "default"]).is_ok())
    })?;
    Ok(node)
}

/// What the node's root filesystem is, for runc.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// A mounted filesystem: runc pivots into each container's root.
    Mounted,
    /// The VM's initramfs (rootfs), which pivot_root(2) refuses to leave: runc moves and
    /// chroots instead.
    Initramfs,
}

/// Writes containerd's configuration (and the CNI configuration it names) under `state`
/// and returns the configuration file. The shim and the CNI plugin are found in the
/// components' bin directory, on the node and in the VM alike; the storage suite's pod
/// network's plugins in the suite's (suite_files.rs).
pub fn write_containerd_config(state: &Path, root: Root) -> anyhow::Result<PathBuf> {
    let cni_conf = state.join("cni");
    fs::create_dir_all(&cni_conf)?;
    // No pod network: every pod of this node uses the host network. The runtime still
    // reports its network ready only with a CNI configuration, so give it loopback's.
    fs::write(
        cni_conf.join("10-loopback.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}"#,
    )?;
    let config = format!(
        r#"version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE on these machines: runc cannot lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}", "{suite_bin}"]
    conf_dir = "{cni_conf}"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "/usr/sbin/runc"
      SystemdCgroup = false
      NoPivotRoot = {no_pivot_root}
"#,
        cni_bin = bin("loopback").parent().expect("bin dir").display(),
        cni_conf = cni_conf.display(),
        suite_bin = super::suite_files::bin("bridge").parent().expect("bin dir").display(),
        no_pivot_root = root == Root::Initramfs,
    );
    let config_file = state.join("containerd.toml");
    fs::write(&config_file, config)?;
    Ok(config_file)
}

fn start_containerd(node: &mut Node, state: &Path) -> anyhow::Result<()> {
    let config_file = write_containerd_config(state, Root::Mounted)?;
    // The shim is found on PATH.
    let path =
        format!("{}:{}", bin("ctr").parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    // SAFETY: the node runs its components from this one thread.
    unsafe { std::env::set_var("PATH", path) };
    node.spawn("containerd", &bin("containerd"), &["--config".into(), config_file.display().to_string()])?;
    wait_for("containerd's socket", Duration::from_secs(30), || {
        node.check_alive()?;
        Ok(output(Command::new(bin("ctr")).args(["version"])).is_ok())
    })?;
    Ok(())
}

/// Stops kubelet and starts it again with the same configuration (its pods keep
/// running), and waits until it is healthy and the node Ready.
pub fn restart_kubelet(node: &mut Node) -> anyhow::Result<()> {
    node.stop("kubelet")?;
    start_kubelet(node, Path::new(STATE))?;
    node.wait_ready()
}

fn start_kubelet(node: &mut Node, state: &Path) -> anyhow::Result<()> {
    // cgroupfs driver under a cgroup root of our own in every v1 hierarchy; cpuset needs
    // its cpus and mems copied down before anything can join it.
    for hierarchy in fs::read_dir("/sys/fs/cgroup")? {
        let dir = hierarchy?.path().join(CGROUP_ROOT);
        if dir.parent().is_some_and(|p| p.join("cgroup.procs").exists()) {
            fs::create_dir_all(&dir)?;
        }
    }
    let cpuset = Path::new("/sys/fs/cgroup/cpuset");
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if cpuset.join(file).exists() {
            fs::write(cpuset.join(CGROUP_ROOT).join(file), fs::read_to_string(cpuset.join(file))?.trim())?;
        }
    }
    let config_file = write_kubelet_config(state, &node.pki)?;
    let args = kubelet_args(&config_file, &node.pki.kubelet_kubeconfig(NODE_NAME), NODE_NAME, NODE_IP);
    node.spawn("kubelet", &bin("kubelet"), &args)
}

/// Writes kubelet's configuration under `state` (the same on the node and in the VM) and
/// returns the file.
pub fn write_kubelet_config(state: &Path, pki: &Pki) -> anyhow::Result<PathBuf> {
    let config = format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: /{CGROUP_ROOT}
failCgroupV1: false
failSwapOn: false
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
serializeImagePulls: false
evictionHard: {{memory.available: "100Mi", nodefs.available: "0%", imagefs.available: "0%"}}
"#,
        ca = pki.ca().display(),
    );
    let config_file = state.join("kubelet.yaml");
    fs::write(&config_file, config)?;
    Ok(config_file)
}

/// kubelet's command line: the node registers as `node_name` (the name its certificate
/// carries) with `node_ip` as its InternalIP.
pub fn kubelet_args(config_file: &Path, kubeconfig: &Path, node_name: &str, node_ip: &str) -> Vec<String> {
    vec![
        format!("--config={}", config_file.display()),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={node_name}"),
        format!("--node-ip={node_ip}"),
        "--v=2".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_policy_records_only_the_agents_pod_watches_and_event_creates() {
        let policy: serde_json::Value = serde_yaml_ng::from_str(&audit_policy()).unwrap();
        assert_eq!(policy["kind"], "Policy");
        assert_eq!(policy["apiVersion"], "audit.k8s.io/v1");
        let rules = policy["rules"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        for rule in &rules[..2] {
            assert_eq!(rule["level"], "Metadata");
            assert_eq!(rule["users"], serde_json::json!([AGENT_USER]));
        }
        assert_eq!(rules[0]["verbs"], serde_json::json!(["list", "watch"]));
        assert_eq!(rules[0]["resources"], serde_json::json!([{"group": "", "resources": ["pods"]}]));
        assert_eq!(rules[1]["verbs"], serde_json::json!(["create"]));
        assert_eq!(rules[1]["resources"][1], serde_json::json!({"group": "events.k8s.io", "resources": ["events"]}));
        assert_eq!(rules[2], serde_json::json!({"level": "None"}), "everything else unrecorded");
        assert_eq!(policy["omitStages"], serde_json::json!(["RequestReceived"]));
    }

    #[test]
    fn kubelet_registers_under_the_name_and_address_it_is_given() {
        let args = kubelet_args(Path::new("/k.yaml"), Path::new("/k.kubeconfig"), "volguard-e2e-vm", "10.0.2.15");
        assert!(args.contains(&"--hostname-override=volguard-e2e-vm".to_owned()), "{args:?}");
        assert!(args.contains(&"--node-ip=10.0.2.15".to_owned()), "{args:?}");
    }
}
