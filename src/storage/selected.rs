//! A series selected for a query, from the head or a block: its labels,
//! its float chunks and its histogram samples in the range.

use super::chunk::{ChunkRef, XorIter};
use super::labels::Label;
pub use super::starts::{start_at, StartRun};
use crate::histogram::HistSample;

/// A selected series: its labels and the chunks that overlap the range.
#[derive(Debug, Clone)]
pub struct SelectedSeries {
    /// Labels, sorted by name.
    pub labels: Vec<Label>,
    /// Chunks in time order.
    pub chunks: Vec<ChunkRef>,
    /// Native histogram samples in the range, in time order (empty for a
    /// series that never had one).
    pub histograms: Vec<(i64, HistSample)>,
    /// Its start-time runs over the range, in time order (empty when it
    /// was sent none, or they are not kept).
    pub starts: Vec<StartRun>,
}

impl SelectedSeries {
    /// Samples with `mint <= t <= maxt`, in time order, decoded lazily.
    pub fn samples(&self, mint: i64, maxt: i64) -> impl Iterator<Item = (i64, f64)> + '_ {
        self.chunks
            .iter()
            .filter(move |c| c.maxt >= mint && c.mint <= maxt)
            .flat_map(|c| XorIter::new(&c.bytes))
            .skip_while(move |&(t, _)| t < mint)
            .take_while(move |&(t, _)| t <= maxt)
    }

    /// Appends [`SelectedSeries::samples`] for `[mint, maxt]` to `out`,
    /// the same samples: a chunk wholly inside the range is decoded
    /// without a check per sample (its samples are checked to lie in its
    /// stated span afterwards, and read one by one if not).
    pub fn decode_into(&self, mint: i64, maxt: i64, out: &mut Vec<(i64, f64)>) {
        // As `samples`: leading samples before `mint` are skipped, and the
        // first after `maxt` ends it all.
        let mut skipping = true;
        for c in self
            .chunks
            .iter()
            .filter(|c| c.maxt >= mint && c.mint <= maxt)
        {
            let from = out.len();
            if c.mint >= mint && c.maxt <= maxt {
                if XorIter::new(&c.bytes).append_within(out, c.mint, c.maxt) {
                    skipping &= out.len() == from;
                    continue;
                }
                out.truncate(from);
            }
            for (t, v) in XorIter::new(&c.bytes) {
                if skipping && t < mint {
                    continue;
                }
                skipping = false;
                if t > maxt {
                    return;
                }
                out.push((t, v));
            }
        }
    }

    /// The newest sample with `mint <= t <= maxt`: read from the chunk's
    /// known newest sample where it is the one, else decoded from the
    /// newest chunk that holds one.
    pub fn last_sample(&self, mint: i64, maxt: i64) -> Option<(i64, f64)> {
        for c in self.chunks.iter().rev() {
            if c.mint > maxt {
                continue;
            }
            if c.maxt < mint {
                return None;
            }
            if let Some((t, v)) = c.last.filter(|&(t, _)| t == c.maxt && t <= maxt) {
                return (t >= mint).then_some((t, v));
            }
            let found = XorIter::new(&c.bytes)
                .last_at_most(maxt)
                .filter(|&(t, _)| t >= mint);
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// About how many samples [`SelectedSeries::last_sample`] decodes for
    /// `[mint, maxt]`: the count in the header of the newest chunk it
    /// reads, or 1 where that chunk knows its newest sample.
    pub fn last_sample_cost(&self, mint: i64, maxt: i64) -> usize {
        let newest = self
            .chunks
            .iter()
            .rev()
            .find(|c| c.mint <= maxt && c.maxt >= mint);
        match newest {
            Some(c) if c.last.is_some_and(|(t, _)| t == c.maxt && t <= maxt) => 1,
            Some(c) => usize::from(c.bytes.header_samples()).max(1),
            None => 1,
        }
    }

    /// At most how many float samples [`SelectedSeries::samples`] gives
    /// for `[mint, maxt]`: the sample counts of the chunks overlapping it,
    /// from their headers.
    pub fn samples_at_most(&self, mint: i64, maxt: i64) -> usize {
        self.chunks
            .iter()
            .filter(|c| c.maxt >= mint && c.mint <= maxt)
            .map(|c| usize::from(c.bytes.header_samples()))
            .sum()
    }

    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .map(|i| self.labels[i].value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::chunk::XorAppender;
    use proptest::prelude::*;

    proptest! {
        /// The newest sample in a range is the last of the samples in it,
        /// whether a chunk's newest sample is known or decoded.
        #[test]
        fn last_sample_is_the_last_of_the_samples(
            gaps in prop::collection::vec(1i64..50, 1..200),
            cuts in prop::collection::vec(1usize..40, 1..20),
            known in prop::collection::vec(any::<bool>(), 20),
            mint in 0i64..3000,
            len in 0i64..3000,
        ) {
            let mut t = 0;
            let samples: Vec<(i64, f64)> = gaps
                .iter()
                .map(|g| {
                    t += g;
                    (t, t as f64 * 0.5)
                })
                .collect();
            let mut chunks = Vec::new();
            let mut rest = samples.as_slice();
            for (i, &n) in cuts.iter().cycle().enumerate() {
                if rest.is_empty() {
                    break;
                }
                let (part, tail) = rest.split_at(n.min(rest.len()));
                rest = tail;
                let mut app = XorAppender::default();
                for &(t, v) in part {
                    app.append(t, v);
                }
                chunks.push(ChunkRef {
                    mint: part[0].0,
                    maxt: part[part.len() - 1].0,
                    bytes: app.bytes().into(),
                    last: known[i % known.len()].then(|| part[part.len() - 1]),
                });
            }
            let s = SelectedSeries { labels: Vec::new(), chunks, histograms: Vec::new(), starts: Vec::new() };
            let maxt = mint + len;
            prop_assert_eq!(s.last_sample(mint, maxt), s.samples(mint, maxt).last());
            let mut decoded = Vec::new();
            s.decode_into(mint, maxt, &mut decoded);
            prop_assert_eq!(decoded, s.samples(mint, maxt).collect::<Vec<_>>());
            prop_assert!(s.samples_at_most(mint, maxt) >= s.samples(mint, maxt).count());
        }
    }
}
