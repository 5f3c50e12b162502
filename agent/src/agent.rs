//! `volguard run`: the node agent. Chooses the mode by probing the kernel, attaches the
//! programs (pinned, adopting an earlier agent's, when the kernel enforces), then
//! handles events until SIGTERM or Ctrl-C.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use aya::Ebpf;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};
use volguard_common::{
    enforce::{KernelLayout, MountOp, kernel_mode},
    mount_api::AT_FDCWD,
    mount_flags::without_magic,
};

use crate::{
    bpf::{
        counters::{Counters, LostEvents},
        loader::{self, LoadError},
        reader::EventReader,
    },
    btf::{Btf, BtfError, VMLINUX_BTF},
    debug::{self, ConflictRecord, MountRecord, Shared},
    decode::{self, Call, Event, RawString, Record},
    enforce::{
        self, Mode, ModeChoice, ModeDecision, ModeError,
        kernel::{self, KernelError},
        ownership::{Ownership, Publish},
        pins::{PinError, Pins},
        quarantine,
        roots::PublishedRoots,
    },
    explain::{self, ConflictAction, RateLimiter, Verdict},
    facts::{Origin, Snapshot},
    http,
    inventory::{self, InventoryError, InventoryWatch},
    kubelet::{PublishTarget, publish_target},
    lsm_probe::{self, ProbeError},
    metrics::{ModeReason, SinglePodCounts},
    node::NodeModel,
    render,
    signals::StopSignals,
    state::{OwnerFix, PublishChange},
    volume_ops::{self, volume_op},
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
    /// Where the read-only debug API is served (localhost by default).
    pub debug_address: SocketAddr,
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
            "pinRoot": self.pin_root,
            "keepEnforcementOnExit": self.keep_enforcement_on_exit,
            "mountinfo": self.mountinfo,
            "factsSource": source,
            "reconcileIntervalSeconds": self.reconcile_interval.as_secs_f64(),
            "metricsAddress": self.metrics_address.to_string(),
            "debugAddress": self.debug_address.to_string(),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Mode(#[from] ModeError),
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
    KubeSource(#[from] crate::k8s::source::SourceError),
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
    let probe = match enforce::needs_probe(opts.mode) {
        true => Some(lsm_probe::probe(&mut loader::load()?)?),
        false => None,
    };
    let decision = enforce::decide(opts.mode, probe.as_ref())?;
    info!("mode {}: {}", decision.mode, decision.reason);
    let shared = Arc::new(Shared::new(opts.effective()));
    let reason = match (opts.mode, decision.mode) {
        (ModeChoice::Auto, Mode::Enforce) => ModeReason::LsmActive,
        (ModeChoice::Auto, _) => ModeReason::NoBpfLsm,
        _ => ModeReason::Flag,
    };
    shared.metrics.set_mode(decision.mode, reason);
    serve_http(&opts, &shared).await?;

    let source = start_facts_source(&opts.facts_source).await?;
    let (initial, facts, _facts_tx) = (source.initial, source.facts, source.keep_alive);
    let mut model = NodeModel::new(&opts.kubelet_root, &opts.mountinfo, opts.single_pod_volumes.clone(), initial)
        .map_err(|source| AgentError::Io { context: "reading the mount table", source })?;
    for (volume, pods) in model.shared_single_pod_volumes() {
        warn!("CONFLICT found at start-up: single-pod volume {volume} is published into pods {}", pods.join(", "));
    }
    model.log_summary();

    let pins = Pins::new(&opts.pin_root);
    let layout = Btf::from_file(Path::new(VMLINUX_BTF)).and_then(|btf| btf.kernel_layout());
    let (mut ebpf, owners) = match decision.in_kernel {
        true => (start_in_kernel(&opts, &decision, &pins, layout?, &mut model)?, OwnerStore::Kernel),
        // Userspace modes use the offsets only to note each caller's mount namespace.
        false => {
            let layout = layout.unwrap_or_else(|e| {
                warn!(
                    "kernel struct offsets unavailable ({e}): events carry no mount namespace, so quarantine \
                   reaches only mounts whose process is still alive"
                );
                KernelLayout::default()
            });
            let mut owners = OwnerStore::Userspace(Ownership::new(model.single_pod().keys().cloned()));
            let mut ebpf = start_userspace(&opts, layout)?;
            for fix in model.plan_owners(&BTreeMap::new()) {
                owners.apply(&mut ebpf, &fix)?;
            }
            (ebpf, owners)
        }
    };
    let mut reader = EventReader::new(&mut ebpf)?;
    // Before announcing readiness: a SIGTERM from then on must stop us cleanly.
    let mut stop =
        StopSignals::install().map_err(|source| AgentError::Io { context: "installing signal handlers", source })?;
    let log_limiter = RateLimiter::new(explain::EVENT_WINDOW, explain::EVENT_KEYS);
    let mut agent = Running {
        opts: &opts,
        decision: &decision,
        model,
        owners,
        explain: source.events,
        log_limiter,
        shared: shared.clone(),
        view_dirty: true,
    };
    agent.facts_metrics();
    agent.refresh_view(&ebpf)?;
    shared.set_ready();
    eprintln!("{READY} mode={} ({})", decision.mode, decision.reason);

    let result = agent.event_loop(&pins, &mut ebpf, &mut reader, facts, &mut stop).await;
    if decision.in_kernel && !opts.keep_enforcement_on_exit {
        info!("removing pinned programs and state (--keep-enforcement-on-exit=false)");
        pins.uninstall()?;
    }
    result
}

/// Binds both listeners (a taken port stops the start with the address named) and
/// serves them for the life of the process.
async fn serve_http(opts: &RunOptions, shared: &Arc<Shared>) -> Result<(), AgentError> {
    for (what, address, router) in [
        ("metrics", opts.metrics_address, http::metrics_router(shared.clone())),
        ("debug API", opts.debug_address, http::debug_router(shared.clone())),
    ] {
        let listener = tokio::net::TcpListener::bind(address).await.map_err(|source| AgentError::Listen {
            what,
            address: address.to_string(),
            source,
        })?;
        info!("{what} on http://{}", listener.local_addr().map_or(address, |a| a));
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                warn!("the {what} server stopped: {e}");
            }
        });
    }
    Ok(())
}

