//! One watcher kept alive for good: it feeds a reflector store and tells the publishing
//! loop what happened ([`Signal`]). A watcher that fails after its first list is replaced
//! by a fresh one (a full re-list) after a growing delay; the store keeps its objects until
//! the new list completes, so nothing is released because the API is unreachable.

use std::{
    fmt::Debug,
    pin::pin,
    time::{Duration, Instant},
};

use futures::{Stream, StreamExt};
use kube::{
    Resource, ResourceExt,
    runtime::{WatchStreamExt, reflector::store::Writer, watcher},
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::health::{Kind, Signal};

/// The first wait before a failed watcher lists again; doubles up to [`RESTART_MAX`].
const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// A watcher that ran this long before failing starts its restart delay from the minimum again.
const RESTART_RESET_AFTER: Duration = Duration::from_secs(120);

/// Which watcher a signal comes from: a kind's, or a followed object's (by a number never
/// reused, so a signal still queued from a stopped follower is recognised and dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatcherId {
    Kind(Kind),
    Follower(u64),
}

pub type Signals = mpsc::Sender<(WatcherId, Signal)>;

/// Runs watchers made by `start` forever, feeding `writer`; `label` names the watcher in
/// logs. Returns when the publishing loop is gone.
pub async fn watch_forever<K, S>(
    id: WatcherId,
    label: String,
    start: impl Fn() -> S,
    mut writer: Writer<K>,
    signals: Signals,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let mut delay = RESTART_MIN;
    loop {
        let started = Instant::now();
        match watch_until_failure(id, &label, start(), &mut writer, &signals).await {
            Stop::ChannelClosed => return,
            Stop::Failed => {}
        }
        if started.elapsed() > RESTART_RESET_AFTER {
            delay = RESTART_MIN;
        }
        tracing::debug!(watched = label.as_str(), ?delay, "re-listing after a watch failure");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RESTART_MAX);
    }
}

enum Stop {
    ChannelClosed,
    Failed,
}

async fn watch_until_failure<K, S>(
    id: WatcherId,
    label: &str,
    stream: S,
    writer: &mut Writer<K>,
    signals: &Signals,
) -> Stop
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    S: Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
{
    let mut stream = pin!(stream.default_backoff().modify(|o: &mut K| o.managed_fields_mut().clear()));
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
                tracing::debug!(watched = label, "watch expired (410 Gone), re-listing");
                continue;
            }
            Err(error) => {
                tracing::warn!(watched = label, %error, "Kubernetes watch failed");
                if signals.send((id, Signal::Failed(error.to_string()))).await.is_err() {
                    return Stop::ChannelClosed;
                }
                if listed {
                    return Stop::Failed;
                }
                // Not listed yet: the watcher retries the list itself, with backoff.
                continue;
            }
        };
        if signals.send((id, signal)).await.is_err() {
            return Stop::ChannelClosed;
        }
    }
    // The watcher's stream never ends; treat an end like a failure.
    Stop::Failed
}
