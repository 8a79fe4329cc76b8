//! What the integer and float histogram chunks share (`histogram_meta.go`):
//! the layout written once at the start of a chunk (zero threshold, schema,
//! spans, custom bounds), the counter-reset header in the chunk's third
//! byte, and the bucket insertions that let a chunk take a histogram whose
//! buckets are a superset of the chunk's (or, for gauges, any layout).

use super::bstream::BitCursor;
use super::varbit::{put_int, put_uint, read_int, read_uint};
use super::BitWriter;
use crate::histogram::{BucketIndexes, Span, CUSTOM_BUCKETS_SCHEMA};

/// The counter-reset header of a histogram chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CounterResetHeader {
    /// Whether the chunk starts after a reset is not known.
    #[default]
    Unknown,
    /// The chunk starts with a counter reset.
    CounterReset,
    /// The chunk continues the previous one without a reset.
    NotCounterReset,
    /// The chunk holds gauge histograms.
    Gauge,
}

impl CounterResetHeader {
    /// The header's bits (the top two of the byte).
    pub fn bits(self) -> u8 {
        match self {
            Self::Unknown => 0b0000_0000,
            Self::CounterReset => 0b1000_0000,
            Self::NotCounterReset => 0b0100_0000,
            Self::Gauge => 0b1100_0000,
        }
    }

    /// The hint a reader gives the `read`-th sample (1-based) of a chunk
    /// with this header: gauge in a gauge chunk, not a reset after the
    /// first sample, and unknown for the first, whose chunk may not follow
    /// the one before it (Prometheus' `counterResetHint`).
    pub fn hint_for(self, read: u16) -> crate::histogram::CounterResetHint {
        use crate::histogram::CounterResetHint as H;
        match (self, read) {
            (Self::Gauge, _) => H::Gauge,
            (_, n) if n > 1 => H::NotCounterReset,
            _ => H::Unknown,
        }
    }

    /// The header a chunk's third byte holds.
    pub fn from_byte(b: u8) -> Self {
        match b & 0b1100_0000 {
            0b1000_0000 => Self::CounterReset,
            0b0100_0000 => Self::NotCounterReset,
            0b1100_0000 => Self::Gauge,
            _ => Self::Unknown,
        }
    }
}

/// A chunk's layout.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    pub schema: i32,
    pub zero_threshold: f64,
    pub positive_spans: Vec<Span>,
    pub negative_spans: Vec<Span>,
    pub custom_values: Vec<f64>,
}

/// Writes the layout.
pub fn put_layout(
    w: &mut BitWriter,
    schema: i32,
    zero_threshold: f64,
    positive: &[Span],
    negative: &[Span],
    custom_values: &[f64],
) {
    put_zero_threshold(w, zero_threshold);
    put_int(w, i64::from(schema));
    put_spans(w, positive);
    put_spans(w, negative);
    if schema == CUSTOM_BUCKETS_SCHEMA {
        put_uint(w, custom_values.len() as u64);
        for &b in custom_values {
            put_custom_bound(w, b);
        }
    }
}

/// Most spans or custom bounds a layout may declare: more than any valid
/// histogram has, and a bound on what damaged bytes can make a reader
/// allocate.
const MAX_LAYOUT_ITEMS: u64 = 1 << 16;

/// Reads a layout written by [`put_layout`].
pub fn read_layout(r: &mut BitCursor<'_>) -> Option<Layout> {
    let zero_threshold = read_zero_threshold(r)?;
    let schema = i32::try_from(read_int(r)?).ok()?;
    let positive_spans = read_spans(r)?;
    let negative_spans = read_spans(r)?;
    let mut custom_values = Vec::new();
    if schema == CUSTOM_BUCKETS_SCHEMA {
        let n = read_uint(r)?;
        if n > MAX_LAYOUT_ITEMS {
            return None;
        }
        for _ in 0..n {
            custom_values.push(read_custom_bound(r)?);
        }
    }
    Some(Layout {
        schema,
        zero_threshold,
        positive_spans,
        negative_spans,
        custom_values,
    })
}

fn put_spans(w: &mut BitWriter, spans: &[Span]) {
    put_uint(w, spans.len() as u64);
    for s in spans {
        put_uint(w, u64::from(s.length));
        put_int(w, i64::from(s.offset));
    }
}

