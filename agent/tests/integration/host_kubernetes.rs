//! A real agent taking its facts from a (fake) Kubernetes API server over real HTTP: the
//! single-pod set comes from a PV's access modes, a conflicting publish becomes a Warning
//! Event on the refused pod, and an API outage marks the facts stale and releases nothing.

use std::{path::Path, time::Duration};

use nix::errno::Errno;

use crate::support::{
    fake_api::{
        CSI_DRIVERS, CSI_NODES, FakeApi, NODES, PODS, PVCS, PVS, csi_driver, csi_node, eventually, node, pod, rwop_pv,
        rwop_pvc,
    },
    have_root, http_get,
    kubelet::{Agent, KubeletTree, MountNs, agent_binary, pin_root, uninstall},
};

const NODE: &str = "node-1";

/// This node's pods db-0 (uid pod-a) and db-1 (uid pod-b) sharing the ReadWriteOncePod
/// PV `pv-data` of hostpath.csi.k8s.io, whose CSINode entry names this node.
fn seed(fake: &FakeApi) {
    fake.apply(PODS, pod("db-0", "pod-a", NODE));
    fake.apply(PODS, pod("db-1", "pod-b", NODE));
    fake.apply(PVS, rwop_pv("pv-data", "hostpath.csi.k8s.io", "h-1"));
    fake.apply(PVCS, rwop_pvc("pv-data"));
    fake.apply(CSI_DRIVERS, csi_driver("hostpath.csi.k8s.io"));
    fake.apply(CSI_NODES, csi_node(NODE, &[("hostpath.csi.k8s.io", NODE)]));
}

/// The agent in auto mode on `tree`, reading `ns`'s mount table and its facts from the
/// API server `kubeconfig` names, as node [`NODE`], with `extra` arguments.
fn start_agent(tree: &KubeletTree, ns: &MountNs, pins: &Path, kubeconfig: &Path, extra: &[&str]) -> Agent {
    let mountinfo = ns.mountinfo();
    let mut args = vec!["--mountinfo", &mountinfo, "--kubernetes", "--node-name", NODE];
    args.extend(extra);
    let env = [("KUBECONFIG", kubeconfig.to_str().unwrap())];
    Agent::start_with_env(&tree.root(), pins, &[], "auto", &args, &env)
}

