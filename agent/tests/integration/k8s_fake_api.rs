//! The Kubernetes source against a fake API server speaking real HTTP
//! ([`crate::support::fake_api`]). Every wait has a timeout, so a hang fails instead of blocking.
//! (The Events task: `k8s_events`.)

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use volguard::{
    facts::k8s::{client::http2_client, object_watch, source},
    facts::{Facts, Origin, SinglePodReason, Snapshot},
};

use crate::support::fake_api::{
    self, CSI_DRIVERS, CSI_NODES, FakeApi, PODS, PVCS, PVS, claim, csi_driver, csi_node, eventually, pod,
    pod_with_claims, rwop_pvc, volume,
};

const NODE: &str = "node-1";
const WAIT: Duration = Duration::from_secs(30);

fn rwop_pv(name: &str) -> Value {
    fake_api::rwop_pv(name, "d.example.com", &format!("h-{name}"))
}

/// A cluster with one pod here, one on another node, an RWOP PV and its claim, a driver and
/// this node's CSINode (and another node's).
fn seed(fake: &FakeApi) {
    fake.apply(PODS, pod("db-0", "uid-a", NODE));
    fake.apply(PODS, pod("elsewhere", "uid-z", "node-2"));
    fake.apply(PVS, rwop_pv("pv-1"));
    fake.apply(PVCS, rwop_pvc("pv-1"));
    fake.apply(CSI_DRIVERS, csi_driver("d.example.com"));
    fake.apply(CSI_NODES, csi_node(NODE, &[("d.example.com", "n1")]));
    fake.apply(CSI_NODES, csi_node("node-2", &[]));
}

fn start_source(fake: &FakeApi) -> watch::Receiver<Snapshot> {
    let (tx, rx) = watch::channel(Snapshot::empty(Origin::KubernetesApi));
    let client = fake.client();
    tokio::spawn(async move {
        if let Err(e) = source::run(client, NODE.into(), tx).await {
            panic!("source failed: {e}");
        }
    });
    rx
}

/// Waits until the published snapshot satisfies `check` (the initial empty value never does
/// for checks that look at `synced_at` or the facts).
async fn snapshot_where(rx: &mut watch::Receiver<Snapshot>, what: &str, check: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let wait = async {
        loop {
            {
                let current = rx.borrow_and_update();
                if current.synced_at.is_some() && check(&current) {
                    return current.clone();
                }
            }
            rx.changed().await.expect("the source stopped");
        }
    };
    match tokio::time::timeout(WAIT, wait).await {
        Ok(s) => s,
        Err(_) => panic!("timed out waiting for a snapshot where {what}; last: {:?}", *rx.borrow()),
    }
}

fn pod_uids(facts: &Facts) -> Vec<&str> {
    facts.pods.iter().map(|p| p.uid.as_str()).collect()
}

fn watch_requests(fake: &FakeApi, resource: &str) -> usize {
    fake.requests().iter().filter(|r| r.resource == resource && r.is_watch()).count()
}

fn list_requests(fake: &FakeApi, resource: &str) -> usize {
    fake.requests().iter().filter(|r| r.resource == resource && !r.is_watch()).count()
}

#[tokio::test]
async fn the_initial_list_gives_this_nodes_pods_and_the_single_pod_volumes() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    let s = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;
    assert_eq!(s.origin, Origin::KubernetesApi);
    assert_eq!(s.stale, None);
    assert_eq!(s.facts.node_name.as_deref(), Some(NODE));
    assert_eq!(pod_uids(&s.facts), ["uid-a"], "only this node's pod");
    assert_eq!(s.facts.single_pod_volumes().get("pv-1"), Some(&SinglePodReason::ReadWriteOncePod));
    assert_eq!(s.facts.persistent_volume_claims.len(), 1);
    assert_eq!(s.facts.csi_drivers.len(), 1);
    assert_eq!(s.facts.csi_node.as_ref().map(|n| n.drivers.len()), Some(1), "this node's CSINode");

    let requests = fake.requests();
    let pod_requests: Vec<_> = requests.iter().filter(|r| r.resource == PODS).collect();
    assert!(!pod_requests.is_empty());
    for r in pod_requests {
        assert_eq!(r.params.get("fieldSelector").map(String::as_str), Some("spec.nodeName=node-1"), "{r:?}");
    }
    for r in requests.iter().filter(|r| r.resource == CSI_NODES) {
        assert_eq!(r.params.get("fieldSelector").map(String::as_str), Some("metadata.name=node-1"), "{r:?}");
    }
    for r in requests.iter().filter(|r| r.is_watch()) {
        assert_eq!(r.params.get("allowWatchBookmarks").map(String::as_str), Some("true"), "{r:?}");
    }
    for r in requests.iter().filter(|r| r.resource == PVCS) {
        assert_eq!((r.namespace.as_deref(), r.field_selector()), (Some("shop"), Some("metadata.name=data")), "{r:?}");
    }
    for r in requests.iter().filter(|r| r.resource == PVS) {
        assert_eq!(r.field_selector(), Some("metadata.name=pv-1"), "{r:?}");
    }
}

