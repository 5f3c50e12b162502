//! What the publishing loop knows about its watchers (which have listed, which fail) and
//! when a snapshot is worth publishing.

use std::{collections::BTreeMap, fmt, sync::Arc, time::SystemTime};

use crate::facts::{Facts, Origin, Snapshot};

/// The kinds watched as a whole: this node's pods, every CSIDriver, this node's CSINode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pods,
    CsiDrivers,
    CsiNode,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Pods, Kind::CsiDrivers, Kind::CsiNode];

    /// The API's plural resource name, as `stale` messages name the kind.
    pub fn resource(self) -> &'static str {
        match self {
            Kind::Pods => "pods",
            Kind::CsiDrivers => "csidrivers",
            Kind::CsiNode => "csinodes",
        }
    }
}

/// A namespaced object's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What one watcher watches: a whole kind, or one followed object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Watched {
    Kind(Kind),
    Claim(ObjectKey),
    Volume(String),
}

/// As `stale` names it: `pods`, `persistentvolumeclaims shop/data`, `persistentvolumes pv-1`.
impl fmt::Display for Watched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Watched::Kind(kind) => f.write_str(kind.resource()),
            Watched::Claim(key) => write!(f, "persistentvolumeclaims {key}"),
            Watched::Volume(name) => write!(f, "persistentvolumes {name}"),
        }
    }
}

/// What one watcher tells the publishing loop (after it has updated its store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A list (first or re-list) completed: the store holds the server's full state.
    Listed,
    /// An object was added, changed or deleted.
    Changed,
    /// The watcher failed; it recovers by itself.
    Failed(String),
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct WatcherHealth {
    listed: bool,
    error: Option<String>,
}

/// Per-watcher health: listed at least once, and the last error since the last good news.
/// The [`Kind`]s are always expected; followed objects are expected from [`Health::follow`]
/// until [`Health::forget`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Health {
    watchers: BTreeMap<Watched, WatcherHealth>,
}

impl Health {
    pub fn apply(&mut self, watched: &Watched, signal: Signal) {
        let health = self.watchers.entry(watched.clone()).or_default();
        match signal {
            Signal::Listed => {
                health.listed = true;
                health.error = None;
            }
            Signal::Changed => health.error = None,
            Signal::Failed(error) => health.error = Some(error),
        }
    }

    /// A newly followed object: expected, not listed yet.
    pub fn follow(&mut self, watched: Watched) {
        self.watchers.entry(watched).or_default();
    }

    /// An object no longer followed: neither expected nor failing any more.
    pub fn forget(&mut self, watched: &Watched) {
        self.watchers.remove(watched);
    }

    /// Every kind and every followed object has completed a first list.
    pub fn all_listed(&self) -> bool {
        let kinds_listed = Kind::ALL.iter().all(|k| self.watchers.get(&Watched::Kind(*k)).is_some_and(|h| h.listed));
        kinds_listed && self.watchers.values().all(|h| h.listed)
    }

    /// `"<watched>: <error>"` for every failing watcher, joined by `"; "`; `None` when all
    /// are healthy.
    pub fn stale(&self) -> Option<String> {
        let failing: Vec<String> = self
            .watchers
            .iter()
            .filter_map(|(watched, h)| h.error.as_ref().map(|e| format!("{watched}: {e}")))
            .collect();
        (!failing.is_empty()).then(|| failing.join("; "))
    }
}

/// Decides what to publish: nothing before the first full list (every kind and every object
/// followed at that moment), nothing when neither the facts nor the staleness changed;
/// `synced_at` is the last publish that was not stale. After the first publish an object
/// followed later is simply absent from the facts until its own first list.
#[derive(Debug, Default)]
pub struct Publisher {
    last: Option<(Arc<Facts>, Option<String>)>,
    synced_at: Option<SystemTime>,
}

