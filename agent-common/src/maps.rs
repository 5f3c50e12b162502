//! Map names, shared so userspace never spells them by hand, and their sizes.

/// Ring buffer of event records (see [`crate::event`]).
pub const EVENTS: &str = "EVENTS";
/// Size of [`EVENTS`] in bytes (a power of two, a multiple of the page size).
pub const EVENTS_BYTES: u32 = 4 << 20;

/// Each thread's traced syscall between entry and exit (task-local storage).
pub const PENDING: &str = "PENDING";
/// The same by `pid_tgid`, where a thread's storage cannot be created. Not pinned.
pub const PENDING_BY_THREAD: &str = "PENDING_BY_THREAD";
/// Threads that can be between a claim, a publish or (in `PENDING_BY_THREAD`) a traced
/// call and its exit at once before the oldest entry is evicted.
pub const PENDING_ENTRIES: u32 = 16_384;

/// The single `volguard_common::wakeup::WakeupFilter` entry: which records wake the
/// reader. Not pinned.
pub const WAKEUP_FILTER: &str = "WAKEUP_FILTER";

/// Per-CPU counters indexed by [`crate::counters::Counter`].
pub const COUNTERS: &str = "COUNTERS";

/// Single-entry array holding the [`crate::lsm_probe::ProbeSource`].
pub const LSM_PROBE_SOURCE: &str = "LSM_PROBE_SOURCE";

/// Single-pod volumes (key `VolumeKey`, value a `single_pod_reason`), filled by userspace.
pub const SINGLE_POD_VOLUMES: &str = "SINGLE_POD_VOLUMES";
/// Owner of each claimed single-pod volume (key `VolumeKey`, value `Owner`).
pub const OWNERS: &str = "OWNERS";
/// Volumes tracked at once; also the size of `OWNERS`.
pub const VOLUME_ENTRIES: u32 = 16_384;
/// Per-thread pending claims and releases, settled at syscall exit.
pub const CLAIMS: &str = "CLAIMS";
/// The single `EnforceConfig` entry.
pub const CONFIG: &str = "CONFIG";
/// Per-CPU scratch for the LSM programs' keys (too large for the BPF stack).
pub const ENFORCE_SCRATCH: &str = "ENFORCE_SCRATCH";

/// Roots of published single-pod volume trees (key `RootKey`, value `PublishedRoot`),
/// recorded by the exit program after each publish by a volume's owner.
pub const PUBLISHED_ROOTS: &str = "PUBLISHED_ROOTS";
/// Owners' publishes waiting for their syscall's exit (key `pid_tgid`, value
/// `PendingPublish`). Not pinned: each agent's hook and exit programs share their own.
pub const PUBLISHES: &str = "PUBLISHES";
/// Owners' publishes in flight (key `VolumeKey`, value the thread's `pid_tgid`): an
/// unmount of a copy on the publish target before the publish's exit releases nothing.
/// Not pinned.
pub const PUBLISHING: &str = "PUBLISHING";
/// The single `MountTreeLayout` entry. Not pinned.
pub const MOUNT_TREE_LAYOUT: &str = "MOUNT_TREE_LAYOUT";

/// The single `CallerLayout` entry. Not pinned.
pub const CALLER_LAYOUT: &str = "CALLER_LAYOUT";
/// Pods the operator exempts as readers (key `PodUid`, value unused), set by the agent.
/// Not pinned: each agent's programs read its own.
pub const EXEMPT_PODS: &str = "EXEMPT_PODS";
/// Exempt pods the kernel knows at once.
pub const EXEMPT_POD_ENTRIES: u32 = 1_024;

/// The mount of each owned volume's publish (key `VolumeKey`, value the kernel's `struct
/// mount *`), recorded at the owner's publish exit. Copies of that mount (a recursive bind
/// of kubelet's `pods/`, propagation into another namespace) sit on the same directory;
/// only the publish itself releases the volume when unmounted. A volume without an entry
/// (published before any agent ran) is released by an unmount on its publish target.
pub const PUBLISH_MOUNTS: &str = "PUBLISH_MOUNTS";

/// Filesystems that hold an owned volume's published tree (key the kernel device, value
/// `open_guard::DeviceGuard`): the open guard's first lookup. Written by the exit program
/// with each root it records and by the agent with each root it seeds.
pub const GUARDED_DEVICES: &str = "GUARDED_DEVICES";
/// The two slots that date the open guard's cached verdicts (`open_guard::VerdictEpoch`):
/// the agent bumps its slot with each root it seeds. Not pinned.
pub const VERDICT_EPOCH: &str = "VERDICT_EPOCH";
/// The pod of each cgroup the open guard has met (key the cgroup ID). Not pinned.
pub const CALLER_PODS: &str = "CALLER_PODS";
/// When each reader pod's open of each volume was last reported. Not pinned.
pub const OPEN_REPORTS: &str = "OPEN_REPORTS";
/// Node processes' opens of owned volumes' files (which the guard lets through), per CPU,
/// by command (key the task's `comm`). Not pinned: counted since this agent loaded.
pub const NODE_OPENS: &str = "NODE_OPENS";

/// Maps that hold enforcement state: pinned, so a restarted agent adopts them (one an
/// earlier agent did not have is created empty).
pub const PINNED_MAPS: [&str; 7] =
    [SINGLE_POD_VOLUMES, OWNERS, CLAIMS, CONFIG, PUBLISHED_ROOTS, PUBLISH_MOUNTS, GUARDED_DEVICES];
/// Version of the pinned maps' layout: a pin directory of another version is never reused.
pub const PIN_LAYOUT_VERSION: u32 = 1;
