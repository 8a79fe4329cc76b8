//! Realistic remote-write requests for tests and benches: series shaped like
//! node-exporter's, ~10 labels each, one sample per series as Prometheus
//! sends them.

#![allow(dead_code)] // each includer uses a part

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

/// `req` as a remote-write 2.0 request, as Prometheus builds one: a
/// symbol table per request (`""` first), each string once, and each
/// series' labels as references to it.
pub fn to_v2(req: &pb::WriteRequest) -> sluice::proto::io::prometheus::write::v2::Request {
    use sluice::proto::io::prometheus::write::v2;
    let mut symbols = vec![String::new()];
    let mut index = std::collections::HashMap::new();
    let mut sym = |s: &str| -> u32 {
        *index.entry(s.to_owned()).or_insert_with(|| {
            symbols.push(s.to_owned());
            (symbols.len() - 1) as u32
        })
    };
    let timeseries = req
        .timeseries
        .iter()
        .map(|ts| v2::TimeSeries {
            labels_refs: ts
                .labels
                .iter()
                .flat_map(|l| [sym(&l.name), sym(&l.value)])
                .collect(),
            samples: ts
                .samples
                .iter()
                .map(|s| v2::Sample {
                    value: s.value,
                    timestamp: s.timestamp,
                    start_timestamp: 0,
                })
                .collect(),
            ..Default::default()
        })
        .collect();
    v2::Request {
        symbols,
        timeseries,
    }
}

/// The load generator's steady load at the benchmark's scale, decompressed:
/// 100k series with 7 labels, 8 rounds of 50 requests of 2000 series (one
/// sample each), 15 s apart from `t0`. The first round creates the series.
pub fn loadgen_rounds(t0: i64) -> Vec<Vec<u8>> {
    use sluice_loadgen::{self as loadgen, Mode, Workload};
    let w = Workload {
        mode: Mode::Steady,
        series: LOADGEN_SERIES,
        samples: 8,
        per_request: LOADGEN_PER_REQUEST,
        connections: 1,
        start_ms: t0,
        interval_ms: 15_000,
    };
    loadgen::encode(&w).per_connection[0]
        .iter()
        .map(|b| {
            snap::raw::Decoder::new()
                .decompress_vec(&b.bytes)
                .expect("the load generator writes valid snappy")
        })
        .collect()
}

/// Series in [`loadgen_rounds`].
pub const LOADGEN_SERIES: usize = 100_000;
/// Samples (and series) per request in [`loadgen_rounds`].
pub const LOADGEN_PER_REQUEST: usize = 2_000;
