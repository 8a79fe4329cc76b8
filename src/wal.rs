//! The write-ahead log: numbered segment files of framed, CRC32C-checked
//! records ([`record`]) under `<data-dir>/wal/`, and their replay.
//!
//! Replay reads segments in order. A bad record with nothing valid after it
//! is a torn tail (a write cut short by a crash): it is truncated away with
//! a warning and replay succeeds. A bad record with valid records after it
//! (later in its segment, or in later segments) is corruption in the
//! middle: replay fails, unless `repair` is set, in which case everything
//! from the bad record on is dropped, loudly.
//!
//! [`commit::GroupCommit`] is the one writer: requests queue their frames,
//! one thread writes and fsyncs them together. The head decides what goes
//! in (see `storage::head`: shards log under their own locks) and what a
//! checkpoint covers (`storage::checkpoint`); this module knows only bytes.

pub mod commit;
pub mod reader;
pub mod record;

pub use reader::remove_segments_through;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use record::{FrameError, Record, HEADER};

/// A place in the log: a segment and a byte offset in it, always at a
/// record boundary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The segment's number.
    pub segment: u64,
    /// Bytes into the segment.
    pub offset: u64,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:08}:{}", self.segment, self.offset)
    }
}

/// WAL settings.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// A segment is closed and a new one started once it would grow past
    /// this many bytes (a record larger than this gets a segment alone).
    pub segment_bytes: u64,
    /// What corruption in the middle of the log does.
    pub repair: Repair,
    /// Disk space held back in a file beside the log (`<dir>.reserve`):
    /// when a write finds the disk full, the reserve is given up and the
    /// write tried again into the space it leaves, so that writes already
    /// appended to the head reach the log; new writes are refused until
    /// the reserve can be held again. 0 holds none.
    pub reserve_bytes: u64,
}

/// What replay does with corruption before the log's last record (a torn
/// tail is always cut off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Repair {
    /// Refuse to start, naming the segment and offset.
    #[default]
    Refuse,
    /// Drop everything from the bad record on and start
    /// (`--wal-repair`).
    DropFromDamage,
}

impl Default for WalOptions {
    fn default() -> Self {
        Self {
            segment_bytes: 128 << 20,
            repair: Repair::Refuse,
            reserve_bytes: 0,
        }
    }
}

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A file operation failed.
    #[error("WAL I/O error on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// An append failed (a full disk, say) and the segment was cut back
    /// to its last whole frame: the same frames may be appended again.
    #[error(
        "WAL write to {path} failed: {source}; the segment was cut back to its last whole record"
    )]
    WriteCutBack {
        /// The segment file.
        path: PathBuf,
        /// What the OS said.
        source: io::Error,
    },
    /// A bad record with valid records after it.
    #[error(
        "WAL corrupt: segment {segment} at byte {offset}: {what}; valid records follow it, so \
         this is not a torn write. Start with --wal-repair to drop everything from there on"
    )]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        what: &'static str,
    },
    /// A reader's saved position that does not check out.
    #[error(
        "WAL reader position {path} is damaged; delete it to start that reader at the end of the log"
    )]
    CorruptPosition {
        /// The position file.
        path: PathBuf,
    },
    /// A checkpoint record that does not check out.
    #[error(
        "checkpoint {path} is damaged at byte {offset}. Start with --wal-repair to keep the \
         series before the damage"
    )]
    CorruptCheckpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
    },
    /// A checkpoint refers to a chunk that is missing or fails its CRC.
    #[error(
        "checkpoint {path} refers to a chunk of series {series} in {chunk_file} at byte \
         {offset} that is missing or damaged. Start with --wal-repair to load the series \
         without the chunks that are"
    )]
    CorruptCheckpointChunk {
        /// The checkpoint file.
        path: PathBuf,
        /// The series' reference.
        series: u64,
        /// The chunk file.
        chunk_file: PathBuf,
        /// Where in it the chunk was to start.
        offset: u64,
    },
}

/// Maps an I/O error on `path` to [`WalError::Io`].
pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What a replay found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// Segment files read.
    pub segments: usize,
    /// The number of the last segment read (0 when none was).
    pub last_segment: u64,
    /// Valid records replayed.
    pub records: u64,
    /// Bytes of valid records.
    pub bytes: u64,
    /// Bytes cut off a torn tail, or dropped by a repair.
    pub dropped_bytes: u64,
    /// Records among the dropped bytes that still had valid checksums
    /// (0 for a torn tail).
    pub dropped_records: u64,
    /// Whether a repair dropped data from the middle of the log.
    pub repaired: bool,
}

pub(crate) fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:08}"))
}

