//! `volguard run`: the node agent. Chooses the mode by probing the kernel, attaches the
//! programs (pinned, adopting an earlier agent's, when the kernel enforces), then
//! handles events until SIGTERM or Ctrl-C.

use std::{
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use aya::Ebpf;
use tracing::{debug, info, warn};
use volguard_common::{
    enforce::{KernelLayout, MountOp, kernel_mode, single_pod_reason},
    mount_api::AT_FDCWD,
    mount_flags::without_magic,
};

use crate::{
    bpf::{
        counters::{Counters, LostEvents},
        loader::{self, LoadError},
        reader::EventReader,
    },
    btf::{Btf, BtfError, VMLINUX_BTF},
    decode::{Call, Event, RawString, Record},
    enforce::{
        self, Mode, ModeChoice, ModeDecision, ModeError,
        kernel::{self, KernelError},
        ownership::{Ownership, Publish},
        pins::{PinError, Pins},
        quarantine,
        roots::PublishedRoots,
    },
    kubelet::{PublishTarget, publish_target},
    lsm_probe::{self, ProbeError},
    mount_table::{self, MountTable, Rebuilt},
    render,
    signals::StopSignals,
};

/// Everything `volguard run` is told.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub kubelet_root: PathBuf,
    pub single_pod_volumes: Vec<String>,
    pub mode: ModeChoice,
    pub pin_root: PathBuf,
    pub keep_enforcement_on_exit: bool,
    pub print_events: bool,
    /// Mount table read at start-up to rebuild ownership (the host's by default).
    pub mountinfo: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Mode(#[from] ModeError),
    #[error("probing BPF LSM: {0}")]
    Probe(#[from] ProbeError),
    #[error("reading kernel BTF: {0}")]
    Btf(#[from] BtfError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error("kubelet root {0} is not a directory")]
    KubeletRoot(String),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// The line printed once the programs are attached and the state is loaded.
pub const READY: &str = "volguard: ready:";

pub async fn run(opts: RunOptions) -> Result<(), AgentError> {
    if !opts.kubelet_root.is_dir() {
        return Err(AgentError::KubeletRoot(opts.kubelet_root.display().to_string()));
    }
    let probe = match enforce::needs_probe(opts.mode) {
        true => Some(lsm_probe::probe(&mut loader::load()?)?),
        false => None,
    };
    let decision = enforce::decide(opts.mode, probe.as_ref())?;
    info!("mode {}: {}", decision.mode, decision.reason);

    let pins = Pins::new(&opts.pin_root);
    let rebuilt = rebuild_from_mount_table(&opts)?;
    let layout = Btf::from_file(Path::new(VMLINUX_BTF)).and_then(|btf| btf.kernel_layout());
    let mut ebpf = match decision.in_kernel {
        true => start_in_kernel(&opts, &decision, &pins, layout?, &rebuilt)?,
        // Userspace modes use the offsets only to note each caller's mount namespace.
        false => start_userspace(
            &opts,
            layout.unwrap_or_else(|e| {
                warn!(
                    "kernel struct offsets unavailable ({e}): events carry no mount namespace, so quarantine \
                   reaches only mounts whose process is still alive"
                );
                KernelLayout::default()
            }),
        )?,
    };
    let mut reader = EventReader::new(&mut ebpf)?;
    let mut ownership = Ownership::new(opts.single_pod_volumes.iter().cloned());
    if !decision.in_kernel {
        for (volume, owner) in &rebuilt.owners {
            ownership.seed(volume, &owner.pod_uid);
        }
    }
    // Before announcing readiness: a SIGTERM from then on must stop us cleanly.
    let mut stop =
        StopSignals::install().map_err(|source| AgentError::Io { context: "installing signal handlers", source })?;
    eprintln!("{READY} mode={} ({})", decision.mode, decision.reason);

    let result = event_loop(&opts, &decision, &pins, &ebpf, &mut reader, &mut ownership, &mut stop).await;
    if decision.in_kernel && !opts.keep_enforcement_on_exit {
        info!("removing pinned programs and state (--keep-enforcement-on-exit=false)");
        pins.uninstall()?;
    }
    result
}

/// Ownership already on the node: every mounted publish target of a single-pod volume.
fn rebuild_from_mount_table(opts: &RunOptions) -> Result<Rebuilt, AgentError> {
    let table = MountTable::read(&opts.mountinfo)
        .map_err(|source| AgentError::Io { context: "reading the mount table", source })?;
    for (line, reason) in &table.skipped {
        warn!("{} line {line} skipped: {reason}", opts.mountinfo.display());
    }
    let single_pod = opts.single_pod_volumes.iter().cloned().collect();
    let rebuilt = mount_table::owners(&table, &opts.kubelet_root, &single_pod);
    for (volume, owner) in &rebuilt.owners {
        info!("volume {volume} is published for pod {} (mount table: {})", owner.pod_uid, owner.mount_point.display());
    }
    for (volume, owner, other) in &rebuilt.conflicts {
        warn!(
            "CONFLICT found at start-up: single-pod volume {volume} is published for pod {owner} and also for pod {other}"
        );
    }
    Ok(rebuilt)
}

/// Loads with pinned maps, configures the LSM programs and swaps the pinned links.
fn start_in_kernel(
    opts: &RunOptions,
    decision: &ModeDecision,
    pins: &Pins,
    layout: KernelLayout,
    rebuilt: &Rebuilt,
) -> Result<Ebpf, AgentError> {
    pins.prepare()?;
    let adopting = pins.has_state();
    let mut ebpf = loader::load_pinned(pins)?;
    loader::start_kernel_log(&mut ebpf);
    let mode = kernel::kernel_mode_for(decision.mode, true);
    kernel::configure(&mut ebpf, layout, &opts.kubelet_root, mode)?;
    let volumes = opts.single_pod_volumes.iter().map(String::as_str);
    kernel::add_single_pod_volumes(&mut ebpf, volumes, single_pod_reason::READ_WRITE_ONCE_POD)?;
    // Before the LSM programs attach, so no other pod can claim a volume already mounted.
    kernel::seed_owners(&mut ebpf, rebuilt)?;
    // Tracing first: the exit tracepoints settle the claims the LSM programs make.
    let mut links = loader::attach_all_taking_links(&mut ebpf, &loader::trace_hooks())?;
    links.extend(loader::attach_all_taking_links(&mut ebpf, &loader::enforce_hooks())?);
    let replaced = pins.install_links(links)?;
    let owners = kernel::owners(&ebpf)?;
    if adopting {
        info!(
            "adopted the pinned enforcement state in {}: {} owned volumes, {replaced} links replaced",
            pins.root().display(),
            owners.len()
        );
    }
    for (volume, pod) in owners {
        info!("volume {volume} is owned by pod {pod}");
    }
    Ok(ebpf)
}

fn start_userspace(opts: &RunOptions, layout: KernelLayout) -> Result<Ebpf, AgentError> {
    let mut ebpf = loader::load()?;
    loader::start_kernel_log(&mut ebpf);
    kernel::configure(&mut ebpf, layout, &opts.kubelet_root, kernel_mode::OFF)?;
    loader::attach_all(&mut ebpf, &loader::trace_hooks())?;
    Ok(ebpf)
}

async fn event_loop(
    opts: &RunOptions,
    decision: &ModeDecision,
    pins: &Pins,
    ebpf: &Ebpf,
    reader: &mut EventReader,
    ownership: &mut Ownership,
    stop: &mut StopSignals,
) -> Result<(), AgentError> {
    let io = |context| move |source| AgentError::Io { context, source };
    let counters = Counters::new(ebpf)?;
    let mut roots = match decision.in_kernel {
        true => Some(PublishedRoots::open(pins)?),
        false => None,
    };
    let mut lost = LostEvents::default();
    let mut lost_check = tokio::time::interval(Duration::from_secs(1));
    let own_pid = std::process::id();
    loop {
        tokio::select! {
            batch = reader.next_batch(|record| match record {
                Ok(Record::Conflict(c)) => warn!("{}", render::conflict(&c)),
                Ok(Record::Syscall(event)) => {
                    if opts.print_events {
                        println!("{}", render::line(&event));
                    }
                    if event.caller.tgid != own_pid {
                        match roots.as_mut() {
                            Some(roots) => record_roots(&opts.kubelet_root, roots, &event),
                            None => observe(&opts.kubelet_root, decision.mode, ownership, &event),
                        }
                    }
                }
                Err(e) => warn!("skipped an undecodable record: {e}"),
            }) => { batch.map_err(io("reading the event ring buffer"))?; }
            _ = lost_check.tick() => { lost.check(&counters); }
            _ = stop.recv() => break,
        }
    }
    info!("stopping");
    Ok(())
}

/// The path a successful publish-capable syscall attached something at, when the event
/// names it absolutely (userspace sees strings, not resolved paths).
fn attached_target(call: &Call) -> Option<&RawString> {
    match call {
        Call::Mount { target, flags, .. } if MountOp::of(without_magic(*flags)).attaches() => Some(target),
        Call::MoveMount { to_dfd, to_path, .. } if *to_dfd == AT_FDCWD || to_path.as_bytes().starts_with(b"/") => {
            Some(to_path)
        }
        _ => None,
    }
}

fn classify(root: &Path, path: &RawString) -> Option<(PublishTarget, PathBuf)> {
    if path.truncated {
        return None;
    }
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(path.as_bytes()));
    Some((publish_target(root, &path)?, path))
}

/// What a successful syscall did to kubelet publish targets.
enum PublishChange {
    Published(PublishTarget, PathBuf),
    Unpublished(PublishTarget),
}

fn publish_change(root: &Path, event: &Event) -> Option<PublishChange> {
    if event.ret != 0 {
        return None;
    }
    if let Call::Umount { target, .. } = &event.call {
        return classify(root, target).map(|(t, _)| PublishChange::Unpublished(t));
    }
    let path = attached_target(&event.call)?;
    let classified = classify(root, path);
    if classified.is_none() {
        debug!("not a recognisable publish target: {}", render::line(event));
    }
    classified.map(|(t, p)| PublishChange::Published(t, p))
}

/// In-kernel modes: keep the published-root map current for the cross-pod source check.
fn record_roots(root: &Path, roots: &mut PublishedRoots, event: &Event) {
    match publish_change(root, event) {
        Some(PublishChange::Published(target, path)) => roots.published(&event.caller, &target, &path),
        Some(PublishChange::Unpublished(target)) => roots.unpublished(&target),
        None => {}
    }
}

/// Userspace ownership for modes where the kernel does not decide.
fn observe(root: &Path, mode: Mode, ownership: &mut Ownership, event: &Event) {
    let (target, path) = match publish_change(root, event) {
        None => return,
        Some(PublishChange::Unpublished(t)) => {
            if ownership.unpublished(&t) {
                info!("volume {} released: pod {} unmounted its publish target", t.volume, t.pod_uid);
            }
            return;
        }
        Some(PublishChange::Published(t, p)) => (t, p),
    };
    match ownership.published(&target) {
        Publish::Untracked | Publish::Owner => {}
        Publish::Claimed => info!("volume {} claimed by pod {}", target.volume, target.pod_uid),
        Publish::Conflict { owner } if mode == Mode::Quarantine => match quarantine::quarantine(&event.caller, path) {
            Ok(done) => warn!(
                "CONFLICT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it; \
                     detached {} mount(s) and masked the target read-only in {} ({} µs)",
                target.volume, target.pod_uid, done.detached, done.namespace, done.micros
            ),
            Err(e) => warn!(
                "CONFLICT NOT quarantined: volume \"{}\" is owned by pod {owner}; pod {} published it: {e}",
                target.volume, target.pod_uid
            ),
        },
        Publish::Conflict { owner } => warn!(
            "CONFLICT audited (allowed): volume \"{}\" is owned by pod {owner}; pod {} published it",
            target.volume, target.pod_uid
        ),
    }
}
