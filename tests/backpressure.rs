//! Memory back-pressure loses nothing from a stock sender. A real
//! Prometheus 3.5.3 (no `retry_on_http_429`, default retries) scrapes
//! itself every second and remote-writes to a Sluice whose `--max-memory`
//! is too small, so Sluice answers 503. Sluice is then restarted on the
//! same address and data with a larger limit. Prometheus must fail and
//! drop nothing, and every sample it stored itself must be in Sluice.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{get, metric_total, metric_value, Prometheus};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Starts the Sluice binary on `listen` over `data`; waits until it serves.
fn sluice(listen: &str, data: &std::path::Path, max_memory: &str) -> Child {
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            listen,
            "--max-memory",
            max_memory,
            "--log-level",
            "info",
        ])
        .arg("--data-dir")
        .arg(data)
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    loop {
        let line = lines
            .next()
            .expect("a log line before exit")
            .expect("utf-8");
        if line.contains("listening addr=") {
            break;
        }
    }
    // Keep draining its log so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    child
}

fn stop(mut child: Child) {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "sluice did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The raw samples of `selector[window]` at `t` (seconds), as a server
/// answers an instant query for them.
async fn raw(addr: &str, selector: &str, t: f64) -> serde_json::Value {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query"),
        &[("query", selector.to_owned()), ("time", format!("{t:.3}"))],
    )
    .await;
    assert_eq!(v["status"], "success", "{addr} {selector}: {v}");
    v["data"]["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_prometheus_loses_nothing_to_memory_back_pressure() {
    let data = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    // Below what one Prometheus' own series take: every write is refused.
    let small = sluice(&listen, data.path(), "300KB");

    // Stock queue settings but a short backoff cap, so the test is quick;
    // retry_on_http_429 is left at its default (false).
    let config = format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{port}}"]
remote_write:
  - url: http://{listen}/api/v1/write
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
      max_backoff: 1s
"#
    );
    let prom = Prometheus::start3(&config, &[]);
    let paddr = prom.addr();
    let sluice_addr = listen.parse().expect("addr");

    // Phase 1: Sluice pushes back with 503 while Prometheus keeps scraping.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, sm) = get(sluice_addr, "/metrics").await;
        let throttled = metric_total(&sm, "sluice_write_throttled_requests_total");
        let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
        let retried = metric_total(&pm, "prometheus_remote_storage_samples_retried_total");
        if throttled >= 3.0 && retried > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no push-back seen: throttled {throttled}, retried {retried}; {}",
            prom.log()
        );
    }
    stop(small);

    // Phase 2: the same data and address, room to spare.
    let big = sluice(&listen, data.path(), "1GB");
    let (mut sent, mut pending);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
        sent = metric_total(&pm, "prometheus_remote_storage_samples_total");
        pending = metric_total(&pm, "prometheus_remote_storage_samples_pending");
        let (_, sm) = get(sluice_addr, "/metrics").await;
        let ingested = metric_value(
            &sm,
            r#"sluice_ingested_samples_total{protocol="remote_write"}"#,
        )
        .unwrap_or(0.0);
        if pending == 0.0 && ingested > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline + Duration::from_secs(60),
            "the backlog never drained: sent {sent}, pending {pending}, ingested {ingested}; {}",
            prom.log()
        );
    }
    let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
    for lost in [
        "prometheus_remote_storage_samples_failed_total",
        "prometheus_remote_storage_samples_dropped_total",
    ] {
        assert_eq!(metric_total(&pm, lost), 0.0, "{lost}: {}", prom.log());
    }

    // Everything Prometheus stored of itself, from its first scrape to a
    // few seconds ago, is in Sluice, sample for sample.
    let t = (common::now_ms() / 1000 - 3) as f64;
    for selector in [
        r#"up{job="prometheus"}[10m]"#,
        r#"prometheus_tsdb_head_series{job="prometheus"}[10m]"#,
        r#"prometheus_http_requests_total{handler="/metrics"}[10m]"#,
    ] {
        let want = raw(&paddr, selector, t).await;
        let got = raw(&listen, selector, t).await;
        let points = want[0]["values"].as_array().map_or(0, Vec::len);
        assert!(points >= 5, "{selector}: Prometheus holds {points} samples");
        assert_eq!(got, want, "{selector}");
    }
    stop(big);
}
