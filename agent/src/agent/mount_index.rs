//! Turns fanotify mount notices into the changes the node model understands. A notice
//! names only a mount id: an attached mount is read with statmount, while a detached
//! one can no longer be read, so the index remembers where each mount it may have to
//! report a detach of is mounted: kubelet's volume paths only, so it stays as small as
//! the node's publishes.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use crate::{
    model::mounts::MASK_SOURCE,
    node_files::kubelet::{PathKind, classify},
    outputs::notification_metrics::SkipReason,
    sys::{
        fanotify::Notice,
        statmount::{MountFacts, StatmountError},
    },
};

/// A mount attached at or detached from one of kubelet's volume paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountChange {
    Attached {
        mount_point: PathBuf,
        /// volguard's own quarantine mask (an empty read-only tmpfs), not a publish.
        mask: bool,
    },
    Detached {
        mount_point: PathBuf,
        /// The mount's unique id: tells the agent's own detaches from everyone else's.
        mnt_id: u64,
    },
}

impl std::fmt::Display for MountChange {
    /// One line, as `--print-events` shows it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Attached { mount_point, mask: false } => write!(f, "attached  {}", mount_point.display()),
            Self::Attached { mount_point, mask: true } => {
                write!(f, "attached  {} (quarantine mask)", mount_point.display())
            }
            Self::Detached { mount_point, .. } => write!(f, "detached  {}", mount_point.display()),
        }
    }
}

/// What one notice amounts to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Changes(Vec<MountChange>),
    /// Nothing at kubelet's volume paths (most of a node's mounts).
    Elsewhere,
    /// A mount attached elsewhere than kubelet's volume paths, read: it may still show an
    /// owned volume's data (a bind of a publish target, a mount of its device).
    AttachedElsewhere(MountFacts),
    /// Not acted on: why, and the error.
    Skipped(SkipReason, String),
    /// The queue overflowed: the index must be rebuilt and the model reconciled.
    Overflow,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Indexed {
    mount_point: PathBuf,
    /// The agent's own quarantine mask, indexed when it made it (not from a notice).
    own_mask: bool,
}

/// Mount id → where it is mounted, for the mounts at kubelet's volume paths.
#[derive(Debug)]
pub struct MountIndex {
    kubelet_root: PathBuf,
    mounts: HashMap<u64, Indexed>,
}

impl MountIndex {
    pub fn new(kubelet_root: &Path) -> Self {
        Self { kubelet_root: kubelet_root.to_owned(), mounts: HashMap::new() }
    }

    /// Forgets everything and indexes `mounts` (a listmount of the namespace, read).
    pub fn rebuild(&mut self, mounts: impl IntoIterator<Item = MountFacts>) {
        self.mounts.clear();
        for facts in mounts {
            self.remember(&facts);
        }
    }

    pub fn len(&self) -> usize {
        self.mounts.len()
    }

    /// Indexes the mount if it is at one of kubelet's volume paths; true if it is.
    fn remember(&mut self, facts: &MountFacts) -> bool {
        if classify(&self.kubelet_root, &facts.mount_point) == PathKind::Other {
            return false;
        }
        self.mounts.insert(facts.mnt_id, Indexed { mount_point: facts.mount_point.clone(), own_mask: false });
        true
    }

    /// Indexes the quarantine's mask as soon as the agent made it: its detach is then told
    /// even if it is gone before its attach notice is read.
    pub fn remember_own_mask(&mut self, mnt_id: u64, mount_point: PathBuf) {
        self.mounts.insert(mnt_id, Indexed { mount_point, own_mask: true });
    }

