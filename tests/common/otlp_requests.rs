//! Realistic OTLP requests for tests and benches: one service with 10
//! resource attributes, and 1000 data points over counters, gauges and
//! histograms, each point with a few attributes, as an SDK exports them.

#![allow(dead_code)]

use sluice::proto::opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
use sluice::proto::opentelemetry::proto::common::v1::{any_value, AnyValue, KeyValue};
use sluice::proto::opentelemetry::proto::metrics::v1::{
    self as m, metric::Data, number_data_point,
};
use sluice::proto::opentelemetry::proto::resource::v1::Resource;

/// Data points in [`request`].
pub const POINTS: usize = 1000;
/// Samples those points become: 60 counters and 30 gauges of 10 points,
/// 10 histograms of 10 points with 10 bounds (_sum, _count, 11 buckets).
pub const SAMPLES: usize = 600 + 300 + 100 * 13;

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.to_owned(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.to_owned())
}

fn point_attrs(i: usize) -> Vec<KeyValue> {
    vec![
        kv("http.route", s(&format!("/api/v{}/items", i % 10))),
        kv("http.request.method", s(["GET", "POST"][i % 2])),
        kv("http.response.status_code", any_value::Value::IntValue(200)),
    ]
}

/// The request at time `t_ms`; the same shape every time, so a second call
/// hits the series the first created.
pub fn request(t_ms: i64) -> ExportMetricsServiceRequest {
    let t = t_ms as u64 * 1_000_000;
    let start = t - 3_600_000_000_000;
    let step = (t_ms / 15_000) as f64;
    let mut metrics = Vec::new();
    for mi in 0..100 {
        let data = match mi {
            0..60 => Data::Sum(m::Sum {
                data_points: (0..10)
                    .map(|i| m::NumberDataPoint {
                        attributes: point_attrs(i),
                        start_time_unix_nano: start,
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsInt(
                            (step as i64) * 10 + i as i64,
                        )),
                        ..Default::default()
                    })
                    .collect(),
                aggregation_temporality: 2,
                is_monotonic: true,
            }),
            60..90 => Data::Gauge(m::Gauge {
                data_points: (0..10)
                    .map(|i| m::NumberDataPoint {
                        attributes: point_attrs(i),
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsDouble(
                            (step * 0.37 + i as f64).sin() * 100.0,
                        )),
                        ..Default::default()
                    })
                    .collect(),
            }),
            _ => Data::Histogram(m::Histogram {
                data_points: (0..10)
                    .map(|i| m::HistogramDataPoint {
                        attributes: point_attrs(i),
                        start_time_unix_nano: start,
                        time_unix_nano: t,
                        count: (step as u64) * 10,
                        sum: Some(step * 3.5),
                        bucket_counts: (0..11).map(|b| (step as u64) + b).collect(),
                        explicit_bounds: vec![
                            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        ],
                        ..Default::default()
                    })
                    .collect(),
                aggregation_temporality: 2,
            }),
        };
        let (name, unit) = match mi {
            0..60 => (format!("app.requests.{mi}"), "{request}"),
            60..90 => (format!("app.queue.depth.{mi}"), "{item}"),
            _ => (format!("http.server.duration.{mi}"), "s"),
        };
        metrics.push(m::Metric {
            name,
            unit: unit.to_owned(),
            description: "A metric of the benchmark service".to_owned(),
            data: Some(data),
            ..Default::default()
        });
    }
    let resource = [
        ("service.name", "checkout"),
        ("service.namespace", "shop"),
        (
            "service.instance.id",
            "627cc493-f310-47de-96bd-71410b7dec09",
        ),
        ("service.version", "1.4.2"),
        ("host.name", "node-17.eu-west-1.compute.internal"),
        ("os.type", "linux"),
        ("cloud.region", "eu-west-1"),
        ("telemetry.sdk.name", "opentelemetry"),
        ("telemetry.sdk.language", "rust"),
        ("telemetry.sdk.version", "0.28.0"),
    ];
    ExportMetricsServiceRequest {
        resource_metrics: vec![m::ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.iter().map(|(k, v)| kv(k, s(v))).collect(),
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
