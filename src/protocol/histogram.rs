//! The remote-write `Histogram` message (the same field numbers in 1.0 and
//! 2.0; `docs/wire-notes.md` §1): decoded into the model's integer or
//! float histogram, which the `count` oneof decides (`count_int` = 1,
//! `count_float` = 2), then validated as Prometheus validates it.

use super::wire::{DecodeError, Reader, Value};
use crate::encoding::unzigzag;
use crate::histogram::{CounterResetHint, FloatHistogram, Histogram, HistogramError, Span};

/// One histogram sample off the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum WireHistogram {
    /// Integer counts, buckets as deltas.
    Int(i64, Histogram),
    /// Float counts, buckets absolute.
    Float(i64, FloatHistogram),
}

impl WireHistogram {
    /// The sample's timestamp.
    pub fn t(&self) -> i64 {
        match self {
            Self::Int(t, _) | Self::Float(t, _) => *t,
        }
    }

    /// The timestamp and the sample, for the head.
    pub fn into_sample(self) -> (i64, crate::histogram::HistSample) {
        match self {
            Self::Int(t, h) => (t, crate::histogram::HistSample::Int(h)),
            Self::Float(t, h) => (t, crate::histogram::HistSample::Float(h)),
        }
    }

    /// Checks it as Prometheus does before storing.
    pub fn validate(&self) -> Result<(), HistogramError> {
        match self {
            Self::Int(_, h) => h.validate(),
            Self::Float(_, h) => h.validate(),
        }
    }
}

