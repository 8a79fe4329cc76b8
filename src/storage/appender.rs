//! The write door: an [`Appender`] takes series (by labels, or by a
//! [`SeriesRef`] a protocol remembered) with floats, native histograms,
//! exemplars and metadata; [`Appender::commit`] hands everything to the WAL
//! at once and returns a [`Commit`] that resolves once it is durable.
//!
//! Appends of many series go a shard at a time ([`SeriesBatch`] and
//! [`Appender::append_batch`]): each shard is locked once per request, a
//! shard another request holds is left for later, and the lookups of a
//! shard's series run before its appends so that their cache misses
//! overlap. The shards, their locks and the WAL stay behind this door.

pub use super::append::{AppendCounts, SampleError, SeriesLimit};
use super::exemplars::ExemplarError;
use super::head::aliases::Alias;
use super::head::shard::{fingerprint, Fingerprint};
use super::head::{Head, NO_SLOT};
use super::metadata::MetadataStore;
use crate::histogram::HistSample;
use crate::reuse::Buffer;
use crate::wal::commit::GroupCommit;

/// A series the head holds, as a protocol may remember it between requests
/// (remote write 2.0 keeps one per series key): where it was last seen.
/// Checked against the series' labels before use, so a stale one only costs
/// a lookup.
pub type SeriesRef = Alias;

/// The series of a request, as the batched append reads them.
pub trait SeriesSource {
    /// Where a series is in the request (kept in reused buffers).
    type Span: Copy + Default;
    /// The samples of one series.
    type Samples<'a>: Iterator<Item = (i64, f64)>
    where
        Self: 'a;
    /// The series' labels in the head's canonical byte form, as sent (a
    /// known series is found by these bytes; unsorted labels find none).
    fn canonical(&self, span: &Self::Span) -> &[u8];
    /// The series' float samples.
    fn samples(&self, span: &Self::Span) -> Self::Samples<'_>;
    /// Where to add the series' start-time zero sample, if one is wanted:
    /// its start time, when that is before its first sample.
    fn zero_sample_at(&self, _span: &Self::Span) -> Option<i64> {
        None
    }
    /// Each float sample's time and start time (0 when it has none), when
    /// the protocol sends start times: appended to `out`.
    fn sample_starts(&self, _span: &Self::Span, _out: &mut Vec<(i64, i64)>) {}
    /// Whether [`SeriesSource::canonical`] gives the bytes of the series
    /// stored: not when relabel rules turn the sent labels into another
    /// series, found by its fingerprint alone.
    fn sent_as_stored(&self) -> bool {
        true
    }
}

/// Resolves once a committed batch is durable by the WAL's fsync mode (at
/// once without a WAL). Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    wal: Option<std::sync::Arc<GroupCommit>>,
    lsn: u64,
}

/// The WAL could not make a committed batch durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the write-ahead log failed: {0}")]
pub struct CommitError(#[from] crate::wal::commit::Stopped);

impl CommitError {
    /// Whether a retry may succeed: the disk was full, or the process is
    /// shutting down; not after the log failed for good.
    pub fn retryable(&self) -> bool {
        !matches!(self.0, crate::wal::commit::Stopped::Failed(_))
    }
}

impl Commit {
    /// A commit made durable by `lsn` of `wal` (nothing to wait for
    /// without a WAL, or at 0).
    pub(super) fn new(wal: Option<std::sync::Arc<GroupCommit>>, lsn: u64) -> Self {
        Self { wal, lsn }
    }

    /// Waits until everything committed is durable.
    pub fn durable(self) -> impl std::future::Future<Output = Result<(), CommitError>> + Send {
        let wait = self.wal.filter(|_| self.lsn > 0).map(|w| w.wait(self.lsn));
        async move {
            match wait {
                Some(w) => w.await.map_err(CommitError),
                None => Ok(()),
            }
        }
    }
}

/// Appends of one request: see the module's documentation. Dropped
/// without [`Appender::commit`], what it appended is logged with the next
/// commit that touches the same shards.
#[derive(Debug)]
pub struct Appender<'d> {
    head: &'d Head,
    metadata: &'d MetadataStore,
    max_t: i64,
    /// Shards appended to (bit `i % 64` for shard `i`).
    touched: u64,
    /// Stored exemplars as WAL entries, logged by the commit.
    exemplar_log: Vec<u8>,
}

