//! Access that never goes through kubelet's publish: a bind of an owned volume's publish
//! target or staging (what a hostPath into another pod's volume amounts to), a recursive
//! bind of kubelet's `pods/`, a clone with the new mount API. Found at the syscall's exit
//! by what the new mount is (`model::access`), judged by `enforce::decision::decide_access`.

use std::path::PathBuf;

use tracing::{debug, warn};
use volguard_common::{
    enforce::MountOp,
    mount_flags::{MS_REC, without_magic},
};

use super::running::Running;
use crate::{
    enforce::{
        decision::{AccessAction, AccessReportOnly, Reader, decide_access},
        detach,
    },
    kernel::decode::{Call, Event},
    model::{
        access::{self, Access, Attach, VolumeTree},
        event_target::EventTarget,
        explain::ConflictAction,
    },
    node_files::mount_table::MountTable,
};

impl Running<'_> {
    /// A successful bind or `move_mount` that is no publish: does the new mount reach an
    /// owned single-pod volume, and who made it?
    pub(super) fn check_out_of_band(&mut self, event: &Event, target: &EventTarget) {
        let (attach, recursive) = match &event.call {
            Call::Mount { flags, .. } if MountOp::of(without_magic(*flags)) == MountOp::Bind => {
                (Attach::Bind, flags & MS_REC != 0)
            }
            Call::MoveMount { .. } => (Attach::Move, true),
            _ => return,
        };
        if !target.attaching || !target.succeeded || target.publish_change().is_some() {
            return;
        }
        let trees = self.owned_trees();
        let reader_pod = self.callers.pod_uid(event.caller.tgid, event.caller.cgroup_id);
        // The owner's own runtime binding its volume into its containers: nothing to read.
        if trees.is_empty() || reader_pod.as_ref().is_some_and(|pod| trees.iter().all(|t| &t.owner == pod)) {
            return;
        }
        // A plain bind attaches one mount: its filesystem, from a stat through the caller's
        // root, rules most binds out without reading a mount table.
        if !recursive
            && let Some(device) = detach::device_at(&event.caller, &target.path)
            && !trees.iter().any(|t| t.device == device)
        {
            return;
        }
        let Some(table) = detach::caller_table(&event.caller) else {
            debug!("out-of-band check of {}: the caller's mount namespace is gone", target.path.display());
            return;
        };
        let found = access::accesses(&table, &target.path, attach, self.model.kubelet_root(), &trees);
        for access in found {
            let reader = match &reader_pod {
                Some(pod) if *pod == access.owner => Reader::Owner,
                Some(_) => Reader::OtherPod,
                None => Reader::NodeProcess,
            };
            let decided = decide_access(self.decision.mode, reader, self.opts.detach_node_access);
            if decided != AccessAction::Allow {
                let id = mount_id(&table, &access);
                self.handle_access(event, access, id, decided, reader_pod.as_deref());
            }
        }
    }

    /// Carries out the decision about one access, and tells it.
    fn handle_access(&mut self, event: &Event, access: Access, id: i32, decided: AccessAction, pod: Option<&str>) {
        let by = self.mounted_by(&event.caller);
        let (volume, owner, route, point) = (&access.volume, &access.owner, access.route.label(), &access.mount_point);
        let action = match decided {
            AccessAction::Detach => match detach::detach(&event.caller, vec![(id, point.clone())]) {
                Ok(n) => {
                    warn!(
                        "CONFLICT detached: a {route} mount at {} by {by} reached volume \"{volume}\", owned by pod \
                         {owner}; detached {n} mount(s)",
                        point.display()
                    );
                    ConflictAction::Detached
                }
                Err(e) => {
                    warn!(
                        "CONFLICT NOT detached: a {route} mount at {} by {by} reached volume \"{volume}\", owned by \
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
                };
                warn!(
                    "CONFLICT reported ({why}): a {route} mount at {} by {by} reached volume \"{volume}\", owned by \
                     pod {owner}",
                    point.display()
                );
                ConflictAction::Audited
            }
            AccessAction::Allow => return,
        };
        let conflict = self
            .model
            .conflict(action, volume, pod.unwrap_or_default(), owner)
            .made_by(Some(by))
            .routed(access.route, Some(access.mount_point));
        self.tell(conflict);
    }

    /// What each owned volume's publish shows, from the agent's mount table; kept until
    /// ownership or the publishes change.
    fn owned_trees(&mut self) -> Vec<VolumeTree> {
        if let Some(trees) = &self.owned_trees {
            return trees.clone();
        }
        let owners = match self.owners.owners() {
            Ok(owners) => owners,
            Err(e) => {
                warn!("out-of-band check: reading the owners: {e}");
                return Vec::new();
            }
        };
        if owners.is_empty() {
            self.owned_trees = Some(Vec::new());
            return Vec::new();
        }
        let trees = match MountTable::read(self.model.mountinfo()) {
            Ok(table) => access::owned_trees(&table, self.model.kubelet_root(), &owners),
            Err(e) => {
                warn!("out-of-band check: reading {}: {e}", self.model.mountinfo().display());
                return Vec::new();
            }
        };
        debug!("out-of-band check: {} owned volume tree(s) known", trees.len());
        self.owned_trees = Some(trees.clone());
        trees
    }
}

/// The id of the mount `access` found (the top one at its mount point).
fn mount_id(table: &MountTable, access: &Access) -> i32 {
    let at: &PathBuf = &access.mount_point;
    table.mounts.iter().rev().find(|m| &m.mount_point == at).map_or(-1, |m| m.id)
}
