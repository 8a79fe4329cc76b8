//! Reads of the head alone: sizes, the series that match a selection
//! (each shard visited a batch of series at a time under its lock,
//! regexes judged without it), and the chunks a block cut copies. The
//! merge with blocks is the `Querier`'s.

use super::shard::{MemSeries, Shard};
use super::taken::Taken;
use super::{Head, HeadStats, Padded, ShardCell};
use crate::storage::block::BlockSeries;
use crate::storage::index::{Matcher, Verdicts};
use crate::storage::selected::SelectedSeries;
use crate::storage::{Stop, Stopped};

impl Head {
    /// Series, chunks and bytes held.
    pub fn stats(&self) -> HeadStats {
        let mut st = HeadStats::default();
        for Padded(shard) in self.shards.iter() {
            let s = shard.lock();
            st.series += s.series.len();
            st.chunks += s.chunks + s.hist_chunks;
            st.chunk_bytes += s.chunk_bytes + s.hist_bytes;
            st.samples += s.samples;
        }
        st
    }

    /// Calls `f` with each series (and its shard) that matches all
    /// `matchers` and has visible samples in `[mint, maxt]`, and the newest
    /// timestamp it may read of that series (see
    /// [`MemSeries::visible_until`]). A shard's lock is held for a batch of
    /// its series at a time (see `LOCK_BATCH`), and never while a regex
    /// runs: the values a regex matcher meets are judged with the lock let
    /// go (see [`Verdicts`]). Gives up when `stop` says so.
    pub(in crate::storage) fn for_each_match(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
        mut f: impl FnMut(&Shard, &MemSeries, i64),
    ) -> Result<(), Stopped> {
        let mut verdicts = Verdicts::new(matchers);
        for Padded(cell) in self.shards.iter() {
            self.visit(cell, matchers, (mint, maxt), stop, &mut verdicts, &mut f)?;
        }
        Ok(())
    }

    /// The selected series of [`Head::for_each_match`]'s matches, with
    /// the shards cut among the free cores (see [`crate::parallel`]) when
    /// the first shard's matches promise enough work. `take` takes what
    /// the query needs of each match into a batch while its shard is
    /// locked (see [`Taken`]); each batch is made into series once the
    /// lock is let go, and `keep` gives each series' item, if any. Each
    /// part's items come back in one vector, in the order they were met,
    /// then given to `finish` on the thread that made them (to sort them,
    /// say).
    pub(in crate::storage) fn collect_matches<T: Send>(
        &self,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        take: impl Fn(&mut Taken, &Shard, &MemSeries, i64) + Sync,
        keep: impl Fn(u64, SelectedSeries) -> Option<T> + Sync,
        finish: impl Fn(&mut Vec<T>) + Sync,
    ) -> Result<Vec<Vec<T>>, Stopped> {
        if self.shards.is_empty() {
            return Ok(Vec::new());
        }
        let (first, rest) = self.shards.split_at(1);
        let visit_into =
            |cells: &[Padded<ShardCell>], verdicts: &mut Verdicts, out: &mut Vec<T>| {
                let mut batch = Batch {
                    taken: Taken::default(),
                    take: &take,
                    keep: &keep,
                    out,
                };
                for Padded(cell) in cells {
                    self.visit(cell, matchers, (mint, maxt), stop, verdicts, &mut batch)?;
                }
                Ok::<(), Stopped>(())
            };
        let mut verdicts = Verdicts::new(matchers);
        let mut head = Vec::new();
        visit_into(first, &mut verdicts, &mut head)?;
        // Shards hold series by hash, so the first is a fair sample.
        let expected = head.len().saturating_mul(rest.len());
        let workers = crate::parallel::Workers::for_items(
            expected.min(rest.len().saturating_mul(SERIES_PER_WORKER)),
            SERIES_PER_WORKER,
        );
        if workers.count() == 1 {
            visit_into(rest, &mut verdicts, &mut head)?;
            finish(&mut head);
            return Ok(vec![head]);
        }
        let parts = workers.bounds(rest.len());
        finish(&mut head);
        let mut out = vec![head];
        for part in workers.run(parts, |r| {
            let mut got = Vec::new();
            visit_into(&rest[r], &mut Verdicts::new(matchers), &mut got)?;
            finish(&mut got);
            Ok(got)
        }) {
            out.push(part?);
        }
        Ok(out)
    }

