//! Checks that need only the node model: generic ephemeral PVCs must belong to their pod,
//! and CSI inline volumes must carry the handle kubelet derives for them. (The CSI
//! driver-side checks live with the CSI client.) Each finding has a stable check name, a
//! severity and a one-line explanation, for the metrics and the debug API.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    facts::{ClaimRef, Facts, VolumeSource, ephemeral_claim_name},
    node_files::vol_data::{self, VolData},
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

/// The closed set of model checks (a metric label, so never free text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// A generic ephemeral volume's PVC is not controlled by its pod.
    EphemeralClaimNotOwned,
    /// A generic ephemeral volume's PVC does not exist (yet).
    EphemeralClaimMissing,
    /// A CSI inline volume's handle is not `csi-` + sha256(pod UID + volume name).
    InlineHandleMismatch,
    /// A `vol_data.json` that could not be read (counted, skipped).
    VolDataUnreadable,
    // The CSI driver checks (`csi::evaluate`); severities are given there.
    /// A driver has a socket on the node but is not in this node's CSINode.
    CsiRegisteredNotInCsiNode,
    /// CSINode lists a driver for which no socket was found on the node.
    CsiNodeDriverWithoutSocket,
    /// CSINode's nodeID differs from the driver's NodeGetInfo node_id.
    CsiNodeIdMismatch,
    /// CSINode's allocatable.count differs from NodeGetInfo max_volumes_per_node.
    CsiMaxVolumesMismatch,
    /// No CSIDriver object for a driver on the node.
    CsiDriverObjectMissing,
    /// A registration socket did not answer GetInfo.
    CsiRegistrationFailed,
    /// A driver socket could not be connected to.
    CsiDriverUnreachable,
    /// One call to a reachable driver failed, timed out or was answered with garbage.
    CsiCallFailed,
    /// Probe answered ready = false.
    CsiProbeNotReady,
    /// GetPluginInfo's name differs from the name registered with kubelet.
    CsiPluginNameMismatch,
    /// A ReadWriteOncePod volume on a driver that is told SINGLE_NODE_WRITER (no node
    /// capability SINGLE_NODE_MULTI_WRITER) and so cannot refuse a second pod itself.
    CsiRwopNotEnforcedByDriver,
    /// A ReadWriteOncePod volume on a node whose kubelet, by its version, does not refuse
    /// a second pod itself (before 1.22, or 1.22-1.26 with the feature gate at its default).
    KubeletRwopNotEnforced,
    /// A CSI inline volume whose driver does not allow the Ephemeral lifecycle mode.
    CsiEphemeralModeUnsupported,
    /// A persistent volume whose driver does not allow the Persistent lifecycle mode.
    CsiPersistentModeUnsupported,
    /// fsGroup will not be applied although the policy is not None, or the policy is unknown.
    CsiFsGroupNotApplied,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub check: Check,
    pub severity: Severity,
    /// What it is about: `namespace/pod`, a volume, or a file.
    pub subject: String,
    pub message: String,
}

/// Every generic ephemeral volume's PVC must exist and be controlled by its pod
/// (kubelet's `VolumeIsForPod`); otherwise the pod would mount another pod's data.
pub fn ephemeral_claims(facts: &Facts) -> Vec<Finding> {
    let mut findings = Vec::new();
    for pod in &facts.pods {
        for volume in pod.volumes.iter().filter(|v| v.source == VolumeSource::Ephemeral) {
            let claim =
                ClaimRef { namespace: pod.namespace.clone(), name: ephemeral_claim_name(&pod.name, &volume.name) };
            let subject = format!("{}/{}", pod.namespace, pod.name);
            match facts.claim(&claim) {
                None => findings.push(Finding {
                    check: Check::EphemeralClaimMissing,
                    severity: Severity::Warning,
                    subject,
                    message: format!(
                        "generic ephemeral volume {:?}: PVC {claim} does not exist (yet); the pod cannot start without it",
                        volume.name
                    ),
                }),
                Some(pvc) if pvc.controller_uid.as_deref() != Some(&pod.uid) => findings.push(Finding {
                    check: Check::EphemeralClaimNotOwned,
                    severity: Severity::Error,
                    subject,
                    message: format!(
                        "PVC {claim} was not created for pod {}/{} (pod is not owner: controller is {})",
                        pod.namespace,
                        pod.name,
                        pvc.controller_uid.as_deref().unwrap_or("none")
                    ),
                }),
                Some(_) => {}
            }
        }
    }
    findings
}

