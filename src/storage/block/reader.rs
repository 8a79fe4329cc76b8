//! Reading a block's index and chunks back: the table of contents, the
//! symbol table, the postings offset table, series entries and chunk
//! segments, each checked (magic, bounds, CRC32C) before it is used. A
//! damaged file gives an error naming what is wrong, never a panic, and
//! nothing is allocated beyond what the file's own size allows.

use std::path::Path;

use super::writer::{
    BlockDesc, BlockMeta, Compaction, CHUNKS_MAGIC, HINT_FROM_OUT_OF_ORDER, INDEX_MAGIC,
    SERIES_ALIGN,
};
use super::Ulid;
use crate::encoding::uvarint;

/// What is wrong with a block's file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BlockError(pub String);

impl BlockError {
    /// What starts the error of a block file that could not be mapped into
    /// memory (out of address space or mappings): the block is whole, but
    /// this process cannot read it.
    const UNMAPPED: &'static str = "cannot map ";
    /// What starts the error of a block file this process may not open or
    /// read for a reason of its own (permissions, open files, memory, a
    /// symlink loop), not because of what the file holds.
    const UNREADABLE: &'static str = "cannot read ";

    /// The error of reading `what` that failed with `e`: damage where the
    /// failure says the files are missing, short, malformed, of the wrong
    /// kind (a directory for a file, or the other way), or on a failing
    /// disk or file system (an I/O error, a file system's checksum
    /// failing); otherwise a reason of this process's, which a restart
    /// with the cause fixed gets past.
    pub(crate) fn io(what: impl std::fmt::Display, e: &std::io::Error) -> Self {
        use std::io::ErrorKind::{InvalidData, NotFound, UnexpectedEof};
        let damage = matches!(e.kind(), NotFound | UnexpectedEof | InvalidData)
            || e.raw_os_error().is_some_and(|n| {
                [
                    libc::EIO,
                    libc::EUCLEAN,
                    libc::EBADMSG,
                    libc::EISDIR,
                    libc::ENOTDIR,
                ]
                .contains(&n)
            });
        Self(if damage {
            format!("{what}: {e}")
        } else {
            format!("{}{what}: {e}", Self::UNREADABLE)
        })
    }

    /// Whether the block could not be read by this process (not mappable,
    /// or not readable for a reason of the process's), rather than found
    /// damaged: it is whole as far as anyone knows.
    pub fn is_not_damage(&self) -> bool {
        self.0.starts_with(Self::UNMAPPED) || self.0.starts_with(Self::UNREADABLE)
    }
}

fn bad<T>(why: impl Into<String>) -> Result<T, BlockError> {
    Err(BlockError(why.into()))
}

/// A series' labels, sorted by name.
pub type Labels = Vec<(String, String)>;

/// A chunk's place and time range, as the index holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkMeta {
    /// First sample's time.
    pub mint: i64,
    /// Last sample's time.
    pub maxt: i64,
    /// Segment number (upper 32 bits) and offset (lower 32 bits).
    pub chunk_ref: u64,
}

/// Where an index's bytes are: an open file read with positioned reads,
/// or bytes in memory (tests and fuzzing).
#[derive(Debug)]
enum Source {
    File(std::fs::File, u64),
    Memory(Vec<u8>),
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Self::File(_, len) => *len,
            Self::Memory(b) => b.len() as u64,
        }
    }

    /// `len` bytes at `at`, or an error if the file ends before.
    fn read(&self, at: u64, len: usize, what: &str) -> Result<Vec<u8>, BlockError> {
        use std::os::unix::fs::FileExt;
        let end = at.checked_add(len as u64).filter(|&e| e <= self.len());
        if end.is_none() {
            return bad(format!("{what}: runs past the end of the index"));
        }
        match self {
            Self::Memory(b) => Ok(b[at as usize..at as usize + len].to_vec()),
            Self::File(f, _) => {
                let mut buf = vec![0u8; len];
                f.read_exact_at(&mut buf, at)
                    .map_err(|e| BlockError::io(what, &e))?;
                Ok(buf)
            }
        }
    }

    /// The checked body of a section `len <4b> … CRC32C <4b>` at `at`.
    fn section(&self, at: u64, what: &str) -> Result<Vec<u8>, BlockError> {
        let head = self.read(at, 4, what)?;
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let mut body = self.read(at + 4, len + 4, what)?;
        let crc = body.split_off(len);
        if crc32c::crc32c(&body).to_be_bytes()[..] != crc[..] {
            return bad(format!("{what}: checksum mismatch"));
        }
        Ok(body)
    }
}

/// A block's index, checked as far as it is kept: the table of contents,
/// the symbol table and the postings offset table are read at open and
/// held (the symbols' bytes once, the offsets as small integers); series
/// entries and postings lists are read with positioned reads when asked
/// for, and checked then.
#[derive(Debug)]
pub struct IndexReader {
    src: Source,
    /// Every symbol's bytes, one after another.
    strings: String,
    /// Where each symbol ends in `strings` (it starts where the last ends).
    symbol_ends: Vec<u32>,
    /// Label names of the postings offset table, each with its run of
    /// `values` (start, end).
    names: Vec<(Box<str>, u32, u32)>,
    /// Values of the postings offset table in (name, value) order: where
    /// the value is in `strings` (start, end), and its postings list's
    /// offset.
    values: Vec<(u32, u32, u64)>,
    series_start: u64,
    series_end: u64,
}

