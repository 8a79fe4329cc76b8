//! Appends: finding a series (by its canonical label bytes, or where it was
//! last seen), creating it within the series limit, and appending under its
//! shard's lock, one lock per run of a request's series.

use std::sync::atomic::Ordering;

use super::aliases::Alias;
use super::shard::{fingerprint, Fingerprint, Shard};
use super::{AppendCounts, Head, SeriesLimit, ShardCell};
use crate::histogram::HistSample;
use crate::storage::append::Bounds;

/// No slot hint: look the series up.
pub(in crate::storage) const NO_SLOT: u32 = u32::MAX;

/// One shard held for a run of appends (a request's samples for that
/// shard): one lock and one memory publication for the whole run.
pub(in crate::storage) struct ShardGuard<'h> {
    head: &'h Head,
    cell: &'h ShardCell,
    shard: parking_lot::MutexGuard<'h, Shard>,
}

impl ShardGuard<'_> {
    /// The slot of the series of this shard whose canonical label bytes are
    /// `raw` (fingerprint `fp`), if it exists, with the cache lines its next
    /// append writes loaded. Finding a run of series first and appending
    /// after lets their cache misses overlap: one lookup after another in
    /// a short loop, where each append's long body kept them apart.
    /// `hint` is where the series was last seen (from an alias), or
    /// [`NO_SLOT`]: used when the series there has fingerprint `fp`.
    #[inline]
    pub(in crate::storage) fn find_warm(
        &self,
        fp: Fingerprint,
        hint: u32,
        raw: Option<&[u8]>,
    ) -> Option<u32> {
        let slot = match (self.shard.holds(hint, fp), raw) {
            (true, raw) => {
                debug_assert!(raw.is_none_or(|raw| self.shard.find(fp, raw) == Some(hint)));
                hint
            }
            (false, Some(raw)) => self.shard.find(fp, raw)?,
            (false, None) => self.shard.find_fingerprint(fp)?,
        };
        self.shard.warm(slot);
        Some(slot)
    }

    /// Appends a created timestamp's zero sample to the series in `slot`:
    /// in order or not at all (Prometheus refuses one out of order; a late
    /// zero would read as a counter reset).
    #[inline]
    pub(in crate::storage) fn append_zero(&mut self, slot: u32, t: i64, max_t: i64) {
        let bounds = Bounds {
            ooo_from: i64::MAX,
            ..self.head.time_bounds(max_t)
        };
        let mut side = AppendCounts::default();
        self.shard.append(
            slot,
            std::iter::once((t, 0.0)),
            bounds,
            &self.head.opts,
            &mut side,
        );
    }

    /// Notes the start times of samples appended to the series in `slot`.
    #[inline]
    pub(in crate::storage) fn note_starts(
        &mut self,
        slot: u32,
        starts: impl Iterator<Item = (i64, i64)>,
    ) {
        self.shard.note_starts(slot, starts);
    }

    /// Appends to the series in `slot` (from [`ShardGuard::find_warm`]).
    #[inline]
    pub(in crate::storage) fn append_to(
        &mut self,
        slot: u32,
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) {
        let bounds = self.head.time_bounds(max_t);
        self.shard
            .append(slot, samples, bounds, &self.head.opts, counts);
    }
}

impl Drop for ShardGuard<'_> {
    fn drop(&mut self) {
        self.cell.publish(&self.shard);
    }
}

impl Head {
    /// Adds (or updates) aliases, bounded by the head's series count.
    pub(in crate::storage) fn remember_aliases(&self, new: &[(u128, Alias)]) {
        self.aliases
            .remember(new, self.series.load(Ordering::Relaxed));
    }

    #[inline]
    pub(super) fn lock_touched(
        &self,
        hash: u64,
        counts: &mut AppendCounts,
    ) -> (&ShardCell, parking_lot::MutexGuard<'_, Shard>) {
        let i = self.shard_index(hash);
        counts.touched |= 1 << (i % 64);
        let cell = &self.shards[i].0;
        (cell, self.lock_caught_up(cell))
    }

    /// The times an append accepts: from the retention cutoff to `max_t`,
    /// in order from the newest block's end, and out of order from the
    /// head's newest less the window (below the newest block's end too:
    /// those go to blocks of their own at the next cut).
    pub(super) fn time_bounds(&self, max_t: i64) -> Bounds {
        let min_t = self.min_valid_ms();
        let window = self.ooo_window_ms.load(Ordering::Relaxed);
        let ooo_from = match window > 0 {
            true => self
                .max_t
                .load(Ordering::Relaxed)
                .saturating_sub(window)
                .max(min_t),
            false => i64::MAX,
        };
        Bounds {
            min_t,
            max_t,
            inorder_from: self.cut_floor.load(Ordering::SeqCst),
            ooo_from,
        }
    }

    /// Moves the head's newest time to `t` if it is later.
    #[inline]
    pub(in crate::storage) fn note_newest(&self, t: i64) {
        if t > self.max_t.load(Ordering::Relaxed) {
            self.max_t.fetch_max(t, Ordering::Relaxed);
        }
    }

    pub(super) fn new_ref(&self) -> u64 {
        self.next_ref.fetch_add(1, Ordering::Relaxed)
    }

