//! Remote-write 1.0: the pipeline from a decompressed `WriteRequest` to the
//! head. [`decode`] reads the wire format in place; this module appends.
//!
//! [`append_write_request`] walks the body once for structure, then once
//! more to append: a series seen before is found from its raw label bytes
//! with no decoding; a new one is validated, sorted and created. Problems
//! are counted per reason and summarised once per request.

pub use crate::protocol::remote_write as decode;
pub use crate::protocol::remote_write::v2;

use v2::{MetadataRefs, RequestError, SpanV2};

pub use decode::{
    decode, decode_each, metadata, Checked, MetadataView, SampleIter, Series, SeriesSpan,
    TimeSeriesView,
};

use super::pipeline::{self, Batch, Door, ExemplarSink, HaGate, Wire};
use super::relabel::Relabel;
use super::validate::LabelLimits;
use super::{DecodeError, Dropped, IngestReport, MAX_AHEAD_MS};
use crate::reuse::{Buffer, Reused};
use crate::storage::metadata::type_name;
use crate::storage::{Appender, Db, SeriesRef, SeriesSource};

/// Appends a decompressed remote-write 1.0 `WriteRequest` to `db`, with
/// its metadata. A body that is not valid protobuf is rejected whole,
/// before anything is stored; otherwise every valid series is stored and
/// the rest counted.
pub fn append_write_request(
    db: &Db,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    let door = Door {
        limits,
        relabel: &Relabel::default(),
        ha: None,
    };
    append_v1(db, Exemplars::Skip, body, &door, now_ms, &mut |_| true)
}

/// [`append_write_request`], also storing and logging the request's
/// exemplars.
pub fn append_write_request_with_exemplars(
    db: &Db,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    let door = Door {
        limits,
        relabel: &Relabel::default(),
        ha: None,
    };
    append_v1(db, Exemplars::Store, body, &door, now_ms, &mut |_| true)
}

/// [`append_write_request_with_exemplars`], asking `admit` with the
/// request's samples and histogram samples, once they are counted and
/// before anything is stored, whether it may be stored at all (a tenant's
/// rate limit). Refused, nothing is stored and the report is empty. New
/// series pass through `relabel` first.
pub fn append_write_request_admitted(
    db: &Db,
    body: &[u8],
    door: &Door<'_>,
    now_ms: i64,
    admit: &mut dyn FnMut(u64) -> bool,
) -> Result<IngestReport, DecodeError> {
    append_v1(db, Exemplars::Store, body, door, now_ms, admit)
}

/// Whether a 1.0 request's exemplars are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exemplars {
    Store,
    Skip,
}

