//! Look-ups into [`Facts`] by name: pod by UID, PV by name, PVC by namespace/name, PVC by
//! the PV it names, PV by the claim it is bound to, and the pods using each claim.
//!
//! Every question the event path, the reconciliation, the CSI evaluation and the views ask
//! goes through here, so their cost does not grow with the number of objects. The index
//! is built once per `Facts` value, on its first look-up (a source publishes a new value
//! when anything changes; nothing rebuilds it per pass). It holds no names: each table is
//! the keys' hashes beside the objects' positions, sorted, and a look-up checks the
//! candidates' own names in the facts (copied names cost 5 MB for 10,000 volumes).

use std::{collections::hash_map::RandomState, fmt, hash::BuildHasher, sync::OnceLock};

use super::{ClaimRef, Facts, PersistentVolume, PersistentVolumeClaim, Pod, VolumeSource, ephemeral_claim_name};

/// The lazily built index a [`Facts`] carries. Not part of the data: equal whatever its
/// state, empty again in a clone (the clone may be changed), skipped by serde.
#[derive(Default)]
pub struct Lookup(OnceLock<Index>);

impl Clone for Lookup {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl PartialEq for Lookup {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Lookup {}

impl fmt::Debug for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.get().is_some() { "Lookup(built)" } else { "Lookup(not built)" })
    }
}

/// Positions of objects by the hash of a key, sorted by hash, then position.
#[derive(Debug, Default)]
struct ByHash(Vec<(u64, u32)>);

impl ByHash {
    fn from(mut entries: Vec<(u64, u32)>) -> Self {
        entries.sort_unstable();
        entries.dedup();
        Self(entries)
    }

    /// The positions filed under `hash`, in order: the objects whose key may be the one
    /// hashed (equal hashes of different keys are the caller's to tell apart).
    fn candidates(&self, hash: u64) -> impl Iterator<Item = usize> + '_ {
        let first = self.0.partition_point(|&(h, _)| h < hash);
        self.0[first..].iter().take_while(move |&&(h, _)| h == hash).map(|&(_, i)| i as usize)
    }
}

/// The tables. Where the facts hold duplicates the first wins, as a scan's first match
/// would.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Keys are hashed with a state of this index's own: names come from the API, and a
    /// fixed hash could be steered into collisions.
    hasher: RandomState,
    pods_by_uid: ByHash,
    pvs_by_name: ByHash,
    claims_by_ref: ByHash,
    claims_by_volume: ByHash,
    pvs_by_claim: ByHash,
    pods_by_claim: ByHash,
    /// The vector lengths it was built from: a `Facts` must not change after its first
    /// look-up (checked in debug builds).
    built_from: (usize, usize, usize),
}

impl Index {
    fn build(facts: &Facts) -> Self {
        let hasher = RandomState::new();
        let name = |n: &str| hasher.hash_one(n);
        let claim = |namespace: &str, n: &str| hasher.hash_one((namespace, n));
        let at = |i: usize| i as u32;
        let (mut pods_by_uid, mut pods_by_claim) = (Vec::new(), Vec::new());
        for (i, pod) in facts.pods.iter().enumerate() {
            pods_by_uid.push((name(&pod.uid), at(i)));
            for volume in &pod.volumes {
                let key = match &volume.source {
                    VolumeSource::PersistentVolumeClaim(c) => claim(&pod.namespace, c),
                    VolumeSource::Ephemeral => claim(&pod.namespace, &ephemeral_claim_name(&pod.name, &volume.name)),
                    VolumeSource::Csi { .. } | VolumeSource::Other => continue,
                };
                pods_by_claim.push((key, at(i)));
            }
        }
        let (mut pvs_by_name, mut pvs_by_claim) = (Vec::new(), Vec::new());
        for (i, pv) in facts.persistent_volumes.iter().enumerate() {
            pvs_by_name.push((name(&pv.name), at(i)));
            if let Some(c) = &pv.claim_ref {
                pvs_by_claim.push((claim(&c.namespace, &c.name), at(i)));
            }
        }
        let (mut claims_by_ref, mut claims_by_volume) = (Vec::new(), Vec::new());
        for (i, pvc) in facts.persistent_volume_claims.iter().enumerate() {
            claims_by_ref.push((claim(&pvc.namespace, &pvc.name), at(i)));
            if let Some(volume) = &pvc.volume_name {
                claims_by_volume.push((name(volume), at(i)));
            }
        }
        Self {
            pods_by_uid: ByHash::from(pods_by_uid),
            pvs_by_name: ByHash::from(pvs_by_name),
            claims_by_ref: ByHash::from(claims_by_ref),
            claims_by_volume: ByHash::from(claims_by_volume),
            pvs_by_claim: ByHash::from(pvs_by_claim),
            pods_by_claim: ByHash::from(pods_by_claim),
            built_from: lengths(facts),
            hasher,
        }
    }

    fn name(&self, n: &str) -> u64 {
        self.hasher.hash_one(n)
    }

    fn claim_key(&self, claim: &ClaimRef) -> u64 {
        self.hasher.hash_one((claim.namespace.as_str(), claim.name.as_str()))
    }

