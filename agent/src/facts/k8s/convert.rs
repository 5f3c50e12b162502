//! Pure conversions from the Kubernetes API's objects (k8s-openapi types) to [`crate::facts`].
//!
//! Each function takes one object and returns `None` when the object lacks a field the
//! facts cannot do without (a pod without a UID, a PV without a name): such an object is
//! skipped with a warning, never a panic. API defaults are applied where the API server
//! would apply them, so an object written by an older or a hand-rolled client reads the
//! same as one the API server defaulted.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Volume},
    storage::v1::{CSIDriver, CSINode},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::facts;

/// Annotation keys with this prefix are kept on PVCs; all others are dropped.
pub const ANNOTATION_PREFIX: &str = "volguard.io/";

fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|v| !v.is_empty()).cloned()
}

/// The object's name, or a warning naming the kind and `None`.
fn required_name(kind: &str, meta: &ObjectMeta) -> Option<String> {
    let name = non_empty(meta.name.as_ref());
    if name.is_none() {
        tracing::warn!(kind, uid = meta.uid.as_deref().unwrap_or(""), "skipping an object without metadata.name");
    }
    name
}

fn required_namespace(kind: &str, meta: &ObjectMeta) -> Option<String> {
    let namespace = non_empty(meta.namespace.as_ref());
    if namespace.is_none() {
        tracing::warn!(
            kind,
            name = meta.name.as_deref().unwrap_or(""),
            "skipping an object without metadata.namespace"
        );
    }
    namespace
}

/// Access modes by name; names this version does not know are skipped with a warning.
fn access_modes(kind: &str, name: &str, modes: Option<&Vec<String>>) -> Vec<facts::AccessMode> {
    let mut out = Vec::new();
    for mode in modes.into_iter().flatten() {
        match facts::AccessMode::parse(mode) {
            Some(m) => out.push(m),
            None => tracing::warn!(kind, name, mode = mode.as_str(), "ignoring an unknown access mode"),
        }
    }
    out
}

pub fn pod(pod: &Pod) -> Option<facts::Pod> {
    let meta = &pod.metadata;
    let uid = non_empty(meta.uid.as_ref());
    let Some(uid) = uid else {
        tracing::warn!(
            kind = "Pod",
            name = meta.name.as_deref().unwrap_or(""),
            "skipping an object without metadata.uid"
        );
        return None;
    };
    let namespace = required_namespace("Pod", meta)?;
    let name = required_name("Pod", meta)?;
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).into_iter().flatten().map(pod_volume).collect();
    let service_account = pod.spec.as_ref().and_then(|s| s.service_account_name.clone()).unwrap_or_default();
    let labels = meta.labels.clone().unwrap_or_default();
    Some(facts::Pod {
        uid,
        namespace,
        name,
        terminating: meta.deletion_timestamp.is_some(),
        service_account,
        labels,
        volumes,
    })
}

fn pod_volume(volume: &Volume) -> facts::PodVolume {
    let source = if let Some(pvc) = &volume.persistent_volume_claim {
        facts::VolumeSource::PersistentVolumeClaim(pvc.claim_name.clone())
    } else if volume.ephemeral.is_some() {
        facts::VolumeSource::Ephemeral
    } else if let Some(csi) = &volume.csi {
        facts::VolumeSource::Csi { driver: csi.driver.clone() }
    } else {
        facts::VolumeSource::Other
    };
    facts::PodVolume { name: volume.name.clone(), source }
}

pub fn persistent_volume(pv: &PersistentVolume) -> Option<facts::PersistentVolume> {
    let name = required_name("PersistentVolume", &pv.metadata)?;
    let spec = pv.spec.as_ref();
    let access_modes = access_modes("PersistentVolume", &name, spec.and_then(|s| s.access_modes.as_ref()));
    let csi = spec.and_then(|s| s.csi.as_ref()).map(|csi| facts::CsiSource {
        driver: csi.driver.clone(),
        volume_handle: csi.volume_handle.clone(),
        fs_type: non_empty(csi.fs_type.as_ref()),
    });
    let claim_ref = spec.and_then(|s| s.claim_ref.as_ref()).and_then(|r| {
        Some(facts::ClaimRef { namespace: non_empty(r.namespace.as_ref())?, name: non_empty(r.name.as_ref())? })
    });
    let block = spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block");
    Some(facts::PersistentVolume { name, access_modes, csi, claim_ref, block })
}

