//! The read half of the namespace scan (`super::propagated`): every pod's mount table,
//! read through one of its processes. It reads a file per process and one per pod
//! namespace, so it runs off the event loop ([`NamespaceScans`]), except at start-up,
//! before the loop serves anything.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use tokio::{runtime::Handle, sync::mpsc};
use tracing::debug;

use super::scan_schedule::ScanSchedule;
use crate::{
    enforce::detach,
    kernel::decode::{Caller, RawString},
    node_files::{caller_pod, mount_table::MountTable},
    sys::mountns::{OWN_NAMESPACE, mount_namespaces, namespace_inode, namespace_of},
};

/// One pod's mount namespace, as the scan read it.
pub(super) struct PodNamespace {
    pub(super) pod: String,
    /// The process the table was read through (`cgroup_id` 0: found by its cgroup file).
    pub(super) caller: Caller,
    pub(super) table: MountTable,
}

/// What one scan read.
#[derive(Default)]
pub(super) struct PodNamespaces {
    pub(super) namespaces: Vec<PodNamespace>,
    /// Pods with a mount in a shared peer group, taken for CSI node plugins.
    pub(super) drivers: BTreeSet<String>,
}

/// Reads the mount table of every pod's namespace but the `exempt` pods' (containers that
/// have pivoted into their root only); `mountinfo` is the node's, whose namespace is left.
pub(super) fn read(mountinfo: &Path, exempt: &BTreeSet<String>) -> PodNamespaces {
    // The node's own namespace (kubelet's places are there) and the agent's (its
    // read-only view of the kubelet root) hold copies of every publish by design.
    let node = namespace_inode(&namespace_of(mountinfo)).ok();
    let own = namespace_inode(Path::new(OWN_NAMESPACE)).ok();
    // Read once, and only if a pod's namespace is there to compare.
    let mut node_root = None;
    let mut read = PodNamespaces::default();
    for (inode, pid) in mount_namespaces(Path::new("/proc")) {
        let Ok(mnt_ns) = u32::try_from(inode) else { continue };
        if Some(inode) == node || Some(inode) == own {
            continue;
        }
        // Pods' namespaces only: a node service's private namespace (systemd's
        // PrivateTmp, say) receives a copy of every node mount, as the node's own does.
        let Some(pod) = caller_pod::pod_of_process(Path::new("/proc"), pid) else { continue };
        if exempt.contains(&pod) {
            continue;
        }
        let caller = Caller { pid, tgid: pid, mnt_ns, comm: comm_of(pid), cgroup_id: 0 };
        let Some((_, table)) = detach::caller_table(&caller) else { continue };
        // A copy of the node's namespace that has not pivoted into a container's root
        // yet: a runtime creating a container unshares first (every node mount is
        // copied, each at its node path), then pivots and drops the old root with them.
        // Nothing there that the node's own namespace does not show.
        let node_root = node_root.get_or_insert_with(|| MountTable::read(mountinfo).ok().and_then(|t| root_of(&t)));
        if node_root.is_some() && root_of(&table) == *node_root {
            debug!("mount namespace {mnt_ns} (pid {pid}) shows the node's root: not yet a container's, left");
            continue;
        }
        // A pod is a driver if any of its containers is: all are read before any is judged.
        if table.mounts.iter().any(|m| m.shared) {
            read.drivers.insert(pod.clone());
        }
        read.namespaces.push(PodNamespace { pod, caller, table });
    }
    read
}

/// When the scans run ([`ScanSchedule`]) and their reads, one at a time on the blocking
/// pool; results arrive on the receiver [`Self::take_results`] gives the loop. A scan
/// asked for while one reads runs once more after it, so that what changed meanwhile is
/// seen.
pub(super) struct NamespaceScans {
    pub(super) schedule: ScanSchedule,
    tasks: Handle,
    tx: mpsc::Sender<PodNamespaces>,
    rx: Option<mpsc::Receiver<PodNamespaces>>,
    in_flight: bool,
    again: bool,
}

impl NamespaceScans {
    pub(super) fn new(tasks: Handle) -> Self {
        let (tx, rx) = mpsc::channel(1);
        Self { schedule: ScanSchedule::default(), tasks, tx, rx: Some(rx), in_flight: false, again: false }
    }

    /// Where the reads arrive (once: the event loop's).
    pub(super) fn take_results(&mut self) -> Option<mpsc::Receiver<PodNamespaces>> {
        self.rx.take()
    }

    /// Starts a read, or asks for one more after the read in flight.
    pub(super) fn start(&mut self, mountinfo: PathBuf, exempt: BTreeSet<String>) {
        if self.in_flight {
            self.again = true;
            return;
        }
        self.in_flight = true;
        let tx = self.tx.clone();
        // At normal priority, unlike the background passes: what it finds is answered
        // (a copy detached), and it must not wait behind the node's busy threads.
        self.tasks.spawn_blocking(move || {
            let _ = tx.blocking_send(read(&mountinfo, &exempt));
        });
    }

    /// A read came back: whether another scan was asked for meanwhile.
    pub(super) fn finished(&mut self) -> bool {
        self.in_flight = false;
        std::mem::take(&mut self.again)
    }
}

/// What `table`'s `/` shows: its device and root.
fn root_of(table: &MountTable) -> Option<(String, PathBuf)> {
    table.root_shown().map(|(device, root)| (device.to_owned(), root.to_owned()))
}

/// The process's command name, for the conflict's "by" (empty if it is gone).
fn comm_of(pid: u32) -> RawString {
    let comm = std::fs::read(format!("/proc/{pid}/comm")).unwrap_or_default();
    RawString { bytes: comm.trim_ascii_end().to_vec(), truncated: false }
}
