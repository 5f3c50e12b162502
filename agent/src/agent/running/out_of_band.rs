//! Access that never goes through kubelet's publish: a bind of an owned volume's publish
//! target or staging (what a hostPath into another pod's volume amounts to), a recursive
//! bind of kubelet's `pods/`, a clone with the new mount API, a new mount of a block
//! volume's device. Found at the syscall's exit
//! by what the new mount is (`model::access`), judged by `enforce::decision::decide_access`.

use std::{collections::BTreeSet, sync::Arc};

use tracing::{debug, info, warn};
use volguard_common::{
    enforce::MountOp,
    mount_flags::{MS_REC, without_magic},
};

use super::{
    Running,
    effects::{Effect, Seen},
};
use crate::agent::reported_access::ReportedAccess;
use crate::{
    enforce::{
        decision::{AccessAction, AccessReportOnly, MountMaker, decide_access},
        detach,
        quarantine::QuarantineError,
    },
    kernel::decode::{Call, Event},
    model::{
        access::{self, Access, AttachKind, Route, Scope, VolumeTree},
        event_target::EventTarget,
        exempt,
        explain::ConflictAction,
    },
    node_files::{caller_pod, mount_table::MountTable},
    sys::{
        mountns::{namespace_inode, namespace_of},
        statmount::MountFacts,
    },
};

