//! Conflicts on pods the facts do not name yet. kubelet publishes a new pod's volume as
//! soon as its own watch delivers the pod, which can be before the agent's watch has (seen
//! on a real node: the quarantine came 1.4 s after the pod's creation and its Event was
//! dropped for want of a name). Such a conflict waits here and is re-resolved whenever the
//! facts change; after [`WAIT`] it goes out as it is (and is logged as unaddressable).

use std::{collections::VecDeque, time::Duration};

use tokio::time::Instant;

use crate::{facts::Facts, model::explain::Conflict};

/// How long a conflict waits for its pod to appear in the facts.
pub const WAIT: Duration = Duration::from_secs(60);
/// How many conflicts may wait; beyond that the oldest goes out unnamed.
pub const CAPACITY: usize = 256;

/// A conflict waiting for its pod's name.
struct Waiting {
    since: Instant,
    conflict: Conflict,
}

impl Waiting {
    /// The conflict with its pods and claim named by `facts` (who made the mount, the
    /// route and the mount point kept).
    fn resolve(&self, facts: &Facts) -> Conflict {
        let c = &self.conflict;
        Conflict::resolve(facts, c.action, &c.volume, &c.pod.uid, &c.owner.uid)
            .made_by(c.by.clone())
            .routed(c.route, c.mount_point.clone())
    }
}

#[derive(Default)]
pub struct Unnamed {
    waiting: VecDeque<Waiting>,
}

impl Unnamed {
    /// Keeps a conflict whose pod the facts do not name; returns one that must go out now
    /// to make room, if any.
    pub fn hold(&mut self, facts: &Facts, conflict: Conflict) -> Option<Conflict> {
        let overflow = (self.waiting.len() >= CAPACITY).then(|| self.waiting.pop_front()).flatten();
        self.waiting.push_back(Waiting { since: Instant::now(), conflict });
        overflow.map(|w| w.resolve(facts))
    }

    /// The conflicts that can go out now: those whose pod the facts name, and those that
    /// waited longer than [`WAIT`].
    pub fn ready(&mut self, facts: &Facts, now: Instant) -> Vec<Conflict> {
        let mut out = Vec::new();
        self.waiting.retain(|w| {
            let conflict = w.resolve(facts);
            let go = conflict.pod.name.is_some() || now.duration_since(w.since) >= WAIT;
            if go {
                out.push(conflict);
            }
            !go
        });
        out
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        facts::{Pod, fixtures::sample_facts},
        model::explain::ConflictAction,
    };

    fn quarantined(facts: &Facts, pod_uid: &str) -> Conflict {
        Conflict::resolve(facts, ConflictAction::Quarantined, "pv-1", pod_uid, "uid-a")
    }

    #[test]
    fn a_conflict_waits_for_its_pod_to_be_named() {
        let mut unnamed = Unnamed::default();
        let mut facts = sample_facts();
        let now = Instant::now();
        assert!(unnamed.hold(&facts, quarantined(&facts, "uid-new")).is_none());
        assert!(unnamed.ready(&facts, now).is_empty(), "the pod is not in the facts yet");
        facts = facts.clone(); // new facts, as a source publishes them (a `Facts` in use does not change)
        facts.pods.push(Pod {
            uid: "uid-new".into(),
            namespace: "shop".into(),
            name: "db-2".into(),
            terminating: false,
            service_account: String::new(),
            labels: Default::default(),
            volumes: vec![],
        });
        let out = unnamed.ready(&facts, now);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].pod.name.as_deref(), Some("db-2"));
        assert!(unnamed.is_empty());
    }

    #[test]
    fn a_conflict_goes_out_unnamed_after_the_wait_and_the_oldest_on_overflow() {
        let mut unnamed = Unnamed::default();
        let facts = sample_facts();
        unnamed.hold(&facts, quarantined(&facts, "uid-gone"));
        let later = Instant::now() + WAIT;
        let out = unnamed.ready(&facts, later);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].pod.name, None);
        for i in 0..CAPACITY {
            assert!(unnamed.hold(&facts, quarantined(&facts, &format!("uid-{i}"))).is_none());
        }
        let pushed_out = unnamed.hold(&facts, quarantined(&facts, "uid-last"));
        assert_eq!(pushed_out.map(|c| c.pod.uid), Some("uid-0".to_owned()));
    }
}
