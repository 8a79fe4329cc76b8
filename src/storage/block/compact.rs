//! Compaction as Prometheus' leveled compactor does it: blocks cut from
//! the head (one minimum range each, 2 h by default) are merged into
//! blocks of the next ranges (×3 each: 6 h, 18 h, 54 h, …) up to the
//! largest range allowed. Merging copies chunks byte for byte, a series at
//! a time through [`BlockWriter`], so what it holds in memory is one
//! series of each parent, the symbols and the new block's postings.
//!
//! The facts are Prometheus' `tsdb/compact.go` (`ExponentialBlockRanges`,
//! `selectDirs`, `splitByRange`, `CompactBlockMetas`) and `cmd/prometheus`
//! (the largest range: 10% of the retention, at most 31 days).

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use super::reader::{BlockError, ChunkReader, IndexReader, Labels};
use super::writer::{BlockChunk, BlockDesc, BlockMeta, BlockWriter, Compaction, Encoding};
use crate::storage::starts::{RunJoiner, StartRun};

/// The ranges blocks are compacted to: `min`, then ×3 while it stays at
/// or under `max` (Prometheus steps 10 ranges by a factor of 3, then drops
/// those over the largest). `min` alone means no compaction.
pub fn block_ranges(min: i64, max: i64) -> Vec<i64> {
    let mut out = vec![min.max(1)];
    for _ in 1..10 {
        let Some(next) = out[out.len() - 1].checked_mul(3).filter(|&r| r <= max) else {
            break;
        };
        out.push(next);
    }
    out
}

/// The largest block range Prometheus picks when none is given: a tenth
/// of the retention, at most 31 days, at least `min`.
pub fn default_max_block_range(retention_ms: i64, min: i64) -> i64 {
    const DAYS_31: i64 = 31 * 24 * 3_600_000;
    (retention_ms / 10).min(DAYS_31).max(min)
}

/// The blocks to compact next, as indexes into `metas` (sorted by
/// `min_time`): Prometheus' choice. Blocks that overlap (out-of-order
/// blocks beside in-order ones) are merged first, whatever their size;
/// otherwise the newest block is left alone (it was just cut, and leaves
/// a window to back it up as it is), and for each range above the first
/// the blocks are grouped by the aligned range they fall in, and the
/// first group of two or more that fills its range, or ends before the
/// newest block starts, is chosen. Groups with a block in `skip` (a
/// compaction of it failed) are passed over: a failed merge would only
/// fail again. With nothing to merge, a block with many tombstones is
/// chosen alone (see [`with_tombstones`]), to be written without what
/// they delete.
pub fn plan(metas: &[&BlockMeta], ranges: &[i64], skip: &BTreeSet<super::Ulid>) -> Vec<usize> {
    if metas.len() < 2 {
        return Vec::new();
    }
    let overlapping = overlapping(metas, skip);
    if !overlapping.is_empty() {
        return overlapping;
    }
    let candidates = &metas[..metas.len() - 1];
    let high = candidates[candidates.len() - 1].min_time;
    let grouped = by_level(candidates, ranges, high, skip);
    if !grouped.is_empty() {
        return grouped;
    }
    with_tombstones(candidates, ranges, skip)
}

/// The leveled part of [`plan`]: the first group of blocks in an aligned
/// range above the first that fills it or ends before `high`.
fn by_level(
    candidates: &[&BlockMeta],
    ranges: &[i64],
    high: i64,
    skip: &BTreeSet<super::Ulid>,
) -> Vec<usize> {
    for &range in ranges.iter().skip(1) {
        for group in split_by_range(candidates, range) {
            let first = candidates[group[0]];
            let last = candidates[group[group.len() - 1]];
            let (mint, maxt) = (first.min_time, last.max_time);
            let fits = maxt - mint == range || maxt <= high;
            let overlaps = group
                .windows(2)
                .any(|w| candidates[w[1]].min_time < candidates[w[0]].max_time);
            let skipped = group.iter().any(|&i| skip.contains(&candidates[i].ulid));
            if fits && group.len() > 1 && !overlaps && !skipped {
                return group;
            }
        }
    }
    Vec::new()
}

