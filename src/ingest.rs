//! Ingest: wire decoders that feed the head straight from request bytes.
//!
//! Each protocol has its module ([`remote_write`], [`otlp`]); this one holds
//! what they share: why samples were refused ([`Reason`]), what a request
//! did ([`IngestReport`]) and how problems are worded.

pub mod ha;
pub mod otlp;
mod pipeline;
pub mod relabel;
pub mod remote_write;
pub mod validate;

use std::fmt::Write as _;

pub use crate::protocol::wire::DecodeError;
use crate::storage::exemplars::ExemplarError;
use crate::storage::{Commit, SampleError};
pub use pipeline::Door;
pub use remote_write::{
    append_write_request, append_write_request_admitted, append_write_request_v2,
    append_write_request_v2_admitted, append_write_request_with_exemplars,
};
use validate::LabelError;

/// Samples more than this far ahead of the receiver's clock are rejected.
pub const MAX_AHEAD_MS: i64 = 10 * 60 * 1000;

/// How many problems a reply spells out; the rest are only counted.
pub(crate) const MAX_PROBLEMS: usize = 5;

/// Why samples were not stored: a closed set, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The series' labels broke a rule.
    Label(LabelError),
    /// The sample broke an append rule.
    Sample(SampleError),
    /// The head holds its maximum number of series.
    SeriesLimit,
    /// The head holds its maximum number of series of this metric name.
    PerMetricSeriesLimit,
    /// A native histogram that does not decode or breaks Prometheus'
    /// validation rules.
    InvalidHistogram,
    /// A remote-write 2.0 series that breaks a rule of the request: a
    /// reference outside `symbols`, both samples and histograms.
    InvalidSeries,
    /// An OTLP metric whose aggregation temporality Sluice does not store
    /// (delta without `--otlp-delta-to-cumulative`, or unspecified).
    UnsupportedTemporality,
    /// An OTLP data point that cannot be stored as it is: no timestamp, no
    /// value, too many buckets, an exponential scale out of range.
    InvalidDataPoint,
    /// An HA pair's request naming a cluster past the tenant's
    /// `ha_max_clusters`.
    TooManyHaClusters,
}

impl Reason {
    /// The reason for a series refused by `limit`.
    pub fn of_limit(limit: &crate::storage::SeriesLimit) -> Self {
        match limit {
            crate::storage::SeriesLimit::Total(_) => Reason::SeriesLimit,
            crate::storage::SeriesLimit::PerMetric(_) => Reason::PerMetricSeriesLimit,
        }
    }

    /// Number of distinct reasons.
    pub const COUNT: usize = LabelError::ALL.len() + SampleError::ALL.len() + 7;

    /// Every reason, in index order.
    pub fn all() -> impl Iterator<Item = Reason> {
        LabelError::ALL
            .into_iter()
            .map(Reason::Label)
            .chain(SampleError::ALL.into_iter().map(Reason::Sample))
            .chain([
                Reason::SeriesLimit,
                Reason::InvalidHistogram,
                Reason::UnsupportedTemporality,
                Reason::InvalidDataPoint,
                Reason::InvalidSeries,
                Reason::PerMetricSeriesLimit,
                Reason::TooManyHaClusters,
            ])
    }

    /// A dense index in `0..COUNT`.
    pub fn index(self) -> usize {
        let other = LabelError::ALL.len() + SampleError::ALL.len();
        match self {
            Reason::Label(e) => e as usize,
            Reason::Sample(e) => LabelError::ALL.len() + e as usize,
            Reason::SeriesLimit => other,
            Reason::InvalidHistogram => other + 1,
            Reason::UnsupportedTemporality => other + 2,
            Reason::InvalidDataPoint => other + 3,
            Reason::InvalidSeries => other + 4,
            Reason::PerMetricSeriesLimit => other + 5,
            Reason::TooManyHaClusters => other + 6,
        }
    }

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Label(e) => e.reason(),
            Reason::Sample(e) => e.reason(),
            Reason::SeriesLimit => "series_limit",
            Reason::PerMetricSeriesLimit => "per_metric_series_limit",
            Reason::InvalidHistogram => "invalid_native_histogram",
            Reason::UnsupportedTemporality => "unsupported_temporality",
            Reason::InvalidDataPoint => "invalid_data_point",
            Reason::InvalidSeries => "invalid_series",
            Reason::TooManyHaClusters => "too_many_ha_clusters",
        }
    }
}

/// Why samples were left out on purpose: the sender did nothing wrong,
/// the request is answered 2xx. A closed set, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// A relabel rule at the door dropped the series.
    Relabel,
    /// The replica of an HA pair that is not elected sent them.
    HaDedupe,
}

impl Dropped {
    /// Every one, in index order.
    pub const ALL: [Dropped; 2] = [Dropped::Relabel, Dropped::HaDedupe];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Dropped::Relabel => "relabel",
            Dropped::HaDedupe => "ha_dedupe",
        }
    }
}

