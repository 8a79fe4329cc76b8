//! The ingest load generator behind `sluice-loadgen`, `scripts/bench-peers`
//! and the `http_load` bench: a realistic workload pre-encoded into request
//! bodies, then pushed over K keep-alive HTTP/1.1 connections to any
//! receiver (Sluice, Prometheus, VictoriaMetrics, or the null sink here).
//!
//! Everything is encoded before the clock starts, so the generator's own
//! work during a run is sending bytes and reading replies; its ceiling is
//! measured by driving [`null_sink`] the same way.
//!
//! Series are split among connections (series `i` belongs to connection
//! `i % K`, as Prometheus' shards own series by hash), and each connection
//! sends its series' samples in time order, so a receiver that refuses
//! out-of-order samples sees none.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

use sluice::proto::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
use sluice::proto::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
use sluice::proto::opentelemetry::proto::metrics::v1 as otlp;
use sluice::proto::opentelemetry::proto::resource::v1::Resource;

/// What the requests carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Remote-write 1.0, one TimeSeries per sample, every series once per
    /// round (what Prometheus sends).
    Steady,
    /// Like steady, but a tenth of every request's samples belong to series
    /// never seen before.
    Churn,
    /// Remote-write 1.0, every sample of a series in one TimeSeries.
    Backfill,
    /// The steady load as OTLP/HTTP protobuf (gzip), one resource per target.
    Otlp,
    /// The steady load as remote-write 2.0: one symbol table per request,
    /// labels as references (what Prometheus 3 sends with
    /// `protobuf_message: io.prometheus.write.v2.Request`).
    Rw2,
    /// The steady load with a native histogram (integer counts, schema
    /// 3, 12 positive buckets and a zero bucket, growing as a latency
    /// histogram does) in place of every float sample: remote-write 1.0
    /// `TimeSeries.histograms`, as Prometheus 3 sends a scraped native
    /// histogram with `send_native_histograms: true`.
    Histograms,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "steady" => Ok(Mode::Steady),
            "churn" => Ok(Mode::Churn),
            "backfill" => Ok(Mode::Backfill),
            "otlp" => Ok(Mode::Otlp),
            "rw2" => Ok(Mode::Rw2),
            "histograms" => Ok(Mode::Histograms),
            _ => Err(format!(
                "unknown mode {s:?}: steady, churn, backfill, otlp or rw2"
            )),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Steady => "steady",
            Mode::Churn => "churn",
            Mode::Backfill => "backfill",
            Mode::Otlp => "otlp",
            Mode::Rw2 => "rw2",
            Mode::Histograms => "histograms",
        })
    }
}

/// The shape of a load.
#[derive(Debug, Clone)]
pub struct Workload {
    /// What the requests carry.
    pub mode: Mode,
    /// Active series.
    pub series: usize,
    /// Samples per series (rounds).
    pub samples: usize,
    /// Samples per request.
    pub per_request: usize,
    /// Concurrent connections.
    pub connections: usize,
    /// Timestamp of the first sample, in milliseconds.
    pub start_ms: i64,
    /// Spacing of a series' samples, in milliseconds.
    pub interval_ms: i64,
}

impl Workload {
    /// The benchmark load: 100k series × 120 samples at 15 s, 2000 samples
    /// per request over 8 connections, ending at `now_ms`.
    pub fn standard(mode: Mode, now_ms: i64) -> Workload {
        let mut w = Workload {
            mode,
            series: 100_000,
            samples: 120,
            per_request: 2_000,
            connections: 8,
            start_ms: 0,
            interval_ms: 15_000,
        };
        w.end_at(now_ms);
        w
    }

    /// Places the samples so that the last one falls at `now_ms`.
    pub fn end_at(&mut self, now_ms: i64) {
        self.start_ms = now_ms - (self.samples.max(1) as i64 - 1) * self.interval_ms;
    }

    /// Places the samples to end at `now_ms` unless their span would then
    /// cross a multiple of `block_ms` (the 2 h chunk and block range that
    /// Prometheus and Sluice cut every series' chunk at): then they end
    /// just before the most recent such boundary. Every run then measures
    /// one chunk range per series instead of two in a quarter of the hours
    /// of the day (two chunk ranges add ~200 bytes per series of chunk
    /// overhead to every receiver that cuts at the boundary).
    pub fn end_within_block(&mut self, now_ms: i64, block_ms: i64) {
        self.end_at(now_ms);
        let boundary = now_ms.div_euclid(block_ms) * block_ms;
        let span = now_ms - self.start_ms;
        if self.start_ms < boundary && span < block_ms {
            self.end_at(boundary - 1);
        }
    }

    /// Series the load creates, churned ones included.
    pub fn total_series(&self) -> usize {
        if self.mode == Mode::Churn {
            self.series + self.steady_requests() * (self.per_request / 10)
        } else {
            self.series
        }
    }

    /// Requests the steady rotation takes (the churn load has as many).
    fn steady_requests(&self) -> usize {
        (0..self.connections)
            .map(|c| {
                let mine = self.series.saturating_sub(c).div_ceil(self.connections);
                let per = match self.mode {
                    Mode::Churn => self.per_request - self.per_request / 10,
                    _ => self.per_request,
                };
                (mine * self.samples).div_ceil(per.max(1))
            })
            .sum()
    }
}