fn read_spans(r: &mut BitCursor<'_>) -> Option<Vec<Span>> {
    let n = read_uint(r)?;
    if n > MAX_LAYOUT_ITEMS {
        return None;
    }
    let mut spans = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let length = u32::try_from(read_uint(r)?).ok()?;
        let offset = i32::try_from(read_int(r)?).ok()?;
        spans.push(Span { offset, length });
    }
    Some(spans)
}

/// The zero threshold: 0 as a zero byte; a power of two from 2^-243 to
/// 2^10 as one byte (its exponent + 243, for the fraction 0.5); anything
/// else as 255 and the 64 bits of the float.
fn put_zero_threshold(w: &mut BitWriter, threshold: f64) {
    if threshold == 0.0 {
        w.write_byte(0);
        return;
    }
    match frexp(threshold) {
        (frac, exp) if frac == 0.5 && (-242..=11).contains(&exp) => {
            w.write_byte((exp + 243) as u8);
        }
        _ => {
            w.write_byte(255);
            w.write_bits(threshold.to_bits(), 64);
        }
    }
}

fn read_zero_threshold(r: &mut BitCursor<'_>) -> Option<f64> {
    match r.read(8)? as u8 {
        0 => Some(0.0),
        255 => Some(f64::from_bits(r.read(64)?)),
        b => Some(0.5 * 2f64.powi(i32::from(b) - 243)),
    }
}

/// `x` as `frac × 2^exp` with 0.5 ≤ |frac| < 1, as Go's `math.Frexp`
/// (which returns `(x, 0)` for 0, infinities and NaN).
fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (f, e) = frexp(x * 2f64.powi(64));
        return (f, e - 64);
    }
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp - 1022)
}

/// A custom bucket bound: a whole number of thousandths from 0 to 33554.43
/// as a varbit uint of thousandths + 1; anything else as a 0 bit and the
/// 64 bits of the float.
fn put_custom_bound(w: &mut BitWriter, f: f64) {
    let tf = f * 1000.0;
    // Go: `in == float64(uint(math.Round(in*1000)))/1000`.
    let whole = {
        let i = go_uint((f * 1000.0).round());
        (i as f64) / 1000.0 == f
    };
    if !(0.0..=33_554_430.0).contains(&tf) || !whole {
        w.write_bit(false);
        w.write_bits(f.to_bits(), 64);
        return;
    }
    put_uint(w, go_uint(tf.round()) + 1);
}

/// Go's `uint(x)` of a float already in range (no fraction, not negative);
/// out-of-range values saturate, where Go's result is unspecified (they
/// only reach here for bounds that then fail the comparison).
fn go_uint(x: f64) -> u64 {
    x as u64
}

fn read_custom_bound(r: &mut BitCursor<'_>) -> Option<f64> {
    match read_uint(r)? {
        0 => Some(f64::from_bits(r.read(64)?)),
        b => Some((b - 1) as f64 / 1000.0),
    }
}

/// Buckets to insert: `num` of them before the bucket at position `pos` of
/// the existing list; `bucket_idx` is the bucket index Prometheus records
/// with it (the last of the run, as `expandIntSpansAndBuckets` sets it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Insert {
    pub pos: usize,
    pub num: usize,
    pub bucket_idx: i64,
}

/// What comparing a chunk's buckets with a new histogram's found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expansion {
    /// Buckets the chunk lacks (to insert into every sample so far).
    pub forward: Vec<Insert>,
    /// Buckets the new histogram lacks that are empty in the chunk's last
    /// sample (to insert into the new histogram).
    pub backward: Vec<Insert>,
}

