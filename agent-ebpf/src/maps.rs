//! Every map of the object. Static names must equal the constants in
//! `volguard_common::maps`, which userspace uses to find them.

use aya_ebpf::{
    macros::{btf_map, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use volguard_common::{
    counters::Counter,
    enforce::{
        CGROUP_NAME_LEN, CallerLayout, EnforceConfig, MountTreeLayout, Owner, PendingClaim, PendingPublish, PodUid,
        PublishedRoot, RootKey, VolumeKey,
    },
    event::PendingCall,
    lsm_probe::ProbeSource,
    maps::{EVENTS_BYTES, EXEMPT_POD_ENTRIES, PENDING_ENTRIES, VOLUME_ENTRIES},
    open_guard::{
        CALLER_POD_ENTRIES, COMMAND_LEN, CachedCallerPod, DIRECTORY_VERDICT_ENTRIES, DeviceGuard, DirectoryKey,
        DirectoryVerdict, GUARDED_DEVICE_ENTRIES, NODE_OPEN_COMMANDS, OPEN_REPORT_ENTRIES,
        OpenReportKey,
    },
    wakeup::WakeupFilter,
};

use crate::task_storage::TaskStorage;

/// Completed syscall records for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);

/// Each thread's traced syscall between entry and exit (`PendingCall::kind` 0: none). In
/// the thread's own storage: no hash, no lock, no entry left behind by a thread that dies.
#[btf_map]
pub static PENDING: TaskStorage<PendingCall> = TaskStorage::new();

/// The same, by `pid_tgid`, for threads whose task storage cannot be created: kernels whose
/// local storage allocates with `kmalloc_nolock` (7.3 does) get none on a CPU without
/// CMPXCHG16B. Preallocated, so an insert needs no allocation; LRU, so an entry a dying
/// thread leaves is evicted. Not pinned.
#[map]
pub static PENDING_BY_THREAD: LruHashMap<u64, PendingCall> = LruHashMap::with_max_entries(PENDING_ENTRIES, 0);

/// Which records wake the reader, set by the agent. Not pinned.
#[map]
pub static WAKEUP_FILTER: Array<WakeupFilter> = Array::with_max_entries(1, 0);

/// Non-zero while a record written without a wake-up may be unread: the next record that
/// wakes the reader forces it, and clears this. Kernel-side only, not pinned.
#[map]
pub static LAZY_UNREAD: Array<u32> = Array::with_max_entries(1, 0);

/// Kernel-side counters, indexed by `Counter`.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// The one source path the LSM self-test refuses to bind (len 0: refuse nothing).
#[map]
pub static LSM_PROBE_SOURCE: Array<ProbeSource> = Array::with_max_entries(1, 0);

/// Single-pod volumes, filled by userspace. Pinned: survives the agent.
#[map]
pub static SINGLE_POD_VOLUMES: HashMap<VolumeKey, u32> = HashMap::with_max_entries(VOLUME_ENTRIES, 0);

/// Owner of each claimed single-pod volume; claimed atomically (BPF_NOEXIST). Pinned.
#[map]
pub static OWNERS: HashMap<VolumeKey, Owner> = HashMap::with_max_entries(VOLUME_ENTRIES, 0);

/// Claims and releases waiting for their syscall's result, by `pid_tgid`. Pinned.
#[map]
pub static CLAIMS: LruHashMap<u64, PendingClaim> = LruHashMap::with_max_entries(PENDING_ENTRIES, 0);

/// What the LSM programs need to know: struct offsets, the kubelet root, the mode. Pinned.
#[map]
pub static CONFIG: Array<EnforceConfig> = Array::with_max_entries(1, 0);

/// Roots of published single-pod volume trees, recorded at each owner's publish exit.
/// Pinned.
#[map]
pub static PUBLISHED_ROOTS: HashMap<RootKey, PublishedRoot> = HashMap::with_max_entries(VOLUME_ENTRIES, 0);

/// The mount of each owned volume's publish (`struct mount *`), recorded with its root:
/// an unmount releases the volume only if it is that mount. Pinned.
#[map]
pub static PUBLISH_MOUNTS: HashMap<VolumeKey, u64> = HashMap::with_max_entries(VOLUME_ENTRIES, 0);

/// Owners' publishes waiting for their syscall's exit, by `pid_tgid`. Not pinned.
#[map]
pub static PUBLISHES: LruHashMap<u64, PendingPublish> = LruHashMap::with_max_entries(PENDING_ENTRIES, 0);

/// Owners' publishes in flight, by volume (the thread's `pid_tgid`): from the LSM hook to
/// the syscall's exit, which records the publish's mount. Not pinned.
#[map]
pub static PUBLISHING: LruHashMap<VolumeKey, u64> = LruHashMap::with_max_entries(PENDING_ENTRIES, 0);

/// Offsets for finding the mount a syscall attached, set by userspace. Not pinned.
#[map]
pub static MOUNT_TREE_LAYOUT: Array<MountTreeLayout> = Array::with_max_entries(1, 0);

/// Offsets for finding the caller's pod from its cgroup, set by userspace. Not pinned.
#[map]
pub static CALLER_LAYOUT: Array<CallerLayout> = Array::with_max_entries(1, 0);

/// Pods the operator exempts as readers, set by userspace. Not pinned.
#[map]
pub static EXEMPT_PODS: HashMap<PodUid, u8> = HashMap::with_max_entries(EXEMPT_POD_ENTRIES, 0);

/// Filesystems that hold an owned volume's published tree, by kernel device: the open
/// guard's first lookup. Pinned.
#[map]
pub static GUARDED_DEVICES: HashMap<u32, DeviceGuard> = HashMap::with_max_entries(GUARDED_DEVICE_ENTRIES, 0);

/// The root at or above each directory the open guard walked up from (see
/// `volguard_common::open_guard::DirectoryVerdict`). Not pinned: each agent's program
/// keeps its own, with its own `VERDICT_EPOCH`.
#[map]
pub static DIRECTORY_VERDICTS: LruHashMap<DirectoryKey, DirectoryVerdict> =
    LruHashMap::with_max_entries(DIRECTORY_VERDICT_ENTRIES, 0);

/// The two slots that date a cached verdict (both must be unchanged), by `VerdictEpoch`. Not pinned.
#[map]
pub static VERDICT_EPOCH: Array<u64> = Array::with_max_entries(2, 0);

/// The pod of each cgroup the open guard met, by cgroup ID. Not pinned.
#[map]
pub static CALLER_PODS: LruHashMap<u64, CachedCallerPod> = LruHashMap::with_max_entries(CALLER_POD_ENTRIES, 0);

/// When a reader pod's open of a volume was last reported (ns). Not pinned.
#[map]
pub static OPEN_REPORTS: LruHashMap<OpenReportKey, u64> = LruHashMap::with_max_entries(OPEN_REPORT_ENTRIES, 0);

/// Node processes' opens of owned volumes' files, per CPU, by command. Not pinned.
#[map]
pub static NODE_OPENS: PerCpuHashMap<[u8; COMMAND_LEN], u64> = PerCpuHashMap::with_max_entries(NODE_OPEN_COMMANDS, 0);

/// Keys under construction (too large for the BPF stack).
#[map]
pub static ENFORCE_SCRATCH: PerCpuArray<EnforceScratch> = PerCpuArray::with_max_entries(1, 0);

/// `pod<uid>.slice`: the end of a pod cgroup's name under the systemd driver.
pub const CGROUP_NAME_END: usize = 3 + volguard_common::enforce::POD_UID_TEXT_LEN + 6;

/// Per-CPU working space of the enforcement programs.
#[repr(C)]
pub struct EnforceScratch {
    /// `volume` then `pod`: together they are an `OpenReportKey` (see `report_key`).
    pub volume: VolumeKey,
    pub pod: PodUid,
    /// A cgroup's name, and the end of one (see `probes::caller_pod`).
    pub cgroup_name: [u8; CGROUP_NAME_LEN],
    pub cgroup_name_end: [u8; CGROUP_NAME_END],
    pub claim: PendingClaim,
    pub publish: PendingPublish,
}

impl EnforceScratch {
    /// `volume` and `pod` read as one `OpenReportKey`.
    #[inline(always)]
    pub fn report_key(&self) -> &OpenReportKey {
        // SAFETY: both are repr(C) with the same two fields in the same order, at the
        // same offsets (checked below).
        unsafe { &*(self as *const Self).cast::<OpenReportKey>() }
    }
}

const _: () = assert!(core::mem::offset_of!(EnforceScratch, volume) == core::mem::offset_of!(OpenReportKey, volume));
const _: () = assert!(core::mem::offset_of!(EnforceScratch, pod) == core::mem::offset_of!(OpenReportKey, reader));
