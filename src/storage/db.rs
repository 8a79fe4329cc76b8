//! The database: one head, the blocks beside it, the WAL and its commit
//! thread, checkpoints, exemplars, metadata and series aliases, the memory
//! account, and the upkeep that keeps them in shape (retention, checkpoints,
//! block cuts and compaction, handing freed heap back).
//!
//! Everything above storage reaches it through a [`Db`] and its two doors:
//! an [`Appender`] to write and a [`Querier`] to read. Opening, recovering
//! and closing are one call each, so several can live in one process (a
//! tenant is one `Db`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::appender::{Appender, Commit};
use super::blocks::{BlockStats, Blocks};
use super::checkpoint::{self, Schedule};
use super::exemplars::ExemplarStore;
use super::head::HeadMemory;
use super::head::{
    CheckpointStats, Durability, Head, HeadOptions, HeadStats, Recovery, RetentionReport,
};
use super::metadata::MetadataStore;
use super::querier::Querier;
use super::Clock;
use crate::wal::commit::{CommitStats, Progress};
use crate::wal::WalError;

/// How a [`Db`] is opened and kept.
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// The head's shape and limits.
    pub head: HeadOptions,
    /// Where and how it is made durable; `None` keeps it in memory only.
    pub durability: Option<Durability>,
    /// Metric families whose metadata is kept.
    pub max_metadata_families: usize,
    /// Bytes of metadata kept.
    pub max_metadata_bytes: usize,
    /// The memory limit: writes are pushed back at 80% of it.
    pub memory_limit: u64,
    /// How often a checkpoint is taken (also after enough WAL bytes).
    pub checkpoint_interval: Duration,
    /// How long samples are kept.
    pub retention: Duration,
}

impl Default for DbOptions {
    fn default() -> Self {
        Self {
            head: HeadOptions::default(),
            durability: None,
            max_metadata_families: 10_000,
            max_metadata_bytes: 16 << 20,
            memory_limit: u64::MAX,
            checkpoint_interval: Duration::from_secs(300),
            retention: Duration::from_secs(15 * 24 * 3600),
        }
    }
}

/// The write was refused: the database holds as much as its memory limit
/// lets it take (see [`Db::check_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "memory limit reached: the head, block indexes, metadata and delta totals hold {held} bytes, \
     at or over the high-water mark of {high_water} bytes (80% of max-memory {limit}); retry \
     later, as old data ages out (retention) or series are deleted"
)]
pub struct MemoryFull {
    /// Bytes held.
    pub held: usize,
    /// Bytes at which writes are pushed back.
    pub high_water: usize,
    /// The memory limit.
    pub limit: u64,
}

/// What [`Db::close`] leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// A checkpoint of the head, then the WAL after it (a quick start).
    Checkpoint,
    /// Only the WAL (the next start replays all of it).
    WalOnly,
}

/// What [`Db::delete`] deleted.
#[derive(Debug)]
pub struct Deletion {
    /// Series of the blocks that got a tombstone (once per block).
    pub block_series: u64,
    /// Series of the head that got a deleted range.
    pub head_series: u64,
    /// The head's ranges, logged: wait on it before answering.
    pub commit: Commit,
}

/// One database: see the module's documentation.
#[derive(Debug)]
pub struct Db {
    head: Head,
    /// The blocks on disk that hold what the head handed over.
    blocks: Blocks,
    metadata: MetadataStore,
    /// The data directory, when durable.
    dir: Option<PathBuf>,
    memory_limit: u64,
    /// Held bytes at which writes are pushed back.
    high_water: usize,
    checkpoint_interval: Duration,
    retention_ms: i64,
    /// Held by whatever moves data between the head and the blocks or
    /// deletes blocks (cuts, compaction, retention) and by a snapshot for
    /// its whole length, so that a snapshot sees each sample in exactly
    /// one of the blocks it links and the head it writes.
    moving: parking_lot::Mutex<()>,
}

impl Db {
    /// An empty database in memory, with default limits.
    pub fn new(head: HeadOptions) -> Self {
        Self::in_memory(DbOptions {
            head,
            ..DbOptions::default()
        })
    }

    /// An empty database in memory (`opts.durability` is ignored).
    pub fn in_memory(opts: DbOptions) -> Self {
        Self::with_head(Head::new(opts.head.clone()), Blocks::default(), None, &opts)
    }

