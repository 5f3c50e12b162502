//! What the HTTP listeners serve ([`ServedState`]): the metrics, and for the local debug
//! API a view ([`DebugView`]) the agent loop refreshes (at most once a second, and only
//! when something changed), bounded logs of recent conflicts and mount operations, and
//! readiness. Shared between the loop and the HTTP handlers; every lock is held only to
//! copy or push.
//!
//! The JSON shape is versioned: every response carries `apiVersion: volguard.io/v1`;
//! fields are only ever added within a version.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::SystemTime,
};

use serde::Serialize;

use crate::{
    enforce::Mode,
    facts::ClaimRef,
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

/// The facts source as `/debug/config` and `status` show it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceStatus {
    /// `none`, `inventory` or `kubernetes_api`.
    pub origin: String,
    pub stale: Option<String>,
    pub synced_at: Option<SystemTime>,
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
    /// The CSI report (driver facts and findings), once the CSI checks have run.
    pub csi: Option<serde_json::Value>,
    pub updated_at: Option<SystemTime>,
}

/// A recent conflict.
#[derive(Clone, Debug, Serialize)]
pub struct ConflictRecord {
    pub at: SystemTime,
    pub action: ConflictAction,
    pub volume: String,
    pub claim: Option<ClaimRef>,
    pub pod: crate::model::explain::PodRef,
    pub owner: crate::model::explain::PodRef,
    pub message: String,
}

impl ConflictRecord {
    pub fn new(c: &Conflict) -> Self {
        Self {
            at: SystemTime::now(),
            action: c.action,
            volume: c.volume.clone(),
            claim: c.claim.clone(),
            pod: c.pod.clone(),
            owner: c.owner.clone(),
            message: c.message(),
        }
    }
}

/// A recent volume operation (a mount-family syscall on one of kubelet's volume paths).
#[derive(Clone, Debug, Serialize)]
pub struct MountRecord {
    pub at: SystemTime,
    pub operation: &'static str,
    pub syscall: &'static str,
    pub target: String,
    pub volume_plugin: String,
    pub success: bool,
    /// The negative errno on failure, else 0.
    pub ret: i64,
    pub duration_seconds: f64,
    pub pid: u32,
    pub comm: String,
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
        }
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

/// Attaches findings to the volumes they are about (by subject naming the volume).
pub fn volume_details(views: Vec<VolumeView>, findings: &[Finding]) -> Vec<VolumeDetail> {
    let mut details: BTreeMap<String, VolumeDetail> =
        views.into_iter().map(|v| (v.name.clone(), VolumeDetail::from(v))).collect();
    for f in findings {
        for (name, detail) in details.iter_mut() {
            if f.subject.split([' ', '/']).any(|word| word == name) {
                detail.findings.push(f.clone());
            }
        }
    }
    details.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(target: &str) -> MountRecord {
        MountRecord {
            at: SystemTime::UNIX_EPOCH,
            operation: "volume_mount",
            syscall: "mount",
            target: target.into(),
            volume_plugin: "kubernetes.io/csi:d".into(),
            success: true,
            ret: 0,
            duration_seconds: 0.001,
            pid: 1,
            comm: "csi".into(),
        }
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

    #[test]
    fn readiness_starts_false() {
        let shared = ServedState::new(serde_json::json!({}));
        assert!(!shared.is_ready());
        shared.set_ready();
        assert!(shared.is_ready());
    }
}
