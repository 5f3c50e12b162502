//! Keeping ReadWriteOncePod volumes to one pod: the mode, the kernel side's maps and
//! pins, and the userspace fallback (quarantine) for kernels without BPF LSM.

pub mod ownership;
pub mod quarantine;
pub mod task_ns;

use std::fmt;

use crate::kernel::lsm_probe::{LsmProbeReport, LsmStatus};

/// What the agent does about a conflicting publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Refused in the kernel with EBUSY before anything is mounted (needs BPF LSM).
    Enforce,
    /// No BPF LSM: detach the offending mount at syscall exit and mask the target with an
    /// empty read-only mount.
    Quarantine,
    /// Report only.
    Audit,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Enforce => "enforce",
            Mode::Quarantine => "quarantine",
            Mode::Audit => "audit",
        })
    }
}

/// `--mode`: a mode, or `auto` to choose by probing the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeChoice {
    Auto,
    Enforce,
    Quarantine,
    Audit,
}

/// The mode in force, whether the LSM programs carry it, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    pub mode: Mode,
    /// The kernel's LSM hooks decide (enforce) or report (audit); else userspace does.
    pub in_kernel: bool,
    pub reason: String,
}

/// Why the requested mode cannot run here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModeError {
    #[error("--mode enforce needs BPF LSM, which is not working here: {0}")]
    EnforceUnavailable(String),
}

fn lsm_problem(report: &LsmProbeReport) -> Option<String> {
    match &report.status {
        LsmStatus::Active => None,
        LsmStatus::Inactive { reason } | LsmStatus::Unavailable { reason } => Some(reason.clone()),
    }
}

/// Chooses the mode from the flag and the BPF LSM probe (`None` when not probed).
pub fn decide(choice: ModeChoice, probe: Option<&LsmProbeReport>) -> Result<ModeDecision, ModeError> {
    let problem = probe.map(lsm_problem).unwrap_or_else(|| Some("BPF LSM was not probed".to_owned()));
    let decision = |mode, in_kernel, reason: String| Ok(ModeDecision { mode, in_kernel, reason });
    match (choice, problem) {
        (ModeChoice::Auto, None) => {
            decision(Mode::Enforce, true, "auto: BPF LSM is active (probe mount refused)".into())
        }
        (ModeChoice::Auto, Some(why)) => decision(Mode::Quarantine, false, format!("auto: no working BPF LSM ({why})")),
        (ModeChoice::Enforce, None) => decision(Mode::Enforce, true, "--mode enforce; BPF LSM is active".into()),
        (ModeChoice::Enforce, Some(why)) => Err(ModeError::EnforceUnavailable(why)),
        (ModeChoice::Quarantine, _) => decision(Mode::Quarantine, false, "--mode quarantine".into()),
        (ModeChoice::Audit, None) => decision(Mode::Audit, true, "--mode audit; the LSM hooks report conflicts".into()),
        (ModeChoice::Audit, Some(why)) => {
            decision(Mode::Audit, false, format!("--mode audit; conflicts seen at syscall exit (no BPF LSM: {why})"))
        }
    }
}

/// Whether choosing needs the LSM probe.
pub fn needs_probe(choice: ModeChoice) -> bool {
    choice != ModeChoice::Quarantine
}

#[cfg(test)]
mod tests {
    use volguard_common::{enforce::MountOp, mount_flags::*};

    use super::*;

    #[test]
    fn only_binds_moves_and_new_mounts_can_publish_decided_on_flags_alone() {
        let cases = [
            (MS_BIND, MountOp::Bind),
            (MS_BIND | MS_REC, MountOp::Bind),
            (MS_MOVE, MountOp::Move),
            (0, MountOp::NewMount),
            (MS_RDONLY | MS_NOSUID, MountOp::NewMount),
            (MS_REMOUNT | MS_BIND | MS_RDONLY, MountOp::Remount),
            (MS_REMOUNT, MountOp::Remount),
            (MS_PRIVATE | MS_REC, MountOp::ChangePropagation),
            (MS_SHARED, MountOp::ChangePropagation),
            // path_mount checks MS_BIND before the propagation flags.
            (MS_BIND | MS_PRIVATE, MountOp::Bind),
        ];
        for (flags, op) in cases {
            assert_eq!(MountOp::of(flags), op, "{}", crate::kernel::flags::mount(flags));
        }
        assert!(MountOp::Bind.attaches() && MountOp::Move.attaches() && MountOp::NewMount.attaches());
        assert!(!MountOp::Remount.attaches() && !MountOp::ChangePropagation.attaches());
        assert_eq!(without_magic(MS_MGC_VAL | MS_BIND), MS_BIND);
    }

    fn report(status: LsmStatus) -> LsmProbeReport {
        LsmProbeReport { status, sb_mount_runs: 0, lsm_list: None }
    }

    #[test]
    fn auto_enforces_only_when_the_probe_mount_was_refused() {
        let active = report(LsmStatus::Active);
        let d = decide(ModeChoice::Auto, Some(&active)).unwrap();
        assert_eq!((d.mode, d.in_kernel), (Mode::Enforce, true));
        let inactive = report(LsmStatus::Inactive { reason: "never ran".into() });
        let d = decide(ModeChoice::Auto, Some(&inactive)).unwrap();
        assert_eq!((d.mode, d.in_kernel), (Mode::Quarantine, false));
        assert!(d.reason.contains("never ran"), "{}", d.reason);
        let unavailable = report(LsmStatus::Unavailable { reason: "EPERM".into() });
        assert_eq!(decide(ModeChoice::Auto, Some(&unavailable)).unwrap().mode, Mode::Quarantine);
    }

    #[test]
    fn explicit_modes_and_the_refusal_to_pretend() {
        let inactive = report(LsmStatus::Inactive { reason: "never ran".into() });
        assert_eq!(
            decide(ModeChoice::Enforce, Some(&inactive)),
            Err(ModeError::EnforceUnavailable("never ran".into()))
        );
        assert_eq!(decide(ModeChoice::Quarantine, None).unwrap().mode, Mode::Quarantine);
        let audit = decide(ModeChoice::Audit, Some(&inactive)).unwrap();
        assert_eq!((audit.mode, audit.in_kernel), (Mode::Audit, false));
        let audit = decide(ModeChoice::Audit, Some(&report(LsmStatus::Active))).unwrap();
        assert_eq!((audit.mode, audit.in_kernel), (Mode::Audit, true));
        assert!(!needs_probe(ModeChoice::Quarantine) && needs_probe(ModeChoice::Auto));
    }
}