    /// The shard the series with fingerprint `fp` lives in.
    #[inline]
    pub(in crate::storage) fn shard_of(&self, fp: Fingerprint) -> usize {
        self.shard_index(fp.hash)
    }

    /// Locks shard `i` for a run of appends if no one holds it.
    #[inline]
    pub(in crate::storage) fn try_lock_shard(
        &self,
        i: usize,
        counts: &mut AppendCounts,
    ) -> Option<ShardGuard<'_>> {
        let cell = &self.shards[i].0;
        let mut shard = cell.try_lock()?;
        self.catch_up(&mut shard);
        counts.touched |= 1 << (i % 64);
        Some(ShardGuard {
            head: self,
            cell,
            shard,
        })
    }

    /// Locks shard `i` for a run of appends, waiting for it.
    #[inline]
    pub(in crate::storage) fn lock_shard(
        &self,
        i: usize,
        counts: &mut AppendCounts,
    ) -> ShardGuard<'_> {
        let cell = &self.shards[i].0;
        counts.touched |= 1 << (i % 64);
        ShardGuard {
            head: self,
            cell,
            shard: self.lock_caught_up(cell),
        }
    }

    /// Appends to the series whose canonical label bytes are exactly `raw`.
    /// Returns `false`, touching nothing, when no such series exists yet.
    #[inline]
    pub(in crate::storage) fn append_existing(
        &self,
        raw: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> bool {
        let fp = fingerprint(raw);
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        let Some(slot) = shard.find(fp, raw) else {
            return false;
        };
        shard.append(slot, samples, self.time_bounds(max_t), &self.opts, counts);
        home.publish(&shard);
        true
    }

    /// Notes start times for the series whose canonical label bytes are
    /// `raw`; `false` when there is none.
    pub(in crate::storage) fn note_starts_of(
        &self,
        raw: &[u8],
        starts: impl Iterator<Item = (i64, i64)>,
        counts: &mut AppendCounts,
    ) -> bool {
        let fp = fingerprint(raw);
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        let Some(slot) = shard.find(fp, raw) else {
            return false;
        };
        shard.note_starts(slot, starts);
        home.publish(&shard);
        true
    }

    /// Appends to the series last seen at `slot` with fingerprint `fp`;
    /// `false`, touching nothing, when it is not there now.
    pub(in crate::storage) fn append_at(
        &self,
        fp: Fingerprint,
        slot: u32,
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> bool {
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        if !shard.holds(slot, fp) {
            return false;
        }
        shard.append(slot, samples, self.time_bounds(max_t), &self.opts, counts);
        home.publish(&shard);
        true
    }

    /// Notes the start times of samples appended to the series at `slot`
    /// (see [`super::shard::Shard::note_starts`]); `false` when it is not
    /// there.
    pub(in crate::storage) fn note_starts_at(
        &self,
        fp: Fingerprint,
        slot: u32,
        starts: impl Iterator<Item = (i64, i64)>,
        counts: &mut AppendCounts,
    ) -> bool {
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        if !shard.holds(slot, fp) {
            return false;
        }
        shard.note_starts(slot, starts);
        home.publish(&shard);
        true
    }

    /// Appends to the series with these valid, sorted `labels`, whose
    /// canonical bytes are `canonical`, creating it if needed. Returns the
    /// series' fingerprint and its slot in its shard.
    pub(in crate::storage) fn append_labels(
        &self,
        labels: &[(&str, &str)],
        canonical: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> Result<(Fingerprint, u32), SeriesLimit> {
        let fp = fingerprint(canonical);
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        let slot = self.find_or_create(&mut shard, fp, labels, canonical)?;
        shard.append(slot, samples, self.time_bounds(max_t), &self.opts, counts);
        home.publish(&shard);
        Ok((fp, slot))
    }

    /// The slot of the series with these labels in `shard`, created if
    /// new (within the series limit).
    pub(super) fn find_or_create(
        &self,
        shard: &mut Shard,
        fp: Fingerprint,
        labels: &[(&str, &str)],
        canonical: &[u8],
    ) -> Result<u32, SeriesLimit> {
        if let Some(slot) = shard.find(fp, canonical) {
            return Ok(slot);
        }
        let max = self.max_series.load(Ordering::Relaxed);
        if self
            .series
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_err()
        {
            return Err(SeriesLimit::Total(max));
        }
        if let Err(e) = self.count_metric_series(labels, true) {
            self.series.fetch_sub(1, Ordering::Relaxed);
            return Err(e);
        }
        Ok(shard.create(self.new_ref(), fp, labels, canonical))
    }

    /// Appends native histogram samples to the series with these valid,
    /// sorted `labels` (canonical bytes `canonical`), creating it if
    /// needed. The samples are validated already.
    pub(in crate::storage) fn append_histograms(
        &self,
        labels: &[(&str, &str)],
        canonical: &[u8],
        samples: &[(i64, HistSample)],
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> Result<(), SeriesLimit> {
        let fp = fingerprint(canonical);
        let (home, mut shard) = self.lock_touched(fp.hash, counts);
        let slot = self.find_or_create(&mut shard, fp, labels, canonical)?;
        shard.append_histograms(
            slot,
            samples.iter().map(|(t, h)| (*t, h)),
            self.time_bounds(max_t),
            &self.opts,
            counts,
        );
        home.publish(&shard);
        Ok(())
    }
}