    /// Opens the database `opts` describes: from its data directory (blocks,
    /// the newest checkpoint, then the WAL) when durable, else empty.
    /// Blocking: call it off the async threads.
    pub fn open(opts: DbOptions) -> Result<Self, WalError> {
        let Some(d) = &opts.durability else {
            return Ok(Self::in_memory(opts));
        };
        std::fs::create_dir_all(&d.dir).map_err(|source| WalError::Io {
            path: d.dir.clone(),
            source,
        })?;
        let blocks = Blocks::open(&d.dir).map_err(|source| WalError::Io {
            path: d.dir.clone(),
            source,
        })?;
        if blocks.floor() > i64::MIN {
            tracing::info!(
                blocks = blocks.stats().blocks,
                floor = blocks.floor(),
                "blocks opened; the head holds what is newer"
            );
        }
        let known = blocks.ulids();
        let head = Head::open_above(opts.head.clone(), d, blocks.floor(), &|u| {
            known.contains(&u)
        })?;
        Ok(Self::with_head(head, blocks, Some(d.dir.clone()), &opts))
    }

    fn with_head(head: Head, blocks: Blocks, dir: Option<PathBuf>, opts: &DbOptions) -> Self {
        Self {
            head,
            blocks,
            metadata: MetadataStore::new(opts.max_metadata_families, opts.max_metadata_bytes),
            dir,
            memory_limit: opts.memory_limit,
            high_water: usize::try_from(opts.memory_limit / 10 * 8).unwrap_or(usize::MAX),
            checkpoint_interval: opts.checkpoint_interval,
            retention_ms: i64::try_from(opts.retention.as_millis()).unwrap_or(i64::MAX),
            moving: parking_lot::Mutex::new(()),
        }
    }

    /// Closes the database: with [`Close::Checkpoint`] a last checkpoint,
    /// so the next open is quick; then everything queued for the WAL is
    /// written and fsynced. Blocking.
    pub fn close(&self, how: Close) {
        if how == Close::Checkpoint {
            self.checkpoint();
        }
        self.head.close_wal();
    }

