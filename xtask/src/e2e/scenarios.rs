//! The scenarios of the real-node test, each asserting through the real API server and
//! the node's mount table. They run in order on one node: later ones build on the
//! volumes and pods of earlier ones, as a node's life does.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};

use super::{
    NODE_NAME, UPGRADE_TAG,
    hostpath_driver::{self, DRIVER, Deployment, Probes},
    kube::{Kube, helm, wait_for},
    node::{self, Node},
    prometheus,
    runner::Runner,
    workload::{
        A_DATA, AGENT_NS, AGENT_SELECTOR, Chart, NS, ROLLOUT, Site, agent_logs, agent_mode, agent_pod, claim_pod,
        conflicts_total, exec, helm_with_values, install_volguard, masks, pod, pod_uid, roll_agent, volume, volume_of,
        wait_event, wait_new_agent, wait_value,
    },
};
use crate::proc::{output, run_cmd, target_dir};

/// Scenarios 1-5, 7 and 8 on the node in these namespaces, the driver deployed as on one
/// node.
pub fn run(node: &mut Node, logs: &Path, trace_backend: Option<&str>) -> anyhow::Result<()> {
    let admin = node.admin();
    let chart = Chart { trace_backend, secure_metrics: true, on_delete: false };
    hostpath_driver::install(&admin, Deployment::Central, Probes::Upstream, &[NODE_NAME], NATIVE)?;
    install_volguard(&admin, &chart, NATIVE)?;
    prometheus::start(node, &admin, Path::new(node::STATE), &[NODE_NAME])?;
    admin.run(&["create", "namespace", NS])?;
    let mut runner = Runner::new(&admin, logs);
    on_the_node(&mut runner, node, &admin, Site { node: NODE_NAME, storage: Deployment::Central }, &chart);
    runner.scenario("5. helm uninstall, then volguard uninstall", || uninstall(&admin));
    runner.finish(node, &["kubelet", "containerd"])
}

/// Scenarios 1, 8, 4, 2, 3 and 7, in that order, on the node in these namespaces (`site`):
/// later ones build on the volumes and pods of earlier ones.
pub(super) fn on_the_node(runner: &mut Runner, node: &mut Node, admin: &Kube, site: Site, chart: &Chart) {
    runner.scenario("1. a second pod asks for a single-pod volume another pod uses", || second_pod(admin, site));
    runner.scenario("8. /metrics over HTTPS: Prometheus's bound token, 401 without, 403 unbound", || {
        super::secure_metrics::only_bound_callers(admin)
    });
    runner.scenario("4. volguard's CLI inside the agent pod", || cli_in_agent_pod(admin));
    runner.scenario("2. no false positives", || no_false_positives(node, admin, site, chart));
    runner.scenario("3. hand-over to a new pod", || hand_over(admin, site));
    runner.scenario("7. mounts outside kubelet's publish: a hostPath reader and a backup agent", || {
        super::out_of_band::hostpath_readers(admin, site, chart)
    });
}

/// How long a pod may take to start on the node (the driver's and the agent's included).
const NATIVE: Duration = Duration::from_secs(90);