impl Publisher {
    pub fn next(&mut self, health: &Health, facts: Facts, now: SystemTime) -> Option<Snapshot> {
        if self.last.is_none() && !health.all_listed() {
            return None;
        }
        let stale = health.stale();
        if let Some((last_facts, last_stale)) = &self.last
            && **last_facts == facts
            && *last_stale == stale
        {
            return None;
        }
        if stale.is_none() {
            self.synced_at = Some(now);
        }
        let facts = Arc::new(facts);
        self.last = Some((facts.clone(), stale.clone()));
        Some(Snapshot { facts, origin: Origin::KubernetesApi, stale, synced_at: self.synced_at })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::facts::Pod as FactsPod;

    fn facts(pods: &[&str]) -> Facts {
        Facts {
            node_name: Some("n1".into()),
            pods: pods
                .iter()
                .map(|uid| FactsPod {
                    uid: (*uid).into(),
                    namespace: "ns".into(),
                    name: (*uid).into(),
                    terminating: false,
                    service_account: String::new(),
                    labels: Default::default(),
                    volumes: vec![],
                })
                .collect(),
            ..Facts::default()
        }
    }

    fn kind(k: Kind) -> Watched {
        Watched::Kind(k)
    }

    fn claim(name: &str) -> Watched {
        Watched::Claim(ObjectKey::new("shop", name))
    }

    fn listed_all() -> Health {
        let mut h = Health::default();
        for k in Kind::ALL {
            h.apply(&kind(k), Signal::Listed);
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn nothing_is_published_before_every_kind_listed() {
        let mut h = Health::default();
        let mut p = Publisher::default();
        for k in &Kind::ALL[..2] {
            h.apply(&kind(*k), Signal::Listed);
            assert!(p.next(&h, facts(&["a"]), at(1)).is_none());
        }
        h.apply(&kind(Kind::CsiNode), Signal::Listed);
        let s = p.next(&h, facts(&["a"]), at(2)).expect("published");
        assert_eq!(s.origin, Origin::KubernetesApi);
        assert_eq!((s.stale, s.synced_at), (None, Some(at(2))));
    }

    #[test]
    fn the_first_publish_waits_for_the_objects_followed_then() {
        let mut h = listed_all();
        h.follow(claim("data"));
        h.follow(Watched::Volume("pv-1".into()));
        let mut p = Publisher::default();
        assert!(p.next(&h, facts(&["a"]), at(1)).is_none(), "the claim and the volume have not listed");
        h.apply(&claim("data"), Signal::Listed);
        assert!(p.next(&h, facts(&["a"]), at(2)).is_none(), "the volume has not listed");
        h.apply(&Watched::Volume("pv-1".into()), Signal::Listed);
        assert!(p.next(&h, facts(&["a"]), at(3)).is_some());
    }

    #[test]
    fn an_object_followed_after_the_first_publish_does_not_hold_publishing() {
        let mut h = listed_all();
        let mut p = Publisher::default();
        p.next(&h, facts(&["a"]), at(1)).expect("first");
        h.follow(claim("new"));
        assert!(!h.all_listed());
        let s = p.next(&h, facts(&["a", "b"]), at(2)).expect("the new pod is published before its claim lists");
        assert_eq!(s.stale, None, "not listed yet is not stale");
    }

    #[test]
    fn a_forgotten_object_no_longer_makes_the_facts_stale() {
        let mut h = listed_all();
        h.follow(claim("data"));
        h.apply(&claim("data"), Signal::Failed("forbidden".into()));
        assert_eq!(h.stale().as_deref(), Some("persistentvolumeclaims shop/data: forbidden"));
        h.forget(&claim("data"));
        assert_eq!(h.stale(), None);
        assert!(h.all_listed());
    }

    #[test]
    fn an_empty_cluster_is_published_once() {
        let h = listed_all();
        let mut p = Publisher::default();
        assert!(p.next(&h, Facts::default(), at(1)).is_some());
        assert!(p.next(&h, Facts::default(), at(2)).is_none(), "unchanged: nothing to publish");
    }

    #[test]
    fn errors_make_the_facts_stale_and_keep_synced_at() {
        let mut h = listed_all();
        h.follow(Watched::Volume("pv-1".into()));
        h.apply(&Watched::Volume("pv-1".into()), Signal::Listed);
        let mut p = Publisher::default();
        p.next(&h, facts(&["a"]), at(1)).expect("first");
        h.apply(&Watched::Volume("pv-1".into()), Signal::Failed("connection refused".into()));
        h.apply(&kind(Kind::Pods), Signal::Failed("timed out".into()));
        let s = p.next(&h, facts(&["a"]), at(2)).expect("stale is news");
        assert_eq!(s.stale.as_deref(), Some("pods: timed out; persistentvolumes pv-1: connection refused"));
        assert_eq!(s.synced_at, Some(at(1)), "synced_at is the last good publish");
        assert_eq!(s.facts.pods.len(), 1, "the facts are kept");

        // A healthy kind's change while another is still failing: published, still stale.
        h.apply(&kind(Kind::Pods), Signal::Changed);
        let s = p.next(&h, facts(&["a", "b"]), at(3)).expect("changed");
        assert_eq!(s.stale.as_deref(), Some("persistentvolumes pv-1: connection refused"));
        assert_eq!(s.synced_at, Some(at(1)));

        h.apply(&Watched::Volume("pv-1".into()), Signal::Listed);
        let s = p.next(&h, facts(&["a", "b"]), at(4)).expect("healthy again is news");
        assert_eq!((s.stale, s.synced_at), (None, Some(at(4))));
    }

    #[test]
    fn errors_before_the_first_list_publish_nothing() {
        let mut h = Health::default();
        h.apply(&kind(Kind::Pods), Signal::Failed("refused".into()));
        assert!(!h.all_listed());
        assert!(Publisher::default().next(&h, Facts::default(), at(1)).is_none());
        assert_eq!(h.stale().as_deref(), Some("pods: refused"));
    }
}
