//! The mode, as one value: what the agent does about a conflicting publish, where that is
//! decided (the kernel's LSM hooks or userspace at syscall exit), and why — whose Display
//! is the prose the log, the debug API and the CLI show, and whose label is the metric's.
//! The kernel's `kernel_mode` comes from it by one conversion.

use std::fmt;

use serde::Serialize;
use volguard_common::enforce::kernel_mode;

use crate::kernel::{
    loader::SecurityHooks,
    lsm_probe::{LsmProbeReport, LsmStatus},
};

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

/// `--security-hooks`: how the programs on security hooks attach, or `auto` to take BPF LSM
/// where it acts and fmod_ret where it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HooksChoice {
    Auto,
    #[value(name = "bpf-lsm")]
    BpfLsm,
    #[value(name = "fmod-ret")]
    FModRet,
}

impl HooksChoice {
    /// The ways to try, in order of preference.
    pub fn candidates(self) -> &'static [SecurityHooks] {
        match self {
            Self::Auto => &[SecurityHooks::BpfLsm, SecurityHooks::FModRet],
            Self::BpfLsm => &[SecurityHooks::BpfLsm],
            Self::FModRet => &[SecurityHooks::FModRet],
        }
    }
}

/// Why the mode in force is the mode in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModeReason {
    /// `auto`, and a probe mount was refused by the BPF LSM program.
    LsmActive,
    /// `auto`, BPF LSM did not act (why), and a probe mount was refused by the fmod_ret
    /// program on `security_sb_mount`.
    FModRetActive { no_lsm: String },
    /// `auto`, and neither way refuses in the kernel: why.
    NoBpfLsm(String),
    /// `--mode` named it; `via` is how the kernel refuses (in-kernel modes), `no_lsm` why
    /// BPF LSM is not what refuses, where it was probed and is not.
    Flag { mode: Mode, via: Option<SecurityHooks>, no_lsm: Option<String> },
}

impl ModeReason {
    /// The `reason` label of `volguard_enforcement_mode` (a closed set).
    pub fn label(&self) -> &'static str {
        match self {
            Self::LsmActive => "lsm_active",
            Self::FModRetActive { .. } => "fmod_ret_active",
            Self::NoBpfLsm(_) => "no_bpf_lsm",
            Self::Flag { .. } => "flag",
        }
    }
}

const FMOD_RET_REFUSES: &str = "fmod_ret programs on the kernel's security_* functions refuse (probe mount refused)";

impl fmt::Display for ModeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use SecurityHooks::{BpfLsm, FModRet};
        match self {
            Self::LsmActive => write!(f, "auto: BPF LSM is active (probe mount refused)"),
            Self::FModRetActive { no_lsm } => write!(f, "auto: BPF LSM does not act ({no_lsm}); {FMOD_RET_REFUSES}"),
            Self::NoBpfLsm(why) => write!(f, "auto: nothing refuses in the kernel ({why})"),
            Self::Flag { mode: Mode::Quarantine, .. } => write!(f, "--mode quarantine"),
            Self::Flag { mode, via: Some(BpfLsm), .. } => write!(f, "--mode {mode}; BPF LSM is active"),
            Self::Flag { mode, via: Some(FModRet), no_lsm } => {
                write!(f, "--mode {mode}; {FMOD_RET_REFUSES}")?;
                match no_lsm {
                    Some(why) => write!(f, "; BPF LSM does not act ({why})"),
                    None => Ok(()),
                }
            }
            Self::Flag { mode, via: None, no_lsm } => write!(
                f,
                "--mode {mode}; conflicts seen at syscall exit (nothing refuses in the kernel: {})",
                no_lsm.as_deref().unwrap_or("not probed")
            ),
        }
    }
}

/// The mode in force, where it is decided, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeDecision {
    pub mode: Mode,
    pub decided_in: DecidedIn,
    pub reason: ModeReason,
    /// How the programs on security hooks attach: set exactly when decided in the kernel.
    pub hooks: Option<SecurityHooks>,
}

impl ModeDecision {
    /// Whether the programs on security hooks carry the mode (and so the enforcement state
    /// is pinned).
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
    #[error(
        "--mode enforce needs the kernel to refuse (BPF LSM, or fmod_ret where trampolines load), which it does not here: {0}"
    )]
    EnforceUnavailable(String),
}

/// What the probes found, one report per way tried (in [`HooksChoice::candidates`] order,
/// stopping at the first that refuses).
#[derive(Clone, Debug, Default)]
pub struct Probes {
    pub reports: Vec<LsmProbeReport>,
}

impl Probes {
    /// The way that refuses, if one does.
    pub fn working(&self) -> Option<SecurityHooks> {
        self.reports.iter().find(|r| r.status == LsmStatus::Active).map(|r| r.via)
    }

