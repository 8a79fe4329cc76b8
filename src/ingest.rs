//! Ingest: wire decoders that feed the head straight from request bytes.
//!
//! [`append_write_request`] walks a decompressed remote-write 1.0 body once
//! for structure, then once more to append: a series seen before is found
//! from its raw label bytes with no decoding; a new one is validated,
//! sorted and created. Problems are counted per reason and summarised once
//! per request.

pub mod otlp;
pub mod protowire;
pub mod remote_write;
pub mod validate;

use std::fmt::Write as _;

use crate::storage::head::{fingerprint, AppendCounts, Fingerprint, Head, SampleError, ShardGuard};
use crate::storage::labels::encode_canonical;
use crate::storage::metadata::{type_name, MetadataStore};
pub use protowire::DecodeError;
use remote_write::SeriesSpan;
use validate::{LabelError, LabelLimits};

/// Samples more than this far ahead of the receiver's clock are rejected.
pub const MAX_AHEAD_MS: i64 = 10 * 60 * 1000;

/// How many problems a reply spells out; the rest are only counted.
const MAX_PROBLEMS: usize = 5;

/// Why samples were not stored: a closed set, used as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The series' labels broke a rule.
    Label(LabelError),
    /// The sample broke an append rule.
    Sample(SampleError),
    /// The head holds its maximum number of series.
    SeriesLimit,
    /// Native histograms are not stored yet.
    NativeHistogram,
    /// An OTLP metric whose aggregation temporality Sluice does not store
    /// (delta without `--otlp-delta-to-cumulative`, or unspecified).
    UnsupportedTemporality,
    /// An OTLP data point that cannot be stored as it is: no timestamp, no
    /// value, too many buckets, an exponential scale out of range.
    InvalidDataPoint,
}

impl Reason {
    /// Number of distinct reasons.
    pub const COUNT: usize = LabelError::ALL.len() + SampleError::ALL.len() + 4;

    /// Every reason, in index order.
    pub fn all() -> impl Iterator<Item = Reason> {
        LabelError::ALL
            .into_iter()
            .map(Reason::Label)
            .chain(SampleError::ALL.into_iter().map(Reason::Sample))
            .chain([
                Reason::SeriesLimit,
                Reason::NativeHistogram,
                Reason::UnsupportedTemporality,
                Reason::InvalidDataPoint,
            ])
    }

    /// A dense index in `0..COUNT`.
    pub fn index(self) -> usize {
        let other = LabelError::ALL.len() + SampleError::ALL.len();
        match self {
            Reason::Label(e) => e as usize,
            Reason::Sample(e) => LabelError::ALL.len() + e as usize,
            Reason::SeriesLimit => other,
            Reason::NativeHistogram => other + 1,
            Reason::UnsupportedTemporality => other + 2,
            Reason::InvalidDataPoint => other + 3,
        }
    }

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Label(e) => e.reason(),
            Reason::Sample(e) => e.reason(),
            Reason::SeriesLimit => "series_limit",
            Reason::NativeHistogram => "native_histogram_unsupported",
            Reason::UnsupportedTemporality => "unsupported_temporality",
            Reason::InvalidDataPoint => "invalid_data_point",
        }
    }
}

/// What one request did.
#[derive(Debug, Clone)]
pub struct IngestReport {
    /// Samples stored.
    pub accepted: u64,
    /// Samples (and histogram samples) not stored, by [`Reason::index`].
    pub rejected: [u64; Reason::COUNT],
    /// Series whose labels arrived unsorted and were sorted.
    pub resorted_series: u64,
    /// The first few problems, spelled out.
    pub problems: Vec<String>,
    /// The WAL position that makes the stored samples durable: wait for it
    /// with [`Head::durable`] before acknowledging.
    pub wal_lsn: u64,
    /// Whether the request also carried metadata entries.
    pub metadata: bool,
}

impl Default for IngestReport {
    fn default() -> Self {
        Self {
            accepted: 0,
            rejected: [0; Reason::COUNT],
            resorted_series: 0,
            problems: Vec::new(),
            wal_lsn: 0,
            metadata: false,
        }
    }
}

impl IngestReport {
    /// Total samples not stored.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    fn reject(&mut self, reason: Reason, n: u64, detail: impl FnOnce() -> String) {
        if n == 0 {
            return;
        }
        self.rejected[reason.index()] += n;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(detail());
        }
    }

    /// The plain-text reply for a request with rejections: counts by
    /// reason, then the first problems.
    pub fn message(&self) -> String {
        let total = self.rejected_total();
        summary(
            "samples",
            total,
            total + self.accepted,
            &self.rejected,
            &self.problems,
        )
    }
}

