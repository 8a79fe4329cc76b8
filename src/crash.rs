//! Crash points for the crash tests: steps of the block cut, of
//! compaction and of cleaning tombstones where a test can have the process killed (SIGKILL, as
//! `kill -9`), to check that a start afterwards loses and doubles
//! nothing. Nothing is armed unless the binary's `main` arms one (from
//! `SLUICE_TEST_KILL_AT`); an unarmed point costs one atomic load.

use std::sync::OnceLock;

static ARMED: OnceLock<String> = OnceLock::new();

/// The points, in the order a cut and a compaction pass them.
pub const POINTS: [&str; 6] = [
    // A block's chunks are written, its index is not.
    "block-writing",
    // The block is in place, the head still holds its chunks.
    "block-written",
    // The head dropped the block's chunks; no checkpoint yet.
    "head-truncated",
    // A compacted block is half written.
    "compaction-writing",
    // The compacted block is in place; its parents are not yet deleted.
    "compaction-written",
    // A block written again without its tombstones' samples is in place;
    // the old one is not deleted.
    "tombstones-cleaned",
];

/// Arms the point `name` (once per process). False if `name` is not a
/// point.
pub fn arm(name: &str) -> bool {
    POINTS.contains(&name) && ARMED.set(name.to_owned()).is_ok()
}

/// Kills the process with SIGKILL if `name` is armed.
pub(crate) fn point(name: &str) {
    if ARMED.get().is_some_and(|a| a == name) {
        tracing::warn!(point = name, "crash point reached: killing the process");
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status();
        // `kill` should not return; abort is the next best thing.
        std::process::abort();
    }
}
