//! Everything that crosses the kernel/userspace boundary: event records, map names and
//! value types, size limits, counter indices and the mount flag values both sides decide on.
//!
//! Wire structs are `#[repr(C)]` with explicit padding and no `bool`; every size is checked
//! at compile time so the kernel and userspace cannot drift apart.
#![no_std]

pub mod counters;
pub mod enforce;
pub mod event;
pub mod kubelet;
pub mod lsm_probe;
pub mod maps;
pub mod mount_api;
pub mod mount_flags;
pub mod open_guard;
pub mod programs;
pub mod wakeup;

#[cfg(feature = "user")]
mod user;
