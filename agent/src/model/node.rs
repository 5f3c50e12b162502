//! The agent's picture of the node, in one place: the facts in force (API or inventory),
//! the single-pod set they imply, what is published where, and the findings. The event
//! loop feeds it; it never touches the kernel itself (the caller applies what it says).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
};

use tracing::{debug, info, warn};

use crate::{
    facts::{Origin, SinglePodReason, SinglePodSet, Snapshot},
    model::checks::{self, Finding},
    model::explain::{Conflict, ConflictAction},
    model::mounts::{
        MaskReconciler, Mounts, OwnerFix, OwnerReconciler, PublishChange, StaleMask, VolumeView, masks_of_deleted,
        volume_views,
    },
    node_files::kubelet::PublishTarget,
    node_files::mount_table::MountTable,
    sys::statmount::unique_mount_id,
};

pub struct NodeModel {
    kubelet_root: PathBuf,
    mountinfo: PathBuf,
    command_line: BTreeSet<String>,
    snapshot: Snapshot,
    /// Shared with the view builder: replaced, never changed in place.
    single_pod: SinglePodSet,
    mounts: Mounts,
    reconciler: OwnerReconciler,
    mask_reconciler: MaskReconciler,
    fact_findings: Vec<Finding>,
    tree_findings: Vec<Finding>,
    /// Counts the changes to the publishes since start: a mount table read while this
    /// moved is older than the model and must not replace it.
    publish_epoch: u64,
    /// Replaced snapshots, until the caller takes them away.
    retired: Vec<Snapshot>,
}

/// What a reconciliation reads from the node, off the event loop: the publishes in the
/// mount table and the kubelet tree's findings, with the model's epoch when it started.
#[derive(Debug)]
pub struct NodeRead {
    pub epoch: u64,
    pub mounts: std::io::Result<Mounts>,
    pub tree_findings: Vec<Finding>,
}

/// A snapshot with what the model derives from it (the single-pod set, the findings
/// about the facts) and its look-ups built: work proportional to the facts, done where
/// it holds up nothing (the agent prepares on the blocking pool).
pub struct PreparedFacts {
    snapshot: Snapshot,
    single_pod: SinglePodSet,
    findings: Vec<Finding>,
}

impl PreparedFacts {
    /// `previous` is the last prepared single-pod set: an equal set is that same `Arc`,
    /// so the loop sees "unchanged" without comparing thousands of names.
    pub fn new(snapshot: Snapshot, command_line: &BTreeSet<String>, previous: Option<&SinglePodSet>) -> Self {
        snapshot.facts.build_lookups();
        let mut single_pod = snapshot.facts.single_pod_volumes();
        for name in command_line {
            single_pod.entry(name.clone()).or_insert(SinglePodReason::CommandLine);
        }
        let single_pod = match previous {
            Some(previous) if **previous == single_pod => previous.clone(),
            _ => Arc::new(single_pod),
        };
        let findings = checks::ephemeral_claims(&snapshot.facts);
        Self { snapshot, single_pod, findings }
    }

    pub fn single_pod(&self) -> &SinglePodSet {
        &self.single_pod
    }
}

/// What a new snapshot changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FactsChange {
    /// The single-pod set: the kernel map or the userspace table must follow.
    pub single_pod: bool,
    /// Worth a log line: the set, the findings, or the source's health changed (pods
    /// coming and going on a busy node are not).
    pub noteworthy: bool,
}

/// What one reconciliation pass found.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Publishes the events had missed (or invented), corrected from the mount table.
    pub drift: usize,
    /// The publishes the table has and the model lacked (their events were missed).
    pub found: Vec<PublishChange>,
    pub fixes: Vec<OwnerFix>,
    /// Masks whose pod is gone: to be removed so kubelet can delete the pod's directory.
    pub stale_masks: Vec<StaleMask>,
}

impl NodeModel {
    /// Reads the mount table and the kubelet tree. `command_line` volumes are single-pod
    /// whatever the facts say.
    /// kubelet's `--root-dir`, which every path is classified against.
    pub fn kubelet_root(&self) -> &Path {
        &self.kubelet_root
    }

