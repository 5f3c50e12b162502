//! What the real-node scenarios share: installing volguard (the README's commands), the
//! e2e's volumes (provisioned by csi-driver-host-path) and pods, and reading back what happened (the
//! agent's pod and mode, the node's masks, volguard's Events, the conflict counter).

use std::{fs, time::Duration};

use anyhow::{Context, ensure};

use super::{
    TAG,
    hostpath_driver::Deployment,
    images::{BUSYBOX_IMAGE, VOLGUARD_REPOSITORY},
    kube::{Kube, helm, wait_for},
    prometheus,
};
use crate::proc::run_cmd;

pub(super) const NS: &str = "e2e";
pub(super) const AGENT_NS: &str = "kube-system";
pub(super) const AGENT_SELECTOR: &str = "app.kubernetes.io/name=volguard";
/// What pod A writes into the single-pod volume; nobody else may read it while A owns it.
pub(super) const A_DATA: &str = "written-by-pod-a";
/// How long the agent's DaemonSet may take to roll: one node at a time, the VM's node
/// emulated (its agent verifies its programs under software emulation).
pub(super) const ROLLOUT: Duration = Duration::from_secs(600);

/// How long a pod may take to start on the emulated node (the VM's).
pub(super) const EMULATED: Duration = Duration::from_secs(600);

/// Where a scenario's claims and pods go: the node its pods are pinned to, and the
/// driver's deployment there, whose StorageClass provisions the claims.
#[derive(Clone, Copy, Debug)]
pub(super) struct Site {
    pub(super) node: &'static str,
    pub(super) storage: Deployment,
}

/// What the e2e sets on the chart besides the image values: a tracing backend, when
/// named, `metrics.secure` (on the host node, where Prometheus scrapes), and
/// `updateStrategy: OnDelete` where an upgrade is to replace one node's agent alone.
#[derive(Clone, Copy)]
pub(super) struct Chart<'a> {
    pub(super) trace_backend: Option<&'a str>,
    pub(super) secure_metrics: bool,
    /// The fleet: a scenario on one node replaces that node's agent only (see
    /// [`roll_agent`]); the emulated node's agent, slow to restart, keeps running.
    pub(super) on_delete: bool,
}

