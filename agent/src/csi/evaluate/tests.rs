//! Tests of the parent module, kept apart so that it stays readable.

use super::*;
use std::path::PathBuf;

use crate::{
    csi::kubelet::KubeletRwop,
    csi::{
        client::CallFailure,
        discovery::Source,
        report::{CsiReport, DriverReport},
    },
    facts::{CsiDriver, CsiNode, CsiNodeDriver, NodeInfo, PersistentVolume, Pod, PodVolume, fixtures},
    node_files::mount_table::MountTable,
};

const D: &str = "d.csi.io";

fn driver(caps: &[NodeCapability]) -> DriverReport {
    DriverReport {
        name: D.into(),
        found_by: [Source::Registration].into(),
        registered_name: Some(D.into()),
        plugin_name: Some(D.into()),
        endpoint: Some(PathBuf::from("/k/plugins/d/csi.sock")),
        ready: Some(true),
        node_capabilities: Some(caps.to_vec()),
        node_id: Some("n1".into()),
        max_volumes_per_node: Some(0),
        ..DriverReport::default()
    }
}

fn object(modes: &[&str], policy: &str) -> CsiDriver {
    CsiDriver {
        name: D.into(),
        volume_lifecycle_modes: modes.iter().map(|m| m.to_string()).collect(),
        fs_group_policy: policy.into(),
        attach_required: true,
        pod_info_on_mount: false,
    }
}

fn pv(name: &str, modes: &[AccessMode], fs_type: Option<&str>) -> PersistentVolume {
    fixtures::pv(name, modes).on_driver(D, fs_type).bound_to("ns", &format!("c-{name}"))
}

fn base() -> Facts {
    Facts {
        csi_drivers: vec![object(&["Persistent"], "ReadWriteOnceWithFSType")],
        csi_node: Some(CsiNode {
            drivers: vec![CsiNodeDriver {
                name: D.into(),
                node_id: "n1".into(),
                allocatable_count: None,
                topology_keys: vec![],
            }],
        }),
        ..Facts::default()
    }
}

fn published(volumes: &[(&str, &str)]) -> Mounts {
    let text: String = volumes
        .iter()
        .enumerate()
        .map(|(i, (pod, v))| {
            format!("{} 1 8:1 / /k/pods/{pod}/volumes/kubernetes.io~csi/{v}/mount rw - ext4 x rw\n", 10 + i)
        })
        .collect();
    Mounts::from_table(&MountTable::parse(text.as_bytes()), std::path::Path::new("/k"))
}

fn judge(facts: &Facts, mounts: &Mounts, drivers: Vec<DriverReport>, mode: Option<Mode>) -> CsiReport {
    CsiReport::judge(drivers, facts, mounts, mode)
}

fn checks(report: &CsiReport) -> Vec<(Check, Severity)> {
    report.findings.iter().map(|f| (f.check, f.severity)).collect()
}

#[test]
fn a_healthy_driver_has_no_findings() {
    let report = judge(&base(), &Mounts::default(), vec![driver(&[])], None);
    assert_eq!(checks(&report), []);
    assert_eq!(report.drivers[0].found_by, [Source::Registration, Source::CsiNode].into());
    assert_eq!(report.drivers[0].fs_group_policy, "ReadWriteOnceWithFSType");
}

