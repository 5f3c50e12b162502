//! The CSI checks proper: what the drivers said against the facts (CSINode, CSIDriver,
//! PVs, pods) and the mounts. Pure: the same inputs give the same findings, so each rule
//! is tested with plain data and the monitor re-judges without asking the drivers again
//! ([`crate::csi::judge`] puts the pieces together and keeps them between runs).

use std::collections::BTreeSet;

use serde::Serialize;

use super::{
    client::{CsiCall, FailureKind, NodeCapability},
    driver_report::DriverReport,
    kubelet::{KubeletReport, KubeletRwop},
    rules::{self, CsiAccessMode, FsGroupInput, FsGroupOwnership, FsGroupPolicy},
};
use crate::{
    enforce::Mode,
    facts::{AccessMode, ClaimRef, CsiDriver, CsiNode, Facts, VolumeSource},
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
    /// For a ReadWriteOncePod PV the driver is not told SINGLE_NODE_SINGLE_WRITER: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rwop_weakened_by: Option<RwopWeakenedBy>,
    /// Whether a pod's fsGroup changes ownership; `None` while capabilities are unknown.
    pub fs_group: Option<FsGroupOwnership>,
    pub fs_group_reason: String,
}

/// Why a ReadWriteOncePod volume reaches its driver as something weaker than
/// SINGLE_NODE_SINGLE_WRITER.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RwopWeakenedBy {
    /// No node capability SINGLE_NODE_MULTI_WRITER: SINGLE_NODE_WRITER, as for RWO.
    DriverCapabilities,
    /// A kubelet before 1.22: UNKNOWN.
    KubeletVersion,
}

impl RwopWeakenedBy {
    fn of(access_modes: &[AccessMode], sent: Option<CsiAccessMode>) -> Option<Self> {
        if access_modes.first() != Some(&AccessMode::ReadWriteOncePod) {
            return None;
        }
        match sent? {
            CsiAccessMode::SingleNodeWriter => Some(Self::DriverCapabilities),
            CsiAccessMode::Unknown => Some(Self::KubeletVersion),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeKind {
    Persistent,
    /// A CSI inline ephemeral volume (`VolumeSource::Csi`).
    Inline,
}

/// What the judgement of one volume depends on, besides the [`Context`]: the same input
/// in the same context gives the same report and findings ([`crate::csi::judge`] relies
/// on it to rebuild only the volumes whose input changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeInput<'a> {
    pub name: &'a str,
    pub kind: VolumeKind,
    pub driver: &'a str,
    /// Pod UIDs it is published into, or for a volume not published yet the pods using it.
    pub pods: Vec<&'a str>,
    pub published: bool,
    /// The PV's (empty for inline volumes).
    pub access_modes: &'a [AccessMode],
    pub fs_type: Option<&'a str>,
    pub block: bool,
}

/// What every volume's judgement depends on.
pub struct Context<'a> {
    pub facts: &'a Facts,
    /// With [`DriverReport::apply_facts`] applied.
    pub drivers: &'a [DriverReport],
    pub kubelet: KubeletReport,
    pub mode: Option<Mode>,
}

impl<'a> Context<'a> {
    pub fn new(facts: &'a Facts, drivers: &'a [DriverReport], mode: Option<Mode>) -> Self {
        Self { facts, drivers, kubelet: KubeletReport::from_facts(facts), mode }
    }

    fn driver_object(&self, name: &str) -> Option<&'a CsiDriver> {
        self.facts.csi_drivers.iter().find(|d| d.name == name)
    }
}

/// Every CSI volume published on the node (per the mount table) or used by a pod on it:
/// persistent volumes by name, then inline volumes in pod order.
pub fn inputs<'a>(facts: &'a Facts, mounts: &'a Mounts) -> Vec<VolumeInput<'a>> {
    let mut pv_names: BTreeSet<&str> =
        mounts.volumes().filter_map(|v| Some(facts.persistent_volume(v)?.name.as_str())).collect();
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
        let published: Vec<&str> = mounts.pods_of(name).into_iter().map(|(p, _)| p).collect();
        out.push(VolumeInput {
            name: &pv.name,
            kind: VolumeKind::Persistent,
            driver: &csi.driver,
            published: !published.is_empty(),
            pods: if published.is_empty() { pods_using_pv(facts, name) } else { published },
            access_modes: &pv.access_modes,
            fs_type: csi.fs_type.as_deref(),
            block: pv.block,
        });
    }
    for pod in &facts.pods {
        for volume in &pod.volumes {
            let VolumeSource::Csi { driver } = &volume.source else { continue };
            out.push(VolumeInput {
                name: &volume.name,
                kind: VolumeKind::Inline,
                driver,
                pods: vec![&pod.uid],
                published: mounts.is_published(&volume.name, &pod.uid),
                access_modes: &[],
                // The facts do not carry an inline volume's fsType: judged as unset.
                fs_type: None,
                block: false,
            });
        }
    }
    out
}

