//! The OTLP/HTTP receiver over real HTTP: every metric type lands under the
//! names Prometheus' OTLP receiver gives it, and bad input gets the OTLP
//! reply it should while the valid rest of the request is stored.

mod common;

use std::collections::BTreeMap;
use std::io::Write as _;

use prost::Message;
use serde_json::Value;
use sluice::config::Config;
use sluice::histogram::{HistSample, Span};
use sluice::proto::google::rpc::Status;
use sluice::proto::opentelemetry::proto::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use sluice::proto::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
use sluice::proto::opentelemetry::proto::metrics::v1::{
    self as m, exponential_histogram_data_point::Buckets, metric::Data, number_data_point,
    summary_data_point::ValueAtQuantile,
};
use sluice::proto::opentelemetry::proto::resource::v1::Resource;

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn ns(ms: i64) -> u64 {
    ms as u64 * 1_000_000
}

fn number(attrs: Vec<KeyValue>, t_ms: i64, v: number_data_point::Value) -> m::NumberDataPoint {
    m::NumberDataPoint {
        attributes: attrs,
        time_unix_nano: ns(t_ms),
        value: Some(v),
        ..Default::default()
    }
}

fn metric(name: &str, unit: &str, data: Data) -> m::Metric {
    m::Metric {
        name: name.into(),
        unit: unit.into(),
        description: format!("{name} help"),
        data: Some(data),
        ..Default::default()
    }
}

fn gauge(points: Vec<m::NumberDataPoint>) -> Data {
    Data::Gauge(m::Gauge {
        data_points: points,
    })
}

fn sum(points: Vec<m::NumberDataPoint>, temporality: i32, monotonic: bool) -> Data {
    Data::Sum(m::Sum {
        data_points: points,
        aggregation_temporality: temporality,
        is_monotonic: monotonic,
    })
}

