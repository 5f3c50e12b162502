//! Map names, shared so userspace never spells them by hand, and their sizes.

/// Ring buffer of event records (see [`crate::event`]).
pub const EVENTS: &str = "EVENTS";
/// Size of [`EVENTS`] in bytes (a power of two, a multiple of the page size).
pub const EVENTS_BYTES: u32 = 4 << 20;

/// Per-thread syscalls between entry and exit, keyed by `pid_tgid`.
pub const PENDING: &str = "PENDING";
/// Threads that can be inside a traced syscall at once before the oldest entry is evicted.
pub const PENDING_ENTRIES: u32 = 16_384;

/// Per-CPU scratch space for building a record too large for the BPF stack.
pub const SCRATCH: &str = "SCRATCH";

/// Per-CPU counters indexed by [`crate::counters::Counter`].
pub const COUNTERS: &str = "COUNTERS";

/// Single-entry array holding the [`crate::lsm_probe::ProbeSource`].
pub const LSM_PROBE_SOURCE: &str = "LSM_PROBE_SOURCE";