/// What one request did.
#[derive(Debug, Clone)]
pub struct IngestReport {
    /// Samples stored.
    pub accepted: u64,
    /// Samples (and histogram samples) not stored, by [`Reason::index`].
    pub rejected: [u64; Reason::COUNT],
    /// Series whose labels arrived unsorted and were sorted.
    pub resorted_series: u64,
    /// The first few problems, spelled out.
    pub problems: Vec<String>,
    /// Resolves once the stored samples are durable: wait for it before
    /// acknowledging.
    pub commit: Commit,
    /// Whether the request also carried metadata entries.
    pub metadata: bool,
    /// Series refused for breaking a rule of the request, samples or not.
    pub refused_series: u64,
    /// Exemplars the request carried.
    pub exemplars: u64,
    /// Exemplars stored.
    pub exemplars_written: u64,
    /// Native histogram samples stored (also in `accepted`).
    pub histograms_written: u64,
    /// Exemplars not stored, by [`ExemplarError`] (as Prometheus, these do
    /// not fail the request; they are counted).
    pub exemplars_rejected: [u64; ExemplarError::ALL.len()],
    /// Samples (and histogram samples) left out on purpose, by
    /// [`Dropped`]: not stored, not an error.
    pub dropped: [u64; Dropped::ALL.len()],
    /// Of `accepted`, samples stored out of order (within the window).
    pub out_of_order: u64,
    /// Set when the request came from the replica of an HA pair that is
    /// not elected: nothing was stored, and this says why (answered 202).
    pub deduplicated: Option<String>,
}

impl Default for IngestReport {
    fn default() -> Self {
        Self {
            accepted: 0,
            rejected: [0; Reason::COUNT],
            resorted_series: 0,
            problems: Vec::new(),
            commit: Commit::default(),
            metadata: false,
            refused_series: 0,
            exemplars: 0,
            exemplars_written: 0,
            histograms_written: 0,
            exemplars_rejected: [0; ExemplarError::ALL.len()],
            dropped: [0; Dropped::ALL.len()],
            deduplicated: None,
            out_of_order: 0,
        }
    }
}

impl IngestReport {
    /// Total samples not stored.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    /// Notes `n` samples left out on purpose.
    pub(crate) fn drop_samples(&mut self, why: Dropped, n: u64) {
        self.dropped[why as usize] += n;
    }

    pub(crate) fn reject(&mut self, reason: Reason, n: u64, detail: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        self.rejected[reason.index()] += n;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(detail());
        }
    }

    /// Whether anything the request carried was not stored: the reply
    /// must then be an error (400) that says what.
    pub fn is_partial(&self) -> bool {
        self.rejected_total() > 0 || self.refused_series > 0
    }

    /// Refuses a series that breaks a rule of the request, with the `lost`
    /// samples (and histograms) it carried.
    pub(crate) fn refuse_series(&mut self, lost: u64, detail: impl FnOnce() -> String) {
        self.refused_series += 1;
        self.rejected[Reason::InvalidSeries.index()] += lost;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(detail());
        }
    }

    /// The plain-text reply for a request with rejections: counts by
    /// reason, then the first problems.
    pub fn message(&self) -> String {
        if self.rejected_total() == 0 && self.refused_series > 0 {
            return format!(
                "refused {} series that carried no samples; the other series were stored. \
                 First problems: {}",
                self.refused_series,
                self.problems.join("; ")
            );
        }
        let total = self.rejected_total();
        summary(
            "samples",
            total,
            total + self.accepted,
            &self.rejected,
            &self.problems,
        )
    }
}

/// `rejected <n> of <total> <unit> (<reason>: <n>, …); the other <unit>
/// were stored. First problems: …`: a reply that says what was lost and why.
pub(crate) fn summary(
    unit: &str,
    rejected: u64,
    total: u64,
    by_reason: &[u64; Reason::COUNT],
    problems: &[String],
) -> String {
    let mut m = format!("rejected {rejected} of {total} {unit} (");
    let mut first = true;
    for r in Reason::all() {
        let n = by_reason[r.index()];
        if n > 0 {
            if !first {
                m.push_str(", ");
            }
            first = false;
            let _ = write!(m, "{}: {n}", r.as_str());
        }
    }
    let _ = write!(m, "); the other {unit} were stored. First problems: ");
    m.push_str(&problems.join("; "));
    m
}

pub(crate) fn label_problem(e: LabelError, limits: &validate::LabelLimits) -> String {
    let names = limits.names;
    match e {
        LabelError::MissingMetricName => "missing metric name (__name__)",
        LabelError::InvalidMetricName => {
            return format!(
                "invalid metric name ({}, --metric-name-validation-scheme={names})",
                names.metric_rule()
            )
        }
        LabelError::InvalidLabelName => {
            return format!(
                "invalid label name ({}, --metric-name-validation-scheme={names})",
                names.label_rule()
            )
        }
        LabelError::InvalidUtf8 => "label name or value is not valid UTF-8",
        LabelError::DuplicateLabelName => "duplicate label name",
        LabelError::TooManyLabels => {
            return format!(
                "too many labels (more than {}: --max-labels-per-series, or the tenant's \
                 max_label_names_per_series)",
                limits.max_labels
            )
        }
        LabelError::LabelNameTooLong => {
            return format!(
                "label name too long (over {} bytes: --max-label-name-length)",
                limits.max_name_len
            )
        }
        LabelError::LabelValueTooLong => {
            return format!(
                "label value too long (over {} bytes: --max-label-value-length)",
                limits.max_value_len
            )
        }
    }
    .to_owned()
}

pub(crate) fn sample_problem(e: SampleError, t: i64, max_t: i64) -> String {
    match e {
        SampleError::OutOfOrder => "out of order sample (older than the series' newest)".to_owned(),
        SampleError::Duplicate => {
            "duplicate sample for timestamp with a different value".to_owned()
        }
        SampleError::OutOfBounds if t > max_t => {
            format!("out of bounds: timestamp is too far in the future (limit {max_t})")
        }
        SampleError::OutOfBounds => "out of bounds: timestamp is older than the retention cutoff,              the last block cut, or the out-of-order window"
            .to_owned(),
    }
}
