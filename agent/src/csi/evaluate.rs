//! The CSI checks proper: what the drivers said against the facts (CSINode, CSIDriver,
//! PVs, pods) and the mounts. Pure: the same inputs give the same findings, so each rule
//! is tested with plain data and the monitor re-judges without asking the drivers again.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{
    client::{Call, FailureKind, NodeCapability},
    report::DriverReport,
    rules::{self, CsiAccessMode, FsGroupInput, FsGroupPolicy, Ownership},
};
use crate::{
    enforce::Mode,
    facts::{AccessMode, ClaimRef, Facts, VolumeSource},
    model::checks::{Check, Finding, Severity},
    model::mounts::Mounts,
};

/// A CSI volume in use on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VolumeReport {
    /// The PV name, or the pod's volume name for an inline volume.
    pub name: String,
    pub kind: VolumeKind,
    pub driver: String,
    /// Pod UIDs it is published into; for a volume not published yet, the pods using it.
    pub pods: Vec<String>,
    pub published: bool,
    /// The PV's access modes (empty for inline volumes).
    pub access_modes: Vec<AccessMode>,
    /// What kubelet sends in NodeStage/NodePublish; `None` while the driver's node
    /// capabilities are unknown.
    pub csi_access_mode: Option<CsiAccessMode>,
    /// Whether a pod's fsGroup changes ownership; `None` while capabilities are unknown.
    pub fs_group: Option<Ownership>,
    pub fs_group_reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeKind {
    Persistent,
    /// A CSI inline ephemeral volume (`VolumeSource::Csi`).
    Inline,
}

/// Every CSI volume published on the node (per the mount table) or used by a pod on it.
pub fn volumes(facts: &Facts, mounts: &Mounts, drivers: &[DriverReport]) -> Vec<VolumeReport> {
    let mut pv_names: BTreeSet<&str> = mounts.volumes().filter(|v| facts.persistent_volume(v).is_some()).collect();
    for pod in &facts.pods {
        for volume in &pod.volumes {
            if let VolumeSource::PersistentVolumeClaim(claim) = &volume.source
                && let Some(pvc) = facts.claim(&ClaimRef { namespace: pod.namespace.clone(), name: claim.clone() })
                && let Some(pv) = pvc.volume_name.as_deref()
            {
                pv_names.insert(pv);
            }
        }
    }
    let mut out = Vec::new();
    for name in pv_names {
        let Some(pv) = facts.persistent_volume(name) else { continue };
        let Some(csi) = &pv.csi else { continue };
        let published: Vec<String> = mounts.pods_of(name).into_iter().map(|(p, _)| p.to_owned()).collect();
        let pods = if published.is_empty() { pods_using_pv(facts, name) } else { published.clone() };
        let driver = drivers.iter().find(|d| d.answers_to(&csi.driver));
        let (csi_access_mode, fs_group, fs_group_reason) =
            decide(driver, facts, &csi.driver, csi.fs_type.as_deref(), Some(&pv.access_modes), pv.block);
        out.push(VolumeReport {
            name: name.to_owned(),
            kind: VolumeKind::Persistent,
            driver: csi.driver.clone(),
            pods,
            published: !published.is_empty(),
            access_modes: pv.access_modes.clone(),
            csi_access_mode,
            fs_group,
            fs_group_reason,
        });
    }
    for pod in &facts.pods {
        for volume in &pod.volumes {
            let VolumeSource::Csi { driver: driver_name } = &volume.source else { continue };
            let driver = drivers.iter().find(|d| d.answers_to(driver_name));
            // The facts do not carry an inline volume's fsType: judged as unset.
            let (csi_access_mode, fs_group, fs_group_reason) = decide(driver, facts, driver_name, None, None, false);
            out.push(VolumeReport {
                name: volume.name.clone(),
                kind: VolumeKind::Inline,
                driver: driver_name.clone(),
                pods: vec![pod.uid.clone()],
                published: mounts.is_published(&volume.name, &pod.uid),
                access_modes: Vec::new(),
                csi_access_mode,
                fs_group,
                fs_group_reason,
            });
        }
    }
    out
}

