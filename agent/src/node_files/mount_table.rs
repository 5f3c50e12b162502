//! The mount table (`/proc/<pid>/mountinfo`), read with the procfs crate one line at a
//! time so that one odd line is a counted skip, not a lost table. What it means for
//! volumes and owners is the node model's `Mounts`.

use std::{
    ffi::OsStr,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use procfs::process::{MountInfo, MountOptFields};

/// The host's mount table, as the agent reads it by default.
pub const HOST_MOUNTINFO: &str = "/proc/1/mountinfo";

/// One mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Mount IDs grow with time (until reused), so a lower ID was mounted earlier.
    pub id: i32,
    /// The mount this one is mounted on (its own id for the namespace's root).
    pub parent: i32,
    pub mount_point: PathBuf,
    pub fs_type: String,
    /// The mount source (device, `tmpfs` name, ...), as the kernel shows it.
    pub source: String,
    /// The filesystem's device, `major:minor`: with `root`, what the mount shows.
    pub device: String,
    /// The directory of the filesystem the mount shows (`/` for a whole filesystem; a bind
    /// shows the directory it was made from).
    pub root: PathBuf,
    /// In a shared peer group (`shared:N`): mounts under it propagate both ways between
    /// namespaces (a container's `Bidirectional` volume, the node's own root).
    pub shared: bool,
}

/// A parsed mount table and the lines that could not be read.
#[derive(Debug, Default)]
pub struct MountTable {
    pub mounts: Vec<Mount>,
    /// `(line number, reason)` of each skipped line.
    pub skipped: Vec<(usize, String)>,
}

impl MountTable {
    pub fn parse(text: &[u8]) -> Self {
        let mut table = Self::default();
        for (index, line) in text.split(|&b| b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
            match parse_line(line) {
                Ok(mount) => table.mounts.push(mount),
                Err(reason) => table.skipped.push((index + 1, reason)),
            }
        }
        table
    }

    pub fn read(path: &Path) -> std::io::Result<Self> {
        std::fs::read(path).map(|text| Self::parse(&text))
    }

    /// Where the paths of `mountinfo` can be reached from here: the root of the process
    /// or thread whose table it is (`/proc/<pid>/mountinfo` → `/proc/<pid>/root`); `None`
    /// for a table read from a file.
    pub fn root_of(mountinfo: &Path) -> Option<PathBuf> {
        let in_proc = mountinfo.starts_with("/proc") && mountinfo.file_name() == Some(OsStr::new("mountinfo"));
        in_proc.then(|| mountinfo.with_file_name("root"))
    }

    pub fn is_mount_point(&self, path: &Path) -> bool {
        self.mounts.iter().any(|m| m.mount_point == path)
    }

    /// What the table's `/` shows (the top mount there): its device and root.
    pub fn root_shown(&self) -> Option<(&str, &Path)> {
        let root = self.mounts.iter().rev().find(|m| m.mount_point == Path::new("/"))?;
        Some((root.device.as_str(), root.root.as_path()))
    }
}

fn parse_line(line: &[u8]) -> Result<Mount, String> {
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    let info = MountInfo::from_line(text).map_err(|e| format!("not a mountinfo line: {e}"))?;
    let mount_point = unescape(info.mount_point.as_os_str().as_bytes());
    let root = unescape(info.root.as_bytes());
    Ok(Mount {
        id: info.mnt_id,
        parent: info.pid,
        mount_point: PathBuf::from(OsStr::from_bytes(&mount_point)),
        fs_type: info.fs_type,
        source: info.mount_source.unwrap_or_default(),
        device: info.majmin,
        root: PathBuf::from(OsStr::from_bytes(&root)),
        shared: info.opt_fields.iter().any(|f| matches!(f, MountOptFields::Shared(_))),
    })
}

