//! Mount namespaces: running work inside a private one (test and probe mounts never reach
//! the host's mount table and disappear with the thread that made them), and naming the
//! one a mount table belongs to.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use nix::{
    mount::{MsFlags, mount},
    sched::{CloneFlags, unshare},
};

/// Why the private namespace could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MountNsError {
    #[error("could not start the namespace thread")]
    Spawn(#[source] std::io::Error),
    #[error("unshare(CLONE_NEWNS) failed (root needed)")]
    Unshare(#[source] nix::Error),
    #[error("making / private in the new namespace failed")]
    MakePrivate(#[source] nix::Error),
    #[error("the namespace thread panicked")]
    Panicked,
}

/// Runs `work` on a new thread named `name` (which becomes its `comm`, cut to 15 bytes)
/// in a new mount namespace whose mounts do not propagate to the host.
pub fn run_in_private_mount_ns<T, F>(name: &str, work: F) -> Result<T, MountNsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            // CLONE_NEWNS implies CLONE_FS: only this thread moves to the new namespace.
            unshare(CloneFlags::CLONE_NEWNS).map_err(MountNsError::Unshare)?;
            mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
                .map_err(MountNsError::MakePrivate)?;
            Ok(work())
        })
        .map_err(MountNsError::Spawn)?
        .join()
        .map_err(|_| MountNsError::Panicked)?
}

/// Our own mount namespace's file.
pub const OWN_NAMESPACE: &str = "/proc/self/ns/mnt";

/// The namespace file of the namespace whose mount table `mountinfo` is:
/// `/proc/<pid>/mountinfo` (or `/proc/<pid>/task/<tid>/mountinfo`) → `<dir>/ns/mnt`. A table
/// anywhere else (a copy, a test fixture) is taken as our own namespace's.
pub fn namespace_of(mountinfo: &Path) -> PathBuf {
    match (mountinfo.starts_with("/proc"), mountinfo.file_name(), mountinfo.parent()) {
        (true, Some(name), Some(dir)) if name == "mountinfo" => dir.join("ns/mnt"),
        _ => PathBuf::from(OWN_NAMESPACE),
    }
}

/// The inode that identifies a namespace file's namespace.
pub fn namespace_inode(ns_file: &Path) -> std::io::Result<u64> {
    std::fs::metadata(ns_file).map(|m| m.ino())
}

/// Every mount namespace of the node, as `(inode, a process in it)`, from `proc_root`
/// (`/proc` of the node's PID namespace). Processes come and go while the walk runs: one
/// whose namespace cannot be read is passed over.
pub fn mount_namespaces(proc_root: &Path) -> Vec<(u64, u32)> {
    let Ok(entries) = std::fs::read_dir(proc_root) else { return Vec::new() };
    let mut found: Vec<(u64, u32)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        if let Ok(inode) = namespace_inode(&entry.path().join("ns/mnt"))
            && seen.insert(inode)
        {
            found.push((inode, pid));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_procfs_table_names_its_namespace_and_a_copy_names_ours() {
        assert_eq!(namespace_of(Path::new("/proc/1/mountinfo")), Path::new("/proc/1/ns/mnt"));
        assert_eq!(namespace_of(Path::new("/proc/7/task/9/mountinfo")), Path::new("/proc/7/task/9/ns/mnt"));
        assert_eq!(namespace_of(Path::new("/tmp/mountinfo")), Path::new(OWN_NAMESPACE));
        assert_eq!(namespace_of(Path::new("/proc/1/mounts")), Path::new(OWN_NAMESPACE));
        let ours = namespace_inode(Path::new(OWN_NAMESPACE)).unwrap();
        assert_eq!(namespace_inode(&namespace_of(Path::new("/proc/self/mountinfo"))).unwrap(), ours);
    }

    #[test]
    fn our_namespace_is_among_the_nodes_once() {
        let ours = namespace_inode(Path::new(OWN_NAMESPACE)).unwrap();
        let all = mount_namespaces(Path::new("/proc"));
        assert_eq!(all.iter().filter(|(inode, _)| *inode == ours).count(), 1, "{all:?}");
    }
}