/// With nothing to merge, one block written again without what its
/// tombstones delete, as Prometheus' planner picks it: newest first, a
/// block spanning at least the middle range whose tombstones outnumber
/// 5% of its series; among the smaller newest blocks, one with at least
/// as many tombstones as series (deleted whole, whatever its size).
fn with_tombstones(
    candidates: &[&BlockMeta],
    ranges: &[i64],
    skip: &BTreeSet<super::Ulid>,
) -> Vec<usize> {
    let Some(&middle) = ranges.get(ranges.len() / 2) else {
        return Vec::new();
    };
    for (i, m) in candidates.iter().enumerate().rev() {
        if skip.contains(&m.ulid) {
            continue;
        }
        if m.max_time - m.min_time < middle {
            if m.num_tombstones > 0 && m.num_tombstones >= m.num_series {
                return vec![i];
            }
            break;
        }
        if m.num_tombstones as f64 / (m.num_series + 1) as f64 > 0.05 {
            return vec![i];
        }
    }
    Vec::new()
}

/// The first run of blocks (sorted by `min_time`) that overlap in time,
/// the newest included, without a block in `skip`: merged first, as
/// Prometheus' vertical compaction does, so that reads and the leveled
/// plan meet blocks that do not overlap. Out-of-order blocks overlap the
/// in-order block of their range. A run with a block whose compaction
/// failed is passed over for the next.
fn overlapping(metas: &[&BlockMeta], skip: &BTreeSet<super::Ulid>) -> Vec<usize> {
    let mut run: Vec<usize> = Vec::new();
    let mut reach = i64::MIN;
    let done = |run: &[usize]| run.len() > 1 && run.iter().all(|&i| !skip.contains(&metas[i].ulid));
    for (i, m) in metas.iter().enumerate() {
        if m.min_time >= reach {
            if done(&run) {
                return run;
            }
            run.clear();
        }
        run.push(i);
        reach = reach.max(m.max_time);
    }
    if done(&run) {
        run
    } else {
        Vec::new()
    }
}

/// Groups the blocks (sorted by `min_time`) by the `range`-aligned window
/// each falls in; a block reaching past its window is in no group.
fn split_by_range(metas: &[&BlockMeta], range: i64) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < metas.len() {
        let start = metas[i].min_time.div_euclid(range) * range;
        if metas[i].max_time > start + range {
            i += 1;
            continue;
        }
        let mut group = Vec::new();
        while i < metas.len() && metas[i].max_time <= start + range {
            group.push(i);
            i += 1;
        }
        out.push(group);
    }
    out
}

/// A block open for reading, as compaction needs it.
#[derive(Debug, Clone)]
pub struct Parent<'a> {
    /// Its meta.
    pub meta: &'a BlockMeta,
    /// Its index.
    pub index: &'a IndexReader,
    /// Its chunks.
    pub chunks: &'a ChunkReader,
    /// Its start-time runs by series ID.
    pub starts: &'a std::collections::HashMap<u32, Vec<StartRun>>,
    /// Its deleted time ranges by series ID: left out of the child.
    pub deleted: std::sync::Arc<super::tombstones::Tombstones>,
    /// A chunk without the samples of the given ranges, encoded again
    /// (none when nothing is left): the reader that knows the encodings
    /// supplies it.
    pub trim: fn(BlockChunk, &super::tombstones::Intervals) -> Result<Vec<BlockChunk>, BlockError>,
}

/// Why a compaction failed.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// A parent could not be read.
    #[error("reading block {0}: {1}")]
    Read(super::Ulid, BlockError),
    /// The new block could not be written.
    #[error("writing the compacted block: {0}")]
    Write(#[from] io::Error),
}

/// One parent's place in the merge: its series IDs and the next series.
struct Cursor<'a> {
    parent: Parent<'a>,
    ids: std::vec::IntoIter<u32>,
    next: Option<(Labels, Vec<super::ChunkMeta>)>,
    /// The series ID of `next`.
    id: u32,
}