    pub fn new(
        kubelet_root: &Path,
        mountinfo: &Path,
        command_line: impl IntoIterator<Item = String>,
        snapshot: Snapshot,
    ) -> std::io::Result<Self> {
        let mut model = Self {
            kubelet_root: kubelet_root.to_owned(),
            mountinfo: mountinfo.to_owned(),
            command_line: command_line.into_iter().collect(),
            snapshot: Snapshot::empty(Origin::None),
            single_pod: Arc::default(),
            mounts: Mounts::default(),
            reconciler: OwnerReconciler::default(),
            mask_reconciler: MaskReconciler::default(),
            fact_findings: Vec::new(),
            tree_findings: Vec::new(),
            publish_epoch: 0,
            retired: Vec::new(),
        };
        model.set_facts(snapshot);
        model.mounts = model.read_mounts()?;
        model.scan_tree();
        Ok(model)
    }

    fn read_mounts(&self) -> std::io::Result<Mounts> {
        read_mounts(&self.mountinfo, &self.kubelet_root)
    }

    /// The reads of a reconciliation, as a job for another thread: the mount table
    /// (thousands of lines on a busy node) and every pod's `vol_data.json`.
    pub fn node_reader(&self) -> impl FnOnce() -> NodeRead + Send + 'static {
        let (mountinfo, kubelet_root, epoch) = (self.mountinfo.clone(), self.kubelet_root.clone(), self.publish_epoch);
        move || NodeRead {
            epoch,
            mounts: read_mounts(&mountinfo, &kubelet_root),
            tree_findings: checks::inline_handles(&checks::scan_pod_volumes(&kubelet_root)),
        }
    }

    /// Whether the publishes changed since `read` started: then its table is older
    /// than what the events told the model.
    pub fn is_outdated(&self, read: &NodeRead) -> bool {
        read.epoch != self.publish_epoch
    }

    /// Takes a new snapshot from the source and says what changed.
    pub fn set_facts(&mut self, snapshot: Snapshot) -> FactsChange {
        let prepared = PreparedFacts::new(snapshot, &self.command_line, Some(&self.single_pod));
        let change = self.set_prepared(prepared);
        self.retired.clear();
        change
    }

    /// The volumes named on the command line (single-pod whatever the facts say).
    pub fn command_line(&self) -> &BTreeSet<String> {
        &self.command_line
    }

    /// Takes facts prepared elsewhere ([`PreparedFacts::new`]) and says what changed.
    /// The facts it replaces are [`Self::take_retired`]'s, to be dropped where freeing
    /// thousands of objects holds up nothing.
    pub fn set_prepared(&mut self, prepared: PreparedFacts) -> FactsChange {
        let PreparedFacts { snapshot, single_pod, findings } = prepared;
        let set_changed = !Arc::ptr_eq(&single_pod, &self.single_pod) && *single_pod != *self.single_pod;
        let change = FactsChange {
            single_pod: set_changed,
            noteworthy: set_changed
                || findings != self.fact_findings
                || snapshot.stale.is_some() != self.snapshot.stale.is_some()
                || snapshot.origin != self.snapshot.origin,
        };
        self.fact_findings = findings;
        self.retired.push(std::mem::replace(&mut self.snapshot, snapshot));
        if change.single_pod {
            self.single_pod = single_pod;
        }
        change
    }

    /// The snapshots replaced since the last call.
    pub fn take_retired(&mut self) -> Vec<Snapshot> {
        std::mem::take(&mut self.retired)
    }

    /// Re-reads `vol_data.json` files for the inline-handle check. A finding is logged
    /// when it appears, not again at every pass while it lasts.
    pub fn scan_tree(&mut self) {
        self.set_tree_findings(checks::inline_handles(&checks::scan_pod_volumes(&self.kubelet_root)));
    }

    /// The tree's findings as a scan found them; new ones are logged.
    pub fn set_tree_findings(&mut self, findings: Vec<Finding>) {
        for f in findings.iter().filter(|f| !self.tree_findings.contains(f)) {
            warn!("finding {:?} ({:?}) {}: {}", f.check, f.severity, f.subject, f.message);
        }
        self.tree_findings = findings;
    }

    pub fn apply(&mut self, change: &PublishChange) {
        self.publish_epoch += 1;
        self.mounts.apply(change);
    }

    /// The quarantine replaced this pod's publish with the mask.
    pub fn quarantined(&mut self, target: &PublishTarget, mount_point: &Path) {
        self.publish_epoch += 1;
        self.mounts.quarantined(target, mount_point);
    }

    /// volguard removed the mask from this pod's target.
    pub fn unmasked(&mut self, volume: &str, pod_uid: &str) {
        self.publish_epoch += 1;
        self.mounts.unmasked(volume, pod_uid);
    }

    /// The mount table this model reads: masks are removed in its mount namespace.
    pub fn mountinfo(&self) -> &Path {
        &self.mountinfo
    }

    /// Re-reads the mount table (the truth), replacing what events built, and plans the
    /// owner fixes against `owners` (the kernel's or userspace's).
    pub fn reconcile(&mut self, owners: &BTreeMap<String, String>) -> std::io::Result<Reconciled> {
        let fresh = self.read_mounts()?;
        Ok(self.reconcile_with(fresh, owners))
    }

    /// As [`Self::reconcile`], with a table read elsewhere ([`Self::node_reader`]).
    pub fn reconcile_with(&mut self, fresh: Mounts, owners: &BTreeMap<String, String>) -> Reconciled {
        let drift = self.mounts.differences(&fresh);
        let found = fresh.publishes_new_since(&self.mounts);
        self.mounts = fresh;
        let pods = staying_pods(&self.snapshot);
        let stale_masks = self.mask_reconciler.plan(&self.mounts, pods.as_ref());
        Reconciled { drift, found, fixes: self.plan_owners(owners), stale_masks }
    }

    /// The masks of pods the facts in force show being deleted (see [`masks_of_deleted`]).
    pub fn masks_of_deleted_pods(&self) -> Vec<StaleMask> {
        masks_of_deleted(&self.mounts, &deleted_pods(&self.snapshot))
    }

    /// Owner fixes against the current mounts, without re-reading the table.
    pub fn plan_owners(&mut self, owners: &BTreeMap<String, String>) -> Vec<OwnerFix> {
        self.reconciler.plan(|volume| self.single_pod.contains_key(volume), &self.mounts, owners)
    }

    /// Single-pod volumes published into more than one pod: `(volume, pods oldest first)`.
    pub fn shared_single_pod_volumes(&self) -> Vec<(String, Vec<String>)> {
        self.mounts
            .published_volumes()
            .filter(|v| self.single_pod.contains_key(*v))
            .filter_map(|v| {
                let pods = self.mounts.pods_of(v);
                (pods.len() > 1).then(|| (v.to_owned(), pods.iter().map(|(p, _)| (*p).to_owned()).collect()))
            })
            .collect()
    }

    pub fn single_pod(&self) -> &SinglePodSet {
        &self.single_pod
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn mounts(&self) -> &Mounts {
        &self.mounts
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.fact_findings.iter().chain(&self.tree_findings)
    }

    pub fn volumes(&self, owners: &BTreeMap<String, String>) -> Vec<VolumeView> {
        volume_views(&self.snapshot.facts, &self.single_pod, &self.mounts, owners)
    }

    /// A conflict with the names the facts know.
    pub fn conflict(&self, action: ConflictAction, volume: &str, pod_uid: &str, owner_uid: &str) -> Conflict {
        Conflict::resolve(&self.snapshot.facts, action, volume, pod_uid, owner_uid)
    }

    /// Logs the state in a few lines (start-up, and after the facts change).
    pub fn log_summary(&self) {
        let by_reason = |r| self.single_pod.values().filter(|&&x| x == r).count();
        info!(
            "node model: {} single-pod volumes ({} ReadWriteOncePod, {} annotated, {} from the command line), \
             {} published volumes, {} findings{}",
            self.single_pod.len(),
            by_reason(SinglePodReason::ReadWriteOncePod),
            by_reason(SinglePodReason::Annotated),
            by_reason(SinglePodReason::CommandLine),
            self.mounts.volumes().count(),
            self.findings().count(),
            match &self.snapshot.stale {
                Some(why) => format!("; facts STALE: {why}"),
                None => String::new(),
            }
        );
        // The tree's findings are logged by `scan_tree` as they appear.
        for finding in &self.fact_findings {
            warn!("finding {:?} ({:?}) {}: {}", finding.check, finding.severity, finding.subject, finding.message);
        }
    }
}

