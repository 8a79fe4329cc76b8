//! Out-of-order samples against Prometheus 3.5.3: the same samples, sent
//! newest part first and each part shuffled, to Sluice with
//! `--out-of-order-time-window 2h` and to Prometheus with
//! `storage.tsdb.out_of_order_time_window: 2h`. Every sample and a set of
//! range queries answer identically; again after `kill -9` and a restart;
//! again once the head is cut into blocks, which promtool reads and which
//! Prometheus, started on a copy of them, answers the same from; and with
//! late samples (floats and native histograms) older than the newest
//! block, before and after a cut writes them into out-of-order blocks and
//! compaction merges those with the blocks they overlap.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{KillOnDrop, Prometheus};
use sluice::proto::prometheus as pb;
use sluice::storage::block::Ulid;

const SERIES: usize = 12;
const STEP: i64 = 15_000;
const POINTS: i64 = 240;
/// Parts of each series' hour, sent in this order: newest first, then
/// older ones, each later than what the series holds.
const ORDER: [i64; 6] = [5, 0, 3, 1, 4, 2];

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

fn value(k: usize, i: i64) -> f64 {
    (k as f64) * 1000.0 + ((i * 7919) % 1009) as f64 / 4.0
}

/// An integer native histogram whose buckets hold `a` and `b`.
fn histogram(t: i64, a: i64, b: i64) -> pb::Histogram {
    pb::Histogram {
        count: Some(pb::histogram::Count::CountInt((a + b) as u64)),
        sum: (a + 2 * b) as f64 * 0.25,
        schema: 0,
        zero_threshold: 2f64.powi(-128),
        positive_spans: vec![pb::BucketSpan {
            offset: 0,
            length: 2,
        }],
        positive_deltas: vec![a, b - a],
        timestamp: t,
        ..Default::default()
    }
}

/// `ooo_h`, a native histogram series, at these points: the counts grow
/// with `i` (a counter), and a half step (`half`) sits between two.
fn histogram_series(t0: i64, idx: &[i64], half: bool) -> pb::TimeSeries {
    let mut s = common::series(&[("__name__", "ooo_h")], &[]);
    s.histograms = idx
        .iter()
        .map(|&i| match half {
            false => histogram(t0 + i * STEP, 2 * i, 4 * i),
            true => histogram(t0 + i * STEP + STEP / 2, 2 * i + 1, 4 * i + 2),
        })
        .collect();
    s
}

/// The requests: for each part in `ORDER`, one request with each series'
/// samples of that part, shuffled, and the histogram series' likewise.
fn requests(t0: i64) -> Vec<Vec<u8>> {
    let per = POINTS / ORDER.len() as i64;
    ORDER
        .iter()
        .map(|&part| {
            let series = (0..SERIES)
                .map(|k| {
                    let mut idx: Vec<i64> = (part * per..(part + 1) * per).collect();
                    // A fixed shuffle: a stride coprime with the length.
                    let n = idx.len();
                    idx = (0..n).map(|j| idx[(j * 17 + k) % n]).collect();
                    let samples: Vec<(i64, f64)> =
                        idx.iter().map(|&i| (t0 + i * STEP, value(k, i))).collect();
                    let k = k.to_string();
                    let g = if k.len() % 2 == 0 { "even" } else { "odd" };
                    common::series(
                        &[("__name__", "ooo_m"), ("k", k.as_str()), ("g", g)],
                        &samples,
                    )
                })
                .collect::<Vec<_>>();
            let mut series = series;
            let n = per as usize;
            let idx: Vec<i64> = (0..n).map(|j| part * per + ((j * 13) % n) as i64).collect();
            series.push(histogram_series(t0, &idx, false));
            common::body(series)
        })
        .collect()
}

/// A query's result (range when `step` is given, else instant at `end`).
async fn ask(addr: &str, q: &str, start: i64, end: i64, step: Option<i64>) -> serde_json::Value {
    let secs = |ms: i64| format!("{:.3}", ms as f64 / 1000.0);
    let v = match step {
        Some(step) => {
            common::api_json(
                &format!("http://{addr}/api/v1/query_range"),
                &[
                    ("query", q.to_owned()),
                    ("start", secs(start)),
                    ("end", secs(end)),
                    ("step", format!("{}", step / 1000)),
                ],
            )
            .await
        }
        None => {
            common::api_json(
                &format!("http://{addr}/api/v1/query"),
                &[("query", q.to_owned()), ("time", secs(end))],
            )
            .await
        }
    };
    assert_eq!(v["status"], "success", "{q}: {v}");
    let mut r = v["data"]["result"].as_array().cloned().unwrap_or_default();
    r.sort_by_key(|s| s["metric"].to_string());
    serde_json::Value::Array(r)
}

