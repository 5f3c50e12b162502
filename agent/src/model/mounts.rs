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
mod tests {
    use super::*;

    const ROOT: &str = "/var/lib/kubelet";

    fn line(id: i32, mount_point: &str) -> String {
        format!("{id} 30 8:1 /volumes/x {mount_point} rw,relatime shared:1 - ext4 /dev/sdb rw\n")
    }

    #[test]
    fn publishes_come_oldest_first_and_only_from_publish_targets() {
        let text = [
            line(60, &publish_path("pod-b", "pv-rwop")),
            line(50, &publish_path("pod-a", "pv-rwop")),
            line(55, &publish_path("pod-a", "pv-rwop")), // the owner's second publish
            line(80, "/var/lib/kubelet/pods/pod-c/volumes/kubernetes.io~csi/pv-other/mount/sub"),
        ]
        .concat();
        let mounts = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
        let pods: Vec<_> = mounts.pods_of("pv-rwop").iter().map(|(p, m)| (p.to_string(), m.mount_id)).collect();
        assert_eq!(pods, [("pod-a".to_string(), Some(50)), ("pod-b".to_string(), Some(60))]);
        assert!(mounts.pods_of("pv-other").is_empty(), "a mount below a publish target is not a publish");
    }

    #[test]
    fn escaped_spaces_in_a_publish_target_are_still_recognised() {
        let text = line(9, r"/var/lib/kubelet/pods/pod\040a/volumes/kubernetes.io~csi/pv-rwop/mount");
        let mounts = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
        assert_eq!(mounts.pods_of("pv-rwop")[0].0, "pod a");
    }

    fn publish_path(pod: &str, volume: &str) -> String {
        format!("{ROOT}/pods/{pod}/volumes/kubernetes.io~csi/{volume}/mount")
    }

    fn table(mounts: &[(i32, String)]) -> MountTable {
        let text: String = mounts
            .iter()
            .map(|(id, path)| format!("{id} 30 8:1 /x {path} rw,relatime shared:1 - ext4 /dev/sdb rw\n"))
            .collect();
        MountTable::parse(text.as_bytes())
    }

    fn target(pod: &str, volume: &str) -> PublishTarget {
        PublishTarget { pod_uid: pod.into(), volume: volume.into(), block: false }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn owners(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(v, p)| (v.to_string(), p.to_string())).collect()
    }

    #[test]
    fn the_mount_table_gives_publishes_oldest_first() {
        let t = table(&[
            (90, publish_path("pod-b", "pv-1")),
            (40, publish_path("pod-a", "pv-1")),
            (95, publish_path("pod-a", "pv-1")), // stacked: keeps 40
            (50, "/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~empty-dir/x".into()),
            (60, format!("{ROOT}/plugins/kubernetes.io/csi/volumeDevices/publish/pv-blk/pod-c")),
        ]);
        let m = Mounts::from_table(&t, Path::new(ROOT));
        let pods: Vec<_> = m.pods_of("pv-1").iter().map(|(p, m)| (p.to_string(), m.mount_id)).collect();
        assert_eq!(pods, [("pod-a".to_string(), Some(40)), ("pod-b".to_string(), Some(90))]);
        assert!(m.pods_of("pv-blk")[0].1.block);
        assert_eq!(m.volumes().collect::<Vec<_>>(), ["pv-1", "pv-blk"]);
    }

    #[test]
    fn a_recorded_mount_table_gives_every_publish_and_nothing_else() {
        let text = include_bytes!("../../tests/fixtures/recorded/kubelet-node.mountinfo");
        let table = MountTable::parse(text);
        assert_eq!(table.skipped, [], "every recorded line parses");
        let m = Mounts::from_table(&table, Path::new(ROOT));
        let (a, b) = ("7d1c0a52-1111-4a6e-9f00-0000000000a1", "7d1c0a52-2222-4a6e-9f00-0000000000b2");
        let pods = |v| m.pods_of(v).into_iter().map(|(p, _)| p.to_owned()).collect::<Vec<_>>();
        assert_eq!(pods("pvc-rwx"), [a, b]);
        assert_eq!(pods("pvc-rwop"), [a], "the subPath bind is not a second publish");
        assert_eq!(pods("pv odd"), [a], "the escaped space is decoded");
        assert_eq!(pods("pvc-blk"), [b]);
        assert!(m.pods_of("pvc-blk")[0].1.block);
        assert_eq!(m.volumes().count(), 4, "the staging mount is not a publish");
    }

