//! Scenario 7: access that never goes through kubelet's publish, on the real node. Pod
//! single-c owns the single-pod claim `single` (scenario 3). A pod whose hostPath is
//! single-c's publish target, and a "backup agent" whose hostPath is kubelet's whole
//! `pods/` directory, both get their mounts from the real kubelet, containerd and runc
//! (binds through `/proc/thread-self/fd/N`, then a pivot into the container). Neither may
//! read single-c's data, and each gets volguard's Event naming the owner. A volume
//! published while the backup agent runs reaches it by propagation alone, and is taken
//! away by the namespace scan that follows the publish. Then the
//! operator exempts a backup agent by its namespace and ServiceAccount (chart value
//! `exemptReaders`): that agent reads single-c's data, and nothing is reported about it.
//! A pod with a hostPath on the driver's data directory (above the volume's) is left and
//! reported, and so is its read of single-c's file through it; so is a hostPID pod's read
//! through `/proc/<pid>/root`. With the chart's `denyForeignOpen` both reads are refused.
//! The hostPath reader is tried first with the chart's default backend (fanotify where
//! auto picks it: the namespace scan finds it), then with the syscall tracepoints backend,
//! which sees each bind at its syscall's exit.

use std::{path::Path, time::Duration};

use anyhow::{Context, bail, ensure};

use super::{
    UPGRADE_TAG,
    kube::{Event, Kube, helm, wait_for},
    workload::{
        A_DATA, AGENT_NS, Chart, NS, ROLLOUT, Site, claim_pod, exec, helm_with_values, pod, pod_uid, roll_agent,
        volume, volume_of,
    },
};
use crate::proc::run_cmd;

pub(super) fn hostpath_readers(admin: &Kube, site: Site, chart: &Chart) -> anyhow::Result<String> {
    let owner = pod_uid(admin, "single-c")?;
    let pv = volume_of(admin, "single")?;
    let target = format!("/var/lib/kubelet/pods/{owner}/volumes/kubernetes.io~csi/{pv}/mount");
    ensure!(Path::new(&target).join("owner").exists(), "single-c's publish target {target} holds no data");
    let hostpath = "[{name: peek, hostPath: {path: TARGET, type: Directory}}]".replace("TARGET", &target);
    let scanned = found_by_the_scan(admin, site, &hostpath)?;

    helm_with_values(
        &["upgrade", "volguard", "deploy/helm/volguard", "--namespace", "kube-system"],
        UPGRADE_TAG,
        &Chart { trace_backend: Some("tracepoints"), ..*chart },
        admin,
    )?;
    roll_agent(admin, site.node, || Ok(()))?;

    // A hostPath on the owner's volume directory, with the syscall backend.
    admin.apply(&pod(site, "hostpath-reader", "exec sleep 100000", "[{name: peek, mountPath: /peek}]", &hostpath))?;
    let reader = read_or_refused(admin, "hostpath-reader", "/peek/owner")?;
    let event = access_event(admin, "hostpath-reader", "single-c")?;

    // A backup agent's hostPath on kubelet's pods/, as such agents mount it.
    let pods = "[{name: pods, hostPath: {path: /var/lib/kubelet/pods, type: Directory}}]";
    let mounts = "[{name: pods, mountPath: /backup, mountPropagation: HostToContainer}]";
    admin.apply(&pod(site, "backup-agent", "exec sleep 100000", mounts, pods))?;
    let copy = format!("/backup/{owner}/volumes/kubernetes.io~csi/{pv}/mount/owner");
    let backup = read_or_refused(admin, "backup-agent", &copy)?;
    let backup_event = access_event(admin, "backup-agent", "single-c")?;
    let propagated = late_publish(admin, site)?;
    let above = data_dir_reader(admin, site)?;
    let through_proc = proc_root_reader(admin, site)?;
    for name in ["hostpath-reader", "backup-agent", "late-owner"] {
        admin.run(&["delete", "pod", "-n", NS, name, "--wait=true", "--timeout=90s"])?;
    }
    let exempt = exempt_backup_agent(admin, site, pods, mounts, &copy)?;
    let denied = refused_with_the_opt_in(admin, site)?;
    Ok(format!(
        "{scanned}. With tracepoints, hostPath reader: {reader}; Event {event}. Backup agent: {backup}; Event \
         {backup_event}. {propagated}. {above}. {through_proc}. {exempt}. {denied}"
    ))
}

