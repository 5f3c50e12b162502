//! Giving freed heap back to the kernel. Start-up allocates and frees several MiB at once
//! (the kernel's BTF parsed for the probes, the mount table, the first view); glibc keeps
//! such freed memory in the process (its trim threshold grows after large frees), where it
//! counts in the agent's RSS on every node for as long as it runs.

/// Returns the heap's free memory to the kernel (glibc's `malloc_trim`); a no-op elsewhere.
pub fn return_free_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and trims the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}
