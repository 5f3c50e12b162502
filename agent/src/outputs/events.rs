//! Kubernetes Events for conflicts: a Warning on the refused pod saying which volume, which
//! PVC and which pod holds it (`kubectl describe pod` shows it).
//!
//! Events are `events.k8s.io/v1` objects created directly (not through kube's `Recorder`,
//! whose series PATCHes would keep the first note and lose the "N similar reports
//! suppressed" count); [`RateLimiter`] already decides what is worth an Event.
//! The caller hands conflicts over with `try_send` on a bounded channel, so a slow or
//! unreachable API server never blocks it; a failed create is logged and not retried.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{PostParams, ResourceExt},
};
use tokio::sync::mpsc;

use crate::model::explain::{Conflict, PodRef, RateLimiter, Verdict};

/// `reportingController` of every Event volguard creates.
pub const REPORTING_CONTROLLER: &str = "volguard";
/// The Event's `action`: what was being done to the pod.
pub const ACTION: &str = "Mount";
/// One Event per (pod, volume, action, route) per this window.
pub const WINDOW: Duration = Duration::from_secs(60);
/// How many (pod, volume, action, route) keys the limiter remembers.
pub const LIMITER_CAPACITY: usize = 4096;
/// A create that takes longer than this is given up (and logged).
pub const POST_TIMEOUT: Duration = Duration::from_secs(10);
/// The API server's limit on `note` (bytes).
const NOTE_MAX: usize = 1024;
/// The API server's limit on `reportingInstance`, `reason` and `action`.
const FIELD_MAX: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("creating the Event failed: {0}")]
    Create(#[from] kube::Error),
    #[error("creating the Event timed out after {0:?}")]
    Timeout(Duration),
}

/// What the events task did, for logs and metrics.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Events the API server accepted.
    pub posted: AtomicU64,
    /// Creates that failed or timed out.
    pub failed: AtomicU64,
    /// Conflicts the rate limiter held back.
    pub suppressed: AtomicU64,
    /// Conflicts whose pod has no namespace/name in the facts: no Event can name it.
    pub unaddressable: AtomicU64,
}

impl EventCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Creates a Warning Event for each conflict the rate limiter lets through; runs until
/// every sender of `conflicts` is gone. `node_name` is the Events' `reportingInstance`.
pub async fn run(
    client: Client,
    node_name: String,
    mut conflicts: mpsc::Receiver<Conflict>,
    counters: Arc<EventCounters>,
) {
    let mut limiter = RateLimiter::new(WINDOW, LIMITER_CAPACITY);
    while let Some(conflict) = conflicts.recv().await {
        let held_back = match limiter.check(&conflict, Instant::now()) {
            Verdict::Send { held_back } => held_back,
            Verdict::Suppress => {
                counters.suppressed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let Some(event) = event_for(&conflict, held_back, &node_name, Timestamp::now()) else {
            counters.unaddressable.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                pod = %conflict.pod,
                volume = conflict.volume.as_str(),
                reason = conflict.reason(),
                "conflict on a pod the facts do not name: no Event can be created for it"
            );
            continue;
        };
        match create(&client, &event).await {
            Ok(()) => {
                counters.posted.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    pod = %conflict.pod,
                    volume = conflict.volume.as_str(),
                    %error,
                    "could not create the conflict Event (not retried)"
                );
            }
        }
    }
}

async fn create(client: &Client, event: &Event) -> Result<(), EventsError> {
    let namespace = event.namespace().unwrap_or_default();
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    match tokio::time::timeout(POST_TIMEOUT, api.create(&PostParams::default(), event)).await {
        Ok(result) => result.map(drop).map_err(EventsError::from),
        Err(_) => Err(EventsError::Timeout(POST_TIMEOUT)),
    }
}

fn pod_reference(pod: &PodRef) -> Option<ObjectReference> {
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone().filter(|n| !n.is_empty())?),
        name: Some(pod.name.clone().filter(|n| !n.is_empty())?),
        uid: Some(pod.uid.clone()),
        ..ObjectReference::default()
    })
}

