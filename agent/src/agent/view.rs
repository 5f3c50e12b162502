//! The debug view and the gauges that follow it (single-pod states, node findings), and
//! the mounts the CSI checks judge, built off the event loop: the loop hands over a copy
//! of what it knows ([`ViewInputs`]) and goes back to its events, and a task builds the
//! view on the blocking pool. A view of 10,000 volumes costs milliseconds; no event waits
//! for it. Inputs handed over while a build runs replace each other: only the newest is
//! built.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, watch};

use crate::{
    csi::report::CsiReport,
    enforce::Mode,
    facts::{SinglePodSet, Snapshot},
    model::checks::Finding,
    model::mounts::{Mounts, volume_views},
    outputs::metrics::SinglePodCounts,
    outputs::served_state::{self, DebugView, ServedState, SourceStatus},
};

/// Shortest time between two copies handed over for a change every view must show at
/// once (ownership, a quarantine). Each copy costs the loop a clone and the node a wake-up
/// of the builder's threads: in a tight loop of an owner's publishes and unpublishes a copy
/// per change made each bind+umount cycle ~8 µs slower (66 against 58 µs) on this
/// project's 2-core machine. A burst's last change is shown within this time.
pub(super) const URGENT_GAP: Duration = Duration::from_millis(20);

/// When the loop owes the builder a new copy: any change within the loop's one-second
/// tick; a change every view must show at once now, or, within [`URGENT_GAP`] of the
/// last copy, as soon as that gap has passed.
#[derive(Debug, Default)]
pub(super) struct Freshness {
    dirty: bool,
    urgent_due: Option<Instant>,
    last_copy: Option<Instant>,
}

impl Freshness {
    /// Something the view shows changed: due at the next tick.
    pub(super) fn changed(&mut self) {
        self.dirty = true;
    }

    /// Something every view must show at once changed at `now`: true if the copy is to be
    /// handed over now, else it is due at [`Self::urgent_due`].
    pub(super) fn changed_urgently(&mut self, now: Instant) -> bool {
        self.dirty = true;
        match self.last_copy.map(|last| last + URGENT_GAP) {
            Some(gap_ends) if now < gap_ends => {
                self.urgent_due.get_or_insert(gap_ends);
                false
            }
            _ => true,
        }
    }

    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// When an urgent copy held back by the gap is due.
    pub(super) fn urgent_due(&self) -> Option<Instant> {
        self.urgent_due
    }

    /// A copy was handed over at `now`.
    pub(super) fn copied(&mut self, now: Instant) {
        *self = Self { dirty: false, urgent_due: None, last_copy: Some(now) };
    }
}

/// A copy of what the loop knows, enough to build the view.
pub(super) struct ViewInputs {
    pub mode: Mode,
    pub mode_reason: String,
    pub snapshot: Snapshot,
    pub single_pod: SinglePodSet,
    pub mounts: Mounts,
    pub owners: BTreeMap<String, String>,
    pub findings: Vec<Finding>,
    pub csi: Option<Arc<CsiReport>>,
}

/// Where the view goes: the served state (view and gauges) and the CSI checks' mounts.
#[derive(Clone)]
pub(super) struct ViewSinks {
    pub shared: Arc<ServedState>,
    pub mounts_tx: watch::Sender<Mounts>,
}

/// The handle the loop keeps: [`Self::request`] hands over inputs and returns at once.
pub(super) struct ViewBuilder {
    newest: Arc<Mutex<Option<ViewInputs>>>,
    wake: mpsc::Sender<()>,
}

impl ViewBuilder {
    /// Starts the builder task; it ends when the handle is dropped.
    pub(super) fn start(sinks: ViewSinks) -> Self {
        let newest: Arc<Mutex<Option<ViewInputs>>> = Arc::default();
        let (wake, mut woken) = mpsc::channel(1);
        let slot = newest.clone();
        tokio::spawn(async move {
            while woken.recv().await.is_some() {
                let Some(inputs) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else { continue };
                let sinks = sinks.clone();
                if crate::sys::background::spawn(move || build(inputs, &sinks)).await.is_err() {
                    return;
                }
            }
        });
        Self { newest, wake }
    }

    pub(super) fn request(&self, inputs: ViewInputs) {
        *self.newest.lock().unwrap_or_else(|e| e.into_inner()) = Some(inputs);
        // Full means a wake-up is already queued: it will find these inputs.
        let _ = self.wake.try_send(());
    }
}

/// Builds the view, sets the gauges, and passes the mounts on to the CSI checks when
/// they changed (an unchanged copy would make them judge every volume again).
pub(super) fn build(inputs: ViewInputs, sinks: &ViewSinks) {
    let ViewInputs { mode, mode_reason, snapshot, single_pod, mounts, owners, findings, csi } = inputs;
    let views = volume_views(&snapshot.facts, &single_pod, &mounts, &owners);
    sinks.shared.metrics.set_single_pod(SinglePodCounts::of(&views));
    sinks.shared.metrics.set_node_findings(&findings);
    let csi_findings = csi.iter().flat_map(|r| r.findings.iter().cloned());
    let all: Vec<Finding> = findings.iter().cloned().chain(csi_findings).collect();
    let mut volumes = served_state::volume_details(views, &all);
    if let Some(report) = &csi {
        let by_name: HashMap<&str, _> = report.volumes.iter().map(|v| (v.name.as_str(), v)).collect();
        for detail in &mut volumes {
            detail.expected_csi_access_mode = by_name
                .get(detail.view.name.as_str())
                .and_then(|v| v.csi_access_mode)
                .and_then(|m| serde_json::to_value(m).ok())
                .and_then(|v| v.as_str().map(str::to_owned));
        }
    }
    let now = SystemTime::now();
    sinks.shared.set_view(DebugView {
        mode: Some(mode),
        mode_reason,
        source: SourceStatus::new(snapshot.origin.kind(), snapshot.stale.clone(), snapshot.synced_at),
        volumes,
        findings,
        csi,
        updated_at: Some(now),
        updated_at_rfc3339: Some(served_state::rfc3339(now)),
    });
    sinks.mounts_tx.send_if_modified(|current| {
        let changed = *current != mounts;
        if changed {
            *current = mounts;
        }
        changed
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urgent_changes_are_copied_at_once_and_a_burst_once_per_gap() {
        let start = Instant::now();
        let mut f = Freshness::default();
        assert!(!f.is_dirty());
        assert!(f.changed_urgently(start), "the first urgent change is copied at once");
        f.copied(start);
        assert!(!f.is_dirty() && f.urgent_due().is_none());
        // A burst within the gap: held back, due when the gap ends, however many come.
        let later = start + URGENT_GAP / 4;
        assert!(!f.changed_urgently(later));
        assert!(!f.changed_urgently(later + URGENT_GAP / 4));
        assert_eq!(f.urgent_due(), Some(start + URGENT_GAP));
        assert!(f.is_dirty());
        let due = start + URGENT_GAP;
        f.copied(due);
        assert!(f.urgent_due().is_none());
        // After a quiet gap, at once again.
        assert!(f.changed_urgently(due + URGENT_GAP));
    }

    #[test]
    fn other_changes_wait_for_the_tick() {
        let mut f = Freshness::default();
        f.changed();
        assert!(f.is_dirty());
        assert!(f.urgent_due().is_none(), "not urgent: copied at the loop's tick");
    }
}
