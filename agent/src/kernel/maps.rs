//! The maps the LSM programs decide from, behind one typed handle taken once from the
//! loaded object or from the pins: the config, the single-pod set, the owners, the roots
//! and mounts of owned publishes (recorded by the kernel, forgotten here), and what finds a
//! caller's pod and its exemption. Policy (which volumes, which owner, which mode) is the
//! caller's; this module only speaks the kernel's formats.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    os::unix::fs::MetadataExt,
    path::Path,
};

use aya::maps::{Array, HashMap, Map, MapData, MapError};
use tracing::warn;
use volguard_common::{
    enforce::{
        CallerLayout, EnforceConfig, KernelLayout, MountTreeLayout, Owner, POD_UID_LEN, PodUid, PublishedRoot, RootKey,
        VOLUME_NAME_LEN, VolumeKey,
    },
    maps::{
        CALLER_LAYOUT, CONFIG, EXEMPT_POD_ENTRIES, EXEMPT_PODS, GUARDED_DEVICES, MOUNT_TREE_LAYOUT, OWNERS,
        PUBLISH_MOUNTS, PUBLISHED_ROOTS, SINGLE_POD_VOLUMES, VERDICT_EPOCH,
    },
    open_guard::{DeviceGuard, VerdictEpoch},
};

use super::{
    loader::{LoadError, LoadedObject},
    pins::Pins,
};

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
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("volume name {name:?} is {len} bytes; at most {max} fit")]
    NameTooLong { name: String, len: usize, max: usize },
}

/// The kernel's own `MKDEV(major, minor)` for a userspace `st_dev`.
pub fn kernel_dev(st_dev: u64) -> u32 {
    let (major, minor) = (libc::major(st_dev), libc::minor(st_dev));
    (major << 20) | minor
}

