//! One query spread over several threads answers exactly as on one: the
//! head's shards cut among workers (each part sorted, then merged), the
//! series' chunks decoded in parts, and a range function's table cut by
//! steps. Over the bench head (10,000 counters and 200 histograms), large
//! enough that every one of those paths takes helpers. Its own test binary:
//! the worker allowance is process-wide.

#[path = "common/promql_head.rs"]
mod promql_head;

use sluice::promql::value::Value;
use sluice::promql::{Engine, QueryOptions};

const QUERIES: &[&str] = &[
    "sum by (job) (rate(http_requests_total[5m]))",
    "rate(http_requests_total[5m])",
    "count by (job) ({__name__=~\"http_.*\"})",
    "avg_over_time(http_requests_total[10m])",
    "max_over_time(http_requests_total[1h])",
    "http_requests_total{job=~\"job1.*\"}",
    "histogram_quantile(0.99, sum by (le, job) (rate(http_request_duration_seconds_bucket[5m])))",
    "topk(3, http_requests_total)",
    "{__name__=~\".+\"}",
];

/// Every query's range and instant answers (at the end and in the
/// middle, where the newest sample is not the open chunk's last), as
/// text: exact, floats by their bits through `{:?}`.
fn answers(engine: &Engine<'_>) -> Vec<String> {
    let (start, end, step) = promql_head::range();
    let mut out = Vec::new();
    for q in QUERIES {
        let range = engine.range(q, start, end, step).map(|a| a.value);
        out.push(format!("{q} range: {range:?}"));
        for t in [end, (start + end) / 2] {
            // In the order given: a selection's order shows.
            let instant = engine.instant(q, t).map(|a| match a.value {
                Value::Vector(v) => format!("{v:?}"),
                other => format!("{other:?}"),
            });
            out.push(format!("{q} at {t}: {instant:?}"));
        }
    }
    out
}

#[test]
fn one_thread_and_several_answer_the_same() {
    let head = promql_head::head();
    let engine = Engine::new(head.querier(), QueryOptions::default());
    sluice::parallel::set_max_workers(1);
    let alone = answers(&engine);
    let before = sluice::parallel::helpers_started();
    sluice::parallel::set_max_workers(4);
    let spread = answers(&engine);
    assert!(
        sluice::parallel::helpers_started() >= before + 3 * QUERIES.len(),
        "helpers were started"
    );
    assert_eq!(alone.len(), spread.len());
    for (a, s) in alone.iter().zip(&spread) {
        assert!(
            a == s,
            "differs:\n one thread: {a:.300}\n several:    {s:.300}"
        );
    }
    // The answers are real ones, not errors.
    assert!(alone.iter().all(|a| !a.contains("Err(")), "{alone:?}");
}
