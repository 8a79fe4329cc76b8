//! Remote-write 2.0 (`io.prometheus.write.v2.Request`) read in place.
//!
//! Labels arrive as pairs of references into the request's `symbols`. One
//! walk checks the structure of the whole request and notes where every
//! symbol and series is; each series' references are then checked and
//! turned into the head's canonical label bytes in one reused buffer, so a
//! known series is found exactly as a 1.0 one is, with nothing allocated.
//!
//! Field numbers (prometheus/prometheus `prompb/io/prometheus/write/v2/
//! types.proto`): `Request` 4 `symbols`, 5 `timeseries` (1–3 reserved);
//! `TimeSeries` 1 `labels_refs`, 2 `samples`, 3 `histograms`,
//! 4 `exemplars`, 5 `metadata`, 6 `created_timestamp` (until v3.7);
//! `Sample` 1 `value`, 2 `timestamp`, 3 `start_timestamp` (from v3.8);
//! `Metadata` 1 `type`, 3 `help_ref`, 4 `unit_ref`.

use std::fmt;

use super::decode::{check_message, check_sample, SampleIter};
use crate::encoding::uvarint;
use crate::ingest::describe_labels;
use crate::ingest::protowire::{wrong_type, DecodeError, Reader, Value};
use crate::storage::labels::encode_canonical_bytes;

/// Why a 2.0 request was refused whole, before anything was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// Not valid protobuf for the message.
    Decode(DecodeError),
    /// Valid protobuf that breaks a rule of the whole request.
    Invalid(String),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Decode(e) => e.fmt(f),
            RequestError::Invalid(m) => f.write_str(m),
        }
    }
}

impl From<DecodeError> for RequestError {
    fn from(e: DecodeError) -> Self {
        RequestError::Decode(e)
    }
}

/// A series' `metadata`: its type and references to its help and unit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MetadataRefs {
    /// `MetricType` (0 unspecified, 1 counter, 2 gauge, …, as in 1.0).
    pub kind: u64,
    /// Index of the help text in `symbols`.
    pub help: u32,
    /// Index of the unit in `symbols`.
    pub unit: u32,
}

/// Where one `TimeSeries` is, as offsets into its request and into the
/// request's [`Scratch`], to keep in buffers reused across requests.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpanV2 {
    /// Its index among the request's series, for error messages.
    pub index: u32,
    msg: (usize, usize),
    base: usize,
    /// Its `labels_refs`, as `refs[start..start + len]` of the scratch.
    refs: (u32, u32),
    /// Its canonical label bytes, once built, in the scratch.
    canonical: (u32, u32),
    samples_at: u32,
    /// Float samples.
    pub samples: u32,
    /// Native histogram samples (not stored yet).
    pub histograms: u32,
    /// Exemplars.
    pub exemplars: u32,
    /// Its metadata, if it carries any.
    pub metadata: Option<MetadataRefs>,
    /// Its start (created) timestamp in ms, 0 if unset: the first sample's
    /// `start_timestamp`, else the series' `created_timestamp`.
    pub start: i64,
}

/// Buffers one thread reuses for every 2.0 request it decodes.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Each symbol as (offset, length) in the request.
    symbols: Vec<(u32, u32)>,
    /// Every series' label references, one after another.
    refs: Vec<u32>,
    /// Every series' canonical label bytes, one after another, in a buffer
    /// sized by [`Scratch::prepare`].
    canonical: Vec<u8>,
    /// Bytes of `canonical` written so far.
    canonical_len: usize,
    /// The request's series, in order.
    pub series: Vec<SpanV2>,
}

impl Scratch {
    /// Forgets the last request.
    pub fn clear(&mut self) {
        self.symbols.clear();
        self.refs.clear();
        self.canonical_len = 0;
        self.series.clear();
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        use crate::reuse::Buffer;
        self.symbols.heap_bytes()
            + self.refs.heap_bytes()
            + self.canonical.heap_bytes()
            + self.series.heap_bytes()
    }
}

