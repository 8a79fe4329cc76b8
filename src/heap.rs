//! Giving freed heap memory back to the system. glibc's allocator keeps
//! what is freed in its arenas for reuse, so after a large, short-lived
//! allocation (a block cut, the checkpoint after it, a compaction) the
//! process's resident memory stays at that high-water mark: measured on a
//! 24 h backfill of 100k series, 676 MB resident for a 305 MB head, and
//! 417 MB after a trim.
//!
//! The opposite case is the common one: a query of a few MiB to tens of
//! MiB (chunk bytes, decode buffers, a block of a range table) frees all
//! of it when it ends, and glibc's defaults hand the top of an arena back
//! to the system past 128 KiB (and raise that bound only as large blocks
//! are freed), so the next such query takes every page again as a fault
//! and has it zeroed: measured at a fifth of a day-long `sum by (job)
//! (rate(...))` over blocks. [`keep_freed_memory_for_reuse`] keeps up to
//! [`KEEP_FREED_BYTES`] at an arena's top for the next request; queries
//! that held more trim at their end (`promql::engine`), and block cuts
//! and compactions trim after they run. The bound is per arena (glibc
//! gives threads that allocate at once arenas of their own, up to eight
//! per core), so queries running side by side may each leave that much;
//! what a single query leaves is at most the bound.
//!
//! A block's chunk segments are mapped into memory ([`map_block_file`]):
//! a query reads their chunks where the page cache holds them, with no
//! read call or copy per chunk. These are the crate's only `unsafe`
//! calls.

/// Freed memory an arena keeps at its top before giving it back.
pub const KEEP_FREED_BYTES: usize = 64 << 20;

/// The size from which an allocation is mapped on its own (and unmapped
/// when freed) instead of taken from an arena. Setting the trim bound
/// turns off glibc's moving bound for this (it would stay at 128 KiB), so
/// it is set too; 4 MiB keeps a range table's blocks of rows and a
/// selection's buffers in the arenas (measured as fast as 32 MiB on the
/// bench's queries, and it keeps the rare larger buffers out of them).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MAP_ALONE_FROM_BYTES: usize = 4 << 20;

/// Sets glibc's allocator to keep freed memory for reuse as said above
/// (`M_TRIM_THRESHOLD`, and a fixed `M_MMAP_THRESHOLD`); does nothing with
/// other C libraries. Call it first thing in `main`: it acts only once,
/// and only while the process has a single thread (glibc's `mallopt` is
/// not safe while another thread allocates); otherwise it leaves the
/// defaults and says so in its result.
pub fn keep_freed_memory_for_reuse() -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let mut done = false;
    ONCE.call_once(|| {
        done = single_threaded() && set_thresholds();
    });
    done
}

/// Whether this process has one thread now (Linux: one entry under
/// `/proc/self/task`); `false` when that cannot be read.
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.take(2).count() == 1)
}

/// Whether it could (glibc only).
#[allow(unsafe_code)]
fn set_thresholds() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and changes the allocator's own
    // parameters; the caller has checked that this process has no other
    // thread (and `Once` that no other call runs), so no allocation runs
    // concurrently (glibc documents mallopt as unsafe only against
    // concurrent use of the allocator).
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEEP_FREED_BYTES as libc::c_int);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MAP_ALONE_FROM_BYTES as libc::c_int);
    }
    cfg!(all(target_os = "linux", target_env = "gnu"))
}

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

/// Maps `file`, a file of a block (written whole under a temporary name,
/// then renamed into place, and never written again), read-only into
/// memory. Removing the block later unlinks the file; the mapping keeps
/// its pages until it is dropped.
#[allow(unsafe_code)]
pub fn map_block_file(file: &std::fs::File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and its bytes are only read through
    // the `&[u8]` it derefs to. That is sound while nothing changes or
    // shortens the file: Sluice writes a block's files once, before the
    // rename that makes the block visible, and never opens them for
    // writing again (compaction and retention write new blocks and
    // unlink old ones, which leaves a mapped file's pages in place). A
    // process outside Sluice writing into its data directory is outside
    // what any reader of that directory can guard against, as for
    // Prometheus, which maps its blocks the same way.
    unsafe { memmap2::Mmap::map(file) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn thresholds_are_set_only_in_a_single_threaded_process() {
        // The test harness runs tests on threads of its own: never alone.
        assert!(!super::single_threaded());
        assert!(!super::keep_freed_memory_for_reuse());
    }
}