/// Scenario 1: a second pod, placed on the node by `spec.nodeName` (no scheduler), asks
/// for a single-pod volume that pod A uses.
///
/// a. A ReadWriteOncePod claim: kubelet itself refuses pod B (it has checked RWOP at
///    mount time since 1.27): no CSI call, nothing for volguard to stop, and no false
///    conflict from it.
/// b. A ReadWriteOnce claim with volguard's single-pod annotation, which kubelet does not
///    check: B's publish reaches the driver (as SINGLE_NODE_WRITER) and volguard stops it.
///    B never sees A's data; B gets volguard's Warning Event, created under the chart's
///    RBAC; the conflict counter rises in a Prometheus that found the agent through
///    Kubernetes service discovery.
fn second_pod(admin: &Kube, site: Site) -> anyhow::Result<String> {
    let before = conflicts_total(site.node)?;
    volume(admin, site, "rwop", "ReadWriteOncePod", false)?;
    admin.apply(&claim_pod(site, "rwop-a", "rwop", &format!("echo {A_DATA} > /data/owner && exec sleep 100000")))?;
    admin.wait_pod_running(NS, "rwop-a", Duration::from_secs(90))?;
    admin.apply(&claim_pod(site, "rwop-b", "rwop", "cat /data/owner; exec sleep 100000"))?;
    let mut refusal = None;
    wait_for("kubelet's FailedMount Event on rwop-b", Duration::from_secs(60), || {
        refusal = admin.events_for(NS, "rwop-b")?.into_iter().find(|e| {
            e.reason == "FailedMount" && e.note.contains("ReadWriteOncePod access mode and is already in use")
        });
        Ok(refusal.is_some())
    })?;
    ensure!(admin.pod_phase(NS, "rwop-b").as_deref() == Some("Pending"), "rwop-b is not held in Pending");
    let volguard_events: Vec<_> =
        admin.events_for(NS, "rwop-b")?.into_iter().filter(|e| e.reason.starts_with("SinglePodVolume")).collect();
    ensure!(
        volguard_events.is_empty(),
        "volguard reported a conflict kubelet had already stopped: {volguard_events:?}"
    );
    ensure!(conflicts_total(site.node)? == before, "volguard counted a conflict kubelet had already stopped");

    let pv = volume(admin, site, "single", "ReadWriteOnce", true)?;
    admin.apply(&claim_pod(
        site,
        "single-a",
        "single",
        &format!("echo {A_DATA} > /data/owner && exec sleep 100000"),
    ))?;
    admin.wait_pod_running(NS, "single-a", Duration::from_secs(90))?;
    admin.apply(&claim_pod(site, "single-b", "single", "ls -la /data; cat /data/owner; exec sleep 100000"))?;
    let b_uid = pod_uid(admin, "single-b")?;
    // B's publish is quarantined (no BPF LSM here: the container starts on the mask) or
    // refused (with BPF LSM: B stays in ContainerCreating). Either way the Event says so.
    let event = wait_event(admin, "single-b")?;
    ensure!(
        event.note.contains(&pv) && event.note.contains("single") && event.note.contains("single-a"),
        "the Event does not name the volume, the claim and the owner: {event:?}"
    );
    ensure!(event.controller == "volguard", "the Event's reporting controller is {:?}", event.controller);
    ensure!(event.instance == site.node, "the Event comes from the agent of {:?}, not {}'s", event.instance, site.node);
    // Handled in the node's mode: refused in the kernel where the agent enforces,
    // quarantined where it does not.
    let mode = agent_mode(site.node)?;
    let expected = if mode == "enforce" { "SinglePodVolumeRefused" } else { "SinglePodVolumeQuarantined" };
    ensure!(event.reason == expected, "in {mode} mode B's publish ended as {}, not {expected}", event.reason);
    let owner = exec(admin, "single-a", &["cat", "/data/owner"])?;
    ensure!(owner.trim() == A_DATA, "pod A reads {owner:?} from its own volume");
    let b_sees = if event.reason == "SinglePodVolumeQuarantined" {
        runs_on_the_mask(admin, "single-b", &b_uid)?;
        "B runs on an empty read-only mask".to_owned()
    } else {
        // Enforce: the publish failed in the kernel; kubelet keeps B in ContainerCreating.
        ensure!(
            admin.pod_phase(NS, "single-b").as_deref() == Some("Pending"),
            "B runs although its publish was refused"
        );
        "B waits in ContainerCreating (its publish was refused in the kernel)".to_owned()
    };
    let after = wait_value(site.node, "volguard_conflicts_total to rise", || Ok(conflicts_total(site.node)? > before))?;
    Ok(format!(
        "RWOP: kubelet refused B ({:?}), volguard silent; single-pod RWO: {}: {b_sees}; Event {:?}; conflicts {before} -> {after}",
        refusal.map(|e| e.note).unwrap_or_default(),
        event.reason,
        event.note
    ))
}

