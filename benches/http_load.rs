//! End-to-end ingest load over HTTP: Sluice serves on 127.0.0.1:0 in this
//! process, and K keep-alive connections push pre-encoded, snappy-compressed
//! remote-write requests (one sample per series, as Prometheus sends them).
//! Bounded in requests and time; prints samples/s, latency and head sizes.
//!
//! Runs once per WAL mode (WAL off, `interval=1s`, `always`) on the same
//! requests, so the price of durability shows as a ratio.
//!
//! `cargo bench --bench http_load` (env: SERIES, ROUNDS, CONNS, PER_REQUEST,
//! WAL=off,interval=1s,always).

#[path = "../tests/common/requests.rs"]
mod requests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message;
use sluice::config::Config;
use sluice::server::Server;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .and_then(|v| v.strip_prefix(':'))
                    .map(|v| v.trim().trim_end_matches("kB").trim().to_owned())
            })
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` does not:
    // then keep it a quick check that the harness works.
    let quick = !std::env::args().any(|a| a == "--bench");
    let series = env("SERIES", if quick { 4_000 } else { 100_000 });
    let rounds = env("ROUNDS", if quick { 3 } else { 30 });
    let conns = env("CONNS", 8);
    let per_request = env("PER_REQUEST", 2_000).min(series);

    // Pre-encode every request: `rounds` passes over all series, 15s apart.
    // Ending now: samples older than the retention cutoff are refused.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let t0 = now_ms - (rounds as i64 + 1) * 15_000;
    let encode_start = Instant::now();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for r in 0..rounds {
        // One round's prost structs at a time: they are large.
        let req = requests::request(series, t0 + r as i64 * 15_000);
        for chunk in req.timeseries.chunks(per_request) {
            let raw = sluice::proto::prometheus::WriteRequest {
                timeseries: chunk.to_vec(),
                metadata: vec![],
            }
            .encode_to_vec();
            bodies.push(
                snap::raw::Encoder::new()
                    .compress_vec(&raw)
                    .expect("compress"),
            );
        }
    }
    let per_round = series.div_ceil(per_request);
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    eprintln!(
        "http_load: {series} series x {rounds} rounds, {per_request} samples/request, {conns} connections; {} requests, {:.1} MiB compressed (encoded in {:.1?})",
        bodies.len(),
        bytes as f64 / 1048576.0,
        encode_start.elapsed()
    );
    let rss_before = status_kib("VmRSS");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let bodies = Arc::new(bodies);
    // One run per WAL mode, same requests, fresh server and data directory.
    let modes = std::env::var("WAL").unwrap_or_else(|_| "off,interval=1s,always".to_owned());
    let mut results = Vec::new();
    for mode in modes.split(',') {
        let load = Load {
            rounds,
            per_round,
            per_request,
            conns,
            rss_before,
        };
        let rate = rt.block_on(run(mode, &load, Arc::clone(&bodies)));
        results.push((mode.to_owned(), rate));
    }
    if let Some(&(_, base)) = results.iter().find(|(m, _)| m == "off") {
        for (mode, rate) in &results {
            println!(
                "http_load wal={mode}: {rate:.0} samples/s, {:.2}x of WAL off",
                rate / base
            );
        }
    }
}

struct Load {
    rounds: usize,
    per_round: usize,
    per_request: usize,
    conns: usize,
    rss_before: u64,
}

/// Drives the whole load against a fresh server with WAL `mode` (`off`,
/// `always`, `interval=<dur>`); returns samples/s.
async fn run(mode: &str, load: &Load, bodies: Arc<Vec<Vec<u8>>>) -> f64 {
    let Load {
        rounds,
        per_round,
        per_request,
        conns,
        rss_before,
    } = *load;
    {
        let data = tempfile::tempdir().expect("tempdir");
        let mut config = Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: data.path().to_owned(),
            ..Config::default()
        };
        if mode == "off" {
            config.wal_disabled = true;
        } else {
            config.wal_fsync = mode.parse().expect("a WAL mode");
        }
        let server = Server::bind(&config).await.expect("bind");
        let addr = server.local_addr().expect("addr");
        let state = server.state().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        let url = format!("http://{addr}/api/v1/write");
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(conns)
            .build()
            .expect("client");
        let start = Instant::now();
        let deadline = start + Duration::from_secs(300);
        // Rounds must land in order per series: one round at a time, its
        // requests spread over the connections.
        let mut latencies = Vec::with_capacity(bodies.len());
        let mut errors = std::collections::BTreeMap::<u16, u64>::new();
        for round in 0..rounds {
            let ids: Vec<usize> = (round * per_round..(round + 1) * per_round).collect();
            let mut tasks = Vec::new();
            for c in 0..conns {
                let (client, url, bodies) = (client.clone(), url.clone(), Arc::clone(&bodies));
                let mine: Vec<usize> = ids.iter().copied().skip(c).step_by(conns).collect();
                tasks.push(tokio::spawn(async move {
                    let mut out = Vec::new();
                    for i in mine {
                        let t = Instant::now();
                        let resp = client
                            .post(&url)
                            .header("content-type", "application/x-protobuf")
                            .header("content-encoding", "snappy")
                            .header("x-prometheus-remote-write-version", "0.1.0")
                            .body(bodies[i].clone())
                            .send()
                            .await;
                        let code = resp.map_or(0, |r| r.status().as_u16());
                        out.push((t.elapsed(), code));
                    }
                    out
                }));
            }
            for t in tasks {
                for (lat, code) in t.await.expect("task") {
                    latencies.push(lat);
                    if code != 204 {
                        *errors.entry(code).or_default() += 1;
                    }
                }
            }
            if Instant::now() > deadline {
                eprintln!(
                    "http_load: stopped at the time bound after {} rounds",
                    round + 1
                );
                break;
            }
        }
        let elapsed = start.elapsed();
        let samples = latencies.len() as f64 * per_request as f64;
        latencies.sort();
        let pct =
            |p: f64| latencies[((latencies.len() as f64 * p) as usize).min(latencies.len() - 1)];
        let st = state.db().head_stats();
        let rss = status_kib("VmRSS");
        let rate = samples / elapsed.as_secs_f64();
        println!("http_load [wal={mode}] samples/s: {rate:.0}");
        println!(
            "http_load [wal={mode}] ns/sample (wall): {:.1}   request latency p50 {:.2?} p99 {:.2?}",
            elapsed.as_nanos() as f64 / samples,
            pct(0.5),
            pct(0.99)
        );
        println!("http_load [wal={mode}] errors by status: {errors:?}");
        println!(
            "http_load [wal={mode}] head: {} series, {} chunks, {:.2} chunk bytes/sample, {:.0} accounted bytes/series",
            st.series,
            st.chunks,
            st.chunk_bytes as f64 / samples,
            state.db().head_bytes() as f64 / st.series.max(1) as f64
        );
        if let Some(w) = state.db().wal_stats() {
            println!(
                "http_load [wal={mode}] WAL: {} writes, {} fsyncs ({:.1} requests per fsync, {:.2} ms per fsync), {:.2} bytes/sample",
                w.commits,
                w.syncs,
                latencies.len() as f64 / w.syncs.max(1) as f64,
                w.sync_nanos as f64 / 1e6 / w.syncs.max(1) as f64,
                w.bytes as f64 / samples
            );
        }
        println!(
            "http_load [wal={mode}] RSS {} MiB after the load, {} MiB before serving (the pre-encoded requests); growth per series {:.0} bytes",
            rss / 1024,
            rss_before / 1024,
            (rss.saturating_sub(rss_before)) as f64 * 1024.0 / st.series.max(1) as f64
        );
        assert!(errors.is_empty(), "every request must succeed: {errors:?}");
        let _ = stop.send(());
        let _ = serving.await;
        rate
    }
}
