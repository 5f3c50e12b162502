//! Publishes: which volume is published into which pods (from the mount table at
//! start-up and on every reconciliation, from kernel events in between), joined with the
//! facts to say which volumes are single-pod and who owns them.
//!
//! Ownership follows the mounts, never the API: an owner is released only when its
//! publish target is gone from the mount table, so a terminating pod keeps its volume
//! until kubelet unmounts it, and a deleted pod or an unreachable API releases nothing.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    facts::{ClaimRef, Facts, SinglePodReason},
    node_files::kubelet::{PublishTarget, publish_target},
    node_files::mount_table::MountTable,
};

/// Source name of volguard's quarantine mask (an empty read-only tmpfs), as the mount
/// table shows it: the mask covers a publish target but is not a publish.
pub const MASK_SOURCE: &str = "volguard-quarantine";

/// One publish of a volume into a pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Publish {
    pub mount_point: PathBuf,
    /// The mount table's ID; `None` when learnt from an event. The kernel reuses these,
    /// so they order mounts by age only where no unique id is known.
    pub mount_id: Option<i32>,
    /// The kernel's 64-bit unique mount id (never reused; lower = older), read for the
    /// publishes whose order matters: see [`Mounts::learn_ages`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unique_id: Option<u64>,
    pub block: bool,
}

/// What a successful syscall did to kubelet publish targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishChange {
    Published(PublishTarget, PathBuf),
    Unpublished(PublishTarget),
}

/// Volume spec name → pod UID → one mount.
type ByVolume = BTreeMap<String, BTreeMap<String, Publish>>;

/// Published volumes, and the publish targets volguard's quarantine masks cover.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mounts {
    volumes: ByVolume,
    /// Quarantined publishes: the target's top mount is the mask, and nothing of the
    /// volume is left beneath it. Never a holder of the volume.
    masks: ByVolume,
}

impl Mounts {
    /// Every publish target mounted under `kubelet_root`. A target mounted several times
    /// (stacked mounts) counts once, with its oldest mount ID; a target whose top mount
    /// (the last one the table lists there) is the mask is quarantined, not published.
    pub fn from_table(table: &MountTable, kubelet_root: &Path) -> Self {
        let mut mounts = Self::default();
        let mut on_top: BTreeMap<&Path, bool> = BTreeMap::new();
        for mount in &table.mounts {
            on_top.insert(&mount.mount_point, mount.source == MASK_SOURCE);
        }
        for mount in &table.mounts {
            let Some(target) = publish_target(kubelet_root, &mount.mount_point) else { continue };
            let masked = on_top.get(mount.mount_point.as_path()) == Some(&true);
            if masked != (mount.source == MASK_SOURCE) {
                continue; // the mask under a newer publish, or a publish under the mask
            }
            let publish = Publish {
                mount_point: mount.mount_point.clone(),
                mount_id: Some(mount.id),
                unique_id: None,
                block: target.block,
            };
            let by_volume = if masked { &mut mounts.masks } else { &mut mounts.volumes };
            let pods = by_volume.entry(target.volume).or_default();
            match pods.get(&target.pod_uid) {
                Some(known) if known.mount_id <= publish.mount_id => {}
                _ => {
                    pods.insert(target.pod_uid, publish);
                }
            }
        }
        mounts
    }

    pub fn apply(&mut self, change: &PublishChange) {
        match change {
            PublishChange::Published(target, path) => {
                let pods = self.volumes.entry(target.volume.clone()).or_default();
                pods.entry(target.pod_uid.clone()).or_insert_with(|| Publish {
                    mount_point: path.clone(),
                    mount_id: None,
                    unique_id: None,
                    block: target.block,
                });
            }
            // Whatever was on top goes: the publish, or (after a quarantine) the mask.
            PublishChange::Unpublished(target) => {
                remove(&mut self.volumes, &target.volume, &target.pod_uid);
                remove(&mut self.masks, &target.volume, &target.pod_uid);
            }
        }
    }