/// `makeVolumeHandle`: `"csi-" + hex(sha256(podUID + volumeName))`.
pub fn inline_volume_handle(pod_uid: &str, volume_name: &str) -> String {
    let digest = Sha256::digest(format!("{pod_uid}{volume_name}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// One pod CSI volume directory and what its `vol_data.json` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCsiVolume {
    pub pod_uid: String,
    /// The directory name: the escaped spec name.
    pub volume: String,
    pub data: VolData,
}

/// `<root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/vol_data.json`, every one.
#[derive(Debug, Default)]
pub struct TreeScan {
    pub volumes: Vec<PodCsiVolume>,
    /// Files that could not be read or parsed, with why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Scans the kubelet tree for pods' CSI volume data. A missing `pods/` directory is an
/// empty node; unreadable entries are skipped and listed, never fatal.
pub fn scan_pod_volumes(kubelet_root: &Path) -> TreeScan {
    let mut scan = TreeScan::default();
    let pods = kubelet_root.join("pods");
    for pod in dir_names(&pods) {
        let csi = pods.join(&pod).join("volumes").join("kubernetes.io~csi");
        for volume in dir_names(&csi) {
            let file = csi.join(&volume).join("vol_data.json");
            match std::fs::read(&file) {
                Ok(bytes) => match vol_data::parse(&bytes) {
                    Ok(data) => scan.volumes.push(PodCsiVolume { pod_uid: pod.clone(), volume, data }),
                    Err(e) => scan.skipped.push((file, e.to_string())),
                },
                // Kubelet removes the file last at teardown; a directory without one is normal.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => scan.skipped.push((file, e.to_string())),
            }
        }
    }
    scan
}

/// UTF-8 directory entry names, sorted; anything unreadable is no entries.
fn dir_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<String> = entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect();
    names.sort();
    names
}

/// Inline (Ephemeral) volumes whose handle is not the one kubelet derives, and the
/// files the scan could not read.
pub fn inline_handles(scan: &TreeScan) -> Vec<Finding> {
    let mut findings = Vec::new();
    for v in &scan.volumes {
        if v.data.volume_lifecycle_mode.as_deref() != Some("Ephemeral") {
            continue;
        }
        let name = v.data.spec_vol_id.as_deref().unwrap_or(&v.volume);
        let expected = inline_volume_handle(&v.pod_uid, name);
        let found = v.data.volume_handle.as_deref().unwrap_or("");
        if found != expected {
            findings.push(Finding {
                check: Check::InlineHandleMismatch,
                severity: Severity::Error,
                subject: format!("pod {} volume {name}", v.pod_uid),
                message: format!(
                    "CSI inline volume handle is {found:?}, expected {expected} (csi- + sha256(pod UID + volume name)): \
                     the volume data does not belong to this pod"
                ),
            });
        }
    }
    for (file, why) in &scan.skipped {
        findings.push(Finding {
            check: Check::VolDataUnreadable,
            severity: Severity::Warning,
            subject: file.display().to_string(),
            message: format!("vol_data.json skipped: {why}"),
        });
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::{PersistentVolumeClaim, Pod, PodVolume};

    fn pod(uid: &str, name: &str, volumes: &[&str]) -> Pod {
        Pod {
            uid: uid.into(),
            namespace: "ns".into(),
            name: name.into(),
            terminating: false,
            service_account: String::new(),
            labels: Default::default(),
            volumes: volumes.iter().map(|v| PodVolume { name: (*v).into(), source: VolumeSource::Ephemeral }).collect(),
        }
    }

    fn claim(name: &str, controller: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            namespace: "ns".into(),
            name: name.into(),
            access_modes: vec![],
            volume_name: None,
            annotations: Default::default(),
            controller_uid: controller.map(Into::into),
        }
    }

    #[test]
    fn the_documented_inventory_has_no_stray_ephemeral_claim() {
        let text = include_str!("../../../deploy/inventory.example.yaml");
        let facts = crate::facts::inventory::parse(std::path::Path::new("inventory.example.yaml"), text).unwrap();
        assert_eq!(ephemeral_claims(&facts), [], "db-0-scratch is controlled by db-0");
    }

    #[test]
    fn ephemeral_claims_must_be_controlled_by_their_pod() {
        let facts = Facts {
            pods: vec![pod("uid-1", "web", &["cache", "scratch", "tmp"])],
            persistent_volume_claims: vec![claim("web-cache", Some("uid-1")), claim("web-scratch", Some("uid-other"))],
            ..Facts::default()
        };
        let findings = ephemeral_claims(&facts);
        assert_eq!(findings.len(), 2, "{findings:#?}");
        assert_eq!(findings[0].check, Check::EphemeralClaimNotOwned);
        assert_eq!(findings[0].severity, Severity::Error);
        assert_eq!(
            findings[0].message,
            "PVC ns/web-scratch was not created for pod ns/web (pod is not owner: controller is uid-other)"
        );
        assert_eq!(findings[1].check, Check::EphemeralClaimMissing);
        assert!(findings[1].message.contains("ns/web-tmp"));
    }

    #[test]
    fn inline_handles_follow_kubelets_formula() {
        // sha256("abc") is well known; kubelet concatenates with no separator.
        assert_eq!(
            inline_volume_handle("a", "bc"),
            "csi-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn the_tree_scan_checks_ephemeral_handles_and_reports_bad_files() {
        let root = tempfile::tempdir().unwrap();
        let write = |pod: &str, volume: &str, json: &str| {
            let dir = root.path().join("pods").join(pod).join("volumes/kubernetes.io~csi").join(volume);
            std::fs::create_dir_all(dir.join("mount")).unwrap();
            std::fs::write(dir.join("vol_data.json"), json).unwrap();
        };
        let good = inline_volume_handle("pod-1", "secrets");
        write(
            "pod-1",
            "secrets",
            &format!(r#"{{"specVolID":"secrets","volumeHandle":"{good}","volumeLifecycleMode":"Ephemeral"}}"#),
        );
        write(
            "pod-2",
            "secrets",
            &format!(r#"{{"specVolID":"secrets","volumeHandle":"{good}","volumeLifecycleMode":"Ephemeral"}}"#),
        );
        write("pod-2", "pv-1", r#"{"specVolID":"pv-1","volumeHandle":"vol-9","volumeLifecycleMode":"Persistent"}"#);
        write("pod-3", "broken", "");
        std::fs::create_dir_all(root.path().join("pods/pod-4/volumes/kubernetes.io~csi/torn-down")).unwrap();

        let scan = scan_pod_volumes(root.path());
        assert_eq!(scan.volumes.len(), 3);
        let findings = inline_handles(&scan);
        let checks: Vec<_> = findings.iter().map(|f| (f.check, f.subject.as_str())).collect();
        assert_eq!(checks[0], (Check::InlineHandleMismatch, "pod pod-2 volume secrets"));
        assert_eq!(checks[1].0, Check::VolDataUnreadable);
        assert_eq!(findings.len(), 2);
    }

    #[test]
    fn a_missing_kubelet_root_is_an_empty_scan() {
        let scan = scan_pod_volumes(Path::new("/nonexistent/volguard/kubelet"));
        assert!(scan.volumes.is_empty() && scan.skipped.is_empty());
    }
}
