//! Writing one block, a series at a time: chunks into segment files and
//! series entries into the index as they come, then the rest of the index
//! (label indices, postings, the offset tables and the table of
//! contents), `meta.json` and an empty `tombstones`. Everything goes into `<ULID>.tmp`, is fsynced, and the
//! directory is renamed into place, so a crash leaves either no block or a
//! whole one (and a `.tmp` directory, which a reader ignores).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ulid::Ulid;
use crate::encoding::put_uvarint;
use crate::storage::starts::StartRun;

/// A chunk file starts with this, then the format version and 3 zero bytes.
pub(super) const CHUNKS_MAGIC: u32 = 0x85BD_40DD;
/// An index file starts with this, then the format version.
pub(super) const INDEX_MAGIC: u32 = 0xBAAA_D700;
const INDEX_VERSION: u8 = 2;
/// The largest chunk segment file.
const SEGMENT_MAX: u64 = 512 << 20;
/// Series entries start at multiples of this; a series' ID is its offset
/// divided by it.
pub(super) const SERIES_ALIGN: usize = 16;

/// How a chunk's bytes are encoded (the byte before them in a segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Floats (Gorilla XOR).
    Xor = 1,
    /// Integer native histograms.
    Histogram = 2,
    /// Float native histograms.
    FloatHistogram = 3,
}

/// One chunk of a series: its time range and bytes.
#[derive(Debug, Clone)]
pub struct BlockChunk {
    /// Its first sample's time.
    pub mint: i64,
    /// Its last sample's time.
    pub maxt: i64,
    /// Its encoding.
    pub encoding: Encoding,
    /// The chunk, sample count first (as the head keeps it).
    pub data: Arc<[u8]>,
}

/// One series of a block.
#[derive(Debug, Clone)]
pub struct BlockSeries {
    /// Its labels, sorted by name.
    pub labels: Vec<(String, String)>,
    /// Its chunks in time order, not overlapping.
    pub chunks: Vec<BlockChunk>,
    /// Its start-time runs over the block, if it was sent start times.
    pub starts: Vec<StartRun>,
}

/// A block as another block's `meta.json` names it among its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDesc {
    /// Its name.
    pub ulid: Ulid,
    /// The start of its time range (inclusive, ms).
    pub min_time: i64,
    /// The end of its time range (exclusive, ms).
    pub max_time: i64,
}

/// How a block came to be, as `meta.json`'s `compaction` says: level 1
/// with itself as the only source for a block cut from the head; one more
/// than its highest parent's level for a compacted one, with the union of
/// their sources.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Compaction {
    /// 1 for a block cut from the head.
    pub level: u32,
    /// The level-1 blocks its samples came from (empty: itself).
    pub sources: Vec<Ulid>,
    /// The blocks compacted into it.
    pub parents: Vec<BlockDesc>,
    /// Written from out-of-order samples alone (Prometheus' compaction
    /// hint `from-out-of-order`).
    pub from_out_of_order: bool,
}

/// Prometheus' compaction hint for a block written from out-of-order
/// samples.
pub const HINT_FROM_OUT_OF_ORDER: &str = "from-out-of-order";

/// What a block holds, as its `meta.json` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockMeta {
    /// Its name.
    pub ulid: Ulid,
    /// The start of its time range (inclusive, ms).
    pub min_time: i64,
    /// The end of its time range (exclusive, ms).
    pub max_time: i64,
    /// Series in it.
    pub num_series: u64,
    /// Chunks in it.
    pub num_chunks: u64,
    /// Samples in it.
    pub num_samples: u64,
    /// Deleted intervals its tombstones hold (Prometheus'
    /// `stats.numTombstones`).
    pub num_tombstones: u64,
    /// Its level, sources and parents.
    pub compaction: Compaction,
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

