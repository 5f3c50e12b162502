//! fanotify notices of changes with file identifiers (`FAN_REPORT_FID`,
//! `FAN_REPORT_DFID_NAME`): an entry created, deleted or moved in a marked directory, and
//! a file's attributes (`chmod`, `chown`, `utimensat`, xattrs, link count) or contents
//! (writes, `truncate`) changed. What quarantine mode reads to report another pod's
//! changes of an owned volume, by whichever path, mount or namespace they were made: a
//! mark is on the volume's directories themselves ([`ChangeReach::Directory`]: inodes, not
//! mounts) or on its whole filesystem ([`ChangeReach::Filesystem`]).
//!
//! [`ChangeWatch`] owns the fanotify descriptor; [`parse`] decodes what a read returned
//! and never panics on a short or malformed buffer.

use std::{
    ffi::OsString,
    io,
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::ffi::{OsStrExt, OsStringExt},
    },
    path::Path,
};

use super::{METADATA_LEN, MarkError, NoticeError, mark_path, records, u32_at, u64_at};

/// The changes a mark asks for. `FAN_ONDIR`: of directories too.
const CHANGES: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ATTRIB
    | libc::FAN_MODIFY
    | libc::FAN_ONDIR;
/// An info record's header: `info_type` (u8), `pad` (u8), `len` (u16).
const INFO_HEADER_LEN: usize = 4;
/// `struct fanotify_event_info_fid`: the header, `fsid` (8 bytes), then a
/// `struct file_handle`: `handle_bytes` (u32), `handle_type` (i32), the handle.
const FID_HANDLE_AT: usize = INFO_HEADER_LEN + 8;
const HANDLE_HEADER_LEN: usize = 8;
/// `MAX_HANDLE_SZ`.
const MAX_HANDLE: usize = 128;

/// What kind of change a notice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChangeKind {
    /// An entry made: `creat`, `mkdir`, `mknod`, `symlink`, a `link` into it.
    Create,
    /// An entry removed: `unlink`, `rmdir`.
    Delete,
    /// An entry moved out of, into or within a directory.
    Rename,
    /// Attributes: mode, owner, times, xattrs, link count.
    Attributes,
    /// Contents: a write, a `truncate`.
    Contents,
}

impl ChangeKind {
    /// Every kind, in the order a notice's kinds are listed.
    pub const ALL: [ChangeKind; 5] =
        [ChangeKind::Create, ChangeKind::Delete, ChangeKind::Rename, ChangeKind::Attributes, ChangeKind::Contents];

    fn bits(self) -> u64 {
        match self {
            ChangeKind::Create => libc::FAN_CREATE,
            ChangeKind::Delete => libc::FAN_DELETE,
            ChangeKind::Rename => libc::FAN_MOVED_FROM | libc::FAN_MOVED_TO,
            ChangeKind::Attributes => libc::FAN_ATTRIB,
            ChangeKind::Contents => libc::FAN_MODIFY,
        }
    }

    /// How logs and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            ChangeKind::Create => "create",
            ChangeKind::Delete => "delete",
            ChangeKind::Rename => "rename",
            ChangeKind::Attributes => "attributes",
            ChangeKind::Contents => "contents",
        }
    }
}

/// A directory as fanotify identifies it: its file handle's type and bytes (the
/// filesystem is the mark's).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirHandle {
    kind: i32,
    bytes: Vec<u8>,
}

impl DirHandle {
    /// The handle of the directory at `path` (`name_to_handle_at`).
    pub fn of(path: &Path) -> io::Result<Self> {
        #[repr(C)]
        struct Handle {
            bytes: u32,
            kind: i32,
            handle: [u8; MAX_HANDLE],
        }
        let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mut handle = Handle { bytes: MAX_HANDLE as u32, kind: 0, handle: [0; MAX_HANDLE] };
        let mut mount_id: libc::c_int = 0;
        // SAFETY: `handle` is a `struct file_handle` with room for MAX_HANDLE_SZ bytes, and
        // the path is NUL-terminated; both outlive the call.
        let done = unsafe {
            libc::syscall(
                libc::SYS_name_to_handle_at,
                libc::AT_FDCWD,
                c_path.as_ptr(),
                (&raw mut handle).cast::<libc::c_void>(),
                &raw mut mount_id,
                0,
            )
        };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        let len = (handle.bytes as usize).min(MAX_HANDLE);
        Ok(Self { kind: handle.kind, bytes: handle.handle[..len].to_vec() })
    }
}

