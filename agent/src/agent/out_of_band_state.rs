//! What the out-of-band checks keep between events (`super::out_of_band`,
//! `super::propagated`, `super::open_reports`): what each owned volume's publish shows,
//! the accesses already reported, the CSI node plugins, the open reporter and the
//! namespace scans.

use std::{
    collections::{BTreeSet, HashSet},
    sync::Arc,
};

use tokio::sync::mpsc;

use super::{pod_namespaces::NamespaceScans, reported_access::ReportedAccess};
use crate::{
    guard::open_reporter::{ForeignAccess, OpenReporter},
    model::access::VolumeTree,
};

pub(super) struct OutOfBand {
    /// What each owned volume's publish shows; `None` when it must be read again
    /// (ownership or the publishes changed).
    pub(super) owned_trees: Option<Arc<[VolumeTree]>>,
    /// Accesses outside kubelet's publish reported and left in place.
    pub(super) reported: HashSet<ReportedAccess>,
    /// Pods the namespace scan took for CSI node plugins (a mount in a shared peer group):
    /// exempt from the open guard, so the driver may work on the volumes it serves.
    pub(super) driver_pods: BTreeSet<String>,
    /// Where no BPF LSM guards opens: the reporter of other pods' opens, and what it
    /// found (taken by the event loop).
    pub(super) open_reporter: Option<OpenReporter>,
    pub(super) foreign_opens: Option<mpsc::Receiver<ForeignAccess>>,
    /// Clones the `move_mount` hook reported and let through (audit mode), by (caller's
    /// thread group, volume): the same call's exit check does not report them again.
    pub(super) kernel_audited_clones: HashSet<(u32, String)>,
    /// When the namespace scans run, and their reads off the loop.
    pub(super) scans: NamespaceScans,
}

impl OutOfBand {
    pub(super) fn new(
        open_reporter: Option<OpenReporter>,
        foreign_opens: Option<mpsc::Receiver<ForeignAccess>>,
        tasks: tokio::runtime::Handle,
    ) -> Self {
        Self {
            owned_trees: None,
            reported: HashSet::new(),
            driver_pods: BTreeSet::new(),
            open_reporter,
            foreign_opens,
            kernel_audited_clones: HashSet::new(),
            scans: NamespaceScans::new(tasks),
        }
    }
}
