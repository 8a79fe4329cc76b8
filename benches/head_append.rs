//! Head appends for series that already exist, through the raw-label-bytes
//! lookup the ingest path uses, from one and from two threads. Each thread
//! owns its own series so per-series order holds, as with real senders.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::storage::head::{AppendCounts, Head, HeadOptions};
use sluice::storage::labels::encode_canonical;

const SERIES_PER_THREAD: usize = 10_000;

fn keys(thread: usize) -> Vec<Vec<u8>> {
    (0..SERIES_PER_THREAD)
        .map(|i| {
            let inst = format!("10.0.{thread}.{}:9100", i % 250);
            let name = format!("metric_{}", i / 250);
            let labels = [
                ("__name__", name.as_str()),
                ("instance", inst.as_str()),
                ("job", "node"),
            ];
            let mut raw = Vec::new();
            encode_canonical(labels, &mut raw);
            raw
        })
        .collect()
}

fn run(head: &Head, keys: &[Vec<u8>], rounds: u64, t0: i64) -> Duration {
    let mut counts = AppendCounts::default();
    let start = Instant::now();
    for r in 0..rounds {
        let t = t0 + r as i64 * 15_000;
        for k in keys {
            head.append_existing(k, std::iter::once((t, r as f64)), i64::MAX, &mut counts);
        }
    }
    let d = start.elapsed();
    assert_eq!(counts.appended, rounds * keys.len() as u64);
    d
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("head_append");
    for threads in [1usize, 2] {
        g.throughput(Throughput::Elements((threads * SERIES_PER_THREAD) as u64));
        g.bench_function(BenchmarkId::new("threads", threads), |b| {
            b.iter_custom(|iters| {
                let head = Arc::new(Head::new(HeadOptions::default()));
                let all: Vec<Arc<Vec<Vec<u8>>>> = (0..threads).map(|t| Arc::new(keys(t))).collect();
                let mut counts = AppendCounts::default();
                for ks in &all {
                    for k in ks.iter() {
                        let labels = sluice_labels(k);
                        let pairs: Vec<(&str, &str)> = labels
                            .iter()
                            .map(|(n, v)| (n.as_str(), v.as_str()))
                            .collect();
                        head.append_labels(&pairs, k, std::iter::empty(), i64::MAX, &mut counts)
                            .expect("fits");
                    }
                }
                let handles: Vec<_> = all
                    .iter()
                    .map(|ks| {
                        let (head, ks) = (Arc::clone(&head), Arc::clone(ks));
                        std::thread::spawn(move || run(&head, &ks, iters, 0))
                    })
                    .collect();
                let times: Vec<Duration> = handles
                    .into_iter()
                    .map(|h| h.join().expect("thread"))
                    .collect();
                times.into_iter().max().unwrap_or_default()
            })
        });
    }
    g.finish();
}

/// Recovers (name, value) pairs from canonical bytes (setup only).
fn sluice_labels(raw: &[u8]) -> Vec<(String, String)> {
    use prost::Message;
    let ts = sluice::proto::prometheus::TimeSeries::decode(raw)
        .expect("canonical bytes are a TimeSeries");
    ts.labels.into_iter().map(|l| (l.name, l.value)).collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
