//! The head: every series in memory, spread over shards by label hash.
//!
//! Appends take one shard lock per series for a short, synchronous critical
//! section. A series already seen is found from the sender's raw label bytes
//! (see [`super::labels`]); only a new series is decoded, interned and indexed.
//!
//! By role, as Prometheus splits its head:
//! - this file: the head itself, its sizes, retention and checkpoint stats;
//! - [`shard`]: a shard's series, chunks, interned labels and postings;
//!   [`hist_series`] the native histogram chunks of a series;
//! - `append`: finding or creating a series and appending under its lock;
//! - `log`: the head's side of the WAL (records gathered per shard, handed
//!   over per commit, visibility caught up with durability);
//! - `read`: the head's own reads (matching series, sizes, what a cut copies);
//! - `replay`: opening from a checkpoint and the WAL;
//! - `deleted`: the deleted time ranges of series (`delete_series`),
//!   logged, and left out of every read;
//! - [`aliases`]: protocol keys of series (remote write 2.0).
//!
//! Only `storage` sees any of it: the rest of the crate writes through the
//! `Appender` and reads through the `Querier`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

mod append;
pub(super) use append::NO_SLOT;
pub(super) mod aliases;
pub(super) mod deleted;
pub(super) mod hist_series;
mod log;
pub(super) use log::LateSeries;
pub(super) mod ooo;
mod read;
mod replay;
pub(super) mod shard;
pub(super) mod taken;

pub use super::append::{AppendCounts, HeadOptions, SeriesLimit};
use super::exemplars::ExemplarStore;
use super::labels::Label;
use crate::wal::commit::{FsyncMode, GroupCommit};
use crate::wal::WalOptions;
use aliases::Aliases;
pub use shard::HeadMemory;
use shard::Shard;

/// Sizes of the head, computed on demand.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeadStats {
    /// Series held.
    pub series: usize,
    /// Chunks held (sealed and open).
    pub chunks: usize,
    /// Encoded bytes of all chunks.
    pub chunk_bytes: usize,
    /// Samples in all chunks.
    pub samples: usize,
}

/// A series and its samples, copied out of the head.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesSamples {
    /// Sorted labels.
    pub labels: Vec<Label>,
    /// Samples in time order.
    pub samples: Vec<(i64, f64)>,
}

/// Keeps each shard (its lock word and hot counters) on cache lines of its
/// own, so two cores appending to neighbouring shards do not invalidate
/// each other's lines.
#[derive(Debug)]
#[repr(align(128))]
struct Padded<T>(T);

/// A shard and its accounted bytes, readable without the lock (for the
/// memory limit, checked once per write request). A "slot", elsewhere, is
/// a series' index inside its shard.
#[derive(Debug, Default)]
struct ShardCell {
    shard: Mutex<Shard>,
    bytes: AtomicUsize,
    /// Whether a read (a query's selection, a label lookup) holds the
    /// lock now: an append that has to wait says whom it waited behind.
    read_held: std::sync::atomic::AtomicBool,
}

impl std::ops::Deref for ShardCell {
    type Target = Mutex<Shard>;

    fn deref(&self) -> &Mutex<Shard> {
        &self.shard
    }
}

impl std::ops::DerefMut for ShardCell {
    fn deref_mut(&mut self) -> &mut Mutex<Shard> {
        &mut self.shard
    }
}

impl ShardCell {
    /// Publishes the shard's size; call with its lock held.
    #[inline]
    fn publish(&self, shard: &Shard) {
        self.bytes.store(shard.accounted_bytes(), Ordering::Relaxed);
    }

    /// Locks the shard for an append, counting in `waits` how long it
    /// waited when someone else held it (and whether a read did). Costs
    /// the same as a plain lock when the lock is free.
    #[inline]
    fn lock_for_append<'a>(&'a self, waits: &LockWaits) -> parking_lot::MutexGuard<'a, Shard> {
        if let Some(g) = self.shard.try_lock() {
            return g;
        }
        self.lock_waiting(waits)
    }

    #[cold]
    fn lock_waiting<'a>(&'a self, waits: &LockWaits) -> parking_lot::MutexGuard<'a, Shard> {
        let behind_read = self.read_held.load(Ordering::Relaxed);
        #[cfg(test)]
        waits.began.fetch_add(1, Ordering::Relaxed);
        let began = std::time::Instant::now();
        let g = self.shard.lock();
        waits.note(began.elapsed(), behind_read);
        g
    }
}

/// How long appends waited for shard locks that others held.
#[derive(Debug, Default)]
struct LockWaits {
    waits: AtomicU64,
    nanos: AtomicU64,
    behind_reads: AtomicU64,
    behind_reads_nanos: AtomicU64,
    /// Waits begun, for tests to know an append is waiting.
    #[cfg(test)]
    began: AtomicU64,
}

