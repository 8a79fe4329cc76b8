//! `kill -9` at each step of a block cut and of a compaction, with the
//! built binary: the process is killed at a named step (`SIGKILL` from a
//! crash point armed by `SLUICE_TEST_KILL_AT`), and the next start loses
//! nothing that was acknowledged and doubles nothing. Compacted blocks are
//! then read by Prometheus 3.5.3's promtool and by Prometheus itself.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::KillOnDrop;
use sluice::storage::block::Ulid;

const HOUR: i64 = 3_600_000;
const MIN: i64 = 60_000;
const N: usize = 20;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

fn value(i: usize, t: i64) -> f64 {
    (i * 100_000) as f64 + (t / MIN % 100_000) as f64
}

/// Pushes `N` series a sample a minute over `(end - hours, end]`, in one
/// request, and waits for its acknowledgement.
async fn push(addr: std::net::SocketAddr, start: i64, end: i64) {
    let ts: Vec<i64> = (start + MIN..=end).step_by(MIN as usize).collect();
    let series: Vec<_> = (0..N)
        .map(|i| {
            let samples: Vec<(i64, f64)> = ts.iter().map(|&t| (t, value(i, t))).collect();
            common::series(&[("__name__", "crash_me"), ("i", &i.to_string())], &samples)
        })
        .collect();
    let (status, text) = common::push(addr, common::body(series)).await;
    assert_eq!(status, 204, "{text}");
}

/// A range query's result.
async fn range(addr: &str, q: &str, start: i64, end: i64, step: i64) -> serde_json::Value {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query_range"),
        &[
            ("query", q.to_owned()),
            ("start", format!("{:.3}", start as f64 / 1000.0)),
            ("end", format!("{:.3}", end as f64 / 1000.0)),
            ("step", format!("{}", step / 1000)),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{q}: {v}");
    v["data"]["result"].clone()
}

/// Every pushed sample is answered, once, with its value.
async fn assert_all_there(addr: std::net::SocketAddr, start: i64, end: i64, when: &str) {
    let addr = addr.to_string();
    let per_series = ((end - start) / MIN) as usize;
    let count = range(&addr, "count_over_time(crash_me[1d])", end, end, MIN).await;
    assert_eq!(count.as_array().map(Vec::len), Some(N), "{when}: {count}");
    for s in count.as_array().into_iter().flatten() {
        assert_eq!(
            s["values"][0][1],
            per_series.to_string(),
            "{when}: samples of {}",
            s["metric"]
        );
    }
    let all = range(&addr, "crash_me", start + MIN, end, MIN).await;
    for s in all.as_array().into_iter().flatten() {
        let i: usize = s["metric"]["i"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("i");
        let points = s["values"].as_array().expect("values");
        assert_eq!(points.len(), per_series, "{when}: {}", s["metric"]);
        for p in points {
            let t = (p[0].as_f64().expect("t") * 1000.0).round() as i64;
            assert_eq!(p[1], format!("{}", value(i, t)), "{when}: i={i} t={t}");
        }
    }
}

/// The block directories under `dir` and what else is there.
fn listing(dir: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let mut blocks = Vec::new();
    let mut other = Vec::new();
    for e in std::fs::read_dir(dir)
        .expect("data dir")
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if Ulid::parse(&name).is_some() {
            blocks.push(e.path());
        } else {
            other.push(name);
        }
    }
    blocks.sort();
    other.sort();
    (blocks, other)
}

fn meta(block: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(block.join("meta.json")).expect("meta")).expect("json")
}

