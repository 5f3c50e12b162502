//! Userspace-only trait impls for the wire types.

use crate::{event::SyscallEvent, lsm_probe::ProbeSource};

// SAFETY: plain `#[repr(C)]` integers and byte arrays with explicit padding: every bit
// pattern is a valid value.
unsafe impl aya::Pod for SyscallEvent {}
// SAFETY: as above.
unsafe impl aya::Pod for ProbeSource {}
