//! fanotify `FAN_OPEN` on chosen mounts and filesystems: for each open of a file there the
//! kernel queues the opening process's pid and a descriptor of the opened file. What
//! quarantine mode (no BPF LSM to refuse) reads to report another pod's opens of an owned
//! volume's files. One group per volume: every notice of a group is an open of that
//! volume's files, so no notice needs its path resolved. A group that [`Answers`] gets
//! `FAN_OPEN_PERM` instead: the open waits until the group allows or denies it.
//!
//! [`OpenWatch`] owns the fanotify descriptor; [`parse`] decodes what a read returned,
//! takes ownership of every descriptor in it (closed when dropped), and never panics.

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use super::{METADATA_LEN, MarkError, NoticeError, mark_path, records, u32_at, u64_at};

/// `FAN_NOFD`: a notice that carries no descriptor (an overflow).
const NO_FD: i32 = -1;

/// What the kernel said about one open.
#[derive(Debug)]
pub enum OpenNotice {
    /// Process `pid` opened `file` (a descriptor the agent must close: dropping it does).
    Opened { pid: i32, file: OwnedFd },
    /// Process `pid` is opening `file` and waits for [`OpenWatch::answer`] (a group that
    /// answers).
    Opening { pid: i32, file: OwnedFd },
    /// The queue overflowed: opens were dropped uncounted.
    Overflow,
}

/// Why the watch could not be set up or a place not watched.
#[derive(Debug, thiserror::Error)]
pub enum OpenWatchError {
    #[error("fanotify_init({class}): {source} (needs CAP_SYS_ADMIN)")]
    Init {
        class: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Mark(#[from] MarkError),
}

/// A fanotify group told of opens on the mounts and filesystems it marks. Non-blocking:
/// a read with nothing queued answers `WouldBlock`.
#[derive(Debug)]
pub struct OpenWatch {
    fd: OwnedFd,
    answers: Answers,
}

/// Whether a group is told of opens after the fact, or asked before each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answers {
    /// `FAN_OPEN`: told; the open has happened.
    No,
    /// `FAN_OPEN_PERM`: asked; every open through the marks waits for the answer (the
    /// kernel allows those still waiting when the group is closed).
    Yes,
}

/// What a mark covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reach {
    /// The mount at the path: opens through it, in whichever namespace.
    Mount,
    /// The filesystem at the path: opens through any of its mounts.
    Filesystem,
}

impl OpenWatch {
    /// A new group. The queue keeps the kernel's default bound (16384 notices): past it
    /// the kernel drops notices and queues one [`OpenNotice::Overflow`].
    pub fn new(answers: Answers) -> Result<Self, OpenWatchError> {
        let (class, class_name) = match answers {
            Answers::No => (libc::FAN_CLASS_NOTIF, "FAN_CLASS_NOTIF"),
            Answers::Yes => (libc::FAN_CLASS_CONTENT, "FAN_CLASS_CONTENT"),
        };
        let flags = class | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK;
        // The descriptors notices carry: read-only, and without updating the file's atime.
        let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC | libc::O_NOATIME) as libc::c_uint;
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe { libc::fanotify_init(flags, event_flags) };
        if raw < 0 {
            return Err(OpenWatchError::Init { class: class_name, source: io::Error::last_os_error() });
        }
        // SAFETY: fanotify_init returned a new descriptor that nothing else owns.
        Ok(Self { fd: unsafe { OwnedFd::from_raw_fd(raw) }, answers })
    }

    /// Starts telling of opens through the mount (or on the filesystem) at `path`.
    pub fn watch(&self, path: &Path, reach: Reach) -> Result<(), OpenWatchError> {
        self.mark(libc::FAN_MARK_ADD, path, reach)
    }

    /// Stops telling of opens at `path` (a mount that went is unmarked by the kernel).
    pub fn unwatch(&self, path: &Path, reach: Reach) -> Result<(), OpenWatchError> {
        self.mark(libc::FAN_MARK_REMOVE, path, reach)
    }

    fn mark(&self, action: libc::c_uint, path: &Path, reach: Reach) -> Result<(), OpenWatchError> {
        let (object, what) = match reach {
            Reach::Mount => (libc::FAN_MARK_MOUNT, "FAN_MARK_MOUNT"),
            Reach::Filesystem => (libc::FAN_MARK_FILESYSTEM, "FAN_MARK_FILESYSTEM"),
        };
        let mask = match self.answers {
            Answers::No => libc::FAN_OPEN,
            Answers::Yes => libc::FAN_OPEN_PERM,
        };
        Ok(mark_path(&self.fd, action | object, mask, path, what)?)
    }

    /// Allows or denies (`EPERM`) the open an [`OpenNotice::Opening`] asked about; `file`
    /// is its descriptor, to be closed after.
    pub fn answer(&self, file: &OwnedFd, allow: bool) -> io::Result<()> {
        let response = libc::fanotify_response {
            fd: file.as_raw_fd(),
            response: if allow { libc::FAN_ALLOW } else { libc::FAN_DENY },
        };
        let len = std::mem::size_of::<libc::fanotify_response>();
        // SAFETY: `response` is valid for reads of its size for the call.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const response).cast(), len) };
        if n < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }
}

