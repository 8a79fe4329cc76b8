//! The blocks the head has handed its oldest chunks to: opened at start,
//! added as the head cuts them, read by queries beside the head, and
//! deleted whole by retention.
//!
//! Queries hold the set's read lock while they select, so a block and the
//! head never both answer for the same time: the head answers from the
//! set's `floor` (the end of the newest block) on, and the head drops what
//! is below the floor only after the block that holds it is in the set.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use super::block::compact::{self, CompactError, Parent};
use super::block::tombstones::{self, Intervals, Tombstones};
use super::block::{
    read_meta, BlockChunk, BlockError, BlockMeta, ChunkMeta, ChunkReader, Encoding, IndexReader,
    SeriesWindow, Ulid,
};
use super::chunk::{
    decode_histograms, encode_xor, in_order, merge_overlapping, ChunkBytes, ChunkRef,
    HistogramKind, SharedBytes, XorIter, MERGED_CHUNK_SAMPLES,
};
use super::head::hist_series;
use super::index::{intersect, union_sorted, Matcher};
use super::labels::{Label, LabelStr};
use super::selected::SelectedSeries;
use super::starts::{self, StartRun};
use super::{Stop, Stopped};

/// Prometheus' chunk encodings, as a block's segments mark them.
const XOR: u8 = 1;
const HISTOGRAM: u8 = 2;
const FLOAT_HISTOGRAM: u8 = 3;

/// Series visited between two looks at a read's stop condition.
const VISIT_BATCH: usize = 1024;

/// One block on disk, open for reading: its index in memory, its chunks
/// read where they lie in its mapped segments.
#[derive(Debug)]
pub struct Block {
    meta: BlockMeta,
    dir: PathBuf,
    index: IndexReader,
    chunks: ChunkReader,
    disk_bytes: u64,
    /// Start-time runs by series ID, from the block's start-times file
    /// (empty without one).
    starts: std::collections::HashMap<u32, Vec<StartRun>>,
    /// Deleted time ranges by series ID, from its tombstones file: every
    /// read leaves them out. Replaced whole when a deletion adds some.
    tombstones: RwLock<Arc<Tombstones>>,
    /// Held by a deletion from reading the tombstones to replacing them.
    deleting: Mutex<()>,
}

impl Block {
    /// Opens and checks the block in `dir`: its meta, the index's table of
    /// contents, symbol table and postings offset table, and the chunk
    /// segments' headers.
    pub fn open(dir: &Path) -> Result<Self, BlockError> {
        let meta = read_meta(dir)?;
        let index = IndexReader::open(&dir.join("index"))?;
        // Series entries, postings lists and chunks are checked when read:
        // reading them all here would make a start as slow as the
        // retention is long.
        let chunks = ChunkReader::open(&dir.join("chunks"))?;
        let tombstones = tombstones::read(dir)
            .map_err(|e| BlockError::io(dir.join(tombstones::FILE).display(), &e))?;
        if meta.num_tombstones != tombstones.total() {
            // A crash between a deletion's two files: the tombstones are
            // right, the stats catch up.
            if let Err(e) = super::block::set_tombstone_count(dir, tombstones.total()) {
                tracing::warn!(block = %dir.display(), error = %e, "could not set the block's tombstone count");
            }
        }
        Ok(Self {
            starts: read_starts(dir)?,
            tombstones: RwLock::new(Arc::new(tombstones)),
            deleting: Mutex::new(()),
            meta,
            dir: dir.to_path_buf(),
            index,
            chunks,
            disk_bytes: dir_bytes(dir),
        })
    }

    /// What its `meta.json` says.
    pub fn meta(&self) -> &BlockMeta {
        &self.meta
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The block as compaction reads it.
    pub fn as_parent(&self) -> Parent<'_> {
        Parent {
            meta: &self.meta,
            index: &self.index,
            chunks: &self.chunks,
            starts: &self.starts,
            deleted: Arc::clone(&self.tombstones.read()),
            trim: trim_chunk,
        }
    }

    /// Deletes `[mint, maxt]` of the series matching `matchers`, as
    /// Prometheus' `Block.Delete`: each interval cut to the series' own
    /// chunks, merged into its tombstones, the file replaced before the
    /// readers see it. Returns the series that got a tombstone.
    fn delete(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Result<u64, BlockError> {
        // One deletion at a time edits the tombstones (and their file).
        let _deleting = self.deleting.lock();
        let mut next = (**self.tombstones.read()).clone();
        let mut hit = 0u64;
        let mut strings = LabelStrings::unkept();
        let done = self.for_each_match(
            matchers,
            mint,
            maxt,
            &Stop::default(),
            &mut strings,
            |_, metas, id| {
                let (Some(first), Some(last)) = (metas.first(), metas.last()) else {
                    return;
                };
                let (lo, hi) = (mint.max(first.mint), maxt.min(last.maxt));
                if lo <= hi {
                    next.add(u64::from(id), lo, hi);
                    hit += 1;
                }
            },
        );
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(Stopped) => return Err(BlockError("deletion stopped".into())),
        }
        if hit > 0 {
            tombstones::write(&self.dir, &next)
                .map_err(|e| BlockError::io(self.dir.join(tombstones::FILE).display(), &e))?;
            // The file is what counts: readers see what it holds at once,
            // whatever becomes of the stats below.
            let total = next.total();
            *self.tombstones.write() = Arc::new(next);
            // Its stats count the tombstones, as Prometheus' do; a block
            // opened later sets them again if this fails.
            super::block::set_tombstone_count(&self.dir, total)
                .map_err(|e| BlockError::io(self.dir.join("meta.json").display(), &e))?;
        }
        Ok(hit)
    }

    /// What its `meta.json` says now (its tombstone count after any
    /// deletion since it was opened).
    pub fn current_meta(&self) -> BlockMeta {
        BlockMeta {
            num_tombstones: self.tombstone_count(),
            ..self.meta.clone()
        }
    }

    /// Intervals its tombstones hold.
    pub fn tombstone_count(&self) -> u64 {
        self.tombstones.read().total()
    }

