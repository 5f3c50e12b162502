//! The facts about the node that come from outside the kernel: pods on this node, PVs,
//! PVCs, CSIDrivers, this node's CSINode and (for `volguard check`) its kubelet's version.
//! The Kubernetes API ([`k8s`]) and the local inventory file ([`inventory`]) both produce
//! a [`Facts`]; everything else reads it and never knows which source it came from.
//!
//! The same types are the inventory file's format (camelCase YAML, unknown fields
//! refused), so a typo in a hand-written file is an error naming the field.

#[cfg(test)]
pub mod fixtures;
mod index;
pub mod inventory;
pub mod k8s;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::Arc,
    time::SystemTime,
};

use serde::{Deserialize, Serialize};

pub use index::Lookup;

/// The PVC annotation that makes a volume single-pod even when its access mode is
/// ReadWriteOnce (for clusters that cannot use ReadWriteOncePod yet). Value: `"true"`.
pub const SINGLE_POD_ANNOTATION: &str = "volguard.io/single-pod";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Facts {
    /// The node these facts are for (the API source's field selector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default)]
    pub pods: Vec<Pod>,
    #[serde(default)]
    pub persistent_volumes: Vec<PersistentVolume>,
    #[serde(default)]
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    #[serde(default)]
    pub csi_drivers: Vec<CsiDriver>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_node: Option<CsiNode>,
    /// This node's Node object. `volguard check --kubernetes` reads it once; the agent's
    /// watchers do not, so the agent's facts leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeInfo>,
    /// The look-ups by name (see `facts/index.rs`), built on first use. A `Facts` is not changed
    /// after its first look-up: it is shared as the facts in force.
    #[serde(skip)]
    pub lookup: Lookup,
}

/// `ephemeral.VolumeClaimName`: a generic ephemeral volume's PVC is `<pod name>-<volume name>`.
pub fn ephemeral_claim_name(pod_name: &str, volume_name: &str) -> String {
    format!("{pod_name}-{volume_name}")
}

/// What the checks read of the Node: `status.nodeInfo`. In the inventory:
/// `node: {kubeletVersion: v1.30.4}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeInfo {
    /// As the Node reports it (`v1.30.4`, `v1.34.4-gke.100`, ...); empty when it does not.
    #[serde(default)]
    pub kubelet_version: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `metadata.deletionTimestamp` is set: the pod is shutting down.
    #[serde(default)]
    pub terminating: bool,
    /// `spec.serviceAccountName` and `metadata.labels`: what an exempt reader is named by.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_account: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub volumes: Vec<PodVolume>,
}