/// The same hostPath reader with the chart's default backend (fanotify where auto picks
/// it, as on this project's machine): no mount call is traced, and the namespace scan (at
/// the next reconciliation at the latest) finds the reader's bind and takes it away.
fn found_by_the_scan(admin: &Kube, site: Site, hostpath: &str) -> anyhow::Result<String> {
    const READER: &str = "scanned-reader";
    admin.apply(&pod(site, READER, "exec sleep 100000", "[{name: peek, mountPath: /peek}]", hostpath))?;
    admin.wait_pod_running(NS, READER, Duration::from_secs(90)).context("the reader never ran: nothing was tried")?;
    let event = access_event(admin, READER, "single-c")?;
    let read = exec(admin, READER, &["cat", "/peek/owner"]);
    ensure!(
        read.as_ref().is_err_and(|e| format!("{e:#}").contains("No such file or directory")),
        "after the Event, {READER}'s read of /peek/owner: {read:?}, not `No such file or directory`"
    );
    admin.run(&["delete", "pod", "-n", NS, READER, "--wait=true", "--timeout=90s"])?;
    Ok(format!("With the chart's default backend, the namespace scan took the hostPath reader's bind: Event {event}"))
}

/// A single-pod volume published after the backup agent started: kubelet's publish
/// propagates into the agent's namespace (HostToContainer) with no mount call there; the
/// namespace scan that follows the publish takes the copy away.
fn late_publish(admin: &Kube, site: Site) -> anyhow::Result<String> {
    let pv = volume(admin, site, "late", "ReadWriteOncePod", false)?;
    admin.apply(&claim_pod(site, "late-owner", "late", "echo late > /data/late && exec sleep 100000"))?;
    admin.wait_pod_running(NS, "late-owner", Duration::from_secs(120))?;
    let owner = pod_uid(admin, "late-owner")?;
    let copy = format!("/backup/{owner}/volumes/kubernetes.io~csi/{pv}/mount/late");
    let event = access_event(admin, "backup-agent", "late-owner")?;
    let late = exec(admin, "backup-agent", &["cat", &copy]);
    ensure!(
        late.as_ref().is_err_and(|e| format!("{e:#}").contains("No such file or directory")),
        "the backup agent's read of the late volume at {copy}: {late:?}, not `No such file or directory`"
    );
    Ok(format!("Published after it started: the backup agent finds nothing at {copy}; Event {event}"))
}

/// A pod with a hostPath on csi-driver-host-path's data directory, a directory above
/// single-c's volume: on this node (quarantine, no BPF LSM) nothing refuses its reads, so
/// it reads the owner's file; volguard leaves the mount (it shows much else) and reports
/// it once, route `ancestor`, with a `SinglePodVolumeInUse` Event naming the owner, then
/// the read itself (route `open`), with another. The reading shell holds the file open
/// for a while: a reader that has exited before its open is judged has no pod to name.
/// The pod stays for the opt-in's check ([`refused_with_the_opt_in`]).
fn data_dir_reader(admin: &Kube, site: Site) -> anyhow::Result<String> {
    const READER: &str = DATA_DIR_READER;
    let handle = volume_handle(admin, "single")?;
    admin.apply(&pod(site, READER, "exec sleep 100000", "[{name: hp, mountPath: /hp}]", &data_dir_volume()))?;
    ran(admin, READER, Duration::from_secs(90))?;
    let event = volguard_event(admin, READER, "SinglePodVolumeInUse", Duration::from_secs(180), |note| {
        note.contains("single-c") && note.contains("directory above")
    })?;
    ensure!(event.kind == "Warning" && event.instance == site.node, "the Event: {event:?}");
    let read = format!("exec 3< /hp/{handle}/owner && cat <&3 && sleep 2");
    let data = exec(admin, READER, &["sh", "-c", &read]).context("the data-dir reader's read")?;
    ensure!(data.trim() == A_DATA, "{READER} reads {:?}, not single-c's data: was its mount taken?", data.trim());
    let opened = volguard_event(admin, READER, "SinglePodVolumeInUse", Duration::from_secs(60), |note| {
        note.contains("single-c") && note.contains("opened its files")
    })?;
    Ok(format!(
        "hostPath on the driver's data directory: left, reads the owner's file; Events {} ({}) and, for the read, \
         {} ({})",
        event.reason, event.note, opened.reason, opened.note
    ))
}

