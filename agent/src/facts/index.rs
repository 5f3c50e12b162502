//! Look-ups into [`Facts`] by name: pod by UID, PV by name, PVC by namespace/name, PVC by
//! the PV it names, PV by the claim it is bound to, and the pods using each claim.
//!
//! Every question the event path, the reconciliation, the CSI evaluation and the views ask
//! goes through here, so their cost does not grow with the number of objects. The index
//! is built once per `Facts` value, on its first look-up (a source publishes a new value
//! when anything changes; nothing rebuilds it per pass), and holds positions into the
//! vectors, not copies of the objects.

use std::{collections::HashMap, fmt, sync::OnceLock};

use super::{ClaimRef, Facts, VolumeSource, ephemeral_claim_name};

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

/// Positions in the `Facts` vectors. Where the facts hold duplicates the first wins, as
/// a scan's first match would.
#[derive(Debug, Default)]
pub(super) struct Index {
    pods_by_uid: HashMap<String, usize>,
    pvs_by_name: HashMap<String, usize>,
    claims_by_ref: HashMap<ClaimRef, usize>,
    claims_by_volume: HashMap<String, usize>,
    pvs_by_claim: HashMap<ClaimRef, usize>,
    pods_by_claim: HashMap<ClaimRef, Vec<usize>>,
    /// The vector lengths it was built from: a `Facts` must not change after its first
    /// look-up (checked in debug builds).
    built_from: (usize, usize, usize),
}

impl Index {
    fn build(facts: &Facts) -> Self {
        let mut index = Self { built_from: lengths(facts), ..Self::default() };
        for (i, pod) in facts.pods.iter().enumerate() {
            index.pods_by_uid.entry(pod.uid.clone()).or_insert(i);
            for volume in &pod.volumes {
                let name = match &volume.source {
                    VolumeSource::PersistentVolumeClaim(claim) => claim.clone(),
                    VolumeSource::Ephemeral => ephemeral_claim_name(&pod.name, &volume.name),
                    VolumeSource::Csi { .. } | VolumeSource::Other => continue,
                };
                let users = index.pods_by_claim.entry(ClaimRef { namespace: pod.namespace.clone(), name }).or_default();
                if users.last() != Some(&i) {
                    users.push(i);
                }
            }
        }
        for (i, pv) in facts.persistent_volumes.iter().enumerate() {
            index.pvs_by_name.entry(pv.name.clone()).or_insert(i);
            if let Some(claim) = &pv.claim_ref {
                index.pvs_by_claim.entry(claim.clone()).or_insert(i);
            }
        }
        for (i, pvc) in facts.persistent_volume_claims.iter().enumerate() {
            index.claims_by_ref.entry(pvc.claim_ref()).or_insert(i);
            if let Some(volume) = &pvc.volume_name {
                index.claims_by_volume.entry(volume.clone()).or_insert(i);
            }
        }
        index
    }

    pub(super) fn pod(&self, uid: &str) -> Option<usize> {
        self.pods_by_uid.get(uid).copied()
    }

    pub(super) fn persistent_volume(&self, name: &str) -> Option<usize> {
        self.pvs_by_name.get(name).copied()
    }

    pub(super) fn claim(&self, claim: &ClaimRef) -> Option<usize> {
        self.claims_by_ref.get(claim).copied()
    }

    pub(super) fn claim_naming(&self, pv_name: &str) -> Option<usize> {
        self.claims_by_volume.get(pv_name).copied()
    }

    pub(super) fn pv_bound_to(&self, claim: &ClaimRef) -> Option<usize> {
        self.pvs_by_claim.get(claim).copied()
    }

    pub(super) fn pods_using(&self, claim: &ClaimRef) -> &[usize] {
        self.pods_by_claim.get(claim).map_or(&[], Vec::as_slice)
    }
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
