//! fanotify, raw: the framing every notice shares (here), and one group kind per job —
//! mount notifications (here), open notices (`open_watch`), change notices with file
//! identifiers (`change_watch`).
//!
//! fanotify mount notifications (Linux 6.15+): the kernel tells a listener which mounts
//! were attached to and detached from one mount namespace, by their 64-bit unique mount
//! id. No program runs on any syscall, so nothing else on the node pays for them; in
//! exchange a notice names no caller, no duration and no failed attempt.
//!
//! [`MountWatch`] owns the fanotify descriptor; [`parse`] decodes what a read returned
//! and never panics on a short or malformed buffer.

/// `read` (queued notices into a buffer, for the kind's `parse`), `AsFd` and `AsRawFd` for
/// a watch that holds its fanotify group's descriptor in `fd`: the same for every kind.
macro_rules! group_descriptor {
    ($watch:ty) => {
        impl $watch {
            /// Reads queued notices into `buf` (a few KiB holds hundreds); the bytes go to
            /// this kind's `parse`.
            pub fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
                // SAFETY: `buf` is valid for writes of its length.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
            }
        }

        impl std::os::fd::AsFd for $watch {
            fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
                std::os::fd::AsFd::as_fd(&self.fd)
            }
        }

        impl std::os::fd::AsRawFd for $watch {
            fn as_raw_fd(&self) -> std::os::fd::RawFd {
                std::os::fd::AsRawFd::as_raw_fd(&self.fd)
            }
        }
    };
}
use group_descriptor;

pub mod change_watch;
pub mod open_watch;

use std::{
    fs::File,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// Constants libc does not have yet, from include/uapi/linux/fanotify.h (Linux 6.15).
mod uapi {
    /// fanotify_init: report mount events (needs `FAN_MARK_MNTNS` marks).
    pub const FAN_REPORT_MNT: libc::c_uint = 0x0000_4000;
    /// fanotify_mark: the object is a mount namespace, named by an nsfs descriptor.
    pub const FAN_MARK_MNTNS: libc::c_uint = 0x0000_0110;
    /// A mount was attached to the namespace.
    pub const FAN_MNT_ATTACH: u64 = 0x0100_0000;
    /// A mount was detached from the namespace (both bits: it was moved).
    pub const FAN_MNT_DETACH: u64 = 0x0200_0000;
    /// The info record carrying the mount id (`struct fanotify_event_info_mnt`).
    pub const FAN_EVENT_INFO_TYPE_MNT: u8 = 7;
    /// `struct fanotify_event_info_mnt`: a 4-byte header, padding, then `__u64 mnt_id`.
    pub const INFO_MNT_ID_OFFSET: usize = 8;
    pub const INFO_MNT_LEN: usize = 16;
}

/// A mark a watch could not make: which kind, where, and why.
#[derive(Debug, thiserror::Error)]
#[error("fanotify_mark({what}) on {path}: {source}")]
pub struct MarkError {
    pub what: &'static str,
    pub path: String,
    #[source]
    pub source: io::Error,
}

/// `fanotify_mark` of the object at `path` on group `fd`; `what` names the kind of mark.
fn mark_path(
    fd: &OwnedFd,
    flags: libc::c_uint,
    mask: u64,
    path: &std::path::Path,
    what: &'static str,
) -> Result<(), MarkError> {
    use std::os::unix::ffi::OsStrExt as _;
    let error = |source| MarkError { what, path: path.display().to_string(), source };
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| error(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: the descriptor is open and the path NUL-terminated for the call.
    let marked = unsafe { libc::fanotify_mark(fd.as_raw_fd(), flags, mask, libc::AT_FDCWD, c_path.as_ptr()) };
    if marked < 0 { Err(error(io::Error::last_os_error())) } else { Ok(()) }
}

/// `struct fanotify_event_metadata`: `event_len` (u32), `vers` (u8), `reserved` (u8),
/// `metadata_len` (u16), `mask` (u64), `fd` (s32), `pid` (s32).
pub(super) const METADATA_LEN: usize = 24;
/// `FANOTIFY_METADATA_VERSION`.
const METADATA_VERSION: u8 = libc::FANOTIFY_METADATA_VERSION;
/// An info record's header: `info_type` (u8), `pad` (u8), `len` (u16).
const INFO_HEADER_LEN: usize = 4;

/// What the kernel said about one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notice {
    Attached(u64),
    Detached(u64),
    /// Detached from one place and attached to another (`move_mount`, `MS_MOVE`).
    Moved(u64),
    /// The queue overflowed: notices were dropped, the listener must resync.
    Overflow,
}

/// A record that could not be read; the rest of the buffer may still be.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoticeError {
    /// Fewer bytes than a record's metadata, or a length running past the buffer: the
    /// rest of the buffer cannot be framed.
    #[error("truncated record: {len} bytes left, the record claims {claimed}")]
    Truncated { len: usize, claimed: usize },
    #[error("record metadata version {0}, this agent reads version {METADATA_VERSION}")]
    Version(u8),
    #[error("mount notice (mask {mask:#x}) without a mount id record")]
    NoMountId { mask: u64 },
    #[error("notice of an unexpected kind (mask {mask:#x})")]
    UnknownMask { mask: u64 },
}