/// Appends `h` at `t` as a remote-write `Histogram` message (the bytes
/// inside the field; the same for 1.0 and 2.0), as Prometheus encodes it:
/// the count and zero count in the oneof fields of the histogram's kind,
/// integer buckets as packed zigzag deltas, float ones as packed doubles.
pub fn encode(t: i64, h: &crate::histogram::HistSample, out: &mut Vec<u8>) {
    use crate::encoding::{put_uvarint, zigzag};
    use crate::histogram::HistSample;
    fn double(out: &mut Vec<u8>, tag: u8, v: f64) {
        out.push(tag);
        out.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    fn spans(out: &mut Vec<u8>, tag: u8, spans: &[Span]) {
        for s in spans {
            let mut m = Vec::with_capacity(12);
            m.push(0x08); // BucketSpan.offset = 1, sint32
            put_uvarint(&mut m, zigzag(i64::from(s.offset)));
            m.push(0x10); // BucketSpan.length = 2
            put_uvarint(&mut m, u64::from(s.length));
            out.push(tag);
            put_uvarint(out, m.len() as u64);
            out.extend_from_slice(&m);
        }
    }
    fn packed_deltas(out: &mut Vec<u8>, tag: u8, v: &[i64]) {
        if v.is_empty() {
            return;
        }
        let mut m = Vec::with_capacity(v.len() * 2);
        for &d in v {
            put_uvarint(&mut m, zigzag(d));
        }
        out.push(tag);
        put_uvarint(out, m.len() as u64);
        out.extend_from_slice(&m);
    }
    fn packed_doubles(out: &mut Vec<u8>, tag: &[u8], v: &[f64]) {
        if v.is_empty() {
            return;
        }
        out.extend_from_slice(tag);
        put_uvarint(out, (v.len() * 8) as u64);
        for &x in v {
            out.extend_from_slice(&x.to_bits().to_le_bytes());
        }
    }
    match h {
        HistSample::Int(h) => {
            out.push(0x08); // count_int = 1
            put_uvarint(out, h.count);
            double(out, 0x19, h.sum); // sum = 3
            out.push(0x20); // schema = 4, sint32
            put_uvarint(out, zigzag(i64::from(h.schema)));
            double(out, 0x29, h.zero_threshold); // zero_threshold = 5
            out.push(0x30); // zero_count_int = 6
            put_uvarint(out, h.zero_count);
            spans(out, 0x42, &h.negative_spans); // negative_spans = 8
            packed_deltas(out, 0x4a, &h.negative_buckets); // negative_deltas = 9
            spans(out, 0x5a, &h.positive_spans); // positive_spans = 11
            packed_deltas(out, 0x62, &h.positive_buckets); // positive_deltas = 12
            out.push(0x70); // reset_hint = 14
            put_uvarint(out, u64::from(h.hint.number()));
            packed_doubles(out, &[0x82, 0x01], &h.custom_values); // custom_values = 16
        }
        HistSample::Float(h) => {
            double(out, 0x11, h.count); // count_float = 2
            double(out, 0x19, h.sum);
            out.push(0x20);
            put_uvarint(out, zigzag(i64::from(h.schema)));
            double(out, 0x29, h.zero_threshold);
            double(out, 0x39, h.zero_count); // zero_count_float = 7
            spans(out, 0x42, &h.negative_spans);
            packed_doubles(out, &[0x52], &h.negative_buckets); // negative_counts = 10
            spans(out, 0x5a, &h.positive_spans);
            packed_doubles(out, &[0x6a], &h.positive_buckets); // positive_counts = 13
            out.push(0x70);
            put_uvarint(out, u64::from(h.hint.number()));
            packed_doubles(out, &[0x82, 0x01], &h.custom_values);
        }
    }
    out.push(0x78); // timestamp = 15
    put_uvarint(out, t as u64);
}

/// Most buckets (or spans, or custom bounds) one histogram may carry: far
/// more than any real one (Prometheus' own limit is 160 buckets by default
/// when scraping), and a bound on what one message can make us allocate
/// beyond its own size.
pub const MAX_HISTOGRAM_ITEMS: usize = 1 << 16;

/// The `Histogram` message's field numbers (the same in remote write 1.0
/// and 2.0).
pub mod field {
    /// `count_int` (uint64): the count of an integer histogram.
    pub const COUNT_INT: u32 = 1;
    /// `count_float` (double): the count of a float histogram.
    pub const COUNT_FLOAT: u32 = 2;
    /// `sum` (double).
    pub const SUM: u32 = 3;
    /// `schema` (sint32).
    pub const SCHEMA: u32 = 4;
    /// `zero_threshold` (double).
    pub const ZERO_THRESHOLD: u32 = 5;
    /// `zero_count_int` (uint64).
    pub const ZERO_COUNT_INT: u32 = 6;
    /// `zero_count_float` (double).
    pub const ZERO_COUNT_FLOAT: u32 = 7;
    /// `negative_spans` (repeated BucketSpan).
    pub const NEGATIVE_SPANS: u32 = 8;
    /// `negative_deltas` (repeated sint64): integer bucket deltas.
    pub const NEGATIVE_DELTAS: u32 = 9;
    /// `negative_counts` (repeated double): float bucket counts.
    pub const NEGATIVE_COUNTS: u32 = 10;
    /// `positive_spans` (repeated BucketSpan).
    pub const POSITIVE_SPANS: u32 = 11;
    /// `positive_deltas` (repeated sint64).
    pub const POSITIVE_DELTAS: u32 = 12;
    /// `positive_counts` (repeated double).
    pub const POSITIVE_COUNTS: u32 = 13;
    /// `reset_hint` (enum ResetHint).
    pub const RESET_HINT: u32 = 14;
    /// `timestamp` (int64, milliseconds).
    pub const TIMESTAMP: u32 = 15;
    /// `custom_values` (repeated double): custom bucket bounds.
    pub const CUSTOM_VALUES: u32 = 16;
    /// `BucketSpan.offset` (sint32).
    pub const SPAN_OFFSET: u32 = 1;
    /// `BucketSpan.length` (uint32).
    pub const SPAN_LENGTH: u32 = 2;
}

/// Why one `Histogram` message could not be read. The rest of its request
/// is unaffected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramWireError {
    /// The message's bytes are not protobuf.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A repeated field of the wrong wire type, or with too many values.
    #[error("histogram field {0} has the wrong type")]
    WrongType(&'static str),
    /// A known field of the wrong wire type.
    #[error("histogram field {0} has the wrong type")]
    WrongTypeField(u32),
    /// A schema that does not fit 32 bits.
    #[error("histogram schema out of range")]
    SchemaOutOfRange,
    /// More spans than [`MAX_HISTOGRAM_ITEMS`].
    #[error("histogram has more than {MAX_HISTOGRAM_ITEMS} spans")]
    TooManySpans,
    /// A span offset that does not fit 32 bits.
    #[error("span offset out of range")]
    SpanOffsetOutOfRange,
    /// A span length that does not fit 32 bits.
    #[error("span length out of range")]
    SpanLengthOutOfRange,
    /// A span field of the wrong wire type.
    #[error("histogram span field has the wrong type")]
    SpanWrongType,
    /// `count_float` with integer bucket deltas.
    #[error("a float histogram (count_float) must carry bucket counts, not deltas")]
    FloatWithDeltas,
    /// `count_int` (or no count) with float bucket counts.
    #[error("an integer histogram (count_int) must carry bucket deltas, not counts")]
    IntWithCounts,
}

/// A `Histogram` message's time and `start_timestamp` (field 17, remote
/// write 2.0; 0 when unset or unreadable).
pub fn time_and_start(msg: &[u8]) -> (i64, i64) {
    let (mut t, mut st) = (0, 0);
    let mut r = Reader::new(msg);
    while let Ok(Some((f, v, _))) = r.next_field() {
        match (f, v) {
            (field::TIMESTAMP, Value::Varint(x)) => t = x as i64,
            (17, Value::Varint(x)) => st = x as i64,
            _ => {}
        }
    }
    (t, st)
}

/// Decodes one `Histogram` message. The framing was checked with the
/// request; a value of the wrong wire type or too many buckets is an error
/// for this histogram only.
pub fn decode(msg: &[u8]) -> Result<WireHistogram, HistogramWireError> {
    use field::*;
    use HistogramWireError as E;
    let mut int_count: Option<u64> = None;
    let mut float_count: Option<f64> = None;
    let mut zero_int = 0u64;
    let mut zero_float: Option<f64> = None;
    let mut sum = 0.0;
    let mut schema = 0i32;
    let mut zero_threshold = 0.0;
    let mut pos_spans = Vec::new();
    let mut neg_spans = Vec::new();
    let mut pos_deltas = Vec::new();
    let mut neg_deltas = Vec::new();
    let mut pos_counts = Vec::new();
    let mut neg_counts = Vec::new();
    let mut custom = Vec::new();
    let mut hint = CounterResetHint::Unknown;
    let mut t = 0i64;
    let mut r = Reader::new(msg);
    while let Some((f, v, _)) = r.next_field()? {
        match (f, v) {
            (COUNT_INT, Value::Varint(x)) => int_count = Some(x),
            (COUNT_FLOAT, Value::Fixed64(x)) => float_count = Some(f64::from_bits(x)),
            (SUM, Value::Fixed64(x)) => sum = f64::from_bits(x),
            (SCHEMA, Value::Varint(x)) => {
                schema = i32::try_from(unzigzag(x)).map_err(|_| E::SchemaOutOfRange)?
            }
            (ZERO_THRESHOLD, Value::Fixed64(x)) => zero_threshold = f64::from_bits(x),
            (ZERO_COUNT_INT, Value::Varint(x)) => zero_int = x,
            (ZERO_COUNT_FLOAT, Value::Fixed64(x)) => zero_float = Some(f64::from_bits(x)),
            (NEGATIVE_SPANS, Value::Bytes(b)) => push_limited(&mut neg_spans, span(b)?)?,
            (POSITIVE_SPANS, Value::Bytes(b)) => push_limited(&mut pos_spans, span(b)?)?,
            (NEGATIVE_DELTAS, v) => {
                sint64s(v, &mut neg_deltas).ok_or(E::WrongType("negative_deltas"))?
            }
            (POSITIVE_DELTAS, v) => {
                sint64s(v, &mut pos_deltas).ok_or(E::WrongType("positive_deltas"))?
            }
            (NEGATIVE_COUNTS, v) => {
                doubles(v, &mut neg_counts).ok_or(E::WrongType("negative_counts"))?
            }
            (POSITIVE_COUNTS, v) => {
                doubles(v, &mut pos_counts).ok_or(E::WrongType("positive_counts"))?
            }
            (CUSTOM_VALUES, v) => doubles(v, &mut custom).ok_or(E::WrongType("custom_values"))?,
            (RESET_HINT, Value::Varint(x)) => hint = CounterResetHint::from_number(x),
            (TIMESTAMP, Value::Varint(x)) => t = x as i64,
            (COUNT_INT..=CUSTOM_VALUES, _) => return Err(E::WrongTypeField(f)),
            _ => {}
        }
    }
    // A float histogram sets count_float; Prometheus' `IsFloatHistogram`
    // looks at which oneof is set, and an unset one is an integer one.
    if let (Some(count), None) = (float_count, int_count) {
        if !pos_deltas.is_empty() || !neg_deltas.is_empty() {
            return Err(E::FloatWithDeltas);
        }
        return Ok(WireHistogram::Float(
            t,
            FloatHistogram {
                hint,
                schema,
                zero_threshold,
                zero_count: zero_float.unwrap_or(zero_int as f64),
                count,
                sum,
                positive_spans: pos_spans,
                negative_spans: neg_spans,
                positive_buckets: pos_counts,
                negative_buckets: neg_counts,
                custom_values: custom,
            },
        ));
    }
    if !pos_counts.is_empty() || !neg_counts.is_empty() {
        return Err(E::IntWithCounts);
    }
    Ok(WireHistogram::Int(
        t,
        Histogram {
            hint,
            schema,
            zero_threshold,
            zero_count: zero_int,
            count: int_count.unwrap_or(0),
            sum,
            positive_spans: pos_spans,
            negative_spans: neg_spans,
            positive_buckets: pos_deltas,
            negative_buckets: neg_deltas,
            custom_values: custom,
        },
    ))
}

fn push_limited<T>(v: &mut Vec<T>, x: T) -> Result<(), HistogramWireError> {
    if v.len() >= MAX_HISTOGRAM_ITEMS {
        return Err(HistogramWireError::TooManySpans);
    }
    v.push(x);
    Ok(())
}

/// A `BucketSpan`: offset (sint32, field 1), length (uint32, field 2).
fn span(msg: &[u8]) -> Result<Span, HistogramWireError> {
    use field::{SPAN_LENGTH, SPAN_OFFSET};
    use HistogramWireError as E;
    let mut s = Span::default();
    let mut r = Reader::new(msg);
    while let Some((f, v, _)) = r.next_field()? {
        match (f, v) {
            (SPAN_OFFSET, Value::Varint(x)) => {
                s.offset = i32::try_from(unzigzag(x)).map_err(|_| E::SpanOffsetOutOfRange)?
            }
            (SPAN_LENGTH, Value::Varint(x)) => {
                s.length = u32::try_from(x).map_err(|_| E::SpanLengthOutOfRange)?
            }
            (SPAN_OFFSET | SPAN_LENGTH, _) => return Err(E::SpanWrongType),
            _ => {}
        }
    }
    Ok(s)
}

/// A repeated sint64, packed or not; `None` on the wrong wire type or too
/// many values.
fn sint64s(v: Value<'_>, out: &mut Vec<i64>) -> Option<()> {
    match v {
        Value::Varint(x) => {
            (out.len() < MAX_HISTOGRAM_ITEMS).then(|| out.push(unzigzag(x)))?;
        }
        Value::Bytes(mut b) => {
            while !b.is_empty() {
                let (x, n) = crate::encoding::uvarint(b)?;
                b = &b[n..];
                (out.len() < MAX_HISTOGRAM_ITEMS).then(|| out.push(unzigzag(x)))?;
            }
        }
        _ => return None,
    }
    Some(())
}

/// A repeated double, packed or not.
fn doubles(v: Value<'_>, out: &mut Vec<f64>) -> Option<()> {
    match v {
        Value::Fixed64(x) => {
            (out.len() < MAX_HISTOGRAM_ITEMS).then(|| out.push(f64::from_bits(x)))?;
        }
        Value::Bytes(b) => {
            if b.len() % 8 != 0 || out.len() + b.len() / 8 > MAX_HISTOGRAM_ITEMS {
                return None;
            }
            for w in b.chunks_exact(8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                out.push(f64::from_bits(u64::from_le_bytes(a)));
            }
        }
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::prometheus as pb;
    use prost::Message as _;

    fn wire(h: pb::Histogram) -> Vec<u8> {
        h.encode_to_vec()
    }

    #[test]
    fn integer_and_float_histograms_decode_as_prometheus_encodes_them() {
        let h = pb::Histogram {
            count: Some(pb::histogram::Count::CountInt(9)),
            sum: 4.5,
            schema: 3,
            zero_threshold: 1e-128,
            zero_count: Some(pb::histogram::ZeroCount::ZeroCountInt(1)),
            negative_spans: vec![pb::BucketSpan {
                offset: -1,
                length: 1,
            }],
            negative_deltas: vec![1],
            positive_spans: vec![
                pb::BucketSpan {
                    offset: 0,
                    length: 2,
                },
                pb::BucketSpan {
                    offset: 1,
                    length: 1,
                },
            ],
            positive_deltas: vec![2, 1, -1],
            reset_hint: pb::histogram::ResetHint::Gauge as i32,
            timestamp: 1_700_000_000_123,
            ..Default::default()
        };
        let got = decode(&wire(h)).expect("decodes");
        let WireHistogram::Int(t, h) = &got else {
            panic!("an integer histogram: {got:?}")
        };
        assert_eq!(*t, 1_700_000_000_123);
        assert_eq!(h.hint, CounterResetHint::Gauge);
        assert_eq!((h.schema, h.count, h.zero_count), (3, 9, 1));
        assert_eq!(h.positive_buckets, [2, 1, -1]);
        assert_eq!(
            h.positive_spans[1],
            Span {
                offset: 1,
                length: 1
            }
        );
        assert_eq!(
            h.negative_spans[0],
            Span {
                offset: -1,
                length: 1
            }
        );
        got.validate().expect("valid");

        let f = pb::Histogram {
            count: Some(pb::histogram::Count::CountFloat(2.5)),
            zero_count: Some(pb::histogram::ZeroCount::ZeroCountFloat(0.5)),
            schema: -53,
            positive_spans: vec![pb::BucketSpan {
                offset: 0,
                length: 2,
            }],
            positive_counts: vec![1.0, 1.0],
            custom_values: vec![0.25],
            ..Default::default()
        };
        let WireHistogram::Float(_, f) = decode(&wire(f)).expect("decodes") else {
            panic!("a float histogram")
        };
        assert_eq!((f.count, f.zero_count, f.schema), (2.5, 0.5, -53));
        assert_eq!(f.positive_buckets, [1.0, 1.0]);
        assert_eq!(f.custom_values, [0.25]);
    }

    #[test]
    fn mixed_or_damaged_histograms_are_errors() {
        let mixed = pb::Histogram {
            count: Some(pb::histogram::Count::CountInt(1)),
            positive_counts: vec![1.0],
            ..Default::default()
        };
        assert!(decode(&wire(mixed))
            .expect_err("mixed")
            .to_string()
            .contains("deltas, not counts"));
        // Field 4 (schema) as a fixed64.
        let bad = [0x21, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(decode(&bad)
            .expect_err("type")
            .to_string()
            .contains("field 4"));
    }

    #[test]
    fn encoded_histograms_decode_to_themselves_and_as_prometheus_types() {
        use crate::histogram::{FloatHistogram, HistSample, Histogram};
        let int = Histogram {
            hint: CounterResetHint::NotCounterReset,
            schema: -2,
            zero_threshold: 1e-3,
            zero_count: 2,
            count: 9,
            sum: -4.5,
            positive_spans: vec![
                Span {
                    offset: -3,
                    length: 2,
                },
                Span {
                    offset: 4,
                    length: 1,
                },
            ],
            positive_buckets: vec![3, -1, -1],
            negative_spans: vec![Span {
                offset: 0,
                length: 1,
            }],
            negative_buckets: vec![1],
            custom_values: vec![],
        };
        let float = FloatHistogram {
            hint: CounterResetHint::Gauge,
            schema: -53,
            count: 2.5,
            sum: 1.0,
            positive_spans: vec![Span {
                offset: 0,
                length: 2,
            }],
            positive_buckets: vec![1.0, 1.5],
            custom_values: vec![0.5],
            ..FloatHistogram::default()
        };
        for (t, h) in [
            (-7i64, HistSample::Int(int)),
            (1_700_000_000_000, HistSample::Float(float)),
        ] {
            let mut out = Vec::new();
            encode(t, &h, &mut out);
            assert_eq!(decode(&out).expect("decodes").into_sample(), (t, h.clone()));
            let p = pb::Histogram::decode(&out[..]).expect("prost decodes it");
            assert_eq!(p.timestamp, t);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_decode_or_fail_without_panicking(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(h) = decode(&bytes) {
                let _ = h.validate();
            }
        }
    }
}
