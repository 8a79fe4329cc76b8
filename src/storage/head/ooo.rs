//! Out-of-order samples of one series, as Prometheus' out-of-order head
//! chunks keep them: a sample older than its series' newest, but within
//! the out-of-order window of the head's newest, goes into a small sorted
//! buffer of at most `cap` samples (Prometheus' `out_of_order_cap_max`,
//! 32); a full buffer is sealed into an XOR chunk of its own. Sealed
//! chunks are each in time order but may overlap one another and the
//! series' in-order chunks: reads and block cuts merge them with those,
//! each timestamp once.
//!
//! A series without out-of-order samples pays nothing: these live in a
//! map of its shard by series id, as native histograms do.

use crate::histogram::HistSample;
use crate::storage::chunk::{encode_xor, ChunkRef, XorAppender, XorIter, MERGED_CHUNK_SAMPLES};

/// A sealed buffer: an XOR chunk and its time span.
type OooChunk = ChunkRef;

/// The sample count in an XOR chunk's header.
fn samples_of(chunk: &[u8]) -> usize {
    chunk
        .get(..2)
        .map_or(0, |h| usize::from(u16::from_be_bytes([h[0], h[1]])))
}

/// The out-of-order samples of one series.
#[derive(Debug, Default)]
pub(crate) struct OooSeries {
    /// Full buffers, sealed: each in time order.
    sealed: Vec<OooChunk>,
    /// The buffer being filled, in time order.
    open: Vec<(i64, f64)>,
    /// Samples whose log generation may not be durable yet: (time,
    /// generation), generations rising. Readers leave them out until it
    /// is.
    unlogged: Vec<(i64, u64)>,
    /// Late native histograms, in time order (kept decoded: they are
    /// few, and each differs in shape).
    hists: Vec<(i64, HistSample)>,
}

/// Bytes a late histogram takes.
fn hist_bytes(h: &HistSample) -> usize {
    let heap = match h {
        HistSample::Int(h) => {
            (h.positive_spans.capacity() + h.negative_spans.capacity()) * 8
                + (h.positive_buckets.capacity() + h.negative_buckets.capacity()) * 8
                + h.custom_values.capacity() * 8
        }
        HistSample::Float(h) => {
            (h.positive_spans.capacity() + h.negative_spans.capacity()) * 8
                + (h.positive_buckets.capacity() + h.negative_buckets.capacity()) * 8
                + h.custom_values.capacity() * 8
        }
    };
    std::mem::size_of::<(i64, HistSample)>() + heap
}

/// Sealed chunks kept before they are merged into runs that do not
/// overlap (so that a lookup decodes one chunk, not all of them).
const MAX_OVERLAPPING: usize = 8;

/// Bytes a sample of the open buffer takes.
const OPEN_SAMPLE_BYTES: usize = std::mem::size_of::<(i64, f64)>();

impl OooSeries {
    /// The value held at `t`, if any.
    pub(crate) fn get(&self, t: i64) -> Option<f64> {
        if let Ok(i) = self.open.binary_search_by_key(&t, |&(st, _)| st) {
            return Some(self.open[i].1);
        }
        self.sealed
            .iter()
            .filter(|c| c.mint <= t && t <= c.maxt)
            .find_map(|c| {
                XorIter::new(&c.bytes)
                    .find(|&(st, _)| st >= t)
                    .filter(|&(st, _)| st == t)
                    .map(|(_, v)| v)
            })
    }

    /// The late histogram held at `t`, if any.
    pub(crate) fn get_hist(&self, t: i64) -> Option<&HistSample> {
        self.hists
            .binary_search_by_key(&t, |(ht, _)| *ht)
            .ok()
            .map(|i| &self.hists[i].1)
    }

    /// Inserts a histogram at a time not held yet (float or histogram).
    /// Returns the change in bytes held.
    pub(crate) fn insert_hist(&mut self, t: i64, h: &HistSample) -> isize {
        // Measured on the copy kept: `bytes` measures that one too.
        let h = h.clone();
        let bytes = hist_bytes(&h);
        let at = self.hists.partition_point(|(ht, _)| *ht < t);
        self.hists.insert(at, (t, h));
        bytes as isize
    }