/// What the kernel said about one change.
#[derive(Debug, PartialEq, Eq)]
pub enum ChangeNotice {
    /// Process `pid` made the changes `kinds` (one notice may carry several: the kernel
    /// merges a process's changes of one object) to the entry `name` of directory `dir`
    /// where the notice names one, else to the object `object`.
    Changed {
        pid: i32,
        kinds: Vec<ChangeKind>,
        /// The entry is a directory.
        directory: bool,
        dir: Option<DirHandle>,
        name: Option<OsString>,
    },
    /// The queue overflowed: changes were dropped uncounted.
    Overflow,
}

/// What a mark covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeReach {
    /// The directory at the path (its inode, by whichever path or mount it is reached):
    /// changes of its entries and of its entries' attributes and contents.
    Directory,
    /// The whole filesystem at the path: every change on it.
    Filesystem,
}

/// Why the watch could not be set up or a place not marked.
#[derive(Debug, thiserror::Error)]
pub enum ChangeWatchError {
    #[error("fanotify_init(FAN_REPORT_FID|FAN_REPORT_DFID_NAME): {0} (needs Linux 5.9 and CAP_SYS_ADMIN)")]
    Init(#[source] io::Error),
    #[error(transparent)]
    Mark(#[from] MarkError),
}

/// A fanotify group told of changes on the directories and filesystems it marks.
/// Non-blocking: a read with nothing queued answers `WouldBlock`.
#[derive(Debug)]
pub struct ChangeWatch {
    fd: OwnedFd,
}

impl ChangeWatch {
    /// A new group; its queue keeps the kernel's default bound (16384 notices), past which
    /// the kernel queues one [`ChangeNotice::Overflow`].
    pub fn new() -> Result<Self, ChangeWatchError> {
        let flags = libc::FAN_CLASS_NOTIF
            | libc::FAN_CLOEXEC
            | libc::FAN_NONBLOCK
            | libc::FAN_REPORT_FID
            | libc::FAN_REPORT_DFID_NAME;
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe { libc::fanotify_init(flags, libc::O_RDONLY as libc::c_uint) };
        if raw < 0 {
            return Err(ChangeWatchError::Init(io::Error::last_os_error()));
        }
        // SAFETY: fanotify_init returned a new descriptor that nothing else owns.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(raw) } })
    }

    /// Starts telling of changes at `path`.
    pub fn watch(&self, path: &Path, reach: ChangeReach) -> Result<(), ChangeWatchError> {
        let (object, mask, what) = match reach {
            ChangeReach::Directory => (0, CHANGES | libc::FAN_EVENT_ON_CHILD, "FAN_MARK_INODE"),
            ChangeReach::Filesystem => (libc::FAN_MARK_FILESYSTEM, CHANGES, "FAN_MARK_FILESYSTEM"),
        };
        // A directory mark lands on a directory only, and never on what a symlink put at
        // the path names (a symlink to `/` would mark the node's root).
        let only_dir = match reach {
            ChangeReach::Directory => libc::FAN_MARK_ONLYDIR | libc::FAN_MARK_DONT_FOLLOW,
            ChangeReach::Filesystem => 0,
        };
        Ok(mark_path(&self.fd, libc::FAN_MARK_ADD | object | only_dir, mask, path, what)?)
    }
}

super::group_descriptor!(ChangeWatch);

/// Decodes every record of one read.
pub fn parse(buf: &[u8]) -> Vec<Result<ChangeNotice, NoticeError>> {
    records(buf).map(|record| parse_record(record?)).collect()
}

fn parse_record(record: &[u8]) -> Result<ChangeNotice, NoticeError> {
    let version = record[4];
    if version != libc::FANOTIFY_METADATA_VERSION {
        return Err(NoticeError::Version(version));
    }
    let mask = u64_at(record, 8).unwrap_or(0);
    if mask & libc::FAN_Q_OVERFLOW != 0 {
        return Ok(ChangeNotice::Overflow);
    }
    let kinds: Vec<ChangeKind> = ChangeKind::ALL.into_iter().filter(|k| mask & k.bits() != 0).collect();
    if kinds.is_empty() {
        return Err(NoticeError::UnknownMask { mask });
    }
    let pid = u32_at(record, 20).map_or(0, |pid| pid as i32);
    let metadata_len = u16::from_ne_bytes([record[6], record[7]]) as usize;
    let (mut dir, mut name) = (None, None);
    for info in infos(record.get(metadata_len.max(METADATA_LEN)..).unwrap_or_default()) {
        if info[0] == libc::FAN_EVENT_INFO_TYPE_DFID_NAME {
            (dir, name) = dir_and_name(info).map_or((None, None), |(d, n)| (Some(d), Some(n)));
        }
    }
    Ok(ChangeNotice::Changed { pid, kinds, directory: mask & libc::FAN_ONDIR != 0, dir, name })
}

/// The info records after the metadata, each framed by its header's length.
fn infos(mut rest: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let len = u16::from_ne_bytes([*rest.get(2)?, *rest.get(3)?]) as usize;
        if len < INFO_HEADER_LEN || len > rest.len() {
            return None;
        }
        let (info, next) = rest.split_at(len);
        rest = next;
        Some(info)
    })
}

