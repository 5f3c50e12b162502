//! The running agent: one loop owns the eBPF object, the node model and the owners, and
//! handles kernel events, facts changes, reconciliation and the debug view.

mod conflicts;
mod effects;
pub(super) mod open_reports;
mod out_of_band;
mod propagated;
mod reconcile;
mod steps;

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, watch};
use tracing::{debug, info};

use self::{
    effects::{Effect, Effects},
    steps::{SLOW_STEP, Step, next_from},
};
use super::{
    AgentError, RunOptions,
    feed::{Feed, Input, OwnMount},
    mount_index::MountChange,
    off_loop::{NodeReads, drop_off_loop, prepare_facts, publish_csi_reports},
    out_of_band_state::OutOfBand,
    outlets::Outlets,
    table_namespace::TableNamespace,
    view::{self, Refresh},
};
use crate::{
    csi::{
        monitor::MonitorOptions,
        report::{CheckOptions, CsiReport},
    },
    enforce::{
        ModeDecision,
        decision::{self, OwnershipChange, Reporter},
        owners::OwnerStore,
        quarantine::HeldNamespace,
    },
    facts::{Origin, Snapshot},
    kernel::decode::{Event, Record},
    model::event_target::EventTarget,
    model::mounts::Mounts,
    model::mounts::{OwnerFix, PublishChange},
    model::node::{NodeModel, PreparedFacts},
    model::volume_ops::{self, volume_op},
    node_files::caller_pod::CallerPods,
    outputs::render,
    outputs::served_state::{MountRecord, ServedState},
    sys::signals::StopSignals,
};

/// The running agent's state, owned by the event loop.
pub(super) struct Running<'a> {
    /// The runtime of every task but the loop (HTTP, facts, CSI checks, background work):
    /// the loop's own runtime, on its own thread, runs nothing else.
    tasks: tokio::runtime::Handle,
    opts: &'a RunOptions,
    decision: &'a ModeDecision,
    model: NodeModel,
    owners: OwnerStore,
    /// Where conflicts go once told (Events, the log), and what telling them keeps.
    outlets: super::outlets::Outlets,
    /// Metrics and what the debug API shows.
    shared: Arc<ServedState>,
    /// When the debug view is owed a new copy.
    view_freshness: super::view::Freshness,
    /// Builds the debug view (and the mounts the CSI checks see) off the loop.
    view: super::view::ViewBuilder,
    /// The mounts as the CSI checks see them (sent by the view builder).
    csi_mounts: watch::Receiver<Mounts>,
    /// The last CSI report, for the debug view.
    csi: Option<Arc<CsiReport>>,
    /// Whose mount namespace the mount table is, for the reconciliation's messages.
    table_namespace: super::table_namespace::TableNamespace,
    /// Which pod a calling process belongs to, by its cgroup.
    callers: CallerPods,
    /// The namespace watched for mount notices (fanotify backend): where their quarantine acts.
    watched: Option<HeldNamespace>,
    /// The unique ids of the mounts the agent detached itself (quarantine, unmask) whose
    /// notices are still to come: notices name no caller, so the agent's own are told by
    /// the mount they name (a count per path would swallow another detach there).
    own_detaches: std::collections::HashSet<u64>,
    /// Masks the agent attached while handling the current notice, for the feed to index.
    own_masks: Vec<OwnMount>,
    /// What the out-of-band checks keep between events.
    out_of_band: super::out_of_band_state::OutOfBand,
}

/// What [`Running::build`] takes from the load stage (`super::stages::load`; the loop keeps
/// the rest).
pub(super) struct Parts {
    pub(super) model: NodeModel,
    pub(super) owners: OwnerStore,
    pub(super) watched: Option<HeldNamespace>,
    pub(super) events: Option<mpsc::Sender<crate::model::explain::Conflict>>,
}

/// What told the agent about a mount.
#[derive(Clone, Copy)]
enum MadeBy<'e> {
    /// A traced syscall, with its caller and duration.
    Syscall(&'e Event),
    /// A mount notice: no caller, no duration, only success.
    Notice,
    /// The reconciliation's read of the mount table, after events were lost.
    MountTable,
}

