//! Native histograms in: remote write 1.0 and 2.0 from a test client, and
//! from a real Prometheus 3.5.3 that scrapes its own native histograms
//! (`--enable-feature=native-histograms`) and sends them
//! (`send_native_histograms: true`). What Sluice stores is compared with
//! what Prometheus stored, sample by sample.

mod common;

use std::time::{Duration, Instant};

use common::{get, metric_total, metric_value, start, Prometheus};
use sluice::config::Config;
use sluice::histogram::HistSample;
use sluice::proto::prometheus as pb;

fn stored_histograms(srv: &common::TestServer, name: &str) -> Vec<(i64, HistSample)> {
    common::stored_histograms(srv, &[("__name__", name)])
}

fn int_histogram(t: i64, count: u64, deltas: Vec<i64>) -> pb::Histogram {
    pb::Histogram {
        count: Some(pb::histogram::Count::CountInt(count)),
        sum: count as f64 * 0.5,
        schema: 2,
        zero_threshold: 2f64.powi(-128),
        positive_spans: vec![pb::BucketSpan {
            offset: -1,
            length: deltas.len() as u32,
        }],
        positive_deltas: deltas,
        timestamp: t,
        ..Default::default()
    }
}

#[tokio::test]
async fn remote_write_1_histograms_are_stored_and_a_bad_one_is_named() {
    let srv = start(Config::default()).await;
    let t = common::now_ms() - 60_000;
    let mut good = common::series(&[("__name__", "rpc_seconds"), ("job", "a")], &[]);
    good.histograms = vec![
        int_histogram(t, 3, vec![1, 1]),
        int_histogram(t + 1000, 5, vec![2, 1]),
    ];
    let mut float = common::series(&[("__name__", "rpc_rate"), ("job", "a")], &[]);
    float.histograms = vec![pb::Histogram {
        count: Some(pb::histogram::Count::CountFloat(1.5)),
        sum: 2.25,
        schema: 0,
        positive_spans: vec![pb::BucketSpan {
            offset: 0,
            length: 1,
        }],
        positive_counts: vec![1.5],
        timestamp: t,
        ..Default::default()
    }];
    let mut bad = common::series(&[("__name__", "rpc_bad"), ("job", "a")], &[(t, 1.0)]);
    // Spans for two buckets, one delta.
    bad.histograms = vec![pb::Histogram {
        positive_deltas: vec![1],
        ..int_histogram(t, 1, vec![1, 0])
    }];
    let (status, text) = common::push(srv.addr, common::body(vec![good, float, bad])).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("invalid native histogram for series {__name__=\"rpc_bad\", job=\"a\"}")
            && text.contains("spans need 2 buckets, have 1 buckets"),
        "{text}"
    );
    let got = stored_histograms(&srv, "rpc_seconds");
    assert_eq!(got.len(), 2);
    let HistSample::Int(h) = &got[1].1 else {
        panic!("an integer histogram: {got:?}")
    };
    assert_eq!((got[1].0, h.count, h.sum, h.schema), (t + 1000, 5, 2.5, 2));
    assert_eq!(h.positive_buckets, [2, 1]);
    let got = stored_histograms(&srv, "rpc_rate");
    assert!(
        matches!(&got[..], [(_, HistSample::Float(f))] if f.count == 1.5 && f.positive_buckets == [1.5]),
        "{got:?}"
    );
    // The float sample beside the bad histogram is stored.
    assert_eq!(common::stored(&srv, "rpc_bad"), vec![(t, 1.0)]);
    let (_, m) = get(srv.addr, "/metrics").await;
    assert_eq!(
        metric_value(
            &m,
            r#"sluice_rejected_samples_total{protocol="remote_write",reason="invalid_native_histogram"}"#
        ),
        Some(1.0),
        "{m}"
    );
    // The same histogram again is an exact duplicate: accepted, not
    // stored twice; another one at the same time is refused.
    let mut again = common::series(&[("__name__", "rpc_seconds"), ("job", "a")], &[]);
    again.histograms = vec![int_histogram(t + 1000, 5, vec![2, 1])];
    let (status, text) = common::push(srv.addr, common::body(vec![again])).await;
    assert_eq!(status, 204, "{text}");
    let mut conflict = common::series(&[("__name__", "rpc_seconds"), ("job", "a")], &[]);
    conflict.histograms = vec![int_histogram(t + 1000, 6, vec![2, 2])];
    let (status, text) = common::push(srv.addr, common::body(vec![conflict])).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("duplicate"), "{text}");
    // A float sample at or before the newest histogram is out of order.
    let floats = common::series(
        &[("__name__", "rpc_seconds"), ("job", "a")],
        &[(t + 500, 1.0)],
    );
    let (status, text) = common::push(srv.addr, common::body(vec![floats])).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("out of order"), "{text}");
    assert_eq!(stored_histograms(&srv, "rpc_seconds").len(), 2);
    // A query reads them, in Prometheus' JSON: count, sum, and each
    // non-empty bucket as [boundary rule, lower, upper, count]. Schema 2
    // buckets -1 and 0 are (2^-2/4, 2^-1/4] and (2^-1/4, 1].
    let v = common::api_json(
        &format!("http://{}/api/v1/query", srv.addr),
        &[
            ("query", "rpc_seconds".to_owned()),
            ("time", format!("{:.3}", (t + 2000) as f64 / 1000.0)),
        ],
    )
    .await;
    assert_eq!(
        v["data"]["result"][0]["histogram"][1],
        serde_json::json!({
            "count": "5",
            "sum": "2.5",
            "buckets": [
                [0, "0.7071067811865475", "0.8408964152537144", "2"],
                [0, "0.8408964152537144", "1", "3"]
            ]
        }),
        "{v}"
    );
    assert!(v.get("warnings").is_none(), "{v}");
}

