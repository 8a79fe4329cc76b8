//! Snapshots, as Prometheus' `/api/v1/admin/tsdb/snapshot` takes them:
//! every block hard-linked into a new directory (no bytes copied; blocks
//! never change once written, so the links stay a true copy), and the
//! head, unless skipped, written there as one more block. The result is
//! a directory of blocks that Prometheus, promtool and Sluice open.

use std::io;
use std::path::Path;

use super::block::{write_block_as, BlockMeta, BlockSeries, Compaction, Ulid};
use super::blocks::{float_chunks, hist_chunks, untangle_chunks, Blocks};
use super::head::Head;
use super::Stop;

/// What a snapshot holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Blocks linked.
    pub blocks_linked: usize,
    /// The block the head was written as, if it was and held samples.
    pub head_block: Option<BlockMeta>,
}

/// Takes a snapshot into `dest` (created; it must not exist yet).
pub(super) fn snapshot(
    head: &Head,
    blocks: &Blocks,
    dest: &Path,
    with_head: bool,
    now_ms: u64,
) -> io::Result<SnapshotReport> {
    std::fs::create_dir_all(dest.parent().unwrap_or(dest))?;
    std::fs::create_dir(dest)?;
    let mut report = SnapshotReport::default();
    // The caller holds off cuts, compaction and retention (see
    // `Db::snapshot`): no block is deleted while it is linked, and no
    // sample moves from the head to a block meanwhile. Queries go on: the
    // set's lock is held only to copy the list.
    let linked: Vec<_> = blocks.read().blocks().to_vec();
    for b in &linked {
        let name = b.meta().ulid.to_string();
        link_tree(b.dir(), &dest.join(&name))?;
        report.blocks_linked += 1;
    }
    if with_head {
        report.head_block = write_head(head, dest, now_ms)?;
    }
    sync_dir(dest)?;
    Ok(report)
}

/// Hard-links every file under `from` into `to`, making the directories.
fn link_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            link_tree(&entry.path(), &target)?;
        } else {
            std::fs::hard_link(entry.path(), &target)?;
        }
    }
    sync_dir(to)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Writes everything the head holds (in order and late, floats and
/// histograms) as one block over `[oldest, newest + 1)`.
fn write_head(head: &Head, dest: &Path, now_ms: u64) -> io::Result<Option<BlockMeta>> {
    let Some((lo, hi)) = head.span_from(i64::MIN) else {
        return Ok(None);
    };
    // The head alone: the blocks are linked as they are.
    let no_blocks = Blocks::default();
    let selected = super::Querier::new(head, &no_blocks)
        .select_until(&[], lo, hi, &Stop::default())
        .map_err(|_| io::Error::other("the head could not be read"))?;
    let mut series = Vec::with_capacity(selected.len());
    let mut floats = Vec::new();
    for s in selected {
        floats.clear();
        s.decode_into(lo, hi, &mut floats);
        let mut chunks = float_chunks(&floats);
        chunks.extend(hist_chunks(&s.histograms, head.options()));
        untangle_chunks(&mut chunks);
        if chunks.is_empty() {
            continue;
        }
        series.push(BlockSeries {
            labels: s
                .labels
                .into_iter()
                .map(|l| (l.name.as_str().to_owned(), l.value.as_str().to_owned()))
                .collect(),
            chunks,
            starts: s.starts,
        });
    }
    if series.is_empty() {
        return Ok(None);
    }
    let meta = write_block_as(
        dest,
        series,
        (lo, hi.saturating_add(1)),
        Ulid::new(now_ms),
        Compaction::default(),
    )?;
    Ok(Some(meta))
}