    #[test]
    fn a_target_whose_top_mount_is_the_mask_is_quarantined_not_published() {
        let mask = |id: i32, path: &str| format!("{id} 30 0:50 / {path} ro - tmpfs {MASK_SOURCE} ro\n");
        let bind = |id: i32, path: &str| format!("{id} 30 8:1 /x {path} rw - ext4 /dev/sdb rw\n");
        let (a, b, c) = (publish_path("pod-a", "pv-1"), publish_path("pod-b", "pv-1"), publish_path("pod-c", "pv-1"));
        // b: its bind, then the mask over it; c: a newer publish over an old mask.
        let text = [bind(40, &a), bind(41, &b), mask(42, &b), mask(43, &c), bind(44, &c)].concat();
        let m = Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
        let holders: Vec<_> = m.pods_of("pv-1").into_iter().map(|(p, _)| p).collect();
        assert_eq!(holders, ["pod-a", "pod-c"], "the mask is not a publish and hides b's bind");
        assert_eq!(m.masked_pods("pv-1"), ["pod-b"]);
        assert!(m.is_masked("pv-1", "pod-b") && !m.is_masked("pv-1", "pod-c"));
    }

    #[test]
    fn a_quarantine_turns_a_publish_into_a_mask_and_an_unpublish_takes_either() {
        let mut m = Mounts::default();
        let path = PathBuf::from(publish_path("b", "v"));
        m.apply(&PublishChange::Published(target("b", "v"), path.clone()));
        m.quarantined(&target("b", "v"), &path);
        assert_eq!((m.pods_of("v").len(), m.masked_pods("v")), (0, vec!["b"]));
        assert_eq!(m.volumes().collect::<Vec<_>>(), ["v"], "still listed, as quarantined");
        m.apply(&PublishChange::Unpublished(target("b", "v")));
        assert_eq!((m.masks().count(), m.volumes().count()), (0, 0));
        m.quarantined(&target("c", "v"), &path);
        m.unmasked("v", "c");
        assert_eq!(m.masks().count(), 0);
    }

    #[test]
    fn a_mask_is_removed_only_after_its_pod_is_missing_from_complete_facts_twice() {
        let mut m = Mounts::default();
        m.quarantined(&target("b", "v"), Path::new("/t"));
        let mut r = MaskReconciler::default();
        let (with_b, without_b) = (BTreeSet::from(["a", "b"]), BTreeSet::from(["a"]));
        assert_eq!(r.plan(&m, Some(&with_b)), []);
        assert_eq!(r.plan(&m, Some(&without_b)), [], "missing once: perhaps a pod the watch has not caught up with");
        assert_eq!(r.plan(&m, None), [], "stale facts decide nothing and reset the count");
        assert_eq!(r.plan(&m, Some(&without_b)), []);
        let stale = r.plan(&m, Some(&without_b));
        assert_eq!(stale, [StaleMask { volume: "v".into(), pod_uid: "b".into(), mount_point: "/t".into() }]);
    }

    #[test]
    fn a_deleted_pods_mask_is_removed_at_once() {
        let mut m = Mounts::default();
        m.quarantined(&target("b", "v"), Path::new("/t"));
        m.quarantined(&target("c", "v"), Path::new("/u"));
        let stale = masks_of_deleted(&m, &BTreeSet::from(["b"]));
        assert_eq!(stale, [StaleMask { volume: "v".into(), pod_uid: "b".into(), mount_point: "/t".into() }]);
        assert_eq!(masks_of_deleted(&m, &BTreeSet::new()), []);
    }

    /// The kernel gave the newcomer's mount a reused id lower than the owner's: the unique
    /// ids, where they can all be read, decide; one unreadable id leaves the table's order.
    #[test]
    fn unique_mount_ids_order_a_shared_volume_where_reused_ids_would_not() {
        let (a, b) = (publish_path("pod-a", "pv-1"), publish_path("pod-b", "pv-1"));
        let text = [line(90, &a), line(40, &b), line(50, &publish_path("pod-c", "pv-alone"))].concat();
        let read = || Mounts::from_table(&MountTable::parse(text.as_bytes()), Path::new(ROOT));
        let order = |m: &Mounts| m.pods_of("pv-1").iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>();
        assert_eq!(order(&read()), ["pod-b", "pod-a"], "by the table's reused ids");

        let mut asked = Vec::new();
        let mut mounts = read();
        mounts.learn_ages(|at| {
            asked.push(at.to_owned());
            Some(if at == Path::new(&a) { 0x8000_0010 } else { 0x8000_0020 })
        });
        assert_eq!(order(&mounts), ["pod-a", "pod-b"], "by age");
        assert_eq!(asked.len(), 2, "only a volume published into several pods is asked about: {asked:?}");

        let mut partly = read();
        partly.learn_ages(|at| (at == Path::new(&a)).then_some(0x8000_0010));
        assert_eq!(order(&partly), ["pod-b", "pod-a"], "all or none per volume");
        assert!(partly.pods_of("pv-1").iter().all(|(_, p)| p.unique_id.is_none()));
    }

    #[test]
    fn events_add_and_remove_publishes() {
        let mut m = Mounts::default();
        m.apply(&PublishChange::Published(target("a", "v"), publish_path("a", "v").into()));
        m.apply(&PublishChange::Published(target("b", "v"), publish_path("b", "v").into()));
        assert!(m.is_published("v", "a") && m.is_published("v", "b"));
        m.apply(&PublishChange::Unpublished(target("a", "v")));
        assert!(!m.is_published("v", "a"));
        m.apply(&PublishChange::Unpublished(target("b", "v")));
        assert_eq!(m.volumes().count(), 0, "an unpublished volume leaves no empty entry");
        m.apply(&PublishChange::Unpublished(target("zz", "none")));
    }

