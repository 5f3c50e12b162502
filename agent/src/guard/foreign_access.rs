//! What the reporters of other pods' opens and changes (`super::open_reporter`,
//! `super::change_reporter`) hand the loop, and the scope they judge by: shared by both,
//! importing neither.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::PathBuf,
};

use crate::sys::fanotify::change_watch::ChangeKind;

/// What the judge of a volume's opens needs besides the owner.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenScope {
    /// Pods besides the owner whose opens are neither reported nor refused: exempt
    /// readers and the CSI node plugins.
    pub allowed: BTreeSet<String>,
    /// Other pods' mounts of a directory above the volume's, by mount ID: the volume's
    /// directory as each mount's namespace shows it.
    pub ancestors: BTreeMap<i32, PathBuf>,
}

/// An open or a change of `volume`'s files by a process that is not the owner's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignAccess {
    pub volume: String,
    pub owner: String,
    pub pid: u32,
    pub command: String,
    pub reader: Opener,
    pub access: FileAccess,
}

/// What the process did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileAccess {
    /// Opened a file; `refused` where `--deny-foreign-open` refused it.
    Open { refused: bool },
    /// Changed `entry` (its place below the volume's root, where known, else its name;
    /// `?` where the notice names none).
    Change { kind: ChangeKind, entry: String },
}

/// Who opened, as far as the process's cgroup tells.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Opener {
    /// A process of this pod (UID).
    Pod(String),
    /// A node process: in no pod's cgroup.
    Node,
    /// A process that exited before its cgroup could be read (a short `cat`): its pod is
    /// not known.
    Gone,
}