#[test]
fn rwop_severity_follows_the_mode() {
    let facts = Facts { persistent_volumes: vec![pv("v1", &[AccessMode::ReadWriteOncePod], None)], ..base() };
    let mounts = published(&[("pod-a", "v1")]);
    for (mode, severity) in [
        (Some(Mode::Enforce), Severity::Info),
        (Some(Mode::Quarantine), Severity::Warning),
        (Some(Mode::Audit), Severity::Error),
        (None, Severity::Error),
    ] {
        let report = judge(&facts, &mounts, vec![driver(&[])], mode);
        let rwop: Vec<_> =
            checks(&report).into_iter().filter(|(c, _)| *c == Check::CsiRwopNotEnforcedByDriver).collect();
        assert_eq!(rwop, [(Check::CsiRwopNotEnforcedByDriver, severity)], "{mode:?}");
    }
    // The debug API shows the report as JSON: stable snake_case names.
    let json = serde_json::to_value(judge(&facts, &mounts, vec![driver(&[])], None)).unwrap();
    assert_eq!(json["findings"][0]["check"], "csi_rwop_not_enforced_by_driver");
    assert_eq!(json["volumes"][0]["csi_access_mode"], "SINGLE_NODE_WRITER");
    assert_eq!(json["drivers"][0]["endpoint"], "/k/plugins/d/csi.sock");
    let capable = judge(&facts, &mounts, vec![driver(&[NodeCapability::SingleNodeMultiWriter])], None);
    assert_eq!(capable.volumes[0].csi_access_mode, Some(CsiAccessMode::SingleNodeSingleWriter));
    assert!(!checks(&capable).iter().any(|(c, _)| *c == Check::CsiRwopNotEnforcedByDriver));
    // RWO is not flagged: the driver is told what kubelet means.
    let rwo = Facts { persistent_volumes: vec![pv("v1", &[AccessMode::ReadWriteOnce], Some("xfs"))], ..base() };
    assert_eq!(checks(&judge(&rwo, &mounts, vec![driver(&[])], None)), []);
}

/// The kubelet's version against the driver's capabilities and the mode: the access mode
/// sent, why it is weaker than SINGLE_NODE_SINGLE_WRITER, and the kubelet finding.
#[test]
fn an_old_kubelet_is_a_hole_of_its_own() {
    use CsiAccessMode::*;
    use RwopWeakenedBy::*;
    use Severity::*;
    let mounts = published(&[("pod-a", "v1")]);
    let rows = [
        // A kubelet before 1.22 ignores the capability and sends UNKNOWN.
        ("v1.21.14", false, None, Unknown, Some(KubeletVersion), Some(Error)),
        ("v1.21.14", true, None, Unknown, Some(KubeletVersion), Some(Error)),
        ("v1.22.0", false, None, SingleNodeWriter, Some(DriverCapabilities), Some(Error)),
        ("v1.26.15", false, Some(Mode::Quarantine), SingleNodeWriter, Some(DriverCapabilities), Some(Warning)),
        // A driver told SINGLE_NODE_SINGLE_WRITER should refuse a second publish: at most a warning.
        ("v1.26.15", true, None, SingleNodeSingleWriter, None, Some(Warning)),
        ("v1.26.15", true, Some(Mode::Enforce), SingleNodeSingleWriter, None, Some(Info)),
        ("v1.27.0", false, None, SingleNodeWriter, Some(DriverCapabilities), None),
        ("v1.28.9", true, None, SingleNodeSingleWriter, None, None),
        ("v1.29.0", false, None, SingleNodeWriter, Some(DriverCapabilities), None),
        ("v1.31.0", true, None, SingleNodeSingleWriter, None, None),
        ("v0.0.0-master+$Format", false, None, SingleNodeWriter, Some(DriverCapabilities), None),
    ];
    for (version, multi_writer, mode, sent, weakened_by, severity) in rows {
        let facts = Facts {
            persistent_volumes: vec![pv("v1", &[AccessMode::ReadWriteOncePod], None)],
            node: Some(NodeInfo { kubelet_version: version.into() }),
            ..base()
        };
        let caps: &[NodeCapability] = if multi_writer { &[NodeCapability::SingleNodeMultiWriter] } else { &[] };
        let report = judge(&facts, &mounts, vec![driver(caps)], mode);
        let row = format!("{version}, multi writer {multi_writer}, {mode:?}");
        assert_eq!(report.volumes[0].csi_access_mode, Some(sent), "{row}");
        assert_eq!(report.volumes[0].rwop_weakened_by, weakened_by, "{row}");
        let kubelet: Vec<_> = report.findings.iter().filter(|f| f.check == Check::KubeletRwopNotEnforced).collect();
        assert_eq!(kubelet.iter().map(|f| f.severity).collect::<Vec<_>>(), Vec::from_iter(severity), "{row}");
    }

    let facts = Facts {
        persistent_volumes: vec![
            pv("v1", &[AccessMode::ReadWriteOncePod], None),
            pv("v2", &[AccessMode::ReadWriteOnce], Some("ext4")),
        ],
        node: Some(NodeInfo { kubelet_version: "v1.26.15".into() }),
        ..base()
    };
    let report = judge(&facts, &published(&[("pod-a", "v1"), ("pod-b", "v2")]), vec![driver(&[])], None);
    assert_eq!(report.kubelet.rwop, KubeletRwop::AlphaOffByDefault);
    let kubelet: Vec<_> = report.findings.iter().filter(|f| f.check == Check::KubeletRwopNotEnforced).collect();
    assert_eq!(kubelet.len(), 1, "only the ReadWriteOncePod volume: {kubelet:#?}");
    assert_eq!(kubelet[0].subject, "volume v1");
    assert_eq!(
        kubelet[0].message,
        "ReadWriteOncePod, but kubelet v1.26.15 does not refuse a second pod on this node itself: its \
         ReadWriteOncePod feature gate is alpha and off by default in 1.22-1.26 (unless turned on with \
         --feature-gates); driver d.csi.io is told SINGLE_NODE_WRITER (no node capability SINGLE_NODE_MULTI_WRITER) \
         and cannot refuse one either; no volguard agent enforces"
    );
    assert_eq!(report.findings_by_driver().iter().filter(|(d, _)| *d == D).count(), report.findings.len());
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["kubelet"]["version"], "v1.26.15");
    assert_eq!(json["kubelet"]["rwop"], "alpha_off_by_default");
    assert_eq!(json["volumes"][0]["rwop_weakened_by"], "driver_capabilities");
    assert!(json["volumes"][1].get("rwop_weakened_by").is_none(), "only for ReadWriteOncePod");
    assert!(json["findings"].as_array().unwrap().iter().any(|f| f["check"] == "kubelet_rwop_not_enforced"));
}

