//! Giving freed heap back to the kernel. Start-up allocates and frees several MiB at once
//! (the kernel's BTF parsed for the probes, the mount table, the first view); glibc keeps
//! such freed memory in the process (its trim threshold grows after large frees), where it
//! counts in the agent's RSS on every node for as long as it runs.
//!
//! Large buffers are the other half: glibc raises its mmap threshold to the size of each
//! large block freed (up to 32 MiB), so after start-up every big buffer (a view of 10,000
//! volumes, a JSON answer, an inventory's parse) came from the heap and left it
//! fragmented: 10 MiB of the loaded agent's RSS (bench 3b, 51 -> 41 MiB with it fixed).

/// Returns the heap's free memory to the kernel (glibc's `malloc_trim`); a no-op elsewhere.
pub fn return_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Keeps glibc's mmap threshold at its initial 128 KiB: blocks that large are mapped on
/// their own and unmapped when freed, instead of fragmenting the heap. Call first thing,
/// before any thread starts. A no-op elsewhere.
pub fn keep_large_blocks_out_of_the_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}

/// glibc's default (and initial) mmap threshold.
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;
