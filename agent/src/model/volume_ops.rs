//! Which kubelet storage operation a mount-family syscall was, for
//! `storage_operation_duration_seconds`: the syscall's target classified against kubelet's
//! layout, and the CSI driver that owns it (from the facts, else from `vol_data.json`).

use std::path::{Path, PathBuf};

use super::event_target::EventTarget;
use crate::{
    facts::{Facts, VolumeSource},
    node_files::{kubelet::PathKind, vol_data},
};

/// kubelet's `operation_name` values that a node's mounts can show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperationName {
    /// NodeStage and NodePublish of a filesystem volume (kubelet counts both in one).
    VolumeMount,
    VolumeUnmount,
    /// NodeUnstage: the staging (global) mount goes.
    UnmountDevice,
    MapVolume,
    UnmapVolume,
    UnmapDevice,
}

impl OperationName {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::VolumeMount => "volume_mount",
            Self::VolumeUnmount => "volume_unmount",
            Self::UnmountDevice => "unmount_device",
            Self::MapVolume => "map_volume",
            Self::UnmapVolume => "unmap_volume",
            Self::UnmapDevice => "unmap_device",
        }
    }
}

/// One classified volume operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeOp {
    pub operation: OperationName,
    /// The classified target.
    pub target: PathKind,
    pub success: bool,
    pub duration_ns: u64,
}

/// The volume operation an event was, if its target is one of kubelet's volume paths
/// (remounts and propagation changes have no target, so are no operations of their own).
pub fn volume_op(target: &EventTarget, duration_ns: u64) -> Option<VolumeOp> {
    let operation = match (&target.kind, target.attaching) {
        (PathKind::CsiPublish { .. } | PathKind::CsiStaging { .. } | PathKind::CsiStagingLegacy { .. }, true) => {
            OperationName::VolumeMount
        }
        (
            PathKind::CsiBlockPublish { .. } | PathKind::CsiBlockStaging { .. } | PathKind::CsiBlockGlobalMap { .. },
            true,
        ) => OperationName::MapVolume,
        (PathKind::CsiPublish { .. }, false) => OperationName::VolumeUnmount,
        (PathKind::CsiStaging { .. } | PathKind::CsiStagingLegacy { .. }, false) => OperationName::UnmountDevice,
        (PathKind::CsiBlockPublish { .. } | PathKind::CsiBlockGlobalMap { .. }, false) => OperationName::UnmapVolume,
        (PathKind::CsiBlockStaging { .. }, false) => OperationName::UnmapDevice,
        _ => return None,
    };
    Some(VolumeOp { operation, target: target.kind.clone(), success: target.succeeded, duration_ns })
}

/// kubelet's `volume_plugin` label for CSI: `kubernetes.io/csi:<driver>`, or the bare
/// plugin name when the driver cannot be told (a bounded fallback, never a path).
pub fn volume_plugin(driver: Option<&str>) -> String {
    match driver {
        Some(driver) => format!("kubernetes.io/csi:{driver}"),
        None => "kubernetes.io/csi".to_owned(),
    }
}

