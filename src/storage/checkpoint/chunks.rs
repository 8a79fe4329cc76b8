//! Checkpoint chunk files: sealed chunks written once, by the first
//! checkpoint that meets them, and referred to by every checkpoint after
//! it until the head lets them go.
//!
//! A sealed chunk never changes, so rewriting it into every checkpoint (as
//! the whole-head checkpoint did) cost a checkpoint of a busy head about
//! four times what it needed to write. Each checkpoint that meets chunks
//! no earlier one saved writes them into a file of its own,
//! `checkpoint-chunks/NNNNNNNN` (the checkpoint's last WAL segment): an
//! 8-byte header (`"SLCH"`, version 1, three zero bytes), then per chunk
//! `len: uvarint | bytes | CRC32C(bytes): u32 LE`. A checkpoint refers to
//! a chunk by its location, `file << 40 | offset`.
//!
//! The file is fdatasynced, and the directory fsynced, before the
//! checkpoint that first refers to it is renamed into place: unlike the
//! WAL, which still holds what a failed checkpoint covers, these files
//! are the only copy once the segments are deleted. A checkpoint that
//! fails leaves its file unlisted among the good ones, so the chunks it
//! wrote are written again by the next; files no complete checkpoint
//! refers to are deleted after the next one succeeds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use crate::encoding::{put_uvarint, Cursor};
use crate::wal::{io_err, sync_dir, WalError};

/// A chunk file's first bytes.
const HEADER: [u8; 8] = *b"SLCH\x01\0\0\0";

/// Bits of a location that hold the offset; the file number has the rest.
const OFFSET_BITS: u32 = 40;

/// The largest file number a location can hold.
const MAX_FILE: u64 = (1 << (64 - OFFSET_BITS)) - 1;

/// The directory of the chunk files under a data directory.
pub(crate) fn dir(data: &Path) -> PathBuf {
    data.join("checkpoint-chunks")
}

fn path(dir: &Path, file: u64) -> PathBuf {
    dir.join(format!("{file:08}"))
}

/// A location's file number.
pub(crate) fn file_of(loc: u64) -> u64 {
    loc >> OFFSET_BITS
}

/// The location of `offset` in `file`, if a location can hold it.
fn pack(file: u64, offset: u64) -> Option<u64> {
    (file <= MAX_FILE && offset < 1 << OFFSET_BITS).then_some(file << OFFSET_BITS | offset)
}

/// Chunk files in `dir` by number (other names, and directories, are left
/// alone).
fn numbers(dir: &Path) -> Result<Vec<u64>, WalError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.len() < 8 || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            if let Ok(n) = name.parse() {
                out.push(n);
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The chunk files of a data directory, read whole for a load.
#[derive(Debug, Default)]
pub struct ChunkFiles {
    files: BTreeMap<u64, Vec<u8>>,
}

impl ChunkFiles {
    /// Reads every chunk file under the data directory `data` (none if it
    /// has no chunk directory).
    pub fn read(data: &Path) -> Result<Self, WalError> {
        let dir = dir(data);
        let mut files = BTreeMap::new();
        for n in numbers(&dir)? {
            let p = path(&dir, n);
            files.insert(n, fs::read(&p).map_err(io_err(&p))?);
        }
        Ok(Self { files })
    }

    /// Files given as bytes, by number (tests and fuzzing).
    pub fn from_files(files: impl IntoIterator<Item = (u64, Vec<u8>)>) -> Self {
        Self {
            files: files.into_iter().collect(),
        }
    }

    /// The chunk at `loc`: `None` if its file is missing, has the wrong
    /// header, or the record there is cut short or fails its CRC.
    pub fn chunk(&self, loc: u64) -> Option<&[u8]> {
        let buf = self.files.get(&file_of(loc))?;
        if buf.get(..HEADER.len())? != HEADER {
            return None;
        }
        let offset = usize::try_from(loc & ((1 << OFFSET_BITS) - 1)).ok()?;
        if offset < HEADER.len() {
            return None;
        }
        let mut r = Cursor(buf.get(offset..)?);
        let bytes = r.bytes()?;
        let crc = r.0.get(..4)?;
        (crc32c::crc32c(bytes).to_le_bytes() == crc).then_some(bytes)
    }
}

/// Chunks one checkpoint saves: which locations it may refer to as they
/// are, and the file it writes the others into.
pub(crate) struct Saver<'a> {
    dir: PathBuf,
    /// Files the newest complete checkpoint refers to.
    good: &'a BTreeSet<u64>,
    /// This checkpoint's file number (its last segment).
    number: u64,
    file: Option<io::BufWriter<File>>,
    /// Where the next chunk goes in the file.
    offset: u64,
    /// Chunks waiting to be written, from `offset` on.
    pending: Vec<u8>,
    /// Files this checkpoint refers to.
    pub(crate) referenced: BTreeSet<u64>,
    last_referenced: Option<u64>,
    /// Chunk bytes written (records included).
    pub(crate) written: u64,
}

impl<'a> Saver<'a> {
    /// A saver for the checkpoint of segment `number` into the data
    /// directory `data`, which may refer to chunks in `good`.
    pub(crate) fn new(data: &Path, good: &'a BTreeSet<u64>, number: u64) -> Self {
        Self {
            dir: dir(data),
            good,
            number,
            file: None,
            offset: HEADER.len() as u64,
            pending: Vec::new(),
            referenced: BTreeSet::new(),
            last_referenced: None,
            written: 0,
        }
    }

