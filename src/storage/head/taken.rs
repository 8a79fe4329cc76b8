//! What a query's selection takes of a batch of series while their
//! shard is locked, and the selected series it makes of that once the
//! lock is let go.
//!
//! Under the lock, each series' parts are copied into buffers reused
//! from batch to batch, allocating nothing per series: its labels'
//! string ids (looked up after, in the shard's string pages taken with
//! the batch), handles to its sealed chunks, its open chunk's bytes and
//! its start-time runs. Looking the strings up, building each series'
//! vectors, clipping chunks that hold samples not yet durable, and
//! sharing the open chunks' copy are done after, so that a writer
//! waiting for the shard waits neither for the allocator nor for the
//! strings' cache misses (a query thread in the idle class that is
//! descheduled while it holds a shard keeps every writer to it waiting
//! until a core is free). What few series have, late samples and
//! histograms, is still made under the lock.

use std::sync::Arc;

use super::hist_series::HistSample;
use super::shard::{clipped, no_bytes, MemSeries, Shard};
use crate::storage::chunk::{ChunkBytes, ChunkRef};
use crate::storage::labels::{InternedPages, Label, StrId};
use crate::storage::selected::SelectedSeries;
use crate::storage::starts::StartRun;

/// A batch of series taken for a query (see the module's comment).
#[derive(Debug, Default)]
pub(in crate::storage) struct Taken {
    /// The shard's full string pages, taken with the batch's first
    /// series.
    pages: Option<InternedPages>,
    /// The label ids of the series whose strings are all in `pages`.
    ids: Vec<(StrId, StrId)>,
    /// The labels of the others (a string interned since the last full
    /// page), looked up under the lock.
    labels: Vec<Label>,
    /// Sealed chunks: (mint, maxt, bytes).
    sealed: Vec<(i64, i64, Arc<[u8]>)>,
    /// The open chunks' bytes, one after another.
    open: Vec<u8>,
    starts: Vec<StartRun>,
    series: Vec<TakenSeries>,
}

/// One series of a [`Taken`] batch: how many of the batch's label ids
/// (or labels) and sealed chunks are its own, in order.
#[derive(Debug)]
struct TakenSeries {
    id: u64,
    labels: u32,
    /// Its labels are ids in `Taken::ids`, not in `Taken::labels`.
    by_id: bool,
    sealed: u32,
    starts: u32,
    open: Option<OpenTaken>,
    /// The newest timestamp the query may see of it (see
    /// [`MemSeries::visible_until`]).
    until: i64,
    /// What is rarely there and made under the lock as before: chunks
    /// merged with late samples (in place of the sealed and open ones),
    /// histograms.
    rest: Option<Box<Rest>>,
}

/// The open chunk of a taken series.
#[derive(Debug)]
struct OpenTaken {
    mint: i64,
    maxt: i64,
    /// Its bytes in the batch's `open` (the next `len` of them); `None`
    /// for a chunk standing for its newest sample alone.
    len: Option<u32>,
    last: Option<(i64, f64)>,
}

#[derive(Debug, Default)]
struct Rest {
    merged: Option<Vec<ChunkRef>>,
    histograms: Vec<(i64, HistSample)>,
}

