//! Fills the maps the LSM programs decide from, and reads back who owns what.

use std::{collections::BTreeMap, os::unix::fs::MetadataExt, path::Path};

use aya::{
    Ebpf,
    maps::{Array, HashMap, Map, MapData, MapError},
};
use volguard_common::{
    enforce::{
        EnforceConfig, KernelLayout, Owner, POD_UID_LEN, PodUid, VOLUME_NAME_LEN, VolumeKey, kernel_mode,
        single_pod_reason,
    },
    maps::{CONFIG, OWNERS, SINGLE_POD_VOLUMES},
};

use tracing::warn;

use crate::enforce::Mode;
use crate::facts::SinglePodReason;

/// `BPF_NOEXIST`: insert only if absent.
const BPF_NOEXIST: u64 = 1;

/// Why the kernel side could not be configured.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("map {0} is not in the eBPF object")]
    MissingMap(&'static str),
    #[error("map {map}: {source}")]
    Map {
        map: &'static str,
        #[source]
        source: MapError,
    },
    #[error("kubelet root {path}: {source}")]
    KubeletRoot {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("volume name {name:?} is {len} bytes; at most {max} fit")]
    NameTooLong { name: String, len: usize, max: usize },
}

/// The kernel's own `MKDEV(major, minor)` for a userspace `st_dev`.
pub fn kernel_dev(st_dev: u64) -> u32 {
    let (major, minor) = (libc::major(st_dev), libc::minor(st_dev));
    (major << 20) | minor
}

/// Inode and kernel device of the kubelet root, which the kernel uses to recognise it.
pub fn kubelet_root_identity(root: &Path) -> Result<(u64, u32), KernelError> {
    let meta = std::fs::metadata(root)
        .map_err(|source| KernelError::KubeletRoot { path: root.display().to_string(), source })?;
    Ok((meta.ino(), kernel_dev(meta.dev())))
}

fn map_error(map: &'static str) -> impl Fn(MapError) -> KernelError {
    move |source| KernelError::Map { map, source }
}

/// The key the kernel uses for a volume name.
pub fn volume_key(name: &str) -> Result<VolumeKey, KernelError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= VOLUME_NAME_LEN {
        return Err(KernelError::NameTooLong { name: name.to_owned(), len: bytes.len(), max: VOLUME_NAME_LEN - 1 });
    }
    let mut key = VolumeKey { name: [0; VOLUME_NAME_LEN] };
    key.name[..bytes.len()].copy_from_slice(bytes);
    Ok(key)
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The `kernel_mode` for a mode decision: only the in-kernel modes make the LSM programs act.
pub fn kernel_mode_for(mode: Mode, in_kernel: bool) -> u32 {
    match (mode, in_kernel) {
        (Mode::Enforce, true) => kernel_mode::ENFORCE,
        (Mode::Audit, true) => kernel_mode::AUDIT,
        _ => kernel_mode::OFF,
    }
}

/// Writes the config the programs read (the layout is used in every mode: events carry
/// the caller's mount namespace).
pub fn configure(ebpf: &mut Ebpf, layout: KernelLayout, kubelet_root: &Path, mode: u32) -> Result<(), KernelError> {
    let (ino, dev) = kubelet_root_identity(kubelet_root)?;
    let config = EnforceConfig { layout, kubelet_root_ino: ino, kubelet_root_dev: dev, mode };
    let map = ebpf.map_mut(CONFIG).ok_or(KernelError::MissingMap(CONFIG))?;
    let mut array: Array<&mut MapData, EnforceConfig> = Array::try_from(map).map_err(map_error(CONFIG))?;
    array.set(0, config, 0).map_err(map_error(CONFIG))
}

/// The kernel's reason code for a single-pod volume.
pub fn reason_code(reason: SinglePodReason) -> u32 {
    match reason {
        SinglePodReason::ReadWriteOncePod | SinglePodReason::CommandLine => single_pod_reason::READ_WRITE_ONCE_POD,
        SinglePodReason::Annotated => single_pod_reason::ANNOTATED,
    }
}

/// What a sync of `SINGLE_POD_VOLUMES` changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetSync {
    pub added: usize,
    pub removed: usize,
    /// Names too long for the kernel key: not enforced, logged.
    pub skipped: usize,
}

/// Makes `SINGLE_POD_VOLUMES` hold exactly `desired` (or, with `keep_others`, at least
/// it: used before the first complete facts arrive, so an earlier agent's pinned set stays).
pub fn sync_single_pod_volumes(
    ebpf: &mut Ebpf,
    desired: &BTreeMap<String, SinglePodReason>,
    keep_others: bool,
) -> Result<SetSync, KernelError> {
    let map = ebpf.map_mut(SINGLE_POD_VOLUMES).ok_or(KernelError::MissingMap(SINGLE_POD_VOLUMES))?;
    let mut set: HashMap<&mut MapData, VolumeKey, u32> =
        HashMap::try_from(map).map_err(map_error(SINGLE_POD_VOLUMES))?;
    let mut sync = SetSync::default();
    let mut wanted = std::collections::HashMap::new();
    for (name, reason) in desired {
        match volume_key(name) {
            Ok(key) => {
                wanted.insert(key.name, reason_code(*reason));
            }
            Err(e) => {
                warn!("single-pod volume not enforced in the kernel: {e}");
                sync.skipped += 1;
            }
        }
    }
    let present: Vec<(VolumeKey, u32)> = set.iter().filter_map(Result::ok).collect();
    for (key, reason) in &present {
        match wanted.remove(&key.name) {
            Some(want) if want == *reason => {}
            Some(want) => set.insert(key, want, 0).map_err(map_error(SINGLE_POD_VOLUMES))?,
            None if keep_others => {}
            None => {
                set.remove(key).map_err(map_error(SINGLE_POD_VOLUMES))?;
                sync.removed += 1;
            }
        }
    }
    for (name, reason) in wanted {
        set.insert(VolumeKey { name }, reason, 0).map_err(map_error(SINGLE_POD_VOLUMES))?;
        sync.added += 1;
    }
    Ok(sync)
}