pub fn persistent_volume_claim(pvc: &PersistentVolumeClaim) -> Option<facts::PersistentVolumeClaim> {
    let meta = &pvc.metadata;
    let namespace = required_namespace("PersistentVolumeClaim", meta)?;
    let name = required_name("PersistentVolumeClaim", meta)?;
    let spec = pvc.spec.as_ref();
    let access_modes = access_modes("PersistentVolumeClaim", &name, spec.and_then(|s| s.access_modes.as_ref()));
    let volume_name = non_empty(spec.and_then(|s| s.volume_name.as_ref()));
    let annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let controller_uid = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .and_then(|r| non_empty(Some(&r.uid)));
    Some(facts::PersistentVolumeClaim { namespace, name, access_modes, volume_name, annotations, controller_uid })
}

pub fn csi_driver(driver: &CSIDriver) -> Option<facts::CsiDriver> {
    let name = required_name("CSIDriver", &driver.metadata)?;
    let spec = &driver.spec;
    Some(facts::CsiDriver {
        name,
        volume_lifecycle_modes: spec
            .volume_lifecycle_modes
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec!["Persistent".to_owned()]),
        fs_group_policy: non_empty(spec.fs_group_policy.as_ref())
            .unwrap_or_else(|| "ReadWriteOnceWithFSType".to_owned()),
        attach_required: spec.attach_required.unwrap_or(true),
        pod_info_on_mount: spec.pod_info_on_mount.unwrap_or(false),
    })
}

pub fn csi_node(node: &CSINode) -> Option<facts::CsiNode> {
    let name = required_name("CSINode", &node.metadata)?;
    let mut drivers: Vec<facts::CsiNodeDriver> = node
        .spec
        .drivers
        .iter()
        .filter(|d| {
            let ok = !d.name.is_empty();
            if !ok {
                tracing::warn!(csi_node = name.as_str(), "skipping a CSINode driver without a name");
            }
            ok
        })
        .map(|d| facts::CsiNodeDriver {
            name: d.name.clone(),
            node_id: d.node_id.clone(),
            allocatable_count: d.allocatable.as_ref().and_then(|a| a.count),
            topology_keys: d.topology_keys.clone().unwrap_or_default(),
        })
        .collect();
    drivers.sort_by(|a, b| a.name.cmp(&b.name));
    Some(facts::CsiNode { drivers })
}

/// A Node without a status (not yet reported by its kubelet) has an empty kubelet version.
pub fn node_info(node: &Node) -> facts::NodeInfo {
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    facts::NodeInfo { kubelet_version: info.map(|i| i.kubelet_version.clone()).unwrap_or_default() }
}

/// The objects of each kind, as the stores hold them (followed PVs and PVCs as their
/// facts, converted when they arrive: [`super::object_watch`]).
#[derive(Debug, Default)]
pub struct Objects<'a> {
    pub pods: Vec<&'a Pod>,
    pub persistent_volumes: Vec<&'a facts::PersistentVolume>,
    pub persistent_volume_claims: Vec<&'a facts::PersistentVolumeClaim>,
    pub csi_drivers: Vec<&'a CSIDriver>,
    pub csi_nodes: Vec<&'a CSINode>,
}