/// Scenario 4: `kubectl exec` into the agent pod: check finds the driver through the real
/// registration socket and CSINode; status, volumes and conflicts answer.
fn cli_in_agent_pod(admin: &Kube) -> anyhow::Result<String> {
    let pod = agent_pod(admin, NODE_NAME)?;
    let volguard = |args: &[&str]| {
        let mut all = vec!["exec", "-n", AGENT_NS, pod.as_str(), "--", super::images::AGENT_IN_IMAGE];
        all.extend(args);
        // check exits 2 on an error-severity finding; keep its report either way.
        let out = admin.kubectl().args(&all).output()?;
        Ok::<_, anyhow::Error>((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        ))
    };
    let (code, check) = volguard(&["check", "--kubernetes"])?;
    ensure!(matches!(code, Some(0) | Some(2)), "volguard check failed ({code:?}): {check}");
    ensure!(check.contains(DRIVER), "check does not name the driver: {check}");
    // csi-driver-host-path advertises SINGLE_NODE_MULTI_WRITER, so kubelet tells it
    // SINGLE_NODE_SINGLE_WRITER for a ReadWriteOncePod volume: nothing to find. (A driver
    // without it is the csi_driver integration tests' stand-in; upstream has none.)
    ensure!(
        !check.contains("csi_rwop_not_enforced_by_driver"),
        "check says {DRIVER} lacks SINGLE_NODE_MULTI_WRITER, which it advertises: {check}"
    );
    for view in ["status", "volumes", "conflicts"] {
        let (code, text) = volguard(&[view])?;
        ensure!(code == Some(0), "volguard {view} failed ({code:?}): {text}");
        println!("--- volguard {view}\n{text}");
    }
    // Logs read through kubectl are plain text, not terminal colour codes.
    let logs = agent_logs(admin);
    ensure!(!logs.contains('\u{1b}'), "the agent's log carries terminal escape codes");
    let (_, volumes) = volguard(&["volumes"])?;
    let single = volume_of(admin, "single")?;
    ensure!(volumes.contains(&single), "volguard volumes does not list {single} (claim single): {volumes}");
    Ok(format!("check exit {code:?} names {DRIVER}; status, volumes, conflicts answer"))
}

/// Scenario 2: what every user tries first. A ReadWriteOnce claim shared by two pods,
/// emptyDir, configMap, secret, the projected service-account token, a subPath, container
/// restarts, a pod deleted and recreated, kubelet restarted, the agent restarted twice
/// (helm upgrade to a new tag, kubectl delete pod): no conflict, no mask, every pod
/// Running; and a second pod's publish during the agent's rollout is still stopped.
fn no_false_positives(node: &mut Node, admin: &Kube, site: Site, chart: &Chart) -> anyhow::Result<String> {
    let masks_before = masks()?;
    volume(admin, site, "rwo", "ReadWriteOnce", false)?;
    admin.apply("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: e2e}\ndata: {mode: test}\n")?;
    admin.apply(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: password, namespace: e2e}\nstringData: {password: hunter2}\n",
    )?;
    let writer = "echo $HOSTNAME >> /data/writers && exec sleep 100000";
    admin.apply(&claim_pod(site, "rwo-1", "rwo", writer))?;
    admin.apply(&claim_pod(site, "rwo-2", "rwo", writer))?;
    admin.apply(&pod(
        site,
        "many-volumes",
        "cat /config/mode /secret/password /var/run/secrets/kubernetes.io/serviceaccount/token >/dev/null && exec sleep 100000",
        "[{name: scratch, mountPath: /scratch}, {name: config, mountPath: /config}, {name: secret, mountPath: /secret}, \
         {name: data, mountPath: /sub, subPath: dir-a}]",
        "[{name: scratch, emptyDir: {}}, {name: config, configMap: {name: settings}}, \
         {name: secret, secret: {secretName: password}}, {name: data, persistentVolumeClaim: {claimName: rwo}}]",
    ))?;
    // A container that exits every few seconds: kubelet restarts it in the same pod.
    admin.apply(&claim_pod(site, "restarter", "rwo", "sleep 3; exit 1"))?;
    let pods = ["rwo-1", "rwo-2", "many-volumes"];
    for p in pods {
        admin.wait_pod_running(NS, p, Duration::from_secs(90))?;
    }
    wait_for("the restarter's container restarted", Duration::from_secs(60), || {
        let count = admin.run(&[
            "get",
            "pod",
            "-n",
            NS,
            "restarter",
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ])?;
        Ok(count.trim().parse::<u32>().unwrap_or(0) >= 1)
    })?;

    // Delete and recreate a pod.
    admin.run(&["delete", "pod", "-n", NS, "rwo-2", "--wait=true", "--timeout=60s"])?;
    admin.apply(&claim_pod(site, "rwo-2", "rwo", writer))?;
    admin.wait_pod_running(NS, "rwo-2", Duration::from_secs(90))?;

    // kubelet restarted: its pods keep running, nothing is re-published as a conflict.
    node::restart_kubelet(node)?;

    // The agent restarted by `helm upgrade` to a new image tag, with a second pod's publish
    // of the owned single-pod volume attempted during the rollout.
    let mode = agent_mode(site.node)?;
    helm_with_values(
        &["upgrade", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"],
        UPGRADE_TAG,
        chart,
        admin,
    )?;
    let new_agent = roll_agent(admin, site.node, || {
        admin.apply(&claim_pod(site, "pod-during-rollout", "single", "exec sleep 100000"))
    })?;
    let during_rollout = publish_during_rollout(admin, site.node, &mode, &new_agent)?;
    let _ = fs::write(
        node.logs.join("agent-after-upgrade.log"),
        admin.run(&["logs", "-n", AGENT_NS, &new_agent, "--tail=-1"]).unwrap_or_default(),
    );
    // The agent restarted by `kubectl delete pod`.
    admin.run(&["delete", "pod", "-n", AGENT_NS, &new_agent, "--wait=true", "--timeout=60s"])?;
    wait_new_agent(admin, site.node, &new_agent)?;
    let up = format!("up{{job=\"volguard\",node=\"{}\"}} == 1", site.node);
    wait_for("Prometheus to scrape the new agent", Duration::from_secs(60), || Ok(prometheus::query(&up)?.len() == 1))?;

    for p in pods {
        ensure!(admin.pod_phase(NS, p).as_deref() == Some("Running"), "{p} is not Running");
    }
    let writers = exec(admin, "rwo-1", &["cat", "/data/writers"])?;
    ensure!(writers.lines().count() >= 3, "the RWO volume is not shared by its pods: {writers:?}");
    let new_masks: Vec<String> = masks()?.into_iter().filter(|m| !masks_before.contains(m)).collect();
    let rollout_uid = pod_uid(admin, "pod-during-rollout")?;
    let unexpected: Vec<&String> = new_masks.iter().filter(|m| !m.contains(&rollout_uid)).collect();
    ensure!(unexpected.is_empty(), "masks on legitimate mounts: {unexpected:?}");
    // volguard's Events outlive its restarts (its counters do not): the only pods it may
    // have reported are the two that asked for a volume another pod owns.
    let reported: Vec<String> = admin.get_json(&["events.v1.events.k8s.io", "-n", NS])?["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reportingController"] == "volguard")
        .filter_map(|e| e["regarding"]["name"].as_str().map(str::to_owned))
        .filter(|pod| pod != "single-b" && pod != "pod-during-rollout")
        .collect();
    ensure!(reported.is_empty(), "volguard reported conflicts on legitimate pods: {reported:?}");
    admin.run(&["delete", "pod", "-n", NS, "pod-during-rollout", "restarter", "--wait=true", "--timeout=60s"])?;
    Ok(format!(
        "RWO shared by 3 pods, emptyDir/configMap/secret/token/subPath, restarts of a container, a pod, kubelet and the \
         agent (twice): 0 false conflicts, 0 masks on legitimate mounts; a second pod during the {mode}-mode \
         rollout: {during_rollout}"
    ))
}

