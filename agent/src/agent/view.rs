//! The debug view and the gauges that follow it (single-pod states, node findings), and
//! the mounts the CSI checks judge, built off the event loop: the loop hands over a copy
//! of what it knows ([`ViewInputs`]) and goes back to its events, and the view is built
//! on the blocking pool. A view of 10,000 volumes costs milliseconds; no event waits
//! for it. Inputs handed over while a build runs replace each other: only the newest is
//! built.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::watch;

pub(super) use crate::outputs::served_state::Refresh;
use crate::{
    csi::report::CsiReport,
    enforce::Mode,
    facts::{SinglePodSet, Snapshot},
    model::checks::Finding,
    model::mounts::{Mounts, each_volume_view},
    outputs::metrics::SinglePodCounts,
    outputs::served_state::{self, DebugView, ServedState, SourceStatus},
};

/// Shortest time between two copies handed over for a change every view must show at
/// once (ownership, a quarantine). Each copy costs the loop a clone and the node a wake-up
/// of the builder's threads: in a tight loop of an owner's publishes and unpublishes a copy
/// per change made each bind+umount cycle ~8 µs slower (66 against 58 µs) on this
/// project's 2-core machine. A burst's last change is shown within this time, plus the
/// builder's rest on a node whose view takes milliseconds (see `build_while_pending`).
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

    /// Whether the loop's tick owes the builder a copy: something changed and no urgent
    /// copy is due. An urgent copy, due within [`URGENT_GAP`], is left to its own timer,
    /// so that a view says truly which of the two made it ([`Refresh`]).
    pub(super) fn tick_owes_copy(&self) -> bool {
        self.dirty && self.urgent_due.is_none()
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
    pub refresh: Refresh,
}

/// Where the view goes: the served state (view and gauges) and the CSI checks' mounts.
#[derive(Clone)]
pub(super) struct ViewSinks {
    pub shared: Arc<ServedState>,
    pub mounts_tx: watch::Sender<Mounts>,
}

/// Inputs waiting for the builder, and whether a build runs.
#[derive(Default)]
struct Pending {
    newest: Option<ViewInputs>,
    building: bool,
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    pending.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handle the loop keeps: [`Self::request`] hands over inputs and returns at once.
///
/// Builds run on the blocking pool, started by the loop's thread itself: handing the
/// inputs to a task on the shared runtime woke one of its workers, and on a 2-core node the
/// woken worker could take the loop's core for 1–3 ms while an event waited (bench 6c).
pub(super) struct ViewBuilder {
    pending: Arc<Mutex<Pending>>,
    sinks: ViewSinks,
    /// Whose blocking pool builds (not the loop's own runtime).
    tasks: tokio::runtime::Handle,
}

impl ViewBuilder {
    pub(super) fn new(sinks: ViewSinks, tasks: tokio::runtime::Handle) -> Self {
        Self { pending: Arc::default(), sinks, tasks }
    }

    /// Hands over `inputs`; returns the inputs they replace if no build had taken them
    /// yet, for the caller to free where that costs no event its wait.
    #[must_use = "the replaced inputs may hold the last reference to old facts"]
    pub(super) fn request(&self, inputs: ViewInputs) -> Option<ViewInputs> {
        let (unbuilt, start) = {
            let mut pending = lock(&self.pending);
            let start = !std::mem::replace(&mut pending.building, true);
            (pending.newest.replace(inputs), start)
        };
        if start {
            let (pending, sinks) = (self.pending.clone(), self.sinks.clone());
            crate::sys::background::spawn_on(&self.tasks, move || build_while_pending(&pending, &sinks));
        }
        unbuilt
    }
}

/// Builds the newest inputs until none are waiting (inputs handed over during a build
/// replace each other: only the newest is built), then marks the builder idle. Between
/// two builds it rests (`background::rest_after`): a view of 10,000 volumes takes ~20 ms,
/// and ownership changes come faster than that in a burst.
fn build_while_pending(pending: &Mutex<Pending>, sinks: &ViewSinks) {
    /// Marks the builder idle if a build panics, so that the next request starts one again.
    struct IdleOnPanic<'a>(&'a Mutex<Pending>);
    impl Drop for IdleOnPanic<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                lock(self.0).building = false;
            }
        }
    }
    let _guard = IdleOnPanic(pending);
    loop {
        let inputs = {
            let mut pending = lock(pending);
            let Some(inputs) = pending.newest.take() else {
                // Under the same lock as the look: a request now starts a build of its own.
                pending.building = false;
                return;
            };
            inputs
        };
        let started = Instant::now();
        build(inputs, sinks);
        if lock(pending).newest.is_some() {
            std::thread::sleep(crate::sys::background::rest_after(started.elapsed()));
        }
    }
}

/// Builds the view, sets the gauges, and passes the mounts on to the CSI checks when
/// they changed (an unchanged copy would make them judge every volume again).
pub(super) fn build(inputs: ViewInputs, sinks: &ViewSinks) {
    let ViewInputs { mode, mode_reason, snapshot, single_pod, mounts, owners, findings, csi, refresh } = inputs;
    let views = each_volume_view(&snapshot.facts, &single_pod, &mounts, &owners);
    let csi_findings = csi.iter().flat_map(|r| r.findings.iter().cloned());
    let all: Vec<Finding> = findings.iter().cloned().chain(csi_findings).collect();
    let mut volumes = served_state::volume_details(views, &all);
    sinks.shared.metrics.conflicts.set_single_pod(SinglePodCounts::of(volumes.iter().map(|d| &d.view)));
    sinks.shared.metrics.findings.set_node_findings(&findings);
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
        refresh: Some(refresh),
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
        assert!(!f.tick_owes_copy());
        assert!(f.changed_urgently(start), "the first urgent change is copied at once");
        f.copied(start);
        assert!(!f.tick_owes_copy() && f.urgent_due().is_none());
        // A burst within the gap: held back, due when the gap ends, however many come.
        let later = start + URGENT_GAP / 4;
        assert!(!f.changed_urgently(later));
        assert!(!f.changed_urgently(later + URGENT_GAP / 4));
        assert_eq!(f.urgent_due(), Some(start + URGENT_GAP));
        assert!(!f.tick_owes_copy(), "a held-back urgent change is copied by its own timer, not the tick");
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
        assert!(f.tick_owes_copy());
        assert!(f.urgent_due().is_none(), "not urgent: copied at the loop's tick");
    }
}
