//! Copies of owned volumes in other pods' mount namespaces that no mount call of theirs
//! made: propagation brings every publish into a pod with a hostPath on kubelet's tree
//! (`HostToContainer`), without a syscall there; and mounts made before the agent started
//! were never seen. The node's namespaces are scanned at start-up, after a publish of a
//! single-pod volume (`crate::agent::scan_schedule`: at once, or at most twice a second in a
//! burst), and at each reconciliation. Their tables are read off the loop
//! (`crate::agent::pod_namespaces`) and judged on it, against the volumes owned when the read
//! comes back, as a mount call's access is (`enforce::decision::decide_access`), with
//! route `propagated`; a mount of a directory above an owned volume's is reported where
//! no BPF LSM guards its opens (route `ancestor`, `decide_ancestor_access`).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Instant,
};

use tracing::{debug, info, warn};

use super::{
    Running,
    effects::{Effect, Effects, Seen},
};
use crate::agent::{
    pod_namespaces::{self, PodNamespace, PodNamespaces},
    reported_access::ReportedAccess,
};
use crate::{
    enforce::decision::{AccessAction, MountMaker, decide_access, decide_ancestor_access},
    guard::open_reporter::ScannedPlaces,
    model::{access, exempt},
};

impl Running<'_> {
    /// Has every pod's mount namespace read off the loop; what it shows comes back to
    /// [`Self::namespaces_read`].
    pub(super) fn scan_namespaces(&mut self) {
        self.out_of_band.scans.schedule.ran(Instant::now());
        if self.owned_trees().is_empty() {
            return;
        }
        let exempt = self.exempt_readers();
        self.out_of_band.scans.start(self.model.mountinfo().to_owned(), exempt);
    }

    /// The scan at start-up, before the loop serves anything: read and judged at once.
    pub(super) fn scan_namespaces_now(&mut self) -> Effects<'static> {
        self.out_of_band.scans.schedule.ran(Instant::now());
        if self.owned_trees().is_empty() {
            return Vec::new();
        }
        let read = pod_namespaces::read(self.model.mountinfo(), &self.exempt_readers());
        self.judge_namespaces(read)
    }

    /// A scan's read came back: judged against the volumes owned now.
    pub(super) fn namespaces_read(&mut self, read: PodNamespaces) -> Effects<'static> {
        let again = self.out_of_band.scans.finished();
        let mut effects = self.judge_namespaces(read);
        if again {
            effects.push(Effect::ScanNamespaces);
        }
        effects
    }

    /// The pods (UIDs) the operator exempts, by the facts in force: their namespaces are
    /// not read.
    fn exempt_readers(&self) -> BTreeSet<String> {
        exempt::exempt_pods(&self.opts.exempt_readers, &self.model.snapshot().facts.pods)
    }

    /// Looks through the pods' mount namespaces `read` holds for copies of owned volumes.
    fn judge_namespaces(&mut self, read: PodNamespaces) -> Effects<'static> {
        let trees = self.owned_trees();
        if trees.is_empty() {
            return Vec::new();
        }
        let mut effects = Vec::new();
        let PodNamespaces { namespaces, drivers } = read;
        let scanned = namespaces.len();
        let mut shown_at: BTreeMap<String, ScannedPlaces> = BTreeMap::new();
        for PodNamespace { pod, caller, table } in namespaces {
            let (pid, mnt_ns) = (caller.pid, caller.mnt_ns);
            for access in access::copies_in_namespace(&table, &trees) {
                // Where the open reporter watches: the owner's containers' mounts of the
                // volume, and other pods' mounts above it (not a CSI node plugin's).
                let place = || {
                    Path::new(&format!("/proc/{pid}/root"))
                        .join(access.mount_point.strip_prefix("/").unwrap_or(&access.mount_point))
                };
                let places = shown_at.entry(access.volume.clone()).or_default();
                match access.route {
                    access::Route::Propagated if access.owner == pod => {
                        places.owner.insert(place());
                    }
                    access::Route::Ancestor if access.owner != pod && !drivers.contains(&pod) => {
                        let mount = table.mounts.iter().find(|m| m.id == access.mount_id);
                        let tree = trees.iter().find(|t| t.volume == access.volume);
                        if let Some(dir) = mount.zip(tree).and_then(|(mount, tree)| tree.dir_below(mount)) {
                            places.ancestors.insert(access.mount_id, (place(), dir));
                        }
                    }
                    _ => {}
                }
                // The pod's own publish (the owner's, or a second pod's that stands: made
                // while no agent ran, or left in audit mode) in its containers.
                if access::holds_publish(&trees, &access.volume, &pod) {
                    continue;
                }
                let key = ReportedAccess::of(mnt_ns, &access);
                if self.out_of_band.reported.contains(&key) {
                    continue;
                }
                let decided = match access.route {
                    // A CSI node plugin's data directory is above every volume it serves.
                    access::Route::Ancestor if drivers.contains(&pod) => continue,
                    access::Route::Ancestor => decide_ancestor_access(self.decision.mode),
                    _ => decide_access(self.decision.mode, MountMaker::OtherPod, self.opts.detach_node_access),
                };
                if decided != AccessAction::Allow {
                    let (seen, pod) = (Seen::Caller(caller.clone()), Some(pod.clone()));
                    effects.push(Effect::Access { seen, access, decided, pod, key });
                }
            }
        }
        debug!("propagated copies: {scanned} pod mount namespace(s) scanned for {} owned volume(s)", trees.len());
        self.found_drivers(drivers);
        if let Some(reports) = self.out_of_band.open_reporter.as_mut() {
            reports.scanned = shown_at;
            self.watch_opens();
        }
        effects
    }

    /// Keeps the pods this scan took for CSI node plugins (a `Bidirectional` mount, which
    /// only a privileged container has and every node plugin needs) and, if they changed,
    /// gives the LSM programs the new exempt set.
    fn found_drivers(&mut self, drivers: BTreeSet<String>) {
        if drivers == self.out_of_band.driver_pods {
            return;
        }
        for pod in drivers.difference(&self.out_of_band.driver_pods) {
            info!(
                "pod {pod} has a mount in a shared peer group: taken for a CSI node plugin, exempt from the open guard"
            );
        }
        self.out_of_band.driver_pods = drivers;
        if let Err(e) = self.owners.sync_exempt_pods(&self.exempt_pods()) {
            warn!("the kernel's exempt readers were not updated: {e}");
        }
    }
}
