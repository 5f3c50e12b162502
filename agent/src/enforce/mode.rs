//! The mode, as one value: what the agent does about a conflicting publish, where that is
//! decided (the kernel's LSM hooks or userspace at syscall exit), and why — whose Display
//! is the prose the log, the debug API and the CLI show, and whose label is the metric's.
//! The kernel's `kernel_mode` comes from it by one conversion.

use std::fmt;

use serde::Serialize;
use volguard_common::enforce::kernel_mode;

use crate::kernel::lsm_probe::{LsmProbeReport, LsmStatus};

/// What the agent does about a conflicting publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
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

/// Where conflicts are decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedIn {
    /// The LSM programs refuse (enforce) or report (audit) before the mount happens.
    Kernel,
    /// The agent sees the syscall's exit and acts then (quarantine, or audit without LSM).
    Userspace,
}

/// Why the mode in force is the mode in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModeReason {
    /// `auto`, and a probe mount was refused in the kernel.
    LsmActive,
    /// `auto`, and BPF LSM was missing or did not act: why.
    NoBpfLsm(String),
    /// `--mode` named it; `no_lsm` says why BPF LSM is not working, where it was probed
    /// and is not.
    Flag { mode: Mode, no_lsm: Option<String> },
}

impl ModeReason {
    /// The `reason` label of `volguard_mode` (a closed set).
    pub fn label(&self) -> &'static str {
        match self {
            Self::LsmActive => "lsm_active",
            Self::NoBpfLsm(_) => "no_bpf_lsm",
            Self::Flag { .. } => "flag",
        }
    }
}

impl fmt::Display for ModeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::LsmActive => write!(f, "auto: BPF LSM is active (probe mount refused)"),
            Self::NoBpfLsm(why) => write!(f, "auto: no working BPF LSM ({why})"),
            Self::Flag { mode: Mode::Enforce, .. } => write!(f, "--mode enforce; BPF LSM is active"),
            Self::Flag { mode: Mode::Quarantine, .. } => write!(f, "--mode quarantine"),
            Self::Flag { mode: Mode::Audit, no_lsm: None } => write!(f, "--mode audit; the LSM hooks report conflicts"),
            Self::Flag { mode: Mode::Audit, no_lsm: Some(why) } => {
                write!(f, "--mode audit; conflicts seen at syscall exit (no BPF LSM: {why})")
            }
        }
    }
}

/// The mode in force, where it is decided, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    pub mode: Mode,
    pub decided_in: DecidedIn,
    pub reason: ModeReason,
}

impl ModeDecision {
    /// Whether the LSM programs carry the mode (and so the enforcement state is pinned).
    pub fn in_kernel(&self) -> bool {
        self.decided_in == DecidedIn::Kernel
    }

    /// The `kernel_mode` the LSM programs read: only the in-kernel modes make them act.
    pub fn kernel_mode(&self) -> u32 {
        match (self.mode, self.decided_in) {
            (Mode::Enforce, DecidedIn::Kernel) => kernel_mode::ENFORCE,
            (Mode::Audit, DecidedIn::Kernel) => kernel_mode::AUDIT,
            _ => kernel_mode::OFF,
        }
    }
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
    use DecidedIn::{Kernel, Userspace};
    let problem = probe.map(lsm_problem).unwrap_or_else(|| Some("BPF LSM was not probed".to_owned()));
    let decision = |mode, decided_in, reason| Ok(ModeDecision { mode, decided_in, reason });
    let flag = |mode, no_lsm| ModeReason::Flag { mode, no_lsm };
    match (choice, problem) {
        (ModeChoice::Auto, None) => decision(Mode::Enforce, Kernel, ModeReason::LsmActive),
        (ModeChoice::Auto, Some(why)) => decision(Mode::Quarantine, Userspace, ModeReason::NoBpfLsm(why)),
        (ModeChoice::Enforce, None) => decision(Mode::Enforce, Kernel, flag(Mode::Enforce, None)),
        (ModeChoice::Enforce, Some(why)) => Err(ModeError::EnforceUnavailable(why)),
        (ModeChoice::Quarantine, no_lsm) => decision(Mode::Quarantine, Userspace, flag(Mode::Quarantine, no_lsm)),
        (ModeChoice::Audit, None) => decision(Mode::Audit, Kernel, flag(Mode::Audit, None)),
        (ModeChoice::Audit, Some(why)) => decision(Mode::Audit, Userspace, flag(Mode::Audit, Some(why))),
    }
}

/// Whether choosing needs the LSM probe.
pub fn needs_probe(choice: ModeChoice) -> bool {
    choice != ModeChoice::Quarantine
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: LsmStatus) -> LsmProbeReport {
        LsmProbeReport { status, sb_mount_runs: 0, lsm_list: None }
    }

    #[test]
    fn auto_enforces_only_when_the_probe_mount_was_refused() {
        let active = report(LsmStatus::Active);
        let d = decide(ModeChoice::Auto, Some(&active)).unwrap();
        assert_eq!((d.mode, d.in_kernel()), (Mode::Enforce, true));
        let inactive = report(LsmStatus::Inactive { reason: "never ran".into() });
        let d = decide(ModeChoice::Auto, Some(&inactive)).unwrap();
        assert_eq!((d.mode, d.in_kernel()), (Mode::Quarantine, false));
        assert!(d.reason.to_string().contains("never ran"), "{}", d.reason);
        assert_eq!(d.reason.label(), "no_bpf_lsm");
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
        assert_eq!((audit.mode, audit.in_kernel()), (Mode::Audit, false));
        let audit = decide(ModeChoice::Audit, Some(&report(LsmStatus::Active))).unwrap();
        assert_eq!((audit.mode, audit.in_kernel()), (Mode::Audit, true));
        assert!(!needs_probe(ModeChoice::Quarantine) && needs_probe(ModeChoice::Auto));
    }

    #[test]
    fn the_kernel_acts_only_in_the_in_kernel_modes() {
        let kernel = |choice, probe: &LsmProbeReport| decide(choice, Some(probe)).unwrap().kernel_mode();
        let (active, absent) = (report(LsmStatus::Active), report(LsmStatus::Unavailable { reason: "EPERM".into() }));
        assert_eq!(kernel(ModeChoice::Auto, &active), kernel_mode::ENFORCE);
        assert_eq!(kernel(ModeChoice::Audit, &active), kernel_mode::AUDIT);
        assert_eq!(kernel(ModeChoice::Auto, &absent), kernel_mode::OFF, "quarantine is userspace");
        assert_eq!(kernel(ModeChoice::Audit, &absent), kernel_mode::OFF);
        assert_eq!(kernel(ModeChoice::Quarantine, &active), kernel_mode::OFF);
    }

    #[test]
    fn the_reason_reads_as_prose_and_labels_the_metric() {
        let d = decide(ModeChoice::Quarantine, None).unwrap();
        assert_eq!((d.reason.to_string().as_str(), d.reason.label()), ("--mode quarantine", "flag"));
        let d = decide(ModeChoice::Auto, Some(&report(LsmStatus::Active))).unwrap();
        assert_eq!(d.reason.label(), "lsm_active");
        assert_eq!(d.reason.to_string(), "auto: BPF LSM is active (probe mount refused)");
    }
}