/// Index bytes [`IndexReader::series_near`] read last, kept by its
/// caller from one series to the next.
#[derive(Debug, Default)]
pub struct SeriesWindow {
    at: u64,
    bytes: Vec<u8>,
}

/// Bytes of the index one read of [`IndexReader::series_near`] takes.
const SERIES_WINDOW: usize = 64 << 10;

impl SeriesWindow {
    /// Reads `len` bytes of `src` from `at` (the caller keeps them within
    /// the series section).
    fn fill(
        &mut self,
        src: &Source,
        at: u64,
        len: usize,
        what: &dyn Fn() -> String,
    ) -> Result<(), BlockError> {
        self.bytes = src.read(at, len, &what())?;
        self.at = at;
        Ok(())
    }
}

/// A cursor over a byte range with checked reads.
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn u32(&mut self) -> Result<u32, BlockError> {
        let s = self
            .b
            .get(self.at..self.at + 4)
            .ok_or_else(|| BlockError("truncated".into()))?;
        self.at += 4;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn uvarint(&mut self) -> Result<u64, BlockError> {
        let rest = self.b.get(self.at..).unwrap_or_default();
        let (v, n) = uvarint(rest).ok_or_else(|| BlockError("bad varint".into()))?;
        self.at += n;
        Ok(v)
    }

    fn varint(&mut self) -> Result<i64, BlockError> {
        let u = self.uvarint()?;
        Ok((u >> 1) as i64 ^ -((u & 1) as i64))
    }

    fn bytes(&mut self) -> Result<&'a [u8], BlockError> {
        let n = usize::try_from(self.uvarint()?).map_err(|_| BlockError("length".into()))?;
        let end = self
            .at
            .checked_add(n)
            .ok_or_else(|| BlockError("length".into()))?;
        let s = self
            .b
            .get(self.at..end)
            .ok_or_else(|| BlockError("truncated string".into()))?;
        self.at = end;
        Ok(s)
    }
}

impl IndexReader {
    /// Opens the index file at `path` and checks what is kept of it.
    pub fn open(path: &Path) -> Result<Self, BlockError> {
        let io = |e: std::io::Error| BlockError::io(path.display(), &e);
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Self::from_source(Source::File(file, len))
    }

