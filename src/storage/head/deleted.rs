//! Deleted time ranges of the head's series, as Prometheus' head keeps
//! its tombstones: `delete_series` notes one range per matching series,
//! cut to the samples the series holds then (a later sample is not
//! deleted), logs the ranges, and every read of the head leaves out what
//! they cover; a cut writes its blocks without it. The samples stay in
//! memory until their chunks go, as Prometheus' do; a range goes once the
//! series holds nothing it reaches.
//!
//! Durability: the ranges are logged (WAL record kind 9) after every
//! record appended before them, so replay knows their series; a
//! checkpoint writes the ranges it finds after the WAL rotation it covers,
//! and a deletion notes its ranges in memory before logging them, so a
//! range logged in a segment the checkpoint covers is in the checkpoint.

use std::sync::Arc;

use super::shard::{MemSeries, Shard};
use super::{Head, Padded};
use crate::storage::block::tombstones::{Intervals, Tombstones};
use crate::storage::index::Matcher;
use crate::storage::{Stop, Stopped};
use crate::wal::record::encode_tombstones;

impl Head {
    /// The deleted ranges by series id, as they are now (a fixed view).
    pub(in crate::storage) fn deleted(&self) -> Arc<Tombstones> {
        Arc::clone(&self.deleted.read())
    }

    /// Deletes `[mint, maxt]` of every series matching `matchers` that has
    /// samples there, each range cut to the series' oldest and newest
    /// sample. Returns the series that got a range, and the LSN that makes
    /// the deletion durable (0 without a WAL or when nothing matched).
    pub(in crate::storage) fn delete(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<(u64, u64), Stopped> {
        let mut ranges: Vec<(u64, i64, i64)> = Vec::new();
        self.for_each_match(matchers, mint, maxt, stop, |shard, s, _| {
            if let Some((lo, hi)) = span_of(shard, s) {
                let (lo, hi) = (mint.max(lo), maxt.min(hi));
                if lo <= hi {
                    ranges.push((s.id, lo, hi));
                }
            }
        })?;
        if ranges.is_empty() {
            return Ok((0, 0));
        }
        // In memory first: a checkpoint that rotates the WAL after this
        // finds the ranges (see the module's notes).
        {
            let mut deleted = self.deleted.write();
            let next = Arc::make_mut(&mut deleted);
            for &(id, lo, hi) in &ranges {
                next.add(id, lo, hi);
            }
        }
        let mut frames = Vec::new();
        encode_tombstones(&mut frames, ranges.iter().copied());
        let lsn = self.log_after_pending(&frames);
        Ok((ranges.len() as u64, lsn))
    }

    /// Notes a deleted range of series `id`, read back from the log or a
    /// checkpoint.
    pub(in crate::storage) fn restore_deleted(&self, id: u64, mint: i64, maxt: i64) {
        Arc::make_mut(&mut self.deleted.write()).add(id, mint, maxt);
    }

    /// Lets go of the ranges that reach no sample the head holds (after
    /// chunks were dropped): of a series gone, and before a series'
    /// oldest sample. Its callers (cuts, retention) and deletions all
    /// hold the database's `moving` lock, so no range is added between
    /// the view it starts from and the one it puts in place; queries keep
    /// reading the old view meanwhile.
    pub(super) fn prune_deleted(&self) {
        let deleted = self.deleted();
        if deleted.is_empty() {
            return;
        }
        let mut kept = Tombstones::default();
        for Padded(cell) in self.shards.iter() {
            let shard = cell.lock();
            for s in &shard.series {
                let Some(ranges) = deleted.get(s.id) else {
                    continue;
                };
                let Some((oldest, _)) = span_of(&shard, s) else {
                    continue;
                };
                let mut ranges = ranges.clone();
                ranges.drop_before(oldest);
                for (lo, hi) in ranges.iter() {
                    kept.add(s.id, lo, hi);
                }
            }
        }
        *self.deleted.write() = Arc::new(kept);
    }
}

/// The oldest and newest sample series `s` holds: in order and out of
/// order, floats and histograms.
pub(in crate::storage) fn span_of(shard: &Shard, s: &MemSeries) -> Option<(i64, i64)> {
    let oldest = shard.min_time_of(s)?;
    let newest = shard.max_time_of(s).max(shard.late_newest(s))?;
    Some((oldest, newest))
}

/// Whether `ranges` delete every sample series `s` holds in
/// `[mint, maxt]` (one range covers all of them): such a series is not
/// listed, as a block's series whose chunks are all deleted is not.
pub(in crate::storage) fn deleted_whole(
    shard: &Shard,
    s: &MemSeries,
    ranges: &Intervals,
    mint: i64,
    maxt: i64,
) -> bool {
    span_of(shard, s).is_none_or(|(lo, hi)| ranges.covers(mint.max(lo), maxt.min(hi)))
}
