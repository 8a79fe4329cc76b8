//! Remote-write 2.0 over real HTTP: hand-built requests for the rules of
//! the spec (references, symbols[0], samples or histograms, sorting,
//! partial writes), each reply's status, message and written-count
//! headers, and what the head holds afterwards.

mod common;

use common::{now_ms, start, stored, TestServer};
use prost::Message;
use sluice::config::Config;
use sluice::proto::io::prometheus::write::v2 as pb;

const V2: &str = "application/x-protobuf;proto=io.prometheus.write.v2.Request";

/// A reply: status, the three written counts, the version header, body.
#[derive(Debug)]
struct Reply {
    status: u16,
    written: (Option<u64>, Option<u64>, Option<u64>),
    version: String,
    text: String,
}

async fn push_v2(srv: &TestServer, req: &pb::Request) -> Reply {
    push_raw(srv, req.encode_to_vec()).await
}

async fn push_raw(srv: &TestServer, raw: Vec<u8>) -> Reply {
    let body = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("compress");
    let resp = reqwest::Client::new()
        .post(format!("http://{}/api/v1/write", srv.addr))
        .header("content-type", V2)
        .header("content-encoding", "snappy")
        .header("x-prometheus-remote-write-version", "2.0.0")
        .body(body)
        .send()
        .await
        .expect("sent");
    let h = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let written = (
        h("x-prometheus-remote-write-samples-written"),
        h("x-prometheus-remote-write-histograms-written"),
        h("x-prometheus-remote-write-exemplars-written"),
    );
    let version = resp
        .headers()
        .get("x-prometheus-remote-write-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Reply {
        status: resp.status().as_u16(),
        written,
        version,
        text: resp.text().await.expect("body"),
    }
}

/// A request over `symbols` (symbols[0] must be "" unless a test says).
struct Builder {
    symbols: Vec<String>,
    series: Vec<pb::TimeSeries>,
}

impl Builder {
    fn new() -> Self {
        Self {
            symbols: vec![String::new()],
            series: Vec::new(),
        }
    }

    fn sym(&mut self, s: &str) -> u32 {
        match self.symbols.iter().position(|x| x == s) {
            Some(i) => i as u32,
            None => {
                self.symbols.push(s.to_owned());
                (self.symbols.len() - 1) as u32
            }
        }
    }