/// Compares the chunk's buckets `a` (spans and counts) with a new
/// histogram's `b` for a counter histogram: `None` when a bucket of `a`
/// that has counts is missing from `b`, or a bucket's count went down (a
/// counter reset). `a_vals` and `b_vals` are the bucket values: deltas
/// (integer histograms, summed as they are walked) or absolute counts.
///
/// Prometheus' integer and float versions differ in one detail kept here:
/// where `a` lacks a bucket of `b`, the integer one records that index on
/// the forward insert, the float one on the backward insert
/// (`float_quirk`); it shows in the spans of a histogram that both lacks
/// and brings buckets.
pub fn expand_counter_buckets<V: BucketValue + PartialOrd>(
    a: &[Span],
    b: &[Span],
    a_vals: &[V],
    b_vals: &[V],
    deltas: bool,
    float_quirk: bool,
) -> Option<Expansion> {
    // The count of the bucket at each side's position, kept as they move
    // (no list of absolute counts is built).
    let at = |v: &[V], i: usize| v.get(i).copied().unwrap_or_default();
    let step = |cur: V, v: &[V], i: usize| {
        if deltas {
            cur.plus(at(v, i))
        } else {
            at(v, i)
        }
    };
    let mut a_cur = at(a_vals, 0);
    let mut b_cur = at(b_vals, 0);
    let mut ai = BucketIndexes::new(a);
    let mut bi = BucketIndexes::new(b);
    let mut a_inserts = Vec::new();
    let mut b_inserts = Vec::new();
    let mut a_inter = Insert::default();
    let mut b_inter = Insert::default();
    let mut a_next = ai.next();
    let mut b_next = bi.next();
    let (mut a_pos, mut b_pos) = (0usize, 0usize);
    loop {
        match (a_next, b_next) {
            (Some(a_idx), Some(b_idx)) if a_idx == b_idx => {
                if a_cur > b_cur {
                    return None;
                }
                if a_inter.num > 0 {
                    a_inserts.push(a_inter);
                    a_inter.num = 0;
                }
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                    b_inter.num = 0;
                }
                a_next = ai.next();
                b_next = bi.next();
                a_inter.pos += 1;
                a_pos += 1;
                a_cur = step(a_cur, a_vals, a_pos);
                b_inter.pos += 1;
                b_pos += 1;
                b_cur = step(b_cur, b_vals, b_pos);
            }
            (Some(a_idx), b) if b.is_none_or(|b_idx| a_idx < b_idx) => {
                // b lacks a bucket of a: fine only if it is empty in a.
                if a_cur != V::default() {
                    return None;
                }
                b_inter.num += 1;
                b_inter.bucket_idx = a_idx;
                if a_inter.num > 0 {
                    a_inserts.push(a_inter);
                    a_inter.num = 0;
                }
                a_next = ai.next();
                a_inter.pos += 1;
                a_pos += 1;
                a_cur = step(a_cur, a_vals, a_pos);
            }
            (_, Some(b_idx)) => {
                // a lacks a bucket of b (a is past it, or ended).
                a_inter.num += 1;
                if float_quirk {
                    b_inter.bucket_idx = b_idx;
                } else {
                    a_inter.bucket_idx = b_idx;
                }
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                    b_inter.num = 0;
                }
                b_next = bi.next();
                b_inter.pos += 1;
                b_pos += 1;
                b_cur = step(b_cur, b_vals, b_pos);
            }
            (Some(_), None) | (None, None) => {
                if a_inter.num > 0 {
                    a_inserts.push(a_inter);
                }
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                }
                return Some(Expansion {
                    forward: a_inserts,
                    backward: b_inserts,
                });
            }
        }
    }
}

/// Spans built bucket index by bucket index, in ascending order (the
/// `addBucket` of Prometheus' span merging).
#[derive(Debug, Default)]
struct SpanBuilder {
    spans: Vec<Span>,
    last: i64,
}

impl SpanBuilder {
    fn add(&mut self, bucket: i64) {
        let mut offset = bucket - self.last - 1;
        match self.spans.last_mut() {
            Some(s) if offset == 0 => s.length += 1,
            _ => {
                if self.spans.is_empty() {
                    offset += 1;
                }
                self.spans.push(Span {
                    offset: offset as i32,
                    length: 1,
                });
            }
        }
        self.last = bucket;
    }
}