#[tokio::test]
async fn nothing_is_published_until_every_kind_has_listed() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.fail_lists(CSI_NODES, true);
    let mut rx = start_source(&fake);
    // The other four list and start watching while CSINode lists keep failing.
    eventually("four watches and two failed CSINode lists", WAIT, || async {
        let watching = [PODS, PVS, PVCS, CSI_DRIVERS].iter().all(|r| fake.open_watches(r) > 0);
        (watching && list_requests(&fake, CSI_NODES) >= 2).then_some(())
    })
    .await;
    assert!(!rx.has_changed().expect("source alive"), "published on a half-listed cluster: {:?}", *rx.borrow());
    fake.fail_lists(CSI_NODES, false);
    let s = snapshot_where(&mut rx, "everything listed", |s| s.facts.csi_node.is_some()).await;
    assert_eq!(s.stale, None, "a failed first list is not staleness once it succeeded");
    assert_eq!(pod_uids(&s.facts), ["uid-a"]);
}

#[tokio::test]
async fn watch_events_update_the_snapshot_and_bookmarks_are_accepted() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;

    fake.apply(PODS, pod("db-1", "uid-b", NODE));
    fake.apply(PODS, pod("other-node", "uid-y", "node-2"));
    let s = snapshot_where(&mut rx, "db-1 was added", |s| pod_uids(&s.facts) == ["uid-a", "uid-b"]).await;
    assert_eq!(s.stale, None);

    let mut terminating = pod("db-0", "uid-a", NODE);
    terminating["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    fake.apply(PODS, terminating);
    snapshot_where(&mut rx, "db-0 is terminating", |s| s.facts.pod("uid-a").is_some_and(|p| p.terminating)).await;

    fake.delete(PODS, "shop/db-0");
    fake.delete(PVS, "pv-1");
    let s = snapshot_where(&mut rx, "db-0 and pv-1 were deleted", |s| {
        pod_uids(&s.facts) == ["uid-b"] && s.facts.persistent_volumes.is_empty()
    })
    .await;
    assert!(s.facts.single_pod_volumes().is_empty());

    let watches_before = watch_requests(&fake, PODS);
    for resource in [PODS, PVS, PVCS, CSI_DRIVERS, CSI_NODES] {
        fake.bookmark(resource);
    }
    // pv-2 is followed once the claim is bound to it (db-1 uses the claim).
    fake.apply(PVS, rwop_pv("pv-2"));
    fake.apply(PVCS, rwop_pvc("pv-2"));
    let s =
        snapshot_where(&mut rx, "pv-2 arrived after the bookmarks", |s| s.facts.persistent_volume("pv-2").is_some())
            .await;
    assert_eq!(s.stale, None, "bookmarks are not errors");
    assert_eq!(watch_requests(&fake, PODS), watches_before, "the pod watch was not restarted by a bookmark");
}

#[tokio::test]
async fn a_410_gone_forces_a_relist() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;
    let lists_before = list_requests(&fake, PODS);

    fake.replace_and_expire(PODS, vec![pod("db-1", "uid-b", NODE), pod("db-2", "uid-c", NODE)]);
    let s = snapshot_where(&mut rx, "the re-listed pods", |s| pod_uids(&s.facts) == ["uid-b", "uid-c"]).await;
    assert_eq!(s.stale, None);
    assert!(!fake.expiry_pending(PODS), "a watch was answered with ERROR 410");
    assert!(list_requests(&fake, PODS) > lists_before, "a new list was made");
    assert_eq!(s.facts.single_pod_volumes().len(), 1, "the other kinds are untouched");
}

