//! The one ingest path every protocol feeds: label validation, series
//! creation, native histograms and exemplars, and the counting and wording
//! of what was refused. A protocol's decoder walks the request bytes once
//! and describes its series through [`Wire`] (remote write 1.0 and 2.0) or
//! hands single series to [`create_series`] and [`append_histograms`] (OTLP,
//! whose series are built from nested attributes); everything is written
//! through the storage [`Appender`], which owns the shards and the WAL.

use super::ha::{HaConfig, HaTracker, Verdict};
use super::relabel::{self, Relabel};
use super::validate::{self, LabelLimits};
use super::{label_problem, sample_problem, Dropped, IngestReport, Reason, MAX_PROBLEMS};
use crate::histogram::HistSample;
use crate::protocol::histogram;
use crate::reuse::Buffer;
use crate::storage::exemplars::ExemplarError;
use crate::storage::labels::encode_canonical;
use crate::storage::{AppendCounts, Appender, SampleError, SeriesBatch, SeriesRef, SeriesSource};

/// Takes one exemplar: its labels, value and timestamp.
pub(super) type ExemplarSink<'a, 'f> = dyn FnMut(&[(&'a [u8], &'a [u8])], f64, i64) + 'f;

/// What the pipeline needs of a request's series beyond what the batched
/// append reads ([`SeriesSource`]): their labels, words for them, their
/// native histograms and exemplars.
pub(super) trait Wire: SeriesSource {
    /// How many float samples the series has.
    fn sample_count(&self, span: &Self::Span) -> u32;
    /// The series' labels as raw (name, value) pairs, in sent order.
    fn labels<'a>(&'a self, span: &Self::Span, out: &mut Vec<(&'a [u8], &'a [u8])>);
    /// The series for an error message.
    fn describe(&self, span: &Self::Span) -> String;
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

/// A request's series: those with float samples in the storage batch,
/// those with histograms and those with exemplars beside it. Kept per
/// thread and reused.
#[derive(Debug)]
pub(super) struct Batch<S> {
    /// Series with float samples.
    pub(super) series: SeriesBatch<S>,
    /// Series that carry native histograms.
    pub(super) histograms: Vec<S>,
    /// Series that carry exemplars.
    pub(super) exemplars: Vec<S>,
}

impl<S> Default for Batch<S> {
    fn default() -> Self {
        Self {
            series: SeriesBatch::default(),
            histograms: Vec::new(),
            exemplars: Vec::new(),
        }
    }
}

impl<S: Copy + Default> Batch<S> {
    pub(super) fn clear(&mut self) {
        self.series.clear();
        self.histograms.clear();
        self.exemplars.clear();
    }
}

impl<S> Buffer for Batch<S> {
    fn heap_bytes(&self) -> usize {
        self.series.heap_bytes() + self.histograms.heap_bytes() + self.exemplars.heap_bytes()
    }

    fn release(&mut self) {
        *self = Batch::default();
    }
}

/// Appends a request whose series are in `batch` (the protocol's decoding
/// put them there): float samples, then native histograms, then, with
/// `exemplars`, exemplars. Fills in the report's counts; the caller
/// commits.
/// With `relabel` rules, series the head does not know by their key are
/// relabelled before they are checked; what the rules drop is counted as
/// dropped, not refused.
pub(super) fn append<W: Wire>(
    app: &mut Appender<'_>,
    wire: &W,
    door: &Door<'_>,
    batch: &mut Batch<W::Span>,
    exemplars: bool,
    report: &mut IngestReport,
) {
    append_series(app, wire, door, &mut batch.series, report);
    store_histograms(app, wire, &batch.histograms, door, report);
    if exemplars {
        store_exemplars(app, wire, &batch.exemplars, door, report);
    }
}

/// What a request's new series go through: the relabel rules, then the
/// label limits.
#[derive(Debug, Clone, Copy)]
pub struct Door<'a> {
    /// Limits on a series' labels, checked after the rules.
    pub limits: &'a LabelLimits,
    /// The rules.
    pub relabel: &'a Relabel,
    /// The tenant's HA tracker, when HA pairs are deduplicated.
    pub ha: Option<(&'a HaTracker, &'a HaConfig)>,
}

