//! Head appends for series that already exist, through the raw-label-bytes
//! lookup the ingest path uses, from one and from two threads. Each thread
//! owns its own series so per-series order holds, as with real senders.
//! The `logged` variants run with a WAL (written, never fsynced here), and
//! hand the shards' records over every 500 appends, as a request does.
//! `new_series` times making series (one sample each, no WAL): the lookup
//! miss, the slot, the postings and the per-metric count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Close, Db, DbOptions, Durability, HeadOptions};
use sluice::wal::commit::FsyncMode;
use sluice::wal::WalOptions;

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

/// Series per simulated request in the `logged` variants.
const PER_REQUEST: usize = 500;

fn run(db: &Db, keys: &[Vec<u8>], rounds: u64, t0: i64, logged: bool) -> Duration {
    let mut counts = AppendCounts::default();
    let mut appended = 0;
    let start = Instant::now();
    let mut app = db.appender(i64::MAX);
    for r in 0..rounds {
        let t = t0 + r as i64 * 15_000;
        for (i, k) in keys.iter().enumerate() {
            app.append_existing(k, std::iter::once((t, r as f64)), &mut counts);
            if logged && i % PER_REQUEST == PER_REQUEST - 1 {
                appended += counts.appended;
                counts.appended = 0;
                app.commit();
                app = db.appender(i64::MAX);
            }
        }
    }
    let d = start.elapsed();
    assert_eq!(appended + counts.appended, rounds * keys.len() as u64);
    d
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("head_append");
    for (name, threads, logged) in [
        ("threads", 1usize, false),
        ("threads", 2, false),
        ("threads_logged", 1, true),
        ("threads_logged", 2, true),
    ] {
        g.throughput(Throughput::Elements((threads * SERIES_PER_THREAD) as u64));
        g.bench_function(BenchmarkId::new(name, threads), |b| {
            b.iter_custom(|iters| {
                let dir = tempfile::tempdir().expect("tempdir");
                let head = Arc::new(if logged {
                    let durable = Durability {
                        dir: dir.path().to_owned(),
                        wal: WalOptions::default(),
                        fsync: FsyncMode::Interval(Duration::from_secs(3600)),
                    };
                    Db::open(DbOptions {
                        durability: Some(durable),
                        ..DbOptions::default()
                    })
                    .expect("open")
                } else {
                    Db::new(HeadOptions::default())
                });
                let mut app = head.appender(i64::MAX);
                let all: Vec<Arc<Vec<Vec<u8>>>> = (0..threads).map(|t| Arc::new(keys(t))).collect();
                let mut counts = AppendCounts::default();
                for ks in &all {
                    for k in ks.iter() {
                        let labels = sluice_labels(k);
                        let pairs: Vec<(&str, &str)> = labels
                            .iter()
                            .map(|(n, v)| (n.as_str(), v.as_str()))
                            .collect();
                        app.append_new(&pairs, k, std::iter::empty(), &mut counts)
                            .expect("fits");
                    }
                }
                app.commit();
                let handles: Vec<_> = all
                    .iter()
                    .map(|ks| {
                        let (head, ks) = (Arc::clone(&head), Arc::clone(ks));
                        std::thread::spawn(move || run(&head, &ks, iters, 0, logged))
                    })
                    .collect();
                let times: Vec<Duration> = handles
                    .into_iter()
                    .map(|h| h.join().expect("thread"))
                    .collect();
                head.close(Close::WalOnly);
                times.into_iter().max().unwrap_or_default()
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("head_new_series");
    let all: Vec<Keyed> = (0..4)
        .flat_map(keys)
        .map(|k| {
            let labels = sluice_labels(&k);
            (k, labels)
        })
        .collect();
    g.throughput(Throughput::Elements(all.len() as u64));
    g.bench_function(BenchmarkId::new("series", all.len()), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let db = Db::new(HeadOptions::default());
                let mut counts = AppendCounts::default();
                let start = Instant::now();
                let mut app = db.appender(i64::MAX);
                for (k, labels) in &all {
                    let pairs: Vec<(&str, &str)> = labels
                        .iter()
                        .map(|(n, v)| (n.as_str(), v.as_str()))
                        .collect();
                    app.append_new(&pairs, k, std::iter::once((1000, 1.0)), &mut counts)
                        .expect("fits");
                }
                app.commit();
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// A series' canonical bytes and its labels.
type Keyed = (Vec<u8>, Vec<(String, String)>);

/// Recovers (name, value) pairs from canonical bytes (setup only).
fn sluice_labels(raw: &[u8]) -> Vec<(String, String)> {
    use prost::Message;
    let ts = sluice::proto::prometheus::TimeSeries::decode(raw)
        .expect("canonical bytes are a TimeSeries");
    ts.labels.into_iter().map(|l| (l.name, l.value)).collect()
}

criterion_group!(benches, bench);
criterion_main!(benches);
