//! Remote-write 1.0: the pipeline from a decompressed `WriteRequest` to the
//! head. [`decode`] reads the wire format in place; this module appends.
//!
//! [`append_write_request`] walks the body once for structure, then once
//! more to append: a series seen before is found from its raw label bytes
//! with no decoding; a new one is validated, sorted and created. Problems
//! are counted per reason and summarised once per request.

pub mod decode;
pub mod v2;

use v2::{MetadataRefs, RequestError, SpanV2};

pub use decode::{
    decode, decode_each, metadata, Checked, MetadataView, SampleIter, Series, SeriesSpan,
    TimeSeriesView,
};

use super::validate::{self, LabelLimits};
use super::{
    label_problem, sample_problem, DecodeError, IngestReport, Reason, MAX_AHEAD_MS, MAX_PROBLEMS,
};
use crate::reuse::{Buffer, Reused};
use crate::storage::aliases::Alias;
use crate::storage::exemplars::ExemplarError;
use crate::storage::head::{fingerprint, AppendCounts, Fingerprint, Head, SampleError, NO_SLOT};
use crate::storage::labels::encode_canonical;
use crate::storage::metadata::{type_name, MetadataStore};

/// Appends a decompressed remote-write 1.0 `WriteRequest` to `head`.
/// A body that is not valid protobuf is rejected whole, before anything is
/// stored; otherwise every valid series is stored and the rest counted.
pub fn append_write_request(
    head: &Head,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    append_v1(head, false, body, limits, now_ms)
}

/// [`append_write_request`], also storing and logging the request's
/// exemplars in the head's exemplar store.
pub fn append_write_request_with_exemplars(
    head: &Head,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    append_v1(head, true, body, limits, now_ms)
}

fn append_v1(
    head: &Head,
    exemplars: bool,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    let max_t = now_ms.saturating_add(MAX_AHEAD_MS);
    BATCH.with(|kept| {
        kept.with(|batch| {
            batch.clear();
            let mut report = IngestReport::default();
            // 1. Each series with samples, by the hash of its raw label
            // bytes, as the request is checked (nothing is stored until
            // all of it is).
            let checked = decode::decode_each(body, |ts| {
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
                    Some(raw) => batch.push(head, fingerprint(raw), span),
                    None => batch.rest.push(span),
                }
            })?;
            report.metadata = checked.metadata;
            let wire = V1 { body };
            append_series(head, &wire, limits, max_t, batch, &mut report);
            store_histograms(head, &wire, &batch.histograms, limits, max_t, &mut report);
            if exemplars {
                store_exemplars(head, &wire, &batch.exemplars, limits, &mut report);
            }
            Ok(report)
        })
    })
}

/// Takes one exemplar: its labels, value and timestamp.
pub(super) type ExemplarSink<'a, 'f> = dyn FnMut(&[(&'a [u8], &'a [u8])], f64, i64) + 'f;

/// What the shared pipeline needs of a request's series, whatever the
/// protocol: the series' labels as sent, its samples, and words for it.
pub(super) trait Wire {
    /// Where a series is in the request (kept in reused buffers).
    type Span: Copy + Default;
    /// The series' labels in the head's canonical byte form, as sent (a
    /// known series is found by these bytes; unsorted labels find none).
    fn canonical(&self, span: &Self::Span) -> &[u8];
    /// The series' float samples.
    fn samples(&self, span: &Self::Span) -> SampleIter<'_>;
    /// How many float samples the series has.
    fn sample_count(&self, span: &Self::Span) -> u32;
    /// The series' labels as raw (name, value) pairs, in sent order.
    fn labels<'a>(&'a self, span: &Self::Span, out: &mut Vec<(&'a [u8], &'a [u8])>);
    /// The series for an error message.
    fn describe(&self, span: &Self::Span) -> String;
    /// Where to add the series' start-time zero sample, if one is wanted:
    /// its start time, when that is before its first sample.
    fn zero_sample_at(&self, _span: &Self::Span) -> Option<i64> {
        None
    }
    /// The series' native histogram messages, undecoded.
    fn histograms<'a>(&'a self, span: &Self::Span) -> Box<dyn Iterator<Item = &'a [u8]> + 'a>;
    /// The series' exemplars: labels (into `labels`), value, timestamp.
    fn exemplars<'a>(
        &'a self,
        span: &Self::Span,
        labels: &mut Vec<(&'a [u8], &'a [u8])>,
        f: &mut ExemplarSink<'a, '_>,
    );
}