/// What the HA tracker made of a request, from its first series' labels.
pub(super) enum HaGate {
    /// Stored with the door's rules.
    Pass,
    /// From the elected replica: stored with these rules, which remove
    /// the replica label first.
    Strip(Relabel),
    /// From a replica that is not elected: not stored, answered 202.
    Dedupe(String),
    /// Naming a cluster past the tenant's limit: refused.
    Refuse(String),
}

impl HaGate {
    /// The door the request goes on through: `door` itself, or one whose
    /// rules remove the replica label first (kept in `stripping`); the
    /// gate back when the request stops here.
    pub(super) fn pass<'s>(
        self,
        door: Door<'s>,
        stripping: &'s mut Option<Relabel>,
    ) -> Result<Door<'s>, HaGate> {
        match self {
            HaGate::Pass => Ok(door),
            HaGate::Strip(relabel) => Ok(Door {
                relabel: stripping.insert(relabel),
                ..door
            }),
            stopped => Err(stopped),
        }
    }

    /// Notes in `report` a request of `samples` samples this gate stopped.
    pub(super) fn note_stopped(self, samples: u64, report: &mut IngestReport) {
        match self {
            HaGate::Pass | HaGate::Strip(_) => {}
            HaGate::Dedupe(why) => {
                report.drop_samples(Dropped::HaDedupe, samples);
                report.deduplicated = Some(why);
            }
            HaGate::Refuse(why) => report.reject(Reason::TooManyHaClusters, samples, || why),
        }
    }
}

impl Door<'_> {
    /// Asks the HA tracker about a request whose first series has the
    /// labels `first`, at `now_ms`.
    pub(super) fn ha_gate(&self, first: &[(&[u8], &[u8])], now_ms: i64) -> HaGate {
        let Some((tracker, config)) = self.ha else {
            return HaGate::Pass;
        };
        match tracker.check(first, config, now_ms) {
            Verdict::NotHa => HaGate::Pass,
            Verdict::Accept => match tracker.strip_rule(&config.replica_label) {
                Some(rule) => HaGate::Strip(self.relabel.first(rule)),
                None => HaGate::Pass,
            },
            Verdict::Dedupe(why) => HaGate::Dedupe(why),
            Verdict::TooManyClusters(why) => HaGate::Refuse(why),
        }
    }
}

/// A series' labels after the door's rules: kept (relabelled, or `None`
/// as sent when there are no rules), or dropped.
enum Passed {
    Kept(Option<Vec<(String, String)>>),
    Dropped,
}

impl Door<'_> {
    /// Runs `sent` through the relabel rules; labels the rules cannot
    /// read are refused in `report` (with `samples` lost) and `None`.
    fn pass(
        &self,
        sent: &[(&[u8], &[u8])],
        samples: u64,
        report: &mut IngestReport,
        describe: impl FnOnce() -> String,
    ) -> Option<Passed> {
        if self.relabel.is_empty() {
            return Some(Passed::Kept(None));
        }
        match self.relabel.apply(sent) {
            Ok(Some(labels)) => Some(Passed::Kept(Some(labels))),
            Ok(None) => Some(Passed::Dropped),
            Err(e) => {
                report.reject(Reason::Label(e), samples, || {
                    format!(
                        "{} for series {}",
                        label_problem(e, self.limits),
                        describe()
                    )
                });
                None
            }
        }
    }
}

/// The labels to check and store: `sent`, or the relabelled ones.
fn after_rules<'s>(
    sent: &'s [(&'s [u8], &'s [u8])],
    relabelled: &'s Option<Vec<(String, String)>>,
) -> std::borrow::Cow<'s, [(&'s [u8], &'s [u8])]> {
    match relabelled {
        None => std::borrow::Cow::Borrowed(sent),
        Some(labels) => std::borrow::Cow::Owned(relabel::as_raw(labels)),
    }
}