/// A `kubectl debug node/… --profile=sysadmin`-style pod (hostPID) that reads single-c's
/// file through `/proc/<its pid>/root`, with no mount of the volume: on this node
/// (quarantine) the read goes through, and volguard reports it with a
/// `SinglePodVolumeInUse` Event naming the owner. The pod stays for the opt-in's check.
fn proc_root_reader(admin: &Kube, site: Site) -> anyhow::Result<String> {
    admin.apply(&debugger_pod(site, NODE_DEBUGGER))?;
    ran(admin, NODE_DEBUGGER, Duration::from_secs(90))?;
    let data = exec(admin, NODE_DEBUGGER, &["sh", "-c", THROUGH_PROC_ROOT]).context("the debugger's read")?;
    ensure!(
        data.trim() == A_DATA,
        "{NODE_DEBUGGER} reads {:?} through /proc/<pid>/root, not single-c's data",
        data.trim()
    );
    let opened = volguard_event(admin, NODE_DEBUGGER, "SinglePodVolumeInUse", Duration::from_secs(60), |note| {
        note.contains("single-c") && note.contains("opened its files")
    })?;
    Ok(format!(
        "hostPID pod through /proc/<pid>/root: reads the owner's file; Event {} ({})",
        opened.reason, opened.note
    ))
}

/// With the chart's `denyForeignOpen` (`--deny-foreign-open`) on this node without BPF
/// LSM, the debugger's read through `/proc/<pid>/root` and the data-dir reader's read
/// through its hostPath above the volume are refused (`EPERM`), each with a
/// `SinglePodVolumeAccessRefused` Event naming the owner; single-c still reads its file.
/// The reads are tried once the new agent says it refuses and watches both places.
fn refused_with_the_opt_in(admin: &Kube, site: Site) -> anyhow::Result<String> {
    let upgrade = ["upgrade", "volguard", "deploy/helm/volguard", "--namespace", AGENT_NS, "--reuse-values"];
    run_cmd(helm(&admin.kubeconfig).args(upgrade).args(["--set", "denyForeignOpen=true"]))?;
    let agent = roll_agent(admin, site.node, || Ok(()))?;
    let pv = volume_of(admin, "single")?;
    let (owner_place, reader_place) = (format!("{pv}'s files watched at /proc/"), "/root/hp (");
    wait_for("the agent to refuse opens and watch single-c's containers and the reader's mount", ROLLOUT, || {
        let log = admin.run(&["logs", "-n", AGENT_NS, &agent, "--tail=-1"])?;
        let watched = |place: &str| log.lines().any(|l| l.contains(&owner_place) && l.contains(place));
        Ok(log.contains("files are refused (fanotify)") && watched("/root/data (") && watched(reader_place))
    })?;
    let handle = volume_handle(admin, "single")?;
    let through_proc = refused_open(admin, NODE_DEBUGGER, &["sh", "-c", THROUGH_PROC_ROOT], ROLLOUT, DENIED)?;
    let read = format!("/hp/{handle}/owner");
    let through_dir = refused_open(admin, DATA_DIR_READER, &["cat", &read], ROLLOUT, DENIED)?;
    let mut events = Vec::new();
    for reader in [NODE_DEBUGGER, DATA_DIR_READER] {
        let event = volguard_event(admin, reader, "SinglePodVolumeAccessRefused", Duration::from_secs(60), |note| {
            note.contains("single-c")
        })?;
        ensure!(event.kind == "Warning" && event.instance == site.node, "the Event: {event:?}");
        events.push(event.reason);
    }
    let owner = exec(admin, "single-c", &["cat", "/data/owner"])?;
    ensure!(owner.trim() == A_DATA, "single-c reads {owner:?} from its own volume with the opt-in");
    admin.run(&["delete", "pod", "-n", NS, NODE_DEBUGGER, DATA_DIR_READER, "--wait=true", "--timeout=90s"])?;
    Ok(format!(
        "With denyForeignOpen: through /proc/<pid>/root: {through_proc}; through the driver's data directory: \
         {through_dir}; Events {events:?}; the owner still reads its file"
    ))
}