const QUERIES: [(&str, Option<i64>); 8] = [
    ("ooo_m[1h]", None),
    ("ooo_h[1h]", None),
    ("histogram_count(rate(ooo_h[2m]))", Some(60_000)),
    ("histogram_sum(ooo_h)", Some(STEP)),
    ("ooo_m", Some(STEP)),
    ("count_over_time(ooo_m[1m])", Some(STEP)),
    ("sum by (g) (rate(ooo_m[2m]))", Some(60_000)),
    (
        "max_over_time(ooo_m[7m]) - min_over_time(ooo_m[3m])",
        Some(30_000),
    ),
];

/// Every query's answer from `addr` over `[start, end]`.
async fn answers(addr: &str, start: i64, end: i64) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for (q, step) in QUERIES {
        out.push(ask(addr, q, start, end, step).await);
    }
    out
}

fn assert_same(ours: &[serde_json::Value], theirs: &[serde_json::Value], when: &str) {
    for ((q, _), (a, b)) in QUERIES.iter().zip(ours.iter().zip(theirs)) {
        assert!(
            b.as_array().is_some_and(|r| !r.is_empty()),
            "{when}: {q}: Prometheus answered nothing"
        );
        assert_eq!(a, b, "{when}: {q}");
    }
}

fn blocks_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("data dir")
        .filter_map(Result::ok)
        .filter(|e| Ulid::parse(&e.file_name().to_string_lossy()).is_some())
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// Points answered in a matrix result.
fn points(v: &serde_json::Value) -> usize {
    v.as_array().map_or(0, |r| {
        r.iter()
            .map(|s| s["values"].as_array().map_or(0, Vec::len))
            .sum::<usize>()
    })
}

/// A block's `[minTime, maxTime)`, from its meta.json.
fn span_of(block: &Path) -> (i64, i64) {
    read_span(block).expect("a block's meta.json")
}

/// [`span_of`], `None` when the block is gone (a compaction running
/// beside the read deletes its parents).
fn read_span(block: &Path) -> Option<(i64, i64)> {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(block.join("meta.json")).ok()?).ok()?;
    Some((meta["minTime"].as_i64()?, meta["maxTime"].as_i64()?))
}

/// A copy of `blocks` in a directory of their own, as a data directory
/// promtool reads (with an empty WAL).
fn copy_of(blocks: &[PathBuf]) -> tempfile::TempDir {
    let copy = tempfile::tempdir().expect("tempdir");
    for b in blocks {
        common::copy_block(b, &copy.path().join(b.file_name().expect("name")));
    }
    std::fs::create_dir(copy.path().join("wal")).expect("wal dir");
    copy
}

/// Sluice on `data` with a 2h window, cutting blocks of `min_block` (up
/// to 1h).
fn start_cutting(data: &Path, min_block: &str) -> (KillOnDrop, std::net::SocketAddr) {
    let (child, addr) = common::spawn_sluice(
        bin(),
        data,
        "info",
        &[
            "--out-of-order-time-window",
            "2h",
            "--storage-min-block-duration",
            min_block,
            "--storage-max-block-duration",
            "1h",
        ],
    );
    (KillOnDrop(child), addr)
}

