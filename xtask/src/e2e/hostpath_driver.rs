//! csi-driver-host-path installed as upstream installs it (deploy/util/deploy-hostpath.sh
//! with deploy/kubernetes-1.34/hostpath), from the release archives at run time: each
//! controller sidecar's RBAC (its deploy/kubernetes/rbac.yaml, labelled as the script's
//! kustomization labels it), the plugin's StatefulSet with its sidecars and role bindings,
//! the CSIDriver as shipped, and upstream's example StorageClass. Changed only where this
//! node needs it: images are the ones built here (hostpathplugin is v1.18.0, the newest
//! release, where the 1.34 manifests name v1.17.1); the containers of the sidecars not
//! built (the health monitor and the snapshotter) are left out with their role bindings;
//! and the pod uses the host's network, as every pod of this node does (there is no pod
//! network: the API server's Service address answers only in the node's namespace).

use std::time::Duration;

use anyhow::{Context, ensure};
use serde_json::{Value, json};

use super::{
    NODE_NAME,
    images::upstream_image,
    kube::{Kube, wait_for},
    upstream::{self, Source},
};

pub(super) const DRIVER: &str = "hostpath.csi.k8s.io";
/// upstream's examples/csi-storageclass.yaml: Immediate binding, expansion allowed.
pub(super) const STORAGE_CLASS: &str = "csi-hostpath-sc";
const DEPLOY_DIR: &str = "deploy/kubernetes-1.34/hostpath";
/// The sidecars whose RBAC deploy-hostpath.sh applies, of those deployed here.
const RBAC_FROM: &[&str] = &["external-provisioner", "external-attacher", "external-resizer"];
/// The labels deploy-hostpath.sh's kustomization puts on that RBAC.
const COMMON_LABELS: &[(&str, &str)] =
    &[("app.kubernetes.io/instance", DRIVER), ("app.kubernetes.io/part-of", "csi-driver-host-path")];

/// Every object to apply, in the order deploy-hostpath.sh applies them.
fn manifests() -> anyhow::Result<Vec<Value>> {
    let built: Vec<Source> = upstream::DEPLOYED.iter().map(|n| upstream::source(n)).collect::<Result<_, _>>()?;
    let mut rbac = Vec::new();
    for name in RBAC_FROM {
        let source = upstream::source(name)?;
        for mut object in documents(&source.read("deploy/kubernetes/rbac.yaml")?)? {
            for (key, value) in COMMON_LABELS {
                object["metadata"]["labels"][*key] = json!(value);
            }
            rbac.push(object);
        }
    }
    let roles: Vec<String> = rbac
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let hostpath = upstream::source("csi-driver-host-path")?;
    let mut plugin = Vec::new();
    for file in ["csi-hostpath-driverinfo.yaml", "csi-hostpath-plugin.yaml"] {
        plugin.extend(documents(&hostpath.read(&format!("{DEPLOY_DIR}/{file}"))?)?);
    }
    let plugin = for_this_node(plugin, &roles, &built)?;
    let class = documents(&hostpath.read("examples/csi-storageclass.yaml")?)?;
    Ok(rbac.into_iter().chain(plugin).chain(class).collect())
}

/// The plugin's objects with the images built here, without what was not built, on the
/// host's network.
fn for_this_node(objects: Vec<Value>, roles: &[String], built: &[Source]) -> anyhow::Result<Vec<Value>> {
    let mut kept = Vec::new();
    for mut object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        if kind.ends_with("RoleBinding")
            && !object["roleRef"]["name"].as_str().is_some_and(|r| roles.iter().any(|n| n == r))
        {
            continue;
        }
        // pointer_mut, not IndexMut: indexing would add an empty template to every object.
        if let Some(pod) = object.pointer_mut("/spec/template/spec")
            && let Some(containers) = pod["containers"].as_array_mut()
        {
            containers.retain_mut(|c| match c["image"].as_str().and_then(|i| image_built(i, built)) {
                Some(image) => {
                    c["image"] = json!(image);
                    true
                }
                None => false,
            });
            ensure!(containers.len() == built.len(), "the plugin's pod lacks a built component: {containers:?}");
            pod["hostNetwork"] = json!(true);
        }
        kept.push(object);
    }
    Ok(kept)
}

/// The image built here for an upstream image reference (`registry.k8s.io/sig-storage/csi-provisioner:v6.3.0`),
/// by the binary it runs.
fn image_built(reference: &str, built: &[Source]) -> Option<String> {
    let name = reference.rsplit('/').next()?.split(':').next()?;
    built.iter().find(|s| s.binary() == name).map(upstream_image)
}

