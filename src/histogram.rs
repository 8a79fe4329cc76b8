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

pub mod bounds;
mod ops;
mod trim;

pub use ops::{go_g, Bucket, Incompatible};

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

impl CounterResetHint {
    /// The number remote write's `ResetHint` gives it (also the WAL's).
    pub fn number(self) -> u8 {
        match self {
            Self::Unknown => 0,
            Self::CounterReset => 1,
            Self::NotCounterReset => 2,
            Self::Gauge => 3,
        }
    }

    /// The hint numbered `n`; an unknown number is `Unknown`.
    pub fn from_number(n: u64) -> Self {
        match n {
            1 => Self::CounterReset,
            2 => Self::NotCounterReset,
            3 => Self::Gauge,
            _ => Self::Unknown,
        }
    }
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

/// Why a histogram cannot be stored (Prometheus' `Validate`, plus the
/// schema range its chunks and PromQL can read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// A schema neither exponential (-4 to 8) nor custom buckets (-53).
    #[error(
        "histogram schema {0} is out of range: exponential schemas are -4 to 8, custom buckets -53"
    )]
    Schema(i32),
    /// A span after the first with a negative offset.
    #[error("{side} side: span number {span} has negative offset {offset}")]
    NegativeOffset {
        /// `positive` or `negative`.
        side: &'static str,
        /// 1-based.
        span: usize,
        /// The offset.
        offset: i32,
    },
    /// Spans and buckets disagree on the number of buckets.
    #[error("{side} side: spans need {spans} buckets, have {buckets} buckets")]
    SpansBuckets {
        /// `positive` or `negative`.
        side: &'static str,
        /// Buckets the spans cover.
        spans: usize,
        /// Buckets given.
        buckets: usize,
    },
    /// A bucket with a negative (or NaN) count.
    #[error("{side} side: bucket number {bucket} has observation count of {count}")]
    NegativeBucket {
        /// `positive` or `negative`.
        side: &'static str,
        /// 1-based.
        bucket: usize,
        /// The count.
        count: String,
    },
    /// The count is not the sum of the buckets and the zero bucket.
    #[error("{buckets} observations found in buckets, but the Count field is {count}")]
    CountMismatch {
        /// Observations in the buckets.
        buckets: String,
        /// The count field.
        count: String,
    },
    /// Something a custom-buckets histogram must not have, or bounds that
    /// are not strictly increasing, end in +Inf, or cover too few buckets.
    #[error("custom buckets: {0}")]
    CustomBuckets(String),
    /// Custom bounds on an exponential histogram.
    #[error("histogram with exponential schema must not have custom bounds")]
    BoundsOnExponential,
}

fn check_spans(
    side: &'static str,
    spans: &[Span],
    buckets: usize,
    custom: bool,
) -> Result<usize, HistogramError> {
    let mut total = 0usize;
    let mut reach = 0i64;
    for (n, s) in spans.iter().enumerate() {
        if (n > 0 || custom) && s.offset < 0 {
            return Err(HistogramError::NegativeOffset {
                side,
                span: n + 1,
                offset: s.offset,
            });
        }
        total += s.length as usize;
        reach += i64::from(s.length) + i64::from(s.offset);
    }
    if total != buckets {
        return Err(HistogramError::SpansBuckets {
            side,
            spans: total,
            buckets,
        });
    }
    Ok(reach.max(0) as usize)
}

fn check_bounds(bounds: &[f64], reach: usize) -> Result<(), HistogramError> {
    let mut prev = f64::NEG_INFINITY;
    for &b in bounds {
        if b.is_nan() || b <= prev {
            return Err(HistogramError::CustomBuckets(format!(
                "previous bound is {prev} and current is {b}: bounds must increase"
            )));
        }
        prev = b;
    }
    if prev == f64::INFINITY {
        return Err(HistogramError::CustomBuckets(
            "last +Inf bound must not be explicitly defined".into(),
        ));
    }
    if bounds.len() + 1 < reach {
        return Err(HistogramError::CustomBuckets(format!(
            "only {} custom bounds defined which is insufficient to cover total span length of {reach}",
            bounds.len()
        )));
    }
    Ok(())
}

