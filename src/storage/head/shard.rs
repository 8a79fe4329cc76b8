//! One shard of the head: its series, their lookup table, interned strings
//! and postings, all behind the shard's own lock. Everything here runs with
//! that lock held, so it stays short and never awaits.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use hashbrown::HashTable;

use super::hist_series::{HistSample, HistSeries};
use super::ooo::{merge_samples, OooSeries};
use crate::storage::append::{
    chunk_end_time, range_for_timestamp, AppendCounts, Bounds, HeadOptions, SampleError,
};
use crate::storage::block::{BlockChunk, Encoding};
use crate::storage::chunk::{
    decode_histograms, encode_xor, ChunkRef, HistogramKind, XorAppender, XorIter, HEADER_BYTES,
    MERGED_CHUNK_SAMPLES,
};
use crate::storage::index::Postings;
use crate::storage::labels::{matches_canonical, Interner, Label, StrId};
use crate::storage::starts::{StartRun, StartRuns};
use crate::wal::record::{encode_series, SamplesFrame};

/// A shard's out-of-order side, borrowed field by field (apart from the
/// series being appended to).
macro_rules! late {
    ($shard:ident) => {
        Late {
            ooo: &mut $shard.ooo,
            hists: &$shard.hists,
            bytes: &mut $shard.ooo_bytes,
            samples: &mut $shard.samples,
            log: &mut $shard.log,
        }
    };
}

/// Prometheus' hard cap for an XOR chunk, less the worst case of one sample.
const MAX_CHUNK_BYTES_BEFORE_APPEND: usize = 1024 - 19;

/// A closed chunk: immutable bytes, shared with queries, and their time span.
#[derive(Debug)]
pub(crate) struct SealedChunk {
    pub(crate) mint: i64,
    pub(crate) maxt: i64,
    pub(crate) bytes: Arc<[u8]>,
    /// Where a checkpoint wrote the bytes (a chunk file's number and the
    /// offset in it, see `checkpoint`), 0 if none did yet. Only the
    /// checkpoint writer reads and sets it, under the shard's lock.
    pub(crate) saved: AtomicU64,
}

/// The chunk still being appended to.
#[derive(Debug)]
struct HeadChunk {
    app: XorAppender,
    mint: i64,
}

impl HeadChunk {
    /// The newest sample's timestamp (the appender keeps it).
    #[inline]
    fn maxt(&self) -> i64 {
        self.app.last().map_or(self.mint, |(t, _)| t)
    }
}

/// The open chunk of a series, read.
pub(crate) struct OpenView<'a> {
    /// Its first and last timestamps.
    pub(crate) mint: i64,
    pub(crate) maxt: i64,
    pub(crate) bytes: &'a [u8],
    /// Its newest sample, if it has one.
    pub(crate) last: Option<(i64, f64)>,
}

/// Whether an append started a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NewChunk {
    No,
    /// The series' first open chunk.
    Opened,
    /// The open chunk was sealed and a new one opened.
    Sealed,
}

/// One series in memory.
#[derive(Debug)]
pub(crate) struct MemSeries {
    /// The series' reference in the write-ahead log and checkpoints.
    pub(crate) id: u64,
    hash: u64,
    /// With `hash`, the series' [`Fingerprint`].
    check: u64,
    /// Where the series' label ids start in its shard's `label_ids`, and
    /// how many there are (see [`Shard::labels`]).
    labels_at: u32,
    labels_len: u32,
    /// Exactly as long as it needs to be (a `Vec` would cost a capacity
    /// word per series).
    pub(crate) sealed: Box<[SealedChunk]>,
    head: Option<HeadChunk>,
    /// When the head chunk must be cut at the latest (Prometheus' `nextAt`).
    next_at: i64,
    /// Samples from `unlogged_from` on may not be durable yet: the newest
    /// of them went to the shard's log in generation `unlogged_gen`
    /// (see [`ShardLog`]). Once that generation is durable, all are.
    unlogged_gen: u64,
    unlogged_from: i64,
}

/// The top bit of `MemSeries::labels_len`: the series holds native
/// histograms (in its shard's `hists`, by series id). Kept in a spare bit
/// so that float-only series pay nothing for histograms.
const HIST_FLAG: u32 = 1 << 31;

/// The next bit: the series holds out-of-order samples (in its shard's
/// `ooo`, by series id).
const OOO_FLAG: u32 = 1 << 30;

/// Both flags.
const FLAGS: u32 = HIST_FLAG | OOO_FLAG;

