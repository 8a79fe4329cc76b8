//! Sluice: a Prometheus-compatible remote-write gateway: remote write 1.0
//! and 2.0 and OTLP in, Prometheus' chunk encodings and TSDB blocks inside,
//! Prometheus' HTTP API and remote write out.
//!
//! # Layout
//!
//! In the order data flows; each module imports only those below it.
//! - `main.rs` (the binary): the CLI, thin: flags and file →
//!   [`config::Config`] → [`server::run`].
//! - [`server`]: builds the state, opens the database, serves HTTP, runs the
//!   forwarders, shuts down gracefully.
//! - [`api`]: the axum router, one error-to-HTTP mapping, the handlers.
//! - [`ingest`]: one pipeline every protocol feeds (label rules, series
//!   creation, histograms, exemplars, the wording of refusals), writing
//!   through the storage `Appender`.
//! - [`rules`]: recording rules from Prometheus' rule files, each group
//!   on its interval: [`promql`] over the `Querier`, results through the
//!   `Appender`.
//! - [`promql`]: the PromQL evaluator over the storage `Querier`.
//! - [`forward`]: hands what the WAL holds on to remote-write receivers,
//!   from a saved position per destination.
//! - [`relabel`]: Prometheus' relabelling rules, every action, one engine
//!   for every place Sluice relabels.
//! - [`telemetry`]: self-metrics (prometheus-client) and tracing setup.
//! - [`config`]: the one typed configuration tree with its defaults.
//! - [`storage`]: one `Db`: the sharded head, blocks on disk, the WAL's use,
//!   checkpoints, exemplars, metadata, the memory account and upkeep; its
//!   doors are `Appender` (write) and `Querier` (read, head and blocks
//!   merged).
//! - [`wal`]: the write-ahead log's segments, records, group commit and
//!   replay.
//! - [`protocol`]: leaf: the wire readers and writers (protobuf, remote write,
//!   histogram message, OTLP schema), field numbers named once.
//! - [`histogram`]: leaf: the native histogram model and its operations.
//! - [`encoding`]: leaf: varints, zigzag, a byte cursor.
//! - [`reuse`]: leaf: the one keep-or-free policy for per-thread buffers.
//! - [`heap`]: leaf: the allocator's settings (freed heap kept for the
//!   next query, given back after large, short-lived work) and the mapping
//!   of block files; the crate's only `unsafe`.
//! - [`parallel`]: leaf: the helper threads a query borrows from one
//!   process-wide allowance to spread its per-series work over the cores.
//! - [`crash`]: leaf: the crash points the crash tests kill the process at.
//! - [`proto`]: prost types generated from `proto/`, for tests, benches and
//!   encoders.
//!
//! # Where the next capabilities plug in
//!
//! A tenant is one [`storage::Db`]: the API resolves the request's tenant to
//! its `Db` (a map of them in the state) and everything below runs
//! unchanged. An out-of-order window lives inside the head, behind the
//! `Appender` (a second chunk per series, logged and merged by the
//! `Querier`). The rules engine ([`rules`]) is a `promql` caller over a
//! `Querier` that writes its results back through an `Appender`; alert
//! state and notifications plug in beside its recording rules.

pub mod api;
pub mod config;
pub mod crash;
pub mod encoding;
pub mod forward;
pub mod heap;
pub mod histogram;
pub mod ingest;
pub mod parallel;
pub mod promql;
pub mod proto;
pub mod protocol;
pub mod relabel;
pub mod reuse;
pub mod rules;
pub mod server;
pub mod storage;
pub mod telemetry;
pub mod wal;
