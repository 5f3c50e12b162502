//! The Events task against the fake API server ([`crate::support::fake_api`]): a conflict
//! becomes a Warning Event on the refused pod, bursts are one Event, and what cannot become
//! one is counted.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use serde_json::json;
use tokio::sync::mpsc;
use volguard::{
    facts::Facts,
    model::explain::{Conflict, ConflictAction},
    outputs::events::{self, EventCounters},
};

use crate::support::fake_api::{FakeApi, eventually};

const NODE: &str = "node-1";
const WAIT: Duration = Duration::from_secs(30);

fn conflict_facts() -> Facts {
    serde_json::from_value(json!({
        "pods": [
            {"uid": "uid-a", "namespace": "shop", "name": "db-0"},
            {"uid": "uid-b", "namespace": "shop", "name": "db-1"},
        ],
        "persistentVolumes": [{"name": "pv-1", "accessModes": ["ReadWriteOncePod"], "claimRef": "shop/data"}],
    }))
    .expect("facts")
}

fn start_events(fake: &FakeApi) -> (mpsc::Sender<Conflict>, Arc<EventCounters>) {
    let (tx, rx) = mpsc::channel(64);
    let counters = Arc::new(EventCounters::default());
    tokio::spawn(events::run(fake.client(), NODE.into(), rx, counters.clone()));
    (tx, counters)
}

fn count(counter: &std::sync::atomic::AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

#[tokio::test]
async fn a_conflict_becomes_a_warning_event_on_the_refused_pod() {
    let fake = FakeApi::start().await;
    let (tx, counters) = start_events(&fake);
    let conflict = Conflict::resolve(&conflict_facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
    tx.try_send(conflict.clone()).expect("room in the channel");
    let events = eventually("one Event", WAIT, || async { Some(fake.events()).filter(|e| !e.is_empty()) }).await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "SinglePodVolumeRefused");
    assert_eq!(e["note"], conflict.message().as_str());
    assert_eq!(e["action"], "Mount");
    assert_eq!(e["metadata"]["namespace"], "shop");
    assert_eq!(
        e["regarding"],
        json!({"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "db-1",
                                       "uid": "uid-b"})
    );
    assert_eq!(e["related"]["uid"], "uid-a");
    assert_eq!(e["reportingController"], "volguard");
    assert_eq!(e["reportingInstance"], NODE);
    assert!(e["eventTime"].is_string(), "{e}");
    assert!(fake.requests().iter().any(|r| r.resource == "events/shop"), "created in the pod's namespace");
    assert_eq!(count(&counters.posted), 1);
}

#[tokio::test]
async fn a_burst_of_identical_conflicts_is_one_event() {
    let fake = FakeApi::start().await;
    let (tx, counters) = start_events(&fake);
    let conflict = Conflict::resolve(&conflict_facts(), ConflictAction::Quarantined, "pv-1", "uid-b", "uid-a");
    for _ in 0..10 {
        tx.try_send(conflict.clone()).expect("room in the channel");
    }
    eventually("all ten handled", WAIT, || async {
        (count(&counters.posted) + count(&counters.suppressed) == 10).then_some(())
    })
    .await;
    assert_eq!(count(&counters.suppressed), 9);
    let events = fake.events();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["reason"], "SinglePodVolumeQuarantined");
}

#[tokio::test]
async fn unknown_pods_and_failed_creates_are_counted() {
    let mut fake = FakeApi::start().await;
    let (tx, counters) = start_events(&fake);
    let facts = conflict_facts();
    let unknown = Conflict::resolve(&facts, ConflictAction::Refused, "pv-1", "uid-unknown", "uid-a");
    tx.try_send(unknown).expect("room");
    eventually("the unknown pod counted", WAIT, || async { (count(&counters.unaddressable) == 1).then_some(()) }).await;
    assert!(fake.events().is_empty());

    fake.stop().await;
    let refused = Conflict::resolve(&facts, ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
    tx.try_send(refused).expect("room");
    eventually("the failed create counted", WAIT, || async { (count(&counters.failed) == 1).then_some(()) }).await;

    fake.restart().await;
    let audited = Conflict::resolve(&facts, ConflictAction::Audited, "pv-1", "uid-b", "uid-a");
    tx.try_send(audited).expect("room");
    eventually("the next conflict still posted", WAIT, || async { (count(&counters.posted) == 1).then_some(()) }).await;
    assert_eq!(fake.events().len(), 1);
}
