//! Readers of the log, such as a forward destination: each has a name and
//! a position in the segment files, from which it reads records once they
//! are durable ([`super::commit::Progress::durable_at`]). A position saved
//! with [`save`] (under `wal/readers/<name>`) keeps its segment and every
//! later one from deletion by checkpoints
//! ([`super::remove_segments_through`]), so a restart resumes there.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use super::record::{self, Record, HEADER, MAX_RECORD};
pub use super::Position;
use super::{io_err, segment_path, segments, sync_dir, WalError};

const READERS: &str = "readers";
/// A saved position: segment and offset (u64 LE each), then their CRC32C.
const SAVED_LEN: usize = 20;

fn reader_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(READERS).join(name)
}

/// Whether `name` can name a reader: a file name of ASCII letters, digits,
/// `-`, `_` and `.`, not starting with a dot.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Saves `pos` as reader `name`'s position, durably: a temporary file,
/// fsynced, renamed over the old one, and the directory fsynced.
pub fn save(dir: &Path, name: &str, pos: Position) -> Result<(), WalError> {
    let readers = dir.join(READERS);
    fs::create_dir_all(&readers).map_err(io_err(&readers))?;
    let mut bytes = [0u8; SAVED_LEN];
    bytes[..8].copy_from_slice(&pos.segment.to_le_bytes());
    bytes[8..16].copy_from_slice(&pos.offset.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..16]);
    bytes[16..].copy_from_slice(&crc.to_le_bytes());
    let tmp = readers.join(format!(".{name}.tmp"));
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(&bytes).map_err(io_err(&tmp))?;
    f.sync_data().map_err(io_err(&tmp))?;
    let path = reader_path(dir, name);
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    sync_dir(&readers)
}

/// Reader `name`'s saved position; `None` if it has none. A damaged file
/// is an error that names it.
pub fn load(dir: &Path, name: &str) -> Result<Option<Position>, WalError> {
    let path = reader_path(dir, name);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    decode_saved(&bytes)
        .map(Some)
        .ok_or(WalError::CorruptPosition { path })
}

fn decode_saved(bytes: &[u8]) -> Option<Position> {
    let bytes: &[u8; SAVED_LEN] = bytes.try_into().ok()?;
    let crc = u32::from_le_bytes(bytes[16..].try_into().ok()?);
    if crc32c::crc32c(&bytes[..16]) != crc {
        return None;
    }
    Some(Position {
        segment: u64::from_le_bytes(bytes[..8].try_into().ok()?),
        offset: u64::from_le_bytes(bytes[8..16].try_into().ok()?),
    })
}