/// A started facts source.
struct StartedSource {
    initial: Snapshot,
    facts: watch::Receiver<Snapshot>,
    /// Kept by the caller, so a source that never sends leaves the receiver waiting.
    keep_alive: watch::Sender<Snapshot>,
    /// Where conflicts go to become Kubernetes Events, when there is an API.
    events: Option<mpsc::Sender<explain::Conflict>>,
}

/// Starts the facts source. The inventory is read now: a bad file stops the start (there
/// is no last good version yet). The API source publishes once every kind has listed;
/// until then the facts are empty and marked stale, and nothing pinned is removed.
async fn start_facts_source(source: &FactsSource) -> Result<StartedSource, AgentError> {
    let started = |initial: Snapshot| {
        let (tx, rx) = watch::channel(initial.clone());
        StartedSource { initial, facts: rx, keep_alive: tx, events: None }
    };
    match source {
        FactsSource::None => Ok(started(Snapshot::empty(Origin::None))),
        FactsSource::Inventory(path) => {
            let facts = inventory::load(path)?;
            info!("inventory {}: {}", path.display(), inventory::summary(&facts));
            let watch = InventoryWatch::new(path.clone(), facts);
            let source = started(watch.snapshot().clone());
            tokio::spawn(watch.run(source.keep_alive.clone()));
            Ok(source)
        }
        FactsSource::KubernetesApi { node_name } => {
            let config = kube::Config::infer().await.map_err(|e| AgentError::KubeConfig(e.to_string()))?;
            info!("Kubernetes API {}: watching pods on node {node_name}", config.cluster_url);
            let client = kube::Client::try_from(config).map_err(|e| AgentError::KubeConfig(e.to_string()))?;
            let mut waiting = Snapshot::empty(Origin::KubernetesApi);
            waiting.stale = Some("waiting for the first complete list from the API server".into());
            let mut source = started(waiting);
            let (facts_tx, node) = (source.keep_alive.clone(), node_name.clone());
            let api_source = crate::k8s::source::run(client.clone(), node.clone(), facts_tx);
            tokio::spawn(async move {
                if let Err(e) = api_source.await {
                    warn!("the Kubernetes API source stopped: {e}");
                }
            });
            let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
            let counters = std::sync::Arc::new(crate::k8s::events::EventCounters::default());
            tokio::spawn(crate::k8s::events::run(client, node, events_rx, counters));
            source.events = Some(events_tx);
            Ok(source)
        }
    }
}