impl Taken {
    /// Whether nothing is taken.
    pub(in crate::storage) fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Takes series `s` of `shard` (locked) for a query of `[mint, maxt]`
    /// that may see it up to `until`, its in-order chunks from
    /// `inorder_from` on (blocks answer for older times); with `newest`,
    /// the reader wants only the newest float sample in the range, and
    /// gets a chunk standing for it alone where the open chunk holds it.
    /// What it takes is what [`Shard::chunks_for_query`],
    /// [`Shard::histograms_of`] and [`Shard::starts_of`] give.
    pub(in crate::storage) fn take(
        &mut self,
        shard: &Shard,
        s: &MemSeries,
        (mint, maxt): (i64, i64),
        until: i64,
        inorder_from: i64,
        newest: bool,
    ) {
        let run = shard.labels(s);
        let pages = self.pages.get_or_insert_with(|| shard.strings.pages());
        // The pages are the shard's while its lock is held, and a batch
        // is taken under one hold; were it not, the labels are looked up
        // here.
        let bound = pages.bound();
        let by_id =
            pages.are_of(&shard.strings) && run.iter().all(|&(n, v)| n < bound && v < bound);
        if by_id {
            self.ids.extend_from_slice(run);
        } else {
            self.labels.extend(run.iter().map(|&(n, v)| Label {
                name: shard.strings.shared(n),
                value: shard.strings.shared(v),
            }));
        }
        let mut rest: Option<Box<Rest>> = None;
        let (mut sealed, mut open) = (0, None);
        if s.has_ooo() {
            // Late samples are merged into new chunks: rare, made here.
            rest.get_or_insert_default().merged =
                Some(shard.chunks_for_query(s, (mint, maxt), until, inorder_from));
        } else if let Some((first, t, v)) = newest
            .then(|| shard.newest_for_query(s, (mint, maxt), until, inorder_from))
            .flatten()
        {
            open = Some(OpenTaken {
                mint: first,
                maxt: t,
                len: None,
                last: Some((t, v)),
            });
        } else if mint.max(inorder_from) <= maxt {
            // As `MemSeries::snapshot_chunks` picks them.
            let (lo, hi) = (mint.max(inorder_from), maxt.min(until));
            for c in s.sealed_overlapping(lo, hi) {
                self.sealed.push((c.mint, c.maxt, Arc::clone(&c.bytes)));
                sealed += 1;
            }
            if let Some(h) = s.open_overlapping(lo, hi) {
                self.open.extend_from_slice(h.bytes);
                open = Some(OpenTaken {
                    mint: h.mint,
                    maxt: h.maxt,
                    len: Some(h.bytes.len() as u32),
                    last: h.last,
                });
            }
        }
        if s.has_hist() || s.has_ooo() {
            let h = shard.histograms_of(s, (mint, maxt), until, inorder_from);
            if !h.is_empty() {
                rest.get_or_insert_default().histograms = h;
            }
        }
        let starts = crate::storage::starts::runs_within(shard.starts_of(s), mint, maxt);
        self.starts.extend_from_slice(starts);
        self.series.push(TakenSeries {
            id: s.id,
            labels: run.len() as u32,
            by_id,
            sealed,
            starts: starts.len() as u32,
            open,
            until,
            rest,
        });
    }

