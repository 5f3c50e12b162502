//! Where a mount-family event acted, classified once against kubelet's layout. The node
//! model (which pod published what) and the storage-operation metrics both read this one
//! classification; nothing else looks at an event's paths.

use std::{ffi::OsStr, os::unix::ffi::OsStrExt, path::PathBuf};

use volguard_common::{enforce::MountOp, mount_api::AT_FDCWD, mount_flags::without_magic};

use super::mounts::PublishChange;
use crate::{
    kernel::decode::{Call, Event},
    node_files::kubelet::{PathKind, classify},
};

/// The place an event attached something at or detached something from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTarget {
    pub path: PathBuf,
    /// `path` against kubelet's layout.
    pub kind: PathKind,
    /// A bind, move or new mount (true), or an unmount (false).
    pub attaching: bool,
    /// The syscall returned 0.
    pub succeeded: bool,
}

impl EventTarget {
    /// The event's target, when it names one absolutely and untruncated (userspace sees
    /// strings, not resolved paths). Remounts and propagation changes attach nothing and
    /// have none; neither do the fd-based calls before `move_mount`.
    pub fn of(kubelet_root: &std::path::Path, event: &Event) -> Option<Self> {
        let (raw, attaching) = match &event.call {
            Call::Umount { target, .. } => (target, false),
            Call::Mount { target, flags, .. } if MountOp::of(without_magic(*flags)).attaches() => (target, true),
            Call::MoveMount { to_dfd, to_path, .. } if *to_dfd == AT_FDCWD || to_path.as_bytes().starts_with(b"/") => {
                (to_path, true)
            }
            _ => return None,
        };
        if raw.truncated {
            return None;
        }
        let path = PathBuf::from(OsStr::from_bytes(raw.as_bytes()));
        Some(Self { kind: classify(kubelet_root, &path), path, attaching, succeeded: event.ret == 0 })
    }

    /// A mount attached at `path`, as a mount notice reports it (only successes are).
    pub fn attached(kubelet_root: &std::path::Path, path: PathBuf) -> Self {
        Self { kind: classify(kubelet_root, &path), path, attaching: true, succeeded: true }
    }

    /// A mount detached from `path`, as a mount notice reports it.
    pub fn detached(kubelet_root: &std::path::Path, path: PathBuf) -> Self {
        Self { kind: classify(kubelet_root, &path), path, attaching: false, succeeded: true }
    }

    /// What a successful event changed about the publishes, if its target is a CSI
    /// publish target.
    pub fn publish_change(&self) -> Option<PublishChange> {
        let target = self.kind.publish_target().filter(|_| self.succeeded)?;
        Some(match self.attaching {
            true => PublishChange::Published(target, self.path.clone()),
            false => PublishChange::Unpublished(target),
        })
    }
}

#[cfg(test)]
mod tests {
    use volguard_common::mount_flags::{MS_BIND, MS_REMOUNT};

    use super::*;
    use crate::kernel::decode::{Caller, RawString};

    const ROOT: &str = "/var/lib/kubelet";
    const PUBLISH: &str = "/var/lib/kubelet/pods/pod-a/volumes/kubernetes.io~csi/pv-1/mount";

    fn event(call: Call, ret: i64) -> Event {
        Event { caller: Caller::default(), start_ns: 0, duration_ns: 0, ret, call }
    }

    fn mount(target: &str, flags: u64) -> Call {
        Call::Mount {
            source: RawString::from("/x"),
            target: RawString::from(target),
            fstype: RawString::default(),
            flags,
        }
    }

    #[test]
    fn a_bind_onto_a_publish_target_publishes_and_its_unmount_unpublishes() {
        let bind = EventTarget::of(ROOT.as_ref(), &event(mount(PUBLISH, MS_BIND), 0)).unwrap();
        assert!(bind.attaching && matches!(bind.kind, PathKind::CsiPublish { .. }));
        assert!(matches!(bind.publish_change(), Some(PublishChange::Published(t, _)) if t.pod_uid == "pod-a"));
        let umount = Call::Umount { target: RawString::from(PUBLISH), flags: 0 };
        let unmount = EventTarget::of(ROOT.as_ref(), &event(umount, 0)).unwrap();
        assert!(matches!(unmount.publish_change(), Some(PublishChange::Unpublished(t)) if t.volume == "pv-1"));
    }

    #[test]
    fn failures_remounts_and_other_paths_change_no_publish() {
        let failed = EventTarget::of(ROOT.as_ref(), &event(mount(PUBLISH, MS_BIND), -16)).unwrap();
        assert!(!failed.succeeded && failed.publish_change().is_none(), "still a target, for the metrics");
        assert!(EventTarget::of(ROOT.as_ref(), &event(mount(PUBLISH, MS_REMOUNT | MS_BIND), 0)).is_none());
        let elsewhere = EventTarget::of(ROOT.as_ref(), &event(mount("/mnt/x", MS_BIND), 0)).unwrap();
        assert_eq!((elsewhere.publish_change(), elsewhere.kind), (None, PathKind::Other));
    }

    #[test]
    fn a_notice_classifies_as_the_syscall_does() {
        let bind = EventTarget::of(ROOT.as_ref(), &event(mount(PUBLISH, MS_BIND), 0)).unwrap();
        assert_eq!(EventTarget::attached(ROOT.as_ref(), PUBLISH.into()), bind);
        let umount = Call::Umount { target: RawString::from(PUBLISH), flags: 0 };
        let unmount = EventTarget::of(ROOT.as_ref(), &event(umount, 0)).unwrap();
        assert_eq!(EventTarget::detached(ROOT.as_ref(), PUBLISH.into()), unmount);
    }
}