/// The YAML documents of `text` as JSON values (comment-only documents skipped).
fn documents(text: &str) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let mut all = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value = Value::deserialize(document).context("an upstream manifest is not YAML")?;
        if !value.is_null() {
            all.push(value);
        }
    }
    Ok(all)
}

/// Applies the driver and waits until kubelet has registered it and the plugin's pod
/// (every sidecar) is ready.
pub(super) fn install(admin: &Kube, timeout: Duration) -> anyhow::Result<()> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": manifests()?});
    admin.apply(&serde_json::to_string_pretty(&list)?)?;
    let took = wait_for("csi-driver-host-path registered in CSINode and its pod ready", timeout, || {
        let drivers = admin.run(&["get", "csinode", NODE_NAME, "-o", "jsonpath={.spec.drivers[*].name}"]);
        let ready = admin.run(&["get", "statefulset", "csi-hostpathplugin", "-o", "jsonpath={.status.readyReplicas}"]);
        Ok(drivers.is_ok_and(|d| d.split_whitespace().any(|n| n == DRIVER)) && ready.is_ok_and(|r| r.trim() == "1"))
    })?;
    println!("e2e: csi-driver-host-path ({DRIVER}) with its sidecars ready after {:.1} s", took.as_secs_f64());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(repository: &str, package: &str) -> Source {
        Source {
            file: String::new(),
            repository: format!("github.com/kubernetes-csi/{repository}"),
            tag: "v9.9.9".into(),
            sha256: String::new(),
            package: package.into(),
        }
    }

    #[test]
    fn images_are_replaced_and_what_was_not_built_is_left_out() {
        let built = [source("external-provisioner", "./cmd/csi-provisioner")];
        let objects = documents(
            "kind: StatefulSet\nspec:\n  template:\n    spec:\n      containers:\n\
             \x20       - {name: csi-provisioner, image: registry.k8s.io/sig-storage/csi-provisioner:v6.3.0}\n\
             \x20       - {name: csi-snapshotter, image: registry.k8s.io/sig-storage/csi-snapshotter:v8.6.0}\n\
             ---\nkind: ClusterRoleBinding\nroleRef: {name: external-provisioner-runner}\n\
             ---\nkind: RoleBinding\nroleRef: {name: external-snapshotter-leaderelection}\n",
        )
        .unwrap();
        let kept = for_this_node(objects, &["external-provisioner-runner".into()], &built).unwrap();
        let kinds: Vec<&str> = kept.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["StatefulSet", "ClusterRoleBinding"], "the binding to a role not installed is dropped");
        let containers = kept[0]["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1, "the snapshotter, not built, is left out");
        assert_eq!(containers[0]["image"], "localhost/volguard-e2e/csi-provisioner:v9.9.9");
        assert_eq!(containers[0]["name"], "csi-provisioner", "nothing else changes");
        assert_eq!(kept[0]["spec"]["template"]["spec"]["hostNetwork"], true);
    }

    /// The real archives of ../shared/upstream, as the e2e reads them.
    #[test]
    fn upstream_manifests_render_with_every_built_component_and_nothing_else() {
        let objects = manifests().unwrap();
        let of_kind = |kind: &str| objects.iter().filter(|o| o["kind"] == kind).collect::<Vec<_>>();
        let pods = of_kind("StatefulSet");
        let containers = pods[0]["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        let images: Vec<&str> = containers.iter().filter_map(|c| c["image"].as_str()).collect();
        assert_eq!(images.len(), upstream::DEPLOYED.len(), "{images:?}");
        assert!(images.iter().all(|i| i.starts_with("localhost/volguard-e2e/")), "{images:?}");
        let driver = of_kind("CSIDriver");
        assert_eq!(driver[0]["metadata"]["name"], DRIVER);
        assert!(driver[0]["spec"].get("attachRequired").is_none(), "attachRequired stays at its default");
        assert!(driver[0]["spec"].get("template").is_none(), "objects without a pod are left as they are");
        assert_eq!(of_kind("StorageClass")[0]["metadata"]["name"], STORAGE_CLASS);
        let bound: Vec<&str> =
            of_kind("ClusterRoleBinding").iter().filter_map(|b| b["roleRef"]["name"].as_str()).collect();
        assert!(
            bound.contains(&"external-provisioner-runner") && !bound.iter().any(|r| r.contains("snapshot")),
            "{bound:?}"
        );
    }
}