/// The same backup agent, under a ServiceAccount of its own that the chart exempts: it
/// reads single-c's data at `copy`, and volguard says nothing about it.
fn exempt_backup_agent(admin: &Kube, site: Site, volumes: &str, mounts: &str, copy: &str) -> anyhow::Result<String> {
    const ACCOUNT: &str = "backup";
    let exempt = format!("exemptReaders={{{NS}/{ACCOUNT}}}");
    let upgrade = ["upgrade", "volguard", "deploy/helm/volguard", "--namespace", AGENT_NS, "--reuse-values"];
    run_cmd(helm(&admin.kubeconfig).args(upgrade).args(["--set", &exempt]))?;
    roll_agent(admin, site.node, || Ok(()))?;
    admin.apply(&format!("apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {ACCOUNT}, namespace: {NS}}}\n"))?;
    let manifest = pod(site, "exempt-backup", "exec sleep 100000", mounts, volumes).replacen(
        "spec:\n",
        &format!("spec:\n  serviceAccountName: {ACCOUNT}\n"),
        1,
    );
    admin.apply(&manifest)?;
    admin.wait_pod_running(NS, "exempt-backup", Duration::from_secs(90))?;
    // As long as a detach would take (see read_or_refused).
    std::thread::sleep(Duration::from_secs(1));
    let data = exec(admin, "exempt-backup", &["cat", copy]).context("the exempt backup agent reads")?;
    ensure!(data.trim() == A_DATA, "the exempt backup agent reads {:?} at {copy}, not single-c's data", data.trim());
    let events = admin.events_for(NS, "exempt-backup")?;
    ensure!(events.iter().all(|e| !e.reason.starts_with("SinglePodVolume")), "volguard reported it: {events:?}");
    admin.run(&["delete", "pod", "-n", NS, "exempt-backup", "--wait=true", "--timeout=90s"])?;
    Ok(format!("Exempt backup agent ({NS}/{ACCOUNT}): reads the owner's data, no Event"))
}

/// Scenario 6's second half, in the VM with BPF LSM: a pod whose hostPath is the publish
/// target of `owner_pod` (the pod that holds `claim`). A classic bind's source reaches
/// the LSM hook only as a string, so even in enforce mode the bind is detached at its
/// syscall's exit; the pod gets the Event, from the agent of its node.
pub(super) fn hostpath_reader_in_vm(
    admin: &Kube,
    site: Site,
    owner_pod: &str,
    claim: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    const READER: &str = "vm-hostpath-reader";
    let owner = pod_uid(admin, owner_pod)?;
    let pv = volume_of(admin, claim)?;
    let target = format!("/var/lib/kubelet/pods/{owner}/volumes/kubernetes.io~csi/{pv}/mount");
    let hostpath = "[{name: peek, hostPath: {path: TARGET, type: Directory}}]".replace("TARGET", &target);
    admin.apply(&pod(site, READER, "exec sleep 100000", "[{name: peek, mountPath: /peek}]", &hostpath))?;
    // Before the detach the open guard refuses the read (EACCES); after it the file is gone.
    let reader = read_or_refused_within(admin, READER, "/peek/owner", timeout, &[NO_FILE, REFUSED])?;
    let event = access_event(admin, READER, owner_pod)?;
    let instances: Vec<String> =
        admin.events_for(NS, READER)?.into_iter().filter(|e| e.controller == "volguard").map(|e| e.instance).collect();
    ensure!(instances.iter().all(|i| i == site.node), "{READER}'s Events come from the agents of {instances:?}");
    Ok(format!("hostPath reader in enforce mode: {reader}; Event {event}"))
}