/// The README's "Install on a cluster", word for word, with only the image values set.
pub(super) fn install_volguard(admin: &Kube, chart: &Chart, timeout: Duration) -> anyhow::Result<()> {
    helm_with_values(
        &["install", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"],
        TAG,
        chart,
        admin,
    )?;
    wait_rollout_within(admin, timeout * 2).context("the agent's DaemonSet did not become ready")
}

pub(super) fn helm_with_values(args: &[&str], tag: &str, chart: &Chart, admin: &Kube) -> anyhow::Result<()> {
    let mut helm = helm(&admin.kubeconfig);
    helm.args(args).args([
        "--set",
        &format!("image.repository={VOLGUARD_REPOSITORY}"),
        "--set",
        &format!("image.tag={tag}"),
    ]);
    if let Some(backend) = chart.trace_backend {
        helm.args(["--set", &format!("traceBackend={backend}")]);
    }
    if chart.secure_metrics {
        helm.args(["--set", "metrics.secure=true"]);
    }
    if chart.on_delete {
        helm.args(["--set", "updateStrategy=OnDelete"]);
    }
    run_cmd(&mut helm)
}

/// Waits until the agent's DaemonSet has rolled out on every node.
pub(super) fn wait_rollout(admin: &Kube) -> anyhow::Result<()> {
    wait_rollout_within(admin, ROLLOUT)
}

/// [`wait_rollout`] within `timeout`: `kubectl rollout status`, or, for a DaemonSet that
/// waits for its pods to be deleted (`OnDelete`, which `rollout status` does not follow),
/// until it has seen its newest spec and has an agent Ready on every node it is for.
fn wait_rollout_within(admin: &Kube, timeout: Duration) -> anyhow::Result<()> {
    if !rolls_on_delete(admin)? {
        let timeout = format!("--timeout={}s", timeout.as_secs());
        return run_cmd(admin.kubectl().args(["-n", AGENT_NS, "rollout", "status", "daemonset/volguard", &timeout]));
    }
    wait_for("the agent Ready on every node of its DaemonSet", timeout, || {
        let daemonset = admin.get_json(&["daemonset", "-n", AGENT_NS, "volguard"])?;
        let status = &daemonset["status"];
        let wanted = status["desiredNumberScheduled"].as_u64().unwrap_or(0);
        Ok(spec_seen(&daemonset)
            && wanted > 0
            && status["currentNumberScheduled"] == wanted
            && status["numberReady"] == wanted
            && status["numberMisscheduled"].as_u64().unwrap_or(0) == 0)
    })?;
    Ok(())
}

/// Whether the agent's DaemonSet replaces pods only when they are deleted.
fn rolls_on_delete(admin: &Kube) -> anyhow::Result<bool> {
    let strategy =
        admin.run(&["get", "daemonset", "-n", AGENT_NS, "volguard", "-o", "jsonpath={.spec.updateStrategy.type}"])?;
    Ok(strategy.trim() == "OnDelete")
}

/// Whether the DaemonSet controller has acted on the object's newest spec.
fn spec_seen(daemonset: &serde_json::Value) -> bool {
    daemonset["status"]["observedGeneration"] == daemonset["metadata"]["generation"]
}

/// After a `helm upgrade`: the agent on `node` replaced by one of the upgraded spec, with
/// `meanwhile` done while that happens; returns the new agent's pod. With `RollingUpdate`
/// the DaemonSet replaces every node's agent; with `OnDelete` (the fleet) `node`'s pod is
/// deleted here and the other node's agent keeps running.
pub(super) fn roll_agent(
    admin: &Kube,
    node: &str,
    meanwhile: impl FnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<String> {
    let old = agent_pod(admin, node)?;
    if rolls_on_delete(admin)? {
        // A pod deleted before the controller has seen the new spec comes back as it was.
        wait_for("the DaemonSet controller to see the upgraded spec", ROLLOUT, || {
            Ok(spec_seen(&admin.get_json(&["daemonset", "-n", AGENT_NS, "volguard"])?))
        })?;
        admin.run(&["delete", "pod", "-n", AGENT_NS, &old, "--wait=false"])?;
        meanwhile()?;
    } else {
        meanwhile()?;
        wait_rollout(admin)?;
    }
    wait_new_agent(admin, node, &old)
}

/// Waits until `node`'s only agent pod is another than `old`, and Ready; returns it.
pub(super) fn wait_new_agent(admin: &Kube, node: &str, old: &str) -> anyhow::Result<String> {
    let mut new = None;
    wait_for(&format!("an agent pod other than {old} Ready on {node}"), ROLLOUT, || {
        new = match agent_pods_on(admin, node)?.as_slice() {
            [one] if one != old && is_ready(admin, one)? => Some(one.clone()),
            _ => None,
        };
        Ok(new.is_some())
    })?;
    Ok(new.expect("found"))
}

/// Whether the agent pod `pod` is Ready.
fn is_ready(admin: &Kube, pod: &str) -> anyhow::Result<bool> {
    let ready = r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#;
    Ok(admin.run(&["get", "pod", "-n", AGENT_NS, pod, "-o", ready])?.trim() == "True")
}

/// The agent's pod on `node`.
pub(super) fn agent_pod(admin: &Kube, node: &str) -> anyhow::Result<String> {
    agent_pods_on(admin, node)?.into_iter().next().with_context(|| format!("no agent pod on {node}"))
}

/// The agent's pods on `node` (none, one, or two while one terminates).
pub(super) fn agent_pods_on(admin: &Kube, node: &str) -> anyhow::Result<Vec<String>> {
    let names = admin.run(&[
        "get",
        "pods",
        "-n",
        AGENT_NS,
        "-l",
        AGENT_SELECTOR,
        "--field-selector",
        &format!("spec.nodeName={node}"),
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    Ok(names.split_whitespace().map(str::to_owned).collect())
}

pub(super) fn agent_logs(admin: &Kube) -> String {
    admin
        .run(&["logs", "-n", AGENT_NS, "-l", AGENT_SELECTOR, "--tail=-1", "--prefix"])
        .unwrap_or_else(|e| format!("{e:#}"))
}

/// A claim of csi-driver-host-path's StorageClass at `site`, with volguard's single-pod
/// annotation when `single_pod`, provisioned and bound; returns its PV's name. (The driver
/// publishes every volume in mount-utils' two steps, bind then bind,remount: the race
/// quarantine must survive.)
pub(super) fn volume(
    admin: &Kube,
    site: Site,
    name: &str,
    access_mode: &str,
    single_pod: bool,
) -> anyhow::Result<String> {
    admin.apply(&claim(site, name, access_mode, single_pod))?;
    // On the emulated node its own provisioner provisions, as slow as the rest of it.
    let timeout = match site.node {
        super::VM_NODE_NAME => EMULATED,
        _ => Duration::from_secs(60),
    };
    wait_for(&format!("claim {name} provisioned and Bound"), timeout, || {
        Ok(admin.run(&["get", "pvc", "-n", NS, name, "-o", "jsonpath={.status.phase}"])?.trim() == "Bound")
    })?;
    volume_of(admin, name)
}

/// The claim's manifest. A class that binds at the first consumer provisions once the
/// claim names its node (`volume.kubernetes.io/selected-node`), which the scheduler writes
/// for a pod it places; the scenarios' pods are placed by `spec.nodeName`, so the claim
/// is given the node they will run on, as the scheduler would give it.
fn claim(site: Site, name: &str, access_mode: &str, single_pod: bool) -> String {
    let mut annotations = Vec::new();
    if single_pod {
        annotations.push("volguard.io/single-pod: \"true\"".to_owned());
    }
    if site.storage == Deployment::Distributed {
        annotations.push(format!("volume.kubernetes.io/selected-node: {}", site.node));
    }
    let annotations =
        if annotations.is_empty() { String::new() } else { format!(", annotations: {{{}}}", annotations.join(", ")) };
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: {NS}{annotations}}}\nspec:\n  \
         accessModes: [{access_mode}]\n  storageClassName: {class}\n  resources: {{requests: {{storage: 1Gi}}}}\n",
        class = site.storage.storage_class(),
    )
}

/// The PV bound to claim `name` (`pvc-<uid>`, as the provisioner names it).
pub(super) fn volume_of(admin: &Kube, claim: &str) -> anyhow::Result<String> {
    let pv = admin.run(&["get", "pvc", "-n", NS, claim, "-o", "jsonpath={.spec.volumeName}"])?;
    ensure!(!pv.trim().is_empty(), "claim {claim} has no volume");
    Ok(pv.trim().to_owned())
}

/// A busybox pod pinned to the site's node with `spec.nodeName` (no scheduler, as static
/// and hand-placed pods reach kubelet), running `script` with `volumes` mounted.
pub(super) fn pod(site: Site, name: &str, script: &str, mounts: &str, volumes: &str) -> String {
    pod_placed(Some(site.node), name, script, mounts, volumes)
}

/// A pod pinned to `node`, or placed by the scheduler when None.
fn pod_placed(node: Option<&str>, name: &str, script: &str, mounts: &str, volumes: &str) -> String {
    let placed = node.map(|n| format!("  nodeName: {n}\n")).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n{placed}  \
         hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n    - name: main\n      \
         image: {BUSYBOX_IMAGE}\n      imagePullPolicy: Never\n      command: [sh, -c, '{script}']\n      \
         volumeMounts: {mounts}\n  volumes: {volumes}\n"
    )
}