fn pods_using_pv(facts: &Facts, pv: &str) -> Vec<String> {
    let Some(claim) = facts.claim_of(pv) else { return Vec::new() };
    facts
        .pods
        .iter()
        .filter(|p| {
            p.namespace == claim.namespace
                && p.volumes.iter().any(|v| v.source == VolumeSource::PersistentVolumeClaim(claim.name.clone()))
        })
        .map(|p| p.uid.clone())
        .collect()
}

/// Access mode and fsGroup outcome, once the driver's node capabilities are known.
/// `pv_access_modes` is `None` for an inline volume.
fn decide(
    driver: Option<&DriverReport>,
    facts: &Facts,
    driver_name: &str,
    fs_type: Option<&str>,
    pv_access_modes: Option<&[AccessMode]>,
    block: bool,
) -> (Option<CsiAccessMode>, Option<Ownership>, String) {
    let Some(caps) = driver.and_then(|d| d.node_capabilities.as_ref()) else {
        return (None, None, "driver's node capabilities unknown".into());
    };
    let multi_writer = caps.contains(&NodeCapability::SingleNodeMultiWriter);
    let access = rules::kubelet_access_mode(pv_access_modes.unwrap_or(&[]), multi_writer);
    let object = facts.csi_drivers.iter().find(|d| d.name == driver_name);
    let policy_text = object.map_or("ReadWriteOnceWithFSType", |d| d.fs_group_policy.as_str());
    let Some(policy) = FsGroupPolicy::parse(policy_text) else {
        return (Some(access), None, format!("unknown fsGroupPolicy {policy_text:?}"));
    };
    let (ownership, reason) = rules::fs_group_ownership(FsGroupInput {
        policy,
        driver_has_volume_mount_group: caps.contains(&NodeCapability::VolumeMountGroup),
        fs_type,
        pv_access_modes,
        block,
    });
    (Some(access), Some(ownership), reason.to_owned())
}

/// The severity of an RWOP volume the driver cannot tell from RWO: what stops a second
/// pod on this node besides kubelet's own bookkeeping. The driver cannot (it is told
/// SINGLE_NODE_WRITER, as for RWO), so it is volguard: enforce refuses the mount in the
/// kernel (info: covered), quarantine undoes it after the fact (warning: a window
/// remains), audit or no agent leaves nothing below kubelet (error).
pub fn rwop_severity(mode: Option<Mode>) -> Severity {
    match mode {
        Some(Mode::Enforce) => Severity::Info,
        Some(Mode::Quarantine) => Severity::Warning,
        Some(Mode::Audit) | None => Severity::Error,
    }
}