/// A histogram as both sides can state it without bucket boundaries:
/// timestamp, count, sum, and the non-empty buckets' counts (zero bucket
/// included) in ascending order.
type Point = (i64, f64, f64, Vec<u64>);

/// The histograms Prometheus holds for `selector` over the last `window`
/// at `time`.
async fn prometheus_histograms(addr: &str, selector: &str, window: &str, time: f64) -> Vec<Point> {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query"),
        &[
            ("query", format!("{selector}[{window}]")),
            ("time", format!("{time:.3}")),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().expect("matrix") {
        for p in s["histograms"].as_array().into_iter().flatten() {
            let t = (p[0].as_f64().expect("t") * 1000.0).round() as i64;
            let count: f64 = p[1]["count"].as_str().expect("count").parse().expect("num");
            let sum: f64 = p[1]["sum"].as_str().expect("sum").parse().expect("num");
            let mut buckets: Vec<u64> = p[1]["buckets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    let c: f64 = b[3].as_str().expect("count").parse().expect("num");
                    c.to_bits()
                })
                .collect();
            buckets.sort_by(|a, b| f64::from_bits(*a).total_cmp(&f64::from_bits(*b)));
            out.push((t, count, sum, buckets));
        }
    }
    out.sort_by_key(|p| p.0);
    out
}

/// The same of one of Sluice's histograms.
fn point(t: i64, h: HistSample) -> Point {
    let f = match h {
        HistSample::Int(h) => h.to_float(),
        HistSample::Float(h) => h,
    };
    let mut buckets: Vec<u64> = f
        .positive_buckets
        .iter()
        .chain(&f.negative_buckets)
        .chain(std::iter::once(&f.zero_count))
        .filter(|c| **c != 0.0)
        .map(|c| c.to_bits())
        .collect();
    buckets.sort_by(|a, b| f64::from_bits(*a).total_cmp(&f64::from_bits(*b)));
    (t, f.count, f.sum, buckets)
}

