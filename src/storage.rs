//! In-memory storage: the sharded [`head::Head`] of series, each holding
//! Prometheus XOR [`chunk`]s, with interned labels and an inverted index.

pub mod chunk;
pub mod head;
pub mod index;
pub mod labels;
pub mod metadata;
pub mod querier;
mod shard;
