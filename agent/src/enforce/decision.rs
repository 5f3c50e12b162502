//! The conflict decision: what the agent does about one publish or unmount it saw, from
//! the mode, what the change means for ownership, and how the mount was reported. Pure:
//! the event loop finds the inputs and carries out the [`Action`]; this table is the
//! policy, and its tests are the policy's specification.

use super::{ModeDecision, mode::Mode, ownership::PublishOutcome};

/// What a publish or an unmount means for ownership, as the owner store says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnershipChange {
    /// The kernel's maps keep ownership: its LSM programs already decided.
    InKernel,
    /// A successful publish, judged by the agent's own table.
    Published(PublishOutcome),
    /// A successful unmount of a publish target; `released`: it was the owner's.
    Unpublished { released: bool },
}

/// How the agent learned of the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reporter {
    /// A traced syscall: its caller and its mount namespace are known.
    Syscall,
    /// A mount notice (fanotify): no caller; `namespace_held` when the agent holds the
    /// watched namespace open, so it can act there.
    Notice { namespace_held: bool },
    /// The reconciliation found the publish in the mount table: its event was lost (a
    /// full ring buffer, a program the kernel skipped). The table's namespace is where
    /// to act; no caller is known.
    MountTable,
}

/// Why a conflict is only reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportOnly {
    /// The mode is audit (or, never chosen so, enforce without the kernel deciding).
    ModeReports,
    /// A notice from a namespace the agent does not hold: nowhere to detach it.
    NamespaceUnknown,
}

/// What the event loop does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing about ownership: not a single-pod volume, the owner's own publish, or an
    /// unmount that releases nothing.
    None,
    /// The kernel decided; tell its maps what happened (an owner's publish noted, the
    /// roots of an unmounted publish forgotten).
    InformKernel,
    /// The first publish of a single-pod volume: this pod owns it now.
    Claimed,
    /// The owner unmounted: the volume is free; pods quarantined on it are told.
    Released,
    /// Another pod owns the volume: detach the new mount where it was made, and mask the
    /// target read-only.
    Quarantine { owner: String },
    /// Another pod owns the volume: report it, and why nothing more.
    Report { owner: String, only: ReportOnly },
}

impl Action {
    /// Whether ownership or a quarantine changes (every view must say so at once).
    pub fn is_transition(&self) -> bool {
        !matches!(self, Self::None | Self::InformKernel)
    }
}

/// Who made a mount that reaches an owned volume outside kubelet's publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MountMaker {
    /// A process of the owner pod (its runtime's binds into its containers, restarts).
    Owner,
    /// A pod the operator exempts (`--exempt-reader`: a backup agent).
    Exempt,
    /// A process of another pod.
    OtherPod,
    /// A process in no pod (an administrator's `mount --bind`, a node agent).
    NodeProcess,
}

/// What the agent does about such a mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessAction {
    Allow,
    /// Detach the mount at once, where it was made.
    Detach,
    /// Report it, and why nothing more.
    Report(AccessReportOnly),
}

/// Why an access is only reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessReportOnly {
    /// Audit mode.
    ModeReports,
    /// A node process, and the operator did not opt in to detaching those.
    NodeProcess,
    /// A mount of a directory above the volume: it shows much else (a monitoring pod's
    /// hostPath on `/`), so taking it away would break what is not the volume's.
    ShowsMore,
}

/// The decision about a mount that reaches an owned volume outside kubelet's publish. The
/// kernel cannot refuse a classic bind (its source is a string in `sb_mount`), so enforce
/// detaches at syscall exit like quarantine. A node's own administrator is reported
/// unless `detach_node_processes`.
pub fn decide_access(mode: Mode, reader: MountMaker, detach_node_processes: bool) -> AccessAction {
    match (reader, mode) {
        (MountMaker::Owner | MountMaker::Exempt, _) => AccessAction::Allow,
        (_, Mode::Audit) => AccessAction::Report(AccessReportOnly::ModeReports),
        (MountMaker::OtherPod, Mode::Enforce | Mode::Quarantine) => AccessAction::Detach,
        (MountMaker::NodeProcess, Mode::Enforce | Mode::Quarantine) if detach_node_processes => AccessAction::Detach,
        (MountMaker::NodeProcess, Mode::Enforce | Mode::Quarantine) => {
            AccessAction::Report(AccessReportOnly::NodeProcess)
        }
    }
}