impl<'d> Appender<'d> {
    pub(super) fn new(head: &'d Head, metadata: &'d MetadataStore, max_t: i64) -> Self {
        Self {
            head,
            metadata,
            max_t,
            touched: 0,
            exemplar_log: Vec::new(),
        }
    }

    /// The newest timestamp taken: later samples are out of bounds.
    pub fn max_t(&self) -> i64 {
        self.max_t
    }

    /// The oldest timestamp taken in order: the last retention cutoff or
    /// the newest block's end.
    pub fn min_valid_ms(&self) -> i64 {
        self.head.min_valid_ms().max(self.head.cut_floor())
    }

    #[inline]
    fn note(&mut self, counts: &mut AppendCounts) {
        self.touched |= std::mem::take(&mut counts.touched);
        self.head.note_newest(counts.newest);
    }

    /// Appends to the series whose canonical label bytes are exactly
    /// `canonical`; `false`, touching nothing, when there is none yet.
    #[inline]
    pub fn append_existing(
        &mut self,
        canonical: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        counts: &mut AppendCounts,
    ) -> bool {
        let found = self
            .head
            .append_existing(canonical, samples, self.max_t, counts);
        self.note(counts);
        found
    }

    /// Appends to the series `r` names (from [`Appender::lookup_refs`] or
    /// an append); `false`, touching nothing, when it is not where `r`
    /// says (its slot moved) or `r` names no stored series.
    #[inline]
    pub fn append_ref(
        &mut self,
        r: SeriesRef,
        samples: impl Iterator<Item = (i64, f64)>,
        counts: &mut AppendCounts,
    ) -> bool {
        if r.is_not_stored() {
            return false;
        }
        let found = self
            .head
            .append_at(r.fp, r.slot, samples, self.max_t, counts);
        self.note(counts);
        found
    }

    /// Appends to the series with these valid, sorted `labels` (canonical
    /// bytes `canonical`), creating it within the series limit.
    pub fn append_new(
        &mut self,
        labels: &[(&str, &str)],
        canonical: &[u8],
        samples: impl Iterator<Item = (i64, f64)>,
        counts: &mut AppendCounts,
    ) -> Result<SeriesRef, SeriesLimit> {
        let made = self
            .head
            .append_labels(labels, canonical, samples, self.max_t, counts);
        self.note(counts);
        made.map(|(fp, slot)| Alias { fp, slot })
    }

    /// Whether start times sent with samples are kept (`st-storage`): then
    /// [`Appender::note_starts`] takes them.
    pub fn keeps_starts(&self) -> bool {
        self.head.opts().st_storage
    }

    /// Keeps the start times (`(t, st)`, in time order, st 0 for none) of
    /// samples just appended to the series `r` names; `false` when it is
    /// not where `r` says.
    pub fn note_starts(&mut self, r: SeriesRef, starts: impl Iterator<Item = (i64, i64)>) -> bool {
        if r.is_not_stored() || !self.head.opts().st_storage {
            return false;
        }
        // The shard's log buffer holds the runs: it is handed to the WAL at
        // the commit, as the samples are.
        let mut counts = AppendCounts::default();
        let found = self.head.note_starts_at(r.fp, r.slot, starts, &mut counts);
        self.note(&mut counts);
        found
    }

    /// [`Appender::note_starts`] for the series whose canonical label bytes
    /// are `canonical`.
    pub fn note_starts_of(
        &mut self,
        canonical: &[u8],
        starts: impl Iterator<Item = (i64, i64)>,
    ) -> bool {
        if !self.head.opts().st_storage {
            return false;
        }
        let mut counts = AppendCounts::default();
        let found = self.head.note_starts_of(canonical, starts, &mut counts);
        self.note(&mut counts);
        found
    }

    /// Appends validated native histogram samples to the series with these
    /// valid, sorted `labels`, creating it within the series limit.
    pub fn append_histograms(
        &mut self,
        labels: &[(&str, &str)],
        canonical: &[u8],
        samples: &[(i64, HistSample)],
        counts: &mut AppendCounts,
    ) -> Result<(), SeriesLimit> {
        let made = self
            .head
            .append_histograms(labels, canonical, samples, self.max_t, counts);
        self.note(counts);
        made
    }

