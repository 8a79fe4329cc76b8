//! Writing one block: chunks into segment files, then the index (symbols,
//! series with their chunk references, label indices, postings, the
//! offset tables and the table of contents), `meta.json` and an empty
//! `tombstones`. Everything goes into `<ULID>.tmp`, is fsynced, and the
//! directory is renamed into place, so a crash leaves either no block or a
//! whole one (and a `.tmp` directory, which a reader ignores).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use super::ulid::Ulid;
use crate::encoding::put_uvarint;

/// A chunk file starts with this, then the format version and 3 zero bytes.
pub(super) const CHUNKS_MAGIC: u32 = 0x85BD_40DD;
/// An index file starts with this, then the format version.
pub(super) const INDEX_MAGIC: u32 = 0xBAAA_D700;
const INDEX_VERSION: u8 = 2;
/// A tombstones file starts with this, then the format version.
const TOMBSTONES_MAGIC: u32 = 0x0130_BA30;
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
}

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
    mut series: Vec<BlockSeries>,
    min_time: i64,
    max_time: i64,
    now_ms: u64,
) -> io::Result<BlockMeta> {
    series.sort_by(|a, b| a.labels.cmp(&b.labels));
    for w in series.windows(2) {
        if w[0].labels == w[1].labels {
            return Err(invalid(format!("series {:?} given twice", w[0].labels)));
        }
    }
    for s in &series {
        let mut last_max = i64::MIN;
        for c in &s.chunks {
            if c.mint > c.maxt || c.mint <= last_max || c.mint < min_time || c.maxt >= max_time {
                return Err(invalid(format!(
                    "chunk [{}, {}] of {:?} is out of order or outside [{min_time}, {max_time})",
                    c.mint, c.maxt, s.labels
                )));
            }
            if c.data.len() < 2 {
                return Err(invalid(format!("a chunk of {:?} has no header", s.labels)));
            }
            last_max = c.maxt;
        }
    }
    let ulid = Ulid::new(now_ms);
    let name = ulid.to_string();
    let tmp = parent.join(format!("{name}.tmp"));
    let done = parent.join(&name);
    if tmp.exists() {
        fs::remove_dir_all(&tmp)?;
    }
    fs::create_dir_all(tmp.join("chunks"))?;

    let (refs, num_chunks, num_samples) = write_chunks(&tmp.join("chunks"), &series)?;
    let index = build_index(&series, &refs)?;
    write_synced(&tmp.join("index"), &index)?;
    let mut tombstones = TOMBSTONES_MAGIC.to_be_bytes().to_vec();
    tombstones.push(1);
    tombstones.extend_from_slice(&crc32c::crc32c(&[]).to_be_bytes());
    write_synced(&tmp.join("tombstones"), &tombstones)?;
    let meta = BlockMeta {
        ulid,
        min_time,
        max_time,
        num_series: series.len() as u64,
        num_chunks,
        num_samples,
    };
    write_synced(&tmp.join("meta.json"), meta_json(&meta).as_bytes())?;
    sync_dir(&tmp.join("chunks"))?;
    sync_dir(&tmp)?;
    fs::rename(&tmp, &done)?;
    sync_dir(parent)?;
    Ok(meta)
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `meta.json` as Prometheus writes it for a block it cut from its head.
fn meta_json(m: &BlockMeta) -> String {
    let mut stats = serde_json::Map::new();
    for (k, v) in [
        ("numSamples", m.num_samples),
        ("numSeries", m.num_series),
        ("numChunks", m.num_chunks),
    ] {
        // Prometheus leaves zero counts out.
        if v > 0 {
            stats.insert(k.to_owned(), v.into());
        }
    }
    let ulid = m.ulid.to_string();
    let v = serde_json::json!({
        "ulid": ulid,
        "minTime": m.min_time,
        "maxTime": m.max_time,
        "stats": stats,
        "compaction": { "level": 1, "sources": [ulid] },
        "version": 1,
    });
    let mut s = serde_json::to_string_pretty(&v).unwrap_or_default();
    s.push('\n');
    s
}

/// Writes every chunk, series by series, into segment files of at most
/// [`SEGMENT_MAX`] bytes; returns each chunk's reference (segment number
/// in the upper 32 bits, offset in the lower), the chunk count and the
/// sample count.
fn write_chunks(dir: &Path, series: &[BlockSeries]) -> io::Result<(Vec<Vec<u64>>, u64, u64)> {
    let mut refs = Vec::with_capacity(series.len());
    let (mut chunks, mut samples) = (0u64, 0u64);
    let mut seq = 0u64;
    let mut file: Option<io::BufWriter<File>> = None;
    let mut pos = 0u64;
    let header = {
        let mut h = CHUNKS_MAGIC.to_be_bytes().to_vec();
        h.extend_from_slice(&[1, 0, 0, 0]);
        h
    };
    let mut head = Vec::with_capacity(16);
    for s in series {
        let mut these = Vec::with_capacity(s.chunks.len());
        for c in &s.chunks {
            head.clear();
            put_uvarint(&mut head, c.data.len() as u64);
            let size = (head.len() + 1 + c.data.len() + 4) as u64;
            if file.is_none() || pos + size > SEGMENT_MAX {
                if let Some(f) = file.take() {
                    finish(f)?;
                    seq += 1;
                }
                let mut f = io::BufWriter::new(File::create(dir.join(format!("{:06}", seq + 1)))?);
                f.write_all(&header)?;
                pos = header.len() as u64;
                file = Some(f);
            }
            let Some(f) = file.as_mut() else {
                return Err(io::Error::other("no segment file open"));
            };
            these.push(seq << 32 | pos);
            let enc = c.encoding as u8;
            let mut crc = crc32c::crc32c(&[enc]);
            crc = crc32c::crc32c_append(crc, &c.data);
            f.write_all(&head)?;
            f.write_all(&[enc])?;
            f.write_all(&c.data)?;
            f.write_all(&crc.to_be_bytes())?;
            pos += size;
            chunks += 1;
            samples += u64::from(u16::from_be_bytes([c.data[0], c.data[1]]));
        }
        refs.push(these);
    }
    if let Some(f) = file {
        finish(f)?;
    }
    Ok((refs, chunks, samples))
}

fn finish(f: io::BufWriter<File>) -> io::Result<()> {
    f.into_inner().map_err(|e| e.into_error())?.sync_all()
}

fn pad(out: &mut Vec<u8>, align: usize) {
    while !out.len().is_multiple_of(align) {
        out.push(0);
    }
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

/// The index file for the sorted `series` with their chunk references.
fn build_index(series: &[BlockSeries], refs: &[Vec<u64>]) -> io::Result<Vec<u8>> {
    let mut out = INDEX_MAGIC.to_be_bytes().to_vec();
    out.push(INDEX_VERSION);

    // Symbols: every label name and value, sorted, each once.
    let mut symbols: BTreeMap<&str, u32> = BTreeMap::new();
    for s in series {
        for (n, v) in &s.labels {
            symbols.insert(n, 0);
            symbols.insert(v, 0);
        }
    }
    for (i, r) in symbols.values_mut().enumerate() {
        *r = u32_of(i, "symbols")?;
    }
    let toc_symbols = out.len() as u64;
    let at = open_section(&mut out);
    out.extend_from_slice(&u32_of(symbols.len(), "symbols")?.to_be_bytes());
    for s in symbols.keys() {
        put_str(&mut out, s);
    }
    close_section(&mut out, at)?;

    // Series, each 16-byte aligned, and the postings they make.
    let toc_series = out.len() as u64;
    let mut postings: BTreeMap<(&str, &str), Vec<u32>> = BTreeMap::new();
    let mut all = Vec::with_capacity(series.len());
    let mut entry = Vec::new();
    for (s, these) in series.iter().zip(refs) {
        pad(&mut out, SERIES_ALIGN);
        let id = u32_of(out.len() / SERIES_ALIGN, "series bytes")?;
        all.push(id);
        entry.clear();
        put_uvarint(&mut entry, s.labels.len() as u64);
        for (n, v) in &s.labels {
            put_uvarint(&mut entry, u64::from(symbols[n.as_str()]));
            put_uvarint(&mut entry, u64::from(symbols[v.as_str()]));
            postings.entry((n, v)).or_default().push(id);
        }
        put_uvarint(&mut entry, s.chunks.len() as u64);
        let (mut prev_maxt, mut prev_ref) = (0i64, 0u64);
        for (k, (c, &r)) in s.chunks.iter().zip(these).enumerate() {
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
        put_uvarint(&mut out, entry.len() as u64);
        out.extend_from_slice(&entry);
        out.extend_from_slice(&crc32c::crc32c(&entry).to_be_bytes());
    }

    // Label indices: each name's values, as symbol references.
    let toc_label_indices = out.len() as u64;
    let mut by_name: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for &(n, v) in postings.keys() {
        by_name.entry(n).or_default().push(symbols[v]);
    }
    let mut label_offsets = Vec::with_capacity(by_name.len());
    for (n, values) in &by_name {
        pad(&mut out, 4);
        label_offsets.push((*n, out.len() as u64));
        let at = open_section(&mut out);
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&u32_of(values.len(), "label values")?.to_be_bytes());
        for v in values {
            out.extend_from_slice(&v.to_be_bytes());
        }
        close_section(&mut out, at)?;
    }

    // Postings: all series under ("", ""), then each label pair's.
    let toc_postings = out.len() as u64;
    let mut posting_offsets = Vec::with_capacity(postings.len() + 1);
    for ((n, v), ids) in
        std::iter::once((("", ""), &all)).chain(postings.iter().map(|(k, v)| (*k, v)))
    {
        pad(&mut out, 4);
        posting_offsets.push((n, v, out.len() as u64));
        let at = open_section(&mut out);
        out.extend_from_slice(&u32_of(ids.len(), "series")?.to_be_bytes());
        for id in ids {
            out.extend_from_slice(&id.to_be_bytes());
        }
        close_section(&mut out, at)?;
    }

    // The label offset table (kept for older readers).
    let toc_label_table = out.len() as u64;
    let at = open_section(&mut out);
    out.extend_from_slice(&u32_of(label_offsets.len(), "label names")?.to_be_bytes());
    for (n, off) in &label_offsets {
        put_uvarint(&mut out, 1);
        put_str(&mut out, n);
        put_uvarint(&mut out, *off);
    }
    close_section(&mut out, at)?;

    // The postings offset table, sorted by name then value.
    let toc_postings_table = out.len() as u64;
    let at = open_section(&mut out);
    out.extend_from_slice(&u32_of(posting_offsets.len(), "postings")?.to_be_bytes());
    for (n, v, off) in &posting_offsets {
        put_uvarint(&mut out, 2);
        put_str(&mut out, n);
        put_str(&mut out, v);
        put_uvarint(&mut out, *off);
    }
    close_section(&mut out, at)?;

    let toc_at = out.len();
    for r in [
        toc_symbols,
        toc_series,
        toc_label_indices,
        toc_label_table,
        toc_postings,
        toc_postings_table,
    ] {
        out.extend_from_slice(&r.to_be_bytes());
    }
    let crc = crc32c::crc32c(&out[toc_at..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
