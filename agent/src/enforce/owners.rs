//! Who owns which single-pod volume, wherever that is kept: in the kernel's maps when the
//! LSM programs decide, else in the agent's own table. The running loop and the start-up
//! go through [`OwnerStore`] and never ask which.

use std::{
    collections::{BTreeMap, BTreeSet},
    os::unix::fs::MetadataExt,
};

use tracing::{info, warn};
use volguard_common::enforce::single_pod_reason;

use super::{decision::OwnershipChange, ownership::Ownership};
use crate::{
    facts::{Origin, SinglePodReason},
    kernel::maps::{EnforcementMaps, KernelError, kernel_dev},
    model::{
        mounts::{OwnerFix, PublishChange},
        node::NodeModel,
    },
    node_files::mount_table::MountTable,
};

pub enum OwnerStore {
    /// The kernel decides: owners, the single-pod set and owned trees' roots are in its maps
    /// (boxed: four map handles, one per agent, next to a small table).
    Kernel(Box<EnforcementMaps>),
    /// Userspace decides (quarantine, audit without BPF LSM).
    Userspace(Ownership),
}

impl OwnerStore {
    pub fn owners(&self) -> Result<BTreeMap<String, String>, KernelError> {
        match self {
            Self::Kernel(maps) => Ok(maps.owners()?.into_iter().collect()),
            Self::Userspace(o) => Ok(o.owners()),
        }
    }

    /// Applies a fix; true if it changed an owner. Seeds are logged here; a release is
    /// the caller's to explain (it knows which mount table said so).
    pub fn apply(&mut self, fix: &OwnerFix) -> Result<bool, KernelError> {
        let done = match (self, fix) {
            (Self::Kernel(maps), OwnerFix::Seed { volume, pod_uid }) => maps.seed_owner(volume, pod_uid)?,
            (Self::Kernel(maps), OwnerFix::Release { volume, pod_uid }) => maps.release_owner(volume, pod_uid)?,
            (Self::Userspace(o), OwnerFix::Seed { volume, pod_uid }) => {
                o.seed(volume, pod_uid);
                o.owner(volume) == Some(pod_uid.as_str())
            }
            (Self::Userspace(o), OwnerFix::Release { volume, pod_uid }) => o.release(volume, pod_uid),
        };
        if let (OwnerFix::Seed { volume, pod_uid }, true) = (fix, done) {
            info!("volume {volume} is published for pod {pod_uid} (mount table): pod {pod_uid} owns it")
        }
        Ok(done)
    }

    /// Makes the store's single-pod set the model's. In the kernel, until the facts source
    /// has delivered once, volumes an earlier agent pinned stay (an API that has not
    /// answered yet must not switch enforcement off).
    pub fn sync_single_pod_set(&mut self, model: &NodeModel) -> Result<(), KernelError> {
        let maps = match self {
            Self::Kernel(maps) => maps,
            Self::Userspace(o) => {
                o.set_single_pod(model.single_pod().clone());
                return Ok(());
            }
        };
        let keep_others = model.snapshot().synced_at.is_none() && model.snapshot().origin != Origin::None;
        let desired = model.single_pod().iter().map(|(name, reason)| (name.clone(), reason_code(*reason))).collect();
        let sync = maps.sync_single_pod_set(&desired, keep_others)?;
        if sync.added + sync.removed > 0 {
            info!("kernel single-pod set: {} added, {} removed", sync.added, sync.removed);
        }
        Ok(())
    }

    /// Gives the LSM programs the pods exempt as readers (userspace modes check them at
    /// syscall exit only).
    pub fn sync_exempt_pods(&mut self, pods: &BTreeSet<String>) -> Result<(), KernelError> {
        let Self::Kernel(maps) = self else { return Ok(()) };
        let (added, removed) = maps.sync_exempt_pods(pods)?;
        if added + removed > 0 {
            info!("kernel exempt readers: {added} added, {removed} removed");
        }
        Ok(())
    }

    /// Records, for the open guard, the root of each owner's publish the kernel did not
    /// see made (before any agent's programs ran, or while none ran): the directory its
    /// publish target shows, as the mount table's namespace sees it.
    pub fn seed_roots(&mut self, model: &NodeModel) -> Result<(), KernelError> {
        let Self::Kernel(maps) = self else { return Ok(()) };
        let in_namespace = MountTable::root_of(model.mountinfo());
        for (volume, pod) in maps.owners()? {
            if maps.has_root(&volume, &pod) {
                continue;
            }
            let pods = model.mounts().pods_of(&volume);
            let Some((_, publish)) = pods.iter().find(|(p, _)| *p == pod) else { continue };
            let target = match &in_namespace {
                Some(root) => root.join(publish.mount_point.strip_prefix("/").unwrap_or(&publish.mount_point)),
                None => publish.mount_point.clone(),
            };
            match std::fs::metadata(&target) {
                Ok(meta) => {
                    if maps.seed_root(&volume, &pod, meta.ino(), kernel_dev(meta.dev()))? {
                        info!("open guard: volume {volume}'s files are opened by pod {pod} alone");
                    }
                }
                Err(e) => warn!("open guard: volume {volume} of pod {pod} not guarded: {}: {e}", target.display()),
            }
        }
        Ok(())
    }

    /// What a successful publish or unmount means for ownership: judged by the agent's
    /// table (recording it) in the userspace modes; the kernel's maps already decided.
    pub fn observe(&mut self, change: &PublishChange) -> OwnershipChange {
        match (self, change) {
            (Self::Kernel(_), _) => OwnershipChange::InKernel,
            (Self::Userspace(o), PublishChange::Published(target, _)) => {
                OwnershipChange::Published(o.published(target))
            }
            (Self::Userspace(o), PublishChange::Unpublished(target)) => {
                OwnershipChange::Unpublished { released: o.unpublished(target) }
            }
        }
    }

    /// After a successful publish or unmount the model saw, in the kernel modes: says when
    /// an owner published its volume (the exit program has recorded the tree's root), and
    /// forgets the roots of an unmounted publish. Userspace modes keep no roots.
    pub fn publish_changed(&mut self, change: &PublishChange) {
        let Self::Kernel(maps) = self else { return };
        match change {
            PublishChange::Published(target, _) => {
                if maps.owner(&target.volume).as_deref() == Some(target.pod_uid.as_str()) {
                    info!("volume {} published for pod {}, its owner", target.volume, target.pod_uid);
                }
            }
            PublishChange::Unpublished(target) => maps.forget_roots(&target.volume, &target.pod_uid),
        }
    }
}

/// The kernel's reason code for a single-pod volume.
pub fn reason_code(reason: SinglePodReason) -> u32 {
    match reason {
        SinglePodReason::ReadWriteOncePod | SinglePodReason::CommandLine => single_pod_reason::READ_WRITE_ONCE_POD,
        SinglePodReason::Annotated => single_pod_reason::ANNOTATED,
    }
}