    /// Checks an index held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, BlockError> {
        Self::from_source(Source::Memory(bytes))
    }

    fn from_source(src: Source) -> Result<Self, BlockError> {
        let len = src.len();
        if len < 5 + 52 {
            return bad("index: too short");
        }
        let head = src.read(0, 5, "index header")?;
        if head[..4] != INDEX_MAGIC.to_be_bytes() {
            return bad("index: not an index file (magic)");
        }
        if head[4] != 2 {
            return bad(format!(
                "index: format version {} (only 2 is read)",
                head[4]
            ));
        }
        let toc_at = len - 52;
        let toc = src.read(toc_at, 52, "table of contents")?;
        let crc = u32::from_be_bytes([toc[48], toc[49], toc[50], toc[51]]);
        if crc32c::crc32c(&toc[..48]) != crc {
            return bad("index: table of contents checksum mismatch");
        }
        let mut refs = [0u64; 6];
        for (i, r) in refs.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&toc[i * 8..i * 8 + 8]);
            *r = u64::from_be_bytes(b);
            if *r > toc_at {
                return bad("index: a section starts past the table of contents");
            }
        }
        let [sym_at, series_at, label_indices_at, _label_table_at, _postings_at, postings_table_at] =
            refs;
        if series_at > label_indices_at {
            return bad("index: series end before they start");
        }

        let body = src.section(sym_at, "symbol table")?;
        let mut c = Cur { b: &body, at: 0 };
        let n = c.u32()? as usize;
        // Each symbol takes a byte at least.
        if n > body.len() {
            return bad("symbol table: more symbols than bytes");
        }
        let mut strings = String::new();
        let mut symbol_ends = Vec::with_capacity(n);
        for _ in 0..n {
            let s = std::str::from_utf8(c.bytes()?)
                .map_err(|_| BlockError("symbol table: a symbol is not UTF-8".into()))?;
            strings.push_str(s);
            symbol_ends.push(
                u32::try_from(strings.len())
                    .map_err(|_| BlockError("symbol table: over 4 GiB".into()))?,
            );
        }
        let mut me = Self {
            src,
            strings,
            symbol_ends,
            names: Vec::new(),
            values: Vec::new(),
            series_start: series_at,
            series_end: label_indices_at,
        };

        let body = me.src.section(postings_table_at, "postings offset table")?;
        let mut c = Cur { b: &body, at: 0 };
        let n = c.u32()? as usize;
        if n > body.len() {
            return bad("postings offset table: more entries than bytes");
        }
        me.values.reserve_exact(n);
        for _ in 0..n {
            if c.uvarint()? != 2 {
                return bad("postings offset table: an entry without a name and a value");
            }
            let name = std::str::from_utf8(c.bytes()?)
                .map_err(|_| BlockError("postings offset table: name not UTF-8".into()))?;
            let value = std::str::from_utf8(c.bytes()?)
                .map_err(|_| BlockError("postings offset table: value not UTF-8".into()))?;
            let off = c.uvarint()?;
            if off >= toc_at {
                return bad("postings offset table: an offset past the postings");
            }
            let at = me.values.len() as u32;
            match me.names.last_mut() {
                Some((last, _, end)) if **last == *name => *end = at + 1,
                Some((last, _, _)) if **last > *name => {
                    return bad("postings offset table: names out of order")
                }
                _ => me.names.push((name.into(), at, at + 1)),
            }
            let (start, end) = me.intern(value)?;
            if let Some(&(ps, pe, _)) = me
                .values
                .last()
                .filter(|_| me.names.last().is_some_and(|g| g.1 < at))
            {
                if me.strings[ps as usize..pe as usize] >= *value {
                    return bad("postings offset table: values out of order");
                }
            }
            me.values.push((start, end, off));
        }
        me.strings.shrink_to_fit();
        Ok(me)
    }

    /// Where `s` is in `strings`: a symbol's place when it is one (as
    /// every value of a well-formed index but "" is), else appended.
    fn intern(&mut self, s: &str) -> Result<(u32, u32), BlockError> {
        let n = self.symbol_ends.len();
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.symbol_at(mid).cmp(s) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => {
                    let end = self.symbol_ends[mid];
                    return Ok((end - s.len() as u32, end));
                }
            }
        }
        let start = u32::try_from(self.strings.len())
            .map_err(|_| BlockError("postings offset table: over 4 GiB".into()))?;
        self.strings.push_str(s);
        Ok((start, start + s.len() as u32))
    }

    fn symbol_at(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.symbol_ends[i - 1] as usize,
        };
        &self.strings[start..self.symbol_ends[i] as usize]
    }

    /// Symbol `i`'s id, checked.
    fn symbol_id(&self, i: u64) -> Result<usize, BlockError> {
        match usize::try_from(i)
            .ok()
            .filter(|&i| i < self.symbol_ends.len())
        {
            Some(i) => Ok(i),
            None => bad(format!("series: symbol {i} does not exist")),
        }
    }

    fn value_at(&self, k: usize) -> &str {
        let (s, e, _) = self.values[k];
        &self.strings[s as usize..e as usize]
    }

    /// The run of `values` for label `name`.
    fn run_of(&self, name: &str) -> std::ops::Range<usize> {
        match self.names.binary_search_by(|(n, _, _)| (**n).cmp(name)) {
            Ok(i) => self.names[i].1 as usize..self.names[i].2 as usize,
            Err(_) => 0..0,
        }
    }

    /// Every symbol, in order.
    pub fn symbols(&self) -> impl Iterator<Item = &str> + '_ {
        (0..self.symbol_ends.len()).map(move |i| self.symbol_at(i))
    }

    /// Every label pair with a postings list, in order (("", "") first).
    pub fn label_pairs(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.names.iter().flat_map(move |(n, s, e)| {
            (*s as usize..*e as usize).map(move |k| (&**n, self.value_at(k)))
        })
    }

    /// The values label `name` takes, in order.
    pub fn label_values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.run_of(name).map(move |k| self.value_at(k))
    }

    /// Bytes this reader keeps in memory.
    pub fn heap_bytes(&self) -> usize {
        self.strings.capacity()
            + self.symbol_ends.capacity() * 4
            + self.values.capacity() * 16
            + self
                .names
                .iter()
                .map(|(n, _, _)| n.len() + 24)
                .sum::<usize>()
    }

    /// The IDs of the series with label `name` = `value` (("", "") for
    /// all), ascending.
    pub fn postings(&self, name: &str, value: &str) -> Result<Vec<u32>, BlockError> {
        let run = self.run_of(name);
        let Ok(k) = self.values[run.clone()]
            .binary_search_by(|&(s, e, _)| self.strings[s as usize..e as usize].cmp(value))
        else {
            return Ok(Vec::new());
        };
        let at = self.values[run.start + k].2;
        let body = self.src.section(at, "postings")?;
        let mut c = Cur { b: &body, at: 0 };
        let n = c.u32()? as usize;
        if n.saturating_mul(4) > body.len() {
            return bad("postings: more entries than bytes");
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(c.u32()?);
        }
        if out.windows(2).any(|w| w[0] >= w[1]) {
            return bad("postings: series IDs not ascending");
        }
        Ok(out)
    }

    /// Series `id`: its labels and its chunks' metas.
    pub fn series(&self, id: u32) -> Result<(Labels, Vec<ChunkMeta>), BlockError> {
        self.series_near(id, &mut SeriesWindow::default())
    }

    /// [`IndexReader::series`], reading the index through `window`: the
    /// entries of series read in ID order lie one after another, so one
    /// positioned read of [`SERIES_WINDOW`] bytes serves many of them
    /// rather than one or two reads each.
    pub fn series_near(
        &self,
        id: u32,
        window: &mut SeriesWindow,
    ) -> Result<(Labels, Vec<ChunkMeta>), BlockError> {
        let mut symbols = Vec::new();
        let chunks = self.series_symbols(id, window, &mut symbols)?;
        let labels = symbols
            .into_iter()
            .map(|(n, v)| (self.symbol_at(n).to_owned(), self.symbol_at(v).to_owned()))
            .collect();
        Ok((labels, chunks))
    }

    /// Symbol `i`, for an id [`IndexReader::series_symbols`] gave (empty
    /// for any other).
    pub fn symbol_str(&self, i: usize) -> &str {
        match self.symbol_ends.get(i) {
            Some(_) => self.symbol_at(i),
            None => "",
        }
    }

    /// [`IndexReader::series_near`] with its labels as the ids of their
    /// name and value symbols (into `symbols`, cleared first; each is a
    /// symbol the index has), for a reader that makes each distinct
    /// string once.
    pub fn series_symbols(
        &self,
        id: u32,
        window: &mut SeriesWindow,
        symbols: &mut Vec<(usize, usize)>,
    ) -> Result<Vec<ChunkMeta>, BlockError> {
        symbols.clear();
        let at = u64::from(id) * SERIES_ALIGN as u64;
        if at < self.series_start || at >= self.series_end {
            return bad(format!("series {id}: outside the series section"));
        }
        let what = || format!("series {id}");
        let to_end = self.series_end - at;
        // The window must hold the entry's length (at most 10 bytes, or
        // what is left of the section); then the whole entry.
        let held = |w: &SeriesWindow, want: u64| {
            at >= w.at && at - w.at + want.min(to_end) <= w.bytes.len() as u64
        };
        if !held(window, 10) {
            window.fill(&self.src, at, SERIES_WINDOW.min(to_end as usize), &what)?;
        }
        let from = (at - window.at) as usize;
        let (len, n) = uvarint(&window.bytes[from..])
            .ok_or_else(|| BlockError(format!("{}: bad length", what())))?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| (n + l + 4) as u64 <= to_end)
            .ok_or_else(|| BlockError(format!("{}: length runs past the section", what())))?;
        let whole = n + len + 4;
        if !held(window, whole as u64) {
            window.fill(
                &self.src,
                at,
                SERIES_WINDOW.max(whole).min(to_end as usize),
                &what,
            )?;
        }
        let from = (at - window.at) as usize + n;
        let (body, crc) = window.bytes[from..from + len + 4].split_at(len);
        if crc32c::crc32c(body).to_be_bytes()[..] != crc[..] {
            return bad(format!("{}: checksum mismatch", what()));
        }
        let what = what();
        let mut c = Cur { b: body, at: 0 };
        let n = usize::try_from(c.uvarint()?).unwrap_or(usize::MAX);
        if n > body.len() {
            return bad(format!("{what}: more labels than bytes"));
        }
        symbols.reserve(n);
        for _ in 0..n {
            let name = self.symbol_id(c.uvarint()?)?;
            let value = self.symbol_id(c.uvarint()?)?;
            symbols.push((name, value));
        }
        let n = usize::try_from(c.uvarint()?).unwrap_or(usize::MAX);
        if n > body.len() {
            return bad(format!("{what}: more chunks than bytes"));
        }
        let mut chunks: Vec<ChunkMeta> = Vec::with_capacity(n);
        for k in 0..n {
            let m = if k == 0 {
                let mint = c.varint()?;
                let maxt = mint.wrapping_add(c.uvarint()? as i64);
                ChunkMeta {
                    mint,
                    maxt,
                    chunk_ref: c.uvarint()?,
                }
            } else {
                let prev = chunks[k - 1];
                let mint = prev.maxt.wrapping_add(c.uvarint()? as i64);
                let maxt = mint.wrapping_add(c.uvarint()? as i64);
                let chunk_ref = (prev.chunk_ref as i64).wrapping_add(c.varint()?) as u64;
                ChunkMeta {
                    mint,
                    maxt,
                    chunk_ref,
                }
            };
            if m.maxt < m.mint || chunks.last().is_some_and(|p| m.mint <= p.maxt) {
                return bad(format!("{what}: chunk times out of order"));
            }
            chunks.push(m);
        }
        Ok(chunks)
    }
}

