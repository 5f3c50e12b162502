//! The reconciliation: the mount table read again (every `--reconcile-interval`, and at
//! once after events were lost) corrects the model and the owners, judges the publishes
//! whose events were lost, and takes the masks of pods that are gone off.

use tracing::{debug, info, warn};

use super::{
    MadeBy, Running,
    effects::{Effect, Effects},
};
use crate::{
    agent::{AgentError, feed::Feed, off_loop::NodeReads},
    enforce::{
        decision::{self, Action, Reporter},
        quarantine,
    },
    model::mounts::{OwnerFix, PublishChange, StaleMask},
    model::node::NodeRead,
    outputs::metrics::MaskRemoval,
};

impl Running<'_> {
    /// Counts the events the ring buffer dropped and the program runs the kernel skipped;
    /// when either rose, the lost events may be publishes: the mount table tells now.
    pub(super) fn check_losses(&mut self, feed: &mut Feed, reads: &mut NodeReads) {
        let metrics = &self.shared.metrics.operations;
        let (lost, skipped) = (feed.events_lost(), feed.runs_skipped());
        let rose =
            lost.is_some_and(|n| n > metrics.events_lost()) || skipped.is_some_and(|n| n > metrics.runs_skipped());
        lost.inspect(|&n| metrics.set_events_lost(n));
        skipped.inspect(|&n| metrics.set_runs_skipped(n));
        if rose {
            reads.start_after_loss(&self.model);
        }
    }

    /// Makes the model and the owners agree with a fresh read of the mount table; removes
    /// the masks of pods that are gone. After a loss, the publishes the table shows and the
    /// events did not are judged as their events would have been.
    pub(super) fn reconcile(&mut self, read: NodeRead, after_loss: bool) -> Result<Effects<'static>, AgentError> {
        let owners = self.owners.owners()?;
        self.out_of_band.owned_trees = None;
        let masks_before: Vec<(String, String)> =
            self.model.mounts().masks().map(|(v, p, _)| (v.to_owned(), p.to_owned())).collect();
        self.model.set_tree_findings(read.tree_findings);
        self.view_freshness.changed();
        let pass = match read.mounts {
            Ok(fresh) => self.model.reconcile_with(fresh, &owners),
            Err(e) => {
                // Keep the state built so far; the next pass tries again.
                warn!("reconciliation skipped: reading {}: {e}", self.opts.mountinfo.display());
                return Ok(Vec::new());
            }
        };
        if pass.drift > 0 {
            info!("reconciliation: {} publishes corrected from the mount table (events missed)", pass.drift);
        }
        for (volume, pod_uid) in masks_before.iter().filter(|(v, p)| !self.model.mounts().is_masked(v, p)) {
            self.shared.mask_cleared(volume, pod_uid);
        }
        let mut effects = Vec::new();
        for fix in &pass.fixes {
            if let (true, OwnerFix::Release { volume, pod_uid }) = (self.owners.apply(fix)?, fix) {
                info!(
                    "volume {volume} released: pod {pod_uid}'s publish target has been missing from {} at two \
                     passes{}",
                    self.opts.mountinfo.display(),
                    self.table_namespace.why_missing()
                );
                effects.push(Effect::Released { volume: volume.clone(), owner: pod_uid.clone() });
            }
        }
        if after_loss {
            effects.extend(self.judge_found_publishes(pass.found));
        }
        effects.extend(pass.stale_masks.into_iter().map(Effect::RemoveMask));
        debug!("reconciliation done: {} owner fixes", pass.fixes.len());
        // Copies the publish-time scan missed (a namespace made since, whose runtime's
        // binds the agent judged before the volume was owned).
        effects.push(Effect::ScanNamespaces);
        Ok(effects)
    }

    /// The policy's answer to each publish whose event was lost (the owner fixes already
    /// gave an unowned volume to its oldest publish): another pod's publish of an owned
    /// volume is quarantined in the table's namespace, or reported, as its event would be.
    /// Only after a loss: in a routine pass a publish the model lacks may be one whose
    /// event is still on its way, and would be judged twice. A publish whose volume's
    /// owner is missing from the table too is left alone: the owner's unmount was most
    /// likely lost with it (a replacement pod), and the two-pass rule releases the owner.
    fn judge_found_publishes(&mut self, found: Vec<PublishChange>) -> Effects<'static> {
        let mut effects = Vec::new();
        for change in found {
            let PublishChange::Published(target, _) = &change else { continue };
            let ownership = self.owners.observe(&change);
            let action = decision::decide(self.decision, ownership, Reporter::MountTable);
            let owner = match &action {
                Action::None => continue,
                Action::Quarantine { owner } | Action::Report { owner, .. } => Some(owner),
                _ => None,
            };
            if let Some(owner) = owner.filter(|owner| !self.model.mounts().is_published(&target.volume, owner)) {
                info!(
                    "volume {} is published for pod {} (mount table, its event was lost); not judged: its owner \
                     pod {owner}'s publish is missing from the table too (released after two passes)",
                    target.volume, target.pod_uid
                );
                continue;
            }
            info!(
                "volume {} is published for pod {} (mount table, its event was lost): {action:?}",
                target.volume, target.pod_uid
            );
            effects.push(Effect::Publish { action, change, by: MadeBy::MountTable });
        }
        effects
    }

    /// Removes the mask of a pod that is gone or being deleted, so kubelet can finish: its
    /// unpublish, the pod's deletion, and the removal of its directory.
    pub(super) fn remove_mask(&mut self, stale: &StaleMask) {
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
                    self.shared.metrics.conflicts.mask_removed(MaskRemoval::PodGone);
                }
                self.model.unmasked(volume, pod_uid);
                self.shared.mask_cleared(volume, pod_uid);
            }
            // Kept in the model: the next passes try again.
            Err(e) => warn!("quarantine mask of gone pod {pod_uid} on {} not removed: {e}", mount_point.display()),
        }
    }
}