fn append_v1(
    db: &Db,
    exemplars: Exemplars,
    body: &[u8],
    door: &Door<'_>,
    now_ms: i64,
    admit: &mut dyn FnMut(u64) -> bool,
) -> Result<IngestReport, DecodeError> {
    // An HA pair's request: from the elected replica, its replica label
    // goes; from the other, nothing of it is stored.
    let gate = match door.ha {
        None => HaGate::Pass,
        Some(_) => decode::first_series(body).map_or(HaGate::Pass, |ts| {
            let first: Vec<_> = ts.labels().collect();
            door.ha_gate(&first, now_ms)
        }),
    };
    let mut stripping = None;
    let door = &match gate.pass(*door, &mut stripping) {
        Ok(door) => door,
        Err(stopped) => {
            let mut carried = 0u64;
            decode::decode_each(body, |ts| {
                carried += u64::from(ts.samples) + u64::from(ts.histograms);
            })?;
            let mut report = IngestReport::default();
            stopped.note_stopped(carried, &mut report);
            return Ok(report);
        }
    };
    let mut app = db.appender(now_ms.saturating_add(MAX_AHEAD_MS));
    let exemplars = exemplars == Exemplars::Store;
    let relabel = door.relabel;
    BATCH.with(|kept| {
        kept.with(|(batch, keyed)| {
            batch.clear();
            keyed.clear();
            let mut report = IngestReport::default();
            let mut carried = 0u64;
            // 1. Each series with samples, by the hash of its raw label
            // bytes, as the request is checked (nothing is stored until
            // all of it is).
            let checked = decode::decode_each(body, |ts| {
                carried += u64::from(ts.samples) + u64::from(ts.histograms);
                let span = ts.span(body);
                if ts.histograms > 0 {
                    batch.histograms.push(span);
                }
                if ts.exemplars > 0 && exemplars {
                    report.exemplars += u64::from(ts.exemplars);
                    batch.exemplars.push(span);
                }
                if ts.samples == 0 {
                    return;
                }
                match ts.labels_raw {
                    // With rules, a series is found by its key: its sent
                    // labels name another series, or none.
                    Some(raw) if !relabel.is_empty() => {
                        keyed.spans.push((span, relabel.key_of_bytes(raw)));
                    }
                    Some(raw) => batch.series.push(&app, raw, None, span),
                    None => batch.series.push_unknown(span),
                }
            })?;
            if !admit(carried) {
                return Ok(IngestReport::default());
            }
            report.metadata = checked.metadata;
            if !keyed.spans.is_empty() {
                let KeyedV1 { spans, refs } = &mut *keyed;
                app.lookup_refs(spans.iter().map(|&(_, key)| key), &mut refs.known);
                batch.series.learn();
                for (&(span, _), known) in spans.iter().zip(&refs.known) {
                    match known {
                        Some(r) if r.is_not_stored() => report
                            .drop_samples(Dropped::Relabel, u64::from(span.view(body).samples)),
                        Some(r) => batch.series.push_ref(&app, *r, span),
                        None => batch.series.push_unknown(span),
                    }
                }
            }
            let wire = V1 {
                body,
                relabelled: !relabel.is_empty(),
            };
            pipeline::append(&mut app, &wire, door, batch, exemplars, &mut report);
            if batch.series.learning() {
                pipeline::remember_learned(
                    &app,
                    &batch.series,
                    |span| Some(relabel.key_of_bytes(span.view(body).labels_raw?)),
                    &mut keyed.refs.learned,
                );
            }
            if checked.metadata {
                record_metadata(&mut app, body);
            }
            report.commit = app.commit();
            Ok(report)
        })
    })
}

/// A remote-write 1.0 request: each series' labels are its raw bytes.
struct V1<'a> {
    body: &'a [u8],
    /// Whether relabel rules apply: the sent labels name another series.
    relabelled: bool,
}

impl SeriesSource for V1<'_> {
    type Span = SeriesSpan;
    type Samples<'s>
        = SampleIter<'s>
    where
        Self: 's;

    fn canonical(&self, span: &SeriesSpan) -> &[u8] {
        span.view(self.body).labels_raw.unwrap_or_default()
    }

    fn samples(&self, span: &SeriesSpan) -> SampleIter<'_> {
        span.view(self.body).samples()
    }

    /// Remote write 1.0 sends no start times: its samples end what a 2.0
    /// sender's said (kept only under `st-storage`).
    fn sample_starts(&self, span: &SeriesSpan, out: &mut Vec<(i64, i64)>) {
        out.extend(span.view(self.body).samples().map(|(t, _)| (t, 0)));
    }

    fn sent_as_stored(&self) -> bool {
        !self.relabelled
    }
}

impl Wire for V1<'_> {
    fn sample_count(&self, span: &SeriesSpan) -> u32 {
        span.view(self.body).samples
    }

    fn histograms<'a>(&'a self, span: &SeriesSpan) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
        Box::new(span.view(self.body).histograms())
    }

    fn labels<'a>(&'a self, span: &SeriesSpan, out: &mut Vec<(&'a [u8], &'a [u8])>) {
        out.extend(span.view(self.body).labels());
    }

    fn describe(&self, span: &SeriesSpan) -> String {
        span.view(self.body).describe()
    }

    fn exemplars<'a>(
        &'a self,
        span: &SeriesSpan,
        labels: &mut Vec<(&'a [u8], &'a [u8])>,
        f: &mut ExemplarSink<'a, '_>,
    ) {
        span.view(self.body).exemplars(labels, f);
    }
}

