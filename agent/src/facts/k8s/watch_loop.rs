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
pub const RESTART_MIN: Duration = Duration::from_millis(500);
pub const RESTART_MAX: Duration = Duration::from_secs(30);
/// A watcher that ran this long before failing starts its restart delay from the minimum again.
pub const RESTART_RESET_AFTER: Duration = Duration::from_secs(120);

/// How long a failed watcher waits before it lists again.
pub struct RestartDelay {
    next: Duration,
}

impl Default for RestartDelay {
    fn default() -> Self {
        Self { next: RESTART_MIN }
    }
}

impl RestartDelay {
    /// The wait after a watcher that ran for `ran` failed: [`RESTART_MIN`], doubling at each
    /// failure up to [`RESTART_MAX`], from the minimum again after a run of
    /// [`RESTART_RESET_AFTER`].
    pub fn after_failure(&mut self, ran: Duration) -> Duration {
        if ran > RESTART_RESET_AFTER {
            self.next = RESTART_MIN;
        }
        let delay = self.next;
        self.next = (delay * 2).min(RESTART_MAX);
        delay
    }
}

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
    let mut restart = RestartDelay::default();
    loop {
        let started = Instant::now();
        match watch_until_failure(id, &label, start(), &mut writer, &signals).await {
            WatchEnd::ChannelClosed => return,
            WatchEnd::Failed => {}
        }
        let delay = restart.after_failure(started.elapsed());
        tracing::debug!(watched = label.as_str(), ?delay, "re-listing after a watch failure");
        tokio::time::sleep(delay).await;
    }
}

enum WatchEnd {
    ChannelClosed,
    Failed,
}

async fn watch_until_failure<K, S>(
    id: WatcherId,
    label: &str,
    stream: S,
    writer: &mut Writer<K>,
    signals: &Signals,
) -> WatchEnd
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
                    return WatchEnd::ChannelClosed;
                }
                if listed {
                    return WatchEnd::Failed;
                }
                // Not listed yet: the watcher retries the list itself, with backoff.
                continue;
            }
        };
        if signals.send((id, signal)).await.is_err() {
            return WatchEnd::ChannelClosed;
        }
    }
    // The watcher's stream never ends; treat an end like a failure.
    WatchEnd::Failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restart_delay_doubles_to_its_cap_and_starts_over_after_a_long_run() {
        let mut restart = RestartDelay::default();
        let short = Duration::from_secs(1);
        let delays: Vec<_> = (0..9).map(|_| restart.after_failure(short).as_millis()).collect();
        assert_eq!(delays, [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
        assert_eq!(restart.after_failure(RESTART_RESET_AFTER + short), RESTART_MIN);
        assert_eq!(restart.after_failure(short), RESTART_MIN * 2);
    }
}
