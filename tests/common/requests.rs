//! Realistic remote-write requests for tests and benches: series shaped like
//! node-exporter's, ~10 labels each, one sample per series as Prometheus
//! sends them.

use sluice::proto::prometheus as pb;

/// `n` series with 10 labels each, one sample at `t`; the same `n` and `t0`
/// give the same series, so later calls hit existing series.
pub fn request(n: usize, t: i64) -> pb::WriteRequest {
    let timeseries = (0..n)
        .map(|i| {
            let labels = [
                ("__name__", format!("node_cpu_seconds_total_{}", i % 50)),
                ("cpu", (i % 8).to_string()),
                ("datacenter", "eu-west-1".to_owned()),
                ("env", "production".to_owned()),
                (
                    "instance",
                    format!("10.0.{}.{}:9100", (i / 250) % 256, i % 250),
                ),
                ("job", "node".to_owned()),
                (
                    "mode",
                    ["idle", "user", "system", "iowait"][i % 4].to_owned(),
                ),
                ("rack", format!("r{}", i % 40)),
                ("team", "platform".to_owned()),
                ("zone", format!("eu-west-1{}", ['a', 'b', 'c'][i % 3])),
            ];
            pb::TimeSeries {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| pb::Label {
                        name: name.to_owned(),
                        value,
                    })
                    .collect(),
                samples: vec![pb::Sample {
                    value: (i as f64) * 1.5 + (t / 15_000) as f64,
                    timestamp: t,
                }],
                ..Default::default()
            }
        })
        .collect();
    pb::WriteRequest {
        timeseries,
        metadata: vec![],
    }
}
