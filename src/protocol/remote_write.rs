//! Remote-write 1.0 `WriteRequest` decoding straight from the decompressed
//! bytes: no prost types, no owned strings. One pass checks the structure of
//! the whole request (so a truncated body is rejected before anything is
//! stored) and notes where each series' labels and samples are; iterators
//! then read them in place.

pub mod encode;
pub mod v2;

use super::describe_labels;
use super::wire::{wrong_type, DecodeError, Reader, Value};

/// Field numbers the encoders of remote write 1.0 and remote read name
/// (Prometheus' `prompb/types.proto` and `remote.proto`).
pub mod field {
    /// `TimeSeries.histograms` (repeated `Histogram`).
    pub const TIMESERIES_HISTOGRAMS: u32 = 4;
    /// `QueryResult.timeseries` (repeated `TimeSeries`).
    pub const QUERY_RESULT_TIMESERIES: u32 = 1;
    /// `ReadResponse.results` (repeated `QueryResult`).
    pub const READ_RESPONSE_RESULTS: u32 = 1;
}

/// One `TimeSeries`, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct TimeSeriesView<'a> {
    msg: &'a [u8],
    base: usize,
    /// The label fields, when they are one contiguous run of bytes (they are,
    /// from every known sender): the key for the head's fast lookup.
    pub labels_raw: Option<&'a [u8]>,
    /// Where in `msg` the first sample field starts: the sample iterator
    /// starts there instead of stepping over every label again.
    samples_at: u32,
    /// Float samples in the series.
    pub samples: u32,
    /// Native histogram samples.
    pub histograms: u32,
    /// Exemplars.
    pub exemplars: u32,
}

/// A [`TimeSeriesView`] as offsets into its request, to keep in a buffer
/// reused across requests (a view borrows the request; this does not).
#[derive(Debug, Clone, Copy, Default)]
pub struct SeriesSpan {
    msg: (usize, usize),
    base: usize,
    labels: Option<(usize, usize)>,
    samples_at: u32,
    samples: u32,
    histograms: u32,
    exemplars: u32,
}

impl SeriesSpan {
    /// The view again, over the request `buf` the span was taken from.
    #[inline]
    pub fn view<'a>(&self, buf: &'a [u8]) -> TimeSeriesView<'a> {
        let slice = |(start, len): (usize, usize)| buf.get(start..start + len).unwrap_or_default();
        TimeSeriesView {
            msg: slice(self.msg),
            base: self.base,
            labels_raw: self.labels.map(slice),
            samples_at: self.samples_at,
            samples: self.samples,
            histograms: self.histograms,
            exemplars: self.exemplars,
        }
    }
}

/// Checks `buf` as a `WriteRequest`, then iterates its series in place.
///
/// The check walks every nested message once, so a truncated or corrupt body
/// is refused before anything is stored; the iteration then reads only the
/// top level of each series. Neither allocates. [`decode_each`] does both in
/// one walk.
pub fn decode(buf: &[u8]) -> Result<Series<'_>, DecodeError> {
    decode_each(buf, |_| {})?;
    Ok(Series {
        r: Reader::new(buf),
    })
}

/// The first series of a request, the rest neither read nor checked (what
/// the HA tracker looks at before the request is walked); `None` if there
/// is none or it does not decode.
pub fn first_series(buf: &[u8]) -> Option<TimeSeriesView<'_>> {
    Series {
        r: Reader::new(buf),
    }
    .next()
}

/// What a checked request holds besides its series.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// Whether it carries `metadata` entries (see [`metadata`]).
    pub metadata: bool,
}

/// Checks `buf` as a `WriteRequest` in one walk, handing `f` each series'
/// view as soon as that series is checked. An error can come after some
/// series were handed over, so `f` must only collect: nothing may be
/// stored before this returns `Ok`. Allocates nothing.
pub fn decode_each<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(TimeSeriesView<'a>),
) -> Result<Checked, DecodeError> {
    let mut checked = Checked::default();
    let mut r = Reader::new(buf);
    while let Some((field, v, at)) = r.next_field()? {
        match (field, v) {
            (1, Value::Bytes(ts)) => f(check_series(ts, at)?),
            (3, Value::Bytes(md)) => {
                check_message(md, at)?;
                checked.metadata = true;
            }
            (1 | 3, _) => return Err(wrong_type(at)),
            _ => {}
        }
    }
    Ok(checked)
}

