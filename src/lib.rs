//! Sluice: a Prometheus-compatible remote-write gateway with an in-memory,
//! XOR-chunked hot tier.
//!
//! The map of the house (dependencies point down the list):
//! - [`api`]: the axum router, one error-to-HTTP mapping, and the handlers.
//! - [`ingest`]: wire decoders that feed the head straight from request bytes.
//! - [`promql`]: the PromQL evaluator over the head.
//! - [`forward`]: hands what the WAL holds on to remote-write receivers,
//!   from a saved position per destination.
//! - [`storage`]: the sharded head, interned labels, inverted index, XOR
//!   chunks; its durability (WAL logging, replay, checkpoints), retention
//!   and memory accounting.
//! - [`wal`]: the write-ahead log's segments, records, group commit and replay.
//! - [`encoding`]: leaf byte codes: varints, zigzag, a byte cursor.
//! - [`reuse`]: leaf: the one keep-or-free policy for per-thread buffers.
//! - [`crash`]: leaf: the crash points the crash tests kill the process at.
//! - [`heap`]: leaf: hands freed heap back to the system after large,
//!   short-lived work.
//! - [`telemetry`]: self-metrics (prometheus-client) and tracing setup.
//! - [`config`]: the one typed configuration tree with its defaults.
//! - [`server`]: builds the state, serves HTTP, shuts down gracefully.
//! - [`proto`]: prost types generated from `proto/`, for tests, benches and encoders.

pub mod api;
pub mod config;
pub mod crash;
pub mod encoding;
pub mod forward;
pub mod heap;
pub mod histogram;
pub mod ingest;
pub mod promql;
pub mod proto;
pub mod protocol;
pub mod reuse;
pub mod server;
pub mod storage;
pub mod telemetry;
pub mod wal;