/// All objects converted and sorted (pods by UID, PVs and drivers by name, PVCs by
/// namespace/name), so equal cluster states give equal [`facts::Facts`]. The CSINode is
/// the one named `node_name`.
pub fn facts(node_name: &str, objects: &Objects<'_>) -> facts::Facts {
    let mut pods: Vec<facts::Pod> = objects.pods.iter().filter_map(|p| pod(p)).collect();
    pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    let mut persistent_volumes: Vec<facts::PersistentVolume> =
        objects.persistent_volumes.iter().map(|&p| p.clone()).collect();
    persistent_volumes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut persistent_volume_claims: Vec<facts::PersistentVolumeClaim> =
        objects.persistent_volume_claims.iter().map(|&p| p.clone()).collect();
    persistent_volume_claims.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut csi_drivers: Vec<facts::CsiDriver> = objects.csi_drivers.iter().filter_map(|d| csi_driver(d)).collect();
    csi_drivers.sort_by(|a, b| a.name.cmp(&b.name));
    let csi_node =
        objects.csi_nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node_name)).and_then(|n| csi_node(n));
    facts::Facts {
        node_name: Some(node_name.to_owned()),
        pods,
        persistent_volumes,
        persistent_volume_claims,
        csi_drivers,
        csi_node,
        ..facts::Facts::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::facts::{AccessMode, ClaimRef, CsiSource, PodVolume, SinglePodReason, VolumeSource};

    fn from<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).expect("test object")
    }

    fn test_pod() -> Pod {
        from(json!({
            "metadata": {"name": "db-0", "namespace": "shop", "uid": "uid-1",
                         "deletionTimestamp": "2025-01-02T03:04:05Z"},
            "spec": {"nodeName": "n1", "containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "inline", "csi": {"driver": "inline.example.com"}},
                {"name": "cfg", "configMap": {"name": "cfg"}},
            ]}
        }))
    }

    #[test]
    fn a_pod_keeps_its_volumes_and_deletion() {
        let p = pod(&test_pod()).expect("converted");
        assert_eq!((p.uid.as_str(), p.namespace.as_str(), p.name.as_str()), ("uid-1", "shop", "db-0"));
        assert!(p.terminating);
        let v = |name: &str, source| PodVolume { name: name.into(), source };
        assert_eq!(
            p.volumes,
            vec![
                v("data", VolumeSource::PersistentVolumeClaim("data-db-0".into())),
                v("scratch", VolumeSource::Ephemeral),
                v("inline", VolumeSource::Csi { driver: "inline.example.com".into() }),
                v("cfg", VolumeSource::Other),
            ]
        );
    }

    #[test]
    fn a_node_gives_its_kubelet_version() {
        let node: Node = from(json!({"metadata": {"name": "n1"},
            "status": {"nodeInfo": {"kubeletVersion": "v1.26.15", "osImage": "Debian"}}}));
        assert_eq!(node_info(&node).kubelet_version, "v1.26.15");
        let unreported: Node = from(json!({"metadata": {"name": "n1"}}));
        assert_eq!(node_info(&unreported).kubelet_version, "");
    }

    #[test]
    fn a_running_pod_without_spec_has_no_volumes() {
        let p = pod(&from(json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u"}}))).expect("converted");
        assert!(!p.terminating);
        assert!(p.volumes.is_empty());
    }

    #[test]
    fn pods_missing_uid_name_or_namespace_are_skipped() {
        assert_eq!(pod(&from(json!({"metadata": {"name": "a", "namespace": "ns"}}))), None);
        assert_eq!(pod(&from(json!({"metadata": {"name": "a", "namespace": "ns", "uid": ""}}))), None);
        assert_eq!(pod(&from(json!({"metadata": {"namespace": "ns", "uid": "u"}}))), None);
        assert_eq!(pod(&from(json!({"metadata": {"name": "a", "uid": "u"}}))), None);
    }

    #[test]
    fn a_pv_reads_modes_csi_claim_and_block() {
        let pv = persistent_volume(&from(json!({
            "metadata": {"name": "pv-1"},
            "spec": {
                "accessModes": ["ReadWriteOncePod", "SomethingNew"],
                "csi": {"driver": "d.example.com", "volumeHandle": "h-1", "fsType": "ext4"},
                "claimRef": {"namespace": "shop", "name": "data"},
                "volumeMode": "Block"
            }
        })))
        .expect("converted");
        assert_eq!(pv.name, "pv-1");
        assert_eq!(pv.access_modes, vec![AccessMode::ReadWriteOncePod], "unknown modes are skipped");
        assert_eq!(
            pv.csi,
            Some(CsiSource {
                driver: "d.example.com".into(),
                volume_handle: "h-1".into(),
                fs_type: Some("ext4".into())
            })
        );
        assert_eq!(pv.claim_ref, Some(ClaimRef { namespace: "shop".into(), name: "data".into() }));
        assert!(pv.block);
    }

    #[test]
    fn a_bare_pv_is_a_filesystem_pv_without_csi() {
        let pv = persistent_volume(&from(json!({"metadata": {"name": "pv-2"},
            "spec": {"volumeMode": "Filesystem", "claimRef": {"name": "no-namespace"}}})))
        .expect("converted");
        assert_eq!((pv.csi, pv.claim_ref, pv.block), (None, None, false));
        assert!(pv.access_modes.is_empty());
        assert_eq!(persistent_volume(&from(json!({"metadata": {}}))), None, "no name: skipped");
    }

    #[test]
    fn a_pvc_keeps_only_volguard_annotations_and_the_controller() {
        let pvc = persistent_volume_claim(&from(json!({
            "metadata": {
                "name": "data", "namespace": "shop", "uid": "pvc-uid",
                "annotations": {"volguard.io/single-pod": "true", "pv.kubernetes.io/bind-completed": "yes"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "not-controller"},
                    {"apiVersion": "v1", "kind": "Pod", "name": "db-0", "uid": "pod-uid", "controller": true}
                ]
            },
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-1"}
        })))
        .expect("converted");
        assert_eq!(pvc.claim_ref().to_string(), "shop/data");
        assert_eq!(pvc.access_modes, vec![AccessMode::ReadWriteOnce]);
        assert_eq!(pvc.volume_name.as_deref(), Some("pv-1"));
        assert_eq!(pvc.annotations.len(), 1);
        assert_eq!(pvc.annotations.get(facts::SINGLE_POD_ANNOTATION).map(String::as_str), Some("true"));
        assert_eq!(pvc.controller_uid.as_deref(), Some("pod-uid"));
    }

    #[test]
    fn an_unbound_pvc_and_skipped_pvcs() {
        let pvc = persistent_volume_claim(&from(json!({"metadata": {"name": "c", "namespace": "ns"},
            "spec": {"volumeName": ""}})))
        .expect("converted");
        assert_eq!((pvc.volume_name, pvc.controller_uid), (None, None));
        assert!(pvc.annotations.is_empty());
        assert_eq!(persistent_volume_claim(&from(json!({"metadata": {"name": "c"}}))), None);
        assert_eq!(persistent_volume_claim(&from(json!({"metadata": {"namespace": "ns"}}))), None);
    }

    #[test]
    fn csi_driver_defaults_are_the_api_defaults() {
        let d = csi_driver(&from(json!({"metadata": {"name": "d.example.com"}, "spec": {}}))).expect("converted");
        assert_eq!(d.volume_lifecycle_modes, vec!["Persistent".to_owned()]);
        assert_eq!(d.fs_group_policy, "ReadWriteOnceWithFSType");
        assert!(d.attach_required);
        assert!(!d.pod_info_on_mount);
        // The same as the inventory file's defaults.
        let from_inventory: facts::CsiDriver = from(json!({"name": "d.example.com"}));
        assert_eq!(d, from_inventory);
    }

    #[test]
    fn csi_driver_fields_when_set() {
        let d = csi_driver(&from(json!({"metadata": {"name": "d"}, "spec": {
            "volumeLifecycleModes": ["Ephemeral"], "fsGroupPolicy": "File",
            "attachRequired": false, "podInfoOnMount": true}})))
        .expect("converted");
        assert_eq!(d.volume_lifecycle_modes, vec!["Ephemeral".to_owned()]);
        assert_eq!(d.fs_group_policy, "File");
        assert!(!d.attach_required);
        assert!(d.pod_info_on_mount);
        assert_eq!(csi_driver(&from(json!({"metadata": {}, "spec": {}}))), None);
    }

    #[test]
    fn csi_node_drivers() {
        let n = csi_node(&from(json!({"metadata": {"name": "n1"}, "spec": {"drivers": [
            {"name": "z.example.com", "nodeID": "n1-z"},
            {"name": "a.example.com", "nodeID": "n1-a", "allocatable": {"count": 16},
             "topologyKeys": ["topology.kubernetes.io/zone"]},
        ]}})))
        .expect("converted");
        assert_eq!(n.drivers.len(), 2);
        assert_eq!(n.drivers[0].name, "a.example.com", "sorted by name");
        assert_eq!(n.drivers[0].node_id, "n1-a");
        assert_eq!(n.drivers[0].allocatable_count, Some(16));
        assert_eq!(n.drivers[0].topology_keys, vec!["topology.kubernetes.io/zone".to_owned()]);
        assert_eq!(n.drivers[1].allocatable_count, None);
        assert_eq!(csi_node(&from(json!({"metadata": {}, "spec": {"drivers": []}}))), None);
    }

    #[test]
    fn facts_are_sorted_and_skip_bad_objects() {
        let pod_a: Pod = from(json!({"metadata": {"name": "a", "namespace": "ns", "uid": "uid-b"}}));
        let pod_b: Pod = from(json!({"metadata": {"name": "b", "namespace": "ns", "uid": "uid-a"}}));
        let pod_bad: Pod = from(json!({"metadata": {"name": "bad", "namespace": "ns"}}));
        let pv_z =
            persistent_volume(&from(json!({"metadata": {"name": "z"}, "spec": {"accessModes": ["ReadWriteOncePod"]}})))
                .unwrap();
        let pv_a = persistent_volume(&from(json!({"metadata": {"name": "a"}}))).unwrap();
        let pvc_2 = persistent_volume_claim(&from(json!({"metadata": {"name": "a", "namespace": "ns2"}}))).unwrap();
        let pvc_1 = persistent_volume_claim(&from(json!({"metadata": {"name": "b", "namespace": "ns1"}}))).unwrap();
        let other_node: CSINode = from(json!({"metadata": {"name": "n2"}, "spec": {"drivers": []}}));
        let this_node: CSINode =
            from(json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d", "nodeID": "x"}]}}));
        let one = facts(
            "n1",
            &Objects {
                pods: vec![&pod_a, &pod_bad, &pod_b],
                persistent_volumes: vec![&pv_z, &pv_a],
                persistent_volume_claims: vec![&pvc_2, &pvc_1],
                csi_drivers: vec![],
                csi_nodes: vec![&other_node, &this_node],
            },
        );
        let other_order = facts(
            "n1",
            &Objects {
                pods: vec![&pod_b, &pod_a, &pod_bad],
                persistent_volumes: vec![&pv_a, &pv_z],
                persistent_volume_claims: vec![&pvc_1, &pvc_2],
                csi_drivers: vec![],
                csi_nodes: vec![&this_node, &other_node],
            },
        );
        assert_eq!(one, other_order);
        assert_eq!(one.node_name.as_deref(), Some("n1"));
        assert_eq!(one.pods.iter().map(|p| p.uid.as_str()).collect::<Vec<_>>(), ["uid-a", "uid-b"]);
        assert_eq!(one.persistent_volumes.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["a", "z"]);
        assert_eq!(one.persistent_volume_claims[0].namespace, "ns1");
        assert_eq!(one.csi_node.as_ref().map(|n| n.drivers.len()), Some(1));
        assert_eq!(one.single_pod_volumes().get("z"), Some(&SinglePodReason::ReadWriteOncePod));
    }
}
