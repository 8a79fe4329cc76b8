//! Prometheus TSDB blocks on disk: a directory named by a ULID holding
//! `meta.json`, `index` (format 2), `chunks/000001…` and `tombstones`, as
//! Prometheus, promtool and Thanos read them. The facts are Prometheus'
//! (`tsdb/docs/format/{index,chunks,tombstones}.md`, `tsdb/block.go`);
//! `docs/tsdb-block-format.md` keeps the notes.
//!
//! This layer sits below the head: it takes labels as strings and chunks
//! as bytes, and imports only the leaves.

pub mod compact;
mod reader;
pub mod tombstones;
mod ulid;
mod writer;

pub use reader::{
    read_meta, BlockError, ChunkMeta, ChunkReader, IndexReader, Labels, SeriesWindow,
};
pub use ulid::Ulid;
pub use writer::{
    meta_value, set_tombstone_count, write_block, write_block_as, BlockChunk, BlockDesc, BlockMeta,
    BlockSeries, BlockWriter, Compaction, Encoding,
};