impl VolumeInput<'_> {
    /// What kubelet sends the driver for this volume and what happens to fsGroup.
    pub fn report(&self, ctx: &Context<'_>) -> VolumeReport {
        let driver = ctx.drivers.iter().find(|d| d.answers_to(self.driver));
        let pv_access_modes = (self.kind == VolumeKind::Persistent).then_some(self.access_modes);
        let (csi_access_mode, fs_group, fs_group_reason) =
            decide(driver, ctx, self.driver, self.fs_type, pv_access_modes, self.block);
        VolumeReport {
            name: self.name.to_owned(),
            kind: self.kind,
            driver: self.driver.to_owned(),
            pods: self.pods.iter().map(|&p| p.to_owned()).collect(),
            published: self.published,
            access_modes: self.access_modes.to_vec(),
            csi_access_mode,
            rwop_weakened_by: RwopWeakenedBy::of(self.access_modes, csi_access_mode),
            fs_group,
            fs_group_reason,
        }
    }
}

fn pods_using_pv<'a>(facts: &'a Facts, pv: &str) -> Vec<&'a str> {
    let Some(claim) = facts.claim_of(pv) else { return Vec::new() };
    facts.pods_using(&claim).map(|p| p.uid.as_str()).collect()
}

/// Access mode and fsGroup outcome, once the driver's node capabilities are known.
/// `pv_access_modes` is `None` for an inline volume.
fn decide(
    driver: Option<&DriverReport>,
    ctx: &Context<'_>,
    driver_name: &str,
    fs_type: Option<&str>,
    pv_access_modes: Option<&[AccessMode]>,
    block: bool,
) -> (Option<CsiAccessMode>, Option<FsGroupOwnership>, String) {
    let Some(caps) = driver.and_then(|d| d.node_capabilities.as_ref()) else {
        return (None, None, "driver's node capabilities unknown".into());
    };
    let multi_writer = caps.contains(&NodeCapability::SingleNodeMultiWriter);
    let access = match ctx.kubelet.rwop {
        KubeletRwop::Unaware => rules::pre_rwop_kubelet_access_mode(pv_access_modes.unwrap_or(&[])),
        _ => rules::kubelet_access_mode(pv_access_modes.unwrap_or(&[]), multi_writer),
    };
    let object = ctx.driver_object(driver_name);
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

/// What volguard does about a second pod in `mode`, for the RWOP findings.
fn protection(mode: Option<Mode>) -> &'static str {
    match mode {
        Some(Mode::Enforce) => "volguard refuses a second pod's mount in the kernel",
        Some(Mode::Quarantine) => "volguard undoes a second pod's mount after it happens",
        Some(Mode::Audit) => "volguard only reports (audit mode)",
        None => "no volguard agent enforces",
    }
}

/// Severity and message when a ReadWriteOncePod volume's kubelet, by its version, does not
/// refuse a second pod itself. A driver told SINGLE_NODE_SINGLE_WRITER should still refuse
/// one (so at most a warning); otherwise only volguard is left below the scheduler, which
/// does not see pods placed with `spec.nodeName`.
fn kubelet_rwop_hole(kubelet: &KubeletReport, v: &VolumeReport, mode: Option<Mode>) -> Option<(Severity, String)> {
    let why = match kubelet.rwop {
        KubeletRwop::Unaware => "predates ReadWriteOncePod (1.22): it does not refuse a second pod on this node",
        KubeletRwop::AlphaOffByDefault => {
            "does not refuse a second pod on this node itself: its ReadWriteOncePod feature gate is alpha and off \
             by default in 1.22-1.26 (unless turned on with --feature-gates)"
        }
        _ => return None,
    };
    let driver = match v.csi_access_mode {
        Some(CsiAccessMode::SingleNodeSingleWriter) => {
            format!("driver {} is told SINGLE_NODE_SINGLE_WRITER and should refuse a second publish", v.driver)
        }
        Some(CsiAccessMode::SingleNodeWriter) => format!(
            "driver {} is told SINGLE_NODE_WRITER (no node capability SINGLE_NODE_MULTI_WRITER) and cannot refuse one \
             either",
            v.driver
        ),
        Some(CsiAccessMode::Unknown) => {
            format!("driver {} is told access mode UNKNOWN, which it may reject or ignore", v.driver)
        }
        _ => format!("what driver {} is told is unknown (its node capabilities are)", v.driver),
    };
    let severity = match v.csi_access_mode {
        Some(CsiAccessMode::SingleNodeSingleWriter) => rwop_severity(mode).min(Severity::Warning),
        _ => rwop_severity(mode),
    };
    Some((severity, format!("ReadWriteOncePod, but kubelet {} {why}; {driver}; {}", kubelet.name(), protection(mode))))
}

