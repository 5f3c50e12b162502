//! What the real-node scenarios share: installing volguard (the README's commands), the
//! e2e's volumes (provisioned by csi-driver-host-path) and pods, and reading back what happened (the
//! agent's pod and mode, the node's masks, volguard's Events, the conflict counter).

use std::{fs, time::Duration};

use anyhow::{Context, ensure};

use super::{
    NODE_NAME, TAG,
    hostpath_driver::STORAGE_CLASS,
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

/// What the e2e sets on the chart besides the image values: a tracing backend, when
/// named, and `metrics.secure` (on the host node, where Prometheus scrapes).
pub(super) struct Chart<'a> {
    pub(super) trace_backend: Option<&'a str>,
    pub(super) secure_metrics: bool,
}

/// The README's "Install on a cluster", word for word, with only the image values set.
pub(super) fn install_volguard(admin: &Kube, chart: &Chart, timeout: Duration) -> anyhow::Result<()> {
    helm_with_values(
        &["install", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"],
        TAG,
        chart,
        admin,
    )?;
    let timeout = format!("--timeout={}s", timeout.as_secs() * 2);
    run_cmd(admin.kubectl().args(["-n", "kube-system", "rollout", "status", "daemonset/volguard", &timeout]))
        .context("the agent's DaemonSet did not become ready")?;
    Ok(())
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
    run_cmd(&mut helm)
}

pub(super) fn agent_pod(admin: &Kube) -> anyhow::Result<String> {
    let name = admin.run(&[
        "get",
        "pods",
        "-n",
        AGENT_NS,
        "-l",
        AGENT_SELECTOR,
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])?;
    ensure!(!name.trim().is_empty(), "no agent pod");
    Ok(name.trim().to_owned())
}

pub(super) fn agent_logs(admin: &Kube) -> String {
    admin
        .run(&["logs", "-n", AGENT_NS, "-l", AGENT_SELECTOR, "--tail=-1", "--prefix"])
        .unwrap_or_else(|e| format!("{e:#}"))
}

/// A claim of csi-driver-host-path's StorageClass, with volguard's single-pod annotation
/// when `single_pod`, provisioned and bound; returns its PV's name. (The driver publishes
/// every volume in mount-utils' two steps, bind then bind,remount: the race quarantine
/// must survive.)
pub(super) fn volume(admin: &Kube, name: &str, access_mode: &str, single_pod: bool) -> anyhow::Result<String> {
    let annotations = if single_pod { ", annotations: {volguard.io/single-pod: \"true\"}" } else { "" };
    admin.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: {NS}{annotations}}}\nspec:\n  \
         accessModes: [{access_mode}]\n  storageClassName: {STORAGE_CLASS}\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    ))?;
    wait_for(&format!("claim {name} provisioned and Bound"), Duration::from_secs(60), || {
        Ok(admin.run(&["get", "pvc", "-n", NS, name, "-o", "jsonpath={.status.phase}"])?.trim() == "Bound")
    })?;
    volume_of(admin, name)
}

/// The PV bound to claim `name` (`pvc-<uid>`, as the provisioner names it).
pub(super) fn volume_of(admin: &Kube, claim: &str) -> anyhow::Result<String> {
    let pv = admin.run(&["get", "pvc", "-n", NS, claim, "-o", "jsonpath={.spec.volumeName}"])?;
    ensure!(!pv.trim().is_empty(), "claim {claim} has no volume");
    Ok(pv.trim().to_owned())
}

/// A busybox pod pinned to the node with `spec.nodeName` (no scheduler, as static and
/// hand-placed pods reach kubelet), running `script` with `volumes` mounted.
pub(super) fn pod(name: &str, script: &str, mounts: &str, volumes: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {NS}}}\nspec:\n  nodeName: {NODE_NAME}\n  \
         hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n    - name: main\n      \
         image: {BUSYBOX_IMAGE}\n      imagePullPolicy: Never\n      command: [sh, -c, '{script}']\n      \
         volumeMounts: {mounts}\n  volumes: {volumes}\n"
    )
}

pub(super) fn claim_pod(name: &str, claim: &str, script: &str) -> String {
    pod(
        name,
        script,
        "[{name: data, mountPath: /data}]",
        &format!("[{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]"),
    )
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
    Ok(fs::read_to_string("/proc/self/mountinfo")?
        .lines()
        .filter(|l| {
            l.split(" - ").nth(1).is_some_and(|rest| rest.split_whitespace().nth(1) == Some("volguard-quarantine"))
        })
        .filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned))
        .collect())
}

/// The agent's enforcement mode, as its metrics say (`enforce`, `quarantine`, `audit`).
pub(super) fn agent_mode() -> anyhow::Result<String> {
    let series = prometheus::query("volguard_enforcement_mode == 1")?;
    series
        .first()
        .and_then(|s| s["metric"]["mode"].as_str())
        .map(str::to_owned)
        .context("Prometheus has no volguard_enforcement_mode == 1")
}

/// Every conflict the agents counted. The counter has no series before its first
/// conflict, so 0 then, but only while Prometheus scrapes an agent (its mode gauge): a
/// renamed or unscraped metric is an error, not 0.
pub(super) fn conflicts_total() -> anyhow::Result<f64> {
    prometheus::value("sum(volguard_conflicts_total) or on() (0 * count(volguard_enforcement_mode))")
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

pub(super) fn wait_value(what: &str, mut check: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<f64> {
    wait_for(what, Duration::from_secs(30), &mut check)?;
    conflicts_total()
}