/// csi-driver-host-path's data directory on the node: each volume is a directory there.
const HOSTPATH_DATA_DIR: &str = "/var/lib/csi-hostpath-data";

/// Scenario 6c, in the VM with BPF LSM: two pods read `owner_pod`'s file (`claim`'s
/// `owner`) with no mount of that volume at all — a `kubectl debug node/… --profile=
/// sysadmin`-style pod (hostPID) through `/proc/<owner's pid>/root`, and a pod with a
/// hostPath on the driver's data directory, an ancestor of the volume's — and the open
/// guard refuses both in the kernel (EACCES), with a `SinglePodVolumeAccessRefused` Event
/// on each; the owner keeps reading its file.
pub(super) fn reads_without_a_mount_in_vm(
    admin: &Kube,
    site: Site,
    owner_pod: &str,
    claim: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    const DEBUGGER: &str = "vm-node-debugger";
    const DATA_READER: &str = "vm-data-dir-reader";
    let handle = volume_handle(admin, claim)?;
    admin.apply(&debugger_pod(site, DEBUGGER))?;
    admin.apply(&pod(site, DATA_READER, "exec sleep 100000", "[{name: hp, mountPath: /hp}]", &data_dir_volume()))?;
    let through_proc = refused_open(admin, DEBUGGER, &["sh", "-c", THROUGH_PROC_ROOT], timeout, REFUSED)?;
    let through_dir = refused_open(admin, DATA_READER, &["cat", &format!("/hp/{handle}/owner")], timeout, REFUSED)?;
    let mut events = Vec::new();
    for reader in [DEBUGGER, DATA_READER] {
        let event =
            volguard_event(admin, reader, "SinglePodVolumeAccessRefused", timeout, |note| note.contains(owner_pod))?;
        ensure!(event.kind == "Warning" && event.instance == site.node, "the Event: {event:?}");
        events.push(event.reason);
    }
    let owner = exec(admin, owner_pod, &["cat", "/data/owner"])?;
    ensure!(owner.trim() == A_DATA, "{owner_pod} reads {owner:?} from its own volume");
    admin.run(&["delete", "pod", "-n", NS, DEBUGGER, DATA_READER, "--wait=true", "--timeout=90s"])?;
    Ok(format!(
        "through /proc/<pid>/root: {through_proc}; through the driver's data directory: {through_dir}; Events \
         {events:?}; the owner still reads its file"
    ))
}

/// Waits up to `timeout` for `pod` to run: a pod that never started proves nothing.
fn ran(admin: &Kube, pod: &str, timeout: Duration) -> anyhow::Result<()> {
    admin.wait_pod_running(NS, pod, timeout).with_context(|| {
        let phase = admin.pod_phase(NS, pod).unwrap_or_default();
        format!("{pod} never ran (phase {phase:?}): nothing was tried")
    })?;
    Ok(())
}

/// Runs `command` in `pod` once it runs: it must fail with `refusal` (EACCES's "Permission
/// denied" from BPF LSM, EPERM's "Operation not permitted" from fanotify), not succeed and
/// not fail for another reason.
fn refused_open(admin: &Kube, pod: &str, command: &[&str], timeout: Duration, refusal: &str) -> anyhow::Result<String> {
    ran(admin, pod, timeout)?;
    match exec(admin, pod, command) {
        Ok(data) => bail!("{pod} read {:?} with `{}`: not refused", data.trim(), command.join(" ")),
        Err(e) => {
            let why = format!("{e:#}");
            ensure!(why.contains(refusal), "`{}` in {pod} failed for another reason: {why}", command.join(" "));
            Ok(format!("{pod} refused ({refusal})"))
        }
    }
}

/// A `kubectl debug node/… --profile=sysadmin`-style pod: it sees the node's processes.
fn debugger_pod(site: Site, name: &str) -> String {
    pod(site, name, "exec sleep 100000", "[]", "[]").replacen("spec:\n", "spec:\n  hostPID: true\n", 1)
}

