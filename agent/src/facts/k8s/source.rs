//! The Kubernetes API source: one watcher per kind feeding a reflector store, and one
//! loop that turns the stores into [`Snapshot`]s on a `tokio::sync::watch` channel.
//!
//! - Nothing is published until every watcher has completed its first list: the agent
//!   must not act on a half-listed cluster.
//! - Bursts are coalesced: at most one publish per [`COALESCE`].
//! - When a watcher fails, the last facts are published again with `stale` naming the kind
//!   and the error; the stores keep every object (nothing is released because the API is
//!   unreachable). A watcher that failed after its first list starts over with a fresh
//!   list, so "healthy again" is something seen (a completed relist), not guessed from
//!   silence; `stale` clears and `synced_at` advances once every watcher is healthy.

use std::{
    fmt::Debug,
    pin::pin,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{PersistentVolume, PersistentVolumeClaim, Pod},
    storage::v1::{CSIDriver, CSINode},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::store::{Store, Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use super::convert;
use crate::facts::{Facts, Origin, Snapshot};

/// At most one publish per this interval.
pub const COALESCE: Duration = Duration::from_millis(150);
/// The first wait before a failed watcher lists again; doubles up to [`RESTART_MAX`].
const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A watcher that ran this long before failing starts its restart delay from the minimum again.
const RESTART_RESET_AFTER: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the node name is empty: the pod field selector needs it")]
    EmptyNodeName,
}

/// The kinds the source watches, in the order their health is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pods,
    PersistentVolumes,
    PersistentVolumeClaims,
    CsiDrivers,
    CsiNode,
}

impl Kind {
    pub const ALL: [Kind; 5] =
        [Kind::Pods, Kind::PersistentVolumes, Kind::PersistentVolumeClaims, Kind::CsiDrivers, Kind::CsiNode];

    /// The API's plural resource name, as `stale` messages name the kind.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Pods => "pods",
            Kind::PersistentVolumes => "persistentvolumes",
            Kind::PersistentVolumeClaims => "persistentvolumeclaims",
            Kind::CsiDrivers => "csidrivers",
            Kind::CsiNode => "csinodes",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one watcher tells the publishing loop (after it has updated its store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A list (first or re-list) completed: the store holds the server's full state.
    Listed,
    /// An object was added, changed or deleted.
    Changed,
    /// The watcher failed; it recovers by itself.
    Failed(String),
}

/// Per-kind health: listed at least once, and the last error since the last good news.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Health {
    listed: [bool; 5],
    errors: [Option<String>; 5],
}

impl Health {
    pub fn apply(&mut self, kind: Kind, signal: Signal) {
        let i = kind.index();
        match signal {
            Signal::Listed => {
                self.listed[i] = true;
                self.errors[i] = None;
            }
            Signal::Changed => self.errors[i] = None,
            Signal::Failed(error) => self.errors[i] = Some(error),
        }
    }

    /// Every kind has completed a first list.
    pub fn all_listed(&self) -> bool {
        self.listed.iter().all(|l| *l)
    }

    /// `"<kind>: <error>"` for every failing kind, joined by `"; "`; `None` when all are healthy.
    pub fn stale(&self) -> Option<String> {
        let failing: Vec<String> = Kind::ALL
            .iter()
            .filter_map(|k| self.errors[k.index()].as_ref().map(|e| format!("{}: {e}", k.resource())))
            .collect();
        (!failing.is_empty()).then(|| failing.join("; "))
    }
}

/// Decides what to publish: nothing before the first full list, nothing when neither the
/// facts nor the staleness changed; `synced_at` is the last publish that was not stale.
#[derive(Debug, Default)]
pub struct Publisher {
    last: Option<(Arc<Facts>, Option<String>)>,
    synced_at: Option<SystemTime>,
}

impl Publisher {
    pub fn next(&mut self, health: &Health, facts: Facts, now: SystemTime) -> Option<Snapshot> {
        if !health.all_listed() {
            return None;
        }
        let stale = health.stale();
        if let Some((last_facts, last_stale)) = &self.last
            && **last_facts == facts
            && *last_stale == stale
        {
            return None;
        }
        if stale.is_none() {
            self.synced_at = Some(now);
        }
        let facts = Arc::new(facts);
        self.last = Some((facts.clone(), stale.clone()));
        Some(Snapshot { facts, origin: Origin::KubernetesApi, stale, synced_at: self.synced_at })
    }
}

/// Read handles on the five stores.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    persistent_volumes: Store<PersistentVolume>,
    persistent_volume_claims: Store<PersistentVolumeClaim>,
    csi_drivers: Store<CSIDriver>,
    csi_nodes: Store<CSINode>,
}

