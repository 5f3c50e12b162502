//! `volguard run`: the node agent. Chooses the mode by probing the kernel, attaches the
//! programs (pinned, adopting an earlier agent's, when the kernel enforces), then
//! handles events until SIGTERM or Ctrl-C: [`run`] goes probe → serve → load → build →
//! loop (the stages in `stages.rs`, the loop and its handlers in `running/`).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use tracing::info;

mod feed;
mod loop_thread;
mod mount_index;
mod off_loop;
mod out_of_band_state;
mod outlets;
mod own_calls;
mod pod_namespaces;
mod reported_access;
mod running;
mod scan_schedule;
mod stages;
mod startup;
mod table_namespace;
mod unnamed;
mod view;

use loop_thread::LoopRuntime;
use startup::serve_http;

use crate::{
    enforce::{HooksChoice, ModeChoice, ModeError},
    facts::inventory::InventoryError,
    kernel::btf::BtfError,
    kernel::lsm_probe::ProbeError,
    kernel::trace_backend::{BackendChoice, BackendError},
    kernel::{
        loader::LoadError,
        maps::KernelError,
        pins::{PinError, Pins},
    },
    model::exempt::ExemptReader,
    outputs::served_state::ServedState,
    sys::signals::StopSignals,
};

/// Where the facts about pods, PVs, PVCs and CSI objects come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FactsSource {
    /// None: only `--single-pod-volume` names are single-pod.
    None,
    /// A local YAML inventory, re-read when it changes.
    Inventory(PathBuf),
    /// The Kubernetes API (in-cluster config, or KUBECONFIG), watching this node's pods.
    KubernetesApi { node_name: String },
}

/// How many conflicts may wait for the Event publisher before new ones are dropped
/// (counted in the log; the conflict itself is always logged and handled).
const EVENT_QUEUE: usize = 256;

/// The default period of the mount-table reconciliation.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(30);

/// Everything `volguard run` is told.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub kubelet_root: PathBuf,
    pub single_pod_volumes: Vec<String>,
    pub mode: ModeChoice,
    /// How the programs on security hooks attach (`--security-hooks`).
    pub security_hooks: HooksChoice,
    /// Which programs trace the mount syscalls: trampolines where allowed, or as forced.
    pub trace_backend: BackendChoice,
    pub pin_root: PathBuf,
    pub keep_enforcement_on_exit: bool,
    pub print_events: bool,
    /// Mount table read at start-up to rebuild ownership, and on every reconciliation
    /// (the host's by default).
    pub mountinfo: PathBuf,
    pub facts_source: FactsSource,
    pub reconcile_interval: Duration,
    /// Where `/metrics` is served.
    pub metrics_address: SocketAddr,
    /// `/metrics` over HTTPS for Kubernetes callers allowed `get` on it, with this
    /// certificate (`--metrics-secure`); plain HTTP to anyone when `None`.
    pub metrics_secure: Option<crate::outputs::metrics_auth::tls::Certificate>,
    /// Where the read-only debug API is served (localhost by default).
    pub debug_address: SocketAddr,
    /// CSI driver sockets to check besides the ones found under the kubelet root.
    pub csi_sockets: Vec<PathBuf>,
    /// The event ring buffer's size in bytes (default `EVENTS_BYTES`, 4 MiB).
    pub ring_buffer_bytes: Option<u32>,
    /// Turn the kernel's BPF run-time statistics on (node-wide) for the program metrics.
    pub bpf_stats: bool,
    /// Detach a node process's mount that reaches an owned volume outside kubelet's publish
    /// (by default it is reported only: a node's own administrator should not be surprised).
    pub detach_node_access: bool,
    /// Where no BPF LSM refuses opens (quarantine), refuse another pod's opens of an owned
    /// volume's files through fanotify permission events, not only report them.
    pub deny_foreign_open: bool,
    /// Pods allowed to reach single-pod volumes outside kubelet's publish (a backup agent).
    pub exempt_readers: Vec<ExemptReader>,
}

