//! Sluice's histogram chunks are byte-identical to those Prometheus 3.5.3's
//! own Go encoders made for the same histograms, and Sluice reads
//! Prometheus' chunks back as Prometheus does. The cases and chunks are in
//! `tests/testdata/histogram/golden.json`, written by
//! `scripts/make-histogram-golden` (see `tests/testdata/histogram/README.md`).

#[path = "common/histogram_golden.rs"]
mod histogram_golden;

use histogram_golden::{encode, encode_float, float_histogram, golden, hex, int_histogram, unhex};
use sluice::histogram::{CounterResetHint, FloatHistogram, Histogram, Span};
use sluice::storage::chunk::{FloatHistogramIter, HistogramIter};

/// Compares two histograms bit for bit where floats are concerned.
fn same(a: &Histogram, b: &Histogram) -> bool {
    let f = |x: f64| x.to_bits();
    a.hint == b.hint
        && a.schema == b.schema
        && f(a.zero_threshold) == f(b.zero_threshold)
        && a.zero_count == b.zero_count
        && a.count == b.count
        && f(a.sum) == f(b.sum)
        && a.positive_spans == b.positive_spans
        && a.negative_spans == b.negative_spans
        && a.positive_buckets == b.positive_buckets
        && a.negative_buckets == b.negative_buckets
        && a.custom_values
            .iter()
            .map(|x| f(*x))
            .eq(b.custom_values.iter().map(|x| f(*x)))
}

#[test]
fn integer_histogram_chunks_are_byte_identical_to_prometheus() {
    let g = golden();
    let mut checked = 0;
    for case in g["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        let samples: Vec<(i64, Histogram)> = case["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(int_histogram)
            .collect();
        let want: Vec<String> = case["chunks"]
            .as_array()
            .expect("chunks")
            .iter()
            .map(|c| c["hex"].as_str().expect("hex").to_owned())
            .collect();
        let got: Vec<String> = encode(&samples).iter().map(|c| hex(c)).collect();
        assert_eq!(got.len(), want.len(), "{name}: chunk count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{name}: chunk {i} differs from Prometheus'");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} chunks compared");
}

#[test]
fn prometheus_integer_histogram_chunks_read_back_as_prometheus_reads_them() {
    let g = golden();
    for case in g["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        for (i, chunk) in case["chunks"]
            .as_array()
            .expect("chunks")
            .iter()
            .enumerate()
        {
            let bytes = unhex(chunk["hex"].as_str().expect("hex"));
            let want: Vec<(i64, Histogram)> = chunk["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .map(int_histogram)
                .collect();
            let mut it = HistogramIter::new(&bytes);
            let got: Vec<(i64, Histogram)> = it.by_ref().collect();
            assert_eq!(it.err(), None, "{name} chunk {i}");
            assert_eq!(got.len(), want.len(), "{name} chunk {i}");
            for (k, ((gt, gh), (wt, wh))) in got.iter().zip(&want).enumerate() {
                assert_eq!(gt, wt, "{name} chunk {i} sample {k}");
                assert!(same(gh, wh), "{name} chunk {i} sample {k}:\n{gh:?}\n{wh:?}");
            }
        }
    }
}

#[test]
fn every_prefix_of_a_chunk_fails_cleanly() {
    let g = golden();
    let case = &g["cases"][0];
    let bytes = unhex(case["chunks"][0]["hex"].as_str().expect("hex"));
    for cut in 0..bytes.len() {
        let mut it = HistogramIter::new(&bytes[..cut]);
        let n = it.by_ref().count();
        assert!(
            it.err().is_some() || n == usize::from(u16::from_be_bytes([bytes[0], bytes[1]])),
            "a chunk cut at {cut} of {} read {n} samples without an error",
            bytes.len()
        );
    }
}

fn same_float(a: &FloatHistogram, b: &FloatHistogram) -> bool {
    let f = |x: &f64| x.to_bits();
    a.hint == b.hint
        && a.schema == b.schema
        && f(&a.zero_threshold) == f(&b.zero_threshold)
        && f(&a.zero_count) == f(&b.zero_count)
        && f(&a.count) == f(&b.count)
        && f(&a.sum) == f(&b.sum)
        && a.positive_spans == b.positive_spans
        && a.negative_spans == b.negative_spans
        && a.positive_buckets
            .iter()
            .map(f)
            .eq(b.positive_buckets.iter().map(f))
        && a.negative_buckets
            .iter()
            .map(f)
            .eq(b.negative_buckets.iter().map(f))
        && a.custom_values
            .iter()
            .map(f)
            .eq(b.custom_values.iter().map(f))
}

#[test]
fn float_histogram_chunks_are_byte_identical_to_prometheus() {
    let g = golden();
    let mut checked = 0;
    for case in g["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        // The harness appends each histogram as `h.ToFloat(nil)`.
        let samples: Vec<(i64, FloatHistogram)> = case["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(|v| {
                let (t, h) = int_histogram(v);
                (t, h.to_float())
            })
            .collect();
        let want: Vec<String> = case["float_chunks"]
            .as_array()
            .expect("float chunks")
            .iter()
            .map(|c| c["hex"].as_str().expect("hex").to_owned())
            .collect();
        let got: Vec<String> = encode_float(&samples).iter().map(|c| hex(c)).collect();
        assert_eq!(got.len(), want.len(), "{name}: chunk count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{name}: float chunk {i} differs from Prometheus'");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} chunks compared");
}

