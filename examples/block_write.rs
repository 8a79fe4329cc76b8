//! How fast a block is written: `cargo run --release --example block_write
//! -- [series]` builds `series` (100,000) series × 4 chunks of 120 samples
//! (2 h at 15 s), in memory, then writes them as one block into a temp
//! directory (fsyncs included) and prints the time, the rate and the size.

use std::sync::Arc;
use std::time::Instant;

use sluice::storage::block::{write_block, BlockChunk, BlockSeries, Encoding};
use sluice::storage::chunk::XorAppender;

fn main() -> std::io::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let base = 1_700_000_000_000i64 / 7_200_000 * 7_200_000;
    let mut series = Vec::with_capacity(n);
    for i in 0..n {
        let mut chunks = Vec::with_capacity(4);
        for c in 0..4i64 {
            let mut app = XorAppender::with_capacity(160);
            let mint = base + c * 1_800_000;
            for k in 0..120i64 {
                app.append(mint + k * 15_000, (i as i64 * 7 + c * 120 + k) as f64);
            }
            chunks.push(BlockChunk {
                mint,
                maxt: mint + 119 * 15_000,
                encoding: Encoding::Xor,
                data: Arc::from(app.bytes()),
            });
        }
        series.push(BlockSeries {
            starts: Vec::new(),
            labels: vec![
                ("__name__".into(), format!("metric_{}", i % 50)),
                (
                    "instance".into(),
                    format!("10.{}.{}.{}:9100", i >> 16, i >> 8 & 255, i & 255),
                ),
                ("job".into(), format!("job_{}", i % 10)),
            ],
            chunks,
        });
    }
    let dir = tempfile::tempdir()?;
    let t0 = Instant::now();
    let meta = write_block(dir.path(), series, base, base + 7_200_000, 1)?;
    let secs = t0.elapsed().as_secs_f64();
    let block = dir.path().join(meta.ulid.to_string());
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let index = size(&block.join("index"));
    let chunks = size(&block.join("chunks").join("000001"));
    println!(
        "{} series, {} chunks, {} samples written in {secs:.2} s: {:.0} series/s, {:.1} M samples/s; \
         index {:.1} MiB ({:.0} B/series), chunks {:.1} MiB ({:.2} B/sample)",
        meta.num_series,
        meta.num_chunks,
        meta.num_samples,
        meta.num_series as f64 / secs,
        meta.num_samples as f64 / secs / 1e6,
        index as f64 / (1 << 20) as f64,
        index as f64 / meta.num_series as f64,
        chunks as f64 / (1 << 20) as f64,
        chunks as f64 / meta.num_samples as f64,
    );
    Ok(())
}
