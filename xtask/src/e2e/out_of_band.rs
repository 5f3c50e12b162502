//! Scenario 7: access that never goes through kubelet's publish, on the real node. Pod
//! single-c owns the single-pod claim `single` (scenario 3). A pod whose hostPath is
//! single-c's publish target, and a "backup agent" whose hostPath is kubelet's whole
//! `pods/` directory, both get their mounts from the real kubelet, containerd and runc
//! (binds through `/proc/thread-self/fd/N`, then a pivot into the container). Neither may
//! read single-c's data, and each gets volguard's Event naming the owner. The operator's
//! choice this needs is made first: the syscall tracepoints backend, since fanotify (auto's
//! pick on this host) does not see these routes.

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};

use super::{
    UPGRADE_TAG,
    kube::{Kube, wait_for},
    workload::{A_DATA, AGENT_NS, Chart, NS, exec, helm_with_values, pod, pod_uid, volume_of},
};
use crate::proc::run_cmd;

pub(super) fn hostpath_readers(admin: &Kube) -> anyhow::Result<String> {
    helm_with_values(
        &["upgrade", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"],
        UPGRADE_TAG,
        &Chart { trace_backend: Some("tracepoints") },
        admin,
    )?;
    run_cmd(admin.kubectl().args(["-n", AGENT_NS, "rollout", "status", "daemonset/volguard", "--timeout=180s"]))?;
    let owner = pod_uid(admin, "single-c")?;
    let pv = volume_of(admin, "single")?;
    let target = format!("/var/lib/kubelet/pods/{owner}/volumes/kubernetes.io~csi/{pv}/mount");
    ensure!(Path::new(&target).join("owner").exists(), "single-c's publish target {target} holds no data");

    // A hostPath on the owner's volume directory.
    let hostpath = "[{name: peek, hostPath: {path: TARGET, type: Directory}}]".replace("TARGET", &target);
    admin.apply(&pod("hostpath-reader", "exec sleep 100000", "[{name: peek, mountPath: /peek}]", &hostpath))?;
    let reader = read_or_refused(admin, "hostpath-reader", "/peek/owner")?;
    let event = access_event(admin, "hostpath-reader")?;

    // A backup agent's hostPath on kubelet's pods/, as such agents mount it.
    let pods = "[{name: pods, hostPath: {path: /var/lib/kubelet/pods, type: Directory}}]";
    let mounts = "[{name: pods, mountPath: /backup, mountPropagation: HostToContainer}]";
    admin.apply(&pod("backup-agent", "exec sleep 100000", mounts, pods))?;
    let copy = format!("/backup/{owner}/volumes/kubernetes.io~csi/{pv}/mount/owner");
    let backup = read_or_refused(admin, "backup-agent", &copy)?;
    let backup_event = access_event(admin, "backup-agent")?;
    for name in ["hostpath-reader", "backup-agent"] {
        admin.run(&["delete", "pod", "-n", NS, name, "--wait=true", "--timeout=90s"])?;
    }
    Ok(format!("hostPath reader: {reader}; Event {event}. Backup agent: {backup}; Event {backup_event}"))
}

/// What `pod` found at `file` (one of single-c's files): it must not be A's data. A pod
/// running without it, or one whose container never started, both pass; which one is said.
fn read_or_refused(admin: &Kube, pod: &str, file: &str) -> anyhow::Result<String> {
    let running = admin.wait_pod_running(NS, pod, Duration::from_secs(90));
    if running.is_err() {
        let phase = admin.pod_phase(NS, pod).unwrap_or_default();
        return Ok(format!("{pod} did not start (phase {phase:?})"));
    }
    // The detach comes at most a timed drain (100 ms) after the runtime's bind.
    std::thread::sleep(Duration::from_secs(1));
    match exec(admin, pod, &["cat", file]) {
        Ok(data) => {
            ensure!(data.trim() != A_DATA, "{pod} reads single-c's data through {file}");
            Ok(format!("{pod} runs and reads {:?} at {file}, not the owner's data", data.trim()))
        }
        Err(_) => Ok(format!("{pod} runs and finds nothing at {file}")),
    }
}

/// volguard's Warning Event on `pod` about a mount outside kubelet's publish, naming the
/// owner.
fn access_event(admin: &Kube, pod: &str) -> anyhow::Result<String> {
    let mut found = None;
    wait_for(&format!("volguard's access Event on {pod}"), Duration::from_secs(60), || {
        let events = admin.events_for(NS, pod)?;
        found = events.into_iter().find(|e| e.reason == "SinglePodVolumeAccessDetached");
        Ok(found.is_some())
    })
    .with_context(|| format!("no SinglePodVolumeAccessDetached Event on {pod}"))?;
    let event = found.expect("found");
    ensure!(event.kind == "Warning" && event.note.contains("single-c"), "the Event says {:?}", event.note);
    Ok(format!("{} ({})", event.reason, event.note))
}