fn read_mounts(mountinfo: &Path, kubelet_root: &Path) -> std::io::Result<Mounts> {
    let table = MountTable::read(mountinfo)?;
    for (line, reason) in &table.skipped {
        warn!("{} line {line} skipped: {reason}", mountinfo.display());
    }
    let mut mounts = Mounts::from_table(&table, kubelet_root);
    if let Some(root) = MountTable::root_of(mountinfo) {
        mounts.learn_ages(|mount_point| {
            let path = root.join(mount_point.strip_prefix("/").unwrap_or(mount_point));
            unique_mount_id(&path).inspect_err(|e| debug!("unique mount id of {}: {e}", path.display())).ok().flatten()
        });
    }
    Ok(mounts)
}

/// The UIDs of the node's pods that are not being deleted, when the facts name them all
/// (a fresh list from the API, or the inventory, which by contract lists the node's pods).
/// A deleted pod whose target still holds a mount is not removed from the API until that
/// mount goes (kubelet finds its volume paths on disk), so a terminating pod counts as gone.
fn staying_pods(snapshot: &Snapshot) -> Option<BTreeSet<&str>> {
    let complete = snapshot.origin != Origin::None && snapshot.stale.is_none();
    complete.then(|| snapshot.facts.pods.iter().filter(|p| !p.terminating).map(|p| p.uid.as_str()).collect())
}