    /// Applies one notice; `stat` reads an attached mount (statmount).
    pub fn apply(&mut self, notice: Notice, stat: impl FnOnce(u64) -> Result<MountFacts, StatmountError>) -> Outcome {
        let (detached, attached) = match notice {
            Notice::Overflow => return Outcome::Overflow,
            // The agent's mask, indexed when it made it: not read again. (A mount indexed
            // by a listing that ran after it was attached is read as any other.)
            Notice::Attached(id) if let Some(own) = self.mounts.get(&id).filter(|m| m.own_mask) => {
                return Outcome::Changes(vec![MountChange::Attached {
                    mount_point: own.mount_point.clone(),
                    mask: true,
                }]);
            }
            Notice::Attached(id) => (None, Some(id)),
            Notice::Detached(id) => (Some(id), None),
            Notice::Moved(id) => (Some(id), Some(id)),
        };
        let mut changes = Vec::new();
        if let Some((mnt_id, old)) = detached.and_then(|id| Some((id, self.mounts.remove(&id)?))) {
            changes.push(MountChange::Detached { mount_point: old.mount_point, mnt_id });
        }
        if let Some(id) = attached {
            match stat(id) {
                Ok(facts) => {
                    if self.remember(&facts) {
                        let mask = facts.fs_type == "tmpfs" && facts.source.as_deref() == Some(MASK_SOURCE);
                        changes.push(MountChange::Attached { mount_point: facts.mount_point, mask });
                    } else if changes.is_empty() {
                        return Outcome::AttachedElsewhere(facts);
                    }
                }
                // A moved mount's detach stands on its own.
                Err(e) if changes.is_empty() => {
                    let reason = match e {
                        StatmountError::Gone { .. } => SkipReason::GoneBeforeRead,
                        _ => SkipReason::StatmountFailed,
                    };
                    return Outcome::Skipped(reason, e.to_string());
                }
                Err(_) => {}
            }
        }
        match changes.is_empty() {
            true => Outcome::Elsewhere,
            false => Outcome::Changes(changes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROOT: &str = "/var/lib/kubelet";
    const PUBLISH: &str = "/var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv-1/mount";
    const OTHER_PUBLISH: &str = "/var/lib/kubelet/pods/c/volumes/kubernetes.io~csi/pv-1/mount";

    fn facts(id: u64, at: &str, fs_type: &str, source: &str) -> MountFacts {
        MountFacts {
            mnt_id: id,
            parent_id: 1,
            mnt_id_old: 30,
            mount_point: at.into(),
            root: "/".into(),
            fs_type: fs_type.into(),
            source: Some(source.into()),
            dev: (0, 0),
            ns_id: 1,
        }
    }

    fn found(f: MountFacts) -> impl FnOnce(u64) -> Result<MountFacts, StatmountError> {
        move |_| Ok(f)
    }

    fn attached(at: &str, mask: bool) -> Outcome {
        Outcome::Changes(vec![MountChange::Attached { mount_point: at.into(), mask }])
    }

    fn detached(at: &str, mnt_id: u64) -> Outcome {
        Outcome::Changes(vec![MountChange::Detached { mount_point: at.into(), mnt_id }])
    }

    fn never(_: u64) -> Result<MountFacts, StatmountError> {
        panic!("no statmount for a detach")
    }

    #[test]
    fn an_attach_is_read_and_its_detach_is_told_from_the_index() {
        let mut index = MountIndex::new(ROOT.as_ref());
        assert_eq!(
            index.apply(Notice::Attached(7), found(facts(7, PUBLISH, "ext4", "/dev/sdb"))),
            attached(PUBLISH, false)
        );
        assert_eq!(index.len(), 1);
        assert_eq!(index.apply(Notice::Detached(7), never), detached(PUBLISH, 7));
        assert_eq!(index.apply(Notice::Detached(7), never), Outcome::Elsewhere, "told once");
        assert_eq!(index.len(), 0);
    }

    /// The quarantine's mask, removed by the driver's unpublish before the agent read its
    /// attach notice: indexed when the agent made it, its detach is still told.
    #[test]
    fn the_agents_own_mask_is_known_before_its_notice_and_its_detach_is_told() {
        let mut index = MountIndex::new(ROOT.as_ref());
        index.remember_own_mask(14, PUBLISH.into());
        assert_eq!(index.apply(Notice::Attached(14), never), attached(PUBLISH, true), "no statmount, no skip");
        assert_eq!(index.apply(Notice::Detached(14), never), detached(PUBLISH, 14));
    }

    /// A publish attached between the watch's start (or an overflow) and the listing that
    /// indexed it: its queued attach notice is still read and reported as a publish.
    #[test]
    fn a_listed_mount_whose_attach_notice_comes_after_is_still_read() {
        let mut index = MountIndex::new(ROOT.as_ref());
        index.rebuild([facts(15, PUBLISH, "ext4", "/dev/sdb")]);
        assert_eq!(
            index.apply(Notice::Attached(15), found(facts(15, PUBLISH, "ext4", "/dev/sdb"))),
            attached(PUBLISH, false)
        );
    }

    #[test]
    fn mounts_elsewhere_are_handed_on_once_read_but_not_kept() {
        let mut index = MountIndex::new(ROOT.as_ref());
        let overlay = facts(8, "/run/containerd/x/rootfs", "overlay", "overlay");
        assert_eq!(index.apply(Notice::Attached(8), found(overlay.clone())), Outcome::AttachedElsewhere(overlay));
        assert_eq!(index.apply(Notice::Detached(8), never), Outcome::Elsewhere);
        assert_eq!(index.len(), 0, "the index holds kubelet's volume paths only");
    }

    #[test]
    fn the_mask_is_told_apart_from_a_publish() {
        let mut index = MountIndex::new(ROOT.as_ref());
        let mask = facts(9, PUBLISH, "tmpfs", MASK_SOURCE);
        assert_eq!(index.apply(Notice::Attached(9), found(mask)), attached(PUBLISH, true));
        let other_tmpfs = facts(10, OTHER_PUBLISH, "tmpfs", "tmpfs");
        assert_eq!(index.apply(Notice::Attached(10), found(other_tmpfs)), attached(OTHER_PUBLISH, false));
    }

    #[test]
    fn a_move_is_a_detach_from_the_old_place_and_an_attach_at_the_new() {
        let mut index = MountIndex::new(ROOT.as_ref());
        index.rebuild([facts(11, PUBLISH, "ext4", "/dev/sdb")]);
        let moved = index.apply(Notice::Moved(11), found(facts(11, OTHER_PUBLISH, "ext4", "/dev/sdb")));
        assert_eq!(
            moved,
            Outcome::Changes(vec![
                MountChange::Detached { mount_point: PUBLISH.into(), mnt_id: 11 },
                MountChange::Attached { mount_point: OTHER_PUBLISH.into(), mask: false },
            ])
        );
        // Moved away from kubelet's paths, and gone before it was read: the detach stands.
        let gone = |id| Err(StatmountError::Gone { mnt_id: id });
        assert_eq!(index.apply(Notice::Moved(11), gone), detached(OTHER_PUBLISH, 11));
    }

    #[test]
    fn a_mount_gone_before_it_was_read_is_a_counted_skip_and_an_overflow_asks_for_a_resync() {
        let mut index = MountIndex::new(ROOT.as_ref());
        let outcome = index.apply(Notice::Attached(12), |id| Err(StatmountError::Gone { mnt_id: id }));
        assert!(
            matches!(outcome, Outcome::Skipped(SkipReason::GoneBeforeRead, ref why) if why.contains("12")),
            "{outcome:?}"
        );
        let failed =
            |id| Err(StatmountError::Syscall { mnt_id: id, source: std::io::Error::from_raw_os_error(libc::EPERM) });
        assert!(matches!(index.apply(Notice::Attached(13), failed), Outcome::Skipped(SkipReason::StatmountFailed, _)));
        assert_eq!(index.apply(Notice::Overflow, never), Outcome::Overflow);
    }
}
