//! Checkpoints: the whole head (every series, its sealed chunks and its
//! open chunk) in one file, so the WAL segments it covers can be deleted
//! and replay time and disk stay bounded.
//!
//! Taking one: the WAL is rotated, so segments up to `N` hold only records
//! the head had applied before the rotation; then each shard is copied out
//! under its lock, a batch of series at a time (appends to the shard run
//! between batches), into `checkpoint.N.tmp`, which is fsynced, renamed to
//! `checkpoint.N`, and the directory fsynced; only then are segments `≤ N`
//! and older checkpoints deleted. A crash at any step leaves either the
//! previous checkpoint with all the segments after it, or the new one with
//! (possibly) some segments it covers, which start-up deletes.
//!
//! Replaying segments after `N` may repeat samples the checkpoint already
//! holds (they were appended while it was being written); the head refuses
//! those as duplicates or out of order, so nothing is stored twice.
//!
//! The file is a sequence of WAL frames (length, CRC32C, kind 8), one per
//! series: `ref: uvarint | labels: len-prefixed canonical bytes |
//! next_at: i64 | sealed chunks: count, then per chunk a tag (0: bytes
//! inline, 1: saved in a chunk file), mint less the maxt of the chunk
//! before (0 for the first) and maxt less mint as zigzag varints, then the
//! bytes (len-prefixed) or the chunk file's number and the offset in it as
//! uvarints (see [`chunks`]) | open chunk: 0, or 1
//! then mint, maxt and the bytes`, then, for a series that holds native
//! histograms, a histogram section: `next_at: i64 | sealed chunks: count,
//! then (mint, maxt, encoding: u8 (2 integer, 3 float, as Prometheus
//! numbers them), bytes) each | open chunk: 0, or 1 then the same`. A
//! series without histograms ends after its open chunk. Each batch of a
//! shard's series is followed by a samples record and a histograms record
//! (the WAL's) of their out-of-order samples, if they have any, which the
//! load appends as replay does, and a record of their start-time runs.
//! After every series come the exemplars, then the deleted ranges of
//! series (the WAL's tombstones records, see `head::deleted`).
//!
//! A sealed chunk is written once, into the chunk file of the first
//! checkpoint that meets it, and referred to by later ones (see
//! [`chunks`]). Checkpoints written before chunk files (kind 3, every
//! chunk's bytes held inline, no tag byte) still load.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use super::chunk::HistogramKind;
use super::head::hist_series::HistImage;
use super::head::shard::{MemSeries, Shard};
use super::head::Head;
use super::labels::encode_canonical;

use crate::encoding::{put_uvarint, unzigzag, zigzag, Cursor};
use crate::wal::record::{self, encode_checkpoint_refs, encode_tombstones, Record};
use crate::wal::{io_err, sync_dir, WalError};

pub mod chunks;

pub use chunks::ChunkFiles;

/// One series as a checkpoint holds it, borrowing the file's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesImage<'a> {
    /// The series' WAL reference.
    pub id: u64,
    /// Canonical label bytes.
    pub labels: &'a [u8],
    /// When the open chunk must be cut at the latest.
    pub next_at: i64,
    /// Sealed chunks, oldest first: (mint, maxt, bytes, their location in
    /// a chunk file or 0).
    pub sealed: Vec<(i64, i64, &'a [u8], u64)>,
    /// The open chunk.
    pub open: Option<(i64, i64, &'a [u8])>,
    /// The native-histogram chunks, if the series holds any.
    pub hist: Option<HistImage<'a>>,
}

/// A sealed chunk's tag in a kind-8 record: its bytes follow, or their
/// location in a chunk file.
const INLINE: u8 = 0;
const SAVED: u8 = 1;

/// Prometheus' chunk encoding numbers.
const ENC_HISTOGRAM: u8 = 2;
const ENC_FLOAT_HISTOGRAM: u8 = 3;

/// What writing a checkpoint did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointReport {
    /// The last WAL segment it covers.
    pub segment: u64,
    /// Series written.
    pub series: u64,
    /// Size: the file and the chunk files it refers to.
    pub bytes: u64,
    /// Bytes written: the file and the chunks no earlier checkpoint saved.
    pub written: u64,
    /// WAL segments deleted.
    pub deleted_segments: usize,
}

fn checkpoint_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("checkpoint.{segment:08}"))
}