impl LockWaits {
    fn note(&self, waited: std::time::Duration, behind_read: bool) {
        let nanos = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        self.waits.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        if behind_read {
            self.behind_reads.fetch_add(1, Ordering::Relaxed);
            self.behind_reads_nanos.fetch_add(nanos, Ordering::Relaxed);
        }
    }
}

/// Appends' waits for head shard locks since start (see
/// [`Head::lock_waits`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LockWaitStats {
    /// Times an append found a shard's lock held and waited for it.
    pub waits: u64,
    /// Seconds those waits took.
    pub seconds: f64,
    /// Of the waits, those behind a read (a query's selection of series,
    /// a label or series lookup).
    pub behind_reads: u64,
    /// Seconds those took.
    pub behind_reads_seconds: f64,
}

/// What one retention pass removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionReport {
    /// Chunks dropped (sealed ones past retention, and those of removed series).
    pub chunks: usize,
    /// Series removed: no sample within retention.
    pub series: usize,
}

/// All series in memory.
#[derive(Debug)]
pub struct Head {
    shards: Box<[Padded<ShardCell>]>,
    opts: HeadOptions,
    series: AtomicUsize,
    /// Most series held: `opts.max_series`, or a tenant's own limit.
    max_series: AtomicUsize,
    /// Series held per metric name, for the per-metric limit: counted as
    /// series are made and removed (per new series, not per sample).
    per_metric: Mutex<std::collections::HashMap<Box<str>, usize>>,
    /// Most series of one metric name (0: no limit).
    max_series_per_metric: AtomicUsize,
    /// The next series reference handed out (WAL and checkpoints).
    next_ref: AtomicU64,
    wal: Option<Arc<GroupCommit>>,
    wal_dir: Option<PathBuf>,
    recovery: Option<Recovery>,
    checkpoints: Mutex<CheckpointStats>,
    /// The checkpoint chunk files the newest checkpoint refers to: a
    /// sealed chunk saved in one of them is not written again.
    chunk_files: Mutex<std::collections::BTreeSet<u64>>,
    retained: Mutex<RetentionReport>,
    /// The retention cutoff of the last pass: older samples are out of
    /// bounds, since the next pass would drop them.
    min_valid_ms: AtomicI64,
    /// The end of the newest block cut: older samples are stored out of
    /// order (within the window) or refused, never in order.
    cut_floor: AtomicI64,
    /// Exemplars of every series, logged and checkpointed with the head.
    exemplars: Arc<ExemplarStore>,
    /// Protocol keys of series, to their fingerprints (see [`Aliases`]).
    aliases: Aliases,
    /// The out-of-order window: `opts.ooo_window_ms`, or a tenant's own.
    ooo_window_ms: AtomicI64,
    /// The newest sample time stored in order, over every series (the
    /// out-of-order window ends here).
    max_t: AtomicI64,
    /// Deleted time ranges by series id: replaced whole on a change, so a
    /// reader holds a fixed view (see `deleted`).
    deleted: parking_lot::RwLock<Arc<super::block::tombstones::Tombstones>>,
    /// Appends' waits for shard locks.
    lock_waits: LockWaits,
}

/// Checkpoints taken since start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointStats {
    /// Checkpoints written.
    pub written: u64,
    /// Checkpoints that failed.
    pub failed: u64,
    /// How long the last one took, in seconds.
    pub last_seconds: f64,
    /// Size of the last one: its file and the chunk files it refers to.
    pub last_bytes: u64,
    /// Bytes the last one wrote: its file and the chunks no earlier one
    /// had saved.
    pub last_written_bytes: u64,
}

/// Where and how the head keeps itself durable.
#[derive(Debug, Clone)]
pub struct Durability {
    /// The data directory: `wal/` and checkpoints live under it.
    pub dir: PathBuf,
    /// Segment size and repair.
    pub wal: WalOptions,
    /// When appends are acknowledged.
    pub fsync: FsyncMode,
}

/// What the start-up replay did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovery {
    /// Wall time of checkpoint load and WAL replay.
    pub seconds: f64,
    /// Series restored from the checkpoint.
    pub checkpoint_series: u64,
    /// WAL records replayed.
    pub records: u64,
    /// Samples stored by the replay.
    pub samples: u64,
    /// Replayed samples refused (already held, or out of order).
    pub refused_samples: u64,
    /// Bytes of torn or repaired log dropped.
    pub dropped_bytes: u64,
    /// Whether a repair dropped records from the middle of the log.
    pub repaired: bool,
    /// The WAL segment the checkpoint covered up to (0 without one), and
    /// the last segment replayed (the checkpoint's when none was after
    /// it): Prometheus' `/api/v1/status/walreplay` `min` and `max`.
    pub segments: (u64, u64),
}

