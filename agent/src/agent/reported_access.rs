//! Accesses outside kubelet's publish that were reported and left in place, remembered so
//! that each is reported once.

use std::path::PathBuf;

use crate::model::access::Access;

/// An access reported and left in place: the mount (by namespace, id and point, as ids
/// are reused) and the volume it reaches (a mount above several volumes reaches each).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ReportedAccess {
    mnt_ns: u32,
    mount_id: i32,
    mount_point: PathBuf,
    volume: String,
}

impl ReportedAccess {
    pub(super) fn of(mnt_ns: u32, access: &Access) -> Self {
        let (mount_id, mount_point, volume) = (access.mount_id, access.mount_point.clone(), access.volume.clone());
        Self { mnt_ns, mount_id, mount_point, volume }
    }
}