async fn prometheus_3_sends_native_histograms(protocol: &str) {
    let srv = start(Config::default()).await;
    let config = common::scrape_and_write_config(
        srv.addr,
        &format!(
            "    protobuf_message: {protocol}
    send_native_histograms: true
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
"
        ),
    );
    let prom = Prometheus::start3(&config, &["--enable-feature=native-histograms"]);
    prom.ready().await;
    let paddr = prom.addr();
    const NAME: &str = "prometheus_http_request_duration_seconds";
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut sent, mut failed);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, pm) = get(paddr.parse().expect("addr"), "/metrics").await;
        sent = metric_total(&pm, "prometheus_remote_storage_histograms_total");
        failed = metric_total(&pm, "prometheus_remote_storage_histograms_failed_total")
            + metric_total(&pm, "prometheus_remote_storage_histograms_dropped_total");
        // 15 scrapes of the one series compared sample by sample below, so
        // that the range queries span several rate windows (all series of
        // the name together reach 15 after two scrapes).
        let stored = common::stored_histograms(
            &srv,
            &[
                ("__name__", NAME),
                ("handler", "/metrics"),
                ("job", "prometheus"),
            ],
        )
        .len();
        if sent >= 20.0 && stored >= 15 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "timed out: Prometheus sent {sent} histograms (failed {failed}), Sluice holds {stored} of {NAME}; log: {}",
            prom.log()
        );
    }
    // Let what was scraped by now arrive.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        failed,
        0.0,
        "Prometheus failed or dropped histograms: {}",
        prom.log()
    );
    let (_, sm) = get(srv.addr, "/metrics").await;
    assert_eq!(
        metric_total(&sm, "sluice_rejected_samples_total"),
        0.0,
        "nothing rejected:\n{sm}"
    );
    // Every histogram Prometheus stored for the /metrics handler up to
    // Sluice's newest is in Sluice with the same timestamp, count, sum and
    // bucket counts.
    let ours: Vec<Point> = common::stored_histograms(
        &srv,
        &[
            ("__name__", NAME),
            ("handler", "/metrics"),
            ("job", "prometheus"),
        ],
    )
    .into_iter()
    .map(|(t, h)| point(t, h))
    .collect();
    assert!(ours.len() >= 5, "{ours:?}");
    let newest = ours.iter().map(|x| x.0).max().unwrap_or_default();
    let now = common::now_ms() as f64 / 1000.0;
    let theirs: Vec<Point> = prometheus_histograms(
        &paddr,
        &format!("{NAME}{{handler=\"/metrics\",job=\"prometheus\"}}"),
        "5m",
        now,
    )
    .await
    .into_iter()
    .filter(|x| x.0 <= newest)
    .collect();
    let oldest = ours.iter().map(|x| x.0).min().unwrap_or_default();
    let theirs: Vec<_> = theirs.into_iter().filter(|x| x.0 >= oldest).collect();
    assert_eq!(
        ours, theirs,
        "Sluice and Prometheus 3.5.3 hold the same histograms"
    );
    println!(
        "{protocol}: Prometheus sent {sent} histograms; {} of {NAME}{{handler=\"/metrics\"}} compared, equal",
        ours.len()
    );
    // The same queries, asked of both at a time both have every sample
    // for, answer the same.
    let at = (newest - 2000) as f64 / 1000.0;
    let range = (oldest as f64 / 1000.0 + 6.0, at, 1.0);
    let (compared, with_data, with_histograms) =
        differential(&paddr, &srv.addr.to_string(), NAME, at, range).await;
    println!(
        "{protocol}: {compared} answers as Prometheus 3.5.3 gives them; {with_data} with data, {with_histograms} with histograms"
    );
    // Sluice's own latency histograms, scraped by that Prometheus over
    // protobuf (native histograms on), are native histograms on both
    // sides and answer the same queries the same.
    let (own, _, own_histograms) = differential(
        &paddr,
        &srv.addr.to_string(),
        "sluice_http_request_duration_seconds",
        at,
        range,
    )
    .await;
    println!(
        "{protocol}: Sluice's own latency: {own} answers equal, {own_histograms} with histograms"
    );
    assert!(own_histograms >= 40, "{own_histograms} of {own}");
    // The overview dashboard's heatmap of that latency shows cells.
    let overview: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("dashboards/sluice-overview.json"),
        )
        .expect("the overview dashboard"),
    )
    .expect("JSON");
    let heatmap = overview["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["type"] == "heatmap")
        .expect("a heatmap panel");
    let expr = heatmap["targets"][0]["expr"]
        .as_str()
        .expect("expr")
        .replace("$job", ".*")
        .replace("$__rate_interval", "5s");
    let params = [
        ("query", expr.clone()),
        ("start", format!("{:.3}", range.0)),
        ("end", format!("{:.3}", range.1)),
        ("step", "1".to_owned()),
    ];
    let ours = common::api_json(&format!("http://{}/api/v1/query_range", srv.addr), &params).await;
    let theirs = common::api_json(&format!("http://{paddr}/api/v1/query_range"), &params).await;
    same_answer(&theirs, &ours).unwrap_or_else(|e| panic!("{expr}: {e}"));
    assert!(
        ours["data"]["result"][0]["histograms"]
            .as_array()
            .is_some_and(|h| !h.is_empty()),
        "{expr}: {ours}"
    );
    // Not a comparison of empty answers: only the five queries that drop
    // histograms (`max`, `topk`, `> 1`, `+ 1`, `max_over_time`) are empty.
    assert!(with_data >= compared - 10, "{with_data} of {compared}");
    assert!(with_histograms >= 40, "{with_histograms} of {compared}");
}

