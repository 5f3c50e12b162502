//! Scenarios 6, 6b and 6c on the node in the VM (vm_node.rs): Debian's 6.1 kernel (fmod_ret, or BPF LSM), where
//! the chart's `mode: auto` enforces in the kernel. Alone (`--vm`: the VM is the cluster's
//! one node) or as the fleet's second node. Its claims and pods are named `vm-...`: in the
//! fleet they share the namespace with the other node's scenarios.

use std::{path::Path, time::Instant};

use anyhow::ensure;

use super::{
    NODE_NAME, TAG, UPGRADE_TAG, VM_NODE_NAME,
    hostpath_driver::{self, Deployment, Probes},
    kube::{Kube, wait_for},
    node::Node,
    runner::Runner,
    workload::{
        A_DATA, Chart, EMULATED, NS, Site, agent_pods_on, claim_pod, exec, helm_with_values, install_volguard, volume,
        wait_event_within, wait_rollout,
    },
};

/// Scenario 6's claims and pods: A owns CLAIM, B asks for it; OWNER_2 owns CLAIM_2 while
/// WITHOUT_AGENT asks for it with no agent on the node.
const CLAIM: &str = "vm-single";
pub(super) const OWNER: &str = "vm-single-a";
/// B, which holds CLAIM once scenario 6 has handed it over.
pub(super) const SECOND: &str = "vm-single-b";
const CLAIM_2: &str = "vm-single-2";
const OWNER_2: &str = "vm-owner-2";
const WITHOUT_AGENT: &str = "vm-pod-without-agent";

/// `--vm`: the CSI driver (as on one node) and volguard installed as on the host, then
/// scenario 6 and 6b.
pub fn run(node: &Node, logs: &Path) -> anyhow::Result<()> {
    let admin = node.admin();
    let started = Instant::now();
    hostpath_driver::install(&admin, Deployment::Central, Probes::Emulated, &[VM_NODE_NAME], EMULATED)?;
    let chart = Chart { trace_backend: None, secure_metrics: false, on_delete: false };
    install_volguard(&admin, &chart, EMULATED)?;
    println!("e2e: the CSI driver and volguard Ready in the VM after {:.0} s", started.elapsed().as_secs_f64());
    admin.run(&["create", "namespace", NS])?;
    let mut runner = Runner::new(&admin, logs);
    on_the_vm_node(&mut runner, &admin, Site { node: VM_NODE_NAME, storage: Deployment::Central }, &chart);
    runner.finish(node, &["vm", "vm-kubelet"])
}

/// Scenarios 6 and 6b on the node in the VM (`site`), with the chart's values `chart`
/// kept on its upgrades.
pub(super) fn on_the_vm_node(runner: &mut Runner, admin: &Kube, site: Site, chart: &Chart) {
    runner.scenario("6. the same conflict refused in the kernel, in the VM", || {
        refused_in_the_kernel(admin, site, chart)
    });
    runner.scenario("6b. a hostPath on the owner's volume, in the VM", || {
        super::out_of_band::hostpath_reader_in_vm(admin, site, SECOND, CLAIM, EMULATED)
    });
    runner.scenario("6c. reads with no mount: /proc/<pid>/root and the driver's data directory, in the VM", || {
        super::out_of_band::reads_without_a_mount_in_vm(admin, site, SECOND, CLAIM, EMULATED)
    });
}

