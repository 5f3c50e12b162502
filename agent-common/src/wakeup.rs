//! Which event records wake the agent at once.
//!
//! Each wake-up costs the mounting thread a cross-CPU wake and the agent a context switch
//! per record, which made a bind+umount cycle cost 1.6–3.7× on this project's machines
//! (BENCHMARKS.md). Most mounts on a node are not kubelet's (container runtimes, systemd),
//! and nothing the agent decides waits on them. So, once the agent has said where the
//! kubelet root is, a `mount(2)` or `umount2(2)` record whose paths are all absolute,
//! whole, outside `/proc` (fd paths) and differ from the kubelet root within its first
//! [`ROOT_PREFIX_LEN`] bytes is written without a wake-up; the agent reads it at its next
//! wake-up or timed drain ([`LAZY_DRAIN_MS`]), in order with the rest. Every other record,
//! and every record while the ring is half full, wakes it: by the kernel's own rule (a
//! wake-up only for the first unread record, so a burst costs one) unless a record written
//! without a wake-up may be unread ahead of it, then by a forced one. `.` and `..`
//! components are not looked at: a path that climbs back into the kubelet tree that way is
//! read within [`LAZY_DRAIN_MS`], not at once.
//!
//! Where the LSM hooks decide conflicts (enforce, or audit with BPF LSM), nothing the agent
//! does with a syscall record is waited on: the kernel has refused or reported the conflict
//! already (a conflict record always wakes the agent), and the records only feed its views,
//! metrics and map upkeep. There every syscall record may wait ([`WakeupFilter::kernel_decides`]):
//! an owner's publish and unmount then cost its thread no cross-CPU wake-up either.
//!
//! One race is left to the timed drain: the reader stops at the first record still being
//! written, so a record another CPU submits behind one that is being written without a
//! wake-up can wait up to [`LAZY_DRAIN_MS`] (a window of the few microseconds it takes to
//! write a record, on a node where two mounts run at once).
//!
//! The rule runs in every exit program (ten fexit programs with trampolines), so it has no
//! loop whose bound comes from data: Linux 6.1's verifier walked such loops' every exit
//! into the rest of the program and took minutes under the VM tests' emulated CPU.

use crate::{
    event::{PATH_LEN, SyscallEvent, kind},
    mount_flags::{MS_BIND, MS_MOVE},
};

/// Bytes of the kubelet root compared. Longer roots are compared on their first bytes only:
/// a path sharing them wakes the agent for nothing, which costs only that wake-up.
pub const ROOT_PREFIX_LEN: usize = 32;

/// Value of the `WAKEUP_FILTER` map: the kubelet root's first bytes and which of them
/// count, and whether the kernel decides conflicts. All-zero: every record wakes the reader.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WakeupFilter {
    /// The kubelet root as callers spell it, without a trailing `/`, cut at
    /// [`ROOT_PREFIX_LEN`] bytes and zero padded.
    pub root_prefix: [u8; ROOT_PREFIX_LEN],
    /// 0xff for each byte of `root_prefix` that is part of the root, 0 after.
    pub mask: [u8; ROOT_PREFIX_LEN],
    /// Non-zero where the LSM hooks decide conflicts: every syscall record may wait.
    pub kernel_decides: u32,
    pub _pad: u32,
}

/// Longest time a record written without a wake-up waits for the agent, in milliseconds.
pub const LAZY_DRAIN_MS: u64 = 100;

/// Paths under here may name file descriptors (`/proc/self/fd/N`, runc's
/// `/proc/thread-self/fd/N`): such a record always wakes.
pub const FD_PATHS: &[u8; 6] = b"/proc/";

impl WakeupFilter {
    /// No filter: every record wakes the reader.
    pub const EVERY_RECORD_WAKES: Self =
        Self { root_prefix: [0; ROOT_PREFIX_LEN], mask: [0; ROOT_PREFIX_LEN], kernel_decides: 0, _pad: 0 };

    /// Every syscall record may wait: the LSM hooks decide conflicts.
    pub fn kernel_decides(self) -> Self {
        Self { kernel_decides: 1, ..self }
    }

