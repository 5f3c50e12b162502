//! The stages of `volguard run` before its event loop, in order: [`probe`] the kernel
//! (mode, tracing backend), [`load`] the node model and the programs (or the mount
//! notices), [`build`] the running agent from them. `run` serves the HTTP listeners
//! between the first two and hands the result of the last to the loop.

use std::{collections::BTreeMap, path::Path, sync::Arc};

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use volguard_common::enforce::KernelLayout;

use super::{
    AgentError, RunOptions,
    feed::{Feed, NoticeFeed},
    loop_thread::LoopRuntime,
    running::{Parts, Running},
    startup::{StartedSource, start_facts_source, start_in_kernel, start_userspace},
};
use crate::{
    enforce::{self, ModeDecision, owners::OwnerStore, ownership::Ownership, quarantine::HeldNamespace},
    facts::Snapshot,
    kernel::{
        btf::{Btf, VMLINUX_BTF},
        loader::LoadedObject,
        lsm_probe,
        pins::Pins,
        program_stats::ProgramStats,
        reader::EventSource,
        trace_backend::{self, Backend, TraceDecision, WatchedNamespace},
    },
    model::explain,
    model::node::NodeModel,
    outputs::kernel_metrics::KernelCounts,
    outputs::served_state::ServedState,
    sys::mountns::namespace_of,
};

/// What the kernel probes decided.
pub(super) struct Probed {
    pub(super) decision: ModeDecision,
    pub(super) tracing: TraceDecision,
    /// The namespace whose mount notices the fanotify backend watches (none otherwise).
    pub(super) watched: Option<WatchedNamespace>,
}

/// Probes in-kernel refusal and the tracing backends (as the flags ask) and decides both.
pub(super) fn probe(opts: &RunOptions) -> Result<Probed, AgentError> {
    // One throw-away object for the tracing probe and the first refusal probe; its links
    // detach when it is dropped.
    let (probes, trampolines) = match (enforce::needs_probe(opts.mode), trace_backend::needs_probe(opts.trace_backend))
    {
        (false, false) => (enforce::Probes::default(), None),
        (refusal, tramp) => {
            let mut object = LoadedObject::load()?;
            let trampolines = tramp.then(|| trace_backend::probe(&mut object));
            let probes = if refusal { probe_refusal(opts.security_hooks, object)? } else { enforce::Probes::default() };
            (probes, trampolines)
        }
    };
    let decision = enforce::decide(opts.mode, &probes)?;
    info!("mode {}: {}", decision.mode, decision.reason);
    // Mount notices watch the namespace whose mount table the agent reads: kubelet's.
    let in_kernel = decision.in_kernel();
    let (fanotify, watched) =
        match trace_backend::needs_fanotify_probe(opts.trace_backend, in_kernel, trampolines.as_ref()) {
            true => {
                let (probe, watched) = trace_backend::probe_fanotify(&namespace_of(&opts.mountinfo));
                (Some(probe), watched)
            }
            false => (None, None),
        };
    let tracing = trace_backend::decide(opts.trace_backend, in_kernel, trampolines.as_ref(), fanotify.as_ref())?;
    tracing.log();
    Ok(Probed { decision, tracing, watched })
}

/// Tries each way the kernel could refuse, in order, until one refuses a probe mount: the
/// first on `object`, each later one on an object of its own (a probe takes its object's
/// counters).
fn probe_refusal(choice: enforce::HooksChoice, mut object: LoadedObject) -> Result<enforce::Probes, AgentError> {
    let mut probes = enforce::Probes::default();
    for (i, via) in choice.candidates().iter().enumerate() {
        if i > 0 {
            object = LoadedObject::load()?;
        }
        let report = lsm_probe::probe(&mut object, *via)?;
        let refuses = report.status == lsm_probe::LsmStatus::Active;
        probes.reports.push(report);
        if refuses {
            break;
        }
    }
    Ok(probes)
}

/// An earlier in-kernel agent's pinned programs would keep refusing from maps no agent
/// updates any more (a node switched to quarantine or audit in userspace): this agent
/// decides in userspace, so they go, and the log says so.
fn remove_in_kernel_pins(pins: &Pins) {
    match pins.uninstall() {
        Ok(true) => info!(
            "removed the pinned programs and state of an earlier in-kernel agent in {}: this agent decides in \
             userspace",
            pins.root().display()
        ),
        Ok(false) => {}
        Err(e) => warn!("removing an earlier in-kernel agent's pins in {} failed: {e}", pins.root().display()),
    }
}