/// The agent's own facts carry no Node: the kubelet is unknown, which is no finding.
#[test]
fn an_unknown_kubelet_is_said_but_not_flagged() {
    let facts = Facts { persistent_volumes: vec![pv("v1", &[AccessMode::ReadWriteOncePod], None)], ..base() };
    let report = judge(&facts, &published(&[("pod-a", "v1")]), vec![driver(&[])], None);
    assert_eq!((report.kubelet.version.as_deref(), report.kubelet.rwop), (None, KubeletRwop::Unknown));
    assert!(report.kubelet.summary.starts_with("kubelet version not known"), "{}", report.kubelet.summary);
    assert!(!checks(&report).iter().any(|(c, _)| *c == Check::KubeletRwopNotEnforced), "{:#?}", report.findings);
}

#[test]
fn csinode_disagreements() {
    let mut d = driver(&[]);
    d.node_id = Some("n2".into());
    d.max_volumes_per_node = Some(8);
    let report = judge(&base(), &Mounts::default(), vec![d], None);
    assert_eq!(
        checks(&report),
        [(Check::CsiNodeIdMismatch, Severity::Error), (Check::CsiMaxVolumesMismatch, Severity::Warning)]
    );
    // Kubelet leaves the count unset for 0 and caps it at MaxInt32.
    let mut facts = base();
    facts.csi_node.as_mut().unwrap().drivers[0].allocatable_count = Some(i32::MAX);
    let mut huge = driver(&[]);
    huge.max_volumes_per_node = Some(i64::MAX);
    assert_eq!(checks(&judge(&facts, &Mounts::default(), vec![huge], None)), []);
}