    /// A filter for `kubelet_root` (absolute; a trailing `/` is dropped); `None` when it is
    /// not absolute or holds a NUL (every record then wakes the reader).
    pub fn for_kubelet_root(kubelet_root: &[u8]) -> Option<Self> {
        let root = match kubelet_root {
            [rest @ .., b'/'] if !rest.is_empty() => rest,
            root => root,
        };
        if root.first() != Some(&b'/') || root.contains(&0) {
            return None;
        }
        let kept = root.len().min(ROOT_PREFIX_LEN);
        let mut filter = Self::EVERY_RECORD_WAKES;
        filter.root_prefix[..kept].copy_from_slice(&root[..kept]);
        filter.mask[..kept].fill(0xff);
        Some(filter)
    }

    /// Whether the agent set a filter.
    #[inline(always)]
    pub fn is_set(&self) -> bool {
        self.mask[0] != 0 || self.kernel_decides != 0
    }

    /// Whether `event` may be written without waking the reader (while the ring is less
    /// than half full, which the caller checks): every record where the kernel decides
    /// conflicts, else a whole record that cannot concern the kubelet tree.
    #[inline(always)]
    pub fn may_wait(&self, event: &SyscallEvent) -> bool {
        self.kernel_decides != 0 || (event.header.truncated == 0 && !self.may_concern_kubelet(event))
    }

    /// False only for a mount(2) or umount2(2) whose paths are known to lie outside the
    /// kubelet root (a new mount's source is a device or a name, not a path: not looked
    /// at).
    #[inline(always)]
    pub fn may_concern_kubelet(&self, event: &SyscallEvent) -> bool {
        match event.header.kind {
            kind::MOUNT => {
                let source_is_a_path = event.args[3] & (MS_BIND | MS_MOVE) != 0;
                self.may_be_kubelets(&event.path1) || (source_is_a_path && self.may_be_kubelets(&event.path0))
            }
            kind::UMOUNT => self.may_be_kubelets(&event.path0),
            _ => true,
        }
    }

    /// Whether `path` could name something under the kubelet root: unless it is absolute,
    /// outside `/proc` and differs from the root's prefix.
    #[inline(always)]
    fn may_be_kubelets(&self, path: &[u8; PATH_LEN]) -> bool {
        path[0] != b'/' || starts_with_fd_paths(path) || self.shares_root_prefix(path)
    }

    /// Constant bounds and no early exit: one straight path for the verifier.
    #[inline(always)]
    #[allow(clippy::needless_range_loop, reason = "indexed loops keep the shape the 6.1 verifier accepted")]
    fn shares_root_prefix(&self, path: &[u8; PATH_LEN]) -> bool {
        let mut differ = 0u8;
        for i in 0..ROOT_PREFIX_LEN {
            differ |= (path[i] ^ self.root_prefix[i]) & self.mask[i];
        }
        differ == 0
    }
}