/// Complete checkpoints in `dir` (segment numbers, ascending); leftover
/// temporary files are removed.
pub fn list(dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut out = Vec::new();
    for name in crate::wal::file_names(dir)? {
        let Some(rest) = name.strip_prefix("checkpoint.") else {
            continue;
        };
        if rest.ends_with(".tmp") {
            let p = dir.join(&name);
            tracing::info!(file = %p.display(), "removing an unfinished checkpoint");
            fs::remove_file(&p).map_err(io_err(&p))?;
        } else if let Ok(n) = rest.parse::<u64>() {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn encode_series(
    out: &mut Vec<u8>,
    shard: &Shard,
    s: &MemSeries,
    scratch: &mut Vec<u8>,
    saver: &mut chunks::Saver<'_>,
) {
    encode_checkpoint_refs(out, |out| {
        put_uvarint(out, s.id);
        scratch.clear();
        encode_canonical(
            shard
                .labels(s)
                .iter()
                .map(|&(n, v)| (shard.strings.get(n), shard.strings.get(v))),
            scratch,
        );
        put_bytes(out, scratch);
        out.extend_from_slice(&s.next_at().to_le_bytes());
        put_uvarint(out, s.sealed.len() as u64);
        let mut prev = 0i64;
        for c in &s.sealed {
            let loc = saver.save(c.saved.load(Relaxed), &c.bytes);
            out.push(if loc.is_some() { SAVED } else { INLINE });
            // Times as varints: from the chunk before, and the span.
            put_uvarint(out, zigzag(c.mint.wrapping_sub(prev)));
            put_uvarint(out, zigzag(c.maxt.wrapping_sub(c.mint)));
            prev = c.maxt;
            match loc {
                Some(loc) => {
                    c.saved.store(loc, Relaxed);
                    put_uvarint(out, chunks::file_of(loc));
                    put_uvarint(out, chunks::offset_of(loc));
                }
                None => put_bytes(out, &c.bytes),
            }
        }
        match s.open_chunk() {
            Some((mint, maxt, bytes)) => {
                out.push(1);
                put_chunk(out, mint, maxt, bytes);
            }
            None => out.push(0),
        }
        if let Some(h) = shard.hist_of(s) {
            let (sealed, open, next_at) = h.image();
            out.extend_from_slice(&next_at.to_le_bytes());
            put_uvarint(out, sealed.len() as u64);
            for c in sealed {
                put_hist_chunk(out, c.mint, c.maxt, c.kind, &c.bytes);
            }
            match open {
                Some((mint, maxt, kind, bytes)) => {
                    out.push(1);
                    put_hist_chunk(out, mint, maxt, kind, bytes);
                }
                None => out.push(0),
            }
        }
    });
}

fn put_hist_chunk(out: &mut Vec<u8>, mint: i64, maxt: i64, kind: HistogramKind, bytes: &[u8]) {
    out.extend_from_slice(&mint.to_le_bytes());
    out.extend_from_slice(&maxt.to_le_bytes());
    out.push(match kind {
        HistogramKind::Float => ENC_FLOAT_HISTOGRAM,
        HistogramKind::Int => ENC_HISTOGRAM,
    });
    put_bytes(out, bytes);
}

fn hist_chunk<'a>(r: &mut Cursor<'a>) -> Option<(i64, i64, HistogramKind, &'a [u8])> {
    let (mint, maxt) = (r.i64_le()?, r.i64_le()?);
    let kind = match r.byte()? {
        ENC_HISTOGRAM => HistogramKind::Int,
        ENC_FLOAT_HISTOGRAM => HistogramKind::Float,
        _ => return None,
    };
    Some((mint, maxt, kind, r.bytes()?))
}

fn parse_hist<'a>(r: &mut Cursor<'a>, len: usize) -> Option<HistImage<'a>> {
    let next_at = r.i64_le()?;
    let n = r.uvarint()?;
    if n > (len / 18) as u64 {
        return None;
    }
    let mut sealed = Vec::with_capacity(n as usize);
    for _ in 0..n {
        sealed.push(hist_chunk(r)?);
    }
    let open = match r.byte()? {
        0 => None,
        1 => Some(hist_chunk(r)?),
        _ => return None,
    };
    Some(HistImage {
        next_at,
        sealed,
        open,
    })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_chunk(out: &mut Vec<u8>, mint: i64, maxt: i64, bytes: &[u8]) {
    out.extend_from_slice(&mint.to_le_bytes());
    out.extend_from_slice(&maxt.to_le_bytes());
    put_bytes(out, bytes);
}

/// Reads a kind-3 checkpoint record's payload (every chunk's bytes
/// inline); `None` if it is malformed.
pub fn parse(payload: &[u8]) -> Option<SeriesImage<'_>> {
    // Each chunk takes at least 17 bytes.
    parse_with(payload, 17, |r| {
        let (mint, maxt, bytes) = chunk(r)?;
        Some(Some((mint, maxt, bytes, 0)))
    })
}

/// Reads a kind-8 checkpoint record's payload, its saved chunks from
/// `files`; `None` if it is malformed or a chunk is missing or damaged.
pub fn parse_refs<'a>(payload: &'a [u8], files: &'a ChunkFiles) -> Option<SeriesImage<'a>> {
    let mut bad = Vec::new();
    parse_refs_without(payload, files, &mut bad).filter(|_| bad.is_empty())
}

/// [`parse_refs`], leaving out the chunks that are missing or damaged in
/// `files`, whose locations go to `bad`; `None` if the record is malformed.
fn parse_refs_without<'a>(
    payload: &'a [u8],
    files: &'a ChunkFiles,
    bad: &mut Vec<u64>,
) -> Option<SeriesImage<'a>> {
    let mut prev = 0;
    parse_with(payload, 4, |r| match sealed_ref(r, files, &mut prev)? {
        (mint, maxt, Ok(bytes), loc) => Some(Some((mint, maxt, bytes, loc))),
        (_, _, Err(()), loc) => {
            bad.push(loc);
            Some(None)
        }
    })
}

/// A kind-8 record's sealed chunk: (mint, maxt, the bytes or `Err` if its
/// location does not read back, the location or 0). `prev` is the maxt of
/// the chunk before (0 for the first), which mint is stored from.
#[allow(clippy::type_complexity)]
fn sealed_ref<'a>(
    r: &mut Cursor<'a>,
    files: &'a ChunkFiles,
    prev: &mut i64,
) -> Option<(i64, i64, Result<&'a [u8], ()>, u64)> {
    let tag = r.byte()?;
    let mint = prev.wrapping_add(unzigzag(r.uvarint()?));
    let maxt = mint.wrapping_add(unzigzag(r.uvarint()?));
    *prev = maxt;
    match tag {
        INLINE => Some((mint, maxt, Ok(r.bytes()?), 0)),
        SAVED => {
            let loc = chunks::location(r.uvarint()?, r.uvarint()?)?;
            Some((mint, maxt, files.chunk(loc).ok_or(()), loc))
        }
        _ => None,
    }
}

/// A checkpoint record's payload, its sealed chunks read by
/// `sealed_chunk` (`None`: malformed; `Some(None)`: left out), each of
/// which takes at least `min_chunk` bytes.
fn parse_with<'a>(
    payload: &'a [u8],
    min_chunk: usize,
    mut sealed_chunk: impl FnMut(&mut Cursor<'a>) -> Option<Option<(i64, i64, &'a [u8], u64)>>,
) -> Option<SeriesImage<'a>> {
    let mut r = Cursor(payload);
    let id = r.uvarint()?;
    let labels = r.bytes()?;
    let next_at = r.i64_le()?;
    let n = r.uvarint()?;
    // A count past what the bytes can hold is a lie.
    if n > (payload.len() / min_chunk) as u64 {
        return None;
    }
    // Each entry is 40 bytes where its record may have 4: grown as read.
    let mut sealed = Vec::with_capacity(n.min(64) as usize);
    for _ in 0..n {
        sealed.extend(sealed_chunk(&mut r)?);
    }
    let open = match r.byte()? {
        0 => None,
        1 => Some(chunk(&mut r)?),
        _ => return None,
    };
    let hist = if r.is_empty() {
        None
    } else {
        Some(parse_hist(&mut r, payload.len())?)
    };
    r.is_empty().then_some(SeriesImage {
        id,
        labels,
        next_at,
        sealed,
        open,
        hist,
    })
}

/// A checkpoint chunk: `mint`, `maxt` and the length-prefixed bytes.
fn chunk<'a>(r: &mut Cursor<'a>) -> Option<(i64, i64, &'a [u8])> {
    Some((r.i64_le()?, r.i64_le()?, r.bytes()?))
}

