//! Small helpers shared by the probes.

use core::ffi::c_void;

use aya_ebpf::helpers::{
    bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes, bpf_probe_read_user, bpf_probe_read_user_str_bytes,
};
use volguard_common::counters::Counter;

use crate::maps::COUNTERS;

/// Adds one to a per-CPU counter.
#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot, only this CPU writes it while this program runs.
        unsafe { *slot += 1 };
    }
}

/// Reads a NUL-terminated user string into `dst`. Returns true when the string did not
/// fit (it is then cut to `dst.len() - 1` bytes). A NULL or unreadable pointer gives "".
#[inline(always)]
pub fn read_user_str(src: *const u8, dst: &mut [u8]) -> bool {
    dst[0] = 0;
    if src.is_null() {
        return false;
    }
    let cap = dst.len() - 1;
    // SAFETY: the helper bounds the copy to `dst` and fails cleanly on a bad pointer.
    let Ok(read) = (unsafe { bpf_probe_read_user_str_bytes(src, dst) }).map(<[u8]>::len) else {
        dst[0] = 0;
        return false;
    };
    if read < cap {
        return false;
    }
    // Exactly full: truncated only if the source has another byte where we put the NUL.
    // SAFETY: as above; a failed read means we cannot tell, so report no truncation.
    let next: u8 = unsafe { bpf_probe_read_user(src.wrapping_add(cap)) }.unwrap_or(0);
    next != 0
}

/// Reads a NUL-terminated kernel string into `dst`, returning its bytes without the NUL.
#[inline(always)]
pub fn read_kernel_str<'a>(src: *const u8, dst: &'a mut [u8]) -> Option<&'a [u8]> {
    if src.is_null() {
        return None;
    }
    // SAFETY: the helper bounds the copy to `dst` and fails cleanly on a bad pointer.
    unsafe { bpf_probe_read_kernel_str_bytes(src, dst) }.ok()
}

/// Argument `n` of a BTF-typed program (LSM, fentry, fexit: `ctx` is an array of u64) as
/// a plain address. Read as a typed BTF pointer, the verifier forbids the arithmetic the
/// mount programs need (e.g. from a `vfsmount` back to its `struct mount`); their every
/// dereference goes through `bpf_probe_read_kernel` anyway. (The open guard, which needs
/// no such arithmetic, reads its argument typed: see `probes::guard_reads`.)
#[inline(always)]
pub fn ctx_arg_address(ctx: *mut c_void, n: usize) -> *const u8 {
    let slot = (ctx as *const u64).wrapping_add(n);
    // SAFETY: reading the program's own argument slot; the helper faults cleanly.
    unsafe { bpf_probe_read_kernel(slot) }.unwrap_or(0) as *const u8
}