#[test]
fn prometheus_float_histogram_chunks_read_back_as_prometheus_reads_them() {
    let g = golden();
    for case in g["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        for (i, chunk) in case["float_chunks"]
            .as_array()
            .expect("chunks")
            .iter()
            .enumerate()
        {
            let bytes = unhex(chunk["hex"].as_str().expect("hex"));
            let want: Vec<(i64, FloatHistogram)> = chunk["samples"]
                .as_array()
                .expect("samples")
                .iter()
                .map(float_histogram)
                .collect();
            let mut it = FloatHistogramIter::new(&bytes);
            let got: Vec<(i64, FloatHistogram)> = it.by_ref().collect();
            assert_eq!(it.err(), None, "{name} chunk {i}");
            assert_eq!(got.len(), want.len(), "{name} chunk {i}");
            for (k, ((gt, gh), (wt, wh))) in got.iter().zip(&want).enumerate() {
                assert_eq!(gt, wt, "{name} chunk {i} sample {k}");
                assert!(
                    same_float(gh, wh),
                    "{name} chunk {i} sample {k}:\n{gh:?}\n{wh:?}"
                );
            }
        }
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use sluice::histogram::BucketIndexes;
    use std::collections::BTreeMap;

    /// Bucket index → absolute count, empty buckets left out: what a
    /// histogram says, whatever empty buckets a chunk's recoding added.
    fn buckets(spans: &[Span], counts: impl Iterator<Item = f64>) -> BTreeMap<i64, u64> {
        BucketIndexes::new(spans)
            .zip(counts)
            .filter(|(_, c)| *c != 0.0)
            .map(|(i, c)| (i, c.to_bits()))
            .collect()
    }

    /// Schema, zero threshold, count, zero count and sum bits, then the
    /// positive and negative buckets.
    type View = (
        i32,
        u64,
        u64,
        u64,
        u64,
        BTreeMap<i64, u64>,
        BTreeMap<i64, u64>,
    );

    fn int_view(h: &Histogram) -> View {
        let f = h.to_float();
        (
            h.schema,
            h.zero_threshold.to_bits(),
            h.count,
            h.zero_count,
            h.sum.to_bits(),
            buckets(&f.positive_spans, f.positive_buckets.iter().copied()),
            buckets(&f.negative_spans, f.negative_buckets.iter().copied()),
        )
    }

    fn spans_of(idx: &[i64]) -> Vec<Span> {
        let mut out: Vec<Span> = Vec::new();
        let mut last = 0;
        for (i, &x) in idx.iter().enumerate() {
            if i > 0 && x == last + 1 {
                if let Some(s) = out.last_mut() {
                    s.length += 1;
                }
            } else {
                let off = if i == 0 { x } else { x - last - 1 };
                out.push(Span {
                    offset: off as i32,
                    length: 1,
                });
            }
            last = x;
        }
        out
    }

    /// A sequence of histograms: random bucket sets and counts that mostly
    /// grow, with resets, schema changes, gauges and stale markers mixed
    /// in.
    fn sequence() -> impl Strategy<Value = Vec<(i64, Histogram)>> {
        proptest::collection::vec(
            (
                proptest::collection::btree_set(-6i64..12, 0..8),
                proptest::collection::vec(0u64..40, 8),
                0u8..20,
                1i64..100_000,
            ),
            1..70,
        )
        .prop_map(|steps| {
            let mut out = Vec::new();
            let mut t = 1_000_000i64;
            let mut level = 0u64;
            let mut sum = 0.0f64;
            for (set, adds, event, dt) in steps {
                t += dt;
                let idx: Vec<i64> = set.into_iter().collect();
                let mut h = Histogram::default();
                match event {
                    0 => level = 0, // a reset
                    1 => {
                        out.push((
                            t,
                            Histogram {
                                sum: f64::from_bits(0x7ff0_0000_0000_0002),
                                ..Histogram::default()
                            },
                        ));
                        continue;
                    }
                    2 => h.hint = CounterResetHint::Gauge,
                    3 => h.schema = 1,
                    _ => {}
                }
                level += 5;
                sum += 1.25;
                let mut prev = 0i64;
                let mut count = 3;
                for (k, _) in idx.iter().enumerate() {
                    let abs = (level + adds[k % adds.len()]) as i64;
                    h.positive_buckets.push(abs - prev);
                    prev = abs;
                    count += abs as u64;
                }
                h.positive_spans = spans_of(&idx);
                h.negative_spans = spans_of(&idx[..idx.len().min(2)]);
                let mut prev = 0i64;
                for k in 0..idx.len().min(2) {
                    let abs = level as i64 + k as i64;
                    h.negative_buckets.push(abs - prev);
                    prev = abs;
                    count += abs as u64;
                }
                h.zero_count = 3;
                h.count = count;
                h.sum = sum;
                out.push((t, h));
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever chunks the appender cuts or recodes, reading them back
        /// gives every histogram appended, in order, bucket for bucket.
        #[test]
        fn integer_chunks_give_back_what_was_appended(seq in sequence()) {
            let chunks = encode(&seq);
            let mut got = Vec::new();
            for c in &chunks {
                let mut it = HistogramIter::new(c);
                got.extend(it.by_ref());
                prop_assert_eq!(it.err(), None);
            }
            prop_assert_eq!(got.len(), seq.len());
            for ((gt, gh), (wt, wh)) in got.iter().zip(&seq) {
                prop_assert_eq!(gt, wt);
                prop_assert_eq!(int_view(gh), int_view(wh));
            }
        }

        #[test]
        fn float_chunks_give_back_what_was_appended(seq in sequence()) {
            let floats: Vec<(i64, FloatHistogram)> = seq.iter().map(|(t, h)| (*t, h.to_float())).collect();
            let chunks = encode_float(&floats);
            let mut got = Vec::new();
            for c in &chunks {
                let mut it = FloatHistogramIter::new(c);
                got.extend(it.by_ref());
                prop_assert_eq!(it.err(), None);
            }
            prop_assert_eq!(got.len(), seq.len());
            for ((gt, gh), (wt, wh)) in got.iter().zip(&floats) {
                prop_assert_eq!(gt, wt);
                let view = |h: &FloatHistogram| (
                    h.schema,
                    h.count.to_bits(),
                    h.zero_count.to_bits(),
                    h.sum.to_bits(),
                    buckets(&h.positive_spans, h.positive_buckets.iter().copied()),
                    buckets(&h.negative_spans, h.negative_buckets.iter().copied()),
                );
                prop_assert_eq!(view(gh), view(wh));
            }
        }

        /// Any bytes: the iterators end, maybe with an error, and never
        /// panic or allocate without bound.
        #[test]
        fn any_bytes_read_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let claimed = match &bytes[..] {
                [a, b, _, ..] => usize::from(u16::from_be_bytes([*a, *b])),
                _ => 0,
            };
            let mut it = HistogramIter::new(&bytes);
            let n = it.by_ref().count();
            prop_assert!(n <= claimed);
            prop_assert_eq!(n < claimed || bytes.len() < 3, it.err().is_some());
            let mut it = FloatHistogramIter::new(&bytes);
            let n = it.by_ref().count();
            prop_assert!(n <= claimed);
            prop_assert_eq!(n < claimed || bytes.len() < 3, it.err().is_some());
        }
    }
}