/// The pods the facts show being deleted (`metadata.deletionTimestamp` set).
fn deleted_pods(snapshot: &Snapshot) -> BTreeSet<&str> {
    snapshot.facts.pods.iter().filter(|p| p.terminating).map(|p| p.uid.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::facts::{AccessMode, Facts, PersistentVolume};

    const RECORDED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/recorded/kubelet-node.mountinfo");

    fn snapshot(rwop: &[&str], stale: Option<&str>) -> Snapshot {
        let pv = |name: &&str| PersistentVolume {
            name: (*name).into(),
            access_modes: vec![AccessMode::ReadWriteOncePod],
            csi: None,
            claim_ref: None,
            block: false,
        };
        let facts = Facts { persistent_volumes: rwop.iter().map(pv).collect(), ..Facts::default() };
        Snapshot {
            facts: Arc::new(facts),
            origin: Origin::KubernetesApi,
            stale: stale.map(Into::into),
            synced_at: None,
        }
    }

    #[test]
    fn facts_changes_say_what_the_kernel_and_the_log_must_follow() {
        let root = Path::new("/var/lib/kubelet");
        let mut model = NodeModel::new(root, Path::new(RECORDED), ["pv-flag".to_owned()], snapshot(&[], None)).unwrap();
        assert_eq!(model.single_pod().get("pv-flag"), Some(&SinglePodReason::CommandLine));

        let change = model.set_facts(snapshot(&["pvc-rwop"], None));
        assert_eq!(change, FactsChange { single_pod: true, noteworthy: true });
        assert_eq!(
            model.set_facts(snapshot(&["pvc-rwop"], None)),
            FactsChange { single_pod: false, noteworthy: false }
        );
        let stale = model.set_facts(snapshot(&["pvc-rwop"], Some("pods: connection refused")));
        assert_eq!(stale, FactsChange { single_pod: false, noteworthy: true }, "going stale is worth a line");

        // The recorded table has pvc-rwop published into one pod: the owner to seed.
        let fixes = model.plan_owners(&BTreeMap::new());
        assert_eq!(
            fixes,
            [OwnerFix::Seed { volume: "pvc-rwop".into(), pod_uid: "7d1c0a52-1111-4a6e-9f00-0000000000a1".into() }]
        );
        assert_eq!(model.shared_single_pod_volumes(), []);
        assert!(model.set_facts(snapshot(&["pvc-rwx"], None)).single_pod);
        assert_eq!(model.shared_single_pod_volumes().len(), 1, "pvc-rwx is published into two pods");
    }

    #[test]
    fn an_unreadable_mount_table_fails_the_start_and_skips_a_reconciliation() {
        let missing = Path::new("/nonexistent/mountinfo");
        assert!(NodeModel::new(Path::new("/x"), missing, [], snapshot(&[], None)).is_err());
        let mut model = NodeModel::new(Path::new("/x"), Path::new(RECORDED), [], snapshot(&[], None)).unwrap();
        model.mountinfo = missing.to_owned();
        assert!(model.reconcile(&BTreeMap::new()).is_err(), "the caller logs it and keeps its state");
    }
}
