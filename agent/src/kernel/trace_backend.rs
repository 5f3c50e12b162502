//! Which programs trace the mount-family syscalls, chosen at start-up like the mode.
//!
//! - **Trampolines** (fentry/fexit on each syscall's kernel function, `__x64_sys_<name>`):
//!   only the traced syscalls pay for them.
//! - **Tracepoints** (`syscalls:sys_enter_*`/`sys_exit_*`): attaching any of them puts
//!   every syscall of every thread on the node on the slow entry path (kernel/tracepoint.c
//!   `syscall_regfunc`); used where the kernel refuses trampolines (EPERM where function
//!   tracing is locked down), and for one syscall whose function the kernel's BTF lacks.
//! - **fanotify** mount notifications (Linux 6.15+): no program at all; the kernel reports
//!   each mount attached to or detached from the watched namespace, read back with
//!   statmount. Nothing on the node pays, but a notice names no caller, no duration and no
//!   failed attempt ([`FANOTIFY_LOSSES`]), and it comes after the fact, so it cannot settle
//!   the claims of the modes that decide in the kernel.
//!
//! The two syscall backends produce the same `SyscallEvent` records and settle LSM claims
//! at exit.

use std::{fmt, fs::File, path::Path};

use serde::Serialize;
use tracing::{info, warn};
use volguard_common::event::{SYSCALLS, SyscallSpec};

use super::{
    btf::{Btf, VMLINUX_BTF},
    loader::{self, Hook, LoadedObject, is_optional_syscall, syscall_function},
    lsm_probe::error_chain,
};
use crate::sys::{fanotify::MountWatch, statmount};

/// `--trace-backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// Trampolines where the kernel allows them; else fanotify mount notifications where
    /// they work and the mode does not decide in the kernel; else tracepoints.
    #[default]
    Auto,
    /// Trampolines, or refuse to start.
    Trampolines,
    /// Syscall tracepoints (every syscall on the node pays while they are attached).
    Tracepoints,
    /// fanotify mount notifications (no caller, no duration, no failures), or refuse to start.
    Fanotify,
}

/// The backend in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    Trampolines,
    Tracepoints,
    Fanotify,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Trampolines => "trampolines",
            Self::Tracepoints => "tracepoints",
            Self::Fanotify => "fanotify",
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

/// What the fanotify probe found (the watch itself, when it works, goes to the agent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FanotifyProbe {
    /// The notification group watches the namespace and listmount reads it.
    Works,
    /// Why not: the kernel refused, or the mode rules it out.
    Refused(String),
}

/// Why the backend in force is the backend in force.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendReason {
    /// `auto`, and trampolines loaded and attached.
    TrampolinesWork,
    /// `auto`, the kernel refused trampolines (why), and fanotify mount notifications work.
    FanotifyWorks { trampolines: String },
    /// `auto`, the kernel refused trampolines, and fanotify was refused or ruled out: why.
    TrampolinesRefused { trampolines: String, fanotify: String },
    /// `--trace-backend` named it.
    Flag,
}

impl BackendReason {
    /// The `reason` label of `volguard_trace_backend` (a closed set).
    pub fn label(&self) -> &'static str {
        match self {
            Self::TrampolinesWork => "trampolines_work",
            Self::FanotifyWorks { .. } => "trampolines_refused_fanotify_works",
            Self::TrampolinesRefused { .. } => "trampolines_and_fanotify_refused",
            Self::Flag => "flag",
        }
    }
}

/// What the fanotify backend cannot tell, as the log, `/debug/status` and
/// `volguard status` say it.
pub const FANOTIFY_LOSSES: &[&str] = &[
    "the caller (pid, command, cgroup): conflicts name no mounting process or pod",
    "syscall latency: storage_operation_duration_seconds is not observed",
    "failed mount attempts: only successful attaches and detaches are reported",
    "mount syscalls: volguard_mount_syscalls_total stays at zero (volguard_mount_notifications_total counts instead)",
    "mounts in other mount namespaces than the watched one",
];

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
            (BackendReason::FanotifyWorks { trampolines }, _) => write!(
                f,
                "auto: the kernel refuses trampolines ({trampolines}) and fanotify mount notifications work: no \
                 syscall on the node pays"
            )?,
            (BackendReason::TrampolinesRefused { trampolines, fanotify }, _) => write!(
                f,
                "auto: the kernel refuses trampolines ({trampolines}); fanotify mount notifications not used \
                 ({fanotify})"
            )?,
            (BackendReason::Flag, backend) => write!(f, "--trace-backend {backend}")?,
        }
        for fallback in &self.fallbacks {
            write!(f, "; {} by tracepoint ({})", fallback.syscall, fallback.why)?;
        }
        if self.backend == Backend::Fanotify {
            write!(f, "; {FANOTIFY_UNSEEN}")?;
        }
        Ok(())
    }
}

