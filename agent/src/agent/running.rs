//! The running agent: one loop owns the eBPF object, the node model and the owners, and
//! handles kernel events, facts changes, reconciliation and the debug view.

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::{
    AgentError, RunOptions,
    feed::{Feed, Input, OwnMount},
    mount_index::MountChange,
    off_loop::{NodeReads, drop_off_loop, prepare_facts, publish_csi_reports},
};
use crate::{
    csi::{
        monitor::MonitorOptions,
        report::{CheckOptions, CsiReport},
    },
    enforce::{
        Mode, ModeDecision,
        owners::OwnerStore,
        ownership::Publish,
        quarantine::{self, HeldNamespace, MadeIn},
    },
    facts::{Origin, Snapshot},
    kernel::decode::{self, Caller, Event, RawString, Record},
    model::event_target::EventTarget,
    model::explain::{self, ConflictAction, MountedBy, RateLimiter, Verdict},
    model::mounts::Mounts,
    model::mounts::{OwnerFix, PublishChange, StaleMask},
    model::node::{NodeModel, NodeRead, PreparedFacts},
    model::volume_ops::{self, volume_op},
    node_files::caller_pod::CallerPods,
    outputs::metrics::MaskRemoval,
    outputs::render,
    outputs::served_state::{self, ConflictRecord, MountRecord, ServedState},
    sys::signals::StopSignals,
};

/// The running agent's state, owned by the event loop.
pub(super) struct Running<'a> {
    /// The runtime of every task but the loop (HTTP, facts, CSI checks, background work):
    /// the loop's own runtime, on its own thread, runs nothing else.
    pub(super) tasks: tokio::runtime::Handle,
    pub(super) opts: &'a RunOptions,
    pub(super) decision: &'a ModeDecision,
    pub(super) model: NodeModel,
    pub(super) owners: OwnerStore,
    /// Where conflicts go to become Kubernetes Events (none without an API).
    pub(super) explain: Option<mpsc::Sender<explain::Conflict>>,
    /// Without an API the would-be Events are logged, as rate-limited as real ones.
    pub(super) log_limiter: RateLimiter,
    /// Metrics and what the debug API shows.
    pub(super) shared: Arc<ServedState>,
    /// When the debug view is owed a new copy.
    pub(super) view_freshness: super::view::Freshness,
    /// Builds the debug view (and the mounts the CSI checks see) off the loop.
    pub(super) view: super::view::ViewBuilder,
    /// The mounts as the CSI checks see them (sent by the view builder).
    pub(super) csi_mounts: watch::Receiver<Mounts>,
    /// The last CSI report, for the debug view.
    pub(super) csi: Option<Arc<CsiReport>>,
    /// Conflicts whose pod the facts do not name yet, waiting to become Events.
    pub(super) unnamed: super::unnamed::Unnamed,
    /// Whose mount namespace the mount table is, for the reconciliation's messages.
    pub(super) table_namespace: super::table_namespace::TableNamespace,
    /// Which pod a calling process belongs to, by its cgroup.
    pub(super) callers: CallerPods,
    /// `(volume, pod)` already reported as holding a single-pod volume another pod holds.
    pub(super) observed: std::collections::BTreeSet<(String, String)>,
    /// The namespace watched for mount notices (fanotify backend): where their quarantine acts.
    pub(super) watched: Option<HeldNamespace>,
    /// The unique ids of the mounts the agent detached itself (quarantine, unmask) whose
    /// notices are still to come: notices name no caller, so the agent's own are told by
    /// the mount they name (a count per path would swallow another detach there).
    pub(super) own_detaches: std::collections::HashSet<u64>,
    /// Masks the agent attached while handling the current notice, for the feed to index.
    pub(super) own_masks: Vec<OwnMount>,
}