    /// The quarantine detached this pod's publish and masked the target.
    pub fn quarantined(&mut self, target: &PublishTarget, mount_point: &Path) {
        remove(&mut self.volumes, &target.volume, &target.pod_uid);
        let mask =
            Publish { mount_point: mount_point.to_owned(), mount_id: None, unique_id: None, block: target.block };
        self.masks.entry(target.volume.clone()).or_default().insert(target.pod_uid.clone(), mask);
    }

    /// volguard removed its mask from this pod's target.
    pub fn unmasked(&mut self, volume: &str, pod_uid: &str) {
        remove(&mut self.masks, volume, pod_uid);
    }

    pub fn is_masked(&self, volume: &str, pod_uid: &str) -> bool {
        self.masks.get(volume).is_some_and(|pods| pods.contains_key(pod_uid))
    }

    /// Every mask: `(volume, pod UID, mask)`.
    pub fn masks(&self) -> impl Iterator<Item = (&str, &str, &Publish)> {
        self.masks.iter().flat_map(|(v, pods)| pods.iter().map(move |(p, m)| (v.as_str(), p.as_str(), m)))
    }

    /// The pods whose publish of `volume` is quarantined.
    pub fn masked_pods(&self, volume: &str) -> Vec<&str> {
        self.masks.get(volume).into_iter().flatten().map(|(p, _)| p.as_str()).collect()
    }

    pub fn is_published(&self, volume: &str, pod_uid: &str) -> bool {
        self.volumes.get(volume).is_some_and(|pods| pods.contains_key(pod_uid))
    }

    /// The pods a volume is published into, oldest mount first (unknown ages last).
    pub fn pods_of(&self, volume: &str) -> Vec<(&str, &Publish)> {
        let mut pods: Vec<_> = self.volumes.get(volume).into_iter().flatten().map(|(p, m)| (p.as_str(), m)).collect();
        pods.sort_by_key(|(pod, m)| (m.unique_id.unwrap_or(u64::MAX), m.mount_id.unwrap_or(i32::MAX), *pod));
        pods
    }

    /// Reads the unique mount id of each publish of a volume published into several pods,
    /// where the order of the pods decides who owns it (an agent that starts after a
    /// second pod's publish must not take the newcomer for the owner because the kernel
    /// gave its mount a reused, lower id). All or none per volume: one id that cannot be
    /// read leaves that volume ordered by the table's ids.
    pub fn learn_ages(&mut self, mut unique_id: impl FnMut(&Path) -> Option<u64>) {
        for pods in self.volumes.values_mut().filter(|pods| pods.len() > 1) {
            let ids: Option<Vec<u64>> = pods.values().map(|p| unique_id(&p.mount_point)).collect();
            if let Some(ids) = ids {
                pods.values_mut().zip(ids).for_each(|(publish, id)| publish.unique_id = Some(id));
            }
        }
    }

    /// The volumes published into at least one pod.
    pub fn published_volumes(&self) -> impl Iterator<Item = &str> {
        self.volumes.keys().map(String::as_str)
    }

    /// The volumes published into a pod or quarantined in one.
    pub fn volumes(&self) -> impl Iterator<Item = &str> {
        let names: BTreeSet<&str> = self.volumes.keys().chain(self.masks.keys()).map(String::as_str).collect();
        names.into_iter()
    }

    /// The publishes this view has and `before` did not (a publish on top of a mask
    /// `before` had is one: kubelet's retry of a quarantined publish).
    pub fn publishes_new_since(&self, before: &Self) -> Vec<PublishChange> {
        self.volumes
            .iter()
            .flat_map(|(volume, pods)| pods.iter().map(move |(pod, publish)| (volume, pod, publish)))
            .filter(|(volume, pod, _)| !before.is_published(volume, pod))
            .map(|(volume, pod, publish)| {
                let target = PublishTarget { pod_uid: pod.clone(), volume: volume.clone(), block: publish.block };
                PublishChange::Published(target, publish.mount_point.clone())
            })
            .collect()
    }

    /// How many (volume, pod) publishes and masks differ between two views: drift that
    /// events missed.
    pub fn differences(&self, other: &Self) -> usize {
        let pairs = |m: &Self| -> BTreeSet<(bool, String, String)> {
            let of = |masked: bool, by: &ByVolume| -> Vec<(bool, String, String)> {
                by.iter().flat_map(|(v, pods)| pods.keys().map(move |p| (masked, v.clone(), p.clone()))).collect()
            };
            of(false, &m.volumes).into_iter().chain(of(true, &m.masks)).collect()
        };
        pairs(self).symmetric_difference(&pairs(other)).count()
    }
}