/// Float samples: series the head holds are appended shard by shard, then
/// new series are validated and created.
fn append_series<W: Wire>(
    app: &mut Appender<'_>,
    wire: &W,
    door: &Door<'_>,
    batch: &mut SeriesBatch<W::Span>,
    report: &mut IngestReport,
) {
    let limits = door.limits;
    let max_t = app.max_t();
    let mut counts = AppendCounts::default();
    app.append_batch(wire, batch, &mut counts, |span, counts| {
        note_sample_problem(report, counts, || wire.describe(span), max_t);
    });

    // New series (and any whose labels are not one run of bytes):
    // validated, sorted, interned and indexed.
    let mut raw_labels = Vec::new();
    let mut canonical = Vec::new();
    let mut learned = Vec::new();
    for span in batch.unknown() {
        let samples = u64::from(wire.sample_count(span));
        counts.first = None;
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        let passed = door.pass(&raw_labels, samples, report, || wire.describe(span));
        let relabelled = match passed {
            None => continue,
            Some(Passed::Kept(relabelled)) => relabelled,
            Some(Passed::Dropped) => {
                report.drop_samples(Dropped::Relabel, samples);
                if batch.learning() {
                    learned.push((*span, SeriesRef::NOT_STORED));
                }
                continue;
            }
        };
        let sent = after_rules(&raw_labels, &relabelled);
        let mut labels = Vec::new();
        let resorted = match validate::validate(&sent, limits, &mut labels) {
            Err(e) => {
                report.reject(Reason::Label(e), samples, || {
                    format!(
                        "{} for series {}",
                        label_problem(e, limits),
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
            None => app.append_new(&labels, &canonical, wire.samples(span), &mut counts),
            Some(st) => {
                let mut side = AppendCounts::default();
                let made =
                    app.append_new(&labels, &canonical, std::iter::once((st, 0.0)), &mut side);
                made.inspect(|_| {
                    app.append_existing(&canonical, wire.samples(span), &mut counts);
                })
            }
        };
        if let Ok(r) = made {
            if app.keeps_starts() {
                let mut starts = Vec::new();
                wire.sample_starts(span, &mut starts);
                if !starts.is_empty() {
                    app.note_starts(r, starts.into_iter());
                }
            }
        }
        match made {
            Err(limit) => {
                report.reject(Reason::of_limit(&limit), samples, || {
                    format!("{limit}; new series {} not created", wire.describe(span))
                });
                continue;
            }
            // Labels sent as stored (in order, none empty), or relabelled:
            // the sent form's key names this series.
            Ok(r)
                if batch.learning()
                    && (relabelled.is_some()
                        || (!resorted && labels.len() == raw_labels.len())) =>
            {
                learned.push((*span, r));
            }
            Ok(_) => {}
        }
        note_sample_problem(report, &counts, || wire.describe(span), max_t);
    }
    for (span, r) in learned {
        batch.learned_at(span, r);
    }
    tally(report, &counts);
}

/// Adds what `counts` stored and refused to the report.
pub(super) fn tally(report: &mut IngestReport, counts: &AppendCounts) {
    report.accepted += counts.appended;
    report.out_of_order += counts.out_of_order;
    for e in SampleError::ALL {
        report.rejected[Reason::Sample(e).index()] += counts.rejected[e as usize];
    }
}

/// Stores the native histograms of the series in `spans`: each series'
/// labels validated as for floats, each histogram decoded and validated as
/// Prometheus does; a bad histogram is counted and named, and the rest of
/// its series and request are stored.
fn store_histograms<W: Wire>(
    app: &mut Appender<'_>,
    wire: &W,
    spans: &[W::Span],
    door: &Door<'_>,
    report: &mut IngestReport,
) {
    if spans.is_empty() {
        return;
    }
    let limits = door.limits;
    let max_t = app.max_t();
    let mut counts = AppendCounts::default();
    let mut raw_labels = Vec::new();
    let (mut labels, mut canonical) = (Vec::new(), Vec::new());
    let mut samples = Vec::new();
    for span in spans {
        // The rules first: a series they drop is dropped whole, valid
        // histograms or not.
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        let sent_count = wire.histograms(span).count() as u64;
        let relabelled = match door.pass(&raw_labels, sent_count, report, || wire.describe(span)) {
            None => continue,
            Some(Passed::Kept(relabelled)) => relabelled,
            Some(Passed::Dropped) => {
                report.drop_samples(Dropped::Relabel, sent_count);
                continue;
            }
        };
        samples.clear();
        for msg in wire.histograms(span) {
            match histogram::decode(msg)
                .map_err(|e| e.to_string())
                .and_then(|h| {
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
        let before = counts.appended;
        let built = Canonical::Build(&mut canonical);
        let appended = match &relabelled {
            None => append_histograms(
                app,
                &raw_labels,
                limits,
                &samples,
                &mut counts,
                &mut labels,
                built,
            ),
            Some(relabelled) => append_histograms(
                app,
                &relabel::as_raw(relabelled),
                limits,
                &samples,
                &mut counts,
                &mut Vec::new(),
                built,
            ),
        };
        if appended.is_ok() && app.keeps_starts() {
            let starts: Vec<(i64, i64)> = wire
                .histograms(span)
                .map(histogram::time_and_start)
                .collect();
            // Histograms without one (0) end what earlier ones said.
            app.note_starts_of(&canonical, starts.into_iter());
        }
        match appended {
            Ok(resorted) => report.resorted_series += u64::from(resorted),
            Err((reason, why)) => {
                report.reject(reason, samples.len() as u64, || match reason {
                    Reason::SeriesLimit | Reason::PerMetricSeriesLimit => {
                        format!("{why}; new series {} not created", wire.describe(span))
                    }
                    _ => format!("{why} for series {}", wire.describe(span)),
                });
                continue;
            }
        }
        report.histograms_written += counts.appended - before;
        note_sample_problem(report, &counts, || wire.describe(span), max_t);
    }
    tally(report, &counts);
}

/// Why one series was not stored, and the words for the rule it broke.
pub(super) type Refused = (Reason, String);

/// Validates the labels `raw` of a series the head does not hold, and
/// creates it with `samples`; the first refused sample is in
/// `counts.first`.
pub(super) fn create_series(
    app: &mut Appender<'_>,
    raw: &[(&[u8], &[u8])],
    canonical: &[u8],
    limits: &LabelLimits,
    samples: impl Iterator<Item = (i64, f64)>,
    counts: &mut AppendCounts,
) -> Result<(), Refused> {
    let mut valid = Vec::with_capacity(raw.len());
    validate::validate(raw, limits, &mut valid)
        .map_err(|e| (Reason::Label(e), label_problem(e, limits)))?;
    app.append_new(&valid, canonical, samples, counts)
        .map(|_| ())
        .map_err(|limit| (Reason::of_limit(&limit), limit.to_string()))
}

/// Runs the labels `sent` of a series the head does not know by its key
/// through `door`'s relabel rules, checks what is left and appends
/// `samples` to that series, creating it; `Ok(None)` when the rules drop
/// it. Its canonical bytes are left in `canonical`.
pub(super) fn create_relabelled(
    app: &mut Appender<'_>,
    sent: &[(&[u8], &[u8])],
    door: &Door<'_>,
    samples: impl Iterator<Item = (i64, f64)>,
    counts: &mut AppendCounts,
    canonical: &mut Vec<u8>,
) -> Result<Option<SeriesRef>, Refused> {
    let refused = |e| (Reason::Label(e), label_problem(e, door.limits));
    let Some(labels) = door.relabel.apply(sent).map_err(refused)? else {
        return Ok(None);
    };
    let raw = relabel::as_raw(&labels);
    let mut valid = Vec::with_capacity(raw.len());
    validate::validate(&raw, door.limits, &mut valid).map_err(refused)?;
    canonical.clear();
    encode_canonical(valid.iter().copied(), canonical);
    app.append_new(&valid, canonical, samples, counts)
        .map(Some)
        .map_err(|limit| (Reason::of_limit(&limit), limit.to_string()))
}

/// The canonical bytes, into `canonical`, of the series the labels `sent`
/// become through `door`; `false` when the rules drop them or what is
/// left breaks a rule.
pub(super) fn relabelled_canonical(
    sent: &[(&[u8], &[u8])],
    door: &Door<'_>,
    canonical: &mut Vec<u8>,
) -> bool {
    match door.relabel.apply(sent) {
        Ok(Some(labels)) => canonical_of(
            &relabel::as_raw(&labels),
            door.limits,
            &mut Vec::new(),
            canonical,
        ),
        _ => false,
    }
}

/// A series' canonical label bytes: built by the caller already, or to be
/// built here from its validated labels (into a reused buffer).
pub(super) enum Canonical<'c> {
    /// The caller built them from the same labels.
    Given(&'c [u8]),
    /// Build them into this buffer.
    Build(&'c mut Vec<u8>),
}

/// Validates the labels `raw` (into `valid`) and appends validated native
/// histogram `samples` to their series, creating it if needed; whether the
/// labels came unsorted.
pub(super) fn append_histograms<'a>(
    app: &mut Appender<'_>,
    raw: &[(&'a [u8], &'a [u8])],
    limits: &LabelLimits,
    samples: &[(i64, HistSample)],
    counts: &mut AppendCounts,
    valid: &mut Vec<(&'a str, &'a str)>,
    canonical: Canonical<'_>,
) -> Result<bool, Refused> {
    let resorted = validate::validate(raw, limits, valid)
        .map_err(|e| (Reason::Label(e), label_problem(e, limits)))?;
    let canonical: &[u8] = match canonical {
        Canonical::Given(bytes) => bytes,
        Canonical::Build(buf) => {
            buf.clear();
            encode_canonical(valid.iter().copied(), buf);
            buf
        }
    };
    counts.first = None;
    app.append_histograms(valid, canonical, samples, counts)
        .map_err(|limit| (Reason::of_limit(&limit), limit.to_string()))?;
    Ok(resorted)
}

/// Stores the exemplars of the series in `spans` whose labels are valid,
/// keyed by the series' canonical labels, and counts them.
fn store_exemplars<W: Wire>(
    app: &mut Appender<'_>,
    wire: &W,
    spans: &[W::Span],
    door: &Door<'_>,
    report: &mut IngestReport,
) {
    let mut raw_labels = Vec::new();
    let mut labels = Vec::new();
    let mut canonical = Vec::new();
    let mut exemplar_labels = Vec::new();
    for span in spans {
        raw_labels.clear();
        wire.labels(span, &mut raw_labels);
        // A series refused for its labels (or dropped by a rule) was
        // counted there; its exemplars have no series to belong to.
        let valid = match door.relabel.is_empty() {
            true => canonical_of(&raw_labels, door.limits, &mut labels, &mut canonical),
            false => relabelled_canonical(&raw_labels, door, &mut canonical),
        };
        if !valid {
            continue;
        }
        wire.exemplars(span, &mut exemplar_labels, &mut |l, value, t| {
            store_exemplar(app, report, &canonical, l, value, t);
        });
    }
}

/// Checks `raw` and writes its canonical bytes into `canonical`; `false`
/// when the labels break a rule.
fn canonical_of<'a>(
    raw: &[(&'a [u8], &'a [u8])],
    limits: &LabelLimits,
    labels: &mut Vec<(&'a str, &'a str)>,
    canonical: &mut Vec<u8>,
) -> bool {
    if validate::validate(raw, limits, labels).is_err() {
        return false;
    }
    canonical.clear();
    encode_canonical(labels.iter().copied(), canonical);
    true
}

/// Stores one exemplar of the series `series` (canonical labels) and
/// counts what became of it (as Prometheus, a refused exemplar does not
/// fail the request).
pub(super) fn store_exemplar(
    app: &mut Appender<'_>,
    report: &mut IngestReport,
    series: &[u8],
    labels: &[(&[u8], &[u8])],
    value: f64,
    t: i64,
) {
    match app.add_exemplar(series, labels, value, t) {
        Ok(()) => report.exemplars_written += 1,
        Err(e) => {
            let i = ExemplarError::ALL.iter().position(|x| *x == e).unwrap_or(0);
            report.exemplars_rejected[i] += 1;
        }
    }
}

/// Notes the first sample a series lost, if it lost one.
pub(super) fn note_sample_problem(
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

/// Remembers, for the next request, where the series of `batch` were found
/// other than where they were last seen: `key_of` gives a series' key.
pub(super) fn remember_learned<S: Copy + Default>(
    app: &Appender<'_>,
    batch: &SeriesBatch<S>,
    key_of: impl Fn(S) -> Option<u128>,
    out: &mut Vec<(u128, SeriesRef)>,
) {
    out.extend(
        batch
            .learned()
            .iter()
            .filter_map(|&(s, r)| Some((key_of(s)?, r))),
    );
    app.remember_refs(out);
}