impl MemSeries {
    /// This series' run in its shard's `label_ids`.
    #[inline]
    fn label_run<'a>(&self, ids: &'a [(StrId, StrId)]) -> &'a [(StrId, StrId)] {
        let at = self.labels_at as usize;
        ids.get(at..at + (self.labels_len & !FLAGS) as usize)
            .unwrap_or_default()
    }

    /// Chunks in time order, head chunk last: (mint, maxt, bytes).
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> impl Iterator<Item = (i64, i64, &[u8])> {
        self.sealed
            .iter()
            .map(|c| (c.mint, c.maxt, &*c.bytes))
            .chain(self.head.iter().map(|h| (h.mint, h.maxt(), h.app.bytes())))
    }

    /// Appends one sample by Prometheus' head rules. Returns the change in
    /// encoded bytes and what happened to the chunks, or `None` for an
    /// exact duplicate (accepted, not stored again).
    #[inline]
    fn append(
        &mut self,
        t: i64,
        v: f64,
        opts: &HeadOptions,
    ) -> Result<Option<(isize, NewChunk)>, SampleError> {
        let mut created = NewChunk::No;
        let mut delta = 0isize;
        match &mut self.head {
            Some(h) if t <= h.maxt() => {
                if t < h.maxt() {
                    return Err(SampleError::OutOfOrder);
                }
                // Same timestamp: an exact duplicate is accepted and dropped.
                return match h.app.last() {
                    Some((_, last)) if last.to_bits() == v.to_bits() => Ok(None),
                    _ => Err(SampleError::Duplicate),
                };
            }
            Some(h) => {
                let n = h.app.num_samples();
                let cut = if h.app.bytes().len() > MAX_CHUNK_BYTES_BEFORE_APPEND {
                    true
                } else {
                    if n == opts.samples_per_chunk / 4 {
                        self.next_at = chunk_end_time(h.mint, h.maxt(), self.next_at, 4.0);
                    }
                    t >= self.next_at || n >= opts.samples_per_chunk.saturating_mul(2)
                };
                if cut {
                    delta = self.cut(t, opts);
                    created = NewChunk::Sealed;
                }
            }
            None => {
                delta = self.cut(t, opts);
                created = NewChunk::Opened;
            }
        }
        let Some(h) = &mut self.head else {
            return Ok(Some((delta, created)));
        };
        let before = h.app.bytes().len();
        h.app.append(t, v);
        Ok(Some((
            delta + (h.app.bytes().len() - before) as isize,
            created,
        )))
    }

    /// Seals the head chunk (if any) and opens a new one starting at `t`.
    /// Returns the change in encoded bytes: the new chunk's header.
    fn cut(&mut self, t: i64, opts: &HeadOptions) -> isize {
        let next_at = range_for_timestamp(t, opts.chunk_range_ms);
        if let Some(h) = self.head.take() {
            // Exactly one more entry: most series hold one or two sealed
            // chunks, and `push`'s first growth to four entries would
            // leave 96 bytes per series unused.
            let mut sealed = std::mem::take(&mut self.sealed).into_vec();
            sealed.reserve_exact(1);
            sealed.push(SealedChunk {
                mint: h.mint,
                maxt: h.maxt(),
                bytes: Arc::from(h.app.bytes()),
                saved: AtomicU64::new(0),
            });
            self.sealed = sealed.into_boxed_slice();
        }
        // The new chunk's first samples are written inline; its buffer is
        // then allocated at the size they project (`XorAppender::grow`).
        self.head = Some(HeadChunk {
            app: XorAppender::default(),
            mint: t,
        });
        self.next_at = next_at;
        HEADER_BYTES as isize
    }

    /// Chunks overlapping `[mint, maxt]`, for a query: sealed ones shared,
    /// the open one copied (it is still being written). Samples after
    /// `until` (see [`MemSeries::visible_until`]) are left out: a chunk
    /// that holds some is copied without them.
    pub(crate) fn snapshot_chunks(&self, mint: i64, maxt: i64, until: i64) -> Vec<ChunkRef> {
        let maxt = maxt.min(until);
        let mut out: Vec<ChunkRef> = self
            .sealed_overlapping(mint, maxt)
            .map(|c| ChunkRef {
                mint: c.mint,
                maxt: c.maxt.min(until),
                bytes: if c.maxt > until {
                    clipped(&c.bytes, until).into()
                } else {
                    Arc::clone(&c.bytes).into()
                },
                last: None,
            })
            .collect();
        if let Some(h) = self.open_overlapping(mint, maxt) {
            out.push(ChunkRef {
                mint: h.mint,
                maxt: h.maxt.min(until),
                bytes: if h.maxt > until {
                    clipped(h.bytes, until).into()
                } else {
                    h.bytes.into()
                },
                last: h.last.filter(|&(t, _)| t <= until),
            });
        }
        out
    }

    /// The sealed chunks with samples in `[lo, hi]`, in time order.
    #[inline]
    pub(crate) fn sealed_overlapping(
        &self,
        lo: i64,
        hi: i64,
    ) -> impl Iterator<Item = &SealedChunk> {
        self.sealed
            .iter()
            .filter(move |c| c.maxt >= lo && c.mint <= hi)
    }

    /// The open chunk, if it has samples in `[lo, hi]`.
    #[inline]
    pub(crate) fn open_overlapping(&self, lo: i64, hi: i64) -> Option<OpenView<'_>> {
        self.head
            .as_ref()
            .filter(|h| h.maxt() >= lo && h.mint <= hi)
            .map(|h| OpenView {
                mint: h.mint,
                maxt: h.maxt(),
                bytes: h.app.bytes(),
                last: h.app.last(),
            })
    }

    /// The newest timestamp readers may see: samples after it are not yet
    /// durable in the log (`i64::MAX` when all are, or without a log).
    #[inline]
    pub(crate) fn visible_until(&self, log: Option<&ShardLog>) -> i64 {
        match log {
            Some(log) if self.unlogged_gen >= log.durable_gen => {
                self.unlogged_from.saturating_sub(1)
            }
            _ => i64::MAX,
        }
    }

    /// Notes that a sample at `t` went to the log in generation `gen`.
    #[inline]
    fn note_unlogged(&mut self, log: &ShardLog, t: i64) {
        if self.unlogged_gen < log.durable_gen {
            self.unlogged_from = t;
        }
        self.unlogged_gen = log.gen;
    }

    /// When the open chunk must be cut at the latest.
    pub(crate) fn next_at(&self) -> i64 {
        self.next_at
    }

    /// Bytes the open chunk's buffer holds beyond what it has written.
    fn open_slack(&self) -> usize {
        self.head
            .as_ref()
            .map_or(0, |h| h.app.capacity() - h.app.bytes().len())
    }

    /// The open chunk: (mint, maxt, bytes).
    pub(crate) fn open_chunk(&self) -> Option<(i64, i64, &[u8])> {
        self.head
            .as_ref()
            .map(|h| (h.mint, h.maxt(), h.app.bytes()))
    }

    /// Whether the series holds native histograms (in its shard's
    /// `hists`).
    #[inline]
    pub(crate) fn has_hist(&self) -> bool {
        self.labels_len & HIST_FLAG != 0
    }

    /// Whether the series holds out-of-order samples (in its shard's
    /// `ooo`).
    #[inline]
    pub(crate) fn has_ooo(&self) -> bool {
        self.labels_len & OOO_FLAG != 0
    }

    /// The in-order value at `t`, if a chunk holds one.
    fn value_at(&self, t: i64) -> Option<f64> {
        let in_chunk = |bytes: &[u8]| {
            XorIter::new(bytes)
                .find(|&(st, _)| st >= t)
                .filter(|&(st, _)| st == t)
                .map(|(_, v)| v)
        };
        if let Some(h) = self.head.as_ref().filter(|h| h.mint <= t && t <= h.maxt()) {
            return in_chunk(h.app.bytes());
        }
        let i = self.sealed.partition_point(|c| c.maxt < t);
        self.sealed
            .get(i)
            .filter(|c| c.mint <= t)
            .and_then(|c| in_chunk(&c.bytes))
    }

    /// The oldest float sample's timestamp.
    fn min_time(&self) -> Option<i64> {
        self.sealed.first().map(|c| c.mint).or_else(|| {
            self.head
                .as_ref()
                .filter(|h| h.app.num_samples() > 0)
                .map(|h| h.mint)
        })
    }

    /// The newest float sample's timestamp.
    fn max_time(&self) -> Option<i64> {
        self.head
            .as_ref()
            .filter(|h| h.app.num_samples() > 0)
            .map(|h| h.maxt())
    }
}

/// The bytes of a chunk that stands for its known newest sample alone
/// (see [`Shard::newest_for_query`]): none, shared.
pub(super) fn no_bytes() -> Arc<[u8]> {
    static NONE: std::sync::LazyLock<Arc<[u8]>> = std::sync::LazyLock::new(|| Arc::from(&[][..]));
    Arc::clone(&NONE)
}

/// A copy of the XOR chunk `bytes` with only its samples up to `until`
/// (the encoder is deterministic: the same bytes as a chunk that never
/// held the rest).
pub(super) fn clipped(bytes: &[u8], until: i64) -> Arc<[u8]> {
    let mut app = XorAppender::default();
    for (t, v) in XorIter::new(bytes).take_while(|&(t, _)| t <= until) {
        app.append(t, v);
    }
    Arc::from(app.bytes())
}

/// What a shard has appended but not yet handed to the WAL: whole frames,
/// the last of them possibly an open samples record. Filled under the
/// shard's lock, so the log holds each series' records in append order.
///
/// It also decides what readers see. Each hand-over of the frames to the
/// WAL closes a generation; a sample is visible once the generation that
/// logged it is durable, so a write the log has not taken (a full disk)
/// is never read, and an acknowledged one always is.
#[derive(Debug)]
pub(crate) struct ShardLog {
    pub(crate) frames: Vec<u8>,
    pub(crate) samples: SamplesFrame,
    /// LSN just past the last frames this shard handed to the WAL.
    pub(crate) pushed: u64,
    /// The generation the frames buffered now belong to.
    gen: u64,
    /// Every generation below this one is durable.
    durable_gen: u64,
    /// Generations handed to the WAL and not yet known durable, with the
    /// LSN that makes each so, oldest first.
    in_flight: std::collections::VecDeque<(u64, u64)>,
}

/// Hand-overs a shard tracks until the WAL has made them durable; a
/// healthy WAL keeps one or two in flight.
const MAX_IN_FLIGHT: usize = 64;

impl Default for ShardLog {
    fn default() -> Self {
        Self {
            frames: Vec::new(),
            samples: SamplesFrame::default(),
            pushed: 0,
            // Series start with generation 0: durable, nothing unlogged.
            gen: 1,
            durable_gen: 1,
            in_flight: std::collections::VecDeque::new(),
        }
    }
}

impl ShardLog {
    /// Records that this generation's frames were handed to the WAL,
    /// durable at `lsn`; later appends belong to the next one. While the
    /// WAL is stuck (a full disk), hand-overs pile up: past
    /// [`MAX_IN_FLIGHT`] the newest entry absorbs this one, so the
    /// generations it held count as durable only once `lsn` is (later,
    /// never early), and the queue stays bounded.
    pub(crate) fn handed_over(&mut self, lsn: u64) {
        self.pushed = lsn;
        let full = self.in_flight.len() >= MAX_IN_FLIGHT;
        match self.in_flight.back_mut() {
            Some(newest) if full => *newest = (self.gen, lsn),
            _ => self.in_flight.push_back((self.gen, lsn)),
        }
        self.gen += 1;
    }