/// Checks `body` as a 2.0 `Request`, filling `scratch` with its symbols and
/// series. A body that is not valid protobuf, that carries fields a 2.0
/// request has reserved (a 1.0 body sent as 2.0), or whose first symbol is
/// not the empty string, is refused whole. Allocates nothing once the
/// scratch buffers have grown.
pub fn check(body: &[u8], scratch: &mut Scratch) -> Result<(), RequestError> {
    scratch.clear();
    if body.len() > u32::MAX as usize {
        return Err(RequestError::Invalid(
            "request is larger than 4 GiB".to_owned(),
        ));
    }
    let mut r = Reader::new(body);
    while let Some((field, v, at)) = r.next_field()? {
        match (field, v) {
            (4, Value::Bytes(s)) => scratch
                .symbols
                .push((offset_in(body, s) as u32, s.len() as u32)),
            (5, Value::Bytes(ts)) => {
                let index = scratch.series.len() as u32;
                let span = check_series(ts, offset_in(body, ts), index, &mut scratch.refs)?;
                scratch.series.push(span);
            }
            (4 | 5, _) => return Err(wrong_type(at).into()),
            (1..=3, _) => {
                return Err(RequestError::Invalid(
                    "the body has fields 1-3, which io.prometheus.write.v2.Request reserves: \
                     it looks like a remote write 1.0 WriteRequest; send it with \
                     Content-Type application/x-protobuf;proto=prometheus.WriteRequest"
                        .to_owned(),
                ))
            }
            _ => {}
        }
    }
    if let Some(&(at, len)) = scratch.symbols.first() {
        if len != 0 {
            let first = symbol(body, (at, len));
            return Err(RequestError::Invalid(format!(
                "symbols[0] must be the empty string, got {:?}",
                String::from_utf8_lossy(&first[..first.len().min(64)])
            )));
        }
    }
    scratch.prepare(body);
    Ok(())
}

/// Checks one `TimeSeries` and notes where its parts are; its label
/// references are appended to `refs`.
fn check_series(
    msg: &[u8],
    base: usize,
    index: u32,
    refs: &mut Vec<u32>,
) -> Result<SpanV2, RequestError> {
    let mut span = SpanV2 {
        index,
        msg: (base, msg.len()),
        base,
        refs: (refs.len() as u32, 0),
        ..SpanV2::default()
    };
    let mut r = Reader::nested(msg, base);
    loop {
        let field_start = r.offset() - base;
        let Some((field, v, at)) = r.next_field()? else {
            break;
        };
        match (field, v) {
            (1, Value::Bytes(packed)) => {
                let mut rest = packed;
                while !rest.is_empty() {
                    let Some((x, n)) = uvarint(rest) else {
                        return Err(DecodeError {
                            what: "truncated varint in labels_refs",
                            offset: at + (packed.len() - rest.len()),
                        }
                        .into());
                    };
                    refs.push(u32::try_from(x).unwrap_or(u32::MAX));
                    rest = &rest[n..];
                }
            }
            (1, Value::Varint(x)) => refs.push(u32::try_from(x).unwrap_or(u32::MAX)),
            (2, Value::Bytes(sample)) => {
                check_sample(sample, at)?;
                if span.samples == 0 {
                    span.samples_at = field_start as u32;
                    if let Some(st) = start_timestamp(sample) {
                        span.start = st;
                    }
                }
                span.samples += 1;
            }
            (3, Value::Bytes(h)) => {
                check_message(h, at)?;
                span.histograms += 1;
            }
            (4, Value::Bytes(e)) => {
                check_message(e, at)?;
                span.exemplars += 1;
            }
            (5, Value::Bytes(md)) => span.metadata = Some(check_metadata(md, at)?),
            (6, Value::Varint(ct)) if span.start == 0 => span.start = ct as i64,
            (6, Value::Varint(_)) => {}
            (1..=6, _) => return Err(wrong_type(at).into()),
            _ => {}
        }
    }
    span.refs.1 = refs.len() as u32 - span.refs.0;
    Ok(span)
}

/// A sample's `start_timestamp` (field 3), if set.
fn start_timestamp(sample: &[u8]) -> Option<i64> {
    let mut r = Reader::new(sample);
    while let Ok(Some((field, v, _))) = r.next_field() {
        if let (3, Value::Varint(st)) = (field, v) {
            return (st != 0).then_some(st as i64);
        }
    }
    None
}

fn check_metadata(msg: &[u8], base: usize) -> Result<MetadataRefs, DecodeError> {
    let mut md = MetadataRefs::default();
    let mut r = Reader::nested(msg, base);
    while let Some((field, v, at)) = r.next_field()? {
        match (field, v) {
            (1, Value::Varint(k)) => md.kind = k,
            (3, Value::Varint(h)) => md.help = u32::try_from(h).unwrap_or(u32::MAX),
            (4, Value::Varint(u)) => md.unit = u32::try_from(u).unwrap_or(u32::MAX),
            (1 | 3 | 4, _) => return Err(wrong_type(at)),
            _ => {}
        }
    }
    Ok(md)
}

