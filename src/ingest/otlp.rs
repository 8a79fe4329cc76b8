//! OTLP metrics ingest: an `ExportMetricsServiceRequest` appended to the
//! head under the names Prometheus' own OTLP receiver gives its data
//! (`UnderscoreEscapingWithSuffixes`; `specs/wire-formats.md` §3.4).
//!
//! The request is checked once for structure ([`schema::check`]), then
//! walked once over its bytes: no request model is built. Each data point's
//! labels are built in reused buffers ([`labels::LabelSet`]), encoded in
//! the head's canonical form, and looked up; only a new series allocates.
//! Per type:
//! - gauge and sum: one series; `as_int` becomes a float;
//! - histogram: `_bucket{le}` (cumulative, ending in `+Inf`), `_sum`, `_count`;
//! - summary: `{quantile}` series, `_sum`, `_count`;
//! - exponential histogram: a native histogram, as Prometheus' receiver
//!   converts it (scale to schema, scales above 8 merged down to 8, below
//!   -4 refused); with `exponential_as_classic`, or for delta points summed
//!   into running totals, classic buckets at its own boundaries (negative
//!   buckets, the zero bucket at `le` = its threshold, positive buckets,
//!   `+Inf`).
//!
//! Resources give `job` (`service.namespace/service.name`), `instance`
//! (`service.instance.id`), the promoted attributes, and `target_info` with
//! the rest. Delta sums and histograms are refused, or summed into running
//! totals with `--otlp-delta-to-cumulative` ([`delta`]). `NO_RECORDED_VALUE`
//! points store the stale marker. Exemplars of sums, gauges and explicit
//! histograms are kept (labelled `trace_id`/`span_id` in hex plus their
//! filtered attributes, a histogram's on the bucket that covers it);
//! exponential histograms' exemplars and start times are not.

pub mod delta;
pub mod json;
pub mod labels;
pub mod names;
pub use crate::protocol::otlp as schema;

use std::fmt::Write as _;

use super::pipeline;
use super::validate::{LabelError, LabelLimits};
use super::{IngestReport, Reason, MAX_AHEAD_MS, MAX_PROBLEMS};
use crate::protocol::otlp::{len_prefix, temporality, DataKind, PackedVarints};
use crate::protocol::wire::{DecodeError, Reader, Value};
use crate::reuse::{Buffer, Reused};
use crate::storage::STALE_NAN;
use crate::storage::{AppendCounts, Appender, Db, SampleError};
use delta::{DeltaError, DeltaState};
use labels::{split_key_value, AttrError, LabelSet, Source};
use names::{NameCache, NameKind};

/// Most buckets one histogram point may have (OpenTelemetry SDKs default
/// to 160 for exponential histograms); each bucket is a series here.
pub const MAX_BUCKETS: usize = 1024;

/// Exponential histogram scales accepted (the OTLP range).
const SCALES: std::ops::RangeInclusive<i32> = -10..=20;

/// How OTLP data is translated.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// Resource attributes that become labels on every series.
    pub promote_resource_attributes: Vec<String>,
    /// Sum delta points into running totals instead of refusing them.
    pub delta_to_cumulative: bool,
    /// Store exponential histograms as classic bucket series rather than
    /// native histograms.
    pub exponential_as_classic: bool,
    /// Spacing of `target_info` samples over a request's time range (half
    /// the query lookback, so every instant sees one).
    pub target_info_interval_ms: i64,
    /// How metric names and attribute keys become Prometheus names.
    pub translation: names::Translation,
}

impl Default for OtlpOptions {
    fn default() -> Self {
        Self {
            promote_resource_attributes: Vec::new(),
            delta_to_cumulative: false,
            exponential_as_classic: true,
            target_info_interval_ms: 150_000,
            translation: names::Translation::default(),
        }
    }
}

/// OTLP state shared by all requests.
#[derive(Debug)]
pub struct Otlp {
    /// Translation options.
    pub opts: OtlpOptions,
    /// Running totals for delta series.
    pub delta: DeltaState,
}

impl Otlp {
    /// State for `opts`, keeping delta totals for at most `max_series`.
    pub fn new(opts: OtlpOptions, max_series: usize) -> Self {
        Self {
            opts,
            delta: DeltaState::new(max_series),
        }
    }
}

/// What one OTLP request did.
#[derive(Debug, Default, Clone)]
pub struct OtlpReport {
    /// Samples stored and rejected (a histogram point is many samples).
    pub samples: IngestReport,
    /// Data points in the request.
    pub points: u64,
    /// Data points not (wholly) stored, by [`Reason::index`] of their
    /// first problem.
    pub rejected_points: [u64; Reason::COUNT],
    /// Things worth telling the sender that lost no data.
    pub warnings: Vec<String>,
}

impl OtlpReport {
    /// Data points not (wholly) stored.
    pub fn rejected_points_total(&self) -> u64 {
        self.rejected_points.iter().sum()
    }

    /// The `partial_success.error_message`: rejected points by reason, the
    /// first problems, then warnings; empty when all is well.
    pub fn message(&self) -> String {
        let total = self.rejected_points_total();
        let mut m = String::new();
        if total > 0 {
            m = super::summary(
                "data points",
                total,
                self.points,
                &self.rejected_points,
                &self.samples.problems,
            );
        }
        if !self.warnings.is_empty() {
            if !m.is_empty() {
                m.push_str(". ");
            }
            m.push_str("Warnings: ");
            m.push_str(&self.warnings.join("; "));
        }
        m
    }
}

/// Per-metric names, reused across metrics.
#[derive(Debug, Default)]
struct MetricNames {
    base: String,
    sum: String,
    count: String,
    bucket: String,
}

impl MetricNames {
    fn set(&mut self, base: &str) {
        for (s, suffix) in [
            (&mut self.base, ""),
            (&mut self.sum, "_sum"),
            (&mut self.count, "_count"),
            (&mut self.bucket, "_bucket"),
        ] {
            s.clear();
            s.push_str(base);
            s.push_str(suffix);
        }
    }
}

/// Buffers a metric's points are decoded into, reused across requests.
#[derive(Debug, Default)]
struct PointBufs {
    names: MetricNames,
    bounds: Vec<f64>,
    counts: Vec<u64>,
    negative: Vec<u64>,
    quantiles: Vec<(f64, f64)>,
    le: String,
}

/// Everything reused across requests on one thread.
#[derive(Debug, Default)]
struct Scratch {
    identity: LabelSet,
    promoted: LabelSet,
    target: LabelSet,
    point: LabelSet,
    canonical: Vec<u8>,
    text: String,
    bufs: PointBufs,
    names: NameCache,
}

impl Buffer for Scratch {
    fn heap_bytes(&self) -> usize {
        [&self.identity, &self.promoted, &self.target, &self.point]
            .iter()
            .map(|l| l.heap_bytes())
            .sum::<usize>()
            + self.canonical.heap_bytes()
            + self.text.heap_bytes()
    }

    /// Keeps the name cache, which is bounded on its own.
    fn release(&mut self) {
        let names = std::mem::take(&mut self.names);
        *self = Scratch {
            names,
            ..Scratch::default()
        };
    }
}

thread_local! {
    static SCRATCH: Reused<Scratch> = Reused::default();
}

/// Which series an emitted sample belongs to, which fixes the label set
/// it takes and the counts it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Emitted {
    /// A series of the data point being walked.
    DataPoint,
    /// The resource's `target_info`.
    TargetInfo,
}

