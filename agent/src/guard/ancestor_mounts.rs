//! Opens through another pod's mount of a directory *above* a volume's (a hostPath on a CSI
//! driver's data directory, on `/var/lib`, on `/`). Such a mount shows much more than the
//! volume, so each of its notices is judged by where the opened file lies. The descriptor
//! fanotify hands over names its mount (`mnt_id` in `/proc/self/fdinfo`) and, through
//! `/proc/self/fd`'s link, its path as that mount's namespace shows it: a file of the volume
//! lies under the volume's directory there (`VolumeTree::dir_below`).

use std::{
    collections::BTreeMap,
    io,
    os::fd::{AsRawFd, OwnedFd},
    path::{Path, PathBuf},
};

/// Mounts above one volume's directory, by mount ID, each with the volume's directory as
/// its namespace shows it.
#[derive(Debug, Default)]
pub struct AncestorMounts(BTreeMap<i32, PathBuf>);

/// Most mounts remembered: a group forgets none while it lives (below), up to this many.
const REMEMBERED: usize = 1024;

impl AncestorMounts {
    /// Adds the mounts the last scan found. None is forgotten while the volume is watched: a
    /// notice queued before its mount went is still judged by its path, never taken for the
    /// volume's.
    pub fn learn(&mut self, found: &BTreeMap<i32, PathBuf>) {
        if self.0.len() + found.len() > REMEMBERED {
            self.0.clear();
        }
        self.0.extend(found.iter().map(|(id, dir)| (*id, dir.clone())));
    }

    /// Whether `file` is the volume's: any file opened through the volume's own places is;
    /// one opened through a mount above it is when it lies in the volume's directory. A
    /// file whose mount or path cannot be read is not taken for the volume's (no refusal,
    /// no report rests on a guess).
    pub fn shows_volume(&self, file: &OwnedFd) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let Ok(mount) = mount_id(file) else { return false };
        let Some(dir) = self.0.get(&mount) else { return true };
        link(file).is_ok_and(|path| path.starts_with(dir))
    }
}

/// The ID of the mount `file` was opened through.
fn mount_id(file: &OwnedFd) -> io::Result<i32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()))?;
    parse_mount_id(&info).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no mnt_id in fdinfo"))
}

fn parse_mount_id(fdinfo: &str) -> Option<i32> {
    fdinfo.lines().find_map(|l| l.strip_prefix("mnt_id:")).and_then(|id| id.trim().parse().ok())
}

/// `file`'s path, from the root of its mount's namespace.
fn link(file: &OwnedFd) -> io::Result<PathBuf> {
    std::fs::read_link(Path::new("/proc/self/fd").join(file.as_raw_fd().to_string()))
}

#[cfg(test)]
mod tests {
    use std::fs::File;

    use super::*;

    #[test]
    fn the_mount_id_is_read_from_fdinfo() {
        assert_eq!(parse_mount_id("pos:\t0\nflags:\t02100000\nmnt_id:\t65\nino:\t10002779\n"), Some(65));
        assert_eq!(parse_mount_id("pos:\t0\n"), None);
        assert_eq!(parse_mount_id("mnt_id:\tx\n"), None);
    }

    #[test]
    fn a_file_through_a_mount_above_the_volume_is_the_volumes_only_under_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (inside, outside) = (dir.path().join("pv-1"), dir.path().join("pv-10"));
        for d in [&inside, &outside] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("data"), b"x").unwrap();
        }
        let open = |p: &Path| OwnedFd::from(File::open(p).unwrap());
        let (in_file, out_file) = (open(&inside.join("data")), open(&outside.join("data")));
        let mut mounts = AncestorMounts::default();
        assert!(mounts.shows_volume(&out_file), "with no mount above the volume every notice is the volume's");
        let this_mount = mount_id(&in_file).unwrap();
        let root_link = link(&open(dir.path())).unwrap();
        mounts.learn(&BTreeMap::from([(this_mount, root_link.join("pv-1"))]));
        assert!(mounts.shows_volume(&in_file));
        assert!(!mounts.shows_volume(&out_file), "a sibling whose name starts the same is not the volume");
        // A mount that is not above the volume is one of the volume's own places.
        let mut elsewhere = AncestorMounts::default();
        elsewhere.learn(&BTreeMap::from([(this_mount + 100_000, PathBuf::from("/nowhere"))]));
        assert!(elsewhere.shows_volume(&out_file));
    }
}