/// Writes `series` as a block for `[min_time, max_time)` under `parent`
/// and returns its meta. The series may come in any order (they are
/// sorted here) but not twice; chunks must lie in the range, in time
/// order, without overlapping. `now_ms` names the block.
pub fn write_block(
    parent: &Path,
    series: Vec<BlockSeries>,
    min_time: i64,
    max_time: i64,
    now_ms: u64,
) -> io::Result<BlockMeta> {
    let ulid = Ulid::new(now_ms);
    write_block_as(
        parent,
        series,
        (min_time, max_time),
        ulid,
        Compaction::default(),
    )
}

/// [`write_block`] named `ulid`, with `compaction` (level 1 and itself as
/// source when left at their defaults).
pub fn write_block_as(
    parent: &Path,
    mut series: Vec<BlockSeries>,
    (min_time, max_time): (i64, i64),
    ulid: Ulid,
    compaction: Compaction,
) -> io::Result<BlockMeta> {
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    let mut symbols = BTreeSet::new();
    for s in &series {
        for (n, v) in &s.labels {
            symbols.insert(n.as_str());
            symbols.insert(v.as_str());
        }
    }
    let mut w = BlockWriter::create_as(parent, symbols, (min_time, max_time), ulid, compaction)?;
    for s in &series {
        w.add_series_with_starts(&s.labels, &s.chunks, &s.starts)?;
    }
    w.finish()
}

/// Writes one block a series at a time: chunks go to the segment files
/// and the series entry to the index as each series is added, so what is
/// held in memory is the symbol table and the postings lists (4 bytes per
/// label of each series), not the chunks or the index.
///
/// Everything goes into `<ULID>.tmp`, which is removed if the writer is
/// dropped unfinished.
#[derive(Debug)]
pub struct BlockWriter {
    parent: PathBuf,
    tmp: PathBuf,
    meta: BlockMeta,
    /// Every label name and value the block may use, sorted.
    symbols: Vec<Box<str>>,
    index: io::BufWriter<File>,
    index_len: u64,
    /// Where the series section starts (after the symbol table).
    series_at: u64,
    segments: SegmentWriter,
    /// Series IDs by (name, value) symbol references: symbols are sorted,
    /// so this order is the (name, value) order.
    postings: BTreeMap<(u32, u32), Vec<u32>>,
    all: Vec<u32>,
    /// The last series' labels as symbol references, to check the order.
    last: Vec<u32>,
    these: Vec<u32>,
    refs: Vec<u64>,
    entry: Vec<u8>,
    /// Start-time runs of the series added with some, by series ID.
    starts: Vec<(u32, Vec<StartRun>)>,
    finished: bool,
}

impl BlockWriter {
    /// Starts a block for `[min_time, max_time)` under `parent`, whose
    /// series use only labels among `symbols` (any order, repeats
    /// allowed). `now_ms` names the block; `compaction` says where it
    /// came from (the default: cut from the head, level 1).
    pub fn create<S: AsRef<str>>(
        parent: &Path,
        symbols: impl IntoIterator<Item = S>,
        min_time: i64,
        max_time: i64,
        now_ms: u64,
        compaction: Compaction,
    ) -> io::Result<Self> {
        let ulid = Ulid::new(now_ms);
        Self::create_as(parent, symbols, (min_time, max_time), ulid, compaction)
    }