/// Reads a block's `meta.json`: its ULID, time range and counts. The
/// ULID must be the directory's name.
pub fn read_meta(dir: &Path) -> Result<BlockMeta, BlockError> {
    let path = dir.join("meta.json");
    let text = std::fs::read(&path).map_err(|e| BlockError::io(path.display(), &e))?;
    let v: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| BlockError(format!("{}: not JSON: {e}", path.display())))?;
    let field = |k: &str| {
        v.get(k)
            .and_then(serde_json::Value::as_i64)
            .ok_or_else(|| BlockError(format!("{}: no integer {k:?}", path.display())))
    };
    let ulid = v
        .get("ulid")
        .and_then(serde_json::Value::as_str)
        .and_then(Ulid::parse)
        .ok_or_else(|| BlockError(format!("{}: no valid \"ulid\"", path.display())))?;
    if dir.file_name().and_then(|n| n.to_str()) != Some(ulid.to_string().as_str()) {
        return bad(format!(
            "{}: ulid {ulid} is not the directory's name",
            path.display()
        ));
    }
    let (min_time, max_time) = (field("minTime")?, field("maxTime")?);
    if max_time <= min_time {
        return bad(format!("{}: maxTime not after minTime", path.display()));
    }
    if field("version")? != 1 {
        return bad(format!("{}: version is not 1", path.display()));
    }
    let stat = |k: &str| {
        v.get("stats")
            .and_then(|s| s.get(k))
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let c = v.get("compaction");
    let level = c
        .and_then(|c| c.get("level"))
        .and_then(serde_json::Value::as_u64)
        .and_then(|l| u32::try_from(l).ok())
        .filter(|&l| l >= 1)
        .ok_or_else(|| BlockError(format!("{}: no valid compaction level", path.display())))?;
    let ulid_of = |v: &serde_json::Value| v.as_str().and_then(Ulid::parse);
    let mut sources = Vec::new();
    for s in c
        .and_then(|c| c.get("sources"))
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        sources
            .push(ulid_of(s).ok_or_else(|| {
                BlockError(format!("{}: a source is not a ULID", path.display()))
            })?);
    }
    let mut parents = Vec::new();
    for p in c
        .and_then(|c| c.get("parents"))
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let time = |k: &str| p.get(k).and_then(serde_json::Value::as_i64);
        match (
            p.get("ulid").and_then(ulid_of),
            time("minTime"),
            time("maxTime"),
        ) {
            (Some(ulid), Some(min_time), Some(max_time)) => parents.push(BlockDesc {
                ulid,
                min_time,
                max_time,
            }),
            _ => return bad(format!("{}: a parent is not a block", path.display())),
        }
    }
    Ok(BlockMeta {
        ulid,
        min_time,
        max_time,
        num_series: stat("numSeries"),
        num_chunks: stat("numChunks"),
        num_samples: stat("numSamples"),
        num_tombstones: stat("numTombstones"),
        compaction: Compaction {
            level,
            sources,
            parents,
            from_out_of_order: c
                .and_then(|c| c.get("hints"))
                .and_then(serde_json::Value::as_array)
                .is_some_and(|h| h.iter().any(|h| h.as_str() == Some(HINT_FROM_OUT_OF_ORDER))),
        },
    })
}

