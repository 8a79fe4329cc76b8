//! Native histograms as Prometheus models them (`model/histogram`): sparse
//! exponential buckets (schema -4 to 8) or custom bounds (schema -53), a
//! zero bucket, a count and a sum. Buckets are addressed by spans: each
//! span skips `offset` bucket indexes after the previous span's end (the
//! first span's offset is its first index) and covers `length` buckets.
//!
//! An integer histogram keeps its buckets as deltas (the first bucket's
//! count, then each bucket's count less the previous one's), as remote
//! write and the histogram chunk do. This module is a leaf: ingest, the
//! chunk codecs and PromQL all use it.

/// The schema of histograms with custom bucket bounds (NHCB).
pub const CUSTOM_BUCKETS_SCHEMA: i32 = -53;
/// The smallest exponential schema.
pub const EXPONENTIAL_SCHEMA_MIN: i32 = -4;
/// The largest exponential schema.
pub const EXPONENTIAL_SCHEMA_MAX: i32 = 8;

/// A run of buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Bucket indexes skipped before the run (for the first span: the
    /// index of its first bucket).
    pub offset: i32,
    /// Buckets in the run.
    pub length: u32,
}

/// What the sender says about a counter reset before this histogram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CounterResetHint {
    /// Not known: the reader decides by comparing with the previous one.
    #[default]
    Unknown,
    /// A counter reset happened.
    CounterReset,
    /// No counter reset happened.
    NotCounterReset,
    /// A gauge histogram, which has no counter resets.
    Gauge,
}

/// An integer native histogram.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Histogram {
    /// The sender's counter-reset hint.
    pub hint: CounterResetHint,
    /// The bucket schema.
    pub schema: i32,
    /// Width of the zero bucket, around 0 in both directions.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: u64,
    /// Observations in all.
    pub count: u64,
    /// Sum of the observations.
    pub sum: f64,
    /// The positive buckets' spans.
    pub positive_spans: Vec<Span>,
    /// The negative buckets' spans.
    pub negative_spans: Vec<Span>,
    /// The positive buckets as deltas.
    pub positive_buckets: Vec<i64>,
    /// The negative buckets as deltas.
    pub negative_buckets: Vec<i64>,
    /// Custom bucket upper bounds (schema -53 only).
    pub custom_values: Vec<f64>,
}

impl Histogram {
    /// Whether the buckets are custom bounds rather than exponential.
    pub fn uses_custom_buckets(&self) -> bool {
        self.schema == CUSTOM_BUCKETS_SCHEMA
    }
}

/// A float native histogram: counts are floats and buckets absolute (as
/// after `rate`, or as OTLP and remote write 2.0 may send them).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FloatHistogram {
    /// The sender's counter-reset hint.
    pub hint: CounterResetHint,
    /// The bucket schema.
    pub schema: i32,
    /// Width of the zero bucket, around 0 in both directions.
    pub zero_threshold: f64,
    /// Observations in the zero bucket.
    pub zero_count: f64,
    /// Observations in all.
    pub count: f64,
    /// Sum of the observations.
    pub sum: f64,
    /// The positive buckets' spans.
    pub positive_spans: Vec<Span>,
    /// The negative buckets' spans.
    pub negative_spans: Vec<Span>,
    /// The positive buckets' counts.
    pub positive_buckets: Vec<f64>,
    /// The negative buckets' counts.
    pub negative_buckets: Vec<f64>,
    /// Custom bucket upper bounds (schema -53 only).
    pub custom_values: Vec<f64>,
}

impl FloatHistogram {
    /// Whether the buckets are custom bounds rather than exponential.
    pub fn uses_custom_buckets(&self) -> bool {
        self.schema == CUSTOM_BUCKETS_SCHEMA
    }
}

impl Histogram {
    /// The same histogram with float counts and absolute buckets
    /// (Prometheus' `ToFloat`).
    pub fn to_float(&self) -> FloatHistogram {
        let abs = |deltas: &[i64]| {
            let mut c = 0i64;
            deltas
                .iter()
                .map(|&d| {
                    c = c.wrapping_add(d);
                    c as f64
                })
                .collect()
        };
        FloatHistogram {
            hint: self.hint,
            schema: self.schema,
            zero_threshold: self.zero_threshold,
            zero_count: self.zero_count as f64,
            count: self.count as f64,
            sum: self.sum,
            positive_spans: self.positive_spans.clone(),
            negative_spans: self.negative_spans.clone(),
            positive_buckets: abs(&self.positive_buckets),
            negative_buckets: abs(&self.negative_buckets),
            custom_values: self.custom_values.clone(),
        }
    }
}

/// Buckets the spans cover.
pub fn bucket_count(spans: &[Span]) -> usize {
    spans.iter().map(|s| s.length as usize).sum()
}

/// Walks the bucket indexes that spans cover, in order (Prometheus'
/// `bucketIterator`).
#[derive(Debug, Clone)]
pub struct BucketIndexes<'a> {
    spans: &'a [Span],
    span: usize,
    /// Position in the current span of the last index returned; `None`
    /// before the first.
    bucket: Option<u32>,
    idx: i64,
}

impl<'a> BucketIndexes<'a> {
    /// Indexes of `spans`.
    pub fn new(spans: &'a [Span]) -> Self {
        let idx = spans.first().map_or(-1, |s| i64::from(s.offset) - 1);
        Self {
            spans,
            span: 0,
            bucket: None,
            idx,
        }
    }
}

impl Iterator for BucketIndexes<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let cur = self.spans.get(self.span)?;
        let next_in_span = self.bucket.map_or(0, |b| b + 1);
        if next_in_span < cur.length {
            self.bucket = Some(next_in_span);
            self.idx += 1;
            return Some(self.idx);
        }
        while self.span + 1 < self.spans.len() {
            self.span += 1;
            let s = self.spans[self.span];
            self.idx += i64::from(s.offset) + 1;
            self.bucket = Some(0);
            if s.length == 0 {
                self.idx -= 1;
                continue;
            }
            return Some(self.idx);
        }
        // Past the last span: stay there.
        self.span = self.spans.len();
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(pairs: &[(i32, u32)]) -> Vec<Span> {
        pairs
            .iter()
            .map(|&(offset, length)| Span { offset, length })
            .collect()
    }

    #[test]
    fn bucket_indexes_follow_offsets_and_skip_empty_spans() {
        let s = spans(&[(-2, 2), (1, 1), (0, 0), (3, 2)]);
        let got: Vec<i64> = BucketIndexes::new(&s).collect();
        // -2 -1 | gap 0 | 1 | (empty, no gap) | gap 2..4 | 5 6
        assert_eq!(got, [-2, -1, 1, 5, 6]);
        assert_eq!(bucket_count(&s), 5);
        assert_eq!(BucketIndexes::new(&[]).count(), 0);
        let leading_empty = spans(&[(0, 0), (2, 1)]);
        assert_eq!(BucketIndexes::new(&leading_empty).collect::<Vec<_>>(), [2]);
    }
}
