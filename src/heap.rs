//! Giving freed heap memory back to the system. glibc's allocator keeps
//! what is freed in its arenas for reuse, so after a large, short-lived
//! allocation (a block cut, the checkpoint after it, a compaction) the
//! process's resident memory stays at that high-water mark: measured on a
//! 24 h backfill of 100k series, 676 MB resident for a 305 MB head, and
//! 417 MB after a trim. This is the one `unsafe` call in the crate.

/// Returns the allocator's free pages to the system (glibc's
/// `malloc_trim(0)`); does nothing with other C libraries.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and touches only the
    // allocator's own free lists, under the allocator's locks; glibc
    // documents it as thread-safe (MT-Safe), so any thread may call it at
    // any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