/// Makes `pod_uid` the owner of `volume` unless the kernel already has an owner (which
/// is kept: the kernel saw the claim happen). True if it was seeded.
pub fn seed_owner(ebpf: &mut Ebpf, volume: &str, pod_uid: &str) -> Result<bool, KernelError> {
    let mut owners = owners_map(ebpf)?;
    let key = volume_key(volume)?;
    let Some(pod) = self::pod_uid(pod_uid) else {
        warn!("pod UID {pod_uid:?} too long for the kernel map; volume {volume} not seeded");
        return Ok(false);
    };
    if let Ok(existing) = owners.get(&key, 0) {
        if existing.pod.uid != pod.uid {
            warn!(
                "volume {volume}: the kernel's owner is pod {}, the mount table shows pod {pod_uid} first; keeping the kernel's",
                text(&existing.pod.uid)
            );
        }
        return Ok(false);
    }
    let owner = Owner { pod, claim_pid_tgid: 0, claimed_ns: 0 };
    // BPF_NOEXIST: a claim the kernel made meanwhile wins.
    Ok(owners.insert(key, owner, BPF_NOEXIST).is_ok())
}

/// Removes `volume`'s owner if it is still `pod_uid`. True if it was released.
pub fn release_owner(ebpf: &mut Ebpf, volume: &str, pod_uid: &str) -> Result<bool, KernelError> {
    let mut owners = owners_map(ebpf)?;
    let key = volume_key(volume)?;
    match owners.get(&key, 0) {
        Ok(existing) if text(&existing.pod.uid) == pod_uid => {
            owners.remove(&key).map_err(map_error(OWNERS))?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

fn owners_map(ebpf: &mut Ebpf) -> Result<HashMap<&mut MapData, VolumeKey, Owner>, KernelError> {
    let map = ebpf.map_mut(OWNERS).ok_or(KernelError::MissingMap(OWNERS))?;
    HashMap::try_from(map).map_err(map_error(OWNERS))
}

/// The kernel's form of a pod UID, if it fits.
pub fn pod_uid(uid: &str) -> Option<PodUid> {
    let bytes = uid.as_bytes();
    if bytes.is_empty() || bytes.len() >= POD_UID_LEN {
        return None;
    }
    let mut pod = PodUid { uid: [0; POD_UID_LEN] };
    pod.uid[..bytes.len()].copy_from_slice(bytes);
    Some(pod)
}

/// Every `(volume, owner pod UID)` in an `OWNERS` map (the agent's own, or a pinned one
/// opened with `Map::HashMap(MapData::from_pin(path)?)`).
pub fn owners_in(map: &Map) -> Result<Vec<(String, String)>, KernelError> {
    let owners: HashMap<&MapData, VolumeKey, Owner> = HashMap::try_from(map).map_err(map_error(OWNERS))?;
    let mut all = Vec::new();
    for entry in owners.iter() {
        let (key, owner) = entry.map_err(map_error(OWNERS))?;
        all.push((text(&key.name), text(&owner.pod.uid[..POD_UID_LEN])));
    }
    all.sort();
    Ok(all)
}

/// Owners in the loaded object's `OWNERS` map.
pub fn owners(ebpf: &Ebpf) -> Result<Vec<(String, String)>, KernelError> {
    owners_in(ebpf.map(OWNERS).ok_or(KernelError::MissingMap(OWNERS))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_device_numbers_use_the_kernel_encoding() {
        // 259:3 (an NVMe partition) and 8:1 in glibc's st_dev encoding.
        assert_eq!(kernel_dev(libc::makedev(259, 3)), (259 << 20) | 3);
        assert_eq!(kernel_dev(libc::makedev(8, 1)), (8 << 20) | 1);
        assert_eq!(kernel_dev(libc::makedev(0, 300)), 300, "minors above 255 keep every bit");
    }

    #[test]
    fn volume_keys_are_nul_padded_and_bounded() {
        let key = volume_key("pvc-1").unwrap();
        assert_eq!(&key.name[..6], b"pvc-1\0");
        assert!(volume_key("").is_err());
        assert!(volume_key(&"a".repeat(VOLUME_NAME_LEN - 1)).is_ok());
        assert!(matches!(volume_key(&"a".repeat(VOLUME_NAME_LEN)), Err(KernelError::NameTooLong { .. })));
    }
}
