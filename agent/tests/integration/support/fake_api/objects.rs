//! The objects the tests apply: pods in namespace `shop` using PVC `shop/data`, a
//! ReadWriteOncePod PV and claim, CSIDriver, CSINode and Node.

use serde_json::{Value, json};

/// Pod `shop/<name>` on `node`, whose volume `data` is the PVC `shop/data`.
pub fn pod(name: &str, uid: &str, node: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop", "uid": uid},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}})
}

/// A ReadWriteOncePod CSI PV bound to the PVC `shop/data`.
pub fn rwop_pv(name: &str, driver: &str, handle: &str) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"accessModes": ["ReadWriteOncePod"], "claimRef": {"namespace": "shop", "name": "data"},
                    "csi": {"driver": driver, "volumeHandle": handle}}})
}

/// The ReadWriteOncePod PVC `shop/data`, bound to `volume`.
pub fn rwop_pvc(volume: &str) -> Value {
    json!({"metadata": {"name": "data", "namespace": "shop"},
           "spec": {"accessModes": ["ReadWriteOncePod"], "volumeName": volume}})
}

/// A CSIDriver object with the API's defaults.
pub fn csi_driver(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

/// `node`'s CSINode, listing `(driver, node ID)` pairs.
pub fn csi_node(node: &str, drivers: &[(&str, &str)]) -> Value {
    let drivers: Vec<Value> = drivers.iter().map(|(name, id)| json!({"name": name, "nodeID": id})).collect();
    json!({"metadata": {"name": node}, "spec": {"drivers": drivers}})
}

/// Node `name`, whose kubelet reports `kubelet_version`.
pub fn node(name: &str, kubelet_version: &str) -> Value {
    json!({"metadata": {"name": name},
           "status": {"nodeInfo": {"kubeletVersion": kubelet_version, "kubeProxyVersion": kubelet_version,
                                   "operatingSystem": "linux", "architecture": "amd64"}}})
}

/// Pod `shop/<name>` on `node` using the PVCs `shop/<claim>` (volumes named after the claims).
pub fn pod_with_claims(name: &str, uid: &str, node: &str, claims: &[&str]) -> Value {
    let volumes: Vec<Value> =
        claims.iter().map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}})).collect();
    json!({"metadata": {"name": name, "namespace": "shop", "uid": uid},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}], "volumes": volumes}})
}

/// PVC `<namespace>/<name>` with `access_mode`, bound to `volume`.
pub fn claim(namespace: &str, name: &str, access_mode: &str, volume: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": namespace},
           "spec": {"accessModes": [access_mode], "volumeName": volume}})
}

/// CSI PV `name` (driver d.example.com) with `access_mode`, bound to PVC `<namespace>/<claim>`.
pub fn volume(name: &str, access_mode: &str, namespace: &str, claim: &str) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"accessModes": [access_mode], "claimRef": {"namespace": namespace, "name": claim},
                    "csi": {"driver": "d.example.com", "volumeHandle": format!("h-{name}")}}})
}
