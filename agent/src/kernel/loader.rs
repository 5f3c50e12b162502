//! Loads the embedded object and attaches programs from one table of hooks.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use aya::{
    Btf, Ebpf, EbpfError, EbpfLoader,
    programs::{FEntry, FExit, FModRet, Lsm, ProgramError, TracePoint, links::FdLink},
};
use tokio::io::{Interest, unix::AsyncFd};
use tracing::{debug, info, warn};
use volguard_common::{
    event::{SYSCALLS, SyscallSpec},
    maps::{EVENTS, PINNED_MAPS},
    open_guard::{OPEN_GUARD_LAYOUT_GLOBAL, OPERATION_HOOKS, OpenGuardLayout},
    programs::{
        D_EXCHANGE_FORGET_VERDICTS, D_MOVE_FORGET_VERDICTS, FENTRY_PREFIX, FEXIT_PREFIX, FILE_OPEN_FLOOR,
        FILE_OPEN_GUARD, FMOD_RET_SUFFIX, MOVE_MOUNT_ENFORCE, OPERATION_GUARD_SUFFIX, SB_MOUNT_ENFORCE, SB_MOUNT_PROBE,
        SB_UMOUNT_RELEASE, SECURITY_FUNCTION_PREFIX, SYSCALL_ENTER_PREFIX, SYSCALL_EXIT, SYSCALL_FUNCTION_PREFIX,
    },
};

use super::OBJECT;
use super::pins::{PinError, Pins};

/// Where a program attaches.
#[derive(Clone, Debug)]
pub enum AttachPoint {
    /// A tracepoint `category/name` (under /sys/kernel/tracing/events).
    TracePoint { category: &'static str, name: String },
    /// A BPF LSM hook (`security_<hook>` in the kernel).
    Lsm { hook: &'static str },
    /// An fmod_ret trampoline on a kernel function (by its BTF name): its return value,
    /// when not zero, replaces the function's.
    FModRet { function: String },
    /// A trampoline at the entry of a kernel function (by its BTF name).
    FEntry { function: String },
    /// A trampoline at the return of a kernel function (by its BTF name).
    FExit { function: String },
}

/// A program of the object and one place it attaches (a program may have several).
#[derive(Clone, Debug)]
pub struct Hook {
    pub program: String,
    pub attach: AttachPoint,
    /// Skipped, not an error, when the kernel lacks the attach point.
    pub optional: bool,
}

/// Syscalls younger than the oldest kernel we support: traced where they exist.
const OPTIONAL_SYSCALLS: &[&str] = &["open_tree_attr"]; // Linux 6.15

/// Entry and exit tracepoints of every traced syscall (`volguard_common::event::SYSCALLS`).
pub fn trace_hooks() -> Vec<Hook> {
    SYSCALLS.iter().flat_map(tracepoint_hooks).collect()
}

/// Whether syscall `name` is younger than the oldest kernel we support.
pub fn is_optional_syscall(name: &str) -> bool {
    OPTIONAL_SYSCALLS.contains(&name)
}

/// The entry and exit tracepoints of one syscall.
pub fn tracepoint_hooks(spec: &SyscallSpec) -> [Hook; 2] {
    let optional = is_optional_syscall(spec.name);
    let enter = format!("{SYSCALL_ENTER_PREFIX}{}", spec.name);
    let exit = format!("sys_exit_{}", spec.name);
    [
        Hook {
            program: enter.clone(),
            attach: AttachPoint::TracePoint { category: "syscalls", name: enter },
            optional,
        },
        Hook {
            program: SYSCALL_EXIT.to_owned(),
            attach: AttachPoint::TracePoint { category: "syscalls", name: exit },
            optional,
        },
    ]
}

/// The kernel function of syscall `name` (`__x64_sys_<name>`).
pub fn syscall_function(name: &str) -> String {
    format!("{SYSCALL_FUNCTION_PREFIX}{name}")
}

/// The fentry and fexit programs of one syscall, on its kernel function. Not optional:
/// the caller traces a syscall this way only where the kernel's BTF has the function.
pub fn trampoline_hooks(spec: &SyscallSpec) -> [Hook; 2] {
    let function = syscall_function(spec.name);
    [
        Hook {
            program: format!("{FENTRY_PREFIX}{}", spec.name),
            attach: AttachPoint::FEntry { function: function.clone() },
            optional: false,
        },
        Hook {
            program: format!("{FEXIT_PREFIX}{}", spec.name),
            attach: AttachPoint::FExit { function },
            optional: false,
        },
    ]
}

/// How the programs on security hooks reach the kernel (see
/// `agent-ebpf/src/probes/security_hook.rs`): the same programs, the same maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecurityHooks {
    /// BPF LSM programs: need `bpf` in the kernel's `lsm=` list.
    BpfLsm,
    /// fmod_ret programs on the kernel's `security_<hook>` functions: need BPF trampolines,
    /// not BPF LSM.
    FModRet,
}

impl SecurityHooks {
    /// As logs, the CLI and the metrics' labels say it.
    pub fn label(self) -> &'static str {
        match self {
            Self::BpfLsm => "bpf_lsm",
            Self::FModRet => "fmod_ret",
        }
    }

