//! What the loop's handlers decide, as values. A handler takes its input into the model
//! and the owners (who owns what) and returns the effects the input calls for; the loop
//! hands them to [`Running::carry_out`], which does them in order: the only place the
//! agent acts on the node (detaches, masks, the kernel's owner map) or tells a conflict.

use tracing::warn;

use super::{MadeBy, Running};
use crate::{
    agent::{reported_access::ReportedAccess, view::Refresh},
    enforce::decision::{AccessAction, Action},
    kernel::decode::Caller,
    model::{access::Access, explain::Conflict, mounts::PublishChange, mounts::StaleMask},
};

/// One thing a handler decided the agent does.
pub(super) enum Effect<'e> {
    /// The policy's answer to a publish or unpublish (`enforce::decision::decide`), which
    /// `by` reported.
    Publish { action: Action, change: PublishChange, by: MadeBy<'e> },
    /// A mount outside kubelet's publish that reaches an owned volume, to detach or report
    /// as `decided` (`enforce::decision::decide_access`), where `seen`; remembered under
    /// `key` when it is left in place, so that it is told once.
    Access { seen: Seen, access: Access, decided: AccessAction, pod: Option<String>, key: ReportedAccess },
    /// The owner gave `volume` up: the pods whose publish of it is quarantined are told.
    Released { volume: String, owner: String },
    /// A mask whose pod is gone or being deleted comes off, so kubelet can finish.
    RemoveMask(StaleMask),
    /// A conflict to count, record and turn into an Event.
    Tell(Conflict),
    /// The pods' mount namespaces are read for copies of owned volumes.
    ScanNamespaces,
    /// The debug view is rebuilt now: ownership or a quarantine changed.
    RefreshView,
}

/// Where an access was seen: what it can be detached through, and who is named.
pub(super) enum Seen {
    /// At a caller's syscall, or in a pod's namespace the scan read through one of its tasks.
    Caller(Caller),
    /// In a notice from the watched namespace (fanotify): no caller; the mount's unique id.
    Notice { mnt_id: u64 },
}

/// What one input calls for, in the order it is to be done.
pub(super) type Effects<'e> = Vec<Effect<'e>>;

impl Running<'_> {
    /// Does what the handlers decided, in order.
    pub(super) fn carry_out(&mut self, effects: Effects<'_>) {
        for effect in effects {
            match effect {
                Effect::Publish { action, change, by } => self.act(action, &change, by),
                Effect::Access { seen, access, decided, pod, key } => {
                    if let Some(true) = self.handle_access(&seen, access, decided, pod.as_deref()) {
                        self.remember_reported(key);
                    }
                }
                Effect::Released { volume, owner } => self.tell_quarantined_pods(&volume, &owner),
                Effect::RemoveMask(stale) => self.remove_mask(&stale),
                Effect::Tell(conflict) => self.tell(conflict),
                Effect::ScanNamespaces => self.scan_namespaces(),
                Effect::RefreshView => {
                    if let Err(e) = self.refresh_view(Refresh::AtOnce) {
                        warn!("refreshing the debug view: {e}");
                    }
                }
            }
        }
    }
}