    /// The write door: appends up to `max_t`, made durable by
    /// [`Appender::commit`].
    pub fn appender(&self, max_t: i64) -> Appender<'_> {
        Appender::new(&self.head, &self.metadata, max_t)
    }

    /// The read door, over head and blocks.
    pub fn querier(&self) -> Querier<'_> {
        Querier::new(&self.head, &self.blocks)
    }

    /// Metric metadata reported by senders.
    pub fn metadata(&self) -> &MetadataStore {
        &self.metadata
    }

    /// Exemplars reported by senders.
    pub fn exemplars(&self) -> &ExemplarStore {
        self.head.exemplars()
    }

    /// Follows the WAL's progress (what its readers wait on), when there
    /// is one.
    pub fn wal_progress(&self) -> Option<watch::Receiver<Progress>> {
        self.head.wal().map(|w| w.watch())
    }

    /// Bytes the memory limit counts: the head, open blocks' indexes,
    /// series aliases, metadata and exemplars.
    pub fn held_bytes(&self) -> usize {
        self.head.accounted_bytes()
            + self.blocks.memory_bytes()
            + self.head.aliases().bytes()
            + self.metadata.bytes()
            + self.head.exemplars().bytes()
    }

    /// Sets the most series the head holds (a tenant's
    /// `max_global_series_per_user`); `None` restores the database's own.
    pub fn set_max_series(&self, max: Option<usize>) {
        self.head
            .set_max_series(max.unwrap_or(self.head.opts().max_series));
    }

    /// Sets the out-of-order window (a tenant's
    /// `out_of_order_time_window`); `None` restores the database's own
    /// (`--out-of-order-time-window`).
    pub fn set_ooo_window(&self, ms: Option<i64>) {
        let ms = ms.unwrap_or(self.head.opts().ooo_window_ms);
        if self.head.ooo_window() != ms {
            self.head.set_ooo_window(ms);
        }
    }

    /// Sets the most exemplars held (a tenant's
    /// `max_global_exemplars_per_user`; 0 stores none); `None` restores the
    /// database's own (`--max-exemplars`).
    pub fn set_max_exemplars(&self, max: Option<usize>) {
        let max = max.unwrap_or(self.head.opts().max_exemplars);
        if self.head.exemplars().max() != max {
            self.head.exemplars().set_max(max);
        }
    }

    /// Sets the most series of one metric name the head holds (a tenant's
    /// `max_global_series_per_metric`; 0: no limit).
    pub fn set_max_series_per_metric(&self, max: usize) {
        if self.head.max_series_per_metric() != max {
            self.head.set_max_series_per_metric(max);
        }
    }

    /// Series of metric `name` in the head now.
    pub fn metric_series_count(&self, name: &str) -> usize {
        self.head.metric_series_count(name)
    }

    /// Its directory; `None` in memory.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Whether it holds nothing: no series in the head, no block.
    pub fn holds_nothing(&self) -> bool {
        self.series_count() == 0 && self.blocks.stats().blocks == 0
    }

    /// Series in the head now (one atomic read, no shard lock).
    pub fn series_count(&self) -> usize {
        self.head.series_count()
    }

    /// The most series the head holds by its options (`--max-series`).
    pub fn default_max_series(&self) -> usize {
        self.head.opts().max_series
    }

    /// The most series the head holds now.
    pub fn max_series(&self) -> usize {
        self.head.max_series()
    }

    /// Refuses a write while the WAL cannot take it: its disk is full
    /// (until space returns) or it failed for good.
    pub fn admit_write(&self) -> Result<(), crate::wal::commit::Refusal> {
        self.head.wal().map_or(Ok(()), |w| w.admit())
    }

    /// Refuses a write while what the database holds, plus `extra` bytes
    /// held for it elsewhere, is at the high-water mark.
    pub fn check_memory(&self, extra: usize) -> Result<(), MemoryFull> {
        let held = self.held_bytes() + extra;
        if held < self.high_water {
            return Ok(());
        }
        Err(MemoryFull {
            held,
            high_water: self.high_water,
            limit: self.memory_limit,
        })
    }

    /// The memory limit.
    pub fn memory_limit(&self) -> u64 {
        self.memory_limit
    }

    /// Drops samples before `cutoff_ms`: head chunks, series with nothing
    /// newer, and blocks that end by then.
    pub fn apply_retention(&self, cutoff_ms: i64) -> RetentionReport {
        let _moving = self.moving.lock();
        let r = self.head.apply_retention(cutoff_ms);
        self.blocks.delete_before(cutoff_ms);
        r
    }

    /// Series, chunks and samples held in the head.
    pub fn head_stats(&self) -> HeadStats {
        self.head.stats()
    }

    /// The oldest and newest sample times the head holds (a walk over
    /// its series, a batch at a time): `None` when it holds none.
    pub fn head_span(&self) -> Option<(i64, i64)> {
        self.head.span_from(i64::MIN)
    }

    /// Bytes the head accounts for (chunks, series, labels, index).
    pub fn head_bytes(&self) -> usize {
        self.head.accounted_bytes()
    }

    /// The head's bytes by part.
    pub fn head_memory(&self) -> HeadMemory {
        self.head.memory()
    }

    /// Bytes of the remote-write 2.0 series keys.
    pub fn aliases_bytes(&self) -> usize {
        self.head.aliases().bytes()
    }

    /// Whether no remote-write 2.0 series key is kept.
    pub fn aliases_empty(&self) -> bool {
        self.head.aliases().is_empty()
    }

    /// What retention removed since start.
    pub fn retention_stats(&self) -> RetentionReport {
        self.head.retention_stats()
    }

    /// The blocks on disk: counts, sizes, cuts and compactions.
    pub fn block_stats(&self) -> BlockStats {
        self.blocks.stats()
    }

    /// [`Db::block_metas`] as their `meta.json` files hold them (what
    /// Prometheus' `/api/v1/status/tsdb/blocks` lists).
    pub fn block_metas_json(&self) -> Vec<serde_json::Value> {
        self.block_metas()
            .iter()
            .map(super::block::meta_value)
            .collect()
    }

    /// Takes a snapshot into `dest`, a new directory: the blocks
    /// hard-linked, and unless `with_head` is false the head written as a
    /// block named at `now_ms` (see [`super::snapshot`]).
    pub fn snapshot(
        &self,
        dest: &Path,
        with_head: bool,
        now_ms: u64,
    ) -> std::io::Result<super::snapshot::SnapshotReport> {
        let _moving = self.moving.lock();
        super::snapshot::snapshot(&self.head, &self.blocks, dest, with_head, now_ms)
    }

    /// Deletes `[mint, maxt]` of the series matching any of `selectors`
    /// from the blocks (tombstones, honoured by every read and by
    /// compaction); the series that got a tombstone. Cuts, compaction and
    /// retention wait meanwhile. The head's samples are not touched.
    pub fn delete_in_blocks(
        &self,
        selectors: &[Vec<super::index::Matcher>],
        mint: i64,
        maxt: i64,
    ) -> Result<u64, super::block::BlockError> {
        let _moving = self.moving.lock();
        let mut hit = 0;
        for m in selectors {
            hit += self.blocks.delete(m, mint, maxt)?;
        }
        Ok(hit)
    }

    /// Deletes `[mint, maxt]` of the series matching any of `selectors`,
    /// as Prometheus' `DB.Delete`: tombstones in the blocks (durable on
    /// return), and ranges in the head, logged (durable once the returned
    /// commit is). Cuts, compaction and retention wait meanwhile. A
    /// deletion that fails midway (a block's file, the WAL) may have
    /// taken effect in part, as Prometheus' may: it is safe to repeat.
    pub fn delete(
        &self,
        selectors: &[Vec<super::index::Matcher>],
        mint: i64,
        maxt: i64,
    ) -> Result<Deletion, super::block::BlockError> {
        let _moving = self.moving.lock();
        let mut done = Deletion {
            block_series: 0,
            head_series: 0,
            commit: Commit::new(self.head.wal_handle(), 0),
        };
        let mut lsn = 0;
        for m in selectors {
            done.block_series += self.blocks.delete(m, mint, maxt)?;
            let (series, at) = self
                .head
                .delete(m, mint, maxt, &super::Stop::default())
                .map_err(|_| super::block::BlockError("deletion stopped".into()))?;
            done.head_series += series;
            lsn = lsn.max(at);
        }
        done.commit = Commit::new(self.head.wal_handle(), lsn);
        Ok(done)
    }

    /// Writes every block that has tombstones again without what they
    /// delete (Prometheus' `CleanTombstones`); each cleaned block's ULID
    /// and its child's meta (a child with no series when nothing was
    /// left, see `Blocks::clean_tombstones`). The head's deleted ranges
    /// stay until a cut writes its blocks without them. Cuts,
    /// compaction, retention and deletions wait meanwhile.
    pub fn clean_tombstones(
        &self,
        now_ms: u64,
    ) -> Result<
        Vec<(super::block::Ulid, super::block::BlockMeta)>,
        super::block::compact::CompactError,
    > {
        let _moving = self.moving.lock();
        self.blocks.clean_tombstones(now_ms, &|| true)
    }

    /// The metas of the blocks served, oldest first.
    pub fn block_metas(&self) -> Vec<super::block::BlockMeta> {
        let mut metas: Vec<_> = self
            .blocks
            .read()
            .blocks()
            .iter()
            .map(|b| b.current_meta())
            .collect();
        metas.sort_by_key(|m| (m.min_time, m.max_time));
        metas
    }

    /// Checkpoints taken since start.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.head.checkpoint_stats()
    }

    /// How long appends waited for the head's shard locks, since start.
    pub fn lock_waits(&self) -> super::LockWaitStats {
        self.head.lock_waits()
    }

    /// The WAL's commit counters, when there is a WAL.
    pub fn wal_stats(&self) -> Option<CommitStats> {
        self.head.wal().map(|w| w.stats())
    }

    /// Bytes of WAL segments on disk, when there is a WAL.
    pub fn wal_disk_bytes(&self) -> Option<u64> {
        self.head.wal_disk_bytes()
    }

    /// What the start-up replay did, if the database was opened from disk.
    pub fn recovery(&self) -> Option<&Recovery> {
        self.head.recovery()
    }

    /// Writes a checkpoint now (nothing without a WAL); its size.
    pub fn checkpoint(&self) -> Option<u64> {
        let dir = self.dir.as_ref()?;
        self.head.wal()?;
        checkpoint_now(&self.head, dir)
    }

    /// Cuts the blocks the head spans past, as of `now_ms`; what it cut.
    pub fn cut_blocks(
        &self,
        now_ms: u64,
    ) -> Result<Vec<super::block::BlockMeta>, super::cut::CutError> {
        let _moving = self.moving.lock();
        super::cut::cut_blocks(&self.head, &self.blocks, now_ms)
    }

    /// Compacts the blocks as Prometheus plans it; what it made.
    /// `keep_going` is asked between series.
    pub fn compact_blocks(
        &self,
        now_ms: u64,
        keep_going: &dyn Fn() -> bool,
    ) -> Result<Vec<super::block::BlockMeta>, super::block::compact::CompactError> {
        let _moving = self.moving.lock();
        super::cut::compact_blocks(&self.head, &self.blocks, now_ms, keep_going)
    }

    /// The blocks, for tests of cuts and compaction.
    #[cfg(test)]
    pub(super) fn blocks(&self) -> &Blocks {
        &self.blocks
    }

    /// The head, for tests of cuts and compaction.
    #[cfg(test)]
    pub(super) fn head(&self) -> &Head {
        &self.head
    }

    /// Background upkeep until `stop` turns true: retention, and with a
    /// WAL, checkpoints, block cuts and compaction.
    pub async fn run_upkeep(self: Arc<Self>, clock: Clock, mut stop: watch::Receiver<bool>) {
        let wal_bytes = |db: &Db| db.wal_stats().map_or(0, |s| s.bytes);
        let mut schedule = Schedule::new(self.checkpoint_interval, wal_bytes(&self));
        let mut last_cutoff = i64::MIN;
        let mut next_block_check = Instant::now() + BLOCK_CHECK;
        loop {
            let cutoff = clock.now_ms().saturating_sub(self.retention_ms);
            if cutoff.saturating_sub(last_cutoff) >= RETENTION_STEP_MS {
                last_cutoff = cutoff;
                let db = Arc::clone(&self);
                if let Ok(r) = tokio::task::spawn_blocking(move || {
                    let r = db.apply_retention(cutoff);
                    if r.series + r.chunks > 0 {
                        crate::heap::release_free_memory();
                    }
                    r
                })
                .await
                {
                    if r.series + r.chunks > 0 {
                        tracing::info!(
                            cutoff,
                            removed_series = r.series,
                            dropped_chunks = r.chunks,
                            "retention applied"
                        );
                    }
                }
            }
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(TICK) => {}
            }
            if self.head.wal().is_none() {
                continue;
            }
            let now = Instant::now();
            if now >= next_block_check {
                next_block_check = now + BLOCK_CHECK;
                let (db, now_ms) = (Arc::clone(&self), clock.now_ms());
                let written = wal_bytes(&self);
                let stopping = stop.clone();
                let cut = tokio::task::spawn_blocking(move || {
                    db.cut_and_compact(u64::try_from(now_ms).unwrap_or(0), &|| !*stopping.borrow())
                })
                .await;
                if let Ok(Some(size)) = cut {
                    schedule.done(now, written, size);
                }
            }
            if schedule.due(now, wal_bytes(&self)) {
                let db = Arc::clone(&self);
                let written = wal_bytes(&self);
                match tokio::task::spawn_blocking(move || {
                    let size = db.checkpoint();
                    crate::heap::release_free_memory();
                    size
                })
                .await
                {
                    Ok(Some(size)) => schedule.done(now, written, size),
                    // From when it failed: a slow failure still waits.
                    _ => schedule.failed(Instant::now()),
                }
            }
        }
    }

    /// One pass of the block upkeep: cuts what the head spans past (then a
    /// checkpoint, whose size is returned), then compacts while `go` holds.
    fn cut_and_compact(&self, now_ms: u64, go: &dyn Fn() -> bool) -> Option<u64> {
        let size = match self.cut_blocks(now_ms) {
            // The head no longer holds what the blocks do: a checkpoint now
            // lets the WAL segments before it go.
            Ok(cut) if !cut.is_empty() => self.checkpoint(),
            Ok(_) => None,
            Err(e) => {
                tracing::error!(error = %e, "block cut failed; the head keeps those samples and tries again");
                None
            }
        };
        // Compaction reads and writes blocks only: appends and queries go
        // on meanwhile. A shutdown stops it between series and leaves the
        // blocks as they were.
        let compacted = match self.compact_blocks(now_ms, go) {
            Ok(done) => !done.is_empty(),
            Err(e) => {
                tracing::error!(error = %e, "compaction failed; its blocks stay as they are and are not compacted again until a restart");
                true
            }
        };
        // The head let go of a block's chunks, and the cut, the checkpoint
        // and the compaction freed what they built.
        if size.is_some() || compacted {
            crate::heap::release_free_memory();
        }
        size
    }
}