impl<'a> Running<'a> {
    /// The running agent, caught up with the node: its facts metrics, the volumes already
    /// shared, the first namespace scan and the debug view done (the first request after
    /// readiness sees the volumes).
    pub(super) fn build(
        opts: &'a RunOptions,
        decision: &'a ModeDecision,
        parts: Parts,
        shared: &Arc<ServedState>,
    ) -> Result<Self, AgentError> {
        let Parts { model, owners, watched, events } = parts;
        let (mounts_tx, csi_mounts) = watch::channel(model.mounts().clone());
        let view_sinks = view::ViewSinks { shared: shared.clone(), mounts_tx };
        let (open_reporter, foreign_opens) =
            if decision.in_kernel() { (None, None) } else { open_reports::start(opts, decision, shared).unzip() };
        let mut agent = Self {
            tasks: tokio::runtime::Handle::current(),
            opts,
            decision,
            model,
            owners,
            outlets: Outlets::new(events),
            shared: shared.clone(),
            view_freshness: Default::default(),
            view: view::ViewBuilder::new(view_sinks.clone(), tokio::runtime::Handle::current()),
            csi_mounts,
            csi: None,
            table_namespace: TableNamespace::check(&opts.mountinfo),
            callers: crate::node_files::caller_pod::CallerPods::for_kernel_pids(),
            watched,
            own_detaches: Default::default(),
            own_masks: Vec::new(),
            out_of_band: OutOfBand::new(open_reporter, foreign_opens, tokio::runtime::Handle::current()),
        };
        agent.facts_metrics();
        let found_shared = agent.report_shared_volumes();
        agent.carry_out(found_shared);
        let found_copies = agent.scan_namespaces_now();
        agent.carry_out(found_copies);
        view::build(agent.view_inputs(Refresh::Start)?, &view_sinks);
        Ok(agent)
    }
}

