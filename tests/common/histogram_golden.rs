//! The golden histogram cases of `tests/testdata/histogram/golden.json`
//! (see its README): parsing, and appending as the harness appends, for
//! the tests and the bench.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use sluice::histogram::{CounterResetHint, FloatHistogram, Histogram, Span};
use sluice::storage::chunk::{Appended, FloatAppended, FloatHistogramAppender, HistogramAppender};

pub const GOLDEN: &str = "tests/testdata/histogram/golden.json";
/// The SHA-256 `scripts/make-histogram-golden` printed.
pub const GOLDEN_SHA256: &str = "55f47e25f1c7245655997ce916f166af17c1574e4e330608a59b2bc3dafd6654";
/// The harness cuts a chunk after this many samples, as a head cuts by
/// size or time, so that a new chunk's header is decided against the
/// previous chunk.
pub const CUT_AFTER: u16 = 40;

pub fn golden() -> serde_json::Value {
    let path = format!("{}/{GOLDEN}", env!("CARGO_MANIFEST_DIR"));
    let raw = std::fs::read(&path).expect("golden.json");
    let sum: String = Sha256::digest(&raw)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sum, GOLDEN_SHA256, "{GOLDEN} changed");
    serde_json::from_slice(&raw).expect("json")
}

pub fn num<T: std::str::FromStr>(v: &serde_json::Value) -> T
where
    T::Err: std::fmt::Debug,
{
    v.as_str().expect("a string").parse().expect("a number")
}

pub fn float(v: &serde_json::Value) -> f64 {
    f64::from_bits(num(v))
}

pub fn spans(v: &serde_json::Value) -> Vec<Span> {
    v.as_array()
        .expect("spans")
        .iter()
        .map(|p| Span {
            offset: p[0].as_i64().expect("offset") as i32,
            length: p[1].as_u64().expect("length") as u32,
        })
        .collect()
}

pub fn hint(v: &serde_json::Value) -> CounterResetHint {
    CounterResetHint::from_number(v.as_u64().expect("hint"))
}

/// An integer histogram as the harness wrote it.
pub fn int_histogram(v: &serde_json::Value) -> (i64, Histogram) {
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
pub fn float_histogram(v: &serde_json::Value) -> (i64, FloatHistogram) {
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

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Appends the samples as the harness does; the chunks' bytes.
pub fn encode(samples: &[(i64, Histogram)]) -> Vec<Vec<u8>> {
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

/// Appends float histograms as the harness does; the chunks' bytes.
pub fn encode_float(samples: &[(i64, FloatHistogram)]) -> Vec<Vec<u8>> {
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
