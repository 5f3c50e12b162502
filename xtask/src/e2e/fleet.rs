//! `cargo xtask e2e --fleet`: one control plane, two real nodes, one `helm install`.
//!
//! The node in these namespaces (`volguard-e2e`, this host's kernel: quarantine where it
//! has no BPF LSM) and the node in the VM (`volguard-e2e-vm`, Debian's 6.1 without `bpf`
//! in `lsm=`: enforce by fmod_ret) register with the same API server. csi-driver-host-path runs as
//! upstream deploys it on several nodes (a DaemonSet, a provisioner per node, each claim
//! provisioned on the node it is given: hostpath volumes are node-local), and volguard is
//! installed once from its chart. Then scenarios 1-4, 7 and 8 on the first node, 6, 6b
//! and 6c on the second, what only a fleet shows (F1-F4), and 5 (uninstall) last.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};

use super::{
    NODE_NAME, VM_NODE_NAME,
    fleet_audit::{self, volume_view},
    fleet_metrics,
    hostpath_driver::{self, DRIVER, Deployment, Probes},
    kube::{Kube, helm, wait_for},
    node::{self, Node},
    prometheus,
    runner::Runner,
    scenarios, vm_scenarios,
    workload::{
        A_DATA, AGENT_NS, Chart, EMULATED, NS, Site, agent_mode, agent_mode_reason, agent_pods_on, claim_pod,
        conflicts_total, exec, install_volguard, pod_uid, scheduled_claim_pod, volume,
    },
};
use crate::proc::output;

pub(super) const NODES: [&str; 2] = [NODE_NAME, VM_NODE_NAME];
/// The driver as upstream deploys it on several nodes.
pub(super) const DRIVER_DEPLOYMENT: Deployment = Deployment::Distributed;
const HOST: Site = Site { node: NODE_NAME, storage: DRIVER_DEPLOYMENT };
const VM: Site = Site { node: VM_NODE_NAME, storage: DRIVER_DEPLOYMENT };
/// How long a pod may take to start on the node in these namespaces.
const NATIVE: Duration = Duration::from_secs(120);

pub fn run(node: &mut Node, logs: &Path, trace_backend: Option<&str>) -> anyhow::Result<()> {
    let admin = node.admin();
    let started = Instant::now();
    // OnDelete: the host's scenarios replace the host's agent alone (the emulated node's
    // agent restarts in minutes, and each restart there risks the guest: docs/testing.md).
    let chart = Chart { trace_backend, secure_metrics: true, on_delete: true };
    // One DaemonSet's probes serve both nodes: upstream's are kept.
    hostpath_driver::install(&admin, DRIVER_DEPLOYMENT, Probes::Upstream, &NODES, EMULATED)?;
    install_volguard(&admin, &chart, EMULATED)?;
    prometheus::start(node, &admin, Path::new(node::STATE), &NODES)?;
    println!("e2e: the CSI driver and volguard Ready on both nodes after {:.0} s", started.elapsed().as_secs_f64());
    admin.run(&["create", "namespace", NS])?;

    let mut runner = Runner::new(&admin, logs);
    runner.scenario("F1. one helm install: the agent Ready on both nodes, each in its node's mode", || {
        one_install(&admin)
    });
    scenarios::on_the_node(&mut runner, node, &admin, HOST, &chart);
    vm_scenarios::on_the_vm_node(&mut runner, &admin, VM, &chart);
    runner.scenario("F2. Prometheus: each agent's series labelled with its node; the dashboards per node", || {
        fleet_metrics::per_node(&NODES)
    });
    runner.scenario("F3. a ReadWriteOncePod claim wanted on two nodes: Kubernetes refuses, volguard is silent", || {
        rwop_across_nodes(&admin, logs)
    });
    runner.scenario("F4. each agent watches only its own node's pods and writes its own Events", || {
        fleet_audit::own_node_only(&admin, logs, &NODES)
    });
    runner.scenario("5. helm uninstall, then volguard uninstall", || scenarios::uninstall(&admin));
    // The VM's console first: CI keeps only part of a long output, and a VM that hung or
    // panicked explains every failure after it.
    runner.finish(node, &["vm", "vm-kubelet", "kubelet", "containerd"])
}