/// What became of the publish of the owned single-pod volume `single` into
/// pod-during-rollout, made while `helm upgrade` replaced the agent. Whichever agent saw
/// it stopped it: refused in the kernel (enforce), or quarantined, the pod running on the
/// empty read-only mask. Or, in quarantine mode only, it came while no agent ran: the gap
/// docs/enforcement.md states ("Not covered"), whose outcome is asserted instead: the
/// publish stands (the pod reads the owner's data), and the new agent reports the volume
/// as shared, with an Event naming the owner, and tears nothing down.
fn publish_during_rollout(admin: &Kube, node: &str, mode: &str, new_agent: &str) -> anyhow::Result<String> {
    let pod = "pod-during-rollout";
    let mut reasons = Vec::new();
    let stopped = ["SinglePodVolumeRefused", "SinglePodVolumeQuarantined"];
    wait_for(&format!("volguard's verdict on {pod}"), Duration::from_secs(60), || {
        reasons = admin.events_for(NS, pod)?.into_iter().filter(|e| e.reason.starts_with("SinglePodVolume")).collect();
        Ok(reasons.iter().any(|e| stopped.contains(&e.reason.as_str()) || e.reason == "SinglePodVolumeShared"))
    })?;
    let uid = pod_uid(admin, pod)?;
    let event = reasons.iter().find(|e| stopped.contains(&e.reason.as_str())).or(reasons.first()).expect("found");
    ensure!(event.kind == "Warning" && event.note.contains("single-a"), "the Event does not name the owner: {event:?}");
    match (event.reason.as_str(), mode) {
        ("SinglePodVolumeRefused", "enforce") => {
            ensure!(
                admin.pod_phase(NS, pod).as_deref() == Some("Pending"),
                "{pod} runs although its publish was refused"
            );
            Ok(format!("refused in the kernel ({})", event.note))
        }
        ("SinglePodVolumeQuarantined", "quarantine") => {
            runs_on_the_mask(admin, pod, &uid)?;
            Ok(format!("quarantined, the pod runs on the empty mask ({})", event.note))
        }
        ("SinglePodVolumeShared", "quarantine") => {
            // Found in the mount table at the new agent's start, not seen as a mount call:
            // the publish came while no agent ran.
            let log = admin.run(&["logs", "-n", AGENT_NS, new_agent, "--tail=-1"])?;
            ensure!(
                log.lines().any(|l| l.contains("CONFLICT found") && l.contains(&uid)),
                "the Event says the volume is shared, but the new agent did not find {pod}'s publish in the table at \
                 its start"
            );
            admin.wait_pod_running(NS, pod, Duration::from_secs(60))?;
            let read = exec(admin, pod, &["cat", "/data/owner"])?;
            ensure!(read.trim() == A_DATA, "the publish in the gap did not stand: {pod} reads {read:?}");
            ensure!(!masks()?.iter().any(|m| m.contains(&uid)), "the new agent masked a publish it found made");
            wait_for("the new agent to count the volume as shared", Duration::from_secs(60), || {
                Ok(prometheus::value(&format!("sum(volguard_single_pod_volumes{{state=\"shared\",node=\"{node}\"}})"))?
                    >= 1.0)
            })?;
            Ok(format!(
                "the documented quarantine-mode gap: published while no agent ran, the pod reads the owner's data, \
                 the new agent reports it ({}: {})",
                event.reason, event.note
            ))
        }
        _ => bail!("in {mode} mode the publish during the rollout was neither refused nor quarantined: {reasons:?}"),
    }
}

