//! What wakes the event loop besides the kernel's events and notices, and how long a
//! step may take before it is logged.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::{
    agent::pod_namespaces::PodNamespaces,
    guard::open_reporter::ForeignAccess,
    model::node::{NodeRead, PreparedFacts},
};

/// A loop step longer than this is logged (debug): events waited behind it.
pub(super) const SLOW_STEP: Duration = Duration::from_millis(5);

/// What woke the event loop, other than events.
pub(super) enum Step {
    Tick,
    /// A change of ownership or quarantine the view held back (see `view::URGENT_GAP`).
    UrgentView,
    /// The propagated-copies scan a burst of publishes held back (see `scan_schedule::SCAN_GAP`).
    Scan,
    ReconcileTick,
    Reconcile(NodeRead),
    Csi,
    Facts(PreparedFacts),
    ForeignAccess(ForeignAccess),
    /// The pods' mount tables a namespace scan read.
    NamespacesRead(PodNamespaces),
}

/// The next message of an input the loop took, or never where there is none (no open
/// reporter).
pub(super) async fn next_from<T>(found: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match found {
        Some(found) => found.recv().await,
        None => std::future::pending().await,
    }
}

impl Step {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Step::Tick => "the 1 s tick (lost events, held conflicts, the view)",
            Step::UrgentView => "the view after a burst of ownership changes",
            Step::Scan => "the propagated-copies scan after a burst of publishes",
            Step::ReconcileTick => "starting a reconciliation",
            Step::Reconcile(_) => "a reconciliation",
            Step::Csi => "a CSI report",
            Step::Facts(_) => "new facts",
            Step::ForeignAccess(_) => "another pod's open or change of an owned volume's files",
            Step::NamespacesRead(_) => "judging what a namespace scan read",
        }
    }
}