/// F1: one release; its DaemonSet scheduled, updated and Ready on both nodes, one agent
/// pod on each; each agent in the mode its kernel allows (enforce where BPF LSM programs
/// run: the VM's kernel; here, what `volguard lsm-probe` finds), as its metrics say.
fn one_install(admin: &Kube) -> anyhow::Result<String> {
    let releases: serde_json::Value =
        serde_json::from_str(&output(helm(&admin.kubeconfig).args(["list", "--all-namespaces", "-o", "json"]))?)?;
    let names: Vec<&str> = releases.as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    ensure!(names == ["volguard"], "helm releases: {names:?}");
    let status = admin.get_json(&["daemonset", "-n", AGENT_NS, "volguard"])?["status"].clone();
    for field in ["desiredNumberScheduled", "currentNumberScheduled", "updatedNumberScheduled", "numberReady"] {
        ensure!(
            status[field] == NODES.len(),
            "the DaemonSet's {field} is {}, not {}: {status}",
            status[field],
            NODES.len()
        );
    }
    let mut modes = Vec::new();
    for node in NODES {
        let pods = agent_pods_on(admin, node)?;
        ensure!(pods.len() == 1, "agent pods on {node}: {pods:?}");
        // The VM's kernel refuses, with BPF LSM or fmod_ret as it was booted. This
        // host's kernel may list `bpf` and still refuse the programs, and refuse
        // trampolines too (this project's machine does): `volguard lsm-probe`, run here,
        // says which, as the agent's own probe must have found it.
        let expected = match node == VM_NODE_NAME {
            true => "enforce",
            false if host_refuses_in_the_kernel()? => "enforce",
            false => "quarantine",
        };
        let mode = agent_mode(node)?;
        ensure!(mode == expected, "the agent on {node} runs in {mode} mode, not {expected}");
        let reason = agent_mode_reason(node)?;
        if node == VM_NODE_NAME {
            let refusal = super::vm_node::VmRefusal::chosen();
            ensure!(reason == refusal.reason_label(), "the agent on {node} enforces for {reason}, not {refusal:?}");
        }
        modes.push(format!("{node}: {} ({mode}, {reason})", pods[0]));
    }
    Ok(format!("one release, DaemonSet Ready on {} nodes: {}", NODES.len(), modes.join(", ")))
}

/// Whether this kernel refuses in the kernel (BPF LSM or fmod_ret), as `volguard
/// lsm-probe` finds (a probe bind refused) and says `--mode auto` would pick.
fn host_refuses_in_the_kernel() -> anyhow::Result<bool> {
    let volguard = crate::proc::target_dir().join("release/volguard");
    let said = output(std::process::Command::new(&volguard).arg("lsm-probe"))?;
    Ok(said.lines().any(|l| l.starts_with("--mode auto: enforce")))
}

const CLAIM: &str = "fleet-rwop";
const OWNER: &str = "fleet-rwop-a";
const SCHEDULED: &str = "fleet-rwop-scheduled";
const ELSEWHERE: &str = "fleet-rwop-vm";