#[tokio::test]
async fn an_unreachable_api_makes_the_facts_stale_and_keeps_them() {
    let mut fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    let first = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;
    let synced = first.synced_at.expect("synced");

    fake.stop().await;
    let stale = snapshot_where(&mut rx, "the facts are stale", |s| s.stale.is_some()).await;
    let why = stale.stale.clone().unwrap_or_default();
    assert!(
        ["pods: ", "persistentvolumes pv-1: ", "persistentvolumeclaims shop/data: ", "csidrivers: ", "csinodes: "]
            .iter()
            .any(|watched| why.contains(watched)),
        "{why}"
    );
    assert_eq!(stale.facts, first.facts, "nothing is dropped because the API is unreachable");
    assert_eq!(stale.facts.single_pod_volumes().get("pv-1"), Some(&SinglePodReason::ReadWriteOncePod));
    assert_eq!(stale.synced_at, Some(synced), "synced_at stays at the last good sync");

    fake.restart().await;
    let healthy = snapshot_where(&mut rx, "the facts are fresh again", |s| s.stale.is_none()).await;
    assert!(healthy.synced_at.is_some_and(|t| t > synced), "synced_at advanced");
    assert_eq!(healthy.facts, first.facts);

    // And the watches work again.
    fake.apply(PODS, pod("db-1", "uid-b", NODE));
    snapshot_where(&mut rx, "a pod added after the outage", |s| s.facts.pod("uid-b").is_some()).await;
}

/// 500s on every relist, a server that flaps, then recovery: every snapshot published in
/// between keeps the single-pod volume (nothing is released because the API misbehaves),
/// the facts are marked stale while it does, and fresh again after.
#[tokio::test]
async fn a_flapping_api_answering_500s_and_410s_keeps_the_facts_and_recovers() {
    let mut fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    let first = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;

    // Record every snapshot from here on.
    let mut seen = rx.clone();
    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
    let recorder = tokio::spawn(async move {
        let mut all = Vec::new();
        loop {
            tokio::select! {
                changed = seen.changed() => match changed {
                    Ok(()) => all.push(seen.borrow_and_update().clone()),
                    Err(_) => break,
                },
                _ = &mut done_rx => break,
            }
        }
        all
    });

    // The next watch of PVs gets 410 Gone, and the relist it forces gets 500s.
    fake.fail_lists(PVS, true);
    fake.replace_and_expire(PVS, vec![rwop_pv("pv-1")]);
    let stale = snapshot_where(&mut rx, "stale on 500s", |s| {
        s.stale.as_deref().is_some_and(|w| w.contains("persistentvolumes pv-1: "))
    })
    .await;
    assert_eq!(stale.facts, first.facts);
    // Flap: down, up, down, up.
    for _ in 0..2 {
        fake.stop().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        fake.restart().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    fake.fail_lists(PVS, false);
    let healthy = snapshot_where(&mut rx, "fresh again", |s| s.stale.is_none() && s.synced_at > first.synced_at).await;
    assert_eq!(healthy.facts.single_pod_volumes().get("pv-1"), Some(&SinglePodReason::ReadWriteOncePod));

    let _ = done_tx.send(());
    let all = tokio::time::timeout(Duration::from_secs(5), recorder).await.expect("the recorder ends").unwrap();
    assert!(all.iter().any(|s| s.stale.is_some()), "the failures were reported as staleness");
    for s in &all {
        assert!(s.facts.single_pod_volumes().contains_key("pv-1"), "a snapshot lost the single-pod volume: {s:?}");
    }
}

fn claim_keys(facts: &Facts) -> Vec<String> {
    facts.persistent_volume_claims.iter().map(|c| format!("{}/{}", c.namespace, c.name)).collect()
}

fn volume_names(facts: &Facts) -> Vec<&str> {
    facts.persistent_volumes.iter().map(|v| v.name.as_str()).collect()
}

/// The fake holds 50 unreferenced PVs and PVCs (among them a claim `data` in another
/// namespace): only this node's claim and its volume are followed, and no request lists or
/// watches PVs or PVCs without a name.
#[tokio::test]
async fn only_the_claims_and_volumes_this_nodes_pods_use_are_followed() {
    let fake = FakeApi::start().await;
    seed(&fake);
    for i in 0..50 {
        let namespace = if i % 2 == 0 { "shop" } else { "bank" };
        fake.apply(PVCS, claim(namespace, &format!("other-{i}"), "ReadWriteOncePod", &format!("pv-other-{i}")));
        fake.apply(PVS, volume(&format!("pv-other-{i}"), "ReadWriteOncePod", namespace, &format!("other-{i}")));
    }
    fake.apply(PVCS, claim("bank", "data", "ReadWriteOncePod", "pv-bank"));
    fake.apply(PVS, volume("pv-bank", "ReadWriteOncePod", "bank", "data"));
    fake.apply(PODS, pod_with_claims("elsewhere-2", "uid-y", "node-2", &["other-0"]));
    let mut rx = start_source(&fake);
    let s = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;
    assert_eq!(claim_keys(&s.facts), ["shop/data"]);
    assert_eq!(volume_names(&s.facts), ["pv-1"]);
    assert_eq!(s.facts.single_pod_volumes().len(), 1);

    let requests = fake.requests();
    let scoped: Vec<_> = requests.iter().filter(|r| r.resource == PVS || r.resource == PVCS).collect();
    assert_eq!(scoped.iter().filter(|r| !r.is_watch()).count(), 2, "one list each: {scoped:#?}");
    for r in scoped {
        assert!(r.field_selector().is_some_and(|f| f.starts_with("metadata.name=")), "unnarrowed: {r:?}");
        if r.resource == PVCS {
            assert_eq!(r.namespace.as_deref(), Some("shop"), "{r:?}");
        }
    }
    assert_eq!((fake.open_watches(PVCS), fake.open_watches(PVS)), (1, 1));
}

/// 30 RWOP claims `shop/c-<i>` bound to volumes `pv-c<i>`, all used by one pod of this node.
fn add_a_pod_using_30_claims(fake: &FakeApi) {
    let claims: Vec<String> = (0..30).map(|i| format!("c-{i}")).collect();
    for (i, name) in claims.iter().enumerate() {
        fake.apply(PVCS, claim("shop", name, "ReadWriteOncePod", &format!("pv-c{i}")));
        fake.apply(PVS, volume(&format!("pv-c{i}"), "ReadWriteOncePod", "shop", name));
    }
    let names: Vec<&str> = claims.iter().map(String::as_str).collect();
    fake.apply(PODS, pod_with_claims("many", "uid-m", NODE, &names));
}

/// Against a server that offers HTTP/2 (TLS with ALPN, as every real API server), all of
/// the agent's lists and watches share one connection: a node following 30 claims opens
/// 60 watches on it, not 60 connections.
#[tokio::test]
async fn over_tls_every_list_and_watch_shares_one_http2_connection() {
    let fake = FakeApi::start_tls().await;
    seed(&fake);
    add_a_pod_using_30_claims(&fake);
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "every claim is followed", |s| s.facts.single_pod_volumes().len() == 31).await;

    assert_eq!((fake.open_watches(PVCS), fake.open_watches(PVS)), (31, 31));
    let versions = fake.http_versions();
    assert_eq!(versions.keys().collect::<Vec<_>>(), ["HTTP/2.0"], "{versions:?}");
    assert!(versions["HTTP/2.0"] >= 2 * 62 + 3, "a list and a watch per object: {versions:?}");
    assert_eq!(fake.connections(), 1, "one multiplexed connection");
}