fn remove(by_volume: &mut ByVolume, volume: &str, pod_uid: &str) {
    if let Some(pods) = by_volume.get_mut(volume) {
        pods.remove(pod_uid);
        if pods.is_empty() {
            by_volume.remove(volume);
        }
    }
}

/// A correction to the owner map that the mount table calls for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerFix {
    /// The owner's publish target has been gone for two passes (a lost unmount event):
    /// release, so a replacement pod is not kept waiting forever.
    Release { volume: String, pod_uid: String },
    /// A single-pod volume is published but has no owner (it became single-pod after it
    /// was mounted, or a publish event was lost): the oldest publish owns it.
    Seed { volume: String, pod_uid: String },
}

/// Compares owners with the mount table, pass after pass.
#[derive(Debug, Default)]
pub struct OwnerReconciler {
    /// Owners whose publish target was missing at the last pass.
    missing: BTreeSet<(String, String)>,
}

impl OwnerReconciler {
    /// The fixes for this pass. An owner must be missing from two consecutive passes
    /// before it is released: a claim is recorded when the mount syscall returns, and
    /// a mount table read just before that must not undo it.
    pub fn plan(
        &mut self,
        is_single_pod: impl Fn(&str) -> bool,
        mounts: &Mounts,
        owners: &BTreeMap<String, String>,
    ) -> Vec<OwnerFix> {
        let mut fixes = Vec::new();
        let mut missing = BTreeSet::new();
        for (volume, pod_uid) in owners {
            if mounts.is_published(volume, pod_uid) {
                continue;
            }
            let key = (volume.clone(), pod_uid.clone());
            if self.missing.contains(&key) {
                fixes.push(OwnerFix::Release { volume: volume.clone(), pod_uid: pod_uid.clone() });
            } else {
                missing.insert(key);
            }
        }
        // Only published volumes can need an owner: a pass costs the node's publishes, not
        // its single-pod volumes.
        for volume in mounts.volumes.keys().filter(|v| is_single_pod(v) && !owners.contains_key(*v)) {
            if let Some((pod_uid, _)) = mounts.pods_of(volume).first() {
                fixes.push(OwnerFix::Seed { volume: volume.clone(), pod_uid: (*pod_uid).to_owned() });
            }
        }
        self.missing = missing;
        fixes
    }
}

/// Masks whose pod has left the facts or is being deleted: planned for removal, pass
/// after pass.
#[derive(Debug, Default)]
pub struct MaskReconciler {
    /// Masks whose pod was missing from the facts at the last pass.
    missing: BTreeSet<(String, String)>,
}

/// A mask to remove: its pod is gone or being deleted, and kubelet can neither delete the
/// pod's directory nor finish deleting the pod while the mask covers the target (the
/// driver's unpublish did not take it off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleMask {
    pub volume: String,
    pub pod_uid: String,
    pub mount_point: PathBuf,
}

impl MaskReconciler {
    /// The masks to remove at this pass: those whose pod has been missing from `pods`
    /// (the pods of complete, fresh facts that are not being deleted) at two consecutive
    /// passes, so a pod published before the agent's watch caught up is not unmasked. `None` (no facts, or stale ones) removes
    /// nothing and starts the count again.
    pub fn plan(&mut self, mounts: &Mounts, pods: Option<&BTreeSet<&str>>) -> Vec<StaleMask> {
        let Some(pods) = pods else {
            self.missing.clear();
            return Vec::new();
        };
        let mut stale = Vec::new();
        let mut missing = BTreeSet::new();
        for (volume, pod_uid, mask) in mounts.masks().filter(|(_, pod, _)| !pods.contains(pod)) {
            let key = (volume.to_owned(), pod_uid.to_owned());
            if self.missing.contains(&key) {
                stale.push(StaleMask { volume: key.0, pod_uid: key.1, mount_point: mask.mount_point.clone() });
            } else {
                missing.insert(key);
            }
        }
        self.missing = missing;
        stale
    }
}

