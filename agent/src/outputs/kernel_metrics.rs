//! The kernel's counters and the ring-buffer records that did not decode, read at scrape
//! time by a collector: `volguard_kernel_events_total{counter}` (every slot of the
//! `COUNTERS` map: lost events, unpaired exits, claims, rollbacks, enforcement errors, ...)
//! and `volguard_decode_errors_total{reason}`. Nothing is exported until the programs are
//! loaded.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::counter::ConstCounter,
};
use volguard_common::counters::Counter;

use crate::kernel::{counters::ReadCounter, reader::DecodeErrors};

pub const KERNEL_EVENTS: &str = "volguard_kernel_events";
pub const DECODE_ERRORS: &str = "volguard_decode_errors";

/// Where the collector reads from, once the programs are loaded.
#[derive(Clone)]
pub struct KernelCounts {
    pub counters: Arc<dyn ReadCounter>,
    pub decode_errors: Arc<DecodeErrors>,
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

    /// The current value of `counter`, when attached.
    pub fn get(&self, counter: Counter) -> Option<u64> {
        self.source.get().map(|s| s.counters.read(counter))
    }
}

impl Collector for KernelMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(source) = self.source.get() else { return Ok(()) };
        let help = "Events the eBPF programs counted (per-CPU map COUNTERS, summed), by counter.";
        let mut family =
            encoder.encode_descriptor(KERNEL_EVENTS, help, None, prometheus_client::metrics::MetricType::Counter)?;
        for counter in Counter::ALL {
            let labels = [("counter", counter.name())];
            ConstCounter::new(source.counters.read(counter)).encode(family.encode_family(&labels)?)?;
        }
        let help = "Ring-buffer records skipped because they did not decode, by reason.";
        let mut family =
            encoder.encode_descriptor(DECODE_ERRORS, help, None, prometheus_client::metrics::MetricType::Counter)?;
        for (reason, count) in source.decode_errors.by_reason() {
            let labels = [("reason", reason)];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl ReadCounter for Fixed {
        fn read(&self, counter: Counter) -> u64 {
            counter as u64 * 10
        }
    }

    #[test]
    fn every_kernel_counter_and_decode_reason_is_exported_at_scrape_time() {
        let metrics = crate::outputs::metrics::Metrics::new();
        assert!(!metrics.encode().contains(KERNEL_EVENTS), "nothing before the programs are loaded");
        metrics.kernel.attach(KernelCounts { counters: Arc::new(Fixed), decode_errors: Arc::default() });
        let text = metrics.encode();
        for counter in Counter::ALL {
            let line = format!("{KERNEL_EVENTS}_total{{counter=\"{}\"}} {}", counter.name(), counter as u64 * 10);
            assert!(text.contains(&line), "{line} missing from:\n{text}");
        }
        assert!(text.contains(&format!("{DECODE_ERRORS}_total{{reason=\"too_short\"}} 0")), "{text}");
        assert_eq!(metrics.kernel.get(Counter::EnforceErrors), Some(100));
    }
}