    /// Catches up with the WAL, which is durable up to `durable_lsn`.
    #[inline]
    pub(crate) fn catch_up(&mut self, durable_lsn: u64) {
        while let Some(&(gen, lsn)) = self.in_flight.front() {
            if lsn > durable_lsn {
                break;
            }
            self.durable_gen = gen + 1;
            self.in_flight.pop_front();
        }
    }
}

/// The sample count in an XOR chunk's two-byte header.
fn chunk_samples(chunk: &[u8]) -> usize {
    chunk
        .get(..2)
        .map_or(0, |h| usize::from(u16::from_be_bytes([h[0], h[1]])))
}

/// A series' identity in the head: the 128-bit xxh3 of its canonical
/// label bytes, under a seed drawn once per process (so colliding label
/// sets cannot be prepared in advance). `hash` picks the shard and the
/// table bucket; `check` confirms the match (see [`Shard::find`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fingerprint {
    /// Low half: shard and bucket.
    pub hash: u64,
    /// High half.
    pub check: u64,
}

/// The [`Fingerprint`] of canonical label bytes.
#[inline]
pub fn fingerprint(canonical: &[u8]) -> Fingerprint {
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64)
    });
    let v = xxhash_rust::xxh3::xxh3_128_with_seed(canonical, seed);
    Fingerprint {
        hash: v as u64,
        check: (v >> 64) as u64,
    }
}

/// What one heap block costs beyond its bytes in glibc's allocator: an
/// 8-byte header and rounding to 16 bytes, 16 on average.
const MALLOC_OVERHEAD: usize = 16;

/// Bytes the head holds, by part.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeadMemory {
    /// Chunk bytes (with the open chunks' unwritten buffer space), chunk
    /// list entries and their `Arc` counts.
    pub chunks: usize,
    /// Series structs, with the series table's unused capacity.
    pub series: usize,
    /// Label id pairs and the interned strings they point to.
    pub labels: usize,
    /// The label lookup table and the postings lists.
    pub index: usize,
}

impl HeadMemory {
    /// All parts.
    pub fn total(&self) -> usize {
        self.chunks + self.series + self.labels + self.index
    }

    /// Adds `other`'s parts to these.
    pub fn add(&mut self, other: HeadMemory) {
        self.chunks += other.chunks;
        self.series += other.series;
        self.labels += other.labels;
        self.index += other.index;
    }
}

/// Slots the series slab grows by at least.
const SERIES_SLAB_MIN: usize = 64;

/// One shard's state.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    /// Present when the head writes a WAL.
    pub(crate) log: Option<ShardLog>,
    pub(crate) strings: Interner,
    pub(crate) series: Vec<MemSeries>,
    by_labels: HashTable<u32>,
    pub(crate) postings: Postings,
    /// Chunks, sealed and open.
    pub(crate) chunks: usize,
    /// Open chunks (one per series that has samples).
    open_chunks: usize,
    pub(crate) chunk_bytes: usize,
    /// Reserved but unwritten bytes of the open chunks' buffers.
    open_slack: usize,
    /// Samples held in all chunks.
    pub(crate) samples: usize,
    /// Histogram chunks' encoded bytes and count (in `chunks` and
    /// `samples` too).
    pub(crate) hist_bytes: usize,
    pub(crate) hist_chunks: usize,
    /// The histogram side of the series that have one, by series id.
    pub(crate) hists: hashbrown::HashMap<u64, HistSeries>,
    /// The out-of-order samples of the series that have some, by series
    /// id, and the bytes they hold.
    pub(crate) ooo: hashbrown::HashMap<u64, OooSeries>,
    pub(crate) ooo_bytes: usize,
    /// The start-time runs of the series that were sent start times
    /// (`st-storage`), by series id, and how many runs they hold.
    pub(crate) starts: hashbrown::HashMap<u64, StartRuns>,
    start_runs: usize,
    /// Every series' (name, value) ids, one run per series: one block
    /// for the shard instead of one per series, which cost a pointer,
    /// a length and the allocator's header and rounding each.
    label_ids: Vec<(StrId, StrId)>,
    /// How many times the shard was rebuilt without some of its series
    /// (which moves the others to other slots and renumbers its strings):
    /// a reader that lets the lock go mid-visit looks here on coming back.
    pub(crate) rebuilds: u64,
}

impl Shard {
    /// The sorted (name, value) ids of a series of this shard.
    #[inline]
    pub(crate) fn labels(&self, series: &MemSeries) -> &[(StrId, StrId)] {
        series.label_run(&self.label_ids)
    }

    /// The owned, sorted labels of a series of this shard.
    pub(crate) fn labels_of(&self, series: &MemSeries) -> Vec<Label> {
        self.labels(series)
            .iter()
            .map(|&(n, v)| Label {
                name: self.strings.shared(n),
                value: self.strings.shared(v),
            })
            .collect()
    }

    /// Bytes this shard holds by part, from counters (cheap enough to call
    /// after every append). Each heap block also costs the allocator's
    /// header and rounding, counted as [`MALLOC_OVERHEAD`].
    pub(crate) fn memory(&self) -> HeadMemory {
        // A sealed chunk's list entry (times, `Arc` pointer and where a
        // checkpoint saved it) and the `Arc`'s counts, plus its block's
        // overhead. An open chunk lives in
        // its series' struct; only its buffer's block has an overhead
        // (counted for all, though the smallest are still inline).
        const PER_SEALED: usize = std::mem::size_of::<SealedChunk>() + 16 + MALLOC_OVERHEAD;
        let sealed = self.chunks - self.open_chunks;
        // A histogram series' struct and its chunks' list entries, with
        // an allowance for its last sample, kept to tell duplicates.
        const PER_HIST_SERIES: usize =
            std::mem::size_of::<(u64, HistSeries)>() + 1 + 256 + MALLOC_OVERHEAD;
        HeadMemory {
            chunks: self.chunk_bytes
                + self.open_slack
                + sealed * PER_SEALED
                + self.open_chunks * MALLOC_OVERHEAD
                + self.hist_bytes
                + self.hist_chunks * PER_SEALED
                + self.hists.capacity() * PER_HIST_SERIES
                + self.ooo_bytes
                + self.ooo.capacity() * (std::mem::size_of::<(u64, OooSeries)>() + 1)
                + self.starts.capacity() * (std::mem::size_of::<(u64, StartRuns)>() + 1)
                + self.start_runs * std::mem::size_of::<StartRun>(),
            series: self.series.capacity() * std::mem::size_of::<MemSeries>(),
            labels: self.label_ids.capacity() * std::mem::size_of::<(StrId, StrId)>()
                + self.strings.heap_bytes(),
            index: self.by_labels.capacity() * (std::mem::size_of::<u32>() + 1)
                + self.postings.heap_bytes(),
        }
    }

    /// [`Shard::memory`] in all.
    pub(crate) fn accounted_bytes(&self) -> usize {
        self.memory().total()
    }

    /// Whether the series in `slot` has fingerprint `fp`.
    #[inline]
    pub(crate) fn holds(&self, slot: u32, fp: Fingerprint) -> bool {
        self.series
            .get(slot as usize)
            .is_some_and(|s| s.hash == fp.hash && s.check == fp.check)
    }

    /// The slot of the series whose canonical label bytes are `raw`
    /// (`fp` is their [`fingerprint`]).
    ///
    /// A series is recognised by the 128-bit fingerprint of those bytes
    /// (two independent 64-bit hashes, the second seeded at random per
    /// process) rather than by comparing them with its interned labels:
    /// the comparison chased the label and string pointers of every
    /// series, a cache miss or more per sample at scale. Two distinct
    /// series among ten million share a fingerprint with a probability
    /// near 10^-25. Debug builds (the test suite) still compare the bytes.
    #[inline]
    pub(crate) fn find(&self, fp: Fingerprint, raw: &[u8]) -> Option<u32> {
        let found = self.find_fingerprint(fp);
        debug_assert!(found.is_none_or(|slot| {
            matches_canonical(self.labels(&self.series[slot as usize]), &self.strings, raw)
        }));
        found
    }