/// What told the agent about a mount.
#[derive(Clone, Copy)]
enum MadeBy<'e> {
    /// A traced syscall, with its caller and duration.
    Syscall(&'e Event),
    /// A mount notice: no caller, no duration, only success.
    Notice,
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
        loop {
            let view_due = self.view_freshness.urgent_due();
            let view_due_at = tokio::time::Instant::from_std(view_due.unwrap_or_else(Instant::now));
            let step = tokio::select! {
                batch = feed.next_batch(|input| {
                    match input {
                        Input::Record(Record::Conflict(c)) => self.kernel_conflict(&c),
                        Input::Record(Record::Syscall(event)) => {
                            if self.opts.print_events {
                                println!("{}", render::line(&event));
                            }
                            if !own_calls.is_own(&event) {
                                self.syscall(&event);
                            }
                        }
                        Input::Mount(change) => self.mount_change(&change),
                        Input::Resynced => resync = true,
                    }
                    std::mem::take(&mut self.own_masks)
                }) => {
                    batch.map_err(io("reading the kernel's mount events"))?;
                    if std::mem::take(&mut resync) {
                        // Notices of our own detaches may be among those dropped.
                        self.own_detaches.clear();
                        reads.start(&self.model);
                    }
                    continue
                }
                _ = lost_check.tick() => Step::Tick,
                _ = tokio::time::sleep_until(view_due_at), if view_due.is_some() => Step::UrgentView,
                _ = reconcile.tick() => Step::ReconcileTick,
                Some(read) = node_reads.recv() => Step::Reconcile(read),
                Ok(()) = csi.changed() => Step::Csi,
                Some(facts) = prepared.recv() => Step::Facts(facts),
                _ = stop.recv() => break,
            };
            // What is not an event must stay short: each event behind it waits.
            let (started, name) = (std::time::Instant::now(), step.name());
            match step {
                Step::Tick => {
                    if let Some(lost) = feed.events_lost() {
                        self.shared.metrics.set_events_lost(lost);
                    }
                    self.explain_unnamed();
                    if self.view_freshness.is_dirty() {
                        self.refresh_view()?;
                    }
                }
                Step::ReconcileTick => reads.start(&self.model),
                Step::Reconcile(read) => {
                    if let Some(read) = reads.finished(read, &self.model) {
                        self.reconcile(read)?;
                    }
                }
                Step::UrgentView => self.refresh_view()?,
                Step::Csi => {
                    let report = csi.borrow_and_update().clone();
                    self.csi_report(report);
                }
                Step::Facts(facts) => self.facts_changed(facts)?,
            }
            if started.elapsed() > SLOW_STEP {
                debug!("event loop: {name} took {:?}", started.elapsed());
            }
        }
        info!("stopping");
        Ok(())
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

    /// Single-pod volumes found published into several pods, without a publish the agent
    /// saw: at start-up (it was not running, or a previous agent could not prevent it), and
    /// when the facts first make them single-pod (the API's first list comes after the
    /// start). A conflict record, a count and an Event on each younger pod, once. Nothing is
    /// torn down: unmounting a running pod's volume would break it, and which pod should
    /// keep it is not ours to decide.
    pub(super) fn report_shared_volumes(&mut self) {
        let shared = self.model.shared_single_pod_volumes();
        let mut still_shared = std::collections::BTreeSet::new();
        for (volume, pods) in shared {
            let Some((oldest, younger)) = pods.split_first() else { continue };
            for pod in younger {
                let key = (volume.clone(), pod.clone());
                if !self.observed.contains(&key) {
                    warn!(
                        "CONFLICT found: single-pod volume {volume} is published into pod {pod} and, earlier, pod \
                         {oldest}; left as it is"
                    );
                    self.explain(ConflictAction::Observed, &volume, pod, oldest);
                }
                still_shared.insert(key);
            }
        }
        self.observed = still_shared;
    }

    /// A conflict the LSM programs saw (refused in enforce mode, allowed in audit).
    fn kernel_conflict(&mut self, c: &decode::Conflict) {
        warn!("{}", render::conflict(c));
        let action = if c.blocked { ConflictAction::Refused } else { ConflictAction::Audited };
        let text = |s: &RawString| String::from_utf8_lossy(s.as_bytes()).into_owned();
        let by = self.mounted_by(&c.caller);
        self.explain_by(action, &text(&c.volume), &text(&c.attempted_by), &text(&c.owner), Some(by));
    }

    /// The calling process and its pod, as far as its cgroup says.
    fn mounted_by(&mut self, caller: &Caller) -> MountedBy {
        let pod = self.callers.pod_uid(caller.tgid, caller.cgroup_id);
        let command = String::from_utf8_lossy(caller.comm.as_bytes()).into_owned();
        MountedBy::resolve(&self.model.snapshot().facts, caller.tgid, &command, pod.as_deref())
    }

    /// Hands a conflict to the Kubernetes Event publisher, or without an API logs the
    /// Event that would have been recorded (rate-limited the same way).
    fn explain(&mut self, action: ConflictAction, volume: &str, pod_uid: &str, owner_uid: &str) {
        self.explain_by(action, volume, pod_uid, owner_uid, None);
    }

    /// As [`Self::explain`], naming who made the mount.
    fn explain_by(
        &mut self,
        action: ConflictAction,
        volume: &str,
        pod_uid: &str,
        owner_uid: &str,
        by: Option<MountedBy>,
    ) {
        if matches!(action, ConflictAction::Audited | ConflictAction::Observed) {
            // Both pods hold it now: not to be reported again as found shared.
            self.observed.insert((volume.to_owned(), pod_uid.to_owned()));
        }
        let conflict = self.model.conflict(action, volume, pod_uid, owner_uid).made_by(by);
        self.shared.metrics.conflict(conflict.claim.as_ref(), action);
        self.shared.record_conflict(ConflictRecord::new(&conflict));
        self.view_freshness.changed();
        if conflict.pod.name.is_none() && self.explain.is_some() {
            // A pod this new may not have reached the agent's watch yet: wait for it.
            let facts = self.model.snapshot().facts.clone();
            if let Some(overflow) = self.unnamed.hold(&facts, action, volume, pod_uid, owner_uid) {
                self.send_event(overflow);
            }
            return;
        }
        self.send_event(conflict);
    }

    /// The held conflicts whose pod the facts now name (or that waited long enough).
    fn explain_unnamed(&mut self) {
        if self.unnamed.is_empty() {
            return;
        }
        let facts = self.model.snapshot().facts.clone();
        for conflict in self.unnamed.ready(&facts, tokio::time::Instant::now()) {
            self.send_event(conflict);
        }
    }

    fn send_event(&mut self, conflict: explain::Conflict) {
        let volume = conflict.volume.clone();
        match &self.explain {
            Some(tx) => {
                if tx.try_send(conflict).is_err() {
                    warn!("conflict on volume {volume} not sent as a Kubernetes Event: the event queue is full");
                }
            }
            None => {
                if let Verdict::Send { held_back } = self.log_limiter.check(&conflict, std::time::Instant::now()) {
                    info!(
                        "explained (no Kubernetes API, Event logged only): Warning {} on pod {}: {}{}",
                        conflict.action.reason(),
                        conflict.pod,
                        conflict.message(),
                        match held_back {
                            0 => String::new(),
                            n => format!(" ({n} similar reports suppressed)"),
                        }
                    );
                }
            }
        }
    }

    fn syscall(&mut self, event: &Event) {
        self.shared.metrics.syscall(event.call.name(), event.ret >= 0);
        let Some(target) = EventTarget::of(self.model.kubelet_root(), event) else { return };
        self.measure(event, &target);
        self.target_changed(&target, MadeBy::Syscall(event));
    }

    /// A mount attached at or detached from one of kubelet's volume paths (fanotify).
    fn mount_change(&mut self, change: &MountChange) {
        if self.opts.print_events {
            println!("{change}");
        }
        let root = self.model.kubelet_root();
        let target = match change {
            MountChange::Attached { mask: true, mount_point } => {
                debug!("quarantine mask attached on {}", mount_point.display());
                return;
            }
            MountChange::Attached { mount_point, .. } => EventTarget::attached(root, mount_point.clone()),
            MountChange::Detached { mount_point, mnt_id } => {
                if self.own_detaches.remove(mnt_id) {
                    debug!("own detach of mount {mnt_id} on {} notified", mount_point.display());
                    return;
                }
                EventTarget::detached(root, mount_point.clone())
            }
        };
        self.record_notice(&target);
        self.target_changed(&target, MadeBy::Notice);
    }

    /// What an attach or detach at `target` changes about the publishes, ownership and
    /// quarantines, whatever reported it.
    fn target_changed(&mut self, target: &EventTarget, by: MadeBy<'_>) {
        let Some(change) = target.publish_change() else {
            if target.attaching && target.succeeded {
                debug!("not a recognisable publish target: {}", target.path.display());
            }
            return;
        };
        if let PublishChange::Unpublished(t) = &change
            && self.model.mounts().is_masked(&t.volume, &t.pod_uid)
        {
            // The driver's unpublish took the mask off with whatever it unmounted.
            info!("quarantine mask on pod {}'s target of volume {} removed by its unpublish", t.pod_uid, t.volume);
            self.shared.mask_cleared(&t.volume, &t.pod_uid);
        }
        self.model.apply(&change);
        self.view_freshness.changed();
        let transition = match (self.decision.in_kernel(), by) {
            (true, MadeBy::Syscall(_)) => {
                self.owners.publish_changed(&change);
                false
            }
            // Never chosen with an in-kernel mode (see `trace_backend::IN_KERNEL_MODE`).
            (true, MadeBy::Notice) => false,
            (false, by) => self.observe(by, &change),
        };
        // Ownership or a quarantine changed: every view must say so now, not in a second
        // (in a burst, within `view::URGENT_GAP`).
        if transition
            && self.view_freshness.changed_urgently(Instant::now())
            && let Err(e) = self.refresh_view()
        {
            warn!("refreshing the debug view: {e}");
        }
    }

    /// A volume operation: into kubelet's histogram and the recent-mounts log.
    fn measure(&mut self, event: &Event, target: &EventTarget) {
        let Some(op) = volume_op(target, event.duration_ns) else { return };
        let driver = volume_ops::driver_of(self.model.kubelet_root(), &self.model.snapshot().facts, &op.target);
        let plugin = volume_ops::volume_plugin(driver.as_deref());
        let seconds = op.duration_ns as f64 / 1e9;
        self.shared.metrics.storage_operation(plugin.clone(), op.operation, op.success, seconds);
        let at = event.returned_at();
        self.shared.record_mount(MountRecord {
            at,
            at_rfc3339: served_state::rfc3339(at),
            operation: op.operation.as_str(),
            syscall: event.call.name(),
            target: target.path.to_string_lossy().into_owned(),
            volume_plugin: plugin,
            success: op.success,
            ret: event.ret.min(0),
            duration_seconds: Some(seconds),
            pid: Some(event.caller.tgid),
            comm: Some(String::from_utf8_lossy(event.caller.comm.as_bytes()).into_owned()),
            pod: self.callers.pod_uid(event.caller.tgid, event.caller.cgroup_id),
        });
    }

    /// A volume operation a notice reported: into the recent-mounts log only (a notice has
    /// no duration for kubelet's histogram, no caller, and is never a failure).
    fn record_notice(&mut self, target: &EventTarget) {
        let Some(op) = volume_op(target, 0) else { return };
        let driver = volume_ops::driver_of(self.model.kubelet_root(), &self.model.snapshot().facts, &op.target);
        let at = SystemTime::now();
        self.shared.record_mount(MountRecord {
            at,
            at_rfc3339: served_state::rfc3339(at),
            operation: op.operation.as_str(),
            syscall: "fanotify",
            target: target.path.to_string_lossy().into_owned(),
            volume_plugin: volume_ops::volume_plugin(driver.as_deref()),
            success: true,
            ret: 0,
            duration_seconds: None,
            pid: None,
            comm: None,
            pod: None,
        });
    }

    /// Has what the debug API shows, and the gauges derived from it, rebuilt off the loop
    /// (see [`super::view`]).
    pub(super) fn refresh_view(&mut self) -> Result<(), AgentError> {
        let inputs = self.view_inputs()?;
        if let Some(unbuilt) = self.view.request(inputs) {
            drop_off_loop(&self.tasks, unbuilt);
        }
        self.view_freshness.copied(Instant::now());
        Ok(())
    }

    /// A copy of what the view is built from: the owners, the mounts and the findings
    /// (proportional to the node's publishes); facts, single-pod set and CSI report shared.
    pub(super) fn view_inputs(&self) -> Result<super::view::ViewInputs, AgentError> {
        Ok(super::view::ViewInputs {
            mode: self.decision.mode,
            mode_reason: self.decision.reason.to_string(),
            snapshot: self.model.snapshot().clone(),
            single_pod: self.model.single_pod().clone(),
            mounts: self.model.mounts().clone(),
            owners: self.owners.owners()?,
            findings: self.model.findings().cloned().collect(),
            csi: self.csi.clone(),
        })
    }

    /// The metrics that follow the facts source.
    pub(super) fn facts_metrics(&self) {
        let snapshot = self.model.snapshot();
        self.shared.metrics.set_source(&snapshot.origin, snapshot.stale.is_some(), snapshot.synced_at);
        if snapshot.origin != Origin::None {
            self.shared.metrics.forget_claims_except(|claim| snapshot.facts.claim(claim).is_some());
        }
    }

    /// Userspace ownership for modes where the kernel does not decide. True when the
    /// ownership or a quarantine changed.
    fn observe(&mut self, by: MadeBy<'_>, change: &PublishChange) -> bool {
        let OwnerStore::Userspace(ownership) = &mut self.owners else { return false };
        let (target, path) = match change {
            PublishChange::Unpublished(t) => {
                if !ownership.unpublished(t) {
                    return false;
                }
                info!("volume {} released: pod {} unmounted its publish target", t.volume, t.pod_uid);
                self.tell_quarantined_pods(&t.volume, &t.pod_uid);
                return true;
            }
            PublishChange::Published(t, p) => (t, p),
        };
        let mode = self.decision.mode;
        let owner = match ownership.published(target) {
            Publish::Untracked | Publish::Owner => return false,
            Publish::Claimed => {
                info!("volume {} claimed by pod {}", target.volume, target.pod_uid);
                return true;
            }
            Publish::Conflict { owner } => owner,
        };
        let made_in = match (by, &self.watched) {
            (MadeBy::Syscall(event), _) => Some(MadeIn::Caller(&event.caller)),
            (MadeBy::Notice, Some(held)) => Some(MadeIn::Watched(held)),
            (MadeBy::Notice, None) => None,
        };
        let action = match (mode, made_in) {
            (Mode::Quarantine, Some(made_in)) => match quarantine::quarantine(made_in, path.clone()) {
                Ok(done) => {
                    if matches!(by, MadeBy::Notice) {
                        self.own_detaches.extend(&done.detached_ids);
                        if let Some(mnt_id) = done.mask_id {
                            self.own_masks.push(OwnMount { mnt_id, mount_point: path.clone() });
                        }
                    }
                    warn!(
                        "CONFLICT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it; \
                         detached {} mount(s) and masked the target read-only in {} ({} µs)",
                        target.volume, target.pod_uid, done.detached, done.namespace, done.micros
                    );
                    self.model.quarantined(target, path);
                    ConflictAction::Quarantined
                }
                Err(e) => {
                    warn!(
                        "CONFLICT NOT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it: {e}",
                        target.volume, target.pod_uid
                    );
                    ConflictAction::Audited
                }
            },
            _ => {
                warn!(
                    "CONFLICT audited (allowed): volume \"{}\" is owned by pod {owner}; pod {} published it",
                    target.volume, target.pod_uid
                );
                ConflictAction::Audited
            }
        };
        let (volume, pod) = (target.volume.clone(), target.pod_uid.clone());
        // A notice names no caller: the conflict says nothing of who mounted it.
        let mounted_by = match by {
            MadeBy::Syscall(event) => Some(self.mounted_by(&event.caller)),
            MadeBy::Notice => None,
        };
        self.explain_by(action, &volume, &pod, &owner, mounted_by);
        true
    }

    /// The owner released `volume`: each pod whose publish of it is quarantined learns that
    /// the volume is free, and that it must be recreated to mount it (its target holds the
    /// mask, and kubelet will not publish again into a running pod).
    fn tell_quarantined_pods(&mut self, volume: &str, owner_uid: &str) {
        let waiting: Vec<String> = self.model.mounts().masked_pods(volume).into_iter().map(str::to_owned).collect();
        for pod_uid in waiting {
            info!("volume {volume} is free; pod {pod_uid} keeps its quarantine mask until it is recreated");
            let notice = self.model.conflict(ConflictAction::Released, volume, &pod_uid, owner_uid);
            self.send_event(notice);
        }
    }

    /// Makes the model and the owners agree with a fresh read of the mount table; removes
    /// the masks of pods that are gone.
    fn reconcile(&mut self, read: NodeRead) -> Result<(), AgentError> {
        let owners = self.owners.owners()?;
        let masks_before: Vec<(String, String)> =
            self.model.mounts().masks().map(|(v, p, _)| (v.to_owned(), p.to_owned())).collect();
        self.model.set_tree_findings(read.tree_findings);
        self.view_freshness.changed();
        let pass = match read.mounts {
            Ok(fresh) => self.model.reconcile_with(fresh, &owners),
            Err(e) => {
                // Keep the state built so far; the next pass tries again.
                warn!("reconciliation skipped: reading {}: {e}", self.opts.mountinfo.display());
                return Ok(());
            }
        };
        if pass.drift > 0 {
            info!("reconciliation: {} publishes corrected from the mount table (events missed)", pass.drift);
        }
        for (volume, pod_uid) in masks_before.iter().filter(|(v, p)| !self.model.mounts().is_masked(v, p)) {
            self.shared.mask_cleared(volume, pod_uid);
        }
        for fix in &pass.fixes {
            if let (true, OwnerFix::Release { volume, pod_uid }) = (self.owners.apply(fix)?, fix) {
                info!(
                    "volume {volume} released: pod {pod_uid}'s publish target has been missing from {} at two \
                     passes{}",
                    self.opts.mountinfo.display(),
                    self.table_namespace.why_missing()
                );
                self.tell_quarantined_pods(volume, pod_uid);
            }
        }
        for stale in &pass.stale_masks {
            self.remove_mask(stale);
        }
        debug!("reconciliation done: {} owner fixes", pass.fixes.len());
        Ok(())
    }

    /// Removes the mask of a pod that is gone or being deleted, so kubelet can finish: its
    /// unpublish, the pod's deletion, and the removal of its directory.
    fn remove_mask(&mut self, stale: &StaleMask) {
        let StaleMask { volume, pod_uid, mount_point } = stale;
        match quarantine::unmask(self.model.mountinfo(), mount_point) {
            Ok(removed) => {
                if let Some(id) = removed.as_ref().and_then(|r| r.mnt_id)
                    && self.watched.is_some()
                {
                    self.own_detaches.insert(id);
                }
                if removed.is_some() {
                    info!(
                        "quarantine mask on {} removed: pod {pod_uid} is gone or being deleted (volume {volume}); \
                         kubelet can now finish its teardown",
                        mount_point.display()
                    );
                    self.shared.metrics.mask_removed(MaskRemoval::PodGone);
                }
                self.model.unmasked(volume, pod_uid);
                self.shared.mask_cleared(volume, pod_uid);
            }
            // Kept in the model: the next passes try again.
            Err(e) => warn!("quarantine mask of gone pod {pod_uid} on {} not removed: {e}", mount_point.display()),
        }
    }

    /// New facts from the source: update the single-pod set (kernel or userspace) and
    /// give owners to single-pod volumes that are already published.
    fn facts_changed(&mut self, prepared: PreparedFacts) -> Result<(), AgentError> {
        let change = self.model.set_prepared(prepared);
        let retired = self.model.take_retired();
        drop_off_loop(&self.tasks, retired);
        self.facts_metrics();
        self.view_freshness.changed();
        if change.single_pod {
            self.report_shared_volumes();
            self.owners.sync_single_pod_set(&self.model)?;
            let owners = self.owners.owners()?;
            for fix in self.model.plan_owners(&owners) {
                if matches!(fix, OwnerFix::Seed { .. }) {
                    self.owners.apply(&fix)?;
                }
            }
        }
        if change.noteworthy {
            self.model.log_summary();
        }
        self.explain_unnamed();
        Ok(())
    }
}

/// A loop step longer than this is logged (debug): events waited behind it.
const SLOW_STEP: Duration = Duration::from_millis(5);

/// What woke the event loop, other than events.
enum Step {
    Tick,
    /// A change of ownership or quarantine the view held back (see `view::URGENT_GAP`).
    UrgentView,
    ReconcileTick,
    Reconcile(NodeRead),
    Csi,
    Facts(PreparedFacts),
}

impl Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Tick => "the 1 s tick (lost events, held conflicts, the view)",
            Step::UrgentView => "the view after a burst of ownership changes",
            Step::ReconcileTick => "starting a reconciliation",
            Step::Reconcile(_) => "a reconciliation",
            Step::Csi => "a CSI report",
            Step::Facts(_) => "new facts",
        }
    }
}
