//! Remote-write writers: the byte-level pieces of a 1.0 `WriteRequest` and a
//! 2.0 `Request`, for encoders that build requests from stored series
//! without a request model. Field numbers are named once, here.

use crate::encoding::{put_uvarint, uvarint_len as varint_len};

/// Field numbers of remote write 1.0 (`prompb/remote.proto`, `types.proto`).
pub mod v1 {
    /// `WriteRequest.timeseries` (repeated `TimeSeries`).
    pub const WRITE_REQUEST_TIMESERIES: u32 = 1;
    /// `TimeSeries.labels` (repeated `Label`).
    pub const TIMESERIES_LABELS: u32 = 1;
    /// `TimeSeries.samples` (repeated `Sample`).
    pub const TIMESERIES_SAMPLES: u32 = 2;
    /// `TimeSeries.histograms` (repeated `Histogram`).
    pub const TIMESERIES_HISTOGRAMS: u32 = 4;
    /// `Label.name`.
    pub const LABEL_NAME: u32 = 1;
    /// `Label.value`.
    pub const LABEL_VALUE: u32 = 2;
}

/// Field numbers of remote write 2.0 (`io.prometheus.write.v2`).
pub mod v2 {
    /// `Request.symbols` (repeated string).
    pub const REQUEST_SYMBOLS: u32 = 4;
    /// `Request.timeseries` (repeated `TimeSeries`).
    pub const REQUEST_TIMESERIES: u32 = 5;
    /// `TimeSeries.labels_refs` (packed uint32).
    pub const TIMESERIES_LABELS_REFS: u32 = 1;
    /// `TimeSeries.samples` (repeated `Sample`, as in 1.0).
    pub const TIMESERIES_SAMPLES: u32 = 2;
    /// `TimeSeries.histograms` (repeated `Histogram`).
    pub const TIMESERIES_HISTOGRAMS: u32 = 3;
}

/// `Sample.value` (double) and `Sample.timestamp` (int64), the same in 1.0
/// and 2.0.
const SAMPLE_VALUE: u32 = 1;
const SAMPLE_TIMESTAMP: u32 = 2;

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

fn tag(field: u32, wire_type: u32) -> u64 {
    u64::from(field << 3 | wire_type)
}

/// Bytes of a length-delimited field of `field` whose value is `len` bytes.
pub fn len_delimited_len(field: u32, len: usize) -> usize {
    varint_len(tag(field, LEN)) + varint_len(len as u64) + len
}

/// Appends the tag and length of a length-delimited field of `field`; its
/// `len` bytes of value follow.
pub fn put_len_header(out: &mut Vec<u8>, field: u32, len: usize) {
    put_uvarint(out, tag(field, LEN));
    put_uvarint(out, len as u64);
}

/// Bytes of a `Sample` message at time `t` (value and timestamp).
fn sample_len(t: i64) -> usize {
    varint_len(tag(SAMPLE_VALUE, FIXED64))
        + 8
        + varint_len(tag(SAMPLE_TIMESTAMP, VARINT))
        + varint_len(t as u64)
}

/// Bytes of a `samples` field (of `TimeSeries`, 1.0 or 2.0) at time `t`.
pub fn sample_field_len(t: i64) -> usize {
    len_delimited_len(v1::TIMESERIES_SAMPLES, sample_len(t))
}

/// Appends a `samples` field (of `TimeSeries`, 1.0 or 2.0): value `v` at `t`.
pub fn put_sample_field(out: &mut Vec<u8>, t: i64, v: f64) {
    put_len_header(out, v1::TIMESERIES_SAMPLES, sample_len(t));
    put_uvarint(out, tag(SAMPLE_VALUE, FIXED64));
    out.extend_from_slice(&v.to_bits().to_le_bytes());
    put_uvarint(out, tag(SAMPLE_TIMESTAMP, VARINT));
    put_uvarint(out, t as u64);
}

