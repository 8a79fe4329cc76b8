//! Storage: one [`Db`] per tenant, written through its [`Appender`] and
//! read through its [`Querier`]. Inside, the sharded head of
//! series holds Prometheus' chunk encodings ([`chunk`]) with interned labels
//! and an inverted index; [`block`]s on disk hold what it handed over; the
//! WAL, checkpoints and the upkeep loop keep it durable and in shape.

pub mod append;
pub mod appender;
pub mod block;
pub mod blocks;
pub mod cardinality;
pub mod checkpoint;
pub mod chunk;
mod cut;
pub mod db;
pub mod exemplars;
pub mod federated;
mod head;
pub mod index;
pub mod labels;
pub mod metadata;
pub mod querier;
pub mod selected;
pub mod snapshot;
pub mod starts;

pub use crate::wal::commit::Refusal as WalRefusal;
pub use appender::{
    AppendCounts, Appender, Commit, CommitError, SampleError, SeriesBatch, SeriesLimit, SeriesRef,
    SeriesSource,
};
pub use db::{Close, Db, DbOptions, MemoryFull};
pub use head::HeadMemory;
pub use head::{
    CheckpointStats, Durability, HeadOptions, HeadStats, LockWaitStats, Recovery, RetentionReport,
    SeriesSamples,
};
pub use querier::Querier;

/// Prometheus' stale marker: a NaN with this exact bit pattern ends a
/// series for queries. Senders write it when a series disappears.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

/// When a read gives up: at a deadline, when a flag turns true (its client
/// is gone, or the server is shutting down), or never (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct Stop<'a> {
    /// Give up after this instant.
    pub deadline: Option<std::time::Instant>,
    /// Give up once this is true.
    pub flag: Option<&'a std::sync::atomic::AtomicBool>,
    /// Give up once the chunk bytes read from blocks pass this budget.
    pub bytes: Option<&'a ReadBudget>,
}

impl Stop<'_> {
    /// Whether to give up now.
    pub fn now(&self) -> bool {
        self.flag
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            || self.deadline.is_some_and(|d| std::time::Instant::now() > d)
            || self.bytes.is_some_and(ReadBudget::exceeded)
    }

    /// Counts `n` bytes a read copied.
    pub fn charge(&self, n: usize) {
        if let Some(b) = self.bytes {
            b.add(n);
        }
    }
}

/// Bytes a read may copy out of storage (a query's memory budget, what is
/// left of it): the read stops once past it. With a shared pool, what it
/// copies is counted there too as it is read, and it also stops once the
/// pool is past its bound; whoever made the budget gives that back.
#[derive(Debug)]
pub struct ReadBudget {
    used: std::sync::atomic::AtomicUsize,
    max: usize,
    shared: Option<(std::sync::Arc<std::sync::atomic::AtomicUsize>, usize)>,
}

impl ReadBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            used: std::sync::atomic::AtomicUsize::new(0),
            max,
            shared: None,
        }
    }

    /// A budget of `max` bytes, counted in `pool` too, which may hold at
    /// most `pool_max`.
    pub fn pooled(
        max: usize,
        pool: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        pool_max: usize,
    ) -> Self {
        Self {
            shared: Some((pool, pool_max)),
            ..Self::new(max)
        }
    }

    fn add(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.used.fetch_add(n, Relaxed);
        if let Some((pool, _)) = &self.shared {
            pool.fetch_add(n, Relaxed);
        }
    }

    /// Bytes counted so far.
    pub fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether more than the budget, or the pool's bound, has been
    /// counted.
    pub fn exceeded(&self) -> bool {
        self.used() > self.max || self.pool_exceeded()
    }

    /// Whether the shared pool is past its bound.
    pub fn pool_exceeded(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|(pool, max)| pool.load(std::sync::atomic::Ordering::Relaxed) > *max)
    }
}

/// A read gave up (see [`Stop`]) before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the read was stopped before it finished")]
pub struct Stopped;

/// The wall clock in Unix milliseconds, injectable so tests can move time
/// (retention, the future-sample bound) without sleeping.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    /// A clock that reads `f`.
    pub fn new(f: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// The system clock.
    pub fn system() -> Self {
        Self::new(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        })
    }

    /// Now, in Unix milliseconds.
    pub fn now_ms(&self) -> i64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now_ms())
    }
}

/// Memory of this machine or its cgroup, whichever is smaller, if known.
pub fn machine_memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_stops_once_past_its_byte_budget() {
        let budget = ReadBudget::new(100);
        let stop = Stop {
            deadline: None,
            flag: None,
            bytes: Some(&budget),
        };
        stop.charge(100);
        assert!(!stop.now(), "at the budget, not past it");
        stop.charge(1);
        assert!(stop.now());
        assert_eq!(budget.used(), 101);
        let unbounded = Stop {
            deadline: None,
            flag: None,
            bytes: None,
        };
        unbounded.charge(usize::MAX);
        assert!(!unbounded.now());
    }
}
