//! Remote-write 1.0: the pipeline from a decompressed `WriteRequest` to the
//! head. [`decode`] reads the wire format in place; this module appends.
//!
//! [`append_write_request`] walks the body once for structure, then once
//! more to append: a series seen before is found from its raw label bytes
//! with no decoding; a new one is validated, sorted and created. Problems
//! are counted per reason and summarised once per request.

pub mod decode;

pub use decode::{
    decode, decode_each, metadata, Checked, MetadataView, SampleIter, Series, SeriesSpan,
    TimeSeriesView,
};

use super::validate::{self, LabelLimits};
use super::{
    label_problem, sample_problem, DecodeError, IngestReport, Reason, MAX_AHEAD_MS, MAX_PROBLEMS,
};
use crate::reuse::{Buffer, Reused};
use crate::storage::head::{fingerprint, AppendCounts, Fingerprint, Head, SampleError, ShardGuard};
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
    let max_t = now_ms.saturating_add(MAX_AHEAD_MS);
    BATCH.with(|kept| {
        kept.with(|batch| {
            batch.clear();
            append_batch(head, body, limits, max_t, batch)
        })
    })
}

/// [`append_write_request`] with the thread's buffers.
fn append_batch(
    head: &Head,
    body: &[u8],
    limits: &LabelLimits,
    max_t: i64,
    batch: &mut Batch,
) -> Result<IngestReport, DecodeError> {
    let mut report = IngestReport::default();
    let mut counts = AppendCounts::default();

    // 1. Each series with samples, by the hash of its raw label bytes, as
    // the request is checked (nothing is stored until all of it is).
    let checked = decode::decode_each(body, |ts| {
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
    let checked = checked?;
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
    ts: &TimeSeriesView<'_>,
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

impl Buffer for Batch {
    fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
            + self.sorted.heap_bytes()
            + self.starts.heap_bytes()
            + self.pending.heap_bytes()
            + self.spill.rest.heap_bytes()
            + self.spill.slots.heap_bytes()
    }

    fn release(&mut self) {
        *self = Batch::default();
    }
}

thread_local! {
    static BATCH: Reused<Batch> = Reused::default();
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