    pub(super) fn pod<'f>(&self, facts: &'f Facts, uid: &str) -> Option<&'f Pod> {
        self.pods_by_uid.candidates(self.name(uid)).map(|i| &facts.pods[i]).find(|p| p.uid == uid)
    }

    pub(super) fn persistent_volume<'f>(&self, facts: &'f Facts, name: &str) -> Option<&'f PersistentVolume> {
        let mut found = self.pvs_by_name.candidates(self.name(name)).map(|i| &facts.persistent_volumes[i]);
        found.find(|pv| pv.name == name)
    }

    pub(super) fn claim<'f>(&self, facts: &'f Facts, claim: &ClaimRef) -> Option<&'f PersistentVolumeClaim> {
        let mut found =
            self.claims_by_ref.candidates(self.claim_key(claim)).map(|i| &facts.persistent_volume_claims[i]);
        found.find(|c| c.namespace == claim.namespace && c.name == claim.name)
    }

    /// The claim whose `volumeName` is `pv_name`.
    pub(super) fn claim_naming<'f>(&self, facts: &'f Facts, pv_name: &str) -> Option<&'f PersistentVolumeClaim> {
        let mut found =
            self.claims_by_volume.candidates(self.name(pv_name)).map(|i| &facts.persistent_volume_claims[i]);
        found.find(|c| c.volume_name.as_deref() == Some(pv_name))
    }

    /// The PV whose `claimRef` is `claim`.
    pub(super) fn pv_bound_to<'f>(&self, facts: &'f Facts, claim: &ClaimRef) -> Option<&'f PersistentVolume> {
        let mut found = self.pvs_by_claim.candidates(self.claim_key(claim)).map(|i| &facts.persistent_volumes[i]);
        found.find(|pv| pv.claim_ref.as_ref() == Some(claim))
    }

    pub(super) fn pods_using<'f>(&self, facts: &'f Facts, claim: &ClaimRef) -> impl Iterator<Item = &'f Pod> {
        let candidates = self.pods_by_claim.candidates(self.claim_key(claim));
        candidates.map(|i| &facts.pods[i]).filter(move |pod| uses(pod, claim))
    }
}

/// Whether `pod` uses `claim`: by `persistentVolumeClaim`, or as the generic ephemeral
/// volume whose claim is `<pod>-<volume>`.
fn uses(pod: &Pod, claim: &ClaimRef) -> bool {
    pod.namespace == claim.namespace
        && pod.volumes.iter().any(|v| match &v.source {
            VolumeSource::PersistentVolumeClaim(c) => *c == claim.name,
            VolumeSource::Ephemeral => ephemeral_claim_name(&pod.name, &v.name) == claim.name,
            VolumeSource::Csi { .. } | VolumeSource::Other => false,
        })
}

fn lengths(facts: &Facts) -> (usize, usize, usize) {
    (facts.pods.len(), facts.persistent_volumes.len(), facts.persistent_volume_claims.len())
}

impl Lookup {
    /// The index of `facts` (whose `lookup` this is), built on first use.
    pub(super) fn of<'a>(&'a self, facts: &Facts) -> &'a Index {
        let index = self.0.get_or_init(|| Index::build(facts));
        debug_assert_eq!(index.built_from, lengths(facts), "Facts changed after its first look-up");
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::PodVolume;

    #[test]
    fn keys_sharing_a_hash_are_all_candidates_in_position_order() {
        let table = ByHash::from(vec![(7, 3), (5, 0), (7, 1), (9, 2), (7, 1)]);
        assert_eq!(table.candidates(7).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(table.candidates(5).collect::<Vec<_>>(), [0]);
        assert_eq!(table.candidates(6).count(), 0);
        assert_eq!(table.candidates(10).count(), 0);
    }

    #[test]
    fn a_look_up_checks_each_candidates_own_name() {
        // Every key filed under one hash, as if all collided: only the named object answers.
        let mut facts = Facts::default();
        for (uid, namespace) in [("a", "ns"), ("b", "ns"), ("c", "other")] {
            facts.pods.push(Pod {
                uid: uid.into(),
                namespace: namespace.into(),
                name: format!("pod-{uid}"),
                terminating: false,
                service_account: String::new(),
                labels: Default::default(),
                volumes: vec![PodVolume {
                    name: "data".into(),
                    source: VolumeSource::PersistentVolumeClaim("shared".into()),
                }],
            });
        }
        let mut index = Index::default();
        let (uid_b, claim) = (index.name("b"), ClaimRef { namespace: "ns".into(), name: "shared".into() });
        let all_under = |hash: u64| ByHash::from((0..3).map(|i| (hash, i)).collect());
        index.pods_by_uid = all_under(uid_b);
        index.pods_by_claim = all_under(index.claim_key(&claim));
        assert_eq!(index.pod(&facts, "b").map(|p| p.name.as_str()), Some("pod-b"), "not pod-a, filed first");
        let users: Vec<_> = index.pods_using(&facts, &claim).map(|p| p.uid.as_str()).collect();
        assert_eq!(users, ["a", "b"], "the pod of another namespace is a candidate, not a user");
    }

    #[test]
    fn an_ephemeral_volume_is_used_by_the_pod_whose_name_and_volume_make_its_claims_name() {
        let pod = Pod {
            uid: "u".into(),
            namespace: "ns".into(),
            name: "web-0".into(),
            terminating: false,
            service_account: String::new(),
            labels: Default::default(),
            volumes: vec![PodVolume { name: "scratch".into(), source: VolumeSource::Ephemeral }],
        };
        let claim = |name: &str| ClaimRef { namespace: "ns".into(), name: name.into() };
        assert!(uses(&pod, &claim("web-0-scratch")));
        assert!(!uses(&pod, &claim("web-0scratch")));
        assert!(!uses(&pod, &claim("web-1-scratch")));
        assert!(!uses(&pod, &claim("web-0-scratch-2")));
    }
}