thread_local! {
    static BATCH: Reused<(Batch<SeriesSpan>, KeyedV1)> = Reused::default();
    static BATCH_V2: Reused<(Batch<u32>, (v2::Scratch, KnownRefs))> = Reused::default();
}

/// Where a 2.0 request's series keys were last seen, and what the request
/// taught: the receiver's side of 2.0's keys, beside the decoder's scratch.
#[derive(Debug, Default)]
struct KnownRefs {
    /// For each of the scratch's `keys`, its series reference, if known.
    known: Vec<Option<SeriesRef>>,
    /// Keys of series found other than where they were last seen, to
    /// remember once the request is appended.
    learned: Vec<(u128, SeriesRef)>,
}

impl KnownRefs {
    fn clear(&mut self) {
        self.known.clear();
        self.learned.clear();
    }
}

impl Buffer for KnownRefs {
    fn heap_bytes(&self) -> usize {
        self.known.heap_bytes() + self.learned.heap_bytes()
    }

    fn release(&mut self) {
        *self = KnownRefs::default();
    }
}

/// A 1.0 request's series keyed for relabelling rules: each with its key,
/// and where the keys were last seen.
#[derive(Debug, Default)]
struct KeyedV1 {
    spans: Vec<(SeriesSpan, u128)>,
    refs: KnownRefs,
}

impl KeyedV1 {
    fn clear(&mut self) {
        self.spans.clear();
        self.refs.clear();
    }
}

impl Buffer for KeyedV1 {
    fn heap_bytes(&self) -> usize {
        self.spans.heap_bytes() + self.refs.heap_bytes()
    }

    fn release(&mut self) {
        *self = KeyedV1::default();
    }
}

impl Buffer for v2::Scratch {
    fn heap_bytes(&self) -> usize {
        v2::Scratch::heap_bytes(self)
    }

    fn release(&mut self) {
        *self = v2::Scratch::default();
    }
}

/// Appends a decompressed remote-write 2.0 `Request` to `db`, with its
/// series' metadata. A body that is not a valid request is refused whole,
/// before anything is stored; a series that breaks a rule (a reference
/// outside `symbols`, both or neither of samples and histograms) is refused
/// alone, and every valid series is stored.
pub fn append_write_request_v2(
    db: &Db,
    body: &[u8],
    options: &V2Options,
    now_ms: i64,
) -> Result<IngestReport, RequestError> {
    let door = Door {
        limits: &options.limits,
        relabel: &options.relabel,
        ha: None,
    };
    append_write_request_v2_admitted(
        db,
        body,
        &door,
        options.created_timestamp_zero_ingestion,
        now_ms,
        &mut |_| true,
    )
}