    /// Makes the selected series of what was taken, in order, and gives
    /// each to `f` with its id; empties the batch for the next one.
    pub(in crate::storage) fn drain(&mut self, mut f: impl FnMut(u64, SelectedSeries)) {
        // The open chunks' bytes shared by the batch's series: one block
        // (none when no open chunk's bytes were taken).
        let arena: Arc<[u8]> = if self.open.is_empty() {
            no_bytes()
        } else {
            Arc::from(&self.open[..])
        };
        let mut at = 0usize;
        let pages = self.pages.take().unwrap_or_default();
        let mut ids = self.ids.drain(..);
        let mut labels = self.labels.drain(..);
        let mut sealed = self.sealed.drain(..);
        let mut starts = self.starts.drain(..);
        for t in self.series.drain(..) {
            let until = t.until;
            let labels: Vec<Label> = if t.by_id {
                ids.by_ref()
                    .take(t.labels as usize)
                    .map(|(n, v)| Label {
                        name: pages.shared(n),
                        value: pages.shared(v),
                    })
                    .collect()
            } else {
                labels.by_ref().take(t.labels as usize).collect()
            };
            let mut chunks = Vec::with_capacity(t.sealed as usize + usize::from(t.open.is_some()));
            for (mint, maxt, bytes) in sealed.by_ref().take(t.sealed as usize) {
                chunks.push(ChunkRef {
                    mint,
                    maxt: maxt.min(until),
                    bytes: if maxt > until {
                        clipped(&bytes, until).into()
                    } else {
                        bytes.into()
                    },
                    last: None,
                });
            }
            if let Some(o) = t.open {
                let bytes = match o.len {
                    None => no_bytes().into(),
                    Some(len) => {
                        let range = at..at + len as usize;
                        at = range.end;
                        match (o.maxt > until, arena.get(range.clone())) {
                            (true, Some(b)) => clipped(b, until).into(),
                            (false, Some(_)) => ChunkBytes::slice(&arena, range)
                                .unwrap_or_else(|| no_bytes().into()),
                            // Not reached: the ranges are the copies'.
                            (_, None) => no_bytes().into(),
                        }
                    }
                };
                chunks.push(ChunkRef {
                    mint: o.mint,
                    maxt: o.maxt.min(until),
                    bytes,
                    last: o.last.filter(|&(t, _)| t <= until),
                });
            }
            let rest = t.rest.map(|r| *r).unwrap_or_default();
            if let Some(merged) = rest.merged {
                chunks = merged;
            }
            f(
                t.id,
                SelectedSeries {
                    labels,
                    chunks,
                    histograms: rest.histograms,
                    starts: starts.by_ref().take(t.starts as usize).collect(),
                },
            );
        }
        drop((ids, labels, sealed, starts));
        self.open.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::Taken;
    use crate::histogram::{HistSample, Histogram, Span};
    use crate::storage::chunk::ChunkRef;
    use crate::storage::head::shard::Fingerprint;
    use crate::storage::head::{AppendCounts, Head, HeadOptions};
    use crate::storage::labels::{encode_canonical, PAGE};
    use crate::storage::selected::SelectedSeries;

    type Labels = [(&'static str, &'static str); 2];

    /// Appends `n` float samples, a second apart from 0, to the series
    /// named `name`: its labels, canonical bytes, fingerprint and slot.
    fn floats(
        head: &Head,
        name: &'static str,
        n: i64,
        c: &mut AppendCounts,
    ) -> (Labels, Vec<u8>, Fingerprint, u32) {
        let labels = [("__name__", name), ("job", "j")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let samples = (0..n).map(|i| (i * 1000, (i * 7 % 11) as f64));
        let (fp, slot) = head
            .append_labels(&labels, &raw, samples, i64::MAX, c)
            .expect("fits");
        (labels, raw, fp, slot)
    }

    /// A one-shard head with a series of each kind: floats over several
    /// sealed chunks and an open one, floats with late samples among
    /// them, histograms beside floats, and floats sent start times. The
    /// first two come before a page's worth of other series, so that
    /// their strings are in a full page and the last two's are not.
    fn head() -> Head {
        let head = Head::new(HeadOptions {
            shards: 1,
            ooo_window_ms: 10_000_000,
            ..HeadOptions::default()
        });
        let mut c = AppendCounts::default();
        floats(&head, "sealed", 300, &mut c);
        let (labels, raw, _, _) = floats(&head, "late", 150, &mut c);
        let late = (0..20).map(|i| (i * 7000 + 500, -1.0));
        head.append_labels(&labels, &raw, late, i64::MAX, &mut c)
            .expect("fits");
        for i in 0..PAGE {
            let i = i.to_string();
            let labels = [("__name__", "fill"), ("i", i.as_str())];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            head.append_labels(&labels, &raw, [(0, 1.0)].into_iter(), i64::MAX, &mut c)
                .expect("fits");
        }
        let (labels, raw, _, _) = floats(&head, "hist", 50, &mut c);
        let hists: Vec<(i64, HistSample)> = (50..200)
            .map(|i| {
                let h = Histogram {
                    count: i as u64,
                    sum: i as f64,
                    positive_spans: vec![Span {
                        offset: 0,
                        length: 1,
                    }],
                    positive_buckets: vec![i],
                    ..Histogram::default()
                };
                (i * 1000, HistSample::Int(h))
            })
            .collect();
        head.append_histograms(&labels, &raw, &hists, i64::MAX, &mut c)
            .expect("fits");
        let (_, _, fp, slot) = floats(&head, "starts", 200, &mut c);
        let starts = (0..200).map(|i| (i * 1000, (i / 60) * 60_000 + 1));
        assert!(head.note_starts_at(fp, slot, starts, &mut c));
        head
    }

    fn chunk(c: &ChunkRef) -> (i64, i64, Vec<u8>, Option<(i64, f64)>) {
        (c.mint, c.maxt, c.bytes.to_vec(), c.last)
    }

    proptest::proptest! {
        /// What a batch takes under the lock and makes after is what the
        /// shard's own reads give under it: labels, chunks (clipped where
        /// `until` falls inside them, merged with late samples, or one
        /// standing for the newest sample), histograms and start times.
        #[test]
        fn a_taken_batch_makes_what_the_shard_reads_give(
            mint in -10_000i64..310_000,
            span in 0i64..320_000,
            until in -10_000i64..320_000,
            until_all in proptest::bool::ANY,
            inorder_from in -10_000i64..320_000,
            newest in proptest::bool::ANY,
            every in 1usize..10,
        ) {
            let head = head();
            let maxt = mint + span;
            let until = if until_all { i64::MAX } else { until };
            let mut made = Vec::new();
            let mut make = |taken: &mut Taken| {
                taken.drain(|id, s: SelectedSeries| {
                    made.push((
                        id,
                        s.labels,
                        s.chunks.iter().map(chunk).collect::<Vec<_>>(),
                        s.histograms,
                        s.starts,
                    ));
                });
            };
            // One batch reused: drained every `every` series.
            let (want, mut taken) = head.with_shard(0, |shard| {
                let mut want = Vec::new();
                let mut taken = Taken::default();
                for (n, s) in shard.series.iter().enumerate() {
                    if n % every == 0 {
                        make(&mut taken);
                    }
                    let chunks = match newest
                        .then(|| shard.newest_for_query(s, (mint, maxt), until, inorder_from))
                        .flatten()
                    {
                        Some((first, t, v)) => vec![(first, t, Vec::new(), Some((t, v)))],
                        None => shard
                            .chunks_for_query(s, (mint, maxt), until, inorder_from)
                            .iter()
                            .map(chunk)
                            .collect(),
                    };
                    want.push((
                        s.id,
                        shard.labels_of(s),
                        chunks,
                        shard.histograms_of(s, (mint, maxt), until, inorder_from),
                        crate::storage::starts::runs_within(shard.starts_of(s), mint, maxt)
                            .to_vec(),
                    ));
                    taken.take(shard, s, (mint, maxt), until, inorder_from, newest);
                }
                (want, taken)
            });
            make(&mut taken);
            proptest::prop_assert!(taken.is_empty());
            proptest::prop_assert_eq!(made.len(), PAGE + 4);
            proptest::prop_assert_eq!(made, want);
        }
    }

    #[test]
    fn the_test_head_has_every_kind_of_series() {
        let head = head();
        head.with_shard(0, |shard| {
            let s = &shard.series;
            assert_eq!(s.len(), PAGE + 4);
            let (hist, starts) = (&s[PAGE + 2], &s[PAGE + 3]);
            assert!(s[0].sealed.len() >= 2, "sealed chunks and an open one");
            assert!(s[1].has_ooo(), "late samples");
            assert!(hist.has_hist(), "histograms");
            assert!(!shard.starts_of(starts).is_empty(), "start times");
            // Labels taken by id, and looked up under the lock.
            let mut taken = Taken::default();
            for m in [&s[0], &s[1], hist, starts] {
                taken.take(shard, m, (0, 1), i64::MAX, 0, false);
            }
            let by_id: Vec<bool> = taken.series.iter().map(|t| t.by_id).collect();
            assert_eq!(by_id, [true, true, false, false]);
            assert_eq!(taken.ids.len(), 4);
            assert_eq!(taken.labels.len(), 4);
        });
    }
}