/// A remote-write 1.0 request: each series' labels are its raw bytes.
struct V1<'a> {
    body: &'a [u8],
}

impl Wire for V1<'_> {
    type Span = SeriesSpan;

    fn canonical(&self, span: &SeriesSpan) -> &[u8] {
        span.view(self.body).labels_raw.unwrap_or_default()
    }

    fn samples(&self, span: &SeriesSpan) -> SampleIter<'_> {
        span.view(self.body).samples()
    }

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

/// Steps 2 and 3 of a request whose series are in `batch` (step 1, the
/// protocol's decoding, put them there): series the head holds are
/// appended shard by shard, then new series are validated and created.
/// Fills in the report's counts and WAL position.
pub(super) fn append_series<W: Wire>(
    head: &Head,
    wire: &W,
    limits: &LabelLimits,
    max_t: i64,
    batch: &mut Batch<W::Span>,
    report: &mut IngestReport,
) {
    let mut counts = AppendCounts::default();

    // 2. Series the head holds, shard by shard: each shard is locked once
    // for all its series in the request, and a shard another request holds
    // is left for later rather than waited on.
    batch.group_by_shard(head.shard_count());
    let Batch {
        sorted,
        starts,
        pending,
        rest,
        slots,
        learn,
        learned,
        ..
    } = batch;
    while !pending.is_empty() {
        // The first free shard; if every one is held, wait for the last.
        let free = pending.iter().enumerate().find_map(|(i, &shard)| {
            head.try_lock_shard(shard, &mut counts)
                .map(|guard| (i, guard))
        });
        let (at, mut guard) = match free {
            Some(found) => found,
            None => {
                let last = pending.len() - 1;
                (last, head.lock_shard(pending[last], &mut counts))
            }
        };
        let shard = pending.swap_remove(at);
        let group = &sorted[starts[shard]..starts[shard + 1]];
        // Every lookup first, then every append (see `ShardGuard::find_warm`).
        slots.clear();
        slots.extend(
            group
                .iter()
                .map(|e| guard.find_warm(e.fp, e.hint, wire.canonical(&e.span))),
        );
        for (e, &slot) in group.iter().zip(slots.iter()) {
            let Some(slot) = slot else {
                rest.push(e.span);
                continue;
            };
            if *learn && slot != e.hint {
                learned.push((e.span, e.fp, slot));
            }
            counts.first = None;
            if let Some(st) = wire.zero_sample_at(&e.span) {
                // Refused when the series is already past it: that is
                // expected, not the sender's problem, and not counted.
                let mut side = AppendCounts::default();
                guard.append_to(slot, std::iter::once((st, 0.0)), max_t, &mut side);
            }
            guard.append_to(slot, wire.samples(&e.span), max_t, &mut counts);
            note_sample_problem(report, &counts, || wire.describe(&e.span), max_t);
        }
    }

    // 3. New series (and any whose labels are not one run of bytes):
    // validated, sorted, interned and indexed.
    let mut raw_labels = Vec::new();
    let mut labels = Vec::new();
    let mut canonical = Vec::new();
    for span in rest.iter() {
        let samples = u64::from(wire.sample_count(span));
        counts.first = None;
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        let resorted = match validate::validate(&raw_labels, limits, &mut labels) {
            Err(e) => {
                report.reject(Reason::Label(e), samples, || {
                    format!(
                        "{} for series {}",
                        label_problem(e, limits.names),
                        wire.describe(span)
                    )
                });
                continue;
            }
            Ok(resorted) => resorted,
        };
        report.resorted_series += u64::from(resorted);
        canonical.clear();
        encode_canonical(labels.iter().copied(), &mut canonical);
        let made = match wire.zero_sample_at(span) {
            None => head.append_labels(&labels, &canonical, wire.samples(span), max_t, &mut counts),
            Some(st) => {
                let mut side = AppendCounts::default();
                let made = head.append_labels(
                    &labels,
                    &canonical,
                    std::iter::once((st, 0.0)),
                    max_t,
                    &mut side,
                );
                counts.touched |= side.touched;
                made.inspect(|_| {
                    head.append_existing(&canonical, wire.samples(span), max_t, &mut counts);
                })
            }
        };
        match made {
            Err(limit) => {
                report.reject(Reason::SeriesLimit, samples, || {
                    format!("{limit}; new series {} not created", wire.describe(span))
                });
                continue;
            }
            // Labels sent as stored (in order, none empty): the sent form's
            // key names this series.
            Ok((fp, slot)) if *learn && !resorted && labels.len() == raw_labels.len() => {
                learned.push((*span, fp, slot));
            }
            Ok(_) => {}
        }
        note_sample_problem(report, &counts, || wire.describe(span), max_t);
    }
    report.accepted = counts.appended;
    report.wal_lsn = head.log_appended(&mut counts);
    for e in SampleError::ALL {
        report.rejected[Reason::Sample(e).index()] += counts.rejected[e as usize];
    }
}