    /// Whether it holds any time of `[mint, maxt]` (its own end is
    /// exclusive).
    fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        self.meta.min_time <= maxt && self.meta.max_time > mint
    }

    /// The IDs of the series that may match: the intersection of the
    /// postings of each matcher that needs a label to be set, or every
    /// series when none does. Each candidate is checked in full later.
    fn candidates(&self, matchers: &[Matcher]) -> Result<Vec<u32>, BlockError> {
        let mut out: Option<Vec<u32>> = None;
        for m in matchers.iter().filter(|m| !m.matches("")) {
            // Each postings list is ascending (the reader checks): one is
            // taken as it is, several are merged.
            let mut lists = Vec::new();
            for v in self.index.label_values(&m.name) {
                if m.matches(v) {
                    lists.push(self.index.postings(&m.name, v)?);
                }
            }
            let ids = union_sorted(lists);
            out = Some(match out {
                None => ids,
                Some(prev) => intersect(&prev, &ids),
            });
            if out.as_ref().is_some_and(Vec::is_empty) {
                break;
            }
        }
        match out {
            Some(ids) => Ok(ids),
            None => self.index.postings("", ""),
        }
    }

    /// Calls `f` with the labels and chunk metas of each series that
    /// matches all `matchers` and has a chunk overlapping `[mint, maxt]`,
    /// in label order; their strings come from `strings`.
    fn for_each_match(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
        strings: &mut LabelStrings,
        mut f: impl FnMut(Vec<Label>, Vec<ChunkMeta>, u32),
    ) -> Result<Result<(), BlockError>, Stopped> {
        let ids = match self.candidates(matchers) {
            Ok(ids) => ids,
            Err(e) => return Ok(Err(e)),
        };
        let mut window = SeriesWindow::default();
        let mut symbols = Vec::new();
        strings.by_symbol.clear();
        let tombstones = Arc::clone(&self.tombstones.read());
        for (n, id) in ids.into_iter().enumerate() {
            if n % VISIT_BATCH == VISIT_BATCH - 1 && stop.now() {
                return Err(Stopped);
            }
            let metas = match self.index.series_symbols(id, &mut window, &mut symbols) {
                Ok(m) => m,
                Err(e) => return Ok(Err(e)),
            };
            let value = |name: &str| {
                symbols
                    .iter()
                    .find(|&&(n, _)| self.index.symbol_str(n) == name)
                    .map_or("", |&(_, v)| self.index.symbol_str(v))
            };
            if !matchers.iter().all(|m| m.matches(value(&m.name))) {
                continue;
            }
            let mut metas = metas;
            if let Some(deleted) = tombstones.get(u64::from(id)) {
                // A chunk deleted whole is not read; a series left with
                // none is not there.
                metas.retain(|c| !deleted.covers(c.mint, c.maxt));
            }
            if !metas.iter().any(|c| c.maxt >= mint && c.mint <= maxt) {
                continue;
            }
            let labels = symbols
                .iter()
                .map(|&(name, value)| Label {
                    name: strings.of(&self.index, name),
                    value: strings.of(&self.index, value),
                })
                .collect();
            f(labels, metas, id);
        }
        Ok(Ok(()))
    }

    /// Series matching all `matchers` with samples in `[mint, maxt]`, with
    /// those chunks read (floats) or decoded (histograms), sorted by labels.
    fn select(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
        strings: &mut LabelStrings,
    ) -> Result<Result<Vec<SelectedSeries>, BlockError>, Stopped> {
        // The index is read in batches of series; each batch's chunks are
        // then read (a few µs each) on free cores and counted against the
        // read budget, which the index's reader looks at as it goes.
        let mut out = Vec::new();
        let mut matched = Vec::new();
        let mut failed = None;
        let mut stopped = false;
        let r = self.for_each_match(
            matchers,
            mint,
            maxt,
            stop,
            strings,
            |labels, mut metas, id| {
                if failed.is_some() || stopped {
                    return;
                }
                metas.retain(|c| c.maxt >= mint && c.mint <= maxt);
                matched.push((labels, metas, id));
                if matched.len() >= SELECT_BATCH {
                    match self.read_matched(&mut matched, mint, maxt, stop, &mut out) {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => failed = Some(e),
                        Err(Stopped) => stopped = true,
                    }
                }
            },
        )?;
        if stopped {
            return Err(Stopped);
        }
        if let Err(e) = r {
            return Ok(Err(e));
        }
        if let Some(e) = failed {
            return Ok(Err(e));
        }
        if let Err(e) = self.read_matched(&mut matched, mint, maxt, stop, &mut out)? {
            return Ok(Err(e));
        }
        Ok(Ok(out))
    }

    /// Reads the chunks of the series in `matched` (taking them) into
    /// `out`, in order, shared among free cores.
    fn read_matched(
        &self,
        matched: &mut Vec<(Vec<Label>, Vec<ChunkMeta>, u32)>,
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
        out: &mut Vec<SelectedSeries>,
    ) -> Result<Result<(), BlockError>, Stopped> {
        let chunks: usize = matched.iter().map(|(_, metas, _)| metas.len()).sum();
        let min_part = (matched.len() * CHUNKS_PER_WORKER).div_ceil(chunks.max(1));
        let workers = crate::parallel::Workers::for_items(matched.len(), min_part.max(1));
        let mut pieces = Vec::new();
        let mut rest = std::mem::take(matched).into_iter();
        for r in workers.bounds(rest.len()) {
            pieces.push(rest.by_ref().take(r.len()).collect::<Vec<_>>());
        }
        out.reserve(pieces.iter().map(Vec::len).sum());
        for part in workers.run(pieces, |piece| self.read_series(piece, mint, maxt, stop)) {
            match part? {
                Ok(series) => out.extend(series),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(()))
    }

    /// The series `matched` (labels, chunk metas, id) with their chunks in
    /// `[mint, maxt]` checked (floats, left where they lie in the block's
    /// mapped segments) or decoded (histograms); the first error stops it.
    fn read_series(
        &self,
        matched: Vec<(Vec<Label>, Vec<ChunkMeta>, u32)>,
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Result<Vec<SelectedSeries>, BlockError>, Stopped> {
        let mut out = Vec::with_capacity(matched.len());
        let mut refs = Vec::new();
        let tombstones = Arc::clone(&self.tombstones.read());
        // Every chunk holds its segment: through a handle of this piece's
        // own, whose count no other core touches (the segment's own count,
        // shared by the cores reading this block, bounced between them on
        // every chunk).
        let mut handles: Vec<(*const u8, SharedBytes)> = Vec::new();
        for (n, (labels, metas, id)) in matched.into_iter().enumerate() {
            if n % 64 == 63 && stop.now() {
                return Err(Stopped);
            }
            let in_range = |c: &&ChunkMeta| c.maxt >= mint && c.mint <= maxt;
            refs.clear();
            refs.extend(metas.iter().filter(in_range).map(|m| m.chunk_ref));
            let mut s = SelectedSeries {
                labels,
                // Room for every chunk at once (grown chunk by chunk, the
                // list was moved four or five times a series).
                chunks: Vec::with_capacity(refs.len()),
                histograms: Vec::new(),
                starts: self
                    .starts
                    .get(&id)
                    .map(|r| starts::runs_within(r, mint, maxt).to_vec())
                    .unwrap_or_default(),
            };
            let mut wanted = metas.iter().filter(in_range);
            // The bytes read are counted once per series, not per chunk:
            // the count is shared with the other cores too.
            let mut bytes = 0;
            let read = self.chunks.chunks(&refs, |r, enc, at| {
                let Some(m) = wanted.next() else {
                    return Err(BlockError(format!("chunk {r}: not asked for")));
                };
                match enc {
                    XOR => {
                        let (segment, range) = at.place();
                        bytes += range.len();
                        let segment = local_handle(&mut handles, segment);
                        s.chunks.push(ChunkRef {
                            mint: m.mint,
                            maxt: m.maxt,
                            bytes: ChunkBytes::within(segment, range).ok_or_else(|| {
                                BlockError(format!("chunk {r}: outside its segment"))
                            })?,
                            last: None,
                        });
                    }
                    HISTOGRAM | FLOAT_HISTOGRAM => decode_histograms(
                        match enc {
                            FLOAT_HISTOGRAM => HistogramKind::Float,
                            _ => HistogramKind::Int,
                        },
                        at.bytes(),
                        mint,
                        maxt,
                        &mut s.histograms,
                    ),
                    e => return Err(BlockError(format!("chunk {r}: unknown encoding {e}"))),
                }
                Ok(())
            });
            stop.charge(bytes);
            if let Err(e) = read {
                return Ok(Err(e));
            }
            if let Some(deleted) = tombstones.get(u64::from(id)) {
                match leave_out(&mut s, deleted) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => return Ok(Err(e)),
                }
            }
            out.push(s);
        }
        Ok(Ok(out))
    }
}

