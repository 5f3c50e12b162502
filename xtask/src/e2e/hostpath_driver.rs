//! csi-driver-host-path installed as upstream installs it, from the release archives at run
//! time. On one node, as deploy/util/deploy-hostpath.sh installs
//! deploy/kubernetes-1.34/hostpath: each
//! controller sidecar's RBAC (its deploy/kubernetes/rbac.yaml, labelled as the script's
//! kustomization labels it), the plugin's StatefulSet with its sidecars and role bindings,
//! the CSIDriver as shipped, and upstream's example StorageClass. Changed only where this
//! node needs it: images are the ones built here (hostpathplugin is v1.18.0, the newest
//! release, where the 1.34 manifests name v1.17.1); the containers of the sidecars not
//! built (the health monitor and the snapshotter) are left out with their role bindings;
//! and the pod uses the host's network, as every pod of this node does (there is no pod
//! network: the API server's Service address answers only in the node's namespace).
//!
//! On several nodes (the fleet), as deploy/kubernetes-distributed/deploy.sh installs that
//! deployment, upstream's one for a cluster of many nodes: external-provisioner's RBAC, the
//! plugin as a DaemonSet whose every pod has its own external-provisioner
//! (`--node-deployment`: it provisions the claims given its node, so a volume lives on the
//! node that uses it), the CSIDriver (no attach), and the StorageClasses `csi-hostpath-fast`
//! and `csi-hostpath-slow` (WaitForFirstConsumer). Changed only as above, and as deploy.sh
//! changes it on a cluster without the v1beta1 CSIStorageCapacity API (Kubernetes 1.27 and
//! later): without `storageCapacity` and `--enable-capacity`.

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};
use serde_json::{Value, json};

use super::{
    images::upstream_image,
    kube::{Kube, wait_for},
    upstream::{self, Source},
};

pub(super) const DRIVER: &str = "hostpath.csi.k8s.io";
const DEPLOY_DIR: &str = "deploy/kubernetes-1.34/hostpath";
const DISTRIBUTED_DIR: &str = "deploy/kubernetes-distributed/hostpath";
/// The files of the distributed deployment's folder that its deploy.sh applies (all its
/// YAML, in name order), but csi-hostpath-testing.yaml: a socat Service for csi-sanity,
/// whose image is not built (the one-node deployment's is not applied either).
const DISTRIBUTED_FILES: &[&str] = &[
    "csi-hostpath-driverinfo.yaml",
    "csi-hostpath-plugin.yaml",
    "csi-hostpath-storageclass-fast.yaml",
    "csi-hostpath-storageclass-slow.yaml",
];
/// The plugin's workload: the StatefulSet on one node, the DaemonSet of the distributed deployment.
pub(super) const PLUGIN: &str = "csi-hostpathplugin";
/// The plugin's container (the driver itself, beside its sidecars).
pub(super) const PLUGIN_CONTAINER: &str = "hostpath";

/// Which of upstream's deployments of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deployment {
    /// deploy/kubernetes-1.34/hostpath, for one node: one pod (a StatefulSet) with the
    /// controller sidecars; volumes provisioned at once (`csi-hostpath-sc`, Immediate) and
    /// attached by external-attacher.
    Central,
    /// deploy/kubernetes-distributed, for several nodes: the plugin and a provisioner on
    /// every node; a claim is provisioned on the node it is given (`csi-hostpath-fast`,
    /// WaitForFirstConsumer); nothing to attach.
    Distributed,
}