const DATA_MOUNT: &str = "[{name: data, mountPath: /data}]";

fn data_volume(claim: &str) -> String {
    format!("[{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]")
}

pub(super) fn claim_pod(site: Site, name: &str, claim: &str, script: &str) -> String {
    pod(site, name, script, DATA_MOUNT, &data_volume(claim))
}

/// A pod of `claim` that the scheduler places (no `spec.nodeName`).
pub(super) fn scheduled_claim_pod(name: &str, claim: &str, script: &str) -> String {
    pod_placed(None, name, script, DATA_MOUNT, &data_volume(claim))
}

pub(super) fn exec(admin: &Kube, pod: &str, command: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["exec", "-n", NS, pod, "--"];
    args.extend(command);
    admin.run(&args)
}

pub(super) fn pod_uid(admin: &Kube, name: &str) -> anyhow::Result<String> {
    Ok(admin.run(&["get", "pod", "-n", NS, name, "-o", "jsonpath={.metadata.uid}"])?.trim().to_owned())
}

/// The node's mounts whose source is volguard's quarantine mask, by target.
pub(super) fn masks() -> anyhow::Result<Vec<String>> {
    Ok(masks_in(&fs::read_to_string("/proc/self/mountinfo")?))
}

/// The quarantine masks of a mount table (`mountinfo`'s text): their mount points.
pub(super) fn masks_in(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter(|l| {
            l.split(" - ").nth(1).is_some_and(|rest| rest.split_whitespace().nth(1) == Some("volguard-quarantine"))
        })
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .collect()
}