/// Waits (at most 60 s) for the process to end; it must have been killed
/// by SIGKILL, as at a crash point.
fn wait_killed(child: &mut KillOnDrop, point: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            assert_eq!(status.signal(), Some(9), "{point}: {status:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{point}: the crash point was not reached within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Loads `(end - span, end]` into a Sluice whose blocks are too long to be
/// cut yet, then kills it (`kill -9`: the WAL holds everything), so that
/// the next start has a full head to cut.
async fn load(data: &Path, span: i64) -> (i64, i64) {
    let end = common::now_ms() / MIN * MIN;
    let start = end - span;
    let (child, addr) = common::spawn_sluice(
        bin(),
        data,
        "info",
        &["--storage-min-block-duration", "24h"],
    );
    let mut child = KillOnDrop(child);
    push(addr, start, end).await;
    assert_all_there(addr, start, end, "loaded").await;
    child.kill();
    (start, end)
}

/// Starts with `point` armed and `args`, and waits for the kill.
fn crash_at(data: &Path, point: &str, args: &[&str]) {
    let (child, _) =
        common::spawn_sluice_with_env(bin(), data, "info", args, &[("SLUICE_TEST_KILL_AT", point)]);
    let mut child = KillOnDrop(child);
    wait_killed(&mut child, point);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_each_step_of_a_block_cut_loses_and_doubles_nothing() {
    for point in ["block-writing", "block-written", "head-truncated"] {
        let data = tempfile::tempdir().expect("tempdir");
        let (start, end) = load(data.path(), 5 * HOUR).await;
        crash_at(data.path(), point, &[]);
        let (blocks, other) = listing(data.path());
        let stale: Vec<String> = other
            .iter()
            .filter(|n| n.ends_with(".tmp"))
            .cloned()
            .collect();
        match point {
            "block-writing" => {
                assert!(blocks.is_empty(), "{point}: {blocks:?}");
                assert!(
                    other.iter().any(|n| n.ends_with(".tmp")),
                    "{point}: a half-written block is left: {other:?}"
                );
            }
            _ => assert_eq!(blocks.len(), 1, "{point}: {blocks:?} {other:?}"),
        }

        let (child, addr) = common::spawn_sluice(bin(), data.path(), "info", &[]);
        let _child = KillOnDrop(child);
        assert_all_there(addr, start, end, point).await;
        // The cut is done (again, for a half-written block) and the same
        // answers come from block and head.
        let cut = common::wait_for_metric(addr, "sluice_blocks", |v| v >= 1.0).await;
        assert!(cut >= 1.0, "{point}: a block after the restart");
        // The head may hold more than one block's span, so a later block
        // of the same cut can be in the writing while the first is served:
        // the half-written block left by the crash is gone at once, and
        // the cut's own `.tmp` directories are gone when it ends.
        let (_, other) = listing(data.path());
        assert!(
            stale.iter().all(|n| !other.contains(n)),
            "{point}: the crash's half-written block is still there: {other:?}"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let (blocks, other) = loop {
            let (blocks, other) = listing(data.path());
            if other.iter().all(|n| !n.ends_with(".tmp")) || Instant::now() > deadline {
                break (blocks, other);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            other.iter().all(|n| !n.ends_with(".tmp")),
            "{point}: {other:?}"
        );
        assert!(!blocks.is_empty());
        assert_all_there(addr, start, end, &format!("{point}, after the cut")).await;
    }
}

const COMPACTING: [&str; 4] = [
    "--storage-min-block-duration",
    "20m",
    "--storage-max-block-duration",
    "1h",
];

/// The same blocks, compaction off.
const SETTLED: [&str; 4] = [
    "--storage-min-block-duration",
    "20m",
    "--storage-max-block-duration",
    "20m",
];

/// Each block's (minTime, maxTime, level), in time order.
fn spans(blocks: &[PathBuf]) -> Vec<(i64, i64, i64)> {
    let mut out: Vec<(i64, i64, i64)> = blocks
        .iter()
        .map(|b| {
            let m = meta(b);
            (
                m["minTime"].as_i64().expect("minTime"),
                m["maxTime"].as_i64().expect("maxTime"),
                m["compaction"]["level"].as_i64().expect("level"),
            )
        })
        .collect();
    out.sort();
    out
}

/// Right after a start (before the first block check, 5 s later): no
/// unfinished block, and no two blocks hold the same time (parents a
/// crash left beside their compacted block were deleted).
fn assert_clean_start(data: &Path, when: &str) -> Vec<(i64, i64, i64)> {
    let (blocks, other) = listing(data);
    assert!(
        other.iter().all(|n| !n.ends_with(".tmp")),
        "{when}: {other:?}"
    );
    let spans = spans(&blocks);
    assert!(
        spans.windows(2).all(|w| w[0].1 <= w[1].0),
        "{when}: overlapping blocks {spans:?}"
    );
    spans
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_compaction_loses_and_doubles_nothing_and_prometheus_reads_the_result() {
    let mut last = None;
    for point in ["compaction-writing", "compaction-written"] {
        let data = tempfile::tempdir().expect("tempdir");
        let (start, end) = load(data.path(), 4 * HOUR).await;
        crash_at(data.path(), point, &COMPACTING);
        let (blocks, other) = listing(data.path());
        let levels: Vec<i64> = spans(&blocks).iter().map(|s| s.2).collect();
        match point {
            "compaction-writing" => {
                assert!(levels.iter().all(|&l| l == 1), "{point}: {levels:?}");
                assert!(
                    other.iter().any(|n| n.ends_with(".tmp")),
                    "{point}: {other:?}"
                );
            }
            _ => assert!(
                levels.contains(&2),
                "{point}: the compacted block is in place beside its parents: {levels:?}"
            ),
        }

        let (child, addr) = common::spawn_sluice(bin(), data.path(), "info", &COMPACTING);
        let mut child = KillOnDrop(child);
        assert_clean_start(data.path(), point);
        assert_all_there(addr, start, end, point).await;
        // Compaction goes on (again, for a half-written block).
        let done =
            common::wait_for_metric(addr, "sluice_block_compactions_total", |v| v >= 1.0).await;
        assert!(done >= 1.0, "{point}: compacted after the restart");
        assert_all_there(addr, start, end, &format!("{point}, after compaction")).await;
        child.kill();
        last = Some((data, start, end));
    }

    // Prometheus 3.5.3's tools read the compacted blocks. A start with
    // compaction off settles them (nothing more is cut: the head spans
    // less than 1.5 ranges).
    let Some((data, start, end)) = last else {
        return;
    };
    let (child, addr) = common::spawn_sluice(bin(), data.path(), "info", &SETTLED);
    let _child = KillOnDrop(child);
    let spans = assert_clean_start(data.path(), "settled");
    assert!(
        spans.iter().any(|s| s.2 == 2 && s.1 - s.0 == HOUR),
        "an hour compacted from three 20 min blocks: {spans:?}"
    );
    let (blocks, _) = listing(data.path());
    let (lo, floor) = (spans[0].0, spans[spans.len() - 1].1);
    let copy = tempfile::tempdir().expect("tempdir");
    for b in &blocks {
        common::copy_block(b, &copy.path().join(b.file_name().expect("name")));
    }
    std::fs::create_dir(copy.path().join("wal")).expect("wal dir");
    let path = copy.path().to_str().expect("utf-8");
    let list = common::promtool3(&["tsdb", "list", path]);
    assert_eq!(list.lines().count(), blocks.len() + 1, "{list}");
    let in_blocks = (start + MIN..=end)
        .step_by(MIN as usize)
        .filter(|&t| t < floor)
        .count();
    let dump = common::promtool3(&["tsdb", "dump", path]);
    assert_eq!(dump.lines().count(), N * in_blocks, "{dump:.2000}");

    let queries = [
        "crash_me",
        "sum(rate(crash_me[5m]))",
        "max_over_time(crash_me[17m])",
    ];
    let (qs, qe) = ((start + 10 * MIN).max(lo + 10 * MIN), floor - MIN);
    let ours_addr = addr.to_string();
    let mut ours = Vec::new();
    for q in queries {
        ours.push(range(&ours_addr, q, qs, qe, MIN).await);
    }
    let prom = common::prometheus3_on_blocks(&blocks);
    prom.ready().await;
    for (q, want) in queries.iter().zip(&ours) {
        let got = range(&prom.addr(), q, qs, qe, MIN).await;
        assert!(
            got.as_array().is_some_and(|a| !a.is_empty()),
            "{q}: {got}\n{}",
            prom.log()
        );
        assert_eq!(&got, want, "{q}");
    }
}

/// Samples per series `i` over the last day at `end`.
async fn counts(
    addr: std::net::SocketAddr,
    end: i64,
) -> std::collections::BTreeMap<String, String> {
    let v = range(
        &addr.to_string(),
        "count_over_time(crash_me[1d])",
        end,
        end,
        MIN,
    )
    .await;
    v.as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metric"]["i"].as_str().unwrap_or_default().to_owned(),
                s["values"][0][1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn admin(addr: std::net::SocketAddr, path: &str, form: &[(&str, String)]) -> Option<u16> {
    reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/admin/tsdb/{path}"))
        .form(form)
        .send()
        .await
        .ok()
        .map(|r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_while_cleaning_tombstones_loses_and_doubles_nothing() {
    let data = tempfile::tempdir().expect("tempdir");
    let (start, end) = load(data.path(), 4 * HOUR).await;
    let args = [&SETTLED[..], &["--web.enable-admin-api"]].concat();
    // Blocks cut, then one series deleted whole and an hour of another.
    let (child, addr) = common::spawn_sluice(bin(), data.path(), "info", &args);
    let mut child = KillOnDrop(child);
    common::wait_for_metric(addr, "sluice_blocks", |v| v >= 3.0).await;
    let secs = |t: i64| format!("{:.3}", t as f64 / 1000.0);
    let whole = [("match[]", "crash_me{i=\"0\"}".to_owned())];
    assert_eq!(admin(addr, "delete_series", &whole).await, Some(204));
    let hour = [
        ("match[]", "crash_me{i=\"1\"}".to_owned()),
        ("start", secs(start + MIN)),
        ("end", secs(start + HOUR)),
    ];
    assert_eq!(admin(addr, "delete_series", &hour).await, Some(204));
    let want = counts(addr, end).await;
    let per_series = ((end - start) / MIN).to_string();
    assert!(!want.contains_key("0"), "{want:?}");
    assert_eq!(want["1"], ((end - start - HOUR) / MIN).to_string());
    assert_eq!(want["2"], per_series);
    child.kill();

    // Killed once the first block written again is in place, its parent
    // not yet deleted.
    let point = "tombstones-cleaned";
    let (child, addr) = common::spawn_sluice_with_env(
        bin(),
        data.path(),
        "info",
        &args,
        &[("SLUICE_TEST_KILL_AT", point)],
    );
    let mut child = KillOnDrop(child);
    assert_eq!(
        admin(addr, "clean_tombstones", &[]).await,
        None,
        "killed mid-request"
    );
    wait_killed(&mut child, point);
    let (blocks, _) = listing(data.path());
    let parents = blocks
        .iter()
        .filter(|b| {
            meta(b)["compaction"]["parents"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        })
        .count();
    assert_eq!(parents, 1, "one block written again, beside its parent");

    let (child, addr) = common::spawn_sluice(bin(), data.path(), "info", &args);
    let _child = KillOnDrop(child);
    assert_clean_start(data.path(), point);
    assert_eq!(counts(addr, end).await, want, "{point}: after the restart");
    assert_eq!(admin(addr, "clean_tombstones", &[]).await, Some(204));
    assert_eq!(counts(addr, end).await, want, "{point}: cleaned");
    let (blocks, _) = listing(data.path());
    assert!(
        blocks
            .iter()
            .all(|b| meta(b)["stats"]["numTombstones"].as_u64().unwrap_or(0) == 0),
        "no tombstone left"
    );
}
