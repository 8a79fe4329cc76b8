//! Restart cost: how fast the head comes back from a WAL alone, and from a
//! checkpoint. Builds a head of SERIES series × SAMPLES samples (15 s apart)
//! through the normal append path with the WAL on, closes it, and times
//! `Db::open` over that data directory; then writes a checkpoint and
//! times `Head::open` again. Last, it appends SAMPLES / 8 more samples to
//! every series (at least one) and times the next checkpoint, which
//! writes only the chunks sealed since the first (see
//! `storage::checkpoint::chunks`), beside the first's full write.
//!
//! `cargo bench --bench wal_replay` (env: SERIES, default 1,000,000;
//! SAMPLES, default 10: a 10M-sample WAL; SAMPLES=480 is 2 h of chunks,
//! the head a checkpoint meets in steady state).

use std::time::{Duration, Instant};

use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Close, Db, DbOptions, Durability, HeadOptions};
use sluice::wal::commit::FsyncMode;
use sluice::wal::WalOptions;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        n += if p.is_dir() {
            dir_bytes(&p)
        } else {
            e.metadata().map_or(0, |m| m.len())
        };
    }
    n
}

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let series = env("SERIES", if quick { 5_000 } else { 1_000_000 });
    let samples = env("SAMPLES", 10);
    let data = tempfile::tempdir().expect("tempdir");
    let durable = Durability {
        dir: data.path().to_owned(),
        wal: WalOptions::default(),
        fsync: FsyncMode::Interval(Duration::from_secs(1)),
    };
    let opts = HeadOptions::default;

    // Realistic label sets: 7 labels, as a node-exporter-like target has.
    let labels: Vec<Vec<(String, String)>> = (0..series)
        .map(|i| {
            vec![
                ("__name__".into(), format!("metric_{}", i % 200)),
                ("env".into(), "prod".into()),
                (
                    "instance".into(),
                    format!("host-{}.example:9100", i / 200 % 5000),
                ),
                ("job".into(), "node".into()),
                (
                    "mode".into(),
                    ["user", "system", "idle", "iowait"][i % 4].into(),
                ),
                ("region".into(), format!("region-{}", i % 7)),
                ("series".into(), i.to_string()),
            ]
        })
        .collect();
    let canon: Vec<Vec<u8>> = labels
        .iter()
        .map(|l| {
            let mut b = Vec::new();
            encode_canonical(l.iter().map(|(n, v)| (n.as_str(), v.as_str())), &mut b);
            b
        })
        .collect();

    let started = Instant::now();
    let open = || {
        Db::open(DbOptions {
            head: opts(),
            durability: Some(durable.clone()),
            ..DbOptions::default()
        })
    };
    let head = open().expect("open");
    let t0 = 1_700_000_000_000i64;
    let append = |head: &Db, rounds: std::ops::Range<usize>| {
        for r in rounds {
            let mut c = AppendCounts::default();
            let mut app = head.appender(i64::MAX);
            for (i, (l, raw)) in labels.iter().zip(&canon).enumerate() {
                let t = t0 + r as i64 * 15_000;
                let v = (r * 7 + i) as f64;
                if !app.append_existing(raw, std::iter::once((t, v)), &mut c) {
                    let pairs: Vec<(&str, &str)> =
                        l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                    app.append_new(&pairs, raw, std::iter::once((t, v)), &mut c)
                        .expect("under the limit");
                }
                if i % 2000 == 1999 {
                    app.commit();
                    app = head.appender(i64::MAX);
                }
            }
            app.commit();
        }
    };
    append(&head, 0..samples);
    head.close(Close::WalOnly);
    let total = (series * samples) as f64;
    let wal_bytes = dir_bytes(&data.path().join("wal"));
    eprintln!(
        "wal_replay: wrote {series} series x {samples} samples in {:.1?}; WAL {:.1} MiB ({:.1} bytes/sample)",
        started.elapsed(),
        wal_bytes as f64 / 1048576.0,
        wal_bytes as f64 / total
    );
    let want = head.head_stats();
    drop(head);

    let started = Instant::now();
    let head = open().expect("replay");
    let took = started.elapsed();
    assert_eq!(head.head_stats(), want, "replay restores the head");
    println!(
        "wal_replay WAL only: {series} series, {:.0} samples in {took:.2?}: {:.0} samples/s, {:.0} MiB/s",
        total,
        total / took.as_secs_f64(),
        wal_bytes as f64 / 1048576.0 / took.as_secs_f64()
    );

    let started = Instant::now();
    let bytes = head.checkpoint().expect("checkpoint");
    println!(
        "wal_replay checkpoint write: {} series, {:.1} MiB in {:.2?}",
        head.head_stats().series,
        bytes as f64 / 1048576.0,
        started.elapsed()
    );
    head.close(Close::WalOnly);
    drop(head);

    let started = Instant::now();
    let head = open().expect("from checkpoint");
    let took = started.elapsed();
    assert_eq!(head.head_stats(), want, "the checkpoint restores the head");
    println!(
        "wal_replay from checkpoint: {series} series ({:.0} samples) in {took:.2?}: {:.0} series/s, {:.0} samples/s",
        total,
        series as f64 / took.as_secs_f64(),
        total / took.as_secs_f64()
    );

    let more = (samples / 8).max(1);
    append(&head, samples..samples + more);
    let started = Instant::now();
    let bytes = head.checkpoint().expect("checkpoint");
    let took = started.elapsed();
    let written = head.checkpoint_stats().last_written_bytes;
    assert!(written <= bytes);
    println!(
        "wal_replay next checkpoint, {more} samples per series later: {:.1} MiB in all, {:.1} MiB written in {took:.2?}",
        bytes as f64 / 1048576.0,
        written as f64 / 1048576.0,
    );
    head.close(Close::WalOnly);
}
