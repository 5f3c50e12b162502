//! What the agent's eBPF programs cost the node: each program's run count and run time as
//! the kernel counts them (`bpf_prog_info.run_cnt`/`run_time_ns`), read at scrape time.
//!
//! The kernel counts only while run-time statistics are on (`BPF_ENABLE_STATS`, or the
//! sysctl `kernel.bpf_stats_enabled`), and turning them on is node-wide: every BPF
//! program of every tool on the node (a CNI's per-packet programs included) then reads
//! the clock twice per run. So the agent turns them on only when asked (`--bpf-stats`).

use std::{collections::BTreeMap, os::fd::OwnedFd, time::Duration};

use aya::{
    programs::loaded_programs,
    sys::{Stats, enable_stats},
};
use tracing::{info, warn};

use super::loader::LoadedObject;

/// Statistics turned on by writing this sysctl (it does not show those another process
/// turned on with `BPF_ENABLE_STATS`, which the agent cannot see).
const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One program's counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramRuns {
    /// The program's name in the object.
    pub program: String,
    pub runs: u64,
    pub run_time: Duration,
}

/// Reads the agent's programs' counts: the kernel, or a stand-in (the metrics reference).
pub trait ReadProgramRuns: Send + Sync {
    /// Whether the kernel is counting now.
    fn counting(&self) -> bool;
    /// Every attached program's counts, by name.
    fn program_runs(&self) -> Vec<ProgramRuns>;
}

/// The agent's loaded programs by kernel id, and the statistics it turned on (they stay
/// on while the descriptor is open).
pub struct ProgramStats {
    names: BTreeMap<u32, String>,
    enabled: Option<OwnedFd>,
}

impl ProgramStats {
    /// Notes the ids of `object`'s loaded programs; with `enable`, turns run-time
    /// statistics on for this process's life (a refusal is logged: the counts then stay 0).
    pub fn new(object: &LoadedObject, enable: bool) -> Self {
        let names = object
            .ebpf
            .programs()
            .filter_map(|(name, program)| Some((program.info().ok()?.id(), name.to_owned())))
            .collect();
        let enabled = enable
            .then(|| {
                enable_stats(Stats::RunTime)
                    .inspect(|_| {
                        info!("BPF run-time statistics on (--bpf-stats): every BPF program on the node is timed")
                    })
                    .inspect_err(|e| warn!("BPF run-time statistics refused ({e}): the program run metrics stay 0"))
                    .ok()
            })
            .flatten();
        Self { names, enabled }
    }
}

impl ReadProgramRuns for ProgramStats {
    fn counting(&self) -> bool {
        self.enabled.is_some() || std::fs::read_to_string(STATS_SYSCTL).is_ok_and(|v| v.trim() != "0")
    }

    fn program_runs(&self) -> Vec<ProgramRuns> {
        // Every program on the node is listed (aya reads a program's info only by id or
        // pin); ours are a few of them. An unreadable entry (a program unloaded meanwhile)
        // is skipped.
        let mut runs: Vec<ProgramRuns> = loaded_programs()
            .filter_map(Result::ok)
            .filter_map(|info| {
                let program = self.names.get(&info.id())?.clone();
                Some(ProgramRuns { program, runs: info.run_count(), run_time: info.run_time() })
            })
            .collect();
        runs.sort_by(|a, b| a.program.cmp(&b.program));
        runs
    }
}

/// Fixed counts, where there is no kernel (the metrics reference, tests).
pub struct FixedRuns {
    pub counting: bool,
    pub runs: Vec<ProgramRuns>,
}

impl ReadProgramRuns for FixedRuns {
    fn counting(&self) -> bool {
        self.counting
    }

    fn program_runs(&self) -> Vec<ProgramRuns> {
        self.runs.clone()
    }
}