impl Running<'_> {
    /// A successful bind, `move_mount` or new mount that is no publish: does the new mount
    /// reach an owned single-pod volume, and who made it?
    pub(super) fn check_out_of_band(&mut self, event: &Event, target: &EventTarget) -> Vec<Effect<'static>> {
        let Some((attach, recursive)) = out_of_band_attach(event, target) else { return Vec::new() };
        let trees = self.owned_trees();
        if trees.is_empty() || (!recursive && shows_no_owned_filesystem(event, target, &trees)) {
            return Vec::new();
        }
        let Some(caller) = self.caller_view(event, target, &trees) else { return Vec::new() };
        let found =
            access::accesses(&caller.table, &target.path, attach, caller.scope, self.model.kubelet_root(), &trees);
        // In a pod's own namespace a mount in a shared peer group is a `Bidirectional`
        // volume's, spared as the namespace scan spares it: a CSI node plugin's container
        // that (re)starts while a volume is published gets a copy of every publish under
        // kubelet's `pods/` from its runtime's recursive bind.
        let found = found.into_iter().filter(|a| !(caller.own_namespace && access::shared_back(&caller.table, a)));
        let exempt = caller.pod.as_deref().is_some_and(|pod| self.is_exempt(pod));
        let mut effects = Vec::new();
        for access in found {
            let maker = self.mount_maker(&access, caller.pod.as_deref(), attach, exempt, &trees);
            effects.extend(self.judge_access(event, attach, access, maker, caller.pod.as_deref()));
        }
        effects
    }

    /// The caller's pod and the mount table of its namespace, or `None` when there is
    /// nothing to judge: a runtime binding a pod's own publishes into its containers, or a
    /// namespace gone (or its number already another pod's).
    fn caller_view(&mut self, event: &Event, target: &EventTarget, trees: &[VolumeTree]) -> Option<CallerView> {
        let reader_pod = self.callers.pod_uid(event.caller.tgid, event.caller.cgroup_id);
        if reader_pod.as_ref().is_some_and(|pod| trees.iter().all(|t| t.published_to(pod))) {
            return None;
        }
        let Some((task, table)) = detach::caller_table(&event.caller) else {
            info!(
                "out-of-band check of {} by pid {}: the caller's mount namespace is gone",
                target.path.display(),
                event.caller.tgid
            );
            return None;
        };
        let own_namespace = self.caller_in_own_namespace(event);
        let pod = match (own_namespace, reader_pod, caller_pod::pod_of_task(&task)) {
            // A container's namespace can be gone by the time its event is read (a container
            // that failed to start) and its inode number, which the kernel hands out again
            // at once, be the next new namespace's (another pod's container being made): a
            // task of another pod there means the namespace is no longer the caller's.
            (true, Some(caller), Some(task)) if caller != task => {
                info!(
                    "out-of-band check of {} by pid {}: mount namespace {} is now another pod's; the caller's is \
                     gone",
                    target.path.display(),
                    event.caller.tgid,
                    event.caller.mnt_ns
                );
                return None;
            }
            // A caller its cgroup ID does not place (a helper gone, where pods sit in cgroup
            // v1 alone) in a pod's container namespace: the pod of that container.
            (true, None, Some(task)) => Some(task),
            // A task in no pod proves nothing: a node process can hold a container's namespace.
            (_, reader, _) => reader,
        };
        let scope = match target.path.starts_with("/proc") && own_namespace {
            true => Scope::Namespace,
            false => Scope::CallTree,
        };
        Some(CallerView { pod, table, scope, own_namespace })
    }

    /// Who made a mount that reaches `access`'s volume, as the decision weighs it.
    fn mount_maker(
        &self,
        access: &Access,
        pod: Option<&str>,
        attach: AttachKind,
        exempt: bool,
        trees: &[VolumeTree],
    ) -> MountMaker {
        match pod {
            // The owner, or a pod whose own publish of the volume stands: what it binds,
            // kubelet gave it (its publish was judged as a publish).
            Some(pod) if access::holds_publish(trees, &access.volume, pod) => MountMaker::Owner,
            Some(_) if exempt => MountMaker::Exempt,
            // A CSI node plugin mounting its own volume's device (its staging is kubelet's
            // place, spared anyway).
            Some(pod) if attach == AttachKind::NewMount && self.out_of_band.driver_pods.contains(pod) => {
                MountMaker::Exempt
            }
            Some(_) => MountMaker::OtherPod,
            None => MountMaker::NodeProcess,
        }
    }

    /// Decides about one access a caller's mount gives, once: a mount left in place is
    /// found again at its namespace's next bind.
    fn judge_access(
        &mut self,
        event: &Event,
        attach: AttachKind,
        access: Access,
        maker: MountMaker,
        pod: Option<&str>,
    ) -> Option<Effect<'static>> {
        let decided = decide_access(self.decision.mode, maker, self.opts.detach_node_access);
        // Mount ids are reused, so the mount point is in the key.
        let key = ReportedAccess::of(event.caller.mnt_ns, &access);
        if self.out_of_band.reported.contains(&key) {
            return None;
        }
        // The kernel's hook reported this clone already (records come in order: the hook's
        // before the exit's).
        if attach == AttachKind::Move
            && self.out_of_band.kernel_audited_clones.remove(&(event.caller.tgid, access.volume.clone()))
        {
            self.remember_reported(key);
            return None;
        }
        let (seen, pod) = (Seen::Caller(event.caller.clone()), pod.map(str::to_owned));
        (decided != AccessAction::Allow).then_some(Effect::Access { seen, access, decided, pod, key })
    }

    /// A mount attached in the watched namespace (the node's, fanotify backend) away from
    /// kubelet's volume paths. A notice names no caller, and no pod's container lives in
    /// the node's namespace: one that shows an owned volume is judged as a node process's
    /// (reported; detached with `--detach-node-access`), by what it shows. A bind of a
    /// publish and a new mount of a block volume's device look alike here (the same
    /// filesystem and root): both are told as route `bind`.
    pub(super) fn check_mount_elsewhere(&mut self, facts: &MountFacts) -> Option<Effect<'static>> {
        let trees = self.owned_trees();
        let device = format!("{}:{}", facts.dev.0, facts.dev.1);
        let tree = trees.iter().find(|t| t.shows(&device, &facts.root))?;
        let access = Access {
            volume: tree.volume.clone(),
            owner: tree.owner.clone(),
            mount_point: facts.mount_point.clone(),
            mount_id: i32::try_from(facts.mnt_id_old).unwrap_or(i32::MAX),
            route: Route::Bind,
        };
        // Notices come from one namespace: its mounts are told apart by id and point.
        let key = ReportedAccess::of(0, &access);
        if self.out_of_band.reported.contains(&key) {
            return None;
        }
        let decided = decide_access(self.decision.mode, MountMaker::NodeProcess, self.opts.detach_node_access);
        let seen = Seen::Notice { mnt_id: facts.mnt_id };
        (decided != AccessAction::Allow).then_some(Effect::Access { seen, access, decided, pod: None, key })
    }

    /// Carries out the decision about one access (an [`Effect::Access`]), and tells it.
    /// `Some(left in place)` once told (reported, or a detach that failed: either is
    /// reported once); `None` when there was nothing to tell (allowed, or moved before the
    /// detach).
    pub(super) fn handle_access(
        &mut self,
        seen: &Seen,
        access: Access,
        decided: AccessAction,
        pod: Option<&str>,
    ) -> Option<bool> {
        let mounted_by = match seen {
            Seen::Caller(caller) => Some(self.mounted_by(caller)),
            Seen::Notice { .. } => None,
        };
        let by = match &mounted_by {
            Some(by) => by.to_string(),
            None => "a caller unknown (a mount notice names none)".to_owned(),
        };
        let id = access.mount_id;
        let (volume, owner, point) = (&access.volume, &access.owner, &access.mount_point);
        // "a bind mount", "an ancestor mount".
        let route = match access.route {
            Route::Ancestor => "an ancestor",
            other => &format!("a {}", other.label()),
        };
        let action = match decided {
            AccessAction::Detach => match self.detach_where_seen(seen, id, point) {
                Ok(0) => {
                    // Moved (a runtime's pivot) or gone: a scan soon finds it where it is
                    // now (else only the namespace's next mount call or reconciliation would).
                    debug!("{route} mount at {} by {by} was no longer there to detach", point.display());
                    self.out_of_band.scans.schedule.soon(std::time::Instant::now());
                    return None;
                }
                Ok(n) => {
                    warn!(
                        "CONFLICT detached: {route} mount at {} by {by} reached volume \"{volume}\", owned by pod \
                         {owner}; detached {n} mount(s)",
                        point.display()
                    );
                    ConflictAction::Detached
                }
                Err(e) => {
                    warn!(
                        "CONFLICT NOT detached: {route} mount at {} by {by} reached volume \"{volume}\", owned by \
                         pod {owner}: {e}",
                        point.display()
                    );
                    ConflictAction::Audited
                }
            },
            AccessAction::Report(why) => {
                let why = match why {
                    AccessReportOnly::ModeReports => "audit mode",
                    AccessReportOnly::NodeProcess => "a node process; --detach-node-access detaches those",
                    AccessReportOnly::ShowsMore => {
                        "it shows a directory above the volume, and much else: left in place; without BPF LSM its \
                         opens of the volume's files are not refused"
                    }
                };
                warn!(
                    "CONFLICT reported ({why}): {route} mount at {} by {by} reached volume \"{volume}\", owned by \
                     pod {owner}",
                    point.display()
                );
                ConflictAction::Audited
            }
            AccessAction::Allow => return None,
        };
        let conflict = self
            .model
            .conflict(action, volume, pod.unwrap_or_default(), owner)
            .made_by(mounted_by)
            .routed(access.route, Some(access.mount_point));
        self.tell(conflict);
        Some(action != ConflictAction::Detached)
    }

    /// Detaches the mount `id` at `point` where it was seen: in its caller's namespace, or
    /// in the watched one (by its unique id there).
    fn detach_where_seen(&self, seen: &Seen, id: i32, point: &std::path::Path) -> Result<usize, QuarantineError> {
        match (seen, &self.watched) {
            (Seen::Caller(caller), _) => detach::detach(caller, vec![(id, point.to_owned())]),
            (Seen::Notice { mnt_id }, Some(held)) => held.detach(*mnt_id, point.to_owned()),
            (Seen::Notice { .. }, None) => {
                Err(QuarantineError::Gone { mnt_ns: 0, tgid: 0, target: point.display().to_string() })
            }
        }
    }

    /// Remembers an access left in place, so that it is reported once.
    pub(super) fn remember_reported(&mut self, key: ReportedAccess) {
        if self.out_of_band.reported.len() >= REPORTED_ACCESSES {
            self.out_of_band.reported.clear();
        }
        self.out_of_band.reported.insert(key);
    }

    /// Whether the pod is a reader the operator exempts (by the facts in force: a pod the
    /// facts do not know yet is not exempt).
    pub(super) fn is_exempt(&self, pod_uid: &str) -> bool {
        let readers = &self.opts.exempt_readers;
        !readers.is_empty()
            && self.model.snapshot().facts.pod(pod_uid).is_some_and(|pod| readers.iter().any(|r| r.matches(pod)))
    }

    /// The pods (UIDs) the operator exempts, by the facts in force, and the CSI node
    /// plugins the namespace scan found: the LSM programs' copy, so that a clone an exempt
    /// reader takes, or a driver's open of a volume it serves, is not refused in the kernel.
    pub(super) fn exempt_pods(&self) -> BTreeSet<String> {
        let mut pods = exempt::exempt_pods(&self.opts.exempt_readers, &self.model.snapshot().facts.pods);
        pods.extend(self.out_of_band.driver_pods.iter().cloned());
        pods
    }

    /// Whether the caller's mount namespace is not the one of the agent's mount table (the
    /// node's, with the chart): a container's, whose every mount is its pod's.
    fn caller_in_own_namespace(&self, event: &Event) -> bool {
        let node = namespace_inode(&namespace_of(self.model.mountinfo()));
        node.is_ok_and(|inode| event.caller.mnt_ns != 0 && inode != u64::from(event.caller.mnt_ns))
    }

    /// What each owned volume's publish shows, from the agent's mount table; kept until
    /// ownership or the publishes change.
    pub(super) fn owned_trees(&mut self) -> Arc<[VolumeTree]> {
        if let Some(trees) = &self.out_of_band.owned_trees {
            return trees.clone();
        }
        let owners = match self.owners.owners() {
            Ok(owners) => owners,
            Err(e) => {
                warn!("out-of-band check: reading the owners: {e}");
                return Arc::from([]);
            }
        };
        let trees: Arc<[VolumeTree]> = match owners.is_empty() {
            true => Arc::from([]),
            false => match MountTable::read(self.model.mountinfo()) {
                Ok(table) => access::owned_trees(&table, self.model.kubelet_root(), &owners).into(),
                Err(e) => {
                    warn!("out-of-band check: reading {}: {e}", self.model.mountinfo().display());
                    return Arc::from([]);
                }
            },
        };
        debug!("out-of-band check: {} owned volume tree(s) known", trees.len());
        self.out_of_band.owned_trees = Some(trees.clone());
        trees
    }
}