/// Loads with pinned maps, configures the LSM programs and swaps the pinned links.
fn start_in_kernel(
    opts: &RunOptions,
    decision: &ModeDecision,
    pins: &Pins,
    layout: KernelLayout,
    model: &mut NodeModel,
) -> Result<Ebpf, AgentError> {
    pins.prepare()?;
    let adopting = pins.has_state();
    let mut ebpf = loader::load_pinned(pins)?;
    loader::start_kernel_log(&mut ebpf);
    let mode = kernel::kernel_mode_for(decision.mode, true);
    kernel::configure(&mut ebpf, layout, &opts.kubelet_root, mode)?;
    sync_single_pod_set(&mut ebpf, model)?;
    // Before the LSM programs attach, so no other pod can claim a volume already mounted.
    let mut store = OwnerStore::Kernel;
    for fix in model.plan_owners(&kernel::owners(&ebpf)?.into_iter().collect()) {
        store.apply(&mut ebpf, &fix)?;
    }
    // Tracing first: the exit tracepoints settle the claims the LSM programs make.
    let mut links = loader::attach_all_taking_links(&mut ebpf, &loader::trace_hooks())?;
    links.extend(loader::attach_all_taking_links(&mut ebpf, &loader::enforce_hooks())?);
    let replaced = pins.install_links(links)?;
    let owners = kernel::owners(&ebpf)?;
    if adopting {
        info!(
            "adopted the pinned enforcement state in {}: {} owned volumes, {replaced} links replaced",
            pins.root().display(),
            owners.len()
        );
    }
    for (volume, pod) in owners {
        info!("volume {volume} is owned by pod {pod}");
    }
    Ok(ebpf)
}

/// Puts the model's single-pod set into the kernel map. Until the facts source has
/// delivered once, volumes an earlier agent pinned stay (an API that has not answered
/// yet must not switch enforcement off).
fn sync_single_pod_set(ebpf: &mut Ebpf, model: &NodeModel) -> Result<(), AgentError> {
    let keep_others = model.snapshot().synced_at.is_none() && model.snapshot().origin != Origin::None;
    let sync = kernel::sync_single_pod_volumes(ebpf, model.single_pod(), keep_others)?;
    if sync.added + sync.removed > 0 {
        info!("kernel single-pod set: {} added, {} removed", sync.added, sync.removed);
    }
    Ok(())
}

fn start_userspace(opts: &RunOptions, layout: KernelLayout) -> Result<Ebpf, AgentError> {
    let mut ebpf = loader::load()?;
    loader::start_kernel_log(&mut ebpf);
    kernel::configure(&mut ebpf, layout, &opts.kubelet_root, kernel_mode::OFF)?;
    loader::attach_all(&mut ebpf, &loader::trace_hooks())?;
    Ok(ebpf)
}

/// Who owns which single-pod volume: the kernel map when the kernel decides, else the
/// agent's own table.
enum OwnerStore {
    Kernel,
    Userspace(Ownership),
}

impl OwnerStore {
    fn owners(&self, ebpf: &Ebpf) -> Result<BTreeMap<String, String>, KernelError> {
        match self {
            Self::Kernel => Ok(kernel::owners(ebpf)?.into_iter().collect()),
            Self::Userspace(o) => Ok(o.owners()),
        }
    }

    fn apply(&mut self, ebpf: &mut Ebpf, fix: &OwnerFix) -> Result<(), KernelError> {
        let done = match (self, fix) {
            (Self::Kernel, OwnerFix::Seed { volume, pod_uid }) => kernel::seed_owner(ebpf, volume, pod_uid)?,
            (Self::Kernel, OwnerFix::Release { volume, pod_uid }) => kernel::release_owner(ebpf, volume, pod_uid)?,
            (Self::Userspace(o), OwnerFix::Seed { volume, pod_uid }) => {
                o.seed(volume, pod_uid);
                o.owner(volume) == Some(pod_uid.as_str())
            }
            (Self::Userspace(o), OwnerFix::Release { volume, pod_uid }) => o.release(volume, pod_uid),
        };
        match (fix, done) {
            (OwnerFix::Seed { volume, pod_uid }, true) => {
                info!("volume {volume} is published for pod {pod_uid} (mount table): pod {pod_uid} owns it")
            }
            (OwnerFix::Release { volume, pod_uid }, true) => info!(
                "volume {volume} released: pod {pod_uid}'s publish target is no longer in the mount table \
                 (its unmount was not seen)"
            ),
            _ => {}
        }
        Ok(())
    }
}