super::group_descriptor!(OpenWatch);

/// Decodes every record of one read. Every descriptor a record carries is owned by the
/// result (closed when dropped), whether the record is understood or not.
pub fn parse(buf: &[u8]) -> Vec<Result<OpenNotice, NoticeError>> {
    records(buf)
        .map(|record| {
            let record = record?;
            let fd = u32_at(record, 16).map_or(NO_FD, |fd| fd as i32);
            // SAFETY: the kernel installed this descriptor in our table for this notice;
            // nothing else owns it.
            let file = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
            let mask = u64_at(record, 8).unwrap_or(0);
            let pid = u32_at(record, 20).map_or(0, |pid| pid as i32);
            // A process waits on a permission notice whatever else the record says: it
            // always goes back to be answered.
            let file = match file {
                Some(file) if mask & libc::FAN_OPEN_PERM != 0 => return Ok(OpenNotice::Opening { pid, file }),
                other => other,
            };
            let version = record[4];
            if version != libc::FANOTIFY_METADATA_VERSION {
                return Err(NoticeError::Version(version));
            }
            if mask & libc::FAN_Q_OVERFLOW != 0 {
                return Ok(OpenNotice::Overflow);
            }
            match file {
                Some(file) if mask & libc::FAN_OPEN != 0 => Ok(OpenNotice::Opened { pid, file }),
                _ => Err(NoticeError::UnknownMask { mask }),
            }
        })
        .collect()
}

const _: () = assert!(METADATA_LEN == 24);

#[cfg(test)]
mod tests {
    use super::*;

    /// One open notice as the kernel writes it.
    fn record(mask: u64, fd: i32, pid: i32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(METADATA_LEN as u32).to_ne_bytes());
        b.extend_from_slice(&[libc::FANOTIFY_METADATA_VERSION, 0]);
        b.extend_from_slice(&(METADATA_LEN as u16).to_ne_bytes());
        b.extend_from_slice(&mask.to_ne_bytes());
        b.extend_from_slice(&fd.to_ne_bytes());
        b.extend_from_slice(&pid.to_ne_bytes());
        b
    }

    fn a_descriptor() -> i32 {
        use std::os::fd::IntoRawFd;
        std::fs::File::open("/dev/null").unwrap().into_raw_fd()
    }

    #[test]
    fn opens_and_overflow_decode_and_every_descriptor_is_owned() {
        let fd = a_descriptor();
        let buf = [record(libc::FAN_OPEN, fd, 42), record(libc::FAN_Q_OVERFLOW, NO_FD, 0)].concat();
        let notices = parse(&buf);
        assert!(matches!(&notices[0], Ok(OpenNotice::Opened { pid: 42, file }) if file.as_raw_fd() == fd));
        assert!(matches!(notices[1], Ok(OpenNotice::Overflow)));
        drop(notices);
        // SAFETY: probing whether the descriptor is still open.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1, "the notice's descriptor was closed with it");
    }

    #[test]
    fn a_permission_notice_keeps_its_own_descriptor_for_the_answer() {
        let fd = a_descriptor();
        let notices = parse(&record(libc::FAN_OPEN_PERM, fd, 9));
        assert!(matches!(&notices[0], Ok(OpenNotice::Opening { pid: 9, file }) if file.as_raw_fd() == fd));
    }

    #[test]
    fn a_notice_of_another_kind_is_an_error_and_its_descriptor_still_closed() {
        let fd = a_descriptor();
        let notices = parse(&record(libc::FAN_CLOSE_WRITE, fd, 7));
        assert!(matches!(notices[0], Err(NoticeError::UnknownMask { .. })));
        drop(notices);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) }, -1);
    }

    #[test]
    fn torn_buffers_are_errors_not_panics() {
        let whole = record(libc::FAN_OPEN, NO_FD, 1);
        for cut in 0..whole.len() {
            let _ = parse(&whole[..cut]);
        }
    }
}