/// One entry of `pod.spec.volumes`, reduced to what matters for storage. In the file it
/// reads like the pod spec: `name` plus exactly one of `persistentVolumeClaim: <claim>`,
/// `ephemeral: {}`, `csi: {driver: ...}` or `other: {}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "PodVolumeSpec", into = "PodVolumeSpec")]
pub struct PodVolume {
    pub name: String,
    pub source: VolumeSource,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeSource {
    /// `persistentVolumeClaim.claimName`.
    PersistentVolumeClaim(String),
    /// A generic ephemeral volume: its PVC is `<pod>-<volume>`, created for the pod.
    Ephemeral,
    /// A CSI inline ephemeral volume.
    Csi { driver: String },
    /// Anything else (configMap, emptyDir, hostPath, ...): not a CSI volume.
    Other,
}

/// The file form of [`PodVolume`].
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PodVolumeSpec {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    persistent_volume_claim: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ephemeral: Option<Empty>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    csi: Option<InlineCsi>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    other: Option<Empty>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct InlineCsi {
    driver: String,
}

impl TryFrom<PodVolumeSpec> for PodVolume {
    type Error = String;

    fn try_from(spec: PodVolumeSpec) -> Result<Self, String> {
        let mut sources = Vec::new();
        if let Some(claim) = spec.persistent_volume_claim {
            sources.push(VolumeSource::PersistentVolumeClaim(claim));
        }
        if spec.ephemeral.is_some() {
            sources.push(VolumeSource::Ephemeral);
        }
        if let Some(csi) = spec.csi {
            sources.push(VolumeSource::Csi { driver: csi.driver });
        }
        if spec.other.is_some() {
            sources.push(VolumeSource::Other);
        }
        match <[VolumeSource; 1]>::try_from(sources) {
            Ok([source]) => Ok(Self { name: spec.name, source }),
            Err(found) => Err(format!(
                "volume {:?} needs exactly one of persistentVolumeClaim, ephemeral, csi, other (found {})",
                spec.name,
                found.len()
            )),
        }
    }
}

impl From<PodVolume> for PodVolumeSpec {
    fn from(v: PodVolume) -> Self {
        let mut spec = PodVolumeSpec { name: v.name, ..Self::default() };
        match v.source {
            VolumeSource::PersistentVolumeClaim(claim) => spec.persistent_volume_claim = Some(claim),
            VolumeSource::Ephemeral => spec.ephemeral = Some(Empty {}),
            VolumeSource::Csi { driver } => spec.csi = Some(InlineCsi { driver }),
            VolumeSource::Other => spec.other = Some(Empty {}),
        }
        spec
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AccessMode {
    ReadWriteOnce,
    ReadOnlyMany,
    ReadWriteMany,
    ReadWriteOncePod,
}

impl AccessMode {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "ReadWriteOnce" => Self::ReadWriteOnce,
            "ReadOnlyMany" => Self::ReadOnlyMany,
            "ReadWriteMany" => Self::ReadWriteMany,
            "ReadWriteOncePod" => Self::ReadWriteOncePod,
            _ => return None,
        })
    }
}

/// `namespace/name` of a PVC.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimRef {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl Serialize for ClaimRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClaimRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self { namespace: namespace.into(), name: name.into() })
            }
            _ => Err(serde::de::Error::custom(format!("{text:?} is not <namespace>/<name>"))),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PersistentVolume {
    pub name: String,
    #[serde(default)]
    pub access_modes: Vec<AccessMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi: Option<CsiSource>,
    /// The PVC this PV is bound to (`spec.claimRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_ref: Option<ClaimRef>,
    /// `spec.volumeMode: Block`.
    #[serde(default)]
    pub block: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CsiSource {
    pub driver: String,
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_type: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PersistentVolumeClaim {
    pub namespace: String,
    pub name: String,
    #[serde(default)]
    pub access_modes: Vec<AccessMode>,
    /// The bound PV (`spec.volumeName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// Only volguard's own annotations (keys under `volguard.io/`); others are dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// UID of the ownerReference with `controller: true`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_uid: Option<String>,
}

impl PersistentVolumeClaim {
    pub fn claim_ref(&self) -> ClaimRef {
        ClaimRef { namespace: self.namespace.clone(), name: self.name.clone() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CsiDriver {
    pub name: String,
    /// `Persistent`, `Ephemeral`; the API default is `[Persistent]`.
    #[serde(default = "default_lifecycle_modes")]
    pub volume_lifecycle_modes: Vec<String>,
    /// `ReadWriteOnceWithFSType` (the API default), `File` or `None`.
    #[serde(default = "default_fs_group_policy")]
    pub fs_group_policy: String,
    #[serde(default = "default_true")]
    pub attach_required: bool,
    #[serde(default)]
    pub pod_info_on_mount: bool,
}

fn default_lifecycle_modes() -> Vec<String> {
    vec!["Persistent".into()]
}

fn default_fs_group_policy() -> String {
    "ReadWriteOnceWithFSType".into()
}

fn default_true() -> bool {
    true
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CsiNode {
    #[serde(default)]
    pub drivers: Vec<CsiNodeDriver>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CsiNodeDriver {
    pub name: String,
    #[serde(rename = "nodeID")]
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_keys: Vec<String>,
}

/// The node's single-pod volumes and why each is one, shared by the model, ownership and
/// the views (replaced when it changes, never copied).
pub type SinglePodSet = std::sync::Arc<BTreeMap<String, SinglePodReason>>;

/// Why a volume is single-pod; the values are the kernel map's reason codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum SinglePodReason {
    /// The PV's access modes contain ReadWriteOncePod.
    ReadWriteOncePod,
    /// The PVC carries [`SINGLE_POD_ANNOTATION`]`: "true"`.
    Annotated,
    /// Named on the command line (`--single-pod-volume`).
    CommandLine,
}

impl Facts {
    fn index(&self) -> &index::Index {
        self.lookup.of(self)
    }

    /// Builds the look-ups now (they are built on first use otherwise): where the facts
    /// are prepared, so the first question on the event path does not pay for them.
    pub fn build_lookups(&self) {
        self.index();
    }

    pub fn pod(&self, uid: &str) -> Option<&Pod> {
        self.index().pod(self, uid)
    }

    pub fn persistent_volume(&self, name: &str) -> Option<&PersistentVolume> {
        self.index().persistent_volume(self, name)
    }

    pub fn claim(&self, claim: &ClaimRef) -> Option<&PersistentVolumeClaim> {
        self.index().claim(self, claim)
    }

    /// The PVC a PV is bound to: its claimRef, or a PVC naming it as its volume.
    pub fn claim_of(&self, pv_name: &str) -> Option<ClaimRef> {
        let pv = self.persistent_volume(pv_name);
        pv.and_then(|pv| pv.claim_ref.clone())
            .or_else(|| self.index().claim_naming(self, pv_name).map(PersistentVolumeClaim::claim_ref))
    }

    /// The PV a claim is bound to: the one it names, or one whose claimRef names it.
    pub fn volume_of<'a>(&'a self, claim: &'a PersistentVolumeClaim) -> Option<&'a str> {
        claim
            .volume_name
            .as_deref()
            .or_else(|| self.index().pv_bound_to(self, &claim.claim_ref()).map(|pv| pv.name.as_str()))
    }

    /// The pods using a claim, by `persistentVolumeClaim` or as a generic ephemeral
    /// volume's `<pod>-<volume>` claim.
    pub fn pods_using(&self, claim: &ClaimRef) -> impl Iterator<Item = &Pod> {
        self.index().pods_using(self, claim)
    }

    /// The single-pod volumes (by PV name) and why each is one.
    pub fn single_pod_volumes(&self) -> BTreeMap<String, SinglePodReason> {
        let mut out = BTreeMap::new();
        for pv in &self.persistent_volumes {
            if pv.access_modes.contains(&AccessMode::ReadWriteOncePod) {
                out.insert(pv.name.clone(), SinglePodReason::ReadWriteOncePod);
            }
        }
        for pvc in &self.persistent_volume_claims {
            if pvc.annotations.get(SINGLE_POD_ANNOTATION).map(String::as_str) != Some("true") {
                continue;
            }
            if let Some(pv) = self.volume_of(pvc) {
                out.entry(pv.to_owned()).or_insert(SinglePodReason::Annotated);
            }
        }
        out
    }

    /// Driver names the facts mention (CSIDrivers, CSINode, PVs, inline volumes).
    pub fn driver_names(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self.csi_drivers.iter().map(|d| d.name.clone()).collect();
        names.extend(self.csi_node.iter().flat_map(|n| n.drivers.iter().map(|d| d.name.clone())));
        names.extend(self.persistent_volumes.iter().filter_map(|pv| pv.csi.as_ref().map(|c| c.driver.clone())));
        for pod in &self.pods {
            for v in &pod.volumes {
                if let VolumeSource::Csi { driver } = &v.source {
                    names.insert(driver.clone());
                }
            }
        }
        names
    }
}

/// Where the facts in force came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Origin {
    /// No source: only `--single-pod-volume` flags and the kubelet tree.
    None,
    Inventory {
        path: String,
    },
    KubernetesApi,
}

impl Origin {
    /// The kind as the metrics, the debug API and `status` name it (its serde tag).
    pub fn kind(&self) -> &'static str {
        match self {
            Origin::None => "none",
            Origin::Inventory { .. } => "inventory",
            Origin::KubernetesApi => "kubernetes_api",
        }
    }
}

/// Why an API source has no facts yet, until its first complete list.
pub const AWAITING_FIRST_LIST: &str = "waiting for the first complete list from the API server";

/// The facts in force and how fresh they are, as a source publishes them.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub facts: Arc<Facts>,
    pub origin: Origin,
    /// Why the facts may be out of date (API unreachable, inventory unreadable); `None`
    /// when the source is healthy. Stale facts stay in force: nothing is released.
    pub stale: Option<String>,
    /// When the source last delivered a complete, good set of facts.
    pub synced_at: Option<SystemTime>,
}

impl Snapshot {
    pub fn empty(origin: Origin) -> Self {
        Self { facts: Arc::default(), origin, stale: None, synced_at: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(name: &str, modes: &[AccessMode], claim: Option<(&str, &str)>) -> PersistentVolume {
        let pv = fixtures::pv(name, modes);
        match claim {
            Some((namespace, name)) => pv.bound_to(namespace, name),
            None => pv,
        }
    }

    fn pvc(ns: &str, name: &str, volume: Option<&str>, annotation: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            namespace: ns.into(),
            name: name.into(),
            access_modes: vec![AccessMode::ReadWriteOnce],
            volume_name: volume.map(Into::into),
            annotations: annotation.map(|v| (SINGLE_POD_ANNOTATION.to_owned(), v.to_owned())).into_iter().collect(),
            controller_uid: None,
        }
    }

    #[test]
    fn rwop_pvs_and_annotated_claims_are_single_pod() {
        use AccessMode::*;
        let facts = Facts {
            persistent_volumes: vec![
                pv("pv-rwop", &[ReadWriteOncePod], None),
                pv("pv-rwo", &[ReadWriteOnce], Some(("shop", "annotated"))),
                pv("pv-by-ref", &[ReadWriteOnce], Some(("shop", "unbound-name"))),
                pv("pv-plain", &[ReadWriteOnce], None),
            ],
            persistent_volume_claims: vec![
                pvc("shop", "annotated", Some("pv-rwo"), Some("true")),
                pvc("shop", "unbound-name", None, Some("true")),
                pvc("shop", "plain", Some("pv-plain"), Some("yes")),
            ],
            ..Facts::default()
        };
        let set = facts.single_pod_volumes();
        assert_eq!(set.get("pv-rwop"), Some(&SinglePodReason::ReadWriteOncePod));
        assert_eq!(set.get("pv-rwo"), Some(&SinglePodReason::Annotated));
        assert_eq!(set.get("pv-by-ref"), Some(&SinglePodReason::Annotated), "found through the PV's claimRef");
        assert_eq!(set.get("pv-plain"), None, "only the value \"true\" opts in");
        assert_eq!(set.len(), 3);
    }

    #[test]
    fn claim_of_prefers_the_pv_claim_ref() {
        let facts = Facts {
            persistent_volumes: vec![pv("a", &[], Some(("ns", "c1"))), pv("b", &[], None)],
            persistent_volume_claims: vec![pvc("ns", "c2", Some("b"), None)],
            ..Facts::default()
        };
        assert_eq!(facts.claim_of("a").unwrap().to_string(), "ns/c1");
        assert_eq!(facts.claim_of("b").unwrap().to_string(), "ns/c2");
        assert_eq!(facts.claim_of("zzz"), None);
    }

    fn pod_using(uid: &str, name: &str, volumes: Vec<PodVolume>) -> Pod {
        Pod { uid: uid.into(), namespace: "ns".into(), name: name.into(), volumes, ..Pod::default() }
    }

    fn volume(name: &str, source: VolumeSource) -> PodVolume {
        PodVolume { name: name.into(), source }
    }

    #[test]
    fn pods_using_a_claim_include_generic_ephemeral_volumes() {
        let claim = |name: &str| VolumeSource::PersistentVolumeClaim(name.into());
        let facts = Facts {
            pods: vec![
                pod_using("u1", "web", vec![volume("data", claim("shared")), volume("again", claim("shared"))]),
                pod_using(
                    "u2",
                    "db",
                    vec![volume("scratch", VolumeSource::Ephemeral), volume("cfg", VolumeSource::Other)],
                ),
                pod_using("u3", "job", vec![volume("data", claim("shared"))]),
            ],
            ..Facts::default()
        };
        let users = |name: &str| -> Vec<&str> {
            facts.pods_using(&ClaimRef { namespace: "ns".into(), name: name.into() }).map(|p| p.uid.as_str()).collect()
        };
        assert_eq!(users("shared"), ["u1", "u3"], "each pod once, in the facts' order");
        assert_eq!(users("db-scratch"), ["u2"], "<pod>-<volume> for an ephemeral volume");
        assert!(users("cfg").is_empty() && users("db-cfg").is_empty());
        assert_eq!(facts.pod("u3").map(|p| p.name.as_str()), Some("job"));
        assert_eq!(facts.pod("nope"), None);
    }

    #[test]
    fn the_first_of_duplicates_wins_and_a_clone_indexes_its_own_data() {
        let facts = Facts {
            persistent_volumes: vec![
                pv("a", &[AccessMode::ReadWriteOnce], None),
                pv("a", &[AccessMode::ReadWriteOncePod], None),
            ],
            ..Facts::default()
        };
        assert_eq!(facts.persistent_volume("a").unwrap().access_modes, [AccessMode::ReadWriteOnce]);
        let mut changed = facts.clone();
        changed.persistent_volumes.remove(0);
        changed.persistent_volumes.push(pv("b", &[], None));
        assert_eq!(changed.persistent_volume("a").unwrap().access_modes, [AccessMode::ReadWriteOncePod]);
        assert!(changed.persistent_volume("b").is_some());
        assert_eq!(facts, facts.clone(), "the index is not part of the data");
    }

    #[test]
    fn an_annotated_claim_without_volume_name_finds_its_pv_by_claim_ref() {
        let facts = Facts {
            persistent_volumes: vec![pv("pv-1", &[AccessMode::ReadWriteOnce], Some(("ns", "c")))],
            persistent_volume_claims: vec![pvc("ns", "c", None, Some("true"))],
            ..Facts::default()
        };
        assert_eq!(facts.volume_of(&facts.persistent_volume_claims[0]), Some("pv-1"));
    }
}