/// The series of a checked request, in order.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    r: Reader<'a>,
}

impl<'a> Iterator for Series<'a> {
    type Item = TimeSeriesView<'a>;

    fn next(&mut self) -> Option<TimeSeriesView<'a>> {
        loop {
            match self.r.next_field() {
                Ok(Some((1, Value::Bytes(ts), at))) => return check_series(ts, at).ok(),
                Ok(Some(_)) => {}
                _ => return None,
            }
        }
    }
}

/// One `MetricMetadata` entry, borrowed.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetadataView<'a> {
    /// The `MetricType` number.
    pub kind: u64,
    /// `metric_family_name`.
    pub family: &'a [u8],
    /// `help`.
    pub help: &'a [u8],
    /// `unit`.
    pub unit: &'a [u8],
}

/// The `metadata` entries of a checked request.
pub fn metadata(buf: &[u8]) -> impl Iterator<Item = MetadataView<'_>> + '_ {
    fields(buf, 0, 3).map(|md| {
        let mut view = MetadataView::default();
        let mut r = Reader::new(md);
        while let Ok(Some((f, v, _))) = r.next_field() {
            match (f, v) {
                (1, Value::Varint(k)) => view.kind = k,
                (2, Value::Bytes(b)) => view.family = b,
                (4, Value::Bytes(b)) => view.help = b,
                (5, Value::Bytes(b)) => view.unit = b,
                _ => {}
            }
        }
        view
    })
}

/// Checks a `TimeSeries` and indexes it: where its label run is, how many
/// samples it has.
fn check_series(msg: &[u8], base: usize) -> Result<TimeSeriesView<'_>, DecodeError> {
    let mut view = TimeSeriesView {
        msg,
        base,
        labels_raw: None,
        samples_at: 0,
        samples: 0,
        histograms: 0,
        exemplars: 0,
    };
    // The label run: start of the first label field, end of the last one,
    // and whether another field came in between.
    let (mut start, mut end, mut split) = (None, 0, false);
    let mut r = Reader::nested(msg, base);
    loop {
        let field_start = r.offset() - base;
        let Some((field, v, at)) = r.next_field()? else {
            break;
        };
        match (field, v) {
            (1, Value::Bytes(label)) => {
                check_label(label, at)?;
                if start.is_none() {
                    start = Some(field_start);
                } else if end != field_start {
                    split = true;
                }
                end = r.offset() - base;
            }
            (2, Value::Bytes(sample)) => {
                check_sample(sample, at)?;
                if view.samples == 0 {
                    view.samples_at = field_start as u32;
                }
                view.samples += 1;
            }
            (3 | 4, Value::Bytes(nested)) => {
                check_message(nested, at)?;
                view.histograms += u32::from(field == 4);
                view.exemplars += u32::from(field == 3);
            }
            (1..=4, _) => return Err(wrong_type(at)),
            _ => {}
        }
    }
    if let (Some(s), false) = (start, split) {
        view.labels_raw = msg.get(s..end);
    }
    Ok(view)
}

#[inline]
fn check_label(msg: &[u8], base: usize) -> Result<(), DecodeError> {
    // The shape every sender produces: 0a <len> name 12 <len> value, with
    // one-byte lengths.
    if let [0x0a, n, rest @ ..] = msg {
        let n = usize::from(*n);
        if n < 0x80 {
            if let Some([0x12, v, value @ ..]) = rest.get(n..) {
                if *v < 0x80 && value.len() == usize::from(*v) {
                    return Ok(());
                }
            }
        }
    }
    let mut r = Reader::nested(msg, base);
    while let Some((field, v, at)) = r.next_field()? {
        if matches!(field, 1 | 2) && !matches!(v, Value::Bytes(_)) {
            return Err(wrong_type(at));
        }
    }
    Ok(())
}