/// Appends a decoded (protobuf) `ExportMetricsServiceRequest` to `head`.
/// A body that is not a well-formed request is refused whole, before
/// anything is stored; otherwise every valid point is stored and the rest
/// are counted and described in the report.
pub fn append_export_request(
    db: &Db,
    otlp: &Otlp,
    limits: &LabelLimits,
    body: &[u8],
    now_ms: i64,
) -> Result<OtlpReport, DecodeError> {
    schema::check(body, &schema::REQUEST)?;
    SCRATCH.with(|kept| {
        kept.with(|scratch| {
            let mut w = Walk {
                app: db.appender(now_ms.saturating_add(MAX_AHEAD_MS)),
                otlp,
                limits,
                report: OtlpReport::default(),
                counts: AppendCounts::default(),
                target_counts: AppendCounts::default(),
                point_reason: None,
                t_range: (i64::MAX, i64::MIN),
                scratch,
                last_stored: false,
                exemplars: Vec::new(),
            };
            let t = otlp.opts.translation;
            for set in [
                &mut w.scratch.identity,
                &mut w.scratch.promoted,
                &mut w.scratch.target,
                &mut w.scratch.point,
            ] {
                set.set_translation(t);
            }
            let walked = w.request(body);
            let mut report = w.report;
            pipeline::tally(&mut report.samples, &w.counts);
            report.samples.accepted += w.target_counts.appended;
            report.samples.commit = w.app.commit();
            walked?;
            Ok(report)
        })
    })
}

struct Walk<'a> {
    app: Appender<'a>,
    otlp: &'a Otlp,
    limits: &'a LabelLimits,
    report: OtlpReport,
    counts: AppendCounts,
    /// `target_info` appends: stored ones count, refused ones (a resource
    /// repeated in one request) are not the sender's data points.
    target_counts: AppendCounts,
    /// The first problem of the current data point.
    point_reason: Option<Reason>,
    /// Earliest and latest sample time of the current resource.
    t_range: (i64, i64),
    scratch: &'a mut Scratch,
    /// Whether the last `emit` found or created its series.
    last_stored: bool,
    /// The current data point's exemplars.
    exemplars: Vec<PointExemplar>,
}

/// An OTLP exemplar as Prometheus' translator labels it: `trace_id` and
/// `span_id` in lowercase hex, then its filtered string attributes.
#[derive(Debug, Clone)]
struct PointExemplar {
    labels: Vec<(String, String)>,
    value: f64,
    t: i64,
}

/// The offset in the request where the payload `b` of a length-delimited
/// field found at `at` starts (past its length prefix).
fn payload_at(at: usize, b: &[u8]) -> usize {
    at + len_prefix(b.len())
}

