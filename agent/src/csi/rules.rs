//! Kubelet's rules, as pure functions: the CSI access mode it sends for a volume (KEP-2485)
//! and whether it changes a volume's ownership to the pod's fsGroup (KEP-1682). Both are
//! decided by kubelet from the PV, the CSIDriver object and the driver's node
//! capabilities, so the agent can say in advance what the driver will be told.

use serde::Serialize;

use crate::facts::AccessMode;

/// `csi.v1.VolumeCapability.AccessMode.Mode`, the values kubelet can send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CsiAccessMode {
    Unknown = 0,
    SingleNodeWriter = 1,
    SingleNodeReaderOnly = 2,
    MultiNodeReaderOnly = 3,
    MultiNodeSingleWriter = 4,
    MultiNodeMultiWriter = 5,
    SingleNodeSingleWriter = 6,
    SingleNodeMultiWriter = 7,
}

/// The CSI access mode kubelet puts in NodeStage/NodePublish for a PV
/// (`csi_client.go`: `asCSIAccessModeV1` / `asSingleNodeMultiWriterCapableCSIAccessModeV1`).
///
/// Kubelet looks only at the first access mode (`AccessModes[0]`, ReadWriteOnce when the
/// list is empty); inline volumes always get ReadWriteOnce (pass `&[]`). A driver without
/// the node capability SINGLE_NODE_MULTI_WRITER is told SINGLE_NODE_WRITER for both RWO
/// and RWOP, so it cannot tell them apart.
pub fn kubelet_access_mode(pv_access_modes: &[AccessMode], driver_has_single_node_multi_writer: bool) -> CsiAccessMode {
    let first = pv_access_modes.first().copied().unwrap_or(AccessMode::ReadWriteOnce);
    match (first, driver_has_single_node_multi_writer) {
        (AccessMode::ReadWriteOnce, false) => CsiAccessMode::SingleNodeWriter,
        (AccessMode::ReadWriteOnce, true) => CsiAccessMode::SingleNodeMultiWriter,
        (AccessMode::ReadOnlyMany, _) => CsiAccessMode::MultiNodeReaderOnly,
        (AccessMode::ReadWriteMany, _) => CsiAccessMode::MultiNodeMultiWriter,
        (AccessMode::ReadWriteOncePod, false) => CsiAccessMode::SingleNodeWriter,
        (AccessMode::ReadWriteOncePod, true) => CsiAccessMode::SingleNodeSingleWriter,
    }
}

/// The CSI access mode a kubelet before 1.22 sends: its `asCSIAccessModeV1` knows neither
/// ReadWriteOncePod (UNKNOWN, as KEP-2485's version-skew section says) nor the driver
/// capability SINGLE_NODE_MULTI_WRITER.
pub fn pre_rwop_kubelet_access_mode(pv_access_modes: &[AccessMode]) -> CsiAccessMode {
    match pv_access_modes.first().copied().unwrap_or(AccessMode::ReadWriteOnce) {
        AccessMode::ReadWriteOncePod => CsiAccessMode::Unknown,
        other => kubelet_access_mode(&[other], false),
    }
}

/// `CSIDriver.spec.fsGroupPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FsGroupPolicy {
    ReadWriteOnceWithFSType,
    File,
    None,
}

impl FsGroupPolicy {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "ReadWriteOnceWithFSType" => Self::ReadWriteOnceWithFSType,
            "File" => Self::File,
            "None" => Self::None,
            _ => return None,
        })
    }
}

/// What happens to a pod's fsGroup on one volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FsGroupOwnership {
    /// Kubelet changes ownership and permissions recursively after NodePublish.
    KubeletChanges,
    /// The driver has VOLUME_MOUNT_GROUP: kubelet passes the fsGroup in NodePublish and
    /// changes nothing itself.
    DriverApplies,
    /// Nothing changes ownership.
    Unchanged,
}