/// What the fanotify backend does not see, as the start-up log and `volguard status` say.
pub const FANOTIFY_UNSEEN: &str = "with fanotify, mounts outside kubelet's publish that reach a single-pod volume \
     are found only by the scan of pods' mount namespaces (after each publish of such a volume, and at each \
     reconciliation: up to --reconcile-interval late); a bind, clone or recursive bind made in the node's own \
     namespace is not seen (a notice names no caller); --trace-backend=tracepoints sees every route at syscall \
     exit, at a cost to every syscall on the node";

/// Why the requested backend cannot run here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackendError {
    #[error("--trace-backend trampolines: the kernel refuses trampolines: {0}")]
    TrampolinesUnavailable(String),
    #[error("--trace-backend fanotify: {0}")]
    FanotifyUnavailable(String),
}

/// Whether choosing needs the trampoline probe.
pub fn needs_probe(choice: BackendChoice) -> bool {
    matches!(choice, BackendChoice::Auto | BackendChoice::Trampolines)
}

/// Why fanotify is ruled out for a mode that decides in the kernel.
pub const IN_KERNEL_MODE: &str =
    "the mode decides in the kernel, and its claims are settled at syscall exit, which notifications never see";

/// Whether choosing needs the fanotify probe: `fanotify` named, or `auto` where the
/// kernel refused trampolines and the mode does not decide in the kernel.
pub fn needs_fanotify_probe(choice: BackendChoice, in_kernel: bool, trampolines: Option<&TrampolineProbe>) -> bool {
    match choice {
        BackendChoice::Fanotify => !in_kernel,
        BackendChoice::Auto => !in_kernel && !matches!(trampolines, Some(TrampolineProbe::Works { .. })),
        BackendChoice::Trampolines | BackendChoice::Tracepoints => false,
    }
}

/// A mount namespace watched for attached and detached mounts: the notification group,
/// the namespace (kept open: the quarantine acts in it) and its id (statmount's name for it).
#[derive(Debug)]
pub struct WatchedNamespace {
    pub watch: MountWatch,
    pub namespace: File,
    /// The namespace file's path, for messages.
    pub name: String,
    pub ns_id: u64,
}