    /// Visits one shard for [`Head::for_each_match`] and
    /// [`Head::collect_matches`]: gives each match to `f` under the lock,
    /// and tells `f` each time the lock is let go.
    fn visit(
        &self,
        cell: &ShardCell,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        verdicts: &mut Verdicts,
        f: &mut impl Visitor,
    ) -> Result<(), Stopped> {
        // The lock is let go every `LOCK_BATCH` series, so that writers to
        // the shard wait for a batch, not for a whole visit (milliseconds
        // for a selection of every series). A shard rebuilt meanwhile is
        // visited again from its new state, without the series given to
        // `f` already.
        let mut given: Vec<u64> = Vec::new();
        let mut skip: Option<hashbrown::HashSet<u64>> = None;
        'visit: loop {
            let mut s = self.lock_for_read(cell);
            let rebuilds = s.rebuilds;
            verdicts.begin_visit();
            let all = s.series.len() as u32;
            let slots = if matchers.is_empty() {
                Some((0..all).collect())
            } else {
                s.postings
                    .select_judged(&s.strings, matchers, all, verdicts)
            };
            let Some(slots) = slots else {
                drop(s);
                f.let_go();
                if !verdicts.judge(matchers, || stop.now()) {
                    return Err(Stopped);
                }
                continue;
            };
            for (n, slot) in slots.into_iter().enumerate() {
                if n % VISIT_BATCH == VISIT_BATCH - 1 && stop.now() {
                    return Err(Stopped);
                }
                if n % LOCK_BATCH == LOCK_BATCH - 1 {
                    drop(s);
                    f.let_go();
                    #[cfg(test)]
                    tests::between_batches();
                    s = self.lock_for_read(cell);
                    if s.rebuilds != rebuilds {
                        skip = Some(given.iter().copied().collect());
                        continue 'visit;
                    }
                }
                let Some(series) = s.series.get(slot as usize) else {
                    continue;
                };
                if skip.as_ref().is_some_and(|done| done.contains(&series.id)) {
                    continue;
                }
                let until = series.visible_until(s.log.as_ref());
                // Late samples count too: a series may hold nothing
                // else (what it held in order is in blocks).
                let newest = s.max_time_of(series).map(|t| t.min(until));
                let late = s.late_newest(series);
                let (Some(lo), Some(hi)) = (s.min_time_of(series), newest.max(late)) else {
                    continue;
                };
                if hi >= lo && hi >= mint && lo <= maxt {
                    given.push(series.id);
                    f.visit(&s, series, until);
                }
            }
            drop(s);
            f.let_go();
            return Ok(());
        }
    }

    /// Calls `f` with shard `i` under its lock and the next batch of its
    /// series (at most `LOCK_BATCH`), letting the lock go between batches
    /// as a visit does, so that writers to the shard wait for a batch, not
    /// for the whole shard. A shard rebuilt meanwhile is walked again from
    /// its new state, without the series already given. The shard's log
    /// is not caught up: what is copied is what the shard holds.
    pub(in crate::storage) fn walk_shard(
        &self,
        i: usize,
        mut f: impl FnMut(&Shard, &[&MemSeries]),
    ) {
        let cell = &self.shards[i].0;
        let mut given: Vec<u64> = Vec::new();
        let mut skip: Option<hashbrown::HashSet<u64>> = None;
        'walk: loop {
            let mut s = cell.lock();
            let rebuilds = s.rebuilds;
            let mut at = 0;
            while at < s.series.len() {
                if at > 0 {
                    drop(s);
                    #[cfg(test)]
                    tests::between_batches();
                    s = cell.lock();
                    if s.rebuilds != rebuilds {
                        skip = Some(given.iter().copied().collect());
                        continue 'walk;
                    }
                }
                let end = (at + LOCK_BATCH).min(s.series.len());
                let batch: Vec<&MemSeries> = s.series[at..end]
                    .iter()
                    .filter(|m| !skip.as_ref().is_some_and(|done| done.contains(&m.id)))
                    .collect();
                given.extend(batch.iter().map(|m| m.id));
                f(&s, &batch);
                at = end;
            }
            return;
        }
    }

    /// The oldest and newest sample times in the head, from `floor` on.
    pub(in crate::storage) fn span_from(&self, floor: i64) -> Option<(i64, i64)> {
        let mut span: Option<(i64, i64)> = None;
        for i in 0..self.shard_count() {
            self.with_shard(i, |shard| {
                for s in &shard.series {
                    let (Some(lo), Some(hi)) = (shard.min_time_of(s), shard.max_time_of(s)) else {
                        continue;
                    };
                    if hi < floor {
                        continue;
                    }
                    let lo = lo.max(floor);
                    span = Some(span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
                }
            });
        }
        span
    }

    /// Every series' chunks in `[lo, hi)`, with its labels, after its id.
    pub(in crate::storage) fn chunks_between(&self, lo: i64, hi: i64) -> Vec<(u64, BlockSeries)> {
        let mut out = Vec::new();
        for i in 0..self.shard_count() {
            self.with_shard(i, |shard| {
                for s in &shard.series {
                    let chunks = shard.chunks_in(s, lo, hi, &self.opts);
                    if chunks.is_empty() {
                        continue;
                    }
                    let starts = crate::storage::starts::runs_within(
                        shard.starts_of(s),
                        lo,
                        hi.saturating_sub(1),
                    )
                    .to_vec();
                    out.push((
                        s.id,
                        BlockSeries {
                            starts,
                            labels: shard
                                .labels_of(s)
                                .into_iter()
                                .map(|l| (l.name.into(), l.value.into()))
                                .collect(),
                            chunks,
                        },
                    ));
                }
            });
        }
        out
    }
}