/// A handle on `segment` of one reader's own, made on first use: the
/// chunks it reads hold it rather than the segment's shared handle.
fn local_handle<'h>(
    handles: &'h mut Vec<(*const u8, SharedBytes)>,
    segment: &SharedBytes,
) -> &'h SharedBytes {
    let key = Arc::as_ptr(segment).cast::<u8>();
    let at = match handles.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            handles.push((key, Arc::new(Held(Arc::clone(segment)))));
            handles.len() - 1
        }
    };
    &handles[at].1
}

/// Shared bytes held through another handle.
struct Held(SharedBytes);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        (*self.0).as_ref()
    }
}

/// `c` without the samples `deleted` names, encoded again: what
/// compaction writes of a parent's partly deleted chunk.
pub(super) fn trim_chunk(
    c: BlockChunk,
    deleted: &Intervals,
) -> Result<Vec<BlockChunk>, BlockError> {
    Ok(match c.encoding {
        Encoding::Xor => float_chunks(&left_of(&c.data, deleted)?),
        Encoding::Histogram | Encoding::FloatHistogram => {
            let kind = match c.encoding {
                Encoding::FloatHistogram => HistogramKind::Float,
                _ => HistogramKind::Int,
            };
            let mut left = Vec::new();
            decode_histograms(kind, &c.data, i64::MIN, i64::MAX, &mut left);
            left.retain(|(t, _)| !deleted.contains(*t));
            hist_chunks(&left, &crate::storage::HeadOptions::default())
        }
    })
}

/// The samples of XOR chunk `bytes` that `deleted` leaves; a damaged
/// chunk is an error, not a shorter chunk (it would be written again as
/// a sound one, and its damage lost).
fn left_of(bytes: &[u8], deleted: &Intervals) -> Result<Vec<(i64, f64)>, BlockError> {
    let mut it = XorIter::new(bytes);
    let left: Vec<(i64, f64)> = it.by_ref().filter(|(t, _)| !deleted.contains(*t)).collect();
    match it.err() {
        None => Ok(left),
        Some(e) => Err(BlockError(format!("a chunk with deleted samples: {e:?}"))),
    }
}

/// Takes `deleted`'s samples out of `s`: histograms dropped, float chunks
/// that hold some decoded and encoded again without them. False when
/// nothing is left.
pub(super) fn leave_out(s: &mut SelectedSeries, deleted: &Intervals) -> Result<bool, BlockError> {
    s.histograms.retain(|(t, _)| !deleted.contains(*t));
    if s.chunks.iter().any(|c| deleted.overlaps(c.mint, c.maxt)) {
        let mut kept = Vec::with_capacity(s.chunks.len());
        for c in std::mem::take(&mut s.chunks) {
            if !deleted.overlaps(c.mint, c.maxt) {
                kept.push(c);
                continue;
            }
            let left = left_of(&c.bytes, deleted)?;
            kept.extend(float_chunks(&left).into_iter().filter_map(|b| {
                Some(ChunkRef {
                    mint: b.mint,
                    maxt: b.maxt,
                    bytes: ChunkBytes::slice(&b.data, 0..b.data.len())?,
                    last: None,
                })
            }));
        }
        s.chunks = kept;
    }
    Ok(!(s.chunks.is_empty() && s.histograms.is_empty()))
}

/// The label strings of the series one selection reads from blocks: each
/// distinct string made once and shared by every series that has it (a
/// clone is a count, not an allocation and a copy), across the blocks too,
/// so that comparing a series' labels from two blocks compares pointers
/// (what it keeps, the selection's series hold anyway).
#[derive(Default)]
pub(crate) struct LabelStrings {
    /// By their text.
    by_text: hashbrown::HashSet<LabelStr>,
    /// The block being read's symbols, by id.
    by_symbol: hashbrown::HashMap<usize, LabelStr>,
    /// Makes each string anew and keeps none: for a reader that lets its
    /// series' labels go as it reads them.
    unkept: bool,
}

impl LabelStrings {
    /// Strings that are not kept from one series to the next.
    fn unkept() -> Self {
        Self {
            unkept: true,
            ..Self::default()
        }
    }

    /// The shared string of symbol `id` of `index`.
    fn of(&mut self, index: &IndexReader, id: usize) -> LabelStr {
        if self.unkept {
            return LabelStr::from(index.symbol_str(id));
        }
        let by_text = &mut self.by_text;
        self.by_symbol
            .entry(id)
            .or_insert_with(|| {
                let text = index.symbol_str(id);
                match by_text.get(text) {
                    Some(s) => s.clone(),
                    None => {
                        let s = LabelStr::from(text);
                        by_text.insert(s.clone());
                        s
                    }
                }
            })
            .clone()
    }
}

/// Chunks of a block worth a helper thread (a checksum and an entry
/// each).
const CHUNKS_PER_WORKER: usize = 512;