/// Checks one `Sample` message (`msg`, found at `base`): a fixed64 value
/// and a varint timestamp, in any order.
#[inline]
pub fn check_sample(msg: &[u8], base: usize) -> Result<(), DecodeError> {
    if fast_sample(msg).is_some() {
        return Ok(());
    }
    let mut r = Reader::nested(msg, base);
    while let Some((field, v, at)) = r.next_field()? {
        match (field, v) {
            (1, Value::Fixed64(_)) | (2, Value::Varint(_)) => {}
            (3, Value::Varint(_)) => {}
            (1..=3, _) => return Err(wrong_type(at)),
            _ => {}
        }
    }
    Ok(())
}

/// Checks only the framing of a message (`msg`, found at `base`) whose
/// fields are read later, so that a corrupt body is refused before any of
/// it is stored.
pub fn check_message(msg: &[u8], base: usize) -> Result<(), DecodeError> {
    let mut r = Reader::nested(msg, base);
    while r.next_field()?.is_some() {}
    Ok(())
}

impl<'a> TimeSeriesView<'a> {
    /// This view as offsets into `buf`, the request it was read from.
    #[inline]
    pub fn span(&self, buf: &[u8]) -> SeriesSpan {
        let at = |part: &[u8]| {
            (
                (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize),
                part.len(),
            )
        };
        SeriesSpan {
            msg: at(self.msg),
            base: self.base,
            labels: self.labels_raw.map(at),
            samples_at: self.samples_at,
            samples: self.samples,
            histograms: self.histograms,
            exemplars: self.exemplars,
        }
    }

    /// The series' exemplars: for each, its labels (into `labels`, cleared
    /// first), value and timestamp, handed to `f`.
    pub fn exemplars(
        &self,
        labels: &mut Vec<(&'a [u8], &'a [u8])>,
        mut f: impl FnMut(&[(&'a [u8], &'a [u8])], f64, i64),
    ) {
        for e in fields(self.msg, self.base, 3) {
            labels.clear();
            let (mut value, mut t) = (0f64, 0i64);
            let mut r = Reader::new(e);
            while let Ok(Some((field, v, _))) = r.next_field() {
                match (field, v) {
                    (1, Value::Bytes(l)) => labels.push(label_pair(l)),
                    (2, Value::Fixed64(bits)) => value = f64::from_bits(bits),
                    (3, Value::Varint(x)) => t = x as i64,
                    _ => {}
                }
            }
            f(labels, value, t);
        }
    }

    /// The series' labels as raw (name, value) bytes, in sent order.
    pub fn labels(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        fields(self.msg, self.base, 1).map(label_pair)
    }

    /// The series' float samples as (timestamp ms, value), in sent order.
    pub fn samples(&self) -> SampleIter<'a> {
        SampleIter::at(self.msg, self.base, self.samples_at as usize)
    }

    /// The series' native histogram messages (`TimeSeries.histograms`),
    /// undecoded.
    pub fn histograms(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        fields(self.msg, self.base, 4)
    }

    /// The labels as `{name="value", …}` for error messages.
    pub fn describe(&self) -> String {
        describe_labels(self.labels())
    }
}

/// A `Label` message's (name, value).
fn label_pair(label: &[u8]) -> (&[u8], &[u8]) {
    let (mut name, mut value): (&[u8], &[u8]) = (b"", b"");
    let mut r = Reader::new(label);
    while let Ok(Some((f, Value::Bytes(b), _))) = r.next_field() {
        match f {
            1 => name = b,
            2 => value = b,
            _ => {}
        }
    }
    (name, value)
}

