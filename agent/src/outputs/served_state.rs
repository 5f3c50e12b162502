//! What the HTTP listeners serve ([`ServedState`]): the metrics, and for the local debug
//! API a view ([`DebugView`]) the agent loop refreshes (at most once a second, and only
//! when something changed), bounded logs of recent conflicts and mount operations, and
//! readiness. Shared between the loop and the HTTP handlers; every lock is held only to
//! copy or push.
//!
//! The JSON shape is versioned: every response carries `apiVersion: volguard.io/v1`;
//! fields are only ever added within a version. So each time is there twice: v1's first
//! `{secs_since_epoch, nanos_since_epoch}` object, and the same instant as an RFC 3339
//! string in a `*_rfc3339` field beside it (what the CLI and people should read).

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::SystemTime,
};

use serde::Serialize;

use crate::{
    csi::report::CsiReport,
    enforce::Mode,
    facts::{AWAITING_FIRST_LIST, ClaimRef, Origin},
    kernel::trace_backend::{Backend, Fallback, TraceDecision},
    model::checks::Finding,
    model::explain::{Conflict, ConflictAction},
    model::mounts::VolumeView,
    outputs::metrics::Metrics,
};

pub const API_VERSION: &str = "volguard.io/v1";
/// Recent conflicts kept for `/debug/conflicts`.
pub const CONFLICTS_KEPT: usize = 256;
/// Recent mount operations kept for `/debug/mounts`.
pub const MOUNTS_KEPT: usize = 1024;

/// One volume in `/debug/volumes`: the model's view, plus what the checks add.
#[derive(Clone, Debug, Serialize)]
pub struct VolumeDetail {
    /// Name, single-pod reason, PVC, driver, owner and publishes (flattened into the JSON).
    #[serde(flatten)]
    pub view: VolumeView,
    /// The CSI access mode kubelet sends for it, when the CSI checks know the driver.
    pub expected_csi_access_mode: Option<String>,
    /// Findings about this volume.
    pub findings: Vec<Finding>,
}

impl From<VolumeView> for VolumeDetail {
    fn from(view: VolumeView) -> Self {
        Self { view, expected_csi_access_mode: None, findings: Vec::new() }
    }
}

/// An instant as RFC 3339 in UTC, to the microsecond (`2026-11-24T08:00:00.123456Z`).
pub fn rfc3339(at: SystemTime) -> String {
    use k8s_openapi::jiff::{Timestamp, Unit, tz::TimeZone};
    let Ok(t) = Timestamp::try_from(at) else { return String::new() };
    let t = t.round(Unit::Microsecond).unwrap_or(t);
    t.to_zoned(TimeZone::UTC).timestamp().to_string()
}

/// The facts source as `/debug/config` and `status` show it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceStatus {
    /// `none`, `inventory` or `kubernetes_api`.
    pub origin: String,
    pub stale: Option<String>,
    pub synced_at: Option<SystemTime>,
    pub synced_at_rfc3339: Option<String>,
}

impl SourceStatus {
    pub fn new(origin: &str, stale: Option<String>, synced_at: Option<SystemTime>) -> Self {
        Self { origin: origin.into(), stale, synced_at, synced_at_rfc3339: synced_at.map(rfc3339) }
    }

    /// Why the agent has no facts yet: the Kubernetes API has not completed a first list
    /// (unreachable, refused credentials). Once it has, stale facts stay in force.
    pub fn first_sync_pending(&self) -> Option<&str> {
        let waiting = self.origin == Origin::KubernetesApi.kind() && self.synced_at.is_none();
        waiting.then(|| self.stale.as_deref().unwrap_or(AWAITING_FIRST_LIST))
    }
}