/// Series whose index entries a block's selection holds before reading
/// their chunks.
const SELECT_BATCH: usize = 4096;

/// A block's start-time runs by series ID; none when it has no
/// start-times file, or a damaged one (they are an addition to the block's
/// samples, which read the same without them). A file this process cannot
/// read for a reason of its own is an error: read as absent, a compaction
/// would write the block's successor without them.
fn read_starts(dir: &Path) -> Result<std::collections::HashMap<u32, Vec<StartRun>>, BlockError> {
    let path = dir.join(starts::BLOCK_FILE);
    let damaged = |why: &dyn std::fmt::Display| {
        tracing::warn!(file = %path.display(), why = %why, "start times of the block not read");
        Ok(Default::default())
    };
    match std::fs::read(&path) {
        Ok(bytes) => starts::decode_block_file(&bytes).or_else(|why| damaged(&why)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Default::default()),
        Err(e) => {
            let err = BlockError::io(path.display(), &e);
            if err.is_not_damage() {
                return Err(err);
            }
            damaged(&err)
        }
    }
}

/// Where a block goes in the set: by start, an in-order block before an
/// out-of-order one of the same start (it wins a time both hold, in reads
/// and in compaction), then by name (ULIDs sort by creation time).
fn order_key(m: &BlockMeta) -> (i64, bool, Ulid) {
    (m.min_time, m.compaction.from_out_of_order, m.ulid)
}

/// Bytes of the files under `dir` (one level of subdirectories).
fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for e in entries.filter_map(Result::ok) {
        match e.metadata() {
            Ok(m) if m.is_dir() => total += dir_bytes(&e.path()),
            Ok(m) => total += m.len(),
            Err(_) => {}
        }
    }
    total
}

/// The open blocks, oldest first, and where the head takes over.
#[derive(Debug)]
pub struct BlockSet {
    blocks: Vec<Arc<Block>>,
    /// The end of the newest block: the head answers for times from here
    /// on, blocks for times before (`i64::MIN` without blocks).
    floor: i64,
}

impl Default for BlockSet {
    fn default() -> Self {
        Self {
            blocks: Vec::new(),
            floor: i64::MIN,
        }
    }
}

impl BlockSet {
    /// Where the head takes over.
    pub fn floor(&self) -> i64 {
        self.floor
    }

    /// The blocks, oldest first.
    pub fn blocks(&self) -> &[Arc<Block>] {
        &self.blocks
    }

    /// Runs `f` over each block overlapping `[mint, maxt]`, oldest first;
    /// a block that fails to read is logged, counted in `errors` and left
    /// out of the answer.
    fn each<T>(
        &self,
        mint: i64,
        maxt: i64,
        errors: &AtomicU64,
        mut f: impl FnMut(&Block) -> Result<Result<T, BlockError>, Stopped>,
        mut keep: impl FnMut(T),
    ) -> Result<(), Stopped> {
        for b in self.blocks.iter().filter(|b| b.overlaps(mint, maxt)) {
            match f(b)? {
                Ok(v) => keep(v),
                Err(e) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(block = %b.dir.display(), error = %e, "a block could not be read; its data is left out of this answer");
                }
            }
        }
        Ok(())
    }
}

/// Counts of block work since start.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockStats {
    /// Blocks open.
    pub blocks: usize,
    /// Their bytes on disk.
    pub disk_bytes: u64,
    /// Bytes their readers keep in memory (indexes).
    pub memory_bytes: usize,
    /// Samples in them.
    pub samples: u64,
    /// Blocks written from the head since start.
    pub cut: u64,
    /// Block writes that failed.
    pub cut_failures: u64,
    /// How long the last block write took, in seconds.
    pub last_cut_seconds: f64,
    /// Blocks deleted by retention.
    pub deleted: u64,
    /// Compactions done since start.
    pub compactions: u64,
    /// Compactions that failed.
    pub compaction_failures: u64,
    /// How long the last compaction took, in seconds.
    pub last_compaction_seconds: f64,
    /// Blocks found damaged at start and moved aside.
    pub damaged: u64,
    /// Reads of a block that failed during a query.
    pub read_errors: u64,
}

/// The block set of a data directory.
#[derive(Debug, Default)]
pub struct Blocks {
    /// Where blocks live; `None` keeps everything in the head.
    dir: Option<PathBuf>,
    set: RwLock<BlockSet>,
    counts: Mutex<BlockStats>,
    read_errors: AtomicU64,
    /// What the open blocks' readers hold in memory, kept current for the
    /// memory limit's check on every write.
    memory: AtomicUsize,
    /// Blocks a compaction of failed: not planned again until a restart.
    failed: Mutex<BTreeSet<Ulid>>,
}

/// The suffix given to a block directory that failed to open.
pub const DAMAGED_SUFFIX: &str = ".damaged";