/// `rejected <n> of <total> <unit> (<reason>: <n>, …); the other <unit>
/// were stored. First problems: …`: a reply that says what was lost and why.
pub(crate) fn summary(
    unit: &str,
    rejected: u64,
    total: u64,
    by_reason: &[u64; Reason::COUNT],
    problems: &[String],
) -> String {
    let mut m = format!("rejected {rejected} of {total} {unit} (");
    let mut first = true;
    for r in Reason::all() {
        let n = by_reason[r.index()];
        if n > 0 {
            if !first {
                m.push_str(", ");
            }
            first = false;
            let _ = write!(m, "{}: {n}", r.as_str());
        }
    }
    let _ = write!(m, "); the other {unit} were stored. First problems: ");
    m.push_str(&problems.join("; "));
    m
}

/// Appends a decompressed remote-write 1.0 `WriteRequest` to `head`.
/// A body that is not valid protobuf is rejected whole, before anything is
/// stored; otherwise every valid series is stored and the rest counted.
pub fn append_write_request(
    head: &Head,
    body: &[u8],
    limits: &LabelLimits,
    now_ms: i64,
) -> Result<IngestReport, DecodeError> {
    let max_t = now_ms.saturating_add(MAX_AHEAD_MS);
    let mut report = IngestReport::default();
    let mut counts = AppendCounts::default();
    let mut batch = BATCH.with(|b| std::mem::take(&mut *b.borrow_mut()));
    batch.clear();

    // 1. Each series with samples, by the hash of its raw label bytes, as
    // the request is checked (nothing is stored until all of it is).
    let checked = remote_write::decode_each(body, |ts| {
        if ts.histograms > 0 {
            report.reject(Reason::NativeHistogram, u64::from(ts.histograms), || {
                format!(
                    "native histogram samples are not supported yet for series {}",
                    ts.describe()
                )
            });
        }
        if ts.samples == 0 {
            return;
        }
        match ts.labels_raw {
            Some(raw) => {
                let fp = fingerprint(raw);
                batch.entries.push(Entry {
                    fp,
                    shard: head.shard_of(fp),
                    span: ts.span(body),
                });
            }
            None => batch.spill.rest.push(ts.span(body)),
        }
    });
    let checked = match checked {
        Ok(checked) => checked,
        Err(e) => {
            BATCH.with(|b| *b.borrow_mut() = batch);
            return Err(e);
        }
    };
    report.metadata = checked.metadata;

    // 2. Series the head holds, shard by shard: each shard is locked once
    // for all its series in the request, and a shard another request holds
    // is left for later rather than waited on.
    batch.group_by_shard(head.shard_count());
    let Batch {
        sorted,
        starts,
        pending,
        spill,
        ..
    } = &mut batch;
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
        append_known(
            &mut guard,
            group,
            body,
            max_t,
            &mut counts,
            &mut report,
            spill,
        );
    }

    // 3. New series (and any whose labels are not one run of bytes):
    // validated, sorted, interned and indexed.
    let mut raw_labels = Vec::new();
    let mut labels = Vec::new();
    let mut canonical = Vec::new();
    for span in spill.rest.iter() {
        let ts = span.view(body);
        counts.first = None;
        raw_labels.clear();
        raw_labels.extend(ts.labels());
        match validate::validate(&raw_labels, limits, &mut labels) {
            Err(e) => {
                report.reject(Reason::Label(e), u64::from(ts.samples), || {
                    format!("{} for series {}", label_problem(e), ts.describe())
                });
                continue;
            }
            Ok(resorted) => report.resorted_series += u64::from(resorted),
        }
        canonical.clear();
        encode_canonical(labels.iter().copied(), &mut canonical);
        if let Err(limit) =
            head.append_labels(&labels, &canonical, ts.samples(), max_t, &mut counts)
        {
            report.reject(Reason::SeriesLimit, u64::from(ts.samples), || {
                format!("{limit}; new series {} not created", ts.describe())
            });
            continue;
        }
        note_sample_problem(&mut report, &counts, &ts, max_t);
    }
    // Keep the buffers for the next request unless an unusually large one
    // grew them: a thread should not hold on to that.
    if batch.entries.capacity() <= MAX_KEPT_ENTRIES {
        BATCH.with(|b| *b.borrow_mut() = batch);
    }

    report.accepted = counts.appended;
    report.wal_lsn = head.log_appended(&mut counts);
    for e in SampleError::ALL {
        report.rejected[Reason::Sample(e).index()] += counts.rejected[e as usize];
    }
    Ok(report)
}