/// Waits (up to 60 s) until no block is being written under `data`.
async fn cut_done(data: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_dir(data)
        .expect("dir")
        .filter_map(Result::ok)
        .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

const PROM_CONFIG: &str =
    "global:\n  scrape_interval: 1h\nstorage:\n  tsdb:\n    out_of_order_time_window: 2h\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_samples_answer_as_prometheus_3_5_3_through_a_restart_and_blocks() {
    let end = common::now_ms() / 60_000 * 60_000 - 60_000;
    let t0 = end - (POINTS - 1) * STEP;
    let prom = Prometheus::start3(
        PROM_CONFIG,
        &[
            "--web.enable-remote-write-receiver",
            "--enable-feature=native-histograms",
        ],
    );
    prom.ready().await;
    let data = tempfile::tempdir().expect("tempdir");
    let (child, addr) = common::spawn_sluice(
        bin(),
        data.path(),
        "info",
        &["--out-of-order-time-window", "2h"],
    );
    let mut child = KillOnDrop(child);
    for body in requests(t0) {
        prom.remote_write(body.clone()).await;
        let (status, text) = common::push(addr, body).await;
        assert_eq!(status, 204, "{text}");
    }
    let theirs = answers(&prom.addr(), t0, end).await;
    let ours = answers(&addr.to_string(), t0, end).await;
    assert_same(&ours, &theirs, "as sent");
    let stored = points(&theirs[0]);
    assert_eq!(stored, SERIES * POINTS as usize, "every sample, once");
    let (_, metrics) = common::get(addr, "/metrics").await;
    let late = common::metric_value(
        &metrics,
        r#"sluice_out_of_order_samples_total{protocol="remote_write"}"#,
    );
    assert!(late.is_some_and(|n| n > 1_000.0), "{late:?}");

    // kill -9, then a start that cuts the head into 20-minute blocks.
    child.kill();
    let (_child, addr) = start_cutting(data.path(), "20m");
    let ours = answers(&addr.to_string(), t0, end).await;
    assert_same(&ours, &theirs, "after kill -9");
    let cut = common::wait_for_metric(addr, "sluice_blocks", |v| v >= 1.0).await;
    assert!(cut >= 1.0, "blocks cut");
    // Until the cut is done (it may write more than one block).
    cut_done(data.path()).await;
    let ours = answers(&addr.to_string(), t0, end).await;
    assert_same(&ours, &theirs, "from blocks and head");

    // promtool reads the blocks, and Prometheus answers from a copy of
    // them as Sluice does over the time they hold.
    let blocks = blocks_in(data.path());
    assert!(!blocks.is_empty());
    let copy = copy_of(&blocks);
    let path = copy.path().to_str().expect("utf-8");
    let list = common::promtool3(&["tsdb", "list", path]);
    assert_eq!(list.lines().count(), blocks.len() + 1, "{list}");
    let floor = blocks.iter().map(|b| span_of(b).1).max().expect("a block");
    let dump = common::promtool3(&["tsdb", "dump", path]);
    let in_blocks = (0..POINTS).filter(|i| t0 + i * STEP < floor).count();
    let floats = dump.lines().filter(|l| l.contains("ooo_m")).count();
    assert_eq!(floats, SERIES * in_blocks, "{dump:.2000}");
    let reader = common::prometheus3_on_blocks(&blocks);
    reader.ready().await;
    let last = floor - 1 - (floor - 1 - t0) % 60_000;
    let from_copy = answers(&reader.addr(), t0 + 10 * 60_000, last).await;
    let ours = answers(&addr.to_string(), t0 + 10 * 60_000, last).await;
    assert_same(&ours, &from_copy, "Prometheus on Sluice's blocks");
    drop(reader);

    // Late samples older than the newest block, within the window: both
    // take them. Sluice keeps them beside its blocks, through a kill -9,
    // until the next cut writes them into out-of-order blocks (which
    // compaction merges with the blocks they overlap).
    let below: Vec<i64> = (0..POINTS)
        .filter(|i| t0 + i * STEP + STEP / 2 < floor)
        .rev()
        .collect();
    let late = common::body(
        (0..SERIES)
            .map(|k| {
                let samples: Vec<(i64, f64)> = (0..POINTS)
                    .map(|i| (t0 + i * STEP + STEP / 2, value(k, i) + 0.5))
                    .filter(|&(t, _)| t < floor)
                    .collect();
                let k = k.to_string();
                let g = if k.len() % 2 == 0 { "even" } else { "odd" };
                common::series(
                    &[("__name__", "ooo_m"), ("k", k.as_str()), ("g", g)],
                    &samples,
                )
            })
            .chain(std::iter::once(histogram_series(t0, &below, true)))
            .collect(),
    );
    let late_count = SERIES * in_blocks;
    prom.remote_write(late.clone()).await;
    let (status, text) = common::push(addr, late).await;
    assert_eq!(status, 204, "{text}");
    let theirs = answers(&prom.addr(), t0, end).await;
    let ours = answers(&addr.to_string(), t0, end).await;
    assert_same(&ours, &theirs, "late samples older than the newest block");
    let stored = points(&theirs[0]);
    assert_eq!(stored, SERIES * POINTS as usize + late_count);

    let mut child = _child;
    child.kill();
    // The first start left at most 30 minutes in the head, and more than
    // 10: with 5-minute blocks, it spans more than 1.5 blocks whatever the
    // minute the test runs at, so a cut comes.
    let (_child, addr) = start_cutting(data.path(), "5m");
    let cut = common::wait_for_metric(addr, "sluice_blocks_cut_total", |v| v >= 1.0).await;
    assert!(cut >= 1.0, "a cut with the late samples");
    cut_done(data.path()).await;
    // Compaction merges the out-of-order blocks with those they overlap
    // (vertical compaction) in the same pass: none overlap after it.
    let compactions =
        common::wait_for_metric(addr, "sluice_block_compactions_total", |v| v >= 1.0).await;
    assert!(compactions >= 1.0, "the out-of-order blocks are compacted");
    let deadline = Instant::now() + Duration::from_secs(60);
    let spans = loop {
        let mut spans: Vec<(i64, i64)> = blocks_in(data.path())
            .iter()
            .filter_map(|b| read_span(b))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).all(|w| w[1].0 >= w[0].1) || Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        spans.windows(2).all(|w| w[1].0 >= w[0].1),
        "overlapping blocks are compacted: {spans:?}"
    );
    let ours = answers(&addr.to_string(), t0, end).await;
    assert_same(
        &ours,
        &theirs,
        "after kill -9, a cut of the late samples and compaction",
    );

    // Every late sample is in a block now: promtool dumps them, and
    // Prometheus on a copy of the blocks answers as Sluice does.
    let blocks = blocks_in(data.path());
    let copy = copy_of(&blocks);
    let path = copy.path().to_str().expect("utf-8");
    let dump = common::promtool3(&["tsdb", "dump", path]);
    let floor2 = blocks.iter().map(|b| span_of(b).1).max().expect("a block");
    assert!(floor2 > floor, "a second cut");
    let in_order_in_blocks = (0..POINTS).filter(|i| t0 + i * STEP < floor2).count();
    let mut dumped: Vec<&str> = dump.lines().collect();
    dumped.sort_unstable();
    dumped.dedup();
    dumped.retain(|l| l.contains("ooo_m"));
    assert_eq!(
        dumped.len(),
        SERIES * in_order_in_blocks + late_count,
        "each sample once in the blocks: {dump:.2000}"
    );
    let reader = common::prometheus3_on_blocks(&blocks);
    reader.ready().await;
    let last = floor2 - 1 - (floor2 - 1 - t0) % 60_000;
    let from_copy = answers(&reader.addr(), t0 + 10 * 60_000, last).await;
    let ours = answers(&addr.to_string(), t0 + 10 * 60_000, last).await;
    assert_same(&ours, &from_copy, "Prometheus on blocks with late samples");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_s_own_window_applies_to_it_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "overrides:\n  team-a:\n    out_of_order_time_window: 1h\n",
    )
    .expect("write");
    let srv = common::start(sluice::config::Config {
        multitenancy: true,
        runtime_config_file: runtime,
        ..sluice::config::Config::default()
    })
    .await;
    let t = common::now_ms() - 60_000;
    for (tenant, late_status) in [("team-a", 204), ("team-b", 400)] {
        let headers = [("X-Scope-OrgID", tenant)];
        let push = |ts: i64| {
            common::push_with(
                srv.addr,
                common::body(vec![common::series(&[("__name__", "m")], &[(ts, 1.0)])]),
                &headers,
            )
        };
        assert_eq!(push(t).await.0, 204);
        let (status, text) = push(t - 600_000).await;
        assert_eq!(status, late_status, "{tenant}: {text}");
        if late_status == 400 {
            assert!(text.contains("out_of_order"), "{text}");
        }
        // Beyond team-a's window: out of bounds.
        let (status, text) = push(t - 7_200_000).await;
        assert_eq!(status, 400, "{tenant}: {text}");
    }
}