impl Blocks {
    /// Opens the blocks in `dir`: removes unfinished `<ULID>.tmp`
    /// directories (a crash while writing), and moves a block that fails
    /// its checks aside to `<ULID>.damaged`, with an error naming what is
    /// wrong, rather than refusing to start.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        let mut blocks = Vec::new();
        let mut damaged = 0;
        for e in std::fs::read_dir(dir)?.filter_map(Result::ok) {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = e.path();
            if let Some(stem) = name.strip_suffix(".tmp") {
                if Ulid::parse(stem).is_some() && path.is_dir() {
                    tracing::warn!(dir = %path.display(), "removing a block left unfinished by a crash");
                    std::fs::remove_dir_all(&path)?;
                }
                continue;
            }
            if Ulid::parse(name).is_none() {
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // Named as a block but not looked into: not skipped in
                // silence, which would serve a range without it.
                Err(e) => {
                    return Err(std::io::Error::other(format!(
                        "block {}: cannot read: {e}",
                        path.display()
                    )))
                }
            }
            match Block::open(&path) {
                Ok(b) => blocks.push(Arc::new(b)),
                // Whole as far as anyone knows, but not mappable or
                // readable by this process (permissions, open files): not
                // damage, so the block stays where it is and Sluice does
                // not start without it.
                Err(err) if err.is_not_damage() => {
                    return Err(std::io::Error::other(format!(
                        "block {}: {}; it was left in place, not moved aside as damaged: fix the cause and start again",
                        path.display(),
                        err.0
                    )))
                }
                Err(err) => {
                    let aside = dir.join(format!("{name}{DAMAGED_SUFFIX}"));
                    tracing::error!(block = %path.display(), error = %err, moved_to = %aside.display(), "a block is damaged and was moved aside; its samples are not served");
                    std::fs::rename(&path, &aside)?;
                    damaged += 1;
                }
            }
        }
        // A crash after a compaction put its block in place and before it
        // deleted the parents leaves both: the parents go now, as in
        // Prometheus.
        let compacted: BTreeSet<Ulid> = blocks
            .iter()
            .flat_map(|b| b.meta.compaction.parents.iter().map(|p| p.ulid))
            .collect();
        let (parents, kept): (Vec<_>, Vec<_>) = blocks
            .into_iter()
            .partition(|b| compacted.contains(&b.meta.ulid));
        let mut blocks = kept;
        for b in parents {
            tracing::info!(block = %b.dir.display(), "removing a block already compacted into a newer one");
            std::fs::remove_dir_all(&b.dir)?;
        }
        blocks.sort_by_key(|b| order_key(&b.meta));
        let floor = blocks
            .iter()
            .map(|b| b.meta.max_time)
            .max()
            .unwrap_or(i64::MIN);
        let me = Self {
            dir: Some(dir.to_path_buf()),
            set: RwLock::new(BlockSet { blocks, floor }),
            counts: Mutex::new(BlockStats::default()),
            read_errors: AtomicU64::new(0),
            memory: AtomicUsize::new(0),
            failed: Mutex::new(BTreeSet::new()),
        };
        me.counts.lock().damaged = damaged;
        me.remeasure();
        Ok(me)
    }

    /// The ULIDs of the open blocks and of the blocks compacted into them
    /// (their sources and parents).
    pub(crate) fn ulids(&self) -> BTreeSet<u128> {
        let set = self.set.read();
        let mut out = BTreeSet::new();
        for b in &set.blocks {
            let c = &b.meta.compaction;
            out.insert(b.meta.ulid.0);
            out.extend(c.sources.iter().map(|u| u.0));
            out.extend(c.parents.iter().map(|p| p.ulid.0));
        }
        out
    }

    /// Where blocks are written, if anywhere.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The set, read-locked: hold it while selecting from blocks and head,
    /// so that a cut cannot move the floor in between.
    pub fn read(&self) -> RwLockReadGuard<'_, BlockSet> {
        self.set.read()
    }

    /// Where the head takes over.
    pub fn floor(&self) -> i64 {
        self.set.read().floor
    }

    /// Adds a block the head has just written and moves the floor to its
    /// end.
    pub(crate) fn publish(&self, block: Block, took: std::time::Duration) {
        let mut set = self.set.write();
        set.floor = set.floor.max(block.meta.max_time);
        let key = order_key(&block.meta);
        let at = set.blocks.partition_point(|b| order_key(&b.meta) <= key);
        set.blocks.insert(at, Arc::new(block));
        drop(set);
        self.remeasure();
        let mut c = self.counts.lock();
        c.cut += 1;
        c.last_cut_seconds = took.as_secs_f64();
    }

    /// Merges blocks as Prometheus' compactor plans it over `ranges` (see
    /// [`compact::plan`]) until nothing is left to merge; returns the new
    /// blocks' metas. Each new block replaces its parents in the set in one
    /// step, and the parents are deleted after: a query that started before
    /// keeps reading them through its open files. `keep_going` is asked
    /// between series; when it says no (shutting down), the unfinished
    /// block is removed and the blocks stay as they are.
    pub(crate) fn compact(
        &self,
        ranges: &[i64],
        now_ms: u64,
        keep_going: &dyn Fn() -> bool,
    ) -> Result<Vec<BlockMeta>, CompactError> {
        let Some(dir) = self.dir.clone() else {
            return Ok(Vec::new());
        };
        let mut done = Vec::new();
        loop {
            let blocks: Vec<Arc<Block>> = self.set.read().blocks.clone();
            let chosen = {
                // Their tombstone counts as they are now: the plan
                // rewrites a block with many.
                let now: Vec<BlockMeta> = blocks.iter().map(|b| b.current_meta()).collect();
                let metas: Vec<&BlockMeta> = now.iter().collect();
                compact::plan(&metas, ranges, &self.failed.lock())
            };
            if chosen.is_empty() {
                return Ok(done);
            }
            let parents: Vec<Arc<Block>> = chosen.iter().map(|&i| Arc::clone(&blocks[i])).collect();
            drop(blocks);
            let started = std::time::Instant::now();
            let views: Vec<Parent<'_>> = parents.iter().map(|b| b.as_parent()).collect();
            let written = compact::compact(&dir, &views, now_ms, keep_going, &untangle_chunks)
                .and_then(|m| {
                    m.map(|meta| {
                        Block::open(&dir.join(meta.ulid.to_string()))
                            .map_err(|e| CompactError::Read(meta.ulid, e))
                    })
                    .transpose()
                });
            let block = match written {
                Ok(Some(b)) => b,
                Ok(None) => return Ok(done),
                Err(e) => {
                    self.failed
                        .lock()
                        .extend(parents.iter().map(|b| b.meta.ulid));
                    self.counts.lock().compaction_failures += 1;
                    return Err(e);
                }
            };
            crate::crash::point("compaction-written");
            let meta = block.meta.clone();
            // Kept even with no series left (all deleted), where
            // Prometheus writes no block: see `clean_tombstones`.
            self.swap(&parents, Some(block));
            let took = started.elapsed();
            {
                let mut c = self.counts.lock();
                c.compactions += 1;
                c.last_compaction_seconds = took.as_secs_f64();
            }
            tracing::info!(
                block = %meta.ulid,
                min_time = meta.min_time,
                max_time = meta.max_time,
                level = meta.compaction.level,
                parents = parents.len(),
                series = meta.num_series,
                samples = meta.num_samples,
                seconds = format_args!("{:.3}", took.as_secs_f64()),
                "blocks compacted"
            );
            done.push(meta);
        }
    }

    /// Puts `child` (if any) in the set in place of `parents`, in one
    /// step, then deletes the parents' directories: a query that started
    /// before keeps reading them through its open files.
    fn swap(&self, parents: &[Arc<Block>], child: Option<Block>) {
        {
            let mut set = self.set.write();
            set.blocks
                .retain(|b| !parents.iter().any(|p| p.meta.ulid == b.meta.ulid));
            if let Some(block) = child {
                let key = order_key(&block.meta);
                let at = set.blocks.partition_point(|b| order_key(&b.meta) <= key);
                set.blocks.insert(at, Arc::new(block));
            }
        }
        self.remeasure();
        for p in parents {
            if let Err(e) = std::fs::remove_dir_all(&p.dir) {
                tracing::error!(block = %p.dir.display(), error = %e, "a replaced block could not be deleted; it is deleted at the next start");
            }
        }
    }

    /// Writes each block that has tombstones again without the samples
    /// they delete, as Prometheus' `CleanTombstones` (see
    /// [`compact::rewrite`]), one block at a time, each swapped in for
    /// its parent. The caller keeps cuts, compaction and deletions off
    /// meanwhile. Returns each cleaned block's ULID and its child's meta.
    ///
    /// A block left with nothing is still written, with no series, where
    /// Prometheus writes none: its range and sources keep what start-up
    /// relies on. The floor (the newest block's end) stays where the WAL
    /// replay expects it, and the blocks a WAL record names stay known;
    /// without them a crash before the next checkpoint would bring the
    /// deleted samples back from the WAL. Retention removes it in time.
    pub(crate) fn clean_tombstones(
        &self,
        now_ms: u64,
        keep_going: &dyn Fn() -> bool,
    ) -> Result<Vec<(super::block::Ulid, BlockMeta)>, CompactError> {
        let Some(dir) = self.dir.clone() else {
            return Ok(Vec::new());
        };
        let blocks: Vec<Arc<Block>> = self.set.read().blocks.clone();
        let mut done = Vec::new();
        for b in blocks.iter().filter(|b| b.tombstone_count() > 0) {
            let started = std::time::Instant::now();
            let written =
                compact::rewrite(&dir, b.as_parent(), now_ms, keep_going, &untangle_chunks)?;
            let Some(meta) = written else {
                break;
            };
            let child = Block::open(&dir.join(meta.ulid.to_string()))
                .map_err(|e| CompactError::Read(meta.ulid, e))?;
            crate::crash::point("tombstones-cleaned");
            self.swap(std::slice::from_ref(b), Some(child));
            tracing::info!(
                block = %b.meta.ulid,
                tombstones = b.tombstone_count(),
                new_block = %meta.ulid,
                series = meta.num_series,
                samples = meta.num_samples,
                seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
                "tombstones cleaned: block written again without what they delete"
            );
            done.push((b.meta.ulid, meta));
        }
        Ok(done)
    }

    /// Notes a block write that failed.
    pub(crate) fn note_failure(&self) {
        self.counts.lock().cut_failures += 1;
    }

    /// Deletes the blocks that end at or before `cutoff_ms` (all their
    /// samples are older): out of the set first, then off the disk.
    /// Queries still reading one keep their open files until they finish.
    pub fn delete_before(&self, cutoff_ms: i64) -> usize {
        let gone: Vec<Arc<Block>> = {
            let mut set = self.set.write();
            let (gone, kept) = std::mem::take(&mut set.blocks)
                .into_iter()
                .partition(|b| b.meta.max_time <= cutoff_ms);
            set.blocks = kept;
            gone
        };
        self.remeasure();
        for b in &gone {
            match std::fs::remove_dir_all(&b.dir) {
                Ok(()) => {
                    tracing::info!(block = %b.dir.display(), max_time = b.meta.max_time, "block past retention deleted")
                }
                Err(e) => {
                    tracing::error!(block = %b.dir.display(), error = %e, "a block past retention could not be deleted")
                }
            }
        }
        self.counts.lock().deleted += gone.len() as u64;
        gone.len()
    }

    /// Deletes `[mint, maxt]` of the series matching `matchers` in every
    /// block that holds part of it (see `Block::delete`); the series that
    /// got a tombstone, over all blocks. The caller keeps compaction off
    /// meanwhile, or a compaction could write its child from the
    /// tombstones before these.
    pub(crate) fn delete(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
    ) -> Result<u64, BlockError> {
        let blocks: Vec<Arc<Block>> = self.read().blocks().to_vec();
        let mut hit = 0;
        for b in blocks.iter().filter(|b| b.overlaps(mint, maxt)) {
            hit += b.delete(matchers, mint, maxt)?;
        }
        Ok(hit)
    }

    /// Bytes the open blocks' readers hold in memory.
    pub fn memory_bytes(&self) -> usize {
        self.memory.load(Ordering::Relaxed)
    }

    fn remeasure(&self) {
        let bytes = self
            .set
            .read()
            .blocks
            .iter()
            .map(|b| b.index.heap_bytes())
            .sum();
        self.memory.store(bytes, Ordering::Relaxed);
    }

    /// Counts and sizes.
    pub fn stats(&self) -> BlockStats {
        let mut s = *self.counts.lock();
        let set = self.set.read();
        s.blocks = set.blocks.len();
        s.disk_bytes = set.blocks.iter().map(|b| b.disk_bytes).sum();
        s.memory_bytes = set.blocks.iter().map(|b| b.index.heap_bytes()).sum();
        s.samples = set.blocks.iter().map(|b| b.meta.num_samples).sum();
        s.read_errors = self.read_errors.load(Ordering::Relaxed);
        s
    }

    /// The series of every block in `set` matching `matchers` in
    /// `[mint, maxt]`, oldest block first, each block's sorted by labels.
    pub(crate) fn select(
        &self,
        set: &BlockSet,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        let mut out = Vec::new();
        let mut strings = LabelStrings::default();
        set.each(
            mint,
            maxt,
            &self.read_errors,
            |b| b.select(matchers, mint, maxt, stop, &mut strings),
            |v| out.extend(v),
        )?;
        Ok(out)
    }

    /// Calls `f` with the labels of each series of a block in `set` that
    /// matches `matchers` with samples in `[mint, maxt]`.
    pub(crate) fn for_each_labels(
        &self,
        set: &BlockSet,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
        mut f: impl FnMut(Vec<Label>),
    ) -> Result<(), Stopped> {
        // The labels are looked at and let go (label names and values):
        // their strings are not kept from one series to the next.
        let mut strings = LabelStrings::unkept();
        set.each(
            mint,
            maxt,
            &self.read_errors,
            |b| {
                b.for_each_match(matchers, mint, maxt, stop, &mut strings, |labels, _, _| {
                    f(labels)
                })
            },
            |()| {},
        )
    }
}

