//! The kernel's counters and the ring-buffer records that did not decode, read at scrape
//! time by a collector: `volguard_kernel_events_total{counter}` (every slot of the
//! `COUNTERS` map: lost events, unpaired exits, claims, rollbacks, enforcement errors, ...),
//! `volguard_decode_errors_total{reason}`, and what each program costs as the kernel counts
//! it (`volguard_bpf_program_runs_total{program}`, `volguard_bpf_program_run_seconds_total`,
//! while `volguard_bpf_stats_enabled` is 1). Nothing is exported until the programs are
//! loaded.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter, gauge::ConstGauge},
};
use volguard_common::counters::Counter;

use crate::kernel::{
    counters::ReadCounter,
    program_stats::{ProgramRuns, ReadProgramRuns},
    reader::DecodeErrors,
};

pub const KERNEL_EVENTS: &str = "volguard_kernel_events";
pub const DECODE_ERRORS: &str = "volguard_decode_errors";
pub const BPF_STATS_ENABLED: &str = "volguard_bpf_stats_enabled";
pub const PROGRAM_RUNS: &str = "volguard_bpf_program_runs";
pub const PROGRAM_RUN_SECONDS: &str = "volguard_bpf_program_run_seconds";

/// Where the collector reads from, once the programs are loaded.
#[derive(Clone)]
pub struct KernelCounts {
    pub counters: Arc<dyn ReadCounter>,
    pub decode_errors: Arc<DecodeErrors>,
    pub programs: Arc<dyn ReadProgramRuns>,
}

#[derive(Default)]
pub struct KernelMetrics {
    source: OnceLock<KernelCounts>,
}

impl fmt::Debug for KernelMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelMetrics").field("attached", &self.source.get().is_some()).finish()
    }
}

impl KernelMetrics {
    /// Starts exporting from `counts` (the first call wins: one kernel per agent).
    pub fn attach(&self, counts: KernelCounts) {
        let _ = self.source.set(counts);
    }

    /// Whether the kernel counts now, and each program's counts (`None` before the
    /// programs are loaded, or where none is: quarantine with fanotify).
    pub fn program_runs(&self) -> Option<(bool, Vec<ProgramRuns>)> {
        let programs = &self.source.get()?.programs;
        Some((programs.counting(), programs.program_runs()))
    }

    /// The current value of `counter`, when attached.
    pub fn get(&self, counter: Counter) -> Option<u64> {
        self.source.get().map(|s| s.counters.read(counter))
    }
}

impl Collector for KernelMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(source) = self.source.get() else { return Ok(()) };
        let help = "Events the eBPF programs counted (per-CPU map COUNTERS, summed), by counter.";
        let mut family = encoder.encode_descriptor(KERNEL_EVENTS, help, None, MetricType::Counter)?;
        for counter in Counter::ALL {
            let labels = [("counter", counter.name())];
            ConstCounter::new(source.counters.read(counter)).encode(family.encode_family(&labels)?)?;
        }
        let help = "Ring-buffer records skipped because they did not decode, by reason.";
        let mut family = encoder.encode_descriptor(DECODE_ERRORS, help, None, MetricType::Counter)?;
        for (reason, count) in source.decode_errors.by_reason() {
            let labels = [("reason", reason)];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        encode_program_runs(source.programs.as_ref(), &mut encoder)
    }
}

/// The run-time statistics: whether the kernel counts, and (only then: the counts stand
/// still while it does not) each program's runs and time.
fn encode_program_runs(programs: &dyn ReadProgramRuns, encoder: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
    let counting = programs.counting();
    let help = "1 while the kernel counts BPF program run time and runs (volguard --bpf-stats, or the sysctl \
                kernel.bpf_stats_enabled), else 0.";
    ConstGauge::new(i64::from(counting)).encode(encoder.encode_descriptor(
        BPF_STATS_ENABLED,
        help,
        None,
        MetricType::Gauge,
    )?)?;
    if !counting {
        return Ok(());
    }
    let runs = programs.program_runs();
    let help = "Runs of each of volguard's eBPF programs, as the kernel counts them while statistics are on.";
    let mut family = encoder.encode_descriptor(PROGRAM_RUNS, help, None, MetricType::Counter)?;
    for run in &runs {
        ConstCounter::new(run.runs).encode(family.encode_family(&[("program", run.program.as_str())])?)?;
    }
    let help = "Time spent in each of volguard's eBPF programs, as the kernel counts it while statistics are on.";
    let mut family = encoder.encode_descriptor(PROGRAM_RUN_SECONDS, help, None, MetricType::Counter)?;
    for run in &runs {
        ConstCounter::new(run.run_time.as_secs_f64())
            .encode(family.encode_family(&[("program", run.program.as_str())])?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kernel::program_stats::FixedRuns;

    struct Fixed;
    impl ReadCounter for Fixed {
        fn read(&self, counter: Counter) -> u64 {
            counter as u64 * 10
        }
    }

    fn counts(programs: FixedRuns) -> KernelCounts {
        KernelCounts { counters: Arc::new(Fixed), decode_errors: Arc::default(), programs: Arc::new(programs) }
    }

    fn one_program(runs: u64, nanos: u64) -> Vec<ProgramRuns> {
        vec![ProgramRuns { program: "sys_enter_mount".into(), runs, run_time: Duration::from_nanos(nanos) }]
    }

    #[test]
    fn every_kernel_counter_and_decode_reason_is_exported_at_scrape_time() {
        let metrics = crate::outputs::metrics::Metrics::new();
        assert!(!metrics.encode().contains(KERNEL_EVENTS), "nothing before the programs are loaded");
        metrics.kernel.attach(counts(FixedRuns { counting: false, runs: one_program(0, 0) }));
        let text = metrics.encode();
        for counter in Counter::ALL {
            let line = format!("{KERNEL_EVENTS}_total{{counter=\"{}\"}} {}", counter.name(), counter as u64 * 10);
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
        assert!(text.contains(&format!("{DECODE_ERRORS}_total{{reason=\"too_short\"}} 0")), "{text}");
        assert_eq!(metrics.kernel.get(Counter::EnforceErrors), Some(100));
    }

    #[test]
    fn program_runs_are_exported_only_while_the_kernel_counts_them() {
        let metrics = crate::outputs::metrics::Metrics::new();
        metrics.kernel.attach(counts(FixedRuns { counting: false, runs: one_program(0, 0) }));
        let text = metrics.encode();
        assert!(text.contains(&format!("{BPF_STATS_ENABLED} 0")), "{text}");
        assert!(!text.contains(PROGRAM_RUNS), "counts that stand still are not shown as if they were real:\n{text}");

        let metrics = crate::outputs::metrics::Metrics::new();
        metrics.kernel.attach(counts(FixedRuns { counting: true, runs: one_program(42, 1_500_000_000) }));
        let text = metrics.encode();
        assert!(text.contains(&format!("{BPF_STATS_ENABLED} 1")), "{text}");
        assert!(text.contains(&format!("{PROGRAM_RUNS}_total{{program=\"sys_enter_mount\"}} 42")), "{text}");
        assert!(text.contains(&format!("{PROGRAM_RUN_SECONDS}_total{{program=\"sys_enter_mount\"}} 1.5")), "{text}");
    }
}
