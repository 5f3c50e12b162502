//! Where each owned single-pod volume's tree is rooted (inode and device of the publish
//! target once mounted, resolved in the publisher's mount namespace), so the kernel can
//! recognise a tree taken from inside it (see `refuse_cross_pod_source` in the eBPF
//! enforcement programs).

use std::{os::unix::fs::MetadataExt, path::Path};

use tracing::debug;

use super::task_ns::task_in_namespace;
use crate::{
    kernel::{decode::Caller, maps::EnforcementMaps},
    node_files::kubelet::PublishTarget,
};

/// After a successful publish of `target` at `path`: records its root if the pod owns
/// the volume.
pub fn record(maps: &mut EnforcementMaps, caller: &Caller, target: &PublishTarget, path: &Path) {
    let Some(task) = task_in_namespace(caller) else {
        debug!("no live task in the publisher's mount namespace; root of {} not recorded", target.volume);
        return;
    };
    let Ok(meta) = std::fs::metadata(task.join("root").join(path.strip_prefix("/").unwrap_or(path))) else {
        return;
    };
    maps.record_root(&target.volume, &target.pod_uid, meta.ino(), meta.dev());
}