/// Segment indexes in `dir`, ascending; other files are ignored.
pub fn segments(dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut out: Vec<u64> = file_names(dir)?
        .iter()
        .filter(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|n| n.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The UTF-8 file names in `dir`; none if it does not exist.
pub(crate) fn file_names(dir: &Path) -> Result<Vec<String>, WalError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        if let Ok(name) = entry.file_name().into_string() {
            out.push(name);
        }
    }
    Ok(out)
}

fn frame_error(e: FrameError) -> &'static str {
    match e {
        FrameError::Truncated => "record cut short",
        FrameError::BadLength => "impossible record length",
        FrameError::BadCrc => "checksum mismatch",
        FrameError::BadPayload => "unknown record kind or malformed payload",
    }
}

/// Valid records in `buf` at or after `from`, found by trying every offset
/// (only after damage, so speed matters less than not missing one).
fn valid_records_after(buf: &[u8], from: usize) -> u64 {
    let mut n = 0;
    let mut pos = from;
    while pos + HEADER < buf.len() {
        match record::decode(&buf[pos..]) {
            Ok((_, len)) => {
                n += 1;
                pos += len;
            }
            Err(_) => pos += 1,
        }
    }
    n
}

/// Replays every record in `dir` in order, calling `f` on each. Truncates
/// a torn tail; on corruption in the middle fails, or with
/// `opts.repair` truncates there and removes later segments.
pub fn replay(
    dir: &Path,
    opts: &WalOptions,
    f: impl FnMut(Record<'_>),
) -> Result<ReplayReport, WalError> {
    replay_after(dir, 0, opts, f)
}

/// Like [`replay`], but skips segments numbered `after` or lower (those a
/// checkpoint covers). Logs progress every few seconds: percent of bytes,
/// records per second and the time left.
pub fn replay_after(
    dir: &Path,
    after: u64,
    opts: &WalOptions,
    mut f: impl FnMut(Record<'_>),
) -> Result<ReplayReport, WalError> {
    let indexes: Vec<u64> = segments(dir)?.into_iter().filter(|&i| i > after).collect();
    let total: u64 = indexes
        .iter()
        .map(|&j| fs::metadata(segment_path(dir, j)).map_or(0, |m| m.len()))
        .sum();
    let started = std::time::Instant::now();
    let mut next_log = started + PROGRESS_EVERY;
    let mut report = ReplayReport::default();
    for (i, &index) in indexes.iter().enumerate() {
        let path = segment_path(dir, index);
        let buf = fs::read(&path).map_err(io_err(&path))?;
        report.segments += 1;
        report.last_segment = index;
        let mut pos = 0;
        while pos < buf.len() {
            let err = match record::decode(&buf[pos..]) {
                Ok((rec, len)) => {
                    f(rec);
                    report.records += 1;
                    report.bytes += len as u64;
                    pos += len;
                    if report.records.is_multiple_of(4096) && std::time::Instant::now() >= next_log
                    {
                        log_progress(&report, total, started);
                        next_log += PROGRESS_EVERY;
                    }
                    continue;
                }
                Err(e) => e,
            };
            let later_here = valid_records_after(&buf, pos + 1);
            let later_segments = &indexes[i + 1..];
            let later_bytes: u64 = later_segments
                .iter()
                .map(|&j| fs::metadata(segment_path(dir, j)).map_or(0, |m| m.len()))
                .sum();
            let torn_tail = later_here == 0 && later_bytes == 0;
            if !torn_tail && opts.repair == Repair::Refuse {
                return Err(WalError::Corrupt {
                    segment: path,
                    offset: pos as u64,
                    what: frame_error(err),
                });
            }
            let dropped = (buf.len() - pos) as u64;
            truncate(&path, pos as u64)?;
            for &j in later_segments {
                let p = segment_path(dir, j);
                let later = fs::read(&p).map_err(io_err(&p))?;
                report.dropped_records += valid_records_after(&later, 0);
                fs::remove_file(&p).map_err(io_err(&p))?;
            }
            report.dropped_bytes += dropped + later_bytes;
            report.dropped_records += later_here;
            if torn_tail {
                tracing::warn!(
                    segment = %path.display(),
                    offset = pos,
                    dropped_bytes = dropped,
                    problem = frame_error(err),
                    "WAL ends in a torn record (a write cut short); truncated it"
                );
            } else {
                report.repaired = true;
                tracing::error!(
                    segment = %path.display(),
                    offset = pos,
                    dropped_bytes = report.dropped_bytes,
                    dropped_records = report.dropped_records,
                    problem = frame_error(err),
                    "WAL corrupt in the middle; --wal-repair dropped everything from there on"
                );
            }
            return Ok(report);
        }
    }
    Ok(report)
}

const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

fn log_progress(report: &ReplayReport, total: u64, started: std::time::Instant) {
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let done = report.bytes.max(1) as f64;
    let eta = (total as f64 - done).max(0.0) * secs / done;
    tracing::info!(
        percent = format_args!("{:.1}", 100.0 * done / total.max(1) as f64),
        records_per_second = (report.records as f64 / secs) as u64,
        eta_seconds = format_args!("{eta:.0}"),
        "replaying WAL"
    );
}

fn truncate(path: &Path, len: u64) -> Result<(), WalError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    file.set_len(len).map_err(io_err(path))?;
    file.sync_all().map_err(io_err(path))
}

/// Fsyncs directory `dir`, so that files created or renamed in it stay.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), WalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

/// Disk space the log holds back for a full disk: a file of zeros beside
/// it, emptied when a write finds no space so the write can be tried again
/// into the space it leaves, and filled again once space returns. Shared
/// by the WAL thread, which gives it up, and the write path, which refuses
/// writes while it is not held and tries to hold it again.
#[derive(Debug)]
pub struct SpaceReserve {
    path: PathBuf,
    bytes: u64,
    held: std::sync::atomic::AtomicBool,
    file: parking_lot::Mutex<Option<File>>,
}

impl SpaceReserve {
    fn new(path: PathBuf, bytes: u64) -> Self {
        Self {
            path,
            bytes,
            held: std::sync::atomic::AtomicBool::new(bytes == 0),
            file: parking_lot::Mutex::new(None),
        }
    }

    /// Whether the space is held (always, with a reserve of 0 bytes).
    pub fn is_held(&self) -> bool {
        self.held.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Holds the space if it is not held: writes the file out to its size.
    /// Returns whether it is held now; `false` also when another thread is
    /// trying right now.
    pub fn try_hold(&self) -> bool {
        if self.is_held() {
            return true;
        }
        let Some(mut file) = self.file.try_lock() else {
            return false;
        };
        if self.is_held() {
            return true;
        }
        match self.fill(&mut file) {
            Ok(()) => {
                self.held.store(true, std::sync::atomic::Ordering::Release);
                true
            }
            Err(_) => {
                if let Some(f) = file.as_ref() {
                    let _ = f.set_len(0);
                }
                false
            }
        }
    }

    fn fill(&self, file: &mut Option<File>) -> io::Result<()> {
        if file.is_none() {
            *file = Some(
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&self.path)?,
            );
        }
        let Some(f) = file.as_mut() else {
            return Err(io::Error::other("reserve file not open"));
        };
        let have = f.metadata()?.len();
        if have >= self.bytes {
            return Ok(());
        }
        // Written out, not just sized: a sparse file holds no space.
        let zeros = vec![0u8; 64 << 10];
        let mut at = have;
        f.seek(io::SeekFrom::Start(at))?;
        while at < self.bytes {
            let n = usize::try_from(self.bytes - at)
                .unwrap_or(usize::MAX)
                .min(zeros.len());
            f.write_all(&zeros[..n])?;
            at += n as u64;
        }
        f.sync_data()
    }

    /// Gives the space up; returns whether it was held.
    fn release(&self) -> bool {
        let file = self.file.lock();
        if !self.held.swap(false, std::sync::atomic::Ordering::AcqRel) || self.bytes == 0 {
            return false;
        }
        match file.as_ref() {
            Some(f) => f.set_len(0).is_ok(),
            None => std::fs::remove_file(&self.path).is_ok(),
        }
    }
}

/// Appends framed records to the newest segment, starting a new one when
/// it is full.
#[derive(Debug)]
pub struct WalWriter {
    dir: PathBuf,
    opts: WalOptions,
    index: u64,
    file: File,
    len: u64,
    reserve: Arc<SpaceReserve>,
}

impl WalWriter {
    /// Starts a new segment after any in `dir` (replay them first).
    pub fn open(dir: &Path, opts: WalOptions) -> Result<Self, WalError> {
        Self::open_after(dir, 0, opts)
    }

    /// Like [`Self::open`], numbering the new segment past `after` too (the
    /// last segment a checkpoint covers, which may be deleted already).
    pub fn open_after(dir: &Path, after: u64, opts: WalOptions) -> Result<Self, WalError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let index = segments(dir)?.last().map_or(1, |i| i + 1).max(after + 1);
        let (file, _) = Self::create(dir, index)?;
        sync_dir(dir)?;
        let reserve = Arc::new(SpaceReserve::new(
            dir.with_extension("reserve"),
            opts.reserve_bytes,
        ));
        if !reserve.try_hold() {
            tracing::warn!(
                bytes = opts.reserve_bytes,
                path = %reserve.path.display(),
                "cannot hold the WAL's disk reserve: the disk is full; writes are refused until it can be held"
            );
        }
        Ok(Self {
            dir: dir.to_owned(),
            opts,
            index,
            file,
            len: 0,
            reserve,
        })
    }

    /// The disk space this log holds back.
    pub fn reserve(&self) -> Arc<SpaceReserve> {
        Arc::clone(&self.reserve)
    }

    /// Gives up the disk reserve, so a write the disk refused can be tried
    /// again; returns whether there was one to give up.
    pub fn release_reserve(&self) -> bool {
        self.reserve.release()
    }

    fn create(dir: &Path, index: u64) -> Result<(File, PathBuf), WalError> {
        let path = segment_path(dir, index);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok((file, path))
    }

    /// Appends whole frames (from [`record::encode_series`] and
    /// [`record::encode_samples`]). Not durable until [`Self::sync`].
    pub fn append(&mut self, frames: &[u8]) -> Result<(), WalError> {
        if self.len > 0 && self.len + frames.len() as u64 > self.opts.segment_bytes {
            self.rotate()?;
        }
        let path = segment_path(&self.dir, self.index);
        if let Err(e) = self.file.write_all(frames) {
            // A short write (a full disk) leaves part of a frame: cut the
            // segment back to its last whole frame, so that a later append
            // of the same frames continues a valid log. If even that fails,
            // the log cannot be continued.
            return Err(match self.file.set_len(self.len) {
                Ok(()) => WalError::WriteCutBack { path, source: e },
                Err(_) => io_err(&path)(e),
            });
        }
        self.len += frames.len() as u64;
        Ok(())
    }

    /// Makes everything appended so far durable.
    pub fn sync(&mut self) -> Result<(), WalError> {
        let path = segment_path(&self.dir, self.index);
        self.file.sync_data().map_err(io_err(&path))
    }

    /// Fsyncs the current segment and starts the next.
    pub(crate) fn rotate(&mut self) -> Result<(), WalError> {
        self.sync()?;
        // No new segment (a full disk, say) changes nothing yet: the same
        // frames may be appended again.
        let (file, _) = Self::create(&self.dir, self.index + 1).map_err(|e| match e {
            WalError::Io { path, source } => WalError::WriteCutBack { path, source },
            other => other,
        })?;
        sync_dir(&self.dir)?;
        self.index += 1;
        self.file = file;
        self.len = 0;
        Ok(())
    }

    /// The segment being written.
    pub fn segment(&self) -> u64 {
        self.index
    }

    /// The position just past the last frame appended.
    pub fn end(&self) -> Position {
        Position {
            segment: self.index,
            offset: self.len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use record::{encode_samples, encode_series};

    /// Writes series 1..=n, each followed by one sample, one frame per
    /// append.
    fn write(dir: &Path, n: u64, segment_bytes: u64) {
        let mut w = WalWriter::open(
            dir,
            WalOptions {
                segment_bytes,
                repair: Repair::Refuse,
                reserve_bytes: 0,
            },
        )
        .expect("open");
        for i in 1..=n {
            let mut buf = Vec::new();
            encode_series(&mut buf, i, format!("series-{i}").as_bytes());
            w.append(&buf).expect("append");
            buf.clear();
            encode_samples(&mut buf, &[(i, i as i64 * 1000, i as f64)]);
            w.append(&buf).expect("append");
        }
        w.sync().expect("sync");
    }

    fn read(dir: &Path, repair: Repair) -> Result<(Vec<String>, ReplayReport), WalError> {
        let mut got = Vec::new();
        let report = replay(
            dir,
            &WalOptions {
                repair,
                ..WalOptions::default()
            },
            |r| match r {
                Record::Series { series_ref, labels } => {
                    got.push(format!("s{series_ref}:{}", String::from_utf8_lossy(labels)));
                }
                Record::Samples(s) => got.extend(s.map(|(r, t, v)| format!("x{r}@{t}={v}"))),
                Record::Checkpoint(_) | Record::CheckpointRefs(_) => got.push("checkpoint".into()),
                Record::Exemplars(e) => got.extend(e.map(|(_, _, t, v)| format!("e@{t}={v}"))),
                Record::Histograms(h) => got.extend(h.map(|(r, t, _)| format!("h{r}@{t}"))),
                Record::Flushed { below, .. } => got.push(format!("flushed<{below}")),
                Record::Starts(_) => got.push("starts".into()),
                Record::Tombstones(d) => got.extend(d.map(|(r, a, b)| format!("d{r}:{a}..{b}"))),
            },
        )?;
        Ok((got, report))
    }

    fn last_segment(dir: &Path) -> PathBuf {
        segment_path(
            dir,
            *segments(dir).expect("list").last().expect("a segment"),
        )
    }

    #[test]
    fn replays_everything_across_segments_in_order() {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), 50, 256);
        assert!(segments(dir.path()).expect("list").len() > 5);
        let (got, report) = read(dir.path(), Repair::Refuse).expect("replay");
        assert_eq!(report.records, 100);
        assert_eq!(got.len(), 100);
        assert_eq!(got[0], "s1:series-1");
        assert_eq!(got[99], "x50@50000=50");
        assert_eq!(report.dropped_bytes, 0);
        // A writer opened later continues in a new segment.
        let before = segments(dir.path()).expect("list").len();
        write(dir.path(), 1, 256);
        assert_eq!(segments(dir.path()).expect("list").len(), before + 1);
    }

    #[test]
    fn a_tail_cut_at_any_byte_is_truncated_and_the_rest_replays() {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), 3, 1 << 20);
        let seg = last_segment(dir.path());
        let full = fs::read(&seg).expect("read");
        let mut last_start = 0;
        let mut pos = 0;
        while pos < full.len() {
            last_start = pos;
            pos += record::decode(&full[pos..]).expect("valid").1;
        }
        for cut in last_start + 1..full.len() {
            fs::write(&seg, &full[..cut]).expect("write");
            let (got, report) =
                read(dir.path(), Repair::Refuse).expect("a torn tail is not an error");
            assert_eq!(got.len(), 5, "cut at {cut}");
            assert_eq!(report.dropped_bytes, (cut - last_start) as u64);
            assert_eq!(report.dropped_records, 0);
            assert!(!report.repaired);
            assert_eq!(fs::metadata(&seg).expect("stat").len(), last_start as u64);
            // Replaying again finds a clean log.
            let (_, again) = read(dir.path(), Repair::Refuse).expect("clean");
            assert_eq!(again.dropped_bytes, 0);
        }
    }

    #[test]
    fn a_flipped_bit_in_the_last_record_is_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), 3, 1 << 20);
        let seg = last_segment(dir.path());
        let mut bytes = fs::read(&seg).expect("read");
        let n = bytes.len();
        bytes[n - 3] ^= 0x10;
        fs::write(&seg, &bytes).expect("write");
        let (got, report) = read(dir.path(), Repair::Refuse).expect("tail");
        assert_eq!(got.len(), 5);
        assert!(report.dropped_bytes > 0);
    }

    #[test]
    fn a_flipped_bit_early_stops_replay_unless_repaired() {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), 20, 1 << 20);
        let seg = last_segment(dir.path());
        let mut bytes = fs::read(&seg).expect("read");
        // Inside the third record (series 2).
        let first = record::decode(&bytes).expect("valid").1;
        let second = record::decode(&bytes[first..]).expect("valid").1;
        bytes[first + second + HEADER + 2] ^= 0x01;
        fs::write(&seg, &bytes).expect("write");
        let err = read(dir.path(), Repair::Refuse).unwrap_err();
        assert!(
            matches!(err, WalError::Corrupt { offset, what: "checksum mismatch", .. } if offset == (first + second) as u64),
            "{err}"
        );
        assert!(err.to_string().contains("--wal-repair"));
        let (got, report) = read(dir.path(), Repair::DropFromDamage).expect("repaired");
        assert_eq!(got, vec!["s1:series-1", "x1@1000=1"]);
        assert!(report.repaired);
        assert_eq!(report.dropped_records, 37);
        let (again, clean) = read(dir.path(), Repair::Refuse).expect("clean after repair");
        assert_eq!(again.len(), 2);
        assert_eq!(clean.dropped_bytes, 0);
    }

    #[test]
    fn corruption_in_an_earlier_segment_is_not_a_tail() {
        let dir = tempfile::tempdir().expect("tmp");
        write(dir.path(), 10, 64);
        let first = segment_path(dir.path(), segments(dir.path()).expect("list")[0]);
        let mut bytes = fs::read(&first).expect("read");
        let n = bytes.len();
        bytes[n - 1] ^= 0x80;
        fs::write(&first, &bytes).expect("write");
        assert!(matches!(
            read(dir.path(), Repair::Refuse),
            Err(WalError::Corrupt { .. })
        ));
        let (_, report) = read(dir.path(), Repair::DropFromDamage).expect("repaired");
        assert!(report.repaired);
        assert_eq!(segments(dir.path()).expect("list").len(), 1);
    }
}
