//! The pod of each process the reporters of opens and changes judge, kept for as long as
//! that process lives. A pid alone names no process for long (it is reused once its
//! process is reaped), so each entry holds a pidfd of the process it was read for: the
//! pidfd becomes readable when that process exits, and from then on the entry is not
//! used. A live process is asked once (its `/proc/<pid>/cgroup`), not at each of its
//! notices: what keeps the owner's own opens and changes cheap.

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    sync::{Arc, Mutex},
};

use super::foreign_access::Opener;
use crate::node_files::caller_pod::CallerPods;

/// Processes remembered at most (each holds a descriptor); past it, the exited ones are
/// forgotten, and if none has, all.
const REMEMBERED: usize = 1024;

/// A process as the reporters judge it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reader {
    pub opener: Opener,
    /// Its command (`/proc/<pid>/comm`), empty if it could not be read.
    pub command: String,
}

/// Shared by every volume's reporters.
pub type SharedReaderPods = Arc<Mutex<ReaderPods>>;

#[derive(Default)]
pub struct ReaderPods {
    pods: CallerPods,
    live: HashMap<u32, (Reader, OwnedFd)>,
}

impl ReaderPods {
    pub fn shared() -> SharedReaderPods {
        Arc::new(Mutex::new(Self::default()))
    }

    /// Who process `tgid` is: remembered while it lives, else read now. A process gone
    /// before it could be read is [`Opener::Gone`] (not remembered).
    pub fn reader(&mut self, tgid: u32) -> Reader {
        if let Some((reader, pidfd)) = self.live.get(&tgid) {
            if !exited(pidfd) {
                return reader.clone();
            }
            self.live.remove(&tgid);
        }
        let pidfd = pidfd_open(tgid);
        let opener = match self.pods.pod_uid(tgid, 0) {
            Some(pod) => Opener::Pod(pod),
            None if Path::new(&format!("/proc/{tgid}")).exists() => Opener::Node,
            None => Opener::Gone,
        };
        let command = std::fs::read_to_string(format!("/proc/{tgid}/comm")).unwrap_or_default().trim_end().to_owned();
        let reader = Reader { opener, command };
        // Kept only where the process was still there after it was read: the answer is its.
        if let Some(pidfd) = pidfd.filter(|fd| !exited(fd) && reader.opener != Opener::Gone) {
            self.make_room();
            self.live.insert(tgid, (reader.clone(), pidfd));
        }
        reader
    }

    /// Takes live process `tgid` for `reader` (tests of the judges: a pod without a cgroup).
    #[cfg(test)]
    pub fn remember(&mut self, tgid: u32, reader: Reader) {
        let pidfd = pidfd_open(tgid).expect("a live process");
        self.live.insert(tgid, (reader, pidfd));
    }

    fn make_room(&mut self) {
        if self.live.len() < REMEMBERED {
            return;
        }
        self.live.retain(|_, (_, pidfd)| !exited(pidfd));
        if self.live.len() >= REMEMBERED {
            self.live.clear();
        }
    }
}

/// A pidfd of process `tgid`, if it is there.
fn pidfd_open(tgid: u32) -> Option<OwnedFd> {
    // SAFETY: plain syscall; the result is checked before use.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tgid as libc::pid_t, 0) };
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the pidfd's process has exited (its pidfd reads as ready).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(&raw mut poll, 1, 0) };
    ready != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_read_once_and_an_exited_one_afresh() {
        let mut pods = ReaderPods::default();
        let me = std::process::id();
        let first = pods.reader(me);
        assert_eq!(first.opener, Opener::Node, "the test runs in no pod's cgroup");
        assert!(pods.live.contains_key(&me), "a live process is remembered");
        assert_eq!(pods.reader(me), first);

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let seen = pods.reader(pid);
        child.wait().unwrap();
        // Reaped: its pid names no process, whatever was remembered for it.
        let after = pods.reader(pid);
        assert!(!pods.live.contains_key(&pid), "an exited process is forgotten");
        let _ = seen;
        assert_eq!(after.opener, Opener::Gone);
    }
}