/// The part of the state the loop refreshes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DebugView {
    /// None until the agent has chosen (before it is ready).
    pub mode: Option<Mode>,
    pub mode_reason: String,
    pub source: SourceStatus,
    pub volumes: Vec<VolumeDetail>,
    pub findings: Vec<Finding>,
    /// The CSI report (driver facts and findings), once the CSI checks have run: shared
    /// with the loop, turned into JSON only when asked for (as a JSON value it held 9 MB
    /// for 10,000 volumes).
    pub csi: Option<Arc<CsiReport>>,
    pub updated_at: Option<SystemTime>,
    pub updated_at_rfc3339: Option<String>,
    /// What made the agent rebuild this view.
    pub refresh: Option<Refresh>,
}

/// What made the agent rebuild the view it serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refresh {
    /// The agent's start.
    Start,
    /// A change every view must show at once: a claim, a release, a quarantine.
    AtOnce,
    /// Other changes, gathered at the agent's one-second tick.
    Tick,
}

/// Where a quarantined publish's mask stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaskState {
    /// The mask covers the pod's publish target.
    Masked,
    /// The mask is gone: unmounted with the pod's publish, or removed by volguard once the
    /// pod was gone.
    Cleared,
}

/// A recent conflict.
#[derive(Clone, Debug, Serialize)]
pub struct ConflictRecord {
    pub at: SystemTime,
    pub at_rfc3339: String,
    pub action: ConflictAction,
    pub volume: String,
    pub claim: Option<ClaimRef>,
    pub pod: crate::model::explain::PodRef,
    pub owner: crate::model::explain::PodRef,
    pub message: String,
    /// For a quarantine: whether the mask is still there.
    pub mask: Option<MaskState>,
    /// Who made the mount (the calling process and its pod), when an event said.
    pub by: Option<crate::model::explain::MountedBy>,
    /// How the volume was reached (`publish`, or a mount outside kubelet's publish).
    pub route: crate::model::access::Route,
    /// For a mount outside kubelet's publish: where it was, in its mount namespace.
    pub mount_point: Option<std::path::PathBuf>,
}

impl ConflictRecord {
    pub fn new(c: &Conflict) -> Self {
        let at = SystemTime::now();
        Self {
            at,
            at_rfc3339: rfc3339(at),
            action: c.action,
            volume: c.volume.clone(),
            claim: c.claim.clone(),
            pod: c.pod.clone(),
            owner: c.owner.clone(),
            message: c.message(),
            mask: (c.action == ConflictAction::Quarantined).then_some(MaskState::Masked),
            by: c.by.clone(),
            route: c.route,
            mount_point: c.mount_point.clone(),
        }
    }
}

/// A recent volume operation (a mount-family syscall on one of kubelet's volume paths).
#[derive(Clone, Debug, Serialize)]
pub struct MountRecord {
    /// When the call returned (the kernel's stamp), or when a mount notice was read.
    pub at: SystemTime,
    pub at_rfc3339: String,
    pub operation: &'static str,
    pub syscall: &'static str,
    pub target: String,
    pub volume_plugin: String,
    pub success: bool,
    /// The negative errno on failure, else 0.
    pub ret: i64,
    /// From syscall entry to exit; `None` where the backend cannot time it (fanotify).
    pub duration_seconds: Option<f64>,
    /// The calling process; `None` where the backend names no caller (fanotify).
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// The UID of the pod the calling process was in, where its cgroup says.
    pub pod: Option<String>,
}

impl MountRecord {
    /// A volume operation at `at` that returned `ret` (negative errno, or 0 or more), with no
    /// caller or duration: what a mount notice says. [`Self::by`] adds what a traced syscall says.
    pub fn new(
        at: SystemTime,
        operation: &'static str,
        syscall: &'static str,
        target: String,
        volume_plugin: String,
        ret: i64,
    ) -> Self {
        Self {
            at,
            at_rfc3339: rfc3339(at),
            operation,
            syscall,
            target,
            volume_plugin,
            success: ret >= 0,
            ret: ret.min(0),
            duration_seconds: None,
            pid: None,
            comm: None,
            pod: None,
        }
    }