    /// A series with labels in the given order and float samples.
    fn series(&mut self, labels: &[(&str, &str)], samples: &[(i64, f64)]) -> &mut pb::TimeSeries {
        let labels_refs = labels
            .iter()
            .flat_map(|&(n, v)| [self.sym(n), self.sym(v)])
            .collect();
        self.series.push(pb::TimeSeries {
            labels_refs,
            samples: samples
                .iter()
                .map(|&(timestamp, value)| pb::Sample {
                    value,
                    timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            ..Default::default()
        });
        self.series.last_mut().expect("just pushed")
    }

    fn build(&self) -> pb::Request {
        pb::Request {
            symbols: self.symbols.clone(),
            timeseries: self.series.clone(),
        }
    }
}

#[tokio::test]
async fn a_valid_request_is_stored_with_its_metadata_and_counted() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let mut b = Builder::new();
    let help = b.sym("Requests served.");
    let unit = b.sym("requests");
    b.series(
        &[("__name__", "http_requests_total"), ("job", "api")],
        &[(t, 1.0), (t + 15_000, 2.0)],
    )
    .metadata = Some(pb::Metadata {
        r#type: pb::metadata::MetricType::Counter as i32,
        help_ref: help,
        unit_ref: unit,
    });
    // Labels out of order, as the compliance suite's generator sends them.
    b.series(&[("job", "api"), ("__name__", "up")], &[(t, 1.0)]);
    let r = push_v2(&srv, &b.build()).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(r.written, (Some(3), Some(0), Some(0)));
    assert_eq!(r.version, "2.0.0");
    assert_eq!(
        stored(&srv, "http_requests_total"),
        vec![(t, 1.0), (t + 15_000, 2.0)]
    );
    assert_eq!(stored(&srv, "up"), vec![(t, 1.0)]);

    // The same series again: found by their label bytes, nothing new made.
    let series_before = srv.state.db().head_stats().series;
    let mut b2 = Builder::new();
    b2.series(
        &[("__name__", "http_requests_total"), ("job", "api")],
        &[(t + 30_000, 3.0)],
    );
    b2.series(&[("job", "api"), ("__name__", "up")], &[(t + 15_000, 1.0)]);
    let r = push_v2(&srv, &b2.build()).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(r.written.0, Some(2));
    assert_eq!(srv.state.db().head_stats().series, series_before);
    assert_eq!(stored(&srv, "up").len(), 2);

    let md = srv.state.metadata().list(Some("http_requests_total"), 0, 0);
    let entry = md
        .first()
        .expect("metadata recorded")
        .1
        .first()
        .expect("one entry");
    assert_eq!(
        (entry.kind, entry.help.as_str(), entry.unit.as_str()),
        ("counter", "Requests served.", "requests")
    );
}

/// A known series is found by a key mixed from its symbols, not from its
/// references: the same labels under another symbol order find it, and the
/// same references into other symbols do not.
#[tokio::test]
async fn a_known_series_is_found_by_its_labels_not_its_references() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let request = |symbols: &[&str], refs: &[u32], at: i64| pb::Request {
        symbols: symbols.iter().map(|s| (*s).to_owned()).collect(),
        timeseries: vec![pb::TimeSeries {
            labels_refs: refs.to_vec(),
            samples: vec![pb::Sample {
                value: 1.0,
                timestamp: at,
                start_timestamp: 0,
            }],
            ..Default::default()
        }],
    };
    let first = request(&["", "__name__", "a", "job", "x"], &[1, 2, 3, 4], t);
    assert_eq!(push_v2(&srv, &first).await.status, 204);
    assert!(!srv.state.db().aliases_empty(), "its key is kept");
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert!(
        common::metric_value(&metrics, "sluice_series_aliases_bytes").is_some_and(|b| b >= 32.0),
        "the aliases' memory is shown"
    );
    // The same labels, other references.
    let moved = request(&["", "x", "job", "a", "__name__"], &[4, 3, 2, 1], t + 1);
    assert_eq!(push_v2(&srv, &moved).await.status, 204);
    assert_eq!(srv.state.db().head_stats().series, 1);
    assert_eq!(stored(&srv, "a"), vec![(t, 1.0), (t + 1, 1.0)]);
    // The same references, another name: a new series.
    let other = request(&["", "__name__", "b", "job", "x"], &[1, 2, 3, 4], t + 2);
    assert_eq!(push_v2(&srv, &other).await.status, 204);
    assert_eq!(srv.state.db().head_stats().series, 2);
    assert_eq!(stored(&srv, "a").len(), 2);
    assert_eq!(stored(&srv, "b"), vec![(t + 2, 1.0)]);
    // Retention removes "a" and rebuilds its shard: slots move, so every
    // alias is forgotten, and "b" is still found as itself.
    let _ = push_v2(&srv, &other).await;
    let removed = srv.state.db().apply_retention(t + 2);
    assert_eq!(removed.series, 1);
    assert!(srv.state.db().aliases_empty());
    let again = request(&["", "job", "x", "__name__", "b"], &[3, 4, 1, 2], t + 3);
    assert_eq!(push_v2(&srv, &again).await.status, 204);
    let again = request(&["", "job", "x", "__name__", "b"], &[3, 4, 1, 2], t + 4);
    assert_eq!(push_v2(&srv, &again).await.status, 204);
    assert_eq!(srv.state.db().head_stats().series, 1);
    assert_eq!(
        stored(&srv, "b"),
        vec![(t + 2, 1.0), (t + 3, 1.0), (t + 4, 1.0)]
    );
}