/// Findings about the drivers themselves: calls that failed, names and node IDs that
/// disagree with the registration or the CSINode.
pub fn driver_findings(ctx: &Context<'_>) -> Vec<Finding> {
    let (facts, drivers) = (ctx.facts, ctx.drivers);
    let mut findings = Findings::default();
    for d in drivers {
        let subject = format!("driver {}", d.name);
        call_failures(d, &subject, &mut findings);
        identity(d, &subject, &mut findings);
        if let Some(csi_node) = &facts.csi_node {
            csi_node_entry(d, csi_node, &subject, &mut findings);
        }
    }
    if let Some(csi_node) = &facts.csi_node {
        for entry in &csi_node.drivers {
            if !drivers.iter().any(|d| d.answers_to(&entry.name)) {
                findings.push(
                    Check::CsiNodeDriverWithoutSocket,
                    Severity::Error,
                    &format!("driver {}", entry.name),
                    "in this node's CSINode but no socket for it was found: its volumes cannot be mounted or unmounted"
                        .into(),
                );
            }
        }
    }
    findings.0
}

/// The findings of one evaluation, in the order they were found.
#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn push(&mut self, check: Check, severity: Severity, subject: &str, message: String) {
        self.0.push(Finding { check, severity, subject: subject.to_owned(), message });
    }
}

/// The driver's failed calls: one finding each, or one for a driver that answered none.
fn call_failures(d: &DriverReport, subject: &str, findings: &mut Findings) {
    let answered_nothing = d.endpoint.is_some()
        && d.plugin_name.is_none()
        && d.plugin_capabilities.is_none()
        && d.ready.is_none()
        && d.node_capabilities.is_none()
        && d.node_id.is_none();
    let mut reported_silence = false;
    for failure in &d.errors {
        if answered_nothing && failure.call != CsiCall::RegistrationGetInfo && failure.call != CsiCall::Connect {
            if !std::mem::replace(&mut reported_silence, true) {
                let place = d.endpoint.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
                findings.push(
                    Check::CsiDriverUnreachable,
                    Severity::Error,
                    subject,
                    format!("answered none of the calls on {place}: {:?}: {}", failure.call, failure.message),
                );
            }
            continue;
        }
        let (check, what) = match (failure.call, failure.kind) {
            (CsiCall::RegistrationGetInfo, _) => (Check::CsiRegistrationFailed, "registration socket"),
            (CsiCall::Connect, _) => (Check::CsiDriverUnreachable, "socket unreachable"),
            (_, FailureKind::Timeout) => (Check::CsiCallFailed, "call timed out"),
            (_, _) => (Check::CsiCallFailed, "call failed"),
        };
        let place = match failure.call {
            CsiCall::RegistrationGetInfo => d.registration_socket.as_deref(),
            _ => d.endpoint.as_deref(),
        };
        let place = place.map(|p| p.display().to_string()).unwrap_or_default();
        findings.push(
            check,
            Severity::Error,
            subject,
            format!("{what}: {:?} on {place}: {}", failure.call, failure.message),
        );
    }
}

/// What the driver says it is against how it registered: its name, readiness, CSIDriver object.
fn identity(d: &DriverReport, subject: &str, findings: &mut Findings) {
    if let (Some(registered), Some(plugin)) = (&d.registered_name, &d.plugin_name)
        && registered != plugin
    {
        findings.push(
            Check::CsiPluginNameMismatch,
            Severity::Error,
            subject,
            format!(
                "registered with kubelet as {registered:?} but GetPluginInfo says {plugin:?}: the registrar points \
                 at another driver's socket or is misconfigured"
            ),
        );
    }
    if d.ready == Some(false) {
        findings.push(
            Check::CsiProbeNotReady,
            Severity::Error,
            subject,
            "Probe says not ready: the driver cannot serve mounts yet".into(),
        );
    }
    if known_name(d) && !d.csi_driver_object {
        findings.push(
            Check::CsiDriverObjectMissing,
            Severity::Warning,
            subject,
            "no CSIDriver object: kubelet assumes attachRequired, fsGroupPolicy ReadWriteOnceWithFSType and \
             refuses inline volumes"
                .into(),
        );
    }
}

fn known_name(d: &DriverReport) -> bool {
    d.registered_name.is_some() || d.plugin_name.is_some()
}