/// Forgets reader `name`, releasing the segments it held.
pub fn remove(dir: &Path, name: &str) -> Result<(), WalError> {
    let path = reader_path(dir, name);
    match fs::remove_file(&path) {
        Ok(()) => sync_dir(&dir.join(READERS)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// The readers with a saved position.
pub fn names(dir: &Path) -> Result<Vec<String>, WalError> {
    let mut out: Vec<String> = super::file_names(&dir.join(READERS))?
        .into_iter()
        .filter(|n| valid_name(n))
        .collect();
    out.sort();
    Ok(out)
}

/// The lowest segment any reader still needs, if any reader is saved. A
/// damaged position holds everything (segment 0): better kept than lost.
pub fn held_from(dir: &Path) -> Result<Option<u64>, WalError> {
    let mut held: Option<u64> = None;
    for name in names(dir)? {
        let segment = match load(dir, &name) {
            Ok(Some(p)) => p.segment,
            Ok(None) => continue,
            Err(_) => 0,
        };
        held = Some(held.map_or(segment, |h| h.min(segment)));
    }
    Ok(held)
}

/// Deletes segments numbered `last` or lower (a checkpoint covers them),
/// except those a reader still needs ([`held_from`]); returns how
/// many.
pub fn remove_segments_through(dir: &Path, last: u64) -> Result<usize, WalError> {
    let last = match held_from(dir)? {
        Some(held) => last.min(held.saturating_sub(1)),
        None => last,
    };
    let mut n = 0;
    for i in segments(dir)?.into_iter().filter(|&i| i <= last) {
        let p = segment_path(dir, i);
        fs::remove_file(&p).map_err(io_err(&p))?;
        n += 1;
    }
    if n > 0 {
        sync_dir(dir)?;
    }
    Ok(n)
}

/// What one [`Reader::read`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Records handed over.
    pub records: u64,
    /// Bytes of those records.
    pub bytes: u64,
    /// Bytes skipped: segments deleted before they were read, or the rest
    /// of a segment after a damaged record.
    pub skipped_bytes: u64,
}

/// Reads records from a position on, never past the durable end it is
/// given.
#[derive(Debug)]
pub struct Reader {
    dir: PathBuf,
    pos: Position,
    file: Option<(u64, File)>,
    buf: Vec<u8>,
}

impl Reader {
    /// A reader of the log in `dir` at `pos`.
    pub fn new(dir: &Path, pos: Position) -> Self {
        Self {
            dir: dir.to_owned(),
            pos,
            file: None,
            buf: Vec::new(),
        }
    }

    /// Where the next record starts.
    pub fn position(&self) -> Position {
        self.pos
    }

    /// Hands `f` each whole record between the position and `end`, with
    /// the position just past it, reading about `max_bytes` at most (one
    /// record more if a single record is larger). A segment before `end`'s
    /// is complete, so it is read to its end and the next one started.
    pub fn read(
        &mut self,
        end: Position,
        max_bytes: usize,
        mut f: impl FnMut(Record<'_>, Position),
    ) -> Result<ReadReport, WalError> {
        let mut report = ReadReport::default();
        while self.pos < end && (report.bytes as usize) < max_bytes {
            let path = segment_path(&self.dir, self.pos.segment);
            let file_len = match self.open()? {
                Some(len) => len,
                None => {
                    // Deleted under us (dropped for lag, or by hand): go on
                    // with the next segment that exists.
                    let next = segments(&self.dir)?
                        .into_iter()
                        .find(|&s| s > self.pos.segment && s <= end.segment);
                    match next {
                        Some(s) => {
                            tracing::warn!(segment = %path.display(), "WAL segment gone before it was read; going on with the next");
                            self.pos = Position {
                                segment: s,
                                offset: 0,
                            };
                            continue;
                        }
                        None => break,
                    }
                }
            };
            let stop = if self.pos.segment < end.segment {
                file_len
            } else {
                end.offset.min(file_len)
            };
            if self.pos.offset >= stop {
                if self.pos.segment < end.segment {
                    self.next_segment();
                    continue;
                }
                break;
            }
            let want = (stop - self.pos.offset).min((max_bytes as u64).max(HEADER as u64 + 1));
            self.fill(self.pos.offset, want as usize, &path)?;
            let mut at = 0usize;
            loop {
                match record::decode(&self.buf[at..]) {
                    Ok((rec, len)) => {
                        at += len;
                        let after = Position {
                            segment: self.pos.segment,
                            offset: self.pos.offset + at as u64,
                        };
                        report.records += 1;
                        report.bytes += len as u64;
                        f(rec, after);
                    }
                    Err(record::FrameError::Truncated) if at == 0 => {
                        // A record larger than what was read: read it whole.
                        let need = record_len(&self.buf).unwrap_or(usize::MAX);
                        let room = (stop - self.pos.offset) as usize;
                        if need > MAX_RECORD + HEADER || need > room {
                            report.skipped_bytes += self.skip_segment(stop, end);
                            break;
                        }
                        self.fill(self.pos.offset, need, &path)?;
                        continue;
                    }
                    Err(record::FrameError::Truncated) => break,
                    Err(e) => {
                        tracing::error!(segment = %path.display(), offset = self.pos.offset + at as u64, error = ?e, "damaged WAL record; skipping the rest of the segment");
                        self.pos.offset += at as u64;
                        report.skipped_bytes += self.skip_segment(stop, end);
                        at = 0;
                        break;
                    }
                }
                if at >= self.buf.len() {
                    break;
                }
            }
            self.pos.offset += at as u64;
        }
        Ok(report)
    }

    /// Opens the current segment if needed; its length, or `None` if the
    /// file is gone.
    fn open(&mut self) -> Result<Option<u64>, WalError> {
        let path = segment_path(&self.dir, self.pos.segment);
        if !matches!(&self.file, Some((s, _)) if *s == self.pos.segment) {
            self.file = None;
            match OpenOptions::new().read(true).open(&path) {
                Ok(f) => self.file = Some((self.pos.segment, f)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(io_err(&path)(e)),
            }
        }
        let Some((_, f)) = &self.file else {
            return Ok(None);
        };
        Ok(Some(f.metadata().map_err(io_err(&path))?.len()))
    }

    fn fill(&mut self, offset: u64, len: usize, path: &Path) -> Result<(), WalError> {
        self.buf.clear();
        self.buf.resize(len, 0);
        if let Some((_, f)) = &self.file {
            f.read_exact_at(&mut self.buf, offset)
                .map_err(io_err(path))?;
        }
        Ok(())
    }

    fn next_segment(&mut self) {
        self.pos = Position {
            segment: self.pos.segment + 1,
            offset: 0,
        };
        self.file = None;
        crate::reuse::trim(&mut self.buf);
    }

    /// Gives up on the rest of the current segment; the bytes given up.
    fn skip_segment(&mut self, stop: u64, end: Position) -> u64 {
        let skipped = stop.saturating_sub(self.pos.offset);
        if self.pos.segment < end.segment {
            self.next_segment();
        } else {
            self.pos.offset = stop;
        }
        skipped
    }
}

fn record_len(buf: &[u8]) -> Option<usize> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?);
    Some(HEADER + len as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::{encode_samples, encode_series};
    use crate::wal::{WalOptions, WalWriter};

    fn collect(r: &mut Reader, end: Position, max: usize) -> Vec<String> {
        let mut got = Vec::new();
        r.read(end, max, |rec, _| match rec {
            Record::Series { series_ref, .. } => got.push(format!("s{series_ref}")),
            Record::Samples(s) => got.extend(s.map(|(r, t, _)| format!("x{r}@{t}"))),
            _ => {}
        })
        .expect("read");
        got
    }

    #[test]
    fn reads_up_to_the_end_it_is_given_across_segments_and_resumes() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut w = WalWriter::open(
            dir.path(),
            WalOptions {
                segment_bytes: 64,
                repair: crate::wal::Repair::Refuse,
                reserve_bytes: 0,
            },
        )
        .expect("open");
        let start = w.end();
        let mut ends = Vec::new();
        for i in 1..=6u64 {
            let mut buf = Vec::new();
            encode_series(&mut buf, i, b"labels");
            encode_samples(&mut buf, &[(i, i as i64, 0.0)]);
            w.append(&buf).expect("append");
            ends.push(w.end());
        }
        assert!(w.segment() > start.segment, "several segments");
        let mut r = Reader::new(dir.path(), start);
        // Nothing past the end given, even though the file holds more.
        let got = collect(&mut r, ends[2], 1 << 20);
        assert_eq!(got, ["s1", "x1@1", "s2", "x2@2", "s3", "x3@3"]);
        assert_eq!(r.position(), ends[2]);
        // A small read budget still makes progress, a record at a time.
        let got = collect(&mut r, ends[5], 1);
        assert_eq!(got, ["s4"]);
        let got = collect(&mut r, ends[5], 1 << 20);
        assert_eq!(got, ["x4@4", "s5", "x5@5", "s6", "x6@6"]);
        assert_eq!(r.position(), ends[5]);
        assert!(collect(&mut r, ends[5], 1 << 20).is_empty());
    }

    #[test]
    fn saved_positions_hold_their_segments_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("tmp");
        let wal = dir.path();
        for s in 1..=5u64 {
            fs::write(segment_path(wal, s), b"").expect("segment");
        }
        let pos = Position {
            segment: 3,
            offset: 17,
        };
        save(wal, "vm", pos).expect("save");
        assert_eq!(load(wal, "vm").expect("load"), Some(pos));
        assert_eq!(load(wal, "other").expect("load"), None);
        assert_eq!(held_from(wal).expect("held"), Some(3));
        // A checkpoint covering segment 5 deletes only 1 and 2.
        assert_eq!(remove_segments_through(wal, 5).expect("rm"), 2);
        assert_eq!(segments(wal).expect("ls"), [3, 4, 5]);
        remove(wal, "vm").expect("remove");
        assert_eq!(held_from(wal).expect("held"), None);
        assert_eq!(remove_segments_through(wal, 5).expect("rm"), 3);
    }

    #[test]
    fn a_damaged_position_file_is_refused_and_holds_everything() {
        let dir = tempfile::tempdir().expect("tmp");
        let wal = dir.path();
        save(wal, "a", Position::default()).expect("save");
        fs::write(reader_path(wal, "a"), [1u8; SAVED_LEN]).expect("damage");
        assert!(load(wal, "a").is_err());
        assert_eq!(held_from(wal).expect("held"), Some(0));
    }

    #[test]
    fn reader_names_are_plain_file_names() {
        assert!(valid_name("vm-1.prod_a"));
        for bad in ["", ".hidden", "a/b", "..", "a b"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }
}