    /// The location of a chunk whose last save was `saved` (0: none): that
    /// one if its file is good, else a new one in this checkpoint's file,
    /// queued to be written. `None` if no location can hold it (the
    /// checkpoint then holds the bytes itself).
    pub(crate) fn save(&mut self, saved: u64, bytes: &[u8]) -> Option<u64> {
        let loc = if saved != 0 && self.good.contains(&file_of(saved)) {
            saved
        } else {
            let loc = pack(self.number, self.offset + self.pending.len() as u64)?;
            put_uvarint(&mut self.pending, bytes.len() as u64);
            self.pending.extend_from_slice(bytes);
            self.pending
                .extend_from_slice(&crc32c::crc32c(bytes).to_le_bytes());
            loc
        };
        let file = file_of(loc);
        if self.last_referenced != Some(file) {
            self.referenced.insert(file);
            self.last_referenced = Some(file);
        }
        Some(loc)
    }

    /// Writes the queued chunks (into the page cache).
    pub(crate) fn flush(&mut self) -> Result<(), WalError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let p = path(&self.dir, self.number);
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                if self.good.contains(&self.number) {
                    // A location may already point into this file.
                    return Err(io_err(&p)(io::Error::other(
                        "a chunk file by this checkpoint's number is in use",
                    )));
                }
                fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
                let mut f =
                    io::BufWriter::with_capacity(1 << 20, File::create(&p).map_err(io_err(&p))?);
                f.write_all(&HEADER).map_err(io_err(&p))?;
                self.written += HEADER.len() as u64;
                self.file.insert(f)
            }
        };
        file.write_all(&self.pending).map_err(io_err(&p))?;
        self.offset += self.pending.len() as u64;
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Makes the chunks written durable, before the checkpoint that refers
    /// to them is.
    pub(crate) fn sync(&mut self) -> Result<(), WalError> {
        self.flush()?;
        let Some(file) = self.file.take() else {
            return Ok(());
        };
        let p = path(&self.dir, self.number);
        let file = file.into_inner().map_err(|e| io_err(&p)(e.into_error()))?;
        file.sync_data().map_err(io_err(&p))?;
        sync_dir(&self.dir)?;
        if let Some(parent) = self.dir.parent() {
            // The directory's own entry, the first time it is made.
            sync_dir(parent)?;
        }
        Ok(())
    }

    /// Total size of the files this checkpoint refers to.
    pub(crate) fn referenced_bytes(&self) -> u64 {
        self.referenced
            .iter()
            .filter_map(|&n| fs::metadata(path(&self.dir, n)).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// After a checkpoint that refers to the files `keep` is in place:
/// deletes the other chunk files under the data directory `data`.
pub(crate) fn remove_unreferenced(data: &Path, keep: &BTreeSet<u64>) -> Result<usize, WalError> {
    let dir = dir(data);
    let mut removed = 0;
    for n in numbers(&dir)? {
        if !keep.contains(&n) {
            let p = path(&dir, n);
            fs::remove_file(&p).map_err(io_err(&p))?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_chunk_reads_back_and_damage_is_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = BTreeSet::new();
        let mut s = Saver::new(dir.path(), &good, 7);
        let a = s.save(0, b"first chunk").expect("loc");
        let b = s.save(0, b"second").expect("loc");
        s.sync().expect("sync");
        assert_eq!(s.referenced, BTreeSet::from([7]));
        let files = ChunkFiles::read(dir.path()).expect("read");
        assert_eq!(files.chunk(a), Some(&b"first chunk"[..]));
        assert_eq!(files.chunk(b), Some(&b"second"[..]));
        assert_eq!(files.chunk(b + 1), None, "not a record's start");
        assert_eq!(files.chunk(pack(8, 8).expect("loc")), None, "no such file");
        assert_eq!(files.chunk(7 << OFFSET_BITS), None, "the header");
        // A flipped bit in a chunk fails its CRC.
        let p = path(&super::dir(dir.path()), 7);
        let mut bytes = fs::read(&p).expect("read");
        bytes[10] ^= 1;
        let files = ChunkFiles::from_files([(7, bytes)]);
        assert_eq!(files.chunk(a), None);
        assert_eq!(files.chunk(b), Some(&b"second"[..]));
    }

    #[test]
    fn a_chunk_in_a_good_file_is_not_written_again() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = BTreeSet::from([3]);
        let mut s = Saver::new(dir.path(), &good, 9);
        let old = pack(3, 100).expect("loc");
        assert_eq!(s.save(old, b"kept"), Some(old));
        // A location in a file no complete checkpoint refers to (one a
        // failed checkpoint wrote) is written again.
        let failed = pack(5, 8).expect("loc");
        let new = s.save(failed, b"again").expect("loc");
        assert_eq!(file_of(new), 9);
        s.sync().expect("sync");
        assert_eq!(s.referenced, BTreeSet::from([3, 9]));
        fs::write(path(&super::dir(dir.path()), 5), HEADER).expect("write");
        assert_eq!(
            remove_unreferenced(dir.path(), &s.referenced).expect("gc"),
            1
        );
        assert_eq!(numbers(&super::dir(dir.path())).expect("ls"), vec![9]);
    }

    #[test]
    fn a_file_number_in_use_is_not_overwritten() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = BTreeSet::from([4]);
        let mut s = Saver::new(dir.path(), &good, 4);
        assert!(s.save(0, b"x").is_some());
        assert!(s.flush().is_err());
    }
}