/// The driver against this node's CSINode entry for it: present, same node ID, same limit.
fn csi_node_entry(d: &DriverReport, csi_node: &CsiNode, subject: &str, findings: &mut Findings) {
    let Some(entry) = csi_node.drivers.iter().find(|e| d.answers_to(&e.name)) else {
        if known_name(d) {
            let socket = d.endpoint.as_deref().or(d.registration_socket.as_deref());
            findings.push(
                Check::CsiRegisteredNotInCsiNode,
                Severity::Warning,
                subject,
                format!(
                    "has a socket on the node ({}) but is not in this node's CSINode: kubelet has not registered it, \
                     so its volumes cannot be mounted",
                    socket.map_or("?".into(), |p| p.display().to_string()),
                ),
            );
        }
        return;
    };
    if let Some(node_id) = &d.node_id
        && *node_id != entry.node_id
    {
        findings.push(
            Check::CsiNodeIdMismatch,
            Severity::Error,
            subject,
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
            findings.push(
                Check::CsiMaxVolumesMismatch,
                Severity::Warning,
                subject,
                format!(
                    "CSINode allocatable.count is {} but NodeGetInfo max_volumes_per_node is {max}: the scheduler's \
                     volume limit for this node is wrong",
                    entry.allocatable_count.map_or("unset".into(), |c| c.to_string())
                ),
            );
        }
    }
}

fn finding(check: Check, severity: Severity, subject: &str, message: String) -> Finding {
    Finding { check, severity, subject: subject.to_owned(), message }
}

/// A persistent volume on a driver whose CSIDriver does not allow persistent volumes: one
/// finding per driver (the first such volume), so `flagged_drivers` carries those seen.
pub fn persistent_mode_unsupported(
    ctx: &Context<'_>,
    v: &VolumeReport,
    flagged_drivers: &mut BTreeSet<String>,
) -> Option<Finding> {
    let d = ctx.driver_object(&v.driver)?;
    let unsupported = v.kind == VolumeKind::Persistent && !d.volume_lifecycle_modes.iter().any(|m| m == "Persistent");
    (unsupported && flagged_drivers.insert(v.driver.clone())).then(|| {
        finding(
            Check::CsiPersistentModeUnsupported,
            Severity::Error,
            &format!("driver {}", v.driver),
            format!(
                "used by persistent volume {} but its CSIDriver lists volumeLifecycleModes {:?} without Persistent: \
                 kubelet refuses to mount it",
                v.name, d.volume_lifecycle_modes
            ),
        )
    })
}

/// One volume's findings: how its access mode and fsGroup reach the driver, whether its
/// driver allows it at all (inline), and who refuses a second pod (ReadWriteOncePod).
pub fn volume_findings(ctx: &Context<'_>, v: &VolumeReport) -> Vec<Finding> {
    let mode = ctx.mode;
    let mut findings = Vec::new();
    let mut push =
        |check, severity, subject: &str, message: String| findings.push(finding(check, severity, subject, message));
    let subject = format!("volume {}", v.name);
    let object = ctx.driver_object(&v.driver);
    match v.kind {
        VolumeKind::Inline => {
            let allowed = object.is_some_and(|d| d.volume_lifecycle_modes.iter().any(|m| m == "Ephemeral"));
            if !allowed {
                let why = match object {
                    None => format!("driver {} has no CSIDriver object (then only Persistent is allowed)", v.driver),
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
            if v.access_modes.first() == Some(&AccessMode::ReadWriteOncePod)
                && v.csi_access_mode == Some(CsiAccessMode::SingleNodeWriter)
            {
                push(
                    Check::CsiRwopNotEnforcedByDriver,
                    rwop_severity(mode),
                    &subject,
                    format!(
                        "ReadWriteOncePod on driver {} without node capability SINGLE_NODE_MULTI_WRITER: it is told \
                         SINGLE_NODE_WRITER, same as RWO, and cannot refuse a second pod; {}",
                        v.driver,
                        protection(mode)
                    ),
                );
            }
            if v.access_modes.first() == Some(&AccessMode::ReadWriteOncePod)
                && let Some((severity, message)) = kubelet_rwop_hole(&ctx.kubelet, v, mode)
            {
                push(Check::KubeletRwopNotEnforced, severity, &subject, message);
            }
        }
    }
    let policy = object.map_or("ReadWriteOnceWithFSType", |d| d.fs_group_policy.as_str());
    match (FsGroupPolicy::parse(policy), v.fs_group) {
        (None, _) => push(
            Check::CsiFsGroupNotApplied,
            Severity::Warning,
            &subject,
            format!("driver {} has an unknown fsGroupPolicy {policy:?}: kubelet's behaviour is undefined", v.driver),
        ),
        (Some(p), Some(FsGroupOwnership::Unchanged)) if p != FsGroupPolicy::None && v.published => push(
            Check::CsiFsGroupNotApplied,
            Severity::Info,
            &subject,
            format!("a pod's fsGroup will not be applied: {}", v.fs_group_reason),
        ),
        _ => {}
    }
    findings
}

#[cfg(test)]
mod tests;
