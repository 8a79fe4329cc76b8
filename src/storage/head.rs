//! The head: every series in memory, spread over shards by label hash.
//!
//! Appends take one shard lock per series for a short, synchronous critical
//! section. A series already seen is found from the sender's raw label bytes
//! (see [`super::labels`]); only a new series is decoded, interned and indexed.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64;

use super::index::Matcher;
use super::labels::Label;
use super::shard::{MemSeries, Shard};

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

/// The series limit was reached; the series was not created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("series limit of {0} reached")]
pub struct SeriesLimit(pub usize);

/// Outcome counts of appends, accumulated over a request.
#[derive(Debug, Default, Clone)]
pub struct AppendCounts {
    /// Samples stored (exact duplicates included: they are accepted).
    pub appended: u64,
    /// Rejected samples, indexed like [`SampleError::ALL`].
    pub rejected: [u64; 3],
    /// The first rejection seen since the caller last cleared it: reason and timestamp.
    pub first: Option<(SampleError, i64)>,
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
    /// Chunks never cross multiples of this many milliseconds (2h).
    pub chunk_range_ms: i64,
    /// Target samples per chunk (120).
    pub samples_per_chunk: u16,
}

impl Default for HeadOptions {
    fn default() -> Self {
        Self {
            shards: 16,
            max_series: 10_000_000,
            chunk_range_ms: 2 * 3600 * 1000,
            samples_per_chunk: 120,
        }
    }
}

/// Sizes of the head, computed on demand.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeadStats {
    /// Series held.
    pub series: usize,
    /// Chunks held (sealed and open).
    pub chunks: usize,
    /// Encoded bytes of all chunks.
    pub chunk_bytes: usize,
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

/// All series in memory.
#[derive(Debug)]
pub struct Head {
    shards: Box<[Padded<Mutex<Shard>>]>,
    opts: HeadOptions,
    series: AtomicUsize,
}

impl Head {
    /// An empty head.
    pub fn new(opts: HeadOptions) -> Self {
        let n = opts.shards.max(1).next_power_of_two();
        Self {
            shards: (0..n)
                .map(|_| Padded(Mutex::new(Shard::default())))
                .collect(),
            opts,
            series: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        // Middle bits: hashbrown uses the low bits for buckets and the top
        // seven for tags, so neither should be constant within a shard.
        &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)].0
    }

    /// Appends to the series whose canonical label bytes are exactly `raw`.
    /// Returns `false`, touching nothing, when no such series exists yet.
    #[inline]
    pub fn append_existing(
        &self,
        raw: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> bool {
        let hash = xxh3_64(raw);
        let mut shard = self.shard(hash).lock();
        let Some(slot) = shard.find(hash, raw) else {
            return false;
        };
        shard.append(slot, samples, max_t, &self.opts, counts);
        true
    }

    /// Appends to the series with these valid, sorted `labels`, whose
    /// canonical bytes are `canonical`, creating it if needed.
    pub fn append_labels(
        &self,
        labels: &[(&str, &str)],
        canonical: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        max_t: i64,
        counts: &mut AppendCounts,
    ) -> Result<(), SeriesLimit> {
        let hash = xxh3_64(canonical);
        let mut shard = self.shard(hash).lock();
        let slot = match shard.find(hash, canonical) {
            Some(slot) => slot,
            None => {
                let max = self.opts.max_series;
                if self
                    .series
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        (n < max).then_some(n + 1)
                    })
                    .is_err()
                {
                    return Err(SeriesLimit(max));
                }
                shard.create(hash, labels)
            }
        };
        shard.append(slot, samples, max_t, &self.opts, counts);
        Ok(())
    }

    /// Series, chunks and bytes held.
    pub fn stats(&self) -> HeadStats {
        let mut st = HeadStats::default();
        for Padded(shard) in self.shards.iter() {
            let s = shard.lock();
            st.series += s.series.len();
            st.chunks += s.chunks;
            st.chunk_bytes += s.chunk_bytes;
        }
        st
    }

    /// Copies out the series matching all `matchers` with their samples in
    /// `[mint, maxt]`, sorted by labels. For tests and small answers; queries
    /// stream with [`Head::select`].
    pub fn select_samples(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Vec<SeriesSamples> {
        self.select(matchers, mint, maxt)
            .into_iter()
            .map(|s| SeriesSamples {
                samples: s.samples(mint, maxt).collect(),
                labels: s.labels,
            })
            .collect()
    }

    /// Calls `f` with each series (and its shard) that matches all
    /// `matchers` and has samples in `[mint, maxt]`. Each shard's lock is
    /// held only while that shard is visited.
    pub(crate) fn for_each_match(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        mut f: impl FnMut(&Shard, &MemSeries),
    ) {
        for Padded(shard) in self.shards.iter() {
            let s = shard.lock();
            let slots = if matchers.is_empty() {
                (0..s.series.len() as u32).collect()
            } else {
                s.postings
                    .select(&s.strings, matchers, s.series.len() as u32)
            };
            for slot in slots {
                let Some(series) = s.series.get(slot as usize) else {
                    continue;
                };
                let (Some(lo), Some(hi)) = (series.min_time(), series.max_time()) else {
                    continue;
                };
                if hi >= mint && lo <= maxt {
                    f(&s, series);
                }
            }
        }
    }

    /// The newest timestamp of the series with these canonical label bytes.
    pub fn max_time(&self, canonical: &[u8]) -> Option<i64> {
        let hash = xxh3_64(canonical);
        let shard = self.shard(hash).lock();
        let slot = shard.find(hash, canonical)?;
        shard.series.get(slot as usize)?.max_time()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::index::MatchOp;
    use crate::storage::labels::encode_canonical;
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
                chunk_bytes: 15
            }
        );
        let m = Matcher::new(MatchOp::Equal, "job", "node").expect("matcher");
        let got = head.select_samples(&[m], 0, 10);
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
            Err(SeriesLimit(1))
        );
        // An existing series still takes samples at the limit.
        head.append_labels(&a, &canon(&a), [(5, 1.0)].into_iter(), 10, &mut c)
            .expect("exists");
        assert_eq!(c.appended, 1);
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
        for s in head.select_samples(
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
}
