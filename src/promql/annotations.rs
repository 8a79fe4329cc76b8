//! Warnings and infos about a query's answer, with Prometheus' texts: the
//! API returns them beside the data (`warnings`, `infos`), and Grafana shows
//! them under the panel. Each ends with the position in the query of the
//! expression it is about, `(1:6)`, as Prometheus writes them.

use super::parser::ast::Pos;

/// One annotation, before it is written out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Annotation<'a> {
    /// A quantile parameter outside [0, 1] (or NaN).
    InvalidQuantile(f64),
    /// A `limit_ratio` outside [-1, 1], and what it was capped to.
    InvalidRatio(f64, f64),
    /// A bucket series whose `le` is missing or not a number.
    BadBucketLabel {
        /// The series' metric name.
        metric: &'a str,
        /// Its `le` value, empty when it has none.
        le: &'a str,
    },
    /// `rate`/`increase` over a name that does not look like a counter's.
    PossibleNonCounter(&'a str),
    /// `histogram_quantile` had to make bucket counts monotonic.
    ForcedMonotonicity(&'a str),
    /// A range or operation met floats and histograms of one metric.
    MixedFloatsHistograms(&'a str),
    /// An aggregation group held floats and histograms.
    MixedFloatsHistogramsAgg,
    /// `histogram_quantile` met classic and native histograms of one name.
    MixedClassicNative(&'a str),
    /// A counter function (`rate`, `irate`) over gauge histograms.
    NativeHistogramNotCounter(&'a str),
    /// A gauge function (`delta`, `idelta`) over counter histograms.
    NativeHistogramNotGauge(&'a str),
    /// Histograms with exponential and with custom buckets together.
    MixedExponentialCustom(&'a str),
    /// Histograms with different custom bucket bounds together.
    IncompatibleCustomBuckets(&'a str),
    /// Custom-bucket histograms with different bounds brought to the
    /// bounds they share (Prometheus v3.14), during the named operation
    /// (`addition`, `subtraction`, `aggregation`).
    CustomBucketsReconciled(&'static str),
    /// Histograms marked as a counter reset and as not one met in the
    /// named operation (Prometheus v3.14).
    CounterResetCollision(&'static str),
    /// A sample whose start time overlaps the sample before it (Prometheus
    /// v3.14, `use-start-timestamps`).
    StartTimeOverlap(&'a str),
    /// A binary operation between histograms whose buckets cannot be
    /// combined.
    IncompatibleBucketLayoutInBinOp(&'a str),
    /// A binary operation between a float and a histogram it has no
    /// meaning for: (left type, operator, right type).
    IncompatibleTypesInBinOp(&'a str, &'a str, &'a str),
    /// An aggregation (named) that leaves histograms out.
    HistogramIgnoredInAggregation(&'a str),
    /// A range function over floats that left out the histograms of a
    /// range holding both.
    HistogramIgnoredInMixedRange(&'a str),
    /// `histogram_quantile` over a histogram with NaN observations.
    QuantileNaNResult(&'a str),
    /// `histogram_quantile` whose answer NaN observations push up.
    QuantileNaNSkew(&'a str),
    /// `histogram_fraction` over a histogram with NaN observations.
    FractionNaNs(&'a str),
    /// `sort` and its kin in a range query, which orders by labels anyway.
    SortInRangeQuery,
}

impl Annotation<'_> {
    /// Whether it is about a function's or aggregation's parameter rather
    /// than the expression it works on.
    pub(crate) fn is_about_param(&self) -> bool {
        matches!(self, Self::InvalidQuantile(_) | Self::InvalidRatio(..))
    }

    fn is_warning(&self) -> bool {
        matches!(
            self,
            Self::InvalidQuantile(_)
                | Self::InvalidRatio(..)
                | Self::BadBucketLabel { .. }
                | Self::MixedFloatsHistograms(_)
                | Self::MixedFloatsHistogramsAgg
                | Self::MixedClassicNative(_)
                | Self::NativeHistogramNotCounter(_)
                | Self::NativeHistogramNotGauge(_)
                | Self::MixedExponentialCustom(_)
                | Self::IncompatibleCustomBuckets(_)
                | Self::CounterResetCollision(_)
                | Self::StartTimeOverlap(_)
                | Self::IncompatibleBucketLayoutInBinOp(_)
                | Self::SortInRangeQuery
        )
    }

    fn message(&self) -> String {
        match self {
            Self::InvalidQuantile(q) => format!(
                "PromQL warning: quantile value should be between 0 and 1, got {}",
                go_float(*q)
            ),
            Self::InvalidRatio(r, to) => format!(
                "PromQL warning: ratio value should be between -1 and 1, got {}, capping to {}",
                go_float(*r),
                go_float(*to)
            ),
            Self::BadBucketLabel { metric, le } => format!(
                "PromQL warning: bucket label \"le\" is missing or has a malformed value of {le:?} for metric name {metric:?}"
            ),
            Self::PossibleNonCounter(metric) => format!(
                "PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: {metric:?}"
            ),
            Self::ForcedMonotonicity(metric) => format!(
                "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile) for metric name {metric:?}"
            ),
            Self::MixedFloatsHistograms(metric) => format!(
                "PromQL warning: encountered a mix of histograms and floats for metric name {metric:?}"
            ),
            Self::MixedFloatsHistogramsAgg => {
                "PromQL warning: encountered a mix of histograms and floats for aggregation".to_owned()
            }
            Self::MixedClassicNative(metric) => format!(
                "PromQL warning: vector contains a mix of classic and native histograms for metric name {metric:?}"
            ),
            Self::NativeHistogramNotCounter(metric) => format!(
                "PromQL warning: this native histogram metric is not a counter: {metric:?}"
            ),
            Self::NativeHistogramNotGauge(metric) => format!(
                "PromQL warning: this native histogram metric is not a gauge: {metric:?}"
            ),
            Self::MixedExponentialCustom(metric) => format!(
                "PromQL warning: vector contains a mix of histograms with exponential and custom buckets schemas for metric name {metric:?}"
            ),
            Self::IncompatibleCustomBuckets(metric) => format!(
                "PromQL warning: vector contains histograms with incompatible custom buckets for metric name {metric:?}"
            ),
            Self::CustomBucketsReconciled(during) => format!(
                "PromQL info: mismatched custom buckets were reconciled during {during}"
            ),
            Self::StartTimeOverlap(metric) => format!(
                "PromQL warning: sample has start time that overlaps with previous sample timestamp for metric {metric:?}"
            ),
            Self::CounterResetCollision(during) => {
                format!("PromQL warning: conflicting counter resets during histogram {during}")
            }
            Self::IncompatibleBucketLayoutInBinOp(op) => format!(
                "PromQL warning: incompatible bucket layout encountered for binary operator {op}"
            ),
            Self::IncompatibleTypesInBinOp(lhs, op, rhs) => format!(
                "PromQL info: incompatible sample types encountered for binary operator {op:?}: {lhs} {op} {rhs}"
            ),
            Self::HistogramIgnoredInAggregation(agg) => {
                format!("PromQL info: ignored histogram in {agg} aggregation")
            }
            Self::HistogramIgnoredInMixedRange(metric) => format!(
                "PromQL info: ignored histograms in a range containing both floats and histograms for metric name {metric:?}"
            ),
            Self::QuantileNaNResult(metric) => format!(
                "PromQL info: input to histogram_quantile has NaN observations, result is NaN for metric name {metric:?}"
            ),
            Self::QuantileNaNSkew(metric) => format!(
                "PromQL info: input to histogram_quantile has NaN observations, result is skewed higher for metric name {metric:?}"
            ),
            Self::SortInRangeQuery => "PromQL warning: sort is ineffective for range queries since results are always ordered by labels".to_owned(),
            Self::FractionNaNs(metric) => format!(
                "PromQL info: input to histogram_fraction has NaN observations, which are excluded from all fractions for metric name {metric:?}"
            ),
        }
    }
}

/// A float as Go's `%g` writes the values annotations carry (it differs
/// from the API's number format only below 1e-4, which no check here sees).
fn go_float(v: f64) -> String {
    let mut out = String::new();
    crate::promql::value::format_float(v, &mut out);
    out
}

/// The distinct annotations of one evaluation, in the order first seen.
/// At most [`Annotations::KEPT`] of each kind are kept; the rest are
/// counted, so a query over many series cannot grow them without bound.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Annotations {
    warnings: Vec<(String, Pos)>,
    infos: Vec<(String, Pos)>,
    omitted_warnings: usize,
    omitted_infos: usize,
}

impl Annotations {
    /// How many of each kind are kept, as Prometheus' API shows them.
    pub const KEPT: usize = 10;

    /// Adds `a`, about the expression at `pos`, unless the same text is
    /// already there (from anywhere in the query: the first is kept).
    pub fn add(&mut self, a: Annotation<'_>, pos: Pos) {
        let msg = a.message();
        let (list, omitted) = if a.is_warning() {
            (&mut self.warnings, &mut self.omitted_warnings)
        } else {
            (&mut self.infos, &mut self.omitted_infos)
        };
        if list.iter().any(|(m, _)| *m == msg) {
            return;
        }
        if list.len() < Self::KEPT {
            list.push((msg, pos));
        } else {
            *omitted += 1;
        }
    }

    /// The warnings as the API writes them for `query`, with a last line
    /// counting those left out. An empty `query` leaves positions out.
    pub fn warnings(&self, query: &str) -> Vec<String> {
        with_omitted(&self.warnings, self.omitted_warnings, "warning", query)
    }

    /// The infos as the API writes them for `query`.
    pub fn infos(&self, query: &str) -> Vec<String> {
        with_omitted(&self.infos, self.omitted_infos, "info", query)
    }

    /// Whether there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.warnings.is_empty() && self.infos.is_empty()
    }
}

fn with_omitted(list: &[(String, Pos)], omitted: usize, kind: &str, query: &str) -> Vec<String> {
    let mut out: Vec<String> = list
        .iter()
        .map(|(msg, pos)| {
            if query.is_empty() {
                msg.clone()
            } else {
                format!("{msg} ({})", pos.line_col(query))
            }
        })
        .collect();
    if omitted > 0 {
        out.push(format!("{omitted} more {kind} annotations omitted"));
    }
    out
}

impl Annotation<'_> {
    /// The warning for histograms that could not be combined.
    pub fn incompatible(why: crate::histogram::Incompatible, metric: &str) -> Annotation<'_> {
        match why {
            crate::histogram::Incompatible::Schema => Annotation::MixedExponentialCustom(metric),
            crate::histogram::Incompatible::Bounds => Annotation::IncompatibleCustomBuckets(metric),
        }
    }
}

/// Whether `name` ends as Prometheus expects a counter's name to.
pub fn looks_like_counter(name: &str) -> bool {
    ["_total", "_sum", "_count", "_bucket"]
        .iter()
        .any(|s| name.ends_with(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_prometheus_and_repeats_are_dropped() {
        let mut a = Annotations::default();
        a.add(Annotation::InvalidQuantile(1.5), Pos(9));
        a.add(Annotation::InvalidQuantile(1.5), Pos(0));
        a.add(Annotation::InvalidQuantile(f64::NAN), Pos(14));
        a.add(Annotation::PossibleNonCounter("up"), Pos(5));
        let query = "quantile(1.5,\n x) + rate(up[5m])";
        assert_eq!(
            a.warnings(query),
            [
                "PromQL warning: quantile value should be between 0 and 1, got 1.5 (1:10)",
                "PromQL warning: quantile value should be between 0 and 1, got NaN (2:1)"
            ]
        );
        assert_eq!(
            a.infos(""),
            ["PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: \"up\""]
        );
    }

    #[test]
    fn only_ten_of_a_kind_are_kept() {
        let mut a = Annotations::default();
        for i in 0..25 {
            a.add(Annotation::PossibleNonCounter(&format!("m{i}")), Pos(0));
        }
        let infos = a.infos("m");
        assert_eq!(infos.len(), 11);
        assert_eq!(infos[10], "15 more info annotations omitted");
        assert!(a.warnings("m").is_empty());
    }

    #[test]
    fn counter_names() {
        assert!(looks_like_counter("http_requests_total"));
        assert!(looks_like_counter("rpc_duration_seconds_bucket"));
        assert!(!looks_like_counter("temperature"));
    }
}