/// Why the watch could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("fanotify_init(FAN_REPORT_MNT): {0} (mount notifications need Linux 6.15 and CAP_SYS_ADMIN)")]
    Init(#[source] io::Error),
    #[error("fanotify_mark(FAN_MARK_MNTNS) on {namespace}: {source}")]
    Mark {
        namespace: String,
        #[source]
        source: io::Error,
    },
}

/// A fanotify group watching one mount namespace for attached and detached mounts.
/// Non-blocking: a read with nothing queued answers `WouldBlock`.
#[derive(Debug)]
pub struct MountWatch {
    fd: OwnedFd,
}

impl MountWatch {
    /// Watches `namespace` (an open `/proc/<pid>/ns/mnt`; `name` is for errors). The
    /// queue keeps the kernel's default bound (16384 notices): past it the kernel drops
    /// notices and queues one [`Notice::Overflow`], after which the caller resyncs.
    pub fn new(namespace: &File, name: &str) -> Result<Self, WatchError> {
        let flags = libc::FAN_CLASS_NOTIF | uapi::FAN_REPORT_MNT | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe { libc::fanotify_init(flags, 0) };
        if raw < 0 {
            return Err(WatchError::Init(io::Error::last_os_error()));
        }
        // SAFETY: fanotify_init returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mask = uapi::FAN_MNT_ATTACH | uapi::FAN_MNT_DETACH;
        // SAFETY: both descriptors are open for the call; a null path is what
        // FAN_MARK_MNTNS expects.
        let marked = unsafe {
            libc::fanotify_mark(
                fd.as_raw_fd(),
                libc::FAN_MARK_ADD | uapi::FAN_MARK_MNTNS,
                mask,
                namespace.as_raw_fd(),
                std::ptr::null(),
            )
        };
        if marked < 0 {
            return Err(WatchError::Mark { namespace: name.to_owned(), source: io::Error::last_os_error() });
        }
        Ok(Self { fd })
    }
}

group_descriptor!(MountWatch);

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

pub(super) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(super) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes every record of one read. A record that cannot be framed ends the buffer
/// (reported once); a framed record that cannot be understood is reported and skipped.
pub fn parse(buf: &[u8]) -> Vec<Result<Notice, NoticeError>> {
    records(buf).map(|record| parse_record(record?)).collect()
}

/// The records of one read, each framed by its metadata's length (at least the
/// metadata's). A record that cannot be framed is an error and ends the buffer.
pub(super) fn records(buf: &[u8]) -> impl Iterator<Item = Result<&[u8], NoticeError>> {
    let mut rest = Some(buf);
    std::iter::from_fn(move || {
        let buf = rest.take().filter(|b| !b.is_empty())?;
        let claimed = u32_at(buf, 0).map_or(0, |n| n as usize);
        if buf.len() < METADATA_LEN || claimed < METADATA_LEN || claimed > buf.len() {
            return Some(Err(NoticeError::Truncated { len: buf.len(), claimed }));
        }
        let (record, next) = buf.split_at(claimed);
        rest = Some(next);
        Some(Ok(record))
    })
}

/// One framed record (its length checked against the metadata's).
fn parse_record(record: &[u8]) -> Result<Notice, NoticeError> {
    let version = record[4];
    if version != METADATA_VERSION {
        return Err(NoticeError::Version(version));
    }
    let mask = u64_at(record, 8).unwrap_or(0);
    if mask & libc::FAN_Q_OVERFLOW != 0 {
        return Ok(Notice::Overflow);
    }
    let kind = mask & (uapi::FAN_MNT_ATTACH | uapi::FAN_MNT_DETACH);
    if kind == 0 {
        return Err(NoticeError::UnknownMask { mask });
    }
    let metadata_len = u16_at(record, 6).map_or(METADATA_LEN, usize::from).max(METADATA_LEN);
    let mnt_id = mount_id(record.get(metadata_len..).unwrap_or_default()).ok_or(NoticeError::NoMountId { mask })?;
    Ok(match kind {
        uapi::FAN_MNT_ATTACH => Notice::Attached(mnt_id),
        uapi::FAN_MNT_DETACH => Notice::Detached(mnt_id),
        _ => Notice::Moved(mnt_id),
    })
}