/// A pod using 30 claims, each list answered 50 ms late: never more than
/// `LISTS_AT_ONCE` of the followers' lists are in flight, and every claim is listed.
#[tokio::test]
async fn followers_list_a_bounded_number_of_objects_at_once() {
    let fake = FakeApi::start_tls().await;
    seed(&fake);
    add_a_pod_using_30_claims(&fake);
    fake.slow_lists(PVCS, Some(Duration::from_millis(50)));
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "every claim is followed", |s| s.facts.single_pod_volumes().len() == 31).await;

    let most = fake.most_lists_in_flight(PVCS);
    assert!(most > 1, "lists overlap: {most}");
    assert!(most <= object_watch::LISTS_AT_ONCE, "{most} lists of claims at once");
}

#[tokio::test]
async fn nothing_is_published_until_the_followed_objects_have_listed() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.fail_lists(PVS, true);
    let mut rx = start_source(&fake);
    eventually("the kinds and the claim watched, two failed PV lists", WAIT, || async {
        let watching = [PODS, PVCS, CSI_DRIVERS, CSI_NODES].iter().all(|r| fake.open_watches(r) > 0);
        (watching && list_requests(&fake, PVS) >= 2).then_some(())
    })
    .await;
    assert!(!rx.has_changed().expect("source alive"), "published on a half-listed node: {:?}", *rx.borrow());
    fake.fail_lists(PVS, false);
    let s = snapshot_where(&mut rx, "everything listed", |s| !s.facts.persistent_volumes.is_empty()).await;
    assert_eq!(s.stale, None);
    assert_eq!(s.facts.single_pod_volumes().get("pv-1"), Some(&SinglePodReason::ReadWriteOncePod));
}