/// What a visit gives each match to, under the shard's lock, and tells
/// when it let the lock go.
trait Visitor {
    fn visit(&mut self, shard: &Shard, series: &MemSeries, until: i64);

    /// The shard's lock was let go: what was taken can be worked on.
    fn let_go(&mut self) {}
}

impl<F: FnMut(&Shard, &MemSeries, i64)> Visitor for F {
    fn visit(&mut self, shard: &Shard, series: &MemSeries, until: i64) {
        self(shard, series, until)
    }
}

/// [`Head::collect_matches`]' visitor: takes under the lock, makes and
/// keeps once it is let go.
struct Batch<'a, T, Take, Keep> {
    taken: Taken,
    take: &'a Take,
    keep: &'a Keep,
    out: &'a mut Vec<T>,
}

impl<T, Take, Keep> Visitor for Batch<'_, T, Take, Keep>
where
    Take: Fn(&mut Taken, &Shard, &MemSeries, i64),
    Keep: Fn(u64, SelectedSeries) -> Option<T>,
{
    fn visit(&mut self, shard: &Shard, series: &MemSeries, until: i64) {
        (self.take)(&mut self.taken, shard, series, until);
    }

    fn let_go(&mut self) {
        if self.taken.is_empty() {
            return;
        }
        let (keep, out) = (self.keep, &mut *self.out);
        self.taken.drain(|id, s| out.extend(keep(id, s)));
    }
}

/// A shard locked by a read ([`Head::for_each_match`]'s visits), marked
/// so while it is held: an append that waits for it counts as waiting
/// behind a read (see [`Head::lock_waits`]).
pub(super) struct ReadHold<'a> {
    cell: &'a ShardCell,
    shard: parking_lot::MutexGuard<'a, Shard>,
}

impl std::ops::Deref for ReadHold<'_> {
    type Target = Shard;

    fn deref(&self) -> &Shard {
        &self.shard
    }
}

impl Drop for ReadHold<'_> {
    fn drop(&mut self) {
        // Before the guard (a field) lets the lock go.
        self.cell
            .read_held
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Head {
    /// Locks a shard for a read, its log caught up (see
    /// [`Head::lock_caught_up`]).
    pub(super) fn lock_for_read<'a>(&self, cell: &'a ShardCell) -> ReadHold<'a> {
        let mut shard = cell.lock();
        self.catch_up(&mut shard);
        cell.read_held
            .store(true, std::sync::atomic::Ordering::Relaxed);
        ReadHold { cell, shard }
    }
}

#[cfg(test)]
impl Head {
    /// A querier over this head alone (no blocks), for tests.
    pub(in crate::storage) fn querier(&self) -> crate::storage::Querier<'_> {
        static NO_BLOCKS: std::sync::LazyLock<crate::storage::blocks::Blocks> =
            std::sync::LazyLock::new(crate::storage::blocks::Blocks::default);
        crate::storage::Querier::new(self, &NO_BLOCKS)
    }
}

/// Series visited between two looks at a read's stop condition.
const VISIT_BATCH: usize = 4096;

/// Series of a shard a read visits under one hold of its lock (a few
/// hundred microseconds of a writer's wait at most).
#[cfg(not(test))]
const LOCK_BATCH: usize = 256;
#[cfg(test)]
const LOCK_BATCH: usize = 4;

/// Series selected from the head worth a helper thread (about 1.5 µs
/// each: labels, chunks and a sort; handing a part to a helper costs
/// microseconds).
const SERIES_PER_WORKER: usize = 1024;

#[cfg(test)]
pub(super) mod tests {
    use crate::storage::head::{AppendCounts, Head, HeadOptions};
    use crate::storage::labels::encode_canonical;
    use crate::storage::Stop;
    use std::cell::RefCell;
    use std::sync::Arc;