#[tokio::test]
async fn a_partial_write_stores_the_valid_series_and_names_the_rest() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let mut b = Builder::new();
    b.series(&[("__name__", "ok_a")], &[(t, 1.0), (t + 1000, 2.0)]);
    // 1: a reference past the symbols table.
    b.series(&[("__name__", "bad_ref")], &[(t, 1.0)])
        .labels_refs[1] = 999;
    // 2: both samples and histograms.
    b.series(&[("__name__", "both")], &[(t, 1.0)])
        .histograms
        .push(pb::Histogram::default());
    // 3: neither.
    b.series(&[("__name__", "neither")], &[]);
    // 4: a native histogram series: stored.
    b.series(&[("__name__", "hist")], &[])
        .histograms
        .push(pb::Histogram {
            count: Some(pb::histogram::Count::CountInt(3)),
            schema: 0,
            positive_spans: vec![pb::BucketSpan {
                offset: 0,
                length: 2,
            }],
            positive_deltas: vec![1, 1],
            timestamp: t,
            ..Default::default()
        });
    // 5: duplicate label names.
    b.series(&[("__name__", "dup"), ("a", "1"), ("a", "2")], &[(t, 1.0)]);
    // 6: out of order within the series: the first sample is stored.
    b.series(&[("__name__", "ooo")], &[(t + 1000, 1.0), (t, 2.0)]);
    // 7: a histogram whose count disagrees with its buckets.
    b.series(&[("__name__", "bad_hist")], &[])
        .histograms
        .push(pb::Histogram {
            count: Some(pb::histogram::Count::CountInt(5)),
            positive_spans: vec![pb::BucketSpan {
                offset: 0,
                length: 1,
            }],
            positive_deltas: vec![1],
            timestamp: t,
            ..Default::default()
        });
    let r = push_v2(&srv, &b.build()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.written, (Some(3), Some(1), Some(0)), "{}", r.text);
    for needle in [
        "series 1:",
        "outside the symbols table",
        "series 2:",
        "both float samples and histograms",
        "invalid_native_histogram: 1",
        "invalid_series: 3",
        "duplicate_label_name: 1",
        "out_of_order: 1",
    ] {
        assert!(r.text.contains(needle), "missing {needle:?} in {}", r.text);
    }
    assert_eq!(stored(&srv, "ok_a").len(), 2);
    assert_eq!(stored(&srv, "ooo"), vec![(t + 1000, 1.0)]);
    let all = sluice::storage::index::Matcher::new(
        sluice::storage::index::MatchOp::Equal,
        "__name__",
        "hist",
    )
    .expect("matcher");
    let hist = srv.state.db().querier().select(&[all], i64::MIN, i64::MAX);
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].histograms.len(), 1, "the histogram is stored");
    assert_eq!(hist[0].histograms[0].0, t);
    for gone in ["bad_ref", "both", "neither", "bad_hist", "dup"] {
        assert!(stored(&srv, gone).is_empty(), "{gone} was stored");
    }
}

#[tokio::test]
async fn a_request_breaking_a_whole_request_rule_stores_nothing() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;

    let mut b = Builder::new();
    b.series(&[("__name__", "first_symbol")], &[(t, 1.0)]);
    let mut req = b.build();
    req.symbols[0] = "oops".to_owned();
    let r = push_v2(&srv, &req).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("symbols[0] must be the empty string"),
        "{}",
        r.text
    );
    assert_eq!(r.written, (Some(0), Some(0), Some(0)));

    let mut raw = b.build().encode_to_vec();
    raw.truncate(raw.len() - 3);
    let r = push_raw(&srv, raw).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("io.prometheus.write.v2.Request"),
        "{}",
        r.text
    );
    assert_eq!(r.written.0, Some(0));
    assert!(stored(&srv, "first_symbol").is_empty());

    // A series with no samples alone still makes the reply an error.
    let mut b = Builder::new();
    b.series(&[("__name__", "empty")], &[]);
    let r = push_v2(&srv, &b.build()).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("neither samples nor histograms"),
        "{}",
        r.text
    );

    // Afterwards a good request is stored.
    let mut b = Builder::new();
    b.series(&[("__name__", "first_symbol")], &[(t, 1.0)]);
    let r = push_v2(&srv, &b.build()).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(stored(&srv, "first_symbol"), vec![(t, 1.0)]);
}

