//! Remote-write 2.0 (`io.prometheus.write.v2.Request`) read in place.
//!
//! Labels arrive as pairs of references into the request's `symbols`. One
//! walk checks the structure of the whole request, notes where every symbol
//! and series is, and hashes each symbol once. A series' key
//! ([`Scratch::key`]) mixes its symbols' hashes in sent order: it is the
//! same in every request that sends the same labels, so a known series is
//! found through a reference the receiver keeps by key, without building
//! its label bytes. Only a series not seen yet has its references turned
//! into canonical label bytes ([`Scratch::resolve`]), in one reused buffer,
//! and is then found or created as a 1.0 one is. Nothing is allocated for a
//! request of known series.
//!
//! Field numbers (prometheus/prometheus `prompb/io/prometheus/write/v2/
//! types.proto`): `Request` 4 `symbols`, 5 `timeseries` (1–3 reserved);
//! `TimeSeries` 1 `labels_refs`, 2 `samples`, 3 `histograms`,
//! 4 `exemplars`, 5 `metadata`, 6 `created_timestamp` (until v3.7);
//! `Sample` 1 `value`, 2 `timestamp`, 3 `start_timestamp` (from v3.8);
//! `Metadata` 1 `type`, 3 `help_ref`, 4 `unit_ref`.

use std::fmt;

use super::super::describe_labels;
use super::{check_message, check_sample, SampleIter};
use crate::encoding::uvarint;
use crate::protocol::wire::{wrong_type, DecodeError, Reader, Value};

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
    /// Its message: (offset, length) in the request.
    msg: (u32, u32),
    /// Its `labels_refs` as one packed field: (offset, length) in the
    /// request, read as they are used.
    refs_packed: (u32, u32),
    /// Its `labels_refs` otherwise (unpacked, or in several fields), as
    /// `refs[start..start + len]` of the scratch.
    refs_listed: (u32, u32),
    /// How many references it has.
    ref_count: u32,
    /// Its canonical label bytes, once built, in the scratch.
    canonical: (u32, u32),
    samples_at: u32,
    /// Float samples.
    pub samples: u32,
    /// Native histogram samples.
    pub histograms: u32,
    /// Exemplars.
    pub exemplars: u32,
    /// Its metadata, if it carries any.
    pub metadata: Option<MetadataRefs>,
    /// Its start (created) timestamp in ms, 0 if unset: the first sample's
    /// `start_timestamp`, else the series' `created_timestamp`.
    pub start: i64,
    /// The series' `created_timestamp` (senders before v3.8), 0 if unset.
    pub created: i64,
}

/// Buffers one thread reuses for every 2.0 request it decodes.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Each symbol as (offset, length) in the request.
    symbols: Vec<(u32, u32)>,
    /// Each symbol's 128-bit hash (two halves), for [`Scratch::key`].
    hashes: Vec<[u64; 2]>,
    /// The label references of series that do not send them as one packed
    /// field, one series after another.
    refs: Vec<u32>,
    /// Canonical label bytes of the series built so far, one after another;
    /// grown as needed within [`Scratch::budget`], never shrunk per request.
    canonical: Vec<u8>,
    /// Bytes of `canonical` written so far.
    canonical_len: usize,
    /// Most bytes `canonical` may hold for this request.
    budget: usize,
    /// The request's series, in order.
    pub series: Vec<SpanV2>,
    /// (series index, key) of the request's valid series.
    pub keys: Vec<(u32, u128)>,
}

impl Scratch {
    /// Forgets the last request.
    pub fn clear(&mut self) {
        self.symbols.clear();
        self.hashes.clear();
        self.refs.clear();
        self.canonical_len = 0;
        self.series.clear();
        self.keys.clear();
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        use crate::reuse::Buffer;
        self.symbols.heap_bytes()
            + self.hashes.heap_bytes()
            + self.refs.heap_bytes()
            + self.canonical.heap_bytes()
            + self.series.heap_bytes()
            + self.keys.heap_bytes()
    }
}