fn utf8(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("")
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 64)`, which Rust's `Display`
/// matches for finite values.
fn push_float(out: &mut String, f: f64) {
    out.clear();
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{f}");
    }
}

/// The stale marker when `stale`, else `v`.
fn or_stale(stale: bool, v: f64) -> f64 {
    if stale {
        f64::from_bits(STALE_NAN)
    } else {
        v
    }
}

/// `2^(index · 2^-scale)`: the lower bound of exponential bucket `index`.
fn exp_bound(index: i64, scale: i32) -> f64 {
    if scale <= 0 {
        let exp = index.saturating_mul(1i64 << (-scale));
        2f64.powi(exp.clamp(-1100, 1100) as i32)
    } else {
        (index as f64 / f64::from(1u32 << scale)).exp2()
    }
}

impl Walk<'_> {
    fn request(&mut self, body: &[u8]) -> Result<(), DecodeError> {
        let mut r = Reader::new(body);
        while let Some((num, v, at)) = r.next_field()? {
            if let (1, Value::Bytes(rm)) = (num, v) {
                self.resource_metrics(rm, payload_at(at, rm))?;
            }
        }
        Ok(())
    }

    fn resource_metrics(&mut self, rm: &[u8], base: usize) -> Result<(), DecodeError> {
        let mut resource = None;
        let mut r = Reader::nested(rm, base);
        while let Some((num, v, at)) = r.next_field()? {
            if let (1, Value::Bytes(b)) = (num, v) {
                resource = Some((b, payload_at(at, b)));
            }
        }
        self.resource(resource)?;
        self.t_range = (i64::MAX, i64::MIN);
        let mut r = Reader::nested(rm, base);
        while let Some((num, v, at)) = r.next_field()? {
            let (2, Value::Bytes(sm)) = (num, v) else {
                continue;
            };
            let mut r = Reader::nested(sm, payload_at(at, sm));
            while let Some((num, v, at)) = r.next_field()? {
                if let (2, Value::Bytes(m)) = (num, v) {
                    self.metric(m, payload_at(at, m))?;
                }
            }
        }
        self.target_info();
        Ok(())
    }

    /// Fills the identity (`job`, `instance`), promoted and `target_info`
    /// label sets from a resource.
    fn resource(&mut self, resource: Option<(&[u8], usize)>) -> Result<(), DecodeError> {
        let scratch = &mut *self.scratch;
        scratch.identity.clear();
        scratch.promoted.clear();
        scratch.target.clear();
        let (mut name, mut namespace, mut instance) = (None, None, None);
        scratch.text.clear();
        if let Some((res, base)) = resource {
            let mut r = Reader::nested(res, base);
            while let Some((num, v, at)) = r.next_field()? {
                let (1, Value::Bytes(kv)) = (num, v) else {
                    continue;
                };
                let (key, value) = split_key_value(kv, payload_at(at, kv))?;
                let Ok(key) = std::str::from_utf8(key) else {
                    self.report
                        .warnings
                        .push("a resource attribute key is not valid UTF-8; it was ignored".into());
                    continue;
                };
                if self
                    .otlp
                    .opts
                    .promote_resource_attributes
                    .iter()
                    .any(|p| p == key)
                {
                    let _ = scratch
                        .promoted
                        .push_attribute(key, value, Source::Attribute);
                }
                let slot = match key {
                    "service.name" => &mut name,
                    "service.namespace" => &mut namespace,
                    "service.instance.id" => &mut instance,
                    _ => {
                        if scratch
                            .target
                            .push_attribute(key, value, Source::Attribute)
                            .is_err()
                            && self.report.warnings.len() < MAX_PROBLEMS
                        {
                            self.report.warnings.push(format!(
                                "resource attribute {key:?} cannot be a label; it was left out of target_info"
                            ));
                        }
                        continue;
                    }
                };
                let start = scratch.text.len();
                if let Some((vb, vat)) = value {
                    if labels::any_value_string(vb, vat, &mut scratch.text, 0).is_err() {
                        scratch.text.truncate(start);
                    }
                }
                *slot = Some((start, scratch.text.len()));
            }
        }
        let get = |r: Option<(usize, usize)>| r.map(|(a, b)| &scratch.text[a..b]);
        match (get(namespace), get(name)) {
            (Some(ns), Some(n)) if !ns.is_empty() => {
                scratch
                    .identity
                    .push_parts("job", &[ns, "/", n], Source::Identity);
            }
            (_, Some(n)) => scratch.identity.push("job", n, Source::Identity),
            _ => {}
        }
        if let Some(inst) = get(instance) {
            scratch.identity.push("instance", inst, Source::Identity);
        }
        scratch.identity.resolve();
        scratch.promoted.resolve();
        scratch
            .target
            .extend_from(&scratch.identity, Source::Identity);
        scratch.target.resolve();
        Ok(())
    }

    fn target_info(&mut self) {
        let (min_t, max_t) = self.t_range;
        let scratch = &*self.scratch;
        let has_attrs = scratch
            .target
            .iter()
            .any(|(n, _)| n != "job" && n != "instance");
        if min_t > max_t || !has_attrs || scratch.identity.is_empty() {
            return;
        }
        self.app
            .add_metadata("target_info", "gauge", "Target metadata", "");
        let step = self.otlp.opts.target_info_interval_ms.max(1);
        // At most 100 samples per resource, however wide the range.
        let mut t = min_t.max(max_t.saturating_sub(step.saturating_mul(100)));
        while t < max_t {
            self.emit(Emitted::TargetInfo, "target_info", None, t, 1.0, false);
            t = t.saturating_add(step);
        }
        self.emit(Emitted::TargetInfo, "target_info", None, max_t, 1.0, false);
    }

    fn metric(&mut self, m: &[u8], base: usize) -> Result<(), DecodeError> {
        let (mut name, mut desc, mut unit, mut data) = (&[][..], &[][..], &[][..], None);
        let mut r = Reader::nested(m, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (1, Value::Bytes(b)) => name = b,
                (2, Value::Bytes(b)) => desc = b,
                (3, Value::Bytes(b)) => unit = b,
                (_, Value::Bytes(b)) if DataKind::from_field(num).is_some() => {
                    data = DataKind::from_field(num).map(|kind| (kind, b, payload_at(at, b)));
                }
                _ => {}
            }
        }
        let name_text = String::from_utf8_lossy(name);
        let Some((kind, data, dbase)) = data else {
            if self.report.warnings.len() < MAX_PROBLEMS {
                self.report.warnings.push(format!(
                    "metric {name_text:?} has no data (no gauge, sum, histogram, exponential histogram or summary)"
                ));
            }
            return Ok(());
        };
        let (mut temporality, mut monotonic, mut points) = (0, false, 0u64);
        let mut r = Reader::nested(data, dbase);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (1, Value::Bytes(_)) => points += 1,
                (2, Value::Varint(t)) => temporality = t,
                (3, Value::Varint(b)) => monotonic = b != 0,
                _ => {}
            }
        }
        if points == 0 {
            if self.report.warnings.len() < MAX_PROBLEMS {
                self.report
                    .warnings
                    .push(format!("metric {name_text:?} has no data points"));
            }
            return Ok(());
        }
        let reject_all = |w: &mut Self, reason: Reason, detail: String| {
            w.report.points += points;
            w.report.rejected_points[reason.index()] += points;
            w.report.samples.reject(reason, points, || detail);
        };
        let Ok(name_str) = std::str::from_utf8(name) else {
            reject_all(
                self,
                Reason::Label(LabelError::InvalidUtf8),
                format!("metric name {name_text:?} is not valid UTF-8"),
            );
            return Ok(());
        };
        let (name_kind, type_name) = match kind {
            DataKind::Gauge => (NameKind::Gauge, "gauge"),
            DataKind::Sum if monotonic => (NameKind::Counter, "counter"),
            DataKind::Sum => (NameKind::Gauge, "gauge"),
            DataKind::Summary => (NameKind::Other, "summary"),
            DataKind::Histogram | DataKind::ExponentialHistogram => (NameKind::Other, "histogram"),
        };
        let mut delta = false;
        let has_temporality = matches!(
            kind,
            DataKind::Sum | DataKind::Histogram | DataKind::ExponentialHistogram
        );
        if has_temporality && temporality != temporality::CUMULATIVE {
            if temporality == temporality::DELTA && self.otlp.opts.delta_to_cumulative {
                delta = true;
            } else {
                let why = if temporality == temporality::DELTA {
                    "delta temporality, which Sluice stores only when run with --otlp-delta-to-cumulative"
                } else {
                    "unspecified aggregation temporality"
                };
                reject_all(
                    self,
                    Reason::UnsupportedTemporality,
                    format!(
                        "invalid temporality and type combination for metric {name_str:?}: {why}"
                    ),
                );
                return Ok(());
            }
        }
        let unit_str = utf8(unit);
        let mut bufs = std::mem::take(&mut self.scratch.bufs);
        match self
            .scratch
            .names
            .get(name_str, unit_str, name_kind, self.otlp.opts.translation)
        {
            Ok((prom_name, unit_word)) => {
                self.app
                    .add_metadata(prom_name, type_name, utf8(desc), unit_word);
                bufs.names.set(prom_name);
            }
            Err(e) => {
                let detail = e.to_string();
                self.scratch.bufs = bufs;
                reject_all(self, Reason::Label(LabelError::InvalidMetricName), detail);
                return Ok(());
            }
        }
        let mut r = Reader::nested(data, dbase);
        let mut result = Ok(());
        while let Some((num, v, at)) = r.next_field()? {
            let (1, Value::Bytes(p)) = (num, v) else {
                continue;
            };
            let base = payload_at(at, p);
            self.report.points += 1;
            self.point_reason = None;
            result = match kind {
                DataKind::Gauge | DataKind::Sum => self.number_point(p, base, &bufs, delta),
                DataKind::Histogram => self.histogram_point(p, base, &mut bufs, delta),
                DataKind::ExponentialHistogram => {
                    self.exp_histogram_point(p, base, &mut bufs, delta)
                }
                DataKind::Summary => self.summary_point(p, base, &mut bufs),
            };
            if let Some(reason) = self.point_reason.take() {
                self.report.rejected_points[reason.index()] += 1;
            }
            if result.is_err() {
                break;
            }
        }
        self.scratch.bufs = bufs;
        result
    }

    /// Rejects the current point (or part of it): `samples` samples for `reason`.
    fn reject(&mut self, reason: Reason, samples: u64, detail: impl FnOnce() -> String) {
        self.point_reason.get_or_insert(reason);
        self.report.samples.reject(reason, samples, detail);
    }

    /// Builds the point's labels from attribute field `field`, or rejects
    /// its `samples` samples and returns `false`.
    fn point_labels(
        &mut self,
        p: &[u8],
        base: usize,
        field: u32,
        name: &str,
        samples: u64,
    ) -> Result<bool, DecodeError> {
        let scratch = &mut *self.scratch;
        scratch.point.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            let Value::Bytes(kv) = v else { continue };
            if num != field {
                continue;
            }
            match scratch
                .point
                .push_key_value(kv, payload_at(at, kv), Source::Attribute)
            {
                Ok(()) => {}
                Err(AttrError::Decode(e)) => return Err(e),
                Err(AttrError::Label(e)) => {
                    let key = split_key_value(kv, 0)
                        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                        .unwrap_or_default();
                    self.reject(Reason::Label(e), samples, || {
                        format!(
                            "{} in attribute {key:?} of a data point of metric {name:?}",
                            super::label_problem(e, self.limits.names)
                        )
                    });
                    return Ok(false);
                }
            }
        }
        scratch
            .point
            .extend_from(&scratch.promoted, Source::Promoted);
        scratch
            .point
            .extend_from(&scratch.identity, Source::Identity);
        scratch.point.resolve();
        Ok(true)
    }

    /// Checks a point's time; records it for `target_info`.
    fn point_time(&mut self, t_ns: u64, name: &str, samples: u64) -> Option<i64> {
        if t_ns == 0 {
            self.reject(Reason::InvalidDataPoint, samples, || {
                format!("a data point of metric {name:?} has no time_unix_nano")
            });
            return None;
        }
        let t = (t_ns / 1_000_000) as i64;
        self.t_range = (self.t_range.0.min(t), self.t_range.1.max(t));
        Some(t)
    }

    /// What every point does first: check its time, refuse it if
    /// `invalid` says why, build its labels from attribute field `field`.
    /// Returns the time in milliseconds, or `None` when the point's
    /// `samples` samples were rejected.
    #[allow(clippy::too_many_arguments)]
    fn begin_point(
        &mut self,
        p: &[u8],
        base: usize,
        field: u32,
        t_ns: u64,
        name: &str,
        samples: u64,
        invalid: Option<impl FnOnce() -> String>,
    ) -> Result<Option<i64>, DecodeError> {
        let Some(t) = self.point_time(t_ns, name, samples) else {
            return Ok(None);
        };
        if let Some(why) = invalid {
            self.reject(Reason::InvalidDataPoint, samples, why);
            return Ok(None);
        }
        Ok(self
            .point_labels(p, base, field, name, samples)?
            .then_some(t))
    }

    /// Emits `_sum` (when present) and `_count`.
    #[allow(clippy::too_many_arguments)]
    fn emit_sum_count(
        &mut self,
        names: &MetricNames,
        t: i64,
        sum: Option<f64>,
        count: u64,
        stale: bool,
        delta: bool,
    ) {
        if let Some(sum) = sum {
            self.emit(
                Emitted::DataPoint,
                &names.sum,
                None,
                t,
                or_stale(stale, sum),
                delta,
            );
        }
        let count = or_stale(stale, count as f64);
        self.emit(Emitted::DataPoint, &names.count, None, t, count, delta);
    }

    /// Emits one cumulative bucket, `le` formatted into `le_buf`.
    #[allow(clippy::too_many_arguments)]
    fn emit_bucket(
        &mut self,
        name: &str,
        le_buf: &mut String,
        le: f64,
        t: i64,
        cumulative: u64,
        stale: bool,
        delta: bool,
    ) {
        push_float(le_buf, le);
        let v = or_stale(stale, cumulative as f64);
        self.emit(Emitted::DataPoint, name, Some(("le", le_buf)), t, v, delta);
    }

    fn number_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &PointBufs,
        delta: bool,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut value, mut flags) = (0, None, 0);
        let mut r = Reader::nested(p, base);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (3, Value::Fixed64(t)) => t_ns = t,
                (4, Value::Fixed64(b)) => value = Some(f64::from_bits(b)),
                (6, Value::Fixed64(i)) => value = Some(i as i64 as f64),
                (8, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        let name = bufs.names.base.as_str();
        let stale = flags & 1 != 0;
        let invalid = (!stale && value.is_none())
            .then_some(move || format!("a data point of metric {name:?} has no value"));
        if let Some(t) = self.begin_point(p, base, 7, t_ns, name, 1, invalid)? {
            let v = or_stale(stale, value.unwrap_or(0.0));
            read_exemplars(p, base, 5, &mut self.exemplars)?;
            self.emit(Emitted::DataPoint, name, None, t, v, delta);
            self.attach_exemplars(f64::NEG_INFINITY, f64::INFINITY);
        }
        Ok(())
    }

    fn histogram_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
        delta: bool,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, None, 0);
        bufs.bounds.clear();
        bufs.counts.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, _)) = r.next_field()? {
            match (num, v) {
                (3, Value::Fixed64(t)) => t_ns = t,
                (4, Value::Fixed64(c)) => count = c,
                (5, Value::Fixed64(b)) => sum = Some(f64::from_bits(b)),
                // Past MAX_BUCKETS the point is rejected; collect no more.
                (6, Value::Fixed64(c)) => push_capped(&mut bufs.counts, [c]),
                (6, Value::Bytes(b)) => push_capped(&mut bufs.counts, fixed64s(b)),
                (7, Value::Fixed64(b)) => push_capped(&mut bufs.bounds, [f64::from_bits(b)]),
                (7, Value::Bytes(b)) => {
                    push_capped(&mut bufs.bounds, fixed64s(b).map(f64::from_bits));
                }
                (10, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        // Prometheus pairs bounds with counts as far as both go.
        let n = bufs.bounds.len().min(bufs.counts.len());
        let samples = n as u64 + 2 + u64::from(sum.is_some());
        let PointBufs {
            names,
            bounds,
            counts,
            le,
            ..
        } = bufs;
        let invalid = (n > MAX_BUCKETS).then_some({
            || {
                format!(
                "a data point of histogram {:?} has {n} buckets, over the limit of {MAX_BUCKETS}",
                names.base
            )
            }
        });
        let Some(t) = self.begin_point(p, base, 9, t_ns, &names.base, samples, invalid)? else {
            return Ok(());
        };
        let stale = flags & 1 != 0;
        read_exemplars(p, base, 8, &mut self.exemplars)?;
        self.emit_sum_count(names, t, sum, count, stale, delta);
        let mut cumulative = 0u64;
        // Each exemplar goes to the bucket series whose `le` first covers
        // its value, as Prometheus' OTLP translator attaches them.
        let mut lower = f64::NEG_INFINITY;
        for (&bound, &c) in bounds.iter().zip(counts.iter()) {
            cumulative = cumulative.saturating_add(c);
            if bound.is_finite() {
                self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, delta);
                self.attach_exemplars(lower, bound);
                lower = bound;
            }
        }
        self.emit_bucket(&names.bucket, le, f64::INFINITY, t, count, stale, delta);
        self.attach_exemplars(lower, f64::INFINITY);
        self.exemplars.clear();
        Ok(())
    }

    fn exp_histogram_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
        delta: bool,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, None, 0);
        let (mut scale, mut zero_count, mut zero_threshold) = (0i32, 0u64, 0f64);
        let (mut pos_offset, mut neg_offset) = (0i32, 0i32);
        bufs.counts.clear();
        bufs.negative.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (3, Value::Fixed64(t)) => t_ns = t,
                (4, Value::Fixed64(c)) => count = c,
                (5, Value::Fixed64(b)) => sum = Some(f64::from_bits(b)),
                (6, Value::Varint(z)) => scale = zigzag32(z),
                (7, Value::Fixed64(z)) => zero_count = z,
                (8, Value::Bytes(b)) => {
                    bufs.counts.clear();
                    pos_offset = buckets(b, payload_at(at, b), &mut bufs.counts)?;
                }
                (9, Value::Bytes(b)) => {
                    bufs.negative.clear();
                    neg_offset = buckets(b, payload_at(at, b), &mut bufs.negative)?;
                }
                (10, Value::Varint(f)) => flags = f,
                (14, Value::Fixed64(b)) => zero_threshold = f64::from_bits(b),
                _ => {}
            }
        }
        if !self.otlp.opts.exponential_as_classic && !delta {
            let stale = flags & 1 != 0;
            let names = &bufs.names;
            let invalid = (scale < -4).then_some({
                || format!("cannot convert exponential histogram {:?} to a native histogram: scale must be >= -4, was {scale}", names.base)
            });
            let Some(t) = self.begin_point(p, base, 1, t_ns, &names.base, 1, invalid)? else {
                return Ok(());
            };
            let h = native_from_exponential(NativeParts {
                scale,
                zero_count,
                count,
                sum,
                stale,
                positive: (pos_offset, &bufs.counts),
                negative: (neg_offset, &bufs.negative),
            });
            let name = bufs.names.base.clone();
            match h.validate() {
                Ok(()) => self.emit_histogram(&name, t, crate::histogram::HistSample::Int(h)),
                Err(e) => self.reject(Reason::InvalidDataPoint, 1, || {
                    format!("exponential histogram {name:?} does not make a valid native histogram: {e}")
                }),
            }
            return Ok(());
        }
        let n = bufs.counts.len() + bufs.negative.len() + 1;
        let samples = n as u64 + 2 + u64::from(sum.is_some());
        let PointBufs {
            names,
            counts: positive,
            negative,
            le,
            ..
        } = bufs;
        let invalid = (n > MAX_BUCKETS || !SCALES.contains(&scale)).then_some({
            || format!(
                "a data point of exponential histogram {:?} has scale {scale} and {n} buckets; Sluice takes scales {}..={} and at most {MAX_BUCKETS} buckets",
                names.base, SCALES.start(), SCALES.end()
            )
        });
        let Some(t) = self.begin_point(p, base, 1, t_ns, &names.base, samples, invalid)? else {
            return Ok(());
        };
        let stale = flags & 1 != 0;
        self.emit_sum_count(names, t, sum, count, stale, delta);
        // Lowest values first: negative buckets from the largest index
        // (bucket i holds -base^(i+1) <= v < -base^i, so its `le` is -base^i),
        // then the zero bucket, then positive bucket i, which holds
        // base^i < v <= base^(i+1).
        let mut cumulative = 0u64;
        for (i, &c) in negative.iter().enumerate().rev() {
            cumulative = cumulative.saturating_add(c);
            let bound = -exp_bound(i64::from(neg_offset) + i as i64, scale);
            self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, delta);
        }
        cumulative = cumulative.saturating_add(zero_count);
        let zero = zero_threshold.max(0.0);
        self.emit_bucket(&names.bucket, le, zero, t, cumulative, stale, delta);
        for (i, &c) in positive.iter().enumerate() {
            cumulative = cumulative.saturating_add(c);
            let bound = exp_bound(i64::from(pos_offset) + i as i64 + 1, scale);
            if bound.is_finite() {
                self.emit_bucket(&names.bucket, le, bound, t, cumulative, stale, delta);
            }
        }
        self.emit_bucket(&names.bucket, le, f64::INFINITY, t, count, stale, delta);
        Ok(())
    }

    /// Stores one native histogram of the current point.
    fn emit_histogram(&mut self, name: &str, t: i64, h: crate::histogram::HistSample) {
        self.last_stored = false;
        let scratch = &mut *self.scratch;
        let extras = [("__name__", name)];
        scratch.canonical.clear();
        scratch
            .point
            .canonical_with(&extras, &mut scratch.canonical);
        let raw: Vec<(&[u8], &[u8])> = merge(scratch.point.iter(), &extras)
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        let (mut valid, mut canonical) = (Vec::with_capacity(raw.len()), Vec::new());
        let outcome = pipeline::append_histograms(
            &mut self.app,
            &raw,
            self.limits,
            &[(t, h)],
            &mut self.counts,
            (&mut valid, &mut canonical),
        );
        if let Err((reason, why)) = outcome {
            self.point_reason.get_or_insert(reason);
            self.report
                .samples
                .reject(reason, 1, || format!("{why}; series {name:?} not stored"));
            return;
        }
        self.last_stored = true;
    }

    fn summary_point(
        &mut self,
        p: &[u8],
        base: usize,
        bufs: &mut PointBufs,
    ) -> Result<(), DecodeError> {
        let (mut t_ns, mut count, mut sum, mut flags) = (0, 0, 0.0, 0);
        bufs.quantiles.clear();
        let mut r = Reader::nested(p, base);
        while let Some((num, v, at)) = r.next_field()? {
            match (num, v) {
                (3, Value::Fixed64(t)) => t_ns = t,
                (4, Value::Fixed64(c)) => count = c,
                (5, Value::Fixed64(b)) => sum = f64::from_bits(b),
                (6, Value::Bytes(b)) => {
                    let (mut q, mut qv) = (0.0, 0.0);
                    let mut r = Reader::nested(b, payload_at(at, b));
                    while let Some((num, v, _)) = r.next_field()? {
                        match (num, v) {
                            (1, Value::Fixed64(x)) => q = f64::from_bits(x),
                            (2, Value::Fixed64(x)) => qv = f64::from_bits(x),
                            _ => {}
                        }
                    }
                    push_capped(&mut bufs.quantiles, [(q, qv)]);
                }
                (8, Value::Varint(f)) => flags = f,
                _ => {}
            }
        }
        let samples = bufs.quantiles.len() as u64 + 2;
        let PointBufs {
            names,
            quantiles,
            le,
            ..
        } = bufs;
        let invalid = (quantiles.len() > MAX_BUCKETS).then_some({
            || {
                format!(
                    "a data point of summary {:?} has more than {MAX_BUCKETS} quantiles",
                    names.base
                )
            }
        });
        let Some(t) = self.begin_point(p, base, 7, t_ns, &names.base, samples, invalid)? else {
            return Ok(());
        };
        let stale = flags & 1 != 0;
        self.emit_sum_count(names, t, Some(sum), count, stale, false);
        for &(q, v) in quantiles.iter() {
            push_float(le, q);
            let v = or_stale(stale, v);
            self.emit(
                Emitted::DataPoint,
                &names.base,
                Some(("quantile", le)),
                t,
                v,
                false,
            );
        }
        Ok(())
    }

    /// Appends one sample to the series made of the labels `emitted` takes, `__name__`
    /// = `name` and `extra`, which win over labels of the same name.
    fn emit(
        &mut self,
        emitted: Emitted,
        name: &str,
        extra: Option<(&str, &str)>,
        t: i64,
        value: f64,
        delta: bool,
    ) {
        self.last_stored = false;
        let scratch = &mut *self.scratch;
        let labels = match emitted {
            Emitted::DataPoint => &scratch.point,
            Emitted::TargetInfo => &scratch.target,
        };
        let extras = [("__name__", name), extra.unwrap_or(("", ""))];
        let extras = &extras[..1 + usize::from(extra.is_some())];
        scratch.canonical.clear();
        labels.canonical_with(extras, &mut scratch.canonical);
        let canonical = scratch.canonical.as_slice();
        let pending = if delta {
            match self
                .otlp
                .delta
                .next(canonical, t, value, self.app.min_valid_ms())
            {
                Ok(next) => Some(next),
                Err(e) => {
                    let reason = match e {
                        DeltaError::OutOfOrder => Reason::Sample(SampleError::OutOfOrder),
                        DeltaError::Full => Reason::SeriesLimit,
                    };
                    self.point_reason.get_or_insert(reason);
                    self.report.samples.reject(reason, 1, || match e {
                        DeltaError::OutOfOrder => format!(
                            "delta sample at {t} for {name:?} is not newer than the last one; it was not added to the running total"
                        ),
                        DeltaError::Full => format!(
                            "running totals for delta series are full; new series {name:?} not created"
                        ),
                    });
                    return;
                }
            }
        } else {
            None
        };
        let value = pending.map_or(value, |n| n.value);
        let counts = match emitted {
            Emitted::DataPoint => &mut self.counts,
            Emitted::TargetInfo => &mut self.target_counts,
        };
        counts.first = None;
        let sample = std::iter::once((t, value));
        let stored = match self.app.append_existing(canonical, sample.clone(), counts) {
            true => Ok(()),
            false => {
                let raw: Vec<(&[u8], &[u8])> = merge(labels.iter(), extras)
                    .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                    .collect();
                pipeline::create_series(&mut self.app, &raw, canonical, self.limits, sample, counts)
            }
        };
        if let Err((reason, why)) = stored {
            if emitted == Emitted::DataPoint {
                self.point_reason.get_or_insert(reason);
                self.report
                    .samples
                    .reject(reason, 1, || format!("{why}; series {name:?} not stored"));
            }
            return;
        }
        self.last_stored = true;
        if let (Some(next), None) = (pending, counts.first) {
            // The head stored the point: the running total moves.
            self.otlp.delta.commit(canonical, t, next);
        }
        if let (Emitted::DataPoint, Some((e, t))) = (emitted, counts.first) {
            self.point_reason.get_or_insert(Reason::Sample(e));
            if self.report.samples.problems.len() < MAX_PROBLEMS {
                let max_t = self.app.max_t();
                self.report.samples.problems.push(format!(
                    "{} at timestamp {t} for series {name:?}",
                    super::sample_problem(e, t, max_t)
                ));
            }
        }
    }
}

impl Walk<'_> {
    /// Stores the current point's exemplars whose value is in `(lower,
    /// upper]` with the series the last `emit` wrote (if it was stored),
    /// and drops them from the point's list.
    fn attach_exemplars(&mut self, lower: f64, upper: f64) {
        if self.exemplars.is_empty() {
            return;
        }
        let stored = self.last_stored;
        let series = self.scratch.canonical.as_slice();
        let report = &mut self.report.samples;
        let app = &mut self.app;
        self.exemplars.retain(|e| {
            let here = (e.value > lower && e.value <= upper)
                || (upper == f64::INFINITY && e.value.is_nan());
            if !here {
                return true;
            }
            if stored {
                report.exemplars += 1;
                let labels: Vec<(&[u8], &[u8])> = e
                    .labels
                    .iter()
                    .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                    .collect();
                pipeline::store_exemplar(app, report, series, &labels, e.value, e.t);
            }
            false
        });
    }
}