    /// The slot of the series with fingerprint `fp`, when its label bytes
    /// are not at hand (a series found by a key of other labels).
    #[inline]
    pub(crate) fn find_fingerprint(&self, fp: Fingerprint) -> Option<u32> {
        self.by_labels
            .find(fp.hash, |&slot| {
                let s = &self.series[slot as usize];
                s.hash == fp.hash && s.check == fp.check
            })
            .copied()
    }

    /// Reads the bytes the next append to `slot` touches (the open chunk's
    /// state and the end of its buffer), so that they are in cache by then.
    #[inline]
    pub(crate) fn warm(&self, slot: u32) {
        if let Some(h) = self.series.get(slot as usize).and_then(|s| s.head.as_ref()) {
            // The byte itself, not a reference to it: the next sample's
            // bits are OR-ed into it.
            std::hint::black_box(h.app.bytes().last().copied());
        }
    }

    /// Adds a series with valid, sorted `labels` whose canonical bytes are
    /// `canonical`; the caller checked it is new.
    pub(crate) fn create(
        &mut self,
        id: u64,
        fp: Fingerprint,
        labels: &[(&str, &str)],
        canonical: &[u8],
    ) -> u32 {
        if let Some(log) = &mut self.log {
            log.samples.close(&mut log.frames);
            encode_series(&mut log.frames, id, canonical);
        }
        self.add(
            labels,
            MemSeries {
                id,
                hash: fp.hash,
                check: fp.check,
                labels_at: 0,
                labels_len: 0,
                sealed: Box::new([]),
                head: None,
                next_at: i64::MIN,
                unlogged_gen: 0,
                unlogged_from: i64::MAX,
            },
        )
    }

    /// Interns `labels`, gives them to `series`, indexes it under the next
    /// slot and enters it in the lookup table; returns the slot.
    fn add(&mut self, labels: &[(&str, &str)], mut series: MemSeries) -> u32 {
        if self.label_ids.capacity() - self.label_ids.len() < labels.len() {
            // A quarter more, like the series slab.
            self.label_ids
                .reserve_exact((self.label_ids.len() / 4).max(SERIES_SLAB_MIN * labels.len()));
        }
        let at = self.label_ids.len();
        for &(n, v) in labels {
            let ids = (self.strings.intern(n), self.strings.intern(v));
            self.label_ids.push(ids);
        }
        series.labels_at = at as u32;
        series.labels_len = labels.len() as u32 | (series.labels_len & FLAGS);
        let slot = self.series.len() as u32;
        self.postings.add(slot, &self.label_ids[at..]);
        let hash = series.hash;
        if self.series.len() == self.series.capacity() {
            // A quarter more, not double: at most a fifth of the slab is
            // unused capacity, which the head accounts as memory.
            self.series
                .reserve_exact((self.series.len() / 4).max(SERIES_SLAB_MIN));
        }
        self.series.push(series);
        let all = &self.series;
        self.by_labels
            .insert_unique(hash, slot, |&s| all[s as usize].hash);
        slot
    }

    /// Gives the series in `slot` the chunks of a checkpoint image (sealed
    /// chunks as (mint, maxt, bytes, where a checkpoint saved them), the
    /// open one as (mint, maxt, bytes), and when it must be cut), unless
    /// it holds samples already. The open chunk is rebuilt
    /// by appending its samples, which yields the same bytes (the encoder
    /// is deterministic). Returns `false` if a chunk does not decode.
    pub(crate) fn restore_chunks(
        &mut self,
        slot: u32,
        sealed: &[(i64, i64, &[u8], u64)],
        open: Option<(i64, i64, &[u8])>,
        next_at: i64,
    ) -> bool {
        let Some(series) = self.series.get_mut(slot as usize) else {
            return false;
        };
        if series.head.is_some() || !series.sealed.is_empty() {
            return true;
        }
        let mut bytes = 0;
        series.sealed = sealed
            .iter()
            .map(|&(mint, maxt, b, saved)| {
                bytes += b.len();
                SealedChunk {
                    mint,
                    maxt,
                    bytes: Arc::from(b),
                    saved: AtomicU64::new(saved),
                }
            })
            .collect();
        if let Some((mint, maxt, b)) = open {
            let mut app = XorAppender::with_capacity((b.len() + b.len() / 8).clamp(32, 1040));
            let mut it = XorIter::new(b);
            for (t, v) in it.by_ref() {
                app.append(t, v);
            }
            let head = HeadChunk { app, mint };
            if it.err().is_some() || head.app.bytes() != b || head.maxt() != maxt {
                return false;
            }
            bytes += b.len();
            series.head = Some(head);
            self.open_slack += series.open_slack();
        }
        series.next_at = next_at;
        self.chunks += sealed.len() + usize::from(open.is_some());
        self.open_chunks += usize::from(open.is_some());
        self.chunk_bytes += bytes;
        self.samples += sealed
            .iter()
            .map(|c| c.2)
            .chain(open.map(|c| c.2))
            .map(chunk_samples)
            .sum::<usize>();
        true
    }

