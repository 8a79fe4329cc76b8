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
    // Queries do not read them yet, and say so rather than answer as if
    // the series were empty.
    let v = common::api_json(
        &format!("http://{}/api/v1/query", srv.addr),
        &[
            ("query", "rpc_seconds".to_owned()),
            ("time", format!("{:.3}", (t + 2000) as f64 / 1000.0)),
        ],
    )
    .await;
    assert_eq!(v["data"]["result"], serde_json::json!([]), "{v}");
    assert!(
        v["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("native histogram samples of metric name \"rpc_seconds\"")),
        "{v}"
    );
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
        let stored = stored_histograms(&srv, NAME).len();
        if sent >= 20.0 && stored >= 8 {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_native_histograms_over_remote_write_1_are_stored_exactly() {
    prometheus_3_sends_native_histograms("prometheus.WriteRequest").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_native_histograms_over_remote_write_2_are_stored_exactly() {
    prometheus_3_sends_native_histograms("io.prometheus.write.v2.Request").await;
}