/// Appends each series of `group` (all in the guarded shard) that the head
/// holds; those it does not hold yet go to `spill.rest`.
fn append_known(
    guard: &mut ShardGuard<'_>,
    group: &[Entry],
    body: &[u8],
    max_t: i64,
    counts: &mut AppendCounts,
    report: &mut IngestReport,
    spill: &mut Spill,
) {
    let Spill { rest, slots } = spill;
    // Every lookup first, then every append (see `ShardGuard::find_warm`).
    slots.clear();
    slots.extend(group.iter().map(|e| {
        let raw = e.span.view(body).labels_raw.unwrap_or_default();
        guard.find_warm(e.fp, raw)
    }));
    for (e, &slot) in group.iter().zip(slots.iter()) {
        let Some(slot) = slot else {
            rest.push(e.span);
            continue;
        };
        let ts = e.span.view(body);
        counts.first = None;
        guard.append_to(slot, ts.samples(), max_t, counts);
        note_sample_problem(report, counts, &ts, max_t);
    }
}

/// Notes the first sample a series lost, if it lost one.
fn note_sample_problem(
    report: &mut IngestReport,
    counts: &AppendCounts,
    ts: &remote_write::TimeSeriesView<'_>,
    max_t: i64,
) {
    if let Some((e, t)) = counts.first {
        if report.problems.len() < MAX_PROBLEMS {
            report.problems.push(format!(
                "{} at timestamp {t} for series {}",
                sample_problem(e, t, max_t),
                ts.describe()
            ));
        }
    }
}

/// A series of a request: its fingerprint, shard and place in the request.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    fp: Fingerprint,
    shard: usize,
    span: SeriesSpan,
}

/// A request's series grouped by shard. Kept per thread and reused, so a
/// request of known series allocates nothing.
#[derive(Debug, Default)]
struct Batch {
    /// In request order.
    entries: Vec<Entry>,
    /// Grouped by shard, request order kept within a shard.
    sorted: Vec<Entry>,
    /// `sorted[starts[i]..starts[i + 1]]` are shard `i`'s.
    starts: Vec<usize>,
    /// Shards with series in the request, not yet appended to.
    pending: Vec<usize>,
    /// Series left for step 3, and scratch for step 2.
    spill: Spill,
}

/// What appending a shard's known series leaves and uses.
#[derive(Debug, Default)]
struct Spill {
    /// Series to create or to look up by their parsed labels.
    rest: Vec<SeriesSpan>,
    /// One shard's series' slots in the head, `None` for new ones.
    slots: Vec<Option<u32>>,
}

impl Batch {
    fn clear(&mut self) {
        self.entries.clear();
        self.sorted.clear();
        self.pending.clear();
        self.spill.rest.clear();
        self.spill.slots.clear();
    }

    /// Counting sort of `entries` into `sorted` by shard.
    fn group_by_shard(&mut self, shards: usize) {
        self.starts.clear();
        self.starts.resize(shards + 1, 0);
        for e in &self.entries {
            self.starts[e.shard + 1] += 1;
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
            let at = &mut self.starts[e.shard];
            self.sorted[*at] = *e;
            *at += 1;
        }
        for i in (1..=shards).rev() {
            self.starts[i] = self.starts[i - 1];
        }
        self.starts[0] = 0;
    }
}

/// Series entries a thread keeps buffers for between requests (a request
/// of up to this many series allocates nothing once the buffers exist).
const MAX_KEPT_ENTRIES: usize = 1 << 16;

thread_local! {
    static BATCH: std::cell::RefCell<Batch> = std::cell::RefCell::default();
}

/// Records the `metadata` of a checked remote-write 1.0 request. Entries
/// with names or text that are not UTF-8 are skipped.
pub fn record_metadata(store: &MetadataStore, body: &[u8]) {
    for md in remote_write::metadata(body) {
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

fn label_problem(e: LabelError) -> &'static str {
    match e {
        LabelError::MissingMetricName => "missing metric name (__name__)",
        LabelError::InvalidMetricName => {
            "invalid metric name (must match [a-zA-Z_:][a-zA-Z0-9_:]*)"
        }
        LabelError::InvalidLabelName => "invalid label name (must match [a-zA-Z_][a-zA-Z0-9_]*)",
        LabelError::InvalidUtf8 => "label name or value is not valid UTF-8",
        LabelError::DuplicateLabelName => "duplicate label name",
        LabelError::TooManyLabels => "too many labels",
        LabelError::LabelNameTooLong => "label name too long",
        LabelError::LabelValueTooLong => "label value too long",
    }
}

fn sample_problem(e: SampleError, t: i64, max_t: i64) -> String {
    match e {
        SampleError::OutOfOrder => "out of order sample (older than the series' newest)".to_owned(),
        SampleError::Duplicate => {
            "duplicate sample for timestamp with a different value".to_owned()
        }
        SampleError::OutOfBounds if t > max_t => {
            format!("out of bounds: timestamp is too far in the future (limit {max_t})")
        }
        SampleError::OutOfBounds => {
            "out of bounds: timestamp is older than the retention cutoff".to_owned()
        }
    }
}