impl Stores {
    fn facts(&self, node_name: &str) -> Facts {
        let pods = self.pods.state();
        let pvs = self.persistent_volumes.state();
        let pvcs = self.persistent_volume_claims.state();
        let drivers = self.csi_drivers.state();
        let nodes = self.csi_nodes.state();
        convert::facts(
            node_name,
            &convert::Objects {
                pods: pods.iter().map(AsRef::as_ref).collect(),
                persistent_volumes: pvs.iter().map(AsRef::as_ref).collect(),
                persistent_volume_claims: pvcs.iter().map(AsRef::as_ref).collect(),
                csi_drivers: drivers.iter().map(AsRef::as_ref).collect(),
                csi_nodes: nodes.iter().map(AsRef::as_ref).collect(),
            },
        )
    }
}

/// Watches pods on `node_name`, all PVs, all PVCs, all CSIDrivers and the CSINode named
/// `node_name`, and publishes [`Snapshot`]s (origin [`Origin::KubernetesApi`]) on `tx`.
/// Runs until every receiver of `tx` is gone.
pub async fn run(client: Client, node_name: String, tx: watch::Sender<Snapshot>) -> Result<(), SourceError> {
    if node_name.is_empty() {
        return Err(SourceError::EmptyNodeName);
    }
    let pods_writer = Writer::<Pod>::default();
    let pvs_writer = Writer::<PersistentVolume>::default();
    let pvcs_writer = Writer::<PersistentVolumeClaim>::default();
    let drivers_writer = Writer::<CSIDriver>::default();
    let nodes_writer = Writer::<CSINode>::default();
    let stores = Stores {
        pods: pods_writer.as_reader(),
        persistent_volumes: pvs_writer.as_reader(),
        persistent_volume_claims: pvcs_writer.as_reader(),
        csi_drivers: drivers_writer.as_reader(),
        csi_nodes: nodes_writer.as_reader(),
    };
    let (signal_tx, signal_rx) = mpsc::channel(1024);
    let node_fields = format!("metadata.name={node_name}");
    let pod_fields = format!("spec.nodeName={node_name}");
    let watchers = futures::future::join5(
        watch_kind(Kind::Pods, Api::all(client.clone()), config().fields(&pod_fields), pods_writer, signal_tx.clone()),
        watch_kind(Kind::PersistentVolumes, Api::all(client.clone()), config(), pvs_writer, signal_tx.clone()),
        watch_kind(Kind::PersistentVolumeClaims, Api::all(client.clone()), config(), pvcs_writer, signal_tx.clone()),
        watch_kind(Kind::CsiDrivers, Api::all(client.clone()), config(), drivers_writer, signal_tx.clone()),
        watch_kind(Kind::CsiNode, Api::all(client), config().fields(&node_fields), nodes_writer, signal_tx),
    );
    tokio::select! {
        () = tx.closed() => {}
        _ = watchers => {}
        () = publish_loop(&node_name, &stores, signal_rx, &tx) => {}
    }
    Ok(())
}

fn config() -> watcher::Config {
    watcher::Config::default()
}