    /// [`BlockWriter::create`] with the block's name chosen beforehand
    /// (the WAL names the blocks a cut writes before it writes them).
    pub fn create_as<S: AsRef<str>>(
        parent: &Path,
        symbols: impl IntoIterator<Item = S>,
        (min_time, max_time): (i64, i64),
        ulid: Ulid,
        compaction: Compaction,
    ) -> io::Result<Self> {
        let mut symbols: Vec<Box<str>> = symbols.into_iter().map(|s| s.as_ref().into()).collect();
        symbols.sort_unstable();
        symbols.dedup();
        u32_of(symbols.len(), "symbols")?;
        let name = ulid.to_string();
        let tmp = parent.join(format!("{name}.tmp"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir_all(tmp.join("chunks"))?;
        let mut compaction = compaction;
        if compaction.level == 0 {
            compaction.level = 1;
        }
        if compaction.sources.is_empty() {
            compaction.sources.push(ulid);
        }
        let mut w = Self {
            parent: parent.to_path_buf(),
            index: io::BufWriter::with_capacity(1 << 16, File::create(tmp.join("index"))?),
            segments: SegmentWriter::new(tmp.join("chunks")),
            tmp,
            meta: BlockMeta {
                ulid,
                min_time,
                max_time,
                num_series: 0,
                num_chunks: 0,
                num_samples: 0,
                num_tombstones: 0,
                compaction,
            },
            symbols,
            index_len: 0,
            series_at: 0,
            postings: BTreeMap::new(),
            all: Vec::new(),
            last: Vec::new(),
            these: Vec::new(),
            refs: Vec::new(),
            entry: Vec::new(),
            starts: Vec::new(),
            finished: false,
        };
        let mut head = INDEX_MAGIC.to_be_bytes().to_vec();
        head.push(INDEX_VERSION);
        w.put(&head)?;
        let mut table = Vec::new();
        let at = open_section(&mut table);
        table.extend_from_slice(&u32_of(w.symbols.len(), "symbols")?.to_be_bytes());
        for s in &w.symbols {
            put_str(&mut table, s);
        }
        close_section(&mut table, at)?;
        w.put(&table)?;
        w.series_at = w.index_len;
        Ok(w)
    }

    /// The block's name.
    pub fn ulid(&self) -> Ulid {
        self.meta.ulid
    }

    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.index.write_all(b)?;
        self.index_len += b.len() as u64;
        Ok(())
    }

    fn pad(&mut self, align: u64) -> io::Result<()> {
        let rem = self.index_len % align;
        if rem != 0 {
            self.put(&[0u8; 16][..(align - rem) as usize])?;
        }
        Ok(())
    }

    fn symbol(&self, s: &str) -> io::Result<u32> {
        match self.symbols.binary_search_by(|x| (**x).cmp(s)) {
            Ok(i) => u32_of(i, "symbols"),
            Err(_) => Err(invalid(format!(
                "label {s:?} is not among the block's symbols"
            ))),
        }
    }

    /// Adds a series: its labels sorted by name and greater than the last
    /// series' labels, its chunks in the block's range, in time order and
    /// not overlapping. A series without chunks is left out.
    pub fn add_series<S: AsRef<str>>(
        &mut self,
        labels: &[(S, S)],
        chunks: &[BlockChunk],
    ) -> io::Result<()> {
        self.add_series_with_starts(labels, chunks, &[])
    }

    /// [`BlockWriter::add_series`] with the series' start-time runs over
    /// the block (kept in the block's start-times file).
    pub fn add_series_with_starts<S: AsRef<str>>(
        &mut self,
        labels: &[(S, S)],
        chunks: &[BlockChunk],
        starts: &[StartRun],
    ) -> io::Result<()> {
        let shown = || {
            labels
                .iter()
                .map(|(n, v)| format!("{}={:?}", n.as_ref(), v.as_ref()))
                .collect::<Vec<_>>()
                .join(",")
        };
        self.these.clear();
        for (n, v) in labels {
            let (n, v) = (self.symbol(n.as_ref())?, self.symbol(v.as_ref())?);
            self.these.push(n);
            self.these.push(v);
        }
        if !self.all.is_empty() || !self.last.is_empty() {
            match self.these.cmp(&self.last) {
                std::cmp::Ordering::Greater => {}
                std::cmp::Ordering::Equal => {
                    return Err(invalid(format!("series {{{}}} given twice", shown())))
                }
                std::cmp::Ordering::Less => {
                    return Err(invalid(format!("series {{{}}} is out of order", shown())))
                }
            }
        }
        std::mem::swap(&mut self.last, &mut self.these);
        let (min_time, max_time) = (self.meta.min_time, self.meta.max_time);
        let mut last_max = i64::MIN;
        for c in chunks {
            if c.mint > c.maxt || c.mint <= last_max || c.mint < min_time || c.maxt >= max_time {
                return Err(invalid(format!(
                    "chunk [{}, {}] of {{{}}} is out of order or outside [{min_time}, {max_time})",
                    c.mint,
                    c.maxt,
                    shown()
                )));
            }
            if c.data.len() < 2 {
                return Err(invalid(format!("a chunk of {{{}}} has no header", shown())));
            }
            last_max = c.maxt;
        }
        if chunks.is_empty() {
            return Ok(());
        }
        self.refs.clear();
        for c in chunks {
            let r = self.segments.write(c)?;
            self.refs.push(r);
            self.meta.num_chunks += 1;
            self.meta.num_samples += u64::from(u16::from_be_bytes([c.data[0], c.data[1]]));
        }
        self.pad(SERIES_ALIGN as u64)?;
        let id = u32::try_from(self.index_len / SERIES_ALIGN as u64)
            .map_err(|_| invalid("too many series bytes for an index".to_owned()))?;
        self.all.push(id);
        self.meta.num_series += 1;
        if !starts.is_empty() {
            // The run holding at the block's first sample of the series
            // starts there: the block speaks for its own samples.
            let runs = crate::storage::starts::from_first(starts, chunks[0].mint);
            self.starts.push((id, runs));
        }
        let mut entry = std::mem::take(&mut self.entry);
        entry.clear();
        put_uvarint(&mut entry, labels.len() as u64);
        for pair in self.last.chunks_exact(2) {
            put_uvarint(&mut entry, u64::from(pair[0]));
            put_uvarint(&mut entry, u64::from(pair[1]));
            self.postings
                .entry((pair[0], pair[1]))
                .or_default()
                .push(id);
        }
        put_uvarint(&mut entry, chunks.len() as u64);
        let (mut prev_maxt, mut prev_ref) = (0i64, 0u64);
        for (k, (c, &r)) in chunks.iter().zip(&self.refs).enumerate() {
            if k == 0 {
                put_varint(&mut entry, c.mint);
                put_uvarint(&mut entry, (c.maxt - c.mint) as u64);
                put_uvarint(&mut entry, r);
            } else {
                put_uvarint(&mut entry, (c.mint - prev_maxt) as u64);
                put_uvarint(&mut entry, (c.maxt - c.mint) as u64);
                put_varint(&mut entry, r as i64 - prev_ref as i64);
            }
            prev_maxt = c.maxt;
            prev_ref = r;
        }
        let mut len = Vec::with_capacity(5);
        put_uvarint(&mut len, entry.len() as u64);
        self.put(&len)?;
        self.put(&entry)?;
        self.put(&crc32c::crc32c(&entry).to_be_bytes())?;
        self.entry = entry;
        Ok(())
    }

    /// Writes the label indices, postings, offset tables and table of
    /// contents, `tombstones` and `meta.json`, fsyncs everything and
    /// renames the directory into place.
    pub fn finish(mut self) -> io::Result<BlockMeta> {
        self.segments.finish()?;
        crate::crash::point(if self.meta.compaction.level == 1 {
            "block-writing"
        } else {
            "compaction-writing"
        });
        let toc_series = self.series_at;
        // Label indices: each name's values, as symbol references.
        let toc_label_indices = self.index_len;
        let mut by_name: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for &(n, v) in self.postings.keys() {
            by_name.entry(n).or_default().push(v);
        }
        let mut section = Vec::new();
        let mut label_offsets = Vec::with_capacity(by_name.len());
        for (n, values) in &by_name {
            self.pad(4)?;
            label_offsets.push((*n, self.index_len));
            section.clear();
            let at = open_section(&mut section);
            section.extend_from_slice(&1u32.to_be_bytes());
            section.extend_from_slice(&u32_of(values.len(), "label values")?.to_be_bytes());
            for v in values {
                section.extend_from_slice(&v.to_be_bytes());
            }
            close_section(&mut section, at)?;
            self.put(&section)?;
        }

        // Postings: all series under ("", ""), then each label pair's.
        let toc_postings = self.index_len;
        let postings = std::mem::take(&mut self.postings);
        let all = std::mem::take(&mut self.all);
        let mut posting_offsets: Vec<(Option<(u32, u32)>, u64)> =
            Vec::with_capacity(postings.len() + 1);
        for (key, ids) in
            std::iter::once((None, &all)).chain(postings.iter().map(|(k, v)| (Some(*k), v)))
        {
            self.pad(4)?;
            posting_offsets.push((key, self.index_len));
            section.clear();
            let at = open_section(&mut section);
            section.extend_from_slice(&u32_of(ids.len(), "series")?.to_be_bytes());
            for id in ids {
                section.extend_from_slice(&id.to_be_bytes());
            }
            close_section(&mut section, at)?;
            self.put(&section)?;
        }
        drop(postings);

        // The label offset table (kept for older readers).
        let toc_label_table = self.index_len;
        section.clear();
        let at = open_section(&mut section);
        section.extend_from_slice(&u32_of(label_offsets.len(), "label names")?.to_be_bytes());
        for (n, off) in &label_offsets {
            put_uvarint(&mut section, 1);
            put_str(&mut section, &self.symbols[*n as usize]);
            put_uvarint(&mut section, *off);
        }
        close_section(&mut section, at)?;
        self.put(&section)?;

        // The postings offset table, sorted by name then value.
        let toc_postings_table = self.index_len;
        section.clear();
        let at = open_section(&mut section);
        section.extend_from_slice(&u32_of(posting_offsets.len(), "postings")?.to_be_bytes());
        for (key, off) in &posting_offsets {
            let (n, v) = match key {
                None => ("", ""),
                Some((n, v)) => (&*self.symbols[*n as usize], &*self.symbols[*v as usize]),
            };
            put_uvarint(&mut section, 2);
            put_str(&mut section, n);
            put_str(&mut section, v);
            put_uvarint(&mut section, *off);
        }
        close_section(&mut section, at)?;
        self.put(&section)?;

        let mut toc = Vec::with_capacity(52);
        for r in [
            5,
            toc_series,
            toc_label_indices,
            toc_label_table,
            toc_postings,
            toc_postings_table,
        ] {
            toc.extend_from_slice(&r.to_be_bytes());
        }
        let crc = crc32c::crc32c(&toc);
        toc.extend_from_slice(&crc.to_be_bytes());
        self.put(&toc)?;
        self.index.flush()?;
        self.index.get_ref().sync_all()?;

        // Prometheus' snapshot links it: every block has one.
        let tombstones = super::tombstones::Tombstones::default().encode();
        write_synced(&self.tmp.join("tombstones"), &tombstones)?;
        if !self.starts.is_empty() {
            write_synced(
                &self.tmp.join(crate::storage::starts::BLOCK_FILE),
                &crate::storage::starts::encode_block_file(&self.starts),
            )?;
        }
        write_synced(
            &self.tmp.join("meta.json"),
            meta_json(&self.meta).as_bytes(),
        )?;
        sync_dir(&self.tmp.join("chunks"))?;
        sync_dir(&self.tmp)?;
        fs::rename(&self.tmp, self.parent.join(self.meta.ulid.to_string()))?;
        self.finished = true;
        sync_dir(&self.parent)?;
        Ok(self.meta.clone())
    }
}

impl Drop for BlockWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Chunk segment files of at most [`SEGMENT_MAX`] bytes, written in turn.
#[derive(Debug)]
struct SegmentWriter {
    dir: PathBuf,
    /// The open segment's number (0 for `000001`).
    seq: u64,
    file: Option<io::BufWriter<File>>,
    pos: u64,
    head: Vec<u8>,
}

impl SegmentWriter {
    fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            seq: 0,
            file: None,
            pos: 0,
            head: Vec::with_capacity(16),
        }
    }

    /// Writes chunk `c`; its reference (segment number in the upper 32
    /// bits, offset in the lower).
    fn write(&mut self, c: &BlockChunk) -> io::Result<u64> {
        self.head.clear();
        put_uvarint(&mut self.head, c.data.len() as u64);
        let size = (self.head.len() + 1 + c.data.len() + 4) as u64;
        if self.file.is_none() || self.pos + size > SEGMENT_MAX {
            if let Some(f) = self.file.take() {
                finish(f)?;
                self.seq += 1;
            }
            let path = self.dir.join(format!("{:06}", self.seq + 1));
            let mut f = io::BufWriter::with_capacity(1 << 16, File::create(path)?);
            let mut header = CHUNKS_MAGIC.to_be_bytes().to_vec();
            header.extend_from_slice(&[1, 0, 0, 0]);
            f.write_all(&header)?;
            self.pos = header.len() as u64;
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else {
            return Err(io::Error::other("no segment file open"));
        };
        let at = self.seq << 32 | self.pos;
        let enc = c.encoding as u8;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&[enc]), &c.data);
        f.write_all(&self.head)?;
        f.write_all(&[enc])?;
        f.write_all(&c.data)?;
        f.write_all(&crc.to_be_bytes())?;
        self.pos += size;
        Ok(at)
    }

    fn finish(&mut self) -> io::Result<()> {
        match self.file.take() {
            Some(f) => finish(f),
            None => Ok(()),
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Sets `stats.numTombstones` in the `meta.json` of the block in `dir`
/// (left out at 0, as Prometheus writes it), keeping every other field as
/// it is, those Sluice does not model too (a block from Prometheus or
/// Thanos): a temporary file written and synced, renamed over the old
/// one, the directory synced.
pub fn set_tombstone_count(dir: &Path, n: u64) -> io::Result<()> {
    let path = dir.join("meta.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let Some(meta) = v.as_object_mut() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "meta.json is not an object",
        ));
    };
    let stats = meta.entry("stats").or_insert_with(|| serde_json::json!({}));
    if let Some(stats) = stats.as_object_mut() {
        if n > 0 {
            stats.insert("numTombstones".to_owned(), n.into());
        } else {
            stats.remove("numTombstones");
        }
    }
    let mut text = serde_json::to_string_pretty(&v).unwrap_or_default();
    text.push('\n');
    let tmp = dir.join("meta.json.tmp");
    write_synced(&tmp, text.as_bytes())?;
    std::fs::rename(&tmp, &path)?;
    sync_dir(dir)
}