    /// The call's duration and its caller: process id, command and pod (where its cgroup says).
    pub fn by(mut self, duration_seconds: f64, pid: u32, comm: String, pod: Option<String>) -> Self {
        self.duration_seconds = Some(duration_seconds);
        (self.pid, self.comm, self.pod) = (Some(pid), Some(comm), pod);
        self
    }
}

/// Everything the HTTP side reads.
pub struct ServedState {
    pub metrics: Metrics,
    /// The effective configuration, for `/debug/config` (no secrets: there are none).
    pub config: serde_json::Value,
    ready: AtomicBool,
    snapshot: RwLock<Arc<DebugView>>,
    conflicts: Mutex<VecDeque<ConflictRecord>>,
    mounts: Mutex<VecDeque<MountRecord>>,
    /// The tracing backend, once chosen.
    tracing: RwLock<Option<TracingStatus>>,
}

/// The tracing backend as `/debug/status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct TracingStatus {
    pub backend: Backend,
    /// Prose: why this backend, and each syscall traced otherwise.
    pub reason: String,
    /// Syscalls traced by their tracepoints although the backend is trampolines.
    pub fallbacks: Vec<Fallback>,
    /// What the backend cannot tell (fanotify: the caller, latency, failures).
    pub losses: &'static [&'static str],
}

impl ServedState {
    pub fn new(config: serde_json::Value) -> Self {
        Self {
            metrics: Metrics::new(),
            config,
            ready: AtomicBool::new(false),
            snapshot: RwLock::default(),
            conflicts: Mutex::default(),
            mounts: Mutex::default(),
            tracing: RwLock::default(),
        }
    }

    /// Records the tracing backend chosen at start-up.
    pub fn set_tracing(&self, decision: &TraceDecision) {
        let status = TracingStatus {
            backend: decision.backend,
            reason: decision.to_string(),
            fallbacks: decision.fallbacks.clone(),
            losses: decision.losses(),
        };
        *self.tracing.write().unwrap_or_else(|e| e.into_inner()) = Some(status);
    }

