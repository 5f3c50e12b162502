//! Gathering: find every driver socket, ask each driver (concurrently, under deadlines)
//! and put what they said next to the facts. The judging is `evaluate`, kept pure so the
//! monitor can re-judge on new facts or mounts without asking the drivers again.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures::future::join_all;
use serde::Serialize;

pub use super::driver_report::DriverReport;
use super::{
    client,
    discovery::{self, CSI_PLUGIN_TYPE, Source},
    evaluate::VolumeReport,
    kubelet::KubeletReport,
};
use crate::{enforce::Mode, facts::Facts, model::checks::Finding, model::mounts::Mounts};

/// The default deadline of every call (kubelet's own CSI calls allow more; a health check
/// should not).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// kubelet's `--root-dir`.
    pub kubelet_root: PathBuf,
    /// Driver sockets to ask besides the discovered ones.
    pub extra_sockets: Vec<PathBuf>,
    /// For connecting and for each call.
    pub deadline: Duration,
}

impl CheckOptions {
    pub fn new(kubelet_root: impl Into<PathBuf>) -> Self {
        Self { kubelet_root: kubelet_root.into(), extra_sockets: Vec::new(), deadline: DEFAULT_DEADLINE }
    }
}

/// Everything the CSI checks found, for the debug API, the metrics and `volguard check`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CsiReport {
    /// The node's kubelet: its version and what it means for ReadWriteOncePod.
    pub kubelet: KubeletReport,
    pub drivers: Vec<DriverReport>,
    /// Per volume in use: the access mode kubelet sends and what happens to fsGroup.
    pub volumes: Vec<Arc<VolumeReport>>,
    pub findings: Vec<Finding>,
    /// When the drivers were last asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<SystemTime>,
}

impl CsiReport {
    /// Each finding with the driver it is about (`driver X` subjects, or the driver of
    /// the volume a `volume X` finding names), for the metrics' `driver` label.
    pub fn findings_by_driver(&self) -> Vec<(&str, &Finding)> {
        // One look-up per finding, not a scan of every volume (10,000 of each on a big node).
        let mut driver_of = std::collections::HashMap::new();
        for v in &self.volumes {
            driver_of.entry(v.name.as_str()).or_insert(v.driver.as_str()); // the first, as a scan finds
        }
        self.findings
            .iter()
            .map(|f| {
                let named = |prefix: &str| f.subject.split_whitespace().skip_while(|w| *w != prefix).nth(1);
                let driver = named("driver").or_else(|| driver_of.get(named("volume")?).copied()).unwrap_or("");
                (driver, f)
            })
            .collect()
    }
}

/// Runs every check once: gathers, then judges. `mode` is the agent's active mode (`None`
/// when no agent enforces, as for `volguard check` without `--mode`).
pub async fn check_node(opts: &CheckOptions, facts: &Facts, mounts: &Mounts, mode: Option<Mode>) -> CsiReport {
    let drivers = gather(opts).await;
    CsiReport { checked_at: Some(SystemTime::now()), ..CsiReport::judge(drivers, facts, mounts, mode) }
}

/// Finds and asks every driver socket: registration sockets first (for the endpoints
/// they name), then every distinct endpoint, all concurrently.
pub async fn gather(opts: &CheckOptions) -> Vec<DriverReport> {
    let root = &opts.kubelet_root;
    let registrations = discovery::registration_sockets(root);
    let infos = join_all(registrations.iter().map(|s| client::registration_info(s.clone(), opts.deadline))).await;

    // Keyed by endpoint; registrars that did not answer are kept apart (no endpoint).
    let mut by_endpoint: BTreeMap<PathBuf, DriverReport> = BTreeMap::new();
    let mut unanswered = Vec::new();
    for (socket, info) in registrations.into_iter().zip(infos) {
        match info {
            Ok(info) if info.r#type != CSI_PLUGIN_TYPE => {} // a device or DRA plugin
            Ok(info) => {
                let endpoint = PathBuf::from(&info.endpoint);
                let report = by_endpoint.entry(endpoint.clone()).or_default();
                report.found_by.insert(Source::Registration);
                report.registration_socket = Some(socket);
                report.registered_name = Some(info.name);
                report.endpoint = Some(endpoint);
            }
            Err(failure) => unanswered.push(DriverReport {
                name: discovery::name_from_registration_socket(&socket),
                found_by: [Source::Registration].into(),
                registration_socket: Some(socket),
                errors: vec![failure],
                ..DriverReport::default()
            }),
        }
    }
    for (socket, source) in discovery::conventional_sockets(root)
        .into_iter()
        .map(|s| (s, Source::Conventional))
        .chain(opts.extra_sockets.iter().map(|s| (s.clone(), Source::Explicit)))
    {
        let report = by_endpoint.entry(socket.clone()).or_default();
        report.found_by.insert(source);
        report.endpoint = Some(socket);
    }

    let mut reports: Vec<DriverReport> = by_endpoint.into_values().collect();
    let answers =
        join_all(reports.iter().map(|r| client::ask_driver(r.endpoint.clone().unwrap_or_default(), opts.deadline)))
            .await;
    for (report, answers) in reports.iter_mut().zip(answers) {
        report.plugin_name = answers.plugin_name;
        report.vendor_version = answers.vendor_version;
        report.plugin_capabilities = answers.plugin_capabilities;
        report.ready = answers.ready;
        report.node_capabilities = answers.node_capabilities;
        report.node_id = answers.node_id;
        report.max_volumes_per_node = answers.max_volumes_per_node;
        report.topology = answers.topology;
        report.errors.extend(answers.failures);
        report.name = report
            .registered_name
            .clone()
            .or_else(|| report.plugin_name.clone())
            .or_else(|| report.endpoint.as_deref().and_then(|e| discovery::conventional_dir_name(root, e)))
            .unwrap_or_else(|| {
                report.endpoint.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default()
            });
    }
    reports.extend(unanswered);
    reports.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.endpoint.cmp(&b.endpoint)));
    reports
}