/// Reads the exemplars (field `field`) of the data point `p` into `out`,
/// which is cleared first.
fn read_exemplars(
    p: &[u8],
    base: usize,
    field: u32,
    out: &mut Vec<PointExemplar>,
) -> Result<(), DecodeError> {
    out.clear();
    let mut r = Reader::nested(p, base);
    while let Some((num, v, at)) = r.next_field()? {
        let (true, Value::Bytes(e)) = (num == field, v) else {
            continue;
        };
        let mut ex = PointExemplar {
            labels: Vec::new(),
            value: 0.0,
            t: 0,
        };
        let (mut trace, mut span) = (None, None);
        let mut er = Reader::nested(e, payload_at(at, e));
        while let Some((num, v, at)) = er.next_field()? {
            match (num, v) {
                (2, Value::Fixed64(t)) => ex.t = (t / 1_000_000) as i64,
                (3, Value::Fixed64(b)) => ex.value = f64::from_bits(b),
                (6, Value::Fixed64(i)) => ex.value = i as i64 as f64,
                (4, Value::Bytes(b)) if !b.is_empty() => span = Some(hex(b)),
                (5, Value::Bytes(b)) if !b.is_empty() => trace = Some(hex(b)),
                (7, Value::Bytes(kv)) => {
                    let (key, value) = split_key_value(kv, payload_at(at, kv))?;
                    let mut text = String::new();
                    if let (Ok(key), Some((vb, vat))) = (std::str::from_utf8(key), value) {
                        if labels::any_value_string(vb, vat, &mut text, 0).is_ok() {
                            ex.labels.push((key.to_owned(), text));
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(span) = span {
            ex.labels.push(("span_id".to_owned(), span));
        }
        if let Some(trace) = trace {
            ex.labels.push(("trace_id".to_owned(), trace));
        }
        out.push(ex);
    }
    Ok(())
}

/// Lowercase hex, as trace and span ids are written.
fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for byte in b {
        let _ = write!(s, "{byte:02x}");
    }
    s
}

/// Merges sorted labels with sorted `extras`; an extra replaces a label of
/// the same name.
fn merge<'a>(
    labels: impl Iterator<Item = (&'a str, &'a str)>,
    extras: &'a [(&'a str, &'a str)],
) -> impl Iterator<Item = (&'a str, &'a str)> {
    let mut labels = labels.peekable();
    let mut extras = extras.iter().copied().peekable();
    std::iter::from_fn(move || match (labels.peek(), extras.peek()) {
        (Some(l), Some(e)) => {
            if e.0 < l.0 {
                extras.next()
            } else if e.0 == l.0 {
                labels.next();
                extras.next()
            } else {
                labels.next()
            }
        }
        (Some(_), None) => labels.next(),
        (None, _) => extras.next(),
    })
}

fn zigzag32(v: u64) -> i32 {
    let v = v as u32;
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// The little-endian 8-byte values of a packed run (whole, after the check).
fn fixed64s(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks_exact(8).map(|c| {
        let mut a = [0u8; 8];
        a.copy_from_slice(c);
        u64::from_le_bytes(a)
    })
}

/// An exponential histogram point's parts, for [`native_from_exponential`].
struct NativeParts<'a> {
    scale: i32,
    zero_count: u64,
    count: u64,
    sum: Option<f64>,
    stale: bool,
    positive: (i32, &'a [u64]),
    negative: (i32, &'a [u64]),
}

/// Prometheus' OTLP receiver's zero threshold for converted histograms.
const OTLP_ZERO_THRESHOLD: f64 = 1e-128;

/// The native histogram Prometheus' OTLP receiver makes of an exponential
/// histogram point (`exponentialToNativeHistogram`): the scale becomes the
/// schema, scales above 8 are merged down to 8, the hint is unknown, and a
/// point with no recorded value is the stale marker. The scale was checked
/// to be at least -4.
fn native_from_exponential(p: NativeParts<'_>) -> crate::histogram::Histogram {
    let (schema, down) = if p.scale > 8 {
        (8, p.scale - 8)
    } else {
        (p.scale, 0)
    };
    let (positive_spans, positive_buckets) = buckets_layout(p.positive.1, p.positive.0, down);
    let (negative_spans, negative_buckets) = buckets_layout(p.negative.1, p.negative.0, down);
    let (sum, count) = if p.stale {
        (f64::from_bits(STALE_NAN), STALE_NAN)
    } else {
        (p.sum.unwrap_or(0.0), p.count)
    };
    crate::histogram::Histogram {
        hint: crate::histogram::CounterResetHint::Unknown,
        schema,
        zero_threshold: OTLP_ZERO_THRESHOLD,
        zero_count: p.zero_count,
        count,
        sum,
        positive_spans,
        negative_spans,
        positive_buckets,
        negative_buckets,
        custom_values: Vec::new(),
    }
}

/// OTLP bucket counts from `offset` as native spans and deltas, merging
/// `2^down` buckets into one (`convertBucketsLayout` with its offset
/// adjusted: OTLP bucket `i` covers `(base^i, base^(i+1)]`, native bucket
/// `i` covers `(base^(i-1), base^i]`). Kept as Prometheus writes it, gaps
/// of up to two buckets filled with empty ones and empty runs at the start
/// of a merge skipped the same way.
fn buckets_layout(
    counts: &[u64],
    offset: i32,
    down: i32,
) -> (Vec<crate::histogram::Span>, Vec<i64>) {
    use crate::histogram::Span;
    if counts.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // Go's int32 arithmetic wraps, and its shifts by the width or more
    // give 0 or -1; so do these (offsets and scales come off the wire).
    let shr = |i: i32| {
        if down >= 32 {
            i >> 31
        } else {
            i >> down.max(0)
        }
    };
    let idx = |i: i32| shr(i).wrapping_add(1);
    let mut spans = vec![Span {
        offset: idx(offset),
        length: 0,
    }];
    let mut deltas: Vec<i64> = Vec::with_capacity(counts.len());
    let mut prev = 0i64;
    let mut append = |spans: &mut Vec<Span>, deltas: &mut Vec<i64>, c: i64| {
        if let Some(s) = spans.last_mut() {
            s.length += 1;
        }
        deltas.push(c.wrapping_sub(prev));
        prev = c;
    };
    let mut bucket_idx = idx(offset);
    let mut count = 0i64;
    for (i, &c) in counts.iter().enumerate() {
        let next = idx((i as i32).wrapping_add(offset));
        if bucket_idx == next {
            count = count.wrapping_add(c as i64);
            continue;
        }
        if count == 0 {
            count = c as i64;
            continue;
        }
        let gap = next.wrapping_sub(bucket_idx).wrapping_sub(1);
        if gap > 2 {
            spans.push(Span {
                offset: gap,
                length: 0,
            });
        } else {
            for _ in 0..gap {
                append(&mut spans, &mut deltas, 0);
            }
        }
        append(&mut spans, &mut deltas, count);
        count = c as i64;
        bucket_idx = next;
    }
    let last = (counts.len() as i32).wrapping_add(offset).wrapping_sub(1);
    let gap = idx(last).wrapping_sub(bucket_idx);
    if gap > 2 {
        spans.push(Span {
            offset: gap,
            length: 0,
        });
    } else {
        for _ in 0..gap {
            append(&mut spans, &mut deltas, 0);
        }
    }
    append(&mut spans, &mut deltas, count);
    (spans, deltas)
}

/// Reads an exponential histogram `Buckets` into `out`; returns its offset.
fn buckets(b: &[u8], base: usize, out: &mut Vec<u64>) -> Result<i32, DecodeError> {
    let mut offset = 0;
    let mut r = Reader::nested(b, base);
    while let Some((num, v, at)) = r.next_field()? {
        match (num, v) {
            (1, Value::Varint(o)) => offset = zigzag32(o),
            (2, Value::Varint(c)) => push_capped(out, [c]),
            (2, Value::Bytes(run)) => {
                for c in (PackedVarints { buf: run }) {
                    push_capped(out, [c.map_err(|what| DecodeError { what, offset: at })?]);
                }
            }
            _ => {}
        }
    }
    Ok(offset)
}

/// Appends `items` to `out` until it holds one more than [`MAX_BUCKETS`]:
/// enough to reject the point, and no more memory than that.
fn push_capped<T>(out: &mut Vec<T>, items: impl IntoIterator<Item = T>) {
    let room = (MAX_BUCKETS + 1).saturating_sub(out.len());
    out.extend(items.into_iter().take(room));
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    proptest::proptest! {
        /// Converted buckets keep every observation; at the same scale each
        /// non-empty OTLP bucket i lands on native index i + 1.
        #[test]
        fn exponential_buckets_keep_their_counts(
            counts in proptest::collection::vec(0u64..50, 1..40),
            offset in -30i32..30,
            down in 0i32..4,
        ) {
            let (spans, deltas) = buckets_layout(&counts, offset, down);
            let abs: Vec<i64> = deltas
                .iter()
                .scan(0i64, |a, d| {
                    *a += d;
                    Some(*a)
                })
                .collect();
            proptest::prop_assert_eq!(crate::histogram::bucket_count(&spans), abs.len());
            proptest::prop_assert!(abs.iter().all(|&c| c >= 0));
            proptest::prop_assert_eq!(abs.iter().sum::<i64>() as u64, counts.iter().sum::<u64>());
            if down == 0 {
                let at: std::collections::BTreeMap<i64, i64> =
                    crate::histogram::BucketIndexes::new(&spans).zip(abs.iter().copied()).filter(|x| x.1 != 0).collect();
                let want: std::collections::BTreeMap<i64, i64> = counts
                    .iter()
                    .enumerate()
                    .filter(|x| *x.1 != 0)
                    .map(|(i, &c)| (i64::from(offset) + i as i64 + 1, c as i64))
                    .collect();
                proptest::prop_assert_eq!(at, want);
            }
        }
    }

    #[test]
    fn exponential_buckets_with_wild_offsets_do_not_panic() {
        for offset in [i32::MIN, i32::MAX, i32::MAX - 1, -1] {
            for down in [0, 1, 12, 31, 32, 1_000_000] {
                let _ = buckets_layout(&[1, 0, 0, 0, 2], offset, down);
            }
        }
    }
    use crate::proto::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
    use crate::proto::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
    use crate::proto::opentelemetry::proto::metrics::v1::{
        self as m, metric::Data, number_data_point,
    };
    use crate::proto::opentelemetry::proto::resource::v1::Resource;
    use crate::storage::index::{MatchOp, Matcher};
    use crate::storage::{Db, HeadOptions};
    use proptest::prelude::*;
    use prost::Message;

    #[derive(Debug, Clone)]
    struct Point {
        attrs: Vec<(&'static str, String)>,
        value: f64,
    }

    #[derive(Debug, Clone)]
    struct Metric {
        name: &'static str,
        unit: &'static str,
        /// 0 gauge, 1 monotonic sum, 2 non-monotonic sum.
        kind: u8,
        points: Vec<Point>,
    }

    fn metric_strategy() -> impl Strategy<Value = Metric> {
        let key = prop::sample::select(vec![
            "http.route",
            "http_route",
            "a.b",
            "0x",
            "_p",
            "job",
            "k",
            "__name__",
        ]);
        let attrs = prop::collection::vec((key, "[a-z0-9 /._-]{0,6}"), 0..4);
        let point = (attrs, -1e6f64..1e6).prop_map(|(attrs, value)| Point { attrs, value });
        (
            prop::sample::select(vec![
                "http.requests",
                "queue.depth",
                "cpu",
                "0errors",
                "a..b",
            ]),
            prop::sample::select(vec!["", "s", "By/s", "1", "{req}"]),
            0u8..3,
            prop::collection::vec(point, 1..5),
        )
            .prop_map(|(name, unit, kind, points)| Metric {
                name,
                unit,
                kind,
                points,
            })
    }

    /// The labels Prometheus' OTLP receiver would give a point, written
    /// plainly from the rules: sanitise keys, merge collisions in key
    /// order, drop `__name__` attributes and empty values, `job` from the
    /// resource wins.
    fn reference(m: &Metric, p: &Point) -> BTreeMap<String, String> {
        let mut attrs: Vec<(&str, &str)> = p
            .attrs
            .iter()
            .filter(|(k, _)| *k != "__name__")
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        attrs.sort_by(|a, b| a.0.cmp(b.0));
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in attrs {
            let name = names::label_name(k).expect("valid key");
            out.entry(name)
                .and_modify(|e| {
                    e.push(';');
                    e.push_str(v);
                })
                .or_insert_with(|| v.to_owned());
        }
        out.retain(|_, v| !v.is_empty());
        out.insert("job".into(), "svc".into());
        let kind = match m.kind {
            0 | 2 => NameKind::Gauge,
            _ => NameKind::Counter,
        };
        out.insert(
            "__name__".into(),
            names::metric_name(m.name, m.unit, kind).expect("valid name"),
        );
        out
    }

    fn encode(metrics: &[Metric], t0: i64) -> Vec<u8> {
        let mut t = t0;
        let metrics = metrics
            .iter()
            .map(|mt| {
                let points = mt
                    .points
                    .iter()
                    .map(|p| {
                        t += 1;
                        m::NumberDataPoint {
                            attributes: p
                                .attrs
                                .iter()
                                .map(|(k, v)| KeyValue {
                                    key: (*k).into(),
                                    value: Some(AnyValue {
                                        value: Some(any_value::Value::StringValue(v.clone())),
                                    }),
                                    ..Default::default()
                                })
                                .collect(),
                            time_unix_nano: t as u64 * 1_000_000,
                            value: Some(number_data_point::Value::AsDouble(p.value)),
                            ..Default::default()
                        }
                    })
                    .collect();
                let data = match mt.kind {
                    0 => Data::Gauge(m::Gauge {
                        data_points: points,
                    }),
                    k => Data::Sum(m::Sum {
                        data_points: points,
                        aggregation_temporality: 2,
                        is_monotonic: k == 1,
                    }),
                };
                m::Metric {
                    name: mt.name.into(),
                    unit: mt.unit.into(),
                    data: Some(data),
                    ..Default::default()
                }
            })
            .collect();
        ExportMetricsServiceRequest {
            resource_metrics: vec![m::ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("svc".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_metrics: vec![m::ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    /// The same request in the OTLP JSON mapping, 64-bit integers as
    /// strings, as SDKs write it.
    fn encode_json(metrics: &[Metric], t0: i64) -> String {
        use serde_json::json;
        let mut t = t0;
        let metrics: Vec<_> = metrics
            .iter()
            .map(|mt| {
                let points: Vec<_> = mt
                    .points
                    .iter()
                    .map(|p| {
                        t += 1;
                        let attrs: Vec<_> = p
                            .attrs
                            .iter()
                            .map(|(k, v)| json!({"key": k, "value": {"stringValue": v}}))
                            .collect();
                        json!({
                            "attributes": attrs,
                            "timeUnixNano": (t as u64 * 1_000_000).to_string(),
                            "asDouble": p.value,
                        })
                    })
                    .collect();
                let mut m = json!({"name": mt.name, "unit": mt.unit});
                match mt.kind {
                    0 => m["gauge"] = json!({"dataPoints": points}),
                    k => {
                        m["sum"] = json!({
                            "dataPoints": points,
                            "aggregationTemporality": 2,
                            "isMonotonic": k == 1,
                        })
                    }
                }
                m
            })
            .collect();
        json!({"resourceMetrics": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeMetrics": [{"metrics": metrics}],
        }]})
        .to_string()
    }

    #[test]
    fn huge_points_are_rejected_without_holding_their_memory() {
        let head = Db::new(HeadOptions::default());
        let otlp = Otlp::new(OtlpOptions::default(), 1000);
        let n = 100_000;
        let point = m::HistogramDataPoint {
            time_unix_nano: 5_000_000,
            count: n,
            bucket_counts: vec![1; n as usize + 1],
            explicit_bounds: (0..n).map(|i| i as f64).collect(),
            ..Default::default()
        };
        let exp = m::ExponentialHistogramDataPoint {
            time_unix_nano: 5_000_000,
            count: n,
            positive: Some(m::exponential_histogram_data_point::Buckets {
                offset: 0,
                bucket_counts: vec![1; n as usize],
            }),
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![m::ResourceMetrics {
                scope_metrics: vec![m::ScopeMetrics {
                    metrics: vec![
                        m::Metric {
                            name: "h".into(),
                            data: Some(Data::Histogram(m::Histogram {
                                data_points: vec![point],
                                aggregation_temporality: 2,
                            })),
                            ..Default::default()
                        },
                        m::Metric {
                            name: "e".into(),
                            data: Some(Data::ExponentialHistogram(m::ExponentialHistogram {
                                data_points: vec![exp],
                                aggregation_temporality: 2,
                            })),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let report = append_export_request(
            &head,
            &otlp,
            &LabelLimits::default(),
            &req.encode_to_vec(),
            0,
        )
        .expect("valid");
        assert_eq!(report.rejected_points[Reason::InvalidDataPoint.index()], 2);
        assert_eq!(report.samples.accepted, 0);
        assert!(
            report.message().contains("over the limit of 1024"),
            "{}",
            report.message()
        );
        assert_eq!(head.head_stats().series, 0);
        SCRATCH.with(|kept| {
            kept.with(|s| {
                assert!(s.bufs.counts.capacity() < 4 * MAX_BUCKETS);
                assert!(s.bufs.bounds.capacity() < 4 * MAX_BUCKETS);
            })
        });
    }

    proptest! {
        /// JSON and protobuf bodies of the same request decode the same.
        #[test]
        fn json_transcodes_to_the_same_request(metrics in prop::collection::vec(metric_strategy(), 1..5)) {
            let mut from_json = Vec::new();
            json::to_protobuf(encode_json(&metrics, 7).as_bytes(), &mut from_json).expect("valid JSON");
            let a = ExportMetricsServiceRequest::decode(from_json.as_slice()).expect("protobuf");
            let b = ExportMetricsServiceRequest::decode(encode(&metrics, 7).as_slice()).expect("protobuf");
            prop_assert_eq!(a, b);
        }

        /// Every point is stored, at its time, under exactly the labels
        /// the rules give it.
        #[test]
        fn points_land_under_the_reference_labels(metrics in prop::collection::vec(metric_strategy(), 1..5)) {
            let head = Db::new(HeadOptions { shards: 2, ..HeadOptions::default() });
            let otlp = Otlp::new(OtlpOptions::default(), 1000);
            let t0 = 1_000_000;
            let body = encode(&metrics, t0);
            let report = append_export_request(&head, &otlp, &LabelLimits::default(), &body, t0)
                .expect("valid request");
            let points: usize = metrics.iter().map(|m| m.points.len()).sum();
            prop_assert_eq!(report.points, points as u64);
            prop_assert_eq!(report.rejected_points_total(), 0, "{}", report.message());
            let mut t = t0;
            for mt in &metrics {
                for p in &mt.points {
                    t += 1;
                    let want = reference(mt, p);
                    let matchers: Vec<Matcher> = want
                        .iter()
                        .map(|(n, v)| Matcher::new(MatchOp::Equal, n, v).expect("matcher"))
                        .collect();
                    let found = head.querier().select_samples(&matchers, t, t);
                    let exact: Vec<_> = found
                        .iter()
                        .filter(|s| s.labels.len() == want.len())
                        .collect();
                    prop_assert_eq!(exact.len(), 1, "series {:?} not found in {:?}", want, found);
                    prop_assert_eq!(&exact[0].samples, &vec![(t, p.value)]);
                }
            }
        }
    }
}