/// Inode and kernel device of the kubelet root, which the kernel uses to recognise it.
fn kubelet_root_identity(root: &Path) -> Result<(u64, u32), KernelError> {
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

/// The kernel's form of a pod UID, if it fits.
fn pod_uid(uid: &str) -> Option<PodUid> {
    let bytes = uid.as_bytes();
    if bytes.is_empty() || bytes.len() >= POD_UID_LEN {
        return None;
    }
    let mut pod = PodUid { uid: [0; POD_UID_LEN] };
    pod.uid[..bytes.len()].copy_from_slice(bytes);
    Some(pod)
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// What a sync of `SINGLE_POD_VOLUMES` changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetSync {
    pub added: usize,
    pub removed: usize,
    /// Names too long for the kernel key: not enforced, logged.
    pub skipped: usize,
}

/// The enforcement maps, taken once. Programs are loaded (at attach) against these
/// descriptors, so keep the handle until they are; after that, dropping it closes the
/// agent's descriptors only: the programs (and the pins) keep the maps.
pub struct EnforcementMaps {
    config: Array<MapData, EnforceConfig>,
    single_pod: HashMap<MapData, VolumeKey, u32>,
    owners: HashMap<MapData, VolumeKey, Owner>,
    roots: HashMap<MapData, RootKey, PublishedRoot>,
    /// Absent from the pins of an agent that predates it.
    publish_mounts: Option<HashMap<MapData, VolumeKey, u64>>,
    /// Only in a loaded object (the map is not pinned).
    mount_tree: Option<Array<MapData, MountTreeLayout>>,
    /// Only in a loaded object (not pinned either).
    callers: Option<CallerMaps>,
    /// Absent from the pins of an agent that predates the open guard.
    guarded_devices: Option<HashMap<MapData, u32, DeviceGuard>>,
    /// Only in a loaded object (not pinned): the epoch slots of its open guard's verdicts.
    verdict_epoch: Option<Array<MapData, u64>>,
}

impl EnforcementMaps {
    /// Takes the maps out of the loaded object (which keeps its programs).
    pub fn take(object: &mut LoadedObject) -> Result<Self, KernelError> {
        let mut maps = Self::from_maps(|name| Ok(object.take_map(name)?))?;
        let publish_mounts = object.take_map(PUBLISH_MOUNTS)?;
        maps.publish_mounts = Some(HashMap::try_from(publish_mounts).map_err(map_error(PUBLISH_MOUNTS))?);
        let mount_tree = object.take_map(MOUNT_TREE_LAYOUT)?;
        maps.mount_tree = Some(Array::try_from(mount_tree).map_err(map_error(MOUNT_TREE_LAYOUT))?);
        maps.callers = Some(CallerMaps::take(object)?);
        let devices = object.take_map(GUARDED_DEVICES)?;
        maps.guarded_devices = Some(HashMap::try_from(devices).map_err(map_error(GUARDED_DEVICES))?);
        let epoch = object.take_map(VERDICT_EPOCH)?;
        maps.verdict_epoch = Some(Array::try_from(epoch).map_err(map_error(VERDICT_EPOCH))?);
        Ok(maps)
    }

    /// Opens the maps an agent pinned under `pins` (for `volguard owners`, and tests).
    pub fn open_pinned(pins: &Pins) -> Result<Self, KernelError> {
        let open = |name: &'static str| {
            let data = MapData::from_pin(pins.map_path(name)).map_err(map_error(name))?;
            Ok(if name == CONFIG { Map::Array(data) } else { Map::HashMap(data) })
        };
        let mut maps = Self::from_maps(open)?;
        // Pins of an agent older than the map have none.
        maps.publish_mounts = open(PUBLISH_MOUNTS).ok().and_then(|map| HashMap::try_from(map).ok());
        maps.guarded_devices = open(GUARDED_DEVICES).ok().and_then(|map| HashMap::try_from(map).ok());
        Ok(maps)
    }

    fn from_maps(mut take: impl FnMut(&'static str) -> Result<Map, KernelError>) -> Result<Self, KernelError> {
        Ok(Self {
            config: Array::try_from(take(CONFIG)?).map_err(map_error(CONFIG))?,
            single_pod: HashMap::try_from(take(SINGLE_POD_VOLUMES)?).map_err(map_error(SINGLE_POD_VOLUMES))?,
            owners: HashMap::try_from(take(OWNERS)?).map_err(map_error(OWNERS))?,
            roots: HashMap::try_from(take(PUBLISHED_ROOTS)?).map_err(map_error(PUBLISHED_ROOTS))?,
            publish_mounts: None,
            mount_tree: None,
            callers: None,
            guarded_devices: None,
            verdict_epoch: None,
        })
    }

    /// Writes the config the programs read (the layout is used in every mode: events carry
    /// the caller's mount namespace). `mode` is one of `volguard_common::enforce::kernel_mode`.
    pub fn configure(&mut self, layout: KernelLayout, kubelet_root: &Path, mode: u32) -> Result<(), KernelError> {
        let (ino, dev) = kubelet_root_identity(kubelet_root)?;
        let config = EnforceConfig { layout, kubelet_root_ino: ino, kubelet_root_dev: dev, mode };
        self.config.set(0, config, 0).map_err(map_error(CONFIG))
    }

    /// Gives the exit programs what they need to record the root of each owner's publish
    /// (enforcement modes; without it no root is recorded).
    pub fn configure_mount_tree(&mut self, layout: MountTreeLayout) -> Result<(), KernelError> {
        let map = self.mount_tree.as_mut().ok_or(KernelError::MissingMap(MOUNT_TREE_LAYOUT))?;
        map.set(0, layout, 0).map_err(map_error(MOUNT_TREE_LAYOUT))
    }

    /// Lets the LSM programs find a caller's pod (enforcement modes; without it a clone of
    /// an owned tree is judged only by where it lands).
    pub fn configure_callers(&mut self, layout: CallerLayout) -> Result<(), KernelError> {
        self.callers.as_mut().ok_or(KernelError::MissingMap(CALLER_LAYOUT))?.configure(layout)
    }

    /// Makes the kernel's exempt readers exactly `pods` (UIDs); (added, removed).
    pub fn sync_exempt_pods(&mut self, pods: &BTreeSet<String>) -> Result<(usize, usize), KernelError> {
        self.callers.as_mut().ok_or(KernelError::MissingMap(EXEMPT_PODS))?.sync_exempt(pods)
    }

    /// Makes `SINGLE_POD_VOLUMES` hold exactly `desired` (volume name → the kernel's reason
    /// code, `volguard_common::enforce::single_pod_reason`), or, with `keep_others`, at
    /// least it: used before the first complete facts arrive, so an earlier agent's pinned
    /// set stays.
    pub fn sync_single_pod_set(
        &mut self,
        desired: &BTreeMap<String, u32>,
        keep_others: bool,
    ) -> Result<SetSync, KernelError> {
        let set = &mut self.single_pod;
        let mut sync = SetSync::default();
        let mut wanted = std::collections::HashMap::new();
        for (name, reason) in desired {
            match volume_key(name) {
                Ok(key) => {
                    wanted.insert(key.name, *reason);
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
    pub fn seed_owner(&mut self, volume: &str, pod_uid: &str) -> Result<bool, KernelError> {
        let key = volume_key(volume)?;
        let Some(pod) = self::pod_uid(pod_uid) else {
            warn!("pod UID {pod_uid:?} too long for the kernel map; volume {volume} not seeded");
            return Ok(false);
        };
        if let Ok(existing) = self.owners.get(&key, 0) {
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
        let seeded = self.owners.insert(key, owner, BPF_NOEXIST).is_ok();
        if seeded {
            self.forget_publish_mount(&key);
        }
        Ok(seeded)
    }

    /// Forgets which mount published `key` (an owner the kernel did not see publish, or
    /// none), so that an unmount on its publish target releases it again.
    fn forget_publish_mount(&mut self, key: &VolumeKey) {
        if let Some(mounts) = self.publish_mounts.as_mut() {
            let _ = mounts.remove(key);
        }
    }

    /// Removes `volume`'s owner if it is still `pod_uid`. True if it was released.
    pub fn release_owner(&mut self, volume: &str, pod_uid: &str) -> Result<bool, KernelError> {
        let key = volume_key(volume)?;
        match self.owners.get(&key, 0) {
            Ok(existing) if text(&existing.pod.uid) == pod_uid => {
                self.owners.remove(&key).map_err(map_error(OWNERS))?;
                self.forget_publish_mount(&key);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The UID of the pod that owns `volume` in the kernel, if any.
    pub fn owner(&self, volume: &str) -> Option<String> {
        let owner = self.owners.get(&volume_key(volume).ok()?, 0).ok()?;
        Some(text(&owner.pod.uid))
    }

    /// Every `(volume, owner pod UID)`, sorted.
    pub fn owners(&self) -> Result<Vec<(String, String)>, KernelError> {
        let mut all = Vec::new();
        for entry in self.owners.iter() {
            let (key, owner) = entry.map_err(map_error(OWNERS))?;
            all.push((text(&key.name), text(&owner.pod.uid[..POD_UID_LEN])));
        }
        all.sort();
        Ok(all)
    }

    /// Whether a root of `volume` published for `pod_uid` is recorded.
    pub fn has_root(&self, volume: &str, pod_uid: &str) -> bool {
        let (Ok(volume), Some(pod)) = (volume_key(volume), self::pod_uid(pod_uid)) else { return false };
        self.roots
            .iter()
            .filter_map(Result::ok)
            .any(|(_, root)| root.volume.name == volume.name && root.owner.uid == pod.uid)
    }

    /// Records the root of a publish the kernel did not see (made before this agent's
    /// programs ran): `ino` and kernel `dev` of the directory the publish shows. Marked
    /// as a directory root, so opens on its filesystem walk up to it.
    pub fn seed_root(&mut self, volume: &str, pod_uid: &str, ino: u64, dev: u32) -> Result<bool, KernelError> {
        let key = volume_key(volume)?;
        let Some(owner) = self::pod_uid(pod_uid) else { return Ok(false) };
        let root = PublishedRoot { volume: key, owner };
        self.roots.insert(RootKey { ino, dev, _pad: 0 }, root, 0).map_err(map_error(PUBLISHED_ROOTS))?;
        self.guard_device(dev)?;
        self.forget_verdicts()?;
        Ok(true)
    }

    /// Makes the open guard's cached verdicts stale (a root they did not know is recorded):
    /// bumps the agent's epoch slot, which only this process writes.
    fn forget_verdicts(&mut self) -> Result<(), KernelError> {
        let Some(epoch) = self.verdict_epoch.as_mut() else { return Ok(()) };
        let slot = VerdictEpoch::Agent as u32;
        let now = epoch.get(&slot, 0).map_err(map_error(VERDICT_EPOCH))?;
        epoch.set(slot, now.wrapping_add(1), 0).map_err(map_error(VERDICT_EPOCH))
    }

    /// Notes that `dev` holds a directory root, keeping what the kernel noted there.
    fn guard_device(&mut self, dev: u32) -> Result<(), KernelError> {
        let Some(devices) = self.guarded_devices.as_mut() else { return Ok(()) };
        let mut guard = devices.get(&dev, 0).unwrap_or_default();
        if guard.directory_roots != 0 {
            return Ok(());
        }
        guard.directory_roots = 1;
        devices.insert(dev, guard, 0).map_err(map_error(GUARDED_DEVICES))
    }

    /// Marks the device of every recorded root (pins of an agent that predates the open
    /// guard have roots but no device marks). Returns how many devices were marked.
    pub fn guard_devices_of_roots(&mut self) -> Result<usize, KernelError> {
        let Some(devices) = self.guarded_devices.as_ref() else { return Ok(0) };
        let marked: HashSet<u32> = devices.keys().filter_map(Result::ok).collect();
        let missing: BTreeSet<u32> =
            self.roots.keys().filter_map(Result::ok).map(|key| key.dev).filter(|dev| !marked.contains(dev)).collect();
        for dev in &missing {
            self.guard_device(*dev)?;
        }
        Ok(missing.len())
    }

    /// Removes the marks of devices that hold no recorded root any more. A root the exit
    /// program records meanwhile is recorded before its mark: a second look at the roots
    /// puts back a mark removed under it.
    fn unguard_empty_devices(&mut self) {
        let Some(devices) = self.guarded_devices.as_mut() else { return };
        let roots_on = |roots: &HashMap<MapData, RootKey, PublishedRoot>| -> HashSet<u32> {
            roots.keys().filter_map(Result::ok).map(|key| key.dev).collect()
        };
        let held = roots_on(&self.roots);
        let empty: Vec<(u32, DeviceGuard)> =
            devices.iter().filter_map(Result::ok).filter(|(dev, _)| !held.contains(dev)).collect();
        if empty.is_empty() {
            return;
        }
        for (dev, _) in &empty {
            let _ = devices.remove(dev);
        }
        let held = roots_on(&self.roots);
        for (dev, guard) in empty.into_iter().filter(|(dev, _)| held.contains(dev)) {
            // BPF_NOEXIST: a mark the exit program wrote meanwhile is newer than ours.
            let _ = devices.insert(dev, guard, BPF_NOEXIST);
        }
    }

    /// Forgets `pod_uid`'s roots of `volume` (found in the map itself, so roots recorded
    /// before a restart go too), unless the pod owns the volume again: the agent reads an
    /// unpublish after the kernel released the claim, and may read it after the same pod
    /// published again (records can wait up to `LAZY_DRAIN_MS`), whose root the exit
    /// program has recorded already. A root outlives its ownership harmlessly: the LSM
    /// hook trusts one only while its pod owns the volume.
    pub fn forget_roots(&mut self, volume: &str, pod_uid: &str) {
        let (Ok(volume), Some(pod)) = (volume_key(volume), self::pod_uid(pod_uid)) else { return };
        if self.owners.get(&volume, 0).is_ok_and(|owner| owner.pod.uid == pod.uid) {
            return;
        }
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
        self.unguard_empty_devices();
    }
}

/// What the LSM programs need to judge who takes a clone of an owned volume's tree: the
/// offsets for finding the caller's pod from its cgroup, and the pods the operator exempts
/// as readers. Both unpinned: each agent's programs read their own.
struct CallerMaps {
    layout: Array<MapData, CallerLayout>,
    exempt: HashMap<MapData, PodUid, u8>,
}

impl CallerMaps {
    /// Takes the maps out of the loaded object.
    fn take(object: &mut LoadedObject) -> Result<Self, KernelError> {
        let layout = Array::try_from(object.take_map(CALLER_LAYOUT)?).map_err(map_error(CALLER_LAYOUT))?;
        let exempt = HashMap::try_from(object.take_map(EXEMPT_PODS)?).map_err(map_error(EXEMPT_PODS))?;
        Ok(Self { layout, exempt })
    }

    /// Lets the programs find the caller's pod (without it, no caller has one).
    fn configure(&mut self, layout: CallerLayout) -> Result<(), KernelError> {
        self.layout.set(0, layout, 0).map_err(map_error(CALLER_LAYOUT))
    }

    /// Makes `EXEMPT_PODS` hold exactly `pods` (UIDs); returns how many were added and
    /// removed. Beyond the map's size, the rest are logged and left to userspace's check.
    fn sync_exempt(&mut self, pods: &BTreeSet<String>) -> Result<(usize, usize), KernelError> {
        let wanted: HashSet<[u8; POD_UID_LEN]> =
            pods.iter().filter_map(|uid| pod_uid(uid)).map(|pod| pod.uid).collect();
        let present: Vec<PodUid> = self.exempt.keys().filter_map(Result::ok).collect();
        let mut removed = 0;
        for pod in &present {
            if !wanted.contains(&pod.uid) {
                self.exempt.remove(pod).map_err(map_error(EXEMPT_PODS))?;
                removed += 1;
            }
        }
        let have: HashSet<_> = present.iter().map(|pod| pod.uid).collect();
        let mut added = 0;
        for uid in wanted.difference(&have) {
            if have.len() - removed + added >= EXEMPT_POD_ENTRIES as usize {
                warn!("more than {EXEMPT_POD_ENTRIES} exempt readers: the rest are exempt at syscall exit only");
                break;
            }
            self.exempt.insert(PodUid { uid: *uid }, 1, 0).map_err(map_error(EXEMPT_PODS))?;
            added += 1;
        }
        Ok((added, removed))
    }
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
