//! Start-up: a head rebuilt from the newest checkpoint, then the WAL
//! segments after it, before it logs to a new segment.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::shard::{fingerprint, Shard};
use super::Padded;
use super::{AppendCounts, Durability, Head, HeadOptions, Recovery};
use crate::storage::checkpoint::{self, SeriesImage};
use crate::wal::commit::GroupCommit;
use crate::wal::record::Record;
use crate::wal::{self, WalError};

impl Head {
    /// A head rebuilt from `durable.dir`: the newest checkpoint, then the
    /// WAL segments after it; then it logs to a new segment. Fails on
    /// corruption in the middle of the log unless `repair` is set.
    ///
    /// What blocks hold (before `floor`), the checkpoint and WAL may hold
    /// too (a crash between a block's write and the next checkpoint). Below
    /// the floor, replayed samples go out of order, and restored in-order
    /// chunks are dropped at the end; the log's flushed records say which
    /// late samples blocks hold, and are obeyed when `known` knows every
    /// block they name (a crash before the blocks were written leaves the
    /// samples to the next cut).
    pub(in crate::storage) fn open_above(
        opts: HeadOptions,
        durable: &Durability,
        floor: i64,
        known: &dyn Fn(u128) -> bool,
    ) -> Result<Self, WalError> {
        let started = Instant::now();
        let mut head = Self::new(opts);
        head.raise_cut_floor(floor);
        let wal_dir = durable.dir.join("wal");
        let replaying = std::cell::RefCell::new(Replayer::new(&head, known));
        // Series images, then the records after them (exemplars, and the
        // out-of-order samples, appended as the log's are).
        let loaded = checkpoint::load(
            &durable.dir,
            durable.wal.repair,
            |image| replaying.borrow_mut().restore(image),
            |rec| replaying.borrow_mut().apply(rec),
        )?;
        let mut replayer = replaying.into_inner();
        // The restored chunks' files: the next checkpoint refers to them.
        *head.chunk_files().lock() = loaded.chunk_files.clone();
        if loaded.segment > 0 {
            tracing::info!(
                checkpoint = loaded.segment,
                series = loaded.series,
                seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
                "checkpoint loaded"
            );
            // Segments it covers may remain from a crash before their deletion.
            wal::remove_segments_through(&wal_dir, loaded.segment)?;
        }
        let report = wal::replay_after(&wal_dir, loaded.segment, &durable.wal, |rec| {
            replayer.apply(rec)
        })?;
        if floor > i64::MIN {
            let dropped = head.truncate_in_order(floor);
            tracing::info!(
                floor,
                restored_chunks_dropped = dropped.chunks,
                restored_series_removed = dropped.series,
                "blocks opened; the head holds what is newer"
            );
        }
        let (samples, refused) = replayer.samples();
        head.note_newest(replayer.counts.newest);
        if replayer.bad_series + replayer.unknown_refs > 0 {
            tracing::warn!(
                bad_series = replayer.bad_series,
                unknown_refs = replayer.unknown_refs,
                "WAL records that could not be applied were skipped"
            );
        }
        let recovery = Recovery {
            seconds: started.elapsed().as_secs_f64(),
            checkpoint_series: loaded.series,
            records: report.records,
            samples,
            refused_samples: refused,
            dropped_bytes: report.dropped_bytes,
            repaired: report.repaired,
            segments: (loaded.segment, report.last_segment.max(loaded.segment)),
        };
        tracing::info!(
            segments = report.segments,
            records = report.records,
            series = head.stats().series,
            samples,
            seconds = format_args!("{:.3}", recovery.seconds),
            "WAL replayed"
        );
        let writer = wal::WalWriter::open_after(&wal_dir, loaded.segment, durable.wal.clone())?;
        let commit = GroupCommit::start(writer, durable.fsync).map_err(|source| WalError::Io {
            path: wal_dir.clone(),
            source,
        })?;
        head.publish_all();
        head.start_wal(commit);
        head.set_recovered(recovery, wal_dir);
        Ok(head)
    }