/// A `FAN_EVENT_INFO_TYPE_DFID_NAME` record's directory and entry name.
fn dir_and_name(info: &[u8]) -> Option<(DirHandle, OsString)> {
    let bytes = u32_at(info, FID_HANDLE_AT)? as usize;
    let kind = u32_at(info, FID_HANDLE_AT + 4)? as i32;
    let handle_at = FID_HANDLE_AT + HANDLE_HEADER_LEN;
    let handle = info.get(handle_at..handle_at + bytes)?.to_vec();
    let name = info.get(handle_at + bytes..)?;
    let name = &name[..name.iter().position(|b| *b == 0)?];
    Some((DirHandle { kind, bytes: handle }, OsString::from_vec(name.to_vec())))
}

const _: () = assert!(METADATA_LEN == 24);

#[cfg(test)]
mod tests {
    use super::*;

    /// One change notice as the kernel writes it, with a DFID_NAME record.
    fn record(mask: u64, pid: i32, handle: &[u8], name: &[u8]) -> Vec<u8> {
        let mut info = vec![libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 0, 0, 0];
        info.extend_from_slice(&[7; 8]);
        info.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        info.extend_from_slice(&1i32.to_ne_bytes());
        info.extend_from_slice(handle);
        info.extend_from_slice(name);
        info.push(0);
        while info.len() % 4 != 0 {
            info.push(0);
        }
        let info_len = info.len() as u16;
        info[2..4].copy_from_slice(&info_len.to_ne_bytes());
        let mut b = Vec::new();
        b.extend_from_slice(&((METADATA_LEN + info.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&[libc::FANOTIFY_METADATA_VERSION, 0]);
        b.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&(-1i32).to_ne_bytes());
        b.extend_from_slice(&pid.to_ne_bytes());
        b.extend_from_slice(&info);
        b
    }

    #[test]
    fn a_change_decodes_with_its_kinds_directory_and_name() {
        let buf = [
            record(libc::FAN_DELETE | libc::FAN_ONDIR, 42, &[1, 2, 3, 4], b"subdir"),
            record(libc::FAN_ATTRIB | libc::FAN_MODIFY, 7, &[9; 8], b"file"),
        ]
        .concat();
        let notices = parse(&buf);
        let ChangeNotice::Changed { pid, kinds, directory, dir, name } = notices[0].as_ref().unwrap() else {
            panic!("{notices:?}")
        };
        assert_eq!((*pid, kinds.as_slice(), *directory), (42, &[ChangeKind::Delete][..], true));
        assert_eq!(dir.as_ref().unwrap().bytes, [1, 2, 3, 4]);
        assert_eq!(name.as_deref(), Some(std::ffi::OsStr::new("subdir")));
        let ChangeNotice::Changed { kinds, directory, .. } = notices[1].as_ref().unwrap() else { panic!() };
        assert_eq!((kinds.as_slice(), *directory), (&[ChangeKind::Attributes, ChangeKind::Contents][..], false));
    }

    #[test]
    fn an_open_is_not_a_change_and_torn_buffers_are_errors_not_panics() {
        assert!(matches!(parse(&record(libc::FAN_OPEN, 1, &[1], b"x"))[0], Err(NoticeError::UnknownMask { .. })));
        let whole = record(libc::FAN_CREATE, 1, &[1, 2], b"name");
        for cut in 0..whole.len() {
            let _ = parse(&whole[..cut]);
        }
        let mut lying = whole.clone();
        lying[METADATA_LEN + 12] = 200; // a handle longer than the record
        assert!(matches!(parse(&lying)[0], Ok(ChangeNotice::Changed { dir: None, .. })));
    }
}