/// `meta.json` as Prometheus writes it.
fn meta_json(m: &BlockMeta) -> String {
    let mut s = serde_json::to_string_pretty(&meta_value(m)).unwrap_or_default();
    s.push('\n');
    s
}

/// A block's meta as the JSON of its `meta.json` (and of Prometheus'
/// `/api/v1/status/tsdb/blocks`).
pub fn meta_value(m: &BlockMeta) -> serde_json::Value {
    let mut stats = serde_json::Map::new();
    for (k, v) in [
        ("numSamples", m.num_samples),
        ("numSeries", m.num_series),
        ("numChunks", m.num_chunks),
        ("numTombstones", m.num_tombstones),
    ] {
        // Prometheus leaves zero counts out.
        if v > 0 {
            stats.insert(k.to_owned(), v.into());
        }
    }
    let c = &m.compaction;
    let mut compaction = serde_json::json!({
        "level": c.level,
        "sources": c.sources.iter().map(ToString::to_string).collect::<Vec<_>>(),
    });
    if c.from_out_of_order {
        compaction["hints"] = serde_json::json!([HINT_FROM_OUT_OF_ORDER]);
    }
    if !c.parents.is_empty() {
        compaction["parents"] = c
            .parents
            .iter()
            .map(|p| {
                serde_json::json!({
                    "ulid": p.ulid.to_string(),
                    "minTime": p.min_time,
                    "maxTime": p.max_time,
                })
            })
            .collect();
    }
    serde_json::json!({
        "ulid": m.ulid.to_string(),
        "minTime": m.min_time,
        "maxTime": m.max_time,
        "stats": stats,
        "compaction": compaction,
        "version": 1,
    })
}

