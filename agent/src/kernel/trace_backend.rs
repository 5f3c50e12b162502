//! Which programs trace the mount-family syscalls, chosen at start-up like the mode.
//!
//! - **Trampolines** (fentry/fexit on each syscall's kernel function, `__x64_sys_<name>`):
//!   only the traced syscalls pay for them.
//! - **Tracepoints** (`syscalls:sys_enter_*`/`sys_exit_*`): attaching any of them puts
//!   every syscall of every thread on the node on the slow entry path (kernel/tracepoint.c
//!   `syscall_regfunc`); used where the kernel refuses trampolines (EPERM where function
//!   tracing is locked down), and for one syscall whose function the kernel's BTF lacks.
//!
//! Both produce the same `SyscallEvent` records and settle LSM claims at exit.

use std::{fmt, path::Path};

use serde::Serialize;
use tracing::{info, warn};
use volguard_common::event::{SYSCALLS, SyscallSpec};

use super::{
    btf::{Btf, VMLINUX_BTF},
    loader::{self, Hook, LoadedObject, is_optional_syscall, syscall_function},
    lsm_probe::error_chain,
};

/// `--trace-backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// Trampolines where the kernel allows them, else tracepoints.
    #[default]
    Auto,
    /// Trampolines, or refuse to start.
    Trampolines,
    /// Syscall tracepoints (every syscall on the node pays while they are attached).
    Tracepoints,
}

/// The backend in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Trampolines,
    Tracepoints,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trampolines => "trampolines",
            Self::Tracepoints => "tracepoints",
        })
    }
}

/// What the trampoline probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrampolineProbe {
    /// An fentry and an fexit program loaded and attached; `missing` syscalls have no
    /// function in the kernel's BTF.
    Works { missing: Vec<&'static str> },
    /// The kernel refused them: why.
    Refused(String),
}

/// Why the backend in force is the backend in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendReason {
    /// `auto`, and trampolines loaded and attached.
    TrampolinesWork,
    /// `auto`, and the kernel refused trampolines: why.
    TrampolinesRefused(String),
    /// `--trace-backend` named it.
    Flag,
}

impl BackendReason {
    /// The `reason` label of `volguard_trace_backend` (a closed set).
    pub fn label(&self) -> &'static str {
        match self {
            Self::TrampolinesWork => "trampolines_work",
            Self::TrampolinesRefused(_) => "trampolines_refused",
            Self::Flag => "flag",
        }
    }
}

/// Where the trampoline backend falls back to a tracepoint for one syscall.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fallback {
    pub syscall: &'static str,
    pub why: String,
}

/// The backend, why, and the syscalls it does not cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceDecision {
    pub backend: Backend,
    pub reason: BackendReason,
    /// Syscalls traced by their tracepoints although the backend is trampolines.
    pub fallbacks: Vec<Fallback>,
    /// Syscalls this kernel does not have at all (not traced).
    pub absent: Vec<&'static str>,
}

impl fmt::Display for TraceDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.reason, self.backend) {
            (BackendReason::TrampolinesWork, _) => write!(f, "auto: fentry/fexit load and attach")?,
            (BackendReason::TrampolinesRefused(why), _) => write!(f, "auto: the kernel refuses trampolines ({why})")?,
            (BackendReason::Flag, backend) => write!(f, "--trace-backend {backend}")?,
        }
        for fallback in &self.fallbacks {
            write!(f, "; {} by tracepoint ({})", fallback.syscall, fallback.why)?;
        }
        Ok(())
    }
}

/// Why the requested backend cannot run here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    #[error("--trace-backend trampolines: the kernel refuses trampolines: {0}")]
    TrampolinesUnavailable(String),
}

/// Whether choosing needs the trampoline probe.
pub fn needs_probe(choice: BackendChoice) -> bool {
    choice != BackendChoice::Tracepoints
}

/// Tries the trampolines on `object` (a throw-away object: the probe's links stay with
/// it): finds which syscall functions the kernel's BTF has, then loads and attaches the
/// fentry and fexit programs of the first one.
pub fn probe(object: &mut LoadedObject) -> TrampolineProbe {
    let btf = match Btf::from_file(Path::new(VMLINUX_BTF)) {
        Ok(btf) => btf,
        Err(e) => return TrampolineProbe::Refused(format!("no kernel BTF: {e}")),
    };
    let (present, missing): (Vec<&SyscallSpec>, Vec<&SyscallSpec>) =
        SYSCALLS.iter().partition(|spec| btf.has_function(&syscall_function(spec.name)));
    let missing = missing.into_iter().map(|spec| spec.name).collect();
    let Some(first) = present.first() else {
        return TrampolineProbe::Refused("the kernel's BTF names none of the syscall functions".into());
    };
    match object.attach(&loader::trampoline_hooks(first)) {
        Ok(()) => TrampolineProbe::Works { missing },
        Err(e) => TrampolineProbe::Refused(error_chain(&e)),
    }
}

