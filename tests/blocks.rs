//! Blocks written by Sluice, read by Prometheus 3.5.3's own tools:
//! `promtool tsdb list`, `analyze` and `dump` parse them and dump exactly
//! the samples written (floats and native histograms), and a Prometheus
//! 3.5.3 started on a directory holding one answers queries over it.

mod common;

use std::sync::Arc;

use common::{prometheus3, Prometheus};
use sluice::histogram::{go_g, Histogram, Span};
use sluice::storage::block::{write_block, BlockChunk, BlockSeries, Encoding, Ulid};
use sluice::storage::chunk::{HistogramAppender, XorAppender};
use sluice::storage::starts::{StartKind, StartRun};

const HOUR: i64 = 3_600_000;
const STEP: i64 = 15_000;
const SERIES: usize = 40;

/// Two hours of data: 40 float series, a chunk every 120 samples, and one
/// native-histogram series; with the lines `promtool tsdb dump` should
/// print for them.
fn data(base: i64) -> (Vec<BlockSeries>, Vec<String>) {
    let mut series = Vec::new();
    let mut lines = Vec::new();
    for i in 0..SERIES {
        let mut chunks = Vec::new();
        let mut app = XorAppender::with_capacity(256);
        let mut mint = base;
        for k in 0..(2 * HOUR / STEP) {
            let t = base + k * STEP;
            if k > 0 && k % 120 == 0 {
                chunks.push(BlockChunk {
                    mint,
                    maxt: t - STEP,
                    encoding: Encoding::Xor,
                    data: Arc::from(app.bytes()),
                });
                app = XorAppender::with_capacity(256);
                mint = t;
            }
            let v = (i * 1000) as f64 + k as f64 * 0.5;
            app.append(t, v);
            lines.push(format!(
                "{{__name__=\"blk_metric\", instance=\"i{i}\", job=\"b\"}} {} {t}",
                go_g(v)
            ));
        }
        chunks.push(BlockChunk {
            mint,
            maxt: base + 2 * HOUR - STEP,
            encoding: Encoding::Xor,
            data: Arc::from(app.bytes()),
        });
        // The first series was sent start times (`st-storage`): the block
        // gets a start-times file, which Prometheus' tools pass over.
        let starts = match i {
            0 => vec![StartRun {
                from: base,
                kind: StartKind::At(base - 1_000),
            }],
            _ => Vec::new(),
        };
        series.push(BlockSeries {
            starts,
            labels: vec![
                ("__name__".into(), "blk_metric".into()),
                ("instance".into(), format!("i{i}")),
                ("job".into(), "b".into()),
            ],
            chunks,
        });
    }
    let mut app = HistogramAppender::new();
    for k in 0..100i64 {
        let t = base + k * STEP;
        let c = k as u64;
        let h = Histogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: c,
            count: 4 * c,
            sum: 2.5 * c as f64,
            positive_spans: vec![Span {
                offset: 0,
                length: 3,
            }],
            // Absolute counts c, 2c, 0 as deltas.
            positive_buckets: vec![c as i64, c as i64, -2 * c as i64],
            ..Default::default()
        };
        app.append_raw(t, &h);
        // promtool 3.5.3's `dump` loses the first two samples of a
        // histogram series: its loops for floats and float histograms each
        // call `Next()` once before finding the type does not match
        // (`formatSeriesSet` in cmd/promtool/tsdb.go). Prometheus' own
        // queries read them (the second test counts all 100).
        if k >= 2 {
            lines.push(format!("{{__name__=\"blk_hist\"}} {} {t}", h.to_float()));
        }
    }
    series.push(BlockSeries {
        starts: Vec::new(),
        labels: vec![("__name__".into(), "blk_hist".into())],
        chunks: vec![BlockChunk {
            mint: base,
            maxt: base + 99 * STEP,
            encoding: Encoding::Histogram,
            data: Arc::from(app.bytes()),
        }],
    });
    lines.sort();
    (series, lines)
}

fn base() -> i64 {
    // A closed 2 h range a few hours back, as a head would cut it.
    let now = common::now_ms();
    (now - 6 * HOUR) / (2 * HOUR) * (2 * HOUR)
}