impl RunOptions {
    /// The effective configuration, as `/debug/config` shows it.
    fn effective(&self) -> serde_json::Value {
        let source = match &self.facts_source {
            FactsSource::None => serde_json::json!({"kind": "none"}),
            FactsSource::Inventory(path) => serde_json::json!({"kind": "inventory", "path": path}),
            FactsSource::KubernetesApi { node_name } => {
                serde_json::json!({"kind": "kubernetes_api", "nodeName": node_name})
            }
        };
        serde_json::json!({
            "kubeletRoot": self.kubelet_root,
            "singlePodVolumes": self.single_pod_volumes,
            "mode": format!("{:?}", self.mode).to_lowercase(),
            "securityHooks": clap::ValueEnum::to_possible_value(&self.security_hooks).map(|v| v.get_name().to_owned()),
            "traceBackend": format!("{:?}", self.trace_backend).to_lowercase(),
            "pinRoot": self.pin_root,
            "keepEnforcementOnExit": self.keep_enforcement_on_exit,
            "mountinfo": self.mountinfo,
            "factsSource": source,
            "reconcileIntervalSeconds": self.reconcile_interval.as_secs_f64(),
            "metricsAddress": self.metrics_address.to_string(),
            "metricsSecure": self.metrics_secure.as_ref().map(|c| c.describe()),
            "debugAddress": self.debug_address.to_string(),
            "csiSockets": self.csi_sockets,
            "ringBufferBytes": self.ring_buffer_bytes,
            "bpfStats": self.bpf_stats,
            "detachNodeAccess": self.detach_node_access,
            "denyForeignOpen": self.deny_foreign_open,
            "exemptReaders": self.exempt_readers.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Mode(#[from] ModeError),
    #[error(transparent)]
    TraceBackend(#[from] BackendError),
    #[error("probing BPF LSM: {0}")]
    Probe(#[from] ProbeError),
    #[error("reading kernel BTF: {0}")]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error("kubelet root {0} is not a directory")]
    KubeletRoot(String),

    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("Kubernetes API client: {0} (in a pod: the service account; elsewhere: KUBECONFIG or ~/.kube/config)")]
    KubeConfig(String),
    #[error(transparent)]
    KubeSource(#[from] crate::facts::k8s::source::SourceError),
    #[error(transparent)]
    MetricsTls(#[from] crate::outputs::metrics_auth::tls::TlsError),
    #[error("--metrics-secure needs the Kubernetes API (--kubernetes) for its token and access reviews")]
    MetricsSecureWithoutApi,
    #[error("serving {what} on {address}: {source}")]
    Listen {
        what: &'static str,
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The line printed once the programs are attached and the state is loaded.
pub const READY: &str = "volguard: ready:";

pub async fn run(opts: RunOptions) -> Result<(), AgentError> {
    if !opts.kubelet_root.is_dir() {
        return Err(AgentError::KubeletRoot(opts.kubelet_root.display().to_string()));
    }
    let probed = stages::probe(&opts)?;
    let shared = Arc::new(ServedState::new(opts.effective()));
    shared.metrics.mode.set_mode(&probed.decision);
    shared.metrics.mode.set_trace_backend(&probed.tracing);
    shared.set_tracing(&probed.tracing);
    let kube = match (&opts.facts_source, &opts.metrics_secure) {
        (FactsSource::KubernetesApi { .. }, _) => Some(startup::kube_client().await?),
        (_, Some(_)) => return Err(AgentError::MetricsSecureWithoutApi),
        _ => None,
    };
    serve_http(&opts, &shared, kube.as_ref()).await?;
    let loop_runtime =
        LoopRuntime::new().map_err(|source| AgentError::Io { context: "starting the event loop's runtime", source })?;
    let (loaded, decision, tracing) = stages::load(&opts, probed, &shared, kube, &loop_runtime).await?;
    let stages::Loaded { model, owners, object, mut feed, watched, facts, keep_facts_open, events } = loaded;
    // Before announcing readiness: a SIGTERM from then on must stop us cleanly.
    let mut stop =
        StopSignals::install().map_err(|source| AgentError::Io { context: "installing signal handlers", source })?;
    let mut agent = stages::build(&opts, &decision, running::Parts { model, owners, watched, events }, &shared)?;
    shared.set_ready();
    // What start-up freed (the BTF parsed by the probes above all) leaves the RSS.
    crate::sys::heap::return_free_memory();
    let hooks = decision.hooks.map_or("none", |h| h.label());
    eprintln!(
        "{READY} mode={} ({}) security-hooks={hooks} trace-backend={} ({tracing})",
        decision.mode, decision.reason, tracing.backend
    );

    let result = loop_runtime
        .run(agent.event_loop(&mut feed, facts, &mut stop))
        .map_err(|source| AgentError::Io { context: "starting the event loop's thread", source })
        .and_then(|ended| ended);
    drop(keep_facts_open);
    // Unpinned links (the userspace modes') detach here.
    drop(object);
    if decision.in_kernel() && !opts.keep_enforcement_on_exit {
        info!("removing pinned programs and state (--keep-enforcement-on-exit=false)");
        Pins::new(&opts.pin_root).uninstall()?;
    }
    result
}
