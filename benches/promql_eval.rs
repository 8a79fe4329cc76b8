//! PromQL range queries over a realistic head: 10k counter series (100
//! jobs × 100 instances) and 200 classic histograms, 1h at 15s, evaluated
//! over that hour at a 15s step, the way a Grafana panel asks.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::promql::{Engine, QueryOptions};
use sluice::storage::head::{AppendCounts, Head, HeadOptions};
use sluice::storage::labels::encode_canonical;
use std::hint::black_box;

const T0: i64 = 1_700_000_000_000;
const POINTS: i64 = 240;

fn head() -> Head {
    let head = Head::new(HeadOptions::default());
    let mut c = AppendCounts::default();
    let mut add = |labels: &[(&str, &str)], f: &dyn Fn(i64) -> f64| {
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let samples = (0..POINTS).map(|i| (T0 + i * 15_000, f(i)));
        head.append_labels(labels, &raw, samples, i64::MAX, &mut c)
            .expect("fits");
    };
    for j in 0..100 {
        for i in 0..100 {
            let (job, inst) = (format!("job{j}"), format!("10.0.{j}.{i}:9100"));
            add(
                &[
                    ("__name__", "http_requests_total"),
                    ("instance", &inst),
                    ("job", &job),
                ],
                &|k| (k * (i + 1) + j) as f64,
            );
        }
    }
    let bounds = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"];
    for j in 0..20 {
        for i in 0..10 {
            let (job, inst) = (format!("job{j}"), format!("10.1.{j}.{i}:9100"));
            for (b, le) in bounds.iter().enumerate() {
                add(
                    &[
                        ("__name__", "http_request_duration_seconds_bucket"),
                        ("instance", &inst),
                        ("job", &job),
                        ("le", le),
                    ],
                    &|k| (k * (b as i64 + 1) * (i + 1)) as f64,
                );
            }
        }
    }
    head
}

fn bench(c: &mut Criterion) {
    let head = head();
    let engine = Engine::new(&head, QueryOptions::default());
    let (start, end, step) = (T0 + 5 * 60_000, T0 + (POINTS - 1) * 15_000, 15_000);
    let steps = ((end - start) / step + 1) as u64;
    let mut g = c.benchmark_group("promql_eval");
    g.sample_size(10);
    g.throughput(Throughput::Elements(steps));
    for (name, q) in [
        ("sum_rate", "sum by (job) (rate(http_requests_total[5m]))"),
        (
            "histogram_quantile",
            "histogram_quantile(0.99, sum by (le, job) (rate(http_request_duration_seconds_bucket[5m])))",
        ),
        ("regex_selector", r#"http_requests_total{job=~"job1.*", instance=~".*:9100"}"#),
    ] {
        let n = engine.range(q, start, end, step).expect("valid").value.len();
        eprintln!("promql_eval/{name}: {n} result series, {steps} steps");
        g.bench_function(BenchmarkId::new("range", name), |b| {
            b.iter(|| black_box(engine.range(black_box(q), start, end, step).expect("valid")))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