/// The payloads of every length-delimited `field` in a checked message.
fn fields<'a>(msg: &'a [u8], base: usize, field: u32) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut r = Reader::nested(msg, base);
    std::iter::from_fn(move || loop {
        match r.next_field() {
            Ok(Some((f, Value::Bytes(b), _))) if f == field => return Some(b),
            Ok(Some(_)) => {}
            _ => return None,
        }
    })
}

/// Reads the samples of a checked `TimeSeries` in place.
#[derive(Debug, Clone)]
pub struct SampleIter<'a> {
    r: Reader<'a>,
}

impl<'a> SampleIter<'a> {
    /// The samples of the `TimeSeries` `msg` (found at `base` in its
    /// request), whose first sample field starts at `at`.
    pub fn at(msg: &'a [u8], base: usize, at: usize) -> Self {
        SampleIter {
            r: Reader::nested(msg.get(at..).unwrap_or_default(), base + at),
        }
    }
}

impl Iterator for SampleIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        loop {
            match self.r.next_field() {
                Ok(Some((2, Value::Bytes(b), _))) => return Some(read_sample(b)),
                Ok(Some(_)) => {}
                _ => return None,
            }
        }
    }
}

/// The encoding every sender produces, `09 <8 bytes> 10 <varint>`, with
/// remote write 2.0's `18 <varint>` start time after it or not, and
/// nothing else, read directly: time, value and start time (0 when
/// absent); `None` for anything else.
#[inline]
fn fast_sample(b: &[u8]) -> Option<(i64, f64, i64)> {
    let [0x09, v @ .., 0x10] = b.get(..10)? else {
        return None;
    };
    let mut a = [0u8; 8];
    a.copy_from_slice(v);
    let (t, n) = crate::encoding::uvarint(&b[10..])?;
    let st = match &b[10 + n..] {
        [] => 0,
        [0x18, tail @ ..] => match crate::encoding::uvarint(tail)? {
            (st, m) if m == tail.len() => st as i64,
            _ => return None,
        },
        _ => return None,
    };
    Some((t as i64, f64::from_le_bytes(a), st))
}

/// A sample's time and start time (remote write 2.0's field 3; 0 when
/// absent).
#[inline]
pub(crate) fn sample_time_and_start(b: &[u8]) -> (i64, i64) {
    if let Some((t, _, st)) = fast_sample(b) {
        return (t, st);
    }
    let (mut t, mut st) = (0i64, 0i64);
    let mut r = Reader::new(b);
    while let Ok(Some((f, val, _))) = r.next_field() {
        match (f, val) {
            (2, Value::Varint(x)) => t = x as i64,
            (3, Value::Varint(x)) => st = x as i64,
            _ => {}
        }
    }
    (t, st)
}

