//! Every metric the agent exports, in groups that register themselves in one registry.
//! Label values come from closed sets (enums) or from bounded API names (drivers, PVCs that
//! exist); per-PVC series are removed when the PVC goes away, and their number is capped.
//! `storage_operation_duration_seconds` copies kubelet's name, labels and buckets (K8S
//! `pkg/volume/util/metrics.go`) so kubelet's SLO queries work on our series unchanged.

use std::{
    collections::HashSet,
    sync::{Arc, Mutex, atomic::AtomicU64},
    time::{Duration, SystemTime},
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

use super::{
    kernel_metrics::KernelMetrics,
    metrics_auth::AccessMetrics,
    node_open_metrics::NodeOpenMetrics,
    notification_metrics::{NotificationMetrics, ReasonLabels},
};
use crate::{
    enforce::ModeDecision,
    facts::{ClaimRef, Origin},
    kernel::program_stats::{FixedRuns, ProgramRuns},
    kernel::trace_backend::TraceDecision,
    model::access::Route,
    model::checks::Finding,
    model::explain::ConflictAction,
    model::mounts::{SinglePodState, VolumeView},
    model::volume_ops::OperationName,
};

mod reference;
pub use reference::{MetricDoc, reference, reference_markdown};

/// kubelet's bucket boundaries for `storage_operation_duration_seconds`, in seconds.
pub const STORAGE_OPERATION_BUCKETS: [f64; 13] =
    [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0];

/// At most this many (namespace, PVC, action) conflict series; more go to `_other`.
pub const MAX_CONFLICT_SERIES: usize = 10_000;
/// The label value that stands for everything beyond the cap, or for an unknown PVC.
pub const OTHER: &str = "_other";
pub const UNKNOWN: &str = "_unknown";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StorageOperationLabels {
    pub volume_plugin: String,
    pub operation_name: String,
    pub status: String,
    pub migrated: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConflictLabels {
    pub namespace: String,
    pub persistentvolumeclaim: String,
    pub action: String,
    /// How the volume was reached: `publish`, `bind`, `clone`, `recursive`, `device`,
    /// `propagated`, `open`, `ancestor` or `change`.
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SyscallLabels {
    syscall: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModeLabels {
    mode: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TraceBackendLabels {
    backend: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DriverInfoLabels {
    driver: String,
    vendor_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CsiFindingLabels {
    driver: String,
    check: String,
    severity: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingLabels {
    check: String,
    severity: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn storage_histogram() -> Histogram {
    Histogram::new(STORAGE_OPERATION_BUCKETS)
}

/// Single-pod volumes by state, for `volguard_single_pod_volumes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinglePodCounts {
    /// Published into one pod, which owns it.
    pub owned: i64,
    /// Not published (or published without an owner yet).
    pub unowned: i64,
    /// Published into more than one pod (a conflict on the node).
    pub shared: i64,
    /// Publishes (of any volume) whose target volguard's quarantine mask covers.
    pub quarantined_publishes: i64,
}

impl SinglePodCounts {
    /// Counts the volumes with the one classification every view uses.
    pub fn of<'a>(views: impl IntoIterator<Item = &'a VolumeView>) -> Self {
        let mut counts = Self::default();
        for view in views {
            counts.quarantined_publishes += view.quarantined.len() as i64;
            match view.state {
                Some(SinglePodState::Owned) => counts.owned += 1,
                Some(SinglePodState::Shared) => counts.shared += 1,
                Some(SinglePodState::Unowned) => counts.unowned += 1,
                None => {}
            }
        }
        counts
    }
}

/// Why volguard removed one of its masks, for `volguard_quarantine_masks_removed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskRemoval {
    /// The pod left the facts, or is being deleted, while its target still held the mask.
    PodGone,
}

/// Every metric the agent exports, in groups that each register their own families.
pub struct Metrics {
    registry: Registry,
    /// The traced syscalls: kubelet's storage-operation histogram, mount syscalls, lost events.
    pub operations: OperationMetrics,
    /// Single-pod volumes, their conflicts and quarantine masks.
    pub conflicts: ConflictMetrics,
    /// The mode and the tracing backend in force.
    pub mode: ModeMetrics,
    /// The CSI checks' and the node model's findings.
    pub findings: FindingMetrics,
    /// The facts source.
    pub facts: FactsMetrics,
    /// The kernel's counters and decode errors, read at scrape time.
    pub kernel: Arc<KernelMetrics>,
    /// Node processes' opens of owned volumes' files, by command, read at scrape time.
    pub node_opens: Arc<NodeOpenMetrics>,
    /// The fanotify backend's notifications, skips and resyncs.
    pub notifications: NotificationMetrics,
    /// The decisions of the secure `/metrics` (`--metrics-secure`).
    pub access: AccessMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let operations = OperationMetrics::register(&mut registry);
        let conflicts = ConflictMetrics::register(&mut registry);
        let mode = ModeMetrics::register(&mut registry);
        let findings = FindingMetrics::register(&mut registry);
        let facts = FactsMetrics::register(&mut registry);
        let notifications = NotificationMetrics::register(&mut registry);
        let access = AccessMetrics::register(&mut registry);
        let kernel = Arc::new(KernelMetrics::default());
        registry.register_collector(Box::new(kernel.clone()));
        let node_opens = Arc::new(NodeOpenMetrics::default());
        registry.register_collector(Box::new(node_opens.clone()));
        let build_info = Family::<VersionLabels, Gauge>::default();
        registry.register("volguard_build_info", "1, labelled with the agent's version", build_info.clone());
        build_info.get_or_create(&VersionLabels { version: env!("CARGO_PKG_VERSION").into() }).set(1);
        Self { registry, operations, conflicts, mode, findings, facts, kernel, node_opens, notifications, access }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

pub struct OperationMetrics {
    storage_operations: HistogramFamily<StorageOperationLabels>,
    syscalls: Family<SyscallLabels, Counter>,
    events_lost: Counter,
    runs_skipped: Counter,
}

impl OperationMetrics {
    fn register(registry: &mut Registry) -> Self {
        let storage_operations = HistogramFamily::<StorageOperationLabels>::new_with_constructor(storage_histogram);
        registry.register_with_unit(
            "storage_operation_duration",
            "Storage operation duration (kubelet's metric, measured in the kernel from syscall entry to exit)",
            Unit::Seconds,
            storage_operations.clone(),
        );
        let syscalls = Family::<SyscallLabels, Counter>::default();
        registry.register(
            "volguard_mount_syscalls",
            "Mount-family syscalls seen, by syscall and result",
            syscalls.clone(),
        );
        let events_lost = Counter::default();
        registry.register(
            "volguard_events_lost",
            "Syscall events lost because the kernel ring buffer was full",
            events_lost.clone(),
        );
        let runs_skipped = Counter::default();
        registry.register(
            "volguard_bpf_runs_skipped",
            "Runs of the agent's programs the kernel skipped (another BPF program was running on the CPU): a \
             tracing program's event is missing, an fmod_ret guard's call went through unjudged (BPF LSM programs \
             are never skipped). Counted by kernels 6.7+ for tracepoints, 5.12+ for trampolines",
            runs_skipped.clone(),
        );
        Self { storage_operations, syscalls, events_lost, runs_skipped }
    }

    pub fn storage_operation(&self, volume_plugin: String, operation: OperationName, success: bool, seconds: f64) {
        let labels = StorageOperationLabels {
            volume_plugin,
            operation_name: operation.as_str().into(),
            status: if success { "success" } else { "fail-unknown" }.into(),
            migrated: "false".into(),
        };
        self.storage_operations.get_or_create(&labels).observe(seconds);
    }
    pub fn syscall(&self, syscall: &'static str, success: bool) {
        let labels =
            SyscallLabels { syscall: syscall.into(), result: if success { "success" } else { "failure" }.into() };
        self.syscalls.get_or_create(&labels).inc();
    }
    /// Sets the lost-event counter to the kernel's running total.
    pub fn set_events_lost(&self, total: u64) {
        catch_up(&self.events_lost, total);
    }
    /// The lost-event counter's value (for tests and the debug API).
    pub fn events_lost(&self) -> u64 {
        self.events_lost.get()
    }
    /// Sets the skipped-runs counter to the kernel's running total.
    pub fn set_runs_skipped(&self, total: u64) {
        catch_up(&self.runs_skipped, total);
    }
    pub fn runs_skipped(&self) -> u64 {
        self.runs_skipped.get()
    }
}

/// Raises `counter` to a running total the kernel keeps (never lowers it).
fn catch_up(counter: &Counter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}

pub struct ConflictMetrics {
    conflicts: Family<ConflictLabels, Counter>,
    conflict_series: Mutex<HashSet<ConflictLabels>>,
    single_pod: Family<StateLabels, Gauge>,
    quarantined_publishes: Gauge,
    masks_removed: Family<ReasonLabels, Counter>,
}

impl ConflictMetrics {
    fn register(registry: &mut Registry) -> Self {
        let conflicts = Family::<ConflictLabels, Counter>::default();
        registry.register(
            "volguard_conflicts",
            "Mounts of a single-pod volume by a second pod or a process outside its owner, and opens and changes of its \
             files by another pod, by namespace, PVC, what was done and route (publish, bind, clone, recursive, device, \
             propagated, ancestor, open, change)",
            conflicts.clone(),
        );
        let single_pod = Family::<StateLabels, Gauge>::default();
        registry.register(
            "volguard_single_pod_volumes",
            "Single-pod volumes on this node by state",
            single_pod.clone(),
        );
        let quarantined_publishes = Gauge::default();
        registry.register(
            "volguard_quarantined_publishes",
            "Publishes whose target volguard's quarantine mask covers now (never counted as holders)",
            quarantined_publishes.clone(),
        );
        let masks_removed = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "volguard_quarantine_masks_removed",
            "Quarantine masks volguard removed itself, by reason (pod_gone: the pod left the facts or is being deleted)",
            masks_removed.clone(),
        );
        Self { conflicts, conflict_series: Mutex::default(), single_pod, quarantined_publishes, masks_removed }
    }

    /// Counts a conflict. Past [`MAX_CONFLICT_SERIES`] distinct series, new PVCs are
    /// counted under `_other`, so a cluster with many PVCs cannot blow up the series count.
    pub fn conflict(&self, claim: Option<&ClaimRef>, action: ConflictAction, route: Route) {
        let Some(action) = action.metric_label() else { return };
        let (namespace, pvc) = match claim {
            Some(c) => (c.namespace.clone(), c.name.clone()),
            None => (UNKNOWN.into(), UNKNOWN.into()),
        };
        let mut labels = ConflictLabels {
            namespace,
            persistentvolumeclaim: pvc,
            action: action.into(),
            route: route.label().into(),
        };
        let mut series = self.conflict_series.lock().unwrap_or_else(|e| e.into_inner());
        if !series.contains(&labels) {
            if series.len() >= MAX_CONFLICT_SERIES {
                labels.namespace = OTHER.into();
                labels.persistentvolumeclaim = OTHER.into();
            }
            series.insert(labels.clone());
        }
        self.conflicts.get_or_create(&labels).inc();
    }
    /// Removes the conflict series of PVCs that no longer exist.
    pub fn forget_claims_except(&self, exists: impl Fn(&ClaimRef) -> bool) {
        let mut series = self.conflict_series.lock().unwrap_or_else(|e| e.into_inner());
        series.retain(|labels| {
            let special = [UNKNOWN, OTHER].contains(&labels.persistentvolumeclaim.as_str());
            let claim = ClaimRef { namespace: labels.namespace.clone(), name: labels.persistentvolumeclaim.clone() };
            let keep = special || exists(&claim);
            if !keep {
                self.conflicts.remove(labels);
            }
            keep
        });
    }
    pub fn set_single_pod(&self, counts: SinglePodCounts) {
        for (state, value) in [("owned", counts.owned), ("unowned", counts.unowned), ("shared", counts.shared)] {
            self.single_pod.get_or_create(&StateLabels { state: state.into() }).set(value);
        }
        self.quarantined_publishes.set(counts.quarantined_publishes);
    }
    /// Counts a mask volguard removed.
    pub fn mask_removed(&self, why: MaskRemoval) {
        let reason = match why {
            MaskRemoval::PodGone => "pod_gone",
        };
        self.masks_removed.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }
}

pub struct ModeMetrics {
    mode: Family<ModeLabels, Gauge>,
    trace_backend: Family<TraceBackendLabels, Gauge>,
    trace_fallbacks: Gauge,
}

impl ModeMetrics {
    fn register(registry: &mut Registry) -> Self {
        let mode = Family::<ModeLabels, Gauge>::default();
        registry.register("volguard_enforcement_mode", "1 for the active enforcement mode, with why", mode.clone());
        let trace_backend = Family::<TraceBackendLabels, Gauge>::default();
        registry.register(
            "volguard_trace_backend",
            "1 for the backend that traces the mounts (trampolines, tracepoints or fanotify), with why",
            trace_backend.clone(),
        );
        let trace_fallbacks = Gauge::default();
        registry.register(
            "volguard_trace_fallback_syscalls",
            "Mount-family syscalls traced by their tracepoints although the backend is trampolines",
            trace_fallbacks.clone(),
        );
        Self { mode, trace_backend, trace_fallbacks }
    }

    pub fn set_mode(&self, decision: &ModeDecision) {
        self.mode.clear();
        let labels = ModeLabels { mode: decision.mode.to_string(), reason: decision.reason.label().into() };
        self.mode.get_or_create(&labels).set(1);
    }
    pub fn set_trace_backend(&self, decision: &TraceDecision) {
        self.trace_backend.clear();
        let labels =
            TraceBackendLabels { backend: decision.backend.to_string(), reason: decision.reason.label().into() };
        self.trace_backend.get_or_create(&labels).set(1);
        self.trace_fallbacks.set(decision.fallbacks.len() as i64);
    }
}

pub struct FindingMetrics {
    csi_driver_info: Family<DriverInfoLabels, Gauge>,
    csi_findings: Family<CsiFindingLabels, Gauge>,
    node_findings: Family<FindingLabels, Gauge>,
}

impl FindingMetrics {
    fn register(registry: &mut Registry) -> Self {
        let csi_driver_info = Family::<DriverInfoLabels, Gauge>::default();
        registry.register(
            "volguard_csi_driver_info",
            "1 for each CSI driver found on this node",
            csi_driver_info.clone(),
        );
        let csi_findings = Family::<CsiFindingLabels, Gauge>::default();
        registry.register(
            "volguard_csi_findings",
            "CSI check findings by driver, check and severity",
            csi_findings.clone(),
        );
        let node_findings = Family::<FindingLabels, Gauge>::default();
        registry.register(
            "volguard_node_findings",
            "Findings of the node model checks by check and severity",
            node_findings.clone(),
        );
        Self { csi_driver_info, csi_findings, node_findings }
    }

    /// Replaces the node-model findings.
    pub fn set_node_findings<'a>(&self, findings: impl IntoIterator<Item = &'a Finding>) {
        self.node_findings.clear();
        for f in findings {
            let labels = FindingLabels { check: label(&f.check), severity: label(&f.severity) };
            self.node_findings.get_or_create(&labels).inc();
        }
    }
    /// Replaces the CSI driver info and findings: `(driver, vendor_version)` and
    /// `(driver, finding)`.
    pub fn set_csi<'a>(
        &self,
        drivers: impl IntoIterator<Item = (&'a str, &'a str)>,
        findings: impl IntoIterator<Item = (&'a str, &'a Finding)>,
    ) {
        self.csi_driver_info.clear();
        for (driver, vendor_version) in drivers {
            let labels = DriverInfoLabels { driver: driver.into(), vendor_version: vendor_version.into() };
            self.csi_driver_info.get_or_create(&labels).set(1);
        }
        self.csi_findings.clear();
        for (driver, f) in findings {
            let labels =
                CsiFindingLabels { driver: driver.into(), check: label(&f.check), severity: label(&f.severity) };
            self.csi_findings.get_or_create(&labels).inc();
        }
    }
}

pub struct FactsMetrics {
    inventory_info: Family<SourceLabels, Gauge>,
    inventory_stale: Gauge,
    inventory_last_sync: Gauge<f64, AtomicU64>,
}

impl FactsMetrics {
    fn register(registry: &mut Registry) -> Self {
        let inventory_info = Family::<SourceLabels, Gauge>::default();
        registry.register("volguard_inventory_info", "1 for the source of the facts in force", inventory_info.clone());
        let inventory_stale = Gauge::default();
        registry.register(
            "volguard_inventory_stale",
            "1 while the facts may be out of date (API unreachable, inventory unreadable)",
            inventory_stale.clone(),
        );
        let inventory_last_sync = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "volguard_inventory_last_sync_timestamp_seconds",
            "When the facts source last delivered a complete, good set (Unix time)",
            inventory_last_sync.clone(),
        );
        Self { inventory_info, inventory_stale, inventory_last_sync }
    }

    pub fn set_source(&self, origin: &Origin, stale: bool, synced_at: Option<SystemTime>) {
        self.inventory_info.clear();
        self.inventory_info.get_or_create(&SourceLabels { source: origin.kind().into() }).set(1);
        self.inventory_stale.set(i64::from(stale));
        let seconds =
            synced_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0.0, |d| d.as_secs_f64());
        self.inventory_last_sync.set(seconds);
    }
}

/// A closed enum's snake_case serde name, as a label value.
fn label<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => UNKNOWN.into(),
    }
}

#[cfg(test)]
mod tests;
