//! Where the agent's conflicts go once told (`super::conflicts`): the Kubernetes Events
//! task, or without an API the log at the same rate; and what telling them keeps.

use crate::model::explain;

/// Where conflicts go once told, and what telling them keeps.
pub(super) struct Outlets {
    /// Where conflicts go to become Kubernetes Events (none without an API).
    pub(super) events: Option<tokio::sync::mpsc::Sender<explain::Conflict>>,
    /// Without an API the would-be Events are logged, as rate-limited as real ones.
    pub(super) log_limiter: explain::RateLimiter,
    /// Conflicts whose pod the facts do not name yet, waiting to become Events.
    pub(super) unnamed: super::unnamed::Unnamed,
    /// `(volume, pod)` already reported as holding a single-pod volume another pod holds.
    pub(super) observed: std::collections::BTreeSet<(String, String)>,
}

impl Outlets {
    pub(super) fn new(events: Option<tokio::sync::mpsc::Sender<explain::Conflict>>) -> Self {
        Self {
            events,
            log_limiter: explain::RateLimiter::new(explain::EVENT_WINDOW, explain::EVENT_KEYS),
            unnamed: Default::default(),
            observed: Default::default(),
        }
    }
}
