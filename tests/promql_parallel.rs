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
    let before = sluice::parallel::helper_runs();
    sluice::parallel::set_max_workers(4);
    let spread = answers(&engine);
    assert!(
        sluice::parallel::helper_runs() > before,
        "helpers ran parts of the work"
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

/// The smallest sample limit under which `q` answers over the bench
/// range at `step`.
fn least_limit(head: &sluice::storage::Db, q: &str, step: i64, opts: &QueryOptions) -> usize {
    let (start, end, _) = promql_head::range();
    let answers = |max_samples| {
        let opts = QueryOptions {
            max_samples,
            ..opts.clone()
        };
        let engine = Engine::new(head.querier(), opts);
        match engine.range(q, start, end, step) {
            Ok(_) => true,
            Err(e) => {
                assert!(e.to_string().contains("too many samples"), "{q}: {e}");
                false
            }
        }
    };
    let (mut lo, mut hi) = (0usize, 1usize << 26);
    assert!(answers(hi), "{q} answers under a generous limit");
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if answers(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// A range table, or a plain selector's range query, whose selection is
/// decoded series by series counts against the sample limit what it
/// holds (the table's cells or the answer's points, and one series per
/// worker), not every sample it reads, as Prometheus counts a range
/// query: over 55 minutes at a 5-minute step it answers under a limit far
/// below the samples read, which decoding the selection first does not
/// (`use_start_timestamps` makes the selector be decoded first, to look
/// for start times), and answers the same.
#[test]
fn selections_decoded_series_by_series_count_what_they_hold() {
    let head = promql_head::head();
    let every_sample = 10_000 * promql_head::POINTS as usize;
    let first = QueryOptions {
        use_start_timestamps: true,
        ..QueryOptions::default()
    };
    let step = 300_000;
    for q in [
        "sum by (job) (rate(http_requests_total[5m]))",
        "count by (job) (http_requests_total)",
        "http_requests_total",
        "count_over_time(http_requests_total[1h])",
        // A subquery's evaluator asks its steps again for each outer step:
        // its tables stay whole (none is folded), and read in place.
        "max_over_time(sum by (job) (rate(http_requests_total[5m]))[30m:1m])",
    ] {
        let row_by_row = least_limit(&head, q, step, &QueryOptions::default());
        let decoded_first = least_limit(&head, q, step, &first);
        // 10,000 series at 12 steps: 120,000 cells or points.
        assert!(row_by_row <= every_sample / 8, "{q}: {row_by_row}");
        assert!(decoded_first > every_sample, "{q}: {decoded_first}");
        let (start, end, _) = promql_head::range();
        let answer = |opts: &QueryOptions| {
            let engine = Engine::new(head.querier(), opts.clone());
            format!("{:?}", engine.range(q, start, end, step).map(|a| a.value))
        };
        let (a, b) = (answer(&QueryOptions::default()), answer(&first));
        assert!(a == b, "{q}: {a:.300} against {b:.300}");
        assert!(!a.contains("Err("), "{q}: {a:.300}");
    }
}