#[test]
fn promtool_lists_analyzes_and_dumps_exactly_what_was_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = base();
    let (series, mut want) = data(base);
    let meta = write_block(dir.path(), series, base, base + 2 * HOUR, 1).expect("block written");
    assert_eq!(meta.num_series, SERIES as u64 + 1);
    assert_eq!(meta.num_samples, (SERIES * 480 + 100) as u64);
    assert_eq!(meta.num_chunks, (SERIES * 4 + 1) as u64);
    let path = dir.path().to_str().expect("utf-8 path");
    let ulid = meta.ulid.to_string();
    let starts = dir.path().join(&ulid).join("start_times");
    assert!(starts.exists(), "{} written", starts.display());

    let list = common::promtool3(&["tsdb", "list", path]);
    let row = list
        .lines()
        .find(|l| l.starts_with(&ulid))
        .unwrap_or_else(|| panic!("{ulid} listed: {list}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    // BLOCK ULID, MIN TIME, MAX TIME, DURATION, NUM SAMPLES, NUM CHUNKS, NUM SERIES, SIZE
    assert_eq!(cols[1], base.to_string(), "{row}");
    assert_eq!(cols[2], (base + 2 * HOUR).to_string(), "{row}");
    assert!(row.contains(&format!(" {} ", SERIES * 480 + 100)), "{row}");

    let analyze = common::promtool3(&["tsdb", "analyze", path, &ulid]);
    assert!(
        analyze.contains(&format!("Total Series: {}", SERIES + 1)),
        "{analyze}"
    );
    assert!(analyze.contains("Label names: 3"), "{analyze}");

    // `dump` opens the directory as a database, which has a `wal/`.
    std::fs::create_dir(dir.path().join("wal")).expect("wal dir");
    let dump = common::promtool3(&["tsdb", "dump", path]);
    let mut got: Vec<String> = dump.lines().map(str::to_owned).collect();
    got.sort();
    want.sort();
    let missing: Vec<&String> = want.iter().filter(|w| !got.contains(w)).take(5).collect();
    let extra: Vec<&String> = got.iter().filter(|g| !want.contains(g)).take(5).collect();
    assert_eq!(
        got.len(),
        want.len(),
        "samples dumped; missing {missing:?}, extra {extra:?}"
    );
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
}

/// Deleted ranges go into the block's tombstones file in Prometheus'
/// format: promtool's dump of the block leaves out exactly those samples,
/// partial chunks and whole ones.
#[test]
fn promtool_dumps_a_block_without_the_ranges_sluice_deleted() {
    use sluice::storage::index::{MatchOp, Matcher};
    use sluice::storage::{Db, DbOptions, Durability};
    let dir = tempfile::tempdir().expect("tempdir");
    let base = base();
    let (series, want) = data(base);
    write_block(dir.path(), series, base, base + 2 * HOUR, 1).expect("block written");
    let db = Db::open(DbOptions {
        durability: Some(Durability {
            dir: dir.path().to_owned(),
            wal: sluice::wal::WalOptions::default(),
            fsync: sluice::wal::commit::FsyncMode::Always,
        }),
        ..DbOptions::default()
    })
    .expect("opens");
    // Half of i0 (inside its second chunk), all of i1, and the
    // histogram's first ten minutes.
    let sel = |name: &str, v: &str| vec![Matcher::new(MatchOp::Equal, name, v).expect("matcher")];
    let gone = [
        (
            sel("instance", "i0"),
            base + 45 * 60_000,
            base + 75 * 60_000,
        ),
        (sel("instance", "i1"), base, base + 2 * HOUR),
        (sel("__name__", "blk_hist"), base, base + 10 * 60_000),
    ];
    for (m, lo, hi) in &gone {
        assert_eq!(
            db.delete_in_blocks(std::slice::from_ref(m), *lo, *hi).ok(),
            Some(1)
        );
    }
    db.close(sluice::storage::Close::WalOnly);
    drop(db);
    let deleted = |line: &str| {
        let t: i64 = line
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        (line.contains("instance=\"i0\"") && (base + 45 * 60_000..=base + 75 * 60_000).contains(&t))
            || line.contains("instance=\"i1\"")
            // promtool's dump also loses the first two histogram samples
            // it finds (see `data`): those after the deleted ones.
            || (line.starts_with("{__name__=\"blk_hist\"}") && t <= base + 10 * 60_000 + 2 * STEP)
    };
    let want: Vec<&String> = want.iter().filter(|l| !deleted(l)).collect();
    // promtool reads the block (its tombstones file with it) from a
    // directory of its own, with an empty WAL of Prometheus'.
    let copy = tempfile::tempdir().expect("tempdir");
    for b in blocks_in(dir.path()) {
        common::copy_block(&b, &copy.path().join(b.file_name().expect("name")));
    }
    std::fs::create_dir(copy.path().join("wal")).expect("wal dir");
    let dump = common::promtool3(&["tsdb", "dump", copy.path().to_str().expect("utf-8 path")]);
    let mut got: Vec<&str> = dump.lines().filter(|l| l.starts_with('{')).collect();
    got.sort_unstable();
    assert_eq!(got.len(), want.len(), "{}", &dump[..dump.len().min(2000)]);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_opens_a_directory_of_sluice_blocks_and_answers_over_it() {
    let base = base();
    let (series, _) = data(base);
    let prom = Prometheus::start_bin_on(
        &prometheus3("prometheus"),
        "global:\n  scrape_interval: 1h\n",
        &["--storage.tsdb.retention.time=100y"],
        |data_dir| {
            std::fs::create_dir_all(data_dir).expect("data dir");
            write_block(data_dir, series, base, base + 2 * HOUR, 1).expect("block written");
        },
    );
    let at = (base + 2 * HOUR - STEP) as f64 / 1000.0;
    let url = format!("http://{}/api/v1/query", prom.addr());
    let answer = |q: &str| {
        let (url, q) = (url.clone(), q.to_owned());
        async move { common::api_json(&url, &[("query", q), ("time", format!("{at:.3}"))]).await }
    };
    prom.ready().await;
    // Every sample of every series, counted by Prometheus.
    let v = answer("count_over_time(blk_metric[2h])").await;
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(result.len(), SERIES, "{v}\n{}", prom.log());
    for s in &result {
        assert_eq!(s["value"][1], "480", "{s}");
    }
    // The last values: i * 1000 + 479 * 0.5.
    let v = answer("sum(blk_metric)").await;
    let want: f64 = (0..SERIES).map(|i| (i * 1000) as f64 + 239.5).sum();
    assert_eq!(v["data"]["result"][0]["value"][1], format!("{want}"), "{v}");
    let v = answer("count_over_time(blk_hist[2h])").await;
    assert_eq!(v["data"]["result"][0]["value"][1], "100", "{v}");
    let v = common::api_json(
        &url,
        &[
            ("query", "blk_hist[2m]".to_owned()),
            ("time", format!("{:.3}", (base + 60_000) as f64 / 1000.0)),
        ],
    )
    .await;
    assert_eq!(
        v["data"]["result"][0]["histograms"]
            .as_array()
            .map(Vec::len),
        Some(5),
        "{v}"
    );
    // The histogram series, read from its histogram chunk.
    let v = answer("histogram_count(last_over_time(blk_hist[2h]))").await;
    assert_eq!(v["data"]["result"][0]["value"][1], "396", "{v}");
}

/// The finished block directories under `dir`: named by a ULID (not a
/// `<ULID>.tmp` still being written) and holding a `meta.json`.
fn blocks_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("data dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().and_then(Ulid::parse).is_some())
        .map(|e| e.path())
        .filter(|p| p.join("meta.json").exists())
        .collect();
    out.sort();
    out
}

/// A range query's answer: each series' labels and `[t, v]` points.
async fn range(addr: &str, q: &str, start: i64, end: i64) -> serde_json::Value {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query_range"),
        &[
            ("query", q.to_owned()),
            ("start", format!("{:.3}", start as f64 / 1000.0)),
            ("end", format!("{:.3}", end as f64 / 1000.0)),
            ("step", "60".to_owned()),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"].clone()
}

/// Sluice cuts the oldest 2 h of its head into a block by itself; queries
/// answer every sample once across blocks and head; promtool reads the
/// block and dumps its samples; a Prometheus 3.5.3 given a copy answers
/// the same range queries identically; and after a `kill -9` (no
/// shutdown checkpoint) the restarted Sluice answers the same again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sluice_cuts_blocks_that_promtool_and_prometheus_read_and_restarts_onto_them() {
    const N: usize = 30;
    const MIN: i64 = 60_000;
    let data = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_sluice");
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &[]);
    let mut child = common::KillOnDrop(child);
    // 5 h of samples a minute apart, ending at most 30 min before now:
    // more than 1.5 ranges. The first sample at most 90 min into its 2 h
    // range, so the first block holds half an hour or more (a first
    // sample in the range's last minutes left the block one or two
    // samples, and Prometheus no rate to compare).
    let mut end = common::now_ms() / MIN * MIN;
    end -= ((end - 5 * HOUR).rem_euclid(2 * HOUR) - 90 * MIN).max(0);
    let start = end - 5 * HOUR;
    let value = |i: usize, t: i64| (i * 100_000) as f64 + ((t - start) / MIN) as f64;
    common::push_minutely(addr, "cut_me", &[("job", "blk")], N, (start, end), value).await;
    // Prometheus' rule: while the head spans more than 3 h, its oldest
    // aligned 2 h range becomes a block (one or two here, as `start`
    // falls against the 2 h grid).
    let want = common::blocks_cut_from(start, end);
    let cut = common::wait_for_metric(addr, "sluice_blocks_cut_total", |v| v >= want as f64).await;
    assert_eq!(cut, want as f64, "blocks cut within 20 s");
    let blocks = blocks_in(data.path());
    assert_eq!(blocks.len(), want, "{blocks:?}");
    let first: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blocks[0].join("meta.json")).expect("meta"))
            .expect("json");
    let (bmin, bmax) = (
        first["minTime"].as_i64().expect("minTime"),
        first["maxTime"].as_i64().expect("maxTime"),
    );
    assert_eq!(bmax - bmin, 2 * HOUR, "{first}");
    assert_eq!(bmin % (2 * HOUR), 0, "aligned: {first}");

    // Every sample, once, from blocks and head ((end - 5h, end] holds 300:
    // ranges are open at the start in Prometheus 3).
    let addr_s = addr.to_string();
    let count = range(&addr_s, "count_over_time(cut_me[5h])", end, end).await;
    assert_eq!(count.as_array().map(Vec::len), Some(N), "{count}");
    for s in count.as_array().into_iter().flatten() {
        assert_eq!(s["values"][0][1], "300", "{s}");
    }
    let all = range(&addr_s, "cut_me", start, end).await;
    for s in all.as_array().into_iter().flatten() {
        let i: usize = s["metric"]["i"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("i");
        let points = s["values"].as_array().expect("values");
        assert_eq!(points.len(), 301, "{}", s["metric"]);
        for p in points {
            let t = (p[0].as_f64().expect("t") * 1000.0).round() as i64;
            assert_eq!(p[1], format!("{}", value(i, t)), "i={i} t={t}");
        }
    }

    // promtool reads the block Sluice cut, and dumps exactly its samples.
    let copy = tempfile::tempdir().expect("tempdir");
    let name = blocks[0].file_name().expect("name");
    common::copy_block(&blocks[0], &copy.path().join(name));
    std::fs::create_dir(copy.path().join("wal")).expect("wal dir");
    let path = copy.path().to_str().expect("utf-8");
    let list = common::promtool3(&["tsdb", "list", path]);
    // The first range may begin before the first sample.
    let per_series = (start..=end)
        .step_by(MIN as usize)
        .filter(|t| (bmin..bmax).contains(t))
        .count();
    assert!(per_series > 0);
    assert!(
        list.contains(&format!(" {} ", N * per_series)),
        "{N} x {per_series} samples listed: {list}"
    );
    let dump = common::promtool3(&["tsdb", "dump", path]);
    assert_eq!(dump.lines().count(), N * per_series, "{dump:.2000}");
    for line in dump.lines().take(50) {
        // {__name__="cut_me", i="7", job="blk"} 12345 1700000000000
        let i: usize = line
            .split("i=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .expect("i label");
        let mut tail = line.rsplit(' ');
        let t: i64 = tail.next().and_then(|v| v.parse().ok()).expect("t");
        let v: f64 = tail.next().and_then(|v| v.parse().ok()).expect("v");
        assert!((bmin..bmax).contains(&t), "{line}");
        assert_eq!(v, value(i, t), "{line}");
    }

    // Prometheus 3.5.3 on a copy of the block answers range queries over
    // the block's time identically.
    let queries = [
        "cut_me",
        "sum by (job) (rate(cut_me[5m]))",
        "max_over_time(cut_me[17m])",
        "count(cut_me > 100000)",
    ];
    let (qs, qe) = (bmin + 10 * MIN, bmax - MIN);
    let mut ours = Vec::new();
    for q in queries {
        ours.push(range(&addr_s, q, qs, qe).await);
    }
    let prom = Prometheus::start_bin_on(
        &prometheus3("prometheus"),
        "global:\n  scrape_interval: 1h\n",
        &["--storage.tsdb.retention.time=100y"],
        |dir| common::copy_block(&blocks[0], &dir.join(name)),
    );
    prom.ready().await;
    for (q, want) in queries.iter().zip(&ours) {
        let got = range(&prom.addr(), q, qs, qe).await;
        assert!(
            got.as_array().is_some_and(|a| !a.is_empty()),
            "{q}: {got}\n{}",
            prom.log()
        );
        assert_eq!(&got, want, "{q}");
    }
    drop(prom);

    // kill -9: no shutdown checkpoint. The restart opens the block, replays
    // the WAL (which still holds the block's samples), and doubles nothing.
    child.kill();
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &[]);
    let _child = common::KillOnDrop(child);
    let addr_s = addr.to_string();
    let count = range(&addr_s, "count_over_time(cut_me[5h])", end, end).await;
    for s in count.as_array().into_iter().flatten() {
        assert_eq!(s["values"][0][1], "300", "{s}");
    }
    for (q, want) in queries.iter().zip(&ours) {
        assert_eq!(&range(&addr_s, q, qs, qe).await, want, "{q} after restart");
    }
    let blocks_after = common::self_metric(addr, "sluice_blocks").await;
    assert_eq!(blocks_after, Some(blocks.len() as f64));
}