/// Bytes copied at once for a short symbol: a fixed-size copy (no call)
/// that may run past the symbol; the buffer keeps this much slack.
const COPY: usize = 32;

/// Appends symbol `(at, len)` of `body` at `*pos` in `buf`, which has
/// [`COPY`] bytes of slack past what is written.
#[inline]
fn copy_symbol(buf: &mut [u8], pos: &mut usize, body: &[u8], (at, len): (u32, u32)) {
    let (at, len) = (at as usize, len as usize);
    match (body.get(at..at + COPY), buf.get_mut(*pos..*pos + COPY)) {
        (Some(src), Some(dst)) if len <= COPY => dst.copy_from_slice(src),
        _ => buf[*pos..*pos + len].copy_from_slice(&body[at..at + len]),
    }
    *pos += len;
}

/// Where `part`, a slice of `body`, starts in it.
fn offset_in(body: &[u8], part: &[u8]) -> usize {
    (part.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize)
}

fn symbol(body: &[u8], (at, len): (u32, u32)) -> &[u8] {
    let at = at as usize;
    body.get(at..at + len as usize).unwrap_or_default()
}

/// What is wrong with one series, by the rules of a 2.0 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeriesProblem {
    /// `labels_refs` holds an odd number of references.
    OddRefs(u32),
    /// A reference past the end of `symbols`.
    RefOutOfRange {
        /// Which of its references.
        at: u32,
        /// Its value.
        reference: u32,
    },
    /// Both float samples and histograms.
    SamplesAndHistograms,
    /// Neither float samples nor histograms.
    NoSamples,
}

impl SeriesProblem {
    /// The problem, worded for a reply.
    pub fn describe(&self, index: u32, symbols: usize) -> String {
        match self {
            SeriesProblem::OddRefs(n) => format!(
                "series {index}: labels_refs has {n} entries; it must hold (name, value) pairs"
            ),
            SeriesProblem::RefOutOfRange { at, reference } => format!(
                "series {index}: reference {reference} (entry {at} of labels_refs or metadata) \
                 is outside the symbols table of {symbols} entries"
            ),
            SeriesProblem::SamplesAndHistograms => format!(
                "series {index}: has both float samples and histograms; a series must carry one kind"
            ),
            SeriesProblem::NoSamples => {
                format!("series {index}: has neither samples nor histograms")
            }
        }
    }
}

impl Scratch {
    /// Symbols in the request.
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Checks series `i`'s references and shape, and builds its canonical
    /// label bytes (in sent order) for the lookup.
    pub fn resolve(&mut self, body: &[u8], i: usize) -> Result<(), SeriesProblem> {
        let span = self.series[i];
        let (start, len) = (span.refs.0 as usize, span.refs.1 as usize);
        if len % 2 != 0 {
            return Err(SeriesProblem::OddRefs(len as u32));
        }
        let n = self.symbols.len() as u32;
        if let Some(md) = span.metadata {
            for reference in [md.help, md.unit] {
                if reference >= n && reference != 0 {
                    return Err(SeriesProblem::RefOutOfRange {
                        at: len as u32,
                        reference,
                    });
                }
            }
        }
        match (span.samples, span.histograms) {
            (0, 0) => return Err(SeriesProblem::NoSamples),
            (s, h) if s > 0 && h > 0 => return Err(SeriesProblem::SamplesAndHistograms),
            _ => {}
        }
        // One pass: each pair's references are checked and its label
        // written. A series that would outgrow the request's buffer (see
        // `prepare`) gets no canonical bytes and is found, or created,
        // through its parsed labels instead.
        let refs = &self.refs[start..start + len];
        let buf = &mut self.canonical;
        let from = self.canonical_len;
        let mut pos = from;
        let mut fits = true;
        for (k, pair) in refs.chunks_exact(2).enumerate() {
            let symbol_at = |j: usize| {
                self.symbols
                    .get(pair[j] as usize)
                    .copied()
                    .ok_or(SeriesProblem::RefOutOfRange {
                        at: (2 * k + j) as u32,
                        reference: pair[j],
                    })
            };
            let (name, value) = (symbol_at(0)?, symbol_at(1)?);
            if !fits {
                continue;
            }
            let (nl, vl) = (name.1 as usize, value.1 as usize);
            let inner = 2 + nl + 2 + vl;
            if pos + inner + 8 + COPY > buf.len() {
                fits = false;
                continue;
            }
            if inner < 0x80 {
                // One-byte lengths, the common label: fixed-size copies.
                buf[pos..pos + 4].copy_from_slice(&[0x0a, inner as u8, 0x0a, nl as u8]);
                pos += 4;
                copy_symbol(buf, &mut pos, body, name);
                buf[pos..pos + 2].copy_from_slice(&[0x12, vl as u8]);
                pos += 2;
                copy_symbol(buf, &mut pos, body, value);
            } else {
                let mut one = Vec::with_capacity(inner + 8);
                encode_canonical_bytes([(symbol(body, name), symbol(body, value))], &mut one);
                buf[pos..pos + one.len()].copy_from_slice(&one);
                pos += one.len();
            }
        }
        if fits {
            self.canonical_len = pos;
            self.series[i].canonical = (from as u32, (pos - from) as u32);
        } else {
            self.series[i].canonical = (0, 0);
        }
        Ok(())
    }

