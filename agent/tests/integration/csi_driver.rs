//! The CSI checks against driver stand-ins: tonic servers on real unix sockets in a
//! temporary kubelet root, one configuration per test (capabilities, node ID, readiness,
//! hanging, dropping the connection, garbage, with and without a registration socket),
//! and `volguard check` run once as a process.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use volguard::{
    csi::{
        CheckOptions, CsiReport, check_node,
        client::{CsiCall, FailureKind, NodeCapability},
        discovery::Source,
        rules::CsiAccessMode,
    },
    enforce::Mode,
    facts::Facts,
    model::checks::{Check, Finding, Severity},
    model::mounts::Mounts,
};

use crate::support::csi_standin::{DRIVER, Driver, NODE_ID, Node1, Raw};

/// Facts: the driver's CSIDriver and CSINode entry, an RWOP PV published into one pod.
fn facts(driver_name: &str) -> Facts {
    let yaml = format!(
        r#"
pods:
  - {{uid: pod-a, namespace: ns, name: db-0, volumes: [{{name: data, persistentVolumeClaim: data}}]}}
persistentVolumes:
  - name: pv-rwop
    accessModes: [ReadWriteOncePod]
    csi: {{driver: {driver_name}, volumeHandle: h-1, fsType: ext4}}
    claimRef: ns/data
persistentVolumeClaims:
  - {{namespace: ns, name: data, accessModes: [ReadWriteOncePod], volumeName: pv-rwop}}
csiDrivers:
  - {{name: {driver_name}, volumeLifecycleModes: [Persistent], fsGroupPolicy: ReadWriteOnceWithFSType}}
csiNode:
  drivers:
    - {{name: {driver_name}, nodeID: {NODE_ID}}}
"#
    );
    volguard::facts::inventory::parse(Path::new("test.yaml"), &yaml).unwrap()
}

fn checks(report: &CsiReport) -> Vec<(Check, Severity)> {
    report.findings.iter().map(|f| (f.check, f.severity)).collect()
}

fn find(report: &CsiReport, check: Check) -> Option<&Finding> {
    report.findings.iter().find(|f| f.check == check)
}

const DEADLINE: Duration = Duration::from_millis(400);

#[tokio::test]
async fn rwop_on_a_driver_without_single_node_multi_writer_is_flagged_by_mode() {
    let node = Node1::new();
    let socket = node.conventional("stand-in");
    node.serve_driver(&socket, Driver::default());
    node.serve_registrar(&format!("{DRIVER}-reg.sock"), DRIVER, &socket);
    let mounts = node.mounts(&[("pod-a", "pv-rwop")]);
    let facts = facts(DRIVER);

    let report = check_node(&node.options(DEADLINE), &facts, &mounts, None).await;
    assert_eq!(report.drivers.len(), 1, "{report:#?}");
    let d = &report.drivers[0];
    assert_eq!(d.name, DRIVER);
    assert_eq!(d.endpoint.as_deref(), Some(socket.as_path()));
    assert_eq!(
        d.found_by,
        [Source::Registration, Source::Conventional, Source::CsiNode].into(),
        "registration and conventional socket are one driver"
    );
    assert_eq!(d.vendor_version.as_deref(), Some("0.0.1-test"));
    assert_eq!(d.ready, Some(true));
    assert_eq!(d.node_capabilities.as_deref(), Some(&[NodeCapability::StageUnstageVolume][..]));
    assert_eq!(d.plugin_capabilities.as_deref(), Some(&["CONTROLLER_SERVICE".to_string()][..]));
    assert!(d.errors.is_empty(), "{:?}", d.errors);

    let volume = &report.volumes[0];
    assert_eq!((volume.name.as_str(), volume.published), ("pv-rwop", true));
    assert_eq!(volume.csi_access_mode, Some(CsiAccessMode::SingleNodeWriter));
    // ReadWriteOnceWithFSType skips RWOP volumes (no ReadWriteOnce among the modes).
    assert_eq!(
        checks(&report),
        [(Check::CsiRwopNotEnforcedByDriver, Severity::Error), (Check::CsiFsGroupNotApplied, Severity::Info)]
    );

    let enforced = check_node(&node.options(DEADLINE), &facts, &mounts, Some(Mode::Enforce)).await;
    assert_eq!(find(&enforced, Check::CsiRwopNotEnforcedByDriver).unwrap().severity, Severity::Info);
    let quarantined = check_node(&node.options(DEADLINE), &facts, &mounts, Some(Mode::Quarantine)).await;
    assert_eq!(find(&quarantined, Check::CsiRwopNotEnforcedByDriver).unwrap().severity, Severity::Warning);
}