impl Head {
    /// An empty head.
    pub fn new(opts: HeadOptions) -> Self {
        let n = opts.shards.max(1).next_power_of_two();
        Self {
            shards: (0..n).map(|_| Padded(ShardCell::default())).collect(),
            series: AtomicUsize::new(0),
            max_series: AtomicUsize::new(opts.max_series),
            per_metric: Mutex::default(),
            max_series_per_metric: AtomicUsize::new(0),
            next_ref: AtomicU64::new(1),
            wal: None,
            wal_dir: None,
            recovery: None,
            checkpoints: Mutex::new(CheckpointStats::default()),
            chunk_files: Mutex::new(std::collections::BTreeSet::new()),
            retained: Mutex::new(RetentionReport::default()),
            min_valid_ms: AtomicI64::new(i64::MIN),
            cut_floor: AtomicI64::new(i64::MIN),
            exemplars: Arc::new(ExemplarStore::new(opts.max_exemplars)),
            aliases: Aliases::default(),
            ooo_window_ms: AtomicI64::new(opts.ooo_window_ms),
            max_t: AtomicI64::new(i64::MIN),
            deleted: parking_lot::RwLock::default(),
            lock_waits: LockWaits::default(),
            opts,
        }
    }

    /// Sets the out-of-order window (0: samples older than their
    /// series' newest are refused).
    pub fn set_ooo_window(&self, ms: i64) {
        self.ooo_window_ms.store(ms.max(0), Ordering::Relaxed);
    }

    /// The out-of-order window in force.
    pub fn ooo_window(&self) -> i64 {
        self.ooo_window_ms.load(Ordering::Relaxed)
    }

    /// Sets the most series held to `max` (new series past it are
    /// refused; those held stay).
    pub fn set_max_series(&self, max: usize) {
        self.max_series.store(max, Ordering::Relaxed);
    }

    /// Sets the most series of one metric name to `max` (0: no limit;
    /// new series past it are refused, those held stay).
    pub fn set_max_series_per_metric(&self, max: usize) {
        self.max_series_per_metric.store(max, Ordering::Relaxed);
    }

    /// The most series of one metric name (0: no limit).
    pub fn max_series_per_metric(&self) -> usize {
        self.max_series_per_metric.load(Ordering::Relaxed)
    }

    /// Series held of metric `name`.
    pub fn metric_series_count(&self, name: &str) -> usize {
        self.per_metric.lock().get(name).copied().unwrap_or(0)
    }

    /// Counts one more series of the metric named in `labels` (the
    /// per-metric limit checked, unless `limited` is false), or refuses it.
    pub(super) fn count_metric_series(
        &self,
        labels: &[(&str, &str)],
        limited: bool,
    ) -> Result<(), SeriesLimit> {
        let Some(&(_, name)) = labels.iter().find(|(n, _)| *n == "__name__") else {
            return Ok(());
        };
        let max = if limited {
            self.max_series_per_metric.load(Ordering::Relaxed)
        } else {
            0
        };
        let mut counts = self.per_metric.lock();
        match counts.get_mut(name) {
            Some(n) if max > 0 && *n >= max => return Err(SeriesLimit::PerMetric(max)),
            Some(n) => *n += 1,
            None => {
                counts.insert(name.into(), 1);
            }
        }
        Ok(())
    }

    /// Series held now.
    pub fn series_count(&self) -> usize {
        self.series.load(Ordering::Relaxed)
    }

    /// The options it was made with.
    pub fn opts(&self) -> &HeadOptions {
        &self.opts
    }

    /// The most series held.
    pub fn max_series(&self) -> usize {
        self.max_series.load(Ordering::Relaxed)
    }

    /// Other keys for the head's series (remote write 2.0's label keys).
    pub(super) fn aliases(&self) -> &Aliases {
        &self.aliases
    }

    /// The head's options.
    pub(super) fn options(&self) -> &HeadOptions {
        &self.opts
    }