/// How often background work checks whether it is due.
const TICK: Duration = Duration::from_millis(100);

/// How often the head checks whether it spans enough to cut a block.
const BLOCK_CHECK: Duration = Duration::from_secs(5);

/// Retention runs once its cutoff has moved this far since the last pass.
const RETENTION_STEP_MS: i64 = 60_000;

/// Writes a checkpoint, logging the outcome; returns its size.
fn checkpoint_now(head: &Head, dir: &Path) -> Option<u64> {
    let started = Instant::now();
    match checkpoint::write(head, dir) {
        Ok(r) => {
            head.note_checkpoint(started.elapsed(), r.bytes, r.written);
            tracing::info!(
                segment = r.segment,
                series = r.series,
                bytes = r.bytes,
                written_bytes = r.written,
                deleted_segments = r.deleted_segments,
                seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
                "checkpoint written"
            );
            Some(r.bytes)
        }
        Err(e) => {
            head.note_checkpoint_failure();
            tracing::error!(error = %e, "checkpoint failed; the WAL keeps everything until the next one succeeds");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::index::{MatchOp, Matcher};
    use crate::storage::labels::encode_canonical;
    use crate::storage::AppendCounts;

    fn opts(dir: &Path) -> DbOptions {
        DbOptions {
            durability: Some(Durability {
                dir: dir.to_path_buf(),
                wal: crate::wal::WalOptions::default(),
                fsync: crate::wal::commit::FsyncMode::Always,
            }),
            ..DbOptions::default()
        }
    }

    fn write(db: &Db, job: &str, t: i64, v: f64) {
        let labels = [("__name__", "up"), ("job", job)];
        let mut canonical = Vec::new();
        encode_canonical(labels.iter().copied(), &mut canonical);
        let mut app = db.appender(i64::MAX);
        let mut c = AppendCounts::default();
        app.append_new(&labels, &canonical, std::iter::once((t, v)), &mut c)
            .expect("within limits");
        let commit = app.commit();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(commit.durable())
            .expect("durable");
    }

    fn read(db: &Db) -> Vec<(String, Vec<(i64, f64)>)> {
        let all = Matcher::new(MatchOp::Equal, "__name__", "up").expect("matcher");
        db.querier()
            .select_samples(&[all], i64::MIN, i64::MAX)
            .into_iter()
            .map(|s| {
                let job = s
                    .labels
                    .iter()
                    .find(|l| l.name == "job")
                    .map(|l| l.value.to_string())
                    .unwrap_or_default();
                (job, s.samples)
            })
            .collect()
    }

    /// Two databases side by side in one process keep apart, and each
    /// comes back from its own directory after a close.
    #[test]
    fn two_databases_open_side_by_side_and_reopen_apart() {
        let (a_dir, b_dir) = (
            tempfile::tempdir().expect("dir"),
            tempfile::tempdir().expect("dir"),
        );
        let a = Db::open(opts(a_dir.path())).expect("open a");
        let b = Db::open(opts(b_dir.path())).expect("open b");
        write(&a, "a", 1_000, 1.0);
        write(&b, "b", 2_000, 2.0);
        assert_eq!(read(&a), vec![("a".to_owned(), vec![(1_000, 1.0)])]);
        assert_eq!(read(&b), vec![("b".to_owned(), vec![(2_000, 2.0)])]);
        a.close(Close::Checkpoint);
        b.close(Close::WalOnly);
        drop((a, b));
        let a = Db::open(opts(a_dir.path())).expect("reopen a");
        let b = Db::open(opts(b_dir.path())).expect("reopen b");
        assert_eq!(read(&a), vec![("a".to_owned(), vec![(1_000, 1.0)])]);
        assert_eq!(read(&b), vec![("b".to_owned(), vec![(2_000, 2.0)])]);
        assert!(a.recovery().is_some() && b.recovery().is_some());
        // Series per metric are counted again, from a checkpoint and from
        // the log alone, so a per-metric limit holds across a restart.
        assert_eq!(
            (a.metric_series_count("up"), b.metric_series_count("up")),
            (1, 1)
        );
    }

    #[test]
    fn writes_are_refused_at_the_high_water_mark() {
        let db = Db::in_memory(DbOptions {
            memory_limit: 1000,
            ..DbOptions::default()
        });
        assert_eq!(db.check_memory(0), Ok(()));
        let full = db.check_memory(800).expect_err("800 of 1000 is the mark");
        assert_eq!((full.high_water, full.limit), (800, 1000));
        assert!(full.to_string().contains("memory limit reached"), "{full}");
    }
}