    /// Drops sealed chunks that end before `cutoff` and removes series with
    /// no sample at or after it. Removing series rebuilds the shard's
    /// table, strings and postings (slots are dense), so it costs a pass
    /// over the shard; it runs rarely, from the retention task.
    /// Returns (chunks dropped, series removed); the metric names of the
    /// series removed are added to `removed`.
    ///
    /// With `keep_ooo` (a block cut: blocks hold what is older, except
    /// late samples that came after the cut took its copy), out-of-order
    /// samples stay. A series that holds some (after this) is kept without
    /// its older in-order chunks, open ones included.
    pub(crate) fn retain(
        &mut self,
        cutoff: i64,
        keep_ooo: bool,
        removed: &mut Vec<Box<str>>,
    ) -> (usize, usize) {
        let mut dropped = 0;
        let mut hist_dropped = 0;
        let mut freed = 0;
        let mut dead = 0;
        let mut stripped = 0;
        for s in &mut self.series {
            let old = s.sealed.iter().take_while(|c| c.maxt < cutoff).count();
            if old > 0 {
                freed += s.sealed[..old].iter().map(|c| c.bytes.len()).sum::<usize>();
                self.samples -= s.sealed[..old]
                    .iter()
                    .map(|c| chunk_samples(&c.bytes))
                    .sum::<usize>();
                let mut sealed = std::mem::take(&mut s.sealed).into_vec();
                sealed.drain(..old);
                s.sealed = sealed.into_boxed_slice();
                dropped += old;
            }
            if let Some(h) = s.has_hist().then(|| self.hists.get_mut(&s.id)).flatten() {
                let (chunks, bytes, samples) = h.retain(cutoff);
                self.hist_chunks -= chunks;
                self.hist_bytes -= bytes;
                self.samples -= samples;
                hist_dropped += chunks;
            }
            if let Some(r) = self.starts.get_mut(&s.id) {
                // What the chunks still held (one may cross the cutoff)
                // read from their first sample on.
                let kept = [
                    s.sealed.first().map(|c| c.mint),
                    s.head.as_ref().map(|h| h.mint),
                    self.hists.get(&s.id).and_then(HistSeries::mint),
                ];
                let floor = kept
                    .into_iter()
                    .flatten()
                    .min()
                    .map_or(cutoff, |m| m.min(cutoff));
                let before = r.runs().len();
                r.drop_before(floor);
                self.start_runs -= before - r.runs().len();
            }
            if s.has_ooo() {
                let empty = match self.ooo.get_mut(&s.id) {
                    Some(o) => {
                        if !keep_ooo {
                            let (samples, bytes) = o.retain(cutoff);
                            self.samples -= samples;
                            self.ooo_bytes = self.ooo_bytes.wrapping_add_signed(bytes);
                        }
                        o.is_empty()
                    }
                    None => true,
                };
                if empty {
                    self.ooo.remove(&s.id);
                    s.labels_len &= !OOO_FLAG;
                }
            }
            // A series holding late samples stays (they are not in any
            // block yet), without what it held in order before `cutoff`.
            let old = newest_of(s, &self.hists).is_none_or(|t| t < cutoff);
            let late = s.has_ooo();
            dead += usize::from(old && !late);
            stripped += usize::from(old && late && (s.head.is_some() || s.has_hist()));
        }
        // Histogram chunks are counted apart (`hist_chunks`).
        self.chunks -= dropped;
        dropped += hist_dropped;
        self.chunk_bytes -= freed;
        if dead + stripped == 0 {
            return (dropped, 0);
        }
        let old = std::mem::take(self);
        let Shard {
            log,
            strings,
            series,
            label_ids: old_ids,
            mut hists,
            mut ooo,
            mut starts,
            rebuilds,
            ..
        } = old;
        self.log = log;
        self.rebuilds = rebuilds + 1;
        let mut labels = Vec::new();
        for mut s in series {
            let old = newest_of(&s, &hists).is_none_or(|t| t < cutoff);
            if old && s.has_ooo() {
                // Kept for its late samples: what it held in order is in
                // the block, and an open chunk left here would grow across
                // the block's end.
                dropped += s.sealed.len() + usize::from(s.head.is_some());
                s.sealed = Box::new([]);
                s.head = None;
                if let Some(h) = hists.remove(&s.id) {
                    dropped += h.footprint().1;
                }
                s.labels_len &= !HIST_FLAG;
            } else if old {
                if let Some(&(_, v)) = s
                    .label_run(&old_ids)
                    .iter()
                    .find(|&&(n, _)| strings.get(n) == "__name__")
                {
                    removed.push(strings.get(v).into());
                }
                // Its sealed chunks went above; the open one goes with it.
                dropped += s.sealed.len() + usize::from(s.head.is_some());
                if let Some(h) = hists.remove(&s.id) {
                    dropped += h.footprint().1;
                }
                ooo.remove(&s.id);
                starts.remove(&s.id);
                continue;
            }
            if let Some(r) = starts.remove(&s.id) {
                self.start_runs += r.runs().len();
                self.starts.insert(s.id, r);
            }
            if let Some(o) = s.has_ooo().then(|| ooo.remove(&s.id)).flatten() {
                self.samples += o.len();
                self.ooo_bytes += o.bytes();
                self.ooo.insert(s.id, o);
            }
            if let Some(h) = s.has_hist().then(|| hists.remove(&s.id)).flatten() {
                let (bytes, chunks) = h.footprint();
                self.hist_bytes += bytes;
                self.hist_chunks += chunks;
                self.samples += h.sample_count();
                self.hists.insert(s.id, h);
            }
            labels.clear();
            labels.extend(
                s.label_run(&old_ids)
                    .iter()
                    .map(|&(n, v)| (strings.get(n), strings.get(v))),
            );
            self.chunks += s.sealed.len() + usize::from(s.head.is_some());
            self.open_chunks += usize::from(s.head.is_some());
            self.chunk_bytes += s.sealed.iter().map(|c| c.bytes.len()).sum::<usize>()
                + s.head.as_ref().map_or(0, |h| h.app.bytes().len());
            self.open_slack += s.open_slack();
            self.samples += s
                .sealed
                .iter()
                .map(|c| chunk_samples(&c.bytes))
                .sum::<usize>()
                + s.head
                    .as_ref()
                    .map_or(0, |h| usize::from(h.app.num_samples()));
            self.add(&labels, s);
        }
        (dropped, dead)
    }

    /// Appends `samples` to the series in `slot`, counting each outcome;
    /// samples outside `[min_t, max_t]` are out of bounds.
    #[inline]
    pub(crate) fn append(
        &mut self,
        slot: u32,
        samples: impl Iterator<Item = (i64, f64)>,
        bounds: Bounds,
        opts: &HeadOptions,
        counts: &mut AppendCounts,
    ) {
        let Bounds {
            min_t,
            max_t,
            inorder_from,
            ooo_from,
        } = bounds;
        let Some(series) = self.series.get_mut(slot as usize) else {
            return;
        };
        // Floats and histograms share one timeline.
        let hist_maxt = match series.has_hist() {
            true => self.hists.get(&series.id).and_then(HistSeries::maxt),
            false => None,
        };
        for (t, v) in samples {
            if t > max_t || t < min_t {
                counts.reject(SampleError::OutOfBounds, t);
                continue;
            }
            if let Some(ht) = hist_maxt.filter(|&ht| t <= ht) {
                // Older than a histogram of the series: late within the
                // window, as against floats.
                let e = match t == ht {
                    true => SampleError::Duplicate,
                    false if t >= ooo_from => {
                        let late = late!(self);
                        insert_late(series, late, t, LateValue::Float(v), opts.ooo_cap, counts);
                        continue;
                    }
                    false if ooo_from != i64::MAX => SampleError::OutOfBounds,
                    false => SampleError::OutOfOrder,
                };
                counts.reject(e, t);
                continue;
            }
            // Older than the newest block's end: out of order (a block
            // holds what was in order there), or too old.
            if t < inorder_from {
                match t >= ooo_from {
                    true => {
                        let late = late!(self);
                        insert_late(series, late, t, LateValue::Float(v), opts.ooo_cap, counts);
                    }
                    false => counts.reject(SampleError::OutOfBounds, t),
                }
                continue;
            }
            let slack = series.open_slack();
            match series.append(t, v, opts) {
                Ok(Some((delta, created))) => {
                    self.open_slack = (self.open_slack + series.open_slack()) - slack;
                    counts.appended += 1;
                    counts.newest = counts.newest.max(t);
                    self.samples += 1;
                    self.chunk_bytes = self.chunk_bytes.wrapping_add_signed(delta);
                    self.chunks += usize::from(created != NewChunk::No);
                    self.open_chunks += usize::from(created == NewChunk::Opened);
                    if let Some(log) = &mut self.log {
                        log.samples.push(&mut log.frames, series.id, t, v);
                        series.note_unlogged(log, t);
                    }
                }
                Ok(None) => counts.appended += 1,
                // Older than the series' newest, within the window: out
                // of order, unless a sample is at `t` already.
                Err(SampleError::OutOfOrder) if t >= ooo_from => {
                    let late = late!(self);
                    insert_late(series, late, t, LateValue::Float(v), opts.ooo_cap, counts);
                }
                // Too old for the window: as Prometheus' "too old sample",
                // out of bounds.
                Err(SampleError::OutOfOrder) if ooo_from != i64::MAX => {
                    counts.reject(SampleError::OutOfBounds, t)
                }
                Err(e) => counts.reject(e, t),
            }
        }
    }
}

impl Shard {
    /// Notes the start times of samples appended to the series in `slot`
    /// (`(t, st)`, in time order; st 0 when none was sent), logging each
    /// run they start. A series that never had a start time keeps none.
    pub(crate) fn note_starts(&mut self, slot: u32, starts: impl Iterator<Item = (i64, i64)>) {
        let Some(series) = self.series.get(slot as usize) else {
            return;
        };
        let id = series.id;
        // Only samples the series took in order: one refused (too new, a
        // duplicate) or stored out of order keeps no start time, and a
        // refused future one must not hold back the samples after it.
        let Some(newest) = self.max_time_of(series) else {
            return;
        };
        let mut starts = starts.filter(|&(t, _)| t <= newest).peekable();
        let runs = match self.starts.get_mut(&id) {
            Some(r) => r,
            None => {
                // Nothing kept until a start time arrives.
                while starts.next_if(|&(_, st)| st == 0).is_some() {}
                if starts.peek().is_none() {
                    return;
                }
                self.starts.entry(id).or_default()
            }
        };
        let mut entries = Vec::new();
        for (t, st) in starts {
            if let Some(run) = runs.note(t, st) {
                self.start_runs += 1;
                if self.log.is_some() {
                    crate::storage::starts::put_entry(&mut entries, id, &run);
                }
            }
        }
        if let Some(log) = &mut self.log {
            if !entries.is_empty() {
                log.samples.close(&mut log.frames);
                crate::wal::record::encode_starts_frame(&mut log.frames, &entries);
            }
        }
    }

