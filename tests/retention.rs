//! Retention and the memory bound, with an injected clock instead of
//! sleeps: chunks and series past retention leave the head, the index and
//! every API, the rest stays; a flood of new series under a small
//! `max-memory` ends in 503s (queries still answer), and once retention
//! frees the head, writes are accepted again.

mod common;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use sluice::config::Config;
use sluice::storage::Clock;

const MIN: i64 = 60_000;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;

fn fake_clock(t: i64) -> (Arc<AtomicI64>, Clock) {
    let now = Arc::new(AtomicI64::new(t));
    let n = Arc::clone(&now);
    (now, Clock::new(move || n.load(Ordering::Relaxed)))
}

/// A range query's samples for one selector at `time` (ms).
async fn raw_samples(addr: std::net::SocketAddr, selector: &str, time: i64) -> Vec<i64> {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query"),
        &[
            ("query", format!("{selector}[60d]")),
            ("time", (time as f64 / 1000.0).to_string()),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["result"]
        .as_array()
        .expect("matrix")
        .iter()
        .flat_map(|s| s["values"].as_array().expect("values").clone())
        .map(|p| (p[0].as_f64().expect("t") * 1000.0).round() as i64)
        .collect()
}

#[tokio::test]
async fn retention_drops_old_chunks_and_series_and_keeps_the_rest() {
    let t0 = (common::now_ms() / HOUR) * HOUR;
    let (now, clock) = fake_clock(t0);
    let s = common::start_with_clock(
        Config {
            retention: std::time::Duration::from_secs(24 * 3600),
            ..Config::default()
        },
        clock,
    )
    .await;
    // keep: a sample every 15 min over the last 20 h (chunks are cut at 2 h
    // boundaries); old: one hour of samples 20 h ago.
    let keep: Vec<(i64, f64)> = (0..=80)
        .map(|i| (t0 - 20 * HOUR + i * 15 * MIN, i as f64))
        .collect();
    let old: Vec<(i64, f64)> = (0..4)
        .map(|i| (t0 - 20 * HOUR + i * 15 * MIN, 1.0))
        .collect();
    let body = common::body(vec![
        common::series(&[("__name__", "keep"), ("job", "a")], &keep),
        common::series(&[("__name__", "old"), ("job", "gone_soon")], &old),
    ]);
    assert_eq!(common::push(s.addr, body).await.0, 204);
    assert_eq!(
        common::self_metric(s.addr, "sluice_head_series").await,
        Some(2.0)
    );
    let chunks_before = common::self_metric(s.addr, "sluice_head_chunks")
        .await
        .expect("chunks");
    assert!(chunks_before >= 11.0, "{chunks_before}");

    // 14 h later the cutoff is t0 - 10 h: `old` has nothing left, `keep`
    // loses the chunks that end before it.
    now.store(t0 + 14 * HOUR, Ordering::Relaxed);
    let series = common::wait_for_metric(s.addr, "sluice_head_series", |v| v == 1.0).await;
    assert_eq!(series, 1.0);
    let cutoff = t0 - 10 * HOUR;
    let chunks_after = common::self_metric(s.addr, "sluice_head_chunks")
        .await
        .expect("chunks");
    assert!(
        chunks_after < chunks_before,
        "{chunks_before} -> {chunks_after}"
    );
    assert_eq!(
        common::self_metric(s.addr, "sluice_retention_removed_series_total").await,
        Some(1.0)
    );
    let at = t0 + 14 * HOUR;
    assert!(raw_samples(s.addr, "old", at).await.is_empty());
    let kept = raw_samples(s.addr, "keep", at).await;
    // Every sample from the cutoff on is there; older ones only where they
    // share a chunk (at most one 2 h range) with newer ones.
    let want: Vec<i64> = keep
        .iter()
        .map(|&(t, _)| t)
        .filter(|&t| t >= cutoff)
        .collect();
    assert!(kept.ends_with(&want), "{kept:?}");
    assert!(
        kept[0] >= cutoff - 2 * HOUR && kept.len() < keep.len(),
        "{kept:?}"
    );
    // Gone from the index too.
    let (_, series) = common::get(s.addr, "/api/v1/series?match[]=old").await;
    assert!(series.contains("\"data\":[]"), "{series}");
    let (_, jobs) = common::get(s.addr, "/api/v1/label/job/values").await;
    assert!(
        !jobs.contains("gone_soon") && jobs.contains("\"a\""),
        "{jobs}"
    );
    // The surviving series still takes samples.
    let body = common::body(vec![common::series(
        &[("__name__", "keep"), ("job", "a")],
        &[(at, 5.0)],
    )]);
    assert_eq!(common::push(s.addr, body).await.0, 204);
}

/// Resident memory of this process, in bytes.
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

#[tokio::test]
async fn a_flood_of_new_series_ends_in_503_and_writes_resume_after_retention() {
    const LIMIT: u64 = 64 << 20;
    let t0 = common::now_ms();
    let (now, clock) = fake_clock(t0);
    let baseline = rss_bytes();
    let s = common::start_with_clock(
        Config {
            max_memory: LIMIT,
            retention: std::time::Duration::from_secs(24 * 3600),
            ..Config::default()
        },
        clock,
    )
    .await;
    let batch = |n: usize, t: i64| {
        common::body(
            (0..2000)
                .map(|i| {
                    let id = format!("{n}-{i}");
                    common::series(
                        &[
                            ("__name__", "flood"),
                            ("id", &id),
                            ("instance", "host-0123.example.internal:9100"),
                            ("job", "node-exporter"),
                            ("pod", &format!("pod-{id}-abcdef")),
                        ],
                        &[(t, 1.0)],
                    )
                })
                .collect(),
        )
    };
    let mut accepted = 0;
    let mut refused = None;
    for n in 0..1000 {
        let resp = reqwest::Client::new()
            .post(format!("http://{}/api/v1/write", s.addr))
            .header("content-encoding", "snappy")
            .header("content-type", "application/x-protobuf")
            .body(batch(n, t0))
            .send()
            .await
            .expect("sent");
        match resp.status().as_u16() {
            204 => accepted += 1,
            503 => {
                let retry = resp.headers().get("retry-after").cloned();
                refused = Some((retry, resp.text().await.expect("body")));
                break;
            }
            other => panic!(
                "unexpected {other}: {}",
                resp.text().await.unwrap_or_default()
            ),
        }
    }
    let (retry, message) = refused.expect("the flood ends in 503");
    assert!(retry.is_some_and(|v| v.to_str().is_ok_and(|s| s.parse::<u32>().is_ok())));
    assert!(message.contains("max-memory"), "{message}");
    let head_bytes = common::self_metric(s.addr, "sluice_head_bytes")
        .await
        .expect("head bytes");
    assert!(head_bytes >= LIMIT as f64 * 0.8, "{head_bytes}");
    assert_eq!(
        common::self_metric(s.addr, "sluice_memory_limit_bytes").await,
        Some(LIMIT as f64)
    );
    let series = common::self_metric(s.addr, "sluice_head_series")
        .await
        .expect("series");
    assert_eq!(series, (accepted * 2000) as f64);
    // Resident memory grew by no more than the limit plus 50% slack (the
    // head's accounting is an estimate; request buffers and the allocator's
    // free lists come on top).
    let grown = rss_bytes().saturating_sub(baseline);
    eprintln!(
        "{accepted} requests ({series} series) accepted; head accounts {head_bytes} bytes; RSS grew {grown} bytes"
    );
    assert!(
        grown < LIMIT + LIMIT / 2,
        "RSS grew {grown} bytes for a {LIMIT}-byte limit"
    );
    // Queries keep working while writes are pushed back.
    let v = common::query_vector(s.addr, "count(flood)", Some(t0 as f64 / 1000.0)).await;
    assert_eq!(v[0].1, series.to_string());
    assert_eq!(
        common::self_metric(
            s.addr,
            "sluice_write_throttled_requests_total{protocol=\"remote_write\"}"
        )
        .await,
        Some(1.0)
    );
    // Two days on, retention empties the head and writes are taken again.
    now.store(t0 + 2 * DAY, Ordering::Relaxed);
    assert_eq!(
        common::wait_for_metric(s.addr, "sluice_head_series", |v| v == 0.0).await,
        0.0
    );
    let (code, text) = common::push(s.addr, batch(9999, t0 + 2 * DAY)).await;
    assert_eq!(code, 204, "{text}");
}
