//! The `promql_eval` queries timed side by side over HTTP: the same data
//! (10k counter series, 200 histograms, 1h at 15s) remote-written into a
//! real Prometheus (Debian's package) and into Sluice, each query run as a
//! range query over that hour at a 15s step, best of N, on loopback.
//!
//! `cargo bench --bench promql_vs_prometheus` (needs `prometheus` on PATH).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use sluice::config::Config;
use sluice::proto::prometheus as pb;

const POINTS: i64 = 240;
const QUERIES: [(&str, &str); 3] = [
    ("sum_rate", "sum by (job) (rate(http_requests_total[5m]))"),
    (
        "histogram_quantile",
        "histogram_quantile(0.99, sum by (le, job) (rate(http_request_duration_seconds_bucket[5m])))",
    ),
    ("regex_selector", r#"http_requests_total{job=~"job1.*", instance=~".*:9100"}"#),
];

fn dataset(t0: i64) -> Vec<Vec<pb::TimeSeries>> {
    let mut all = Vec::new();
    for j in 0..100i64 {
        for i in 0..100i64 {
            let (job, inst) = (format!("job{j}"), format!("10.0.{j}.{i}:9100"));
            let samples: Vec<(i64, f64)> = (0..POINTS)
                .map(|k| (t0 + k * 15_000, (k * (i + 1) + j) as f64))
                .collect();
            all.push(common::series(
                &[
                    ("__name__", "http_requests_total"),
                    ("instance", &inst),
                    ("job", &job),
                ],
                &samples,
            ));
        }
    }
    let bounds = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"];
    for j in 0..20i64 {
        for i in 0..10i64 {
            let (job, inst) = (format!("job{j}"), format!("10.1.{j}.{i}:9100"));
            for (b, le) in bounds.iter().enumerate() {
                let samples: Vec<(i64, f64)> = (0..POINTS)
                    .map(|k| (t0 + k * 15_000, (k * (b as i64 + 1) * (i + 1)) as f64))
                    .collect();
                all.push(common::series(
                    &[
                        ("__name__", "http_request_duration_seconds_bucket"),
                        ("instance", &inst),
                        ("job", &job),
                        ("le", le),
                    ],
                    &samples,
                ));
            }
        }
    }
    all.chunks(500).map(<[_]>::to_vec).collect()
}

async fn time_query(addr: &str, q: &str, start: i64, end: i64, runs: usize) -> (Duration, usize) {
    let client = reqwest::Client::new();
    let mut best = Duration::MAX;
    let mut size = 0;
    for _ in 0..runs {
        let t = Instant::now();
        let resp = client
            .post(format!("http://{addr}/api/v1/query_range"))
            .form(&[
                ("query", q.to_owned()),
                ("start", (start / 1000).to_string()),
                ("end", (end / 1000).to_string()),
                ("step", "15".to_owned()),
            ])
            .send()
            .await
            .expect("sent");
        let body = resp.text().await.expect("body");
        best = best.min(t.elapsed());
        assert!(
            body.starts_with(r#"{"status":"success""#),
            "{addr}: {}",
            &body[..body.len().min(300)]
        );
        size = body.len();
    }
    (best, size)
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test --all-targets`: nothing to check without timing.
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let srv = common::start(Config::default()).await;
        let prometheus = common::Prometheus::start(
            "global:\n  scrape_interval: 1h\n",
            &["--web.enable-remote-write-receiver"],
        );
        let prom = prometheus.addr();
        let t0 = (common::now_ms() / 60_000) * 60_000 - POINTS * 15_000 - 60_000;
        let batches = dataset(t0);
        for batch in &batches {
            let body = common::body(batch.clone());
            prometheus.remote_write(body.clone()).await;
            let (code, text) = common::push(srv.addr, body).await;
            assert_eq!(code, 204, "{text}");
        }
        let (start, end) = (t0 + 5 * 60_000, t0 + (POINTS - 1) * 15_000);
        println!(
            "{:<20} {:>14} {:>14} {:>8}",
            "query (range, 1h @15s)", "prometheus", "sluice", "ratio"
        );
        let sluice = srv.addr.to_string();
        for (name, q) in QUERIES {
            let (p, psize) = time_query(&prom, q, start, end, 5).await;
            let (s, ssize) = time_query(&sluice, q, start, end, 5).await;
            println!(
                "{name:<20} {:>11.1} ms {:>11.1} ms {:>7.2}x   (response bytes {psize} vs {ssize})",
                p.as_secs_f64() * 1e3,
                s.as_secs_f64() * 1e3,
                s.as_secs_f64() / p.as_secs_f64()
            );
        }
    });
}