/// How many times kubelet's mount of `pod`'s volume failed with EBUSY, by its FailedMount
/// Events, and the driver's mount output (the last line of the first such note).
fn busy_mounts(admin: &Kube, pod: &str) -> anyhow::Result<(u64, String)> {
    let failed: Vec<serde_json::Value> = admin.get_json(&[
        "events.v1.events.k8s.io",
        "-n",
        NS,
        "--field-selector",
        &format!("regarding.name={pod},reason=FailedMount"),
    ])?["items"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let busy: Vec<&serde_json::Value> = failed.iter().filter(|e| e["note"].as_str().is_some_and(says_ebusy)).collect();
    let attempts =
        busy.iter().map(|e| e["series"]["count"].as_u64().or(e["deprecatedCount"].as_u64()).unwrap_or(1)).sum();
    let says = busy
        .first()
        .and_then(|e| e["note"].as_str())
        .and_then(|n| n.trim_end().lines().last())
        .unwrap_or_default()
        .to_owned();
    Ok((attempts, says))
}

/// Whether a FailedMount note carries EBUSY as the driver's mount(8) words it: "Device or
/// resource busy", or util-linux's "already mounted or mount point busy"
/// (csi-driver-host-path's image).
pub(super) fn says_ebusy(note: &str) -> bool {
    note.to_lowercase().contains("busy")
}

/// Scenario 6: scenario 1b's conflict on a kernel that refuses, where volguard (the
/// chart's `mode: auto`) enforces: B's NodePublish fails in the kernel with EBUSY, so
/// kubelet keeps B in ContainerCreating and retries, and volguard's Event explains; once A
/// is deleted, a retry goes through and B starts with A's data (measured). Before that,
/// scenario 2's "no gap in enforcement across an agent restart", which only enforce mode
/// can keep, with the gap made as long as it takes.
fn refused_in_the_kernel(admin: &Kube, site: Site, chart: &Chart) -> anyhow::Result<String> {
    let pv = volume(admin, site, CLAIM, "ReadWriteOnce", true)?;
    admin.apply(&claim_pod(site, OWNER, CLAIM, &format!("echo {A_DATA} > /data/owner && exec sleep 100000")))?;
    let a_took = admin.wait_pod_running(NS, OWNER, EMULATED)?;
    let asked = Instant::now();
    admin.apply(&claim_pod(site, SECOND, CLAIM, "cat /data/owner && exec sleep 100000"))?;
    let event = wait_event_within(admin, SECOND, EMULATED)?;
    let refused_after = asked.elapsed();
    ensure!(event.reason == "SinglePodVolumeRefused", "volguard did not refuse in the kernel: {event:?}");
    ensure!(
        event.note.contains(&pv) && event.note.contains(CLAIM) && event.note.contains(OWNER),
        "the Event does not name the volume, the claim and the owner: {event:?}"
    );
    ensure!(event.instance == site.node, "the Event comes from the agent of {:?}, not {}'s", event.instance, site.node);
    // kubelet's own account: the driver's publish failed with EBUSY, and kubelet retried.
    let mut attempts = 0;
    let mut kubelet_says = String::new();
    wait_for("kubelet to retry B's mount after EBUSY", EMULATED, || {
        (attempts, kubelet_says) = busy_mounts(admin, SECOND)?;
        Ok(attempts >= 2)
    })?;
    let waiting = admin.get_json(&["pod", "-n", NS, SECOND])?;
    let creating = &waiting["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
    ensure!(
        waiting["status"]["phase"] == "Pending" && creating == "ContainerCreating",
        "B is not held in ContainerCreating: {}",
        waiting["status"]
    );
    let owner = exec(admin, OWNER, &["cat", "/data/owner"])?;
    ensure!(owner.trim() == A_DATA, "pod A reads {owner:?} from its own volume");

    // No gap while no agent runs: the agent taken off the node (helm upgrade with a node
    // selector only the fleet's other node matches, none on its own), a publish of another
    // owned volume is refused by the pinned programs alone; the agent brought back (helm
    // upgrade to a new tag) adopts them and reports it. (Another volume: kubelet's
    // back-off after B's refusals is per volume and would delay any new publish of this
    // one by minutes.)
    volume(admin, site, CLAIM_2, "ReadWriteOnce", true)?;
    admin.apply(&claim_pod(site, OWNER_2, CLAIM_2, "exec sleep 100000"))?;
    admin.wait_pod_running(NS, OWNER_2, EMULATED)?;
    let upgrade = ["upgrade", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"];
    let mut away = upgrade.to_vec();
    let elsewhere = format!("nodeSelector.kubernetes\\.io/hostname={NODE_NAME}");
    away.extend(["--set-string", &elsewhere]);
    helm_with_values(&away, TAG, chart, admin)?;
    let alone = (|| {
        wait_for("no agent pod on the node", EMULATED, || Ok(agent_pods_on(admin, site.node)?.is_empty()))?;
        admin.apply(&claim_pod(site, WITHOUT_AGENT, CLAIM_2, "exec sleep 100000"))?;
        let refused = wait_for(&format!("kubelet's EBUSY on {WITHOUT_AGENT} while no agent runs"), EMULATED, || {
            Ok(admin.events_for(NS, WITHOUT_AGENT)?.iter().any(|e| e.reason == "FailedMount" && says_ebusy(&e.note)))
        })?;
        ensure!(agent_pods_on(admin, site.node)?.is_empty(), "an agent pod appeared before the refusal was seen");
        Ok(refused)
    })();
    // The agent back on the node whatever happened: the scenarios after this one need it.
    let back = helm_with_values(&upgrade, UPGRADE_TAG, chart, admin).and_then(|()| wait_rollout(admin));
    let refused_alone = alone?;
    back?;
    let reported = wait_event_within(admin, WITHOUT_AGENT, EMULATED).map_err(|e| {
        // Whether kubelet retried at all since (the agent reports the refusal of a retry).
        let retries = busy_mounts(admin, WITHOUT_AGENT).map_or_else(|e| format!("{e:#}"), |(n, _)| n.to_string());
        e.context(format!("kubelet's EBUSY FailedMounts on {WITHOUT_AGENT} in all: {retries}"))
    })?;
    ensure!(
        reported.reason == "SinglePodVolumeRefused" && admin.pod_phase(NS, WITHOUT_AGENT).as_deref() == Some("Pending"),
        "the publish while no agent ran was not refused: {reported:?}"
    );
    admin.run(&["delete", "pod", "-n", NS, WITHOUT_AGENT, OWNER_2, "--wait=true", "--timeout=300s"])?;

    let deleted = Instant::now();
    admin.run(&["delete", "pod", "-n", NS, OWNER, "--wait=true", "--timeout=300s"])?;
    let delete_took = deleted.elapsed();
    admin.wait_pod_running(NS, SECOND, EMULATED)?;
    let handed_over = deleted.elapsed();
    let data = exec(admin, SECOND, &["cat", "/data/owner"])?;
    ensure!(data.trim() == A_DATA, "B reads {data:?} after the hand-over, not A's data");
    Ok(format!(
        "A Running in {:.0} s; B refused in the kernel {:.1} s after it was created ({}: {:?}); kubelet retried \
         {attempts} times ({kubelet_says:?}) with B in ContainerCreating; with no agent on the node a publish of \
         another owned volume was refused by the pins alone ({:.1} s after it was asked), and the upgraded agent \
         reported it ({}); A deleted in {:.1} s, B Running with A's data {:.1} s after the delete",
        a_took.as_secs_f64(),
        refused_after.as_secs_f64(),
        event.reason,
        event.note,
        refused_alone.as_secs_f64(),
        reported.reason,
        delete_took.as_secs_f64(),
        handed_over.as_secs_f64(),
    ))
}
