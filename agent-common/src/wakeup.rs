//! Which event records wake the agent at once.
//!
//! Each wake-up costs the mounting thread a cross-CPU wake and the agent a context switch
//! per record, which made a bind+umount cycle cost 1.6–3.7× on this project's machines
//! (BENCHMARKS.md). Most mounts on a node are not kubelet's (container runtimes, systemd),
//! and nothing the agent decides waits on them. So, once the agent has said where the
//! kubelet root is, a `mount(2)` or `umount2(2)` record whose paths are all absolute,
//! whole, outside `/proc` (fd paths) and not under the kubelet root is written without a
//! wake-up; the agent reads it at its next wake-up or timed drain ([`LAZY_DRAIN_MS`]),
//! in order with the rest. Every other record, and every record while the ring is half
//! full, wakes it.

use crate::event::PATH_LEN;

/// Value of the `WAKEUP_FILTER` map. `len` 0: every record wakes the reader.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WakeupFilter {
    /// The kubelet root as callers spell it, without a trailing `/`.
    pub kubelet_root: [u8; PATH_LEN],
    pub len: u32,
    pub _pad: u32,
}

/// Longest time a record written without a wake-up waits for the agent, in milliseconds.
pub const LAZY_DRAIN_MS: u64 = 100;

/// Paths under here may name file descriptors (`/proc/self/fd/N`, runc's
/// `/proc/thread-self/fd/N`): such a record always wakes.
pub const FD_PATHS: &[u8] = b"/proc/";

impl WakeupFilter {
    /// A filter for `kubelet_root` (absolute; a trailing `/` is dropped); `None` when it
    /// does not fit or is not absolute (every record then wakes the reader).
    pub fn for_kubelet_root(kubelet_root: &[u8]) -> Option<Self> {
        let root = match kubelet_root {
            [rest @ .., b'/'] if !rest.is_empty() => rest,
            root => root,
        };
        if root.first() != Some(&b'/') || root.len() >= PATH_LEN || root.contains(&0) {
            return None;
        }
        let mut filter = Self { kubelet_root: [0; PATH_LEN], len: root.len() as u32, _pad: 0 };
        filter.kubelet_root[..root.len()].copy_from_slice(root);
        Some(filter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_takes_absolute_roots_that_fit() {
        let filter = WakeupFilter::for_kubelet_root(b"/var/lib/kubelet/").unwrap();
        assert_eq!(&filter.kubelet_root[..filter.len as usize], b"/var/lib/kubelet");
        assert!(WakeupFilter::for_kubelet_root(b"relative/kubelet").is_none());
        assert!(WakeupFilter::for_kubelet_root(b"").is_none());
        let mut too_long = [b'a'; PATH_LEN];
        too_long[0] = b'/';
        assert!(WakeupFilter::for_kubelet_root(&too_long).is_none(), "no room for the NUL");
        assert_eq!(WakeupFilter::for_kubelet_root(&too_long[..PATH_LEN - 1]).unwrap().len as usize, PATH_LEN - 1);
        assert_eq!(WakeupFilter::for_kubelet_root(b"/").unwrap().len, 1);
    }
}