    /// Takes back a run of the series in `slot` from the WAL or a
    /// checkpoint (keyed by the series' own id, which may differ from the
    /// reference the log used for it).
    pub(crate) fn restore_start(&mut self, slot: u32, run: StartRun) {
        let Some(series) = self.series.get(slot as usize) else {
            return;
        };
        let runs = self.starts.entry(series.id).or_default();
        let before = runs.runs().len();
        runs.restore(run);
        self.start_runs = self.start_runs + runs.runs().len() - before;
    }

    /// The start-time runs of a series, if it has any.
    pub(crate) fn starts_of(&self, series: &MemSeries) -> &[StartRun] {
        self.starts.get(&series.id).map_or(&[], |r| r.runs())
    }
}

/// A shard's out-of-order side, borrowed apart from its series.
struct Late<'a> {
    ooo: &'a mut hashbrown::HashMap<u64, OooSeries>,
    hists: &'a hashbrown::HashMap<u64, HistSeries>,
    bytes: &'a mut usize,
    samples: &'a mut usize,
    log: &'a mut Option<ShardLog>,
}

/// A late sample's value.
#[derive(Clone, Copy)]
enum LateValue<'h> {
    Float(f64),
    Hist(&'h HistSample),
}

/// Stores a late sample at `t` in `series`, unless a sample (float or
/// histogram, in order or late) is at `t` already: the same value is
/// taken once, another is a duplicate. A float is logged here; a
/// histogram is logged by the caller, in its histograms record, when this
/// says it was stored.
#[inline(never)]
fn insert_late(
    series: &mut MemSeries,
    late: Late<'_>,
    t: i64,
    value: LateValue<'_>,
    cap: usize,
    counts: &mut AppendCounts,
) -> bool {
    let id = series.id;
    let held_late = late.ooo.get(&id);
    let float_at = || {
        series
            .value_at(t)
            .or_else(|| held_late.and_then(|o| o.get(t)))
    };
    let hist_held = || {
        held_late
            .and_then(|o| o.get_hist(t))
            .cloned()
            .or_else(|| hist_at(late.hists, series, t))
    };
    let same = match value {
        LateValue::Float(v) => match float_at() {
            Some(f) => Some(f.to_bits() == v.to_bits()),
            None => hist_held().map(|_| false),
        },
        LateValue::Hist(h) => match hist_held() {
            Some(held) => Some(held.same(h)),
            None => float_at().map(|_| false),
        },
    };
    match same {
        Some(true) => {
            counts.appended += 1;
            false
        }
        Some(false) => {
            counts.reject(SampleError::Duplicate, t);
            false
        }
        None => {
            let o = late.ooo.entry(id).or_default();
            let delta = match value {
                LateValue::Float(v) => o.insert(t, v, cap),
                LateValue::Hist(h) => o.insert_hist(t, h),
            };
            series.labels_len |= OOO_FLAG;
            *late.bytes = late.bytes.wrapping_add_signed(delta);
            *late.samples += 1;
            counts.appended += 1;
            counts.out_of_order += 1;
            if let Some(log) = late.log {
                if let LateValue::Float(v) = value {
                    log.samples.push(&mut log.frames, id, t, v);
                }
                o.note_unlogged(t, log.gen, log.durable_gen);
            }
            true
        }
    }
}

/// The in-order histogram of `series` at `t`, if any.
fn hist_at(
    hists: &hashbrown::HashMap<u64, HistSeries>,
    series: &MemSeries,
    t: i64,
) -> Option<HistSample> {
    if !series.has_hist() {
        return None;
    }
    hists
        .get(&series.id)?
        .samples(t, t, i64::MAX)
        .into_iter()
        .next()
        .map(|(_, h)| h)
}