/// [`append_write_request_v2`], asking `admit` first, as
/// [`append_write_request_admitted`] does, with new series through
/// `door`; `zero_samples`: a series' start timestamp becomes a zero
/// sample (see [`V2Options`]).
pub fn append_write_request_v2_admitted(
    db: &Db,
    body: &[u8],
    door: &Door<'_>,
    zero_samples: bool,
    now_ms: i64,
    admit: &mut dyn FnMut(u64) -> bool,
) -> Result<IngestReport, RequestError> {
    let mut app = db.appender(now_ms.saturating_add(MAX_AHEAD_MS));
    BATCH_V2.with(|kept| {
        kept.with(|(batch, (scratch, refs))| {
            batch.clear();
            v2::check(body, scratch)?;
            let carried = scratch.series.iter().fold(0u64, |n, s| {
                n + u64::from(s.samples) + u64::from(s.histograms)
            });
            // An HA pair's request, as for 1.0.
            let gate = match (door.ha, scratch.series.first()) {
                (Some(_), Some(span)) => {
                    let first: Vec<_> = scratch.labels(body, span).collect();
                    door.ha_gate(&first, now_ms)
                }
                _ => HaGate::Pass,
            };
            let mut stripping = None;
            let door = &match gate.pass(*door, &mut stripping) {
                Ok(door) => door,
                Err(stopped) => {
                    let mut report = IngestReport::default();
                    stopped.note_stopped(carried, &mut report);
                    return Ok(report);
                }
            };
            if !admit(carried) {
                return Ok(IngestReport::default());
            }
            let mut report = IngestReport::default();
            // 1. Each valid series, by its fingerprint: from its key when
            // the series has been seen, else from its canonical label bytes,
            // built from its references. Keys first, then every lookup in
            // one short loop, so that their cache misses overlap, then the
            // rest.
            for i in 0..scratch.series.len() {
                let span = scratch.series[i];
                report.exemplars += u64::from(span.exemplars);
                if span.exemplars > 0 {
                    batch.exemplars.push(i as u32);
                }
                let key = match scratch.key(body, i) {
                    Ok(key) => door.relabel.key_of_key(key),
                    Err(problem) => {
                        let lost = u64::from(span.samples) + u64::from(span.histograms);
                        report.refuse_series(lost, || {
                            problem.describe(span.index, scratch.symbol_count())
                        });
                        continue;
                    }
                };
                if span.histograms > 0 {
                    // A 2.0 series carries samples or histograms, not
                    // both (checked with the request).
                    batch.histograms.push(i as u32);
                    continue;
                }
                scratch.keys.push((i as u32, key));
            }
            refs.clear();
            app.lookup_refs(scratch.keys.iter().map(|&(_, key)| key), &mut refs.known);
            batch.series.learn();
            let relabelled = !door.relabel.is_empty();
            for k in 0..scratch.keys.len() {
                let ((i, _), known) = (scratch.keys[k], refs.known[k]);
                // Debug builds check every reference against the bytes.
                match known {
                    Some(r) if r.is_not_stored() => {
                        let lost = u64::from(scratch.series[i as usize].samples);
                        report.drop_samples(Dropped::Relabel, lost);
                    }
                    Some(r) if relabelled || !cfg!(debug_assertions) => {
                        batch.series.push_ref(&app, r, i)
                    }
                    // With rules, the sent labels name another series.
                    None if relabelled => batch.series.push_unknown(i),
                    _ => {
                        // Its references were checked by `key`.
                        let built = scratch.resolve(body, i as usize).unwrap_or(false);
                        let canonical = scratch.canonical(&scratch.series[i as usize]);
                        debug_assert!(known.is_none_or(|r| !built || r.is_of(canonical)));
                        // A series without label bytes is not learned.
                        let hint = known.filter(|_| built);
                        batch.series.push(&app, canonical, hint, i);
                    }
                }
            }
            let wire = V2 {
                body,
                scratch,
                zero_samples,
                relabelled,
            };
            pipeline::append(&mut app, &wire, door, batch, true, &mut report);
            record_metadata_v2(&mut app, body, scratch);
            // Where the series found without (or away from) their
            // reference are, for the next request.
            let keys = &scratch.keys;
            pipeline::remember_learned(
                &app,
                &batch.series,
                |i| {
                    let k = keys.binary_search_by_key(&i, |k| k.0).ok()?;
                    Some(keys[k].1)
                },
                &mut refs.learned,
            );
            report.commit = app.commit();
            Ok(report)
        })
    })
}

/// How 2.0 requests are taken.
#[derive(Debug, Clone, Default)]
pub struct V2Options {
    /// Limits on a new series' labels.
    pub limits: LabelLimits,
    /// What new series pass through first.
    pub relabel: Relabel,
    /// Store a zero sample at a series' start timestamp when that is
    /// before its first sample and newer than what the series holds, as
    /// Prometheus' `created-timestamp-zero-ingestion` (off by default).
    pub created_timestamp_zero_ingestion: bool,
}