    /// Its histograms in `[mint, maxt]`, in time order, without those
    /// whose generation is `durable` or later.
    pub(crate) fn hists_in(&self, mint: i64, maxt: i64, durable: u64) -> Vec<(i64, HistSample)> {
        let from = self.unlogged.partition_point(|&(_, g)| g < durable);
        let pending = &self.unlogged[from..];
        let lo = self.hists.partition_point(|(t, _)| *t < mint);
        let hi = self.hists.partition_point(|(t, _)| *t <= maxt);
        self.hists[lo..hi]
            .iter()
            .filter(|(t, _)| !pending.iter().any(|&(p, _)| p == *t))
            .cloned()
            .collect()
    }

    /// Inserts a sample not held yet (see [`OooSeries::get`]), sealing the
    /// open buffer first when it holds `cap` samples. Returns the change
    /// in bytes held.
    pub(crate) fn insert(&mut self, t: i64, v: f64, cap: usize) -> isize {
        let before = self.bytes();
        if self.open.len() >= cap.max(1) {
            self.sealed.extend(encode_xor(&self.open, self.open.len()));
            self.open.clear();
            if self.sealed.len() >= MAX_OVERLAPPING && self.overlapping() {
                let mut all: Vec<(i64, f64)> = self
                    .sealed
                    .iter()
                    .flat_map(|c| XorIter::new(&c.bytes))
                    .collect();
                all.sort_by_key(|&(st, _)| st);
                self.sealed = encode_xor(&all, MERGED_CHUNK_SAMPLES);
            }
        }
        let at = self.open.partition_point(|&(st, _)| st < t);
        self.open.insert(at, (t, v));
        self.bytes() as isize - before as isize
    }

    /// Whether sealed chunks overlap one another.
    fn overlapping(&self) -> bool {
        let mut spans: Vec<(i64, i64)> = self.sealed.iter().map(|c| (c.mint, c.maxt)).collect();
        spans.sort_unstable();
        spans.windows(2).any(|w| w[1].0 <= w[0].1)
    }

    /// Notes that the sample at `t` went to the log in generation `gen`;
    /// forgets those of generations below `durable` (generations rise, so
    /// they are a prefix).
    pub(crate) fn note_unlogged(&mut self, t: i64, gen: u64, durable: u64) {
        let done = self.unlogged.partition_point(|&(_, g)| g < durable);
        self.unlogged.drain(..done);
        self.unlogged.push((t, gen));
    }

    /// Its samples in `[mint, maxt]`, in time order, each time once,
    /// without those whose generation is `durable` or later.
    pub(crate) fn samples_in(&self, mint: i64, maxt: i64, durable: u64) -> Vec<(i64, f64)> {
        let from = self.unlogged.partition_point(|&(_, g)| g < durable);
        let mut pending: Vec<i64> = self.unlogged[from..].iter().map(|&(t, _)| t).collect();
        pending.sort_unstable();
        let hidden = |t: i64| !pending.is_empty() && pending.binary_search(&t).is_ok();
        let mut out: Vec<(i64, f64)> = self
            .sealed
            .iter()
            .filter(|c| c.maxt >= mint && c.mint <= maxt)
            .flat_map(|c| XorIter::new(&c.bytes))
            .chain(self.open.iter().copied())
            .filter(|&(t, _)| mint <= t && t <= maxt && !hidden(t))
            .collect();
        out.sort_by_key(|&(t, _)| t);
        out.dedup_by_key(|&mut (t, _)| t);
        out
    }