/// Receives signals, waits [`COALESCE`] after the first of a burst, then publishes once.
async fn publish_loop(
    node_name: &str,
    stores: &Stores,
    mut rx: mpsc::Receiver<(Kind, Signal)>,
    tx: &watch::Sender<Snapshot>,
) {
    let mut health = Health::default();
    let mut publisher = Publisher::default();
    while let Some((kind, signal)) = rx.recv().await {
        health.apply(kind, signal);
        let deadline = tokio::time::Instant::now() + COALESCE;
        loop {
            tokio::select! {
                next = rx.recv() => match next {
                    Some((kind, signal)) => health.apply(kind, signal),
                    None => return,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        if let Some(snapshot) = publisher.next(&health, stores.facts(node_name), SystemTime::now()) {
            tracing::debug!(
                pods = snapshot.facts.pods.len(),
                persistent_volumes = snapshot.facts.persistent_volumes.len(),
                stale = snapshot.stale.as_deref().unwrap_or(""),
                "publishing Kubernetes facts"
            );
            tx.send_replace(snapshot);
        }
    }
}

/// Runs watchers for one kind forever, feeding `writer`. A watcher that fails after its
/// first list is replaced by a fresh one (a full re-list) after a growing delay; the store
/// keeps its objects until the new list completes. Returns when the publishing loop is gone.
async fn watch_kind<K>(
    kind: Kind,
    api: Api<K>,
    config: watcher::Config,
    mut writer: Writer<K>,
    signals: mpsc::Sender<(Kind, Signal)>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut delay = RESTART_MIN;
    loop {
        let started = Instant::now();
        match watch_until_failure(kind, api.clone(), config.clone(), &mut writer, &signals).await {
            Stop::ChannelClosed => return,
            Stop::Failed => {}
        }
        if started.elapsed() > RESTART_RESET_AFTER {
            delay = RESTART_MIN;
        }
        tracing::debug!(kind = kind.resource(), ?delay, "re-listing after a watch failure");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RESTART_MAX);
    }
}

enum Stop {
    ChannelClosed,
    Failed,
}

async fn watch_until_failure<K>(
    kind: Kind,
    api: Api<K>,
    config: watcher::Config,
    writer: &mut Writer<K>,
    signals: &mpsc::Sender<(Kind, Signal)>,
) -> Stop
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut stream = pin!(watcher(api, config).default_backoff().modify(|o: &mut K| o.managed_fields_mut().clear()));
    let mut listed = false;
    while let Some(item) = stream.next().await {
        let signal = match item {
            Ok(event) => {
                writer.apply_watcher_event(&event);
                match event {
                    watcher::Event::InitDone => {
                        listed = true;
                        Signal::Listed
                    }
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => Signal::Changed,
                    watcher::Event::Init | watcher::Event::InitApply(_) => continue,
                }
            }
            // 410 Gone: the watcher re-lists by itself; the store keeps its objects until then.
            Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                tracing::debug!(kind = kind.resource(), "watch expired (410 Gone), re-listing");
                continue;
            }
            Err(error) => {
                tracing::warn!(kind = kind.resource(), %error, "Kubernetes watch failed");
                if signals.send((kind, Signal::Failed(error.to_string()))).await.is_err() {
                    return Stop::ChannelClosed;
                }
                if listed {
                    return Stop::Failed;
                }
                // Not listed yet: the watcher retries the list itself, with backoff.
                continue;
            }
        };
        if signals.send((kind, signal)).await.is_err() {
            return Stop::ChannelClosed;
        }
    }
    // The watcher's stream never ends; treat an end like a failure.
    Stop::Failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::Pod as FactsPod;

    fn facts(pods: &[&str]) -> Facts {
        Facts {
            node_name: Some("n1".into()),
            pods: pods
                .iter()
                .map(|uid| FactsPod {
                    uid: (*uid).into(),
                    namespace: "ns".into(),
                    name: (*uid).into(),
                    terminating: false,
                    volumes: vec![],
                })
                .collect(),
            ..Facts::default()
        }
    }

    fn listed_all() -> Health {
        let mut h = Health::default();
        for k in Kind::ALL {
            h.apply(k, Signal::Listed);
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn nothing_is_published_before_every_kind_listed() {
        let mut h = Health::default();
        let mut p = Publisher::default();
        for k in &Kind::ALL[..4] {
            h.apply(*k, Signal::Listed);
            assert!(p.next(&h, facts(&["a"]), at(1)).is_none());
        }
        h.apply(Kind::CsiNode, Signal::Listed);
        let s = p.next(&h, facts(&["a"]), at(2)).expect("published");
        assert_eq!(s.origin, Origin::KubernetesApi);
        assert_eq!((s.stale, s.synced_at), (None, Some(at(2))));
    }

    #[test]
    fn an_empty_cluster_is_published_once() {
        let h = listed_all();
        let mut p = Publisher::default();
        assert!(p.next(&h, Facts::default(), at(1)).is_some());
        assert!(p.next(&h, Facts::default(), at(2)).is_none(), "unchanged: nothing to publish");
    }

    #[test]
    fn errors_make_the_facts_stale_and_keep_synced_at() {
        let mut h = listed_all();
        let mut p = Publisher::default();
        p.next(&h, facts(&["a"]), at(1)).expect("first");
        h.apply(Kind::PersistentVolumes, Signal::Failed("connection refused".into()));
        h.apply(Kind::Pods, Signal::Failed("timed out".into()));
        let s = p.next(&h, facts(&["a"]), at(2)).expect("stale is news");
        assert_eq!(s.stale.as_deref(), Some("pods: timed out; persistentvolumes: connection refused"));
        assert_eq!(s.synced_at, Some(at(1)), "synced_at is the last good publish");
        assert_eq!(s.facts.pods.len(), 1, "the facts are kept");

        // A healthy kind's change while another is still failing: published, still stale.
        h.apply(Kind::Pods, Signal::Changed);
        let s = p.next(&h, facts(&["a", "b"]), at(3)).expect("changed");
        assert_eq!(s.stale.as_deref(), Some("persistentvolumes: connection refused"));
        assert_eq!(s.synced_at, Some(at(1)));

        h.apply(Kind::PersistentVolumes, Signal::Listed);
        let s = p.next(&h, facts(&["a", "b"]), at(4)).expect("healthy again is news");
        assert_eq!((s.stale, s.synced_at), (None, Some(at(4))));
    }

    #[test]
    fn errors_before_the_first_list_publish_nothing() {
        let mut h = Health::default();
        h.apply(Kind::Pods, Signal::Failed("refused".into()));
        assert!(!h.all_listed());
        assert!(Publisher::default().next(&h, Facts::default(), at(1)).is_none());
        assert_eq!(h.stale().as_deref(), Some("pods: refused"));
    }
}