fn finish(f: io::BufWriter<File>) -> io::Result<()> {
    f.into_inner().map_err(|e| e.into_error())?.sync_all()
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// Starts a section whose 4-byte length comes first: returns where the
/// length goes.
fn open_section(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Fills in a section's length (the bytes after it) and appends the CRC32C
/// of those bytes.
fn close_section(out: &mut Vec<u8>, at: usize) -> io::Result<()> {
    let len = u32::try_from(out.len() - at - 4)
        .map_err(|_| invalid("an index section exceeds 4 GiB".to_owned()))?;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&out[at + 4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(())
}

fn u32_of(v: usize, what: &str) -> io::Result<u32> {
    u32::try_from(v).map_err(|_| invalid(format!("too many {what} for an index")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tombstone_count_keeps_the_fields_sluice_does_not_model() {
        let dir = tempfile::tempdir().expect("tmp");
        let meta = serde_json::json!({
            "ulid": "01BKGV7JBM69T2G1BGBGM6KB12", "minTime": 0, "maxTime": 10, "version": 1,
            "stats": {"numSamples": 5, "numFloatSamples": 5},
            "compaction": {"level": 1, "deletable": true},
            "thanos": {"labels": {"a": "b"}, "source": "sidecar"},
        });
        std::fs::write(dir.path().join("meta.json"), meta.to_string()).expect("written");
        let read = |d: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join("meta.json")).expect("read"))
                .expect("json")
        };
        set_tombstone_count(dir.path(), 3).expect("set");
        let v = read(dir.path());
        assert_eq!(v["stats"]["numTombstones"], 3);
        assert_eq!(v["stats"]["numFloatSamples"], 5);
        assert_eq!(v["thanos"]["source"], "sidecar");
        assert_eq!(v["compaction"]["deletable"], true);
        set_tombstone_count(dir.path(), 0).expect("set");
        assert!(read(dir.path())["stats"].get("numTombstones").is_none());
        assert!(!dir.path().join("meta.json.tmp").exists());
    }

    #[test]
    fn out_of_order_chunks_and_repeated_series_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let chunk = |mint, maxt| BlockChunk {
            mint,
            maxt,
            encoding: Encoding::Xor,
            data: Arc::from(vec![0u8, 1, 0].as_slice()),
        };
        let s = |c: Vec<BlockChunk>| BlockSeries {
            starts: Vec::new(),
            labels: vec![("__name__".into(), "x".into())],
            chunks: c,
        };
        let overlap = write_block(
            dir.path(),
            vec![s(vec![chunk(0, 10), chunk(5, 20)])],
            0,
            100,
            1,
        );
        assert!(overlap.is_err());
        let outside = write_block(dir.path(), vec![s(vec![chunk(0, 100)])], 0, 100, 1);
        assert!(outside.is_err());
        let twice = write_block(dir.path(), vec![s(vec![]), s(vec![])], 0, 100, 1);
        assert!(twice.is_err());
        let ok = write_block(
            dir.path(),
            vec![s(vec![chunk(0, 10), chunk(11, 20)])],
            0,
            100,
            1,
        )
        .expect("a block");
        assert_eq!((ok.num_series, ok.num_chunks, ok.num_samples), (1, 2, 2));
        assert!(dir.path().join(ok.ulid.to_string()).join("index").is_file());
    }
}