#[tokio::test]
async fn a_driver_with_single_node_multi_writer_gets_single_node_single_writer() {
    let node = Node1::new();
    let socket = node.conventional("stand-in");
    node.serve_driver(&socket, Driver::default().with_multi_writer());
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &node.mounts(&[("pod-a", "pv-rwop")]), None).await;
    assert_eq!(report.volumes[0].csi_access_mode, Some(CsiAccessMode::SingleNodeSingleWriter));
    assert!(find(&report, Check::CsiRwopNotEnforcedByDriver).is_none(), "{report:#?}");
    // Found without a registrar: by its conventional socket, named by GetPluginInfo.
    assert_eq!(report.drivers[0].found_by, [Source::Conventional, Source::CsiNode].into());
    assert_eq!(report.drivers[0].registered_name, None);
}

#[tokio::test]
async fn node_id_and_max_volumes_must_match_csinode() {
    let node = Node1::new();
    let socket = node.conventional("stand-in");
    node.serve_driver(&socket, Driver { node_id: "some-other-node".into(), max_volumes: 16, ..Driver::default() });
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    let mismatch = find(&report, Check::CsiNodeIdMismatch).expect("node id finding");
    assert_eq!(mismatch.severity, Severity::Error);
    assert!(mismatch.message.contains("\"some-other-node\""), "{}", mismatch.message);
    let max = find(&report, Check::CsiMaxVolumesMismatch).expect("max volumes finding");
    assert!(max.message.contains("allocatable.count is unset"), "{}", max.message);
}

#[tokio::test]
async fn probe_not_ready_is_an_error() {
    let node = Node1::new();
    node.serve_driver(&node.conventional("stand-in"), Driver { ready: Some(false), ..Driver::default() });
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    assert_eq!(report.drivers[0].ready, Some(false));
    assert_eq!(find(&report, Check::CsiProbeNotReady).unwrap().severity, Severity::Error);
}

#[tokio::test]
async fn an_unset_ready_field_means_ready() {
    let node = Node1::new();
    node.serve_driver(&node.conventional("stand-in"), Driver { ready: None, ..Driver::default() });
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    assert_eq!(report.drivers[0].ready, Some(true));
}

/// Asserts the whole check returned within the deadline plus a margin: connecting and the
/// concurrent calls each get one deadline. The bound (1.8 s) stays below five deadlines
/// (2 s), what calls made one after another would take.
fn assert_bounded(started: Instant) {
    let elapsed = started.elapsed();
    assert!(elapsed < DEADLINE * 2 + Duration::from_millis(1000), "took {elapsed:?} with a {DEADLINE:?} deadline");
}

#[tokio::test]
async fn a_hanging_driver_becomes_timeouts_within_the_deadline() {
    let node = Node1::new();
    node.serve_driver(&node.conventional("stand-in"), Driver { hang: true, ..Driver::default() });
    let started = Instant::now();
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    assert_bounded(started);
    let errors = &report.drivers[0].errors;
    assert_eq!(errors.len(), 5, "{errors:?}");
    assert!(errors.iter().all(|e| e.kind == FailureKind::Timeout), "{errors:?}");
    assert_eq!(find(&report, Check::CsiDriverUnreachable).unwrap().message.matches("no answer within").count(), 1);
    // Unknown capabilities: no access-mode verdict, and no guess.
    assert!(find(&report, Check::CsiRwopNotEnforcedByDriver).is_none());
}

#[tokio::test]
async fn a_silent_socket_does_not_stall_the_check() {
    let node = Node1::new();
    node.serve_raw(&node.conventional("silent"), Raw::Silent);
    let started = Instant::now();
    let report = check_node(&node.options(DEADLINE), &Facts::default(), &Mounts::default(), None).await;
    assert_bounded(started);
    assert!(!report.drivers[0].errors.is_empty());
    assert_eq!(report.drivers[0].name, "silent", "named after its plugin directory");
}

#[tokio::test]
async fn dropped_connections_and_garbage_are_findings() {
    let node = Node1::new();
    node.serve_raw(&node.conventional("closer"), Raw::Close);
    node.serve_raw(&node.conventional("garbage"), Raw::Garbage);
    let started = Instant::now();
    let report = check_node(&node.options(DEADLINE), &Facts::default(), &Mounts::default(), None).await;
    assert_bounded(started);
    assert_eq!(report.drivers.len(), 2);
    for d in &report.drivers {
        assert!(!d.errors.is_empty(), "{d:#?}");
        assert!(d.plugin_name.is_none() && d.node_capabilities.is_none());
    }
    // One finding per driver: it answered nothing.
    assert_eq!(checks(&report), [(Check::CsiDriverUnreachable, Severity::Error); 2], "{report:#?}");
}

