//! The loop's side of the open and change reporters (`crate::guard`, where no kernel hook
//! guards a volume's files): what to watch, from the owned trees and the owner's container
//! mounts the namespace scan found, and what another pod's open or change becomes (a
//! conflict with route `open` or `change`).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::{Running, effects::Effect};
use crate::agent::RunOptions;
use crate::{
    enforce::{Mode, ModeDecision},
    guard::{
        change_reporter::ChangePlace,
        node_opens::NodeOpenCounts,
        open_reporter::{FileAccess, ForeignAccess, OpenReporter, OpenScope, Opener, WatchedVolume},
    },
    model::{access::Route, explain::ConflictAction, explain::MountedBy},
    node_files::mount_table::MountTable,
    outputs::served_state::ServedState,
    sys::fanotify::{
        change_watch,
        open_watch::{Answers, Reach},
    },
};

/// Starts the reporter (`None`, logged, where fanotify cannot watch opens); the loop reads
/// what it finds from the receiver. It refuses other pods' opens where `--deny-foreign-open`
/// asks, in quarantine mode (audit refuses nothing).
pub(super) fn start(
    opts: &RunOptions,
    decision: &ModeDecision,
    shared: &ServedState,
) -> Option<(OpenReporter, mpsc::Receiver<ForeignAccess>)> {
    let answers = match (opts.deny_foreign_open, decision.mode) {
        (true, Mode::Quarantine) => Answers::Yes,
        (true, mode) => {
            warn!("--deny-foreign-open is ignored in {mode} mode: another pod's opens are reported, not refused");
            Answers::No
        }
        (false, _) => Answers::No,
    };
    let verb = if answers == Answers::Yes { "refused" } else { "reported" };
    let node_opens = Arc::new(NodeOpenCounts::default());
    shared.metrics.node_opens.add_source(node_opens.clone());
    OpenReporter::start(answers, node_opens)
        .inspect(|_| info!("another pod's opens of an owned volume's files are {verb} (fanotify)"))
        .inspect_err(|e| warn!("another pod's opens of an owned volume's files are not {verb}: {e}"))
        .ok()
}

impl Running<'_> {
    /// Tells the reporter every owned volume and the places that show it: the owner's
    /// publish (its whole filesystem where the volume is one), its containers' mounts, and
    /// other pods' mounts of a directory above it.
    pub(super) fn watch_opens(&mut self) {
        if self.out_of_band.open_reporter.is_none() {
            return;
        }
        let trees = self.owned_trees();
        let allowed = self.exempt_pods();
        let in_namespace = MountTable::root_of(self.model.mountinfo());
        let Some(reporter) = self.out_of_band.open_reporter.as_ref() else { return };
        let volumes = trees
            .iter()
            .map(|tree| {
                let (reach, change_reach) = match tree.whole_filesystem() {
                    true => (Reach::Filesystem, change_watch::ChangeReach::Filesystem),
                    false => (Reach::Mount, change_watch::ChangeReach::Directory),
                };
                let publish = match &in_namespace {
                    Some(root) => under(root, &tree.publish_point),
                    None => tree.publish_point.clone(),
                };
                let scanned = reporter.scanned.get(&tree.volume).cloned().unwrap_or_default();
                let above = scanned.ancestors.values().map(|(place, _)| place.clone());
                let changes = ChangePlace { root: publish.clone(), reach: change_reach };
                let places = std::iter::once(publish)
                    .chain(scanned.owner)
                    .map(|path| (path, reach))
                    .chain(above.map(|place| (place, Reach::Mount)))
                    .collect();
                let ancestors = scanned.ancestors.into_iter().map(|(id, (_, dir))| (id, dir)).collect();
                let (volume, owner) = (tree.volume.clone(), tree.owner.clone());
                let scope = OpenScope { allowed: allowed.clone(), ancestors };
                WatchedVolume { volume, owner, places, scope, changes }
            })
            .collect();
        reporter.watch(volumes);
    }

    /// An open or a change of an owned volume's files by a process that is not the
    /// owner's: a conflict with route `open` or `change`, unless the reader is exempt or
    /// the volume's driver.
    pub(super) fn foreign_access(&mut self, open: ForeignAccess) -> Option<Effect<'static>> {
        let reader = match &open.reader {
            Opener::Pod(pod) if self.is_exempt(pod) || self.out_of_band.driver_pods.contains(pod) => return None,
            Opener::Pod(pod) => pod.as_str(),
            Opener::Node => {
                debug!("volume {}: opened by node process {} ({}), allowed", open.volume, open.pid, open.command);
                return None;
            }
            // Counted and logged with no pod: there is no object to hang an Event on.
            Opener::Gone => "",
        };
        let who = if reader.is_empty() {
            "a process that exited before its pod was read".to_owned()
        } else {
            format!("pod {reader}")
        };
        let (action, route) = match &open.access {
            FileAccess::Open { refused: true } => {
                warn!(
                    "CONFLICT refused (EPERM) file_open: volume {:?} is owned by pod {}; {who} tried to open its files (pid={} comm={:?})",
                    open.volume, open.owner, open.pid, open.command
                );
                (ConflictAction::Refused, Route::Open)
            }
            FileAccess::Open { refused: false } => {
                warn!(
                    "CONFLICT reported file_open: volume {:?} is owned by pod {}; {who} opened its files (pid={} comm={:?})",
                    open.volume, open.owner, open.pid, open.command
                );
                (ConflictAction::Audited, Route::Open)
            }
            FileAccess::Change { kind, entry } => {
                warn!(
                    "CONFLICT reported change ({}): volume {:?} is owned by pod {}; {who} changed {entry:?} (pid={} comm={:?})",
                    kind.name(),
                    open.volume,
                    open.owner,
                    open.pid,
                    open.command
                );
                (ConflictAction::Audited, Route::Change)
            }
        };
        let pod = (!reader.is_empty()).then_some(reader);
        let by = MountedBy::resolve(&self.model.snapshot().facts, open.pid, &open.command, pod);
        let conflict = self.model.conflict(action, &open.volume, reader, &open.owner);
        Some(Effect::Tell(conflict.made_by(Some(by)).routed(route, None)))
    }
}

/// `path` (absolute in the table's namespace) as the agent reaches it through `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}