#[test]
fn missing_from_csinode_and_csinode_without_socket() {
    let mut other = driver(&[]);
    other.name = "other.csi.io".into();
    other.registered_name = Some("other.csi.io".into());
    other.plugin_name = Some("other.csi.io".into());
    let report = judge(&base(), &Mounts::default(), vec![other], None);
    assert_eq!(
        checks(&report),
        [
            (Check::CsiDriverObjectMissing, Severity::Warning),
            (Check::CsiRegisteredNotInCsiNode, Severity::Warning),
            (Check::CsiNodeDriverWithoutSocket, Severity::Error),
        ]
    );
    // Without CSINode facts nothing is said about registration.
    let no_node = Facts { csi_node: None, ..base() };
    assert_eq!(checks(&judge(&no_node, &Mounts::default(), vec![driver(&[])], None)), []);
}

#[test]
fn driver_health() {
    let mut d = driver(&[]);
    d.ready = Some(false);
    d.plugin_name = Some("impostor.csi.io".into());
    d.errors.push(CallFailure {
        call: CsiCall::NodeGetInfo,
        kind: FailureKind::Timeout,
        message: "no answer within 2s".into(),
    });
    let report = judge(&base(), &Mounts::default(), vec![d], None);
    assert_eq!(
        checks(&report),
        [
            (Check::CsiCallFailed, Severity::Error),
            (Check::CsiPluginNameMismatch, Severity::Error),
            (Check::CsiProbeNotReady, Severity::Error),
        ]
    );
    assert!(report.findings[0].message.starts_with("call timed out: NodeGetInfo"));
}

#[test]
fn lifecycle_modes() {
    let inline = Pod {
        uid: "pod-i".into(),
        namespace: "ns".into(),
        name: "web".into(),
        terminating: false,
        service_account: String::new(),
        labels: Default::default(),
        volumes: vec![PodVolume { name: "secrets".into(), source: VolumeSource::Csi { driver: D.into() } }],
    };
    let facts = Facts { pods: vec![inline.clone()], ..base() };
    let report = judge(&facts, &Mounts::default(), vec![driver(&[])], None);
    assert_eq!(checks(&report), [(Check::CsiEphemeralModeUnsupported, Severity::Error)]);
    assert_eq!(report.volumes[0].csi_access_mode, Some(CsiAccessMode::SingleNodeWriter), "inline: always RWO");

    let no_object = Facts { csi_drivers: vec![], ..facts.clone() };
    let report = judge(&no_object, &Mounts::default(), vec![driver(&[])], None);
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.check == Check::CsiEphemeralModeUnsupported && f.message.contains("no CSIDriver object"))
    );

    let ephemeral_only = Facts {
        csi_drivers: vec![object(&["Ephemeral"], "File")],
        persistent_volumes: vec![
            pv("v1", &[AccessMode::ReadWriteOnce], None),
            pv("v2", &[AccessMode::ReadWriteOnce], None),
        ],
        ..facts
    };
    let report = judge(&ephemeral_only, &published(&[("p", "v1"), ("p", "v2")]), vec![driver(&[])], None);
    assert_eq!(checks(&report), [(Check::CsiPersistentModeUnsupported, Severity::Error)], "once per driver");
}

#[test]
fn fs_group_per_volume() {
    let facts = Facts {
        persistent_volumes: vec![
            pv("rwo-ext4", &[AccessMode::ReadWriteOnce], Some("ext4")),
            pv("rwo-nofs", &[AccessMode::ReadWriteOnce], None),
        ],
        ..base()
    };
    let mounts = published(&[("p", "rwo-ext4"), ("p", "rwo-nofs")]);
    let report = judge(&facts, &mounts, vec![driver(&[])], None);
    let ownership: Vec<_> = report.volumes.iter().map(|v| (v.name.as_str(), v.fs_group)).collect();
    assert_eq!(
        ownership,
        [("rwo-ext4", Some(FsGroupOwnership::KubeletChanges)), ("rwo-nofs", Some(FsGroupOwnership::Unchanged))]
    );
    assert_eq!(checks(&report), [(Check::CsiFsGroupNotApplied, Severity::Info)]);
    assert_eq!(report.findings[0].subject, "volume rwo-nofs");

    let group = judge(&facts, &mounts, vec![driver(&[NodeCapability::VolumeMountGroup])], None);
    assert!(group.volumes.iter().all(|v| v.fs_group == Some(FsGroupOwnership::DriverApplies)));

    let odd = Facts { csi_drivers: vec![object(&["Persistent"], "Sometimes")], ..facts };
    let report = judge(&odd, &mounts, vec![driver(&[])], None);
    assert_eq!(checks(&report), [(Check::CsiFsGroupNotApplied, Severity::Warning); 2]);
    assert_eq!(report.volumes[0].fs_group, None);
}

