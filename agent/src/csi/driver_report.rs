//! What one CSI node plugin said: where it was found, its answers and failures, and what
//! its API objects add. Filled by the gathering (`report`), read by the judging
//! (`evaluate`), which depend on this and not on each other.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use serde::Serialize;

use super::{
    client::{CallFailure, NodeCapability},
    discovery::Source,
};
use crate::facts::Facts;

/// One CSI node plugin: where it was found, what it said, and its API objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DriverReport {
    /// The registered name, else the name it gave, else its directory or socket name.
    pub name: String,
    pub found_by: BTreeSet<Source>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "lossy_path")]
    pub registration_socket: Option<PathBuf>,
    /// The name its registrar gave kubelet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registered_name: Option<String>,
    /// The driver's own socket; `None` when its registrar did not answer.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "lossy_path")]
    pub endpoint: Option<PathBuf>,
    /// GetPluginInfo's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin_capabilities: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_capabilities: Option<Vec<NodeCapability>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_volumes_per_node: Option<i64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
    /// Probe's answer; `None` when Probe failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// A CSIDriver object of this name exists.
    pub csi_driver_object: bool,
    /// The CSIDriver's fsGroupPolicy, or kubelet's default without one.
    pub fs_group_policy: String,
    /// The CSIDriver's volumeLifecycleModes; without one kubelet allows Persistent only.
    pub volume_lifecycle_modes: Vec<String>,
    pub errors: Vec<CallFailure>,
}

/// Paths as text even when not UTF-8 (serde refuses those, which would fail the whole report).
fn lossy_path<S: serde::Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_some(&p.to_string_lossy()),
        None => s.serialize_none(),
    }
}

impl DriverReport {
    /// True when the name matches any name the driver goes by.
    pub fn answers_to(&self, driver: &str) -> bool {
        self.name == driver
            || self.registered_name.as_deref() == Some(driver)
            || self.plugin_name.as_deref() == Some(driver)
    }

    pub fn has_node_capability(&self, capability: NodeCapability) -> Option<bool> {
        self.node_capabilities.as_ref().map(|caps| caps.contains(&capability))
    }

    /// Fills the fields that come from the CSIDriver object (kubelet's defaults without one).
    pub fn apply_facts(&mut self, facts: &Facts) {
        let object = facts.csi_drivers.iter().find(|d| self.answers_to(&d.name));
        self.csi_driver_object = object.is_some();
        self.fs_group_policy = object.map_or_else(|| "ReadWriteOnceWithFSType".into(), |d| d.fs_group_policy.clone());
        self.volume_lifecycle_modes =
            object.map_or_else(|| vec!["Persistent".into()], |d| d.volume_lifecycle_modes.clone());
        if facts.csi_node.as_ref().is_some_and(|n| n.drivers.iter().any(|d| self.answers_to(&d.name))) {
            self.found_by.insert(Source::CsiNode);
        }
    }
}
