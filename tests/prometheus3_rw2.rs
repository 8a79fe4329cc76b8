//! Prometheus 3.5.3 (Debian's sid package, fetched by
//! `scripts/fetch-prometheus3`) scrapes itself and Sluice every second and
//! remote-writes in 2.0 (`io.prometheus.write.v2.Request`) with metadata,
//! while storing the same data in its own TSDB. Sluice must lose nothing
//! (Prometheus counts no failed sample) and answer range queries over the
//! sent window exactly as Prometheus does.

mod common;

use std::time::{Duration, Instant};

use common::{get, metric_total, metric_value, start, Prometheus};
use sluice::config::Config;

/// A range query's `data.result`, by any server.
async fn range(addr: &str, query: &str, start: f64, end: f64) -> serde_json::Value {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query_range"),
        &[
            ("query", query.to_owned()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", "1".to_owned()),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{addr} {query}: {v}");
    v["data"]["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_sends_remote_write_2_and_loses_nothing() {
    let srv = start(Config::default()).await;
    let config = common::scrape_and_write_config(
        srv.addr,
        "    protobuf_message: io.prometheus.write.v2.Request
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
",
    );
    // Metadata travels with each series in 2.0 once the WAL records it.
    let prom = Prometheus::start3(&config, &["--enable-feature=metadata-wal-records"]);
    let paddr = prom.addr();

    let deadline = Instant::now() + Duration::from_secs(90);
    let started = Instant::now();
    let (mut sent, mut failed, mut ingested);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
        sent = metric_total(&pm, "prometheus_remote_storage_samples_total");
        failed = metric_total(&pm, "prometheus_remote_storage_samples_failed_total")
            + metric_total(&pm, "prometheus_remote_storage_samples_dropped_total");
        let (_, sm) = get(srv.addr, "/metrics").await;
        ingested = metric_value(
            &sm,
            r#"sluice_ingested_samples_total{protocol="remote_write_2"}"#,
        )
        .unwrap_or(0.0);
        if sent > 2000.0 && ingested >= sent && started.elapsed() > Duration::from_secs(8) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out: prometheus sent {sent} (failed {failed}), sluice ingested {ingested}; log: {}",
            prom.log()
        );
    }
    assert_eq!(
        failed,
        0.0,
        "Prometheus failed or dropped samples: {}",
        prom.log()
    );
    let (_, sm) = get(srv.addr, "/metrics").await;
    assert_eq!(
        metric_total(&sm, "sluice_rejected_samples_total"),
        0.0,
        "nothing rejected:\n{sm}"
    );
    assert_eq!(
        metric_value(
            &sm,
            r#"sluice_ingested_samples_total{protocol="remote_write"}"#
        )
        .unwrap_or(0.0),
        0.0,
        "everything came as 2.0"
    );

    // The same range queries over a window both sides hold (remote write
    // lags a batch deadline behind scraping) give the same answer. The
    // window is the last 5 s that Prometheus has scraped through, 3 s ago.
    let (start, end) = loop {
        let end = (common::now_ms() / 1000 - 3) as f64;
        let up = range(&paddr, "up", end - 5.0, end).await;
        let full = up.as_array().is_some_and(|a| {
            a.iter()
                .all(|s| s["values"].as_array().is_some_and(|v| v.len() == 6))
                && a.len() == 2
        });
        if full {
            break (end - 5.0, end);
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped 5 s through: {up}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Sluice has been sent everything up to the window's end.
    let sent_by = Instant::now();
    loop {
        let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
        let sent = metric_total(&pm, "prometheus_remote_storage_samples_total");
        let (_, sm) = get(srv.addr, "/metrics").await;
        let ingested = metric_value(
            &sm,
            r#"sluice_ingested_samples_total{protocol="remote_write_2"}"#,
        )
        .unwrap_or(0.0);
        if ingested >= sent && sent_by.elapsed() > Duration::from_secs(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sluice ingested {ingested} of {sent}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for query in [
        r#"up"#,
        r#"prometheus_http_requests_total{handler="/metrics"}"#,
        r#"rate(prometheus_http_requests_total{handler="/metrics"}[3s])"#,
        r#"sum by (job) (scrape_samples_scraped)"#,
    ] {
        let want = range(&paddr, query, start, end).await;
        let got = range(&srv.addr.to_string(), query, start, end).await;
        assert!(
            want.as_array().is_some_and(|a| !a.is_empty()),
            "{query}: Prometheus has nothing from {start} to {end}: {want}; now {}; log {}",
            common::now_ms(),
            prom.log()
        );
        assert_eq!(got, want, "{query}");
    }

    // Metadata arrives with the series and is served as Prometheus serves it.
    let md = loop {
        let (_, md) = get(srv.addr, "/api/v1/metadata?metric=prometheus_build_info").await;
        if md.contains(r#""type":"gauge""#) || Instant::now() > deadline {
            break md;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (_, want) = get(
        paddr.parse().expect("addr"),
        "/api/v1/metadata?metric=prometheus_build_info",
    )
    .await;
    let parse = |s: &str| serde_json::from_str::<serde_json::Value>(s).expect("json");
    assert_eq!(parse(&md)["data"], parse(&want)["data"], "metadata");
}

/// An OpenMetrics target whose counter carries an exemplar that changes
/// with every scrape; serves until the test ends.
async fn exemplar_target() -> std::net::SocketAddr {
    use axum::routing::get as route;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/metrics",
        route(move || {
            let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            async move {
                let now = common::now_ms() as f64 / 1000.0;
                (
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    format!(
                        "# TYPE demo_requests counter\n\
                         demo_requests_total{{path=\"/a\"}} {n} # {{trace_id=\"{n:032x}\"}} {n}.5 {now:.3}\n\
                         # EOF\n"
                    ),
                )
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exemplars_sent_by_prometheus_3_are_served_as_prometheus_serves_them() {
    let srv = start(Config::default()).await;
    let target = exemplar_target().await;
    let config = format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: demo
    static_configs:
      - targets: ["{target}"]
remote_write:
  - url: http://{sluice}/api/v1/write
    protobuf_message: io.prometheus.write.v2.Request
    send_exemplars: true
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
"#,
        sluice = srv.addr
    );
    let prom = Prometheus::start3(&config, &["--enable-feature=exemplar-storage"]);
    let paddr = prom.addr();
    let exemplars = |addr: String, start: f64, end: f64| async move {
        let v = common::api_json(
            &format!("http://{addr}/api/v1/query_exemplars"),
            &[
                ("query", "demo_requests_total".to_owned()),
                ("start", format!("{start:.3}")),
                ("end", format!("{end:.3}")),
            ],
        )
        .await;
        assert_eq!(v["status"], "success", "{addr}: {v}");
        v["data"].clone()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let start_s = common::now_ms() as f64 / 1000.0 - 60.0;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, sm) = get(srv.addr, "/metrics").await;
        let stored = metric_value(
            &sm,
            r#"sluice_ingested_exemplars_total{protocol="remote_write_2"}"#,
        )
        .unwrap_or(0.0);
        if stored >= 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no exemplars arrived ({stored}); {}",
            prom.log()
        );
    }
    // A window both sides hold: up to the last exemplar Sluice has.
    let end_s = common::now_ms() as f64 / 1000.0 - 2.0;
    let (mut want, mut got);
    loop {
        want = exemplars(paddr.clone(), start_s, end_s).await;
        got = exemplars(srv.addr.to_string(), start_s, end_s).await;
        if got == want || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let n = want[0]["exemplars"].as_array().map_or(0, Vec::len);
    assert!(n >= 3, "Prometheus holds {n} exemplars: {want}");
    assert_eq!(got, want);
    let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
    assert_eq!(
        metric_total(&pm, "prometheus_remote_storage_exemplars_failed_total"),
        0.0,
        "{}",
        prom.log()
    );
}
