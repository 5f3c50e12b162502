//! The agent's CSI task: asks the drivers every [`RECHECK_INTERVAL`] and whenever a
//! driver socket appears or disappears (the directories are listed every
//! [`SOCKET_POLL_INTERVAL`]; cheap), and re-judges without asking the drivers when the
//! facts or the mounts change, resting between two judgements (`background::rest_after`:
//! 10,000 volumes take ~66 ms to judge, and mounts change faster in a burst). Each result
//! replaces the last in a watch channel, for the metrics and the debug API.
//!
//! Wiring in the agent loop (not done here): a clone of the facts receiver it already
//! has, a `watch` channel of [`Mounts`] that the loop refreshes when its model changes
//! (`mounts_tx.send_replace(model.mounts().clone())` after a publish change or a
//! reconciliation), the mode decided at start-up, and a `watch::Sender<CsiReport>` whose
//! receivers are the metrics and the debug API:
//!
//! ```ignore
//! let (csi_tx, csi_rx) = watch::channel(Arc::new(CsiReport::default()));
//! let (mounts_tx, mounts_rx) = watch::channel(model.mounts().clone());
//! let opts = MonitorOptions::new(CheckOptions::new(&kubelet_root), Some(decision.mode));
//! tokio::spawn(csi::monitor::run(opts, facts_rx.clone(), mounts_rx, csi_tx));
//! ```

use std::{collections::BTreeSet, path::PathBuf, sync::Arc, time::Duration};

use tokio::sync::watch;

use super::{
    discovery,
    judge::Judge,
    report::{self, CheckOptions, CsiReport, DriverReport},
};
use crate::{enforce::Mode, facts::Snapshot, model::mounts::Mounts};

pub const RECHECK_INTERVAL: Duration = Duration::from_secs(60);
pub const SOCKET_POLL_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MonitorOptions {
    pub check: CheckOptions,
    /// The agent's active mode (decides the RWOP finding's severity).
    pub mode: Option<Mode>,
    pub recheck_interval: Duration,
    pub socket_poll_interval: Duration,
}

impl MonitorOptions {
    pub fn new(check: CheckOptions, mode: Option<Mode>) -> Self {
        Self { check, mode, recheck_interval: RECHECK_INTERVAL, socket_poll_interval: SOCKET_POLL_INTERVAL }
    }
}

/// Runs until every receiver of `tx` is gone. `facts` and `mounts` are the agent's
/// current views; when their senders are dropped the last values stay in force.
pub async fn run(
    opts: MonitorOptions,
    mut facts: watch::Receiver<Snapshot>,
    mut mounts: watch::Receiver<Mounts>,
    tx: watch::Sender<Arc<CsiReport>>,
) {
    let sockets = |o: &CheckOptions| -> BTreeSet<PathBuf> { discovery::socket_set(&o.kubelet_root, &o.extra_sockets) };
    let mut recheck = tokio::time::interval(opts.recheck_interval);
    let mut poll = tokio::time::interval(opts.socket_poll_interval);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut facts_open, mut mounts_open) = (true, true);
    let mut known = BTreeSet::new();
    let mut drivers: Vec<DriverReport> = Vec::new();
    let mut asked_at = None;
    let (mut ask, mut rejudge) = (true, true);
    // The last judgement, lent to the blocking thread for each run.
    let mut last = Judge::default();
    let mut rested = tokio::time::Instant::now();
    loop {
        if ask {
            known = sockets(&opts.check);
            drivers = report::gather(&opts.check).await;
            asked_at = Some(std::time::SystemTime::now());
            ask = false;
        }
        if rejudge {
            // After a judgement, changes wait out its rest and are judged together.
            tokio::time::sleep_until(rested).await;
            let facts_now: Arc<_> = facts.borrow_and_update().facts.clone();
            let mounts_now = mounts.borrow_and_update().clone();
            let (drivers_now, mode) = (drivers.clone(), opts.mode);
            let mut judge = std::mem::take(&mut last);
            let current = tx.borrow().clone(); // this task is the only sender
            // Judging the volumes of a busy node is CPU work (only the changed ones are
            // rebuilt, but each is compared), and so is comparing the report with the
            // last: on a blocking thread, so no task of the runtime (the agent's event
            // loop above all) waits for it.
            let judged = crate::sys::background::spawn(move || {
                let started = std::time::Instant::now();
                let mut report = judge.run(drivers_now, &facts_now, &mounts_now, mode);
                report.checked_at = asked_at;
                let changed = *current != report;
                let took = started.elapsed();
                tracing::debug!(
                    volumes = judge.volumes(),
                    rebuilt = judge.rebuilt(),
                    changed,
                    elapsed = ?took,
                    "CSI checks judged"
                );
                (judge, changed.then_some(report), took)
            });
            let Ok((judge, changed, took)) = judged.await else { return };
            last = judge;
            rested = tokio::time::Instant::now() + crate::sys::background::rest_after(took);
            // Receivers wake only for a different report.
            if let Some(report) = changed {
                tx.send_replace(Arc::new(report));
            }
            rejudge = false;
        }
        // Only news is judged: a quiet socket poll costs a directory listing, nothing more.
        tokio::select! {
            _ = recheck.tick() => ask = true,
            _ = poll.tick() => ask = sockets(&opts.check) != known,
            changed = facts.changed(), if facts_open => { facts_open = changed.is_ok(); rejudge = facts_open; }
            changed = mounts.changed(), if mounts_open => { mounts_open = changed.is_ok(); rejudge = mounts_open; }
            () = tx.closed() => return,
        }
        rejudge |= ask;
    }
}