/// The node model and what feeds the loop, ready for [`build`].
pub(super) struct Loaded {
    pub(super) model: NodeModel,
    pub(super) owners: OwnerStore,
    /// The programs (none with mount notices); unpinned links detach when it is dropped.
    pub(super) object: Option<LoadedObject>,
    pub(super) feed: Feed,
    /// The namespace the mount notices come from, for the quarantine to act in.
    pub(super) watched: Option<HeldNamespace>,
    /// The facts as they change from here on.
    pub(super) facts: watch::Receiver<Snapshot>,
    /// Kept while the loop runs, so a source that never sends leaves `facts` waiting.
    pub(super) keep_facts_open: watch::Sender<Snapshot>,
    /// Where conflicts go to become Kubernetes Events, when there is an API.
    pub(super) events: Option<mpsc::Sender<explain::Conflict>>,
}

/// Starts the facts source, reads the mount table into the node model, and loads the
/// programs: pinned and enforcing for the in-kernel modes, tracing only otherwise (none
/// with mount notices, whose watch starts first). Hands the probes' decisions back.
pub(super) async fn load(
    opts: &RunOptions,
    probed: Probed,
    shared: &Arc<ServedState>,
    kube: Option<kube::Client>,
    loop_runtime: &LoopRuntime,
) -> Result<(Loaded, ModeDecision, TraceDecision), AgentError> {
    let Probed { decision, tracing, watched } = probed;
    // Indexed before the mount table is read, so no detach falls between the two.
    let notices = match (tracing.backend, watched) {
        (Backend::Fanotify, Some(watched)) => Some(
            loop_runtime
                .register(|| NoticeFeed::start(watched, &opts.kubelet_root, shared.clone()))
                .map_err(|source| AgentError::Io { context: "listing the watched namespace's mounts", source })?,
        ),
        _ => None,
    };
    let StartedSource { initial, facts, keep_alive, events } = start_facts_source(&opts.facts_source, kube).await?;
    let mut model = NodeModel::new(&opts.kubelet_root, &opts.mountinfo, opts.single_pod_volumes.clone(), initial)
        .map_err(|source| AgentError::Io { context: "reading the mount table", source })?;
    model.log_summary();

    let pins = Pins::new(&opts.pin_root);
    // Parsed once and dropped once the offsets are taken (it is megabytes).
    let btf = Btf::from_file(Path::new(VMLINUX_BTF));
    let (object, owners) = match decision.in_kernel() {
        true => {
            let (object, owners) = start_in_kernel(opts, &decision, &tracing, &pins, &btf?, &mut model)?;
            (Some(object), owners)
        }
        false => {
            remove_in_kernel_pins(&pins);
            let mut owners = OwnerStore::Userspace(Ownership::new(model.single_pod().clone()));
            // No program at all with mount notices.
            let object = match notices.is_some() {
                true => None,
                false => {
                    // Userspace modes use the offsets only to note each caller's mount namespace.
                    let layout = btf.and_then(|btf| btf.kernel_layout()).unwrap_or_else(|e| {
                        warn!(
                            "kernel struct offsets unavailable ({e}): events carry no mount namespace, so \
                             quarantine reaches only mounts whose process is still alive"
                        );
                        KernelLayout::default()
                    });
                    Some(start_userspace(opts, &decision, &tracing, layout, &model)?)
                }
            };
            for fix in model.plan_owners(&BTreeMap::new()) {
                owners.apply(&fix)?;
            }
            (object, owners)
        }
    };
    let (feed, watched, object) = match (notices, object) {
        (Some((notices, held)), object) => {
            if opts.bpf_stats {
                info!("--bpf-stats: the fanotify backend runs no BPF program, so there is nothing to count");
            }
            (Feed::Notices(notices), Some(held), object)
        }
        (None, Some(mut object)) => {
            let events = loop_runtime.register(|| EventSource::new(&mut object))?;
            let (counters, decode_errors) = events.shared_counts();
            let programs = Arc::new(ProgramStats::new(&object, opts.bpf_stats));
            shared.metrics.node_opens.add_source(counters.clone());
            shared.metrics.kernel.attach(KernelCounts { counters, decode_errors, programs });
            (Feed::Syscalls(events), None, Some(object))
        }
        (None, None) => unreachable!("a syscall backend always loads the object"),
    };
    let loaded = Loaded { model, owners, object, feed, watched, facts, keep_facts_open: keep_alive, events };
    Ok((loaded, decision, tracing))
}

/// The running agent, caught up with the node (see [`Running::build`]).
pub(super) fn build<'a>(
    opts: &'a RunOptions,
    decision: &'a ModeDecision,
    parts: Parts,
    shared: &Arc<ServedState>,
) -> Result<Running<'a>, AgentError> {
    Running::build(opts, decision, parts, shared)
}