/// Writes a checkpoint of `head` into `dir` and deletes the WAL segments,
/// checkpoints and chunk files it makes redundant. The head must write a
/// WAL. Blocks: run it on a thread of its own.
pub fn write(head: &Head, dir: &Path) -> Result<CheckpointReport, WalError> {
    let Some(wal) = head.wal() else {
        return Ok(CheckpointReport::default());
    };
    // Held throughout: one checkpoint at a time, since each relies on the
    // chunk files the one before it left.
    let mut good = head.chunk_files().lock();
    let segment = wal.rotate().map_err(|e| WalError::Io {
        path: dir.join("wal"),
        source: io::Error::other(e),
    })?;
    let path = checkpoint_path(dir, segment);
    let tmp = path.with_extension(format!("{segment:08}.tmp"));
    let mut report = CheckpointReport {
        segment,
        ..CheckpointReport::default()
    };
    let mut saver = chunks::Saver::new(dir, &good, segment);
    // The deleted ranges, read after the rotation: a deletion notes its
    // ranges in memory before logging them, so one logged in a segment
    // this checkpoint covers is here (see `head::deleted`), and one noted
    // later is logged later. Kept for the series written below (a series
    // made after its shard was walked is in the segments after, and so
    // are ranges deleted of it).
    let deleted = head.deleted();
    let mut ranges = super::block::tombstones::Tombstones::default();
    let mut file = io::BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(io_err(&tmp))?);
    let mut buf = Vec::new();
    let mut scratch = Vec::new();
    for i in 0..head.shard_count() {
        buf.clear();
        // Copied out under the shard's lock a batch of series at a time
        // (a whole shard is milliseconds, which every append to it would
        // wait for); written after the shard is walked.
        head.walk_shard(i, |shard, batch| {
            for s in batch {
                encode_series(&mut buf, shard, s, &mut scratch, &mut saver);
                report.series += 1;
                for (lo, hi) in deleted.get(s.id).into_iter().flat_map(|r| r.iter()) {
                    ranges.add(s.id, lo, hi);
                }
            }
            // Out-of-order samples as a samples record after the batch's
            // series, appended again at load as the log's are.
            let mut frame = record::SamplesFrame::default();
            for s in batch {
                for (t, v) in shard.ooo_of(s).map(|o| o.all()).unwrap_or_default() {
                    frame.push(&mut buf, s.id, t, v);
                }
            }
            frame.close(&mut buf);
            // In records of about a megabyte, as the log's are (a record
            // may not pass `MAX_RECORD`).
            let mut entries = Vec::new();
            for s in batch {
                for (t, h) in shard.ooo_of(s).map(|o| o.all_hists()).unwrap_or_default() {
                    record::histograms::put_entry(&mut entries, s.id, *t, h);
                    if entries.len() >= 1 << 20 {
                        record::encode_histograms_frame(&mut buf, &entries);
                        entries.clear();
                    }
                }
            }
            record::encode_histograms_frame(&mut buf, &entries);
            // Start-time runs, restored at load as the log's are.
            entries.clear();
            for s in batch {
                for run in shard.starts_of(s) {
                    crate::storage::starts::put_entry(&mut entries, s.id, run);
                    if entries.len() >= 1 << 20 {
                        record::encode_starts_frame(&mut buf, &entries);
                        entries.clear();
                    }
                }
            }
            record::encode_starts_frame(&mut buf, &entries);
        });
        saver.flush()?;
        report.bytes += buf.len() as u64;
        file.write_all(&buf).map_err(io_err(&tmp))?;
    }
    // The exemplars, oldest first, after every series.
    buf.clear();
    head.exemplars()
        .snapshot(|entries| record::encode_exemplars_frame(&mut buf, entries));
    // The deleted ranges of the series written, last, after them.
    encode_tombstones(
        &mut buf,
        ranges
            .iter()
            .flat_map(|(id, r)| r.iter().map(move |(lo, hi)| (id, lo, hi))),
    );
    report.bytes += buf.len() as u64;
    file.write_all(&buf).map_err(io_err(&tmp))?;
    // The new chunks are durable before the checkpoint refers to them.
    saver.sync()?;
    let file = file
        .into_inner()
        .map_err(|e| io_err(&tmp)(e.into_error()))?;
    file.sync_all().map_err(io_err(&tmp))?;
    drop(file);
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    sync_dir(dir)?;
    report.written = report.bytes + saver.written;
    report.bytes += saver.referenced_bytes();
    let referenced = std::mem::take(&mut saver.referenced);
    drop(saver);
    *good = referenced;
    report.deleted_segments = crate::wal::remove_segments_through(&dir.join("wal"), segment)?;
    for old in list(dir)? {
        if old < segment {
            let p = checkpoint_path(dir, old);
            fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    chunks::remove_unreferenced(dir, &good);
    Ok(report)
}

/// What loading a checkpoint found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckpointLoad {
    /// The last WAL segment the checkpoint covers (0 if there was none).
    pub segment: u64,
    /// Series restored.
    pub series: u64,
    /// The chunk files the restored series' chunks were read from.
    pub chunk_files: std::collections::BTreeSet<u64>,
}

/// The newest complete checkpoint in `dir` (its last segment), touching
/// nothing: safe while a checkpoint is being written.
pub fn newest(dir: &Path) -> Result<Option<u64>, WalError> {
    Ok(crate::wal::file_names(dir)?
        .iter()
        .filter_map(|n| n.strip_prefix("checkpoint."))
        .filter_map(|rest| rest.parse::<u64>().ok())
        .max())
}

/// Calls `f` with the reference and canonical labels of every series in
/// the newest checkpoint; which checkpoint that was, if any. Reads only;
/// stops quietly at damage (start-up reports it).
pub fn read_series(dir: &Path, mut f: impl FnMut(u64, &[u8])) -> Result<Option<u64>, WalError> {
    // A checkpoint written meanwhile deletes the older one: look again.
    for _ in 0..3 {
        let Some(segment) = newest(dir)? else {
            return Ok(None);
        };
        let path = checkpoint_path(dir, segment);
        let buf = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut pos = 0;
        while let Ok((rec, len)) = record::decode(&buf[pos..]) {
            pos += len;
            if let Record::Checkpoint(payload) | Record::CheckpointRefs(payload) = rec {
                let mut r = Cursor(payload);
                if let (Some(id), Some(labels)) = (r.uvarint(), r.bytes()) {
                    f(id, labels);
                }
            }
        }
        return Ok(Some(segment));
    }
    Ok(None)
}

