//! In-memory storage: the sharded [`head::Head`] of series, each holding
//! Prometheus XOR [`chunk`]s, with interned labels and an inverted index.

pub mod checkpoint;
pub mod chunk;
pub mod head;
pub mod index;
pub mod labels;
pub mod metadata;
pub mod querier;
mod shard;

/// Prometheus' stale marker: a NaN with this exact bit pattern ends a
/// series for queries. Senders write it when a series disappears.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;
