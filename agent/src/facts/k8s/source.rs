//! The Kubernetes API source: one watcher per kind for this node's pods, the CSIDrivers
//! and this node's CSINode, one narrowed watcher per PVC and PV those pods use
//! ([`super::follow`]), each feeding a reflector store, and one loop that turns the stores
//! into [`Snapshot`]s on a `tokio::sync::watch` channel.
//!
//! - Nothing is published until every kind, and every object followed at that moment, has
//!   completed its first list: the agent must not act on a half-listed node. An object
//!   followed later is absent from the facts until its own first list.
//! - Bursts are coalesced: at most one publish per [`COALESCE`].
//! - When a watcher fails, the last facts are published again with `stale` naming the kind
//!   or object and the error; the stores keep every object (nothing is released because
//!   the API is unreachable). A watcher that failed after its first list starts over with
//!   a fresh list ([`super::watch_loop`]), so "healthy again" is something seen (a
//!   completed relist), not guessed from silence; `stale` clears and `synced_at` advances
//!   once every watcher is healthy.

use std::{fmt::Debug, sync::Arc, time::Duration, time::SystemTime};

use futures::Stream;
use k8s_openapi::api::{
    core::v1::Pod,
    storage::v1::{CSIDriver, CSINode},
};
use kube::{
    Api, Client, Resource,
    runtime::{
        reflector::store::{Store, Writer},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use super::{
    convert,
    follow::Followers,
    health::{Health, Kind, Publisher, Signal, Watched},
    watch_loop::{Signals, WatcherId, watch_forever},
};
use crate::facts::{Facts, Snapshot};

/// At most one publish per this interval.
pub const COALESCE: Duration = Duration::from_millis(150);

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the node name is empty: the pod field selector needs it")]
    EmptyNodeName,
}

/// Read handles on the stores of the kinds watched as a whole.
#[derive(Clone)]
struct Stores {
    pods: Store<Pod>,
    csi_drivers: Store<CSIDriver>,
    csi_nodes: Store<CSINode>,
}

impl Stores {
    fn facts(&self, node_name: &str, pods: &[Arc<Pod>], followers: &Followers) -> Facts {
        let pvs = followers.volumes();
        let pvcs = followers.claims();
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

/// Watches pods on `node_name`, the PVCs they use and the PVs those are bound to (one
/// narrowed watch each), all CSIDrivers and the CSINode named `node_name`, and publishes
/// [`Snapshot`]s (origin [`crate::facts::Origin::KubernetesApi`]) on `tx`. Runs until
/// every receiver of `tx` is gone.
pub async fn run(client: Client, node_name: String, tx: watch::Sender<Snapshot>) -> Result<(), SourceError> {
    if node_name.is_empty() {
        return Err(SourceError::EmptyNodeName);
    }
    super::client::open_shared_connection(&client).await;
    let pods_writer = Writer::<Pod>::default();
    let drivers_writer = Writer::<CSIDriver>::default();
    let nodes_writer = Writer::<CSINode>::default();
    let stores = Stores {
        pods: pods_writer.as_reader(),
        csi_drivers: drivers_writer.as_reader(),
        csi_nodes: nodes_writer.as_reader(),
    };
    let (signal_tx, signal_rx) = mpsc::channel(1024);
    let followers = Followers::new(client.clone(), signal_tx.clone());
    let pods_api: Api<Pod> = Api::all(client.clone());
    let pods_config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    let drivers_api: Api<CSIDriver> = Api::all(client.clone());
    let nodes_api: Api<CSINode> = Api::all(client);
    let nodes_config = watcher::Config::default().fields(&format!("metadata.name={node_name}"));
    let watchers = futures::future::join3(
        watch_kind(Kind::Pods, || watcher(pods_api.clone(), pods_config.clone()), pods_writer, signal_tx.clone()),
        watch_kind(
            Kind::CsiDrivers,
            || watcher(drivers_api.clone(), watcher::Config::default()),
            drivers_writer,
            signal_tx.clone(),
        ),
        watch_kind(Kind::CsiNode, || watcher(nodes_api.clone(), nodes_config.clone()), nodes_writer, signal_tx),
    );
    tokio::select! {
        () = tx.closed() => {}
        _ = watchers => {}
        () = publish_loop(&node_name, &stores, followers, signal_rx, &tx) => {}
    }
    Ok(())
}

/// A whole kind's watcher, named in logs and `stale` by its resource.
async fn watch_kind<K, S>(kind: Kind, start: impl Fn() -> S, writer: Writer<K>, signals: Signals)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    watch_forever(WatcherId::Kind(kind), kind.resource().to_owned(), start, writer, signals).await;
}

/// Receives signals, waits [`COALESCE`] after the first of a burst, brings the followers
/// in line with the pods, then publishes once.
async fn publish_loop(
    node_name: &str,
    stores: &Stores,
    mut followers: Followers,
    mut rx: mpsc::Receiver<(WatcherId, Signal)>,
    tx: &watch::Sender<Snapshot>,
) {
    let mut health = Health::default();
    let mut publisher = Publisher::default();
    while let Some((id, signal)) = rx.recv().await {
        apply(&mut health, &followers, id, signal);
        let deadline = tokio::time::Instant::now() + COALESCE;
        loop {
            tokio::select! {
                next = rx.recv() => match next {
                    Some((id, signal)) => apply(&mut health, &followers, id, signal),
                    None => return,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let pods = stores.pods.state();
        let changes = followers.sync(&pods);
        for watched in &changes.stopped {
            health.forget(watched);
        }
        for watched in changes.started {
            health.follow(watched);
        }
        let facts = stores.facts(node_name, &pods, &followers);
        if let Some(snapshot) = publisher.next(&health, facts, SystemTime::now()) {
            tracing::debug!(
                pods = snapshot.facts.pods.len(),
                persistent_volumes = snapshot.facts.persistent_volumes.len(),
                persistent_volume_claims = snapshot.facts.persistent_volume_claims.len(),
                stale = snapshot.stale.as_deref().unwrap_or(""),
                "publishing Kubernetes facts"
            );
            tx.send_replace(snapshot);
        }
    }
}

/// Applies a signal to the watcher it comes from; a stopped follower's is dropped.
fn apply(health: &mut Health, followers: &Followers, id: WatcherId, signal: Signal) {
    match id {
        WatcherId::Kind(kind) => health.apply(&Watched::Kind(kind), signal),
        WatcherId::Follower(id) => {
            if let Some(watched) = followers.watched(id) {
                health.apply(watched, signal);
            }
        }
    }
}