/// For gauge histograms: the inserts that make `a` and `b` both the union
/// of their buckets, and the union's spans (`expandSpansBothWays`).
pub fn expand_both_ways(a: &[Span], b: &[Span]) -> (Expansion, Vec<Span>) {
    let mut ai = BucketIndexes::new(a);
    let mut bi = BucketIndexes::new(b);
    let mut f_inserts = Vec::new();
    let mut b_inserts = Vec::new();
    let mut merged = SpanBuilder::default();
    let mut f_inter = Insert::default();
    let mut b_inter = Insert::default();
    let mut a_next = ai.next();
    let mut b_next = bi.next();
    loop {
        match (a_next, b_next) {
            (Some(av), Some(bv)) if av == bv => {
                if f_inter.num > 0 {
                    f_inserts.push(f_inter);
                    f_inter.num = 0;
                }
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                    b_inter.num = 0;
                }
                merged.add(av);
                a_next = ai.next();
                b_next = bi.next();
                f_inter.pos += 1;
                b_inter.pos += 1;
            }
            (Some(av), Some(bv)) if av < bv => {
                b_inter.num += 1;
                if f_inter.num > 0 {
                    f_inserts.push(f_inter);
                    f_inter.num = 0;
                }
                merged.add(av);
                f_inter.pos += 1;
                a_next = ai.next();
            }
            (Some(_), Some(bv)) => {
                f_inter.num += 1;
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                    b_inter.num = 0;
                }
                merged.add(bv);
                b_inter.pos += 1;
                b_next = bi.next();
            }
            (Some(av), None) => {
                b_inter.num += 1;
                merged.add(av);
                a_next = ai.next();
            }
            (None, Some(bv)) => {
                f_inter.num += 1;
                merged.add(bv);
                b_next = bi.next();
            }
            (None, None) => {
                if f_inter.num > 0 {
                    f_inserts.push(f_inter);
                }
                if b_inter.num > 0 {
                    b_inserts.push(b_inter);
                }
                return (
                    Expansion {
                        forward: f_inserts,
                        backward: b_inserts,
                    },
                    merged.spans,
                );
            }
        }
    }
}