#[tokio::test]
async fn exemplars_are_stored_counted_and_served_as_prometheus_serves_them() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let mut b = Builder::new();
    let trace = b.sym("trace_id");
    let id1 = b.sym("4bf92f3577b34da6a3ce929d0e0e4736");
    let id2 = b.sym("00f067aa0ba902b7");
    b.series(
        &[
            ("__name__", "http_request_duration_seconds_bucket"),
            ("le", "0.5"),
        ],
        &[(t, 10.0), (t + 15_000, 12.0)],
    )
    .exemplars = vec![
        pb::Exemplar {
            labels_refs: vec![trace, id1],
            value: 0.31,
            timestamp: t,
        },
        pb::Exemplar {
            labels_refs: vec![trace, id2],
            value: 0.42,
            timestamp: t + 15_000,
        },
        // The same as the one before: a duplicate, not stored again.
        pb::Exemplar {
            labels_refs: vec![trace, id2],
            value: 0.42,
            timestamp: t + 15_000,
        },
    ];
    let r = push_v2(&srv, &b.build()).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(r.written, (Some(2), Some(0), Some(2)));

    // A 1.0 request's exemplars too.
    let mut ts = common::series(&[("__name__", "rpc_total")], &[(t, 1.0)]);
    ts.exemplars.push(sluice::proto::prometheus::Exemplar {
        labels: vec![sluice::proto::prometheus::Label {
            name: "trace_id".into(),
            value: "abc".into(),
        }],
        value: 1.0,
        timestamp: t,
    });
    let (code, text) = common::push(srv.addr, common::body(vec![ts])).await;
    assert_eq!(code, 204, "{text}");

    let (code, body) = common::get(
        srv.addr,
        &format!(
            "/api/v1/query_exemplars?query={}&start={}&end={}",
            "rate(http_request_duration_seconds_bucket%5B5m%5D)%20or%20rpc_total",
            (t - 1000) as f64 / 1000.0,
            (t + 60_000) as f64 / 1000.0
        ),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        v,
        serde_json::json!({"status": "success", "data": [
            {
                "seriesLabels": {"__name__": "http_request_duration_seconds_bucket", "le": "0.5"},
                "exemplars": [
                    {"labels": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}, "value": "0.31", "timestamp": t as f64 / 1000.0},
                    {"labels": {"trace_id": "00f067aa0ba902b7"}, "value": "0.42", "timestamp": (t + 15_000) as f64 / 1000.0},
                ]
            },
            {
                "seriesLabels": {"__name__": "rpc_total"},
                "exemplars": [{"labels": {"trace_id": "abc"}, "value": "1", "timestamp": t as f64 / 1000.0}]
            },
        ]})
    );
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert_eq!(
        common::metric_value(
            &metrics,
            r#"sluice_ingested_exemplars_total{protocol="remote_write_2"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        common::metric_value(
            &metrics,
            r#"sluice_rejected_exemplars_total{protocol="remote_write_2",reason="duplicate"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        common::metric_value(&metrics, "sluice_exemplars"),
        Some(3.0)
    );
}