    /// The oldest sample's time.
    pub(crate) fn min_time(&self) -> Option<i64> {
        [
            self.sealed.iter().map(|c| c.mint).min(),
            self.open.first().map(|&(t, _)| t),
            self.hists.first().map(|&(t, _)| t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The newest sample's time that readers may see: of the samples
    /// whose generation is below `durable`.
    pub(crate) fn visible_max_time(&self, durable: u64) -> Option<i64> {
        if self.unlogged.iter().all(|&(_, g)| g < durable) {
            return self.max_time();
        }
        let floats = self
            .samples_in(i64::MIN, i64::MAX, durable)
            .last()
            .map(|s| s.0);
        let hists = self
            .hists_in(i64::MIN, i64::MAX, durable)
            .last()
            .map(|h| h.0);
        floats.max(hists)
    }

    /// The newest sample's time.
    pub(crate) fn max_time(&self) -> Option<i64> {
        [
            self.sealed.iter().map(|c| c.maxt).max(),
            self.open.last().map(|&(t, _)| t),
            self.hists.last().map(|&(t, _)| t),
        ]
        .into_iter()
        .flatten()
        .max()
    }

    /// Samples held, floats and histograms.
    pub(crate) fn len(&self) -> usize {
        self.open.len()
            + self.hists.len()
            + self
                .sealed
                .iter()
                .map(|c| samples_of(&c.bytes))
                .sum::<usize>()
    }

    /// Whether it holds nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty() && self.sealed.is_empty() && self.hists.is_empty()
    }

    /// Bytes held: sealed chunks (with their list entries), the open
    /// buffer and the histograms.
    pub(crate) fn bytes(&self) -> usize {
        self.sealed
            .iter()
            .map(|c| c.bytes.len() + std::mem::size_of::<OooChunk>())
            .sum::<usize>()
            + self.open.capacity() * OPEN_SAMPLE_BYTES
            + self.hists.iter().map(|(_, h)| hist_bytes(h)).sum::<usize>()
    }

    /// Drops samples before `cutoff` (a block holds them now, or retention
    /// let them go). Returns (samples dropped, change in bytes).
    pub(crate) fn retain(&mut self, cutoff: i64) -> (usize, isize) {
        if self.min_time().is_none_or(|t| t >= cutoff) {
            return (0, 0);
        }
        let (before_bytes, before) = (self.bytes(), self.len());
        self.open.retain(|&(t, _)| t >= cutoff);
        let mut sealed = std::mem::take(&mut self.sealed);
        for c in sealed.iter_mut().filter(|c| c.mint < cutoff) {
            let mut app = XorAppender::default();
            let mut span = None;
            for (t, v) in XorIter::new(&c.bytes).filter(|&(t, _)| t >= cutoff) {
                app.append(t, v);
                span = Some(span.map_or((t, t), |(lo, _): (i64, i64)| (lo, t)));
            }
            match span {
                Some((mint, maxt)) => {
                    *c = OooChunk {
                        mint,
                        maxt,
                        bytes: app.bytes().into(),
                        last: app.last(),
                    }
                }
                None => c.maxt = i64::MIN,
            }
        }
        sealed.retain(|c| c.maxt != i64::MIN);
        self.sealed = sealed;
        self.hists.retain(|&(t, _)| t >= cutoff);
        self.unlogged.retain(|&(t, _)| t >= cutoff);
        if self.is_empty() {
            self.open = Vec::new();
            self.unlogged = Vec::new();
        }
        (
            before - self.len(),
            self.bytes() as isize - before_bytes as isize,
        )
    }

    /// Drops the samples at `times` (sorted): those a cut handed to
    /// blocks. Returns (samples dropped, change in bytes).
    pub(crate) fn remove_times(&mut self, times: &[i64]) -> (usize, isize) {
        let gone = |t: i64| times.binary_search(&t).is_ok();
        let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
            return (0, 0);
        };
        let (before_bytes, before) = (self.bytes(), self.len());
        self.open.retain(|&(t, _)| !gone(t));
        let mut sealed = std::mem::take(&mut self.sealed);
        for c in sealed
            .iter_mut()
            .filter(|c| c.maxt >= first && c.mint <= last)
        {
            let kept: Vec<(i64, f64)> = XorIter::new(&c.bytes).filter(|&(t, _)| !gone(t)).collect();
            match encode_xor(&kept, kept.len()).pop() {
                Some(chunk) => *c = chunk,
                None => c.maxt = i64::MIN,
            }
        }
        sealed.retain(|c| c.maxt != i64::MIN);
        self.sealed = sealed;
        self.hists.retain(|&(t, _)| !gone(t));
        self.unlogged.retain(|&(t, _)| !gone(t));
        if self.is_empty() {
            self.open = Vec::new();
            self.unlogged = Vec::new();
        }
        (
            before - self.len(),
            self.bytes() as isize - before_bytes as isize,
        )
    }

    /// Every sample, in time order, each time once (for a checkpoint).
    pub(crate) fn all(&self) -> Vec<(i64, f64)> {
        self.samples_in(i64::MIN, i64::MAX, u64::MAX)
    }

    /// Every histogram, in time order (for a checkpoint).
    pub(crate) fn all_hists(&self) -> &[(i64, HistSample)] {
        &self.hists
    }
}

/// Merges in-order `chunks` (each in time order, one after another), of
/// which the samples in `[mint, maxt]` are taken, with `extra` samples (in
/// time order, taken whole: the caller chose their range): samples in
/// time order, each time once, an in-order sample winning over an extra
/// one at the same time.
pub(crate) fn merge_samples<'a>(
    chunks: impl Iterator<Item = &'a [u8]>,
    extra: &[(i64, f64)],
    mint: i64,
    maxt: i64,
) -> Vec<(i64, f64)> {
    let mut out = Vec::with_capacity(extra.len() + 128);
    let mut rest = extra.iter().copied().peekable();
    for (t, v) in chunks
        .flat_map(XorIter::new)
        .filter(|&(t, _)| mint <= t && t <= maxt)
    {
        while let Some(&(et, ev)) = rest.peek() {
            if et >= t {
                break;
            }
            out.push((et, ev));
            rest.next();
        }
        if rest.peek().is_some_and(|&(et, _)| et == t) {
            rest.next();
        }
        out.push((t, v));
    }
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_seal_at_the_cap_and_reads_merge_each_time_once() {
        let mut o = OooSeries::default();
        for t in [50, 10, 30, 20, 40] {
            o.insert(t, t as f64, 2);
        }
        assert_eq!(o.sealed.len(), 2);
        assert_eq!(o.get(30), Some(30.0));
        assert_eq!(o.get(35), None);
        assert_eq!(o.min_time(), Some(10));
        assert_eq!(o.len(), 5);
        assert_eq!(
            o.samples_in(15, 45, u64::MAX),
            [(20, 20.0), (30, 30.0), (40, 40.0)]
        );
        // A sample logged in a generation not yet durable is not read.
        o.note_unlogged(40, 7, 7);
        assert_eq!(o.samples_in(15, 45, 7), [(20, 20.0), (30, 30.0)]);
        assert_eq!(o.samples_in(15, 45, 8).len(), 3);
        let (dropped, _) = o.retain(25);
        assert_eq!(dropped, 2);
        assert_eq!(o.all(), [(30, 30.0), (40, 40.0), (50, 50.0)]);
        // Exactly the times handed to blocks go, sealed or open.
        o.insert(35, 35.0, 2);
        let (dropped, _) = o.remove_times(&[30, 33, 50]);
        assert_eq!(dropped, 2);
        assert_eq!(o.all(), [(35, 35.0), (40, 40.0)]);
        assert_eq!(o.remove_times(&[35, 40]).0, 2);
        assert!(o.is_empty());
    }

    #[test]
    fn merging_keeps_in_order_samples_and_fills_between() {
        let chunks = encode_xor(&[(10, 1.0), (30, 3.0), (50, 5.0)], 2);
        assert_eq!(chunks.len(), 2);
        let merged = merge_samples(
            chunks.iter().map(|c| &*c.bytes),
            &[(5, 0.5), (30, 9.0), (40, 4.0), (60, 6.0)],
            0,
            55,
        );
        assert_eq!(
            merged,
            [
                (5, 0.5),
                (10, 1.0),
                (30, 3.0),
                (40, 4.0),
                (50, 5.0),
                (60, 6.0)
            ]
        );
    }
}