/// A quarantined pod: running on volguard's empty read-only mask at its publish target.
fn runs_on_the_mask(admin: &Kube, pod: &str, uid: &str) -> anyhow::Result<()> {
    admin.wait_pod_running(NS, pod, Duration::from_secs(60))?;
    let read = exec(admin, pod, &["cat", "/data/owner"]);
    ensure!(
        read.as_ref().is_err_and(|e| format!("{e:#}").contains("No such file or directory")),
        "{pod}'s read of /data/owner: {read:?}, not `No such file or directory`"
    );
    let listing = exec(admin, pod, &["ls", "-A", "/data"])?;
    ensure!(listing.trim().is_empty(), "{pod} sees files in the volume: {listing}");
    let write = exec(admin, pod, &["touch", "/data/b-was-here"]);
    ensure!(
        write.as_ref().is_err_and(|e| format!("{e:#}").contains("Read-only file system")),
        "{pod}'s write to its masked target: {write:?}, not `Read-only file system`"
    );
    let masked = masks()?;
    ensure!(masked.iter().any(|t| t.contains(uid)), "no quarantine mask at {pod}'s target (masks: {masked:?})");
    Ok(())
}

/// Scenario 3: the owner is deleted; a new pod using the claim starts with its data after
/// its teardown (measured). Records what became of the quarantined pod B (issue 11
/// decides what it should be) and of kubelet's waiting RWOP pod.
fn hand_over(admin: &Kube, site: Site) -> anyhow::Result<String> {
    let started = Instant::now();
    admin.run(&["delete", "pod", "-n", NS, "single-a", "--wait=true", "--timeout=90s"])?;
    let deleted = started.elapsed();
    admin.apply(&claim_pod(site, "single-c", "single", "cat /data/owner && exec sleep 100000"))?;
    admin.wait_pod_running(NS, "single-c", Duration::from_secs(120))?;
    let took = started.elapsed();
    let data = exec(admin, "single-c", &["cat", "/data/owner"])?;
    ensure!(data.trim() == A_DATA, "the new owner reads {data:?}, not A's data");
    let quarantined = agent_mode(site.node)? == "quarantine";
    let b = match exec(admin, "single-b", &["ls", "-A", "/data"]) {
        Ok(listing) if listing.trim().is_empty() => "B still sees an empty mask".to_owned(),
        Ok(listing) => format!("B now sees {listing:?}"),
        Err(e) => format!("B cannot list /data ({e:#})"),
    };
    if quarantined {
        // The mask stays until B is recreated: the new owner's data never shows through it.
        ensure!(b == "B still sees an empty mask", "quarantined B after the hand-over: {b}");
        // B is told that the volume is free and that it must be recreated to get it.
        let mut notice = None;
        wait_for("the volume-free Event on single-b", Duration::from_secs(60), || {
            notice = admin.events_for(NS, "single-b")?.into_iter().find(|e| e.reason == "SinglePodVolumeReleased");
            Ok(notice.is_some())
        })?;
        let note = notice.map(|e| e.note).unwrap_or_default();
        ensure!(note.contains("is free") && note.contains("delete it"), "the volume-free Event says {note:?}");
    }
    let b_uid = pod_uid(admin, "single-b")?;
    admin.run(&["delete", "pod", "-n", NS, "single-b", "--wait=true", "--timeout=90s"])?;
    // No mask outlives its pod, whether the driver's unpublish took it off or (as
    // csi-driver-host-path after a publish it did not record) volguard did once the pod
    // left the API; then kubelet removes the pod's directory.
    let b_dir = Path::new("/var/lib/kubelet/pods").join(&b_uid);
    let gone = wait_for("B's mask and directory gone", Duration::from_secs(150), || {
        Ok(!masks()?.iter().any(|m| m.contains(&b_uid)) && !b_dir.exists())
    });
    let left: Vec<String> = masks()?;
    gone.with_context(|| format!("after B's deletion: masks {left:?}, directory {}", b_dir.display()))?;

    // kubelet's own hand-over of the RWOP claim: the waiting pod starts once A is gone.
    let rwop_started = Instant::now();
    admin.run(&["delete", "pod", "-n", NS, "rwop-a", "--wait=true", "--timeout=90s"])?;
    admin.wait_pod_running(NS, "rwop-b", Duration::from_secs(180))?;
    let rwop_data = exec(admin, "rwop-b", &["cat", "/data/owner"])?;
    ensure!(rwop_data.trim() == A_DATA, "rwop-b reads {rwop_data:?} after the hand-over");
    Ok(format!(
        "single-pod: owner deleted in {:.1} s, new pod Running with its data {:.1} s after the delete; {b}{}; after \
         B's deletion no mask is left and kubelet removed its directory; RWOP: the waiting pod ran with the data {:.1} s after the owner's delete",
        deleted.as_secs_f64(),
        took.as_secs_f64(),
        if quarantined { ", told the volume is free" } else { "" },
        rwop_started.elapsed().as_secs_f64(),
    ))
}