/// Chooses the backend from the flag and the probe (`None` when not probed).
pub fn decide(choice: BackendChoice, probe: Option<&TrampolineProbe>) -> Result<TraceDecision, BackendError> {
    let tracepoints =
        |reason| TraceDecision { backend: Backend::Tracepoints, reason, fallbacks: vec![], absent: vec![] };
    let trampolines = |reason, missing: &[&'static str]| {
        let (absent, fallbacks): (Vec<&'static str>, Vec<&'static str>) =
            missing.iter().partition(|name| is_optional_syscall(name));
        let fallbacks = fallbacks
            .into_iter()
            .map(|syscall| Fallback { syscall, why: format!("no {} in the kernel's BTF", syscall_function(syscall)) })
            .collect();
        TraceDecision { backend: Backend::Trampolines, reason, fallbacks, absent }
    };
    let refused = |probe: Option<&TrampolineProbe>| match probe {
        Some(TrampolineProbe::Works { .. }) => None,
        Some(TrampolineProbe::Refused(why)) => Some(why.clone()),
        None => Some("trampolines were not probed".to_owned()),
    };
    match (choice, probe) {
        (BackendChoice::Tracepoints, _) => Ok(tracepoints(BackendReason::Flag)),
        (BackendChoice::Auto, Some(TrampolineProbe::Works { missing })) => {
            Ok(trampolines(BackendReason::TrampolinesWork, missing))
        }
        (BackendChoice::Trampolines, Some(TrampolineProbe::Works { missing })) => {
            Ok(trampolines(BackendReason::Flag, missing))
        }
        (BackendChoice::Auto, other) => {
            Ok(tracepoints(BackendReason::TrampolinesRefused(refused(other).unwrap_or_default())))
        }
        (BackendChoice::Trampolines, other) => {
            Err(BackendError::TrampolinesUnavailable(refused(other).unwrap_or_default()))
        }
    }
}

impl TraceDecision {
    /// The tracing hooks of this decision, exit programs included.
    pub fn hooks(&self) -> Vec<Hook> {
        SYSCALLS
            .iter()
            .filter(|spec| !self.absent.contains(&spec.name))
            .flat_map(|spec| match self.backend {
                Backend::Trampolines if !self.fallbacks.iter().any(|f| f.syscall == spec.name) => {
                    loader::trampoline_hooks(spec)
                }
                _ => loader::tracepoint_hooks(spec),
            })
            .collect()
    }

    /// One log line per fact worth knowing: the backend, each fallback, each absent call.
    pub fn log(&self) {
        info!("tracing backend {}: {self}", self.backend);
        for fallback in &self.fallbacks {
            warn!(
                "{} is traced by its syscall tracepoints ({}): every syscall on this node pays for them",
                fallback.syscall, fallback.why
            );
        }
        for name in &self.absent {
            info!("{name} does not exist on this kernel: not traced");
        }
    }
}

/// Loads a throw-away object, probes if `choice` needs it, and decides.
pub fn choose(choice: BackendChoice) -> Result<TraceDecision, ChooseError> {
    let probe = match needs_probe(choice) {
        true => Some(probe(&mut LoadedObject::load()?)),
        false => None,
    };
    Ok(decide(choice, probe.as_ref())?)
}

/// Why [`choose`] could not decide.
#[derive(Debug, thiserror::Error)]
pub enum ChooseError {
    #[error(transparent)]
    Load(#[from] loader::LoadError),
    #[error(transparent)]
    Backend(#[from] BackendError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_trampolines_where_they_work_and_says_why_not_elsewhere() {
        let works = TrampolineProbe::Works { missing: vec![] };
        let d = decide(BackendChoice::Auto, Some(&works)).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Trampolines, "trampolines_work"));
        assert!(
            d.hooks().iter().all(|h| matches!(h.attach, loader::Attach::FEntry { .. } | loader::Attach::FExit { .. }))
        );
        let refused = TrampolineProbe::Refused("fentry_mount: load failed: Operation not permitted".into());
        let d = decide(BackendChoice::Auto, Some(&refused)).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Tracepoints, "trampolines_refused"));
        assert!(d.to_string().contains("Operation not permitted"), "{d}");
        assert!(d.hooks().iter().all(|h| matches!(h.attach, loader::Attach::TracePoint { .. })));
    }

    #[test]
    fn a_missing_function_falls_back_for_that_syscall_only() {
        let works = TrampolineProbe::Works { missing: vec!["umount", "open_tree_attr"] };
        let d = decide(BackendChoice::Auto, Some(&works)).unwrap();
        assert_eq!(d.backend, Backend::Trampolines);
        assert_eq!(
            d.fallbacks,
            vec![Fallback { syscall: "umount", why: "no __x64_sys_umount in the kernel's BTF".into() }]
        );
        assert_eq!(d.absent, vec!["open_tree_attr"], "a call younger than the kernel is not a fallback");
        let hooks = d.hooks();
        let tracepoints: Vec<_> =
            hooks.iter().filter(|h| matches!(h.attach, loader::Attach::TracePoint { .. })).collect();
        assert_eq!(tracepoints.len(), 2, "umount's entry and exit: {tracepoints:?}");
        assert!(!hooks.iter().any(|h| h.program.ends_with("open_tree_attr")));
        assert!(d.to_string().contains("umount by tracepoint"), "{d}");
    }

    #[test]
    fn forced_backends() {
        let refused = TrampolineProbe::Refused("EPERM".into());
        assert_eq!(
            decide(BackendChoice::Trampolines, Some(&refused)),
            Err(BackendError::TrampolinesUnavailable("EPERM".into()))
        );
        let d = decide(BackendChoice::Tracepoints, None).unwrap();
        assert_eq!(
            (d.backend, d.reason.label(), d.to_string().as_str()),
            (Backend::Tracepoints, "flag", "--trace-backend tracepoints")
        );
        let works = TrampolineProbe::Works { missing: vec![] };
        let d = decide(BackendChoice::Trampolines, Some(&works)).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Trampolines, "flag"));
        assert!(!needs_probe(BackendChoice::Tracepoints) && needs_probe(BackendChoice::Auto));
    }
}
