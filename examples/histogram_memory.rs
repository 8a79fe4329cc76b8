//! Memory and speed of native histograms in the head: N series, each a
//! schema-3 histogram with 20 positive buckets (about what a latency
//! histogram of a busy service has), one sample every 15 s for 3 hours, so
//! that every series crosses a 2 h chunk-range boundary. Sent as remote
//! write 1.0 requests of 200 series, as Prometheus would send them.
//! Prints the head's accounted bytes per series and per sample, and the
//! ingest rate.
//!
//! ```text
//! cargo run --release --example histogram_memory -- 10000
//! ```

use prost::Message as _;
use sluice::ingest::{self, validate::LabelLimits};
use sluice::proto::prometheus as pb;
use sluice::storage::{Db, HeadOptions};

fn main() -> Result<(), String> {
    let series: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("usage: histogram_memory <series>")?;
    const STEPS: i64 = 720; // 3 h at 15 s
    const BUCKETS: usize = 20;
    const PER_REQUEST: usize = 200;
    let head = Db::new(HeadOptions {
        max_series: series + 1,
        ..HeadOptions::default()
    });
    let t0 = 1_700_000_000_000i64 / 7_200_000 * 7_200_000 + 3_600_000;
    let mut counts = vec![vec![0u64; BUCKETS]; series];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let started = std::time::Instant::now();
    let mut histograms = 0u64;
    for step in 0..STEPS {
        let t = t0 + step * 15_000;
        for first in (0..series).step_by(PER_REQUEST) {
            let mut ts = Vec::with_capacity(PER_REQUEST);
            for (s, c) in counts.iter_mut().enumerate().skip(first).take(PER_REQUEST) {
                // Observations land mostly in the middle buckets.
                for (i, b) in c.iter_mut().enumerate() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let weight = (BUCKETS / 2).abs_diff(i) as u64 + 1;
                    *b += x % (40 / weight);
                }
                let mut prev = 0i64;
                let deltas: Vec<i64> = c
                    .iter()
                    .map(|&v| {
                        let d = v as i64 - prev;
                        prev = v as i64;
                        d
                    })
                    .collect();
                let total: u64 = c.iter().sum();
                let name = format!("rpc_duration_seconds_{}", s % 10);
                let id = s.to_string();
                ts.push(pb::TimeSeries {
                    labels: vec![
                        pb::Label {
                            name: "__name__".into(),
                            value: name,
                        },
                        pb::Label {
                            name: "instance".into(),
                            value: id,
                        },
                        pb::Label {
                            name: "job".into(),
                            value: "api".into(),
                        },
                    ],
                    histograms: vec![pb::Histogram {
                        count: Some(pb::histogram::Count::CountInt(total)),
                        sum: total as f64 * 0.042,
                        schema: 3,
                        zero_threshold: 2f64.powi(-128),
                        positive_spans: vec![pb::BucketSpan {
                            offset: -10,
                            length: BUCKETS as u32,
                        }],
                        positive_deltas: deltas,
                        timestamp: t,
                        ..Default::default()
                    }],
                    ..Default::default()
                });
            }
            let body = pb::WriteRequest {
                timeseries: ts,
                metadata: vec![],
            }
            .encode_to_vec();
            let report =
                ingest::append_write_request(&head, &body, &LabelLimits::default(), t + 60_000)
                    .map_err(|e| e.to_string())?;
            if report.rejected_total() > 0 {
                return Err(report.message());
            }
            histograms += report.histograms_written;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let mem = head.head_memory();
    let stats = head.head_stats();
    println!(
        "{series} histogram series x {STEPS} samples ({BUCKETS} buckets, 3 h at 15 s): \
         {} chunks, {:.1} bytes/sample encoded; head accounted {} B = {:.0} B/series \
         (chunks {:.0}, series {:.0}, labels {:.0}, index {:.0}); ingest {:.0} histograms/s",
        stats.chunks,
        stats.chunk_bytes as f64 / histograms as f64,
        mem.total(),
        mem.total() as f64 / series as f64,
        mem.chunks as f64 / series as f64,
        mem.series as f64 / series as f64,
        mem.labels as f64 / series as f64,
        mem.index as f64 / series as f64,
        histograms as f64 / secs,
    );
    Ok(())
}