/// Checks `body` as a 2.0 `Request`, filling `scratch` with its symbols and
/// series, and hashing each symbol once for [`Scratch::key`]. A body that
/// is not valid protobuf, that carries fields a 2.0 request has reserved (a
/// 1.0 body sent as 2.0), or whose first symbol is not the empty string, is
/// refused whole. Allocates nothing once the scratch buffers have grown.
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
    let seed = seed();
    scratch.hashes.extend(scratch.symbols.iter().map(|&s| {
        let h = xxhash_rust::xxh3::xxh3_128_with_seed(symbol(body, s), seed);
        [h as u64, (h >> 64) as u64]
    }));
    scratch.canonical_len = 0;
    scratch.budget = 4 * body.len() + (1 << 20);
    Ok(())
}

/// The process' seed for symbol hashes: random, so that no sender can
/// choose labels whose keys collide.
fn seed() -> u64 {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x006b_6579_u64)
    })
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
        msg: (base as u32, msg.len() as u32),
        refs_listed: (refs.len() as u32, 0),
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
                if packed.last().is_some_and(|&b| b >= 0x80) {
                    return Err(DecodeError {
                        what: "truncated varint in labels_refs",
                        offset: at + packed.len(),
                    }
                    .into());
                }
                // Each reference ends in the one byte of it below 0x80.
                let count = packed.iter().filter(|&&b| b < 0x80).count() as u32;
                if span.ref_count == 0 {
                    // The usual case: read in place later.
                    span.refs_packed = (offset_in_msg(msg, packed, base), packed.len() as u32);
                } else {
                    list_packed(&mut span, msg, base, refs);
                    refs.extend(PackedRefs(packed));
                }
                span.ref_count += count;
            }
            (1, Value::Varint(x)) => {
                list_packed(&mut span, msg, base, refs);
                refs.push(u32::try_from(x).unwrap_or(u32::MAX));
                span.ref_count += 1;
            }
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
            (6, Value::Varint(ct)) => {
                span.created = ct as i64;
                if span.start == 0 {
                    span.start = ct as i64;
                }
            }
            (1..=6, _) => return Err(wrong_type(at).into()),
            _ => {}
        }
    }
    span.refs_listed.1 = refs.len() as u32 - span.refs_listed.0;
    Ok(span)
}

/// Where `part`, a slice of the series message `msg` that starts at `base`
/// in the request, starts in the request.
fn offset_in_msg(msg: &[u8], part: &[u8], base: usize) -> u32 {
    (base + offset_in(msg, part)) as u32
}

/// Moves a series' packed references, if it has them, into the listed
/// ones: it sends its references in more than one field.
fn list_packed(span: &mut SpanV2, msg: &[u8], base: usize, refs: &mut Vec<u32>) {
    let (at, len) = (span.refs_packed.0 as usize, span.refs_packed.1 as usize);
    if len == 0 {
        return;
    }
    let from = at - base;
    refs.extend(PackedRefs(msg.get(from..from + len).unwrap_or_default()));
    span.refs_packed = (0, 0);
}

/// References packed as varints (checked not to end mid-varint). A value
/// past `u32` reads as `u32::MAX`, which no symbol table reaches.
#[derive(Clone)]
struct PackedRefs<'a>(&'a [u8]);

impl Iterator for PackedRefs<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let (&first, rest) = self.0.split_first()?;
        if first < 0x80 {
            self.0 = rest;
            return Some(u32::from(first));
        }
        match uvarint(self.0) {
            Some((x, n)) => {
                self.0 = &self.0[n..];
                Some(u32::try_from(x).unwrap_or(u32::MAX))
            }
            None => {
                // Longer than a varint may be: one bad reference.
                let end = self
                    .0
                    .iter()
                    .position(|&b| b < 0x80)
                    .map_or(self.0.len(), |i| i + 1);
                self.0 = &self.0[end..];
                Some(u32::MAX)
            }
        }
    }
}