impl Blocks {
    /// Label names of every series of the blocks in `set` overlapping
    /// `[mint, maxt]`, from their postings offset tables alone (no series
    /// is read), as Prometheus answers a label query without matchers.
    pub(crate) fn all_label_names(
        &self,
        set: &BlockSet,
        mint: i64,
        maxt: i64,
        out: &mut BTreeSet<String>,
    ) {
        for b in set.blocks.iter().filter(|b| b.overlaps(mint, maxt)) {
            for (n, _) in b.index.label_pairs() {
                if !n.is_empty() && !out.contains(n) {
                    out.insert(n.to_owned());
                }
            }
        }
    }

    /// Values of label `name` in the blocks of `set` overlapping
    /// `[mint, maxt]`, from their postings offset tables alone.
    pub(crate) fn all_label_values(
        &self,
        set: &BlockSet,
        name: &str,
        mint: i64,
        maxt: i64,
        out: &mut BTreeSet<String>,
    ) {
        for b in set.blocks.iter().filter(|b| b.overlaps(mint, maxt)) {
            for v in b.index.label_values(name) {
                if !out.contains(v) {
                    out.insert(v.to_owned());
                }
            }
        }
    }
}

/// Merges series selected from blocks (oldest first) and then the head
/// into one list sorted by labels, a series found in several joined into
/// one with its chunks and histograms in time order.
pub(crate) fn merge(mut parts: Vec<SelectedSeries>) -> Vec<SelectedSeries> {
    // Stable: a series' parts stay oldest first.
    parts.sort_by(|a, b| a.labels.cmp(&b.labels));
    let mut out: Vec<SelectedSeries> = Vec::with_capacity(parts.len());
    let mut joined = false;
    // The start-time runs of the series being joined, part by part.
    let mut starts = starts::RunJoiner::default();
    let finish = |last: &mut SelectedSeries, joined: bool, starts: starts::RunJoiner| {
        if joined {
            if !starts.is_empty() {
                last.starts = starts.finish();
            }
            untangle(last);
        }
    };
    for s in parts {
        match out.last_mut() {
            Some(last) if last.labels == s.labels => {
                if let Some((first, newest)) = sample_span(&s) {
                    starts.add(&s.starts, first, newest);
                }
                last.chunks.extend(s.chunks);
                last.histograms.extend(s.histograms);
                joined = true;
            }
            _ => {
                if let Some(last) = out.last_mut() {
                    finish(
                        last,
                        std::mem::take(&mut joined),
                        std::mem::take(&mut starts),
                    );
                }
                // Kept as it is unless another part joins it.
                if let Some((first, newest)) = sample_span(&s) {
                    starts.add(&s.starts, first, newest);
                }
                out.push(s);
            }
        }
    }
    if let Some(last) = out.last_mut() {
        finish(last, joined, starts);
    }
    out
}