/// The enforcement mode of the agent on `node`, as its metrics say (`enforce`,
/// `quarantine`, `audit`; Prometheus labels each series with its node).
pub(super) fn agent_mode(node: &str) -> anyhow::Result<String> {
    agent_mode_label(node, "mode")
}

/// Why the agent on `node` runs in its mode: the `reason` label (`lsm_active`,
/// `fmod_ret_active`, ...).
pub(super) fn agent_mode_reason(node: &str) -> anyhow::Result<String> {
    agent_mode_label(node, "reason")
}

fn agent_mode_label(node: &str, label: &str) -> anyhow::Result<String> {
    let series = prometheus::query(&format!("volguard_enforcement_mode{{node=\"{node}\"}} == 1"))?;
    series
        .first()
        .and_then(|s| s["metric"][label].as_str())
        .map(str::to_owned)
        .with_context(|| format!("Prometheus has no volguard_enforcement_mode == 1 of {node} with a {label}"))
}

/// Every conflict the agent on `node` counted. The counter has no series before its first
/// conflict, so 0 then, but only while Prometheus scrapes that agent (its mode gauge): a
/// renamed or unscraped metric is an error, not 0.
pub(super) fn conflicts_total(node: &str) -> anyhow::Result<f64> {
    prometheus::value(&format!(
        "sum(volguard_conflicts_total{{node=\"{node}\"}}) or on() (0 * count(volguard_enforcement_mode{{node=\"{node}\"}}))"
    ))
}

pub(super) fn wait_event(admin: &Kube, pod: &str) -> anyhow::Result<super::kube::Event> {
    wait_event_within(admin, pod, Duration::from_secs(60))
}

pub(super) fn wait_event_within(admin: &Kube, pod: &str, timeout: Duration) -> anyhow::Result<super::kube::Event> {
    let mut found = None;
    wait_for(&format!("volguard's Warning Event on {pod}"), timeout, || {
        found = admin.events_for(NS, pod)?.into_iter().find(|e| e.reason.starts_with("SinglePodVolume"));
        Ok(found.is_some())
    })?;
    let event = found.expect("found");
    ensure!(event.kind == "Warning", "the Event is {:?}, not a Warning", event.kind);
    Ok(event)
}

pub(super) fn wait_value(
    node: &str,
    what: &str,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<f64> {
    wait_for(what, Duration::from_secs(30), &mut check)?;
    conflicts_total(node)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn parsed(yaml: &str) -> Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    #[test]
    fn a_claim_of_a_class_that_binds_at_first_consumer_is_given_its_node() {
        let site = Site { node: "volguard-e2e-vm", storage: Deployment::Distributed };
        let given = parsed(&claim(site, "single", "ReadWriteOnce", true));
        assert_eq!(given["metadata"]["annotations"]["volume.kubernetes.io/selected-node"], "volguard-e2e-vm");
        assert_eq!(given["metadata"]["annotations"]["volguard.io/single-pod"], "true");
        assert_eq!(given["spec"]["storageClassName"], "csi-hostpath-fast");
        assert_eq!(given["spec"]["accessModes"][0], "ReadWriteOnce");

        let site = Site { node: "volguard-e2e", storage: Deployment::Central };
        let at_once = parsed(&claim(site, "rwop", "ReadWriteOncePod", false));
        assert!(at_once["metadata"].get("annotations").is_none(), "{at_once}");
        assert_eq!(at_once["spec"]["storageClassName"], "csi-hostpath-sc");
    }

    #[test]
    fn pods_are_pinned_to_their_sites_node_or_left_to_the_scheduler() {
        let site = Site { node: "volguard-e2e-vm", storage: Deployment::Distributed };
        let pinned = parsed(&claim_pod(site, "a", "single", "exec sleep 1"));
        assert_eq!(pinned["spec"]["nodeName"], "volguard-e2e-vm");
        assert_eq!(pinned["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "single");
        assert_eq!(pinned["spec"]["containers"][0]["command"][2], "exec sleep 1");
        let scheduled = parsed(&scheduled_claim_pod("b", "single", "exec sleep 1"));
        assert!(scheduled["spec"].get("nodeName").is_none(), "{scheduled}");
        assert_eq!(scheduled["spec"]["hostNetwork"], true);
        assert_eq!(scheduled["metadata"]["namespace"], NS);
    }
}