/// A remote-write 2.0 request: labels are references into its symbols.
struct V2<'a> {
    body: &'a [u8],
    scratch: &'a v2::Scratch,
    /// Whether start timestamps become zero samples.
    zero_samples: bool,
    /// Whether relabel rules apply: the sent labels name another series.
    relabelled: bool,
}

impl V2<'_> {
    #[inline]
    fn span(&self, i: u32) -> &SpanV2 {
        &self.scratch.series[i as usize]
    }
}

/// A 2.0 series is named by its index in the request: the batch's entries
/// stay small, whatever a span holds.
impl SeriesSource for V2<'_> {
    type Span = u32;
    type Samples<'s>
        = SampleIter<'s>
    where
        Self: 's;

    fn canonical(&self, &i: &u32) -> &[u8] {
        self.scratch.canonical(self.span(i))
    }

    fn samples(&self, &i: &u32) -> SampleIter<'_> {
        self.scratch.samples(self.body, self.span(i))
    }

    fn sample_starts(&self, &i: &u32, out: &mut Vec<(i64, i64)>) {
        out.extend(self.scratch.sample_starts(self.body, self.span(i)));
    }

    fn zero_sample_at(&self, &i: &u32) -> Option<i64> {
        let span = self.span(i);
        if !self.zero_samples || span.start == 0 {
            return None;
        }
        let (first, _) = self.samples(&i).next()?;
        (span.start < first).then_some(span.start)
    }

    fn sent_as_stored(&self) -> bool {
        !self.relabelled
    }
}

impl Wire for V2<'_> {
    fn sample_count(&self, &i: &u32) -> u32 {
        self.span(i).samples
    }

    fn histograms<'a>(&'a self, &i: &u32) -> Box<dyn Iterator<Item = &'a [u8]> + 'a> {
        Box::new(self.scratch.histograms(self.body, self.span(i)))
    }

    fn labels<'a>(&'a self, &i: &u32, out: &mut Vec<(&'a [u8], &'a [u8])>) {
        out.extend(self.scratch.labels(self.body, self.span(i)));
    }

    fn describe(&self, &i: &u32) -> String {
        self.scratch.describe(self.body, self.span(i))
    }

    fn exemplars<'a>(
        &'a self,
        &i: &u32,
        labels: &mut Vec<(&'a [u8], &'a [u8])>,
        f: &mut ExemplarSink<'a, '_>,
    ) {
        self.scratch.exemplars(self.body, self.span(i), labels, f);
    }
}

/// Records the metadata the series of a checked 2.0 request carry, once
/// per run of series with the same name and metadata (senders send a
/// family's series together). Series without `__name__` are skipped.
fn record_metadata_v2(app: &mut Appender<'_>, body: &[u8], scratch: &v2::Scratch) {
    let mut last: Option<(&str, MetadataRefs)> = None;
    for span in &scratch.series {
        let Some(md) = span.metadata else {
            continue;
        };
        let Some(name) = scratch
            .labels(body, span)
            .find(|(n, _)| *n == b"__name__")
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        if last == Some((name, md)) {
            continue;
        }
        last = Some((name, md));
        app.add_metadata(
            name,
            type_name(md.kind),
            scratch.text(body, md.help),
            scratch.text(body, md.unit),
        );
    }
}

/// Records the `metadata` of a checked remote-write 1.0 request. Entries
/// with names or text that are not UTF-8 are skipped.
fn record_metadata(app: &mut Appender<'_>, body: &[u8]) {
    for md in decode::metadata(body) {
        let (Ok(name), Ok(help), Ok(unit)) = (
            std::str::from_utf8(md.family),
            std::str::from_utf8(md.help),
            std::str::from_utf8(md.unit),
        ) else {
            continue;
        };
        if !name.is_empty() {
            app.add_metadata(name, type_name(md.kind), help, unit);
        }
    }
}
