//! Checkpoint chunk files: sealed chunks written once, by the first
//! checkpoint that meets them, and referred to by every checkpoint after
//! it until the head lets them go.
//!
//! A sealed chunk never changes, yet the whole-head checkpoint wrote it
//! again every time until a block cut took it: for a 2 h head, a
//! checkpoint 15 minutes after the last now writes 35% of it
//! (BENCHMARKS.md, "WAL and restart"). Each checkpoint that meets chunks
//! no earlier one saved writes them into a file of its own,
//! `checkpoint-chunks/NNNNNNNN` (the checkpoint's last WAL segment): an
//! 8-byte header (`"SLCH"`, version 1, three zero bytes), then per chunk
//! `len: uvarint | bytes | CRC32C(bytes): u32 LE`. A checkpoint refers to
//! a chunk by the file's number and the offset; in memory the two are one
//! location, `file << 40 | offset`.
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

/// The longest chunk a file holds. A sealed XOR chunk is at most 1 KiB
/// (the head seals one past 1005 bytes); the bound keeps a damaged or
/// crafted reference (5 bytes or more) from standing for much more than
/// that. A longer chunk stays inline in the checkpoint.
const MAX_CHUNK: usize = 2048;

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

/// A location's offset in its file.
pub(crate) fn offset_of(loc: u64) -> u64 {
    loc & ((1 << OFFSET_BITS) - 1)
}

/// The location of `offset` in `file`, if a location can hold it.
fn pack(file: u64, offset: u64) -> Option<u64> {
    (file <= MAX_FILE && offset < 1 << OFFSET_BITS).then_some(file << OFFSET_BITS | offset)
}

/// [`pack`] for a location read from a checkpoint: `None` if it cannot be
/// one (offset 0 is the header, never a chunk).
pub(crate) fn location(file: u64, offset: u64) -> Option<u64> {
    pack(file, offset).filter(|&loc| loc != 0)
}

/// Chunk files in `dir` by number (other names, and directories, are left
/// alone).
fn numbers(dir: &Path) -> Result<Vec<u64>, WalError> {
    let mut out: Vec<u64> = crate::wal::file_names(dir)?
        .iter()
        .filter_map(|name| {
            // Only the names `path` gives, so that a number names one file.
            let n = name.parse::<u64>().ok()?;
            (*name == format!("{n:08}") && dir.join(name).is_file()).then_some(n)
        })
        .collect();
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
    /// has no chunk directory). A file that cannot be read is left out:
    /// chunks in it read as missing, which is checkpoint damage.
    pub fn read(data: &Path) -> Result<Self, WalError> {
        let dir = dir(data);
        let mut files = BTreeMap::new();
        for n in numbers(&dir)? {
            let p = path(&dir, n);
            match fs::read(&p) {
                Ok(b) => {
                    files.insert(n, b);
                }
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e, "checkpoint chunk file unreadable")
                }
            }
        }
        Ok(Self { files })
    }

    /// The path of the file a location is in, under the data directory
    /// `data`, and the offset.
    pub fn place(data: &Path, loc: u64) -> (PathBuf, u64) {
        (path(&dir(data), file_of(loc)), offset_of(loc))
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
        let offset = usize::try_from(offset_of(loc)).ok()?;
        if offset < HEADER.len() {
            return None;
        }
        let mut r = Cursor(buf.get(offset..)?);
        let bytes = r.bytes()?;
        if bytes.len() > MAX_CHUNK {
            return None;
        }
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
            if bytes.len() > MAX_CHUNK {
                return None;
            }
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
/// deletes the other chunk files under the data directory `data`, and
/// says how many. A file it cannot delete is logged and left to the next
/// checkpoint: the one in place is complete either way.
pub(crate) fn remove_unreferenced(data: &Path, keep: &BTreeSet<u64>) -> usize {
    let dir = dir(data);
    let names = numbers(&dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "listing checkpoint chunk files failed");
        Vec::new()
    });
    let mut removed = 0;
    for n in names {
        if !keep.contains(&n) {
            let p = path(&dir, n);
            match fs::remove_file(&p) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e, "removing a checkpoint chunk file failed")
                }
            }
        }
    }
    removed
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
        // Names that are not a file's are left alone.
        for other in ["5", "000000005", "00000005.tmp"] {
            fs::write(super::dir(dir.path()).join(other), b"").expect("write");
        }
        assert_eq!(remove_unreferenced(dir.path(), &s.referenced), 1);
        assert_eq!(numbers(&super::dir(dir.path())).expect("ls"), vec![9]);
        assert!(super::dir(dir.path()).join("000000005").exists());
    }

    #[test]
    fn a_chunk_too_long_for_a_file_stays_inline() {
        let dir = tempfile::tempdir().expect("tmp");
        let good = BTreeSet::new();
        let mut s = Saver::new(dir.path(), &good, 1);
        assert_eq!(s.save(0, &[0; MAX_CHUNK + 1]), None);
        // And a file that holds one anyway does not hand it out.
        let mut file = HEADER.to_vec();
        put_uvarint(&mut file, MAX_CHUNK as u64 + 1);
        file.extend_from_slice(&[0; MAX_CHUNK + 1]);
        file.extend_from_slice(&crc32c::crc32c(&[0; MAX_CHUNK + 1]).to_le_bytes());
        let files = ChunkFiles::from_files([(1, file)]);
        assert_eq!(files.chunk(pack(1, 8).expect("loc")), None);
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