    #[test]
    fn drift_counts_publishes_the_events_missed() {
        let from_events = Mounts::from_table(&table(&[(1, publish_path("a", "v"))]), Path::new(ROOT));
        let from_table = Mounts::from_table(&table(&[(2, publish_path("b", "v"))]), Path::new(ROOT));
        assert_eq!(from_events.differences(&from_table), 2);
        assert_eq!(from_table.differences(&from_table.clone()), 0);
    }

    /// Publish, second publish, unmount, pod deletion and restart, as the reconciler sees
    /// them pass by pass.
    #[test]
    fn an_owner_is_released_only_after_its_mount_is_gone_for_two_passes() {
        let root = Path::new(ROOT);
        let single = set(&["pv-1"]);
        let mut r = OwnerReconciler::default();

        // Pod A has it published; pod B's publish (quarantined or refused) is not an owner.
        let both =
            Mounts::from_table(&table(&[(10, publish_path("a", "pv-1")), (20, publish_path("b", "pv-1"))]), root);
        assert_eq!(r.plan(|v| single.contains(v), &both, &owners(&[("pv-1", "a")])), []);

        // A is terminating (or deleted from the API) but still mounted: nothing changes.
        let a_only = Mounts::from_table(&table(&[(10, publish_path("a", "pv-1"))]), root);
        assert_eq!(r.plan(|v| single.contains(v), &a_only, &owners(&[("pv-1", "a")])), []);

        // A's unmount event was lost: the first pass only notes it, the second releases.
        let none = Mounts::default();
        assert_eq!(r.plan(|v| single.contains(v), &none, &owners(&[("pv-1", "a")])), []);
        assert_eq!(
            r.plan(|v| single.contains(v), &none, &owners(&[("pv-1", "a")])),
            [OwnerFix::Release { volume: "pv-1".into(), pod_uid: "a".into() }]
        );
    }

    #[test]
    fn a_claim_racing_the_mount_table_read_is_not_released() {
        let mut r = OwnerReconciler::default();
        let single = set(&["pv-1"]);
        let published = Mounts::from_table(&table(&[(10, publish_path("a", "pv-1"))]), Path::new(ROOT));
        // Pass 1 read the table before the mount landed; pass 2 sees it.
        assert_eq!(r.plan(|v| single.contains(v), &Mounts::default(), &owners(&[("pv-1", "a")])), []);
        assert_eq!(r.plan(|v| single.contains(v), &published, &owners(&[("pv-1", "a")])), []);
        assert_eq!(
            r.plan(|v| single.contains(v), &Mounts::default(), &owners(&[("pv-1", "a")])),
            [],
            "the count starts again"
        );
    }

    #[test]
    fn published_single_pod_volumes_without_an_owner_are_seeded_with_the_oldest_publish() {
        let mut r = OwnerReconciler::default();
        let t = table(&[(30, publish_path("late", "pv-1")), (10, publish_path("early", "pv-1"))]);
        let m = Mounts::from_table(&t, Path::new(ROOT));
        assert_eq!(
            r.plan(|v| ["pv-1", "pv-unused"].contains(&v), &m, &BTreeMap::new()),
            [OwnerFix::Seed { volume: "pv-1".into(), pod_uid: "early".into() }]
        );
        assert_eq!(r.plan(|_| false, &m, &BTreeMap::new()), [], "not single-pod: no owner");
    }

    #[test]
    fn views_join_facts_mounts_and_owners() {
        use crate::facts::{CsiSource, PersistentVolume};
        let facts = Facts {
            persistent_volumes: vec![PersistentVolume {
                name: "pv-1".into(),
                access_modes: vec![],
                csi: Some(CsiSource { driver: "d".into(), volume_handle: "h".into(), fs_type: None }),
                claim_ref: Some(ClaimRef { namespace: "ns".into(), name: "c".into() }),
                block: false,
            }],
            ..Facts::default()
        };
        let single = [
            ("pv-1".to_owned(), SinglePodReason::ReadWriteOncePod),
            ("pv-idle".to_owned(), SinglePodReason::Annotated),
        ]
        .into_iter()
        .collect();
        let m = Mounts::from_table(
            &table(&[(1, publish_path("a", "pv-1")), (2, publish_path("b", "rwx"))]),
            Path::new(ROOT),
        );
        let views = volume_views(&facts, &single, &m, &owners(&[("pv-1", "a")]));
        let names: Vec<_> = views.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["pv-1", "pv-idle", "rwx"]);
        assert_eq!(views[0].owner.as_deref(), Some("a"));
        assert_eq!(views[0].driver.as_deref(), Some("d"));
        assert_eq!(views[0].claim.as_ref().unwrap().to_string(), "ns/c");
        assert_eq!(views[1].published_to, Vec::<String>::new());
        assert_eq!(views[2].single_pod, None);
    }
}