/// Pod B publishes: refused (enforce) or quarantined; either way pod B ends without the volume.
fn second_publish_is_stopped(ns: &MountNs, agent: &Agent, volume: &Path, b: &Path) {
    let is_quarantine = |l: &str| l.contains("CONFLICT quarantined") && l.contains("pod-b");
    let quarantined = agent.count_lines(is_quarantine);
    match ns.bind(volume, b) {
        Err(Errno::EBUSY) => {}
        Ok(()) => {
            agent.wait_for_more_lines("the quarantine", quarantined, is_quarantine);
            while ns.umount(b).is_ok() {}
        }
        other => panic!("pod B's publish: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_facts_drive_enforcement_and_conflicts_become_events_and_an_outage_releases_nothing() {
    if !have_root("api_facts_drive_enforcement_and_conflicts_become_events_and_an_outage_releases_nothing") {
        return;
    }
    let mut fake = FakeApi::start().await;
    seed(&fake);
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let config = fake.kubeconfig(tree.tmp.path());
    let (volume, a, b) =
        (tree.volume("pv-data"), tree.publish_dir("pod-a", "pv-data"), tree.publish_dir("pod-b", "pv-data"));
    let pins = pin_root("kubernetes");

    let agent = tokio::task::block_in_place(|| {
        let agent = start_agent(&tree, &ns, &pins, &config, &["--reconcile-interval", "200ms"]);
        agent.wait_for_line("the API's facts", |l| l.contains("node model: 1 single-pod volumes (1 ReadWriteOncePod"));
        assert_eq!(ns.bind(&volume, &a), Ok(()), "pod A publishes first");
        second_publish_is_stopped(&ns, &agent, &volume, &b);
        agent
    });

    let events =
        eventually("the Event", Duration::from_secs(30), || async { Some(fake.events()).filter(|e| !e.is_empty()) })
            .await;
    let event = &events[0];
    assert_eq!(event["type"], "Warning");
    assert!(
        ["SinglePodVolumeRefused", "SinglePodVolumeQuarantined"].contains(&event["reason"].as_str().unwrap()),
        "{event}"
    );
    assert_eq!(event["regarding"]["name"], "db-1");
    assert_eq!(event["regarding"]["uid"], "pod-b");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("\"pv-data\" (PVC shop/data)") && note.contains("pod shop/db-0 (uid pod-a)"), "{note}");

    // The API goes away: the facts go stale, ownership and the single-pod set stay.
    fake.stop().await;
    tokio::task::block_in_place(|| {
        // Stale, and still the same facts: nothing is dropped because the API is unreachable.
        agent.wait_for_line("the stale facts", |l| l.contains("1 single-pod volumes") && l.contains("facts STALE"));
        second_publish_is_stopped(&ns, &agent, &volume, &b);
    });
    fake.restart().await;
    tokio::task::block_in_place(|| {
        agent.wait_for_line_after(
            "the recovery",
            |l| l.contains("1 single-pod volumes") && l.contains("facts STALE"),
            |l| l.contains("node model: 1 single-pod volumes") && !l.contains("STALE"),
        );
        agent.stop();
        while ns.umount(&a).is_ok() {}
        if pins.exists() {
            uninstall(&pins);
        }
    });
}

/// An agent the API server does not give a first complete list is not ready (its
/// DaemonSet's rollout stops there: a wrong certificate or RBAC shows at the first node);
/// ready once the list comes, and it stays ready when the API goes away later (its facts
/// stay in force, stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_is_not_ready_until_the_api_has_listed_once_and_stays_ready_through_an_outage() {
    if !have_root("the_agent_is_not_ready_until_the_api_has_listed_once_and_stays_ready_through_an_outage") {
        return;
    }
    let mut fake = FakeApi::start().await;
    seed(&fake);
    fake.fail_lists(PODS, true);
    let tree = KubeletTree::new();
    let ns = MountNs::new();
    let config = fake.kubeconfig(tree.tmp.path());
    let pins = pin_root("kubernetes-ready");
    let agent = tokio::task::block_in_place(|| start_agent(&tree, &ns, &pins, &config, &[]));
    let readyz = || http_get(&agent.address("metrics"), "/readyz");
    // The programs are attached (the agent printed its ready line) and its pod list failed.
    eventually("a failed list of the pods", Duration::from_secs(30), || async {
        fake.requests().iter().any(|r| r.resource == PODS && !r.is_watch()).then_some(())
    })
    .await;
    let (status, body) = tokio::task::block_in_place(readyz);
    assert_eq!(status, 503, "no facts yet: {body}");
    assert!(body.contains("no facts yet: waiting for the first complete list"), "{body}");

    fake.fail_lists(PODS, false);
    let body = eventually("ready once the pods listed", Duration::from_secs(30), || async {
        Some(tokio::task::block_in_place(readyz)).filter(|(status, _)| *status == 200).map(|(_, body)| body)
    })
    .await;
    assert!(body.contains("\"ready\":true"), "{body}");

    fake.stop().await;
    let body = eventually("the outage in the readiness detail", Duration::from_secs(30), || async {
        let (status, body) = tokio::task::block_in_place(readyz);
        assert_eq!(status, 200, "stale facts stay in force: {body}");
        Some(body).filter(|b| b.contains("facts stale"))
    })
    .await;
    assert!(body.contains("\"ready\":true"), "{body}");
    tokio::task::block_in_place(|| {
        agent.stop();
        if pins.exists() {
            uninstall(&pins);
        }
    });
}