#[tokio::test]
async fn a_registrar_naming_another_driver_is_a_name_mismatch() {
    let node = Node1::new();
    let socket = node.conventional("stand-in");
    node.serve_driver(&socket, Driver::default());
    node.serve_registrar("wrong-reg.sock", "wrong.csi.volguard.io", &socket);
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    assert_eq!(report.drivers[0].registered_name.as_deref(), Some("wrong.csi.volguard.io"));
    let mismatch = find(&report, Check::CsiPluginNameMismatch).expect("name mismatch");
    assert!(mismatch.message.contains(DRIVER), "{}", mismatch.message);
}

#[tokio::test]
async fn a_registrar_pointing_at_a_missing_socket_is_unreachable() {
    let node = Node1::new();
    let missing = node.root().join("plugins/gone/csi.sock");
    node.serve_registrar(&format!("{DRIVER}-reg.sock"), DRIVER, &missing);
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    assert_eq!(report.drivers[0].name, DRIVER);
    let failure = &report.drivers[0].errors[0];
    assert_eq!((failure.call, failure.kind), (CsiCall::Connect, FailureKind::Unreachable));
    assert!(find(&report, Check::CsiDriverUnreachable).is_some());
    assert!(find(&report, Check::CsiNodeDriverWithoutSocket).is_none(), "one finding for one problem");
}

#[tokio::test]
async fn without_any_socket_a_csinode_driver_is_flagged() {
    let node = Node1::new();
    // A stale registration file that is not a socket is skipped, as kubelet does.
    std::fs::create_dir_all(node.root().join("plugins_registry")).unwrap();
    std::fs::write(node.root().join(format!("plugins_registry/{DRIVER}-reg.sock")), "").unwrap();
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &node.mounts(&[("pod-a", "pv-rwop")]), None).await;
    assert!(report.drivers.is_empty(), "{report:#?}");
    assert_eq!(checks(&report), [(Check::CsiNodeDriverWithoutSocket, Severity::Error)]);
}

#[tokio::test]
async fn a_driver_on_the_node_but_not_in_csinode_and_without_csidriver() {
    let node = Node1::new();
    node.serve_driver(
        &node.conventional("other"),
        Driver { name: "other.csi.volguard.io".into(), ..Driver::default() },
    );
    let report = check_node(&node.options(DEADLINE), &facts(DRIVER), &Mounts::default(), None).await;
    let found = checks(&report);
    assert!(found.contains(&(Check::CsiRegisteredNotInCsiNode, Severity::Warning)), "{found:?}");
    assert!(found.contains(&(Check::CsiDriverObjectMissing, Severity::Warning)), "{found:?}");
    assert!(found.contains(&(Check::CsiNodeDriverWithoutSocket, Severity::Error)), "{found:?}");
}

#[tokio::test]
async fn explicit_sockets_are_asked_too() {
    let node = Node1::new();
    let elsewhere = node.root().join("elsewhere/driver.sock");
    node.serve_driver(&elsewhere, Driver::default().with_multi_writer());
    let opts = CheckOptions { extra_sockets: vec![elsewhere.clone()], ..node.options(DEADLINE) };
    let report = check_node(&opts, &facts(DRIVER), &Mounts::default(), None).await;
    assert_eq!(report.drivers[0].found_by, [Source::Explicit, Source::CsiNode].into());
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}

/// `volguard check` as a process: exit status 2 and the finding on stdout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volguard_check_exits_non_zero_on_an_error_finding() {
    let node = Node1::new();
    node.serve_driver(&node.conventional("stand-in"), Driver { ready: Some(false), ..Driver::default() });
    let inventory = node.root().join("inventory.yaml");
    let facts = facts(DRIVER);
    std::fs::write(&inventory, serde_yaml_ng_free(&facts)).unwrap();
    let mountinfo = node.root().join("mountinfo");
    std::fs::write(&mountinfo, "").unwrap();
    let root = node.root().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_volguard"))
            .arg("check")
            .arg("--kubelet-root")
            .arg(&root)
            .arg("--mountinfo")
            .arg(&mountinfo)
            .arg("--inventory")
            .arg(&inventory)
            .args(["--deadline-ms", "1000"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(2),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(&format!("driver {DRIVER}: endpoint")), "{stdout}");
    assert!(stdout.contains("[csi_probe_not_ready] driver stand-in.csi.volguard.io: Probe says not ready"), "{stdout}");
    assert!(
        stdout.contains("kubelet version not known (the inventory has no `node: {kubeletVersion: ...}`)"),
        "{stdout}"
    );
}

/// The facts as inventory JSON (JSON is YAML; keeps serde_yaml out of the test's deps).
fn serde_yaml_ng_free(facts: &Facts) -> String {
    serde_json::to_string(facts).unwrap()
}