/// The volume as kubelet's fsGroup decision sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsGroupInput<'a> {
    pub policy: FsGroupPolicy,
    pub driver_has_volume_mount_group: bool,
    /// `spec.csi.fsType` of the PV, or the inline volume's fsType.
    pub fs_type: Option<&'a str>,
    /// The PV's access modes; `None` for an inline volume (always ReadWriteOnce).
    pub pv_access_modes: Option<&'a [AccessMode]>,
    /// Raw block volumes are mapped, not mounted: no SetUpAt, no ownership change.
    pub block: bool,
}

/// Kubelet's decision (`csi_mounter.go` SetUpAt and `supportsFSGroup`), assuming the pod
/// sets an fsGroup and mounts the volume read-write (without either nothing changes).
///
/// With VOLUME_MOUNT_GROUP the driver gets the fsGroup instead, whatever the policy.
/// Otherwise `None` never changes, `File` always does, and `ReadWriteOnceWithFSType` only
/// with an fsType and, for a PV, access modes that *contain* ReadWriteOnce: a PV that is
/// only ReadWriteOncePod is left unchanged.
pub fn fs_group_ownership(input: FsGroupInput<'_>) -> (FsGroupOwnership, &'static str) {
    if input.block {
        return (FsGroupOwnership::Unchanged, "raw block volume: mapped, never mounted by kubelet");
    }
    if input.driver_has_volume_mount_group {
        return (
            FsGroupOwnership::DriverApplies,
            "driver has VOLUME_MOUNT_GROUP: kubelet passes the fsGroup to NodePublish",
        );
    }
    match input.policy {
        FsGroupPolicy::None => (FsGroupOwnership::Unchanged, "fsGroupPolicy None: kubelet never changes ownership"),
        FsGroupPolicy::File => {
            (FsGroupOwnership::KubeletChanges, "fsGroupPolicy File: kubelet always changes ownership")
        }
        FsGroupPolicy::ReadWriteOnceWithFSType => {
            match (input.fs_type.filter(|t| !t.is_empty()), input.pv_access_modes) {
                (None, _) => {
                    (FsGroupOwnership::Unchanged, "fsGroupPolicy ReadWriteOnceWithFSType and no fsType: unchanged")
                }
                (Some(_), None) => (
                    FsGroupOwnership::KubeletChanges,
                    "fsGroupPolicy ReadWriteOnceWithFSType, inline volume (always RWO)",
                ),
                (Some(_), Some(modes)) if modes.contains(&AccessMode::ReadWriteOnce) => (
                    FsGroupOwnership::KubeletChanges,
                    "fsGroupPolicy ReadWriteOnceWithFSType, fsType set and ReadWriteOnce",
                ),
                (Some(_), Some(_)) => (
                    FsGroupOwnership::Unchanged,
                    "fsGroupPolicy ReadWriteOnceWithFSType and the access modes lack ReadWriteOnce (RWOP, RWX and ROX \
                 are skipped)",
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccessMode::*;

    /// The KEP-2485 table (`csi_client.go`), row by row, both capability states.
    #[test]
    fn access_mode_table_row_by_row() {
        let rows: [(&[AccessMode], CsiAccessMode, CsiAccessMode); 5] = [
            (&[ReadWriteOnce], CsiAccessMode::SingleNodeWriter, CsiAccessMode::SingleNodeMultiWriter),
            (&[ReadOnlyMany], CsiAccessMode::MultiNodeReaderOnly, CsiAccessMode::MultiNodeReaderOnly),
            (&[ReadWriteMany], CsiAccessMode::MultiNodeMultiWriter, CsiAccessMode::MultiNodeMultiWriter),
            (&[ReadWriteOncePod], CsiAccessMode::SingleNodeWriter, CsiAccessMode::SingleNodeSingleWriter),
            // Empty list (and inline volumes): ReadWriteOnce.
            (&[], CsiAccessMode::SingleNodeWriter, CsiAccessMode::SingleNodeMultiWriter),
        ];
        for (modes, without, with) in rows {
            assert_eq!(kubelet_access_mode(modes, false), without, "{modes:?} without SINGLE_NODE_MULTI_WRITER");
            assert_eq!(kubelet_access_mode(modes, true), with, "{modes:?} with SINGLE_NODE_MULTI_WRITER");
        }
    }

    #[test]
    fn a_kubelet_before_rwop_sends_unknown_for_it() {
        let rows: [(&[AccessMode], CsiAccessMode); 5] = [
            (&[ReadWriteOnce], CsiAccessMode::SingleNodeWriter),
            (&[ReadOnlyMany], CsiAccessMode::MultiNodeReaderOnly),
            (&[ReadWriteMany], CsiAccessMode::MultiNodeMultiWriter),
            (&[ReadWriteOncePod], CsiAccessMode::Unknown),
            (&[], CsiAccessMode::SingleNodeWriter),
        ];
        for (modes, expected) in rows {
            assert_eq!(pre_rwop_kubelet_access_mode(modes), expected, "{modes:?}");
        }
    }

    #[test]
    fn only_the_first_access_mode_counts() {
        assert_eq!(kubelet_access_mode(&[ReadOnlyMany, ReadWriteOnce], true), CsiAccessMode::MultiNodeReaderOnly);
        assert_eq!(kubelet_access_mode(&[ReadWriteOnce, ReadWriteMany], true), CsiAccessMode::SingleNodeMultiWriter);
    }

    #[test]
    fn wire_values_are_the_spec_numbers() {
        assert_eq!(CsiAccessMode::SingleNodeWriter as i32, 1);
        assert_eq!(CsiAccessMode::MultiNodeMultiWriter as i32, 5);
        assert_eq!(CsiAccessMode::SingleNodeSingleWriter as i32, 6);
        assert_eq!(CsiAccessMode::SingleNodeMultiWriter as i32, 7);
    }

    fn pv<'a>(policy: FsGroupPolicy, fs_type: Option<&'a str>, modes: &'a [AccessMode]) -> FsGroupInput<'a> {
        FsGroupInput {
            policy,
            driver_has_volume_mount_group: false,
            fs_type,
            pv_access_modes: Some(modes),
            block: false,
        }
    }

    #[test]
    fn fs_group_rules() {
        use FsGroupOwnership::*;
        use FsGroupPolicy as P;
        let own = |i| fs_group_ownership(i).0;
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some("ext4"), &[ReadWriteOnce])), KubeletChanges);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, None, &[ReadWriteOnce])), Unchanged);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some(""), &[ReadWriteOnce])), Unchanged);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some("ext4"), &[ReadWriteOncePod])), Unchanged);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some("ext4"), &[ReadWriteMany])), Unchanged);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some("ext4"), &[ReadOnlyMany, ReadWriteOnce])), KubeletChanges);
        assert_eq!(own(pv(P::ReadWriteOnceWithFSType, Some("ext4"), &[])), Unchanged);
        assert_eq!(own(pv(P::File, None, &[ReadWriteMany])), KubeletChanges);
        assert_eq!(own(pv(P::None, Some("ext4"), &[ReadWriteOnce])), Unchanged);
        let inline = FsGroupInput { pv_access_modes: None, ..pv(P::ReadWriteOnceWithFSType, Some("xfs"), &[]) };
        assert_eq!(own(inline), KubeletChanges);
        let group = FsGroupInput { driver_has_volume_mount_group: true, ..pv(P::File, None, &[ReadWriteOnce]) };
        assert_eq!(own(group), DriverApplies);
        let block = FsGroupInput { block: true, ..pv(P::File, None, &[ReadWriteOnce]) };
        assert_eq!(own(block), Unchanged);
    }

    #[test]
    fn fs_group_policy_names() {
        assert_eq!(FsGroupPolicy::parse("ReadWriteOnceWithFSType"), Some(FsGroupPolicy::ReadWriteOnceWithFSType));
        assert_eq!(FsGroupPolicy::parse("File"), Some(FsGroupPolicy::File));
        assert_eq!(FsGroupPolicy::parse("None"), Some(FsGroupPolicy::None));
        assert_eq!(FsGroupPolicy::parse("file"), None);
    }
}