fn request(resource: Vec<KeyValue>, metrics: Vec<m::Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![m::ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![m::ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn service() -> Vec<KeyValue> {
    vec![
        kv("service.name", "checkout"),
        kv("service.namespace", "shop"),
        kv("service.instance.id", "pod-1"),
        kv("host.name", "node-a"),
        kv("cloud.region", "eu-west-1"),
    ]
}

struct Reply {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    body: Vec<u8>,
    headers: &[(&str, &str)],
) -> Reply {
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .body(body);
    for &(k, v) in headers {
        req = req.header(k, v);
    }
    let resp = req.send().await.expect("sent");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = resp.bytes().await.expect("body").to_vec();
    Reply {
        status,
        content_type,
        body,
    }
}

async fn export(addr: std::net::SocketAddr, req: &ExportMetricsServiceRequest) -> Reply {
    post(
        addr,
        "/v1/metrics",
        req.encode_to_vec(),
        &[("content-type", "application/x-protobuf")],
    )
    .await
}

fn response(r: &Reply) -> ExportMetricsServiceResponse {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.content_type, "application/x-protobuf");
    ExportMetricsServiceResponse::decode(r.body.as_slice()).expect("response decodes")
}

async fn query(
    addr: std::net::SocketAddr,
    q: impl Into<String>,
    t_ms: i64,
) -> Vec<(BTreeMap<String, String>, String)> {
    common::query_vector(addr, &q.into(), Some(t_ms as f64 / 1000.0)).await
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn every_metric_type_lands_under_prometheus_names() {
    let srv = common::start(Config {
        otlp_exponential_histograms_as_classic: false,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    let attrs = || vec![kv("http.route", "/cart"), kv("0ops", "x")];
    let req = request(
        service(),
        vec![
            metric(
                "http.server.requests",
                "{request}",
                sum(
                    vec![number(attrs(), t, number_data_point::Value::AsInt(42))],
                    2,
                    true,
                ),
            ),
            metric(
                "queue.items",
                "{item}",
                sum(
                    vec![number(attrs(), t, number_data_point::Value::AsInt(-3))],
                    2,
                    false,
                ),
            ),
            metric(
                "cpu.utilization",
                "1",
                gauge(vec![number(
                    attrs(),
                    t,
                    number_data_point::Value::AsDouble(0.25),
                )]),
            ),
            metric(
                "http.server.request.duration",
                "s",
                Data::Histogram(m::Histogram {
                    data_points: vec![m::HistogramDataPoint {
                        attributes: attrs(),
                        time_unix_nano: ns(t),
                        count: 10,
                        sum: Some(4.5),
                        bucket_counts: vec![2, 3, 5],
                        explicit_bounds: vec![0.1, 1.0],
                        ..Default::default()
                    }],
                    aggregation_temporality: 2,
                }),
            ),
            metric(
                "rpc.latency",
                "ms",
                Data::Summary(m::Summary {
                    data_points: vec![m::SummaryDataPoint {
                        attributes: attrs(),
                        time_unix_nano: ns(t),
                        count: 4,
                        sum: 10.0,
                        quantile_values: vec![
                            ValueAtQuantile {
                                quantile: 0.5,
                                value: 2.0,
                            },
                            ValueAtQuantile {
                                quantile: 0.99,
                                value: 4.0,
                            },
                        ],
                        ..Default::default()
                    }],
                }),
            ),
            metric(
                "payload.size",
                "By",
                Data::ExponentialHistogram(m::ExponentialHistogram {
                    data_points: vec![m::ExponentialHistogramDataPoint {
                        attributes: attrs(),
                        time_unix_nano: ns(t),
                        count: 9,
                        sum: Some(100.0),
                        scale: 0,
                        zero_count: 1,
                        positive: Some(Buckets {
                            offset: 1,
                            bucket_counts: vec![3, 4],
                        }),
                        negative: Some(Buckets {
                            offset: 0,
                            bucket_counts: vec![1],
                        }),
                        ..Default::default()
                    }],
                    aggregation_temporality: 2,
                }),
            ),
        ],
    );
    let r = export(srv.addr, &req).await;
    assert_eq!(response(&r), ExportMetricsServiceResponse::default());

    let base = [
        ("http_route", "/cart"),
        ("key_0ops", "x"),
        ("job", "shop/checkout"),
        ("instance", "pod-1"),
    ];
    let with = |name: &str, extra: &[(&str, &str)]| {
        let mut l = labels(&base);
        l.insert("__name__".into(), name.into());
        for (k, v) in extra {
            l.insert((*k).into(), (*v).into());
        }
        l
    };
    let q = |s: &str| query(srv.addr, s.to_owned(), t);
    assert_eq!(
        q("http_server_requests_total").await,
        vec![(with("http_server_requests_total", &[]), "42".into())]
    );
    assert_eq!(
        q("queue_items").await,
        vec![(with("queue_items", &[]), "-3".into())]
    );
    assert_eq!(
        q("cpu_utilization_ratio").await,
        vec![(with("cpu_utilization_ratio", &[]), "0.25".into())]
    );
    let h = "http_server_request_duration_seconds";
    assert_eq!(q(&format!("{{__name__=~\"{h}.*\"}}")).await, {
        let mut v = vec![
            (with(&format!("{h}_bucket"), &[("le", "+Inf")]), "10".into()),
            (with(&format!("{h}_bucket"), &[("le", "0.1")]), "2".into()),
            (with(&format!("{h}_bucket"), &[("le", "1")]), "5".into()),
            (with(&format!("{h}_count"), &[]), "10".into()),
            (with(&format!("{h}_sum"), &[]), "4.5".into()),
        ];
        v.sort();
        v
    });
    // histogram_quantile works on the translated buckets.
    let p50 = q(&format!("histogram_quantile(0.5, {h}_bucket)")).await;
    assert_eq!(p50.len(), 1);
    // Rank 5 falls at the top of (0.1, 1]: 0.1 + 0.9 * (5 - 2) / 3.
    assert_eq!(p50[0].1, "1");

    assert_eq!(q("rpc_latency_milliseconds").await, {
        let mut v = vec![
            (
                with("rpc_latency_milliseconds", &[("quantile", "0.5")]),
                "2".into(),
            ),
            (
                with("rpc_latency_milliseconds", &[("quantile", "0.99")]),
                "4".into(),
            ),
        ];
        v.sort();
        v
    });
    assert_eq!(
        q("rpc_latency_milliseconds_sum").await[0].1,
        "10".to_owned()
    );
    assert_eq!(
        q("rpc_latency_milliseconds_count").await[0].1,
        "4".to_owned()
    );

    // Exponential, scale 0 (base 2): a native histogram, as Prometheus'
    // receiver makes it. OTLP bucket i holds (2^i, 2^(i+1)], native bucket
    // i holds (2^(i-1), 2^i]: the offsets move up by one.
    let stored = exponential_as_stored(&srv, "payload_size_bytes");
    assert_eq!(stored.len(), 1, "{stored:?}");
    let HistSample::Int(h) = &stored[0].1 else {
        panic!("an integer histogram: {stored:?}")
    };
    assert_eq!(stored[0].0, t);
    assert_eq!((h.schema, h.count, h.zero_count, h.sum), (0, 9, 1, 100.0));
    assert_eq!(h.zero_threshold, 1e-128);
    assert_eq!(
        h.positive_spans,
        [Span {
            offset: 2,
            length: 2
        }]
    );
    assert_eq!(h.positive_buckets, [3, 1]);
    assert_eq!(
        h.negative_spans,
        [Span {
            offset: 1,
            length: 1
        }]
    );
    assert_eq!(h.negative_buckets, [1]);
    assert!(
        q("payload_size_bytes_bucket").await.is_empty(),
        "no classic buckets"
    );

    // target_info carries the non-identifying resource attributes.
    assert_eq!(
        q("target_info").await,
        vec![(
            labels(&[
                ("__name__", "target_info"),
                ("job", "shop/checkout"),
                ("instance", "pod-1"),
                ("host_name", "node-a"),
                ("cloud_region", "eu-west-1"),
            ]),
            "1".into()
        )]
    );

    // Metadata, with Prometheus' unit words.
    let (_, md) = common::get(srv.addr, "/api/v1/metadata").await;
    let md: Value = serde_json::from_str(&md).expect("json");
    assert_eq!(
        md["data"]["http_server_request_duration_seconds"][0],
        serde_json::json!({"type": "histogram", "help": "http.server.request.duration help", "unit": "seconds"})
    );
    assert_eq!(
        md["data"]["http_server_requests_total"][0]["type"],
        "counter"
    );
    assert_eq!(md["data"]["payload_size_bytes"][0]["type"], "histogram");
    assert_eq!(md["data"]["target_info"][0]["type"], "gauge");

    // Self-metrics count OTLP samples: 1+1+1 + 5 + 4 + 1 (+1 target_info).
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert_eq!(
        common::metric_value(&metrics, "sluice_ingested_samples_total{protocol=\"otlp\"}"),
        Some(14.0),
        "{metrics}"
    );
}

/// The native histograms stored under `name`.
fn exponential_as_stored(srv: &common::TestServer, name: &str) -> Vec<(i64, HistSample)> {
    common::stored_histograms(srv, &[("__name__", name)])
}

/// An exponential histogram point of scale `scale` with positive buckets
/// `counts` from `offset`.
fn exponential(t: i64, scale: i32, offset: i32, counts: Vec<u64>) -> ExportMetricsServiceRequest {
    // The zero bucket and one negative observation besides.
    let count = counts.iter().sum::<u64>() + 2;
    request(
        service(),
        vec![metric(
            "payload.size",
            "By",
            Data::ExponentialHistogram(m::ExponentialHistogram {
                data_points: vec![m::ExponentialHistogramDataPoint {
                    time_unix_nano: ns(t),
                    count,
                    sum: Some(100.0),
                    scale,
                    zero_count: 1,
                    positive: Some(Buckets {
                        offset,
                        bucket_counts: counts,
                    }),
                    negative: Some(Buckets {
                        offset: 0,
                        bucket_counts: vec![1],
                    }),
                    ..Default::default()
                }],
                aggregation_temporality: 2,
            }),
        )],
    )
}

#[tokio::test]
async fn exponential_histograms_above_scale_8_are_merged_down_and_below_minus_4_refused() {
    let srv = common::start(Config {
        otlp_exponential_histograms_as_classic: false,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    // Scale 10 is merged down to 8: every 4 OTLP buckets (from index 8 on)
    // become one native bucket, 3 and 4 OTLP bucket indexes apart from 1.
    let r = export(
        srv.addr,
        &exponential(t, 10, 6, vec![1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
    )
    .await;
    assert_eq!(response(&r), ExportMetricsServiceResponse::default());
    let stored = exponential_as_stored(&srv, "payload_size_bytes");
    let HistSample::Int(h) = &stored[0].1 else {
        panic!("an integer histogram: {stored:?}")
    };
    assert_eq!(h.schema, 8);
    // OTLP indexes 6..=15 >> 2 are 1,1,2,2,2,2,3,3,3,3: native buckets 2,3,4
    // with 2, 4 and 4 observations.
    assert_eq!(
        h.positive_spans,
        [Span {
            offset: 2,
            length: 3
        }]
    );
    assert_eq!(h.positive_buckets, [2, 2, 0]);
    assert_eq!(h.count, 12);
    let r = export(srv.addr, &exponential(t + 1000, -5, 0, vec![1])).await;
    let text = format!("{:?}", response(&r));
    assert!(text.contains("scale must be >= -4, was -5"), "{text}");
    // An absurd scale merges everything into one bucket per sign, as Go's
    // shifts do; it is stored, not a panic.
    let r = export(srv.addr, &exponential(t + 2000, 1_000_000, 7, vec![1, 2])).await;
    assert_eq!(response(&r), ExportMetricsServiceResponse::default());
    let stored = exponential_as_stored(&srv, "payload_size_bytes");
    let HistSample::Int(h) = &stored.last().expect("stored").1 else {
        panic!("an integer histogram: {stored:?}")
    };
    assert_eq!((h.schema, h.count), (8, 5));
    assert_eq!(
        h.positive_spans,
        [Span {
            offset: 1,
            length: 1
        }]
    );
}

#[tokio::test]
async fn exponential_histograms_become_classic_buckets_with_the_flag() {
    let srv = common::start(Config {
        otlp_exponential_histograms_as_classic: true,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    let r = export(srv.addr, &exponential(t, 0, 1, vec![3, 4])).await;
    assert_eq!(response(&r), ExportMetricsServiceResponse::default());
    let q = |s: &str| query(srv.addr, s.to_owned(), t);
    // Scale 0 (base 2): negative bucket 0 holds [-2, -1), the zero bucket,
    // positive buckets 1 and 2 hold (2, 4] and (4, 8].
    let labels_of = |le: &str| {
        let mut l = labels(&[("job", "shop/checkout"), ("instance", "pod-1")]);
        l.insert("__name__".into(), "payload_size_bytes_bucket".into());
        l.insert("le".into(), le.into());
        l
    };
    let e = "payload_size_bytes_bucket";
    assert_eq!(q(e).await, {
        let mut v = vec![
            (labels_of("-1"), "1".into()),
            (labels_of("0"), "2".into()),
            (labels_of("4"), "5".into()),
            (labels_of("8"), "9".into()),
            (labels_of("+Inf"), "9".into()),
        ];
        v.sort();
        v
    });
    assert_eq!(q("payload_size_bytes_sum").await[0].1, "100".to_owned());
    assert!(exponential_as_stored(&srv, "payload_size_bytes").is_empty());
}

#[tokio::test]
async fn promoted_attributes_and_stale_points() {
    let srv = common::start(Config {
        otlp_promote_resource_attributes: vec!["cloud.region".into(), "service.name".into()],
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    let mut stale = number(
        vec![kv("job", "overridden"), kv("cloud.region", "attr-wins")],
        t + 1000,
        number_data_point::Value::AsDouble(1.0),
    );
    stale.flags = 1;
    let req = request(
        service(),
        vec![metric(
            "up.ish",
            "",
            gauge(vec![
                number(
                    vec![kv("job", "overridden"), kv("cloud.region", "attr-wins")],
                    t,
                    number_data_point::Value::AsDouble(1.0),
                ),
                stale,
            ]),
        )],
    );
    response(&export(srv.addr, &req).await);
    let got = query(srv.addr, "up_ish", t).await;
    assert_eq!(
        got,
        vec![(
            labels(&[
                ("__name__", "up_ish"),
                ("job", "shop/checkout"),
                ("instance", "pod-1"),
                ("cloud_region", "attr-wins"),
                ("service_name", "checkout"),
            ]),
            "1".into()
        )]
    );
    // The NO_RECORDED_VALUE point is a stale marker: the series is gone.
    assert!(query(srv.addr, "up_ish", t + 2000).await.is_empty());
}

#[tokio::test]
async fn json_bodies_and_gzip_work_like_protobuf() {
    let srv = common::start(Config::default()).await;
    let t = common::now_ms() - 60_000;
    let json = format!(
        r#"{{"resourceMetrics":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"api"}}}}]}},
        "scopeMetrics":[{{"metrics":[
          {{"name":"jobs.done","unit":"1","sum":{{"aggregationTemporality":2,"isMonotonic":true,
            "dataPoints":[{{"asInt":"7","timeUnixNano":"{}"}}]}}}},
          {{"name":"jobs.delta","sum":{{"aggregationTemporality":1,"isMonotonic":true,
            "dataPoints":[{{"asInt":"1","timeUnixNano":"{}"}}]}}}}]}}]}}]}}"#,
        ns(t),
        ns(t)
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json.as_bytes()).expect("gzip");
    let r = post(
        srv.addr,
        "/api/v1/otlp/v1/metrics",
        gz.finish().expect("gzip"),
        &[
            ("content-type", "application/json"),
            ("content-encoding", "gzip"),
        ],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type, "application/json");
    let v: Value = serde_json::from_slice(&r.body).expect("json reply");
    assert_eq!(v["partialSuccess"]["rejectedDataPoints"], "1");
    let msg = v["partialSuccess"]["errorMessage"]
        .as_str()
        .expect("message");
    assert!(msg.contains("unsupported_temporality: 1"), "{msg}");
    assert!(msg.contains("--otlp-delta-to-cumulative"), "{msg}");
    assert_eq!(
        query(srv.addr, "jobs_done_total", t).await,
        vec![(
            labels(&[("__name__", "jobs_done_total"), ("job", "api")]),
            "7".into()
        )]
    );
    // Full success in JSON is `{}`.
    let r = post(
        srv.addr,
        "/v1/metrics",
        b"{}".to_vec(),
        &[("content-type", "application/json; charset=utf-8")],
    )
    .await;
    assert_eq!((r.status, r.body.as_slice()), (200, b"{}".as_slice()));
}

#[tokio::test]
async fn delta_to_cumulative_keeps_running_totals() {
    let srv = common::start(Config {
        otlp_delta_to_cumulative: true,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    for (i, d) in [3, 4, 5].into_iter().enumerate() {
        let req = request(
            vec![kv("service.name", "batch")],
            vec![metric(
                "items",
                "",
                sum(
                    vec![number(
                        vec![],
                        t + i as i64 * 1000,
                        number_data_point::Value::AsInt(d),
                    )],
                    1,
                    true,
                ),
            )],
        );
        response(&export(srv.addr, &req).await);
    }
    // A retried (same-time) delta is refused rather than counted twice.
    let again = request(
        vec![kv("service.name", "batch")],
        vec![metric(
            "items",
            "",
            sum(
                vec![number(vec![], t + 2000, number_data_point::Value::AsInt(5))],
                1,
                true,
            ),
        )],
    );
    let resp = response(&export(srv.addr, &again).await);
    assert_eq!(
        resp.partial_success.map(|p| p.rejected_data_points),
        Some(1)
    );
    assert_eq!(
        query(srv.addr, "items_total", t + 2000).await,
        vec![(
            labels(&[("__name__", "items_total"), ("job", "batch")]),
            "12".into()
        )]
    );
}

#[tokio::test]
async fn bad_input_gets_clear_replies_and_the_rest_is_stored() {
    let srv = common::start(Config {
        max_labels_per_series: 5,
        max_decompressed_bytes: 4096,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    let status = |r: &Reply| -> Status {
        assert_eq!(r.content_type, "application/x-protobuf");
        Status::decode(r.body.as_slice()).expect("google.rpc.Status")
    };

    // Protobuf garbage: 400 with a Status naming the problem.
    let r = post(
        srv.addr,
        "/v1/metrics",
        vec![0x0a, 0x05, 0x01],
        &[("content-type", "application/x-protobuf")],
    )
    .await;
    assert_eq!(r.status, 400);
    let st = status(&r);
    assert_eq!(st.code, 3);
    assert!(
        st.message
            .contains("cannot decode ExportMetricsServiceRequest"),
        "{}",
        st.message
    );

    // Bad gzip.
    let r = post(
        srv.addr,
        "/v1/metrics",
        b"not gzip".to_vec(),
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ],
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(status(&r).message.contains("not valid gzip"));

    // Wrong content type and encoding: 415.
    let r = post(
        srv.addr,
        "/v1/metrics",
        vec![],
        &[("content-type", "text/plain")],
    )
    .await;
    assert_eq!(r.status, 415);
    assert!(status(&r).message.contains("text/plain"));
    let r = post(
        srv.addr,
        "/v1/metrics",
        vec![],
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "br"),
        ],
    )
    .await;
    assert_eq!(r.status, 415);

    // Over the limit after decompression: 413.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&[0u8; 10_000]).expect("gzip");
    let r = post(
        srv.addr,
        "/v1/metrics",
        gz.finish().expect("gzip"),
        &[
            ("content-type", "application/x-protobuf"),
            ("content-encoding", "gzip"),
        ],
    )
    .await;
    assert_eq!(r.status, 413);
    assert!(status(&r).message.contains("max-decompressed-bytes"));

    // JSON with wrong types: 400 with a JSON Status naming the field.
    let r = post(
        srv.addr,
        "/v1/metrics",
        br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x","gauge":{"dataPoints":[{"timeUnixNano":true}]}}]}]}]}"#.to_vec(),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.content_type, "application/json");
    let v: Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v["code"], 3);
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("dataPoints[0].timeUnixNano"),
        "{v}"
    );

    // One request with one good point and many bad ones.
    let good = number(
        vec![kv("ok", "yes")],
        t,
        number_data_point::Value::AsDouble(1.0),
    );
    let too_many: Vec<KeyValue> = (0..6).map(|i| kv(&format!("l{i}"), "v")).collect();
    let req = request(
        vec![kv("service.name", "svc")],
        vec![
            metric("good", "", gauge(vec![good])),
            metric(
                "wide",
                "",
                gauge(vec![number(
                    too_many,
                    t,
                    number_data_point::Value::AsDouble(1.0),
                )]),
            ),
            metric(
                "delta",
                "",
                sum(
                    vec![
                        number(vec![], t, number_data_point::Value::AsInt(1)),
                        number(vec![], t + 1, number_data_point::Value::AsInt(1)),
                    ],
                    1,
                    true,
                ),
            ),
            metric("empty", "", gauge(vec![])),
            m::Metric {
                name: "nodata".into(),
                ..Default::default()
            },
            metric(
                "utf8",
                "",
                gauge(vec![number(
                    vec![],
                    t,
                    number_data_point::Value::AsDouble(1.0),
                )]),
            ),
            metric(
                "notime",
                "",
                gauge(vec![number(
                    vec![],
                    0,
                    number_data_point::Value::AsDouble(1.0),
                )]),
            ),
        ],
    );
    let body = splice_invalid_utf8(&req);
    let r = post(
        srv.addr,
        "/v1/metrics",
        body,
        &[("content-type", "application/x-protobuf")],
    )
    .await;
    let resp = response(&r);
    let partial = resp.partial_success.expect("partial success");
    // wide (1) + delta (2) + utf8 (1) + notime (1).
    assert_eq!(partial.rejected_data_points, 5, "{}", partial.error_message);
    for want in [
        "too_many_labels: 1",
        "unsupported_temporality: 2",
        "invalid_utf8: 1",
        "invalid_data_point: 1",
        "metric \"empty\" has no data points",
        "metric \"nodata\" has no data",
    ] {
        assert!(
            partial.error_message.contains(want),
            "{want} missing from {}",
            partial.error_message
        );
    }
    assert_eq!(
        query(srv.addr, "good", t).await,
        vec![(
            labels(&[("__name__", "good"), ("job", "svc"), ("ok", "yes")]),
            "1".into()
        )]
    );
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert_eq!(
        common::metric_value(
            &metrics,
            "sluice_rejected_data_points_total{protocol=\"otlp\",reason=\"unsupported_temporality\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        common::metric_value(
            &metrics,
            "sluice_rejected_samples_total{protocol=\"otlp\",reason=\"too_many_labels\"}"
        ),
        Some(1.0)
    );
}

/// The request of the bad-input test with the `utf8` metric's point given
/// an attribute value of invalid UTF-8 (which prost cannot encode).
fn splice_invalid_utf8(req: &ExportMetricsServiceRequest) -> Vec<u8> {
    let mut req = req.clone();
    // A string attribute of a unique value, then overwrite its bytes.
    let metrics = &mut req.resource_metrics[0].scope_metrics[0].metrics;
    if let Some(Data::Gauge(g)) = &mut metrics[5].data {
        g.data_points[0].attributes = vec![kv("k", "@@@@")];
    }
    let mut body = req.encode_to_vec();
    let at = body
        .windows(4)
        .position(|w| w == b"@@@@")
        .expect("placeholder present");
    body[at..at + 4].copy_from_slice(&[0xff, 0xfe, 0xfd, 0xfc]);
    body
}

#[tokio::test]
async fn refused_delta_points_take_no_running_total_slot() {
    let srv = common::start(Config {
        otlp_delta_to_cumulative: true,
        max_series: 50,
        ..Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    let too_long = "v".repeat(Config::default().max_label_value_length + 1);
    let delta_point = |job: &str, attr: Vec<_>| {
        request(
            vec![kv("service.name", job)],
            vec![metric(
                "items",
                "",
                sum(
                    vec![number(attr, t, number_data_point::Value::AsInt(1))],
                    1,
                    true,
                ),
            )],
        )
    };
    // 60 points refused for a label value over the limit: none stored.
    for i in 0..60 {
        let req = delta_point(&format!("bad{i}"), vec![kv("big", &too_long)]);
        let resp = response(&export(srv.addr, &req).await);
        assert_eq!(
            resp.partial_success.map(|p| p.rejected_data_points),
            Some(1)
        );
    }
    assert_eq!(srv.state.db().head_stats().series, 0);
    // Five valid delta series still get their running totals.
    for i in 0..5 {
        let resp = response(&export(srv.addr, &delta_point(&format!("ok{i}"), vec![])).await);
        assert_eq!(resp.partial_success.map(|p| p.rejected_data_points), None);
    }
    assert_eq!(query(srv.addr, "items_total", t).await.len(), 5);
}

/// OTLP exemplars are kept as Prometheus' translator labels them:
/// `trace_id`/`span_id` in hex plus filtered attributes, a sum's on its
/// series and a histogram's on the bucket whose `le` first covers it.
#[tokio::test]
async fn exemplars_land_on_their_series_and_buckets() {
    let srv = common::start(Config::default()).await;
    let t = common::now_ms() - 60_000;
    let exemplar = |v: f64, trace: u8| m::Exemplar {
        filtered_attributes: vec![kv("user", "u1")],
        time_unix_nano: ns(t),
        span_id: vec![0xab; 8],
        trace_id: vec![trace; 16],
        value: Some(m::exemplar::Value::AsDouble(v)),
    };
    let mut counter = number(vec![], t, number_data_point::Value::AsInt(7));
    counter.exemplars = vec![exemplar(1.0, 1)];
    let req = request(
        service(),
        vec![
            metric("orders", "", sum(vec![counter], 2, true)),
            metric(
                "latency",
                "s",
                Data::Histogram(m::Histogram {
                    data_points: vec![m::HistogramDataPoint {
                        time_unix_nano: ns(t),
                        count: 10,
                        sum: Some(4.5),
                        bucket_counts: vec![2, 3, 5],
                        explicit_bounds: vec![0.1, 1.0],
                        exemplars: vec![exemplar(0.05, 2), exemplar(0.5, 3), exemplar(7.0, 4)],
                        ..Default::default()
                    }],
                    aggregation_temporality: 2,
                }),
            ),
        ],
    );
    response(&export(srv.addr, &req).await);
    let (code, body) = common::get(
        srv.addr,
        &format!(
            "/api/v1/query_exemplars?query=%7B__name__%3D~%22orders_total%7Clatency_seconds_bucket%22%7D&start={}&end={}",
            (t - 1000) as f64 / 1000.0,
            (t + 1000) as f64 / 1000.0
        ),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("json");
    let found: Vec<(String, String, String)> = v["data"]
        .as_array()
        .expect("data")
        .iter()
        .flat_map(|s| {
            let series = format!(
                "{}{{le={}}}",
                s["seriesLabels"]["__name__"].as_str().unwrap_or(""),
                s["seriesLabels"]["le"].as_str().unwrap_or("")
            );
            s["exemplars"]
                .as_array()
                .expect("exemplars")
                .iter()
                .map(move |e| {
                    (
                        series.clone(),
                        e["labels"]["trace_id"].as_str().unwrap_or("").to_owned(),
                        e["value"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let id = |b: u8| format!("{b:02x}").repeat(16);
    assert_eq!(
        found,
        vec![
            (
                "latency_seconds_bucket{le=+Inf}".to_owned(),
                id(4),
                "7".to_owned()
            ),
            (
                "latency_seconds_bucket{le=0.1}".to_owned(),
                id(2),
                "0.05".to_owned()
            ),
            (
                "latency_seconds_bucket{le=1}".to_owned(),
                id(3),
                "0.5".to_owned()
            ),
            ("orders_total{le=}".to_owned(), id(1), "1".to_owned()),
        ]
    );
    let first = &v["data"][3]["exemplars"][0]["labels"];
    assert_eq!(first["span_id"], "abababababababab");
    assert_eq!(first["user"], "u1");
}

/// One OTLP request under each translation strategy, with names the
/// strategies treat differently: dots, a unit already in the name, a
/// counter already ending in `_total`, a ratio gauge, a `per` unit, an
/// attribute key starting with a digit. Debian's Prometheus 3.5.3 is built
/// without its OTLP receiver (the endpoint answers 404), so the expected
/// names are those of the translator Prometheus 3.5.3 is built with,
/// prometheus/otlptranslator at 2573485 (`metric_namer.go`: with UTF-8
/// allowed, the unit words and `_total`/`_ratio` are appended as they are,
/// without the de-duplication the escaping strategy does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_translation_strategy_names_as_prometheus_3_does() {
    use sluice::ingest::otlp::names::Translation;
    let t = common::now_ms() - 30_000;
    let attrs = || vec![kv("http.route", "/cart"), kv("0ops", "x")];
    let point = |v: f64| vec![number(attrs(), t, number_data_point::Value::AsDouble(v))];
    let req = request(
        service(),
        vec![
            metric(
                "http.server.requests",
                "{request}",
                sum(point(42.0), 2, true),
            ),
            metric("jobs.done_total", "", sum(point(7.0), 2, true)),
            metric("process.memory.usage_bytes", "By", gauge(point(1024.0))),
            metric("cpu.utilization", "1", gauge(point(0.25))),
            metric("network.io", "By/s", sum(point(3.0), 2, false)),
            metric(
                "http.server.request.duration",
                "s",
                Data::Histogram(m::Histogram {
                    data_points: vec![m::HistogramDataPoint {
                        attributes: attrs(),
                        time_unix_nano: ns(t),
                        count: 10,
                        sum: Some(4.5),
                        bucket_counts: vec![2, 3, 5],
                        explicit_bounds: vec![0.1, 1.0],
                        ..Default::default()
                    }],
                    aggregation_temporality: 2,
                }),
            ),
        ],
    );
    // (strategy, metric names, data point label names, target_info label names)
    type Case = (
        Translation,
        [&'static str; 8],
        [&'static str; 2],
        [&'static str; 2],
    );
    let cases: [Case; 3] = [
        (
            Translation::UnderscoreEscapingWithSuffixes,
            [
                "cpu_utilization_ratio",
                "http_server_request_duration_seconds_bucket",
                "http_server_request_duration_seconds_count",
                "http_server_request_duration_seconds_sum",
                "http_server_requests_total",
                "jobs_done_total",
                "network_io_bytes_per_second",
                "process_memory_usage_bytes",
            ],
            ["http_route", "key_0ops"],
            ["cloud_region", "host_name"],
        ),
        (
            Translation::NoUtf8EscapingWithSuffixes,
            [
                "cpu.utilization_ratio",
                "http.server.request.duration_seconds_bucket",
                "http.server.request.duration_seconds_count",
                "http.server.request.duration_seconds_sum",
                "http.server.requests_total",
                "jobs.done_total_total",
                "network.io_bytes_per_second",
                "process.memory.usage_bytes_bytes",
            ],
            ["0ops", "http.route"],
            ["cloud.region", "host.name"],
        ),
        (
            Translation::NoTranslation,
            [
                "cpu.utilization",
                "http.server.request.duration_bucket",
                "http.server.request.duration_count",
                "http.server.request.duration_sum",
                "http.server.requests",
                "jobs.done_total",
                "network.io",
                "process.memory.usage_bytes",
            ],
            ["0ops", "http.route"],
            ["cloud.region", "host.name"],
        ),
    ];
    for (translation, names, point_labels, resource_labels) in cases {
        let srv = common::start(Config {
            otlp_translation_strategy: translation,
            ..Config::default()
        })
        .await;
        response(&export(srv.addr, &req).await);
        let got = query(srv.addr, r#"{__name__=~".+", __name__!="target_info"}"#, t).await;
        let mut got_names: Vec<&str> = got.iter().map(|(l, _)| l["__name__"].as_str()).collect();
        got_names.dedup();
        assert_eq!(got_names, names, "{translation}");
        for (l, _) in &got {
            for key in point_labels {
                assert!(l.contains_key(key), "{translation}: {key} in {l:?}");
            }
            assert_eq!(l["job"], "shop/checkout", "{translation}");
            assert_eq!(l["instance"], "pod-1", "{translation}");
        }
        let info = query(srv.addr, "target_info", t).await;
        assert_eq!(info.len(), 1, "{translation}: {info:?}");
        for key in resource_labels {
            assert!(
                info[0].0.contains_key(key),
                "{translation}: {key} in {info:?}"
            );
        }
    }
}
