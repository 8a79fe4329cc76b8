//! The `sluice` binary: parse flags and the optional config file, set up
//! logging, and run the server until SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use sluice::config::Config;

/// Sluice: a Prometheus remote-write receiver with an XOR-compressed,
/// in-memory hot tier. Point Prometheus' `remote_write` at
/// http://<listen>/api/v1/write.
///
/// Flags override the config file; both override the built-in defaults.
#[derive(Debug, Parser)]
#[command(name = "sluice", version)]
struct Cli {
    /// Optional YAML (.yaml/.yml) or TOML (.toml) file with the same keys as
    /// these flags, e.g. `max-series: 100000`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on for HTTP [default: 127.0.0.1:9201].
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Directory for durable data: the write-ahead log (wal/) and
    /// checkpoints [default: ./data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Largest request body, as sent (compressed); larger bodies get 413
    /// [default: 16777216].
    #[arg(long, value_name = "BYTES")]
    max_body_bytes: Option<usize>,
    /// Largest request body after decompression, read from the snappy header
    /// before anything is allocated; larger bodies get 413 [default: 33554432].
    #[arg(long, value_name = "BYTES")]
    max_decompressed_bytes: Option<usize>,
    /// Most labels per series, __name__ included; series with more are
    /// rejected (400) [default: 64].
    #[arg(long, value_name = "N")]
    max_labels_per_series: Option<usize>,
    /// Longest label name in bytes [default: 1024].
    #[arg(long, value_name = "BYTES")]
    max_label_name_length: Option<usize>,
    /// Longest label value in bytes [default: 4096].
    #[arg(long, value_name = "BYTES")]
    max_label_value_length: Option<usize>,
    /// Most series held in memory; samples for new series beyond it are
    /// rejected (400, reason series_limit) [default: 10000000].
    #[arg(long, value_name = "N")]
    max_series: Option<usize>,
    /// Log filter: error, warn, info, debug, trace, or tracing directives
    /// such as `sluice=debug,tower_http=debug` [default: info].
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// Longest time one request other than a query may take before it is
    /// answered 503, e.g. 30s or 2m; queries have --query-timeout
    /// [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    request_timeout: Option<Duration>,
    /// Most HTTP connections open at once; further ones wait in the
    /// kernel's backlog until one closes [default: 4096].
    #[arg(long, value_name = "N")]
    http_max_connections: Option<usize>,
    /// Longest wait for a request's headers (slow or stalled clients); a
    /// keep-alive connection idle this long is closed too [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    http_header_read_timeout: Option<Duration>,
    /// Largest request head (request line, URL and headers) in bytes;
    /// larger ones get 431 [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    http_max_header_bytes: Option<usize>,
    /// On SIGTERM, longest wait for requests in flight before the last
    /// checkpoint is written and the process exits (running queries are
    /// canceled at once) [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    shutdown_timeout: Option<Duration>,
    /// Head shards, each with its own lock; 0 picks 4x the CPU count [default: 0].
    #[arg(long, value_name = "N")]
    head_shards: Option<usize>,
    /// Most metric families whose metadata (type, help, unit from remote
    /// write) is kept for /api/v1/metadata [default: 100000].
    #[arg(long, value_name = "N")]
    max_metadata_families: Option<usize>,
    /// Most bytes of metadata text kept in all (help texts are cut at
    /// 4096 bytes, units at 256); they count toward --max-memory
    /// [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    max_metadata_bytes: Option<usize>,
    /// Longest a query may run before it fails with errorType timeout
    /// [default: 2m].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    query_timeout: Option<Duration>,
    /// Most samples one query may load before it fails [default: 50000000].
    #[arg(long, value_name = "N")]
    query_max_samples: Option<usize>,
    /// How far back an instant selector looks for a sample; queries may
    /// override it with lookback_delta [default: 5m].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    query_lookback_delta: Option<Duration>,
    /// Longest query text in bytes, for queries and match[] selectors;
    /// longer ones get 400 bad_data [default: 262144].
    #[arg(long, value_name = "BYTES")]
    query_max_length: Option<usize>,
    /// Deepest query nesting (brackets, plus operators around any point);
    /// deeper queries get 400 bad_data before they are parsed, so that no
    /// query can exhaust a thread's stack [default: 1000].
    #[arg(long, value_name = "N")]
    query_max_depth: Option<usize>,
    /// Most bytes of label values one label_replace or label_join call may
    /// make; past it the query fails with errorType execution
    /// [default: 67108864].
    #[arg(long, value_name = "BYTES")]
    query_max_label_bytes: Option<usize>,
    /// Most queries evaluated at once (query API, series, labels, label
    /// values, federate), as Prometheus' --query.max-concurrency; others
    /// wait for a slot up to their timeout [default: 20].
    #[arg(long, value_name = "N")]
    query_max_concurrency: Option<usize>,
    /// Largest form-encoded POST body of the query API (query, series,
    /// labels, federate …), as Go's ParseForm caps it for Prometheus;
    /// larger ones get 400 bad_data [default: 10485760].
    #[arg(long, value_name = "BYTES")]
    query_max_form_bytes: Option<usize>,
    /// Largest answer of the query API and /federate; a query whose answer
    /// would be larger gets 422 execution instead [default: 536870912].
    #[arg(long, value_name = "BYTES")]
    query_max_response_bytes: Option<usize>,
    /// OTLP resource attributes that become labels on every series of the
    /// resource, comma-separated, e.g. `deployment.environment,k8s.pod.name`
    /// (the rest go to target_info) [default: none].
    #[arg(long, value_name = "ATTRS", value_delimiter = ',')]
    otlp_promote_resource_attributes: Option<Vec<String>>,
    /// Store OTLP delta sums and histograms as running totals (cumulative),
    /// kept in memory per series, instead of refusing them [default: off].
    #[arg(long)]
    otlp_delta_to_cumulative: bool,
    /// When a write is acknowledged: `always` (after its WAL records are
    /// fsynced; concurrent writes share one fsync) or `interval=<duration>`
    /// (once written; fsynced at least that often, so a crash of the machine
    /// can lose up to that much acknowledged data) [default: always].
    #[arg(long, value_name = "MODE")]
    wal_fsync: Option<sluice::config::WalFsync>,
    /// Size at which a WAL segment file is closed and the next started
    /// [default: 134217728].
    #[arg(long, value_name = "BYTES")]
    wal_segment_bytes: Option<u64>,
    /// If the WAL is corrupt in the middle (not just a torn last write),
    /// drop everything from the bad record on and start, instead of
    /// refusing to start [default: off].
    #[arg(long)]
    wal_repair: bool,
    /// Run without a write-ahead log: nothing survives a restart
    /// [default: off].
    #[arg(long)]
    wal_disabled: bool,
    /// Longest time between checkpoints of the head, after which the WAL
    /// segments they cover are deleted; a busy WAL checkpoints sooner (once
    /// it outgrows 256 MiB and the last checkpoint) [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    checkpoint_interval: Option<Duration>,
    /// How long samples are kept: older chunks are dropped and series with
    /// no newer sample removed, e.g. 15d or 12h [default: 15days].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    retention: Option<Duration>,
    /// Memory the head may use, e.g. 4GiB or 512MB; writes get 429 with
    /// Retry-After once the head reaches 80% of it, and queries keep
    /// working. 0 picks 60% of the machine's or cgroup's memory [default: 0].
    #[arg(long, value_name = "BYTES", value_parser = sluice::config::parse_bytes)]
    max_memory: Option<u64>,
}

