//! `volguard run`: the node agent. Chooses the mode by probing the kernel, attaches the
//! programs (pinned, adopting an earlier agent's, when the kernel enforces), then
//! handles events until SIGTERM or Ctrl-C.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use tracing::{info, warn};
use volguard_common::enforce::KernelLayout;

mod conflicts;
mod feed;
mod loop_thread;
mod mount_index;
mod off_loop;
mod open_reports;
mod out_of_band;
mod own_calls;
mod propagated;
mod running;
mod scan_schedule;
mod startup;
mod table_namespace;
mod unnamed;
mod view;

use feed::{Feed, NoticeFeed};
use loop_thread::LoopRuntime;
use running::Running;
use startup::{serve_http, start_facts_source, start_in_kernel, start_userspace};

use crate::{
    enforce::{self, ModeChoice, ModeError, owners::OwnerStore, ownership::Ownership},
    facts::inventory::InventoryError,
    kernel::btf::{Btf, BtfError, VMLINUX_BTF},
    kernel::lsm_probe::{self, ProbeError},
    kernel::trace_backend::{self, Backend, BackendChoice, BackendError},
    kernel::{
        loader::{LoadError, LoadedObject},
        reader::EventSource,
    },
    kernel::{
        maps::KernelError,
        pins::{PinError, Pins},
        program_stats::ProgramStats,
    },
    model::exempt::ExemptReader,
    model::explain::{self, RateLimiter},
    model::node::NodeModel,
    outputs::kernel_metrics::KernelCounts,
    outputs::served_state::ServedState,
    sys::{mountns::namespace_of, signals::StopSignals},
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
    // One throw-away object for both probes; its links detach when it is dropped.
    let (probe, trampolines) = match (enforce::needs_probe(opts.mode), trace_backend::needs_probe(opts.trace_backend)) {
        (false, false) => (None, None),
        (lsm, tramp) => {
            let mut object = LoadedObject::load()?;
            let trampolines = tramp.then(|| trace_backend::probe(&mut object));
            let lsm = if lsm { Some(lsm_probe::probe(&mut object)?) } else { None };
            (lsm, trampolines)
        }
    };
    let decision = enforce::decide(opts.mode, probe.as_ref())?;
    info!("mode {}: {}", decision.mode, decision.reason);
    // Mount notices watch the namespace whose mount table the agent reads: kubelet's.
    let (fanotify, watched) =
        match trace_backend::needs_fanotify_probe(opts.trace_backend, decision.in_kernel(), trampolines.as_ref()) {
            true => {
                let (probe, watched) = trace_backend::probe_fanotify(&namespace_of(&opts.mountinfo));
                (Some(probe), watched)
            }
            false => (None, None),
        };
    let tracing =
        trace_backend::decide(opts.trace_backend, decision.in_kernel(), trampolines.as_ref(), fanotify.as_ref())?;
    tracing.log();
    let shared = Arc::new(ServedState::new(opts.effective()));
    shared.metrics.mode.set_mode(&decision);
    shared.metrics.mode.set_trace_backend(&tracing);
    shared.set_tracing(&tracing);
    let kube = match (&opts.facts_source, &opts.metrics_secure) {
        (FactsSource::KubernetesApi { .. }, _) => Some(startup::kube_client().await?),
        (_, Some(_)) => return Err(AgentError::MetricsSecureWithoutApi),
        _ => None,
    };
    serve_http(&opts, &shared, kube.as_ref()).await?;
    let loop_runtime =
        LoopRuntime::new().map_err(|source| AgentError::Io { context: "starting the event loop's runtime", source })?;
    // Indexed before the mount table is read, so no detach falls between the two.
    let notices = match (tracing.backend, watched) {
        (Backend::Fanotify, Some(watched)) => Some(
            loop_runtime
                .register(|| NoticeFeed::start(watched, &opts.kubelet_root, shared.clone()))
                .map_err(|source| AgentError::Io { context: "listing the watched namespace's mounts", source })?,
        ),
        _ => None,
    };

    let source = start_facts_source(&opts.facts_source, kube).await?;
    let (initial, facts, _facts_tx) = (source.initial, source.facts, source.keep_alive);
    let mut model = NodeModel::new(&opts.kubelet_root, &opts.mountinfo, opts.single_pod_volumes.clone(), initial)
        .map_err(|source| AgentError::Io { context: "reading the mount table", source })?;
    model.log_summary();

    let pins = Pins::new(&opts.pin_root);
    // Parsed once and dropped once the offsets are taken (it is megabytes).
    let btf = Btf::from_file(Path::new(VMLINUX_BTF));
    let (object, owners) = match decision.in_kernel() {
        true => {
            let (object, owners) = start_in_kernel(&opts, &decision, &tracing, &pins, &btf?, &mut model)?;
            (Some(object), owners)
        }
        false => {
            let layout = btf.and_then(|btf| btf.kernel_layout());
            let mut owners = OwnerStore::Userspace(Ownership::new(model.single_pod().clone()));
            // No program at all with mount notices.
            let object = match notices.is_some() {
                true => None,
                false => {
                    // Userspace modes use the offsets only to note each caller's mount namespace.
                    let layout = layout.unwrap_or_else(|e| {
                        warn!(
                            "kernel struct offsets unavailable ({e}): events carry no mount namespace, so \
                             quarantine reaches only mounts whose process is still alive"
                        );
                        KernelLayout::default()
                    });
                    Some(start_userspace(&opts, &decision, &tracing, layout, &model)?)
                }
            };
            for fix in model.plan_owners(&BTreeMap::new()) {
                owners.apply(&fix)?;
            }
            (object, owners)
        }
    };
    let (mut feed, watched, object) = match (notices, object) {
        (Some((notices, held)), object) => {
            if opts.bpf_stats {
                info!("--bpf-stats: the fanotify backend runs no BPF program, so there is nothing to count");
            }
            (Feed::Notices(notices), Some(held), object)
        }
        (None, Some(mut object)) => {
            let events = loop_runtime.register(|| EventSource::new(&mut object))?;
            let (counters, decode_errors) = events.shared_counts();
            let programs = Arc::new(ProgramStats::new(&object, opts.bpf_stats));
            shared.metrics.kernel.attach(KernelCounts { counters, decode_errors, programs });
            (Feed::Syscalls(events), None, Some(object))
        }
        (None, None) => unreachable!("a syscall backend always loads the object"),
    };
    // Before announcing readiness: a SIGTERM from then on must stop us cleanly.
    let mut stop =
        StopSignals::install().map_err(|source| AgentError::Io { context: "installing signal handlers", source })?;
    let log_limiter = RateLimiter::new(explain::EVENT_WINDOW, explain::EVENT_KEYS);
    let (mounts_tx, csi_mounts) = tokio::sync::watch::channel(model.mounts().clone());
    let view_sinks = view::ViewSinks { shared: shared.clone(), mounts_tx };
    let (open_reporter, foreign_opens) =
        if decision.in_kernel() { (None, None) } else { open_reports::start().unzip() };
    let mut agent = Running {
        tasks: tokio::runtime::Handle::current(),
        opts: &opts,
        decision: &decision,
        model,
        owners,
        explain: source.events,
        log_limiter,
        shared: shared.clone(),
        view_freshness: Default::default(),
        view: view::ViewBuilder::new(view_sinks.clone(), tokio::runtime::Handle::current()),
        csi_mounts,
        csi: None,
        unnamed: Default::default(),
        table_namespace: table_namespace::TableNamespace::check(&opts.mountinfo),
        callers: Default::default(),
        observed: Default::default(),
        watched,
        own_detaches: Default::default(),
        own_masks: Vec::new(),
        owned_trees: None,
        reported_access: Default::default(),
        driver_pods: Default::default(),
        open_reporter,
        foreign_opens,
        kernel_audited_clones: Default::default(),
        scans: Default::default(),
    };
    agent.facts_metrics();
    agent.report_shared_volumes();
    agent.scan_namespaces();
    // Built here, before readiness: the first request after `ready` sees the volumes.
    view::build(agent.view_inputs()?, &view_sinks);
    shared.set_ready();
    // What start-up freed (the BTF parsed by the probes above all) leaves the RSS.
    crate::sys::heap::return_free_memory();
    eprintln!("{READY} mode={} ({}) trace-backend={} ({tracing})", decision.mode, decision.reason, tracing.backend);

    let result = loop_runtime
        .run(agent.event_loop(&mut feed, facts, &mut stop))
        .map_err(|source| AgentError::Io { context: "starting the event loop's thread", source })
        .and_then(|ended| ended);
    // Unpinned links (the userspace modes') detach here.
    drop(object);
    if decision.in_kernel() && !opts.keep_enforcement_on_exit {
        info!("removing pinned programs and state (--keep-enforcement-on-exit=false)");
        pins.uninstall()?;
    }
    result
}