/// The mount id of the first `FAN_EVENT_INFO_TYPE_MNT` record among `infos`.
fn mount_id(mut infos: &[u8]) -> Option<u64> {
    while infos.len() >= INFO_HEADER_LEN {
        let len = usize::from(u16_at(infos, 2)?);
        if len < INFO_HEADER_LEN || len > infos.len() {
            return None;
        }
        if infos[0] == uapi::FAN_EVENT_INFO_TYPE_MNT && len >= uapi::INFO_MNT_LEN {
            return u64_at(infos, uapi::INFO_MNT_ID_OFFSET);
        }
        infos = &infos[len..];
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One record as the kernel writes it: metadata, then the mount id record.
    pub(crate) fn record(mask: u64, mnt_id: u64) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((METADATA_LEN + uapi::INFO_MNT_LEN) as u32).to_ne_bytes());
        b.extend_from_slice(&[METADATA_VERSION, 0]);
        b.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&(-1i32).to_ne_bytes()); // FAN_NOFD
        b.extend_from_slice(&0i32.to_ne_bytes()); // no pid for mount notices
        b.extend_from_slice(&[uapi::FAN_EVENT_INFO_TYPE_MNT, 0]);
        b.extend_from_slice(&(uapi::INFO_MNT_LEN as u16).to_ne_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&mnt_id.to_ne_bytes());
        b
    }

    /// The overflow record: metadata only.
    pub(crate) fn overflow() -> Vec<u8> {
        let mut b = record(libc::FAN_Q_OVERFLOW, 0);
        b.truncate(METADATA_LEN);
        b[..4].copy_from_slice(&(METADATA_LEN as u32).to_ne_bytes());
        b
    }

    pub(crate) const ATTACH: u64 = uapi::FAN_MNT_ATTACH;
    pub(crate) const DETACH: u64 = uapi::FAN_MNT_DETACH;

    #[test]
    fn attach_detach_move_and_overflow_decode() {
        let buf = [record(ATTACH, 7), record(DETACH, 8), record(ATTACH | DETACH, 9), overflow()].concat();
        assert_eq!(
            parse(&buf),
            [Ok(Notice::Attached(7)), Ok(Notice::Detached(8)), Ok(Notice::Moved(9)), Ok(Notice::Overflow)]
        );
    }

    #[test]
    fn short_and_malformed_records_are_errors_not_panics() {
        assert_eq!(parse(&[]), []);
        let whole = record(ATTACH, 7);
        assert_eq!(parse(&whole[..10]), [Err(NoticeError::Truncated { len: 10, claimed: 40 })]);
        // A good record, then one claiming more than the buffer holds: the first survives.
        let buf = [whole.clone(), whole[..30].to_vec()].concat();
        assert_eq!(parse(&buf), [Ok(Notice::Attached(7)), Err(NoticeError::Truncated { len: 30, claimed: 40 })]);
        let mut zero = whole.clone();
        zero[..4].copy_from_slice(&0u32.to_ne_bytes());
        assert_eq!(parse(&zero), [Err(NoticeError::Truncated { len: 40, claimed: 0 })], "no endless loop");
        let mut version = whole.clone();
        version[4] = 2;
        assert_eq!(parse(&version), [Err(NoticeError::Version(2))]);
        let mut no_info = whole.clone();
        no_info[24] = 1; // a FID record, not a mount id
        assert_eq!(parse(&no_info), [Err(NoticeError::NoMountId { mask: ATTACH })]);
        let mut bad_info_len = whole.clone();
        bad_info_len[26..28].copy_from_slice(&2u16.to_ne_bytes());
        assert_eq!(parse(&bad_info_len), [Err(NoticeError::NoMountId { mask: ATTACH })]);
        let mut long_meta = whole.clone();
        long_meta[6..8].copy_from_slice(&999u16.to_ne_bytes());
        assert_eq!(parse(&long_meta), [Err(NoticeError::NoMountId { mask: ATTACH })]);
        assert_eq!(parse(&record(0x20, 7)), [Err(NoticeError::UnknownMask { mask: 0x20 })]);
        // A bad record between two good ones is skipped, not the end.
        let buf = [whole.clone(), version, record(DETACH, 8)].concat();
        assert_eq!(parse(&buf), [Ok(Notice::Attached(7)), Err(NoticeError::Version(2)), Ok(Notice::Detached(8))]);
    }

    proptest::proptest! {
        /// Any bytes decode to notices or errors, never a panic or a loop.
        #[test]
        fn any_bytes_parse_cleanly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