    thread_local! {
        /// What a test runs on this thread while a visit has let a
        /// shard's lock go between two batches.
        static BETWEEN: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
    }

    pub(super) fn between_batches() {
        BETWEEN.with(|b| {
            if let Some(f) = b.borrow_mut().as_mut() {
                f();
            }
        });
    }

    /// A one-shard head of 40 series, with retention set to rebuild it
    /// between a read's second and third batches: the even series end at
    /// 10 (retention at 50 removes them), the odd ones at 100, which move
    /// to new slots. Each has three more labels of values of its own, so
    /// that the shard's strings fill pages before the rebuild and after
    /// it (which numbers them anew).
    fn head_rebuilt_mid_read() -> Arc<Head> {
        let head = Arc::new(Head::new(HeadOptions {
            shards: 1,
            ..Default::default()
        }));
        let mut c = AppendCounts::default();
        for i in 0..40 {
            let t = if i % 2 == 0 { 10 } else { 100 };
            let i = format!("{i:02}");
            let (j, k, l) = (format!("j{i}"), format!("k{i}"), format!("l{i}"));
            let l = [
                ("__name__", "m"),
                ("i", i.as_str()),
                ("j", j.as_str()),
                ("k", k.as_str()),
                ("l", l.as_str()),
            ];
            let mut raw = Vec::new();
            encode_canonical(l.iter().copied(), &mut raw);
            head.append_labels(&l, &raw, [(t, 1.0)].into_iter(), t, &mut c)
                .expect("fits");
        }
        head.log_and_wait();
        let (h, mut pauses) = (Arc::clone(&head), 0);
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                pauses += 1;
                if pauses == 2 {
                    assert_eq!(h.truncate(50).series, 20);
                }
            }))
        });
        head
    }

    /// The read of [`head_rebuilt_mid_read`] gave no series twice and
    /// every series that was there throughout (the `i` label of each).
    fn each_odd_series_once(head: &Head, seen: &[String]) {
        BETWEEN.with(|b| b.borrow_mut().take());
        assert_eq!(head.with_shard(0, |s| s.rebuilds), 1, "rebuilt mid-read");
        let mut unique = seen.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "given twice: {seen:?}");
        for i in (1..40).step_by(2) {
            assert!(seen.contains(&format!("{i:02}")), "{i} missing: {seen:?}");
        }
    }

    #[test]
    fn a_visit_lets_the_lock_go_and_survives_a_rebuild_meanwhile() {
        let head = head_rebuilt_mid_read();
        let mut seen = Vec::new();
        head.for_each_match(&[], i64::MIN, i64::MAX, &Stop::default(), |shard, s, _| {
            seen.push(shard.labels_of(s)[1].value.to_string());
        })
        .expect("not stopped");
        each_odd_series_once(&head, &seen);
    }

    #[test]
    fn a_selection_takes_in_batches_and_survives_a_rebuild_meanwhile() {
        let head = head_rebuilt_mid_read();
        let all = (i64::MIN, i64::MAX);
        let parts = head
            .collect_matches(
                &[],
                all,
                &Stop::default(),
                |taken, shard, s, until| {
                    // The strings fill pages, so labels go by id.
                    assert!(shard.strings.pages().bound() >= 64);
                    taken.take(shard, s, all, until, i64::MIN, false)
                },
                |_, s| {
                    let i = s.labels[1].value.to_string();
                    let values: Vec<&str> = s.labels.iter().map(|l| &*l.value).collect();
                    assert_eq!(
                        values,
                        [
                            "m",
                            &i,
                            &format!("j{i}"),
                            &format!("k{i}"),
                            &format!("l{i}")
                        ]
                    );
                    Some(i)
                },
                |_| {},
            )
            .expect("not stopped");
        let seen: Vec<String> = parts.into_iter().flatten().collect();
        each_odd_series_once(&head, &seen);
    }

    #[test]
    fn a_walk_lets_the_lock_go_and_survives_a_rebuild_meanwhile() {
        let head = head_rebuilt_mid_read();
        let (mut seen, mut batches) = (Vec::new(), 0);
        head.walk_shard(0, |shard, batch| {
            batches += 1;
            assert!(batch.len() <= super::LOCK_BATCH);
            seen.extend(
                batch
                    .iter()
                    .map(|s| shard.labels_of(s)[1].value.to_string()),
            );
        });
        each_odd_series_once(&head, &seen);
        assert!(batches > 3, "{batches} batches");
    }
}