#[tokio::test]
async fn a_pod_added_later_brings_its_claim_and_volume_and_a_deleted_pod_takes_them_away() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.apply(PVCS, claim("shop", "logs", "ReadWriteOncePod", "pv-logs"));
    fake.apply(PVS, volume("pv-logs", "ReadWriteOncePod", "shop", "logs"));
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "the first list is in", |s| !s.facts.pods.is_empty()).await;
    assert_eq!((fake.open_watches(PVCS), fake.open_watches(PVS)), (1, 1));

    fake.apply(PODS, pod_with_claims("logger", "uid-l", NODE, &["logs"]));
    let s =
        snapshot_where(&mut rx, "the new pod's claim and volume", |s| s.facts.persistent_volume("pv-logs").is_some())
            .await;
    assert_eq!(claim_keys(&s.facts), ["shop/data", "shop/logs"]);
    assert_eq!(s.facts.single_pod_volumes().len(), 2);
    assert_eq!(s.stale, None);
    assert_eq!((fake.open_watches(PVCS), fake.open_watches(PVS)), (2, 2));

    fake.delete(PODS, "shop/logger");
    let s = snapshot_where(&mut rx, "the claim and volume are gone", |s| s.facts.pod("uid-l").is_none()).await;
    let s = if s.facts.persistent_volume("pv-logs").is_some() {
        snapshot_where(&mut rx, "pv-logs is dropped", |s| s.facts.persistent_volume("pv-logs").is_none()).await
    } else {
        s
    };
    assert_eq!(claim_keys(&s.facts), ["shop/data"]);
    assert_eq!(volume_names(&s.facts), ["pv-1"]);
    eventually("the two watches closed", WAIT, || async {
        (fake.open_watches(PVCS) == 1 && fake.open_watches(PVS) == 1).then_some(())
    })
    .await;

    fake.delete(PODS, "shop/db-0");
    snapshot_where(&mut rx, "no claim is followed", |s| {
        s.facts.persistent_volume_claims.is_empty() && s.facts.persistent_volumes.is_empty()
    })
    .await;
    eventually("no watch of claims or volumes", WAIT, || async {
        (fake.open_watches(PVCS) == 0 && fake.open_watches(PVS) == 0).then_some(())
    })
    .await;
}

/// A ReadWriteOnce claim in use is annotated single-pod: the annotation reaches the facts
/// through the claim's own watch, within a watch event and the coalescing delay.
#[tokio::test]
async fn an_annotation_added_to_a_followed_claim_in_use_reaches_the_facts() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.apply(PVCS, claim("shop", "data", "ReadWriteOnce", "pv-1"));
    fake.apply(PVS, volume("pv-1", "ReadWriteOnce", "shop", "data"));
    let mut rx = start_source(&fake);
    let s = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.persistent_volumes.is_empty()).await;
    assert!(s.facts.single_pod_volumes().is_empty(), "ReadWriteOnce, not annotated");

    let mut annotated = claim("shop", "data", "ReadWriteOnce", "pv-1");
    annotated["metadata"]["annotations"] = json!({"volguard.io/single-pod": "true"});
    let applied = tokio::time::Instant::now();
    fake.apply(PVCS, annotated);
    let s = snapshot_where(&mut rx, "the annotation", |s| !s.facts.single_pod_volumes().is_empty()).await;
    assert_eq!(s.facts.single_pod_volumes().get("pv-1"), Some(&SinglePodReason::Annotated));
    let took = applied.elapsed();
    assert!(took < Duration::from_secs(2), "a watch event and {:?} of coalescing took {took:?}", source::COALESCE);
}

#[tokio::test]
async fn a_generic_ephemeral_volumes_claim_is_followed() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.apply(
        PODS,
        json!({"metadata": {"name": "web-0", "namespace": "shop", "uid": "uid-w"},
               "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}],
                        "volumes": [{"name": "scratch",
                                     "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOncePod"]}}}}]}}),
    );
    fake.apply(PVCS, claim("shop", "web-0-scratch", "ReadWriteOncePod", "pv-scratch"));
    fake.apply(PVS, volume("pv-scratch", "ReadWriteOncePod", "shop", "web-0-scratch"));
    let mut rx = start_source(&fake);
    let s = snapshot_where(&mut rx, "the ephemeral claim", |s| s.facts.persistent_volume("pv-scratch").is_some()).await;
    assert_eq!(claim_keys(&s.facts), ["shop/data", "shop/web-0-scratch"]);
    assert_eq!(s.facts.single_pod_volumes().get("pv-scratch"), Some(&SinglePodReason::ReadWriteOncePod));
}

