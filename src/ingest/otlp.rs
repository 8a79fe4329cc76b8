//! OTLP metrics ingest: an `ExportMetricsServiceRequest` appended to the
//! head under the names Prometheus' own OTLP receiver gives its data
//! (`UnderscoreEscapingWithSuffixes`; `docs/wire-notes.md` §2).
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
//!
//! By role: `walk` (resources, metrics, a point's labels and time, and
//! storing a sample through the pipeline), `points` (each point type and
//! the series it becomes), `exemplars`, and [`delta`] (running totals).

pub mod delta;
mod exemplars;
pub mod json;
pub mod labels;
pub mod names;
mod points;
mod walk;

pub use crate::protocol::otlp as schema;

use std::fmt::Write as _;

use super::pipeline::{self, Door};
use super::relabel::Relabel;
use super::validate::{LabelError, LabelLimits};
use super::{Dropped, IngestReport, Reason, MAX_AHEAD_MS, MAX_PROBLEMS};
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
    /// With relabel rules: the canonical bytes of the series the point's
    /// labels became, which its exemplars go to.
    relabelled: Vec<u8>,
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
            + self.relabelled.heap_bytes()
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
    let door = Door {
        limits,
        relabel: &Relabel::default(),
        ha: None,
    };
    append_export_request_admitted(db, otlp, &door, body, now_ms, &mut |_| true)
}

/// [`append_export_request`], asking `admit` with the request's data
/// points, once the request is checked and before anything is stored,
/// whether it may be stored at all (a tenant's rate limit). Refused,
/// nothing is stored and the report is empty. Series pass through the
/// door's relabel rules and label limits.
pub fn append_export_request_admitted(
    db: &Db,
    otlp: &Otlp,
    door: &Door<'_>,
    body: &[u8],
    now_ms: i64,
    admit: &mut dyn FnMut(u64) -> bool,
) -> Result<OtlpReport, DecodeError> {
    let points = schema::check(body, &schema::REQUEST)?;
    if !admit(points) {
        return Ok(OtlpReport::default());
    }
    SCRATCH.with(|kept| {
        kept.with(|scratch| {
            let mut w = Walk {
                app: db.appender(now_ms.saturating_add(MAX_AHEAD_MS)),
                otlp,
                limits: door.limits,
                door: *door,
                learned: Vec::new(),
                report: OtlpReport::default(),
                counts: AppendCounts::default(),
                target_counts: AppendCounts::default(),
                point_reason: None,
                t_range: (i64::MAX, i64::MIN),
                scratch,
                last_stored: false,
                start_ms: 0,
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
            w.app.remember_refs(&w.learned);
            let mut report = w.report;
            pipeline::tally(&mut report.samples, &w.counts);
            report.samples.accepted += w.target_counts.appended;
            report.samples.commit = w.app.commit();
            walked?;
            Ok(report)
        })
    })
}

/// An OTLP exemplar as Prometheus' translator labels it: `trace_id` and
/// `span_id` in lowercase hex, then its filtered string attributes.
#[derive(Debug, Clone)]
struct PointExemplar {
    labels: Vec<(String, String)>,
    value: f64,
    t: i64,
}

struct Walk<'a> {
    app: Appender<'a>,
    otlp: &'a Otlp,
    limits: &'a LabelLimits,
    /// The relabel rules and label limits new series pass.
    door: Door<'a>,
    /// Keys of series found or made through relabel rules, and their
    /// series, remembered once the request is walked.
    learned: Vec<(u128, crate::storage::SeriesRef)>,
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
    /// The data point's start time in ms (`start_time_unix_nano`), 0 when
    /// it has none: kept with its samples under `st-storage`.
    start_ms: i64,
    /// The current data point's exemplars.
    exemplars: Vec<PointExemplar>,
}

/// How a point's values are stored: as sent, or (delta points with
/// `--otlp-delta-to-cumulative`) added to the series' running total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Temporality {
    Cumulative,
    Delta,
}

/// Whether a point carries values, or says its series has none now (the
/// `NO_RECORDED_VALUE` flag), which is stored as the stale marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Staleness {
    Recorded,
    NoRecordedValue,
}

impl Staleness {
    /// From a data point's `flags` field.
    fn of(flags: u64) -> Self {
        match flags & 1 {
            0 => Self::Recorded,
            _ => Self::NoRecordedValue,
        }
    }

    /// The stale marker for a point with no recorded value, else `v`.
    fn value(self, v: f64) -> f64 {
        match self {
            Self::Recorded => v,
            Self::NoRecordedValue => f64::from_bits(STALE_NAN),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::points::buckets_layout;
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
