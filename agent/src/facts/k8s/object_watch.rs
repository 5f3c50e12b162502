//! One named object followed for good, with as little memory as that takes: a list
//! narrowed to its name (`fieldSelector=metadata.name=<name>`), then a watch from the
//! list's resourceVersion, watched again from the last version seen when the server ends it
//! (every ~290 s), listed again after a 410 Gone or a failure. The object's facts sit in a
//! [`Slot`] the follower's owner reads.
//!
//! A node's pods follow hundreds of PVCs and PVs. kube's `watcher` with a reflector store
//! cost ~27 KiB of heap per object (heap profile of benchmark 3c): a 9–14 KiB task future
//! (the whole list/watch state machine inline), the 8 KiB line buffer `FramedRead`
//! allocates up front, a hash-map store. Here the task rests on the watch's response body
//! alone (requests in flight are boxed), a watch event's line buffer is as large as the
//! event and is dropped when large, and the slot keeps the object's facts, not the object
//! (a `PersistentVolume` is ~3.5 KiB however few of its fields are set).
//!
//! The signals keep [`super::watch_loop`]'s meaning: [`Signal::Listed`] after each list,
//! [`Signal::Changed`] per event, [`Signal::Failed`] when a list or watch fails, after
//! which the object is listed again after a growing delay. A failure keeps the object in
//! its slot: nothing is released because the API is unreachable.

use std::{
    fmt::Debug,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::{
    Client, Resource, ResourceExt,
    api::{ListParams, ObjectList, WatchEvent, WatchParams},
    core::Request,
};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use super::{
    health::Signal,
    watch_loop::{RESTART_MIN, RestartDelay, Signals, WatcherId},
};

/// A kind of object that can be followed, and what of it is kept.
pub trait Followed: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    type Fact: Send + Sync + 'static;

    /// What the agent keeps of the object; `None` for an object it cannot use (the
    /// conversion says why).
    fn fact(&self) -> Option<Self::Fact>;
}

/// Where a followed object's facts are kept: `None` until listed, and while the object
/// does not exist (or cannot be used).
pub type Slot<F> = Arc<Mutex<Option<Arc<F>>>>;

/// The facts in `slot`, if the object is listed and exists.
pub fn read<F>(slot: &Slot<F>) -> Option<Arc<F>> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn store<F>(slot: &Slot<F>, fact: Option<F>) {
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = fact.map(Arc::new);
}

/// How many followers may list at once. A node's pods bring hundreds of objects to follow
/// at the same moment (start-up, a rollout); unbounded, all their lists' buffers were alive
/// at once and the allocator's arenas kept what they freed (bench 3c, 400 objects: +4.2–5.0
/// MiB over idle unbounded, +3.1–3.6 with 8). 400 lists of one object take ~50 round trips.
/// It also spares the API server a burst from every node of a rolling DaemonSet.
pub const LISTS_AT_ONCE: usize = 8;

/// The followers' shared client, and the bound on their lists in flight.
#[derive(Clone)]
pub struct Lister {
    client: Client,
    permits: Arc<Semaphore>,
}

impl Lister {
    pub fn new(client: Client) -> Self {
        Self { client, permits: Arc::new(Semaphore::new(LISTS_AT_ONCE)) }
    }
}

/// The server ends a watch after this long (kube's default); a watch silent for longer,
/// plus [`IDLE_MARGIN`], is taken as a dead connection.
const WATCH_TIMEOUT_SECS: u32 = 290;
const IDLE_MARGIN: Duration = Duration::from_secs(5);
/// A line buffer grown beyond this by a large event is dropped after it, not kept.
const LINE_BUFFER_KEPT: usize = 16 * 1024;

/// Which object to follow: the collection's URL path, the object's name, and what logs
/// call it.
pub struct NamedObject {
    request: Request,
    name: String,
    label: String,
}

impl NamedObject {
    /// The object `name` of kind `K`, in `namespace` for a namespaced kind.
    pub fn new<K: Followed>(namespace: Option<&str>, name: &str, label: String) -> Self {
        Self { request: Request::new(K::url_path(&(), namespace)), name: name.to_owned(), label }
    }

    fn field_selector(&self) -> String {
        format!("metadata.name={}", self.name)
    }

    /// Whether `object` is this one: the selector says so, a fake or broken server may not.
    fn is<K: Followed>(&self, object: &K) -> bool {
        object.name_any() == self.name
    }
}

/// Why a list or watch stopped short of its job.
#[derive(Debug)]
enum Stop {
    /// The publishing loop is gone: the follower ends.
    ChannelClosed,
    /// Listed again after a short pause (410 Gone: the version watched from is too old).
    Expired,
    Failed(String),
}