/// Scenario 5: `helm uninstall` keeps the pinned state on the node in enforce mode, as
/// documented (quarantine mode pins nothing); `volguard uninstall` on the node removes
/// it; nothing of volguard is left.
pub(super) fn uninstall(admin: &Kube) -> anyhow::Result<String> {
    let mode = agent_mode(NODE_NAME)?;
    let pins = Path::new("/sys/fs/bpf/volguard");
    let pinned_before = pins.is_dir();
    ensure!(pinned_before == (mode == "enforce"), "pins at {}: {pinned_before} in {mode} mode", pins.display());
    run_cmd(helm(&admin.kubeconfig).args(["uninstall", "volguard", "--namespace", "kube-system", "--wait"]))?;
    wait_for("every agent pod gone", ROLLOUT, || {
        Ok(admin.run(&["get", "pods", "-n", AGENT_NS, "-l", AGENT_SELECTOR, "-o", "name"])?.trim().is_empty())
    })?;
    ensure!(pins.is_dir() == pinned_before, "helm uninstall changed the pins ({mode} mode)");
    let volguard = target_dir().join("release/volguard");
    let owners = output(std::process::Command::new(&volguard).arg("owners")).unwrap_or_else(|e| format!("{e:#}"));
    output(std::process::Command::new(&volguard).arg("uninstall"))?;
    ensure!(!pins.exists(), "volguard uninstall left {}", pins.display());
    let leftovers = admin.run(&[
        "get",
        "all,serviceaccount,clusterrole,clusterrolebinding",
        "-A",
        "-l",
        AGENT_SELECTOR,
        "-o",
        "name",
    ])?;
    ensure!(leftovers.trim().is_empty(), "objects left after helm uninstall: {leftovers}");
    Ok(format!(
        "{mode} mode: pins before helm uninstall: {pinned_before}, after: {pinned_before}; volguard uninstall leaves none \
         (volguard owners said: {:?})",
        owners.lines().next().unwrap_or_default()
    ))
}
