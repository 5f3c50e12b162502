//! Loads the embedded object and attaches programs from one table of hooks.

use aya::{
    Btf, Ebpf, EbpfError, EbpfLoader,
    programs::{Lsm, ProgramError, TracePoint},
};
use tokio::io::{Interest, unix::AsyncFd};
use tracing::{debug, warn};

use super::OBJECT;

/// Where a program attaches.
#[derive(Clone, Copy, Debug)]
pub enum Attach {
    /// A tracepoint `category/name` (under /sys/kernel/tracing/events).
    TracePoint {
        category: &'static str,
        name: &'static str,
    },
    /// A BPF LSM hook (`security_<hook>` in the kernel).
    Lsm { hook: &'static str },
}

/// A program of the object and where it attaches.
#[derive(Clone, Copy, Debug)]
pub struct Hook {
    pub program: &'static str,
    pub attach: Attach,
}

impl Hook {
    const fn syscall(program: &'static str) -> Self {
        Self {
            program,
            attach: Attach::TracePoint {
                category: "syscalls",
                name: program,
            },
        }
    }
}

/// The tracing programs: entry and exit of every traced syscall.
pub const TRACE_HOOKS: &[Hook] = &[
    Hook::syscall("sys_enter_mount"),
    Hook::syscall("sys_exit_mount"),
];

/// The BPF LSM self-test (see `volguard_common::lsm_probe`).
pub const LSM_PROBE_HOOK: Hook = Hook {
    program: "sb_mount_probe",
    attach: Attach::Lsm { hook: "sb_mount" },
};

/// Why loading or attaching failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The object was refused (no BPF support, no privileges, map creation failed).
    #[error("loading the eBPF object failed (are you root on a kernel with BPF?)")]
    Object(#[source] EbpfError),
    /// The object does not contain a program the hook table names.
    #[error("program {program} is not in the eBPF object")]
    MissingProgram { program: &'static str },
    /// The object does not contain a map the agent needs.
    #[error("map {map} is not in the eBPF object")]
    MissingMap { map: &'static str },
    /// The kernel's BTF (needed for LSM programs) could not be read.
    #[error("reading kernel BTF from /sys/kernel/btf/vmlinux failed")]
    Btf(#[source] aya::BtfError),
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
        program: &'static str,
        action: &'static str,
        #[source]
        source: ProgramError,
    },
}

/// Loads the embedded object (maps created, no program loaded yet).
pub fn load() -> Result<Ebpf, LoadError> {
    EbpfLoader::new().load(OBJECT).map_err(LoadError::Object)
}

/// Starts forwarding the programs' aya-log records to `tracing`. The logger owns the log
/// map and must live as long as the programs; without it programs still run.
pub fn start_kernel_log(ebpf: &mut Ebpf) {
    match aya_log::EbpfLogger::init(ebpf) {
        Ok(logger) => {
            // SAFETY: the logger owns its ring buffer's fd for its whole life; the AsyncFd owns
            // the logger.
            let registered = unsafe { AsyncFd::register_with_interest(logger, Interest::READABLE) };
            let Ok(mut logger) = registered else {
                warn!(
                    "kernel log: cannot poll the log ring buffer; kernel log lines are not shown"
                );
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

/// Where tracefs is normally mounted; aya also looks under /sys/kernel/debug/tracing.
const TRACEFS: &str = "/sys/kernel/tracing";
const TRACEFS_IN_DEBUGFS: &str = "/sys/kernel/debug/tracing";

/// Tracepoints are found through tracefs; mount it when neither usual place has it.
fn ensure_tracefs() -> Result<(), LoadError> {
    let has_events = |dir: &str| std::path::Path::new(dir).join("events").is_dir();
    if has_events(TRACEFS) || has_events(TRACEFS_IN_DEBUGFS) {
        return Ok(());
    }
    debug!("mounting tracefs on {TRACEFS}");
    nix::mount::mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|errno| LoadError::Tracefs {
        path: TRACEFS,
        source: errno.into(),
    })
}

/// Loads and attaches every hook in `hooks`.
pub fn attach_all(ebpf: &mut Ebpf, hooks: &[Hook]) -> Result<(), LoadError> {
    if hooks
        .iter()
        .any(|h| matches!(h.attach, Attach::TracePoint { .. }))
    {
        ensure_tracefs()?;
    }
    for hook in hooks {
        attach(ebpf, hook)?;
        debug!(program = hook.program, attach = ?hook.attach, "attached");
    }
    Ok(())
}

fn attach(ebpf: &mut Ebpf, hook: &Hook) -> Result<(), LoadError> {
    let program = hook.program;
    let failed = |action| {
        move |source| LoadError::Program {
            program,
            action,
            source,
        }
    };
    let prog = ebpf
        .program_mut(program)
        .ok_or(LoadError::MissingProgram { program })?;
    match hook.attach {
        Attach::TracePoint { category, name } => {
            let tp: &mut TracePoint = prog.try_into().map_err(failed("type check"))?;
            tp.load().map_err(failed("load"))?;
            tp.attach(category, name).map_err(failed("attach"))?;
        }
        Attach::Lsm { hook: lsm_hook } => {
            let btf = Btf::from_sys_fs().map_err(LoadError::Btf)?;
            let lsm: &mut Lsm = prog.try_into().map_err(failed("type check"))?;
            lsm.load(lsm_hook, &btf).map_err(failed("load"))?;
            lsm.attach().map_err(failed("attach"))?;
        }
    }
    Ok(())
}