/// Follows `object` into `slot` until the publishing loop is gone, telling it what
/// happened as `id`.
pub async fn follow_forever<K: Followed>(
    lister: Lister,
    object: NamedObject,
    slot: Slot<K::Fact>,
    id: WatcherId,
    signals: Signals,
) {
    let mut restart = RestartDelay::default();
    loop {
        let started = Instant::now();
        let error = match follow_until_failure::<K>(&lister, &object, &slot, id, &signals).await {
            Stop::ChannelClosed => return,
            Stop::Expired => {
                // Not a failure, but not a reason to list in a tight loop either.
                tokio::time::sleep(RESTART_MIN).await;
                continue;
            }
            Stop::Failed(error) => error,
        };
        tracing::warn!(watched = object.label.as_str(), error = error.as_str(), "Kubernetes watch failed");
        if signals.send((id, Signal::Failed(error))).await.is_err() {
            return;
        }
        tokio::time::sleep(restart.after_failure(started.elapsed())).await;
    }
}

/// One list, then watches from its version until one fails or expires.
async fn follow_until_failure<K: Followed>(
    lister: &Lister,
    object: &NamedObject,
    slot: &Slot<K::Fact>,
    id: WatcherId,
    signals: &Signals,
) -> Stop {
    let mut version = match Box::pin(list_into::<K>(lister, object, slot)).await {
        Ok(version) => version,
        Err(error) => return Stop::Failed(error),
    };
    if signals.send((id, Signal::Listed)).await.is_err() {
        return Stop::ChannelClosed;
    }
    loop {
        let params = WatchParams::default().fields(&object.field_selector()).timeout(WATCH_TIMEOUT_SECS);
        let request = match object.request.watch(&params, &version) {
            Ok(request) => request,
            Err(error) => return Stop::Failed(format!("watch request: {error}")),
        };
        let body = match Box::pin(lister.client.request_stream(request)).await {
            Ok(body) => body,
            Err(kube::Error::Api(status)) if status.code == 410 => return expired(object),
            Err(error) => return Stop::Failed(error.to_string()),
        };
        match read_events::<K>(body, object, slot, &mut version, id, signals).await {
            Ok(()) => {} // the server ended the watch: watch again from `version`
            Err(stop) => return stop,
        }
    }
}

fn expired(object: &NamedObject) -> Stop {
    tracing::debug!(watched = object.label.as_str(), "watch expired (410 Gone), re-listing");
    Stop::Expired
}

/// Lists the object into `slot` (`None` if it does not exist), served from the API
/// server's cache like kube's watcher does (`resourceVersion=0`); the list's resourceVersion.
async fn list_into<K: Followed>(lister: &Lister, object: &NamedObject, slot: &Slot<K::Fact>) -> Result<String, String> {
    let _permit = lister.permits.acquire().await.map_err(|e| e.to_string())?;
    let params = ListParams::default().match_any().fields(&object.field_selector());
    let request = object.request.list(&params).map_err(|e| format!("list request: {e}"))?;
    let list: ObjectList<K> = lister.client.request(request).await.map_err(|e| e.to_string())?;
    let version = list.metadata.resource_version.filter(|v| !v.is_empty()).ok_or("a list without resourceVersion")?;
    store(slot, list.items.iter().find(|o| object.is(*o)).and_then(Followed::fact));
    Ok(version)
}

/// Reads watch events off `body` into `slot` until the server ends the watch (`Ok`).
async fn read_events<K: Followed>(
    body: impl AsyncBufRead,
    object: &NamedObject,
    slot: &Slot<K::Fact>,
    version: &mut String,
    id: WatcherId,
    signals: &Signals,
) -> Result<(), Stop> {
    let mut body = std::pin::pin!(body);
    let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS)) + IDLE_MARGIN;
    let mut line = Vec::new();
    loop {
        line.clear();
        if line.capacity() > LINE_BUFFER_KEPT {
            line = Vec::new();
        }
        let read = match tokio::time::timeout(idle, body.read_until(b'\n', &mut line)).await {
            Ok(read) => read.map_err(|e| Stop::Failed(format!("watch stream: {e}")))?,
            Err(_) => return Err(Stop::Failed(format!("no watch event nor end in {idle:?}"))),
        };
        // The end, or a line cut off by it: what it held comes again from `version`.
        if read == 0 || line.last() != Some(&b'\n') {
            return Ok(());
        }
        if line.trim_ascii().is_empty() {
            continue;
        }
        if !apply_event::<K>(&line, object, slot, version)? {
            continue;
        }
        if signals.send((id, Signal::Changed)).await.is_err() {
            return Err(Stop::ChannelClosed);
        }
    }
}

