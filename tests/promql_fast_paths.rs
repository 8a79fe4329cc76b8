//! The range-query fast paths (range tables for range functions, selector
//! tables for aggregations over a selector, aggregations read in place, a
//! plain selector's answer made series by series)
//! against the general path: a range query's answer must be, step by
//! step, what an instant query at that step answers, errors included.
//! Random series (gaps, stale markers, names that collide once dropped)
//! and random queries from a small grammar, binary operations included.

use proptest::prelude::*;
use sluice::promql::engine::STALE_NAN;
use sluice::promql::value::Value;
use sluice::promql::{Engine, QueryOptions};
use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Db, HeadOptions};

const STEP: i64 = 15_000;
const POINTS: i64 = 60;

/// One series: its name, its `job`, and per step a value, a stale marker
/// or nothing.
#[derive(Debug, Clone)]
struct Spec {
    name: &'static str,
    job: &'static str,
    points: Vec<Option<f64>>,
}

fn spec() -> impl Strategy<Value = Spec> {
    let point = prop_oneof![
        6 => (0u32..1000).prop_map(|v| Some(f64::from(v))),
        1 => Just(Some(f64::from_bits(STALE_NAN))),
        2 => Just(None),
    ];
    (
        prop::sample::select(&["a_total", "b_total", "g"][..]),
        prop::sample::select(&["x", "y", "z"][..]),
        prop::collection::vec(point, POINTS as usize),
    )
        .prop_map(|(name, job, points)| Spec { name, job, points })
}

fn query() -> impl Strategy<Value = String> {
    let selector = prop::sample::select(
        &[
            "a_total",
            "{__name__=~\"a_total|b_total\"}",
            "{job=\"x\"}",
            "g offset 1m",
            "a_total @ 600",
        ][..],
    );
    let agg = prop::sample::select(&["sum", "count", "min", "max", "avg", "group"][..]);
    let by = prop::sample::select(&["", " by (job)", " without (job)", " by (__name__)"][..]);
    let func = prop::sample::select(
        &[
            "rate",
            "increase",
            "max_over_time",
            "min_over_time",
            "count_over_time",
        ][..],
    );
    // 10m: 40 steps a window, where a range table keeps a queue of
    // extremes (an instant query folds each window).
    let range = prop::sample::select(&["2m", "10m"][..]);
    prop_oneof![
        // A plain selector: its range query's answer made series by series.
        selector.clone().prop_map(str::to_owned),
        (agg.clone(), by.clone(), selector.clone()).prop_map(|(a, b, s)| format!("{a}{b} ({s})")),
        (agg, by, func.clone(), selector.clone(), range.clone())
            .prop_map(|(a, b, f, s, r)| format!("{a}{b} ({f}({s}[{r}]))")),
        (func.clone(), selector.clone(), range).prop_map(|(f, s, r)| format!("{f}({s}[{r}])")),
        // Binary operations, matched across steps by a memo.
        (
            func,
            selector.clone(),
            prop::sample::select(
                &[
                    " / ",
                    " > bool ",
                    " - on (job) group_left ",
                    " + ignoring (instance) group_left ",
                    " * on (instance) ",
                    " or ",
                    " unless ",
                ][..]
            ),
            selector,
        )
            .prop_map(|(f, a, op, b)| {
                if op.contains("group_left") {
                    format!("{f}({a}[2m]){op}sum by (job) ({b})")
                } else {
                    format!("{f}({a}[2m]){op}{b}")
                }
            }),
    ]
}

/// A canonical text of an answer at one time: label sets and values, sorted.
fn canonical(rows: &mut [(String, String)]) -> String {
    rows.sort();
    rows.iter()
        .map(|(l, v)| format!("{l}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

fn labels_text(labels: &[sluice::storage::labels::Label]) -> String {
    labels
        .iter()
        .map(|l| format!("{}={:?}", l.name, l.value))
        .collect::<Vec<_>>()
        .join(",")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_range_query_answers_what_instant_queries_answer_step_by_step(
        specs in prop::collection::vec(spec(), 1..12),
        q in query(),
    ) {
        let db = Db::new(HeadOptions::default());
        let mut app = db.appender(i64::MAX);
        let mut counts = AppendCounts::default();
        for (i, s) in specs.iter().enumerate() {
            let inst = format!("i{i}");
            let labels = [("__name__", s.name), ("instance", inst.as_str()), ("job", s.job)];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let samples = s
                .points
                .iter()
                .enumerate()
                .filter_map(|(k, v)| v.map(|v| (k as i64 * STEP, v)));
            app.append_new(&labels, &raw, samples, &mut counts).expect("fits");
        }
        app.commit();
        let engine = Engine::new(db.querier(), QueryOptions::default());
        let (start, end) = (5 * STEP, (POINTS - 1) * STEP);
        let range = engine.range(&q, start, end, STEP);
        let mut by_step: Vec<Result<String, String>> = Vec::new();
        let mut t = start;
        while t <= end {
            by_step.push(match engine.instant(&q, t) {
                Ok(a) => match a.value {
                    Value::Vector(v) => Ok(canonical(
                        &mut v.iter().map(|s| (labels_text(&s.labels), format!("{:?}", s.v))).collect::<Vec<_>>(),
                    )),
                    other => Ok(format!("{other:?}")),
                },
                Err(e) => Err(e.to_string()),
            });
            t += STEP;
        }
        match range {
            Err(e) => {
                // The range query fails where some step does, with that error.
                prop_assert!(
                    by_step.iter().any(|r| r.as_ref().err() == Some(&e.to_string())),
                    "{q}: range error {e} that no step gives: {by_step:?}"
                );
            }
            Ok(a) => {
                let mut rows: Vec<Vec<(String, String)>> = vec![Vec::new(); by_step.len()];
                for s in &a.value {
                    for &(pt, v) in &s.points {
                        let k = ((pt - start) / STEP) as usize;
                        rows[k].push((labels_text(&s.labels), format!("{v:?}")));
                    }
                }
                for (k, (mut got, want)) in rows.into_iter().zip(&by_step).enumerate() {
                    let want = want.as_ref().map_err(|e| format!("{q}: step {k} fails alone: {e}"));
                    let want = match want {
                        Ok(w) => w,
                        Err(m) => return Err(TestCaseError::fail(m)),
                    };
                    prop_assert_eq!(&canonical(&mut got), want, "{} at step {}", q, k);
                }
            }
        }
    }
}