fn check_schema(schema: i32) -> Result<(), HistogramError> {
    if schema == CUSTOM_BUCKETS_SCHEMA
        || (EXPONENTIAL_SCHEMA_MIN..=EXPONENTIAL_SCHEMA_MAX).contains(&schema)
    {
        Ok(())
    } else {
        Err(HistogramError::Schema(schema))
    }
}

/// The custom-bucket rules shared by both kinds: no zero bucket, no
/// negative side.
fn check_custom_shape(
    zero_count_is_zero: bool,
    zero_threshold: f64,
    negative_spans: usize,
    negative_buckets: usize,
) -> Result<(), HistogramError> {
    let bad = |m: &str| Err(HistogramError::CustomBuckets(m.into()));
    if !zero_count_is_zero {
        return bad("must have zero count of 0");
    }
    if zero_threshold != 0.0 {
        return bad("must have zero threshold of 0");
    }
    if negative_spans > 0 {
        return bad("must not have negative spans");
    }
    if negative_buckets > 0 {
        return bad("must not have negative buckets");
    }
    Ok(())
}

/// What both kinds of histogram are checked for besides their counts.
struct Shape<'a> {
    schema: i32,
    zero_count_is_zero: bool,
    zero_threshold: f64,
    positive: (&'a [Span], usize),
    negative: (&'a [Span], usize),
    custom_values: &'a [f64],
}

/// The schema, spans against bucket counts, and custom bounds, in
/// Prometheus' order of checks.
fn check_shape(s: Shape<'_>) -> Result<(), HistogramError> {
    check_schema(s.schema)?;
    if s.schema == CUSTOM_BUCKETS_SCHEMA {
        let reach = check_spans("positive", s.positive.0, s.positive.1, true)?;
        check_bounds(s.custom_values, reach)?;
        check_custom_shape(
            s.zero_count_is_zero,
            s.zero_threshold,
            s.negative.0.len(),
            s.negative.1,
        )
    } else {
        check_spans("positive", s.positive.0, s.positive.1, false)?;
        check_spans("negative", s.negative.0, s.negative.1, false)?;
        if !s.custom_values.is_empty() {
            return Err(HistogramError::BoundsOnExponential);
        }
        Ok(())
    }
}

impl Histogram {
    /// Checks the histogram as Prometheus does before storing it.
    pub fn validate(&self) -> Result<(), HistogramError> {
        check_shape(Shape {
            schema: self.schema,
            zero_count_is_zero: self.zero_count == 0,
            zero_threshold: self.zero_threshold,
            positive: (&self.positive_spans, self.positive_buckets.len()),
            negative: (&self.negative_spans, self.negative_buckets.len()),
            custom_values: &self.custom_values,
        })?;
        let n_count = match self.uses_custom_buckets() {
            true => 0,
            false => delta_counts("negative", &self.negative_buckets)?,
        };
        let p_count = delta_counts("positive", &self.positive_buckets)?;
        let in_buckets = n_count.wrapping_add(p_count).wrapping_add(self.zero_count);
        let ok = if self.sum.is_nan() {
            in_buckets <= self.count
        } else {
            in_buckets == self.count
        };
        if !ok {
            return Err(HistogramError::CountMismatch {
                buckets: in_buckets.to_string(),
                count: self.count.to_string(),
            });
        }
        Ok(())
    }
}

/// The sum of delta-coded bucket counts, each checked not negative.
fn delta_counts(side: &'static str, deltas: &[i64]) -> Result<u64, HistogramError> {
    let mut last = 0i64;
    let mut total = 0u64;
    for (i, &d) in deltas.iter().enumerate() {
        let c = last.wrapping_add(d);
        if c < 0 {
            return Err(HistogramError::NegativeBucket {
                side,
                bucket: i + 1,
                count: c.to_string(),
            });
        }
        last = c;
        total = total.wrapping_add(c as u64);
    }
    Ok(total)
}

impl FloatHistogram {
    /// Checks the histogram as Prometheus does before storing it.
    pub fn validate(&self) -> Result<(), HistogramError> {
        check_shape(Shape {
            schema: self.schema,
            zero_count_is_zero: self.zero_count == 0.0,
            zero_threshold: self.zero_threshold,
            positive: (&self.positive_spans, self.positive_buckets.len()),
            negative: (&self.negative_spans, self.negative_buckets.len()),
            custom_values: &self.custom_values,
        })?;
        if !self.uses_custom_buckets() {
            float_counts("negative", &self.negative_buckets)?;
        }
        // As Prometheus: the buckets are checked, the count is not (float
        // sums of buckets need not match it exactly).
        float_counts("positive", &self.positive_buckets)
    }
}

fn float_counts(side: &'static str, counts: &[f64]) -> Result<(), HistogramError> {
    for (i, &c) in counts.iter().enumerate() {
        if c < 0.0 {
            return Err(HistogramError::NegativeBucket {
                side,
                bucket: i + 1,
                count: c.to_string(),
            });
        }
    }
    Ok(())
}

/// One histogram sample.
#[derive(Debug, Clone, PartialEq)]
pub enum HistSample {
    /// An integer histogram.
    Int(Histogram),
    /// A float histogram.
    Float(FloatHistogram),
}

impl HistSample {
    /// The sample as a float histogram (PromQL reads all histograms so).
    pub fn to_float(&self) -> FloatHistogram {
        match self {
            Self::Int(h) => h.to_float(),
            Self::Float(f) => f.clone(),
        }
    }

    /// Makes `self` a copy of `other`, reusing its buffers (no allocation
    /// once they are large enough).
    pub fn assign(&mut self, other: &HistSample) {
        match (&mut *self, other) {
            (Self::Int(a), Self::Int(b)) => {
                a.hint = b.hint;
                a.schema = b.schema;
                a.zero_threshold = b.zero_threshold;
                a.zero_count = b.zero_count;
                a.count = b.count;
                a.sum = b.sum;
                a.positive_spans.clone_from(&b.positive_spans);
                a.negative_spans.clone_from(&b.negative_spans);
                a.positive_buckets.clone_from(&b.positive_buckets);
                a.negative_buckets.clone_from(&b.negative_buckets);
                a.custom_values.clone_from(&b.custom_values);
            }
            (Self::Float(a), Self::Float(b)) => {
                a.hint = b.hint;
                a.schema = b.schema;
                a.zero_threshold = b.zero_threshold;
                a.zero_count = b.zero_count;
                a.count = b.count;
                a.sum = b.sum;
                a.positive_spans.clone_from(&b.positive_spans);
                a.negative_spans.clone_from(&b.negative_spans);
                a.positive_buckets.clone_from(&b.positive_buckets);
                a.negative_buckets.clone_from(&b.negative_buckets);
                a.custom_values.clone_from(&b.custom_values);
            }
            (me, _) => *me = other.clone(),
        }
    }

    /// Whether two samples are the same, floats bit for bit (so that a
    /// NaN sum equals itself, as Prometheus' `Equals` has it).
    pub fn same(&self, other: &HistSample) -> bool {
        let f = |x: f64| x.to_bits();
        match (self, other) {
            (Self::Int(a), Self::Int(b)) => {
                let g = |h: &Histogram| {
                    (
                        h.schema,
                        f(h.zero_threshold),
                        h.zero_count,
                        h.count,
                        f(h.sum),
                        h.positive_spans.clone(),
                        h.negative_spans.clone(),
                        h.positive_buckets.clone(),
                        h.negative_buckets.clone(),
                        h.custom_values.iter().map(|x| f(*x)).collect::<Vec<_>>(),
                    )
                };
                g(a) == g(b)
            }
            (Self::Float(a), Self::Float(b)) => {
                let g = |h: &FloatHistogram| {
                    (
                        h.schema,
                        f(h.zero_threshold),
                        f(h.zero_count),
                        f(h.count),
                        f(h.sum),
                        h.positive_spans.clone(),
                        h.negative_spans.clone(),
                        h.positive_buckets.iter().map(|x| f(*x)).collect::<Vec<_>>(),
                        h.negative_buckets.iter().map(|x| f(*x)).collect::<Vec<_>>(),
                        h.custom_values.iter().map(|x| f(*x)).collect::<Vec<_>>(),
                    )
                };
                g(a) == g(b)
            }
            _ => false,
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

    fn valid() -> Histogram {
        Histogram {
            schema: 3,
            zero_threshold: 1e-128,
            zero_count: 1,
            count: 9,
            sum: 4.5,
            positive_spans: spans(&[(0, 2), (1, 1)]),
            positive_buckets: vec![2, 1, -1], // 2, 3, 2
            negative_spans: spans(&[(-1, 1)]),
            negative_buckets: vec![1],
            ..Histogram::default()
        }
    }

    #[test]
    fn validation_names_what_prometheus_refuses() {
        valid().validate().expect("valid");
        valid().to_float().validate().expect("valid as float");
        let cases: Vec<(Histogram, &str)> = vec![
            (
                Histogram {
                    schema: 9,
                    ..valid()
                },
                "schema 9 is out of range",
            ),
            (
                Histogram {
                    schema: -5,
                    ..valid()
                },
                "schema -5",
            ),
            (
                Histogram {
                    count: 10,
                    ..valid()
                },
                "9 observations found in buckets, but the Count field is 10",
            ),
            (
                Histogram {
                    positive_buckets: vec![2, 1],
                    ..valid()
                },
                "positive side: spans need 3 buckets, have 2",
            ),
            (
                Histogram {
                    positive_buckets: vec![2, -3, 3],
                    ..valid()
                },
                "positive side: bucket number 2 has observation count of -1",
            ),
            (
                Histogram {
                    positive_spans: spans(&[(0, 2), (-1, 1)]),
                    ..valid()
                },
                "span number 2 has negative offset -1",
            ),
            (
                Histogram {
                    custom_values: vec![1.0],
                    ..valid()
                },
                "must not have custom bounds",
            ),
        ];
        for (h, says) in cases {
            let e = h.validate().expect_err(says).to_string();
            assert!(e.contains(says), "{e} / {says}");
        }
        // A NaN sum lets the count exceed the buckets (not the reverse).
        Histogram {
            count: 10,
            sum: f64::NAN,
            ..valid()
        }
        .validate()
        .expect("NaN sum");
        let custom = Histogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            count: 3,
            sum: 1.0,
            positive_spans: spans(&[(0, 3)]),
            positive_buckets: vec![1, 0, 0],
            custom_values: vec![0.5, 1.0],
            ..Histogram::default()
        };
        custom.validate().expect("custom");
        for (h, says) in [
            (
                Histogram {
                    custom_values: vec![1.0, 0.5],
                    ..custom.clone()
                },
                "bounds must increase",
            ),
            (
                Histogram {
                    custom_values: vec![0.5, f64::INFINITY],
                    ..custom.clone()
                },
                "+Inf bound",
            ),
            (
                Histogram {
                    custom_values: vec![0.5],
                    ..custom.clone()
                },
                "insufficient to cover total span length of 3",
            ),
            (
                Histogram {
                    zero_count: 1,
                    count: 4,
                    ..custom
                },
                "zero count of 0",
            ),
        ] {
            let e = h.validate().expect_err(says).to_string();
            assert!(e.contains(says), "{e} / {says}");
        }
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