/// The newest timestamp of `s`, floats and histograms.
fn newest_of(s: &MemSeries, hists: &hashbrown::HashMap<u64, HistSeries>) -> Option<i64> {
    let h = s
        .has_hist()
        .then(|| hists.get(&s.id))
        .flatten()
        .and_then(HistSeries::maxt);
    match (s.max_time(), h) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl Shard {
    /// The series' histogram side, if it has one.
    #[inline]
    pub(crate) fn hist_of(&self, s: &MemSeries) -> Option<&HistSeries> {
        s.has_hist().then(|| self.hists.get(&s.id)).flatten()
    }

    /// The oldest timestamp of `s`, floats (in order or not) and
    /// histograms.
    pub(crate) fn min_time_of(&self, s: &MemSeries) -> Option<i64> {
        [
            s.min_time(),
            self.hist_of(s).and_then(HistSeries::mint),
            self.ooo_of(s).and_then(OooSeries::min_time),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Calls `f` with each series' late samples older than `below`: its
    /// id, labels and those samples in time order (for a cut to hand to
    /// blocks).
    pub(crate) fn late_before(
        &self,
        below: i64,
        mut f: impl FnMut(u64, Vec<Label>, Vec<(i64, f64)>, Vec<(i64, HistSample)>),
    ) {
        for s in self.series.iter().filter(|s| s.has_ooo()) {
            let Some(o) = self.ooo.get(&s.id) else {
                continue;
            };
            if o.min_time().is_none_or(|t| t >= below) {
                continue;
            }
            f(
                s.id,
                self.labels_of(s),
                o.samples_in(i64::MIN, below - 1, u64::MAX),
                o.hists_in(i64::MIN, below - 1, u64::MAX),
            );
        }
    }

    /// Drops the late samples of series `id` at `times` (sorted): those a
    /// cut handed to blocks.
    pub(crate) fn remove_late(&mut self, id: u64, times: &[i64]) {
        let Some(o) = self.ooo.get_mut(&id) else {
            return;
        };
        let (samples, bytes) = o.remove_times(times);
        self.samples -= samples;
        self.ooo_bytes = self.ooo_bytes.wrapping_add_signed(bytes);
        if o.is_empty() {
            // Its flag is cleared at the next pass of `retain`.
            self.ooo.remove(&id);
        }
    }

    /// Drops every late sample older than `below` (replay: a cut handed
    /// them to blocks).
    pub(crate) fn drop_late_before(&mut self, below: i64) {
        let mut freed = 0isize;
        let mut samples = 0;
        self.ooo.retain(|_, o| {
            let (n, bytes) = o.retain(below);
            samples += n;
            freed += bytes;
            !o.is_empty()
        });
        self.samples -= samples;
        self.ooo_bytes = self.ooo_bytes.wrapping_add_signed(freed);
    }

    /// The newest time of the series' late samples that readers may see
    /// (durable in the log).
    pub(crate) fn late_newest(&self, s: &MemSeries) -> Option<i64> {
        let durable = self.log.as_ref().map_or(u64::MAX, |l| l.durable_gen);
        self.ooo_of(s)?.visible_max_time(durable)
    }

    /// The series' out-of-order samples, if it has some.
    #[inline]
    pub(crate) fn ooo_of(&self, s: &MemSeries) -> Option<&OooSeries> {
        s.has_ooo().then(|| self.ooo.get(&s.id)).flatten()
    }

    /// The float chunks of `s` overlapping `[mint, maxt]` for a query,
    /// up to `until` (see [`MemSeries::visible_until`]), in-order ones
    /// from `inorder_from` on (blocks answer for older times); with
    /// out-of-order samples in the range, its samples there merged into
    /// new chunks, in time order and each time once.
    pub(crate) fn chunks_for_query(
        &self,
        s: &MemSeries,
        (mint, maxt): (i64, i64),
        until: i64,
        inorder_from: i64,
    ) -> Vec<ChunkRef> {
        let chunks = match mint.max(inorder_from) {
            from if from <= maxt => s.snapshot_chunks(from, maxt, until),
            _ => Vec::new(),
        };
        let Some(o) = self.ooo_of(s) else {
            return chunks;
        };
        let durable = self.log.as_ref().map_or(u64::MAX, |l| l.durable_gen);
        let extra = o.samples_in(mint, maxt, durable);
        if extra.is_empty() {
            return chunks;
        }
        let merged = merge_samples(chunks.iter().map(|c| &*c.bytes), &extra, i64::MIN, i64::MAX);
        encode_xor(&merged, MERGED_CHUNK_SAMPLES)
    }

    /// For a reader of the newest float sample in `[mint, maxt]` alone:
    /// the open chunk of `s`'s first timestamp and that sample, when the
    /// open chunk holds it and `s` has no late samples to merge (a chunk
    /// without bytes then stands for it). `None` otherwise: read the
    /// chunks.
    pub(crate) fn newest_for_query(
        &self,
        s: &MemSeries,
        (mint, maxt): (i64, i64),
        until: i64,
        inorder_from: i64,
    ) -> Option<(i64, i64, f64)> {
        if s.has_ooo() {
            return None;
        }
        let h = s.head.as_ref()?;
        let (t, v) = h.app.last()?;
        if t < mint.max(inorder_from) || t > maxt || t > until || t != h.maxt() {
            return None;
        }
        Some((h.mint, t, v))
    }

    /// The newest timestamp of `s`, floats and histograms.
    pub(crate) fn max_time_of(&self, s: &MemSeries) -> Option<i64> {
        newest_of(s, &self.hists)
    }

    /// The in-order chunks of `s` (floats and histograms, sealed and open)
    /// with samples in `[lo, hi)`, in time order, for a block (its late
    /// samples are handed over apart, see [`Shard::late_before`]). A chunk
    /// inside the range is copied; one that crosses its edge (cut under
    /// another block range, before a restart that changed it) gives the
    /// block its samples in the range, encoded again, and stays in the
    /// head for the next range.
    pub(crate) fn chunks_in(
        &self,
        s: &MemSeries,
        lo: i64,
        hi: i64,
        opts: &HeadOptions,
    ) -> Vec<BlockChunk> {
        let held = |bytes: &[u8]| bytes.len() >= 2 && bytes[..2] != [0, 0];
        let float = |mint: i64, maxt: i64, data: Arc<[u8]>| BlockChunk {
            mint,
            maxt,
            encoding: Encoding::Xor,
            data,
        };
        let mut out: Vec<BlockChunk> = Vec::new();
        let open = s.open_chunk();
        let chunks = s
            .sealed
            .iter()
            .map(|c| (c.mint, c.maxt, &*c.bytes, Some(&c.bytes)))
            .chain(open.map(|(mint, maxt, bytes)| (mint, maxt, bytes, None)));
        for (mint, maxt, bytes, shared) in chunks {
            if !held(bytes) || maxt < lo || mint >= hi {
                continue;
            }
            if mint >= lo && maxt < hi {
                out.push(float(
                    mint,
                    maxt,
                    shared.map_or_else(|| Arc::from(bytes), Arc::clone),
                ));
                continue;
            }
            let part: Vec<(i64, f64)> = XorIter::new(bytes)
                .filter(|&(t, _)| lo <= t && t < hi)
                .collect();
            out.extend(
                encode_xor(&part, MERGED_CHUNK_SAMPLES)
                    .into_iter()
                    .map(|c| float(c.mint, c.maxt, c.bytes.into_shared())),
            );
        }
        if let Some(h) = self.hist_of(s) {
            let encoding = |kind| match kind {
                HistogramKind::Float => Encoding::FloatHistogram,
                HistogramKind::Int => Encoding::Histogram,
            };
            let mut crossing = Vec::new();
            for (mint, maxt, kind, bytes) in h.chunks() {
                if !held(bytes) || maxt < lo || mint >= hi {
                    continue;
                }
                if mint >= lo && maxt < hi {
                    out.push(BlockChunk {
                        mint,
                        maxt,
                        encoding: encoding(kind),
                        data: Arc::from(bytes),
                    });
                } else {
                    decode_histograms(kind, bytes, lo, hi - 1, &mut crossing);
                }
            }
            if !crossing.is_empty() {
                out.extend(super::hist_series::encode(&crossing, opts).into_iter().map(
                    |(mint, maxt, kind, data)| BlockChunk {
                        mint,
                        maxt,
                        encoding: encoding(kind),
                        data,
                    },
                ));
            }
            out.sort_by_key(|c| c.mint);
        }
        out
    }

    /// Histogram samples of `s` with `mint <= t <= maxt`, up to `until`
    /// (see [`MemSeries::visible_until`]).
    /// In-order ones from `inorder_from` on (blocks answer for older
    /// times); late ones in the whole range, merged in, each time once.
    pub(crate) fn histograms_of(
        &self,
        s: &MemSeries,
        (mint, maxt): (i64, i64),
        until: i64,
        inorder_from: i64,
    ) -> Vec<(i64, HistSample)> {
        let from = mint.max(inorder_from);
        let mut out = match (self.hist_of(s), from <= maxt) {
            (Some(h), true) => h.samples(from, maxt, until),
            _ => Vec::new(),
        };
        let Some(o) = self.ooo_of(s) else {
            return out;
        };
        let durable = self.log.as_ref().map_or(u64::MAX, |l| l.durable_gen);
        let late = o.hists_in(mint, maxt, durable);
        if !late.is_empty() {
            // In-order first: it wins a time both hold.
            out.extend(late);
            out.sort_by_key(|h| h.0);
            out.dedup_by_key(|h| h.0);
        }
        out
    }

    /// Gives the series in `slot` the histogram chunks of a checkpoint
    /// image, unless it holds histograms already; `false` if a chunk does
    /// not decode.
    pub(crate) fn restore_histograms(
        &mut self,
        slot: u32,
        image: &super::hist_series::HistImage<'_>,
    ) -> bool {
        let Some(series) = self.series.get_mut(slot as usize) else {
            return false;
        };
        if series.has_hist() {
            return true;
        }
        let sealed = image
            .sealed
            .iter()
            .map(|&(mint, maxt, kind, b)| super::hist_series::SealedHist {
                mint,
                maxt,
                kind,
                bytes: Arc::from(b),
            })
            .collect();
        let Some(h) = HistSeries::restore(sealed, image.open, image.next_at) else {
            return false;
        };
        let (bytes, chunks) = h.footprint();
        self.hist_bytes += bytes;
        self.hist_chunks += chunks;
        self.samples += h.sample_count();
        series.labels_len |= HIST_FLAG;
        self.hists.insert(series.id, h);
        true
    }

    /// Appends histogram samples to the series in `slot`, counting each
    /// outcome, and logs the stored ones (one histograms record per call).
    /// Samples outside `[min_t, max_t]` are out of bounds.
    pub(crate) fn append_histograms<'h>(
        &mut self,
        slot: u32,
        samples: impl Iterator<Item = (i64, &'h HistSample)>,
        Bounds {
            min_t,
            max_t,
            inorder_from,
            ooo_from,
        }: Bounds,
        opts: &HeadOptions,
        counts: &mut AppendCounts,
    ) {
        let Some(series) = self.series.get_mut(slot as usize) else {
            return;
        };
        let mut entries = Vec::new();
        let mut newest = None;
        for (t, h) in samples {
            if t > max_t || t < min_t {
                counts.reject(SampleError::OutOfBounds, t);
                continue;
            }
            let result = match t < inorder_from {
                // Older than the newest block's end: late, or too old
                // (out of bounds without a window, as for floats).
                true if ooo_from == i64::MAX => Err(SampleError::OutOfBounds),
                true => Err(SampleError::OutOfOrder),
                false => {
                    let float_maxt = series.max_time();
                    series.labels_len |= HIST_FLAG;
                    let hist = self.hists.entry(series.id).or_default();
                    hist.append(t, h, float_maxt, opts)
                }
            };
            match result {
                Ok(Some(delta)) => {
                    counts.appended += 1;
                    counts.newest = counts.newest.max(t);
                    self.samples += 1;
                    self.hist_bytes = self.hist_bytes.wrapping_add_signed(delta.bytes);
                    self.hist_chunks += delta.chunks;
                    if self.log.is_some() {
                        crate::wal::record::histograms::put_entry(&mut entries, series.id, t, h);
                        newest = Some(t);
                    }
                }
                Ok(None) => counts.appended += 1,
                // Within the window: late, as floats are.
                Err(SampleError::OutOfOrder) if t >= ooo_from => {
                    let late = late!(self);
                    let stored =
                        insert_late(series, late, t, LateValue::Hist(h), opts.ooo_cap, counts);
                    if stored && self.log.is_some() {
                        crate::wal::record::histograms::put_entry(&mut entries, series.id, t, h);
                    }
                }
                Err(SampleError::OutOfOrder) if ooo_from != i64::MAX => {
                    counts.reject(SampleError::OutOfBounds, t)
                }
                Err(e) => counts.reject(e, t),
            }
        }
        if let Some(log) = &mut self.log {
            if !entries.is_empty() {
                log.samples.close(&mut log.frames);
                crate::wal::record::encode_histograms_frame(&mut log.frames, &entries);
            }
            if let Some(t) = newest {
                series.note_unlogged(log, t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> HeadOptions {
        HeadOptions::default()
    }

    fn series() -> MemSeries {
        MemSeries {
            id: 0,
            hash: 0,
            check: 0,
            labels_at: 0,
            labels_len: 0,
            sealed: Box::new([]),
            head: None,
            next_at: i64::MIN,
            unlogged_gen: 0,
            unlogged_from: i64::MAX,
        }
    }

    #[test]
    fn series_struct_stays_small() {
        // Every active series holds one: each 8 bytes here are 8 bytes per
        // active series.
        eprintln!(
            "MemSeries {} HeadChunk {} XorAppender {}",
            std::mem::size_of::<MemSeries>(),
            std::mem::size_of::<HeadChunk>(),
            std::mem::size_of::<XorAppender>()
        );
        assert!(std::mem::size_of::<MemSeries>() <= 160);
    }

    #[test]
    fn chunks_hold_120_samples_at_a_steady_rate() {
        let mut s = series();
        // 15s spacing for 4h from an aligned start: 2h holds 480 samples,
        // which Prometheus spreads over 4 chunks of 120.
        for i in 0..960 {
            s.append(i * 15_000, i as f64, &opts()).expect("in order");
        }
        let sizes: Vec<u16> = s
            .chunks()
            .map(|(_, _, b)| u16::from_be_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(sizes, vec![120; 8]);
        // The sealed list holds exactly its chunks, no spare entries.
        assert_eq!(s.sealed.len(), 7);
        // No chunk crosses a 2h boundary.
        for (mint, maxt, _) in s.chunks() {
            assert_eq!(mint / 7_200_000, maxt / 7_200_000);
        }
    }

    #[test]
    fn chunks_are_cut_at_240_samples_and_1024_bytes() {
        let mut s = series();
        // 1ms spacing: 2h would allow far more, so the 240-sample cap cuts.
        for i in 0..1000 {
            s.append(i, 1.0, &opts()).expect("in order");
        }
        assert!(s
            .chunks()
            .all(|(_, _, b)| u16::from_be_bytes([b[0], b[1]]) <= 240));
        // Random values make big samples; the byte cap cuts before 1024.
        let mut s = series();
        let mut x = 0x1234_5678_9abc_def0u64;
        for i in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            s.append(i, f64::from_bits(x >> 2), &opts())
                .expect("in order");
        }
        assert!(s.chunks().count() > 1);
        assert!(s.chunks().all(|(_, _, b)| b.len() <= 1024));
    }

    #[test]
    fn append_rules_match_prometheus() {
        let mut s = series();
        s.append(1000, 1.0, &opts()).expect("first");
        assert_eq!(
            s.append(1000, 1.0, &opts()),
            Ok(None),
            "exact duplicate accepted"
        );
        assert_eq!(s.append(1000, 2.0, &opts()), Err(SampleError::Duplicate));
        assert_eq!(s.append(999, 1.0, &opts()), Err(SampleError::OutOfOrder));
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        s.append(2000, stale, &opts()).expect("stale marker");
        let (_, _, bytes) = s.chunks().last().expect("a chunk");
        let got: Vec<_> = crate::storage::chunk::XorIter::new(bytes)
            .map(|(t, v)| (t, v.to_bits()))
            .collect();
        assert_eq!(
            got,
            vec![(1000, 1.0f64.to_bits()), (2000, 0x7ff0_0000_0000_0002)]
        );
    }

    /// A shard with a log, holding one series in slot 0.
    fn logged_shard() -> Shard {
        let mut shard = Shard {
            log: Some(ShardLog::default()),
            ..Shard::default()
        };
        let canonical = b"x";
        let fp = fingerprint(canonical);
        shard.create(1, fp, &[("__name__", "x")], canonical);
        shard
    }

    fn append(shard: &mut Shard, t: i64) {
        let mut c = AppendCounts::default();
        shard.append(
            0,
            std::iter::once((t, t as f64)),
            Bounds {
                min_t: i64::MIN,
                max_t: i64::MAX,
                inorder_from: i64::MIN,
                ooo_from: i64::MAX,
            },
            &opts(),
            &mut c,
        );
        assert_eq!(c.appended, 1);
    }

    fn visible(shard: &Shard) -> i64 {
        shard.series[0].visible_until(shard.log.as_ref())
    }

    #[test]
    fn samples_are_visible_once_the_log_holds_them_durably() {
        let mut shard = logged_shard();
        append(&mut shard, 1000);
        append(&mut shard, 2000);
        // Not yet handed to the WAL: nothing is visible.
        assert_eq!(visible(&shard), 999);
        let log = shard.log.as_mut().expect("log");
        log.handed_over(100);
        log.catch_up(99);
        assert_eq!(visible(&shard), 999, "LSN 100 is not durable yet");
        // Appended while generation 1 is in flight: generation 2.
        append(&mut shard, 3000);
        let log = shard.log.as_mut().expect("log");
        log.catch_up(100);
        // Generation 1 is durable, but the series' newest sample is in
        // generation 2, so it still hides from its oldest unlogged sample:
        // never more than the log holds.
        assert_eq!(visible(&shard), 999);
        let log = shard.log.as_mut().expect("log");
        log.handed_over(200);
        log.catch_up(200);
        assert_eq!(visible(&shard), i64::MAX);
        // Once durable, the next append starts a new unlogged run at its own
        // time, not at the old one.
        append(&mut shard, 4000);
        assert_eq!(visible(&shard), 3999);
        let log = shard.log.as_mut().expect("log");
        log.handed_over(300);
        // A refused write (the WAL is stuck below 300) stays hidden, and
        // what was durable before stays visible.
        log.catch_up(250);
        assert_eq!(visible(&shard), 3999);
        let snap = shard.series[0].snapshot_chunks(i64::MIN, i64::MAX, visible(&shard));
        let sel = crate::storage::querier::SelectedSeries {
            labels: Vec::new(),
            chunks: snap,
            histograms: Vec::new(),
            starts: Vec::new(),
        };
        let got: Vec<i64> = sel.samples(i64::MIN, i64::MAX).map(|(t, _)| t).collect();
        assert_eq!(got, vec![1000, 2000, 3000]);
    }

    #[test]
    fn without_a_log_everything_is_visible() {
        let mut shard = Shard::default();
        let fp = fingerprint(b"x");
        shard.create(1, fp, &[("__name__", "x")], b"x");
        append(&mut shard, 1000);
        assert_eq!(visible(&shard), i64::MAX);
    }

    #[test]
    fn hand_overs_to_a_stuck_wal_stay_bounded_and_never_resolve_early() {
        let mut shard = logged_shard();
        // A WAL stuck at LSN 0: 100 hand-overs fill the queue.
        for lsn in 1..=100u64 {
            shard.log.as_mut().expect("log").handed_over(lsn);
        }
        // This sample's generation is absorbed into the newest entry, and
        // so are the hand-overs after it.
        append(&mut shard, 1000);
        for lsn in 101..=200u64 {
            shard.log.as_mut().expect("log").handed_over(lsn);
        }
        let log = shard.log.as_mut().expect("log");
        assert!(log.in_flight.len() <= MAX_IN_FLIGHT);
        log.catch_up(150);
        assert_eq!(visible(&shard), 999, "resolved before its LSN was durable");
        shard.log.as_mut().expect("log").catch_up(200);
        assert_eq!(visible(&shard), i64::MAX);
        assert!(shard.log.as_ref().expect("log").in_flight.is_empty());
    }
}