    /// [`Head::open_above`] a directory without blocks.
    #[cfg(test)]
    pub(in crate::storage) fn open(
        opts: HeadOptions,
        durable: &Durability,
    ) -> Result<Self, WalError> {
        Self::open_above(opts, durable, i64::MIN, &|_| false)
    }
}

impl Head {
    /// Records what the start-up replay did, and where the WAL lives.
    pub(in crate::storage) fn set_recovered(&mut self, recovery: Recovery, wal_dir: PathBuf) {
        self.recovery = Some(recovery);
        self.wal_dir = Some(wal_dir);
    }

    /// Shard `i`, locked, for the replay's runs of appends.
    pub(in crate::storage) fn lock_shard_for_replay(
        &self,
        i: usize,
    ) -> parking_lot::MutexGuard<'_, Shard> {
        self.shards[i].0.lock()
    }

    /// Finds or creates the series with these canonical labels, keeping or
    /// giving it reference `id`, for replay and checkpoints: no limit
    /// applies and nothing is logged. Returns its shard and slot, or `None`
    /// if the bytes are not labels.
    pub(in crate::storage) fn restore_series(
        &self,
        id: u64,
        canonical: &[u8],
    ) -> Option<(u32, u32)> {
        let labels = crate::storage::labels::decode_canonical(canonical)?;
        let fp = fingerprint(canonical);
        let i = self.shard_index(fp.hash);
        let mut shard = self.shards[i].0.lock();
        let slot = match shard.find(fp, canonical) {
            Some(slot) => slot,
            None => {
                self.series.fetch_add(1, Ordering::Relaxed);
                // Unlimited: what was acknowledged comes back.
                let _ = self.count_metric_series(&labels, false);
                self.next_ref.fetch_max(id + 1, Ordering::Relaxed);
                shard.create(id, fp, &labels, canonical)
            }
        };
        Some((i as u32, slot))
    }

    /// Publishes every shard's accounted bytes (after bulk changes).
    pub(in crate::storage) fn publish_all(&self) {
        for Padded(cell) in self.shards.iter() {
            cell.publish(&cell.lock());
        }
    }
}

/// Rebuilds a head from WAL records: series records map the log's
/// references to series, samples records append through that map.
struct Replayer<'h> {
    head: &'h Head,
    /// Whether a block of this ULID is open (or was compacted into one).
    known: &'h dyn Fn(u128) -> bool,
    refs: HashMap<u64, (u32, u32)>,
    counts: AppendCounts,
    /// Series records whose labels could not be decoded.
    bad_series: u64,
    /// Samples whose series reference was never defined.
    unknown_refs: u64,
}

impl<'h> Replayer<'h> {
    /// A replayer into `head`, which should not write a WAL yet.
    fn new(head: &'h Head, known: &'h dyn Fn(u128) -> bool) -> Self {
        Self {
            head,
            known,
            refs: HashMap::new(),
            counts: AppendCounts::default(),
            bad_series: 0,
            unknown_refs: 0,
        }
    }

    /// Restores one series of a checkpoint; `false` if it is malformed.
    fn restore(&mut self, image: &SeriesImage<'_>) -> bool {
        let Some((shard, slot)) = self.head.restore_series(image.id, image.labels) else {
            return false;
        };
        self.refs.insert(image.id, (shard, slot));
        let floats = image.open.map(|c| c.1).or(image.sealed.last().map(|c| c.1));
        let hists = image
            .hist
            .as_ref()
            .and_then(|h| h.open.map(|c| c.1).or(h.sealed.last().map(|c| c.1)));
        if let Some(maxt) = floats.max(hists) {
            self.head.note_newest(maxt);
        }
        let mut guard = self.head.lock_shard_for_replay(shard as usize);
        guard.restore_chunks(slot, &image.sealed, image.open, image.next_at)
            && image
                .hist
                .as_ref()
                .is_none_or(|h| guard.restore_histograms(slot, h))
    }

