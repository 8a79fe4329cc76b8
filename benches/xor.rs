//! XOR chunk append and iterate on the three cases of Prometheus' own chunk
//! benchmark (`tests/testdata/xor`), so the figures compare directly with
//! the Go encoder's: 1000 series × 120 samples, a fresh chunk per series.

#[path = "../tests/common/xor_data.rs"]
mod xor_data;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::storage::chunk::{XorAppender, XorIter};
use std::hint::black_box;

fn encode(s: &[(i64, f64)]) -> XorAppender {
    let mut a = XorAppender::default();
    for &(t, v) in s {
        a.append(t, v);
    }
    a
}

fn bench(c: &mut Criterion) {
    for case in xor_data::CASES {
        let series = xor_data::load(case);
        let samples: usize = series.iter().map(Vec::len).sum();
        let chunks: Vec<Box<[u8]>> = series
            .iter()
            .map(|s| Box::from(encode(s).bytes()))
            .collect();
        let bytes: usize = chunks.iter().map(|c| c.len()).sum();
        eprintln!(
            "xor/{case}: {:.2} bytes/sample",
            bytes as f64 / samples as f64
        );

        let mut g = c.benchmark_group("xor");
        g.throughput(Throughput::Elements(samples as u64));
        g.bench_with_input(BenchmarkId::new("append", case), &series, |b, series| {
            b.iter(|| {
                for s in series {
                    black_box(encode(black_box(s)));
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("iterate", case), &chunks, |b, chunks| {
            b.iter(|| {
                let mut acc = 0f64;
                let mut ts = 0i64;
                for c in chunks {
                    for (t, v) in XorIter::new(black_box(c)) {
                        ts = ts.wrapping_add(t);
                        acc += v;
                    }
                }
                black_box((ts, acc))
            })
        });
        g.bench_with_input(BenchmarkId::new("decode", case), &chunks, |b, chunks| {
            let mut out = Vec::with_capacity(200);
            b.iter(|| {
                let mut n = 0;
                for c in chunks {
                    out.clear();
                    XorIter::new(black_box(c)).append_to(&mut out);
                    n += out.len();
                }
                black_box(n)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
