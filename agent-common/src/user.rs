//! Userspace-only trait impls for the wire types.

use crate::{
    enforce::{
        CallerLayout, ConflictEvent, EnforceConfig, MountTreeLayout, Owner, PendingClaim, PodUid, PublishedRoot,
        RootKey, VolumeKey,
    },
    event::SyscallEvent,
    lsm_probe::ProbeSource,
    open_guard::{DeviceGuard, OpenGuardLayout},
    wakeup::WakeupFilter,
};

// SAFETY: plain `#[repr(C)]` integers and byte arrays with explicit padding: every bit
// pattern is a valid value.
unsafe impl aya::Pod for SyscallEvent {}
// SAFETY: as above.
unsafe impl aya::Pod for ProbeSource {}
// SAFETY: as above, for every enforcement map type.
unsafe impl aya::Pod for VolumeKey {}
// SAFETY: as above.
unsafe impl aya::Pod for PodUid {}
// SAFETY: as above.
unsafe impl aya::Pod for Owner {}
// SAFETY: as above.
unsafe impl aya::Pod for PendingClaim {}
// SAFETY: as above.
unsafe impl aya::Pod for EnforceConfig {}
// SAFETY: as above.
unsafe impl aya::Pod for ConflictEvent {}
// SAFETY: as above.
unsafe impl aya::Pod for RootKey {}
// SAFETY: as above.
unsafe impl aya::Pod for PublishedRoot {}
// SAFETY: as above.
unsafe impl aya::Pod for MountTreeLayout {}
// SAFETY: as above.
unsafe impl aya::Pod for CallerLayout {}
// SAFETY: as above.
unsafe impl aya::Pod for WakeupFilter {}
// SAFETY: as above.
unsafe impl aya::Pod for DeviceGuard {}
// SAFETY: as above.
unsafe impl aya::Pod for OpenGuardLayout {}
