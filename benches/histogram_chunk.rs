//! Native histogram chunk append and iterate on the golden cases
//! (`tests/testdata/histogram`): 660 histograms in nine sequences, appended
//! as Prometheus' head does (cuts, recodes, counter-reset headers), as
//! integer and as float histograms. `scripts/make-histogram-golden` with
//! `BENCH=1` times Prometheus 3.5.3's Go encoder on the same sequences.

#[path = "../tests/common/histogram_golden.rs"]
mod histogram_golden;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::histogram::{FloatHistogram, Histogram};
use sluice::storage::chunk::{FloatHistogramIter, HistogramIter};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let g = histogram_golden::golden();
    let cases: Vec<Vec<(i64, Histogram)>> = g["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            c["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .map(histogram_golden::int_histogram)
                .collect()
        })
        .collect();
    let floats: Vec<Vec<(i64, FloatHistogram)>> = cases
        .iter()
        .map(|c| c.iter().map(|(t, h)| (*t, h.to_float())).collect())
        .collect();
    let samples: usize = cases.iter().map(Vec::len).sum();
    let int_chunks: Vec<Vec<u8>> = cases
        .iter()
        .flat_map(|c| histogram_golden::encode(c))
        .collect();
    let float_chunks: Vec<Vec<u8>> = floats
        .iter()
        .flat_map(|c| histogram_golden::encode_float(c))
        .collect();
    let bytes = |cs: &[Vec<u8>]| cs.iter().map(Vec::len).sum::<usize>() as f64 / samples as f64;
    eprintln!(
        "histogram: {samples} samples, {:.1} bytes/sample as integer, {:.1} as float histograms",
        bytes(&int_chunks),
        bytes(&float_chunks)
    );

    let mut grp = c.benchmark_group("histogram");
    grp.throughput(Throughput::Elements(samples as u64));
    grp.bench_function("append_int", |b| {
        b.iter(|| {
            for s in &cases {
                black_box(histogram_golden::encode(black_box(s)));
            }
        })
    });
    grp.bench_function("append_float", |b| {
        b.iter(|| {
            for s in &floats {
                black_box(histogram_golden::encode_float(black_box(s)));
            }
        })
    });
    grp.bench_function("iterate_int", |b| {
        let mut h = Histogram::default();
        b.iter(|| {
            let mut n = 0u64;
            for c in &int_chunks {
                let mut it = HistogramIter::new(black_box(c));
                while it.next_into(&mut h).is_some() {
                    n = n.wrapping_add(h.count);
                }
            }
            black_box(n)
        })
    });
    grp.bench_function("iterate_float", |b| {
        let mut h = FloatHistogram::default();
        b.iter(|| {
            let mut n = 0f64;
            for c in &float_chunks {
                let mut it = FloatHistogramIter::new(black_box(c));
                while it.next_into(&mut h).is_some() {
                    n += h.count;
                }
            }
            black_box(n)
        })
    });
    grp.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