/// A bucket value: integer deltas or float counts. Integer sums wrap, as
/// Go's do: damaged or hostile deltas must not panic.
pub trait BucketValue: Copy + Default + PartialEq {
    /// `self + o`.
    fn plus(self, o: Self) -> Self;
    /// `-self`.
    fn minus(self) -> Self;
}
impl BucketValue for i64 {
    fn plus(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn minus(self) -> Self {
        self.wrapping_neg()
    }
}
impl BucketValue for f64 {
    fn plus(self, o: Self) -> Self {
        self + o
    }
    fn minus(self) -> Self {
        -self
    }
}

/// `input` with the inserts' new buckets added (`insert` in Go). With
/// `deltas`, values are deltas and a new bucket is empty (its delta
/// cancels the running count, and the next bucket's delta takes it back);
/// otherwise values are absolute and a new bucket is 0.
pub fn insert<V: BucketValue>(input: &[V], inserts: &[Insert], deltas: bool) -> Vec<V> {
    let extra: usize = inserts.iter().map(|i| i.num).sum();
    let mut out = Vec::with_capacity(input.len() + extra);
    let mut v = V::default();
    let mut ii = 0;
    let empty = |v: V| if deltas { v.minus() } else { V::default() };
    for (i, &d) in input.iter().enumerate() {
        if ii < inserts.len() && i == inserts[ii].pos {
            out.push(empty(v));
            for _ in 1..inserts[ii].num {
                out.push(V::default());
            }
            ii += 1;
            out.push(if deltas { d.plus(v) } else { d });
            v = d.plus(v);
            continue;
        }
        out.push(d);
        v = v.plus(d);
    }
    // An insert after the last bucket.
    if ii + 1 == inserts.len() {
        out.push(empty(v));
        for _ in 1..inserts[ii].num {
            out.push(V::default());
        }
    }
    out
}

/// The spans of `spans` with the inserts' buckets added
/// (`adjustForInserts`).
pub fn adjust_for_inserts(spans: &[Span], inserts: &[Insert]) -> Vec<Span> {
    let Some(first) = inserts.first() else {
        return spans.to_vec();
    };
    let mut merged = SpanBuilder::default();
    let mut i = 0;
    let mut insert_idx = first.bucket_idx;
    let mut insert_num = first.num;
    let consume = |i: &mut usize, insert_idx: &mut i64, insert_num: &mut usize| {
        *insert_num = insert_num.saturating_sub(1);
        if *insert_num == 0 {
            *i += 1;
            if let Some(next) = inserts.get(*i) {
                *insert_idx = next.bucket_idx;
                *insert_num = next.num;
            }
        } else {
            *insert_idx += 1;
        }
    };
    let mut it = BucketIndexes::new(spans);
    let mut bucket = it.next();
    while let Some(b) = bucket {
        if i < inserts.len() && insert_idx < b {
            merged.add(insert_idx);
            consume(&mut i, &mut insert_idx, &mut insert_num);
        } else {
            merged.add(b);
            bucket = it.next();
        }
    }
    while let Some(ins) = inserts.get(i) {
        merged.add(ins.bucket_idx);
        consume(&mut i, &mut insert_idx, &mut insert_num);
    }
    merged.spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_thresholds_take_one_byte_when_prometheus_does() {
        for (t, bytes) in [
            (0.0, 1),
            (2f64.powi(-128), 1), // Prometheus' default 2^-128
            (0.5, 1),
            (1024.0, 1),
            (2048.0, 9),
            (0.3, 9),
            (2f64.powi(-243), 1),
            (2f64.powi(-244), 9),
        ] {
            let mut w = BitWriter::default();
            put_zero_threshold(&mut w, t);
            assert_eq!(w.bytes().len(), bytes, "{t}");
            let mut r = BitCursor::new(w.bytes());
            assert_eq!(read_zero_threshold(&mut r), Some(t), "{t}");
        }
        let mut w = BitWriter::default();
        put_zero_threshold(&mut w, 2f64.powi(-128));
        assert_eq!(w.bytes(), [(-127 + 243) as u8]);
    }

    #[test]
    fn frexp_matches_go() {
        assert_eq!(frexp(8.0), (0.5, 4));
        assert_eq!(frexp(0.3), (0.6, -1));
        assert_eq!(frexp(-3.0), (-0.75, 2));
        assert_eq!(frexp(f64::MIN_POSITIVE / 4.0), (0.5, -1023));
    }

    #[test]
    fn custom_bounds_in_thousandths_are_short() {
        for (b, bits) in [
            (0.0, 5),       // thousandths 0 + 1 = 1
            (0.25, 13),     // 250 + 1
            (1.0, 17),      // 1001
            (0.0001, 65),   // not whole thousandths
            (-1.0, 65),     // negative
            (40_000.0, 65), // past 33554.43
            (f64::INFINITY, 65),
        ] {
            let mut w = BitWriter::default();
            put_custom_bound(&mut w, b);
            assert_eq!(w.bit_len(), bits, "{b}");
            let mut r = BitCursor::new(w.bytes());
            assert_eq!(read_custom_bound(&mut r), Some(b), "{b}");
        }
    }

    fn spans(pairs: &[(i32, u32)]) -> Vec<Span> {
        pairs
            .iter()
            .map(|&(offset, length)| Span { offset, length })
            .collect()
    }

    #[test]
    fn a_new_bucket_is_a_forward_insert_and_deltas_stay_right() {
        // Chunk: buckets 0,1 with counts 2,3 (deltas 2,1). New: 0,1,2.
        let a = spans(&[(0, 2)]);
        let b = spans(&[(0, 3)]);
        let e =
            expand_counter_buckets(&a, &b, &[2, 1], &[2, 1, -2], true, false).expect("appendable");
        assert_eq!(
            e.forward,
            [Insert {
                pos: 2,
                num: 1,
                bucket_idx: 2
            }]
        );
        assert!(e.backward.is_empty());
        // The old sample gains an empty bucket 2: deltas 2,1,-3.
        assert_eq!(insert(&[2i64, 1], &e.forward, true), [2, 1, -3]);
        assert_eq!(insert(&[2.0f64, 3.0], &e.forward, false), [2.0, 3.0, 0.0]);
        // A count that went down is a reset.
        assert!(expand_counter_buckets(&a, &a, &[2, 1], &[2, 0], true, false).is_none());
        // A bucket gone that had counts is a reset; an empty one is not.
        assert!(expand_counter_buckets(&b, &a, &[2, 1, -2], &[2, 1], true, false).is_none());
        let e = expand_counter_buckets(&b, &a, &[2.0, 3.0, 0.0], &[2.0, 3.0], false, true)
            .expect("appendable");
        assert_eq!(e.backward.len(), 1);
        assert_eq!(adjust_for_inserts(&a, &e.backward), b);
    }

    #[test]
    fn gauges_merge_both_ways() {
        let a = spans(&[(0, 2)]);
        let b = spans(&[(1, 2)]);
        let (e, merged) = expand_both_ways(&a, &b);
        assert_eq!(merged, spans(&[(0, 3)]));
        assert_eq!(e.forward.len(), 1);
        assert_eq!(e.backward.len(), 1);
    }
}