/// The oldest and newest sample times of a selected part of a series.
fn sample_span(s: &SelectedSeries) -> Option<(i64, i64)> {
    let first = [
        s.chunks.first().map(|c| c.mint),
        s.histograms.first().map(|h| h.0),
    ];
    let last = [
        s.chunks.last().map(|c| c.maxt),
        s.histograms.last().map(|h| h.0),
    ];
    Some((
        first.into_iter().flatten().min()?,
        last.into_iter().flatten().max()?,
    ))
}

/// Puts a series joined from several places in time order, each time
/// once: blocks may overlap (an out-of-order block beside the in-order
/// block of its range, before compaction merges them) and the head may
/// hold late samples older than the newest block. Where two places hold
/// a time, the one listed first (the older block) wins.
fn untangle(s: &mut SelectedSeries) {
    if !in_order(&s.chunks) {
        s.chunks = merge_overlapping(std::mem::take(&mut s.chunks));
    }
    if s.histograms.windows(2).any(|w| w[1].0 <= w[0].0) {
        s.histograms.sort_by_key(|h| h.0);
        s.histograms.dedup_by_key(|h| h.0);
    }
}

/// Puts a series' chunks for a block (from parents that overlap in time,
/// or a range's in-order chunks with its late samples) in time order
/// without overlaps: chunks that overlap no other are kept as they are;
/// the others are decoded, merged (each time once, the chunk given first
/// winning a time two hold) and encoded again, floats and histograms each
/// in runs of their own.
pub(crate) fn untangle_chunks(chunks: &mut Vec<BlockChunk>) {
    let mut order: Vec<usize> = (0..chunks.len()).collect();
    order.sort_by_key(|&i| chunks[i].mint);
    if order
        .windows(2)
        .all(|w| chunks[w[1]].mint > chunks[w[0]].maxt)
    {
        chunks.sort_by_key(|c| c.mint);
        return;
    }
    let mut out = Vec::with_capacity(chunks.len());
    let mut group: Vec<usize> = Vec::new();
    let mut reach = i64::MIN;
    for i in order {
        if !group.is_empty() && chunks[i].mint > reach {
            merge_group(chunks, &group, &mut out);
            group.clear();
        }
        reach = if group.is_empty() {
            chunks[i].maxt
        } else {
            reach.max(chunks[i].maxt)
        };
        group.push(i);
    }
    merge_group(chunks, &group, &mut out);
    *chunks = out;
}

/// A sample of a merged group: a float or a native histogram.
enum Point {
    Float(f64),
    Hist(crate::histogram::HistSample),
}

/// Moves one group of overlapping chunks (indexes into `chunks`, sorted by
/// `mint`) to `out`: as it is when alone, merged when several.
fn merge_group(chunks: &[BlockChunk], group: &[usize], out: &mut Vec<BlockChunk>) {
    if let [one] = group {
        out.push(chunks[*one].clone());
        return;
    }
    let mut points: Vec<(i64, usize, Point)> = Vec::new();
    let mut hists = Vec::new();
    for &i in group {
        let c = &chunks[i];
        match c.encoding {
            Encoding::Xor => points.extend(
                crate::storage::chunk::XorIter::new(&c.data).map(|(t, v)| (t, i, Point::Float(v))),
            ),
            Encoding::Histogram | Encoding::FloatHistogram => {
                let kind = match c.encoding {
                    Encoding::FloatHistogram => HistogramKind::Float,
                    _ => HistogramKind::Int,
                };
                hists.clear();
                decode_histograms(kind, &c.data, i64::MIN, i64::MAX, &mut hists);
                points.extend(hists.drain(..).map(|(t, h)| (t, i, Point::Hist(h))));
            }
        }
    }
    points.sort_by_key(|p| (p.0, p.1));
    points.dedup_by_key(|p| p.0);
    let opts = crate::storage::HeadOptions::default();
    let mut floats: Vec<(i64, f64)> = Vec::new();
    let mut hist_run: Vec<(i64, crate::histogram::HistSample)> = Vec::new();
    let flush_floats = |floats: &mut Vec<(i64, f64)>, out: &mut Vec<BlockChunk>| {
        out.extend(float_chunks(floats));
        floats.clear();
    };
    for (t, _, p) in points {
        match p {
            Point::Float(v) => {
                if !hist_run.is_empty() {
                    out.extend(hist_chunks(&hist_run, &opts));
                    hist_run.clear();
                }
                floats.push((t, v));
            }
            Point::Hist(h) => {
                if !floats.is_empty() {
                    flush_floats(&mut floats, out);
                }
                hist_run.push((t, h));
            }
        }
    }
    flush_floats(&mut floats, out);
    out.extend(hist_chunks(&hist_run, &opts));
}