/// The running agent's state, owned by the event loop.
struct Running<'a> {
    opts: &'a RunOptions,
    decision: &'a ModeDecision,
    model: NodeModel,
    owners: OwnerStore,
    /// Where conflicts go to become Kubernetes Events (none without an API).
    explain: Option<mpsc::Sender<explain::Conflict>>,
    /// Without an API the would-be Events are logged, as rate-limited as real ones.
    log_limiter: RateLimiter,
    /// Metrics and what the debug API shows.
    shared: Arc<Shared>,
    /// The debug view is out of date (refreshed at most once a second).
    view_dirty: bool,
}

impl Running<'_> {
    async fn event_loop(
        &mut self,
        pins: &Pins,
        ebpf: &mut Ebpf,
        reader: &mut EventReader,
        mut facts: watch::Receiver<Snapshot>,
        stop: &mut StopSignals,
    ) -> Result<(), AgentError> {
        let io = |context| move |source| AgentError::Io { context, source };
        let counters = Counters::new(ebpf)?;
        let mut roots = match self.decision.in_kernel {
            true => Some(PublishedRoots::open(pins)?),
            false => None,
        };
        let mut lost = LostEvents::default();
        let mut lost_check = tokio::time::interval(Duration::from_secs(1));
        let period = self.opts.reconcile_interval;
        let mut reconcile = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let own_pid = std::process::id();
        loop {
            tokio::select! {
                batch = reader.next_batch(|record| match record {
                    Ok(Record::Conflict(c)) => self.kernel_conflict(&c),
                    Ok(Record::Syscall(event)) => {
                        if self.opts.print_events {
                            println!("{}", render::line(&event));
                        }
                        if event.caller.tgid != own_pid {
                            self.syscall(roots.as_mut(), &event);
                        }
                    }
                    Err(e) => warn!("skipped an undecodable record: {e}"),
                }) => { batch.map_err(io("reading the event ring buffer"))?; }
                _ = lost_check.tick() => {
                    self.shared.metrics.set_events_lost(lost.check(&counters));
                    if self.view_dirty {
                        self.refresh_view(ebpf)?;
                    }
                }
                _ = reconcile.tick() => self.reconcile(ebpf)?,
                Ok(()) = facts.changed() => {
                    let snapshot = facts.borrow_and_update().clone();
                    self.facts_changed(ebpf, snapshot)?;
                }
                _ = stop.recv() => break,
            }
        }
        info!("stopping");
        Ok(())
    }

    /// A conflict the LSM programs saw (refused in enforce mode, allowed in audit).
    fn kernel_conflict(&mut self, c: &decode::Conflict) {
        warn!("{}", render::conflict(c));
        let action = if c.blocked { ConflictAction::Refused } else { ConflictAction::Audited };
        let text = |s: &RawString| String::from_utf8_lossy(s.as_bytes()).into_owned();
        self.explain(action, &text(&c.volume), &text(&c.attempted_by), &text(&c.owner));
    }

    /// Hands a conflict to the Kubernetes Event publisher, or without an API logs the
    /// Event that would have been recorded (rate-limited the same way).
    fn explain(&mut self, action: ConflictAction, volume: &str, pod_uid: &str, owner_uid: &str) {
        let conflict = self.model.conflict(action, volume, pod_uid, owner_uid);
        self.shared.metrics.conflict(conflict.claim.as_ref(), action);
        self.shared.record_conflict(ConflictRecord::new(&conflict));
        self.view_dirty = true;
        match &self.explain {
            Some(tx) => {
                if tx.try_send(conflict).is_err() {
                    warn!("conflict on volume {volume} not sent as a Kubernetes Event: the event queue is full");
                }
            }
            None => {
                if let Verdict::Send { held_back } = self.log_limiter.check(&conflict, std::time::Instant::now()) {
                    info!(
                        "explained (no Kubernetes API, Event logged only): Warning {} on pod {}: {}{}",
                        conflict.action.reason(),
                        conflict.pod,
                        conflict.message(),
                        match held_back {
                            0 => String::new(),
                            n => format!(" ({n} similar reports suppressed)"),
                        }
                    );
                }
            }
        }
    }

    fn syscall(&mut self, roots: Option<&mut PublishedRoots>, event: &Event) {
        self.shared.metrics.syscall(event.call.name(), event.ret >= 0);
        self.measure(event);
        let Some(change) = publish_change(&self.opts.kubelet_root, event) else { return };
        self.model.apply(&change);
        self.view_dirty = true;
        match roots {
            Some(roots) => record_roots(roots, &event.caller, &change),
            None => self.observe(event, &change),
        }
    }

    /// A volume operation: into kubelet's histogram and the recent-mounts log.
    fn measure(&self, event: &Event) {
        let root = &self.opts.kubelet_root;
        let Some(op) = volume_op(root, event) else { return };
        let driver = volume_ops::driver_of(root, &self.model.snapshot().facts, &op.target);
        let plugin = volume_ops::volume_plugin(driver.as_deref());
        let seconds = op.duration_ns as f64 / 1e9;
        self.shared.metrics.storage_operation(plugin.clone(), op.operation, op.success, seconds);
        let target = match &event.call {
            Call::Umount { target, .. } | Call::Mount { target, .. } => target,
            Call::MoveMount { to_path, .. } => to_path,
            _ => return,
        };
        self.shared.record_mount(MountRecord {
            at: SystemTime::now(),
            operation: op.operation.as_str(),
            syscall: event.call.name(),
            target: String::from_utf8_lossy(target.as_bytes()).into_owned(),
            volume_plugin: plugin,
            success: op.success,
            ret: event.ret.min(0),
            duration_seconds: seconds,
            pid: event.caller.tgid,
            comm: String::from_utf8_lossy(event.caller.comm.as_bytes()).into_owned(),
        });
    }

    /// Rebuilds what the debug API shows and the gauges derived from it.
    fn refresh_view(&mut self, ebpf: &Ebpf) -> Result<(), AgentError> {
        let owners = self.owners.owners(ebpf)?;
        let findings: Vec<_> = self.model.findings().cloned().collect();
        let views = self.model.volumes(&owners);
        let mut counts = SinglePodCounts::default();
        for v in views.iter().filter(|v| v.single_pod.is_some()) {
            match (v.published_to.len(), &v.owner) {
                (n, _) if n > 1 => counts.shared += 1,
                (1, Some(_)) => counts.owned += 1,
                _ => counts.unowned += 1,
            }
        }
        self.shared.metrics.set_single_pod(counts);
        self.shared.metrics.set_node_findings(&findings);
        let snapshot = self.model.snapshot();
        let origin = match snapshot.origin {
            Origin::None => "none",
            Origin::Inventory { .. } => "inventory",
            Origin::KubernetesApi => "kubernetes_api",
        };
        let previous = self.shared.snapshot();
        self.shared.set_snapshot(debug::Snapshot {
            mode: self.decision.mode.to_string(),
            mode_reason: self.decision.reason.clone(),
            source: debug::SourceStatus {
                origin: origin.into(),
                stale: snapshot.stale.clone(),
                synced_at: snapshot.synced_at,
            },
            volumes: debug::volume_details(views, &findings),
            findings,
            csi: previous.csi.clone(),
            updated_at: Some(SystemTime::now()),
        });
        self.view_dirty = false;
        Ok(())
    }

    /// The metrics that follow the facts source.
    fn facts_metrics(&self) {
        let snapshot = self.model.snapshot();
        self.shared.metrics.set_source(&snapshot.origin, snapshot.stale.is_some(), snapshot.synced_at);
        if snapshot.origin != Origin::None {
            let claims = snapshot.facts.persistent_volume_claims.iter().map(|c| c.claim_ref()).collect();
            self.shared.metrics.forget_claims_except(&claims);
        }
    }

    /// Userspace ownership for modes where the kernel does not decide.
    fn observe(&mut self, event: &Event, change: &PublishChange) {
        let OwnerStore::Userspace(ownership) = &mut self.owners else { return };
        let (target, path) = match change {
            PublishChange::Unpublished(t) => {
                if ownership.unpublished(t) {
                    info!("volume {} released: pod {} unmounted its publish target", t.volume, t.pod_uid);
                }
                return;
            }
            PublishChange::Published(t, p) => (t, p),
        };
        let mode = self.decision.mode;
        let owner = match ownership.published(target) {
            Publish::Untracked | Publish::Owner => return,
            Publish::Claimed => {
                info!("volume {} claimed by pod {}", target.volume, target.pod_uid);
                return;
            }
            Publish::Conflict { owner } => owner,
        };
        let action = match mode {
            Mode::Quarantine => match quarantine::quarantine(&event.caller, path.clone()) {
                Ok(done) => {
                    warn!(
                        "CONFLICT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it; \
                         detached {} mount(s) and masked the target read-only in {} ({} µs)",
                        target.volume, target.pod_uid, done.detached, done.namespace, done.micros
                    );
                    ConflictAction::Quarantined
                }
                Err(e) => {
                    warn!(
                        "CONFLICT NOT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it: {e}",
                        target.volume, target.pod_uid
                    );
                    ConflictAction::Audited
                }
            },
            _ => {
                warn!(
                    "CONFLICT audited (allowed): volume \"{}\" is owned by pod {owner}; pod {} published it",
                    target.volume, target.pod_uid
                );
                ConflictAction::Audited
            }
        };
        let (volume, pod) = (target.volume.clone(), target.pod_uid.clone());
        self.explain(action, &volume, &pod, &owner);
    }

    /// Re-reads the mount table and makes the owners agree with it.
    fn reconcile(&mut self, ebpf: &mut Ebpf) -> Result<(), AgentError> {
        let owners = self.owners.owners(ebpf)?;
        let pass = match self.model.reconcile(&owners) {
            Ok(pass) => pass,
            Err(e) => {
                // Keep the state built so far; the next pass tries again.
                warn!("reconciliation skipped: reading {}: {e}", self.opts.mountinfo.display());
                return Ok(());
            }
        };
        if pass.drift > 0 {
            info!("reconciliation: {} publishes corrected from the mount table (events missed)", pass.drift);
        }
        for fix in &pass.fixes {
            self.owners.apply(ebpf, fix)?;
        }
        self.model.scan_tree();
        self.view_dirty = true;
        debug!("reconciliation done: {} owner fixes", pass.fixes.len());
        Ok(())
    }

    /// New facts from the source: update the single-pod set (kernel or userspace) and
    /// give owners to single-pod volumes that are already published.
    fn facts_changed(&mut self, ebpf: &mut Ebpf, snapshot: Snapshot) -> Result<(), AgentError> {
        let change = self.model.set_facts(snapshot);
        self.facts_metrics();
        self.view_dirty = true;
        if change.single_pod {
            match &mut self.owners {
                OwnerStore::Kernel => sync_single_pod_set(ebpf, &self.model)?,
                OwnerStore::Userspace(o) => o.set_single_pod(self.model.single_pod().keys().cloned()),
            }
            let owners = self.owners.owners(ebpf)?;
            for fix in self.model.plan_owners(&owners) {
                if matches!(fix, OwnerFix::Seed { .. }) {
                    self.owners.apply(ebpf, &fix)?;
                }
            }
        }
        if change.noteworthy {
            self.model.log_summary();
        }
        Ok(())
    }
}

