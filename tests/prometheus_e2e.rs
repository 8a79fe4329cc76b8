//! A real Prometheus (Debian's `prometheus` package) scrapes itself and
//! Sluice every second and remote-writes to a Sluice on loopback. Sluice
//! must hold every series Prometheus has, and the very samples Prometheus
//! itself stored.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{get, metric_value, now_ms, start, Prometheus};
use sluice::config::Config;
use sluice::storage::index::{MatchOp, Matcher};

async fn prom_query(port: u16, query: &str, time: f64) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let resp = reqwest::Client::new()
        .get(url)
        .query(&[("query", query), ("time", &format!("{time:.3}"))])
        .send()
        .await
        .expect("query sent");
    let v: serde_json::Value =
        serde_json::from_str(&resp.text().await.expect("body")).expect("json");
    assert_eq!(v["status"], "success", "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_remote_writes_everything_it_scrapes() {
    let srv = start(Config::default()).await;
    // `{port}` is filled in with Prometheus' own port.
    let config = common::scrape_and_write_config(
        srv.addr,
        "    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
    metadata_config:
      send_interval: 1s
",
    );
    let prom = Prometheus::start(&config, &[]);
    let port = prom.port;

    // Wait (bounded) until Sluice holds at least every series Prometheus has
    // and has ingested at least what Prometheus says it sent.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut sent, mut prom_series, mut ingested, mut sluice_series);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, pm) = get(
            format!("127.0.0.1:{port}").parse().expect("addr"),
            "/metrics",
        )
        .await;
        sent = pm
            .lines()
            .filter(|l| l.starts_with("prometheus_remote_storage_samples_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        prom_series = metric_value(&pm, "prometheus_tsdb_head_series").unwrap_or(f64::MAX);
        let (_, sm) = get(srv.addr, "/metrics").await;
        ingested = metric_value(
            &sm,
            r#"sluice_ingested_samples_total{protocol="remote_write"}"#,
        )
        .unwrap_or(0.0);
        sluice_series = metric_value(&sm, "sluice_head_series").unwrap_or(0.0);
        let up_scraped = srv.state.db().head_stats().series > 0;
        if sent > 1000.0 && ingested >= sent && sluice_series >= prom_series && up_scraped {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out: prometheus sent {sent}, sluice ingested {ingested}; series prometheus {prom_series} vs sluice {sluice_series}; log: {}",
            prom.log()
        );
    }
    let (_, sm) = get(srv.addr, "/metrics").await;
    assert_eq!(
        sm.lines()
            .filter(|l| l.starts_with("sluice_rejected_samples_total"))
            .count(),
        0,
        "nothing rejected:\n{sm}"
    );

    // Sluice's own exposition passes promtool's checks and lints.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian package prometheus)");
    {
        use std::io::Write;
        promtool
            .stdin
            .take()
            .expect("stdin")
            .write_all(sm.as_bytes())
            .expect("write");
    }
    let out = promtool.wait_with_output().expect("promtool exits");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics: {}{}\n{sm}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for name in [
        "sluice_ingested_samples_total",
        "sluice_head_series",
        "sluice_head_chunks",
        "sluice_head_chunk_bytes",
        "sluice_http_requests_total",
        "sluice_http_request_duration_seconds_bucket",
        "sluice_build_info",
    ] {
        assert!(
            sm.lines().any(|l| l.starts_with(name)),
            "{name} in /metrics:\n{sm}"
        );
    }

    // The samples of `up{job="prometheus"}` in a window that both sides
    // have: Prometheus' own answer equals what Sluice stored.
    // Remote write lags a batch deadline behind scraping, so look 2s back.
    let (t, want) = loop {
        let t = (now_ms() - 2_000) as f64 / 1000.0;
        let v = prom_query(port, r#"up{job="prometheus"}[10s]"#, t).await;
        let want: Vec<(i64, f64)> = v["data"]["result"][0]["values"]
            .as_array()
            .map(|vals| {
                vals.iter()
                    .map(|p| {
                        let ts = (p[0].as_f64().expect("ts") * 1000.0).round() as i64;
                        (ts, p[1].as_str().expect("value").parse().expect("float"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if want.len() >= 3 {
            break (t, want);
        }
        assert!(
            Instant::now() < deadline,
            "prometheus has no `up` samples: {v}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(!want.is_empty());
    let matchers = [
        Matcher::new(MatchOp::Equal, "__name__", "up").expect("m"),
        Matcher::new(MatchOp::Equal, "job", "prometheus").expect("m"),
    ];
    let t_ms = (t * 1000.0).round() as i64;
    let got = srv
        .state
        .db()
        .querier()
        .select_samples(&matchers, t_ms - 10_000 + 1, t_ms);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].samples, want);

    // The series API agrees with Prometheus' own for `up`, and the metric
    // metadata Prometheus sends is served.
    let series_of = |port_or_addr: String| async move {
        let v: serde_json::Value = serde_json::from_str(
            &reqwest::get(format!("http://{port_or_addr}/api/v1/series?match[]=up"))
                .await
                .expect("sent")
                .text()
                .await
                .expect("body"),
        )
        .expect("json");
        v["data"].clone()
    };
    assert_eq!(
        series_of(format!("127.0.0.1:{port}")).await,
        series_of(srv.addr.to_string()).await
    );
    loop {
        let (_, md) = get(srv.addr, "/api/v1/metadata?metric=prometheus_build_info").await;
        if md.contains(r#""type":"gauge""#) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no metadata from Prometheus: {md}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Prometheus scraped Sluice's own /metrics successfully.
    let v = prom_query(port, r#"up{job="sluice"}"#, (now_ms() as f64) / 1000.0).await;
    assert_eq!(v["data"]["result"][0]["value"][1], "1", "{v}");
    let v = prom_query(port, "sluice_head_series", (now_ms() as f64) / 1000.0).await;
    assert!(
        v["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
            > Some(0.0),
        "{v}"
    );
}
