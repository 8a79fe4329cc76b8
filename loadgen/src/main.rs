//! `sluice-loadgen`: pushes a pre-encoded remote-write or OTLP load to a
//! receiver on loopback and reports what it accepted; `--sink` serves the
//! null sink that measures the generator's own ceiling.
//!
//! The last line on stdout is `key=value` pairs for scripts
//! (`scripts/bench-peers`); the rest goes to stderr.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Parser;
use sluice_loadgen::{self as loadgen, Mode, Workload};

/// Drives a remote-write (1.0 or 2.0) or OTLP/HTTP receiver with a realistic,
/// pre-encoded load over keep-alive connections, bounded in count and time.
#[derive(Debug, Parser)]
#[command(name = "sluice-loadgen", version)]
struct Cli {
    /// Receiver to push to (host:port on loopback); requests go to
    /// /api/v1/write, or /v1/metrics in otlp mode (see --path).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9201")]
    target: SocketAddr,
    /// Path to post to instead of the mode's usual one (VictoriaMetrics
    /// and Prometheus both take /api/v1/write).
    #[arg(long)]
    path: Option<String>,
    /// steady: one sample per TimeSeries, every series once per round;
    /// churn: a tenth of each request is new series; backfill: all of a
    /// series' samples in one TimeSeries; otlp: steady as OTLP protobuf;
    /// rw2: steady as remote write 2.0.
    #[arg(long, default_value = "steady")]
    mode: Mode,
    /// Active series.
    #[arg(long, default_value_t = 100_000)]
    series: usize,
    /// Samples per series, 15 s apart, the last at the current time, or
    /// just before the last 2 h boundary if they would span it (see
    /// --end-now).
    #[arg(long, default_value_t = 120)]
    samples: usize,
    /// End the samples at the current time even when they then span a 2 h
    /// boundary, where receivers cut every series' chunk (a second chunk
    /// per series: more memory, slower ingest).
    #[arg(long)]
    end_now: bool,
    /// End the samples at this time (Unix milliseconds) instead of now, as
    /// --end-now does: a long backfill can be sent in parts, oldest first,
    /// without encoding all of it at once.
    #[arg(long, value_name = "MS", conflicts_with = "end_now")]
    end_at: Option<i64>,
    /// Samples per request.
    #[arg(long, default_value_t = 2_000)]
    per_request: usize,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Send at most this many samples per second in all (paced per
    /// connection), to hold a steady load while something else is
    /// measured; as fast as the receiver takes them when absent.
    #[arg(long, value_name = "SAMPLES_PER_SECOND")]
    rate: Option<f64>,
    /// Stop sending after this long, e.g. 60s.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    max_time: Duration,
    /// Push over https, trusting the CA certificates in this PEM file (the
    /// handshake is made once per keep-alive connection).
    #[arg(long, value_name = "FILE")]
    tls_ca_file: Option<std::path::PathBuf>,
    /// Send this login with every request, as `user:password`.
    #[arg(long, value_name = "USER:PASSWORD")]
    basic_auth: Option<String>,
    /// Send the whole load once per tenant, to tenants t0..t<N-1> named in
    /// --tenant-header: N tenants with --series series each.
    #[arg(long, value_name = "N")]
    tenants: Option<usize>,
    /// The tenants' names before their number (t0, t1, ...).
    #[arg(long, default_value = "t")]
    tenant_prefix: String,
    /// The header that names the tenant.
    #[arg(long, default_value = "X-Scope-OrgID")]
    tenant_header: String,
    /// Write every request to this file, one line each in the order they
    /// were sent: start (Unix milliseconds), latency (milliseconds),
    /// samples, and 1 if answered 2xx else 0; to line the latencies up
    /// with what else ran meanwhile.
    #[arg(long, value_name = "FILE")]
    latency_log: Option<std::path::PathBuf>,
    /// Serve the null sink on this address instead of driving a load: it
    /// reads each body and answers 204, until SIGTERM/SIGINT or --max-time.
    #[arg(long, value_name = "ADDR")]
    sink: Option<SocketAddr>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    if let Some(addr) = cli.sink {
        return rt.block_on(sink(addr, cli.max_time));
    }
    anyhow::ensure!(cli.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(
        cli.rate.is_none_or(|r| r >= 1.0),
        "--rate must be at least 1 sample per second"
    );
    anyhow::ensure!(cli.per_request >= 10, "--per-request must be at least 10");
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("clock before 1970")?
        .as_millis() as i64;
    let mut w = Workload {
        mode: cli.mode,
        series: cli.series,
        samples: cli.samples,
        per_request: cli.per_request,
        connections: cli.connections,
        start_ms: 0,
        interval_ms: 15_000,
    };
    if let Some(at) = cli.end_at {
        w.end_at(at);
    } else if cli.end_now {
        w.end_at(now_ms);
    } else {
        w.end_within_block(now_ms, 2 * 3_600_000);
    }
    let t = Instant::now();
    let mut encoded = loadgen::encode(&w);
    if let Some(path) = cli.path {
        encoded.path = path;
    }
    eprintln!(
        "sluice-loadgen: {} mode, {} series ({} in all) x {} samples, {} samples/request, {} connections: {} requests, {} samples, {:.1} MiB on the wire (encoded in {:.1?})",
        w.mode,
        w.series,
        w.total_series(),
        w.samples,
        w.per_request,
        w.connections,
        encoded.requests(),
        encoded.samples(),
        encoded.bytes() as f64 / 1048576.0,
        t.elapsed()
    );
    let mut dial = loadgen::Dial {
        pace: cli.rate,
        ..loadgen::Dial::default()
    };
    if let Some(ca) = &cli.tls_ca_file {
        let tls = sluice::forward::TlsConfig {
            ca_file: Some(ca.clone()),
            ..Default::default()
        }
        .client_config()
        .map_err(anyhow::Error::msg)?;
        dial.tls = Some(std::sync::Arc::new(tls));
    }
    if let Some(login) = &cli.basic_auth {
        let (user, password) = login
            .split_once(':')
            .context("--basic-auth takes user:password")?;
        dial.authorization = loadgen::Dial::basic(user, password);
    }
    let copies = cli.tenants.unwrap_or(1).max(1) as u64;
    if let Some(n) = cli.tenants {
        let name = http::HeaderName::from_bytes(cli.tenant_header.as_bytes())
            .context("--tenant-header is not a header name")?;
        let ids = (0..n)
            .map(|i| http::HeaderValue::from_str(&format!("{}{i}", cli.tenant_prefix)))
            .collect::<Result<Vec<_>, _>>()
            .context("tenant ID")?;
        dial.tenants = Some((name, ids));
    }
    let report = rt.block_on(loadgen::drive(cli.target, &dial, &encoded, cli.max_time));
    let rate = report.samples_per_second();
    eprintln!(
        "sluice-loadgen: {} of {} samples accepted in {:.2?}: {rate:.0} samples/s; latency p50 {:.2?} p99 {:.2?}; errors by status: {}{}",
        report.accepted,
        report.sent,
        report.elapsed,
        report.latency(0.5),
        report.latency(0.99),
        report.errors_text(),
        if report.timed_out { " (stopped at --max-time)" } else { "" }
    );
    if let Some(e) = &report.first_error {
        eprintln!("sluice-loadgen: first error: {e}");
    }
    println!(
        "mode={} series={} total_series={} requests={} sent={} accepted={} seconds={:.3} samples_per_second={rate:.0} p50_ms={:.2} p99_ms={:.2} errors={} timed_out={}",
        w.mode,
        w.series,
        w.total_series(),
        report.requests,
        report.sent,
        report.accepted,
        report.elapsed.as_secs_f64(),
        report.latency(0.5).as_secs_f64() * 1e3,
        report.latency(0.99).as_secs_f64() * 1e3,
        report.errors_text(),
        report.timed_out
    );
    if let Some(path) = &cli.latency_log {
        write_latency_log(path, &report.timeline)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(
        report.accepted == encoded.samples() * copies,
        "not every sample was accepted ({} of {})",
        report.accepted,
        encoded.samples() * copies
    );
    Ok(())
}

fn write_latency_log(path: &std::path::Path, timeline: &[loadgen::Sent]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut sent: Vec<&loadgen::Sent> = timeline.iter().collect();
    sent.sort_by_key(|s| s.at);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for s in sent {
        let at = s.at.duration_since(UNIX_EPOCH).unwrap_or_default();
        writeln!(
            out,
            "{:.3} {:.3} {} {}",
            at.as_secs_f64() * 1e3,
            s.latency.as_secs_f64() * 1e3,
            s.samples,
            u8::from(s.ok)
        )?;
    }
    out.flush()
}

async fn sink(addr: SocketAddr, limit: Duration) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    eprintln!("sluice-loadgen: null sink on {}", listener.local_addr()?);
    let stop = async move {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = term => {}
            () = tokio::time::sleep(limit) => {}
        }
    };
    loadgen::null_sink(listener, stop).await?;
    Ok(())
}
