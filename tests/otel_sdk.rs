//! The real OpenTelemetry Python SDK pushes every instrument kind to Sluice,
//! over protobuf (its own OTLP/HTTP exporter, gzip) and over JSON (its own
//! encoding in the OTLP JSON mapping); the query API then shows exactly the
//! names, labels and values Prometheus' OTLP receiver would give them.
//!
//! `scripts/test` installs the SDK into `target/otel-venv`; set
//! `SLUICE_OTEL_PYTHON` to use another interpreter.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use sluice::config::Config;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_OTEL_PYTHON") {
        return p.into();
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/otel-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run ./scripts/test, which installs opentelemetry-sdk and \
         opentelemetry-exporter-otlp-proto-http into it, or set SLUICE_OTEL_PYTHON",
        p.display()
    );
    p
}

async fn push(addr: std::net::SocketAddr, mode: &'static str, instance: &'static str) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otel/push.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python())
            .arg(script)
            .arg(format!("http://{addr}"))
            .arg(mode)
            .arg(instance)
            .output()
            .expect("python runs")
    })
    .await
    .expect("joined");
    assert!(
        out.status.success(),
        "SDK push ({mode}) failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

type Series = BTreeMap<String, String>;

async fn query(addr: std::net::SocketAddr, q: &str) -> Vec<(Series, f64)> {
    common::query_vector(addr, q, None)
        .await
        .into_iter()
        .map(|(labels, v)| (labels, v.parse().expect("a number")))
        .collect()
}

/// The labels of a series of `instance` once a function drops the name.
fn series_unnamed(instance: &str) -> Series {
    let mut l = series(instance, "x", &[]);
    l.remove("__name__");
    l
}

fn series(instance: &str, name: &str, extra: &[(&str, &str)]) -> Series {
    let mut l: Series = [
        ("__name__", name),
        ("job", "e2e/sdk-test"),
        ("instance", instance),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (k, v) in extra {
        l.insert((*k).to_owned(), (*v).to_owned());
    }
    l
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_lands_every_instrument_under_prometheus_names() {
    sdk_lands(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_classic_off_exponential_histograms_from_the_sdk_are_native_histograms() {
    sdk_lands(false).await;
}

/// The native histograms stored under `name` for `instance`.
fn native(
    srv: &common::TestServer,
    name: &str,
    instance: &str,
) -> Vec<sluice::histogram::Histogram> {
    common::stored_histograms(srv, &[("__name__", name), ("instance", instance)])
        .into_iter()
        .filter_map(|(_, h)| match h {
            sluice::histogram::HistSample::Int(h) => Some(h),
            sluice::histogram::HistSample::Float(_) => None,
        })
        .collect()
}

async fn sdk_lands(classic: bool) {
    let srv = common::start(Config {
        otlp_exponential_histograms_as_classic: classic,
        ..Config::default()
    })
    .await;
    push(srv.addr, "protobuf", "i-proto").await;
    push(srv.addr, "json", "i-json").await;

    for inst in ["i-proto", "i-json"] {
        let sel = |name: &str| format!("{name}{{instance=\"{inst}\"}}");
        // Counter: monotonic cumulative sum, `{request}` unit dropped, `_total`.
        assert_eq!(
            query(srv.addr, &sel("http_server_requests_total")).await,
            vec![
                (
                    series(inst, "http_server_requests_total", &[("http_route", "/a")]),
                    5.0
                ),
                (
                    series(inst, "http_server_requests_total", &[("http_route", "/b")]),
                    1.0
                ),
            ],
            "{inst}"
        );
        // Up-down counter: a non-monotonic sum is a gauge.
        assert_eq!(
            query(srv.addr, &sel("queue_size")).await,
            vec![(series(inst, "queue_size", &[]), 5.0)]
        );
        // Gauge with a UCUM unit.
        assert_eq!(
            query(srv.addr, &sel("cpu_temperature_celsius")).await,
            vec![(
                series(inst, "cpu_temperature_celsius", &[("cpu", "0")]),
                41.5
            )]
        );
        // Histogram: cumulative buckets, `_sum`, `_count`.
        let h = "http_server_request_duration_seconds";
        let route = [("http_route", "/a")];
        let bucket = |le: &str| {
            series(
                inst,
                &format!("{h}_bucket"),
                &[("http_route", "/a"), ("le", le)],
            )
        };
        let mut want = vec![
            (bucket("0.01"), 1.0),
            (bucket("0.1"), 1.0),
            (bucket("1"), 2.0),
            (bucket("10"), 3.0),
            (bucket("+Inf"), 3.0),
        ];
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(query(srv.addr, &sel(&format!("{h}_bucket"))).await, want);
        assert_eq!(
            query(srv.addr, &sel(&format!("{h}_count"))).await,
            vec![(series(inst, &format!("{h}_count"), &route), 3.0)]
        );
        let sum = query(srv.addr, &sel(&format!("{h}_sum"))).await;
        assert_eq!(sum.len(), 1);
        assert!((sum[0].1 - 1.703).abs() < 1e-9, "{sum:?}");

        if classic {
            exponential_as_classic(&srv, inst).await;
        } else {
            // Exponential histogram: one native histogram, schema = the
            // SDK's scale; each recorded value (100, 200, 3000) is in a
            // bucket (2^((i-1)/2^schema), 2^(i/2^schema)] that counts it.
            let hs = native(&srv, "payload_size_bytes", inst);
            assert_eq!(hs.len(), 1, "{hs:?}");
            let h = &hs[0];
            assert_eq!((h.count, h.sum, h.zero_count), (3, 3300.0, 0), "{h:?}");
            assert!((-4..=8).contains(&h.schema), "{h:?}");
            let f = h.to_float();
            let base = 2f64.powf(2f64.powi(-h.schema));
            let buckets: Vec<(f64, f64, f64)> =
                sluice::histogram::BucketIndexes::new(&f.positive_spans)
                    .zip(&f.positive_buckets)
                    .map(|(i, &c)| (base.powi(i as i32 - 1), base.powi(i as i32), c))
                    .collect();
            assert_eq!(buckets.iter().map(|b| b.2).sum::<f64>(), 3.0, "{buckets:?}");
            for v in [100.0, 200.0, 3000.0] {
                assert!(
                    buckets
                        .iter()
                        .any(|&(lo, hi, c)| lo < v && v <= hi * (1.0 + 1e-12) && c >= 1.0),
                    "{v} in {buckets:?}"
                );
            }
            assert!(query(srv.addr, &sel("payload_size_bytes_bucket"))
                .await
                .is_empty());
            // And PromQL reads it.
            assert_eq!(
                query(
                    srv.addr,
                    &format!("histogram_count({})", sel("payload_size_bytes"))
                )
                .await,
                vec![(series_unnamed(inst), 3.0)]
            );
            assert_eq!(
                query(
                    srv.addr,
                    &format!("histogram_sum({})", sel("payload_size_bytes"))
                )
                .await,
                vec![(series_unnamed(inst), 3300.0)]
            );
            let median = query(
                srv.addr,
                &format!("histogram_quantile(0.5, {})", sel("payload_size_bytes")),
            )
            .await;
            // The middle observation is 200: the estimate lies in its bucket.
            assert!(
                median.len() == 1 && median[0].1 > 200.0 / base && median[0].1 <= 200.0 * base,
                "{median:?}"
            );
        }

        // target_info: the non-identifying resource attributes.
        let ti = query(srv.addr, &sel("target_info")).await;
        assert_eq!(ti.len(), 1, "{ti:?}");
        let (labels, v) = &ti[0];
        assert_eq!(*v, 1.0);
        assert_eq!(labels["deployment_environment"], "ci");
        assert_eq!(labels["telemetry_sdk_language"], "python");
        assert_eq!(labels["telemetry_sdk_name"], "opentelemetry");
        assert_eq!(labels["job"], "e2e/sdk-test");
        assert!(!labels.contains_key("service_name"));
    }

    // Metadata from the instruments' descriptions and units.
    let (_, md) = common::get(srv.addr, "/api/v1/metadata").await;
    let md: Value = serde_json::from_str(&md).expect("json");
    assert_eq!(
        md["data"]["http_server_request_duration_seconds"][0],
        serde_json::json!({"type": "histogram", "help": "Duration of HTTP server requests", "unit": "seconds"})
    );
    assert_eq!(
        md["data"]["http_server_requests_total"][0],
        serde_json::json!({"type": "counter", "help": "Requests served", "unit": ""})
    );
    assert_eq!(md["data"]["queue_size"][0]["type"], "gauge");
    assert_eq!(md["data"]["cpu_temperature_celsius"][0]["unit"], "celsius");

    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    let ingested =
        common::metric_value(&metrics, "sluice_ingested_samples_total{protocol=\"otlp\"}");
    // Each exponential histogram is one sample natively, a series per
    // bucket as classic.
    let least = if classic { 40.0 } else { 24.0 };
    assert!(ingested.is_some_and(|n| n >= least), "{ingested:?}");
    assert!(!metrics.contains("sluice_rejected_samples_total{protocol=\"otlp\""));
}

/// The exponential histogram of `inst` as classic buckets at its own
/// boundaries.
async fn exponential_as_classic(srv: &common::TestServer, inst: &str) {
    let sel = |name: &str| format!("{name}{{instance=\"{inst}\"}}");
    // Exponential histogram: classic buckets at its own boundaries.
    let e = query(srv.addr, &sel("payload_size_bytes_bucket")).await;
    let mut buckets: Vec<(f64, f64)> = e
        .iter()
        .map(|(l, v)| {
            let le = &l["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le is a number")
            };
            (le, *v)
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.len() > 10, "{buckets:?}");
    assert_eq!(buckets.last(), Some(&(f64::INFINITY, 3.0)));
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative");
    // Each recorded value (100, 200, 3000) is counted by the first
    // bucket whose bound is at least it.
    let at = |v: f64| buckets.iter().find(|b| b.0 >= v).map(|b| b.1);
    assert_eq!(at(100.0), Some(1.0));
    assert_eq!(at(200.0), Some(2.0));
    assert_eq!(at(3000.0), Some(3.0));
    assert_eq!(
        query(srv.addr, &sel("payload_size_bytes_count")).await[0].1,
        3.0
    );
    assert_eq!(
        query(srv.addr, &sel("payload_size_bytes_sum")).await[0].1,
        3300.0
    );
    let p50 = query(
        srv.addr,
        &format!(
            "histogram_quantile(0.5, {})",
            sel("payload_size_bytes_bucket")
        ),
    )
    .await;
    assert!(
        p50.len() == 1 && p50[0].1 > 190.0 && p50[0].1 <= 210.0,
        "{p50:?}"
    );
}

/// With `st-storage`, the SDK's start times (a cumulative sum's
/// `start_time_unix_nano`, when its meter provider began) are kept with
/// the samples; `start_timestamp()` gives them back, in seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_start_times_are_kept_and_read_back() {
    let srv = common::start(Config {
        enable_feature: vec![
            sluice::config::ST_STORAGE.to_owned(),
            sluice::config::USE_START_TIMESTAMPS.to_owned(),
            sluice::config::EXPERIMENTAL_FUNCTIONS.to_owned(),
        ],
        ..Config::default()
    })
    .await;
    let before = common::now_ms() as f64 / 1000.0;
    push(srv.addr, "protobuf", "i-proto").await;
    let after = common::now_ms() as f64 / 1000.0;
    let got = query(
        srv.addr,
        "start_timestamp(http_server_requests_total{instance=\"i-proto\"})",
    )
    .await;
    assert_eq!(got.len(), 2, "{got:?}");
    for (labels, st) in &got {
        assert!(
            (before - 1.0..=after).contains(st),
            "{labels:?}: start {st} not within the push ({before}..{after})"
        );
    }
    // Without the feature, nothing is kept: every start is unknown (0).
    let plain = common::start(Config {
        enable_feature: vec![
            sluice::config::USE_START_TIMESTAMPS.to_owned(),
            sluice::config::EXPERIMENTAL_FUNCTIONS.to_owned(),
        ],
        ..Config::default()
    })
    .await;
    push(plain.addr, "protobuf", "i-proto").await;
    let got = query(
        plain.addr,
        "start_timestamp(http_server_requests_total{instance=\"i-proto\"})",
    )
    .await;
    assert!(
        got.len() == 2 && got.iter().all(|(_, st)| *st == 0.0),
        "{got:?}"
    );
}