/// The CSI driver behind a classified target: the staging path names it; otherwise the
/// facts (the PV's, or the pod's inline volume), else the `vol_data.json` kubelet wrote.
pub fn driver_of(root: &Path, facts: &Facts, target: &PathKind) -> Option<String> {
    let from_pv = |name: &str| facts.persistent_volume(name).and_then(|pv| pv.csi.as_ref()).map(|c| c.driver.clone());
    let from_file = |path: PathBuf| {
        std::fs::read(path).ok().and_then(|bytes| vol_data::parse(&bytes).ok()).and_then(|d| d.driver_name)
    };
    match target {
        PathKind::CsiStaging { driver, .. } => Some(driver.clone()),
        PathKind::CsiStagingLegacy { pv_name } => from_pv(pv_name),
        PathKind::CsiPublish { pod_uid, volume } => from_pv(volume)
            .or_else(|| {
                let pod = facts.pod(pod_uid)?;
                pod.volumes.iter().find(|v| v.name == *volume).and_then(|v| match &v.source {
                    VolumeSource::Csi { driver } => Some(driver.clone()),
                    _ => None,
                })
            })
            .or_else(|| {
                from_file(
                    root.join("pods")
                        .join(pod_uid)
                        .join("volumes/kubernetes.io~csi")
                        .join(volume)
                        .join("vol_data.json"),
                )
            }),
        PathKind::CsiBlockPublish { volume, .. }
        | PathKind::CsiBlockStaging { volume }
        | PathKind::CsiBlockGlobalMap { volume, .. } => from_pv(volume).or_else(|| {
            from_file(root.join("plugins/kubernetes.io/csi/volumeDevices").join(volume).join("data/vol_data.json"))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use volguard_common::mount_flags::{MS_BIND, MS_PRIVATE, MS_REC, MS_REMOUNT};

    use super::*;
    use crate::kernel::decode::{Call, Caller, Event, RawString};

    const ROOT: &str = "/var/lib/kubelet";
    const HASH: &str = "54f50aff0c05f509a804604b776c85a23969272c57b2f3054b6e05c7fc6e543f";

    fn raw(s: &str) -> RawString {
        RawString::from_nul_padded(s.as_bytes(), false)
    }

    fn event(call: Call, ret: i64) -> Event {
        Event { caller: Caller::default(), start_ns: 0, duration_ns: 1_500_000, ret, call }
    }

    fn mount(target: &str, flags: u64) -> Call {
        Call::Mount { source: raw("/dev/sdb"), target: raw(target), fstype: raw("ext4"), flags }
    }

    fn umount(target: &str) -> Call {
        Call::Umount { target: raw(target), flags: 0 }
    }

    fn classified(call: Call, ret: i64) -> Option<VolumeOp> {
        let event = event(call, ret);
        volume_op(&EventTarget::of(Path::new(ROOT), &event)?, event.duration_ns)
    }

    fn op(call: Call) -> Option<OperationName> {
        classified(call, 0).map(|o| o.operation)
    }

    #[test]
    fn each_kubelet_path_maps_to_kubelets_operation_name() {
        use OperationName::*;
        let publish = format!("{ROOT}/pods/p1/volumes/kubernetes.io~csi/pv-1/mount");
        let staging = format!("{ROOT}/plugins/kubernetes.io/csi/d.example.com/{HASH}/globalmount");
        let legacy = format!("{ROOT}/plugins/kubernetes.io/csi/pv/pv-1/globalmount");
        let block_publish = format!("{ROOT}/plugins/kubernetes.io/csi/volumeDevices/publish/pv-b/p1");
        let block_staging = format!("{ROOT}/plugins/kubernetes.io/csi/volumeDevices/staging/pv-b");
        let block_map = format!("{ROOT}/plugins/kubernetes.io/csi/volumeDevices/pv-b/dev/p1");
        let cases = [
            (mount(&publish, MS_BIND), Some(VolumeMount)),
            (mount(&staging, 0), Some(VolumeMount)),
            (mount(&legacy, 0), Some(VolumeMount)),
            (mount(&block_publish, MS_BIND), Some(MapVolume)),
            (mount(&block_staging, MS_BIND), Some(MapVolume)),
            (mount(&block_map, MS_BIND), Some(MapVolume)),
            (umount(&publish), Some(VolumeUnmount)),
            (umount(&staging), Some(UnmountDevice)),
            (umount(&legacy), Some(UnmountDevice)),
            (umount(&block_publish), Some(UnmapVolume)),
            (umount(&block_map), Some(UnmapVolume)),
            (umount(&block_staging), Some(UnmapDevice)),
            (mount(&publish, MS_BIND | MS_REMOUNT), None),
            (mount(&publish, MS_PRIVATE | MS_REC), None),
            (mount(&format!("{ROOT}/pods/p1/volume-subpaths/pv-1/c/0"), MS_BIND), None),
            (mount("/mnt/elsewhere", MS_BIND), None),
        ];
        for (call, want) in cases {
            let name = format!("{call:?}");
            assert_eq!(op(call), want, "{name}");
        }
    }

    #[test]
    fn failures_are_operations_too_and_truncated_paths_are_not() {
        let publish = format!("{ROOT}/pods/p1/volumes/kubernetes.io~csi/pv-1/mount");
        let failed = classified(mount(&publish, MS_BIND), -16).unwrap();
        assert!(!failed.success);
        assert_eq!(failed.duration_ns, 1_500_000);
        let cut = Call::Umount { target: RawString::from_nul_padded(publish.as_bytes(), true), flags: 0 };
        assert_eq!(op(cut), None);
    }

    #[test]
    fn the_driver_comes_from_the_path_the_facts_or_vol_data() {
        use crate::facts::{CsiSource, PersistentVolume};
        let root = tempfile::tempdir().unwrap();
        let facts = Facts {
            persistent_volumes: vec![PersistentVolume {
                name: "pv-1".into(),
                access_modes: vec![],
                csi: Some(CsiSource { driver: "from.facts".into(), volume_handle: "h".into(), fs_type: None }),
                claim_ref: None,
                block: false,
            }],
            ..Facts::default()
        };
        let dir = root.path().join("pods/p2/volumes/kubernetes.io~csi/pv-2");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vol_data.json"), r#"{"driverName":"from.file"}"#).unwrap();
        let publish = |volume: &str| PathKind::CsiPublish { pod_uid: "p2".into(), volume: volume.into() };
        assert_eq!(driver_of(root.path(), &facts, &publish("pv-1")).as_deref(), Some("from.facts"));
        assert_eq!(driver_of(root.path(), &facts, &publish("pv-2")).as_deref(), Some("from.file"));
        assert_eq!(driver_of(root.path(), &facts, &publish("pv-3")), None);
        let staging = PathKind::CsiStaging { driver: "d".into(), handle_sha256: HASH.into() };
        assert_eq!(driver_of(root.path(), &facts, &staging).as_deref(), Some("d"));
        assert_eq!(volume_plugin(Some("d")), "kubernetes.io/csi:d");
        assert_eq!(volume_plugin(None), "kubernetes.io/csi");
    }
}
