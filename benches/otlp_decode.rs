//! OTLP ingest: the checked walk over the request bytes (decode, translate,
//! look up, append in one pass) against the obvious design, prost decoding
//! into a request model and then translating each point into owned labels.
//! Both run on a realistic request (1000 data points: counters, gauges and
//! histograms; 10 resource attributes) for series the head already holds.
//! Throughput is in data points; the request holds
//! `otlp_requests::SAMPLES` samples.

#[path = "../tests/common/otlp_requests.rs"]
mod otlp_requests;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prost::Message;
use sluice::ingest::otlp::names::{label_name, metric_name, NameKind};
use sluice::ingest::otlp::{append_export_request, Otlp, OtlpOptions};
use sluice::ingest::validate::LabelLimits;
use sluice::proto::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
use sluice::proto::opentelemetry::proto::common::v1::{any_value, KeyValue};
use sluice::proto::opentelemetry::proto::metrics::v1::{metric::Data, number_data_point};
use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Db, HeadOptions};

/// The baseline: decode with prost, then translate each point into an owned,
/// sorted label list, encode it, and append. Returns samples stored.
fn prost_then_translate(head: &Db, body: &[u8], max_t: i64) -> u64 {
    let req = ExportMetricsServiceRequest::decode(body).expect("valid");
    let mut counts = AppendCounts::default();
    let mut app = head.appender(max_t);
    let value_string = |kv: &KeyValue| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    };
    for rm in &req.resource_metrics {
        let attrs = rm
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let get = |k: &str| attrs.iter().find(|a| a.key == k).map(value_string);
        let job = match (get("service.namespace"), get("service.name")) {
            (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
            (None, Some(n)) => Some(n),
            _ => None,
        };
        let instance = get("service.instance.id");
        let mut append =
            |attrs: &[KeyValue], name: &str, extra: Option<(&str, String)>, t: u64, v: f64| {
                let mut labels: Vec<(String, String)> = attrs
                    .iter()
                    .map(|a| (label_name(&a.key).expect("valid"), value_string(a)))
                    .collect();
                labels.extend(job.clone().map(|j| ("job".to_owned(), j)));
                labels.extend(instance.clone().map(|i| ("instance".to_owned(), i)));
                labels.push(("__name__".to_owned(), name.to_owned()));
                if let Some((n, v)) = extra {
                    labels.push((n.to_owned(), v));
                }
                labels.sort();
                let pairs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                let mut canonical = Vec::new();
                encode_canonical(pairs.iter().copied(), &mut canonical);
                let sample = std::iter::once(((t / 1_000_000) as i64, v));
                if !app.append_existing(&canonical, sample.clone(), &mut counts) {
                    app.append_new(&pairs, &canonical, sample, &mut counts)
                        .expect("room");
                }
            };
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                match &metric.data {
                    Some(Data::Sum(s)) => {
                        let kind = if s.is_monotonic {
                            NameKind::Counter
                        } else {
                            NameKind::Gauge
                        };
                        let name = metric_name(&metric.name, &metric.unit, kind).expect("valid");
                        for p in &s.data_points {
                            let v = match p.value {
                                Some(number_data_point::Value::AsInt(i)) => i as f64,
                                Some(number_data_point::Value::AsDouble(d)) => d,
                                None => continue,
                            };
                            append(&p.attributes, &name, None, p.time_unix_nano, v);
                        }
                    }
                    Some(Data::Gauge(g)) => {
                        let name = metric_name(&metric.name, &metric.unit, NameKind::Gauge)
                            .expect("valid");
                        for p in &g.data_points {
                            let v = match p.value {
                                Some(number_data_point::Value::AsInt(i)) => i as f64,
                                Some(number_data_point::Value::AsDouble(d)) => d,
                                None => continue,
                            };
                            append(&p.attributes, &name, None, p.time_unix_nano, v);
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        let name = metric_name(&metric.name, &metric.unit, NameKind::Other)
                            .expect("valid");
                        for p in &h.data_points {
                            let t = p.time_unix_nano;
                            if let Some(sum) = p.sum {
                                append(&p.attributes, &format!("{name}_sum"), None, t, sum);
                            }
                            append(
                                &p.attributes,
                                &format!("{name}_count"),
                                None,
                                t,
                                p.count as f64,
                            );
                            let mut cum = 0;
                            for (b, c) in p.explicit_bounds.iter().zip(&p.bucket_counts) {
                                cum += c;
                                append(
                                    &p.attributes,
                                    &format!("{name}_bucket"),
                                    Some(("le", b.to_string())),
                                    t,
                                    cum as f64,
                                );
                            }
                            append(
                                &p.attributes,
                                &format!("{name}_bucket"),
                                Some(("le", "+Inf".to_owned())),
                                t,
                                p.count as f64,
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    counts.appended
}

/// Times `run` over a ring of requests 15 s apart, each cycle on a fresh
/// head primed with the first request, so every timed request appends to
/// existing series.
fn timed(iters: u64, bodies: &[Vec<u8>], run: impl Fn(&Db, &[u8]) -> u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0u64;
    while done < iters {
        let head = Db::new(HeadOptions::default());
        run(&head, &bodies[0]);
        let n = (iters - done).min(bodies.len() as u64 - 1) as usize;
        let start = Instant::now();
        for body in &bodies[1..=n] {
            black_box(run(&head, body));
        }
        total += start.elapsed();
        done += n as u64;
    }
    total
}

fn bench(c: &mut Criterion) {
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..120)
        .map(|i| otlp_requests::request(t0 + i * 15_000).encode_to_vec())
        .collect();
    let limits = LabelLimits::default();
    let otlp = Otlp::new(OtlpOptions::default(), 1 << 20);
    let max_t = i64::MAX / 2;
    let ours = |head: &Db, body: &[u8]| {
        append_export_request(head, &otlp, &limits, body, max_t)
            .expect("valid")
            .samples
            .accepted
    };

    // Both store the same samples (ours adds one target_info sample).
    let (a, b) = (
        Db::new(HeadOptions::default()),
        Db::new(HeadOptions::default()),
    );
    assert_eq!(ours(&a, &bodies[0]), otlp_requests::SAMPLES as u64 + 1);
    assert_eq!(
        prost_then_translate(&b, &bodies[0], max_t),
        otlp_requests::SAMPLES as u64
    );
    assert_eq!(a.head_stats().series, b.head_stats().series + 1);

    let mut g = c.benchmark_group("otlp_decode");
    g.throughput(Throughput::Elements(otlp_requests::POINTS as u64));
    g.bench_function(
        BenchmarkId::new("hand_written", otlp_requests::POINTS),
        |bch| bch.iter_custom(|iters| timed(iters, &bodies, ours)),
    );
    g.bench_function(
        BenchmarkId::new("prost_then_translate", otlp_requests::POINTS),
        |bch| {
            bch.iter_custom(|iters| {
                timed(iters, &bodies, |h, body| {
                    prost_then_translate(h, body, max_t)
                })
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