#[inline(always)]
#[allow(clippy::needless_range_loop, reason = "indexed loops keep the shape the 6.1 verifier accepted")]
fn starts_with_fd_paths(path: &[u8; PATH_LEN]) -> bool {
    let mut differ = 0u8;
    for i in 0..FD_PATHS.len() {
        differ |= path[i] ^ FD_PATHS[i];
    }
    differ == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{EventHeader, MAX_ARGS, NAME_LEN};

    fn padded(s: &[u8]) -> [u8; PATH_LEN] {
        let mut out = [0; PATH_LEN];
        out[..s.len()].copy_from_slice(s);
        out
    }

    fn event(kind: u32, flags: u64, path0: &[u8], path1: &[u8]) -> SyscallEvent {
        let header = EventHeader {
            kind,
            truncated: 0,
            pid: 1,
            tgid: 1,
            mnt_ns: 0,
            _pad: 0,
            cgroup_id: 0,
            start_ns: 0,
            duration_ns: 0,
            ret: 0,
            comm: [0; 16],
        };
        let mut args = [0; MAX_ARGS];
        args[3] = flags;
        SyscallEvent { header, args, path0: padded(path0), path1: padded(path1), name: [0; NAME_LEN] }
    }

    #[test]
    fn only_mounts_known_to_be_outside_the_kubelet_root_may_wait() {
        let f = WakeupFilter::for_kubelet_root(b"/var/lib/kubelet").unwrap();
        let bind = |source: &[u8], target: &[u8]| f.may_concern_kubelet(&event(kind::MOUNT, MS_BIND, source, target));
        let new_mount = |source: &[u8], target: &[u8]| f.may_concern_kubelet(&event(kind::MOUNT, 0, source, target));
        let umount = |target: &[u8]| f.may_concern_kubelet(&event(kind::UMOUNT, 0, target, b""));
        // May wait: nothing of kubelet's.
        assert!(!bind(b"/srv/a", b"/tmp/.tmpXYZ/b"));
        assert!(!umount(b"/var/lib/kube"), "shorter than the root");
        assert!(!new_mount(b"overlay", b"/run/containerd/io.containerd.runtime.v2.task/k8s.io/1/rootfs"));
        assert!(!new_mount(b"/var/lib/kubelet/not-looked-at", b"/mnt"), "a new mount's source is not a path");
        assert!(!umount(b"/mnt/x"));
        // Wake at once.
        assert!(new_mount(b"/dev/vdb", b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/v/mount"));
        assert!(bind(b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/v/mount", b"/tmp/c"), "bind source");
        assert!(f.may_concern_kubelet(&event(kind::MOUNT, MS_MOVE, b"/var/lib/kubelet/x", b"/tmp/c")), "move source");
        assert!(umount(b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/v/mount"));
        assert!(umount(b"/var/lib/kubelet-plugins/x"), "a sibling may wake: harmless");
        assert!(bind(b"/srv/a", b"/proc/thread-self/fd/7"), "fd paths");
        assert!(bind(b"/srv/a", b"relative/target"));
        // Documented: `..` is not looked at (read at the next drain, not at once).
        assert!(!bind(b"/srv/a", b"/tmp/../var/lib/kubelet/pods/p"));
        assert!(f.may_concern_kubelet(&event(kind::MOVE_MOUNT, 0, b"", b"/mnt")), "every other call");
    }

    #[test]
    fn where_the_kernel_decides_every_record_may_wait_else_only_whole_ones_outside_the_tree() {
        let publish =
            event(kind::MOUNT, MS_BIND, b"/srv/a", b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/v/mount");
        let mut outside = event(kind::MOUNT, MS_BIND, b"/srv/a", b"/mnt/b");
        let userspace = WakeupFilter::for_kubelet_root(b"/var/lib/kubelet").unwrap();
        assert!(!userspace.may_wait(&publish), "quarantine acts on it at once");
        assert!(userspace.may_wait(&outside));
        outside.header.truncated = 1;
        assert!(!userspace.may_wait(&outside), "a cut path may be kubelet's");
        let kernel = userspace.kernel_decides();
        assert!(kernel.may_wait(&publish) && kernel.may_wait(&outside));
        let kernel_only = WakeupFilter::EVERY_RECORD_WAKES.kernel_decides();
        assert!(kernel_only.is_set() && kernel_only.may_wait(&publish), "also without a usable kubelet root");
        assert!(!WakeupFilter::EVERY_RECORD_WAKES.is_set());
    }

    #[test]
    fn a_filter_takes_absolute_roots_and_keeps_their_first_bytes() {
        let filter = WakeupFilter::for_kubelet_root(b"/var/lib/kubelet/").unwrap();
        assert_eq!(&filter.root_prefix[..17], b"/var/lib/kubelet\0");
        assert_eq!(filter.mask.iter().filter(|m| **m == 0xff).count(), 16);
        assert!(filter.is_set());
        assert!(WakeupFilter::for_kubelet_root(b"relative/kubelet").is_none());
        assert!(WakeupFilter::for_kubelet_root(b"").is_none());
        let long = WakeupFilter::for_kubelet_root(&[b'/'; 300]).unwrap();
        assert!(long.mask.iter().all(|m| *m == 0xff));
        let sibling = |root: &[u8], path: &[u8]| {
            let f = WakeupFilter::for_kubelet_root(root).unwrap();
            f.may_concern_kubelet(&event(kind::UMOUNT, 0, path, b""))
        };
        let root = b"/var/lib/a-very-long-kubelet-root-directory";
        assert!(sibling(root, b"/var/lib/a-very-long-kubelet-root-other"), "shares the first 32 bytes: wakes");
        assert!(!sibling(root, b"/var/lib/a-very-long-kubelet-ro"), "differs within them");
    }
}
