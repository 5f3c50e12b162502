//! Copies of owned volumes in other pods' mount namespaces that no mount call of theirs
//! made: propagation brings every publish into a pod with a hostPath on kubelet's tree
//! (`HostToContainer`), without a syscall there; and mounts made before the agent started
//! were never seen. The node's namespaces are scanned at start-up, after a publish of a
//! single-pod volume (`super::scan_schedule`: at once, or at most twice a second in a
//! burst), and at each reconciliation; what is found is judged as a mount call's access
//! is (`enforce::decision::decide_access`), with route `propagated`; a mount of a directory
//! above an owned volume's is reported where no BPF LSM guards its opens (route
//! `ancestor`, `decide_ancestor_access`). A namespace that
//! still shows the node's root (a container being created, before its runtime pivots
//! into the container's root) is left: its copies are the node's own mounts.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::Instant,
};

use tracing::{debug, info, warn};

use super::{reported_access::ReportedAccess, running::Running};
use crate::{
    enforce::{
        decision::{AccessAction, MountMaker, decide_access, decide_ancestor_access},
        detach,
    },
    kernel::decode::{Caller, RawString},
    model::access,
    node_files::mount_table::MountTable,
    sys::mountns::{OWN_NAMESPACE, mount_namespaces, namespace_inode, namespace_of},
};

impl Running<'_> {
    /// Looks through every pod's mount namespace for copies of owned volumes.
    pub(super) fn scan_namespaces(&mut self) {
        self.scans.ran(Instant::now());
        let trees = self.owned_trees();
        if trees.is_empty() {
            return;
        }
        let (namespaces, drivers) = self.read_pod_namespaces();
        let scanned = namespaces.len();
        let mut owner_places: BTreeMap<String, BTreeSet<PathBuf>> = BTreeMap::new();
        for (pod, caller, table) in namespaces {
            let (pid, mnt_ns) = (caller.pid, caller.mnt_ns);
            for access in access::copies_in_namespace(&table, &trees) {
                if access.owner == pod && access.route == access::Route::Propagated {
                    // Where the owner's containers see it: the open reporter watches there.
                    let place = Path::new(&format!("/proc/{pid}/root"))
                        .join(access.mount_point.strip_prefix("/").unwrap_or(&access.mount_point));
                    owner_places.entry(access.volume.clone()).or_default().insert(place);
                }
                // The pod's own publish (the owner's, or a second pod's that stands: made
                // while no agent ran, or left in audit mode) in its containers.
                if access::holds_publish(&trees, &access.volume, &pod) {
                    continue;
                }
                let key = ReportedAccess::of(mnt_ns, &access);
                if self.reported_access.contains(&key) {
                    continue;
                }
                let decided = match access.route {
                    // A CSI node plugin's data directory is above every volume it serves.
                    access::Route::Ancestor if drivers.contains(&pod) => continue,
                    access::Route::Ancestor => decide_ancestor_access(self.decision.mode),
                    _ => decide_access(self.decision.mode, MountMaker::OtherPod, self.opts.detach_node_access),
                };
                if decided != AccessAction::Allow
                    && let Some(true) = self.handle_access(&caller, access, decided, Some(&pod))
                {
                    self.remember_reported(key);
                }
            }
        }
        debug!("propagated copies: {scanned} pod mount namespace(s) scanned for {} owned volume(s)", trees.len());
        self.found_drivers(drivers);
        if let Some(reports) = self.open_reporter.as_mut() {
            reports.owner_places = owner_places;
            self.watch_opens();
        }
    }

    /// The mount table of every pod's namespace (pods not exempt, containers that have
    /// pivoted into their root), with the process it was read through, and the pods that
    /// have a mount in a shared peer group (taken for CSI node plugins).
    fn read_pod_namespaces(&mut self) -> (Vec<(String, Caller, MountTable)>, BTreeSet<String>) {
        // The node's own namespace (kubelet's places are there) and the agent's (its
        // read-only view of the kubelet root) hold copies of every publish by design.
        let node = namespace_inode(&namespace_of(self.model.mountinfo())).ok();
        let own = namespace_inode(Path::new(OWN_NAMESPACE)).ok();
        // Read once, and only if a pod's namespace is there to compare.
        let mut node_root = None;
        let mut drivers = BTreeSet::new();
        let mut namespaces = Vec::new();
        for (inode, pid) in mount_namespaces(Path::new("/proc")) {
            let Ok(mnt_ns) = u32::try_from(inode) else { continue };
            if Some(inode) == node || Some(inode) == own {
                continue;
            }
            // Pods' namespaces only: a node service's private namespace (systemd's
            // PrivateTmp, say) receives a copy of every node mount, as the node's own does.
            let Some(pod) = self.callers.pod_uid(pid, 0) else { continue };
            if self.is_exempt(&pod) {
                continue;
            }
            let caller = Caller { pid, tgid: pid, mnt_ns, comm: comm_of(pid), cgroup_id: 0 };
            let Some(table) = detach::caller_table(&caller) else { continue };
            // A copy of the node's namespace that has not pivoted into a container's root
            // yet: a runtime creating a container unshares first (every node mount is
            // copied, each at its node path), then pivots and drops the old root with them.
            // Nothing there that the node's own namespace does not show.
            let node_root = node_root
                .get_or_insert_with(|| MountTable::read(self.model.mountinfo()).ok().and_then(|t| root_of(&t)));
            if node_root.is_some() && root_of(&table) == *node_root {
                debug!("mount namespace {mnt_ns} (pid {pid}) shows the node's root: not yet a container's, left");
                continue;
            }
            // A pod is a driver if any of its containers is: all are read before any is judged.
            if table.mounts.iter().any(|m| m.shared) {
                drivers.insert(pod.clone());
            }
            namespaces.push((pod, caller, table));
        }
        (namespaces, drivers)
    }

    /// Keeps the pods this scan took for CSI node plugins (a `Bidirectional` mount, which
    /// only a privileged container has and every node plugin needs) and, if they changed,
    /// gives the LSM programs the new exempt set.
    fn found_drivers(&mut self, drivers: BTreeSet<String>) {
        if drivers == self.driver_pods {
            return;
        }
        for pod in drivers.difference(&self.driver_pods) {
            info!(
                "pod {pod} has a mount in a shared peer group: taken for a CSI node plugin, exempt from the open guard"
            );
        }
        self.driver_pods = drivers;
        if let Err(e) = self.owners.sync_exempt_pods(&self.exempt_pods()) {
            warn!("the kernel's exempt readers were not updated: {e}");
        }
    }
}

/// What `table`'s `/` shows: its device and root.
fn root_of(table: &MountTable) -> Option<(String, std::path::PathBuf)> {
    table.root_shown().map(|(device, root)| (device.to_owned(), root.to_owned()))
}

/// The process's command name, for the conflict's "by" (empty if it is gone).
fn comm_of(pid: u32) -> RawString {
    let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
    RawString { bytes: comm.trim_ascii_end().to_vec(), truncated: false }
}