    /// Stores an exemplar of the series `series` (canonical label bytes);
    /// the commit logs it.
    pub fn add_exemplar(
        &mut self,
        series: &[u8],
        labels: &[(&[u8], &[u8])],
        value: f64,
        t: i64,
    ) -> Result<(), ExemplarError> {
        let log = self.head.wal().is_some().then_some(&mut self.exemplar_log);
        self.head
            .exemplars()
            .add_logged(series, labels, value, t, log)
    }

    /// Records a metric family's metadata.
    pub fn add_metadata(&mut self, family: &str, kind: &'static str, help: &str, unit: &str) {
        self.metadata.record(family, kind, help, unit);
    }

    /// Where the series of `keys` were last seen, each `None` if unknown,
    /// into `out` (one read lock for them all).
    pub fn lookup_refs(&self, keys: impl Iterator<Item = u128>, out: &mut Vec<Option<SeriesRef>>) {
        let aliases = self.head.aliases().read();
        out.extend(keys.map(|k| aliases.get(k)));
    }

    /// Where the series of `key` was last seen, if known.
    pub fn lookup_ref(&self, key: u128) -> Option<SeriesRef> {
        self.head.aliases().read().get(key)
    }

    /// Remembers where series were found, under their keys (bounded by
    /// the head's series count).
    pub fn remember_refs(&self, new: &[(u128, SeriesRef)]) {
        self.head.remember_aliases(new);
    }

    /// Appends the samples of the series in `batch` that the head holds,
    /// shard by shard; calls `each` after each series' append with its
    /// counts (whose `first` is that series' first refused sample). Series
    /// the head does not hold are left in [`SeriesBatch::unknown`].
    pub fn append_batch<W: SeriesSource>(
        &mut self,
        wire: &W,
        batch: &mut SeriesBatch<W::Span>,
        counts: &mut AppendCounts,
        mut each: impl FnMut(&W::Span, &AppendCounts),
    ) {
        let head = self.head;
        let max_t = self.max_t;
        batch.group_by_shard(head.shard_count());
        let SeriesBatch {
            sorted,
            starts,
            pending,
            rest,
            slots,
            learn,
            learned,
            start_times,
            ..
        } = batch;
        while !pending.is_empty() {
            // The first free shard; if every one is held, wait for the last.
            let free = pending
                .iter()
                .enumerate()
                .find_map(|(i, &shard)| head.try_lock_shard(shard, counts).map(|guard| (i, guard)));
            let (at, mut guard) = match free {
                Some(found) => found,
                None => {
                    let last = pending.len() - 1;
                    (last, head.lock_shard(pending[last], counts))
                }
            };
            let shard = pending.swap_remove(at);
            let group = &sorted[starts[shard]..starts[shard + 1]];
            // Every lookup first, then every append (see `ShardGuard::find_warm`).
            slots.clear();
            let as_stored = wire.sent_as_stored();
            slots.extend(group.iter().map(|e| {
                let raw = as_stored.then(|| wire.canonical(&e.span));
                guard.find_warm(e.fp, e.hint, raw)
            }));
            for (e, &slot) in group.iter().zip(slots.iter()) {
                let Some(slot) = slot else {
                    rest.push(e.span);
                    continue;
                };
                if *learn && slot != e.hint {
                    learned.push((e.span, Alias { fp: e.fp, slot }));
                }
                counts.first = None;
                if let Some(st) = wire.zero_sample_at(&e.span) {
                    // Refused when the series is already past it: that is
                    // expected, not the sender's problem, and not counted.
                    guard.append_zero(slot, st, max_t);
                }
                guard.append_to(slot, wire.samples(&e.span), max_t, counts);
                if head.opts().st_storage {
                    start_times.clear();
                    wire.sample_starts(&e.span, start_times);
                    if !start_times.is_empty() {
                        guard.note_starts(slot, start_times.drain(..));
                    }
                }
                each(&e.span, counts);
            }
        }
        self.note(counts);
    }

    /// Hands everything appended (and the exemplars stored) to the WAL:
    /// the shards free now in one submission, any held by someone else
    /// each after it, alone (see `Head::log_appended`).
    pub fn commit(mut self) -> Commit {
        let mut counts = AppendCounts {
            touched: self.touched,
            ..AppendCounts::default()
        };
        let mut lsn = self.head.log_appended(&mut counts);
        if !self.exemplar_log.is_empty() {
            let mut frame = Vec::with_capacity(self.exemplar_log.len() + 16);
            crate::wal::record::encode_exemplars_frame(&mut frame, &self.exemplar_log);
            lsn = lsn.max(self.head.log_frames(&frame));
            self.exemplar_log.clear();
        }
        Commit {
            wal: self.head.wal_handle(),
            lsn,
        }
    }
}