/// The claim's watch expires and its relists answer 500: the facts go stale naming the
/// claim, keep it, and are fresh again once it lists.
#[tokio::test]
async fn a_failing_followed_watch_makes_the_facts_stale_naming_the_object_and_keeps_it() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    let first = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.persistent_volumes.is_empty()).await;

    fake.fail_lists(PVCS, true);
    fake.replace_and_expire(PVCS, vec![rwop_pvc("pv-1")]);
    let stale = snapshot_where(&mut rx, "stale naming the claim", |s| s.stale.is_some()).await;
    let why = stale.stale.clone().unwrap_or_default();
    assert!(why.starts_with("persistentvolumeclaims shop/data: "), "{why}");
    assert_eq!(stale.facts, first.facts, "the claim is kept");

    fake.fail_lists(PVCS, false);
    let healthy = snapshot_where(&mut rx, "fresh again", |s| s.stale.is_none() && s.synced_at > first.synced_at).await;
    assert_eq!(healthy.facts, first.facts);
}

/// The server ends the claim's watch (as at each watch's timeout) and the claim changes
/// before, or just after, the follower watches again: the follower resumes from the last
/// version it saw, without a list, and the change is not missed.
#[tokio::test]
async fn a_followed_watch_the_server_ends_resumes_from_its_version_and_misses_nothing() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    snapshot_where(&mut rx, "the first list is in", |s| !s.facts.persistent_volumes.is_empty()).await;
    let (lists, watches) = (list_requests(&fake, PVCS), watch_requests(&fake, PVCS));

    fake.end_watches(PVCS);
    let mut annotated = rwop_pvc("pv-1");
    annotated["metadata"]["annotations"] = json!({"volguard.io/single-pod": "true"});
    fake.apply(PVCS, annotated);
    let s = snapshot_where(&mut rx, "the change made around the watch's end", |s| {
        s.facts.persistent_volume_claims.iter().any(|c| c.annotations.contains_key("volguard.io/single-pod"))
    })
    .await;
    assert_eq!(s.stale, None, "a watch's end is not a failure");
    eventually("the claim watched again", WAIT, || async { (fake.open_watches(PVCS) == 1).then_some(()) }).await;
    assert_eq!(list_requests(&fake, PVCS), lists, "resumed without a list");
    assert!(watch_requests(&fake, PVCS) > watches);
}

/// A watch line that is not a watch event: the facts go stale naming the volume and keep it,
/// and the follower lists again and is fresh.
#[tokio::test]
async fn a_garbled_watch_event_makes_the_facts_stale_and_the_follower_lists_again() {
    let fake = FakeApi::start().await;
    seed(&fake);
    let mut rx = start_source(&fake);
    let first = snapshot_where(&mut rx, "the first list is in", |s| !s.facts.persistent_volumes.is_empty()).await;
    let lists = list_requests(&fake, PVS);

    fake.send_raw_line(PVS, r#"{"type": "MODIFIED", "object": {"#);
    let stale = snapshot_where(&mut rx, "stale naming the volume", |s| s.stale.is_some()).await;
    let why = stale.stale.clone().unwrap_or_default();
    assert!(why.starts_with("persistentvolumes pv-1: a watch event: "), "{why}");
    assert_eq!(stale.facts, first.facts, "the volume is kept");
    let healthy = snapshot_where(&mut rx, "fresh again", |s| s.stale.is_none() && s.synced_at > first.synced_at).await;
    assert_eq!(healthy.facts, first.facts);
    assert!(list_requests(&fake, PVS) > lists, "listed again");
}

/// Real clusters speak TLS: building an https client must work with the chosen rustls
/// features (one crypto provider, no panic), and a request to nowhere is an error, not a hang.
#[tokio::test]
async fn an_https_client_builds_and_fails_cleanly_without_a_server() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let uri: axum::http::Uri = format!("https://{addr}").parse().expect("uri");
    let client = kube::Client::try_from(kube::Config::new(uri.clone())).expect("an https client");
    let result = tokio::time::timeout(WAIT, client.apiserver_version()).await.expect("no hang");
    assert!(result.is_err(), "nothing listens there");
    let client = http2_client(kube::Config::new(uri)).expect("the agent's HTTP/2 client");
    let result = tokio::time::timeout(WAIT, client.apiserver_version()).await.expect("no hang");
    assert!(result.is_err(), "nothing listens there");
}