/// F3: a ReadWriteOncePod claim, provisioned on the first node and used there by A, then
/// wanted by a pod the scheduler places and by a pod placed on the other node by
/// `spec.nodeName`. What Kubernetes does is recorded: the scheduler keeps its pod
/// unscheduled (the claim is in use); the other node's kubelet refuses the mount (the
/// volume lives on the first node); the attach/detach controller has nothing to attach
/// (the driver needs no attach). volguard stays silent: no Event, no conflict counted on
/// either node, neither agent sees a second publish. Then A and the other pod go, and the
/// scheduler places its pod on the volume's node, where it reads A's data.
fn rwop_across_nodes(admin: &Kube, logs: &Path) -> anyhow::Result<String> {
    let before = [conflicts_total(NODE_NAME)?, conflicts_total(VM_NODE_NAME)?];
    let pv = volume(admin, HOST, CLAIM, "ReadWriteOncePod", false)?;
    admin.apply(&claim_pod(HOST, OWNER, CLAIM, &format!("echo {A_DATA} > /data/owner && exec sleep 100000")))?;
    admin.wait_pod_running(NS, OWNER, NATIVE)?;

    admin.apply(&scheduled_claim_pod(SCHEDULED, CLAIM, "cat /data/owner && exec sleep 100000"))?;
    let scheduler = first_event(admin, SCHEDULED, "FailedScheduling", NATIVE)?;
    ensure!(
        scheduler.contains("ReadWriteOncePod"),
        "the scheduler kept {SCHEDULED} out for another reason than the claim in use: {scheduler}"
    );
    ensure!(node_of(admin, SCHEDULED)?.is_empty(), "the scheduler placed {SCHEDULED}");

    admin.apply(&claim_pod(VM, ELSEWHERE, CLAIM, "cat /data/owner && exec sleep 100000"))?;
    let kubelet = first_event(admin, ELSEWHERE, "FailedMount", EMULATED)?;
    // The volume is node-local (hostpath): the other node's kubelet stops at the PV's node
    // affinity, before any CSI call; any other failure is not this scenario's.
    ensure!(kubelet.contains("NodeAffinity"), "{ELSEWHERE}'s FailedMount is not the volume's node affinity: {kubelet}");
    ensure!(admin.pod_phase(NS, ELSEWHERE).as_deref() == Some("Pending"), "{ELSEWHERE} runs on {VM_NODE_NAME}");

    let attach_required = admin.run(&["get", "csidriver", DRIVER, "-o", "jsonpath={.spec.attachRequired}"])?;
    let attachments: Vec<String> = admin.get_json(&["volumeattachments"])?["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["spec"]["source"]["persistentVolumeName"] == pv.as_str())
        .map(|a| format!("{} on {}", a["metadata"]["name"], a["spec"]["nodeName"]))
        .collect();
    ensure!(
        attachments.is_empty(),
        "{pv} is attached: {attachments:?} (the CSIDriver's attachRequired: {attach_required})"
    );
    let controller_log = fs::read_to_string(logs.join("kube-controller-manager.log")).unwrap_or_default();
    let multi_attach = controller_log.lines().filter(|l| l.contains(&pv) && l.contains("Multi-Attach")).count();
    ensure!(multi_attach == 0, "the attach/detach controller reports a Multi-Attach of {pv}");

    // volguard: silent on both nodes.
    for pod in [SCHEDULED, ELSEWHERE] {
        let reported: Vec<_> = admin.events_for(NS, pod)?.into_iter().filter(|e| e.controller == "volguard").collect();
        ensure!(reported.is_empty(), "volguard reported {pod}, which Kubernetes already refused: {reported:?}");
    }
    let after = [conflicts_total(NODE_NAME)?, conflicts_total(VM_NODE_NAME)?];
    ensure!(after == before, "volguard counted conflicts Kubernetes already refused: {before:?} -> {after:?}");
    let owner_uid = pod_uid(admin, OWNER)?;
    let on_host = volume_view(admin, NODE_NAME, &pv)?.with_context(|| format!("{NODE_NAME}'s agent lists no {pv}"))?;
    ensure!(
        on_host["owner"] == owner_uid.as_str() && on_host["published_to"] == serde_json::json!([owner_uid]),
        "{NODE_NAME}'s agent's view of {pv}: {on_host}"
    );
    let on_vm = volume_view(admin, VM_NODE_NAME, &pv)?;
    let published_on_vm = on_vm.as_ref().and_then(|v| v["published_to"].as_array()).map_or(0, Vec::len);
    ensure!(published_on_vm == 0, "{VM_NODE_NAME}'s agent sees {pv} published: {on_vm:?}");
    let data = exec(admin, OWNER, &["cat", "/data/owner"])?;
    ensure!(data.trim() == A_DATA, "{OWNER} reads {data:?} from its own volume");

    // The hand-over the scheduler makes once the claim is free.
    let freed = Instant::now();
    admin.run(&["delete", "pod", "-n", NS, ELSEWHERE, OWNER, "--wait=true", "--timeout=300s"])?;
    // The deletions requeue it (the scheduler's ReadWriteOncePod check registers for them).
    admin.wait_pod_running(NS, SCHEDULED, 2 * NATIVE)?;
    let placed = node_of(admin, SCHEDULED)?;
    ensure!(placed == NODE_NAME, "the scheduler placed {SCHEDULED} on {placed:?}, not on the volume's node");
    let handed = exec(admin, SCHEDULED, &["cat", "/data/owner"])?;
    ensure!(handed.trim() == A_DATA, "{SCHEDULED} reads {handed:?} after the hand-over");
    let took = freed.elapsed();
    admin.run(&["delete", "pod", "-n", NS, SCHEDULED, "--wait=true", "--timeout=120s"])?;
    Ok(format!(
        "scheduler: {SCHEDULED} unscheduled ({scheduler:?}); {VM_NODE_NAME}'s kubelet: {ELSEWHERE} Pending ({kubelet:?}); \
         attach/detach controller: no VolumeAttachment (attachRequired: {attach_required}); volguard: no Event, \
         conflicts {before:?} -> {after:?}, {NODE_NAME}'s agent names {OWNER} the only holder, {VM_NODE_NAME}'s sees no \
         publish; once A and {ELSEWHERE} were deleted the scheduler placed {SCHEDULED} on {NODE_NAME}, Running with A's \
         data {:.1} s later",
        took.as_secs_f64()
    ))
}

/// The note of the first Event of `reason` about `pod`, waited for.
fn first_event(admin: &Kube, pod: &str, reason: &str, timeout: Duration) -> anyhow::Result<String> {
    let mut note = None;
    wait_for(&format!("a {reason} Event on {pod}"), timeout, || {
        note = admin.events_for(NS, pod)?.into_iter().find(|e| e.reason == reason).map(|e| e.note);
        Ok(note.is_some())
    })?;
    Ok(note.expect("found"))
}

/// The node a pod was placed on ("" while unscheduled).
fn node_of(admin: &Kube, pod: &str) -> anyhow::Result<String> {
    Ok(admin.run(&["get", "pod", "-n", NS, pod, "-o", "jsonpath={.spec.nodeName}"])?.trim().to_owned())
}
