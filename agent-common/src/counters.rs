//! Indices into the per-CPU `COUNTERS` map: things the kernel side counts instead of
//! failing silently.

/// One slot of the `COUNTERS` per-CPU array.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// An event was dropped because the ring buffer was full.
    EventsLost = 0,
    /// A syscall exit had no matching entry (the agent attached mid-syscall, or the
    /// entry could not be parked).
    ExitWithoutEntry = 1,
    /// A syscall entry could not be parked until its exit, neither in the thread's storage
    /// nor by thread id (the LRU map full of calls in progress).
    PendingInsertFailed = 2,
    /// Times the `sb_mount` LSM program ran: proves BPF LSM is active.
    LsmSbMountRuns = 3,
    /// Mounts the `sb_mount` LSM probe refused (only the probe source is refused).
    LsmProbeDenied = 4,
    /// Publishes of an owned single-pod volume into another pod refused with EBUSY.
    ConflictsBlocked = 5,
    /// Conflicts seen in audit mode (allowed).
    ConflictsAudited = 6,
    /// Ownership claims taken.
    Claims = 7,
    /// Claims rolled back because the claiming mount failed.
    ClaimsRolledBack = 8,
    /// Ownerships released because the owner's publish target was unmounted.
    Releases = 9,
    /// An enforcement decision could not be made (map or read failure): the mount was allowed.
    EnforceErrors = 10,
    /// Owners' publishes whose new tree root the exit program recorded.
    PublishedRootsRecorded = 11,
    /// Owners' publishes whose new mount the exit program did not find (no root recorded:
    /// a tree taken from inside that publish is not recognised).
    PublishedRootsMissed = 12,
    /// Syscall entries parked by thread id because the thread's storage could not be
    /// created (no memory for it, the storage busy on this CPU, or a kernel whose local
    /// storage cannot allocate here: 7.3 on a CPU without CMPXCHG16B).
    PendingByThread = 13,
    /// Opens of an owned volume's files by node processes (no pod): allowed.
    OpensByNodeProcesses = 14,
    /// Opens on a filesystem holding directory volumes whose file lay deeper than the
    /// guard walks (`open_guard::MAX_OPEN_DEPTH`): not recognised, allowed.
    OpensTooDeep = 15,
}

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; 16] = [
        Counter::EventsLost,
        Counter::ExitWithoutEntry,
        Counter::PendingInsertFailed,
        Counter::LsmSbMountRuns,
        Counter::LsmProbeDenied,
        Counter::ConflictsBlocked,
        Counter::ConflictsAudited,
        Counter::Claims,
        Counter::ClaimsRolledBack,
        Counter::Releases,
        Counter::EnforceErrors,
        Counter::PublishedRootsRecorded,
        Counter::PublishedRootsMissed,
        Counter::PendingByThread,
        Counter::OpensByNodeProcesses,
        Counter::OpensTooDeep,
    ];

    /// Number of slots the map needs.
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// Stable snake_case name for logs and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::EventsLost => "events_lost",
            Counter::ExitWithoutEntry => "exit_without_entry",
            Counter::PendingInsertFailed => "pending_insert_failed",
            Counter::LsmSbMountRuns => "lsm_sb_mount_runs",
            Counter::LsmProbeDenied => "lsm_probe_denied",
            Counter::ConflictsBlocked => "conflicts_blocked",
            Counter::ConflictsAudited => "conflicts_audited",
            Counter::Claims => "claims",
            Counter::ClaimsRolledBack => "claims_rolled_back",
            Counter::Releases => "releases",
            Counter::EnforceErrors => "enforce_errors",
            Counter::PublishedRootsRecorded => "published_roots_recorded",
            Counter::PublishedRootsMissed => "published_roots_missed",
            Counter::PendingByThread => "pending_by_thread",
            Counter::OpensByNodeProcesses => "opens_by_node_processes",
            Counter::OpensTooDeep => "opens_too_deep",
        }
    }
}