/// Loads the newest checkpoint in `dir` into `head` through `restore`
/// (which maps each series' reference for the WAL replay that follows) and
/// `exemplars`. A damaged checkpoint fails, unless `repair` says to keep
/// the series before the damage.
pub fn load(
    dir: &Path,
    repair: crate::wal::Repair,
    mut restore: impl FnMut(&SeriesImage<'_>) -> bool,
    mut records: impl FnMut(Record<'_>),
) -> Result<CheckpointLoad, WalError> {
    let Some(&segment) = list(dir)?.last() else {
        return Ok(CheckpointLoad::default());
    };
    let path = checkpoint_path(dir, segment);
    let buf = fs::read(&path).map_err(io_err(&path))?;
    let files = ChunkFiles::read(dir)?;
    // Locations of chunks a record refers to that do not read back.
    let mut bad = Vec::new();
    let mut loaded = CheckpointLoad {
        segment,
        ..CheckpointLoad::default()
    };
    let started = std::time::Instant::now();
    let mut next_log = started + std::time::Duration::from_secs(5);
    let mut pos = 0;
    while pos < buf.len() {
        if loaded.series.is_multiple_of(4096) && std::time::Instant::now() >= next_log {
            next_log += std::time::Duration::from_secs(5);
            let secs = started.elapsed().as_secs_f64();
            let done = pos.max(1) as f64;
            tracing::info!(
                percent = format_args!("{:.1}", 100.0 * done / buf.len() as f64),
                series_per_second = (loaded.series as f64 / secs) as u64,
                eta_seconds = format_args!("{:.0}", (buf.len() as f64 - done) * secs / done),
                "loading checkpoint"
            );
        }
        let (image, len) = match record::decode(&buf[pos..]) {
            Ok((Record::Checkpoint(payload), len)) => (parse(payload), len),
            Ok((Record::CheckpointRefs(payload), len)) => {
                bad.clear();
                match parse_refs_without(payload, &files, &mut bad) {
                    Some(image) if bad.is_empty() => (Some(image), len),
                    // A sound record may refer to a chunk that is not:
                    // repair loads the series without it.
                    Some(image) => {
                        let (chunk_file, offset) = ChunkFiles::place(dir, bad[0]);
                        if repair != crate::wal::Repair::DropFromDamage {
                            return Err(WalError::CorruptCheckpointChunk {
                                path,
                                series: image.id,
                                chunk_file,
                                offset,
                            });
                        }
                        tracing::error!(
                            file = %chunk_file.display(),
                            offset,
                            series = image.id,
                            chunks = bad.len(),
                            "checkpoint chunks missing or damaged; --wal-repair loads the series without them"
                        );
                        (Some(image), len)
                    }
                    None => (None, 0),
                }
            }
            Ok((
                rec @ (Record::Exemplars(_)
                | Record::Samples(_)
                | Record::Histograms(_)
                | Record::Starts(_)
                | Record::Tombstones(_)),
                len,
            )) => {
                records(rec);
                pos += len;
                continue;
            }
            _ => (None, 0),
        };
        match image {
            Some(image) if restore(&image) => {
                loaded.series += 1;
                for &(_, _, _, loc) in &image.sealed {
                    if loc != 0 {
                        loaded.chunk_files.insert(chunks::file_of(loc));
                    }
                }
                pos += len;
            }
            _ if repair == crate::wal::Repair::DropFromDamage => {
                tracing::error!(
                    file = %path.display(),
                    offset = pos,
                    series = loaded.series,
                    "checkpoint damaged; --wal-repair keeps the series before the damage"
                );
                break;
            }
            _ => {
                return Err(WalError::CorruptCheckpoint {
                    path,
                    offset: pos as u64,
                })
            }
        }
    }
    Ok(loaded)
}

/// When to take the next checkpoint: after `interval`, or sooner once the
/// WAL written since the last one outgrows both 256 MiB and the last
/// checkpoint (so a busy log never costs more than about twice the head to
/// replay, and a checkpoint is never written more often than the log
/// grows by its size).
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: std::time::Duration,
    last: std::time::Instant,
    wal_bytes_then: u64,
    last_size: u64,
    /// After a failure, no checkpoint before this.
    not_before: Option<std::time::Instant>,
}

impl Schedule {
    const MIN_WAL_BYTES: u64 = 256 << 20;

    /// A schedule starting now.
    pub fn new(interval: std::time::Duration, wal_bytes: u64) -> Self {
        Self {
            interval,
            last: std::time::Instant::now(),
            wal_bytes_then: wal_bytes,
            last_size: 0,
            not_before: None,
        }
    }

    /// Whether a checkpoint is due, given the WAL bytes written so far.
    pub fn due(&self, now: std::time::Instant, wal_bytes: u64) -> bool {
        if self.not_before.is_some_and(|t| now < t) {
            return false;
        }
        let grown = wal_bytes.saturating_sub(self.wal_bytes_then);
        (now.duration_since(self.last) >= self.interval && grown > 0)
            || grown >= Self::MIN_WAL_BYTES.max(self.last_size)
    }

    /// Notes a checkpoint of `size` bytes taken at `now`.
    pub fn done(&mut self, now: std::time::Instant, wal_bytes: u64, size: u64) {
        self.last = now;
        self.wal_bytes_then = wal_bytes;
        self.last_size = size;
        self.not_before = None;
    }

    /// How long a failed checkpoint waits to be tried again (a full or
    /// failing disk is not helped by trying ten times a second).
    pub const RETRY: std::time::Duration = std::time::Duration::from_secs(30);

    /// Notes a checkpoint that failed at `now`.
    pub fn failed(&mut self, now: std::time::Instant) {
        self.not_before = Some(now + Self::RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::head::{AppendCounts, Durability, HeadOptions, SeriesSamples};
    use crate::storage::index::{MatchOp, Matcher};
    use crate::wal::commit::FsyncMode;
    use crate::wal::WalOptions;

    fn durability(dir: &Path) -> Durability {
        Durability {
            dir: dir.to_owned(),
            wal: WalOptions {
                segment_bytes: 2048,
                repair: crate::wal::Repair::Refuse,
                reserve_bytes: 0,
            },
            fsync: FsyncMode::Always,
        }
    }

    /// Appends samples `from..to` (15 s apart) to 20 series and logs them.
    fn append_rounds(head: &Head, from: i64, to: i64) {
        let mut c = AppendCounts::default();
        for i in from..to {
            for s in 0..20 {
                let name = format!("m{s}");
                let l = [("__name__", name.as_str()), ("job", "j")];
                let mut raw = Vec::new();
                encode_canonical(l, &mut raw);
                let t = i * 15_000;
                let v = (i * (s + 1)) as f64 / 3.0;
                if !head.append_existing(&raw, [(t, v)].into_iter(), i64::MAX, &mut c) {
                    head.append_labels(&l, &raw, [(t, v)].into_iter(), i64::MAX, &mut c)
                        .expect("fits");
                }
            }
        }
        let lsn = head.log_appended(&mut c);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(head.durable(lsn))
            .expect("durable");
    }

    fn everything(head: &Head) -> Vec<SeriesSamples> {
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        head.querier().select_samples(&[all], i64::MIN, i64::MAX)
    }

    fn open(dir: &Path) -> Head {
        Head::open(HeadOptions::default(), &durability(dir)).expect("open")
    }

    /// Stores one sample and one exemplar at `t` through an appender, and
    /// waits until they are durable.
    fn ingest_exemplar(head: &Head, t: i64) {
        let metadata = crate::storage::metadata::MetadataStore::new(1, 1024);
        let mut app = crate::storage::Appender::new(head, &metadata, i64::MAX / 2);
        let labels = [("__name__", "req_total"), ("job", "j")];
        let mut raw = Vec::new();
        encode_canonical(labels, &mut raw);
        let mut c = AppendCounts::default();
        app.append_new(&labels, &raw, std::iter::once((t, 1.0)), &mut c)
            .expect("under the limit");
        let trace = format!("t{t}");
        app.add_exemplar(&raw, &[(b"trace_id", trace.as_bytes())], t as f64, t)
            .expect("stored");
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(app.commit().durable())
            .expect("durable");
    }

    fn exemplar_times(head: &Head) -> Vec<i64> {
        let all = vec![vec![
            Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re")
        ]];
        head.exemplars()
            .select(&all, i64::MIN, i64::MAX)
            .into_iter()
            .flat_map(|s| s.exemplars.into_iter().map(|e| e.t))
            .collect()
    }

    #[test]
    fn exemplars_survive_a_restart_through_the_log_and_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        ingest_exemplar(&head, 1_000);
        ingest_exemplar(&head, 2_000);
        head.close_wal();
        drop(head);
        // From the WAL.
        let head = open(dir.path());
        assert_eq!(exemplar_times(&head), vec![1_000, 2_000]);
        // From a checkpoint, which deletes the segments that held them,
        // plus the log after it.
        let r = write_checkpoint(&head, dir.path());
        assert!(
            r.deleted_segments > 0,
            "the segments holding them are gone: {r:?}"
        );
        ingest_exemplar(&head, 3_000);
        head.close_wal();
        drop(head);
        let head = open(dir.path());
        assert_eq!(exemplar_times(&head), vec![1_000, 2_000, 3_000]);
    }

    /// Appends `n` histograms (integer for series h0, float for h1, both
    /// with a bucket that appears halfway, so a chunk is recoded) from
    /// round `from` on.
    fn append_histograms(head: &Head, from: i64, n: i64) {
        use crate::histogram::{HistSample, Histogram, Span};
        let mut c = AppendCounts::default();
        for i in from..from + n {
            for (s, float) in [("h0", false), ("h1", true)] {
                let l = [("__name__", s), ("job", "j")];
                let mut raw = Vec::new();
                encode_canonical(l, &mut raw);
                let mut spans = vec![Span {
                    offset: 0,
                    length: 2,
                }];
                let mut buckets = vec![i, 1];
                if i >= 40 {
                    spans[0].length = 3;
                    buckets.push(-1);
                }
                let count: u64 = buckets
                    .iter()
                    .scan(0i64, |a, d| {
                        *a += d;
                        Some(*a as u64)
                    })
                    .sum();
                let h = Histogram {
                    schema: 1,
                    count,
                    sum: i as f64 * 1.5,
                    positive_spans: spans,
                    positive_buckets: buckets,
                    ..Histogram::default()
                };
                let h = if float {
                    HistSample::Float(h.to_float())
                } else {
                    HistSample::Int(h)
                };
                head.append_histograms(&l, &raw, &[(i * 60_000, h)], i64::MAX, &mut c)
                    .expect("under the limit");
            }
        }
        assert_eq!(c.rejected_total(), 0);
        let lsn = head.log_appended(&mut c);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(head.durable(lsn))
            .expect("durable");
    }

    fn histograms(head: &Head) -> Vec<(String, Vec<(i64, crate::histogram::HistSample)>)> {
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        head.querier()
            .select(&[all], i64::MIN, i64::MAX)
            .into_iter()
            .map(|s| (format!("{:?}", s.labels), s.histograms))
            .collect()
    }

    /// Through an appender, as remote write 2.0 ingest does: a counter
    /// whose start time moves every 10 samples (a reset), and deltas whose
    /// start is just under 15 s before each sample.
    fn ingest_starts(head: &Head, from: i64, to: i64) {
        let metadata = crate::storage::metadata::MetadataStore::new(1, 1024);
        let mut app = crate::storage::Appender::new(head, &metadata, i64::MAX / 2);
        let mut c = AppendCounts::default();
        for i in from..to {
            let t = i * 15_000;
            for (name, st) in [
                ("c_total", (i / 10) * 150_000 - 1_000),
                ("d_total", t - 14_999),
            ] {
                let labels = [("__name__", name)];
                let mut raw = Vec::new();
                encode_canonical(labels, &mut raw);
                let r = app
                    .append_new(&labels, &raw, std::iter::once((t, i as f64)), &mut c)
                    .expect("under the limit");
                let kept = app.note_starts(r, std::iter::once((t, st)));
                assert_eq!(kept, head.opts().st_storage);
            }
        }
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(app.commit().durable())
            .expect("durable");
    }

    fn starts(head: &Head) -> Vec<(String, Vec<crate::storage::starts::StartRun>)> {
        let all = Matcher::new(MatchOp::Regex, "__name__", ".+").expect("re");
        head.querier()
            .select(&[all], i64::MIN, i64::MAX)
            .into_iter()
            .map(|s| (format!("{:?}", s.labels), s.starts))
            .collect()
    }

    #[test]
    fn start_times_survive_a_restart_through_the_log_and_a_checkpoint() {
        use crate::storage::starts::start_at;
        let dir = tempfile::tempdir().expect("tmp");
        let opts = || HeadOptions {
            st_storage: true,
            ..HeadOptions::default()
        };
        let head = Head::open(opts(), &durability(dir.path())).expect("open");
        ingest_starts(&head, 0, 25);
        let before = starts(&head);
        // A run per reset of the counter; two for the deltas (the first
        // sample's start, then "15 s before each").
        assert_eq!(before[0].1.len(), 3, "{before:?}");
        assert_eq!(before[1].1.len(), 2, "{before:?}");
        assert_eq!(start_at(&before[0].1, 12 * 15_000), 149_000);
        assert_eq!(start_at(&before[1].1, 12 * 15_000), 12 * 15_000 - 14_999);
        head.close_wal();
        drop(head);
        // From the WAL alone.
        let head = Head::open(opts(), &durability(dir.path())).expect("open");
        assert_eq!(starts(&head), before);
        // From a checkpoint plus the log after it.
        let r = write_checkpoint(&head, dir.path());
        assert!(r.deleted_segments > 0, "{r:?}");
        ingest_starts(&head, 25, 35);
        let before = starts(&head);
        assert_eq!(before[0].1.len(), 4, "{before:?}");
        head.close_wal();
        drop(head);
        let head = Head::open(opts(), &durability(dir.path())).expect("open");
        assert_eq!(starts(&head), before);
        // Without the feature nothing is kept.
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        ingest_starts(&head, 0, 5);
        assert!(starts(&head).iter().all(|(_, r)| r.is_empty()));
    }

    #[test]
    fn histograms_survive_a_restart_through_the_log_and_a_checkpoint() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_histograms(&head, 0, 150);
        let before = histograms(&head);
        assert_eq!(before.len(), 2);
        assert!(
            before.iter().all(|(_, h)| h.len() == 150),
            "{}",
            before[0].1.len()
        );
        let chunks = head.stats().chunks;
        assert!(chunks > 2, "several chunks per series: {chunks}");
        head.close_wal();
        drop(head);
        // From the WAL alone.
        let head = open(dir.path());
        assert_eq!(histograms(&head), before);
        // From a checkpoint plus the log after it.
        let r = write_checkpoint(&head, dir.path());
        assert!(r.deleted_segments > 0, "{r:?}");
        append_histograms(&head, 150, 30);
        let before = histograms(&head);
        let stats = head.stats();
        head.close_wal();
        drop(head);
        let head = open(dir.path());
        assert_eq!(histograms(&head), before);
        assert_eq!(head.stats().chunks, stats.chunks);
        assert_eq!(head.stats().chunk_bytes, stats.chunk_bytes);
        // Samples continue after the restart, in the same chunks.
        append_histograms(&head, 180, 1);
        assert_eq!(histograms(&head)[0].1.len(), 181);
    }

    #[test]
    fn a_checkpoint_plus_the_log_after_it_restores_the_head() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        // 300 samples per series: sealed chunks and an open one.
        append_rounds(&head, 0, 300);
        let r = write_checkpoint(&head, dir.path());
        assert_eq!(r.series, 20);
        assert!(r.deleted_segments > 0, "{r:?}");
        append_rounds(&head, 300, 330);
        let want = everything(&head);
        head.close_wal();
        drop(head);
        assert_eq!(list(dir.path()).expect("list"), vec![r.segment]);
        let reopened = open(dir.path());
        assert_eq!(everything(&reopened), want);
        let rec = reopened.recovery().expect("recovered");
        assert_eq!(rec.checkpoint_series, 20);
        assert_eq!(
            rec.samples,
            20 * 30,
            "only the log after the checkpoint is replayed"
        );
        // And a checkpoint of the reopened head (open chunks rebuilt from
        // bytes) restores the same again.
        write_checkpoint(&reopened, dir.path());
        reopened.close_wal();
        drop(reopened);
        assert_eq!(everything(&open(dir.path())), want);
    }

    /// Copies the chunk files of one data directory into another.
    fn copy_chunk_files(from: &Path, to: &Path) {
        let (from, to) = (chunks::dir(from), chunks::dir(to));
        fs::create_dir_all(&to).expect("mkdir");
        for e in fs::read_dir(&from).expect("ls") {
            let p = e.expect("entry").path();
            fs::copy(&p, to.join(p.file_name().expect("name"))).expect("copy");
        }
    }

    fn write_checkpoint(head: &Head, dir: &Path) -> CheckpointReport {
        super::write(head, dir).expect("checkpoint")
    }

    #[test]
    fn a_crash_at_any_step_of_a_checkpoint_restores_the_same_head() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_rounds(&head, 0, 200);
        let first = write_checkpoint(&head, dir.path());
        append_rounds(&head, 200, 260);
        let want = everything(&head);
        // Take a second checkpoint but keep what the crash would leave:
        // the WAL segments it covers, and the first checkpoint.
        let wal = dir.path().join("wal");
        let saved: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&wal)
            .expect("ls")
            .map(|e| {
                let p = e.expect("entry").path();
                let b = fs::read(&p).expect("read");
                (p, b)
            })
            .collect();
        let first_bytes = fs::read(checkpoint_path(dir.path(), first.segment)).expect("read");
        let second = write_checkpoint(&head, dir.path());
        head.close_wal();
        drop(head);
        let second_bytes = fs::read(checkpoint_path(dir.path(), second.segment)).expect("read");
        let restore_all = || {
            for (p, b) in &saved {
                if !p.exists() {
                    fs::write(p, b).expect("restore segment");
                }
            }
        };
        // 1. Crash while writing the temp file: old checkpoint, all segments.
        restore_all();
        fs::remove_file(checkpoint_path(dir.path(), second.segment)).expect("rm");
        fs::write(checkpoint_path(dir.path(), first.segment), &first_bytes).expect("write");
        fs::write(
            dir.path()
                .join(format!("checkpoint.{:08}.tmp", second.segment)),
            &second_bytes[..second_bytes.len() / 2],
        )
        .expect("write tmp");
        let h = open(dir.path());
        assert_eq!(everything(&h), want, "crash before the rename");
        assert_eq!(
            list(dir.path()).expect("list"),
            vec![first.segment],
            "tmp removed"
        );
        h.close_wal();
        drop(h);
        // 2. Crash after the rename, before segments and the old checkpoint
        //    were deleted.
        let dir2 = tempfile::tempdir().expect("tmp");
        fs::create_dir(dir2.path().join("wal")).expect("mkdir");
        for (p, b) in &saved {
            fs::write(
                dir2.path().join("wal").join(p.file_name().expect("name")),
                b,
            )
            .expect("copy");
        }
        fs::write(checkpoint_path(dir2.path(), first.segment), &first_bytes).expect("write");
        fs::write(checkpoint_path(dir2.path(), second.segment), &second_bytes).expect("write");
        copy_chunk_files(dir.path(), dir2.path());
        let h = open(dir2.path());
        assert_eq!(everything(&h), want, "crash after the rename");
        let left = crate::wal::segments(&dir2.path().join("wal")).expect("ls");
        assert!(left.iter().all(|&s| s > second.segment), "{left:?}");
    }

    #[test]
    fn a_damaged_checkpoint_stops_start_unless_repaired() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_rounds(&head, 0, 50);
        let r = write_checkpoint(&head, dir.path());
        head.close_wal();
        drop(head);
        let p = checkpoint_path(dir.path(), r.segment);
        let mut b = fs::read(&p).expect("read");
        let mid = b.len() / 2;
        b[mid] ^= 0x10;
        fs::write(&p, &b).expect("write");
        let err = Head::open(HeadOptions::default(), &durability(dir.path())).expect_err("damaged");
        assert!(err.to_string().contains("--wal-repair"), "{err}");
        let mut d = durability(dir.path());
        d.wal.repair = crate::wal::Repair::DropFromDamage;
        let h = Head::open(HeadOptions::default(), &d).expect("repaired");
        let n = everything(&h).len();
        assert!(n > 0 && n < 20, "{n} series kept");
    }

    /// The chunk files under `dir`, by number.
    fn chunk_files(dir: &Path) -> Vec<u64> {
        let mut out: Vec<u64> = fs::read_dir(chunks::dir(dir))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    #[test]
    fn a_sealed_chunk_is_written_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        // 20 series of 400 samples: three sealed chunks each.
        append_rounds(&head, 0, 400);
        let first = write_checkpoint(&head, dir.path());
        assert_eq!(chunk_files(dir.path()), vec![first.segment]);
        let chunks_at_first =
            fs::metadata(chunks::dir(dir.path()).join(format!("{:08}", first.segment)))
                .expect("stat")
                .len();
        assert!(
            chunks_at_first > 20 * 3 * 100,
            "{chunks_at_first} bytes of chunks"
        );
        // Nothing new sealed: the next one writes only its own file, which
        // refers to the same chunks.
        let second = write_checkpoint(&head, dir.path());
        assert_eq!(chunk_files(dir.path()), vec![first.segment]);
        assert_eq!(
            second.written,
            fs::metadata(checkpoint_path(dir.path(), second.segment))
                .expect("stat")
                .len(),
            "only its own file"
        );
        assert_eq!(first.bytes, first.written);
        assert_eq!(second.bytes, second.written + chunks_at_first);
        // New sealed chunks go into a file of their own.
        append_rounds(&head, 400, 700);
        let third = write_checkpoint(&head, dir.path());
        assert_eq!(chunk_files(dir.path()), vec![first.segment, third.segment]);
        let want = everything(&head);
        head.close_wal();
        drop(head);
        let reopened = open(dir.path());
        assert_eq!(everything(&reopened), want);
        // A reopened head knows where its chunks are saved.
        let fourth = write_checkpoint(&reopened, dir.path());
        assert_eq!(
            fourth.written,
            fs::metadata(checkpoint_path(dir.path(), fourth.segment))
                .expect("stat")
                .len(),
            "only its own file"
        );
        assert_eq!(fourth.bytes, third.bytes);
        assert_eq!(chunk_files(dir.path()), vec![first.segment, third.segment]);
        // Once the head lets the oldest chunks go (retention), the files
        // only they were in are deleted.
        reopened.apply_retention(500 * 15_000);
        write_checkpoint(&reopened, dir.path());
        let left = chunk_files(dir.path());
        assert!(!left.contains(&first.segment), "{left:?}");
        let want = everything(&reopened);
        reopened.close_wal();
        drop(reopened);
        assert_eq!(everything(&open(dir.path())), want);
    }

    #[test]
    fn chunks_a_failed_checkpoint_wrote_are_written_again() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_rounds(&head, 0, 300);
        let first = write_checkpoint(&head, dir.path());
        append_rounds(&head, 300, 600);
        // The next checkpoint's chunk file cannot be made.
        let next = *crate::wal::segments(&dir.path().join("wal"))
            .expect("ls")
            .last()
            .expect("a segment");
        let blocker = chunks::dir(dir.path()).join(format!("{next:08}"));
        fs::create_dir(&blocker).expect("mkdir");
        super::write(&head, dir.path()).expect_err("the chunk file is a directory");
        fs::remove_dir(&blocker).expect("rmdir");
        assert_eq!(list(dir.path()).expect("ls"), vec![first.segment]);
        // The chunks it marked as saved in a file that never completed are
        // written again.
        let third = write_checkpoint(&head, dir.path());
        assert_eq!(chunk_files(dir.path()), vec![first.segment, third.segment]);
        let want = everything(&head);
        head.close_wal();
        drop(head);
        assert_eq!(everything(&open(dir.path())), want);
    }

    #[test]
    fn a_damaged_or_missing_chunk_file_stops_start_unless_repaired() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_rounds(&head, 0, 300);
        let r = write_checkpoint(&head, dir.path());
        head.close_wal();
        drop(head);
        let p = chunks::dir(dir.path()).join(format!("{:08}", r.segment));
        let mut bad = fs::read(&p).expect("read");
        let mid = bad.len() / 2;
        bad[mid] ^= 0x10;
        fs::write(&p, &bad).expect("write");
        let err = Head::open(HeadOptions::default(), &durability(dir.path())).expect_err("damaged");
        let text = err.to_string();
        assert!(text.contains("--wal-repair"), "{text}");
        assert!(
            text.contains(&*p.to_string_lossy()),
            "names the chunk file: {text}"
        );
        // Repair loads every series, without the one chunk that is damaged.
        let mut d = durability(dir.path());
        d.wal.repair = crate::wal::Repair::DropFromDamage;
        let samples =
            |h: &Head| -> Vec<usize> { everything(h).iter().map(|s| s.samples.len()).collect() };
        let h = Head::open(HeadOptions::default(), &d).expect("repaired");
        let got = samples(&h);
        assert_eq!(got.len(), 20);
        assert_eq!(got.iter().filter(|&&n| n < 300).count(), 1, "{got:?}");
        h.close_wal();
        drop(h);
        // A file gone altogether is damage too; repair keeps the open
        // chunks.
        fs::remove_file(&p).expect("rm");
        let err = Head::open(HeadOptions::default(), &durability(dir.path())).expect_err("missing");
        assert!(err.to_string().contains("--wal-repair"), "{err}");
        let h = Head::open(HeadOptions::default(), &d).expect("repaired");
        let got = samples(&h);
        assert!(got.len() == 20 && got.iter().all(|&n| n < 120), "{got:?}");
    }

    #[test]
    fn saved_chunks_keep_their_times_whatever_they_are() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = std::collections::BTreeSet::new();
        let mut saver = chunks::Saver::new(dir.path(), &good, 3);
        // (mint, maxt, saved in a file or inline): extremes, negative
        // times, overlapping and backward spans.
        let spans = [
            (i64::MIN, i64::MIN + 5, true),
            (-1_000, 0, false),
            (-500, -600, true),
            (i64::MAX - 10, i64::MAX, true),
            (0, i64::MIN, false),
            (7, 7, true),
        ];
        let bodies: Vec<Vec<u8>> = (0..spans.len() as u8)
            .map(|i| vec![i; 10 + i as usize])
            .collect();
        let mut out = Vec::new();
        encode_checkpoint_refs(&mut out, |out| {
            put_uvarint(out, 42);
            put_bytes(out, b"labels");
            out.extend_from_slice(&9i64.to_le_bytes());
            put_uvarint(out, spans.len() as u64);
            let mut prev = 0i64;
            for (&(mint, maxt, saved), body) in spans.iter().zip(&bodies) {
                out.push(if saved { SAVED } else { INLINE });
                put_uvarint(out, zigzag(mint.wrapping_sub(prev)));
                put_uvarint(out, zigzag(maxt.wrapping_sub(mint)));
                prev = maxt;
                if saved {
                    let loc = saver.save(0, body).expect("loc");
                    put_uvarint(out, chunks::file_of(loc));
                    put_uvarint(out, chunks::offset_of(loc));
                } else {
                    put_bytes(out, body);
                }
            }
            out.push(0);
        });
        saver.sync().expect("sync");
        let Ok((Record::CheckpointRefs(payload), _)) = record::decode(&out) else {
            panic!("a kind-8 record");
        };
        let files = ChunkFiles::read(dir.path()).expect("read");
        let image = parse_refs(payload, &files).expect("parses");
        let got: Vec<(i64, i64, &[u8])> = image.sealed.iter().map(|c| (c.0, c.1, c.2)).collect();
        let want: Vec<(i64, i64, &[u8])> = spans
            .iter()
            .zip(&bodies)
            .map(|(&(mint, maxt, _), b)| (mint, maxt, &b[..]))
            .collect();
        assert_eq!(got, want);
        // With the third chunk's bytes gone, repair keeps the others with
        // their own times.
        let third = image.sealed[2].3;
        let (path, offset) = ChunkFiles::place(dir.path(), third);
        let mut file = fs::read(&path).expect("read");
        file[offset as usize + 1] ^= 1;
        let damaged = ChunkFiles::from_files([(chunks::file_of(third), file)]);
        assert!(parse_refs(payload, &damaged).is_none());
        let mut bad = Vec::new();
        let image = parse_refs_without(payload, &damaged, &mut bad).expect("the record holds");
        assert_eq!(bad, vec![third]);
        let got: Vec<(i64, i64, &[u8])> = image.sealed.iter().map(|c| (c.0, c.1, c.2)).collect();
        let mut want = want;
        want.remove(2);
        assert_eq!(got, want);
    }

    /// A kind-3 record (every chunk inline) of a series without histograms.
    fn encode_inline(out: &mut Vec<u8>, image: &SeriesImage<'_>) {
        assert!(image.hist.is_none());
        record::encode_checkpoint(out, |out| {
            put_uvarint(out, image.id);
            put_bytes(out, image.labels);
            out.extend_from_slice(&image.next_at.to_le_bytes());
            put_uvarint(out, image.sealed.len() as u64);
            for &(mint, maxt, bytes, _) in &image.sealed {
                put_chunk(out, mint, maxt, bytes);
            }
            match image.open {
                Some((mint, maxt, bytes)) => {
                    out.push(1);
                    put_chunk(out, mint, maxt, bytes);
                }
                None => out.push(0),
            }
        });
    }

    #[test]
    fn a_checkpoint_from_before_chunk_files_loads() {
        let dir = tempfile::tempdir().expect("tmp");
        let head = open(dir.path());
        append_rounds(&head, 0, 300);
        let r = write_checkpoint(&head, dir.path());
        let want = everything(&head);
        head.close_wal();
        drop(head);
        // Rewrite it as a checkpoint was written before chunk files.
        let path = checkpoint_path(dir.path(), r.segment);
        let buf = fs::read(&path).expect("read");
        let files = ChunkFiles::read(dir.path()).expect("chunks");
        let mut old = Vec::new();
        let mut pos = 0;
        while let Ok((rec, len)) = record::decode(&buf[pos..]) {
            match rec {
                Record::CheckpointRefs(p) => {
                    encode_inline(&mut old, &parse_refs(p, &files).expect("parses"))
                }
                _ => old.extend_from_slice(&buf[pos..pos + len]),
            }
            pos += len;
        }
        assert_eq!(pos, buf.len());
        fs::write(&path, &old).expect("write");
        fs::remove_dir_all(chunks::dir(dir.path())).expect("rm");
        let h = open(dir.path());
        assert_eq!(everything(&h), want);
        // Its next checkpoint saves every sealed chunk.
        let next = write_checkpoint(&h, dir.path());
        assert_eq!(chunk_files(dir.path()), vec![next.segment]);
        h.close_wal();
        drop(h);
        assert_eq!(everything(&open(dir.path())), want);
    }

    #[test]
    fn the_schedule_waits_for_the_interval_or_a_big_log() {
        let t0 = std::time::Instant::now();
        let mut s = Schedule::new(std::time::Duration::from_secs(60), 0);
        assert!(!s.due(t0, 1000));
        assert!(s.due(t0 + std::time::Duration::from_secs(61), 1000));
        assert!(
            !s.due(t0 + std::time::Duration::from_secs(61), 0),
            "nothing new"
        );
        assert!(s.due(t0, 256 << 20));
        s.done(t0, 0, 1 << 30);
        assert!(
            !s.due(t0, 512 << 20),
            "the log has not outgrown the last checkpoint"
        );
        assert!(s.due(t0, 1 << 30));
        // A failure waits before it is tried again, however big the log.
        s.failed(t0);
        assert!(!s.due(t0 + std::time::Duration::from_secs(1), 1 << 40));
        assert!(s.due(t0 + Schedule::RETRY, 1 << 40));
    }
}