/// Decodes mountinfo's `\ooo` escapes (space, tab, newline, backslash); procfs leaves them.
/// The kernel escapes bytes, so the first digit is at most 3: `\777` is not an escape
/// (it would not fit a byte) and stays as written.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|d| {
            field[i] == b'\\' && (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: i32, mount_point: &str) -> String {
        format!("{id} 30 8:1 /volumes/x {mount_point} rw,relatime shared:1 - ext4 /dev/sdb rw\n")
    }

    #[test]
    fn a_process_table_is_reached_through_that_process_root_a_file_is_not() {
        let root = |p: &str| MountTable::root_of(Path::new(p));
        assert_eq!(root("/proc/1/mountinfo"), Some(PathBuf::from("/proc/1/root")));
        assert_eq!(root("/proc/7/task/9/mountinfo"), Some(PathBuf::from("/proc/7/task/9/root")));
        assert_eq!(root("/proc/self/mountinfo"), Some(PathBuf::from("/proc/self/root")));
        assert_eq!(root("/tmp/fixtures/mountinfo"), None);
        assert_eq!(root("/proc/1/mounts"), None);
    }

    #[test]
    fn escapes_are_decoded_and_bad_lines_are_counted_skips() {
        let mut text = line(40, r"/mnt/a\040b").into_bytes();
        text.extend_from_slice(b"this is not mountinfo\n");
        text.extend_from_slice(b"41 30 8:1 / /mnt/\xff rw - ext4 /dev/sdb rw\n");
        text.extend_from_slice(line(42, "/mnt/c").as_bytes());
        let table = MountTable::parse(&text);
        let points: Vec<_> = table.mounts.iter().map(|m| (m.id, m.mount_point.clone())).collect();
        assert_eq!(points, vec![(40, PathBuf::from("/mnt/a b")), (42, PathBuf::from("/mnt/c"))]);
        assert_eq!(table.skipped.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![2, 3]);
        assert!(table.skipped[1].1.contains("UTF-8"));
        assert!(table.is_mount_point(Path::new("/mnt/a b")));
    }

    #[test]
    fn the_root_shown_is_the_top_mount_at_slash() {
        let node = MountTable::parse(b"20 1 8:1 / / rw - ext4 /dev/sda1 rw\n21 20 0:5 / /proc rw - proc proc rw\n");
        assert_eq!(node.root_shown(), Some(("8:1", Path::new("/"))));
        // A container's: its image's layer stacked over the copy of the node's root.
        let container =
            MountTable::parse(b"20 1 8:1 / / rw - ext4 /dev/sda1 rw\n90 20 0:77 / / rw - overlay overlay rw\n");
        assert_eq!(container.root_shown(), Some(("0:77", Path::new("/"))));
        assert_eq!(MountTable::parse(&line(40, "/mnt/a").into_bytes()).root_shown(), None);
    }

    /// Found by `cargo xtask fuzz` (target mountinfo): `\777` overflowed a byte.
    #[test]
    fn octal_look_alikes_that_do_not_fit_a_byte_stay_as_written() {
        assert_eq!(unescape(br"/a\777b\400c\377d\134"), b"/a\\777b\\400c\xffd\\".to_vec());
        let table = MountTable::parse(line(7, r"/mnt/x\777").as_bytes());
        assert_eq!(table.mounts[0].mount_point, PathBuf::from(r"/mnt/x\777"));
    }

    #[test]
    fn the_upstream_fixture_parses_without_skips() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "tests/fixtures/real-world/cat1_mountinfo_upstream_mount-utils_testdata_gce-pd_subpath_nfs_iscsi.mountinfo",
        );
        let table = MountTable::read(&path).unwrap();
        assert_eq!(table.skipped, vec![], "every line of a real mountinfo parses");
        assert!(table.mounts.len() >= 15);
    }

    proptest::proptest! {
        /// Any bytes: every line is a mount or a counted skip, never a panic or a lost line.
        #[test]
        fn any_bytes_parse_or_skip_line_by_line(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1024)) {
            let table = MountTable::parse(&bytes);
            let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
            proptest::prop_assert_eq!(table.mounts.len() + table.skipped.len(), lines);
        }

        /// Mountinfo-shaped lines with arbitrary mount points, escapes included.
        #[test]
        fn odd_mount_points_never_panic(point in "[ -~\\\\]{0,64}") {
            let _ = MountTable::parse(line(7, &format!("/{point}")).as_bytes());
        }
    }
}
