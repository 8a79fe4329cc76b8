//! Sluice's histogram chunks are byte-identical to those Prometheus 3.5.3's
//! own Go encoders made for the same histograms, and Sluice reads
//! Prometheus' chunks back as Prometheus does. The cases and chunks are in
//! `tests/testdata/histogram/golden.json`, written by
//! `scripts/make-histogram-golden` (see `tests/testdata/histogram/README.md`).

use sha2::{Digest, Sha256};
use sluice::histogram::{CounterResetHint, FloatHistogram, Histogram, Span};
use sluice::storage::chunk::{
    Appended, FloatAppended, FloatHistogramAppender, FloatHistogramIter, HistogramAppender,
    HistogramIter,
};

const GOLDEN: &str = "tests/testdata/histogram/golden.json";
/// The SHA-256 `scripts/make-histogram-golden` printed.
const GOLDEN_SHA256: &str = "753be4ef9f8e3a72504c4cad286ddd542c6c0d0ba189bd5e95a337fb723a372e";
/// The harness cuts a chunk after this many samples, as a head cuts by
/// size or time, so that a new chunk's header is decided against the
/// previous chunk.
const CUT_AFTER: u16 = 40;

fn golden() -> serde_json::Value {
    let path = format!("{}/{GOLDEN}", env!("CARGO_MANIFEST_DIR"));
    let raw = std::fs::read(&path).expect("golden.json");
    let sum: String = Sha256::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sum, GOLDEN_SHA256, "{GOLDEN} changed");
    serde_json::from_slice(&raw).expect("json")
}

fn num<T: std::str::FromStr>(v: &serde_json::Value) -> T
where
    T::Err: std::fmt::Debug,
{
    v.as_str().expect("a string").parse().expect("a number")
}

fn float(v: &serde_json::Value) -> f64 {
    f64::from_bits(num(v))
}

fn spans(v: &serde_json::Value) -> Vec<Span> {
    v.as_array()
        .expect("spans")
        .iter()
        .map(|p| Span {
            offset: p[0].as_i64().expect("offset") as i32,
            length: p[1].as_u64().expect("length") as u32,
        })
        .collect()
}

fn hint(v: &serde_json::Value) -> CounterResetHint {
    match v.as_u64().expect("hint") {
        1 => CounterResetHint::CounterReset,
        2 => CounterResetHint::NotCounterReset,
        3 => CounterResetHint::Gauge,
        _ => CounterResetHint::Unknown,
    }
}

/// An integer histogram as the harness wrote it.
fn int_histogram(v: &serde_json::Value) -> (i64, Histogram) {
    let list = |k: &str| -> Vec<i64> { v[k].as_array().expect(k).iter().map(num).collect() };
    (
        v["t"].as_i64().expect("t"),
        Histogram {
            hint: hint(&v["hint"]),
            schema: v["schema"].as_i64().expect("schema") as i32,
            zero_threshold: float(&v["zero_threshold_bits"]),
            zero_count: num(&v["zero_count"]),
            count: num(&v["count"]),
            sum: float(&v["sum_bits"]),
            positive_spans: spans(&v["positive_spans"]),
            negative_spans: spans(&v["negative_spans"]),
            positive_buckets: list("positive_buckets"),
            negative_buckets: list("negative_buckets"),
            custom_values: v["custom_value_bits"]
                .as_array()
                .expect("custom values")
                .iter()
                .map(float)
                .collect(),
        },
    )
}

/// A float histogram as the harness wrote it (every number a float's
/// bits).
fn float_histogram(v: &serde_json::Value) -> (i64, FloatHistogram) {
    let list = |k: &str| -> Vec<f64> { v[k].as_array().expect(k).iter().map(float).collect() };
    (
        v["t"].as_i64().expect("t"),
        FloatHistogram {
            hint: hint(&v["hint"]),
            schema: v["schema"].as_i64().expect("schema") as i32,
            zero_threshold: float(&v["zero_threshold_bits"]),
            zero_count: float(&v["zero_count"]),
            count: float(&v["count"]),
            sum: float(&v["sum_bits"]),
            positive_spans: spans(&v["positive_spans"]),
            negative_spans: spans(&v["negative_spans"]),
            positive_buckets: list("positive_buckets"),
            negative_buckets: list("negative_buckets"),
            custom_values: list("custom_value_bits"),
        },
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Appends the samples as the harness does; the chunks' bytes.
fn encode(samples: &[(i64, Histogram)]) -> Vec<Vec<u8>> {
    let mut done: Vec<HistogramAppender> = Vec::new();
    let mut cur = HistogramAppender::new();
    let mut prev: Option<HistogramAppender> = None;
    for (t, h) in samples {
        if cur.num_samples() >= CUT_AFTER {
            let sealed = std::mem::take(&mut cur);
            prev = Some(sealed.clone());
            done.push(sealed);
        }
        match cur.append(prev.as_ref(), *t, h) {
            Appended::Here => {}
            Appended::NewChunk(next) => {
                let sealed = std::mem::replace(&mut cur, *next);
                prev = Some(sealed.clone());
                done.push(sealed);
            }
            Appended::Recoded(recoded) => cur = *recoded,
        }
    }
    done.push(cur);
    done.iter().map(|c| c.bytes().to_vec()).collect()
}

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

/// Appends float histograms as the harness does; the chunks' bytes.
fn encode_float(samples: &[(i64, FloatHistogram)]) -> Vec<Vec<u8>> {
    let mut done: Vec<FloatHistogramAppender> = Vec::new();
    let mut cur = FloatHistogramAppender::new();
    let mut prev: Option<FloatHistogramAppender> = None;
    for (t, h) in samples {
        if cur.num_samples() >= CUT_AFTER {
            let sealed = std::mem::take(&mut cur);
            prev = Some(sealed.clone());
            done.push(sealed);
        }
        match cur.append(prev.as_ref(), *t, h) {
            FloatAppended::Here => {}
            FloatAppended::NewChunk(next) => {
                let sealed = std::mem::replace(&mut cur, *next);
                prev = Some(sealed.clone());
                done.push(sealed);
            }
            FloatAppended::Recoded(recoded) => cur = *recoded,
        }
    }
    done.push(cur);
    done.iter().map(|c| c.bytes().to_vec()).collect()
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