/// A chunk segment's bytes, shared by the chunks a query reads from them:
/// the segment's file mapped into memory (read where the page cache holds
/// it), or bytes in memory (tests and fuzzing).
pub type Segment = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A segment file's mapping.
struct Mapped(memmap2::Mmap);

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A block's chunk segments.
pub struct ChunkReader {
    segments: Vec<Segment>,
}

impl std::fmt::Debug for ChunkReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes: usize = self.segments.iter().map(|s| (**s).as_ref().len()).sum();
        write!(
            f,
            "ChunkReader({} segments, {bytes} bytes)",
            self.segments.len()
        )
    }
}

/// Where a chunk's data lies in its segment, checked.
pub struct ChunkAt<'a> {
    segment: &'a Segment,
    data: std::ops::Range<usize>,
}

impl<'a> ChunkAt<'a> {
    /// The chunk's data (its encoding byte not included).
    pub fn bytes(&self) -> &'a [u8] {
        &(**self.segment).as_ref()[self.data.clone()]
    }

    /// The segment it lies in and its range there, to share without a copy.
    pub fn place(&self) -> (&'a Segment, std::ops::Range<usize>) {
        (self.segment, self.data.clone())
    }
}

fn check_header(i: usize, head: &[u8]) -> Result<(), BlockError> {
    if head.len() < 8 || head[..4] != CHUNKS_MAGIC.to_be_bytes() || head[4] != 1 {
        return bad(format!(
            "chunk segment {}: not a chunks file (header)",
            i + 1
        ));
    }
    Ok(())
}

impl ChunkReader {
    /// Opens `dir/000001`, `000002`, … maps them and checks their headers;
    /// chunks are checked when asked for.
    pub fn open(dir: &Path) -> Result<Self, BlockError> {
        let mut segments: Vec<Segment> = Vec::new();
        loop {
            let path = dir.join(format!("{:06}", segments.len() + 1));
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(BlockError::io(path.display(), &e)),
            };
            let map = crate::heap::map_block_file(&file).map_err(|e| {
                BlockError(format!("{}{}: {e}", BlockError::UNMAPPED, path.display()))
            })?;
            check_header(segments.len(), &map[..map.len().min(8)])?;
            segments.push(std::sync::Arc::new(Mapped(map)));
        }
        Ok(Self { segments })
    }

    /// Checks segments held in memory.
    pub fn from_segments(segments: Vec<Vec<u8>>) -> Result<Self, BlockError> {
        for (i, s) in segments.iter().enumerate() {
            check_header(i, s)?;
        }
        Ok(Self {
            segments: segments
                .into_iter()
                .map(|s| std::sync::Arc::new(s) as Segment)
                .collect(),
        })
    }

    /// The chunk at `chunk_ref` where it lies: its encoding byte and
    /// data, checked.
    pub fn chunk_at(&self, chunk_ref: u64) -> Result<(u8, ChunkAt<'_>), BlockError> {
        let seq = (chunk_ref >> 32) as usize;
        let segment = self
            .segments
            .get(seq)
            .ok_or_else(|| BlockError(format!("chunk segment {} missing", seq + 1)))?;
        let all = (**segment).as_ref();
        let at = usize::try_from(chunk_ref & 0xffff_ffff).unwrap_or(usize::MAX);
        let runs_past = || BlockError(format!("chunk {chunk_ref}: runs past segment {}", seq + 1));
        let rest = all.get(at..).ok_or_else(runs_past)?;
        let (enc, data) = checked(chunk_ref, rest)?.ok_or_else(runs_past)?;
        Ok((
            enc,
            ChunkAt {
                segment,
                data: at + data.start..at + data.end,
            },
        ))
    }

    /// The chunk at `chunk_ref`: its encoding byte and data, checked, as a
    /// buffer of its own.
    pub fn chunk(&self, chunk_ref: u64) -> Result<(u8, std::sync::Arc<[u8]>), BlockError> {
        let (enc, at) = self.chunk_at(chunk_ref)?;
        Ok((enc, std::sync::Arc::from(at.bytes())))
    }

    /// The chunks at `refs`, each handed to `each` with its encoding byte
    /// and where it lies, checked, in the order given.
    pub fn chunks(
        &self,
        refs: &[u64],
        mut each: impl FnMut(u64, u8, ChunkAt<'_>) -> Result<(), BlockError>,
    ) -> Result<(), BlockError> {
        for &r in refs {
            let (enc, at) = self.chunk_at(r)?;
            each(r, enc, at)?;
        }
        Ok(())
    }
}