/// A series of a request: its fingerprint, shard, place in the request,
/// and where it was last seen in its shard ([`NO_SLOT`] if unknown).
#[derive(Debug, Clone, Copy)]
struct Entry<S> {
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

/// A request's series grouped by shard, for [`Appender::append_batch`].
/// Kept per thread and reused, so a request of known series allocates
/// nothing.
#[derive(Debug)]
pub struct SeriesBatch<S> {
    /// In request order.
    entries: Vec<Entry<S>>,
    /// Grouped by shard, request order kept within a shard.
    sorted: Vec<Entry<S>>,
    /// `sorted[starts[i]..starts[i + 1]]` are shard `i`'s.
    starts: Vec<usize>,
    /// Shards with series in the request, not yet appended to.
    pending: Vec<usize>,
    /// Series to create or to look up by their parsed labels.
    rest: Vec<S>,
    /// One shard's series' slots in the head, `None` for new ones.
    slots: Vec<Option<u32>>,
    /// Whether to note in `learned` where series were found.
    learn: bool,
    /// Series found other than where they were last seen, when `learn`
    /// is set.
    learned: Vec<(S, SeriesRef)>,
    /// One series' samples' start times at a time.
    start_times: Vec<(i64, i64)>,
}

impl<S> Default for SeriesBatch<S> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            sorted: Vec::new(),
            starts: Vec::new(),
            pending: Vec::new(),
            rest: Vec::new(),
            slots: Vec::new(),
            learn: false,
            learned: Vec::new(),
            start_times: Vec::new(),
        }
    }
}

impl<S: Copy + Default> SeriesBatch<S> {
    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.sorted.clear();
        self.pending.clear();
        self.rest.clear();
        self.slots.clear();
        self.learn = false;
        self.learned.clear();
    }

    /// Adds a series whose canonical label bytes are `canonical`, last seen
    /// at `hint` if known.
    #[inline]
    pub fn push(&mut self, app: &Appender<'_>, canonical: &[u8], hint: Option<SeriesRef>, span: S) {
        self.push_at(
            app,
            fingerprint(canonical),
            hint.map_or(NO_SLOT, |r| r.slot),
            span,
        );
    }

    /// Adds a series by where it was last seen, without its label bytes.
    #[inline]
    pub fn push_ref(&mut self, app: &Appender<'_>, r: SeriesRef, span: S) {
        self.push_at(app, r.fp, r.slot, span);
    }

    #[inline]
    fn push_at(&mut self, app: &Appender<'_>, fp: Fingerprint, hint: u32, span: S) {
        self.entries.push(Entry {
            fp,
            shard: app.head.shard_of(fp) as u32,
            hint,
            span,
        });
    }

    /// Adds a series to create or find by its parsed labels.
    #[inline]
    pub fn push_unknown(&mut self, span: S) {
        self.rest.push(span);
    }

    /// The series the head did not hold (after [`Appender::append_batch`]),
    /// and those added by [`SeriesBatch::push_unknown`].
    pub fn unknown(&self) -> &[S] {
        &self.rest
    }

    /// Notes, from now on, where series are found other than at their
    /// hint (see [`SeriesBatch::learned`]).
    pub fn learn(&mut self) {
        self.learn = true;
    }

    /// Whether the batch notes where series are found.
    pub fn learning(&self) -> bool {
        self.learn
    }

    /// Notes where a series of the request is.
    pub fn learned_at(&mut self, span: S, r: SeriesRef) {
        self.learned.push((span, r));
    }

    /// Series found or created other than where they were last seen.
    pub fn learned(&self) -> &[(S, SeriesRef)] {
        &self.learned
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

impl<S> Buffer for SeriesBatch<S> {
    fn heap_bytes(&self) -> usize {
        self.entries.heap_bytes()
            + self.sorted.heap_bytes()
            + self.starts.heap_bytes()
            + self.pending.heap_bytes()
            + self.rest.heap_bytes()
            + self.slots.heap_bytes()
            + self.learned.heap_bytes()
    }

    fn release(&mut self) {
        *self = SeriesBatch::default();
    }
}