impl Deployment {
    /// The StorageClass the scenarios' claims use: upstream's example class, or the
    /// distributed deployment's first (its `fast` kind).
    pub(super) fn storage_class(self) -> &'static str {
        match self {
            Self::Central => "csi-hostpath-sc",
            Self::Distributed => "csi-hostpath-fast",
        }
    }

    /// The sidecars whose RBAC the deployment's script applies.
    fn rbac_from(self) -> &'static [&'static str] {
        match self {
            Self::Central => &["external-provisioner", "external-attacher", "external-resizer"],
            Self::Distributed => &["external-provisioner"],
        }
    }

    /// The built components the deployment's pod runs.
    fn components(self) -> anyhow::Result<Vec<Source>> {
        upstream::DEPLOYED.iter().filter(|n| !self.unused().contains(n)).map(|n| upstream::source(n)).collect()
    }

    /// The built components the deployment leaves out.
    fn unused(self) -> &'static [&'static str] {
        match self {
            Self::Central => &[],
            Self::Distributed => &["external-attacher", "external-resizer"],
        }
    }

    /// Whether the deployment's pods may run the image archived at `archive`: every archive
    /// but those of the components it leaves out (an archive is named after its binary,
    /// `images::upstream_images`). An emulated node imports only these.
    pub(super) fn may_run(self, archive: &Path) -> anyhow::Result<bool> {
        for name in self.unused() {
            if archive.ends_with(format!("{}.tar", upstream::source(name)?.binary())) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The liveness probes of the plugin's containers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probes {
    /// As upstream ships them.
    Upstream,
    /// For a node under software emulation: each probe waits [`EMULATED_PROBE_TIMEOUT`] s
    /// and comes every [`EMULATED_PROBE_PERIOD`] s, where upstream's `hostpath` container
    /// gives its `/healthz` 3 s every 2 s; and the two sidecars that answer those probes by
    /// asking the driver over its socket wait [`EMULATED_SIDECAR_TIMEOUT`] for it (the
    /// livenessprobe's `--probe-timeout`, 3 s by default; node-driver-registrar's
    /// `--timeout`, 1 s), else they answer 500 long before the probe gives up. In the VM
    /// the driver's answer took longer than 3 s; its container was restarted 17 times in
    /// one run of the storage suite (24 with only the probes' timing changed), and each
    /// restart failed the specs mounting at that moment (`connection error`). What is
    /// probed, and how many failures restart a container, stay upstream's.
    Emulated,
}

/// Seconds an emulated node's liveness probe waits.
const EMULATED_PROBE_TIMEOUT: u64 = 30;
/// Seconds between an emulated node's liveness probes.
const EMULATED_PROBE_PERIOD: u64 = 10;
/// How long an emulated node's probing sidecars wait for the driver: within the probe's
/// own timeout, so that a slow answer is still an answer.
const EMULATED_SIDECAR_TIMEOUT: &str = "25s";

/// The sidecars that answer a liveness probe by asking the driver, and their flag for how
/// long they wait.
const PROBING_SIDECARS: &[(&str, &str)] =
    &[("liveness-probe", "--probe-timeout"), ("node-driver-registrar", "--timeout")];

impl Probes {
    /// `container` with its liveness probe (if any) timed for the node.
    fn apply(self, container: &mut Value) {
        if self != Self::Emulated {
            return;
        }
        if let Some(probe) = container.get_mut("livenessProbe").and_then(Value::as_object_mut) {
            probe.insert("timeoutSeconds".into(), json!(EMULATED_PROBE_TIMEOUT));
            probe.insert("periodSeconds".into(), json!(EMULATED_PROBE_PERIOD));
        }
        let flag = PROBING_SIDECARS.iter().find(|(name, _)| container["name"] == *name).map(|(_, flag)| flag);
        if let (Some(flag), Some(args)) = (flag, container.get_mut("args").and_then(Value::as_array_mut)) {
            args.push(json!(format!("{flag}={EMULATED_SIDECAR_TIMEOUT}")));
        }
    }
}

/// The labels deploy-hostpath.sh's kustomization puts on that RBAC.
const COMMON_LABELS: &[(&str, &str)] =
    &[("app.kubernetes.io/instance", DRIVER), ("app.kubernetes.io/part-of", "csi-driver-host-path")];

/// Every object to apply, in the order the deployment's script applies them.
fn manifests(deployment: Deployment, probes: Probes) -> anyhow::Result<Vec<Value>> {
    let built = deployment.components()?;
    let mut rbac = Vec::new();
    for name in deployment.rbac_from() {
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
    if deployment == Deployment::Central {
        for file in ["csi-hostpath-driverinfo.yaml", "csi-hostpath-plugin.yaml"] {
            plugin.extend(documents(&hostpath.read(&format!("{DEPLOY_DIR}/{file}"))?)?);
        }
        plugin.extend(documents(&hostpath.read("examples/csi-storageclass.yaml")?)?);
    } else {
        for file in DISTRIBUTED_FILES {
            plugin.extend(documents(&hostpath.read(&format!("{DISTRIBUTED_DIR}/{file}"))?)?);
        }
        plugin = plugin.into_iter().map(without_capacity).collect();
    }
    let plugin = for_this_node(plugin, &roles, &built, probes)?;
    Ok(rbac.into_iter().chain(plugin).collect())
}

/// What deploy.sh does to each line of the distributed deployment when the cluster has no
/// `csistoragecapacities.v1beta1.storage.k8s.io` (served up to Kubernetes 1.26): the
/// CSIDriver's `storageCapacity: true` and the provisioner's `--enable-capacity` go.
fn without_capacity(mut object: Value) -> Value {
    if let Some(spec) = object.pointer_mut("/spec").and_then(Value::as_object_mut)
        && spec.get("storageCapacity") == Some(&json!(true))
    {
        spec.remove("storageCapacity");
    }
    if let Some(containers) = object.pointer_mut("/spec/template/spec/containers").and_then(Value::as_array_mut) {
        for container in containers {
            if let Some(args) = container["args"].as_array_mut() {
                args.retain(|a| a != "--enable-capacity");
            }
        }
    }
    object
}

/// The plugin's objects with the images built here, without what was not built, on the
/// host's network, with `probes`.
fn for_this_node(
    objects: Vec<Value>,
    roles: &[String],
    built: &[Source],
    probes: Probes,
) -> anyhow::Result<Vec<Value>> {
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
                    probes.apply(c);
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

/// Applies the driver and waits until the kubelet of each of `nodes` has registered it
/// and the plugin's pods (every sidecar) are ready: the StatefulSet's one, or the
/// DaemonSet's one per node.
pub(super) fn install(
    admin: &Kube,
    deployment: Deployment,
    probes: Probes,
    nodes: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": manifests(deployment, probes)?});
    admin.apply(&serde_json::to_string_pretty(&list)?)?;
    let what = format!("csi-driver-host-path registered in the CSINode of {} and its pods ready", nodes.join(", "));
    let took = wait_for(&what, timeout, || {
        for node in nodes {
            let drivers = admin.run(&["get", "csinode", node, "-o", "jsonpath={.spec.drivers[*].name}"]);
            if !drivers.is_ok_and(|d| d.split_whitespace().any(|n| n == DRIVER)) {
                return Ok(false);
            }
        }
        let ready = match deployment {
            Deployment::Central => {
                admin.run(&["get", "statefulset", PLUGIN, "-o", "jsonpath={.status.readyReplicas}"])?.trim() == "1"
            }
            Deployment::Distributed => {
                let status = admin.get_json(&["daemonset", PLUGIN])?["status"].clone();
                status["numberReady"] == json!(nodes.len()) && status["desiredNumberScheduled"] == json!(nodes.len())
            }
        };
        Ok(ready)
    })?;
    println!(
        "e2e: csi-driver-host-path ({DRIVER}, {deployment:?}) with its sidecars ready after {:.1} s",
        took.as_secs_f64()
    );
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
        let kept = for_this_node(objects, &["external-provisioner-runner".into()], &built, Probes::Upstream).unwrap();
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
        let objects = manifests(Deployment::Central, Probes::Upstream).unwrap();
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
        assert_eq!(of_kind("StorageClass")[0]["metadata"]["name"], Deployment::Central.storage_class());
        let bound: Vec<&str> =
            of_kind("ClusterRoleBinding").iter().filter_map(|b| b["roleRef"]["name"].as_str()).collect();
        assert!(
            bound.contains(&"external-provisioner-runner") && !bound.iter().any(|r| r.contains("snapshot")),
            "{bound:?}"
        );
    }

    /// On an emulated node only the liveness probes' timing changes, on every container
    /// that has one (upstream's `hostpath` container among them), and how long the two
    /// sidecars that answer probes wait for the driver.
    #[test]
    fn an_emulated_nodes_probes_wait_longer_and_nothing_else_changes() {
        let containers = |probes| {
            let objects = manifests(Deployment::Central, probes).unwrap();
            let pod = objects.into_iter().find(|o| o["kind"] == "StatefulSet").unwrap();
            pod["spec"]["template"]["spec"]["containers"].as_array().unwrap().clone()
        };
        let (upstream, emulated) = (containers(Probes::Upstream), containers(Probes::Emulated));
        let hostpath = upstream.iter().find(|c| c["name"] == PLUGIN_CONTAINER).unwrap();
        assert_eq!(hostpath["livenessProbe"]["timeoutSeconds"], 3, "upstream's, kept by Probes::Upstream");
        let (mut probed, mut timed) = (Vec::new(), Vec::new());
        for (before, mut after) in upstream.into_iter().zip(emulated) {
            if let Some(probe) = after.get_mut("livenessProbe").and_then(Value::as_object_mut) {
                assert_eq!(probe["timeoutSeconds"], EMULATED_PROBE_TIMEOUT, "{probe:?}");
                assert_eq!(probe["periodSeconds"], EMULATED_PROBE_PERIOD, "{probe:?}");
                for timing in ["timeoutSeconds", "periodSeconds"] {
                    probe.insert(timing.into(), before["livenessProbe"][timing].clone());
                }
                probed.push(after["name"].as_str().unwrap().to_owned());
            }
            if let Some((name, flag)) = PROBING_SIDECARS.iter().find(|(name, _)| after["name"] == *name) {
                let args = after["args"].as_array_mut().unwrap();
                assert_eq!(args.pop(), Some(json!(format!("{flag}={EMULATED_SIDECAR_TIMEOUT}"))), "{name}");
                assert!(!args.iter().any(|a| a.as_str().is_some_and(|a| a.starts_with(flag))), "{name}: {args:?}");
                timed.push(*name);
            }
            assert_eq!(before, after, "only the probe's timing differs");
        }
        assert!(probed.iter().any(|n| n == PLUGIN_CONTAINER), "{probed:?}");
        assert_eq!(timed, ["node-driver-registrar", "liveness-probe"], "both probing sidecars wait longer");
    }

    /// The distributed deployment from the real archive: a DaemonSet with a provisioner of
    /// its own per node, no attacher, no capacity tracking (as deploy.sh leaves it on 1.34).
    #[test]
    fn the_distributed_deployment_runs_a_provisioner_on_every_node_and_nothing_to_attach() {
        let objects = manifests(Deployment::Distributed, Probes::Upstream).unwrap();
        let of_kind = |kind: &str| objects.iter().filter(|o| o["kind"] == kind).collect::<Vec<_>>();
        assert!(of_kind("StatefulSet").is_empty());
        let daemonsets = of_kind("DaemonSet");
        assert_eq!(daemonsets.len(), 1);
        assert_eq!(daemonsets[0]["metadata"]["name"], PLUGIN);
        let pod = &daemonsets[0]["spec"]["template"]["spec"];
        assert_eq!(pod["hostNetwork"], true);
        let containers = pod["containers"].as_array().unwrap();
        let images: Vec<&str> = containers.iter().filter_map(|c| c["image"].as_str()).collect();
        assert_eq!(images.len(), 4, "plugin, registrar, livenessprobe, provisioner: {images:?}");
        assert!(images.iter().all(|i| i.starts_with("localhost/volguard-e2e/")), "{images:?}");
        let provisioner = containers.iter().find(|c| c["name"] == "csi-provisioner").unwrap();
        let args: Vec<&str> = provisioner["args"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
        assert!(args.contains(&"--node-deployment=true"), "{args:?}");
        assert!(!args.contains(&"--enable-capacity"), "deploy.sh drops it without v1beta1 CSIStorageCapacity");
        let driver = of_kind("CSIDriver");
        assert_eq!(driver[0]["spec"]["attachRequired"], false);
        assert!(driver[0]["spec"].get("storageCapacity").is_none(), "{}", driver[0]);
        let classes: Vec<&str> =
            of_kind("StorageClass").iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
        assert_eq!(classes, ["csi-hostpath-fast", "csi-hostpath-slow"]);
        assert_eq!(of_kind("StorageClass")[0]["volumeBindingMode"], "WaitForFirstConsumer");
        assert_eq!(Deployment::Distributed.storage_class(), "csi-hostpath-fast");
        let bound: Vec<&str> =
            of_kind("ClusterRoleBinding").iter().filter_map(|b| b["roleRef"]["name"].as_str()).collect();
        assert_eq!(bound, ["external-provisioner-runner"], "only external-provisioner's RBAC");
    }

    #[test]
    fn the_distributed_deployment_runs_no_attacher_or_resizer_image() {
        let archives =
            ["csi-attacher.tar", "csi-resizer.tar", "csi-provisioner.tar", "hostpathplugin.tar", "volguard-e2e.tar"];
        let may_run = |deployment: Deployment| -> Vec<&str> {
            archives.into_iter().filter(|a| deployment.may_run(&Path::new("/images").join(a)).unwrap()).collect()
        };
        assert_eq!(may_run(Deployment::Distributed), ["csi-provisioner.tar", "hostpathplugin.tar", "volguard-e2e.tar"]);
        assert_eq!(may_run(Deployment::Central), archives);
    }
}