/// A chunk's encoding byte, data and checksum: `len` + 5 bytes, and at
/// most a segment.
fn whole_len(chunk_ref: u64, len: u64) -> Result<usize, BlockError> {
    usize::try_from(len)
        .ok()
        .filter(|&l| l <= 512 << 20)
        .map(|l| l + 5)
        .ok_or_else(|| BlockError(format!("chunk {chunk_ref}: length {len} too large")))
}

/// The chunk at the start of `b` (length varint, encoding byte, data,
/// checksum), checked: its encoding byte and where its data lies in `b`;
/// `None` when `b` ends before it does.
fn checked(chunk_ref: u64, b: &[u8]) -> Result<Option<(u8, std::ops::Range<usize>)>, BlockError> {
    let Some((len, n)) = uvarint(b) else {
        if b.len() >= 10 {
            return bad(format!("chunk {chunk_ref}: bad length"));
        }
        return Ok(None);
    };
    let whole = whole_len(chunk_ref, len)?;
    let Some(body) = b.get(n..n + whole) else {
        return Ok(None);
    };
    let (data, crc) = body.split_at(whole - 4);
    if crc32c::crc32c(data).to_be_bytes() != [crc[0], crc[1], crc[2], crc[3]] {
        return bad(format!("chunk {chunk_ref}: checksum mismatch"));
    }
    // The encoding byte, then the data up to the checksum.
    Ok(Some((data[0], n + 1..n + whole - 4)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::storage::block::{write_block, BlockChunk, BlockSeries, Encoding};

    fn series_strategy() -> impl Strategy<Value = Vec<BlockSeries>> {
        prop::collection::btree_map(
            prop::collection::btree_map("[a-c]{1,2}", "[x-z]{0,3}", 1..4),
            prop::collection::vec(
                (
                    1i64..500,
                    0i64..500,
                    prop_oneof![
                        prop::collection::vec(any::<u8>(), 2..40),
                        // Longer than a run's guess of its last chunk.
                        prop::collection::vec(any::<u8>(), 300..700),
                    ],
                    1u8..4,
                ),
                0..4,
            ),
            1..12,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(labels, chunks)| {
                    let mut t = 0;
                    let chunks = chunks
                        .into_iter()
                        .map(|(gap, len, data, enc)| {
                            let mint = t + gap;
                            t = mint + len;
                            BlockChunk {
                                mint,
                                maxt: t,
                                encoding: match enc {
                                    1 => Encoding::Xor,
                                    2 => Encoding::Histogram,
                                    _ => Encoding::FloatHistogram,
                                },
                                data: Arc::from(data.as_slice()),
                            }
                        })
                        .collect();
                    BlockSeries {
                        starts: Vec::new(),
                        labels: labels.into_iter().collect(),
                        chunks,
                    }
                })
                .collect()
        })
    }

    type Chunks = Vec<(i64, i64, u8, Vec<u8>)>;

    /// Everything a block holds, read back through its index and chunks.
    fn read_all(dir: &Path) -> Result<Vec<(Labels, Chunks)>, BlockError> {
        let index = IndexReader::open(&dir.join("index"))?;
        let chunks = ChunkReader::open(&dir.join("chunks"))?;
        let mut out = Vec::new();
        for id in index.postings("", "")? {
            let (labels, metas) = index.series(id)?;
            let mut cs = Vec::new();
            for m in metas {
                let (enc, data) = chunks.chunk(m.chunk_ref)?;
                cs.push((m.mint, m.maxt, enc, data.to_vec()));
            }
            out.push((labels, cs));
        }
        Ok(out)
    }

    /// The labels and chunks of every series, less the chunks `skip`
    /// names (bit `k % 64` for a series' `k`th chunk): entries read through
    /// one window and each series' chunks together; and the same read one
    /// entry and one chunk at a time.
    #[allow(clippy::type_complexity)]
    fn read_runs(
        dir: &Path,
        skip: u64,
    ) -> (
        Result<Vec<(Labels, Chunks)>, BlockError>,
        Result<Vec<(Labels, Chunks)>, BlockError>,
    ) {
        let read = |runs: bool| -> Result<Vec<(Labels, Chunks)>, BlockError> {
            let index = IndexReader::open(&dir.join("index"))?;
            let chunks = ChunkReader::open(&dir.join("chunks"))?;
            let mut out = Vec::new();
            let mut window = SeriesWindow::default();
            for id in index.postings("", "")? {
                let (labels, metas) = if runs {
                    index.series_near(id, &mut window)?
                } else {
                    index.series(id)?
                };
                let kept: Vec<ChunkMeta> = metas
                    .into_iter()
                    .enumerate()
                    .filter(|(k, _)| skip >> (k % 64) & 1 == 0)
                    .map(|(_, m)| m)
                    .collect();
                let mut cs = Vec::new();
                if runs {
                    let refs: Vec<u64> = kept.iter().map(|m| m.chunk_ref).collect();
                    let mut at = kept.iter();
                    chunks.chunks(&refs, |r, enc, data| {
                        let m = at.next().filter(|m| m.chunk_ref == r).expect("in order");
                        cs.push((m.mint, m.maxt, enc, data.bytes().to_vec()));
                        Ok(())
                    })?;
                } else {
                    for m in kept {
                        let (enc, data) = chunks.chunk(m.chunk_ref)?;
                        cs.push((m.mint, m.maxt, enc, data.to_vec()));
                    }
                }
                out.push((labels, cs));
            }
            Ok(out)
        };
        (read(true), read(false))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A written block reads back as written: labels, chunk times,
        /// encodings and bytes, series in label order (those without
        /// chunks left out, as Prometheus does), and each label pair's
        /// postings naming exactly the series that have it. Any of a
        /// series' chunks read together are the chunks read one by one.
        #[test]
        fn blocks_read_back_as_written(series in series_strategy(), skip in any::<u64>()) {
            let dir = tempfile::tempdir().expect("tempdir");
            let meta = write_block(dir.path(), series.clone(), 0, 1_000_000, 7).expect("written");
            let block = dir.path().join(meta.ulid.to_string());
            let got = read_all(&block).expect("reads back");
            let (runs, one_by_one) = read_runs(&block, skip);
            prop_assert_eq!(runs.expect("runs read back"), one_by_one.expect("chunks read back"));
            let mut want = series;
            want.retain(|s| !s.chunks.is_empty());
            want.sort_by(|a, b| a.labels.cmp(&b.labels));
            prop_assert_eq!(meta.num_series, want.len() as u64);
            prop_assert_eq!(got.len(), want.len());
            for ((labels, chunks), w) in got.iter().zip(&want) {
                prop_assert_eq!(labels, &w.labels);
                let wc: Vec<(i64, i64, u8, Vec<u8>)> = w
                    .chunks
                    .iter()
                    .map(|c| (c.mint, c.maxt, c.encoding as u8, c.data.to_vec()))
                    .collect();
                prop_assert_eq!(chunks, &wc);
            }
            let index = IndexReader::open(&block.join("index")).expect("index");
            let all = index.postings("", "").expect("all");
            let pairs: Vec<(String, String)> =
                index.label_pairs().map(|(n, v)| (n.to_owned(), v.to_owned())).collect();
            for (n, v) in pairs.iter().filter(|(n, _)| !n.is_empty()) {
                let ids = index.postings(n, v).expect("postings");
                let have: Vec<u32> = all
                    .iter()
                    .copied()
                    .filter(|&id| index.series(id).expect("series").0.iter().any(|l| &l.0 == n && &l.1 == v))
                    .collect();
                prop_assert_eq!(ids, have);
            }
        }

        /// A damaged index or segment gives an error or other data, never a
        /// panic, also when the block is compacted.
        #[test]
        fn damage_is_an_error_not_a_panic(series in series_strategy(), at in any::<prop::sample::Index>(), bit in 0u8..8, file in 0..2, skip in any::<u64>()) {
            let dir = tempfile::tempdir().expect("tempdir");
            let meta = write_block(dir.path(), series, 0, 1_000_000, 7).expect("written");
            let block = dir.path().join(meta.ulid.to_string());
            let path = if file == 0 { block.join("index") } else { block.join("chunks").join("000001") };
            if let Ok(mut b) = std::fs::read(&path) {
                if !b.is_empty() {
                    let i = at.index(b.len());
                    b[i] ^= 1 << bit;
                    std::fs::write(&path, &b).expect("rewrite");
                }
            }
            let _ = read_all(&block);
            // Reading runs fails where reading chunk by chunk fails.
            let (runs, one_by_one) = read_runs(&block, skip);
            match (runs, one_by_one) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert_eq!(a.is_ok(), b.is_ok()),
            }
            // Compacting it fails or writes a block that reads back.
            if let (Ok(meta), Ok(index), Ok(chunks)) = (
                read_meta(&block),
                IndexReader::open(&block.join("index")),
                ChunkReader::open(&block.join("chunks")),
            ) {
                let out = tempfile::tempdir().expect("tempdir");
                let no_starts = std::collections::HashMap::new();
                let parent = crate::storage::block::compact::Parent { meta: &meta, index: &index, chunks: &chunks, starts: &no_starts, deleted: Default::default(), trim: |c, _| Ok(vec![c]) };
                if let Ok(Some(m)) = crate::storage::block::compact::compact(out.path(), &[parent], 8, &|| true, &|_| {}) {
                    prop_assert!(read_all(&out.path().join(m.ulid.to_string())).is_ok());
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A chunk segment cut short (a mismatched or damaged block)
        /// gives errors, not a panic, when a series' chunks are read as
        /// one run, and the same chunks where one by one gives them.
        #[test]
        fn cut_segments_are_errors_not_panics(series in series_strategy(), cut in any::<prop::sample::Index>(), skip in any::<u64>()) {
            let dir = tempfile::tempdir().expect("tempdir");
            let meta = write_block(dir.path(), series, 0, 1_000_000, 7).expect("written");
            let block = dir.path().join(meta.ulid.to_string());
            let path = block.join("chunks").join("000001");
            if let Ok(b) = std::fs::read(&path) {
                std::fs::write(&path, &b[..cut.index(b.len() + 1)]).expect("rewrite");
            }
            let (runs, one_by_one) = read_runs(&block, skip);
            match (runs, one_by_one) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert_eq!(a.is_ok(), b.is_ok()),
            }
        }
    }

    /// Series entries read through one window are the entries read one
    /// by one also where the index's series section is many windows long
    /// and where one entry is longer than a window (30,000 chunks).
    #[test]
    fn entries_read_through_a_window_span_many_windows() {
        let chunk = |k: i64| BlockChunk {
            mint: k * 10,
            maxt: k * 10 + 5,
            encoding: Encoding::Xor,
            data: Arc::from(&[0u8, 1, 2][..]),
        };
        let mut series: Vec<BlockSeries> = (0..3000)
            .map(|i| BlockSeries {
                starts: Vec::new(),
                labels: vec![
                    ("__name__".into(), format!("metric_{}", i % 7)),
                    ("instance".into(), format!("host-{i:05}.example.org:9100")),
                    ("job".into(), "node".into()),
                ],
                chunks: (0..3).map(chunk).collect(),
            })
            .collect();
        series.push(BlockSeries {
            starts: Vec::new(),
            labels: vec![("__name__".into(), "long".into())],
            chunks: (0..30_000).map(chunk).collect(),
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let meta = write_block(dir.path(), series, 0, 1_000_000, 7).expect("written");
        let block = dir.path().join(meta.ulid.to_string());
        let index_bytes = std::fs::metadata(block.join("index")).expect("index").len();
        assert!(index_bytes > 4 * SERIES_WINDOW as u64, "{index_bytes}");
        let (window, one_by_one) = read_runs(&block, 0);
        let (window, one_by_one) = (window.expect("window"), one_by_one.expect("one by one"));
        assert_eq!(window.len(), 3001);
        assert!(window.iter().any(|(_, c)| c.len() == 30_000));
        assert_eq!(window, one_by_one);
    }

    #[test]
    fn damage_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = BlockSeries {
            starts: Vec::new(),
            labels: vec![("__name__".into(), "x".into())],
            chunks: vec![BlockChunk {
                mint: 1,
                maxt: 2,
                encoding: Encoding::Xor,
                data: Arc::from(vec![0u8, 2, 9, 9].as_slice()),
            }],
        };
        let meta = write_block(dir.path(), vec![s], 0, 10, 7).expect("written");
        let block = dir.path().join(meta.ulid.to_string());
        let seg = block.join("chunks").join("000001");
        let mut b = std::fs::read(&seg).expect("segment");
        let last = b.len() - 6;
        b[last] ^= 0xff;
        std::fs::write(&seg, &b).expect("rewrite");
        let err = read_all(&block).expect_err("damaged");
        assert!(err.0.contains("checksum mismatch"), "{err}");
        let idx = block.join("index");
        let mut b = std::fs::read(&idx).expect("index");
        b[0] = 0;
        std::fs::write(&idx, &b).expect("rewrite");
        let err = IndexReader::open(&idx).expect_err("damaged");
        assert!(err.0.contains("magic"), "{err}");
    }

    /// Which failures of reading a block's files are damage (the block
    /// is moved aside) and which are the process's own (it is kept).
    #[test]
    fn io_failures_are_told_from_damage() {
        use std::io::{Error, ErrorKind};
        // (the failure, whether it is damage)
        let cases = [
            (Error::from(ErrorKind::NotFound), true),
            (Error::from(ErrorKind::UnexpectedEof), true),
            (Error::from(ErrorKind::InvalidData), true),
            (Error::from_raw_os_error(libc::EIO), true),
            (Error::from_raw_os_error(libc::ENOENT), true),
            (Error::from_raw_os_error(libc::EUCLEAN), true),
            (Error::from_raw_os_error(libc::EBADMSG), true),
            (Error::from_raw_os_error(libc::EISDIR), true),
            (Error::from_raw_os_error(libc::ENOTDIR), true),
            (Error::from_raw_os_error(libc::ESTALE), false),
            (Error::from_raw_os_error(libc::EACCES), false),
            (Error::from_raw_os_error(libc::EMFILE), false),
            (Error::from_raw_os_error(libc::ENFILE), false),
            (Error::from_raw_os_error(libc::ENOMEM), false),
            (Error::from_raw_os_error(libc::ELOOP), false),
            (Error::from(ErrorKind::Interrupted), false),
        ];
        for (e, damage) in &cases {
            let err = BlockError::io("f", e);
            assert_eq!(err.is_not_damage(), !damage, "{err}");
            // The file is named either way, first when it is damage.
            assert_eq!(err.0.starts_with("f: "), *damage, "{err}");
            assert!(err.0.contains("f: "), "{err}");
        }
        assert!(BlockError(format!("{}x", BlockError::UNMAPPED)).is_not_damage());
        assert!(!BlockError("x: checksum mismatch".into()).is_not_damage());
    }
}