/// `volguard check --kubernetes` for [`NODE`] against the fake behind `kubeconfig`, with
/// an empty kubelet root and mount table under `dir` and no running agent to take a mode
/// from: (exit code, stdout, stderr).
fn volguard_check(kubeconfig: &Path, dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (root, mountinfo) = (dir.join("kubelet"), dir.join("mountinfo"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(&mountinfo, "").unwrap();
    let output = std::process::Command::new(agent_binary())
        .arg("check")
        .arg("--kubernetes")
        .args(["--node-name", NODE, "--deadline-ms", "500"])
        .arg("--kubelet-root")
        .arg(&root)
        .arg("--mountinfo")
        .arg(&mountinfo)
        // Nothing listens on the discard port: no running agent to take a mode from.
        .args(["--debug-address", "127.0.0.1:9"])
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// `volguard check --kubernetes` (no root needed): its facts come from one complete list
/// of the API, so a driver that this node's CSINode names but that has no socket here is
/// found; with the API server gone it fails with a clear message instead of hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volguard_check_takes_its_facts_from_the_api() {
    let mut fake = FakeApi::start().await;
    seed(&fake);
    let dir = tempfile::tempdir().unwrap();
    let config = fake.kubeconfig(dir.path());
    // A generous wait while the server is up (CI machines are loaded), a short one once gone.
    let check = move |api_timeout: &'static str| {
        let (config, dir) = (config.clone(), dir.path().to_owned());
        tokio::task::spawn_blocking(move || volguard_check(&config, &dir, &["--api-timeout", api_timeout]))
    };

    let (code, stdout, stderr) = check("20").await.unwrap();
    assert_eq!(code, Some(2), "an error finding: stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("[csi_node_driver_without_socket] driver hostpath.csi.k8s.io"),
        "CSINode came from the API: {stdout}"
    );
    assert!(stdout.contains("judged for mode none"), "{stdout}");
    assert!(!stdout.contains("csi_driver_object_missing"), "the API lists the CSIDriver: {stdout}");
    assert!(stdout.contains("kubelet version not known (the API has no Node node-1)"), "{stdout}");

    fake.stop().await;
    let (code, stdout, stderr) = check("3").await.unwrap();
    assert_eq!(code, Some(1), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("the Kubernetes API: no complete list within 3 s"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// The version-skew hole: the Node reports kubelet v1.26, whose ReadWriteOncePod feature
/// gate is off by default, so kubelet does not refuse a second pod on the ReadWriteOncePod
/// volume itself. `volguard check --kubernetes` reads the Node once and says so, in the
/// JSON report and in text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volguard_check_flags_an_old_kubelet() {
    let fake = FakeApi::start().await;
    seed(&fake);
    fake.apply(NODES, node(NODE, "v1.26.15"));
    let dir = tempfile::tempdir().unwrap();
    let config = fake.kubeconfig(dir.path());
    let check = move |args: &'static [&'static str]| {
        let (config, dir) = (config.clone(), dir.path().to_owned());
        tokio::task::spawn_blocking(move || volguard_check(&config, &dir, args))
    };

    let (code, stdout, stderr) = check(&["--api-timeout", "20", "--json"]).await.unwrap();
    assert_eq!(code, Some(2), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("the JSON report");
    assert_eq!(report["kubelet"]["version"], "v1.26.15", "{stdout}");
    assert_eq!(report["kubelet"]["rwop"], "alpha_off_by_default", "{stdout}");
    let findings = report["findings"].as_array().expect("findings");
    let hole = findings.iter().find(|f| f["check"] == "kubelet_rwop_not_enforced").expect("the kubelet finding");
    assert_eq!(hole["subject"], "volume pv-data");
    assert_eq!(hole["severity"], "error", "no agent enforces and no driver answers: {hole}");
    assert!(fake.requests().iter().any(|r| r.resource == "nodes/node-1"), "one GET of the Node");
    assert!(!fake.requests().iter().any(|r| r.resource == NODES), "no list or watch of Nodes");

    let (_, text, stderr) = check(&["--api-timeout", "20"]).await.unwrap();
    assert!(
        text.contains("kubelet v1.26.15: ReadWriteOncePod feature gate alpha, off by default (1.22-1.26)"),
        "{text}\n{stderr}"
    );
    assert!(text.contains("ReadWriteOncePod volumes in use: 1;"), "{text}");
    assert!(
        text.contains(
            "[kubelet_rwop_not_enforced] volume pv-data: ReadWriteOncePod, but kubelet v1.26.15 does not refuse"
        ),
        "{text}"
    );
}