    /// Sizes the canonical-bytes buffer for the request in `body` ([`check`]
    /// does, before any [`Scratch::resolve`]): what its series need,
    /// within a budget of a few times the request, so that no request can
    /// make it grow past that.
    fn prepare(&mut self, body: &[u8]) {
        let need: usize = self
            .refs
            .iter()
            .map(|&r| self.symbols.get(r as usize).map_or(0, |s| s.1 as usize) + 5)
            .sum::<usize>()
            + COPY;
        let budget = 4 * body.len() + (1 << 20);
        // Grown, never cleared: stale bytes are overwritten before use.
        let target = need.min(budget);
        if self.canonical.len() < target {
            self.canonical.resize(target, 0);
        }
        self.canonical_len = 0;
    }

    /// Series `span`'s canonical label bytes (after [`Scratch::resolve`]).
    pub fn canonical(&self, span: &SpanV2) -> &[u8] {
        let (at, len) = (span.canonical.0 as usize, span.canonical.1 as usize);
        self.canonical.get(at..at + len).unwrap_or_default()
    }

    /// Series `span`'s float samples.
    pub fn samples<'a>(&self, body: &'a [u8], span: &SpanV2) -> SampleIter<'a> {
        let msg = body
            .get(span.msg.0..span.msg.0 + span.msg.1)
            .unwrap_or_default();
        SampleIter::at(msg, span.base, span.samples_at as usize)
    }

    /// Series `span`'s labels as (name, value) bytes, in sent order
    /// (after [`Scratch::resolve`] checked its references).
    pub fn labels<'a>(
        &self,
        body: &'a [u8],
        span: &SpanV2,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a, '_> {
        let (start, len) = (span.refs.0 as usize, span.refs.1 as usize);
        self.refs[start..start + len].chunks_exact(2).map(move |p| {
            let get = |r: u32| {
                self.symbols
                    .get(r as usize)
                    .map_or(&[][..], |&s| symbol(body, s))
            };
            (get(p[0]), get(p[1]))
        })
    }

    /// Series `span`'s exemplars: for each, its labels (into `labels`,
    /// cleared first; a reference outside `symbols` gives an empty name),
    /// value and timestamp, handed to `f`.
    pub fn exemplars<'a>(
        &self,
        body: &'a [u8],
        span: &SpanV2,
        labels: &mut Vec<(&'a [u8], &'a [u8])>,
        mut f: impl FnMut(&[(&'a [u8], &'a [u8])], f64, i64),
    ) {
        let msg = body
            .get(span.msg.0..span.msg.0 + span.msg.1)
            .unwrap_or_default();
        let get = |r: u64| {
            self.symbols
                .get(r as usize)
                .map_or(&[][..], |&s| symbol(body, s))
        };
        let mut r = Reader::new(msg);
        while let Ok(Some((field, v, _))) = r.next_field() {
            let (4, Value::Bytes(e)) = (field, v) else {
                continue;
            };
            labels.clear();
            let (mut value, mut t) = (0f64, 0i64);
            let mut refs: [u64; 2] = [0; 2];
            let mut have = 0;
            let mut er = Reader::new(e);
            while let Ok(Some((field, v, _))) = er.next_field() {
                match (field, v) {
                    (1, Value::Bytes(packed)) => {
                        let mut rest = packed;
                        while let Some((x, n)) = uvarint(rest) {
                            rest = &rest[n..];
                            refs[have] = x;
                            have += 1;
                            if have == 2 {
                                labels.push((get(refs[0]), get(refs[1])));
                                have = 0;
                            }
                        }
                    }
                    (1, Value::Varint(x)) => {
                        refs[have] = x;
                        have += 1;
                        if have == 2 {
                            labels.push((get(refs[0]), get(refs[1])));
                            have = 0;
                        }
                    }
                    (2, Value::Fixed64(bits)) => value = f64::from_bits(bits),
                    (3, Value::Varint(x)) => t = x as i64,
                    _ => {}
                }
            }
            if have == 1 {
                // An odd reference count: the last name has no value.
                labels.push((b"", b""));
            }
            f(labels, value, t);
        }
    }

    /// Symbol `r` as text; empty if it is out of range or not UTF-8.
    pub fn text<'a>(&self, body: &'a [u8], r: u32) -> &'a str {
        self.symbols
            .get(r as usize)
            .and_then(|&s| std::str::from_utf8(symbol(body, s)).ok())
            .unwrap_or("")
    }

    /// Series `span` for an error message: its index and labels.
    pub fn describe(&self, body: &[u8], span: &SpanV2) -> String {
        format!(
            "{} {}",
            span.index,
            describe_labels(self.labels(body, span))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::io::prometheus::write::v2 as pb;
    use proptest::prelude::*;
    use prost::Message;

    fn request(symbols: &[&str], series: Vec<pb::TimeSeries>) -> Vec<u8> {
        pb::Request {
            symbols: symbols.iter().map(|s| (*s).to_owned()).collect(),
            timeseries: series,
        }
        .encode_to_vec()
    }

    fn ts(refs: &[u32], samples: &[(i64, f64)]) -> pb::TimeSeries {
        pb::TimeSeries {
            labels_refs: refs.to_vec(),
            samples: samples
                .iter()
                .map(|&(timestamp, value)| pb::Sample {
                    value,
                    timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_1_0_body_and_a_bad_first_symbol_are_refused_whole() {
        let v1 = crate::proto::prometheus::WriteRequest {
            timeseries: vec![crate::proto::prometheus::TimeSeries::default()],
            metadata: vec![],
        }
        .encode_to_vec();
        let mut scratch = Scratch::default();
        let err = check(&v1, &mut scratch).expect_err("reserved fields");
        assert!(err.to_string().contains("1.0"), "{err}");
        let body = request(&["up", "__name__"], vec![ts(&[1, 0], &[(1, 1.0)])]);
        let err = check(&body, &mut scratch).expect_err("symbols[0] is not empty");
        assert!(err.to_string().contains("symbols[0]"), "{err}");
        let mut cut = request(&["", "a"], vec![ts(&[1, 1], &[(1, 1.0)])]);
        cut.truncate(cut.len() - 2);
        assert!(matches!(
            check(&cut, &mut scratch),
            Err(RequestError::Decode(_))
        ));
    }

    #[test]
    fn each_broken_series_is_named_and_the_others_resolve() {
        let symbols = ["", "__name__", "up", "job", "a"];
        let both = pb::TimeSeries {
            histograms: vec![pb::Histogram::default()],
            ..ts(&[1, 2], &[(1, 1.0)])
        };
        let body = request(
            &symbols,
            vec![
                ts(&[1, 2, 3], &[(1, 1.0)]),
                ts(&[1, 2, 3, 9], &[(1, 1.0)]),
                both,
                ts(&[1, 2], &[]),
                ts(&[1, 2, 3, 4], &[(1, 1.0), (2, 2.0)]),
            ],
        );
        let mut scratch = Scratch::default();
        check(&body, &mut scratch).expect("well formed");
        let got: Vec<_> = (0..5).map(|i| scratch.resolve(&body, i)).collect();
        assert_eq!(got[0], Err(SeriesProblem::OddRefs(3)));
        assert_eq!(
            got[1],
            Err(SeriesProblem::RefOutOfRange {
                at: 3,
                reference: 9
            })
        );
        assert_eq!(got[2], Err(SeriesProblem::SamplesAndHistograms));
        assert_eq!(got[3], Err(SeriesProblem::NoSamples));
        assert_eq!(got[4], Ok(()));
        let msg = SeriesProblem::RefOutOfRange {
            at: 3,
            reference: 9,
        }
        .describe(1, symbols.len());
        assert!(
            msg.starts_with("series 1:") && msg.contains("5 entries"),
            "{msg}"
        );
        let span = scratch.series[4];
        let mut want = Vec::new();
        crate::storage::labels::encode_canonical([("__name__", "up"), ("job", "a")], &mut want);
        assert_eq!(scratch.canonical(&span), want.as_slice());
        assert_eq!(
            scratch.samples(&body, &span).collect::<Vec<_>>(),
            vec![(1, 1.0), (2, 2.0)]
        );
    }

    proptest! {
        /// Whatever prost encodes, the in-place reader reads back the same
        /// labels, samples and metadata.
        #[test]
        fn decodes_what_prost_encodes(
            symbols in prop::collection::vec("[a-z_]{0,8}", 1..12),
            series in prop::collection::vec(
                (
                    prop::collection::vec((any::<u32>(), any::<u32>()), 0..5),
                    prop::collection::vec((any::<i64>(), any::<f64>()), 1..5),
                    any::<i64>(),
                    prop::option::of((0u64..8, any::<u32>(), any::<u32>())),
                ),
                0..6,
            ),
        ) {
            let mut symbols = symbols;
            symbols[0] = String::new();
            let n = symbols.len() as u32;
            let series: Vec<pb::TimeSeries> = series
                .into_iter()
                .map(|(refs, samples, start, md)| pb::TimeSeries {
                    labels_refs: refs.iter().flat_map(|&(a, b)| [a % n, b % n]).collect(),
                    samples: samples
                        .iter()
                        .map(|&(timestamp, value)| pb::Sample { value, timestamp, start_timestamp: start })
                        .collect(),
                    metadata: md.map(|(kind, h, u)| pb::Metadata {
                        r#type: kind as i32,
                        help_ref: h % n,
                        unit_ref: u % n,
                    }),
                    created_timestamp: start,
                    ..Default::default()
                })
                .collect();
            let body = pb::Request { symbols, timeseries: series }.encode_to_vec();
            // The oracle is what prost reads back (proto3 drops -0.0).
            let pb::Request { symbols, timeseries: series } =
                pb::Request::decode(body.as_slice()).expect("prost decodes its own bytes");
            let mut scratch = Scratch::default();
            check(&body, &mut scratch).expect("prost's bytes are valid");
            prop_assert_eq!(scratch.series.len(), series.len());
            for (i, want) in series.iter().enumerate() {
                scratch.resolve(&body, i).expect("valid references");
                let span = scratch.series[i];
                let labels: Vec<(Vec<u8>, Vec<u8>)> = scratch
                    .labels(&body, &span)
                    .map(|(a, b)| (a.to_vec(), b.to_vec()))
                    .collect();
                let expect: Vec<(Vec<u8>, Vec<u8>)> = want
                    .labels_refs
                    .chunks(2)
                    .map(|p| (symbols[p[0] as usize].clone().into_bytes(), symbols[p[1] as usize].clone().into_bytes()))
                    .collect();
                prop_assert_eq!(labels, expect);
                let samples: Vec<(i64, u64)> = scratch
                    .samples(&body, &span)
                    .map(|(t, v)| (t, v.to_bits()))
                    .collect();
                let expect: Vec<(i64, u64)> = want.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
                prop_assert_eq!(samples, expect);
                let md = want.metadata.as_ref().map(|m| MetadataRefs {
                    kind: m.r#type as u64,
                    help: m.help_ref,
                    unit: m.unit_ref,
                });
                prop_assert_eq!(span.metadata, md);
            }
        }

        /// Arbitrary bytes never panic the reader.
        #[test]
        fn any_bytes_are_refused_or_read(body in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut scratch = Scratch::default();
            if check(&body, &mut scratch).is_ok() {
                for i in 0..scratch.series.len() {
                    if scratch.resolve(&body, i).is_ok() {
                        let span = scratch.series[i];
                        let _ = scratch.samples(&body, &span).count();
                        let _ = scratch.describe(&body, &span);
                    }
                }
            }
        }
    }
}