/// The decision about another pod's mount of a directory above an owned volume's (route
/// `ancestor`). Where the kernel guards opens (`enforce`) the volume's files are refused
/// through it and nothing else needs doing; elsewhere it is reported, never detached.
pub fn decide_ancestor_access(mode: Mode) -> AccessAction {
    match mode {
        Mode::Enforce => AccessAction::Allow,
        Mode::Audit => AccessAction::Report(AccessReportOnly::ModeReports),
        Mode::Quarantine => AccessAction::Report(AccessReportOnly::ShowsMore),
    }
}

/// The decision.
pub fn decide(mode: &ModeDecision, change: OwnershipChange, reporter: Reporter) -> Action {
    let owner = match (mode.in_kernel(), change, reporter) {
        (true, _, Reporter::Syscall) | (_, OwnershipChange::InKernel, Reporter::Syscall) => {
            return Action::InformKernel;
        }
        // Notices are never the backend of an in-kernel mode (`trace_backend::IN_KERNEL_MODE`).
        (true, _, Reporter::Notice { .. }) | (_, OwnershipChange::InKernel, Reporter::Notice { .. }) => {
            return Action::None;
        }
        // The kernel's programs judged the publish itself; nothing was missed there.
        (true, _, Reporter::MountTable) | (_, OwnershipChange::InKernel, Reporter::MountTable) => {
            return Action::None;
        }
        (false, OwnershipChange::Unpublished { released: true }, _) => return Action::Released,
        (false, OwnershipChange::Unpublished { released: false }, _) => return Action::None,
        (false, OwnershipChange::Published(PublishOutcome::Untracked | PublishOutcome::Owner), _) => {
            return Action::None;
        }
        (false, OwnershipChange::Published(PublishOutcome::Claimed), _) => return Action::Claimed,
        (false, OwnershipChange::Published(PublishOutcome::Conflict { owner }), _) => owner,
    };
    match (mode.mode, reporter) {
        (Mode::Quarantine, Reporter::Syscall | Reporter::Notice { namespace_held: true } | Reporter::MountTable) => {
            Action::Quarantine { owner }
        }
        (Mode::Quarantine, Reporter::Notice { namespace_held: false }) => {
            Action::Report { owner, only: ReportOnly::NamespaceUnknown }
        }
        (Mode::Audit | Mode::Enforce, _) => Action::Report { owner, only: ReportOnly::ModeReports },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enforce::{DecidedIn, ModeReason};

    fn mode(mode: Mode, decided_in: DecidedIn) -> ModeDecision {
        let hooks = (decided_in == DecidedIn::Kernel).then_some(crate::kernel::loader::SecurityHooks::BpfLsm);
        ModeDecision { mode, decided_in, reason: ModeReason::Flag { mode, via: hooks, no_lsm: None }, hooks }
    }

    fn conflict() -> OwnershipChange {
        OwnershipChange::Published(PublishOutcome::Conflict { owner: "pod-a".into() })
    }

    fn quarantine() -> Action {
        Action::Quarantine { owner: "pod-a".into() }
    }

    fn report(only: ReportOnly) -> Action {
        Action::Report { owner: "pod-a".into(), only }
    }

    /// Every row of the policy: (mode, where decided, ownership change, reporter) → action.
    #[test]
    fn the_policy_table() {
        use DecidedIn::{Kernel, Userspace};
        use Mode::{Audit, Enforce, Quarantine};
        use OwnershipChange::{InKernel, Published, Unpublished};
        let syscall = Reporter::Syscall;
        let held = Reporter::Notice { namespace_held: true };
        let unheld = Reporter::Notice { namespace_held: false };
        let table = Reporter::MountTable;
        let rows: Vec<(Mode, DecidedIn, OwnershipChange, Reporter, Action)> = vec![
            // The kernel decided: its maps are told, whatever userspace would think.
            (Enforce, Kernel, InKernel, syscall, Action::InformKernel),
            (Audit, Kernel, InKernel, syscall, Action::InformKernel),
            (Enforce, Kernel, conflict(), syscall, Action::InformKernel),
            (Enforce, Kernel, InKernel, held, Action::None),
            (Enforce, Kernel, InKernel, table, Action::None),
            // Userspace ownership: claims, the owner's own publishes, releases.
            (Quarantine, Userspace, Published(PublishOutcome::Claimed), syscall, Action::Claimed),
            (Quarantine, Userspace, Published(PublishOutcome::Claimed), unheld, Action::Claimed),
            (Quarantine, Userspace, Published(PublishOutcome::Owner), syscall, Action::None),
            (Quarantine, Userspace, Published(PublishOutcome::Untracked), syscall, Action::None),
            (Audit, Userspace, Published(PublishOutcome::Untracked), held, Action::None),
            (Quarantine, Userspace, Unpublished { released: true }, syscall, Action::Released),
            (Quarantine, Userspace, Unpublished { released: true }, held, Action::Released),
            (Quarantine, Userspace, Unpublished { released: false }, syscall, Action::None),
            // Conflicts: quarantined where the agent knows the namespace, else reported.
            (Quarantine, Userspace, conflict(), syscall, quarantine()),
            (Quarantine, Userspace, conflict(), held, quarantine()),
            (Quarantine, Userspace, conflict(), unheld, report(ReportOnly::NamespaceUnknown)),
            // A publish whose event was lost, found by the reconciliation: as its event would.
            (Quarantine, Userspace, conflict(), table, quarantine()),
            (Quarantine, Userspace, Published(PublishOutcome::Owner), table, Action::None),
            (Audit, Userspace, conflict(), table, report(ReportOnly::ModeReports)),
            (Audit, Userspace, conflict(), syscall, report(ReportOnly::ModeReports)),
            (Audit, Userspace, conflict(), held, report(ReportOnly::ModeReports)),
            // Never chosen (enforce needs the kernel), but never quarantined either.
            (Enforce, Userspace, conflict(), syscall, report(ReportOnly::ModeReports)),
        ];
        for (m, decided_in, change, reporter, expected) in rows {
            let row = format!("{m:?} in {decided_in:?}, {change:?} by {reporter:?}");
            assert_eq!(decide(&mode(m, decided_in), change, reporter), expected, "{row}");
        }
    }

    /// Every row of the out-of-band policy: (mode, reader, detach node processes) → action.
    #[test]
    fn the_access_policy_table() {
        use AccessAction::{Allow, Detach, Report};
        use Mode::{Audit, Enforce, Quarantine};
        use MountMaker::{Exempt, NodeProcess, OtherPod, Owner};
        let rows = [
            (Enforce, Owner, false, Allow),
            (Quarantine, Owner, true, Allow),
            (Audit, Owner, false, Allow),
            (Enforce, Exempt, true, Allow),
            (Quarantine, Exempt, false, Allow),
            (Audit, Exempt, false, Allow),
            (Enforce, OtherPod, false, Detach),
            (Quarantine, OtherPod, false, Detach),
            (Audit, OtherPod, true, Report(AccessReportOnly::ModeReports)),
            (Enforce, NodeProcess, false, Report(AccessReportOnly::NodeProcess)),
            (Quarantine, NodeProcess, false, Report(AccessReportOnly::NodeProcess)),
            (Enforce, NodeProcess, true, Detach),
            (Quarantine, NodeProcess, true, Detach),
            (Audit, NodeProcess, true, Report(AccessReportOnly::ModeReports)),
        ];
        for (m, reader, opt_in, expected) in rows {
            assert_eq!(decide_access(m, reader, opt_in), expected, "{m:?}, {reader:?}, opt-in {opt_in}");
        }
    }

    /// A mount above the volume is left in place in every mode; reported where no open
    /// guard refuses the reads through it.
    #[test]
    fn a_mount_above_a_volume_is_reported_only_where_the_kernel_does_not_guard_opens() {
        assert_eq!(decide_ancestor_access(Mode::Enforce), AccessAction::Allow);
        assert_eq!(decide_ancestor_access(Mode::Quarantine), AccessAction::Report(AccessReportOnly::ShowsMore));
        assert_eq!(decide_ancestor_access(Mode::Audit), AccessAction::Report(AccessReportOnly::ModeReports));
    }

    #[test]
    fn only_ownership_and_quarantine_changes_are_transitions() {
        assert!(!Action::None.is_transition());
        assert!(!Action::InformKernel.is_transition());
        for a in [Action::Claimed, Action::Released, quarantine(), report(ReportOnly::ModeReports)] {
            assert!(a.is_transition(), "{a:?}");
        }
    }
}
