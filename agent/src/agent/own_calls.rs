//! Which traced syscalls are the agent's own (its quarantine masks, its probes), so that
//! it never reacts to them.
//!
//! The kernel names a caller by its thread-group id in the initial PID namespace, while
//! `getpid()` gives the agent's id in the PID namespace it runs in. The two differ
//! wherever the node itself runs in a PID namespace (kind and other nodes in containers,
//! the real-node test): there, comparing with `getpid()` let the agent take its own mask
//! for a second pod's publish and re-quarantine it in an endless loop. So the agent makes
//! one marker syscall at start-up, a `umount2` of a path that does not exist, and learns
//! its kernel-side id from that event.

use std::{ffi::OsStr, os::unix::ffi::OsStrExt as _, path::PathBuf};

use tracing::{info, warn};

use crate::kernel::decode::{Call, Event};

pub struct OwnCalls {
    marker: PathBuf,
    /// The agent's thread-group id as the kernel reports it, once the marker was seen.
    kernel_tgid: Option<u32>,
    /// `getpid()`: right until the marker is seen wherever the agent shares the initial
    /// PID namespace.
    local_pid: u32,
}

impl OwnCalls {
    /// Makes the marker syscall; call it once the tracing programs are attached.
    pub fn announce() -> Self {
        let local_pid = std::process::id();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        let marker = PathBuf::from(format!("/volguard-own-calls-marker-{local_pid}-{nanos}"));
        // ENOENT is the expected answer; the syscall's event is what counts.
        if let Err(e) = nix::mount::umount2(&marker, nix::mount::MntFlags::empty())
            && e != nix::errno::Errno::ENOENT
        {
            warn!("the marker umount2 of {} answered {e} (expected ENOENT)", marker.display());
        }
        Self::new(marker, local_pid)
    }

    fn new(marker: PathBuf, local_pid: u32) -> Self {
        Self { marker, kernel_tgid: None, local_pid }
    }

    /// True when `event` was made by the agent (the marker included).
    pub fn is_own(&mut self, event: &Event) -> bool {
        if let Some(tgid) = self.kernel_tgid {
            return event.caller.tgid == tgid;
        }
        if let Call::Umount { target, .. } = &event.call
            && OsStr::from_bytes(target.as_bytes()) == self.marker.as_os_str()
        {
            self.kernel_tgid = Some(event.caller.tgid);
            if event.caller.tgid != self.local_pid {
                info!(
                    "the agent is pid {} to the kernel and {} in its own PID namespace: its own mounts are told apart by the former",
                    event.caller.tgid, self.local_pid
                );
            }
            return true;
        }
        event.caller.tgid == self.local_pid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::decode::{Caller, RawString};

    fn umount(tgid: u32, target: &str) -> Event {
        Event {
            caller: Caller { pid: tgid, tgid, ..Caller::default() },
            start_ns: 0,
            duration_ns: 0,
            ret: -2,
            call: Call::Umount { target: RawString { bytes: target.into(), truncated: false }, flags: 0 },
        }
    }

    #[test]
    fn the_marker_teaches_the_kernel_side_id() {
        let mut own = OwnCalls::new("/marker".into(), 7);
        // Before the marker, getpid() is all there is.
        assert!(own.is_own(&umount(7, "/x")));
        assert!(!own.is_own(&umount(4321, "/x")));
        // The marker comes from pid 4321 as the kernel sees the agent (nested PID namespace).
        assert!(own.is_own(&umount(4321, "/marker")));
        assert!(own.is_own(&umount(4321, "/var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount")));
        // From then on, a process that happens to be pid 7 to the kernel is someone else.
        assert!(!own.is_own(&umount(7, "/x")));
    }

    #[test]
    fn a_marker_with_another_path_teaches_nothing() {
        let mut own = OwnCalls::new("/marker".into(), 7);
        assert!(!own.is_own(&umount(4321, "/marker-of-another-agent")));
        assert!(!own.is_own(&umount(4321, "/x")));
    }
}