/// Stores the native histograms of the series in `spans`: each series'
/// labels validated as for floats, each histogram decoded and validated as
/// Prometheus does; a bad histogram is counted and named, and the rest of
/// its series and request are stored. Logged before the report's WAL
/// position is taken, so acknowledging the request covers them.
pub(super) fn store_histograms<W: Wire>(
    head: &Head,
    wire: &W,
    spans: &[W::Span],
    limits: &LabelLimits,
    max_t: i64,
    report: &mut IngestReport,
) {
    if spans.is_empty() {
        return;
    }
    let mut counts = AppendCounts::default();
    let mut raw_labels = Vec::new();
    let mut labels = Vec::new();
    let mut canonical = Vec::new();
    let mut samples = Vec::new();
    for span in spans {
        samples.clear();
        for msg in wire.histograms(span) {
            match crate::ingest::histogram_wire::decode(msg).and_then(|h| {
                h.validate().map_err(|e| e.to_string())?;
                Ok(h)
            }) {
                Ok(h) => samples.push(h.into_sample()),
                Err(why) => {
                    report.reject(Reason::InvalidHistogram, 1, || {
                        format!(
                            "invalid native histogram for series {}: {why}",
                            wire.describe(span)
                        )
                    });
                }
            }
        }
        if samples.is_empty() {
            continue;
        }
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        let n = samples.len() as u64;
        match validate::validate(&raw_labels, limits, &mut labels) {
            Err(e) => {
                report.reject(Reason::Label(e), n, || {
                    format!(
                        "{} for series {}",
                        label_problem(e, limits.names),
                        wire.describe(span)
                    )
                });
                continue;
            }
            Ok(resorted) => report.resorted_series += u64::from(resorted),
        }
        canonical.clear();
        encode_canonical(labels.iter().copied(), &mut canonical);
        counts.first = None;
        let before = counts.appended;
        if let Err(limit) =
            head.append_histograms(&labels, &canonical, &samples, max_t, &mut counts)
        {
            report.reject(Reason::SeriesLimit, n, || {
                format!("{limit}; new series {} not created", wire.describe(span))
            });
            continue;
        }
        report.histograms_written += counts.appended - before;
        note_sample_problem(report, &counts, || wire.describe(span), max_t);
    }
    report.accepted += counts.appended;
    let lsn = head.log_appended(&mut counts);
    report.wal_lsn = report.wal_lsn.max(lsn);
    for e in SampleError::ALL {
        report.rejected[Reason::Sample(e).index()] += counts.rejected[e as usize];
    }
}