    /// The tracing backend, once chosen.
    pub fn tracing(&self) -> Option<TracingStatus> {
        self.tracing.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Programs attached and the state built.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    pub fn view(&self) -> Arc<DebugView> {
        self.snapshot.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_view(&self, snapshot: DebugView) {
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    pub fn record_conflict(&self, record: ConflictRecord) {
        push_bounded(&self.conflicts, record, CONFLICTS_KEPT);
    }

    /// The mask of `pod_uid`'s publish of `volume` is gone: its quarantine records say so.
    pub fn mask_cleared(&self, volume: &str, pod_uid: &str) {
        let mut conflicts = self.conflicts.lock().unwrap_or_else(|e| e.into_inner());
        for record in conflicts.iter_mut().filter(|c| c.volume == volume && c.pod.uid == pod_uid) {
            if record.mask.is_some() {
                record.mask = Some(MaskState::Cleared);
            }
        }
    }

    pub fn record_mount(&self, record: MountRecord) {
        push_bounded(&self.mounts, record, MOUNTS_KEPT);
    }

    /// The newest `limit` conflicts, newest first.
    pub fn recent_conflicts(&self, limit: usize) -> Vec<ConflictRecord> {
        newest(&self.conflicts, limit)
    }

    /// The newest `limit` mount operations, newest first.
    pub fn recent_mounts(&self, limit: usize) -> Vec<MountRecord> {
        newest(&self.mounts, limit)
    }
}

fn push_bounded<T>(queue: &Mutex<VecDeque<T>>, item: T, cap: usize) {
    let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
    if queue.len() == cap {
        queue.pop_front();
    }
    queue.push_back(item);
}

fn newest<T: Clone>(queue: &Mutex<VecDeque<T>>, limit: usize) -> Vec<T> {
    queue.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().take(limit).cloned().collect()
}

/// Attaches findings to the volumes they are about (by subject naming the volume), in
/// name order.
///
/// Built for every change of ownership, so it moves each volume once: `views` come
/// sorted by name from `each_volume_view`, and a detail is found by binary search (a
/// `BTreeMap` of 10,000 details cost a name copy, a sort buffer and two more moves of
/// every detail: ~10 MiB of fresh pages per build, bench 6c).
pub fn volume_details(views: impl IntoIterator<Item = VolumeView>, findings: &[Finding]) -> Vec<VolumeDetail> {
    let mut details: Vec<VolumeDetail> = views.into_iter().map(VolumeDetail::from).collect();
    if !details.is_sorted_by(|a, b| a.view.name <= b.view.name) {
        details.sort_by(|a, b| a.view.name.cmp(&b.view.name));
    }
    // A finding is about each volume its subject names: a look-up per word, not a scan of
    // every volume per finding (10,000 volumes with a finding each would be 10^8 steps).
    for f in findings {
        let mut named: Vec<&str> = f.subject.split([' ', '/']).collect();
        named.sort_unstable();
        named.dedup();
        for word in named {
            let first = details.partition_point(|d| d.view.name.as_str() < word);
            for detail in details[first..].iter_mut().take_while(|d| d.view.name == word) {
                detail.findings.push(f.clone());
            }
        }
    }
    details
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(1_795_000_000_123_456_789);
        assert_eq!(rfc3339(at), "2026-11-18T11:06:40.123457Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    fn mount(target: &str) -> MountRecord {
        MountRecord::new(
            SystemTime::UNIX_EPOCH,
            "volume_mount",
            "mount",
            target.into(),
            "kubernetes.io/csi:d".into(),
            0,
        )
        .by(0.001, 1, "csi".into(), None)
    }

    #[test]
    fn recent_logs_are_bounded_and_newest_first() {
        let shared = ServedState::new(serde_json::json!({}));
        for i in 0..MOUNTS_KEPT + 10 {
            shared.record_mount(mount(&format!("/t/{i}")));
        }
        let recent = shared.recent_mounts(3);
        assert_eq!(recent.iter().map(|m| m.target.as_str()).collect::<Vec<_>>(), ["/t/1033", "/t/1032", "/t/1031"]);
        assert_eq!(shared.recent_mounts(usize::MAX).len(), MOUNTS_KEPT);
    }

    fn view(name: &str) -> VolumeView {
        VolumeView {
            name: name.into(),
            single_pod: None,
            claim: None,
            driver: None,
            owner: None,
            published_to: Vec::new(),
            quarantined: Vec::new(),
            state: None,
            pod_names: BTreeMap::new(),
        }
    }

    fn finding(subject: &str) -> Finding {
        Finding {
            check: crate::model::checks::Check::EphemeralClaimMissing,
            severity: crate::model::checks::Severity::Warning,
            subject: subject.into(),
            message: String::new(),
        }
    }

    #[test]
    fn details_come_in_name_order_with_the_findings_that_name_them() {
        let views = ["pv-b", "pv-a", "pv-c"].map(view);
        let findings = [finding("ns/pod pv-a"), finding("pv-c pv-c"), finding("pv-ab"), finding("pv-b/pv-a")];
        let details = volume_details(views, &findings);
        let names: Vec<&str> = details.iter().map(|d| d.view.name.as_str()).collect();
        assert_eq!(names, ["pv-a", "pv-b", "pv-c"]);
        let about = |i: usize| details[i].findings.iter().map(|f| f.subject.as_str()).collect::<Vec<_>>();
        assert_eq!(about(0), ["ns/pod pv-a", "pv-b/pv-a"], "a prefix (pv-ab) is not a name");
        assert_eq!(about(1), ["pv-b/pv-a"]);
        assert_eq!(about(2), ["pv-c pv-c"], "once however often the subject names it");
    }

    #[test]
    fn readiness_starts_false() {
        let shared = ServedState::new(serde_json::json!({}));
        assert!(!shared.is_ready());
        shared.set_ready();
        assert!(shared.is_ready());
    }
}
