//! Starting the agent: the HTTP listeners, the facts source, and the programs (pinned
//! for the in-kernel modes).

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use volguard_common::enforce::KernelLayout;

use super::{AgentError, EVENT_QUEUE, FactsSource, RunOptions};
use crate::{
    enforce::{ModeDecision, owners::OwnerStore},
    facts::inventory::{self, InventoryWatch},
    facts::{Origin, Snapshot},
    kernel::{
        btf::Btf,
        loader::{self, Hook, LoadedObject},
        maps::EnforcementMaps,
        pins::Pins,
        trace_backend::TraceDecision,
        wakeup,
    },
    model::exempt,
    model::explain::{self},
    model::node::NodeModel,
    outputs::http,
    outputs::metrics_auth::{decision::Authorizer, guard, reviews::KubeReviews, tls},
    outputs::served_state::ServedState,
};

/// The agent's one Kubernetes API client (in-cluster service account, else KUBECONFIG),
/// shared by the facts source, the Events and the secure metrics' reviews.
pub(super) async fn kube_client() -> Result<kube::Client, AgentError> {
    let config = kube::Config::infer().await.map_err(|e| AgentError::KubeConfig(e.to_string()))?;
    info!("Kubernetes API {}", config.cluster_url);
    crate::facts::k8s::client::http2_client(config).map_err(|e| AgentError::KubeConfig(e.to_string()))
}

/// Binds both listeners (a taken port stops the start with the address named) and
/// serves them for the life of the process: `/metrics` over HTTPS behind the token and
/// access reviews with `--metrics-secure` (`kube` is then the API client), else plain.
pub(super) async fn serve_http(
    opts: &RunOptions,
    shared: &Arc<ServedState>,
    kube: Option<&kube::Client>,
) -> Result<(), AgentError> {
    let bind = |what: &'static str, address: std::net::SocketAddr| async move {
        tokio::net::TcpListener::bind(address).await.map_err(|source| AgentError::Listen {
            what,
            address: address.to_string(),
            source,
        })
    };
    let metrics = http::metrics_router(shared.clone());
    match (&opts.metrics_secure, kube) {
        (Some(certificate), Some(client)) => {
            let config = tls::server_config(certificate)?;
            let reviews = KubeReviews::new(client.clone());
            let authorizer = Arc::new(Authorizer::new(reviews, shared.metrics.access.clone()));
            let listener = bind("metrics", opts.metrics_address).await?;
            let address = listener.local_addr().map_or(opts.metrics_address, |a| a);
            info!(
                "metrics on https://{address} ({}), for callers allowed get on /metrics (TokenReview, \
                 SubjectAccessReview); /healthz and /readyz open",
                certificate.describe()
            );
            tokio::spawn(tls::serve(listener, guard::protect(metrics, authorizer), config));
        }
        (Some(_), None) => return Err(AgentError::MetricsSecureWithoutApi),
        (None, _) => serve_plain("metrics", bind("metrics", opts.metrics_address).await?, metrics),
    }
    serve_plain("debug API", bind("debug API", opts.debug_address).await?, http::debug_router(shared.clone()));
    Ok(())
}

fn serve_plain(what: &'static str, listener: tokio::net::TcpListener, router: axum::Router) {
    if let Ok(address) = listener.local_addr() {
        info!("{what} on http://{address}");
    }
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            warn!("the {what} server stopped: {e}");
        }
    });
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
pub(super) async fn start_facts_source(
    source: &FactsSource,
    kube: Option<kube::Client>,
) -> Result<StartedSource, AgentError> {
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
            let client = match kube {
                Some(client) => client,
                None => kube_client().await?,
            };
            info!("watching pods on node {node_name}");
            let mut waiting = Snapshot::empty(Origin::KubernetesApi);
            waiting.stale = Some(crate::facts::AWAITING_FIRST_LIST.into());
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
    tracing: &TraceDecision,
    pins: &Pins,
    btf: &Btf,
    model: &mut NodeModel,
) -> Result<(LoadedObject, OwnerStore), AgentError> {
    let (layout, mount_tree, callers) = (btf.kernel_layout()?, btf.mount_tree_layout()?, btf.caller_layout()?);
    let open_guard = btf.open_guard_layout(&layout)?;
    pins.prepare()?;
    let adopting = pins.has_state();
    let mut object = LoadedObject::load_pinned(pins, opts.ring_buffer_bytes, &open_guard)?;
    object.start_kernel_log();
    wakeup::set_wakeup_filter(&mut object, model.kubelet_root(), decision.in_kernel())?;
    let mut maps = EnforcementMaps::take(&mut object)?;
    maps.configure(layout, model.kubelet_root(), decision.kernel_mode())?;
    maps.configure_mount_tree(mount_tree)?;
    maps.configure_callers(callers)?;
    let marked = maps.guard_devices_of_roots()?;
    if marked > 0 {
        info!("open guard: {marked} filesystem(s) with recorded roots marked");
    }
    let mut store = OwnerStore::Kernel(Box::new(maps));
    store.sync_single_pod_set(model)?;
    store.sync_exempt_pods(&exempt::exempt_pods(&opts.exempt_readers, &model.snapshot().facts.pods))?;
    // Before the LSM programs attach, so no other pod can claim a volume already mounted.
    for fix in model.plan_owners(&store.owners()?) {
        store.apply(&fix)?;
    }
    store.seed_roots(model)?;
    // Tracing first: the exit programs settle the claims the LSM programs make. An earlier
    // agent's links of the other backend go only once ours are attached (see `Pins`).
    let via = decision.hooks.expect("a mode decided in the kernel names its security hooks");
    let hooks: Vec<Hook> = tracing.hooks().into_iter().chain(loader::enforce_hooks(via)).collect();
    let replaced = object.attach_pinned(&hooks, pins)?;
    let owners = store.owners()?;
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
    Ok((object, store))
}

/// Loads without pins and attaches the tracing programs only; the LSM programs stay off (the
/// layout is still written: events carry the caller's mount namespace).
pub(super) fn start_userspace(
    opts: &RunOptions,
    decision: &ModeDecision,
    tracing: &TraceDecision,
    layout: KernelLayout,
    model: &NodeModel,
) -> Result<LoadedObject, AgentError> {
    let mut object = LoadedObject::load_with_ring_size(opts.ring_buffer_bytes)?;
    object.start_kernel_log();
    wakeup::set_wakeup_filter(&mut object, model.kubelet_root(), false)?;
    let mut maps = EnforcementMaps::take(&mut object)?;
    maps.configure(layout, model.kubelet_root(), decision.kernel_mode())?;
    object.attach(&tracing.hooks())?;
    drop(maps); // only now: the programs were loaded against its descriptors
    Ok(object)
}