/// A node of `n` CSI volumes: RWOP and RWO PVs (half published, half only claimed by a
/// pod), an inline volume, on one driver.
fn busy_node(n: usize) -> (Facts, Mounts) {
    let mut facts = base();
    let mut publishes = Vec::new();
    for i in 0..n {
        let mode = if i % 2 == 0 { AccessMode::ReadWriteOncePod } else { AccessMode::ReadWriteOnce };
        let name = format!("v{i}");
        facts.persistent_volumes.push(pv(&name, &[mode], (i % 3 == 0).then_some("ext4")));
        facts.persistent_volume_claims.push(crate::facts::PersistentVolumeClaim {
            namespace: "ns".into(),
            name: format!("c-{name}"),
            access_modes: vec![mode],
            volume_name: Some(name.clone()),
            annotations: Default::default(),
            controller_uid: None,
        });
        let mut pod = fixtures::pod("ns", &format!("pod-{i}"), &format!("web-{i}"));
        pod.volumes
            .push(PodVolume { name: "data".into(), source: VolumeSource::PersistentVolumeClaim(format!("c-{name}")) });
        if i == 0 {
            pod.volumes.push(PodVolume { name: "secrets".into(), source: VolumeSource::Csi { driver: D.into() } });
        }
        facts.pods.push(pod);
        if i % 2 == 0 {
            publishes.push((format!("pod-{i}"), name));
        }
    }
    let publishes: Vec<(&str, &str)> = publishes.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    (facts, published(&publishes))
}

#[test]
fn a_kept_judgement_rebuilds_only_what_changed_and_agrees_with_a_fresh_one() {
    use crate::csi::judge::Judge;
    let (mut facts, mut mounts) = busy_node(300);
    let drivers = || vec![driver(&[])];
    let mut kept = Judge::default();
    let mode = Some(Mode::Quarantine);
    let same_as_fresh = |kept: &mut Judge, facts: &Facts, mounts: &Mounts, mode, why: &str| {
        let report = kept.run(drivers(), facts, mounts, mode);
        assert_eq!(report, judge(facts, mounts, drivers(), mode), "{why}");
        assert!(!report.findings.is_empty(), "RWOP volumes on a driver without SINGLE_NODE_MULTI_WRITER are findings");
        kept.rebuilt()
    };
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "first"), 301, "300 PVs and one inline volume");
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "unchanged"), 0);

    // Facts are a value: a change is a new one (a clone drops the look-ups).
    let changed = |facts: &Facts, change: &dyn Fn(&mut Facts)| {
        let mut next = facts.clone();
        change(&mut next);
        next
    };
    facts = changed(&facts, &|f| f.persistent_volumes[7].access_modes = vec![AccessMode::ReadWriteOncePod]);
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "one PV's access mode"), 1);

    let (_, more) = busy_node(300);
    mounts = published(&[("pod-1", "v1")]);
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "publishes gone but one"), 151);
    mounts = more;
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "publishes back"), 151);

    facts = changed(&facts, &|f| drop(f.pods.remove(299))); // its volume is no longer in use on the node
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, mode, "a pod gone"), 0);
    assert_eq!(kept.volumes(), 300);

    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, Some(Mode::Enforce), "the mode"), 300, "starts over");
    facts = changed(&facts, &|f| f.csi_drivers[0].fs_group_policy = "File".into());
    assert_eq!(same_as_fresh(&mut kept, &facts, &mounts, Some(Mode::Enforce), "a CSIDriver"), 300, "starts over");
}