/// The PromQL over native histograms that dashboards ask (quantiles,
/// rates, aggregations, the `histogram_*` functions, arithmetic), with
/// `H` standing for the histogram metric.
const QUERIES: &[&str] = &[
    "H",
    "H{handler=\"/metrics\"}",
    "rate(H[5s])",
    "increase(H[10s])",
    "irate(H[5s])",
    "delta(H[5s])",
    "idelta(H[5s])",
    "histogram_quantile(0.9, rate(H[5s]))",
    "histogram_quantile(0.5, H)",
    "histogram_quantile(0.99, sum(rate(H[5s])))",
    "histogram_quantile(0.1, sum by (handler) (rate(H[10s])))",
    "histogram_count(rate(H[5s]))",
    "histogram_sum(H)",
    "histogram_avg(rate(H[10s]))",
    "histogram_fraction(0, 0.001, rate(H[10s]))",
    "histogram_fraction(0.0001, 1, H)",
    "histogram_stddev(H)",
    "histogram_stdvar(rate(H[10s]))",
    "sum(rate(H[5s]))",
    "sum by (handler) (H)",
    "avg(rate(H[5s]))",
    "avg by (code) (H)",
    "count(H)",
    "group(H)",
    "max(H)",
    "topk(1, H)",
    "H * 2",
    "0.5 * H",
    "H / 4",
    "H + H",
    "rate(H[5s]) - rate(H[10s])",
    "H > 1",
    "H + 1",
    "-H",
    "sum_over_time(H[5s])",
    "avg_over_time(H[5s])",
    "count_over_time(H[5s])",
    "last_over_time(H[5s])",
    "present_over_time(H[5s])",
    "max_over_time(H[5s])",
    "histogram_count(H) - sum by (handler, instance, job) (prometheus_http_requests_total)",
];

