//! Only the PVCs and PVs this node's pods use, each followed by its own narrowed list and
//! watch ([`super::object_watch`]: `fieldSelector=metadata.name=<name>`), as kubelet's
//! watch-based object cache follows the objects its pods reference
//! (pkg/kubelet/util/manager/watch_based_manager.go). The agent's memory and its load on
//! the API server grow with this node's pods, not with the cluster's volumes.
//!
//! - [`claims_used_by`] and [`volumes_bound_to`]: pure, which objects the pods need.
//! - [`Followers`]: the running watchers. One starts when a pod first needs its object and
//!   stops (task aborted, object dropped from the facts) when no pod needs it any more; a
//!   claim whose `volumeName` changes switches volume.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, btree_map::Entry},
    sync::Arc,
};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use tokio::task::JoinHandle;

use super::{
    convert,
    health::{ObjectKey, Watched},
    object_watch::{Followed, Lister, NamedObject, Slot, follow_forever, read},
    watch_loop::{Signals, WatcherId},
};
use crate::facts;

fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(String::as_str).filter(|v| !v.is_empty())
}

/// The claims `pods` use: each `persistentVolumeClaim.claimName` in the pod's namespace,
/// and each generic ephemeral volume's claim, which the ephemeral-volume controller names
/// `<pod name>-<volume name>`. Pods without a namespace or name are skipped (convert warns).
pub fn claims_used_by<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> BTreeSet<ObjectKey> {
    let mut claims = BTreeSet::new();
    for pod in pods {
        let (Some(namespace), Some(pod_name)) =
            (non_empty(pod.metadata.namespace.as_ref()), non_empty(pod.metadata.name.as_ref()))
        else {
            continue;
        };
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            if let Some(source) = &volume.persistent_volume_claim {
                if !source.claim_name.is_empty() {
                    claims.insert(ObjectKey::new(namespace, source.claim_name.as_str()));
                }
            } else if volume.ephemeral.is_some() {
                claims.insert(ObjectKey::new(namespace, format!("{pod_name}-{}", volume.name)));
            }
        }
    }
    claims
}

/// The volumes `claims` are bound to (`spec.volumeName`).
pub fn volumes_bound_to<'a>(claims: impl IntoIterator<Item = &'a facts::PersistentVolumeClaim>) -> BTreeSet<String> {
    claims.into_iter().filter_map(|c| c.volume_name.clone()).collect()
}

impl Followed for PersistentVolumeClaim {
    type Fact = facts::PersistentVolumeClaim;

    fn fact(&self) -> Option<Self::Fact> {
        convert::persistent_volume_claim(self)
    }
}

impl Followed for PersistentVolume {
    type Fact = facts::PersistentVolume;

    fn fact(&self) -> Option<Self::Fact> {
        convert::persistent_volume(self)
    }
}

/// One followed object's slot, and its task, aborted when this is dropped.
struct Follower<F> {
    id: u64,
    slot: Slot<F>,
    task: JoinHandle<()>,
}

impl<F> Drop for Follower<F> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The followers started and stopped by one [`Followers::sync`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub started: Vec<Watched>,
    pub stopped: Vec<Watched>,
}

/// Starts watcher tasks and remembers which id watches what.
struct Spawner {
    lister: Lister,
    signals: Signals,
    next_id: u64,
    ids: HashMap<u64, Watched>,
}

impl Spawner {
    fn follow_claim(&mut self, key: &ObjectKey) -> Follower<facts::PersistentVolumeClaim> {
        self.spawn::<PersistentVolumeClaim>(Some(&key.namespace), &key.name, Watched::Claim(key.clone()))
    }

    fn follow_volume(&mut self, name: &str) -> Follower<facts::PersistentVolume> {
        self.spawn::<PersistentVolume>(None, name, Watched::Volume(name.to_owned()))
    }

    fn spawn<K: Followed>(&mut self, namespace: Option<&str>, name: &str, watched: Watched) -> Follower<K::Fact> {
        let id = self.next_id;
        self.next_id += 1;
        let slot = Slot::default();
        let object = NamedObject::new::<K>(namespace, name, watched.to_string());
        let task = tokio::spawn(follow_forever::<K>(
            self.lister.clone(),
            object,
            slot.clone(),
            WatcherId::Follower(id),
            self.signals.clone(),
        ));
        self.ids.insert(id, watched);
        Follower { id, slot, task }
    }
}

/// Makes `followed` hold exactly `wanted`, starting followers with `start`.
fn reconcile<Key: Ord, F>(
    followed: &mut BTreeMap<Key, Follower<F>>,
    wanted: BTreeSet<Key>,
    spawner: &mut Spawner,
    start: impl Fn(&mut Spawner, &Key) -> Follower<F>,
    changes: &mut Changes,
) {
    followed.retain(|key, follower| {
        let keep = wanted.contains(key);
        if !keep && let Some(watched) = spawner.ids.remove(&follower.id) {
            changes.stopped.push(watched);
        }
        keep
    });
    for key in wanted {
        if let Entry::Vacant(entry) = followed.entry(key) {
            let follower = start(spawner, entry.key());
            changes.started.extend(spawner.ids.get(&follower.id).cloned());
            entry.insert(follower);
        }
    }
}

