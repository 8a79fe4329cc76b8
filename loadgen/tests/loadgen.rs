//! Smoke test of `sluice-loadgen`: the binary drives a small load of each
//! kind against a real Sluice over loopback HTTP; every sample must be
//! accepted and then be found by the query API, sample for sample.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Command;

use sluice::config::Config;

const LOADGEN: &str = env!("CARGO_BIN_EXE_sluice-loadgen");

/// Runs the load generator against `addr` and returns its `key=value`
/// summary line.
fn run_loadgen(addr: std::net::SocketAddr, args: &[&str]) -> String {
    let out = Command::new(LOADGEN)
        .arg("--target")
        .arg(addr.to_string())
        .args(["--max-time", "120s"])
        .args(args)
        .output()
        .expect("sluice-loadgen runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sluice-loadgen failed: {stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_default().to_owned()
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} missing from {line:?}"))
}

/// Samples stored in the last hour for series matching `selector`, by the
/// query API.
async fn stored(addr: std::net::SocketAddr, selector: &str) -> (f64, f64) {
    let url = format!("http://{addr}/api/v1/query");
    let q = |expr: String| {
        let url = url.clone();
        async move {
            let v = common::api_json(&url, &[("query", expr)]).await;
            v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0)
        }
    };
    // The samples themselves, as a range selector returns them:
    // `count_over_time` would drop the metric names, and series that differ
    // only by name would then collide (an error, as in Prometheus).
    let raw = common::api_json(&url, &[("query", format!("{selector}[1h]"))]).await;
    let samples = raw["data"]["result"].as_array().map_or(0, |a| {
        a.iter()
            .map(|s| {
                s["values"].as_array().map_or(0, Vec::len)
                    + s["histograms"].as_array().map_or(0, Vec::len)
            })
            .sum::<usize>()
    });
    (q(format!("count({selector})")).await, samples as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_is_accepted_in_full_and_queryable() {
    let small = [
        "--series",
        "1500",
        "--samples",
        "6",
        "--per-request",
        "400",
        "--connections",
        "3",
    ];
    for mode in ["steady", "churn", "backfill", "otlp", "histograms"] {
        let srv = common::start(Config::default()).await;
        let addr = srv.addr;
        let log_dir = tempfile::tempdir().expect("tempdir");
        let log = log_dir.path().join("latency.log");
        let log_arg = log.to_string_lossy().into_owned();
        let mut args = small.to_vec();
        args.extend(["--mode", mode, "--latency-log", &log_arg]);
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let unix_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs_f64()
                * 1e3
        };
        let before = unix_ms();
        let line = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_loadgen(addr, &args)
        })
        .await
        .expect("join");
        let after = unix_ms();
        // The latency log: one line per request, each answered, their
        // samples adding up to those sent; sent (Unix milliseconds)
        // while the generator ran, and each no longer than the run.
        let text = std::fs::read_to_string(&log).expect("latency log");
        let rows: Vec<Vec<f64>> = text
            .lines()
            .map(|l| l.split(' ').map(|f| f.parse().expect("number")).collect())
            .collect();
        let requests: usize = field(&line, "requests").parse().expect("requests");
        assert_eq!(rows.len(), requests, "{mode}: {text}");
        let seconds: f64 = field(&line, "seconds").parse().expect("seconds");
        for r in &rows {
            assert_eq!(r.len(), 4, "{mode}: {r:?}");
            assert!((before..=after).contains(&r[0]), "{mode}: sent at {}", r[0]);
            assert!(
                r[0] + r[1] <= after + 1.0,
                "{mode}: {r:?} ends after the run"
            );
            assert!(
                r[1] > 0.0 && r[1] <= seconds * 1e3 + 1.0,
                "{mode}: latency {}",
                r[1]
            );
            assert_eq!(r[3], 1.0, "{mode}: {r:?}");
        }
        let logged: f64 = rows.iter().map(|r| r[2]).sum();
        assert_eq!(logged.to_string(), field(&line, "sent"), "{mode}");
        // Its median is the summary's, which comes from the same times.
        let mut latencies: Vec<f64> = rows.iter().map(|r| r[1]).collect();
        latencies.sort_by(f64::total_cmp);
        let p50: f64 = field(&line, "p50_ms").parse().expect("p50");
        let median = latencies[latencies.len() / 2];
        assert!(
            (median - p50).abs() < 0.01,
            "{mode}: log {median} against {p50}"
        );
        assert_eq!(field(&line, "mode"), mode);
        assert_eq!(field(&line, "errors"), "none", "{line}");
        assert_eq!(field(&line, "timed_out"), "false", "{line}");
        let sent: f64 = field(&line, "sent").parse().expect("sent");
        let accepted: f64 = field(&line, "accepted").parse().expect("accepted");
        let series: f64 = field(&line, "total_series").parse().expect("series");
        assert_eq!(accepted, sent, "{line}");
        match mode {
            "churn" => {
                // A tenth of each request is new series: 40 per request.
                let requests: f64 = field(&line, "requests").parse().expect("requests");
                assert_eq!(series, 1500.0 + requests * 40.0, "{line}");
                assert_eq!(sent, 1500.0 * 6.0 + requests * 40.0, "{line}");
            }
            _ => {
                assert_eq!(series, 1500.0);
                assert_eq!(sent, 9000.0);
            }
        }
        // OTLP adds target_info series of its own; count the load's.
        let selector = r#"{__name__!="target_info",job=~".+"}"#;
        let (count, samples) = stored(addr, selector).await;
        assert_eq!(count, series, "{mode}: series stored");
        assert_eq!(samples, sent, "{mode}: samples stored");
    }
}