impl Cursor<'_> {
    fn advance(&mut self) -> Result<(), CompactError> {
        self.next = match self.ids.next() {
            Some(id) => Some({
                self.id = id;
                self.parent
                    .index
                    .series(id)
                    .map_err(|e| CompactError::Read(self.parent.meta.ulid, e))?
            }),
            None => None,
        };
        Ok(())
    }
}

/// Merges `parents` (sorted by `min_time`) into one new
/// block under `dir`, whose meta says level one above the highest
/// parent's, the union of their sources, and the parents themselves.
/// Each series' chunks are copied byte for byte, oldest parent first;
/// where parents overlap in time, `untangle` is given them to put in time
/// order without overlaps (this module copies chunks and does not decode
/// them). `keep_going` is asked between series; when it says no, the
/// unfinished block is removed and `Ok(None)` returned.
pub fn compact(
    dir: &Path,
    parents: &[Parent<'_>],
    now_ms: u64,
    keep_going: &dyn Fn() -> bool,
    untangle: &dyn Fn(&mut Vec<BlockChunk>),
) -> Result<Option<BlockMeta>, CompactError> {
    if parents.is_empty() {
        return Ok(None);
    }
    let mut sources = BTreeSet::new();
    for p in parents {
        sources.extend(p.meta.compaction.sources.iter().copied());
        if p.meta.compaction.sources.is_empty() {
            sources.insert(p.meta.ulid);
        }
    }
    let compaction = Compaction {
        level: parents
            .iter()
            .map(|p| p.meta.compaction.level)
            .max()
            .unwrap_or(1)
            + 1,
        sources: sources.into_iter().collect(),
        parents: parents
            .iter()
            .map(|p| BlockDesc {
                ulid: p.meta.ulid,
                min_time: p.meta.min_time,
                max_time: p.meta.max_time,
            })
            .collect(),
        // Out-of-order blocks merged with in-order ones are no longer
        // only out-of-order samples.
        from_out_of_order: parents.iter().all(|p| p.meta.compaction.from_out_of_order),
    };
    write_child(dir, parents, compaction, now_ms, keep_going, untangle)
}

/// Writes `parent` again without its deleted samples (`clean_tombstones`)
/// as a new block under `dir` whose meta names it as its one parent.
/// Prometheus makes such a block level 1 and its own only source; this
/// keeps the parent's level and sources, which still say what it holds
/// (start-up recognises the blocks a WAL record names by them). A block
/// with nothing left is written too, with no series (see
/// `Blocks::clean_tombstones`). `Ok(None)` when `keep_going` said no.
pub fn rewrite(
    dir: &Path,
    parent: Parent<'_>,
    now_ms: u64,
    keep_going: &dyn Fn() -> bool,
    untangle: &dyn Fn(&mut Vec<BlockChunk>),
) -> Result<Option<BlockMeta>, CompactError> {
    let m = parent.meta;
    let mut sources = m.compaction.sources.clone();
    if sources.is_empty() {
        sources.push(m.ulid);
    }
    let compaction = Compaction {
        level: m.compaction.level.max(1),
        sources,
        parents: vec![BlockDesc {
            ulid: m.ulid,
            min_time: m.min_time,
            max_time: m.max_time,
        }],
        from_out_of_order: m.compaction.from_out_of_order,
    };
    write_child(
        dir,
        std::slice::from_ref(&parent),
        compaction,
        now_ms,
        keep_going,
        untangle,
    )
}

/// The merge of [`compact`] and [`rewrite`]: `parents` into one block
/// whose meta says `compaction`.
fn write_child(
    dir: &Path,
    parents: &[Parent<'_>],
    compaction: Compaction,
    now_ms: u64,
    keep_going: &dyn Fn() -> bool,
    untangle: &dyn Fn(&mut Vec<BlockChunk>),
) -> Result<Option<BlockMeta>, CompactError> {
    let (Some(first), Some(last)) = (parents.first(), parents.last()) else {
        return Ok(None);
    };
    let mut symbols = BTreeSet::new();
    for p in parents {
        symbols.extend(p.index.symbols());
    }
    let min_time = parents
        .iter()
        .map(|p| p.meta.min_time)
        .min()
        .unwrap_or(first.meta.min_time);
    let max_time = parents
        .iter()
        .map(|p| p.meta.max_time)
        .max()
        .unwrap_or(last.meta.max_time);
    let mut w = BlockWriter::create(dir, &symbols, min_time, max_time, now_ms, compaction)?;
    drop(symbols);
    let mut cursors = Vec::with_capacity(parents.len());
    for parent in parents.iter().cloned() {
        let ids = parent
            .index
            .postings("", "")
            .map_err(|e| CompactError::Read(parent.meta.ulid, e))?;
        let mut c = Cursor {
            parent,
            ids: ids.into_iter(),
            next: None,
            id: 0,
        };
        c.advance()?;
        cursors.push(c);
    }
    let mut chunks: Vec<BlockChunk> = Vec::new();
    let mut n = 0usize;
    while let Some(labels) = cursors
        .iter()
        .filter_map(|c| c.next.as_ref().map(|(l, _)| l))
        .min()
        .cloned()
    {
        n += 1;
        if n.is_multiple_of(1024) && !keep_going() {
            return Ok(None);
        }
        chunks.clear();
        let mut starts = RunJoiner::default();
        for c in &mut cursors {
            if c.next.as_ref().is_none_or(|(l, _)| *l != labels) {
                continue;
            }
            let Some((_, metas)) = c.next.take() else {
                continue;
            };
            // Each parent speaks for its own samples (see `RunJoiner`).
            if let (Some(first), Some(last)) = (metas.first(), metas.last()) {
                let runs = c.parent.starts.get(&c.id).map_or(&[][..], Vec::as_slice);
                starts.add(runs, first.mint, last.maxt);
            }
            let deleted = c.parent.deleted.get(u64::from(c.id));
            for m in metas {
                if deleted.is_some_and(|d| d.covers(m.mint, m.maxt)) {
                    continue;
                }
                let (enc, data) = c
                    .parent
                    .chunks
                    .chunk(m.chunk_ref)
                    .map_err(|e| CompactError::Read(c.parent.meta.ulid, e))?;
                let encoding = match enc {
                    1 => Encoding::Xor,
                    2 => Encoding::Histogram,
                    3 => Encoding::FloatHistogram,
                    other => {
                        return Err(CompactError::Read(
                            c.parent.meta.ulid,
                            BlockError(format!("chunk {}: unknown encoding {other}", m.chunk_ref)),
                        ))
                    }
                };
                let chunk = BlockChunk {
                    mint: m.mint,
                    maxt: m.maxt,
                    encoding,
                    data,
                };
                match deleted {
                    Some(d) if d.overlaps(m.mint, m.maxt) => {
                        chunks.extend(
                            (c.parent.trim)(chunk, d)
                                .map_err(|e| CompactError::Read(c.parent.meta.ulid, e))?,
                        );
                    }
                    _ => chunks.push(chunk),
                }
            }
            c.advance()?;
        }
        if chunks.is_empty() {
            // Deleted whole: the child does not hold the series.
            continue;
        }
        if !chunks.windows(2).all(|w| w[1].mint > w[0].maxt) {
            untangle(&mut chunks);
        }
        w.add_series_with_starts(&labels, &chunks, &starts.finish())?;
    }
    Ok(Some(w.finish()?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::storage::block::Ulid;

    const H: i64 = 3_600_000;

    fn meta(min: i64, max: i64) -> BlockMeta {
        BlockMeta {
            ulid: Ulid(min as u128),
            min_time: min * H,
            max_time: max * H,
            num_series: 1,
            num_chunks: 1,
            num_samples: 1,
            num_tombstones: 0,
            compaction: Compaction::default(),
        }
    }

    fn planned(blocks: &[(i64, i64)], ranges: &[i64]) -> Vec<(i64, i64)> {
        let metas: Vec<BlockMeta> = blocks.iter().map(|&(a, b)| meta(a, b)).collect();
        let refs: Vec<&BlockMeta> = metas.iter().collect();
        let ranges: Vec<i64> = ranges.iter().map(|r| r * H).collect();
        plan(&refs, &ranges, &BTreeSet::new())
            .into_iter()
            .map(|i| blocks[i])
            .collect()
    }

    #[test]
    fn with_nothing_to_merge_a_block_with_many_tombstones_is_written_again() {
        let ranges = [2 * H, 6 * H, 18 * H];
        let plan_of = |blocks: &[(i64, i64, u64, u64)]| {
            let metas: Vec<BlockMeta> = blocks
                .iter()
                .map(|&(a, b, series, stones)| BlockMeta {
                    num_series: series,
                    num_tombstones: stones,
                    ..meta(a, b)
                })
                .collect();
            let refs: Vec<&BlockMeta> = metas.iter().collect();
            plan(&refs, &ranges, &BTreeSet::new())
        };
        // Over 5% of a big block's series: that block alone; the newest
        // block is never chosen.
        assert_eq!(
            plan_of(&[(0, 6, 100, 0), (6, 12, 100, 6), (12, 14, 100, 90)]),
            [1]
        );
        assert!(plan_of(&[(0, 6, 100, 0), (6, 12, 100, 5), (12, 14, 1, 1)]).is_empty());
        // A small block only when deleted whole (a tombstone per series).
        assert_eq!(plan_of(&[(0, 2, 3, 3), (2, 4, 1, 0)]), [0]);
        assert!(plan_of(&[(0, 2, 3, 2), (2, 4, 1, 0)]).is_empty());
        // Merging comes first.
        assert_eq!(
            plan_of(&[(0, 2, 1, 1), (2, 4, 1, 0), (4, 6, 1, 0), (6, 8, 1, 0)]),
            [0, 1, 2]
        );
    }

    #[test]
    fn ranges_step_by_three_up_to_the_largest() {
        assert_eq!(block_ranges(2 * H, 36 * H), vec![2 * H, 6 * H, 18 * H]);
        assert_eq!(block_ranges(2 * H, 2 * H), vec![2 * H]);
        assert_eq!(block_ranges(2 * H, H), vec![2 * H]);
        let day = 24 * H;
        assert_eq!(default_max_block_range(15 * day, 2 * H), 36 * H);
        assert_eq!(default_max_block_range(3650 * day, 2 * H), 31 * day);
        assert_eq!(default_max_block_range(H, 2 * H), 2 * H);
        // 2 h × 3^6 = 1458 h would pass 31 d (744 h): the list stops at
        // 486 h.
        assert_eq!(block_ranges(2 * H, 31 * day).last(), Some(&(486 * H)));
    }

    /// The cases of Prometheus' own planner tests, in hours.
    #[test]
    fn plans_as_prometheus_does() {
        let r = [20, 60, 180, 540, 1620];
        // Too few blocks, or the newest alone.
        assert!(planned(&[], &r).is_empty());
        assert!(planned(&[(0, 20)], &r).is_empty());
        assert!(planned(&[(0, 20), (20, 40)], &r).is_empty());
        // Three 20 h blocks fill 60 h, but the newest is left out.
        assert!(planned(&[(0, 20), (20, 40), (40, 60)], &r).is_empty());
        assert_eq!(
            planned(&[(0, 20), (20, 40), (40, 60), (60, 80)], &r),
            vec![(0, 20), (20, 40), (40, 60)]
        );
        // A window not yet full is compacted once a newer block starts
        // after it.
        assert_eq!(
            planned(&[(0, 20), (20, 40), (60, 80), (80, 100)], &r),
            vec![(0, 20), (20, 40)]
        );
        // Compacted blocks are merged at the next range.
        assert_eq!(
            planned(&[(0, 60), (60, 120), (120, 180), (180, 200)], &r),
            vec![(0, 60), (60, 120), (120, 180)]
        );
        assert_eq!(
            planned(
                &[(0, 60), (60, 120), (120, 180), (180, 240), (240, 260)],
                &r
            ),
            vec![(0, 60), (60, 120), (120, 180)]
        );
        // Only the lowest range's ready group is taken first.
        assert_eq!(
            planned(
                &[
                    (0, 60),
                    (60, 120),
                    (120, 180),
                    (180, 200),
                    (200, 220),
                    (220, 240),
                    (240, 260)
                ],
                &r
            ),
            vec![(180, 200), (200, 220), (220, 240)]
        );
        // With a gap: two blocks span the window [0, 60) from end to end.
        assert_eq!(
            planned(&[(0, 20), (40, 60), (120, 140)], &r),
            vec![(0, 20), (40, 60)]
        );
        // One range only: never.
        assert!(planned(&[(0, 20), (20, 40), (40, 60), (60, 80)], &[20]).is_empty());
    }

    type Chunks = Vec<(i64, i64, u8, Vec<u8>)>;

    /// Three blocks of `R` each, a series' chunks in its block's range.
    const R: i64 = 10_000;

    fn blocks_strategy() -> impl proptest::strategy::Strategy<Value = Vec<BTreeMap<Labels, Chunks>>>
    {
        use proptest::prelude::*;
        let block = prop::collection::btree_map(
            prop::collection::btree_map("[a-c]{1,2}", "[x-z]{0,2}", 1..3)
                .prop_map(|m| m.into_iter().collect::<Labels>()),
            prop::collection::vec(
                (
                    1i64..900,
                    0i64..900,
                    prop::collection::vec(any::<u8>(), 2..20),
                    1u8..4,
                ),
                0..4,
            ),
            0..8,
        );
        prop::collection::vec(block, 3).prop_map(|blocks| {
            blocks
                .into_iter()
                .enumerate()
                .map(|(k, m)| {
                    m.into_iter()
                        .map(|(labels, chunks)| {
                            let mut t = k as i64 * R;
                            let chunks = chunks
                                .into_iter()
                                .map(|(gap, len, data, enc)| {
                                    let mint = t + gap;
                                    t = mint + len;
                                    (mint, t, enc, data)
                                })
                                .collect();
                            (labels, chunks)
                        })
                        .collect()
                })
                .collect()
        })
    }

    fn read_all(dir: &Path) -> BTreeMap<Labels, Chunks> {
        let index = IndexReader::open(&dir.join("index")).expect("index");
        let chunks = ChunkReader::open(&dir.join("chunks")).expect("chunks");
        let mut out = BTreeMap::new();
        for id in index.postings("", "").expect("all") {
            let (labels, metas) = index.series(id).expect("series");
            let cs = metas
                .iter()
                .map(|m| {
                    let (enc, data) = chunks.chunk(m.chunk_ref).expect("chunk");
                    (m.mint, m.maxt, enc, data.to_vec())
                })
                .collect();
            out.insert(labels, cs);
        }
        out
    }

    static NO_STARTS: std::sync::LazyLock<std::collections::HashMap<u32, Vec<StartRun>>> =
        std::sync::LazyLock::new(Default::default);

    fn untouched(
        c: BlockChunk,
        _: &crate::storage::block::tombstones::Intervals,
    ) -> Result<Vec<BlockChunk>, BlockError> {
        Ok(vec![c])
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Compacting three blocks gives one holding every series once,
        /// its chunks from all three byte for byte, oldest first; series
        /// without chunks are left out.
        #[test]
        fn compaction_is_the_union_of_its_parents(blocks in blocks_strategy()) {
            use crate::storage::block::{read_meta, write_block, BlockChunk, BlockSeries};
            let dir = tempfile::tempdir().expect("tempdir");
            let mut want: BTreeMap<Labels, Chunks> = BTreeMap::new();
            let mut opened = Vec::new();
            for (k, b) in blocks.iter().enumerate() {
                let series = b
                    .iter()
                    .map(|(labels, chunks)| BlockSeries {
                        starts: Vec::new(),
                        labels: labels.clone(),
                        chunks: chunks
                            .iter()
                            .map(|(mint, maxt, enc, data)| BlockChunk {
                                mint: *mint,
                                maxt: *maxt,
                                encoding: match enc {
                                    1 => Encoding::Xor,
                                    2 => Encoding::Histogram,
                                    _ => Encoding::FloatHistogram,
                                },
                                data: std::sync::Arc::from(data.as_slice()),
                            })
                            .collect(),
                    })
                    .collect();
                let k = k as i64;
                let m = write_block(dir.path(), series, k * R, (k + 1) * R, 1).expect("block");
                let path = dir.path().join(m.ulid.to_string());
                opened.push((
                    read_meta(&path).expect("meta"),
                    IndexReader::open(&path.join("index")).expect("index"),
                    ChunkReader::open(&path.join("chunks")).expect("chunks"),
                ));
                for (labels, chunks) in b {
                    if !chunks.is_empty() {
                        want.entry(labels.clone()).or_default().extend(chunks.iter().cloned());
                    }
                }
            }
            let parents: Vec<Parent<'_>> = opened
                .iter()
                .map(|(meta, index, chunks)| Parent { meta, index, chunks, starts: &NO_STARTS, deleted: Default::default(), trim: untouched })
                .collect();
            let out = tempfile::tempdir().expect("tempdir");
            let m = compact(out.path(), &parents, 2, &|| true, &|_| {}).expect("compacts").expect("not stopped");
            proptest::prop_assert_eq!((m.min_time, m.max_time), (0, 3 * R));
            proptest::prop_assert_eq!(m.num_series, want.len() as u64);
            proptest::prop_assert_eq!(m.compaction.level, 2);
            proptest::prop_assert_eq!(m.compaction.parents.len(), 3);
            let got = read_all(&out.path().join(m.ulid.to_string()));
            proptest::prop_assert_eq!(got, want);
        }
    }

    /// Prometheus' vertical compaction: the first run of blocks that
    /// overlap goes first, newest block included, whatever the ranges.
    #[test]
    fn overlapping_blocks_are_merged_first() {
        let r = [20, 60, 180];
        assert_eq!(
            planned(&[(0, 20), (10, 30), (40, 60), (80, 100)], &r),
            vec![(0, 20), (10, 30)]
        );
        // An out-of-order block inside a compacted one, and the newest
        // block overlapped.
        assert_eq!(
            planned(&[(0, 60), (20, 40), (60, 80), (100, 120), (100, 120)], &r),
            vec![(0, 60), (20, 40)]
        );
        assert_eq!(
            planned(&[(0, 60), (60, 80), (100, 120), (100, 120)], &r),
            vec![(100, 120), (100, 120)]
        );
        // A chain: each overlaps the reach of those before it.
        assert_eq!(
            planned(&[(0, 20), (10, 30), (25, 40), (40, 60)], &r),
            vec![(0, 20), (10, 30), (25, 40)]
        );
        assert_eq!(planned(&[(0, 20), (0, 20)], &[20]), vec![(0, 20), (0, 20)]);
    }

    #[test]
    fn overlapping_or_failed_groups_are_passed_over() {
        let r = [20 * H, 60 * H];
        let metas = [meta(0, 20), meta(10, 30), meta(40, 60), meta(80, 100)];
        let refs: Vec<&BlockMeta> = metas.iter().collect();
        let skip = BTreeSet::from([metas[1].ulid]);
        assert!(plan(&refs, &r, &skip).is_empty());
        // A failed run of overlapping blocks does not hold back the next.
        let metas = [meta(0, 20), meta(10, 30), meta(40, 60), meta(40, 60)];
        let refs: Vec<&BlockMeta> = metas.iter().collect();
        let skip = BTreeSet::from([metas[1].ulid]);
        assert_eq!(plan(&refs, &r, &skip), vec![2, 3]);
        let metas = [meta(0, 20), meta(20, 40), meta(60, 80), meta(80, 100)];
        let refs: Vec<&BlockMeta> = metas.iter().collect();
        let skip = BTreeSet::from([metas[1].ulid]);
        assert!(plan(&refs, &r, &skip).is_empty());
        assert_eq!(plan(&refs, &r, &BTreeSet::new()), vec![0, 1]);
    }
}