/// The running per-object watchers of claims and volumes.
pub struct Followers {
    spawner: Spawner,
    claims: BTreeMap<ObjectKey, Follower<facts::PersistentVolumeClaim>>,
    volumes: BTreeMap<String, Follower<facts::PersistentVolume>>,
}

impl Followers {
    /// Followers whose watchers report to `signals` as [`WatcherId::Follower`].
    pub fn new(client: Client, signals: Signals) -> Self {
        let spawner = Spawner { lister: Lister::new(client), signals, next_id: 0, ids: HashMap::new() };
        Self { spawner, claims: BTreeMap::new(), volumes: BTreeMap::new() }
    }

    /// Follows exactly the claims `pods` use and the volumes those claims are bound to now.
    /// A claim just started has not listed, so its volume follows on a later sync (after
    /// the claim's first list signals).
    pub fn sync(&mut self, pods: &[Arc<Pod>]) -> Changes {
        let mut changes = Changes::default();
        let claims = claims_used_by(pods.iter().map(AsRef::as_ref));
        reconcile(&mut self.claims, claims, &mut self.spawner, Spawner::follow_claim, &mut changes);
        let volumes = volumes_bound_to(self.claims().iter().map(AsRef::as_ref));
        reconcile(&mut self.volumes, volumes, &mut self.spawner, |s, name| s.follow_volume(name), &mut changes);
        changes
    }

    /// What the follower `id` watches; `None` once it is stopped.
    pub fn watched(&self, id: u64) -> Option<&Watched> {
        self.spawner.ids.get(&id)
    }

    /// The followed claims that have listed (and exist).
    pub fn claims(&self) -> Vec<Arc<facts::PersistentVolumeClaim>> {
        self.claims.values().filter_map(|f| read(&f.slot)).collect()
    }

    /// The followed volumes that have listed (and exist).
    pub fn volumes(&self) -> Vec<Arc<facts::PersistentVolume>> {
        self.volumes.values().filter_map(|f| read(&f.slot)).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(namespace: &str, name: &str, volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}")},
            "spec": {"containers": [], "volumes": volumes},
        }))
        .expect("test pod")
    }

    fn claim(volume_name: Option<&str>) -> facts::PersistentVolumeClaim {
        let claim: PersistentVolumeClaim =
            serde_json::from_value(json!({"metadata": {"name": "c", "namespace": "shop"},
            "spec": {"volumeName": volume_name}}))
            .expect("test claim");
        claim.fact().expect("a usable claim")
    }

    fn keys(pairs: &[(&str, &str)]) -> BTreeSet<ObjectKey> {
        pairs.iter().map(|(ns, name)| ObjectKey::new(*ns, *name)).collect()
    }

    #[test]
    fn claims_are_named_in_the_pods_namespace() {
        let a = pod(
            "shop",
            "db-0",
            json!([
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "inline", "csi": {"driver": "inline.example.com"}},
            ]),
        );
        let b = pod("bank", "ledger", json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]));
        assert_eq!(claims_used_by([&a, &b]), keys(&[("bank", "data-db-0"), ("shop", "data-db-0")]));
    }

    #[test]
    fn an_ephemeral_volumes_claim_is_named_after_the_pod_and_the_volume() {
        let p = pod("shop", "web-7", json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]));
        assert_eq!(claims_used_by([&p]), keys(&[("shop", "web-7-scratch")]));
    }

    #[test]
    fn pods_sharing_a_claim_need_it_once_and_pods_without_claims_need_nothing() {
        let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]);
        let (a, b) = (pod("shop", "a", volumes.clone()), pod("shop", "b", volumes));
        let plain = pod("shop", "plain", json!([{"name": "tmp", "emptyDir": {}}]));
        let no_spec: Pod = serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "shop"}})).unwrap();
        assert_eq!(claims_used_by([&a, &b, &plain, &no_spec]), keys(&[("shop", "data")]));
    }

    #[test]
    fn malformed_pods_and_empty_claim_names_are_skipped() {
        let empty_name = pod("shop", "a", json!([{"name": "data", "persistentVolumeClaim": {"claimName": ""}}]));
        let no_namespace = pod("", "b", json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]));
        assert!(claims_used_by([&empty_name, &no_namespace]).is_empty());
    }

    #[test]
    fn only_bound_claims_name_a_volume() {
        let (bound, other, unbound, empty) = (claim(Some("pv-1")), claim(Some("pv-2")), claim(None), claim(Some("")));
        let got = volumes_bound_to([&bound, &other, &unbound, &empty, &bound]);
        assert_eq!(got, BTreeSet::from(["pv-1".to_owned(), "pv-2".to_owned()]));
    }
}