fn truncate(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// The Event for one conflict, or `None` when the refused pod's namespace/name is unknown.
/// `regarding` is the refused pod, `related` the pod holding the volume (when known).
pub fn event_for(conflict: &Conflict, held_back: u64, node_name: &str, now: Timestamp) -> Option<Event> {
    let regarding = pod_reference(&conflict.pod)?;
    let namespace = regarding.namespace.clone()?;
    let pod_name = regarding.name.as_deref().unwrap_or_default();
    let mut note = conflict.message();
    if held_back > 0 {
        note.push_str(&format!(" ({held_back} similar reports suppressed)"));
    }
    // Like kube's Recorder and client-go: `<object>.<hex nanoseconds>`, unique enough and
    // within the 253 characters of a name.
    let name = format!("{}.{:x}", truncate(pod_name, 200), now.as_nanosecond());
    Some(Event {
        metadata: ObjectMeta { name: Some(name), namespace: Some(namespace), ..ObjectMeta::default() },
        event_time: Some(MicroTime(now)),
        type_: Some("Warning".into()),
        reason: Some(conflict.reason().into()),
        action: Some(ACTION.into()),
        note: Some(truncate(&note, NOTE_MAX)),
        regarding: Some(regarding),
        related: pod_reference(&conflict.owner),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(truncate(node_name, FIELD_MAX)),
        ..Event::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{facts::Facts, model::explain::ConflictAction};

    fn facts() -> Facts {
        crate::facts::fixtures::sample_facts()
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).expect("valid")
    }

    #[test]
    fn the_event_names_the_refused_pod_and_the_holder() {
        let c = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
        let e = event_for(&c, 0, "node-1", now()).expect("addressable");
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert!(e.metadata.name.as_deref().is_some_and(|n| n.starts_with("db-1.")), "{:?}", e.metadata.name);
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("SinglePodVolumeRefused"));
        assert_eq!(e.action.as_deref(), Some("Mount"));
        assert_eq!(e.note, Some(c.message()));
        let regarding = e.regarding.expect("regarding");
        assert_eq!(
            (regarding.kind.as_deref(), regarding.namespace.as_deref(), regarding.name.as_deref()),
            (Some("Pod"), Some("shop"), Some("db-1"))
        );
        assert_eq!(regarding.uid.as_deref(), Some("uid-b"));
        assert_eq!(e.related.and_then(|r| r.uid).as_deref(), Some("uid-a"));
        assert_eq!(e.reporting_controller.as_deref(), Some("volguard"));
        assert_eq!(e.reporting_instance.as_deref(), Some("node-1"));
        assert!(e.event_time.is_some());
    }

    #[test]
    fn suppressed_reports_are_counted_in_the_note() {
        let c = Conflict::resolve(&facts(), ConflictAction::Quarantined, "pv-1", "uid-b", "uid-a");
        let e = event_for(&c, 7, "node-1", now()).expect("addressable");
        assert_eq!(e.note, Some(format!("{} (7 similar reports suppressed)", c.message())));
        assert_eq!(e.reason.as_deref(), Some("SinglePodVolumeQuarantined"));
    }

    #[test]
    fn unknown_pods_get_no_event_and_unknown_holders_no_related() {
        let unknown = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-x", "uid-a");
        assert!(event_for(&unknown, 0, "n", now()).is_none());
        let unknown_holder = Conflict::resolve(&facts(), ConflictAction::Audited, "pv-1", "uid-b", "uid-x");
        let e = event_for(&unknown_holder, 0, "n", now()).expect("addressable");
        assert_eq!(e.related, None);
    }

    #[test]
    fn long_fields_are_cut_to_the_api_limits() {
        assert_eq!(truncate("héllo", 2), "h", "never inside a character");
        let mut c = Conflict::resolve(&facts(), ConflictAction::Refused, "pv-1", "uid-b", "uid-a");
        c.volume = "v".repeat(2000);
        let e = event_for(&c, 0, &"n".repeat(300), now()).expect("addressable");
        assert_eq!(e.note.map(|n| n.len()), Some(NOTE_MAX));
        assert_eq!(e.reporting_instance.map(|n| n.len()), Some(FIELD_MAX));
    }
}
