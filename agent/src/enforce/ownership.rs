//! Userspace ownership of single-pod volumes, for modes where the kernel does not decide
//! (quarantine, and audit without BPF LSM): fed by successful publish and unmount events.

use std::collections::{BTreeMap, HashMap};

pub use crate::facts::SinglePodSet;
use crate::node_files::kubelet::PublishTarget;

/// What a successful publish means for ownership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Not a single-pod volume: nothing to do.
    Untracked,
    /// The first publish: this pod now owns the volume.
    Claimed,
    /// The owner published again.
    Owner,
    /// Another pod owns the volume.
    Conflict { owner: String },
}

/// Owners of the single-pod volumes on this node.
#[derive(Debug, Default)]
pub struct Ownership {
    single_pod: SinglePodSet,
    owners: HashMap<String, String>,
}

impl Ownership {
    pub fn new(single_pod: SinglePodSet) -> Self {
        Self { single_pod, owners: HashMap::new() }
    }

    /// Records a successful publish and says what it means.
    pub fn published(&mut self, target: &PublishTarget) -> PublishOutcome {
        if !self.single_pod.contains_key(&target.volume) {
            return PublishOutcome::Untracked;
        }
        match self.owners.get(&target.volume) {
            None => {
                self.owners.insert(target.volume.clone(), target.pod_uid.clone());
                PublishOutcome::Claimed
            }
            Some(owner) if *owner == target.pod_uid => PublishOutcome::Owner,
            Some(owner) => PublishOutcome::Conflict { owner: owner.clone() },
        }
    }

    /// Records a successful unmount of a publish target; true if that released ownership.
    pub fn unpublished(&mut self, target: &PublishTarget) -> bool {
        self.release(&target.volume, &target.pod_uid)
    }

    /// Records an owner found at start-up (the mount table), unless one is known.
    pub fn seed(&mut self, volume: &str, pod_uid: &str) {
        if self.single_pod.contains_key(volume) {
            self.owners.entry(volume.to_owned()).or_insert_with(|| pod_uid.to_owned());
        }
    }

    pub fn owner(&self, volume: &str) -> Option<&str> {
        self.owners.get(volume).map(String::as_str)
    }

    /// Every `volume → owner pod UID`.
    pub fn owners(&self) -> BTreeMap<String, String> {
        self.owners.iter().map(|(v, p)| (v.clone(), p.clone())).collect()
    }

    /// Replaces the set of single-pod volumes. Owners of volumes that left the set stay
    /// until their publish is gone: the mount, not the API, decides.
    pub fn set_single_pod(&mut self, single_pod: SinglePodSet) {
        self.single_pod = single_pod;
    }

    /// Releases `volume` if `pod_uid` still owns it (the reconciler found its mount gone).
    pub fn release(&mut self, volume: &str, pod_uid: &str) -> bool {
        if self.owners.get(volume).map(String::as_str) == Some(pod_uid) {
            self.owners.remove(volume);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(pod: &str, volume: &str) -> PublishTarget {
        PublishTarget { pod_uid: pod.into(), volume: volume.into(), block: false }
    }

    /// Volume `rwop` is the one single-pod volume.
    fn rwop_only() -> SinglePodSet {
        let reason = crate::facts::SinglePodReason::ReadWriteOncePod;
        std::sync::Arc::new([("rwop".to_owned(), reason)].into())
    }

    #[test]
    fn first_publish_claims_the_owner_may_republish_others_conflict() {
        let mut o = Ownership::new(rwop_only());
        assert_eq!(o.published(&target("a", "rwop")), PublishOutcome::Claimed);
        assert_eq!(o.published(&target("a", "rwop")), PublishOutcome::Owner);
        assert_eq!(o.published(&target("b", "rwop")), PublishOutcome::Conflict { owner: "a".into() });
        assert_eq!(o.owner("rwop"), Some("a"));
    }

    #[test]
    fn only_the_owner_unmounting_releases() {
        let mut o = Ownership::new(rwop_only());
        o.published(&target("a", "rwop"));
        assert!(!o.unpublished(&target("b", "rwop")), "a quarantined pod's unmount releases nothing");
        assert!(o.unpublished(&target("a", "rwop")));
        assert_eq!(o.published(&target("b", "rwop")), PublishOutcome::Claimed, "a replacement pod may publish");
    }

    #[test]
    fn seeded_owners_hold_like_claimed_ones() {
        let mut o = Ownership::new(rwop_only());
        o.seed("rwop", "a");
        o.seed("rwop", "b");
        o.seed("rwo", "a");
        assert_eq!(o.owner("rwop"), Some("a"), "the first seed wins");
        assert_eq!(o.owner("rwo"), None, "only single-pod volumes");
        assert_eq!(o.published(&target("b", "rwop")), PublishOutcome::Conflict { owner: "a".into() });
    }

    #[test]
    fn other_volumes_are_never_tracked() {
        let mut o = Ownership::new(rwop_only());
        assert_eq!(o.published(&target("a", "rwo")), PublishOutcome::Untracked);
        assert_eq!(o.published(&target("b", "rwo")), PublishOutcome::Untracked);
        assert!(!o.unpublished(&target("a", "rwo")));
    }
}