/// The path a successful publish-capable syscall attached something at, when the event
/// names it absolutely (userspace sees strings, not resolved paths).
fn attached_target(call: &Call) -> Option<&RawString> {
    match call {
        Call::Mount { target, flags, .. } if MountOp::of(without_magic(*flags)).attaches() => Some(target),
        Call::MoveMount { to_dfd, to_path, .. } if *to_dfd == AT_FDCWD || to_path.as_bytes().starts_with(b"/") => {
            Some(to_path)
        }
        _ => None,
    }
}

fn classify(root: &Path, path: &RawString) -> Option<(PublishTarget, PathBuf)> {
    if path.truncated {
        return None;
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(path.as_bytes()));
    Some((publish_target(root, &path)?, path))
}

fn publish_change(root: &Path, event: &Event) -> Option<PublishChange> {
    if event.ret != 0 {
        return None;
    }
    if let Call::Umount { target, .. } = &event.call {
        return classify(root, target).map(|(t, _)| PublishChange::Unpublished(t));
    }
    let path = attached_target(&event.call)?;
    let classified = classify(root, path);
    if classified.is_none() {
        debug!("not a recognisable publish target: {}", render::line(event));
    }
    classified.map(|(t, p)| PublishChange::Published(t, p))
}

/// In-kernel modes: keep the published-root map current for the cross-pod source check.
fn record_roots(roots: &mut PublishedRoots, caller: &crate::decode::Caller, change: &PublishChange) {
    match change {
        PublishChange::Published(target, path) => roots.published(caller, target, path),
        PublishChange::Unpublished(target) => roots.unpublished(target),
    }
}