/// One pre-encoded request body.
#[derive(Debug, Clone)]
pub struct Body {
    /// The bytes as sent.
    pub bytes: Bytes,
    /// Samples it carries.
    pub samples: u32,
}

/// The request bodies of a load, one ordered list per connection.
#[derive(Debug)]
pub struct Encoded {
    /// `per_connection[c]` is sent in order on connection `c`.
    pub per_connection: Vec<Vec<Body>>,
    /// Headers every request carries.
    pub headers: Vec<(&'static str, &'static str)>,
    /// Path to post to on a receiver.
    pub path: String,
}

impl Encoded {
    /// Samples in all bodies.
    pub fn samples(&self) -> u64 {
        self.per_connection
            .iter()
            .flatten()
            .map(|b| u64::from(b.samples))
            .sum()
    }

    /// Bodies in all.
    pub fn requests(&self) -> usize {
        self.per_connection.iter().map(Vec::len).sum()
    }

    /// Bytes sent in all.
    pub fn bytes(&self) -> usize {
        self.per_connection
            .iter()
            .flatten()
            .map(|b| b.bytes.len())
            .sum()
    }
}

const METRICS: [(&str, bool); 20] = [
    ("node_cpu_seconds_total", true),
    ("node_network_receive_bytes_total", true),
    ("node_network_transmit_bytes_total", true),
    ("node_disk_read_bytes_total", true),
    ("node_disk_written_bytes_total", true),
    ("http_requests_total", true),
    ("http_request_errors_total", true),
    ("process_cpu_seconds_total", true),
    ("go_gc_cycles_total", true),
    ("rpc_calls_total", true),
    ("node_memory_available_bytes", false),
    ("node_load1", false),
    ("node_filesystem_free_bytes", false),
    ("process_resident_memory_bytes", false),
    ("go_goroutines", false),
    ("http_inflight_requests", false),
    ("queue_depth", false),
    ("temperature_celsius", false),
    ("node_entropy_available_bits", false),
    ("up_ratio", false),
];
const JOBS: [&str; 5] = ["node", "api", "db", "cache", "queue"];
const MODES: [&str; 5] = ["idle", "user", "system", "iowait", "steal"];
const ENVS: [&str; 2] = ["production", "staging"];
const REGIONS: [&str; 3] = ["eu-west-1", "us-east-1", "ap-south-1"];