    /// Why each way tried does not refuse, as one line; `None` when one does.
    fn problem(&self) -> Option<String> {
        if self.working().is_some() {
            return None;
        }
        if self.reports.is_empty() {
            return Some("not probed".to_owned());
        }
        Some(self.reports.iter().map(|r| format!("{}: {}", r.via.describe(), reason(r))).collect::<Vec<_>>().join("; "))
    }

    /// Why BPF LSM does not refuse, where it was probed and does not.
    fn no_lsm(&self) -> Option<String> {
        self.reports.iter().find(|r| r.via == SecurityHooks::BpfLsm && r.status != LsmStatus::Active).map(reason)
    }
}

fn reason(report: &LsmProbeReport) -> String {
    match &report.status {
        LsmStatus::Active => "active".to_owned(),
        LsmStatus::Inactive { reason } | LsmStatus::Unavailable { reason } => reason.clone(),
    }
}

/// Chooses the mode from the flag and the probes.
pub fn decide(choice: ModeChoice, probes: &Probes) -> Result<ModeDecision, ModeError> {
    use DecidedIn::{Kernel, Userspace};
    let working = probes.working();
    let decision = |mode, reason| {
        let (decided_in, hooks) = match (mode, working) {
            (Mode::Quarantine, _) | (_, None) => (Userspace, None),
            (_, Some(via)) => (Kernel, Some(via)),
        };
        Ok(ModeDecision { mode, decided_in, reason, hooks })
    };
    let flag = |mode| ModeReason::Flag { mode, via: working, no_lsm: probes.no_lsm() };
    match (choice, working) {
        (ModeChoice::Auto, Some(SecurityHooks::BpfLsm)) => decision(Mode::Enforce, ModeReason::LsmActive),
        (ModeChoice::Auto, Some(SecurityHooks::FModRet)) => decision(
            Mode::Enforce,
            ModeReason::FModRetActive {
                no_lsm: probes.no_lsm().unwrap_or_else(|| "--security-hooks fmod-ret".to_owned()),
            },
        ),
        (ModeChoice::Auto, None) => {
            decision(Mode::Quarantine, ModeReason::NoBpfLsm(probes.problem().unwrap_or_default()))
        }
        (ModeChoice::Enforce, Some(_)) => decision(Mode::Enforce, flag(Mode::Enforce)),
        (ModeChoice::Enforce, None) => Err(ModeError::EnforceUnavailable(probes.problem().unwrap_or_default())),
        (ModeChoice::Quarantine, _) => {
            let reason = ModeReason::Flag { mode: Mode::Quarantine, via: None, no_lsm: probes.no_lsm() };
            Ok(ModeDecision { mode: Mode::Quarantine, decided_in: Userspace, reason, hooks: None })
        }
        (ModeChoice::Audit, _) => {
            decision(Mode::Audit, ModeReason::Flag { mode: Mode::Audit, via: working, no_lsm: probes.problem() })
        }
    }
}

/// Whether choosing needs the probes.
pub fn needs_probe(choice: ModeChoice) -> bool {
    choice != ModeChoice::Quarantine
}

#[cfg(test)]
mod tests {
    use super::*;
    use SecurityHooks::{BpfLsm, FModRet};

    fn report(via: SecurityHooks, status: LsmStatus) -> LsmProbeReport {
        LsmProbeReport { via, status, sb_mount_runs: 0, lsm_list: None }
    }

    fn probes(reports: &[(SecurityHooks, LsmStatus)]) -> Probes {
        Probes { reports: reports.iter().map(|(via, status)| report(*via, status.clone())).collect() }
    }

    fn never_ran() -> LsmStatus {
        LsmStatus::Inactive { reason: "never ran".into() }
    }

    fn eperm() -> LsmStatus {
        LsmStatus::Unavailable { reason: "EPERM".into() }
    }

    #[test]
    fn auto_enforces_only_when_a_probe_mount_was_refused() {
        let d = decide(ModeChoice::Auto, &probes(&[(BpfLsm, LsmStatus::Active)])).unwrap();
        assert_eq!((d.mode, d.in_kernel(), d.hooks), (Mode::Enforce, true, Some(BpfLsm)));
        let d = decide(ModeChoice::Auto, &probes(&[(BpfLsm, never_ran()), (FModRet, eperm())])).unwrap();
        assert_eq!((d.mode, d.in_kernel(), d.hooks), (Mode::Quarantine, false, None));
        assert_eq!(d.reason.to_string(), "auto: nothing refuses in the kernel (BPF LSM: never ran; fmod_ret: EPERM)");
        assert_eq!(d.reason.label(), "no_bpf_lsm");
    }

