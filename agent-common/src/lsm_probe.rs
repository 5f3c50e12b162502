//! The BPF LSM self-test: an `sb_mount` program that counts every run and refuses bind
//! mounts of exactly one source path, which userspace chooses. Attaching an LSM program
//! succeeds even when `bpf` is missing from the kernel's `lsm=` list, so the only proof
//! that enforcement works is a mount that really gets refused.

/// Bytes of the probe source buffer, including the terminating NUL.
pub const PROBE_SOURCE_LEN: usize = 128;
/// Longest probe path: shorter than a read cut at the buffer (`PROBE_SOURCE_LEN - 1`
/// bytes), so a longer mount source can never compare equal to it.
pub const PROBE_SOURCE_MAX: usize = PROBE_SOURCE_LEN - 2;

/// The errno the probe (and enforcement) returns for a refused mount.
pub const DENY_ERRNO: i32 = 16; // EBUSY

/// Value of the single `LSM_PROBE_SOURCE` entry.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ProbeSource {
    /// Length of `path` without the NUL (at most `PROBE_SOURCE_MAX`); 0 disables the probe.
    pub len: u32,
    pub _pad: u32,
    /// Absolute path whose bind mounts the probe refuses, NUL padded.
    pub path: [u8; PROBE_SOURCE_LEN],
}

const _: () = assert!(core::mem::size_of::<ProbeSource>() == 8 + PROBE_SOURCE_LEN);