/// The seven labels of series `i`, sorted by name: a target (job, instance,
/// env, region, zone) exports 100 series, 20 metrics × 5 modes.
pub fn series_labels(i: usize) -> [(&'static str, String); 7] {
    let target = i / 100;
    let region = REGIONS[target % 3];
    [
        ("__name__", METRICS[i % 20].0.to_owned()),
        ("env", ENVS[target % 2].to_owned()),
        (
            "instance",
            format!(
                "10.{}.{}.{}:9100",
                target >> 16,
                (target >> 8) & 255,
                target & 255
            ),
        ),
        ("job", JOBS[target % 5].to_owned()),
        ("mode", MODES[(i / 20) % 5].to_owned()),
        ("region", region.to_owned()),
        (
            "zone",
            format!("{region}{}", ['a', 'b', 'c'][(target / 3) % 3]),
        ),
    ]
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser: a cheap, well-spread deterministic hash.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The value series `i` reports at step `k`, given its previous value:
/// counters rise by whole amounts, gauges wander by tenths around a level.
fn next_value(i: usize, k: usize, prev: Option<f64>) -> f64 {
    let h = mix((i as u64) << 20 | k as u64);
    let counter = METRICS[i % 20].1;
    match (counter, prev) {
        (true, None) => (h % 100_000) as f64,
        (true, Some(v)) => v + (h % 50) as f64,
        (false, None) => (h % 10_000) as f64 / 10.0,
        (false, Some(v)) => ((v * 10.0).round() + (h % 21) as f64 - 10.0) / 10.0,
    }
}

fn put_len_field(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// Series `i`'s labels as remote-write `Label` fields (TimeSeries field 1).
fn encoded_labels(i: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(200);
    let mut label = Vec::with_capacity(64);
    for (name, value) in series_labels(i) {
        label.clear();
        put_len_field(&mut label, 1, name.as_bytes());
        put_len_field(&mut label, 2, value.as_bytes());
        put_len_field(&mut out, 1, &label);
    }
    out
}

/// Appends a TimeSeries (WriteRequest field 1) with `labels` and samples.
fn put_series(out: &mut Vec<u8>, labels: &[u8], samples: &[(i64, f64)], scratch: &mut Vec<u8>) {
    scratch.clear();
    scratch.extend_from_slice(labels);
    let mut sample = Vec::with_capacity(20);
    for &(t, v) in samples {
        sample.clear();
        sample.push(0x09); // field 1, 64-bit: value
        sample.extend_from_slice(&v.to_le_bytes());
        sample.push(0x10); // field 2, varint: timestamp
        encode_varint(t as u64, &mut sample);
        put_len_field(scratch, 2, &sample);
    }
    put_len_field(out, 1, scratch);
}

/// Series `i`'s native histogram at step `k`: 12 buckets from an offset
/// of its own, each gaining a few observations per step, and a zero
/// bucket gaining one.
pub fn histogram_at(i: usize, k: usize) -> sluice::histogram::Histogram {
    use sluice::histogram::{Histogram, Span};
    const BUCKETS: usize = 12;
    let mut counts = [0u64; BUCKETS];
    for (j, c) in counts.iter_mut().enumerate() {
        let h = mix(((i as u64) << 8) | j as u64);
        *c = h % 50 + (k as u64) * ((h >> 8) % 5);
    }
    let zero = k as u64;
    let count = zero + counts.iter().sum::<u64>();
    let mut prev = 0i64;
    let deltas = counts
        .iter()
        .map(|&c| {
            let d = c as i64 - prev;
            prev = c as i64;
            d
        })
        .collect();
    Histogram {
        schema: 3,
        zero_threshold: 2f64.powi(-128),
        zero_count: zero,
        count,
        sum: count as f64 * 0.0125,
        positive_spans: vec![Span {
            offset: (mix(i as u64) % 24) as i32 - 40,
            length: BUCKETS as u32,
        }],
        positive_buckets: deltas,
        ..Default::default()
    }
}

/// Appends a TimeSeries with `labels` and a native histogram per point:
/// `k` is the step of each (the histogram's growth).
fn put_histogram_series(
    out: &mut Vec<u8>,
    i: usize,
    labels: &[u8],
    points: &[(i64, usize)],
    scratch: &mut Vec<u8>,
) {
    scratch.clear();
    scratch.extend_from_slice(labels);
    let mut msg = Vec::with_capacity(128);
    for &(t, k) in points {
        msg.clear();
        let h = sluice::histogram::HistSample::Int(histogram_at(i, k));
        sluice::protocol::histogram::encode(t, &h, &mut msg);
        put_len_field(scratch, 4, &msg);
    }
    put_len_field(out, 1, scratch);
}

/// One sample of the load: series, timestamp, value.
type Point = (usize, i64, f64);

/// The samples of connection `c`, in the order they are sent, cut into
/// requests.
fn connection_requests(w: &Workload, c: usize) -> Vec<Vec<Point>> {
    let mine: Vec<usize> = (c..w.series).step_by(w.connections.max(1)).collect();
    let mut values: Vec<Option<f64>> = vec![None; mine.len()];
    let mut sample_of = |slot: usize, k: usize| -> Point {
        let i = mine[slot];
        let v = next_value(i, k, values[slot]);
        values[slot] = Some(v);
        (i, w.start_ms + k as i64 * w.interval_ms, v)
    };
    let mut order: Vec<Point> = Vec::with_capacity(mine.len() * w.samples);
    match w.mode {
        Mode::Backfill => {
            for slot in 0..mine.len() {
                for k in 0..w.samples {
                    order.push(sample_of(slot, k));
                }
            }
        }
        _ => {
            for k in 0..w.samples {
                for slot in 0..mine.len() {
                    order.push(sample_of(slot, k));
                }
            }
        }
    }
    if w.mode != Mode::Churn {
        return order
            .chunks(w.per_request.max(1))
            .map(<[_]>::to_vec)
            .collect();
    }
    // Churn: every request also brings per_request/10 series never seen,
    // numbered after the steady ones, unique to this connection.
    let new_per = w.per_request / 10;
    let old_per = (w.per_request - new_per).max(1);
    let mut next_new = w.series + c;
    order
        .chunks(old_per)
        .map(|old| {
            let mut req = old.to_vec();
            let t = old.last().map_or(w.start_ms, |p| p.1);
            for _ in 0..new_per {
                req.push((next_new, t, next_value(next_new, 0, None)));
                next_new += w.connections.max(1);
            }
            req
        })
        .collect()
}

/// The points as remote-write 1.0 histograms: the step is read back from
/// the timestamp.
fn remote_write_histograms_body(
    points: &[Point],
    w: &Workload,
    labels: &dyn Fn(usize) -> Vec<u8>,
) -> Vec<u8> {
    let mut raw = Vec::with_capacity(points.len() * 200);
    let mut scratch = Vec::with_capacity(4096);
    let mut run: Vec<(i64, usize)> = Vec::new();
    let mut k = 0;
    while k < points.len() {
        let i = points[k].0;
        run.clear();
        while k < points.len() && points[k].0 == i {
            let t = points[k].1;
            let step = ((t - w.start_ms) / w.interval_ms.max(1)) as usize;
            run.push((t, step));
            k += 1;
        }
        put_histogram_series(&mut raw, i, &labels(i), &run, &mut scratch);
    }
    raw
}

fn remote_write_body(points: &[Point], labels: &dyn Fn(usize) -> Vec<u8>) -> Vec<u8> {
    let mut raw = Vec::with_capacity(points.len() * 200);
    let mut scratch = Vec::with_capacity(4096);
    let mut run: Vec<(i64, f64)> = Vec::new();
    let mut k = 0;
    while k < points.len() {
        let i = points[k].0;
        run.clear();
        while k < points.len() && points[k].0 == i {
            run.push((points[k].1, points[k].2));
            k += 1;
        }
        put_series(&mut raw, &labels(i), &run, &mut scratch);
    }
    raw
}

/// The points as a remote-write 2.0 request: a symbol table (`""` first)
/// holding each string once, each series' labels as references into it.
fn remote_write_2_body(points: &[Point]) -> Vec<u8> {
    use sluice::proto::io::prometheus::write::v2 as rw2;
    let mut symbols = vec![String::new()];
    let mut index: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut sym = |s: &str| -> u32 {
        if let Some(&i) = index.get(s) {
            return i;
        }
        symbols.push(s.to_owned());
        let i = (symbols.len() - 1) as u32;
        index.insert(s.to_owned(), i);
        i
    };
    let mut timeseries: Vec<rw2::TimeSeries> = Vec::new();
    let mut k = 0;
    while k < points.len() {
        let i = points[k].0;
        let labels_refs = series_labels(i)
            .iter()
            .flat_map(|(n, v)| [sym(n), sym(v)])
            .collect();
        let mut samples = Vec::new();
        while k < points.len() && points[k].0 == i {
            samples.push(rw2::Sample {
                value: points[k].2,
                timestamp: points[k].1,
                start_timestamp: 0,
            });
            k += 1;
        }
        timeseries.push(rw2::TimeSeries {
            labels_refs,
            samples,
            ..Default::default()
        });
    }
    rw2::Request {
        symbols,
        timeseries,
    }
    .encode_to_vec()
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..Default::default()
    }
}

/// The points as one OTLP request: a resource per target (`service.name` =
/// job, `service.instance.id` = instance; env, region and zone as resource
/// attributes promoted by nothing, so they reach `target_info`), a metric
/// per name, the mode as the point's attribute. Counters are cumulative
/// monotonic sums, the rest gauges.
fn otlp_body(points: &[Point], start_ms: i64) -> Vec<u8> {
    let mut by_target: BTreeMap<usize, BTreeMap<usize, Vec<otlp::NumberDataPoint>>> =
        BTreeMap::new();
    for &(i, t, v) in points {
        let labels = series_labels(i);
        by_target
            .entry(i / 100)
            .or_default()
            .entry(i % 20)
            .or_default()
            .push(otlp::NumberDataPoint {
                attributes: vec![kv("mode", &labels[4].1)],
                start_time_unix_nano: start_ms as u64 * 1_000_000,
                time_unix_nano: t as u64 * 1_000_000,
                value: Some(otlp::number_data_point::Value::AsDouble(v)),
                ..Default::default()
            });
    }
    let resource_metrics = by_target
        .into_iter()
        .map(|(target, metrics)| {
            let labels = series_labels(target * 100);
            otlp::ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![
                        kv("service.name", &labels[3].1),
                        kv("service.instance.id", &labels[2].1),
                        kv("deployment.environment", &labels[1].1),
                        kv("cloud.region", &labels[5].1),
                        kv("cloud.availability_zone", &labels[6].1),
                    ],
                    ..Default::default()
                }),
                scope_metrics: vec![otlp::ScopeMetrics {
                    metrics: metrics
                        .into_iter()
                        .map(|(m, data_points)| {
                            let (name, counter) = METRICS[m];
                            let data = if counter {
                                otlp::metric::Data::Sum(otlp::Sum {
                                    data_points,
                                    aggregation_temporality:
                                        otlp::AggregationTemporality::Cumulative as i32,
                                    is_monotonic: true,
                                })
                            } else {
                                otlp::metric::Data::Gauge(otlp::Gauge { data_points })
                            };
                            otlp::Metric {
                                name: name.to_owned(),
                                data: Some(data),
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }.encode_to_vec()
}

/// Encodes the whole load (before any clock starts).
pub fn encode(w: &Workload) -> Encoded {
    let steady_labels: Vec<Vec<u8>> = (0..w.series).map(encoded_labels).collect();
    let labels = |i: usize| {
        steady_labels
            .get(i)
            .cloned()
            .unwrap_or_else(|| encoded_labels(i))
    };
    let connection_bodies = |c: usize| -> Vec<Body> {
        connection_requests(w, c)
            .iter()
            .map(|points| {
                let bytes = match w.mode {
                    Mode::Otlp => {
                        let raw = otlp_body(points, w.start_ms);
                        let mut gz = flate2::write::GzEncoder::new(
                            Vec::with_capacity(raw.len() / 4),
                            flate2::Compression::fast(),
                        );
                        // Writing to a Vec cannot fail.
                        let _ = gz.write_all(&raw);
                        gz.finish().unwrap_or_default()
                    }
                    Mode::Rw2 => snap::raw::Encoder::new()
                        .compress_vec(&remote_write_2_body(points))
                        .unwrap_or_default(),
                    Mode::Histograms => snap::raw::Encoder::new()
                        .compress_vec(&remote_write_histograms_body(points, w, &labels))
                        .unwrap_or_default(),
                    _ => {
                        let raw = remote_write_body(points, &labels);
                        snap::raw::Encoder::new()
                            .compress_vec(&raw)
                            .unwrap_or_default()
                    }
                };
                Body {
                    bytes: Bytes::from(bytes),
                    samples: points.len() as u32,
                }
            })
            .collect()
    };
    // One thread per core, each encoding every n-th connection's bodies.
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    let conns = w.connections.max(1);
    let mut per_connection: Vec<Vec<Body>> = vec![Vec::new(); conns];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(conns))
            .map(|t| {
                let connection_bodies = &connection_bodies;
                scope.spawn(move || {
                    (t..conns)
                        .step_by(threads)
                        .map(|c| (c, connection_bodies(c)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            let done = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            for (c, bodies) in done {
                per_connection[c] = bodies;
            }
        }
    });
    let (headers, path) = match w.mode {
        Mode::Otlp => (
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "gzip"),
            ],
            "/v1/metrics".to_owned(),
        ),
        Mode::Rw2 => (
            vec![
                (
                    "content-type",
                    "application/x-protobuf;proto=io.prometheus.write.v2.Request",
                ),
                ("content-encoding", "snappy"),
                ("x-prometheus-remote-write-version", "2.0.0"),
            ],
            "/api/v1/write".to_owned(),
        ),
        _ => (
            vec![
                ("content-type", "application/x-protobuf"),
                ("content-encoding", "snappy"),
                ("x-prometheus-remote-write-version", "0.1.0"),
            ],
            "/api/v1/write".to_owned(),
        ),
    };
    Encoded {
        per_connection,
        headers,
        path,
    }
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Requests sent.
    pub requests: u64,
    /// Samples in requests answered 2xx.
    pub accepted: u64,
    /// Samples in all requests sent.
    pub sent: u64,
    /// Wall time from the first request to the last reply.
    pub elapsed: Duration,
    /// Every request's latency, sorted.
    pub latencies: Vec<Duration>,
    /// Every request in the order each connection sent them (connection
    /// after connection): when it was sent, how long it took, and what it
    /// carried, to line its latency up with what else ran meanwhile.
    pub timeline: Vec<Sent>,
    /// Requests not answered 2xx, by status (0: the connection failed).
    pub errors: BTreeMap<u16, u64>,
    /// The first error reply's status and body, to say why.
    pub first_error: Option<String>,
    /// Whether the time bound stopped the run before every request was sent.
    pub timed_out: bool,
}

impl Report {
    /// Accepted samples per second of wall time.
    pub fn samples_per_second(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0..=1).
    pub fn latency(&self, q: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let at = ((self.latencies.len() as f64 * q) as usize).min(self.latencies.len() - 1);
        self.latencies[at]
    }

    /// `status:count` pairs, or `none`.
    pub fn errors_text(&self) -> String {
        if self.errors.is_empty() {
            return "none".to_owned();
        }
        self.errors
            .iter()
            .map(|(s, n)| format!("{s}:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// One request of a run.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// When it was sent, by the wall clock.
    pub at: SystemTime,
    /// From sending to the whole reply.
    pub latency: Duration,
    /// Samples in its body.
    pub samples: u32,
    /// Whether it was answered 2xx.
    pub ok: bool,
}

struct ConnResult {
    latencies: Vec<Duration>,
    timeline: Vec<Sent>,
    accepted: u64,
    sent: u64,
    errors: BTreeMap<u16, u64>,
    first_error: Option<String>,
    timed_out: bool,
}

/// How to reach the receiver: plain http, or https with a client
/// configuration; and a login (`Authorization` header value) to send.
#[derive(Clone, Default)]
pub struct Dial {
    /// https with this configuration (the TLS handshake is made once per
    /// keep-alive connection).
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The `Authorization` header of every request.
    pub authorization: Option<http::HeaderValue>,
    /// Send each body once per tenant, naming it in this header: the
    /// header, and the tenants' IDs.
    pub tenants: Option<(http::HeaderName, Vec<http::HeaderValue>)>,
    /// Samples per second to send at, shared among the connections; as
    /// fast as the receiver takes them when `None`. A connection behind
    /// its schedule sends at once; ahead of it, waits.
    pub pace: Option<f64>,
}

impl Dial {
    /// `Basic` authorization for `user` and `password`.
    pub fn basic(user: &str, password: &str) -> Option<http::HeaderValue> {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        http::HeaderValue::from_str(&format!("Basic {token}")).ok()
    }
}

/// Sends each connection's bodies in order over its own keep-alive
/// HTTP/1.1 connection to `addr`, until all are sent or `limit` passes.
pub async fn drive(addr: SocketAddr, dial: &Dial, encoded: &Encoded, limit: Duration) -> Report {
    let start = Instant::now();
    let deadline = start + limit;
    // Seconds of a connection's schedule one sample takes.
    let per_sample = dial.pace.filter(|&p| p > 0.0).map(|p| {
        encoded
            .per_connection
            .iter()
            .filter(|b| !b.is_empty())
            .count()
            .max(1) as f64
            / p
    });
    let tasks: Vec<_> = encoded
        .per_connection
        .iter()
        .map(|bodies| {
            let bodies = bodies.clone();
            let headers = encoded.headers.clone();
            let path = encoded.path.clone();
            let dial = dial.clone();
            tokio::spawn(async move {
                connection(addr, &dial, &path, &headers, &bodies, deadline, per_sample).await
            })
        })
        .collect();
    let mut report = Report::default();
    for task in tasks {
        let r = match task.await {
            Ok(r) => r,
            Err(e) => {
                report
                    .first_error
                    .get_or_insert(format!("connection task failed: {e}"));
                continue;
            }
        };
        report.requests += r.latencies.len() as u64;
        report.latencies.extend(r.latencies);
        report.timeline.extend(r.timeline);
        report.accepted += r.accepted;
        report.sent += r.sent;
        report.timed_out |= r.timed_out;
        for (s, n) in r.errors {
            *report.errors.entry(s).or_default() += n;
        }
        if report.first_error.is_none() {
            report.first_error = r.first_error;
        }
    }
    report.elapsed = start.elapsed();
    report.latencies.sort_unstable();
    report
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, dial: &Dial) -> Result<Sender, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let Some(tls) = &dial.tls else {
        return http1(hyper_util::rt::TokioIo::new(stream), addr).await;
    };
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(tls))
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))?;
    http1(hyper_util::rt::TokioIo::new(stream), addr).await
}

async fn http1<I>(io: I, addr: SocketAddr) -> Result<Sender, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("handshake with {addr}: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn connection(
    addr: SocketAddr,
    dial: &Dial,
    path: &str,
    headers: &[(&'static str, &'static str)],
    bodies: &[Body],
    deadline: Instant,
    per_sample: Option<f64>,
) -> ConnResult {
    let mut out = ConnResult {
        latencies: Vec::with_capacity(bodies.len()),
        timeline: Vec::with_capacity(bodies.len()),
        accepted: 0,
        sent: 0,
        errors: BTreeMap::new(),
        first_error: None,
        timed_out: false,
    };
    let host = addr.to_string();
    let mut sender: Option<Sender> = None;
    let tenants: Vec<Option<&http::HeaderValue>> = match &dial.tenants {
        Some((_, ids)) => ids.iter().map(Some).collect(),
        None => vec![None],
    };
    let mut sends = Vec::with_capacity(bodies.len() * tenants.len());
    for b in bodies {
        for t in &tenants {
            sends.push((b, *t));
        }
    }
    let begun = Instant::now();
    let mut due = 0.0f64;
    for (body, tenant) in sends {
        if let Some(per_sample) = per_sample {
            let at = begun + Duration::from_secs_f64(due);
            due += per_sample * f64::from(body.samples);
            if at >= deadline {
                out.timed_out = true;
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        if Instant::now() >= deadline {
            out.timed_out = true;
            break;
        }
        let (t, at) = (Instant::now(), SystemTime::now());
        out.sent += u64::from(body.samples);
        let to = To {
            host: &host,
            path,
            headers,
            tenant,
        };
        let result = send(&mut sender, addr, dial, &to, body).await;
        let latency = t.elapsed();
        out.latencies.push(latency);
        out.timeline.push(Sent {
            at,
            latency,
            samples: body.samples,
            ok: matches!(result, Ok((status, _)) if (200..300).contains(&status)),
        });
        match result {
            Ok((status, _)) if (200..300).contains(&status) => {
                out.accepted += u64::from(body.samples)
            }
            Ok((status, text)) => {
                *out.errors.entry(status).or_default() += 1;
                out.first_error
                    .get_or_insert_with(|| format!("HTTP {status}: {}", text.trim()));
            }
            Err(e) => {
                // A receiver that refuses connections gets no more tries.
                let refused = sender.is_none();
                sender = None;
                *out.errors.entry(0).or_default() += 1;
                out.first_error.get_or_insert(e);
                if refused {
                    break;
                }
            }
        }
    }
    out
}

/// Where one request goes and what it carries besides its body.
struct To<'a> {
    host: &'a str,
    path: &'a str,
    headers: &'a [(&'static str, &'static str)],
    tenant: Option<&'a http::HeaderValue>,
}

async fn send(
    sender: &mut Option<Sender>,
    addr: SocketAddr,
    dial: &Dial,
    to: &To<'_>,
    body: &Body,
) -> Result<(u16, String), String> {
    let (host, path, headers, tenant) = (to.host, to.path, to.headers, to.tenant);
    if sender.as_ref().is_none_or(|s| s.is_closed()) {
        *sender = None;
        *sender = Some(connect(addr, dial).await?);
    }
    let Some(s) = sender.as_mut() else {
        return Err("no connection".to_owned());
    };
    s.ready().await.map_err(|e| format!("connection: {e}"))?;
    let mut req = http::Request::post(path).header("host", host);
    for &(k, v) in headers {
        req = req.header(k, v);
    }
    if let Some(auth) = &dial.authorization {
        req = req.header(http::header::AUTHORIZATION, auth.clone());
    }
    if let (Some((name, _)), Some(id)) = (&dial.tenants, tenant) {
        req = req.header(name, id.clone());
    }
    let req = req
        .body(Full::new(body.bytes.clone()))
        .map_err(|e| format!("request: {e}"))?;
    let resp = s
        .send_request(req)
        .await
        .map_err(|e| format!("request to {addr}: {e}"))?;
    let status = resp.status().as_u16();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("reply from {addr}: {e}"))?
        .to_bytes();
    let text = if (200..300).contains(&status) {
        String::new()
    } else {
        String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned()
    };
    Ok((status, text))
}

/// A receiver that reads every request body whole and answers 204: the
/// generator's own ceiling on this machine.
pub async fn null_sink(
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    async fn swallow(body: Bytes) -> axum::http::StatusCode {
        std::hint::black_box(body.len());
        axum::http::StatusCode::NO_CONTENT
    }
    let app = axum::Router::new()
        .fallback(axum::routing::post(swallow))
        .layer(axum::extract::DefaultBodyLimit::disable());
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice::proto::prometheus::WriteRequest;

    fn small(mode: Mode) -> Workload {
        Workload {
            mode,
            series: 250,
            samples: 4,
            per_request: 100,
            connections: 3,
            start_ms: 1_700_000_000_000,
            interval_ms: 15_000,
        }
    }

    fn decode_rw(body: &Body) -> WriteRequest {
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&body.bytes)
            .expect("snappy");
        WriteRequest::decode(raw.as_slice()).expect("protobuf")
    }

    /// A paced load keeps to its schedule: every sample sent, and the
    /// last request of each connection not before its time (1,000 samples
    /// at 4,000/s over 3 connections: the last request of a connection
    /// holding 300 samples before it is due 0.225 s in). A lower bound
    /// only, which sleeping guarantees; nothing is timed from above.
    #[test]
    fn a_paced_load_keeps_to_its_schedule() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let sink = tokio::spawn(null_sink(listener, async {
                let _ = stopped.await;
            }));
            let enc = encode(&small(Mode::Steady));
            let dial = Dial {
                pace: Some(4_000.0),
                ..Dial::default()
            };
            let report = drive(addr, &dial, &enc, Duration::from_secs(60)).await;
            assert_eq!(report.accepted, 1000, "{:?}", report.first_error);
            assert!(!report.timed_out);
            assert!(
                report.elapsed >= Duration::from_millis(225),
                "{:?}",
                report.elapsed
            );
            // The timeline holds every request once, each answered, and
            // its samples add up to those sent; starts are spread over
            // the schedule, not bunched at the beginning.
            assert_eq!(report.timeline.len() as u64, report.requests);
            assert!(report.timeline.iter().all(|s| s.ok));
            let samples: u64 = report.timeline.iter().map(|s| u64::from(s.samples)).sum();
            assert_eq!(samples, report.sent);
            let starts = || report.timeline.iter().map(|s| s.at);
            let (first, last) = (starts().min().expect("sent"), starts().max().expect("sent"));
            assert!(
                last.duration_since(first).unwrap_or_default() >= Duration::from_millis(200),
                "{first:?} .. {last:?}"
            );
            let _ = stop.send(());
            let _ = sink.await;
        });
    }

    /// The histogram load carries one valid native histogram per point,
    /// each series' counts never falling from step to step.
    #[test]
    fn histograms_are_valid_and_grow() {
        let w = small(Mode::Histograms);
        let enc = encode(&w);
        let mut seen = 0;
        let mut last: std::collections::HashMap<String, (i64, u64)> = Default::default();
        for bodies in &enc.per_connection {
            for body in bodies {
                let req = decode_rw(body);
                for ts in req.timeseries {
                    assert!(ts.samples.is_empty());
                    let key = format!("{:?}", ts.labels);
                    for h in ts.histograms {
                        seen += 1;
                        let mut raw = Vec::new();
                        prost::Message::encode(&h, &mut raw).expect("encodes");
                        let wire = sluice::protocol::histogram::decode(&raw).expect("decodes");
                        wire.validate().expect("a valid histogram");
                        let (t, sample) = wire.into_sample();
                        let sluice::histogram::HistSample::Int(h) = sample else {
                            panic!("an integer histogram");
                        };
                        if let Some(&(pt, pc)) = last.get(&key) {
                            assert!(t > pt && h.count >= pc);
                        }
                        last.insert(key.clone(), (t, h.count));
                    }
                }
            }
        }
        assert_eq!(seen, w.series * w.samples);
    }

    /// Every series gets every step exactly once, in time order per
    /// connection, with its seven labels sorted; counters never fall.
    #[test]
    fn steady_and_backfill_carry_every_sample_once_in_order() {
        for mode in [Mode::Steady, Mode::Backfill] {
            let w = small(mode);
            let enc = encode(&w);
            assert_eq!(enc.samples(), 1000, "{mode}");
            let mut seen: BTreeMap<String, Vec<(i64, f64)>> = BTreeMap::new();
            for bodies in &enc.per_connection {
                for body in bodies {
                    let req = decode_rw(body);
                    let n: usize = req.timeseries.iter().map(|t| t.samples.len()).sum();
                    assert_eq!(n, body.samples as usize);
                    assert!(n <= 100);
                    for ts in req.timeseries {
                        assert_eq!(ts.labels.len(), 7);
                        let names: Vec<&str> = ts.labels.iter().map(|l| l.name.as_str()).collect();
                        let mut sorted = names.clone();
                        sorted.sort_unstable();
                        assert_eq!(names, sorted);
                        let key: Vec<String> = ts
                            .labels
                            .iter()
                            .map(|l| format!("{}={}", l.name, l.value))
                            .collect();
                        let entry = seen.entry(key.join(",")).or_default();
                        entry.extend(ts.samples.iter().map(|s| (s.timestamp, s.value)));
                    }
                }
            }
            assert_eq!(seen.len(), 250, "{mode}");
            for (key, samples) in &seen {
                let ts: Vec<i64> = samples.iter().map(|s| s.0).collect();
                let want: Vec<i64> = (0..4).map(|k| w.start_ms + k * 15_000).collect();
                assert_eq!(ts, want, "{mode} {key}");
                if key.contains("_total") {
                    assert!(samples.windows(2).all(|p| p[1].1 >= p[0].1), "{key}");
                }
            }
        }
    }

    #[test]
    fn the_window_stays_within_one_block() {
        const H2: i64 = 7_200_000;
        let mut w = Workload::standard(Mode::Steady, 0);
        let span = 119 * 15_000;
        // Far from a boundary: the last sample is now.
        let now = 1_000 * H2 + H2 / 2;
        w.end_within_block(now, H2);
        assert_eq!((w.start_ms, w.start_ms + span), (now - span, now));
        // Ten minutes past one: the window ends just before it.
        let now = 1_000 * H2 + 600_000;
        w.end_within_block(now, H2);
        assert_eq!(w.start_ms + span, 1_000 * H2 - 1);
        assert_eq!(w.start_ms.div_euclid(H2), 999);
        // A window longer than a block cannot avoid one: it ends now.
        w.samples = 1_000;
        w.end_within_block(now, H2);
        assert_eq!(w.start_ms + 999 * 15_000, now);
    }

    #[test]
    fn churn_brings_a_tenth_new_series_per_request() {
        let w = small(Mode::Churn);
        let enc = encode(&w);
        let mut series = std::collections::HashSet::new();
        for body in enc.per_connection.iter().flatten() {
            let req = decode_rw(body);
            let fresh = req
                .timeseries
                .iter()
                .filter(|t| series.insert(format!("{:?}", t.labels)))
                .count();
            assert!(
                fresh >= 10,
                "each request has ≥ 10 unseen series, got {fresh}"
            );
        }
        assert_eq!(series.len(), w.total_series());
    }

    #[test]
    fn otlp_carries_the_same_points() {
        let w = small(Mode::Otlp);
        let enc = encode(&w);
        assert_eq!(enc.path, "/v1/metrics");
        let mut points = 0;
        for body in enc.per_connection.iter().flatten() {
            let mut raw = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(&body.bytes[..]),
                &mut raw,
            )
            .expect("gzip");
            let req = ExportMetricsServiceRequest::decode(raw.as_slice()).expect("protobuf");
            for rm in &req.resource_metrics {
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        points += match &m.data {
                            Some(otlp::metric::Data::Sum(s)) => s.data_points.len(),
                            Some(otlp::metric::Data::Gauge(g)) => g.data_points.len(),
                            _ => 0,
                        };
                    }
                }
            }
        }
        assert_eq!(points, 1000);
    }

    #[test]
    fn rw2_carries_the_same_series_and_samples_as_steady() {
        use sluice::proto::io::prometheus::write::v2 as rw2;
        let steady = encode(&small(Mode::Steady));
        let enc = encode(&small(Mode::Rw2));
        assert!(enc.headers.contains(&(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request"
        )));
        let mut seen = Vec::new();
        for body in enc.per_connection.iter().flatten() {
            let raw = snap::raw::Decoder::new()
                .decompress_vec(&body.bytes)
                .expect("snappy");
            let req = rw2::Request::decode(raw.as_slice()).expect("protobuf");
            assert_eq!(req.symbols.first().map(String::as_str), Some(""));
            for ts in &req.timeseries {
                let labels: Vec<(String, String)> = ts
                    .labels_refs
                    .chunks(2)
                    .map(|p| {
                        (
                            req.symbols[p[0] as usize].clone(),
                            req.symbols[p[1] as usize].clone(),
                        )
                    })
                    .collect();
                for s in &ts.samples {
                    seen.push((labels.clone(), s.timestamp, s.value.to_bits()));
                }
            }
        }
        let mut want = Vec::new();
        for body in steady.per_connection.iter().flatten() {
            let raw = snap::raw::Decoder::new()
                .decompress_vec(&body.bytes)
                .expect("snappy");
            let req =
                sluice::proto::prometheus::WriteRequest::decode(raw.as_slice()).expect("protobuf");
            for ts in &req.timeseries {
                let labels: Vec<(String, String)> = ts
                    .labels
                    .iter()
                    .map(|l| (l.name.clone(), l.value.clone()))
                    .collect();
                for s in &ts.samples {
                    want.push((labels.clone(), s.timestamp, s.value.to_bits()));
                }
            }
        }
        assert_eq!(seen.len(), 1000);
        assert_eq!(seen, want);
    }
}