/// Cases of prometheus/compliance `remotewrite/receiver` (metric.go,
/// exemplars.go, request_validation.go), as facts our receiver must meet:
/// (labels, value, exemplar labels, expected status, samples written,
/// exemplars written).
#[tokio::test]
async fn the_compliance_suites_cases_hold() {
    let srv = start(Config::default()).await;
    let stale = f64::from_bits(sluice::storage::STALE_NAN);
    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        Vec<(&str, &str)>,
        f64,
        Vec<(&str, &str)>,
        u16,
        u64,
        u64,
    )> = vec![
        ("simple", vec![("__name__", "up")], 1.0, vec![], 204, 1, 0),
        (
            "stale NaN",
            vec![("__name__", "up_stale")],
            stale,
            vec![],
            204,
            1,
            0,
        ),
        (
            "NaN",
            vec![("__name__", "up_nan")],
            f64::NAN,
            vec![],
            204,
            1,
            0,
        ),
        (
            "+Inf",
            vec![("__name__", "up_inf")],
            f64::INFINITY,
            vec![],
            204,
            1,
            0,
        ),
        (
            "-Inf",
            vec![("__name__", "up_ninf")],
            f64::NEG_INFINITY,
            vec![],
            204,
            1,
            0,
        ),
        (
            "newlines in a value",
            vec![("__name__", "up_nl"), ("job", "test\njob\n")],
            1.0,
            vec![],
            204,
            1,
            0,
        ),
        ("no name", vec![("job", "testjob")], 1.0, vec![], 400, 0, 0),
        ("no labels", vec![], 1.0, vec![], 400, 0, 0),
        (
            "exemplar with trace and span",
            vec![("__name__", "request_duration_seconds"), ("method", "GET")],
            0.125,
            vec![("trace_id", "xyz789"), ("span_id", "span123")],
            204,
            1,
            1,
        ),
        (
            "exemplar without labels",
            vec![("__name__", "simple_counter")],
            1.0,
            vec![],
            204,
            1,
            1,
        ),
        (
            "exemplar with unicode",
            vec![("__name__", "unicode_test"), ("region", "🌍")],
            100.0,
            vec![("trace_id", "unicode_trace_测试")],
            204,
            1,
            1,
        ),
        (
            "exemplar NaN",
            vec![("__name__", "ex_nan")],
            f64::NAN,
            vec![("trace_id", "special_value_trace")],
            204,
            1,
            1,
        ),
        (
            "exemplar of a series without a name",
            vec![("job", "test")],
            1.0,
            vec![("trace_id", "test_trace")],
            400,
            0,
            0,
        ),
    ];
    let t = now_ms() - 60_000;
    for (what, labels, value, exemplar, status, samples, exemplars) in cases {
        let mut b = Builder::new();
        let refs: Vec<u32> = exemplar
            .iter()
            .flat_map(|&(n, v)| [b.sym(n), b.sym(v)])
            .collect();
        // "exemplar without labels" carries one with none.
        let with_exemplar = !exemplar.is_empty() || what == "exemplar without labels";
        let ts = b.series(&labels, &[(t, value)]);
        if with_exemplar {
            ts.exemplars.push(pb::Exemplar {
                labels_refs: refs,
                value,
                timestamp: t,
            });
        }
        let r = push_v2(&srv, &b.build()).await;
        assert_eq!(r.status, status, "{what}: {}", r.text);
        assert_eq!(
            r.written,
            (Some(samples), Some(0), Some(exemplars)),
            "{what}: {}",
            r.text
        );
    }
    // Content-Type and Content-Encoding the receiver does not speak: 415.
    for (name, value) in [
        ("content-type", "application/json"),
        ("content-type", "image/png"),
        ("content-encoding", "gzip"),
        ("content-encoding", "deflate"),
    ] {
        let (code, text) = common::push_with(
            srv.addr,
            b"0 corrupt".to_vec(),
            &[("content-type", V2), (name, value)],
        )
        .await;
        assert_eq!(code, 415, "{name}: {value}: {text}");
    }
    // A corrupt body: 4xx.
    let (code, _) = common::push_with(srv.addr, b"0orrupt".to_vec(), &[("content-type", V2)]).await;
    assert_eq!(code, 400);
}

/// `--created-timestamp-zero-ingestion`: a zero sample at the start time,
/// when it is before the first sample and newer than the series' last;
/// refused quietly otherwise; neither counted as written. Off by default.
#[tokio::test]
async fn start_timestamps_become_zero_samples_when_asked() {
    let t = now_ms() - 120_000;
    let request = |name: &str, start: i64, at: i64, v: f64, per_sample: bool| {
        let mut b = Builder::new();
        let ts = b.series(&[("__name__", name)], &[(at, v)]);
        if per_sample {
            ts.samples[0].start_timestamp = start;
        } else {
            ts.created_timestamp = start;
        }
        b.build()
    };
    let on = start(Config {
        created_timestamp_zero_ingestion: true,
        ..Config::default()
    })
    .await;
    for (name, per_sample) in [("st_sample_total", true), ("ct_series_total", false)] {
        let r = push_v2(&on, &request(name, t - 30_000, t, 5.0, per_sample)).await;
        assert_eq!(r.status, 204, "{}", r.text);
        assert_eq!(r.written.0, Some(1), "the zero sample is not the sender's");
        // The same start again: the series is past it; quietly not stored.
        let r = push_v2(&on, &request(name, t - 30_000, t + 15_000, 7.0, per_sample)).await;
        assert_eq!(r.status, 204, "{}", r.text);
        assert_eq!(r.written.0, Some(1));
        assert_eq!(
            stored(&on, name),
            vec![(t - 30_000, 0.0), (t, 5.0), (t + 15_000, 7.0)],
            "{name}"
        );
    }
    // A start at or after the sample adds nothing.
    let r = push_v2(&on, &request("late_start_total", t, t, 1.0, true)).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(stored(&on, "late_start_total"), vec![(t, 1.0)]);

    let off = start(Config::default()).await;
    let r = push_v2(&off, &request("st_sample_total", t - 30_000, t, 5.0, true)).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(stored(&off, "st_sample_total"), vec![(t, 5.0)]);
}