    /// As prose names it (`BPF LSM`, `fmod_ret`).
    pub fn describe(self) -> &'static str {
        match self {
            Self::BpfLsm => "BPF LSM",
            Self::FModRet => "fmod_ret",
        }
    }

    /// The hook of `program`, which is the BPF LSM program's name, attached this way.
    fn hook(self, program: &str, hook: &'static str) -> Hook {
        match self {
            Self::BpfLsm => Hook { program: program.to_owned(), attach: AttachPoint::Lsm { hook }, optional: false },
            Self::FModRet => Hook {
                program: format!("{program}{FMOD_RET_SUFFIX}"),
                attach: AttachPoint::FModRet { function: format!("{SECURITY_FUNCTION_PREFIX}{hook}") },
                optional: false,
            },
        }
    }
}

impl std::fmt::Display for SecurityHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// The enforcement programs (see `agent-ebpf/src/probes/enforce.rs`, `open_guard.rs` and
/// `directory_verdicts.rs`), the security hooks attached as `via` says.
pub fn enforce_hooks(via: SecurityHooks) -> Vec<Hook> {
    let security = [
        (SB_MOUNT_ENFORCE, "sb_mount"),
        (MOVE_MOUNT_ENFORCE, "move_mount"),
        (SB_UMOUNT_RELEASE, "sb_umount"),
        (FILE_OPEN_GUARD, "file_open"),
    ]
    .map(|(program, hook)| via.hook(program, hook));
    let operations = OPERATION_HOOKS.map(|(hook, _, _)| via.hook(&format!("{hook}{OPERATION_GUARD_SUFFIX}"), hook));
    let renames =
        [(D_MOVE_FORGET_VERDICTS, "d_move"), (D_EXCHANGE_FORGET_VERDICTS, "d_exchange")].map(|(program, function)| {
            Hook {
                program: program.to_owned(),
                attach: AttachPoint::FExit { function: function.to_owned() },
                optional: false,
            }
        });
    security.into_iter().chain(operations).chain(renames).collect()
}

impl Hook {
    /// A stable name for this attachment's pinned link.
    pub fn link_name(&self) -> String {
        match &self.attach {
            AttachPoint::TracePoint { name, .. } => format!("tp-{name}"),
            AttachPoint::Lsm { .. } => format!("lsm-{}", self.program),
            AttachPoint::FModRet { .. } => format!("fmodret-{}", self.program),
            // A syscall's, of the trampolines backend (replaced when the backend changes).
            AttachPoint::FEntry { .. } | AttachPoint::FExit { .. } if self.traces_a_syscall() => {
                format!("tramp-{}", self.program)
            }
            // The open guard's, on `d_move` and `d_exchange`, whatever the backend.
            AttachPoint::FEntry { .. } => format!("fentry-{}", self.program),
            AttachPoint::FExit { .. } => format!("fexit-{}", self.program),
        }
    }

    /// Whether this is a syscall's fentry or fexit program (`fentry_<name>`, `fexit_<name>`).
    fn traces_a_syscall(&self) -> bool {
        self.program.starts_with(FENTRY_PREFIX) || self.program.starts_with(FEXIT_PREFIX)
    }