    /// What the start-up replay did, if the head was opened from disk.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.recovery.as_ref()
    }

    /// The head's exemplars.
    pub fn exemplars(&self) -> &Arc<ExemplarStore> {
        &self.exemplars
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // Middle bits: hashbrown uses the low bits for buckets and the top
        // seven for tags, so neither should be constant within a shard.
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    /// Bytes the head holds by part, each shard read under its lock.
    pub fn memory(&self) -> HeadMemory {
        let mut m = HeadMemory::default();
        for Padded(cell) in self.shards.iter() {
            m.add(cell.lock().memory());
        }
        m
    }

    /// Bytes the head accounts for: chunks, series, labels, index. The
    /// memory limit compares against this; it tracks the process' RSS
    /// within the slack the memory test states.
    pub fn accounted_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Drops chunks that end before `cutoff_ms` and series with no sample
    /// at or after it, shard by shard, counting what went.
    pub(super) fn apply_retention(&self, cutoff_ms: i64) -> RetentionReport {
        let r = self.truncate(cutoff_ms);
        let mut total = self.retained.lock();
        total.chunks += r.chunks;
        total.series += r.series;
        r
    }

    /// Drops the head's chunks that end before `cutoff_ms` and its series
    /// with no sample at or after it, and refuses older samples from now
    /// on.
    pub(super) fn truncate(&self, cutoff_ms: i64) -> RetentionReport {
        self.min_valid_ms.fetch_max(cutoff_ms, Ordering::Relaxed);
        self.drop_before(cutoff_ms, false)
    }

    /// Drops what the head holds in order before `cutoff_ms` (a block holds
    /// it now), keeping its out-of-order samples, which
    /// [`Head::drop_flushed`] lets go of exactly.
    pub(super) fn truncate_in_order(&self, cutoff_ms: i64) -> RetentionReport {
        self.drop_before(cutoff_ms, true)
    }

    fn drop_before(&self, cutoff_ms: i64, keep_ooo: bool) -> RetentionReport {
        let mut r = RetentionReport::default();
        let mut removed = Vec::new();
        for Padded(cell) in self.shards.iter() {
            let mut shard = cell.lock();
            let (chunks, series) = shard.retain(cutoff_ms, keep_ooo, &mut removed);
            cell.publish(&shard);
            r.chunks += chunks;
            r.series += series;
        }
        self.prune_deleted();
        self.series.fetch_sub(r.series, Ordering::Relaxed);
        if !removed.is_empty() {
            let mut counts = self.per_metric.lock();
            for name in removed {
                if let Some(n) = counts.get_mut(&*name) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        counts.remove(&*name);
                    }
                }
            }
        }
        if r.series > 0 {
            // The shards that lost series were rebuilt: slots moved.
            self.aliases.clear();
        }
        r
    }

    /// Takes samples older than `t` only out of order from now on (a block
    /// holds what is in order there): an append that locks a shard after
    /// this sees it.
    pub(super) fn raise_cut_floor(&self, t: i64) {
        self.cut_floor.fetch_max(t, Ordering::SeqCst);
    }

    /// The end of the newest block cut (`i64::MIN` before any).
    pub(super) fn cut_floor(&self) -> i64 {
        self.cut_floor.load(Ordering::SeqCst)
    }

    /// The oldest timestamp an append accepts: the last retention cutoff.
    pub fn min_valid_ms(&self) -> i64 {
        self.min_valid_ms.load(Ordering::Relaxed)
    }

    /// Drops every late sample older than `below` (see
    /// [`Shard::drop_late_before`]).
    pub(super) fn drop_late_before(&self, below: i64) {
        for Padded(cell) in self.shards.iter() {
            let mut shard = cell.lock();
            shard.drop_late_before(below);
            cell.publish(&shard);
        }
    }

    /// What retention removed since start.
    pub fn retention_stats(&self) -> RetentionReport {
        *self.retained.lock()
    }

    /// Records a checkpoint written in `took`, of `bytes` in all, of
    /// which it wrote `written`.
    pub(super) fn note_checkpoint(&self, took: std::time::Duration, bytes: u64, written: u64) {
        let mut c = self.checkpoints.lock();
        c.written += 1;
        c.last_seconds = took.as_secs_f64();
        c.last_bytes = bytes;
        c.last_written_bytes = written;
    }

    /// The checkpoint chunk files whose saved chunks need no new copy.
    pub(super) fn chunk_files(&self) -> &Mutex<std::collections::BTreeSet<u64>> {
        &self.chunk_files
    }

    /// Records a failed checkpoint.
    pub(super) fn note_checkpoint_failure(&self) {
        self.checkpoints.lock().failed += 1;
    }

    /// How long appends waited for shard locks others held, since start.
    pub fn lock_waits(&self) -> LockWaitStats {
        let w = &self.lock_waits;
        let secs = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / 1e9;
        LockWaitStats {
            waits: w.waits.load(Ordering::Relaxed),
            seconds: secs(&w.nanos),
            behind_reads: w.behind_reads.load(Ordering::Relaxed),
            behind_reads_seconds: secs(&w.behind_reads_nanos),
        }
    }

    /// Checkpoints taken since start.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        *self.checkpoints.lock()
    }

    /// Number of shards.
    pub(super) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Runs `f` on shard `i` under its lock.
    pub(super) fn with_shard<T>(&self, i: usize, f: impl FnOnce(&Shard) -> T) -> T {
        f(&self.shards[i].0.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::index::MatchOp;
    use crate::storage::index::Matcher;
    use crate::storage::labels::encode_canonical;
    use crate::storage::SampleError;
    use crate::storage::Stop;
    use std::sync::Arc;

    fn canon(labels: &[(&str, &str)]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_canonical(labels.iter().copied(), &mut v);
        v
    }

    #[test]
    fn raw_bytes_find_the_series_created_from_labels() {
        let head = Head::new(HeadOptions::default());
        let labels = [("__name__", "up"), ("job", "node")];
        let raw = canon(&labels);
        let mut c = AppendCounts::default();
        assert!(!head.append_existing(&raw, [(1, 1.0)].into_iter(), i64::MAX, &mut c));
        head.append_labels(&labels, &raw, [(1, 1.0)].into_iter(), i64::MAX, &mut c)
            .expect("under limit");
        assert!(head.append_existing(
            &raw,
            [(2, 2.0), (2, 3.0), (0, 0.0)].into_iter(),
            i64::MAX,
            &mut c
        ));
        assert_eq!(c.appended, 2);
        assert_eq!(c.rejected, [1, 1, 0]);
        assert_eq!(c.first, Some((SampleError::Duplicate, 2)));
        assert_eq!(
            head.stats(),
            HeadStats {
                series: 1,
                chunks: 1,
                chunk_bytes: 15,
                samples: 2,
            }
        );
        let m = Matcher::new(MatchOp::Equal, "job", "node").expect("matcher");
        let got = head.querier().select_samples(&[m], 0, 10);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].samples, vec![(1, 1.0), (2, 2.0)]);
    }

    #[test]
    fn series_limit_is_enforced() {
        let head = Head::new(HeadOptions {
            max_series: 1,
            ..Default::default()
        });
        let mut c = AppendCounts::default();
        let a = [("__name__", "a")];
        let b = [("__name__", "b")];
        head.append_labels(&a, &canon(&a), std::iter::empty(), 0, &mut c)
            .expect("first fits");
        assert_eq!(
            head.append_labels(&b, &canon(&b), std::iter::empty(), 0, &mut c),
            Err(SeriesLimit::Total(1))
        );
        // An existing series still takes samples at the limit.
        head.append_labels(&a, &canon(&a), [(5, 1.0)].into_iter(), 10, &mut c)
            .expect("exists");
        assert_eq!(c.appended, 1);
    }

    #[test]
    fn the_per_metric_limit_counts_series_made_and_removed() {
        let head = Head::new(HeadOptions::default());
        head.set_max_series_per_metric(2);
        let mut c = AppendCounts::default();
        let add = |name: &str, i: &str, t: i64, c: &mut AppendCounts| {
            let l = [("__name__", name), ("i", i)];
            head.append_labels(&l, &canon(&l), [(t, 1.0)].into_iter(), t, c)
                .map(|_| ())
        };
        add("m", "1", 10, &mut c).expect("first");
        add("m", "2", 100, &mut c).expect("second");
        assert_eq!(add("m", "3", 100, &mut c), Err(SeriesLimit::PerMetric(2)));
        // Another metric is counted apart; the refused series took no room.
        add("n", "1", 100, &mut c).expect("other metric");
        assert_eq!(head.series_count(), 3);
        assert_eq!(head.metric_series_count("m"), 2);
        // Retention removes m{i="1"} (its only sample is at 10): room for one.
        head.truncate(50);
        assert_eq!(head.metric_series_count("m"), 1);
        add("m", "3", 100, &mut c).expect("room again");
        assert_eq!(add("m", "4", 100, &mut c), Err(SeriesLimit::PerMetric(2)));
        // Without the limit, the count goes on.
        head.set_max_series_per_metric(0);
        add("m", "4", 100, &mut c).expect("no limit");
        assert_eq!(head.metric_series_count("m"), 3);
    }

    #[test]
    fn future_samples_are_out_of_bounds() {
        let head = Head::new(HeadOptions::default());
        let l = [("__name__", "a")];
        let mut c = AppendCounts::default();
        head.append_labels(
            &l,
            &canon(&l),
            [(5, 1.0), (11, 1.0)].into_iter(),
            10,
            &mut c,
        )
        .expect("fits");
        assert_eq!(c.rejected, [0, 0, 1]);
    }

    #[test]
    fn concurrent_appends_keep_every_sample() {
        let head = Arc::new(Head::new(HeadOptions {
            shards: 4,
            ..Default::default()
        }));
        let threads: Vec<_> = (0..4)
            .map(|w| {
                let head = Arc::clone(&head);
                std::thread::spawn(move || {
                    let mut c = AppendCounts::default();
                    for i in 0..200i64 {
                        for s in 0..50 {
                            let name = format!("m{}", (s + w * 7) % 60);
                            let l = [("__name__", name.as_str())];
                            let raw = canon(&l);
                            // Each thread appends its own timestamps: 4 apart, offset by w.
                            let t = i * 4 + w;
                            if !head.append_existing(&raw, [(t, 1.0)].into_iter(), i64::MAX, &mut c)
                            {
                                head.append_labels(
                                    &l,
                                    &raw,
                                    [(t, 1.0)].into_iter(),
                                    i64::MAX,
                                    &mut c,
                                )
                                .expect("fits");
                            }
                        }
                    }
                    c
                })
            })
            .collect();
        let mut total = AppendCounts::default();
        for t in threads {
            let c = t.join().expect("thread");
            total.appended += c.appended;
            total.rejected[0] += c.rejected[0];
        }
        assert_eq!(total.appended + total.rejected[0], 4 * 200 * 50);
        assert_eq!(head.stats().series, 60);
        // Every stored series is in time order with no repeats.
        for s in head.querier().select_samples(
            &[Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re")],
            0,
            i64::MAX,
        ) {
            assert!(
                s.samples.windows(2).all(|w| w[0].0 < w[1].0),
                "{:?}",
                s.labels
            );
        }
    }

    fn durability(dir: &std::path::Path) -> Durability {
        Durability {
            dir: dir.to_owned(),
            wal: WalOptions {
                segment_bytes: 4096,
                repair: crate::wal::Repair::Refuse,
                reserve_bytes: 0,
            },
            fsync: FsyncMode::Always,
        }
    }

    fn everything(head: &Head) -> Vec<SeriesSamples> {
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        head.querier().select_samples(&[all], i64::MIN, i64::MAX)
    }

    fn log_and_wait(head: &Head) {
        head.log_and_wait();
    }

    #[test]
    fn reads_see_what_the_wal_holds_durably_and_nothing_more() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = Head::open(HeadOptions::default(), &durability(dir.path())).expect("open");
        let l = [("__name__", "m")];
        let raw = canon(&l);
        let mut c = AppendCounts::default();
        head.append_labels(&l, &raw, [(1000, 1.0)].into_iter(), i64::MAX, &mut c)
            .expect("fits");
        // Stored in the head, not yet in the log: neither the sample nor
        // the new series is visible.
        assert_eq!(everything(&head), Vec::new());
        assert!(head
            .querier()
            .series_labels(&[], i64::MIN, i64::MAX, &Stop::default())
            .expect("no stop")
            .is_empty());
        log_and_wait(&head);
        let got = everything(&head);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].samples, vec![(1000, 1.0)]);
        // A second sample waits for its own generation of the log; the
        // first stays visible meanwhile.
        assert!(head.append_existing(&raw, [(2000, 2.0)].into_iter(), i64::MAX, &mut c));
        assert_eq!(everything(&head)[0].samples, vec![(1000, 1.0)]);
        log_and_wait(&head);
        assert_eq!(everything(&head)[0].samples, vec![(1000, 1.0), (2000, 2.0)]);
        head.close_wal();
    }

    #[test]
    fn a_reopened_head_holds_what_concurrent_writers_stored() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = Arc::new(
            Head::open(
                HeadOptions {
                    shards: 4,
                    ..Default::default()
                },
                &durability(dir.path()),
            )
            .expect("open"),
        );
        // Four threads write the same 30 series with interleaved timestamps,
        // so appends to one series race and some are refused as out of
        // order: the log must hold exactly what the head accepted, in the
        // head's order.
        let threads: Vec<_> = (0..4i64)
            .map(|w| {
                let head = Arc::clone(&head);
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .expect("rt");
                    for i in 0..100i64 {
                        let mut c = AppendCounts::default();
                        for s in 0..30 {
                            let name = format!("m{s}");
                            let l = [("__name__", name.as_str()), ("w", "x")];
                            let raw = canon(&l);
                            let t = i * 4 + w;
                            let v = (t * 7 + s) as f64;
                            if !head.append_existing(&raw, [(t, v)].into_iter(), i64::MAX, &mut c) {
                                head.append_labels(
                                    &l,
                                    &raw,
                                    [(t, v)].into_iter(),
                                    i64::MAX,
                                    &mut c,
                                )
                                .expect("fits");
                            }
                        }
                        let lsn = head.log_appended(&mut c);
                        rt.block_on(head.durable(lsn)).expect("durable");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let before = everything(&head);
        assert_eq!(before.len(), 30);
        let stored: usize = before.iter().map(|s| s.samples.len()).sum();
        assert!(stored >= 30 * 100, "{stored}");
        head.close_wal();
        drop(head);
        let reopened = Head::open(
            HeadOptions {
                shards: 2,
                ..Default::default()
            },
            &durability(dir.path()),
        )
        .expect("reopen");
        assert_eq!(everything(&reopened), before);
        let rec = reopened.recovery().expect("replayed");
        assert_eq!(rec.samples as usize, stored);
        assert_eq!(rec.refused_samples, 0);
        // New series get references past the replayed ones.
        let l = [("__name__", "new")];
        let mut c = AppendCounts::default();
        reopened
            .append_labels(&l, &canon(&l), [(1, 1.0)].into_iter(), i64::MAX, &mut c)
            .expect("fits");
        let lsn = reopened.log_appended(&mut c);
        assert!(lsn > 0);
        reopened.close_wal();
        drop(reopened);
        let again = Head::open(HeadOptions::default(), &durability(dir.path())).expect("again");
        assert_eq!(everything(&again).len(), 31);
    }

    #[test]
    fn appends_count_their_waits_for_a_shard_and_whom_they_waited_behind() {
        let head = Arc::new(Head::new(HeadOptions {
            shards: 1,
            ..Default::default()
        }));
        /// Appends series `name` from another thread while `held` keeps
        /// the only shard, lets it go once the append waits (its
        /// `began`-th wait), and returns the counts after.
        fn append_behind<G>(
            head: &Arc<Head>,
            held: G,
            name: &'static str,
            began: u64,
        ) -> LockWaitStats {
            let writer = {
                let head = Arc::clone(head);
                std::thread::spawn(move || {
                    let l = [("__name__", name)];
                    let mut c = AppendCounts::default();
                    head.append_labels(&l, &canon(&l), [(1000, 1.0)].into_iter(), i64::MAX, &mut c)
                        .expect("fits");
                })
            };
            let mut waiting = false;
            for _ in 0..1000 {
                if head.lock_waits.began.load(Ordering::Relaxed) >= began {
                    waiting = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(waiting, "no append waited for the shard");
            drop(held);
            writer.join().expect("append");
            head.lock_waits()
        }
        assert_eq!(head.lock_waits(), LockWaitStats::default());
        // Behind a read: a query's visit holds the shard.
        let w = append_behind(&head, head.lock_for_read(&head.shards[0].0), "a", 1);
        assert_eq!((w.waits, w.behind_reads), (1, 1));
        assert_eq!(w.seconds, w.behind_reads_seconds);
        // Behind another append: counted, but not as behind a read.
        let mut c = AppendCounts::default();
        let after = append_behind(&head, head.lock_shard(0, &mut c), "b", 2);
        assert_eq!((after.waits, after.behind_reads), (2, 1));
        assert!(after.seconds >= w.seconds);
        assert_eq!(after.behind_reads_seconds, w.behind_reads_seconds);
        assert_eq!(everything(&head).len(), 2);
    }

    #[test]
    fn a_request_hands_over_free_shards_while_another_shard_is_held() {
        let dir = tempfile::tempdir().expect("tmp");
        let opts = HeadOptions {
            shards: 4,
            ..Default::default()
        };
        let head = Arc::new(Head::open(opts, &durability(dir.path())).expect("open"));
        let mut c = AppendCounts::default();
        for s in 0..32 {
            let name = format!("m{s}");
            let l = [("__name__", name.as_str())];
            head.append_labels(
                &l,
                &canon(&l),
                [(1000, s as f64)].into_iter(),
                i64::MAX,
                &mut c,
            )
            .expect("fits");
        }
        assert_eq!(c.touched.count_ones(), 4, "every shard got a series");
        let wal = head.wal_handle().expect("wal");
        let before = wal.submit(&[]);
        // Someone (a query, say) holds shard 2 while the request logs.
        let held = head.shards[2].0.lock();
        let (done_tx, done) = std::sync::mpsc::channel();
        let logger = {
            let head = Arc::clone(&head);
            std::thread::spawn(move || {
                let lsn = head.log_appended(&mut c);
                done_tx.send(lsn).expect("send");
            })
        };
        // The free shards' records are queued without waiting for it.
        let mut queued = false;
        for _ in 0..1000 {
            if wal.submit(&[]) > before {
                queued = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            queued,
            "the free shards were not handed over while one was held"
        );
        // The request is not done until the held shard's records are in.
        assert!(done.try_recv().is_err());
        let partial = wal.submit(&[]);
        drop(held);
        logger.join().expect("logger");
        let lsn = done.recv().expect("lsn");
        assert!(
            lsn > partial,
            "{lsn} does not cover the held shard ({partial})"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        rt.block_on(head.durable(lsn)).expect("durable");
        let stored = everything(&head);
        head.close_wal();
        drop(head);
        let reopened = Head::open(HeadOptions::default(), &durability(dir.path())).expect("reopen");
        assert_eq!(everything(&reopened).len(), 32);
        assert_eq!(everything(&reopened), stored);
    }

    /// Writes three requests' worth (series records, then samples) and
    /// closes the WAL; returns the directory and what the head held after
    /// the first two requests and after all three.
    fn three_requests() -> (tempfile::TempDir, Vec<SeriesSamples>, Vec<SeriesSamples>) {
        let dir = tempfile::tempdir().expect("tmp");
        // One shard: each request is one samples record.
        let one = HeadOptions {
            shards: 1,
            ..HeadOptions::default()
        };
        let head = Head::open(one, &durability(dir.path())).expect("open");
        let mut after_two = Vec::new();
        for r in 0..3i64 {
            let mut c = AppendCounts::default();
            for s in 0..3 {
                let name = format!("m{s}");
                let l = [("__name__", name.as_str())];
                let raw = canon(&l);
                let v = [(r * 1000, (r * 10 + s) as f64)];
                if !head.append_existing(&raw, v.into_iter(), i64::MAX, &mut c) {
                    head.append_labels(&l, &raw, v.into_iter(), i64::MAX, &mut c)
                        .expect("fits");
                }
            }
            head.log_appended(&mut c);
            if r == 1 {
                log_and_wait(&head);
                after_two = everything(&head);
            }
        }
        log_and_wait(&head);
        let all = everything(&head);
        head.close_wal();
        (dir, after_two, all)
    }

    /// The newest segment and where its last record starts.
    fn last_record(dir: &std::path::Path) -> (std::path::PathBuf, usize, usize) {
        let wal_dir = dir.join("wal");
        let last = *crate::wal::segments(&wal_dir)
            .expect("ls")
            .iter()
            .rev()
            .find(|&&i| {
                std::fs::metadata(wal_dir.join(format!("{i:08}"))).is_ok_and(|m| m.len() > 0)
            })
            .expect("a segment with records");
        let path = wal_dir.join(format!("{last:08}"));
        let bytes = std::fs::read(&path).expect("read");
        let mut pos = 0;
        let mut start = 0;
        while pos < bytes.len() {
            start = pos;
            pos += crate::wal::record::decode(&bytes[pos..]).expect("valid").1;
        }
        (path, start, bytes.len())
    }

    #[test]
    fn a_wal_cut_at_any_byte_of_its_last_record_replays_everything_before_it() {
        let (dir, after_two, all) = three_requests();
        let (path, start, len) = last_record(dir.path());
        let original = std::fs::read(&path).expect("read");
        for cut in start..=len {
            std::fs::write(&path, &original[..cut]).expect("cut");
            let head = Head::open(HeadOptions::default(), &durability(dir.path()))
                .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            let want = if cut == len { &all } else { &after_two };
            assert_eq!(&everything(&head), want, "cut at {cut}");
            head.close_wal();
            drop(head);
            // Start over from the original log for the next offset.
            for i in crate::wal::segments(&dir.path().join("wal")).expect("ls") {
                let p = dir.path().join("wal").join(format!("{i:08}"));
                if p != path {
                    std::fs::remove_file(p).expect("rm new segment");
                }
            }
            std::fs::write(&path, &original).expect("restore");
        }
    }

    #[test]
    fn a_flipped_bit_in_the_last_record_loses_only_that_record() {
        let (dir, after_two, _) = three_requests();
        let (path, start, len) = last_record(dir.path());
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[start + (len - start) / 2] ^= 0x04;
        std::fs::write(&path, &bytes).expect("write");
        let head = Head::open(HeadOptions::default(), &durability(dir.path()))
            .expect("a torn tail is not fatal");
        assert_eq!(everything(&head), after_two);
        assert_eq!(
            head.recovery().expect("recovered").dropped_bytes,
            (len - start) as u64
        );
    }

    #[test]
    fn a_flipped_bit_in_an_early_record_stops_start_unless_repaired() {
        let (dir, _, _) = three_requests();
        let wal_dir = dir.path().join("wal");
        let first = crate::wal::segments(&wal_dir).expect("ls")[0];
        let path = wal_dir.join(format!("{first:08}"));
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[12] ^= 0x01;
        std::fs::write(&path, &bytes).expect("write");
        let err = Head::open(HeadOptions::default(), &durability(dir.path())).expect_err("corrupt");
        let msg = err.to_string();
        assert!(
            msg.contains("corrupt") && msg.contains("--wal-repair"),
            "{msg}"
        );
        let mut d = durability(dir.path());
        d.wal.repair = crate::wal::Repair::DropFromDamage;
        let head = Head::open(HeadOptions::default(), &d).expect("repaired");
        // The damaged record was the first (a series record), so nothing
        // after it could be kept.
        assert!(everything(&head).is_empty());
        assert!(head.recovery().expect("recovered").dropped_bytes > 0);
    }
}
