//! The head the PromQL benches and profiles query: 10k counter series (100
//! jobs × 100 instances) and 200 classic histograms, 1h at 15s.
#![allow(dead_code)]

use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Db, HeadOptions};

pub const T0: i64 = 1_700_000_000_000;
pub const POINTS: i64 = 240;

pub fn head() -> Db {
    let head = Db::new(HeadOptions::default());
    let mut app = head.appender(i64::MAX);
    let mut c = AppendCounts::default();
    let mut add = |labels: &[(&str, &str)], f: &dyn Fn(i64) -> f64| {
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let samples = (0..POINTS).map(|i| (T0 + i * 15_000, f(i)));
        app.append_new(labels, &raw, samples, &mut c).expect("fits");
    };
    for j in 0..100 {
        for i in 0..100 {
            let (job, inst) = (format!("job{j}"), format!("10.0.{j}.{i}:9100"));
            add(
                &[
                    ("__name__", "http_requests_total"),
                    ("instance", &inst),
                    ("job", &job),
                ],
                &|k| (k * (i + 1) + j) as f64,
            );
        }
    }
    let bounds = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"];
    for j in 0..20 {
        for i in 0..10 {
            let (job, inst) = (format!("job{j}"), format!("10.1.{j}.{i}:9100"));
            for (b, le) in bounds.iter().enumerate() {
                add(
                    &[
                        ("__name__", "http_request_duration_seconds_bucket"),
                        ("instance", &inst),
                        ("job", &job),
                        ("le", le),
                    ],
                    &|k| (k * (b as i64 + 1) * (i + 1)) as f64,
                );
            }
        }
    }
    app.commit();
    head
}

/// The queries, as a Grafana panel asks them.
pub const QUERIES: [(&str, &str); 5] = [
    ("sum_rate", "sum by (job) (rate(http_requests_total[5m]))"),
    ("rate", "rate(http_requests_total[5m])"),
    ("rate_times", "rate(http_requests_total[5m]) * 60"),
    (
        "histogram_quantile",
        "histogram_quantile(0.99, sum by (le, job) (rate(http_request_duration_seconds_bucket[5m])))",
    ),
    ("regex_selector", r#"http_requests_total{job=~"job1.*", instance=~".*:9100"}"#),
];

/// The range every query runs over: the hour but its first 5m, at 15s.
pub fn range() -> (i64, i64, i64) {
    (T0 + 5 * 60_000, T0 + (POINTS - 1) * 15_000, 15_000)
}