/// A series' references, from where [`check`] found them.
#[derive(Clone)]
pub(crate) struct Refs<'a> {
    packed: PackedRefs<'a>,
    listed: std::slice::Iter<'a, u32>,
}

impl Iterator for Refs<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        match self.packed.next() {
            Some(r) => Some(r),
            None => self.listed.next().copied(),
        }
    }
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

/// The references of `span`, from `body` and the scratch's `listed` ones.
fn refs_of<'a>(body: &'a [u8], listed: &'a [u32], span: &SpanV2) -> Refs<'a> {
    let (at, len) = (span.refs_packed.0 as usize, span.refs_packed.1 as usize);
    let (start, n) = (span.refs_listed.0 as usize, span.refs_listed.1 as usize);
    Refs {
        packed: PackedRefs(body.get(at..at + len).unwrap_or_default()),
        listed: listed.get(start..start + n).unwrap_or_default().iter(),
    }
}

/// Starting states of the two 64-bit halves of a series key (digits of
/// pi, any odd constants do).
const LANE_A: u64 = 0x243f_6a88_85a3_08d3;
const LANE_B: u64 = 0x1319_8a2e_0370_7345;

/// The 128-bit product of `x` and `y`, its halves xor-ed: every input bit
/// moves many output bits.
#[inline]
fn fold(x: u64, y: u64) -> u64 {
    let p = u128::from(x) * u128::from(y);
    (p as u64) ^ (p >> 64) as u64
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

    /// Series `span`'s label references, in sent order.
    pub(crate) fn refs<'a>(&'a self, body: &'a [u8], span: &SpanV2) -> Refs<'a> {
        refs_of(body, &self.refs, span)
    }

    /// Checks what [`Scratch::key`] and [`Scratch::resolve`] check before
    /// the references: pairs, metadata references, one kind of samples.
    fn check_shape(&self, span: &SpanV2) -> Result<(), SeriesProblem> {
        let len = span.ref_count;
        if !len.is_multiple_of(2) {
            return Err(SeriesProblem::OddRefs(len));
        }
        let n = self.symbols.len() as u32;
        if let Some(md) = span.metadata {
            for reference in [md.help, md.unit] {
                if reference >= n && reference != 0 {
                    return Err(SeriesProblem::RefOutOfRange { at: len, reference });
                }
            }
        }
        match (span.samples, span.histograms) {
            (0, 0) => Err(SeriesProblem::NoSamples),
            (s, h) if s > 0 && h > 0 => Err(SeriesProblem::SamplesAndHistograms),
            _ => Ok(()),
        }
    }

    /// Checks series `i`'s references and shape, and returns its key: a
    /// 128-bit mix of its symbols' hashes in sent order, the same in every
    /// request that sends the same labels, whatever the symbol table's
    /// order. A known series is found by it without building its label
    /// bytes (see `storage::aliases`).
    #[inline]
    pub fn key(&self, body: &[u8], i: usize) -> Result<u128, SeriesProblem> {
        let span = &self.series[i];
        self.check_shape(span)?;
        let mut refs = self.refs(body, span);
        let hash = |reference: u32, at: u32| {
            self.hashes
                .get(reference as usize)
                .ok_or(SeriesProblem::RefOutOfRange { at, reference })
        };
        let (mut a, mut b) = (LANE_A, LANE_B);
        let mut k = 0u32;
        while let (Some(n), Some(v)) = (refs.next(), refs.next()) {
            let (hn, hv) = (hash(n, k)?, hash(v, k + 1)?);
            // Values are mixed with the other lane's constant: with the
            // same one, `fold` (a product) would give `{x="y"}` and
            // `{y="x"}` one key.
            a = fold(a ^ hn[0], hv[0] ^ LANE_B);
            b = fold(b ^ hn[1], hv[1] ^ LANE_A);
            k += 2;
        }
        let k = u64::from(k);
        Ok(u128::from(fold(a ^ k, LANE_B)) | u128::from(fold(b ^ k, LANE_A)) << 64)
    }

    /// Checks series `i`'s references and shape, and builds its canonical
    /// label bytes (in sent order) for the lookup. `Ok(false)`: the series
    /// would outgrow the request's budget for label bytes and has none; it
    /// is found, or created, through its parsed labels instead.
    pub fn resolve(&mut self, body: &[u8], i: usize) -> Result<bool, SeriesProblem> {
        let span = self.series[i];
        self.check_shape(&span)?;
        let Scratch {
            symbols,
            refs,
            canonical: buf,
            canonical_len,
            budget,
            ..
        } = self;
        let mut it = refs_of(body, refs, &span);
        let from = *canonical_len;
        let mut pos = from;
        let mut fits = true;
        let mut k = 0u32;
        // One pass: each pair's references are checked and its label
        // written.
        while let (Some(n), Some(v)) = (it.next(), it.next()) {
            let symbol_at = |reference: u32, at: u32| {
                symbols
                    .get(reference as usize)
                    .copied()
                    .ok_or(SeriesProblem::RefOutOfRange { at, reference })
            };
            let (name, value) = (symbol_at(n, k)?, symbol_at(v, k + 1)?);
            k += 2;
            if !fits {
                continue;
            }
            let (nl, vl) = (name.1 as usize, value.1 as usize);
            let inner = 2 + nl + 2 + vl;
            let end = pos + inner + 8 + COPY;
            if end > buf.len() {
                if end > *budget {
                    fits = false;
                    continue;
                }
                buf.resize(end.max(2 * buf.len()).min(*budget), 0);
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
                super::encode::put_labels([(symbol(body, name), symbol(body, value))], &mut one);
                buf[pos..pos + one.len()].copy_from_slice(&one);
                pos += one.len();
            }
        }
        let series = &mut self.series[i];
        if fits {
            *canonical_len = pos;
            series.canonical = (from as u32, (pos - from) as u32);
        } else {
            series.canonical = (0, 0);
        }
        Ok(fits)
    }

    /// Series `span`'s canonical label bytes (after [`Scratch::resolve`]).
    pub fn canonical(&self, span: &SpanV2) -> &[u8] {
        let (at, len) = (span.canonical.0 as usize, span.canonical.1 as usize);
        self.canonical.get(at..at + len).unwrap_or_default()
    }

    /// Series `span`'s float samples.
    pub fn samples<'a>(&self, body: &'a [u8], span: &SpanV2) -> SampleIter<'a> {
        let (at, len) = (span.msg.0 as usize, span.msg.1 as usize);
        let msg = body.get(at..at + len).unwrap_or_default();
        SampleIter::at(msg, at, span.samples_at as usize)
    }

    /// Each float sample's time and start time (its `start_timestamp`,
    /// else the series' `created_timestamp`, else 0).
    pub fn sample_starts<'a>(
        &self,
        body: &'a [u8],
        span: &SpanV2,
    ) -> impl Iterator<Item = (i64, i64)> + use<'a> {
        let (at, len) = (span.msg.0 as usize, span.msg.1 as usize);
        let msg = body.get(at..at + len).unwrap_or_default();
        let mut r = Reader::nested(msg.get(span.samples_at as usize..).unwrap_or_default(), 0);
        let created = span.created;
        std::iter::from_fn(move || loop {
            match r.next_field() {
                Ok(Some((2, Value::Bytes(b), _))) => {
                    let (t, st) = super::sample_time_and_start(b);
                    return Some((t, if st != 0 { st } else { created }));
                }
                Ok(Some(_)) => {}
                _ => return None,
            }
        })
    }

    /// Series `span`'s labels as (name, value) bytes, in sent order
    /// (after [`Scratch::resolve`] checked its references).
    pub fn labels<'a>(
        &'a self,
        body: &'a [u8],
        span: &SpanV2,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let get = |r: u32| {
            self.symbols
                .get(r as usize)
                .map_or(&[][..], |&s| symbol(body, s))
        };
        let mut refs = self.refs(body, span);
        std::iter::from_fn(move || Some((get(refs.next()?), get(refs.next()?))))
    }

    /// The series' native histogram messages (`TimeSeries.histograms`,
    /// field 3), undecoded.
    pub fn histograms<'a>(
        &self,
        body: &'a [u8],
        span: &SpanV2,
    ) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (at, len) = (span.msg.0 as usize, span.msg.1 as usize);
        let msg = body.get(at..at + len).unwrap_or_default();
        let mut r = crate::protocol::wire::Reader::new(msg);
        std::iter::from_fn(move || loop {
            match r.next_field() {
                Ok(Some((3, crate::protocol::wire::Value::Bytes(b), _))) => return Some(b),
                Ok(Some(_)) => {}
                _ => return None,
            }
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
        let (at, len) = (span.msg.0 as usize, span.msg.1 as usize);
        let msg = body.get(at..at + len).unwrap_or_default();
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
        assert_eq!(got[4], Ok(true));
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

    /// A series' parts by hand, to send `labels_refs` unpacked (one varint
    /// field per reference, which protobuf allows) or in two packed runs.
    fn hand_series(refs: &[u32], packed_runs: usize) -> Vec<u8> {
        use crate::encoding::put_uvarint;
        let mut msg = Vec::new();
        if packed_runs == 0 {
            for &r in refs {
                msg.push(0x08);
                put_uvarint(&mut msg, u64::from(r));
            }
        } else {
            let per = refs.len().div_ceil(packed_runs).max(1);
            for run in refs.chunks(per) {
                let mut packed = Vec::new();
                for &r in run {
                    put_uvarint(&mut packed, u64::from(r));
                }
                msg.push(0x0a);
                put_uvarint(&mut msg, packed.len() as u64);
                msg.extend_from_slice(&packed);
            }
        }
        let sample = pb::Sample {
            value: 1.0,
            timestamp: 5,
            start_timestamp: 0,
        }
        .encode_to_vec();
        msg.push(0x12);
        put_uvarint(&mut msg, sample.len() as u64);
        msg.extend_from_slice(&sample);
        msg
    }

    fn hand_request(symbols: &[&str], series: &[Vec<u8>]) -> Vec<u8> {
        use crate::encoding::put_uvarint;
        let mut body = Vec::new();
        for s in symbols {
            body.push(0x22);
            put_uvarint(&mut body, s.len() as u64);
            body.extend_from_slice(s.as_bytes());
        }
        for ts in series {
            body.push(0x2a);
            put_uvarint(&mut body, ts.len() as u64);
            body.extend_from_slice(ts);
        }
        body
    }

    #[test]
    fn references_read_alike_packed_unpacked_or_in_runs() {
        let mut symbols: Vec<String> = vec![String::new(), "__name__".into(), "up".into()];
        // Enough symbols that some references take two varint bytes.
        symbols.extend((0..200).map(|i| format!("s{i}")));
        let symbols: Vec<&str> = symbols.iter().map(String::as_str).collect();
        let refs = [1, 2, 150, 199, 3, 4];
        let body = hand_request(
            &symbols,
            &[
                hand_series(&refs, 1),
                hand_series(&refs, 0),
                hand_series(&refs, 2),
                hand_series(&refs, 3),
            ],
        );
        let mut scratch = Scratch::default();
        check(&body, &mut scratch).expect("valid");
        let want = [("__name__", "up"), ("s147", "s196"), ("s0", "s1")];
        let mut keys = Vec::new();
        for i in 0..4 {
            let span = scratch.series[i];
            assert_eq!(span.ref_count, 6, "series {i}");
            let labels: Vec<(&[u8], &[u8])> = scratch.labels(&body, &span).collect();
            let expect: Vec<(&[u8], &[u8])> = want
                .iter()
                .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                .collect();
            assert_eq!(labels, expect, "series {i}");
            keys.push(scratch.key(&body, i).expect("valid"));
            assert_eq!(scratch.resolve(&body, i), Ok(true));
        }
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        let canonical: Vec<Vec<u8>> = (0..4)
            .map(|i| scratch.canonical(&scratch.series[i]).to_vec())
            .collect();
        assert!(canonical.iter().all(|c| *c == canonical[0]));
    }

    #[test]
    fn an_overlong_reference_refuses_its_series_only() {
        let mut ts = vec![0x0a, 12];
        ts.extend_from_slice(&[0xff; 11]);
        ts.push(0x01);
        let good = hand_series(&[1, 2], 1);
        let body = hand_request(&["", "__name__", "up"], &[ts, good]);
        let mut scratch = Scratch::default();
        check(&body, &mut scratch).expect("well formed");
        assert_eq!(scratch.series[0].ref_count, 1);
        assert_eq!(scratch.key(&body, 0), Err(SeriesProblem::OddRefs(1)));
        assert!(scratch.key(&body, 1).is_ok());
    }

    /// `labels` as a 2.0 body, with the symbols in the order `order` gives.
    fn body_with_order(labels: &[(String, String)], order: &[usize]) -> Vec<u8> {
        let mut distinct: Vec<&str> = Vec::new();
        for (n, v) in labels {
            for s in [n.as_str(), v.as_str()] {
                if !distinct.contains(&s) {
                    distinct.push(s);
                }
            }
        }
        let mut symbols = vec![""];
        let mut placed: Vec<&str> = order
            .iter()
            .filter_map(|&i| distinct.get(i).copied())
            .collect();
        for s in &distinct {
            if !placed.contains(s) {
                placed.push(s);
            }
        }
        symbols.extend(placed.iter().copied().filter(|s| !s.is_empty()));
        let at = |s: &str| symbols.iter().position(|x| *x == s).unwrap_or(0) as u32;
        let refs: Vec<u32> = labels.iter().flat_map(|(n, v)| [at(n), at(v)]).collect();
        request(&symbols, vec![ts(&refs, &[(1, 1.0)])])
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

        /// A series' key depends on its labels, not on where the request's
        /// symbol table puts them; different labels get different keys.
        #[test]
        fn keys_name_labels_whatever_the_symbol_order(
            a in prop::collection::vec(("[a-c]{1,3}", "[a-c]{0,3}"), 1..6),
            b in prop::collection::vec(("[a-c]{1,3}", "[a-c]{0,3}"), 1..6),
            order in prop::collection::vec(0usize..12, 0..12),
        ) {
            let key = |labels: &[(String, String)], order: &[usize]| {
                let body = body_with_order(labels, order);
                let mut scratch = Scratch::default();
                check(&body, &mut scratch).expect("valid");
                let key = scratch.key(&body, 0).expect("valid");
                scratch.resolve(&body, 0).expect("valid");
                let canonical = scratch.canonical(&scratch.series[0]).to_vec();
                (key, canonical)
            };
            let (ka, fa) = key(&a, &[]);
            let (ka2, fa2) = key(&a, &order);
            prop_assert_eq!(ka, ka2);
            prop_assert_eq!(fa, fa2);
            let (kb, _) = key(&b, &order);
            prop_assert_eq!(ka == kb, a == b);
            // A name and a value swapped are another series.
            let swapped: Vec<(String, String)> =
                a.iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| (v.clone(), n.clone())).collect();
            if !swapped.is_empty() && swapped != a {
                prop_assert_ne!(key(&swapped, &[]).0, ka);
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
