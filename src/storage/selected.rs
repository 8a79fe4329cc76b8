//! A series selected for a query, from the head or a block: its labels,
//! its float chunks and its histogram samples in the range.

use super::chunk::{ChunkRef, XorIter};
use super::labels::Label;
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

    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|l| l.name.as_str().cmp(name))
            .ok()
            .map(|i| self.labels[i].value.as_str())
    }
}