/// The masks of pods the facts show being deleted. kubelet tears a deleted pod's volumes
/// down once its containers have stopped; a mask still on the target then makes the target
/// look mounted, and kubelet leaves the volume's directory (and the pod's) behind for good.
/// A deletion the facts show is certain: such a mask goes at once, not two passes later.
pub fn masks_of_deleted(mounts: &Mounts, deleted: &BTreeSet<&str>) -> Vec<StaleMask> {
    mounts
        .masks()
        .filter(|(_, pod, _)| deleted.contains(pod))
        .map(|(volume, pod_uid, mask)| StaleMask {
            volume: volume.to_owned(),
            pod_uid: pod_uid.to_owned(),
            mount_point: mask.mount_point.clone(),
        })
        .collect()
}

/// Where a single-pod volume stands, as every view (status, metrics, volumes) counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinglePodState {
    /// Published into exactly one pod, which owns it.
    Owned,
    /// Published into more than one pod (a violation volguard could not prevent).
    Shared,
    /// Not published, or published with no owner recorded yet.
    Unowned,
}

/// One volume as the debug API and the CLI show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VolumeView {
    pub name: String,
    pub single_pod: Option<SinglePodReason>,
    pub claim: Option<ClaimRef>,
    pub driver: Option<String>,
    pub owner: Option<String>,
    /// Pod UIDs it is published into, oldest first: the holders.
    pub published_to: Vec<String>,
    /// Pod UIDs whose publish volguard quarantined (their target holds the mask).
    pub quarantined: Vec<String>,
    /// For single-pod volumes: owned, shared or unowned.
    pub state: Option<SinglePodState>,
    /// `namespace/name` of each pod above that the facts name, by UID.
    pub pod_names: BTreeMap<String, String>,
}

impl VolumeView {
    fn single_pod_state(&self) -> SinglePodState {
        match (self.published_to.len(), &self.owner) {
            (n, _) if n > 1 => SinglePodState::Shared,
            (1, Some(_)) => SinglePodState::Owned,
            _ => SinglePodState::Unowned,
        }
    }
}

/// Every volume that is published or single-pod, with its owner and publishes, in name
/// order.
pub fn volume_views(
    facts: &Facts,
    single_pod: &BTreeMap<String, SinglePodReason>,
    mounts: &Mounts,
    owners: &BTreeMap<String, String>,
) -> Vec<VolumeView> {
    each_volume_view(facts, single_pod, mounts, owners).collect()
}

/// [`volume_views`] one at a time, for a caller that keeps them in a collection of its own
/// (10,000 views are 2 MiB, not to be built twice per change).
pub fn each_volume_view<'a>(
    facts: &'a Facts,
    single_pod: &'a BTreeMap<String, SinglePodReason>,
    mounts: &'a Mounts,
    owners: &'a BTreeMap<String, String>,
) -> impl ExactSizeIterator<Item = VolumeView> + 'a {
    let names: BTreeSet<&str> = mounts.volumes().chain(single_pod.keys().map(String::as_str)).collect();
    names.into_iter().map(move |name| {
        let mut view = VolumeView {
            name: name.to_owned(),
            single_pod: single_pod.get(name).copied(),
            claim: facts.claim_of(name),
            driver: facts.persistent_volume(name).and_then(|pv| pv.csi.as_ref()).map(|c| c.driver.clone()),
            owner: owners.get(name).cloned(),
            published_to: mounts.pods_of(name).into_iter().map(|(p, _)| p.to_owned()).collect(),
            quarantined: mounts.masked_pods(name).into_iter().map(str::to_owned).collect(),
            state: None,
            pod_names: BTreeMap::new(),
        };
        view.state = view.single_pod.map(|_| view.single_pod_state());
        let uids = view.owner.iter().chain(&view.published_to).chain(&view.quarantined);
        view.pod_names = uids
            .filter_map(|uid| facts.pod(uid).map(|p| (uid.clone(), format!("{}/{}", p.namespace, p.name))))
            .collect();
        view
    })
}

#[cfg(test)]
mod tests;