/// Applies one watch event's line to `slot` and `version`; whether the object changed.
/// Not async, so that no object is held in the follower's future while it waits.
fn apply_event<K: Followed>(
    line: &[u8],
    object: &NamedObject,
    slot: &Slot<K::Fact>,
    version: &mut String,
) -> Result<bool, Stop> {
    let event: WatchEvent<K> = serde_json::from_slice(line).map_err(|e| Stop::Failed(format!("a watch event: {e}")))?;
    let (o, exists) = match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, true),
        WatchEvent::Deleted(o) => (o, false),
        WatchEvent::Bookmark(bookmark) => {
            advance(version, Some(bookmark.metadata.resource_version));
            return Ok(false);
        }
        WatchEvent::Error(status) if status.code == 410 => return Err(expired(object)),
        WatchEvent::Error(status) => return Err(Stop::Failed(format!("{} ({})", status.message, status.code))),
    };
    advance(version, o.resource_version());
    if !object.is(&o) {
        return Ok(false);
    }
    store(slot, if exists { o.fact() } else { None });
    Ok(true)
}

/// An event without a version leaves the one to watch from as it was: an empty version
/// would mean "from now" and could skip events.
fn advance(version: &mut String, seen: Option<String>) {
    if let Some(seen) = seen.filter(|v| !v.is_empty()) {
        *version = seen;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    /// A test kind whose facts are its name.
    impl Followed for ConfigMap {
        type Fact = String;

        fn fact(&self) -> Option<String> {
            self.metadata.name.clone()
        }
    }

    fn apply(line: &str, slot: &Slot<String>, version: &mut String) -> Result<bool, Stop> {
        let object = NamedObject::new::<ConfigMap>(None, "cm-1", "cm-1".into());
        apply_event::<ConfigMap>(line.as_bytes(), &object, slot, version)
    }

    fn event(kind: &str, name: &str, version: Option<&str>) -> String {
        let metadata = match version {
            Some(v) => serde_json::json!({"name": name, "resourceVersion": v}),
            None => serde_json::json!({"name": name}),
        };
        serde_json::json!({"type": kind, "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata}})
        .to_string()
    }

    fn name_in(slot: &Slot<String>) -> Option<String> {
        read(slot).map(|name| (*name).clone())
    }

    #[test]
    fn events_set_the_slot_and_the_version_to_watch_from() {
        let (slot, mut version) = (Slot::default(), "1".to_owned());
        assert!(apply(&event("ADDED", "cm-1", Some("5")), &slot, &mut version).unwrap());
        assert_eq!((name_in(&slot).as_deref(), version.as_str()), (Some("cm-1"), "5"));
        assert!(apply(&event("MODIFIED", "cm-1", None), &slot, &mut version).unwrap());
        assert_eq!(version, "5", "an event without a version keeps the last one");
        assert!(apply(&event("DELETED", "cm-1", Some("7")), &slot, &mut version).unwrap());
        assert_eq!((name_in(&slot), version.as_str()), (None, "7"));
    }

    #[test]
    fn a_bookmark_moves_the_version_and_changes_nothing() {
        let (slot, mut version) = (Slot::default(), "1".to_owned());
        apply(&event("ADDED", "cm-1", Some("2")), &slot, &mut version).unwrap();
        let bookmark = serde_json::json!({"type": "BOOKMARK", "object": {"kind": "ConfigMap",
            "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}});
        assert!(!apply(&bookmark.to_string(), &slot, &mut version).unwrap());
        assert_eq!((name_in(&slot).as_deref(), version.as_str()), (Some("cm-1"), "9"));
    }

    #[test]
    fn another_objects_events_change_nothing_but_the_version() {
        let (slot, mut version) = (Slot::default(), "1".to_owned());
        apply(&event("ADDED", "cm-1", Some("2")), &slot, &mut version).unwrap();
        assert!(!apply(&event("ADDED", "cm-other", Some("3")), &slot, &mut version).unwrap());
        assert!(!apply(&event("DELETED", "cm-other", Some("4")), &slot, &mut version).unwrap());
        assert_eq!((name_in(&slot).as_deref(), version.as_str()), (Some("cm-1"), "4"));
    }

    #[test]
    fn error_events_and_garbage_stop_the_watch_and_keep_the_object() {
        let (slot, mut version) = (Slot::default(), "1".to_owned());
        apply(&event("ADDED", "cm-1", Some("2")), &slot, &mut version).unwrap();
        let status = |code: u16| {
            serde_json::json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": "too old resource version", "reason": "Expired", "code": code}})
            .to_string()
        };
        assert!(matches!(apply(&status(410), &slot, &mut version), Err(Stop::Expired)));
        let failed = apply(&status(500), &slot, &mut version);
        assert!(matches!(&failed, Err(Stop::Failed(m)) if m == "too old resource version (500)"), "{failed:?}");
        let garbage = apply("{\"type\": \"MODIFIED\", \"object\": {", &slot, &mut version);
        assert!(matches!(&garbage, Err(Stop::Failed(m)) if m.starts_with("a watch event: ")), "{garbage:?}");
        assert_eq!((name_in(&slot).as_deref(), version.as_str()), (Some("cm-1"), "2"));
    }
}
