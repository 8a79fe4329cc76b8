//! What an append is told and what it reports: the head's options, the
//! per-sample outcomes and their counts. Shared by the head and its shards,
//! naming neither.

/// Why one sample was not stored. Values, not errors: counted per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleError {
    /// Older than the series' newest sample.
    OutOfOrder,
    /// Same timestamp as the newest sample, different value.
    Duplicate,
    /// Too far in the future.
    OutOfBounds,
}

impl SampleError {
    /// Every variant, for iterating counters.
    pub const ALL: [SampleError; 3] = [Self::OutOfOrder, Self::Duplicate, Self::OutOfBounds];

    /// The reason label used in metrics and messages.
    pub fn reason(self) -> &'static str {
        match self {
            Self::OutOfOrder => "out_of_order",
            Self::Duplicate => "duplicate_sample_for_timestamp",
            Self::OutOfBounds => "out_of_bounds",
        }
    }
}

/// A series limit was reached; the series was not created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SeriesLimit {
    /// The most series held in all.
    #[error(
        "series limit of {0} reached (max-series, or the tenant's max_global_series_per_user)"
    )]
    Total(usize),
    /// The most series of one metric name.
    #[error("per-metric series limit of {0} reached (the tenant's max_global_series_per_metric)")]
    PerMetric(usize),
}

/// Outcome counts of appends, accumulated over a request.
#[derive(Debug, Default, Clone)]
pub struct AppendCounts {
    /// Samples stored (exact duplicates included: they are accepted).
    pub appended: u64,
    /// Rejected samples, indexed like [`SampleError::ALL`].
    pub rejected: [u64; 3],
    /// The first rejection seen since the caller last cleared it: reason and timestamp.
    pub first: Option<(SampleError, i64)>,
    /// Shards appended to (bit `i % 64` for shard `i`), whose log buffers
    /// `Head::log_appended` hands to the WAL.
    pub touched: u64,
    /// Of `appended`, samples stored out of order (within the window).
    pub out_of_order: u64,
    /// The newest timestamp stored in order (0 before any): the head's
    /// newest moves to it, and the out-of-order window with it.
    pub newest: i64,
}

/// The times an append takes: `[min_t, max_t]`; in order from
/// `inorder_from` on (older times are in blocks already); and from
/// `ooo_from` on a sample older than its series' newest, or older than
/// `inorder_from`, goes out of order (`i64::MAX`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) min_t: i64,
    pub(crate) max_t: i64,
    pub(crate) inorder_from: i64,
    pub(crate) ooo_from: i64,
}

impl AppendCounts {
    #[inline]
    pub(crate) fn reject(&mut self, e: SampleError, t: i64) {
        self.rejected[e as usize] += 1;
        if self.first.is_none() {
            self.first = Some((e, t));
        }
    }

    /// Total rejected samples.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// Head tuning, with Prometheus' defaults.
#[derive(Debug, Clone)]
pub struct HeadOptions {
    /// Number of shards (rounded up to a power of two).
    pub shards: usize,
    /// Most series the head will hold; new series beyond it are rejected.
    pub max_series: usize,
    /// Chunks never cross multiples of this many milliseconds, and blocks
    /// are cut from the head in ranges of it (2h).
    pub chunk_range_ms: i64,
    /// The largest block compaction makes (36h: 10% of 15 days).
    pub max_block_range_ms: i64,
    /// Target samples per chunk (120).
    pub samples_per_chunk: u16,
    /// Exemplars kept, over all series (0: none).
    pub max_exemplars: usize,
    /// How far behind the head's newest sample a sample older than its
    /// series' newest is still taken, out of order (0: never).
    pub ooo_window_ms: i64,
    /// Samples of a series' out-of-order buffer before it is sealed into
    /// a chunk (Prometheus' `out_of_order_cap_max`, 32).
    pub ooo_cap: usize,
    /// Keep the start times samples are sent with (`st-storage`).
    pub st_storage: bool,
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self {
            shards: 16,
            max_series: 10_000_000,
            chunk_range_ms: 2 * 3600 * 1000,
            max_block_range_ms: 36 * 3600 * 1000,
            samples_per_chunk: 120,
            max_exemplars: 100_000,
            ooo_window_ms: 0,
            ooo_cap: 32,
            st_storage: false,
        }
    }
}

/// The end of the chunk range that holds `t` (Go's truncating division).
pub(crate) fn range_for_timestamp(t: i64, width: i64) -> i64 {
    (t / width) * width + width
}

/// Prometheus' `computeChunkEndTime`: spreads the rest of the range into
/// chunks of roughly equal sample counts.
pub(crate) fn chunk_end_time(start: i64, cur: i64, max_t: i64, ratio_to_full: f64) -> i64 {
    let n = (max_t - start) as f64 / ((cur - start + 1) as f64 * ratio_to_full);
    if n <= 1.0 {
        return max_t;
    }
    (start as f64 + (max_t - start) as f64 / n.floor()) as i64
}
