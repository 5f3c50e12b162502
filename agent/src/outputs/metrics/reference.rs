//! The reference of every exported metric family (docs/metrics.md's table, `volguard
//! metrics-reference`), read off a registry with one sample of each.

use super::*;

/// One exported metric family, as the reference lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetricDoc {
    /// The name as queried (`_total` for counters; histograms add `_bucket`/`_sum`/`_count`).
    pub name: String,
    pub kind: String,
    pub help: String,
    pub labels: Vec<String>,
}

/// Every family the agent exports, read back from a registry in which each family has
/// one sample series, so the reference can never drift from the code.
// Long by design: one sample of every family, in one registry.
pub fn reference() -> Vec<MetricDoc> {
    use crate::model::checks::{Check, Severity};
    let m = Metrics::new();
    m.operations.storage_operation(
        crate::model::volume_ops::volume_plugin(Some("x")),
        OperationName::VolumeMount,
        true,
        0.0,
    );
    m.operations.syscall("mount", true);
    m.conflicts.conflict(None, ConflictAction::Refused, Route::Publish);
    m.conflicts.set_single_pod(SinglePodCounts::default());
    m.conflicts.mask_removed(MaskRemoval::PodGone);
    m.mode.set_mode(
        &crate::enforce::decide(crate::enforce::ModeChoice::Quarantine, &Default::default())
            .expect("quarantine always runs"),
    );
    m.mode.set_trace_backend(
        &crate::kernel::trace_backend::decide(
            crate::kernel::trace_backend::BackendChoice::Tracepoints,
            false,
            None,
            None,
        )
        .expect("tracepoints always run"),
    );
    m.notifications.notice(crate::outputs::notification_metrics::NoticeKind::Attach);
    m.notifications.skipped(crate::outputs::notification_metrics::SkipReason::GoneBeforeRead);
    m.notifications.resynced();
    let finding = Finding {
        check: Check::VolDataUnreadable,
        severity: Severity::Info,
        subject: String::new(),
        message: String::new(),
    };
    m.findings.set_csi([("x", "v")], [("x", &finding)]);
    m.findings.set_node_findings([&finding]);
    m.facts.set_source(&Origin::None, false, None);
    struct NoKernel;
    impl crate::kernel::counters::ReadCounter for NoKernel {
        fn read(&self, _: volguard_common::counters::Counter) -> u64 {
            0
        }
    }
    // Counting, so that the program-run families are documented too.
    let programs = FixedRuns {
        counting: true,
        runs: vec![ProgramRuns { program: "sys_enter_mount".into(), runs: 0, run_time: Duration::ZERO }],
    };
    m.kernel.attach(crate::outputs::kernel_metrics::KernelCounts {
        counters: Arc::new(NoKernel),
        decode_errors: Arc::default(),
        programs: Arc::new(programs),
    });
    // A node process's open, so that the family's label is documented.
    let node_opens = crate::guard::node_opens::NodeOpenCounts::default();
    node_opens.count("kubelet");
    m.node_opens.add_source(Arc::new(node_opens));
    let text = m.encode();
    let mut docs: Vec<MetricDoc> = Vec::new();
    // OpenMetrics writes HELP, then TYPE, then the samples.
    let mut help = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, h)| h).to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = if kind == "counter" { format!("{name}_total") } else { name.to_owned() };
            docs.push(MetricDoc { name, kind: kind.into(), help: std::mem::take(&mut help), labels: Vec::new() });
        } else if !line.starts_with('#')
            && let (Some(doc), Some((_, labels))) = (docs.last_mut(), line.split_once('{'))
            && doc.labels.is_empty()
        {
            let labels = labels.split('}').next().unwrap_or("");
            doc.labels = labels
                .split(',')
                .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_owned()))
                .filter(|k| k != "le")
                .collect();
        }
    }
    docs
}

/// The reference as a Markdown table (docs/metrics.md, `volguard metrics-reference`).
pub fn reference_markdown() -> String {
    let mut out = String::from("| metric | type | labels | help |\n|---|---|---|---|\n");
    for doc in reference() {
        let labels: Vec<String> = doc.labels.iter().map(|l| format!("`{l}`")).collect();
        out += &format!("| `{}` | {} | {} | {} |\n", doc.name, doc.kind, labels.join(", "), doc.help);
    }
    out
}
