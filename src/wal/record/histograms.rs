//! The payload of a histograms record (kind 5): per sample
//! `ref: uvarint | t: zigzag varint | kind: u8 (0 integer, 1 float) |
//! hint: u8 | schema: zigzag varint | zero_threshold: f64 |
//! zero_count, count: uvarint each (integer) or f64 each (float) |
//! sum: f64 | positive spans, negative spans: count uvarint, then
//! (offset zigzag varint, length uvarint) each | positive buckets,
//! negative buckets: count uvarint, then zigzag varint deltas (integer) or
//! f64 counts (float) | custom bounds: count uvarint, then f64 each`.
//! Floats are their bits, little-endian.

use crate::encoding::{put_uvarint, unzigzag, uvarint, zigzag};
use crate::histogram::{CounterResetHint, FloatHistogram, HistSample, Histogram, Span};

/// Most spans, buckets or bounds one entry may declare: a damaged record
/// cannot make the reader allocate more.
const MAX_ITEMS: u64 = 1 << 16;

fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

fn put_spans(out: &mut Vec<u8>, spans: &[Span]) {
    put_uvarint(out, spans.len() as u64);
    for s in spans {
        put_uvarint(out, zigzag(i64::from(s.offset)));
        put_uvarint(out, u64::from(s.length));
    }
}

/// Appends one entry to `out` (a payload, not yet a frame).
pub fn put_entry(out: &mut Vec<u8>, series_ref: u64, t: i64, h: &HistSample) {
    put_uvarint(out, series_ref);
    put_uvarint(out, zigzag(t));
    match h {
        HistSample::Int(h) => {
            out.push(0);
            out.push(h.hint.number());
            put_uvarint(out, zigzag(i64::from(h.schema)));
            put_f64(out, h.zero_threshold);
            put_uvarint(out, h.zero_count);
            put_uvarint(out, h.count);
            put_f64(out, h.sum);
            put_spans(out, &h.positive_spans);
            put_spans(out, &h.negative_spans);
            for b in [&h.positive_buckets, &h.negative_buckets] {
                put_uvarint(out, b.len() as u64);
                for &d in b.iter() {
                    put_uvarint(out, zigzag(d));
                }
            }
            put_uvarint(out, h.custom_values.len() as u64);
            for &c in &h.custom_values {
                put_f64(out, c);
            }
        }
        HistSample::Float(h) => {
            out.push(1);
            out.push(h.hint.number());
            put_uvarint(out, zigzag(i64::from(h.schema)));
            put_f64(out, h.zero_threshold);
            put_f64(out, h.zero_count);
            put_f64(out, h.count);
            put_f64(out, h.sum);
            put_spans(out, &h.positive_spans);
            put_spans(out, &h.negative_spans);
            for b in [&h.positive_buckets, &h.negative_buckets] {
                put_uvarint(out, b.len() as u64);
                for &c in b.iter() {
                    put_f64(out, c);
                }
            }
            put_uvarint(out, h.custom_values.len() as u64);
            for &c in &h.custom_values {
                put_f64(out, c);
            }
        }
    }
}

/// The entries of a histograms record, decoded as they are iterated; a
/// malformed entry ends the iteration early.
#[derive(Debug, Clone, PartialEq)]
pub struct Histograms<'a> {
    /// The payload not yet read.
    pub rest: &'a [u8],
}

struct Cur<'a>(&'a [u8]);

impl Cur<'_> {
    fn uv(&mut self) -> Option<u64> {
        let (v, n) = uvarint(self.0)?;
        self.0 = &self.0[n..];
        Some(v)
    }
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn f64(&mut self) -> Option<f64> {
        let b = self.0.get(..8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        self.0 = &self.0[8..];
        Some(f64::from_bits(u64::from_le_bytes(a)))
    }
    fn count(&mut self) -> Option<usize> {
        let n = self.uv()?;
        (n <= MAX_ITEMS).then_some(n as usize)
    }
    fn spans(&mut self) -> Option<Vec<Span>> {
        let n = self.count()?;
        (0..n)
            .map(|_| {
                Some(Span {
                    offset: i32::try_from(unzigzag(self.uv()?)).ok()?,
                    length: u32::try_from(self.uv()?).ok()?,
                })
            })
            .collect()
    }
    fn f64s(&mut self) -> Option<Vec<f64>> {
        let n = self.count()?;
        (0..n).map(|_| self.f64()).collect()
    }
    fn deltas(&mut self) -> Option<Vec<i64>> {
        let n = self.count()?;
        (0..n).map(|_| self.uv().map(unzigzag)).collect()
    }
}

impl Iterator for Histograms<'_> {
    /// `(series_ref, t, histogram)`.
    type Item = (u64, i64, HistSample);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let mut c = Cur(self.rest);
        let entry = (|| {
            let r = c.uv()?;
            let t = unzigzag(c.uv()?);
            let float = c.byte()?;
            let hint = CounterResetHint::from_number(u64::from(c.byte()?));
            let schema = i32::try_from(unzigzag(c.uv()?)).ok()?;
            let zero_threshold = c.f64()?;
            let h = if float == 0 {
                let zero_count = c.uv()?;
                let count = c.uv()?;
                let sum = c.f64()?;
                HistSample::Int(Histogram {
                    hint,
                    schema,
                    zero_threshold,
                    zero_count,
                    count,
                    sum,
                    positive_spans: c.spans()?,
                    negative_spans: c.spans()?,
                    positive_buckets: c.deltas()?,
                    negative_buckets: c.deltas()?,
                    custom_values: c.f64s()?,
                })
            } else {
                let zero_count = c.f64()?;
                let count = c.f64()?;
                let sum = c.f64()?;
                HistSample::Float(FloatHistogram {
                    hint,
                    schema,
                    zero_threshold,
                    zero_count,
                    count,
                    sum,
                    positive_spans: c.spans()?,
                    negative_spans: c.spans()?,
                    positive_buckets: c.f64s()?,
                    negative_buckets: c.f64s()?,
                    custom_values: c.f64s()?,
                })
            };
            Some((r, t, h))
        })();
        match entry {
            Some(e) => {
                self.rest = c.0;
                Some(e)
            }
            None => {
                self.rest = &[];
                None
            }
        }
    }
}
