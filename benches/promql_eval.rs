//! PromQL range queries over a realistic head: 10k counter series (100
//! jobs × 100 instances) and 200 classic histograms, 1h at 15s, evaluated
//! over that hour at a 15s step, the way a Grafana panel asks.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::promql::{Engine, QueryOptions};
use std::hint::black_box;

#[path = "../tests/common/promql_head.rs"]
mod promql_head;
use promql_head::{head, range, QUERIES};

fn bench(c: &mut Criterion) {
    let head = head();
    let engine = Engine::new(head.querier(), QueryOptions::default());
    let (start, end, step) = range();
    let steps = ((end - start) / step + 1) as u64;
    let mut g = c.benchmark_group("promql_eval");
    g.sample_size(10);
    g.throughput(Throughput::Elements(steps));
    for (name, q) in QUERIES {
        let n = engine
            .range(q, start, end, step)
            .expect("valid")
            .value
            .len();
        eprintln!("promql_eval/{name}: {n} result series, {steps} steps");
        g.bench_function(BenchmarkId::new("range", name), |b| {
            b.iter(|| black_box(engine.range(black_box(q), start, end, step).expect("valid")))
        });
    }
    g.finish();
}

/// Parsing alone: the panel queries, and a hard case, a sum of 500
/// rates of selectors with a regex matcher each (about 30 KiB).
fn parse(c: &mut Criterion) {
    let limits = sluice::promql::guard::ParseLimits::default();
    let long = (0..500)
        .map(|i| format!("rate(http_requests_total{{job=\"j{i}\",code=~\"5..\"}}[5m])"))
        .collect::<Vec<_>>()
        .join(" + ");
    let mut g = c.benchmark_group("promql_parse");
    for (name, q) in QUERIES
        .iter()
        .copied()
        .chain([("sum_of_500", long.as_str())])
    {
        g.throughput(Throughput::Bytes(q.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                black_box(sluice::promql::guard::parse(black_box(q), &limits).expect("valid"))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, parse);
criterion_main!(benches);