/// What a traced mount call attached, if it may give access outside kubelet's publish: a
/// successful bind (and whether recursive), `move_mount`, or new mount, that is no publish.
fn out_of_band_attach(event: &Event, target: &EventTarget) -> Option<(AttachKind, bool)> {
    let (attach, recursive) = match &event.call {
        Call::Mount { flags, .. } if MountOp::of(without_magic(*flags)) == MountOp::Bind => {
            (AttachKind::Bind, flags & MS_REC != 0)
        }
        Call::MoveMount { .. } => (AttachKind::Move, true),
        Call::Mount { flags, .. } if MountOp::of(without_magic(*flags)) == MountOp::NewMount => {
            (AttachKind::NewMount, false)
        }
        _ => return None,
    };
    if !target.attaching || !target.succeeded || target.publish_change().is_some() {
        return None;
    }
    // A runtime's new mounts through `/proc/thread-self/fd/N` (proc, sysfs, tmpfs for a
    // container being made) are filesystems of its own making: a new mount is judged only
    // by the one mount it makes at a path, never by the whole namespace.
    if attach == AttachKind::NewMount && target.path.starts_with("/proc") {
        return None;
    }
    Some((attach, recursive))
}

/// Whether a plain bind or new mount onto a path (one mount) is of a filesystem no owned
/// volume lives on: a stat through the caller's root rules most out before anything
/// dearer (the caller's pod, a mount table; a runtime makes a dozen new mounts of proc,
/// sysfs and tmpfs per container). A caller already gone is judged through its namespace.
fn shows_no_owned_filesystem(event: &Event, target: &EventTarget, trees: &[VolumeTree]) -> bool {
    !target.path.starts_with("/proc")
        && detach::device_at(&event.caller, &target.path)
            .is_some_and(|device| !trees.iter().any(|t| t.device == device))
}

/// A caller as the out-of-band check judges it: its pod, its namespace's mount table, and
/// how much of that table its call may have made.
struct CallerView {
    pod: Option<String>,
    table: MountTable,
    scope: Scope,
    /// The caller's mount namespace is not the node's.
    own_namespace: bool,
}

/// How many reported accesses are remembered (a mount left in place is found again at its
/// namespace's next bind); past this the memory starts over, and a mount still there may
/// be reported once more.
pub(super) const REPORTED_ACCESSES: usize = 4096;
