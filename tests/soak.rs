//! The soak: mixed load on the real binary for a long stretch (30 minutes
//! by default; `SOAK_MINUTES`), not part of the default suite — run it
//! with `scripts/soak`. At once:
//! - writers pushing fresh samples for 20,000 series at a steady rate
//!   (`SOAK_RATE` samples/s, 300,000 by default), each request's answer
//!   recorded;
//! - dashboard queries every 2 s (rates, counts, topk over 15 minutes);
//! - a hostile query every 5 s (a 1y:1ms subquery, every series over
//!   11,001 steps, a slow regex, a timeout of -1);
//! - 2-minute blocks, so blocks are cut and compacted all along;
//! - forwarding to a real VictoriaMetrics that is stopped at a third of
//!   the run and started again at half;
//! - a SIGTERM and restart on the same data at 60%.
//!
//! It asserts no 5xx to a query, nothing acknowledged lost (each series
//! holds at least the samples acknowledged for it, after the restart and
//! at the end), the process alive throughout; and it prints RSS over time
//! and the write latency's p99 per 5 minutes, for BENCHMARKS.md.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SERIES: usize = 20_000;
const PER_REQUEST: usize = 2_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The running server, replaced at the restart.
struct Server {
    child: common::KillOnDrop,
    addr: SocketAddr,
}

fn start(data: &std::path::Path, forward: &str) -> Server {
    let args = [
        "--storage-min-block-duration",
        "2m",
        "--max-memory",
        "2GiB",
        "--forward",
        forward,
    ];
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data,
        "warn,sluice::server=info",
        &args,
    );
    Server {
        child: common::KillOnDrop(child),
        addr,
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// What the writers saw.
#[derive(Default)]
struct Writes {
    /// When the run started (Unix ms): minute `m` holds the sample times
    /// in `(t0 + m min, t0 + (m + 1) min]`.
    t0: i64,
    /// Samples acknowledged (204), per minute and series.
    acked: Vec<Vec<AtomicU64>>,
    /// Requests refused or failed (not acknowledged), by status (0: no
    /// answer).
    refused: Mutex<std::collections::BTreeMap<u16, u64>>,
    /// Latency of acknowledged requests, per 5-minute window, in µs.
    latency: Mutex<Vec<Vec<u64>>>,
    samples: AtomicU64,
}

fn percentile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

async fn writer(
    addr: Arc<Mutex<SocketAddr>>,
    groups: Vec<usize>,
    rate: f64,
    writes: Arc<Writes>,
    stop: Arc<AtomicBool>,
    started: Instant,
) {
    let client = reqwest::Client::new();
    let mut last_t = [0i64; SERIES / PER_REQUEST];
    let period = Duration::from_secs_f64(PER_REQUEST as f64 / rate);
    let mut next = Instant::now();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let g = groups[round % groups.len()];
        round += 1;
        let t = common::now_ms().max(last_t[g] + 1);
        last_t[g] = t;
        let series = (g * PER_REQUEST..(g + 1) * PER_REQUEST)
            .map(|i| {
                common::series(
                    &[
                        ("__name__", "soak_samples"),
                        ("series", &i.to_string()),
                        ("job", &format!("job{}", i % 10)),
                    ],
                    &[(t, (t / 1000) as f64)],
                )
            })
            .collect();
        let body = common::body(series);
        let url = format!("http://{}/api/v1/write", addr.lock().expect("addr"));
        let sent = Instant::now();
        let answer = client
            .post(url)
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .header("X-Prometheus-Remote-Write-Version", "0.1.0")
            .timeout(Duration::from_secs(30))
            .body(body)
            .send()
            .await;
        let code = answer.as_ref().map_or(0, |r| r.status().as_u16());
        if code == 204 {
            let window = (started.elapsed().as_secs() / 300) as usize;
            let mut lat = writes.latency.lock().expect("latency");
            while lat.len() <= window {
                lat.push(Vec::new());
            }
            lat[window].push(sent.elapsed().as_micros() as u64);
            drop(lat);
            let m = usize::try_from((t - writes.t0 - 1).div_euclid(60_000)).unwrap_or(0);
            if let Some(minute) = writes.acked.get(m) {
                for n in &minute[g * PER_REQUEST..(g + 1) * PER_REQUEST] {
                    n.fetch_add(1, Ordering::Relaxed);
                }
            }
            writes
                .samples
                .fetch_add(PER_REQUEST as u64, Ordering::Relaxed);
        } else {
            *writes
                .refused
                .lock()
                .expect("refused")
                .entry(code)
                .or_default() += 1;
        }
        next += period;
        let now = Instant::now();
        if next > now {
            tokio::time::sleep(next - now).await;
        } else {
            next = now;
        }
    }
}