/// Stores the exemplars of the series in `spans` whose labels are valid in
/// the head's exemplar store, keyed by the series' canonical labels; logs
/// them (the report's WAL position covers them) and counts them.
pub(super) fn store_exemplars<W: Wire>(
    head: &Head,
    wire: &W,
    spans: &[W::Span],
    limits: &LabelLimits,
    report: &mut IngestReport,
) {
    let mut raw_labels = Vec::new();
    let mut labels = Vec::new();
    let mut canonical = Vec::new();
    let mut exemplar_labels = Vec::new();
    let mut log = Vec::new();
    let store = head.exemplars();
    let logging = head.wal().is_some();
    for span in spans {
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        // A series refused for its labels was counted there; its
        // exemplars have no series to belong to.
        if validate::validate(&raw_labels, limits, &mut labels).is_err() {
            continue;
        }
        canonical.clear();
        encode_canonical(labels.iter().copied(), &mut canonical);
        wire.exemplars(
            span,
            &mut exemplar_labels,
            &mut |l, value, t| match store.add_logged(
                &canonical,
                l,
                value,
                t,
                logging.then_some(&mut log),
            ) {
                Ok(()) => report.exemplars_written += 1,
                Err(e) => {
                    let i = ExemplarError::ALL.iter().position(|x| *x == e).unwrap_or(0);
                    report.exemplars_rejected[i] += 1;
                }
            },
        );
    }
    if !log.is_empty() {
        let mut frame = Vec::with_capacity(log.len() + 16);
        crate::wal::record::encode_exemplars_frame(&mut frame, &log);
        report.wal_lsn = report.wal_lsn.max(head.log_frames(&frame));
    }
}

/// Notes the first sample a series lost, if it lost one.
fn note_sample_problem(
    report: &mut IngestReport,
    counts: &AppendCounts,
    describe: impl FnOnce() -> String,
    max_t: i64,
) {
    if let Some((e, t)) = counts.first {
        if report.problems.len() < MAX_PROBLEMS {
            report.problems.push(format!(
                "{} at timestamp {t} for series {}",
                sample_problem(e, t, max_t),
                describe()
            ));
        }
    }
}

/// A series of a request: its fingerprint, shard, place in the request,
/// and where it was last seen in its shard ([`NO_SLOT`] if unknown).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<S> {
    fp: Fingerprint,
    shard: u32,
    hint: u32,
    span: S,
}

impl<S: Default> Default for Entry<S> {
    fn default() -> Self {
        Self {
            fp: Fingerprint::default(),
            shard: 0,
            hint: NO_SLOT,
            span: S::default(),
        }
    }
}

/// A request's series grouped by shard. Kept per thread and reused, so a
/// request of known series allocates nothing.
#[derive(Debug)]
pub(super) struct Batch<S> {
    /// In request order.
    entries: Vec<Entry<S>>,
    /// Grouped by shard, request order kept within a shard.
    sorted: Vec<Entry<S>>,
    /// `sorted[starts[i]..starts[i + 1]]` are shard `i`'s.
    starts: Vec<usize>,
    /// Shards with series in the request, not yet appended to.
    pending: Vec<usize>,
    /// Series to create or to look up by their parsed labels (step 3).
    pub(super) rest: Vec<S>,
    /// One shard's series' slots in the head, `None` for new ones.
    slots: Vec<Option<u32>>,
    /// Series that carry exemplars.
    pub(super) exemplars: Vec<S>,
    /// Series that carry native histograms.
    pub(super) histograms: Vec<S>,
    /// Whether to note in `learned` where series were found.
    pub(super) learn: bool,
    /// Series found in step 2 other than at their hint: (span, fingerprint,
    /// slot), when `learn` is set.
    pub(super) learned: Vec<(S, Fingerprint, u32)>,
}