/// Floats in time order as XOR block chunks.
pub(crate) fn float_chunks(floats: &[(i64, f64)]) -> Vec<BlockChunk> {
    encode_xor(floats, MERGED_CHUNK_SAMPLES)
        .into_iter()
        .map(|c| BlockChunk {
            mint: c.mint,
            maxt: c.maxt,
            encoding: Encoding::Xor,
            data: c.bytes.into_shared(),
        })
        .collect()
}

/// Histograms in time order as block chunks, encoded as the head does.
pub(crate) fn hist_chunks(
    run: &[(i64, crate::histogram::HistSample)],
    opts: &crate::storage::HeadOptions,
) -> Vec<BlockChunk> {
    hist_series::encode(run, opts)
        .into_iter()
        .map(|(mint, maxt, kind, data)| BlockChunk {
            mint,
            maxt,
            encoding: match kind {
                HistogramKind::Float => Encoding::FloatHistogram,
                HistogramKind::Int => Encoding::Histogram,
            },
            data,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::block::{write_block, BlockSeries};
    use crate::storage::chunk::XorAppender;
    use crate::storage::index::MatchOp;

    #[test]
    fn a_selection_makes_each_label_string_once_across_blocks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let series = |t: i64| -> Vec<BlockSeries> {
            ["a", "b"]
                .iter()
                .map(|name| {
                    let mut c = XorAppender::default();
                    c.append(t, 1.0);
                    c.append(t + 1000, 2.0);
                    BlockSeries {
                        labels: vec![
                            ("__name__".to_owned(), (*name).to_owned()),
                            ("job".to_owned(), "x".to_owned()),
                        ],
                        chunks: vec![BlockChunk {
                            mint: t,
                            maxt: t + 1000,
                            encoding: Encoding::Xor,
                            data: Arc::from(c.bytes()),
                        }],
                        starts: Vec::new(),
                    }
                })
                .collect()
        };
        write_block(dir.path(), series(0), 0, 10_000, 1).expect("first block");
        write_block(dir.path(), series(10_000), 10_000, 20_000, 2).expect("second block");
        let blocks = Blocks::open(dir.path()).expect("open");
        let matchers = [Matcher::new(MatchOp::Equal, "job", "x").expect("matcher")];
        let parts = blocks
            .select(&blocks.read(), &matchers, 0, 20_000, &Stop::default())
            .expect("not stopped");
        assert_eq!(parts.len(), 4, "two series from each of two blocks");
        let at =
            |s: &SelectedSeries, i: usize| (s.labels[i].name.as_ptr(), s.labels[i].value.as_ptr());
        // The same label of every part is one string; the names too.
        for i in 0..2 {
            assert!(parts.iter().all(|p| at(p, i).0 == at(&parts[0], i).0));
        }
        assert!(parts.iter().all(|p| at(p, 1) == at(&parts[0], 1)));
        let a: Vec<_> = parts.iter().filter(|p| p.labels[0].value == "a").collect();
        assert_eq!(a.len(), 2);
        assert_eq!(
            at(a[0], 0),
            at(a[1], 0),
            "a series' parts share their strings"
        );
        assert_eq!(merge(parts).len(), 2, "and merge into one each");
    }

    /// A block this process cannot read for a reason of its own (here a
    /// symlink loop where its index should be: tests run as root, so
    /// permissions cannot be taken away) stops the start with an error
    /// naming it, and is left where it is; a block whose index is missing
    /// is damaged, and is moved aside.
    #[test]
    fn a_block_unreadable_for_a_reason_not_its_own_is_not_moved_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let one = vec![BlockSeries {
            labels: vec![("__name__".to_owned(), "a".to_owned())],
            chunks: vec![BlockChunk {
                mint: 0,
                maxt: 0,
                encoding: Encoding::Xor,
                data: Arc::from({
                    let mut c = XorAppender::default();
                    c.append(0, 1.0);
                    c.bytes().to_vec()
                }),
            }],
            starts: Vec::new(),
        }];
        let meta = write_block(dir.path(), one, 0, 10_000, 1).expect("block");
        let block = dir.path().join(meta.ulid.to_string());
        let index = block.join("index");
        std::fs::rename(&index, block.join("index.kept")).expect("rename");
        std::os::unix::fs::symlink("index", &index).expect("symlink");
        let Err(err) = Blocks::open(dir.path()) else {
            panic!("a block it cannot read was opened");
        };
        let text = err.to_string();
        assert!(text.contains(&meta.ulid.to_string()), "{text}");
        assert!(text.contains("cannot read"), "{text}");
        assert!(block.exists(), "left in place");

        // The cause fixed, the block opens and is served.
        std::fs::remove_file(&index).expect("unlink");
        std::fs::rename(block.join("index.kept"), &index).expect("rename");
        let blocks = Blocks::open(dir.path()).expect("opens");
        assert_eq!(blocks.stats().blocks, 1);
        assert_eq!(blocks.stats().damaged, 0);
        let all = [Matcher::new(MatchOp::Equal, "__name__", "a").expect("matcher")];
        let got = blocks
            .select(&blocks.read(), &all, 0, 10_000, &Stop::default())
            .expect("not stopped");
        assert_eq!(got.len(), 1);
        drop(blocks);

        // The same in the way of the start times and of a chunk segment.
        for file in [starts::BLOCK_FILE, "chunks/000001"] {
            let at = block.join(file);
            let kept = block.join("kept");
            if at.exists() {
                std::fs::rename(&at, &kept).expect("rename");
            }
            std::os::unix::fs::symlink(file.rsplit('/').next().unwrap_or(file), &at)
                .expect("symlink");
            let Err(err) = Blocks::open(dir.path()) else {
                panic!("{file}: a block it cannot read was opened");
            };
            assert!(err.to_string().contains("cannot read"), "{file}: {err}");
            assert!(block.exists(), "{file}: left in place");
            std::fs::remove_file(&at).expect("unlink");
            if kept.exists() {
                std::fs::rename(&kept, &at).expect("rename");
            }
        }

        // Without its index, it is damaged, and moved aside.
        std::fs::remove_file(&index).expect("unlink");
        let blocks = Blocks::open(dir.path()).expect("opens without it");
        assert_eq!(blocks.stats().damaged, 1);
        assert!(!block.exists());
        assert!(dir
            .path()
            .join(format!("{}{DAMAGED_SUFFIX}", meta.ulid))
            .exists());
    }
}