    #[test]
    fn auto_takes_fmod_ret_where_bpf_lsm_does_not_act_and_says_why() {
        let d = decide(ModeChoice::Auto, &probes(&[(BpfLsm, never_ran()), (FModRet, LsmStatus::Active)])).unwrap();
        assert_eq!((d.mode, d.in_kernel(), d.hooks), (Mode::Enforce, true, Some(FModRet)));
        assert_eq!(d.kernel_mode(), kernel_mode::ENFORCE);
        assert_eq!(d.reason.label(), "fmod_ret_active");
        assert_eq!(
            d.reason.to_string(),
            "auto: BPF LSM does not act (never ran); fmod_ret programs on the kernel's security_* functions refuse \
             (probe mount refused)"
        );
        // Forced to fmod_ret, BPF LSM is not probed.
        let d = decide(ModeChoice::Auto, &probes(&[(FModRet, LsmStatus::Active)])).unwrap();
        assert_eq!((d.hooks, d.reason.label()), (Some(FModRet), "fmod_ret_active"));
        assert!(d.reason.to_string().contains("--security-hooks fmod-ret"), "{}", d.reason);
    }

    #[test]
    fn explicit_modes_and_the_refusal_to_pretend() {
        let neither = probes(&[(BpfLsm, never_ran()), (FModRet, eperm())]);
        assert_eq!(
            decide(ModeChoice::Enforce, &neither),
            Err(ModeError::EnforceUnavailable("BPF LSM: never ran; fmod_ret: EPERM".into()))
        );
        let d = decide(ModeChoice::Enforce, &probes(&[(BpfLsm, never_ran()), (FModRet, LsmStatus::Active)])).unwrap();
        assert_eq!((d.mode, d.hooks), (Mode::Enforce, Some(FModRet)));
        assert!(d.reason.to_string().ends_with("; BPF LSM does not act (never ran)"), "{}", d.reason);
        assert_eq!(decide(ModeChoice::Quarantine, &Probes::default()).unwrap().mode, Mode::Quarantine);
        let audit = decide(ModeChoice::Audit, &neither).unwrap();
        assert_eq!((audit.mode, audit.in_kernel()), (Mode::Audit, false));
        let audit = decide(ModeChoice::Audit, &probes(&[(BpfLsm, LsmStatus::Active)])).unwrap();
        assert_eq!((audit.mode, audit.in_kernel()), (Mode::Audit, true));
        assert!(!needs_probe(ModeChoice::Quarantine) && needs_probe(ModeChoice::Auto));
    }

    #[test]
    fn the_kernel_acts_only_in_the_in_kernel_modes() {
        let kernel = |choice, probes: &Probes| decide(choice, probes).unwrap().kernel_mode();
        let (lsm, fmod_ret) = (probes(&[(BpfLsm, LsmStatus::Active)]), probes(&[(FModRet, LsmStatus::Active)]));
        let absent = probes(&[(BpfLsm, eperm()), (FModRet, eperm())]);
        assert_eq!(kernel(ModeChoice::Auto, &lsm), kernel_mode::ENFORCE);
        assert_eq!(kernel(ModeChoice::Auto, &fmod_ret), kernel_mode::ENFORCE);
        assert_eq!(kernel(ModeChoice::Audit, &lsm), kernel_mode::AUDIT);
        assert_eq!(kernel(ModeChoice::Audit, &fmod_ret), kernel_mode::AUDIT);
        assert_eq!(kernel(ModeChoice::Auto, &absent), kernel_mode::OFF, "quarantine is userspace");
        assert_eq!(kernel(ModeChoice::Audit, &absent), kernel_mode::OFF);
        assert_eq!(kernel(ModeChoice::Quarantine, &lsm), kernel_mode::OFF);
        assert_eq!(decide(ModeChoice::Quarantine, &fmod_ret).unwrap().hooks, None);
    }

    #[test]
    fn the_reason_reads_as_prose_and_labels_the_metric() {
        let d = decide(ModeChoice::Quarantine, &Probes::default()).unwrap();
        assert_eq!((d.reason.to_string().as_str(), d.reason.label()), ("--mode quarantine", "flag"));
        let d = decide(ModeChoice::Auto, &probes(&[(BpfLsm, LsmStatus::Active)])).unwrap();
        assert_eq!(d.reason.label(), "lsm_active");
        assert_eq!(d.reason.to_string(), "auto: BPF LSM is active (probe mount refused)");
    }

    #[test]
    fn each_hooks_choice_tries_its_ways_in_order() {
        assert_eq!(HooksChoice::Auto.candidates(), &[BpfLsm, FModRet]);
        assert_eq!(HooksChoice::BpfLsm.candidates(), &[BpfLsm]);
        assert_eq!(HooksChoice::FModRet.candidates(), &[FModRet]);
    }
}