impl<S> Default for Batch<S> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            sorted: Vec::new(),
            starts: Vec::new(),
            pending: Vec::new(),
            rest: Vec::new(),
            slots: Vec::new(),
            exemplars: Vec::new(),
            histograms: Vec::new(),
            learn: false,
            learned: Vec::new(),
        }
    }
}

impl<S: Copy + Default> Batch<S> {
    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.sorted.clear();
        self.pending.clear();
        self.rest.clear();
        self.slots.clear();
        self.exemplars.clear();
        self.histograms.clear();
        self.learn = false;
        self.learned.clear();
    }

    /// Adds a series whose canonical label bytes hash to `fp`.
    #[inline]
    pub(super) fn push(&mut self, head: &Head, fp: Fingerprint, span: S) {
        self.push_hinted(head, fp, NO_SLOT, span);
    }

    /// [`Batch::push`] for a series last seen in slot `hint` of its shard.
    #[inline]
    pub(super) fn push_hinted(&mut self, head: &Head, fp: Fingerprint, hint: u32, span: S) {
        self.entries.push(Entry {
            fp,
            shard: head.shard_of(fp) as u32,
            hint,
            span,
        });
    }

    /// Counting sort of `entries` into `sorted` by shard.
    fn group_by_shard(&mut self, shards: usize) {
        self.starts.clear();
        self.starts.resize(shards + 1, 0);
        for e in &self.entries {
            self.starts[e.shard as usize + 1] += 1;
        }
        for i in 0..shards {
            if self.starts[i + 1] > 0 {
                self.pending.push(i);
            }
            self.starts[i + 1] += self.starts[i];
        }
        self.sorted.resize(self.entries.len(), Entry::default());
        // `starts[i]` walks forward while filling, then is restored.
        for e in &self.entries {
            let at = &mut self.starts[e.shard as usize];
            self.sorted[*at] = *e;
            *at += 1;
        }
        for i in (1..=shards).rev() {
            self.starts[i] = self.starts[i - 1];
        }
        self.starts[0] = 0;
    }
}

impl<S> Buffer for Batch<S> {
    fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
            + self.sorted.heap_bytes()
            + self.starts.heap_bytes()
            + self.pending.heap_bytes()
            + self.rest.heap_bytes()
            + self.slots.heap_bytes()
            + self.exemplars.heap_bytes()
            + self.learned.heap_bytes()
    }

    fn release(&mut self) {
        *self = Batch::default();
    }
}

thread_local! {
    static BATCH: Reused<Batch<SeriesSpan>> = Reused::default();
    static BATCH_V2: Reused<(Batch<u32>, v2::Scratch)> = Reused::default();
}

impl Buffer for v2::Scratch {
    fn heap_bytes(&self) -> usize {
        v2::Scratch::heap_bytes(self)
    }

    fn release(&mut self) {
        *self = v2::Scratch::default();
    }
}