/// Samples stored per series with times in `(at - 1 min, at]`, asked in
/// five parts (by the series number's last digit) so that each query
/// stays well inside its memory budget (an eighth of `--max-memory`): a
/// minute of every series is 18 M samples.
async fn stored_per_series(addr: SocketAddr, at_ms: i64) -> Vec<u64> {
    let mut out = vec![0u64; SERIES];
    for digits in ["01", "23", "45", "67", "89"] {
        stored_part(addr, at_ms, digits, &mut out).await;
    }
    out
}

/// [`stored_per_series`] for the series whose number ends in one of
/// `digits`. A refusal a retry can fix (503: the queries' shared memory is
/// held by hostile ones, or a slot is busy) is retried, as a client told
/// `Retry-After` would, for up to a minute.
async fn stored_part(addr: SocketAddr, at_ms: i64, digits: &str, out: &mut [u64]) {
    let mut tries = 0;
    let query = format!("count_over_time(soak_samples{{series=~\".*[{digits}]\"}}[1m])");
    let v = loop {
        let v = common::api_json(
            &format!("http://{addr}/api/v1/query"),
            &[
                ("query", query.clone()),
                ("time", format!("{:.3}", at_ms as f64 / 1000.0)),
            ],
        )
        .await;
        let retryable = matches!(v["errorType"].as_str(), Some("unavailable" | "timeout"));
        if !retryable || tries >= 60 {
            break v;
        }
        tries += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let result = v["data"]["result"].as_array();
    for r in result.unwrap_or_else(|| panic!("not a vector: {v}")) {
        let i: usize = r["metric"]["series"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("series label");
        out[i] = r["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("a count");
    }
}

/// Every series holds, in every minute so far, at least what was
/// acknowledged for it; returns the samples checked.
async fn assert_nothing_acked_lost(addr: SocketAddr, writes: &Writes) -> u64 {
    let now_minute =
        usize::try_from((common::now_ms() - writes.t0 - 1).div_euclid(60_000)).unwrap_or(0);
    let mut checked = 0u64;
    for (m, acked) in writes.acked.iter().enumerate().take(now_minute + 1) {
        // What was acknowledged before the query is sent must be in its
        // answer (writers go on meanwhile).
        let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let stored = stored_per_series(addr, writes.t0 + (m as i64 + 1) * 60_000).await;
        let mut lost = 0u64;
        for (a, s) in before.iter().zip(&stored) {
            lost += a.saturating_sub(*s);
            checked += a;
        }
        assert_eq!(lost, 0, "acknowledged samples missing in minute {m}");
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a 30-minute soak: run it with scripts/soak"]
async fn soak() {
    let minutes: u64 = env_or("SOAK_MINUTES", 30);
    let rate: f64 = env_or("SOAK_RATE", 300_000.0);
    let total = Duration::from_secs(minutes * 60);
    let data = tempfile::tempdir().expect("tempdir");
    let mut vm = common::downstream::VictoriaMetrics::start();
    let forward = vm.write_url();
    let mut server = start(data.path(), &forward);
    let addr = Arc::new(Mutex::new(server.addr));
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(Writes {
        // Before any sample's time, so that every one is in a minute.
        t0: common::now_ms() - 1,
        acked: (0..minutes + 3)
            .map(|_| (0..SERIES).map(|_| AtomicU64::new(0)).collect())
            .collect(),
        ..Writes::default()
    });
    eprintln!(
        "soak: {minutes} min, {SERIES} series, {rate} samples/s, 2-minute blocks, forwarding to VictoriaMetrics"
    );

    // Writers: four, each with its share of the series groups.
    let groups = SERIES / PER_REQUEST;
    let mut tasks = Vec::new();
    for w in 0..4 {
        let mine: Vec<usize> = (0..groups).filter(|g| g % 4 == w).collect();
        tasks.push(tokio::spawn(writer(
            Arc::clone(&addr),
            mine,
            rate / 4.0,
            Arc::clone(&writes),
            Arc::clone(&stop),
            started,
        )));
    }

    // Dashboards and hostile queries: every answer below 500.
    let bad_answers = Arc::new(AtomicU64::new(0));
    let queries = Arc::new(AtomicU64::new(0));
    {
        let (addr, stop, bad, n) = (
            Arc::clone(&addr),
            Arc::clone(&stop),
            Arc::clone(&bad_answers),
            Arc::clone(&queries),
        );
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let dashboards = [
                "sum by (job) (rate(soak_samples[1m]))",
                "count(soak_samples)",
                "topk(5, max by (job) (soak_samples))",
                "histogram_quantile(0.9, sum by (le) (rate(sluice_http_request_duration_seconds_bucket[1m])))",
            ];
            let hostile = [
                ("/api/v1/query", "count_over_time(vector(1)[1y:1ms])", "0.1"),
                ("/api/v1/query_range", "{__name__=~\".+\"}", "0.1"),
                ("/api/v1/query", "count({series=~\"(.*a){20}.*\"})", "60"),
                ("/api/v1/query", "1", "-1"),
            ];
            let mut k = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let now = common::now_ms() as f64 / 1000.0;
                let a = *addr.lock().expect("addr");
                let mut forms: Vec<(String, Vec<(&str, String)>)> = dashboards
                    .iter()
                    .map(|q| {
                        (
                            format!("http://{a}/api/v1/query_range"),
                            vec![
                                ("query", (*q).to_owned()),
                                ("start", format!("{}", now - 900.0)),
                                ("end", format!("{now}")),
                                ("step", "15".to_owned()),
                            ],
                        )
                    })
                    .collect();
                if k.is_multiple_of(3) {
                    let (path, q, step) = hostile[(k / 3) % hostile.len()];
                    let mut form = vec![("query", q.to_owned())];
                    if path.ends_with("range") {
                        form.extend([
                            ("start", format!("{}", now - 1100.0)),
                            ("end", format!("{now}")),
                            ("step", step.to_owned()),
                        ]);
                    } else if step == "-1" {
                        form.push(("timeout", "-1".to_owned()));
                    }
                    forms.push((format!("http://{a}{path}"), form));
                }
                k += 1;
                for (url, form) in forms {
                    n.fetch_add(1, Ordering::Relaxed);
                    match client
                        .post(url)
                        .form(&form)
                        .timeout(Duration::from_secs(60))
                        .send()
                        .await
                    {
                        Ok(r) if r.status().as_u16() >= 500 && r.status().as_u16() != 503 => {
                            eprintln!("soak: {} for {:?}", r.status(), form[0].1);
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }));
    }

    // The schedule: VictoriaMetrics away from 1/3 to 1/2, a restart at
    // 60%; RSS read every 10 s.
    let mut rss: Vec<(u64, u64)> = Vec::new();
    let (mut vm_stopped, mut vm_back, mut restarted) = (false, false, false);
    let mut restart_took = Duration::ZERO;
    let mut checked_at_restart = 0;
    while started.elapsed() < total {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let el = started.elapsed();
        assert!(
            server.child.0.try_wait().expect("wait").is_none(),
            "sluice died at {el:?}"
        );
        rss.push((el.as_secs(), rss_kib(server.child.0.id())));
        if !vm_stopped && el > total / 3 {
            eprintln!("soak: {el:?}: VictoriaMetrics stops");
            vm.stop();
            vm_stopped = true;
        }
        if vm_stopped && !vm_back && el > total / 2 {
            eprintln!("soak: {el:?}: VictoriaMetrics starts again");
            vm.restart();
            vm_back = true;
        }
        if !restarted && el > total * 3 / 5 {
            let before = assert_nothing_acked_lost(server.addr, &writes).await;
            eprintln!("soak: {el:?}: {before} acknowledged samples all there; SIGTERM");
            let t = Instant::now();
            let pid = server.child.0.id().to_string();
            assert!(std::process::Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .expect("kill")
                .success());
            let status = server.child.0.wait().expect("wait");
            assert!(status.success(), "exit status {status}");
            server = start(data.path(), &forward);
            *addr.lock().expect("addr") = server.addr;
            restart_took = t.elapsed();
            eprintln!("soak: stopped and started again in {restart_took:?}");
            checked_at_restart = assert_nothing_acked_lost(server.addr, &writes).await;
            restarted = true;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let a = server.addr;
    let checked = assert_nothing_acked_lost(a, &writes).await;
    let acked = writes.samples.load(Ordering::Relaxed);

    // The report.
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!("\n== soak report ({minutes} min) ==");
    eprintln!(
        "writes: {acked} samples acknowledged ({:.0}/s), 0 of them lost (each series, each minute: {checked_at_restart} checked after the restart, {checked} at the end); refused or unanswered requests by status: {:?}",
        acked as f64 / elapsed,
        writes.refused.lock().expect("refused")
    );
    let mut lat = writes.latency.lock().expect("latency").clone();
    let p99: Vec<String> = lat
        .iter_mut()
        .enumerate()
        .map(|(w, v)| {
            format!(
                "{}-{} min: {:.1} ms",
                w * 5,
                w * 5 + 5,
                percentile(v, 0.99) as f64 / 1000.0
            )
        })
        .collect();
    eprintln!("write p99 per 5 minutes: {}", p99.join(", "));
    let warm = rss.len() / 6;
    let after: Vec<u64> = rss.iter().skip(warm).map(|r| r.1).collect();
    let (lo, hi) = (
        after.iter().min().copied().unwrap_or(0),
        after.iter().max().copied().unwrap_or(0),
    );
    eprintln!(
        "RSS after warm-up (from {} s): {:.0}-{:.0} MB; every minute: {}",
        rss.get(warm).map_or(0, |r| r.0),
        lo as f64 / 1024.0,
        hi as f64 / 1024.0,
        rss.iter()
            .step_by(6)
            .map(|(s, k)| format!("{}m {:.0}", s / 60, *k as f64 / 1024.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!(
        "queries: {} sent, {} answered 5xx other than 503; restart took {restart_took:?}",
        queries.load(Ordering::Relaxed),
        bad_answers.load(Ordering::Relaxed)
    );
    let (_, metrics) = common::get(a, "/metrics").await;
    for name in [
        "sluice_blocks",
        "sluice_blocks_cut_total",
        "sluice_block_compactions_total",
        "sluice_forward_samples_sent_total",
        "sluice_http_connections_shed_total",
        "sluice_wal_write_failures_total",
    ] {
        eprintln!(
            "{name} (since the restart): {}",
            common::metric_total(&metrics, name)
        );
    }
    assert_eq!(
        bad_answers.load(Ordering::Relaxed),
        0,
        "queries answered 5xx"
    );
}