/// Every CSI finding. `drivers` have had [`DriverReport::apply_facts`]; `volumes` come
/// from [`volumes`]; `mode` is the agent's active mode (`None`: no agent enforcing).
pub fn evaluate(facts: &Facts, drivers: &[DriverReport], volumes: &[VolumeReport], mode: Option<Mode>) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mut push = |check, severity, subject: &str, message: String| {
        findings.push(Finding { check, severity, subject: subject.to_owned(), message })
    };

    for d in drivers {
        let subject = format!("driver {}", d.name);
        // A driver that answered none of the calls is one finding, not five.
        let answered_nothing = d.endpoint.is_some()
            && d.plugin_name.is_none()
            && d.plugin_capabilities.is_none()
            && d.ready.is_none()
            && d.node_capabilities.is_none()
            && d.node_id.is_none();
        let mut reported_silence = false;
        for failure in &d.errors {
            if answered_nothing && failure.call != Call::RegistrationGetInfo && failure.call != Call::Connect {
                if !std::mem::replace(&mut reported_silence, true) {
                    let place = d.endpoint.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
                    push(
                        Check::CsiDriverUnreachable,
                        Severity::Error,
                        &subject,
                        format!("answered none of the calls on {place}: {:?}: {}", failure.call, failure.message),
                    );
                }
                continue;
            }
            let (check, what) = match (failure.call, failure.kind) {
                (Call::RegistrationGetInfo, _) => (Check::CsiRegistrationFailed, "registration socket"),
                (Call::Connect, _) => (Check::CsiDriverUnreachable, "socket unreachable"),
                (_, FailureKind::Timeout) => (Check::CsiCallFailed, "call timed out"),
                (_, _) => (Check::CsiCallFailed, "call failed"),
            };
            let place = match failure.call {
                Call::RegistrationGetInfo => d.registration_socket.as_deref(),
                _ => d.endpoint.as_deref(),
            };
            let place = place.map(|p| p.display().to_string()).unwrap_or_default();
            push(
                check,
                Severity::Error,
                &subject,
                format!("{what}: {:?} on {place}: {}", failure.call, failure.message),
            );
        }
        if let (Some(registered), Some(plugin)) = (&d.registered_name, &d.plugin_name)
            && registered != plugin
        {
            push(
                Check::CsiPluginNameMismatch,
                Severity::Error,
                &subject,
                format!(
                    "registered with kubelet as {registered:?} but GetPluginInfo says {plugin:?}: the registrar points \
                     at another driver's socket or is misconfigured"
                ),
            );
        }
        if d.ready == Some(false) {
            push(
                Check::CsiProbeNotReady,
                Severity::Error,
                &subject,
                "Probe says not ready: the driver cannot serve mounts yet".into(),
            );
        }
        let known_name = d.registered_name.is_some() || d.plugin_name.is_some();
        if known_name && !d.csi_driver_object {
            push(
                Check::CsiDriverObjectMissing,
                Severity::Warning,
                &subject,
                "no CSIDriver object: kubelet assumes attachRequired, fsGroupPolicy ReadWriteOnceWithFSType and \
                 refuses inline volumes"
                    .into(),
            );
        }
        let Some(csi_node) = &facts.csi_node else { continue };
        let entry = csi_node.drivers.iter().find(|e| d.answers_to(&e.name));
        match entry {
            None if known_name => push(
                Check::CsiRegisteredNotInCsiNode,
                Severity::Warning,
                &subject,
                format!(
                    "has a socket on the node ({}) but is not in this node's CSINode: kubelet has not registered it, \
                     so its volumes cannot be mounted",
                    d.endpoint
                        .as_deref()
                        .or(d.registration_socket.as_deref())
                        .map_or("?".into(), |p| p.display().to_string()),
                ),
            ),
            None => {}
            Some(entry) => {
                if let Some(node_id) = &d.node_id
                    && *node_id != entry.node_id
                {
                    push(
                        Check::CsiNodeIdMismatch,
                        Severity::Error,
                        &subject,
                        format!(
                            "CSINode nodeID is {:?} but NodeGetInfo says {node_id:?}: attachments target the wrong node",
                            entry.node_id
                        ),
                    );
                }
                if let Some(max) = d.max_volumes_per_node {
                    // Kubelet sets the count only for a positive maximum, capped at MaxInt32.
                    let expected = (max > 0).then(|| i32::try_from(max).unwrap_or(i32::MAX));
                    if expected != entry.allocatable_count {
                        push(
                            Check::CsiMaxVolumesMismatch,
                            Severity::Warning,
                            &subject,
                            format!(
                                "CSINode allocatable.count is {} but NodeGetInfo max_volumes_per_node is {max}: the \
                                 scheduler's volume limit for this node is wrong",
                                entry.allocatable_count.map_or("unset".into(), |c| c.to_string())
                            ),
                        );
                    }
                }
            }
        }
    }
    if let Some(csi_node) = &facts.csi_node {
        for entry in &csi_node.drivers {
            if !drivers.iter().any(|d| d.answers_to(&entry.name)) {
                push(
                    Check::CsiNodeDriverWithoutSocket,
                    Severity::Error,
                    &format!("driver {}", entry.name),
                    "in this node's CSINode but no socket for it was found: its volumes cannot be mounted or unmounted"
                        .into(),
                );
            }
        }
    }

    let mut persistent_flagged = BTreeSet::new();
    for v in volumes {
        let subject = format!("volume {}", v.name);
        let object = facts.csi_drivers.iter().find(|d| d.name == v.driver);
        match v.kind {
            VolumeKind::Inline => {
                let allowed = object.is_some_and(|d| d.volume_lifecycle_modes.iter().any(|m| m == "Ephemeral"));
                if !allowed {
                    let why = match object {
                        None => {
                            format!("driver {} has no CSIDriver object (then only Persistent is allowed)", v.driver)
                        }
                        Some(d) => format!(
                            "CSIDriver {} lists volumeLifecycleModes {:?} without Ephemeral",
                            v.driver, d.volume_lifecycle_modes
                        ),
                    };
                    push(
                        Check::CsiEphemeralModeUnsupported,
                        Severity::Error,
                        &format!("pod {} {subject}", v.pods.join(",")),
                        format!("CSI inline volume, but {why}: kubelet refuses to mount it"),
                    );
                }
            }
            VolumeKind::Persistent => {
                if let Some(d) = object
                    && !d.volume_lifecycle_modes.iter().any(|m| m == "Persistent")
                    && persistent_flagged.insert(v.driver.clone())
                {
                    push(
                        Check::CsiPersistentModeUnsupported,
                        Severity::Error,
                        &format!("driver {}", v.driver),
                        format!(
                            "used by persistent volume {} but its CSIDriver lists volumeLifecycleModes {:?} without \
                             Persistent: kubelet refuses to mount it",
                            v.name, d.volume_lifecycle_modes
                        ),
                    );
                }
                if v.access_modes.first() == Some(&AccessMode::ReadWriteOncePod)
                    && v.csi_access_mode == Some(CsiAccessMode::SingleNodeWriter)
                {
                    let protection = match mode {
                        Some(Mode::Enforce) => "volguard refuses a second pod's mount in the kernel",
                        Some(Mode::Quarantine) => "volguard undoes a second pod's mount after it happens",
                        Some(Mode::Audit) => "volguard only reports (audit mode)",
                        None => "no volguard agent enforces",
                    };
                    push(
                        Check::CsiRwopNotEnforcedByDriver,
                        rwop_severity(mode),
                        &subject,
                        format!(
                            "ReadWriteOncePod on driver {} without node capability SINGLE_NODE_MULTI_WRITER: it is \
                             told SINGLE_NODE_WRITER, same as RWO, and cannot refuse a second pod; {protection}",
                            v.driver
                        ),
                    );
                }
            }
        }
        let policy = object.map_or("ReadWriteOnceWithFSType", |d| d.fs_group_policy.as_str());
        match (FsGroupPolicy::parse(policy), v.fs_group) {
            (None, _) => push(
                Check::CsiFsGroupNotApplied,
                Severity::Warning,
                &subject,
                format!(
                    "driver {} has an unknown fsGroupPolicy {policy:?}: kubelet's behaviour is undefined",
                    v.driver
                ),
            ),
            (Some(p), Some(Ownership::Unchanged)) if p != FsGroupPolicy::None && v.published => push(
                Check::CsiFsGroupNotApplied,
                Severity::Info,
                &subject,
                format!("a pod's fsGroup will not be applied: {}", v.fs_group_reason),
            ),
            _ => {}
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::{
        csi::{
            client::CallFailure,
            discovery::Source,
            report::{CsiReport, DriverReport},
        },
        facts::{ClaimRef, CsiDriver, CsiNode, CsiNodeDriver, CsiSource, PersistentVolume, Pod, PodVolume},
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
        PersistentVolume {
            name: name.into(),
            access_modes: modes.to_vec(),
            csi: Some(CsiSource {
                driver: D.into(),
                volume_handle: format!("h-{name}"),
                fs_type: fs_type.map(Into::into),
            }),
            claim_ref: Some(ClaimRef { namespace: "ns".into(), name: format!("c-{name}") }),
            block: false,
        }
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
            call: Call::NodeGetInfo,
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
            [("rwo-ext4", Some(Ownership::KubeletChanges)), ("rwo-nofs", Some(Ownership::Unchanged))]
        );
        assert_eq!(checks(&report), [(Check::CsiFsGroupNotApplied, Severity::Info)]);
        assert_eq!(report.findings[0].subject, "volume rwo-nofs");

        let group = judge(&facts, &mounts, vec![driver(&[NodeCapability::VolumeMountGroup])], None);
        assert!(group.volumes.iter().all(|v| v.fs_group == Some(Ownership::DriverApplies)));

        let odd = Facts { csi_drivers: vec![object(&["Persistent"], "Sometimes")], ..facts };
        let report = judge(&odd, &mounts, vec![driver(&[])], None);
        assert_eq!(checks(&report), [(Check::CsiFsGroupNotApplied, Severity::Warning); 2]);
        assert_eq!(report.volumes[0].fs_group, None);
    }
}