    /// Applies one record.
    fn apply(&mut self, rec: Record<'_>) {
        match rec {
            Record::Series { series_ref, labels } => {
                match self.head.restore_series(series_ref, labels) {
                    Some(at) => {
                        self.refs.insert(series_ref, at);
                    }
                    None => self.bad_series += 1,
                }
            }
            Record::Checkpoint(_) | Record::CheckpointRefs(_) => self.bad_series += 1,
            Record::Flushed { below, blocks } => {
                let written = blocks.chunks_exact(16).all(|b| {
                    let mut id = [0u8; 16];
                    id.copy_from_slice(b);
                    (self.known)(u128::from_be_bytes(id))
                });
                if written {
                    self.head.drop_late_before(below);
                }
            }
            Record::Exemplars(exemplars) => self.head.exemplars().restore(exemplars),
            Record::Tombstones(ranges) => {
                for (r, mint, maxt) in ranges {
                    let Some(&(shard, slot)) = self.refs.get(&r) else {
                        self.unknown_refs += 1;
                        continue;
                    };
                    // The series' id now (a series record may have named
                    // one the head already held under another).
                    let id = self
                        .head
                        .lock_shard_for_replay(shard as usize)
                        .series
                        .get(slot as usize)
                        .map(|s| s.id);
                    if let Some(id) = id {
                        self.head.restore_deleted(id, mint, maxt);
                    }
                }
            }
            // Kept only while the feature is on: with it off, samples
            // would inherit start times they were not sent with.
            Record::Starts(_) if !self.head.options().st_storage => {}
            Record::Starts(entries) => {
                for (r, run) in crate::storage::starts::entries(entries) {
                    let Some(&(shard, slot)) = self.refs.get(&r) else {
                        self.unknown_refs += 1;
                        continue;
                    };
                    self.head
                        .lock_shard_for_replay(shard as usize)
                        .restore_start(slot, run);
                }
            }
            Record::Histograms(entries) => {
                for (r, t, h) in entries {
                    let Some(&(shard, slot)) = self.refs.get(&r) else {
                        self.unknown_refs += 1;
                        continue;
                    };
                    self.head
                        .lock_shard_for_replay(shard as usize)
                        .append_histograms(
                            slot,
                            std::iter::once((t, &h)),
                            self.bounds(),
                            self.head.options(),
                            &mut self.counts,
                        );
                }
            }
            Record::Samples(samples) => {
                let mut current: Option<(u32, parking_lot::MutexGuard<'_, Shard>)> = None;
                for (r, t, v) in samples {
                    let Some(&(shard, slot)) = self.refs.get(&r) else {
                        self.unknown_refs += 1;
                        continue;
                    };
                    // Consecutive samples of one shard share a lock.
                    let guard = match &mut current {
                        Some((s, g)) if *s == shard => g,
                        _ => {
                            current = None;
                            let g = self.head.lock_shard_for_replay(shard as usize);
                            &mut current.insert((shard, g)).1
                        }
                    };
                    guard.append(
                        slot,
                        std::iter::once((t, v)),
                        self.bounds(),
                        self.head.options(),
                        &mut self.counts,
                    );
                }
            }
        }
    }

    /// What replay takes: anything, in order from the floor on, and out
    /// of order whatever the window is now (a sample the log holds was
    /// taken, and a tenant's own window may be wider than the flag's,
    /// which is in force while it opens).
    fn bounds(&self) -> crate::storage::append::Bounds {
        crate::storage::append::Bounds {
            min_t: self.head.min_valid_ms(),
            max_t: i64::MAX,
            inorder_from: self.head.cut_floor(),
            ooo_from: i64::MIN,
        }
    }

    /// Samples stored and refused (older than what the series holds, as
    /// after a checkpoint that already covers them) so far.
    fn samples(&self) -> (u64, u64) {
        (self.counts.appended, self.counts.rejected_total())
    }
}