/// Appends `labels` as a run of 1.0 `TimeSeries.labels` fields, in the
/// order given (the storage's canonical label bytes, when they are sorted
/// and valid).
pub fn put_labels<'a>(labels: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, out: &mut Vec<u8>) {
    const LABEL: u8 = (v1::TIMESERIES_LABELS << 3 | LEN) as u8;
    const NAME: u8 = (v1::LABEL_NAME << 3 | LEN) as u8;
    const VALUE: u8 = (v1::LABEL_VALUE << 3 | LEN) as u8;
    for (name, value) in labels {
        let inner = 1
            + varint_len(name.len() as u64)
            + name.len()
            + 1
            + varint_len(value.len() as u64)
            + value.len();
        if inner < 0x80 {
            // Every length fits one varint byte: the common label.
            out.reserve(inner + 2);
            out.extend_from_slice(&[LABEL, inner as u8, NAME, name.len() as u8]);
            out.extend_from_slice(name);
            out.extend_from_slice(&[VALUE, value.len() as u8]);
            out.extend_from_slice(value);
            continue;
        }
        out.push(LABEL);
        put_uvarint(out, inner as u64);
        out.push(NAME);
        put_uvarint(out, name.len() as u64);
        out.extend_from_slice(name);
        out.push(VALUE);
        put_uvarint(out, value.len() as u64);
        out.extend_from_slice(value);
    }
}

/// The (name, value) pairs of a run of 1.0 `TimeSeries.labels` fields (the
/// storage's canonical label bytes); stops at anything malformed.
pub fn label_pairs(raw: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    let label_tag = tag(v1::TIMESERIES_LABELS, LEN) as u8;
    let name_tag = tag(v1::LABEL_NAME, LEN) as u8;
    let value_tag = tag(v1::LABEL_VALUE, LEN) as u8;
    let mut rest = raw;
    std::iter::from_fn(move || {
        let mut c = crate::encoding::Cursor(rest);
        if c.0.first() != Some(&label_tag) {
            return None;
        }
        c.0 = &c.0[1..];
        let label = c.bytes()?;
        rest = c.0;
        let mut l = crate::encoding::Cursor(label);
        if l.0.first() != Some(&name_tag) {
            return None;
        }
        l.0 = &l.0[1..];
        let name = l.bytes()?;
        if l.0.first() != Some(&value_tag) {
            return Some((name, &[][..]));
        }
        l.0 = &l.0[1..];
        let value = l.bytes()?;
        Some((name, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::put_uvarint;
    use crate::proto::prometheus as pb;
    use prost::Message as _;

    #[test]
    fn varint_lengths() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut b = Vec::new();
            put_uvarint(&mut b, v);
            assert_eq!(varint_len(v), b.len(), "{v}");
        }
    }

    #[test]
    fn a_sample_field_decodes_as_prost_writes_it() {
        for t in [0, 1, 1_700_000_000_000, -5, i64::MAX] {
            let mut ts = Vec::new();
            put_sample_field(&mut ts, t, 2.5);
            assert_eq!(ts.len(), sample_field_len(t));
            let got = pb::TimeSeries::decode(ts.as_slice()).expect("decodes");
            assert_eq!(
                got.samples,
                vec![pb::Sample {
                    value: 2.5,
                    timestamp: t
                }]
            );
        }
    }

    #[test]
    fn labels_are_written_as_prost_writes_them_and_read_back() {
        let long = "v".repeat(300);
        let labels = [("__name__", "up"), ("job", ""), ("long", long.as_str())];
        let mut ours = Vec::new();
        put_labels(
            labels.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut ours,
        );
        let prost = pb::TimeSeries {
            labels: labels
                .iter()
                .map(|(n, v)| pb::Label {
                    name: (*n).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
        .encode_to_vec();
        // prost leaves an empty value out; ours writes it empty, which
        // reads the same.
        let back = pb::TimeSeries::decode(ours.as_slice()).expect("decodes");
        assert_eq!(
            back,
            pb::TimeSeries::decode(prost.as_slice()).expect("decodes")
        );
        assert_eq!(label_pairs(&ours).count(), 3);
    }

    #[test]
    fn label_pairs_read_what_prost_writes() {
        let ts = pb::TimeSeries {
            labels: vec![
                pb::Label {
                    name: "__name__".into(),
                    value: "up".into(),
                },
                pb::Label {
                    name: "job".into(),
                    value: "".into(),
                },
            ],
            ..Default::default()
        }
        .encode_to_vec();
        let pairs: Vec<_> = label_pairs(&ts).collect();
        assert_eq!(
            pairs,
            vec![(&b"__name__"[..], &b"up"[..]), (&b"job"[..], &b""[..])]
        );
    }
}
