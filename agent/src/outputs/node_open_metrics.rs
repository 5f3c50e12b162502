//! `volguard_node_process_opens_total{command}`: opens of owned single-pod volumes' files by
//! node processes (in no pod: kubelet's fsGroup walk, the runtime, an administrator's
//! shell), which the open guard lets through, by command. Read at scrape time from the
//! guard that runs: the kernel's map (BPF LSM) or the fanotify reporter's count. The
//! family is exported from the start, with no sample until such an open is counted.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{MetricType, counter::ConstCounter},
};

use crate::kernel::counters::ReadNodeOpens;

pub const NODE_PROCESS_OPENS: &str = "volguard_node_process_opens";

#[derive(Default)]
pub struct NodeOpenMetrics {
    sources: Mutex<Vec<Arc<dyn ReadNodeOpens>>>,
}

impl fmt::Debug for NodeOpenMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("NodeOpenMetrics").field("sources", &sources).finish()
    }
}

impl NodeOpenMetrics {
    /// Exports `source`'s counts too (summed with the others' by command).
    pub fn add_source(&self, source: Arc<dyn ReadNodeOpens>) {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner).push(source);
    }
}

impl Collector for NodeOpenMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut opens = std::collections::BTreeMap::<String, u64>::new();
        for source in self.sources.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            for (command, count) in source.by_command() {
                *opens.entry(command).or_default() += count;
            }
        }
        let help = "Opens of owned single-pod volumes' files by node processes (in no pod), let through, by \
                    command; commands beyond the first 64 together as \"other\".";
        let mut family = encoder.encode_descriptor(NODE_PROCESS_OPENS, help, None, MetricType::Counter)?;
        for (command, count) in opens {
            ConstCounter::new(count).encode(family.encode_family(&[("command", command.as_str())])?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use prometheus_client::{encoding::text::encode, registry::Registry};

    use super::*;

    struct Fixed(&'static [(&'static str, u64)]);
    impl ReadNodeOpens for Fixed {
        fn by_command(&self) -> BTreeMap<String, u64> {
            self.0.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect()
        }
    }

    #[test]
    fn the_family_is_there_before_any_open_and_sums_its_sources_by_command() {
        let metrics = Arc::new(NodeOpenMetrics::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics.clone()));
        let text = || {
            let mut out = String::new();
            encode(&mut out, &registry).unwrap();
            out
        };
        assert!(text().contains("# TYPE volguard_node_process_opens counter"), "{}", text());
        metrics.add_source(Arc::new(Fixed(&[("kubelet", 3), ("other", 1)])));
        metrics.add_source(Arc::new(Fixed(&[("kubelet", 2)])));
        let out = text();
        assert!(out.contains("volguard_node_process_opens_total{command=\"kubelet\"} 5"), "{out}");
        assert!(out.contains("volguard_node_process_opens_total{command=\"other\"} 1"), "{out}");
    }
}
