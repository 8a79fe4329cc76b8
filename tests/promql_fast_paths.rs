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
                    " > ",
                    " <= on (job) group_left ",
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
        let mut seen = std::collections::HashSet::new();
        for (i, s) in specs.iter().enumerate() {
            // Pairs share an instance: with different names and the same
            // job, their label sets collide once the names are dropped.
            let inst = format!("i{}", i / 2);
            if !seen.insert((s.name, inst.clone(), s.job)) {
                continue;
            }
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
                // One series per label set, as the answer gathers them.
                let mut sets: Vec<String> = a.value.iter().map(|s| labels_text(&s.labels)).collect();
                sets.sort();
                let all = sets.len();
                sets.dedup();
                prop_assert_eq!(all, sets.len(), "{}: a label set twice", q);
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

/// Aggregations folded from a table's rows as they are filled, over more
/// series and steps than the property test reaches: rows in several
/// blocks, steps in several chunks, groups whose first present row
/// changes from step to step. Each checked step of the range query is
/// what the instant query at that step answers, to the bit.
#[test]
fn folded_aggregations_answer_what_instant_queries_answer() {
    let db = Db::new(HeadOptions::default());
    let mut app = db.appender(i64::MAX);
    let mut counts = AppendCounts::default();
    // 2,400 series over 2 h at 10 s; each misses a stretch of its own, and
    // every seventh ends in a stale marker, so groups come in at each
    // step from different rows.
    const N: i64 = 720;
    for i in 0..2400i64 {
        let (inst, job) = (format!("i{i:04}"), format!("j{}", (i * 7) % 5));
        let name = if i % 3 == 0 { "g" } else { "c_total" };
        let labels = [
            ("__name__", name),
            ("instance", inst.as_str()),
            ("job", job.as_str()),
        ];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let gap = (i * 37) % N..(i * 37) % N + 40 + i % 90;
        let samples = (0..N).filter(|k| !gap.contains(k)).map(|k| {
            let v = if i % 7 == 0 && k == N - 1 {
                f64::from_bits(STALE_NAN)
            } else if name == "g" {
                ((k * 31 + i * 17) % 1000) as f64 / 7.0
            } else {
                (k * (i % 13 + 1) + i) as f64 * 0.1
            };
            (k * 10_000, v)
        });
        app.append_new(&labels, &raw, samples, &mut counts)
            .expect("fits");
    }
    app.commit();
    let engine = Engine::new(db.querier(), QueryOptions::default());
    // 5 s steps over 55 min: 661 steps, three chunks of 256.
    let (start, end, step) = (300_000, 3_600_000, 5_000);
    let at = |t: i64| {
        // The steps next to chunk bounds, and a spread of the others.
        let k = (t - start) / step;
        k % 41 == 0 || [0, 1, 254, 255, 256, 257, 511, 512, 660].contains(&k)
    };
    for q in [
        "sum by (job) (rate(c_total[5m]))",
        "sum (rate(c_total[2m]))",
        "avg by (job) (max_over_time(g[3m]))",
        "min by (job) (g)",
        "max without (instance) (g)",
        "count by (job) ({__name__=~\"g|c_total\"})",
        "group by (job) (g)",
        "sum by (job) (increase(c_total[10m]))",
    ] {
        let range = engine.range(q, start, end, step).expect("answers").value;
        let mut t = start;
        while t <= end {
            if at(t) {
                let Value::Vector(want) = engine.instant(q, t).expect("answers").value else {
                    panic!("{q}: not a vector");
                };
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|s| (labels_text(&s.labels), format!("{:?}", s.v)))
                    .collect();
                let mut got: Vec<(String, String)> = range
                    .iter()
                    .filter_map(|s| {
                        let v = s.points.iter().find(|p| p.0 == t)?.1;
                        Some((labels_text(&s.labels), format!("{v:?}")))
                    })
                    .collect();
                let mut want = want;
                assert_eq!(canonical(&mut got), canonical(&mut want), "{q} at {t}");
            }
            t += step;
        }
    }
}

/// Two series whose labels are equal once a range function drops their
/// names: apart in time, the range query's answer is one series holding
/// both (as the step-by-step answer gathers them); present at the same
/// step, it is Prometheus' error.
#[test]
fn rows_equal_without_names_are_one_series_or_an_error() {
    let db = Db::new(HeadOptions::default());
    let mut app = db.appender(i64::MAX);
    let mut counts = AppendCounts::default();
    let mut add = |name: &str, inst: &str, ks: std::ops::Range<i64>| {
        let labels = [("__name__", name), ("instance", inst), ("job", "j")];
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        let samples = ks.map(|k| (k * STEP, k as f64));
        app.append_new(&labels, &raw, samples, &mut counts)
            .expect("fits");
    };
    add("a_total", "x", 0..20);
    add("b_total", "x", 30..50);
    add("a_total", "y", 0..40);
    add("b_total", "y", 30..50);
    app.commit();
    let engine = Engine::new(db.querier(), QueryOptions::default());
    let (start, end) = (0, 55 * STEP);
    let q = r#"rate({__name__=~"a_total|b_total", instance="x"}[1m])"#;
    let a = engine.range(q, start, end, STEP).expect("answers").value;
    assert_eq!(a.len(), 1, "{a:?}");
    let mut t = start;
    while t <= end {
        let Value::Vector(v) = engine.instant(q, t).expect("answers").value else {
            panic!("not a vector");
        };
        let got = a[0].points.iter().find(|p| p.0 == t).map(|p| p.1);
        assert_eq!(
            got.map(f64::to_bits),
            v.first().map(|s| s.v.to_bits()),
            "at {t}"
        );
        t += STEP;
    }
    let q = r#"rate({__name__=~"a_total|b_total", instance="y"}[1m])"#;
    let e = engine
        .range(q, start, end, STEP)
        .expect_err("two rows at once");
    assert!(e.to_string().contains("same labelset"), "{e}");
}