/// Asks both servers every query of [`QUERIES`], as an instant query at
/// `at` and as a range query over `range` (start, end, step in seconds),
/// and compares the answers; returns how many answers were compared, how
/// many held data and how many held histograms.
async fn differential(
    prometheus: &str,
    sluice: &str,
    name: &str,
    at: f64,
    (start, end, step): (f64, f64, f64),
) -> (usize, usize, usize) {
    let (mut compared, mut with_data, mut with_histograms) = (0, 0, 0);
    for q in QUERIES {
        let q = q.replace('H', name);
        let instant = [("query", q.clone()), ("time", format!("{at:.3}"))];
        let ranged = [
            ("query", q.clone()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", format!("{step}")),
        ];
        for (path, params) in [("query", &instant[..]), ("query_range", &ranged[..])] {
            let theirs =
                common::api_json(&format!("http://{prometheus}/api/v1/{path}"), params).await;
            let ours = common::api_json(&format!("http://{sluice}/api/v1/{path}"), params).await;
            if let Err(e) = same_answer(&theirs, &ours) {
                panic!("{path} {q}: {e}\nPrometheus: {theirs}\nSluice: {ours}");
            }
            compared += 1;
            let result = ours["data"]["result"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            with_data += usize::from(!result.is_empty());
            with_histograms += usize::from(
                result
                    .iter()
                    .any(|s| s.get("histogram").is_some() || s.get("histograms").is_some()),
            );
        }
    }
    (compared, with_data, with_histograms)
}

/// Whether two API answers agree: status, result type, the same series
/// (in any order), float values within 1e-9 (relative), histograms with
/// the same bucket boundaries exactly and counts within 1e-9, and the same
/// warnings and infos (Prometheus' position suffix aside).
fn same_answer(theirs: &serde_json::Value, ours: &serde_json::Value) -> Result<(), String> {
    if theirs["status"] != ours["status"] {
        return Err("status differs".into());
    }
    if theirs["data"]["resultType"] != ours["data"]["resultType"] {
        return Err("result type differs".into());
    }
    for kind in ["warnings", "infos"] {
        let strip = |v: &serde_json::Value| -> Vec<String> {
            let mut out: Vec<String> = v[kind]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|w| w.as_str())
                .map(|w| match w.rfind(" (") {
                    Some(i) if w.ends_with(')') && w[i + 2..w.len() - 1].contains(':') => {
                        w[..i].to_owned()
                    }
                    _ => w.to_owned(),
                })
                .collect();
            out.sort();
            out
        };
        if strip(theirs) != strip(ours) {
            return Err(format!("{kind} differ"));
        }
    }
    let series = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        let mut r: Vec<serde_json::Value> =
            v["data"]["result"].as_array().cloned().unwrap_or_default();
        r.sort_by_key(|s| s["metric"].to_string());
        r
    };
    let (a, b) = (series(theirs), series(ours));
    if a.len() != b.len() {
        return Err(format!("{} series against {}", a.len(), b.len()));
    }
    for (x, y) in a.iter().zip(&b) {
        if x["metric"] != y["metric"] {
            return Err(format!("labels {} against {}", x["metric"], y["metric"]));
        }
        for key in ["value", "histogram"] {
            same_point(&x[key], &y[key]).map_err(|e| format!("{}: {key}: {e}", x["metric"]))?;
        }
        for key in ["values", "histograms"] {
            let (p, q) = (
                x[key].as_array().cloned().unwrap_or_default(),
                y[key].as_array().cloned().unwrap_or_default(),
            );
            if p.len() != q.len() {
                return Err(format!(
                    "{}: {} {key} against {}",
                    x["metric"],
                    p.len(),
                    q.len()
                ));
            }
            for (m, n) in p.iter().zip(&q) {
                same_point(m, n).map_err(|e| format!("{}: {key}: {e}", x["metric"]))?;
            }
        }
    }
    Ok(())
}

/// `[t, "v"]` or `[t, {count, sum, buckets}]` on both sides alike.
fn same_point(a: &serde_json::Value, b: &serde_json::Value) -> Result<(), String> {
    let num = |v: &serde_json::Value| -> f64 {
        v.as_str().and_then(|s| s.parse().ok()).unwrap_or(f64::NAN)
    };
    let close = |x: f64, y: f64| {
        x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
    };
    if a.is_null() && b.is_null() {
        return Ok(());
    }
    if a[0] != b[0] {
        return Err(format!("time {} against {}", a[0], b[0]));
    }
    let (x, y) = (&a[1], &b[1]);
    if x.is_string() {
        return if close(num(x), num(y)) {
            Ok(())
        } else {
            Err(format!("{x} against {y}"))
        };
    }
    for key in ["count", "sum"] {
        if !close(num(&x[key]), num(&y[key])) {
            return Err(format!("{key} {} against {}", x[key], y[key]));
        }
    }
    let (p, q) = (
        x["buckets"].as_array().cloned().unwrap_or_default(),
        y["buckets"].as_array().cloned().unwrap_or_default(),
    );
    if p.len() != q.len() {
        return Err(format!("buckets {p:?} against {q:?}"));
    }
    for (m, n) in p.iter().zip(&q) {
        if m[0] != n[0] || m[1] != n[1] || m[2] != n[2] || !close(num(&m[3]), num(&n[3])) {
            return Err(format!("bucket {m} against {n}"));
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_native_histograms_over_remote_write_1_are_stored_exactly() {
    prometheus_3_sends_native_histograms("prometheus.WriteRequest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_native_histograms_over_remote_write_2_are_stored_exactly() {
    prometheus_3_sends_native_histograms("io.prometheus.write.v2.Request").await;
}