impl Running<'_> {
    pub(super) async fn event_loop(
        &mut self,
        feed: &mut Feed,
        facts: watch::Receiver<Snapshot>,
        stop: &mut StopSignals,
    ) -> Result<(), AgentError> {
        let io = |context| move |source| AgentError::Io { context, source };
        let mut lost_check = tokio::time::interval(Duration::from_secs(1));
        let period = self.opts.reconcile_interval;
        let mut reconcile = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let mut own_calls = super::own_calls::OwnCalls::announce();
        let mut csi = self.start_csi_monitor(&facts);
        let (mut reads, mut node_reads) = NodeReads::new(self.tasks.clone());
        let mut prepared = prepare_facts(&self.tasks, facts, self.model.command_line().clone());
        let mut resync = false;
        let mut foreign_opens = self.out_of_band.foreign_opens.take();
        let mut namespaces_read = self.out_of_band.scans.take_results();
        loop {
            let view_due = self.view_freshness.urgent_due();
            let view_due_at = tokio::time::Instant::from_std(view_due.unwrap_or_else(Instant::now));
            let scan_due = self.out_of_band.scans.schedule.due();
            let scan_due_at = tokio::time::Instant::from_std(scan_due.unwrap_or_else(Instant::now));
            let step = tokio::select! {
                batch = feed.next_batch(|input| {
                    let effects = match &input {
                        Input::Record(Record::Conflict(c)) => self.kernel_conflict(c),
                        Input::Record(Record::Syscall(event)) => {
                            if self.opts.print_events {
                                println!("{}", render::line(event));
                            }
                            match own_calls.is_own(event) {
                                true => Vec::new(),
                                false => self.syscall(event),
                            }
                        }
                        Input::Mount(change) => self.mount_change(change),
                        Input::MountElsewhere(facts) => self.check_mount_elsewhere(facts).into_iter().collect(),
                        Input::Resynced => {
                            resync = true;
                            Vec::new()
                        }
                    };
                    self.carry_out(effects);
                    std::mem::take(&mut self.own_masks)
                }) => {
                    batch.map_err(io("reading the kernel's mount events"))?;
                    if std::mem::take(&mut resync) {
                        // Notices of our own detaches may be among those dropped.
                        self.own_detaches.clear();
                        reads.start_after_loss(&self.model);
                    }
                    continue
                }
                _ = lost_check.tick() => Step::Tick,
                _ = tokio::time::sleep_until(view_due_at), if view_due.is_some() => Step::UrgentView,
                _ = tokio::time::sleep_until(scan_due_at), if scan_due.is_some() => Step::Scan,
                _ = reconcile.tick() => Step::ReconcileTick,
                Some(read) = node_reads.recv() => Step::Reconcile(read),
                Ok(()) = csi.changed() => Step::Csi,
                Some(facts) = prepared.recv() => Step::Facts(facts),
                Some(open) = next_from(&mut foreign_opens) => Step::ForeignAccess(open),
                Some(read) = next_from(&mut namespaces_read) => Step::NamespacesRead(read),
                _ = stop.recv() => break,
            };
            // What is not an event must stay short: each event behind it waits.
            let (started, name) = (std::time::Instant::now(), step.name());
            let effects = self.step(step, feed, &mut reads, &mut csi)?;
            self.carry_out(effects);
            if started.elapsed() > SLOW_STEP {
                debug!("event loop: {name} took {:?}", started.elapsed());
            }
        }
        info!("stopping");
        Ok(())
    }

    /// Handles one of the loop's inputs that is not a kernel event or notice; what it calls
    /// for is carried out next.
    fn step(
        &mut self,
        step: Step,
        feed: &mut Feed,
        reads: &mut NodeReads,
        csi: &mut watch::Receiver<Arc<CsiReport>>,
    ) -> Result<Effects<'static>, AgentError> {
        let effects = match step {
            Step::Tick => {
                self.check_losses(feed, reads);
                self.explain_unnamed();
                if self.view_freshness.tick_owes_copy() {
                    self.refresh_view(Refresh::Tick)?;
                }
                Vec::new()
            }
            Step::ReconcileTick => {
                reads.start(&self.model);
                Vec::new()
            }
            Step::Reconcile(read) => {
                // A loss the once-a-second tick has not noticed yet may be why this read
                // shows a publish the events did not.
                self.check_losses(feed, reads);
                match reads.finished(read, &self.model) {
                    Some(finished) => self.reconcile(finished.read, finished.after_loss)?,
                    None => Vec::new(),
                }
            }
            Step::UrgentView => {
                self.refresh_view(Refresh::AtOnce)?;
                Vec::new()
            }
            Step::Scan => vec![Effect::ScanNamespaces],
            Step::NamespacesRead(read) => self.namespaces_read(read),
            Step::Csi => {
                let report = csi.borrow_and_update().clone();
                self.csi_report(report);
                Vec::new()
            }
            Step::Facts(facts) => self.facts_changed(facts)?,
            Step::ForeignAccess(open) => self.foreign_access(open).into_iter().collect(),
        };
        Ok(effects)
    }

    /// Starts the CSI checks (every driver on the node, re-asked on a timer and when
    /// sockets come and go, re-judged when the facts or the mounts change).
    fn start_csi_monitor(&mut self, facts: &watch::Receiver<Snapshot>) -> watch::Receiver<Arc<CsiReport>> {
        let mut check = CheckOptions::new(self.model.kubelet_root());
        check.extra_sockets = self.opts.csi_sockets.clone();
        let (csi_tx, csi_rx) = watch::channel(Arc::new(CsiReport::default()));
        let options = MonitorOptions::new(check, Some(self.decision.mode));
        self.tasks.spawn(crate::csi::monitor::run(options, facts.clone(), self.csi_mounts.clone(), csi_tx));
        publish_csi_reports(&self.tasks, csi_rx.clone(), self.shared.clone());
        csi_rx
    }

    /// A new CSI report for the debug view (its metrics and log lines are
    /// [`publish_csi_reports`]'s).
    fn csi_report(&mut self, report: Arc<CsiReport>) {
        if let Some(replaced) = self.csi.replace(report) {
            drop_off_loop(&self.tasks, replaced);
        }
        self.view_freshness.changed();
    }

    /// A traced mount call: measured, and what it changes or reaches.
    fn syscall<'e>(&mut self, event: &'e Event) -> Effects<'e> {
        self.shared.metrics.operations.syscall(event.call.name(), event.ret >= 0);
        let Some(target) = EventTarget::of(self.model.kubelet_root(), event) else { return Vec::new() };
        self.measure(event, &target);
        // A publish change or a mount outside kubelet's publish: one or the other.
        let mut effects = self.target_changed(&target, MadeBy::Syscall(event));
        effects.extend(self.check_out_of_band(event, &target));
        effects
    }

    /// A mount attached at or detached from one of kubelet's volume paths (fanotify).
    fn mount_change(&mut self, change: &MountChange) -> Effects<'static> {
        if self.opts.print_events {
            println!("{change}");
        }
        let root = self.model.kubelet_root();
        let target = match change {
            MountChange::Attached { mask: true, mount_point } => {
                debug!("quarantine mask attached on {}", mount_point.display());
                return Vec::new();
            }
            MountChange::Attached { mount_point, .. } => EventTarget::attached(root, mount_point.clone()),
            MountChange::Detached { mount_point, mnt_id } => {
                if self.own_detaches.remove(mnt_id) {
                    debug!("own detach of mount {mnt_id} on {} notified", mount_point.display());
                    return Vec::new();
                }
                EventTarget::detached(root, mount_point.clone())
            }
        };
        self.record_notice(&target);
        self.target_changed(&target, MadeBy::Notice)
    }

    /// What an attach or detach at `target` changes about the publishes and ownership, and
    /// what the policy makes of it, whatever reported it.
    fn target_changed<'e>(&mut self, target: &EventTarget, by: MadeBy<'e>) -> Effects<'e> {
        let Some(change) = target.publish_change() else {
            if target.attaching && target.succeeded {
                debug!("not a recognisable publish target: {}", target.path.display());
            }
            return Vec::new();
        };
        let ownership = self.apply_publish_change(&change);
        let reporter = match by {
            MadeBy::Syscall(_) => Reporter::Syscall,
            MadeBy::Notice => Reporter::Notice { namespace_held: self.watched.is_some() },
            MadeBy::MountTable => Reporter::MountTable,
        };
        let action = decision::decide(self.decision, ownership, reporter);
        let follow_up = self.after_publish_change(&change, action.is_transition());
        let mut effects = vec![Effect::Publish { action, change, by }];
        effects.extend(follow_up);
        effects
    }

    /// Takes a publish or unpublish into the model and the owners; returns what it does
    /// to ownership.
    fn apply_publish_change(&mut self, change: &PublishChange) -> OwnershipChange {
        if let PublishChange::Unpublished(t) = change
            && self.model.mounts().is_masked(&t.volume, &t.pod_uid)
        {
            // The driver's unpublish took the mask off with whatever it unmounted.
            info!("quarantine mask on pod {}'s target of volume {} removed by its unpublish", t.pod_uid, t.volume);
            self.shared.mask_cleared(&t.volume, &t.pod_uid);
        }
        self.model.apply(change);
        self.view_freshness.changed();
        self.out_of_band.owned_trees = None;
        let ownership = self.owners.observe(change);
        if matches!(change, PublishChange::Unpublished(_)) {
            // A released volume is no one's: the reporter stops watching it at once.
            self.watch_opens();
        }
        ownership
    }

    /// What follows a publish change once it is acted on: the namespace scan, and the
    /// views when ownership or a quarantine changed.
    fn after_publish_change(&mut self, change: &PublishChange, transition: bool) -> Effects<'static> {
        let mut effects = Vec::new();
        // A publish propagates into every namespace that receives kubelet's tree. Owned
        // volumes are single-pod ones (one that just left the set keeps its owner until its
        // publish goes; the reconciliation's scan covers that); the scan reads which are.
        if let PublishChange::Published(t, _) = change
            && self.model.single_pod().contains_key(&t.volume)
            && self.out_of_band.scans.schedule.wanted(Instant::now())
        {
            effects.push(Effect::ScanNamespaces);
        }
        // Every view must say so now, not in a second (in a burst, within
        // `view::URGENT_GAP`).
        if transition && self.view_freshness.changed_urgently(Instant::now()) {
            effects.push(Effect::RefreshView);
        }
        effects
    }

    /// A volume operation: into kubelet's histogram and the recent-mounts log.
    fn measure(&mut self, event: &Event, target: &EventTarget) {
        let Some(op) = volume_op(target, event.duration_ns) else { return };
        let driver = volume_ops::driver_of(self.model.kubelet_root(), &self.model.snapshot().facts, &op.target);
        let plugin = volume_ops::volume_plugin(driver.as_deref());
        let seconds = op.duration_ns as f64 / 1e9;
        self.shared.metrics.operations.storage_operation(plugin.clone(), op.operation, op.success, seconds);
        let comm = String::from_utf8_lossy(event.caller.comm.as_bytes()).into_owned();
        let pod = self.callers.pod_uid(event.caller.tgid, event.caller.cgroup_id);
        let path = target.path.to_string_lossy().into_owned();
        let record =
            MountRecord::new(event.returned_at(), op.operation.as_str(), event.call.name(), path, plugin, event.ret)
                .by(seconds, event.caller.tgid, comm, pod);
        self.shared.record_mount(record);
    }

    /// A volume operation a notice reported: into the recent-mounts log only (a notice has
    /// no duration for kubelet's histogram, no caller, and is never a failure).
    fn record_notice(&mut self, target: &EventTarget) {
        let Some(op) = volume_op(target, 0) else { return };
        let driver = volume_ops::driver_of(self.model.kubelet_root(), &self.model.snapshot().facts, &op.target);
        let path = target.path.to_string_lossy().into_owned();
        let plugin = volume_ops::volume_plugin(driver.as_deref());
        self.shared.record_mount(MountRecord::new(
            SystemTime::now(),
            op.operation.as_str(),
            "fanotify",
            path,
            plugin,
            0,
        ));
    }

    /// Has what the debug API shows, and the gauges derived from it, rebuilt off the loop
    /// (see [`super::view`]).
    fn refresh_view(&mut self, refresh: Refresh) -> Result<(), AgentError> {
        let inputs = self.view_inputs(refresh)?;
        if let Some(unbuilt) = self.view.request(inputs) {
            drop_off_loop(&self.tasks, unbuilt);
        }
        self.view_freshness.copied(Instant::now());
        Ok(())
    }

    /// A copy of what the view is built from: the owners, the mounts and the findings
    /// (proportional to the node's publishes); facts, single-pod set and CSI report shared.
    fn view_inputs(&self, refresh: Refresh) -> Result<super::view::ViewInputs, AgentError> {
        Ok(super::view::ViewInputs {
            mode: self.decision.mode,
            mode_reason: self.decision.reason.to_string(),
            snapshot: self.model.snapshot().clone(),
            single_pod: self.model.single_pod().clone(),
            mounts: self.model.mounts().clone(),
            owners: self.owners.owners()?,
            findings: self.model.findings().cloned().collect(),
            csi: self.csi.clone(),
            refresh,
        })
    }

    /// The metrics that follow the facts source.
    fn facts_metrics(&self) {
        let snapshot = self.model.snapshot();
        self.shared.metrics.facts.set_source(&snapshot.origin, snapshot.stale.is_some(), snapshot.synced_at);
        if snapshot.origin != Origin::None {
            self.shared.metrics.conflicts.forget_claims_except(|claim| snapshot.facts.claim(claim).is_some());
        }
    }

    /// New facts from the source: update the single-pod set (kernel or userspace) and
    /// give owners to single-pod volumes that are already published.
    fn facts_changed(&mut self, prepared: PreparedFacts) -> Result<Effects<'static>, AgentError> {
        let change = self.model.set_prepared(prepared);
        let retired = self.model.take_retired();
        drop_off_loop(&self.tasks, retired);
        self.facts_metrics();
        self.view_freshness.changed();
        let mut effects = Vec::new();
        if change.single_pod {
            self.out_of_band.owned_trees = None;
            effects.extend(self.report_shared_volumes());
            self.owners.sync_single_pod_set(&self.model)?;
            let owners = self.owners.owners()?;
            for fix in self.model.plan_owners(&owners) {
                if matches!(fix, OwnerFix::Seed { .. }) {
                    self.owners.apply(&fix)?;
                }
            }
            self.owners.seed_roots(&self.model)?;
        }
        self.owners.sync_exempt_pods(&self.exempt_pods())?;
        if change.noteworthy {
            self.model.log_summary();
        }
        // Before kubelet's teardown of the pod's volumes, which a mask would make fail.
        effects.extend(self.model.masks_of_deleted_pods().into_iter().map(Effect::RemoveMask));
        self.explain_unnamed();
        Ok(effects)
    }
}