/// Appends a decompressed remote-write 2.0 `Request` to `head`, and its
/// series' metadata to `metadata`. A body that is not a valid request is
/// refused whole, before anything is stored; a series that breaks a rule
/// (a reference outside `symbols`, both or neither of samples and
/// histograms) is refused alone, and every valid series is stored.
pub fn append_write_request_v2(
    head: &Head,
    metadata: &MetadataStore,
    body: &[u8],
    options: &V2Options,
    now_ms: i64,
) -> Result<IngestReport, RequestError> {
    let limits = &options.limits;
    let max_t = now_ms.saturating_add(MAX_AHEAD_MS);
    BATCH_V2.with(|kept| {
        kept.with(|(batch, scratch)| {
            batch.clear();
            v2::check(body, scratch)?;
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
                    Ok(key) => key,
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
            {
                let aliases = head.aliases().read();
                let v2::Scratch { keys, known, .. } = &mut *scratch;
                known.extend(keys.iter().map(|&(_, key)| aliases.get(key)));
            }
            batch.learn = true;
            for k in 0..scratch.keys.len() {
                let ((i, _), known) = (scratch.keys[k], scratch.known[k]);
                // Debug builds check every alias against the bytes.
                match known {
                    Some(alias) if !cfg!(debug_assertions) => {
                        batch.push_hinted(head, alias.fp, alias.slot, i);
                    }
                    _ => {
                        // Its references were checked by `key`.
                        let built = scratch.resolve(body, i as usize).unwrap_or(false);
                        let fp = fingerprint(scratch.canonical(&scratch.series[i as usize]));
                        debug_assert!(known.is_none_or(|k| !built || k.fp == fp));
                        // A series without label bytes is not learned.
                        let hint = match (built, known) {
                            (true, Some(alias)) => alias.slot,
                            _ => NO_SLOT,
                        };
                        batch.push_hinted(head, fp, hint, i);
                    }
                }
            }
            let wire = V2 {
                body,
                scratch,
                zero_samples: options.created_timestamp_zero_ingestion,
            };
            append_series(head, &wire, limits, max_t, batch, &mut report);
            store_histograms(head, &wire, &batch.histograms, limits, max_t, &mut report);
            store_exemplars(head, &wire, &batch.exemplars, limits, &mut report);
            record_metadata_v2(metadata, body, scratch);
            // Where the series found without (or away from) their alias
            // are, for the next request.
            let v2::Scratch { keys, new_keys, .. } = &mut *scratch;
            new_keys.extend(batch.learned.iter().filter_map(|&(i, fp, slot)| {
                let k = keys.binary_search_by_key(&i, |k| k.0).ok()?;
                Some((keys[k].1, Alias { fp, slot }))
            }));
            head.remember_aliases(new_keys);
            Ok(report)
        })
    })
}

/// How 2.0 requests are taken.
#[derive(Debug, Clone, Default)]
pub struct V2Options {
    /// Limits on a new series' labels.
    pub limits: LabelLimits,
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
}

impl V2<'_> {
    #[inline]
    fn span(&self, i: u32) -> &SpanV2 {
        &self.scratch.series[i as usize]
    }
}

/// A 2.0 series is named by its index in the request: the batch's entries
/// stay small, whatever a span holds.
impl Wire for V2<'_> {
    type Span = u32;

    fn canonical(&self, &i: &u32) -> &[u8] {
        self.scratch.canonical(self.span(i))
    }

    fn samples(&self, &i: &u32) -> SampleIter<'_> {
        self.scratch.samples(self.body, self.span(i))
    }

    fn sample_count(&self, &i: &u32) -> u32 {
        self.span(i).samples
    }

    fn zero_sample_at(&self, &i: &u32) -> Option<i64> {
        let span = self.span(i);
        if !self.zero_samples || span.start == 0 {
            return None;
        }
        let (first, _) = self.samples(&i).next()?;
        (span.start < first).then_some(span.start)
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
fn record_metadata_v2(store: &MetadataStore, body: &[u8], scratch: &v2::Scratch) {
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
        store.record(
            name,
            type_name(md.kind),
            scratch.text(body, md.help),
            scratch.text(body, md.unit),
        );
    }
}

/// Records the `metadata` of a checked remote-write 1.0 request. Entries
/// with names or text that are not UTF-8 are skipped.
pub fn record_metadata(store: &MetadataStore, body: &[u8]) {
    for md in decode::metadata(body) {
        let (Ok(name), Ok(help), Ok(unit)) = (
            std::str::from_utf8(md.family),
            std::str::from_utf8(md.help),
            std::str::from_utf8(md.unit),
        ) else {
            continue;
        };
        if !name.is_empty() {
            store.record(name, type_name(md.kind), help, unit);
        }
    }
}
