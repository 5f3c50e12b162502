//! Starting the agent: the HTTP listeners, the facts source, and the programs (pinned
//! for the in-kernel modes); and the owner store each mode keeps.

use std::{collections::BTreeMap, sync::Arc};

use aya::Ebpf;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use volguard_common::enforce::{KernelLayout, kernel_mode};

use super::{AgentError, EVENT_QUEUE, FactsSource, RunOptions};
use crate::{
    enforce::{ModeDecision, ownership::Ownership},
    facts::inventory::{self, InventoryWatch},
    facts::{Origin, Snapshot},
    kernel::loader::{self},
    kernel::{
        maps::{self, KernelError},
        pins::Pins,
    },
    model::explain::{self},
    model::mounts::OwnerFix,
    model::node::NodeModel,
    outputs::debug_state::Shared,
    outputs::http,
};

/// Where the facts about pods, PVs, PVCs and CSI objects come from.
/// Binds both listeners (a taken port stops the start with the address named) and
/// serves them for the life of the process.
pub(super) async fn serve_http(opts: &RunOptions, shared: &Arc<Shared>) -> Result<(), AgentError> {
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
pub(super) struct StartedSource {
    pub(super) initial: Snapshot,
    pub(super) facts: watch::Receiver<Snapshot>,
    /// Kept by the caller, so a source that never sends leaves the receiver waiting.
    pub(super) keep_alive: watch::Sender<Snapshot>,
    /// Where conflicts go to become Kubernetes Events, when there is an API.
    pub(super) events: Option<mpsc::Sender<explain::Conflict>>,
}

/// Starts the facts source. The inventory is read now: a bad file stops the start (there
/// is no last good version yet). The API source publishes once every kind has listed;
/// until then the facts are empty and marked stale, and nothing pinned is removed.
pub(super) async fn start_facts_source(source: &FactsSource) -> Result<StartedSource, AgentError> {
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
            let api_source = crate::facts::k8s::source::run(client.clone(), node.clone(), facts_tx);
            tokio::spawn(async move {
                if let Err(e) = api_source.await {
                    warn!("the Kubernetes API source stopped: {e}");
                }
            });
            let (events_tx, events_rx) = mpsc::channel(EVENT_QUEUE);
            let counters = std::sync::Arc::new(crate::outputs::events::EventCounters::default());
            tokio::spawn(crate::outputs::events::run(client, node, events_rx, counters));
            source.events = Some(events_tx);
            Ok(source)
        }
    }
}

/// Loads with pinned maps, configures the LSM programs and swaps the pinned links.
pub(super) fn start_in_kernel(
    opts: &RunOptions,
    decision: &ModeDecision,
    pins: &Pins,
    layout: KernelLayout,
    model: &mut NodeModel,
) -> Result<Ebpf, AgentError> {
    pins.prepare()?;
    let adopting = pins.has_state();
    let mut ebpf = loader::load_pinned(pins, opts.ring_buffer_bytes)?;
    loader::start_kernel_log(&mut ebpf);
    let mode = maps::kernel_mode_for(decision.mode, true);
    maps::configure(&mut ebpf, layout, &opts.kubelet_root, mode)?;
    sync_single_pod_set(&mut ebpf, model)?;
    // Before the LSM programs attach, so no other pod can claim a volume already mounted.
    let mut store = OwnerStore::Kernel;
    for fix in model.plan_owners(&maps::owners(&ebpf)?.into_iter().collect()) {
        store.apply(&mut ebpf, &fix)?;
    }
    // Tracing first: the exit tracepoints settle the claims the LSM programs make.
    let mut links = loader::attach_all_taking_links(&mut ebpf, &loader::trace_hooks())?;
    links.extend(loader::attach_all_taking_links(&mut ebpf, &loader::enforce_hooks())?);
    let replaced = pins.install_links(links)?;
    let owners = maps::owners(&ebpf)?;
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
pub(super) fn sync_single_pod_set(ebpf: &mut Ebpf, model: &NodeModel) -> Result<(), AgentError> {
    let keep_others = model.snapshot().synced_at.is_none() && model.snapshot().origin != Origin::None;
    let sync = maps::sync_single_pod_volumes(ebpf, model.single_pod(), keep_others)?;
    if sync.added + sync.removed > 0 {
        info!("kernel single-pod set: {} added, {} removed", sync.added, sync.removed);
    }
    Ok(())
}

pub(super) fn start_userspace(opts: &RunOptions, layout: KernelLayout) -> Result<Ebpf, AgentError> {
    let mut ebpf = match opts.ring_buffer_bytes {
        Some(bytes) => loader::load_with_ring_size(bytes)?,
        None => loader::load()?,
    };
    loader::start_kernel_log(&mut ebpf);
    maps::configure(&mut ebpf, layout, &opts.kubelet_root, kernel_mode::OFF)?;
    loader::attach_all(&mut ebpf, &loader::trace_hooks())?;
    Ok(ebpf)
}

/// Who owns which single-pod volume: the kernel map when the kernel decides, else the
/// agent's own table.
pub(super) enum OwnerStore {
    Kernel,
    Userspace(Ownership),
}

impl OwnerStore {
    pub(super) fn owners(&self, ebpf: &Ebpf) -> Result<BTreeMap<String, String>, KernelError> {
        match self {
            Self::Kernel => Ok(maps::owners(ebpf)?.into_iter().collect()),
            Self::Userspace(o) => Ok(o.owners()),
        }
    }

    pub(super) fn apply(&mut self, ebpf: &mut Ebpf, fix: &OwnerFix) -> Result<(), KernelError> {
        let done = match (self, fix) {
            (Self::Kernel, OwnerFix::Seed { volume, pod_uid }) => maps::seed_owner(ebpf, volume, pod_uid)?,
            (Self::Kernel, OwnerFix::Release { volume, pod_uid }) => maps::release_owner(ebpf, volume, pod_uid)?,
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