/// Waits for a report that satisfies `done`, up to `within`.
async fn wait_for(
    rx: &mut tokio::sync::watch::Receiver<std::sync::Arc<CsiReport>>,
    within: Duration,
    done: impl Fn(&CsiReport) -> bool,
) -> CsiReport {
    let deadline = Instant::now() + within;
    loop {
        if done(&rx.borrow_and_update()) {
            return (**rx.borrow()).clone();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.changed()).await {
            Ok(Ok(())) => {}
            _ => panic!("no such report within {within:?}; last: {:#?}", *rx.borrow()),
        }
    }
}

/// The monitor asks again when a socket appears (long before the periodic re-check) and
/// re-judges, without asking, when the facts change.
#[tokio::test]
async fn the_monitor_follows_sockets_and_facts() {
    use std::sync::Arc;

    use tokio::sync::watch;
    use volguard::{
        csi::monitor::{self, MonitorOptions},
        facts::{Origin, Snapshot},
    };

    let node = Node1::new();
    let opts = MonitorOptions {
        recheck_interval: Duration::from_secs(3600),
        socket_poll_interval: Duration::from_millis(100),
        ..MonitorOptions::new(node.options(DEADLINE), Some(Mode::Enforce))
    };
    let (facts_tx, facts_rx) = watch::channel(Snapshot::empty(Origin::None));
    let (_mounts_tx, mounts_rx) = watch::channel(node.mounts(&[("pod-a", "pv-rwop")]));
    let (tx, mut rx) = watch::channel(std::sync::Arc::new(CsiReport::default()));
    let task = tokio::spawn(monitor::run(opts, facts_rx, mounts_rx, tx));

    let first = wait_for(&mut rx, Duration::from_secs(2), |r| r.checked_at.is_some()).await;
    assert!(first.drivers.is_empty() && first.findings.is_empty(), "{first:#?}");

    node.serve_driver(&node.conventional("stand-in"), Driver::default());
    let found = wait_for(&mut rx, Duration::from_secs(3), |r| !r.drivers.is_empty()).await;
    assert_eq!(found.drivers[0].name, DRIVER);
    // A socket that appears while the drivers are being asked is asked about once more at
    // the next poll; let that settle (five poll intervals) before taking the ask's time.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked_at = rx.borrow_and_update().checked_at;
    assert!(asked_at.is_some());

    facts_tx.send_replace(Snapshot { facts: Arc::new(facts(DRIVER)), ..Snapshot::empty(Origin::None) });
    let judged = wait_for(&mut rx, Duration::from_secs(2), |r| !r.volumes.is_empty()).await;
    assert_eq!(judged.checked_at, asked_at, "new facts are judged without asking the drivers again");
    let rwop = judged.findings.iter().find(|f| f.check == Check::CsiRwopNotEnforcedByDriver).unwrap();
    assert_eq!(rwop.severity, Severity::Info, "the agent enforces in the kernel");

    // The socket goes away (the node plugin stopped): noticed at the next poll, and the
    // CSINode entry without a socket is an error.
    std::fs::remove_file(node.conventional("stand-in")).unwrap();
    let gone =
        wait_for(&mut rx, Duration::from_secs(3), |r| find(r, Check::CsiNodeDriverWithoutSocket).is_some()).await;
    assert_eq!(find(&gone, Check::CsiNodeDriverWithoutSocket).unwrap().severity, Severity::Error);
    assert!(gone.checked_at > asked_at, "asked again");

    drop(rx);
    tokio::time::timeout(Duration::from_secs(2), task).await.expect("the monitor stops when nobody listens").unwrap();
}

/// Drivers are asked again every recheck interval, with no socket or fact changing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_asks_again_every_recheck_interval() {
    use tokio::sync::watch;
    use volguard::{
        csi::monitor::{self, MonitorOptions},
        facts::{Origin, Snapshot},
    };

    let node = Node1::new();
    node.serve_driver(&node.conventional("stand-in"), Driver::default());
    let opts = MonitorOptions {
        recheck_interval: Duration::from_millis(300),
        socket_poll_interval: Duration::from_secs(3600),
        ..MonitorOptions::new(node.options(DEADLINE), Some(Mode::Enforce))
    };
    let (_facts_tx, facts_rx) = watch::channel(Snapshot::empty(Origin::None));
    let (_mounts_tx, mounts_rx) = watch::channel(node.mounts(&[]));
    let (tx, mut rx) = watch::channel(std::sync::Arc::new(CsiReport::default()));
    let task = tokio::spawn(monitor::run(opts, facts_rx, mounts_rx, tx));
    let first = wait_for(&mut rx, Duration::from_secs(2), |r| !r.drivers.is_empty()).await;
    let again = wait_for(&mut rx, Duration::from_secs(2), |r| r.checked_at > first.checked_at).await;
    assert_eq!(again.drivers[0].name, DRIVER);
    drop(rx);
    tokio::time::timeout(Duration::from_secs(2), task).await.expect("the monitor stops when nobody listens").unwrap();
}
