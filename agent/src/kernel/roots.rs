//! Records where each owned single-pod volume's tree is rooted (inode and device of the
//! publish target once mounted), so the kernel can recognise a tree taken from inside it
//! (see `refuse_cross_pod_source` in the eBPF enforcement programs).

use std::{os::unix::fs::MetadataExt, path::Path};

use aya::maps::{HashMap, Map, MapData};
use tracing::{debug, info};
use volguard_common::{
    enforce::{Owner, PublishedRoot, RootKey},
    maps::{OWNERS, PUBLISHED_ROOTS},
};

use super::{
    maps::{KernelError, kernel_dev, pod_uid, volume_key},
    pins::Pins,
};
use crate::{enforce::task_ns::task_in_namespace, kernel::decode::Caller, node_files::kubelet::PublishTarget};

/// The pinned `PUBLISHED_ROOTS` and `OWNERS` maps, opened from their pins. (The kernel
/// also ignores a root whose pod no longer owns the volume, so a stale entry never
/// refuses anything.)
pub struct PublishedRoots {
    roots: HashMap<MapData, RootKey, PublishedRoot>,
    owners: HashMap<MapData, volguard_common::enforce::VolumeKey, Owner>,
}

fn open<K: aya::Pod, V: aya::Pod>(pins: &Pins, name: &'static str) -> Result<HashMap<MapData, K, V>, KernelError> {
    let data = MapData::from_pin(pins.map_path(name)).map_err(|source| KernelError::Map { map: name, source })?;
    HashMap::try_from(Map::HashMap(data)).map_err(|source| KernelError::Map { map: name, source })
}

impl PublishedRoots {
    pub fn open(pins: &Pins) -> Result<Self, KernelError> {
        Ok(Self { roots: open(pins, PUBLISHED_ROOTS)?, owners: open(pins, OWNERS)? })
    }

    /// After a successful publish: if `target.pod_uid` owns the volume, records the root.
    pub fn published(&mut self, caller: &Caller, target: &PublishTarget, path: &Path) {
        let Ok(volume) = volume_key(&target.volume) else { return };
        let Some(pod) = pod_uid(&target.pod_uid) else { return };
        let owner = self.owners.get(&volume, 0).ok();
        if owner.is_none_or(|o| o.pod.uid != pod.uid) {
            return;
        }
        // Resolve the target in the namespace where it was mounted.
        let Some(task) = task_in_namespace(caller) else {
            debug!("no live task in the publisher's mount namespace; root of {} not recorded", target.volume);
            return;
        };
        let Ok(meta) = std::fs::metadata(task.join("root").join(path.strip_prefix("/").unwrap_or(path))) else {
            return;
        };
        let key = RootKey { ino: meta.ino(), dev: kernel_dev(meta.dev()), _pad: 0 };
        let value = PublishedRoot { volume, owner: pod };
        if self.roots.insert(key, value, 0).is_ok() {
            info!("volume {} published for pod {}: tree root recorded", target.volume, target.pod_uid);
        }
    }

    /// After a successful unmount of a publish target: forgets that pod's roots of the
    /// volume (found in the map itself, so roots recorded before a restart go too).
    pub fn unpublished(&mut self, target: &PublishTarget) {
        let (Ok(volume), Some(pod)) = (volume_key(&target.volume), pod_uid(&target.pod_uid)) else { return };
        let stale: Vec<RootKey> = self
            .roots
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, root)| root.volume.name == volume.name && root.owner.uid == pod.uid)
            .map(|(key, _)| key)
            .collect();
        for key in stale {
            let _ = self.roots.remove(&key);
        }
    }
}