impl Cli {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        macro_rules! set {
            ($($f:ident),*) => {$( if let Some(v) = self.$f { c.$f = v; } )*};
        }
        set!(
            listen,
            data_dir,
            max_body_bytes,
            max_decompressed_bytes,
            max_labels_per_series,
            max_label_name_length,
            max_label_value_length,
            max_series,
            log_level,
            request_timeout,
            http_max_connections,
            http_header_read_timeout,
            http_max_header_bytes,
            shutdown_timeout,
            head_shards,
            max_metadata_families,
            max_metadata_bytes,
            query_timeout,
            query_max_samples,
            query_lookback_delta,
            query_max_length,
            query_max_depth,
            query_max_label_bytes,
            query_max_concurrency,
            query_max_form_bytes,
            query_max_response_bytes,
            otlp_promote_resource_attributes,
            wal_fsync,
            wal_segment_bytes,
            checkpoint_interval,
            retention,
            max_memory
        );
        c.otlp_delta_to_cumulative |= self.otlp_delta_to_cumulative;
        c.wal_repair |= self.wal_repair;
        c.wal_disabled |= self.wal_disabled;
        c.validate()?;
        Ok(c)
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// Raises the soft limit on open files to the hard one, as Go does for
/// Prometheus: a distribution's default soft limit (often 1024) is below
/// `http-max-connections` plus the WAL's and the queries' files.
fn raise_open_files_limit(connections: usize) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) if soft < connections as u64 + 256 => tracing::warn!(
            open_files = soft,
            http_max_connections = connections,
            "the open-files limit is below http-max-connections plus 256: \
             connections past it wait until others close"
        ),
        Ok(soft) => tracing::debug!(open_files = soft, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-files limit"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let config = Cli::parse().into_config()?;
    sluice::telemetry::init_tracing(&config.log_level).map_err(anyhow::Error::msg)?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        ?config,
        "starting sluice"
    );
    raise_open_files_limit(config.http_max_connections);
    sluice::server::run(config, shutdown_signal())
        .await
        .context("sluice stopped with an error")
}