#[inline]
fn read_sample(b: &[u8]) -> (i64, f64) {
    if let Some((t, v, _)) = fast_sample(b) {
        return (t, v);
    }
    let (mut t, mut v) = (0i64, 0f64);
    let mut r = Reader::new(b);
    while let Ok(Some((f, val, _))) = r.next_field() {
        match (f, val) {
            (1, Value::Fixed64(bits)) => v = f64::from_bits(bits),
            (2, Value::Varint(x)) => t = x as i64,
            _ => {}
        }
    }
    (t, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::prometheus as pb;
    use proptest::prelude::*;
    use prost::Message;

    fn label(n: &str, v: &str) -> pb::Label {
        pb::Label {
            name: n.into(),
            value: v.into(),
        }
    }

    #[test]
    fn decodes_what_prost_encodes() {
        let req = pb::WriteRequest {
            timeseries: vec![
                pb::TimeSeries {
                    labels: vec![label("__name__", "up"), label("job", "node")],
                    samples: vec![
                        pb::Sample {
                            value: 1.5,
                            timestamp: 1000,
                        },
                        pb::Sample {
                            value: -0.0,
                            timestamp: -5,
                        },
                        pb::Sample {
                            value: 0.0,
                            timestamp: 0,
                        },
                    ],
                    ..Default::default()
                },
                pb::TimeSeries {
                    labels: vec![label("__name__", "x")],
                    histograms: vec![pb::Histogram::default()],
                    ..Default::default()
                },
            ],
            metadata: vec![pb::MetricMetadata {
                metric_family_name: "up".into(),
                ..Default::default()
            }],
        };
        let buf = req.encode_to_vec();
        let view: Vec<_> = decode(&buf).expect("valid").collect();
        assert_eq!(view.len(), 2);
        let s = &view[0];
        assert_eq!(s.samples, 3);
        let samples: Vec<_> = s.samples().map(|(t, v)| (t, v.to_bits())).collect();
        // Like gogoproto, prost omits a -0.0 value as the proto3 default, so it arrives as 0.
        assert_eq!(samples, vec![(1000, 1.5f64.to_bits()), (-5, 0), (0, 0)]);
        let labels: Vec<_> = s.labels().collect();
        assert_eq!(
            labels,
            vec![(&b"__name__"[..], &b"up"[..]), (&b"job"[..], &b"node"[..])]
        );
        assert_eq!(s.describe(), r#"{__name__="up", job="node"}"#);
        let long = "v".repeat(10_000);
        let big = pb::TimeSeries {
            labels: (0..50).map(|i| label(&format!("l{i}"), &long)).collect(),
            ..Default::default()
        };
        let big = pb::WriteRequest {
            timeseries: vec![big],
            metadata: vec![],
        }
        .encode_to_vec();
        // One walk hands over the same views and tells whether metadata
        // came along.
        let mut each = Vec::new();
        let checked = decode_each(&buf, |v| each.push((v.samples, v.labels_raw)));
        assert_eq!(checked, Ok(Checked { metadata: true }));
        let twice: Vec<_> = view.iter().map(|v| (v.samples, v.labels_raw)).collect();
        assert_eq!(each, twice);
        assert_eq!(decode_each(&big, |_| {}), Ok(Checked { metadata: false }));
        let d = decode(&big).expect("valid").next().expect("one").describe();
        assert!(d.len() < 700 && d.ends_with(", …}"), "{}", d.len());
        // The raw label run is exactly the canonical form.
        let mut canon = Vec::new();
        crate::storage::labels::encode_canonical([("__name__", "up"), ("job", "node")], &mut canon);
        assert_eq!(s.labels_raw, Some(&canon[..]));
        assert_eq!(view[1].histograms, 1);
        let md: Vec<_> = metadata(&buf).collect();
        assert_eq!(md.len(), 1);
        assert_eq!(md[0].family, b"up");
    }

    #[test]
    fn interleaved_labels_have_no_raw_run() {
        // labels, sample, label: valid protobuf, but not one contiguous run.
        let mut buf = Vec::new();
        let ts = [
            &[0x0a][..],
            &label("__name__", "a").encode_length_delimited_to_vec(),
            &[0x12],
            &pb::Sample {
                value: 1.0,
                timestamp: 1,
            }
            .encode_length_delimited_to_vec(),
            &[0x0a],
            &label("job", "b").encode_length_delimited_to_vec(),
        ]
        .concat();
        buf.push(0x0a);
        prost::encoding::encode_varint(ts.len() as u64, &mut buf);
        buf.extend_from_slice(&ts);
        let view: Vec<_> = decode(&buf).expect("valid").collect();
        assert_eq!(view[0].labels_raw, None);
        assert_eq!(view[0].labels().count(), 2);
    }

    #[test]
    fn truncation_anywhere_is_an_error_not_a_panic() {
        let req = pb::WriteRequest {
            timeseries: vec![pb::TimeSeries {
                labels: vec![label("__name__", "up")],
                samples: vec![pb::Sample {
                    value: 1.0,
                    timestamp: 1,
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let buf = req.encode_to_vec();
        for cut in 1..buf.len() {
            assert!(decode(&buf[..cut]).is_err(), "cut at {cut}");
        }
    }

    fn arb_request() -> impl Strategy<Value = pb::WriteRequest> {
        let lab = ("[a-z_]{0,12}", "\\PC{0,20}").prop_map(|(n, v)| label(&n, &v));
        let sample = (any::<i64>(), any::<f64>())
            .prop_map(|(timestamp, value)| pb::Sample { value, timestamp });
        let ts = (
            proptest::collection::vec(lab, 0..8),
            proptest::collection::vec(sample, 0..8),
        )
            .prop_map(|(labels, samples)| pb::TimeSeries {
                labels,
                samples,
                ..Default::default()
            });
        proptest::collection::vec(ts, 0..10).prop_map(|timeseries| pb::WriteRequest {
            timeseries,
            metadata: vec![],
        })
    }

    proptest! {
        #[test]
        fn agrees_with_prost(req in arb_request()) {
            let buf = req.encode_to_vec();
            // Compare with what prost reads back: proto3 drops -0.0 on the wire.
            let req = pb::WriteRequest::decode(&buf[..]).expect("round trip");
            let view: Vec<_> = decode(&buf).expect("prost output is valid").collect();
            prop_assert_eq!(view.len(), req.timeseries.len());
            for (v, ts) in view.iter().zip(&req.timeseries) {
                let samples: Vec<_> = v.samples().map(|(t, x)| (t, x.to_bits())).collect();
                let want: Vec<_> = ts.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
                prop_assert_eq!(samples, want);
                let labels: Vec<_> = v.labels().map(|(n, x)| (n.to_vec(), x.to_vec())).collect();
                let want: Vec<_> = ts.labels.iter().map(|l| (l.name.clone().into_bytes(), l.value.clone().into_bytes())).collect();
                prop_assert_eq!(labels, want);
            }
        }

        #[test]
        fn arbitrary_bytes_agree_with_prost_when_both_accept(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let (Ok(view), Ok(req)) = (decode(&bytes), pb::WriteRequest::decode(&bytes[..])) {
                let view: Vec<_> = view.collect();
                prop_assert_eq!(view.len(), req.timeseries.len());
                for (v, ts) in view.iter().zip(&req.timeseries) {
                    prop_assert_eq!(v.samples().count(), ts.samples.len());
                    prop_assert_eq!(v.labels().count(), ts.labels.len());
                }
            }
        }

        /// A start time of the wrong wire type names the field's place;
        /// absurd start times (negative, the extremes) read as sent.
        #[test]
        fn a_start_time_of_the_wrong_type_is_refused(st in any::<i64>(), bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            use crate::proto::io::prometheus::write::v2;
            let mut b = v2::Sample { value: 1.5, timestamp: 1000, start_timestamp: 0 }.encode_to_vec();
            prost::encoding::bytes::encode(3, &bytes, &mut b);
            prop_assert!(check_sample(&b, 0).is_err());
            let good = v2::Sample { value: 1.5, timestamp: 1000, start_timestamp: st }.encode_to_vec();
            prop_assert!(check_sample(&good, 0).is_ok());
            prop_assert_eq!(sample_time_and_start(&good), (1000, st));
        }

        /// A remote write 2.0 sample, with a start time or not, reads as
        /// prost reads it, on the direct path or the general one.
        #[test]
        fn v2_samples_read_as_prost_reads_them(
            value in any::<f64>(),
            timestamp in any::<i64>(),
            start_timestamp in prop_oneof![Just(0i64), any::<i64>()],
            junk in proptest::option::of(1u64..1000),
        ) {
            use crate::proto::io::prometheus::write::v2;
            let mut b = v2::Sample { value, timestamp, start_timestamp }.encode_to_vec();
            if let Some(j) = junk {
                // An unknown field after them: the general path.
                prost::encoding::uint64::encode(9, &j, &mut b);
            }
            let back = v2::Sample::decode(&b[..]).expect("prost reads it");
            let (t, v) = read_sample(&b);
            prop_assert_eq!((t, v.to_bits()), (back.timestamp, back.value.to_bits()));
            prop_assert_eq!(sample_time_and_start(&b), (back.timestamp, back.start_timestamp));
            prop_assert!(check_sample(&b, 0).is_ok());
        }
    }
}