/// Tries fanotify mount notifications for real on the namespace file `ns_path`: the
/// group, the mark, and a listmount of the namespace. The watch, when it works, is the
/// one the agent then reads (nothing is missed between the probe and the start).
pub fn probe_fanotify(ns_path: &Path) -> (FanotifyProbe, Option<WatchedNamespace>) {
    let name = ns_path.display().to_string();
    let namespace = match File::open(ns_path) {
        Ok(file) => file,
        Err(e) => return (FanotifyProbe::Refused(format!("opening {name}: {e}")), None),
    };
    let watch = match MountWatch::new(&namespace, &name) {
        Ok(watch) => watch,
        Err(e) => return (FanotifyProbe::Refused(e.to_string()), None),
    };
    let ns_id = match statmount::namespace_id(&namespace) {
        Ok(id) => id,
        Err(e) => return (FanotifyProbe::Refused(format!("the id of {name} (NS_GET_MNTNS_ID): {e}")), None),
    };
    if let Err(e) = statmount::listmount(ns_id) {
        return (FanotifyProbe::Refused(format!("listmount of {name}: {e}")), None);
    }
    (FanotifyProbe::Works, Some(WatchedNamespace { watch, namespace, name, ns_id }))
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

/// Chooses the backend from the flag, whether the mode decides in the kernel, and the
/// probes (`None` when not probed).
pub fn decide(
    choice: BackendChoice,
    in_kernel: bool,
    probe: Option<&TrampolineProbe>,
    fanotify: Option<&FanotifyProbe>,
) -> Result<TraceDecision, BackendError> {
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
    let fanotify_refused = || match (in_kernel, fanotify) {
        (true, _) => Some(IN_KERNEL_MODE.to_owned()),
        (false, Some(FanotifyProbe::Works)) => None,
        (false, Some(FanotifyProbe::Refused(why))) => Some(why.clone()),
        (false, None) => Some("fanotify was not probed".to_owned()),
    };
    let fanotify_backend =
        |reason| TraceDecision { backend: Backend::Fanotify, reason, fallbacks: vec![], absent: vec![] };
    match (choice, probe) {
        (BackendChoice::Tracepoints, _) => Ok(tracepoints(BackendReason::Flag)),
        (BackendChoice::Fanotify, _) => match fanotify_refused() {
            None => Ok(fanotify_backend(BackendReason::Flag)),
            Some(why) => Err(BackendError::FanotifyUnavailable(why)),
        },
        (BackendChoice::Auto, Some(TrampolineProbe::Works { missing })) => {
            Ok(trampolines(BackendReason::TrampolinesWork, missing))
        }
        (BackendChoice::Trampolines, Some(TrampolineProbe::Works { missing })) => {
            Ok(trampolines(BackendReason::Flag, missing))
        }
        (BackendChoice::Auto, other) => {
            let trampolines = refused(other).unwrap_or_default();
            Ok(match fanotify_refused() {
                None => fanotify_backend(BackendReason::FanotifyWorks { trampolines }),
                Some(fanotify) => tracepoints(BackendReason::TrampolinesRefused { trampolines, fanotify }),
            })
        }
        (BackendChoice::Trampolines, other) => {
            Err(BackendError::TrampolinesUnavailable(refused(other).unwrap_or_default()))
        }
    }
}

impl TraceDecision {
    /// The tracing hooks of this decision, exit programs included (none for fanotify).
    pub fn hooks(&self) -> Vec<Hook> {
        if self.backend == Backend::Fanotify {
            return Vec::new();
        }
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

    /// What this backend cannot tell (empty for the syscall backends).
    pub fn losses(&self) -> &'static [&'static str] {
        match self.backend {
            Backend::Fanotify => FANOTIFY_LOSSES,
            Backend::Trampolines | Backend::Tracepoints => &[],
        }
    }

    /// One log line per fact worth knowing: the backend, what it loses, each fallback,
    /// each absent call.
    pub fn log(&self) {
        info!("tracing backend {}: {self}", self.backend);
        if !self.losses().is_empty() {
            warn!("tracing backend {} does not report: {}", self.backend, self.losses().join("; "));
        }
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

/// For `volguard trace`, which prints syscalls: loads a throw-away object, probes if
/// `choice` needs it, and decides between the syscall backends.
pub fn choose_syscall_backend(choice: BackendChoice) -> Result<TraceDecision, ChooseError> {
    if choice == BackendChoice::Fanotify {
        return Err(BackendError::FanotifyUnavailable(
            "mount notifications report no syscalls; `volguard trace` needs trampolines or tracepoints".into(),
        )
        .into());
    }
    let probe = match needs_probe(choice) {
        true => Some(probe(&mut LoadedObject::load()?)),
        false => None,
    };
    let not_for_syscalls = FanotifyProbe::Refused("mount notifications report no syscalls".into());
    Ok(decide(choice, false, probe.as_ref(), Some(&not_for_syscalls))?)
}

/// Why [`choose_syscall_backend`] could not decide.
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
        let d = decide(BackendChoice::Auto, false, Some(&works), None).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Trampolines, "trampolines_work"));
        assert!(
            d.hooks()
                .iter()
                .all(|h| matches!(h.attach, loader::AttachPoint::FEntry { .. } | loader::AttachPoint::FExit { .. }))
        );
        let refused = TrampolineProbe::Refused("fentry_mount: load failed: Operation not permitted".into());
        let d = decide(BackendChoice::Auto, false, Some(&refused), None).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Tracepoints, "trampolines_and_fanotify_refused"));
        assert!(d.to_string().contains("Operation not permitted"), "{d}");
        assert!(d.losses().is_empty());
        assert!(d.hooks().iter().all(|h| matches!(h.attach, loader::AttachPoint::TracePoint { .. })));
    }

    #[test]
    fn a_missing_function_falls_back_for_that_syscall_only() {
        let works = TrampolineProbe::Works { missing: vec!["umount", "open_tree_attr"] };
        let d = decide(BackendChoice::Auto, false, Some(&works), None).unwrap();
        assert_eq!(d.backend, Backend::Trampolines);
        assert_eq!(
            d.fallbacks,
            vec![Fallback { syscall: "umount", why: "no __x64_sys_umount in the kernel's BTF".into() }]
        );
        assert_eq!(d.absent, vec!["open_tree_attr"], "a call younger than the kernel is not a fallback");
        let hooks = d.hooks();
        let tracepoints: Vec<_> =
            hooks.iter().filter(|h| matches!(h.attach, loader::AttachPoint::TracePoint { .. })).collect();
        assert_eq!(tracepoints.len(), 2, "umount's entry and exit: {tracepoints:?}");
        assert!(!hooks.iter().any(|h| h.program.ends_with("open_tree_attr")));
        assert!(d.to_string().contains("umount by tracepoint"), "{d}");
    }

    #[test]
    fn forced_backends() {
        let refused = TrampolineProbe::Refused("EPERM".into());
        assert_eq!(
            decide(BackendChoice::Trampolines, false, Some(&refused), None),
            Err(BackendError::TrampolinesUnavailable("EPERM".into()))
        );
        let d = decide(BackendChoice::Tracepoints, false, None, None).unwrap();
        assert_eq!(
            (d.backend, d.reason.label(), d.to_string().as_str()),
            (Backend::Tracepoints, "flag", "--trace-backend tracepoints")
        );
        let works = TrampolineProbe::Works { missing: vec![] };
        let d = decide(BackendChoice::Trampolines, false, Some(&works), None).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Trampolines, "flag"));
        assert!(!needs_probe(BackendChoice::Tracepoints) && needs_probe(BackendChoice::Auto));
        assert!(!needs_probe(BackendChoice::Fanotify));
    }

    #[test]
    fn auto_takes_fanotify_where_trampolines_are_refused_unless_the_kernel_decides() {
        let refused = TrampolineProbe::Refused("EPERM".into());
        let works = FanotifyProbe::Works;
        let d = decide(BackendChoice::Auto, false, Some(&refused), Some(&works)).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Fanotify, "trampolines_refused_fanotify_works"));
        assert!(d.to_string().contains("refuses trampolines (EPERM)") && d.to_string().contains("no syscall"), "{d}");
        assert!(d.hooks().is_empty(), "no program at all");
        assert_eq!(d.losses(), FANOTIFY_LOSSES);
        // Trampolines first wherever they work.
        let tramp = TrampolineProbe::Works { missing: vec![] };
        assert_eq!(
            decide(BackendChoice::Auto, false, Some(&tramp), Some(&works)).unwrap().backend,
            Backend::Trampolines
        );
        assert!(!needs_fanotify_probe(BackendChoice::Auto, false, Some(&tramp)));
        assert!(needs_fanotify_probe(BackendChoice::Auto, false, Some(&refused)));
        // A mode deciding in the kernel needs exit programs: tracepoints, and why.
        assert!(!needs_fanotify_probe(BackendChoice::Auto, true, Some(&refused)));
        assert!(!needs_fanotify_probe(BackendChoice::Fanotify, true, None));
        let d = decide(BackendChoice::Auto, true, Some(&refused), None).unwrap();
        assert_eq!((d.backend, d.reason.label()), (Backend::Tracepoints, "trampolines_and_fanotify_refused"));
        assert!(d.to_string().contains(IN_KERNEL_MODE), "{d}");
        // The kernel refusing notifications: tracepoints, and why.
        let old = FanotifyProbe::Refused("fanotify_init(FAN_REPORT_MNT): Invalid argument".into());
        let d = decide(BackendChoice::Auto, false, Some(&refused), Some(&old)).unwrap();
        assert!(d.to_string().contains("Invalid argument") && d.to_string().contains("EPERM"), "{d}");
    }

    #[test]
    fn forced_fanotify_works_or_refuses_to_start_saying_why() {
        let d = decide(BackendChoice::Fanotify, false, None, Some(&FanotifyProbe::Works)).unwrap();
        let said = format!("--trace-backend fanotify; {FANOTIFY_UNSEEN}");
        assert_eq!(
            (d.backend, d.reason.label(), d.to_string()),
            (Backend::Fanotify, "flag", said),
            "what it cannot see"
        );
        let old = FanotifyProbe::Refused("EINVAL".into());
        assert_eq!(
            decide(BackendChoice::Fanotify, false, None, Some(&old)),
            Err(BackendError::FanotifyUnavailable("EINVAL".into()))
        );
        assert_eq!(
            decide(BackendChoice::Fanotify, true, None, None),
            Err(BackendError::FanotifyUnavailable(IN_KERNEL_MODE.into()))
        );
        assert!(choose_syscall_backend(BackendChoice::Fanotify).is_err(), "volguard trace prints syscalls");
    }
}
