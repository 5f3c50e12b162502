//! Work the event loop hands to the blocking pool, so that nothing proportional to the
//! node's volumes runs between two events: the reconciliation's reads (the mount table,
//! the kubelet tree) and the preparation of each new facts snapshot (its look-ups, the
//! single-pod set, the findings), each coming back to the loop as a message, ready to
//! use; the CSI reports' metrics and log lines; and the freeing of what the loop replaces.

use std::{collections::BTreeSet, sync::Arc};

use tokio::{
    runtime::Handle,
    sync::{mpsc, watch},
};

use crate::{
    csi::report::CsiReport,
    facts::Snapshot,
    model::{
        checks::Severity,
        node::{NodeModel, NodeRead, PreparedFacts},
    },
    outputs::served_state::ServedState,
};

/// Frees `value` on the blocking pool of `tasks`: what the loop replaces may hold the last
/// reference to something the size of 10,000 volumes (old facts, a CSI report, a view's
/// unbuilt inputs), freed where no event waits for it.
pub(super) fn drop_off_loop<T: Send + 'static>(tasks: &Handle, value: T) {
    crate::sys::background::spawn_on(tasks, move || drop(value));
}

/// Sets the CSI metrics and logs the error findings of each report on `reports`, on the
/// blocking pool of `tasks`: indexing 10,000 volumes' findings by driver took 1.1–1.9 ms
/// on the loop (bench 6c). Ends when the reports' sender is gone.
pub(super) fn publish_csi_reports(
    tasks: &Handle,
    mut reports: watch::Receiver<Arc<CsiReport>>,
    shared: Arc<ServedState>,
) {
    tasks.spawn(async move {
        while reports.changed().await.is_ok() {
            let (report, shared) = (reports.borrow_and_update().clone(), shared.clone());
            let publish = move || {
                let drivers =
                    report.drivers.iter().map(|d| (d.name.as_str(), d.vendor_version.as_deref().unwrap_or("")));
                shared.metrics.findings.set_csi(drivers, report.findings_by_driver());
                for f in report.findings.iter().filter(|f| f.severity == Severity::Error) {
                    tracing::warn!("CSI finding {:?}: {}: {}", f.check, f.subject, f.message);
                }
            };
            if crate::sys::background::spawn(publish).await.is_err() {
                return;
            }
        }
    });
}

/// A table read finished while the publishes changed is read again this many times in a
/// row before it is used anyway (the owners' two-pass rule covers what it missed).
const OUTDATED_READ_RETRIES: u32 = 3;

/// The reconciliation's reads, one at a time; results arrive on the receiver [`Self::new`]
/// returns.
pub(super) struct NodeReads {
    /// Where the reads run (not the loop's own runtime).
    tasks: Handle,
    tx: mpsc::Sender<NodeRead>,
    in_flight: bool,
    retries: u32,
    /// Events were lost and no read has started since.
    loss_waiting: bool,
    /// The read in flight started after events were lost: publishes it finds that the
    /// model lacks are the lost ones, to be judged as their events would have been.
    read_after_loss: bool,
}

/// A finished read, and whether it started after events were lost.
pub(super) struct FinishedRead {
    pub read: NodeRead,
    pub after_loss: bool,
}

impl NodeReads {
    pub(super) fn new(tasks: Handle) -> (Self, mpsc::Receiver<NodeRead>) {
        let (tx, rx) = mpsc::channel(1);
        (Self { tasks, tx, in_flight: false, retries: 0, loss_waiting: false, read_after_loss: false }, rx)
    }

    /// Starts a read, unless one is still running (it counts for this tick too).
    pub(super) fn start(&mut self, model: &NodeModel) {
        if self.in_flight {
            return;
        }
        self.in_flight = true;
        self.read_after_loss = std::mem::take(&mut self.loss_waiting);
        let (read, tx) = (model.node_reader(), self.tx.clone());
        crate::sys::background::spawn_on(&self.tasks, move || {
            let _ = tx.blocking_send(read());
        });
    }

    /// A read came back: the read to reconcile with, or `None` when events changed the
    /// publishes while the table was read (an older table than the model: read again).
    pub(super) fn finished(&mut self, read: NodeRead, model: &NodeModel) -> Option<FinishedRead> {
        self.in_flight = false;
        if model.is_outdated(&read) && self.retries < OUTDATED_READ_RETRIES {
            self.retries += 1;
            self.loss_waiting |= self.read_after_loss;
            self.start(model);
            return None;
        }
        self.retries = 0;
        // A loss noticed while this read ran counts for it too: the periodic read that
        // shows a publish whose event was lost can finish before the loss is noticed, and
        // a publish it brings into the model is no longer new to the read after the loss.
        let after_loss = std::mem::take(&mut self.read_after_loss) || self.loss_waiting;
        if self.loss_waiting {
            // Events were lost while this read ran: it may predate the loss.
            self.start(model);
        }
        Some(FinishedRead { read, after_loss })
    }

    /// Events were lost (a full ring buffer, programs the kernel skipped, dropped
    /// notices): a read starts now, or after the one in flight, which may predate the loss.
    pub(super) fn start_after_loss(&mut self, model: &NodeModel) {
        self.loss_waiting = true;
        self.start(model);
    }
}

/// Prepares each new snapshot of `facts` on the blocking pool of `tasks`, in order; when
/// several arrive while one is prepared, only the newest is. Ends when `facts`' sender is
/// gone.
pub(super) fn prepare_facts(
    tasks: &Handle,
    mut facts: watch::Receiver<Snapshot>,
    command_line: BTreeSet<String>,
) -> mpsc::Receiver<PreparedFacts> {
    let (tx, rx) = mpsc::channel(1);
    let command_line = Arc::new(command_line);
    tasks.spawn(async move {
        let mut last_set = None;
        while facts.changed().await.is_ok() {
            let (snapshot, command_line) = (facts.borrow_and_update().clone(), command_line.clone());
            let previous = last_set.take();
            let prepare = move || PreparedFacts::new(snapshot, &command_line, previous.as_ref());
            let Ok(prepared) = crate::sys::background::spawn(prepare).await else { return };
            last_set = Some(prepared.single_pod().clone());
            if tx.send(prepared).await.is_err() {
                return;
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const RECORDED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/recorded/kubelet-node.mountinfo");

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_read_during_which_events_were_lost_judges_what_it_finds_and_another_read_follows() {
        let model =
            NodeModel::new(Path::new("/x"), Path::new(RECORDED), [], Snapshot::empty(crate::facts::Origin::None))
                .unwrap();
        let (mut reads, mut results) = NodeReads::new(Handle::current());
        // A periodic read: nothing lost, nothing to judge.
        reads.start(&model);
        let read = results.recv().await.unwrap();
        assert!(!reads.finished(read, &model).unwrap().after_loss);
        // A periodic read, and a loss noticed before it comes back.
        reads.start(&model);
        reads.start_after_loss(&model);
        let read = results.recv().await.unwrap();
        assert!(reads.finished(read, &model).unwrap().after_loss, "the loss counts for the read in flight");
        // And the read after the loss follows, judged as such.
        let read = results.recv().await.unwrap();
        assert!(reads.finished(read, &model).unwrap().after_loss);
        // Then the next periodic read is plain again.
        reads.start(&model);
        let read = results.recv().await.unwrap();
        assert!(!reads.finished(read, &model).unwrap().after_loss);
    }
}