/// Reads the owner's `/data/owner` through `/proc/<pid>/root` of its process (found by
/// `test -e`, a stat, not an open), holding it open for a while: a reader gone before its
/// open is judged has no pod to name.
const THROUGH_PROC_ROOT: &str = "for d in /proc/[0-9]*; do test -e $d/root/data/owner && grep -qx sleep $d/comm && \
                                 { exec 3< $d/root/data/owner && cat <&3 && sleep 2; exit; }; done; \
                                 echo no-owner-process >&2; exit 3";

const NODE_DEBUGGER: &str = "node-debugger";
const DATA_DIR_READER: &str = "data-dir-reader";

/// What `pod` found at `file` (one of single-c's files): it must not be A's data. The pod
/// must run (a pod that never started proves nothing), and `cat` must fail because the
/// file is not there, not for another reason (an exec that failed reads nothing either).
fn read_or_refused(admin: &Kube, pod: &str, file: &str) -> anyhow::Result<String> {
    read_or_refused_within(admin, pod, file, Duration::from_secs(90), &[NO_FILE])
}

/// What `cat` says of a file that is not there, and of an open the open guard refused.
const NO_FILE: &str = "No such file or directory";
const REFUSED: &str = "Permission denied";
/// What `cat` and `sh` say of an open `--deny-foreign-open` refused (EPERM).
const DENIED: &str = "Operation not permitted";

/// As [`read_or_refused`], waiting up to `timeout` for the pod to run; `cat` may fail only
/// with one of `failures`.
fn read_or_refused_within(
    admin: &Kube,
    pod: &str,
    file: &str,
    timeout: Duration,
    failures: &[&str],
) -> anyhow::Result<String> {
    ran(admin, pod, timeout)?;
    // The detach comes at most a timed drain (100 ms) after the runtime's bind.
    std::thread::sleep(Duration::from_secs(1));
    match exec(admin, pod, &["cat", file]) {
        Ok(data) => {
            ensure!(data.trim() != A_DATA, "{pod} reads single-c's data through {file}");
            Ok(format!("{pod} runs and reads {:?} at {file}, not the owner's data", data.trim()))
        }
        Err(e) => {
            let why = format!("{e:#}");
            let Some(failure) = failures.iter().find(|f| why.contains(*f)) else {
                bail!("`cat {file}` in {pod} failed for another reason: {why}")
            };
            Ok(format!("{pod} runs and cannot read {file} ({failure})"))
        }
    }
}

/// volguard's Warning Event on `pod` about a mount outside kubelet's publish, naming
/// `owner`.
fn access_event(admin: &Kube, pod: &str, owner: &str) -> anyhow::Result<String> {
    let reason = "SinglePodVolumeAccessDetached";
    let event = volguard_event(admin, pod, reason, Duration::from_secs(180), |note| note.contains(owner))
        .with_context(|| format!("no {reason} Event on {pod} naming {owner}"))?;
    ensure!(event.kind == "Warning", "the Event is a {}", event.kind);
    Ok(format!("{} ({})", event.reason, event.note))
}

/// Waits up to `timeout` for an Event with `reason` on `pod` whose note `note_says`.
fn volguard_event(
    admin: &Kube,
    pod: &str,
    reason: &str,
    timeout: Duration,
    note_says: impl Fn(&str) -> bool,
) -> anyhow::Result<Event> {
    let mut found = None;
    wait_for(&format!("volguard's {reason} on {pod}"), timeout, || {
        found = admin.events_for(NS, pod)?.into_iter().find(|e| e.reason == reason && note_says(&e.note));
        Ok(found.is_some())
    })?;
    Ok(found.expect("found"))
}

/// The CSI volume handle of `claim`'s PV: its directory's name in the driver's data directory.
fn volume_handle(admin: &Kube, claim: &str) -> anyhow::Result<String> {
    let pv = volume_of(admin, claim)?;
    let handle = admin.run(&["get", "pv", &pv, "-o", "jsonpath={.spec.csi.volumeHandle}"])?.trim().to_owned();
    ensure!(!handle.is_empty(), "PV {pv} names no CSI volume handle");
    Ok(handle)
}

/// A pod's volume `hp`: a hostPath on csi-driver-host-path's data directory.
fn data_dir_volume() -> String {
    format!("[{{name: hp, hostPath: {{path: {HOSTPATH_DATA_DIR}, type: Directory}}}}]")
}