    /// Whether this attachment settles claims at syscall exit (see `settle_claim`).
    pub fn settles_claims(&self) -> bool {
        match &self.attach {
            AttachPoint::TracePoint { .. } => self.program == SYSCALL_EXIT,
            AttachPoint::FExit { .. } => self.traces_a_syscall(),
            AttachPoint::Lsm { .. } | AttachPoint::FModRet { .. } | AttachPoint::FEntry { .. } => false,
        }
    }
}

/// The `file_open` hook with a program that decides nothing: the benchmark's floor of the
/// open guard (never attached by the agent).
pub fn open_hook_floor(via: SecurityHooks) -> Hook {
    via.hook(FILE_OPEN_FLOOR, "file_open")
}

/// The self-test of in-kernel refusal (see `volguard_common::lsm_probe`).
pub fn lsm_probe_hook(via: SecurityHooks) -> Hook {
    via.hook(SB_MOUNT_PROBE, "sb_mount")
}

/// Why loading or attaching failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The object was refused (no BPF support, no privileges, map creation failed).
    #[error("loading the eBPF object failed (are you root on a kernel with BPF?)")]
    Object(#[source] EbpfError),
    /// The kernel is older than volguard's floor: one line saying what it lacks.
    #[error("{0}")]
    BelowFloor(String),
    /// The object does not contain a program the hook table names.
    #[error("program {program} is not in the eBPF object")]
    MissingProgram { program: String },
    /// The object does not contain a map the agent needs.
    #[error("map {map} is not in the eBPF object")]
    MissingMap { map: &'static str },
    /// A map the agent configures could not be written.
    #[error("writing map {map} failed")]
    MapWrite {
        map: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    /// The kernel's BTF (needed for LSM programs) could not be read.
    #[error("reading kernel BTF from /sys/kernel/btf/vmlinux failed")]
    Btf(#[source] aya::BtfError),
    /// A link could not become a pinnable bpf_link (kernels before 5.15 for tracepoints).
    #[error("{program}: link cannot be pinned")]
    Link {
        program: String,
        #[source]
        source: aya::programs::links::LinkError,
    },
    /// A link could not be pinned (see [`Pins`]).
    #[error(transparent)]
    Pin(#[from] PinError),
    /// tracefs is not mounted and could not be mounted.
    #[error("tracefs is not mounted and mounting it on {path} failed")]
    Tracefs {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused to load or attach one program.
    #[error("{program}: {action} failed")]
    Program {
        program: String,
        action: &'static str,
        #[source]
        source: ProgramError,
    },
}

/// The loaded eBPF object. Programs attach through it; the ring buffer
/// ([`super::reader::EventReader`]), the counters ([`super::counters::Counters`]) and the
/// enforcement maps ([`super::maps::EnforcementMaps`]) are each taken from it once.
/// Links not pinned detach when it is dropped.
pub struct LoadedObject {
    pub(super) ebpf: Ebpf,
}

/// The loader every load of the object starts from: it accepts the map types aya has no
/// type for, and gives the event ring buffer `bytes` (a power-of-two number of pages), or
/// the object's size with `None`.
fn object_loader(bytes: Option<u32>) -> EbpfLoader<'static> {
    let mut loader = EbpfLoader::new();
    // aya has no type for task storage (`PENDING`); only the programs use that map.
    loader.allow_unsupported_maps();
    if let Some(bytes) = bytes {
        loader.map_max_entries(EVENTS, bytes);
    }
    loader
}

impl LoadedObject {
    /// Loads the embedded object (maps created, no program loaded yet).
    pub fn load() -> Result<Self, LoadError> {
        Self::load_with(object_loader(None))
    }

    /// As [`Self::load`], with an event ring buffer of `bytes` (a power-of-two number of
    /// pages); `None` keeps the object's size.
    pub fn load_with_ring_size(bytes: Option<u32>) -> Result<Self, LoadError> {
        Self::load_with(object_loader(bytes))
    }

    /// As [`Self::load_with_ring_size`], with the enforcement maps pinned under `pins` (an
    /// earlier agent's maps are reused as they are, or created and pinned) and the open
    /// guard's offsets set (the guard decides nothing without them).
    pub fn load_pinned(pins: &Pins, ring_bytes: Option<u32>, open_guard: &OpenGuardLayout) -> Result<Self, LoadError> {
        let mut loader = object_loader(ring_bytes);
        loader.override_global(OPEN_GUARD_LAYOUT_GLOBAL, open_guard, true);
        for name in PINNED_MAPS {
            loader.map_pin_path(name, pins.map_path(name));
        }
        Self::load_with(loader)
    }

    fn load_with(mut loader: EbpfLoader<'_>) -> Result<Self, LoadError> {
        loader.load(OBJECT).map(|ebpf| Self { ebpf }).map_err(|e| match super::floor::below_floor() {
            Some(why) => LoadError::BelowFloor(why),
            None => LoadError::Object(e),
        })
    }

    /// Starts forwarding the programs' aya-log records to `tracing`. The logger owns the
    /// log map and must live as long as the programs; without it programs still run.
    pub fn start_kernel_log(&mut self) {
        match aya_log::EbpfLogger::init(&mut self.ebpf) {
            Ok(logger) => {
                // SAFETY: the logger owns its ring buffer's fd for its whole life; the AsyncFd
                // owns the logger.
                let registered = unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) };
                let Ok(mut logger) = registered else {
                    warn!("kernel log: cannot poll the log ring buffer; kernel log lines are not shown");
                    return;
                };
                tokio::spawn(async move {
                    while let Ok(mut guard) = logger.readable_mut().await {
                        guard.get_inner_mut().flush();
                        guard.clear_ready();
                    }
                });
            }
            Err(e) => debug!("kernel log not available: {e}"),
        }
    }

    /// Loads (once each) and attaches every hook in `hooks`; the links stay with the
    /// object. Optional hooks whose attach point this kernel lacks are skipped with a log
    /// line.
    pub fn attach(&mut self, hooks: &[Hook]) -> Result<(), LoadError> {
        attach_hooks(&mut self.ebpf, hooks, false).map(|_| ())
    }

    /// Attaches every hook of `hooks` and pins each link under `pins` (replacing an earlier
    /// agent's pin of the same name only once ours is attached, removing pins of links we
    /// no longer have): the programs outlive this process. Returns how many earlier pins
    /// were replaced.
    pub fn attach_pinned(&mut self, hooks: &[Hook], pins: &Pins) -> Result<usize, LoadError> {
        let links = attach_hooks(&mut self.ebpf, hooks, true)?;
        Ok(pins.install_links(links)?)
    }

    /// Takes map `name` out of the object. Its descriptor must stay open until every
    /// program using it is loaded (they are relocated against it).
    pub(super) fn take_map(&mut self, name: &'static str) -> Result<aya::maps::Map, LoadError> {
        self.ebpf.take_map(name).ok_or(LoadError::MissingMap { map: name })
    }
}

/// Where tracefs is normally mounted; aya also looks under /sys/kernel/debug/tracing.
const TRACEFS: &str = "/sys/kernel/tracing";
const TRACEFS_IN_DEBUGFS: &str = "/sys/kernel/debug/tracing";

/// Tracepoints are found through tracefs; mount it when neither usual place has it.
/// Returns the tracefs `events` directory.
fn ensure_tracefs() -> Result<PathBuf, LoadError> {
    let events = |dir: &str| Path::new(dir).join("events");
    if let Some(found) = [TRACEFS, TRACEFS_IN_DEBUGFS].into_iter().map(events).find(|e| e.is_dir()) {
        return Ok(found);
    }
    debug!("mounting tracefs on {TRACEFS}");
    nix::mount::mount(Some("tracefs"), TRACEFS, Some("tracefs"), nix::mount::MsFlags::empty(), None::<&str>)
        .map_err(|errno| LoadError::Tracefs { path: TRACEFS, source: errno.into() })?;
    Ok(events(TRACEFS))
}

fn attach_hooks(ebpf: &mut Ebpf, hooks: &[Hook], take: bool) -> Result<Vec<(String, FdLink)>, LoadError> {
    let mut links = Vec::new();
    let needs_tracefs = hooks.iter().any(|h| matches!(h.attach, AttachPoint::TracePoint { .. }));
    let events = if needs_tracefs { Some(ensure_tracefs()?) } else { None };
    // Parsed once, for every BTF-typed program (LSM, fentry, fexit).
    let mut btf = None;
    for hook in hooks {
        if let (AttachPoint::TracePoint { category, name }, Some(events)) = (&hook.attach, &events)
            && hook.optional
            && !events.join(category).join(name).is_dir()
        {
            info!("{category}/{name} does not exist on this kernel: not traced");
            continue;
        }
        if let Some(link) = attach(ebpf, hook, take, &mut btf)? {
            links.push((hook.link_name(), link));
        }
        debug!(program = hook.program, attach = ?hook.attach, "attached");
    }
    Ok(links)
}

fn attach(ebpf: &mut Ebpf, hook: &Hook, take: bool, btf: &mut Option<Btf>) -> Result<Option<FdLink>, LoadError> {
    let program = hook.program.as_str();
    let failed = |action| move |source| LoadError::Program { program: program.to_owned(), action, source };
    let prog = ebpf.program_mut(program).ok_or_else(|| LoadError::MissingProgram { program: program.to_owned() })?;
    // LSM, fmod_ret, fentry and fexit programs load against the kernel's BTF and attach
    // alike (aya gives them no common trait).
    macro_rules! attach_btf_typed {
        ($kind:ty, $target:expr) => {{
            let btf = kernel_btf(btf)?;
            let typed: &mut $kind = prog.try_into().map_err(failed("type check"))?;
            let started = Instant::now();
            typed.load($target, btf).map_err(failed("load"))?;
            log_load(program, started);
            let id = typed.attach().map_err(failed("attach"))?;
            if take {
                return Ok(Some(typed.take_link(id).map_err(failed("take link"))?.into()));
            }
        }};
    }
    match &hook.attach {
        AttachPoint::TracePoint { category, name } => {
            let tp: &mut TracePoint = prog.try_into().map_err(failed("type check"))?;
            // One program may serve several tracepoints: load it the first time only.
            if tp.fd().is_err() {
                let started = Instant::now();
                tp.load().map_err(failed("load"))?;
                log_load(program, started);
            }
            let id = tp.attach(category, name).map_err(failed("attach"))?;
            if take {
                let link = tp.take_link(id).map_err(failed("take link"))?;
                let link =
                    FdLink::try_from(link).map_err(|e| LoadError::Link { program: program.to_owned(), source: e })?;
                return Ok(Some(link));
            }
        }
        AttachPoint::Lsm { hook } => attach_btf_typed!(Lsm, hook),
        AttachPoint::FModRet { function } => attach_btf_typed!(FModRet, function),
        AttachPoint::FEntry { function } => attach_btf_typed!(FEntry, function),
        AttachPoint::FExit { function } => attach_btf_typed!(FExit, function),
    }
    Ok(None)
}

/// How long loading `program` took: mostly the kernel's verification, the bulk of start-up
/// (each fexit program is verified on its own, though they share their code).
fn log_load(program: &str, started: Instant) {
    debug!(program, ms = started.elapsed().as_millis(), "loaded (verified)");
}

/// The running kernel's BTF, read on first use.
fn kernel_btf(btf: &mut Option<Btf>) -> Result<&Btf, LoadError> {
    if btf.is_none() {
        *btf = Some(Btf::from_sys_fs().map_err(LoadError::Btf)?);
    }
    Ok(btf.as_ref().expect("set above"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_names_a_program_of_the_built_object() {
        let object = aya_obj::Object::parse(OBJECT).expect("the embedded object parses");
        let trampolines = SYSCALLS.iter().flat_map(trampoline_hooks);
        let hooks = trace_hooks()
            .into_iter()
            .chain(trampolines)
            .chain(enforce_hooks(SecurityHooks::BpfLsm))
            .chain(enforce_hooks(SecurityHooks::FModRet))
            .chain(
                [SecurityHooks::BpfLsm, SecurityHooks::FModRet]
                    .into_iter()
                    .flat_map(|via| [lsm_probe_hook(via), open_hook_floor(via)]),
            );
        for hook in hooks {
            assert!(object.programs.contains_key(&hook.program), "{} is not in the object", hook.program);
            assert_eq!(super::super::pins::settles_claims(&hook.link_name()), hook.settles_claims(), "{hook:?}");
        }
    }
}
