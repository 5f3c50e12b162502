//! Conflicts: what the event loop does once the policy (`enforce::decision`) has spoken,
//! and how a conflict is told — the log, the conflict record and metric, and a Kubernetes
//! Event (held until the pod is named) or, without an API, the log line it would have been.

use tracing::{info, warn};

use super::{
    MadeBy, Running,
    effects::{Effect, Effects},
};
use crate::agent::feed::OwnMount;
use crate::{
    enforce::{
        decision::{Action, ReportOnly},
        quarantine::{self, MadeIn},
    },
    kernel::decode::{self, Caller, RawString},
    model::access::Route,
    model::explain::{self, ConflictAction, MountedBy, Verdict},
    model::mounts::PublishChange,
    node_files::kubelet::PublishTarget,
    outputs::{render, served_state::ConflictRecord},
};

impl Running<'_> {
    /// Carries out the policy's `action` about `change`, reported by `by` (an
    /// [`Effect::Publish`]).
    pub(super) fn act(&mut self, action: Action, change: &PublishChange, by: MadeBy<'_>) {
        let (target, path) = match change {
            PublishChange::Published(t, p) => (t, Some(p)),
            PublishChange::Unpublished(t) => (t, None),
        };
        match action {
            Action::None => {}
            Action::InformKernel => self.owners.publish_changed(change),
            Action::Claimed => info!("volume {} claimed by pod {}", target.volume, target.pod_uid),
            Action::Released => {
                info!("volume {} released: pod {} unmounted its publish target", target.volume, target.pod_uid);
                self.tell_quarantined_pods(&target.volume, &target.pod_uid);
            }
            Action::Quarantine { owner } => {
                let path = path.expect("only a publish conflicts").clone();
                let action = self.quarantine(target, path, &owner, by);
                self.explain_publish(action, target, &owner, by);
            }
            Action::Report { owner, only } => {
                let why = match only {
                    ReportOnly::ModeReports => "audited (allowed)",
                    ReportOnly::NamespaceUnknown => "reported only (the notice's mount namespace is not held)",
                };
                warn!(
                    "CONFLICT {why}: volume \"{}\" is owned by pod {owner}; pod {} published it",
                    target.volume, target.pod_uid
                );
                self.explain_publish(ConflictAction::Audited, target, &owner, by);
            }
        }
    }

    /// Detaches `target`'s new mount at `path` where it was made and masks it; what it came
    /// to (quarantined, or only audited where that failed).
    fn quarantine(
        &mut self,
        target: &PublishTarget,
        path: std::path::PathBuf,
        owner: &str,
        by: MadeBy<'_>,
    ) -> ConflictAction {
        let made_in = match (by, &self.watched) {
            (MadeBy::Syscall(event), _) => MadeIn::Caller(&event.caller),
            (MadeBy::Notice, Some(held)) => MadeIn::Watched(held),
            (MadeBy::Notice, None) => unreachable!("the policy quarantines a notice only where the namespace is held"),
            (MadeBy::MountTable, _) => MadeIn::Table(self.model.mountinfo()),
        };
        match quarantine::quarantine(made_in, path.clone()) {
            Ok(done) => {
                // Notices of the agent's own detaches and mask are to be recognised.
                if self.watched.is_some() && !matches!(by, MadeBy::Syscall(_)) {
                    self.own_detaches.extend(&done.detached_ids);
                    if let Some(mnt_id) = done.mask_id {
                        self.own_masks.push(OwnMount { mnt_id, mount_point: path.clone() });
                    }
                }
                let masked = match done.target_gone {
                    false => "and masked the target read-only",
                    true => {
                        "and found the target gone (kubelet removes it when a publish fails): nothing to \
                             mask, kubelet's retry is quarantined again"
                    }
                };
                warn!(
                    "CONFLICT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it; \
                     detached {} mount(s) {masked} in {} ({} µs)",
                    target.volume, target.pod_uid, done.detached, done.namespace, done.micros
                );
                match done.target_gone {
                    false => self.model.quarantined(target, &path),
                    true => self.model.apply(&PublishChange::Unpublished(target.clone())),
                }
                ConflictAction::Quarantined
            }
            Err(e) => {
                warn!(
                    "CONFLICT NOT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it: {e}",
                    target.volume, target.pod_uid
                );
                ConflictAction::Audited
            }
        }
    }

    /// Tells a conflicting publish; a notice names no caller, so then nothing of who mounted it.
    fn explain_publish(&mut self, action: ConflictAction, target: &PublishTarget, owner: &str, by: MadeBy<'_>) {
        let mounted_by = match by {
            MadeBy::Syscall(event) => Some(self.mounted_by(&event.caller)),
            MadeBy::Notice | MadeBy::MountTable => None,
        };
        let conflict = self.conflict_by(action, &target.volume, &target.pod_uid, owner, mounted_by);
        self.tell(conflict);
    }
    /// Single-pod volumes found published into several pods, without a publish the agent
    /// saw: at start-up (it was not running, or a previous agent could not prevent it), and
    /// when the facts first make them single-pod (the API's first list comes after the
    /// start). A conflict record, a count and an Event on each younger pod, once. Nothing is
    /// torn down: unmounting a running pod's volume would break it, and which pod should
    /// keep it is not ours to decide.
    pub(super) fn report_shared_volumes(&mut self) -> Effects<'static> {
        let shared = self.model.shared_single_pod_volumes();
        let mut still_shared = std::collections::BTreeSet::new();
        let mut found = Vec::new();
        for (volume, pods) in shared {
            let Some((oldest, younger)) = pods.split_first() else { continue };
            for pod in younger {
                let key = (volume.clone(), pod.clone());
                if !self.outlets.observed.contains(&key) {
                    warn!(
                        "CONFLICT found: single-pod volume {volume} is published into pod {pod} and, earlier, pod \
                         {oldest}; left as it is"
                    );
                    found.push(Effect::Tell(self.conflict_by(ConflictAction::Observed, &volume, pod, oldest, None)));
                }
                still_shared.insert(key);
            }
        }
        self.outlets.observed = still_shared;
        found
    }

    /// A conflict the LSM programs saw (refused in enforce mode, allowed in audit).
    pub(super) fn kernel_conflict(&mut self, c: &decode::LsmConflict) -> Effects<'static> {
        warn!("{}", render::conflict(c));
        let action = if c.blocked { ConflictAction::Refused } else { ConflictAction::Audited };
        let text = |s: &RawString| String::from_utf8_lossy(s.as_bytes()).into_owned();
        let by = self.mounted_by(&c.caller);
        let (volume, pod, owner) = (text(&c.volume), text(&c.attempted_by), text(&c.owner));
        if c.hook == decode::CLONE_HOOK {
            if !c.blocked {
                // Allowed: the call's exit comes next, and its check would find the clone.
                if self.out_of_band.kernel_audited_clones.len() >= super::out_of_band::REPORTED_ACCESSES {
                    self.out_of_band.kernel_audited_clones.clear();
                }
                self.out_of_band.kernel_audited_clones.insert((c.caller.tgid, volume.clone()));
            }
            let conflict = self.model.conflict(action, &volume, &pod, &owner).made_by(Some(by));
            return vec![Effect::Tell(conflict.routed(Route::Clone, None))];
        }
        let route = match c.hook {
            decode::OPEN_HOOK => Some(Route::Open),
            hook if decode::operation_tried(hook).is_some() => Some(Route::Change),
            _ => None,
        };
        if let Some(route) = route {
            let conflict = self.model.conflict(action, &volume, &pod, &owner).made_by(Some(by));
            return vec![Effect::Tell(conflict.routed(route, None))];
        }
        vec![Effect::Tell(self.conflict_by(action, &volume, &pod, &owner, Some(by)))]
    }

    /// The calling process and its pod, as far as its cgroup says.
    pub(super) fn mounted_by(&mut self, caller: &Caller) -> MountedBy {
        let pod = self.callers.pod_uid(caller.tgid, caller.cgroup_id);
        let command = String::from_utf8_lossy(caller.comm.as_bytes()).into_owned();
        MountedBy::resolve(&self.model.snapshot().facts, caller.tgid, &command, pod.as_deref())
    }

    /// A publish conflict about `volume`, naming who made the mount where that is known.
    /// One left standing (audited, or found) is noted so that it is not found again.
    fn conflict_by(
        &mut self,
        action: ConflictAction,
        volume: &str,
        pod_uid: &str,
        owner_uid: &str,
        by: Option<MountedBy>,
    ) -> explain::Conflict {
        if matches!(action, ConflictAction::Audited | ConflictAction::Observed) {
            // Both pods hold it now: not to be reported again as found shared.
            self.outlets.observed.insert((volume.to_owned(), pod_uid.to_owned()));
        }
        self.model.conflict(action, volume, pod_uid, owner_uid).made_by(by)
    }

    /// Counts and records `conflict`, and hands it to the Event publisher (held until the
    /// facts name a pod this new), or without an API logs the Event it would have been.
    /// A conflict with no pod (a node process's mount) has no object to hang an Event on:
    /// the log, the record and the metric say it.
    pub(super) fn tell(&mut self, conflict: explain::Conflict) {
        self.shared.metrics.conflicts.conflict(conflict.claim.as_ref(), conflict.action, conflict.route);
        self.shared.record_conflict(ConflictRecord::new(&conflict));
        self.view_freshness.changed();
        if conflict.pod.uid.is_empty() {
            return;
        }
        if conflict.pod.name.is_none() && self.outlets.events.is_some() {
            // A pod this new may not have reached the agent's watch yet: wait for it.
            let facts = self.model.snapshot().facts.clone();
            if let Some(overflow) = self.outlets.unnamed.hold(&facts, conflict) {
                self.send_event(overflow);
            }
            return;
        }
        self.send_event(conflict);
    }

    /// The held conflicts whose pod the facts now name (or that waited long enough).
    pub(super) fn explain_unnamed(&mut self) {
        if self.outlets.unnamed.is_empty() {
            return;
        }
        let facts = self.model.snapshot().facts.clone();
        for conflict in self.outlets.unnamed.ready(&facts, tokio::time::Instant::now()) {
            self.send_event(conflict);
        }
    }

    fn send_event(&mut self, conflict: explain::Conflict) {
        let volume = conflict.volume.clone();
        match &self.outlets.events {
            Some(tx) => {
                if tx.try_send(conflict).is_err() {
                    warn!("conflict on volume {volume} not sent as a Kubernetes Event: the event queue is full");
                }
            }
            None => {
                if let Verdict::Send { held_back } =
                    self.outlets.log_limiter.check(&conflict, std::time::Instant::now())
                {
                    info!(
                        "explained (no Kubernetes API, Event logged only): Warning {} on pod {}: {}{}",
                        conflict.reason(),
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

    /// The owner released `volume`: each pod whose publish of it is quarantined learns that
    /// the volume is free, and that it must be recreated to mount it (its target holds the
    /// mask, and kubelet will not publish again into a running pod).
    pub(super) fn tell_quarantined_pods(&mut self, volume: &str, owner_uid: &str) {
        let waiting: Vec<String> = self.model.mounts().masked_pods(volume).into_iter().map(str::to_owned).collect();
        for pod_uid in waiting {
            info!("volume {volume} is free; pod {pod_uid} keeps its quarantine mask until it is recreated");
            let notice = self.model.conflict(ConflictAction::Released, volume, &pod_uid, owner_uid);
            self.send_event(notice);
        }
    }
}
