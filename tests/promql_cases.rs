//! Hand-computed PromQL cases per family, evaluated by the engine over a
//! small head: aggregations, binary operators and matching, math, staleness,
//! offsets, `@`, subqueries, and the edge values NaN, ±Inf and empty ranges.

use sluice::promql::value::{Sample, Value};
use sluice::promql::{Engine, QueryError, QueryOptions};
use sluice::storage::labels::encode_canonical;
use sluice::storage::{AppendCounts, Db, HeadOptions};

const M: i64 = 60_000;

fn head() -> Db {
    let head = Db::new(HeadOptions::default());
    let mut app = head.appender(i64::MAX);
    let mut c = AppendCounts::default();
    let mut add = |labels: &[(&str, &str)], samples: &[(i64, f64)]| {
        let mut raw = Vec::new();
        encode_canonical(labels.iter().copied(), &mut raw);
        app.append_new(labels, &raw, samples.iter().copied(), &mut c)
            .expect("fits");
    };
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    // Gauges at 1m steps from 0 to 10m.
    let g = |v: f64| -> Vec<(i64, f64)> { (0..=10).map(|i| (i * M, v)).collect() };
    add(&[("__name__", "g"), ("k", "a")], &g(1.0));
    add(&[("__name__", "g"), ("k", "b")], &g(f64::NAN));
    add(&[("__name__", "g"), ("k", "c")], &g(f64::INFINITY));
    add(&[("__name__", "g"), ("k", "d")], &g(-2.0));
    // A counter rising 60 per minute with a reset at 5m.
    let ctr: Vec<(i64, f64)> = (0..=10)
        .map(|i| {
            (
                i * M,
                if i < 5 {
                    60.0 * i as f64
                } else {
                    60.0 * (i - 5) as f64
                },
            )
        })
        .collect();
    add(&[("__name__", "c"), ("k", "a")], &ctr);
    // Ends with a stale marker at 3m.
    add(
        &[("__name__", "s")],
        &[(0, 1.0), (M, 2.0), (2 * M, 3.0), (3 * M, stale)],
    );
    // Right-hand sides for matching.
    add(&[("__name__", "r"), ("k", "a"), ("side", "x")], &g(10.0));
    add(&[("__name__", "r"), ("k", "a"), ("side", "y")], &g(20.0));
    add(&[("__name__", "one"), ("k", "a")], &g(100.0));
    app.commit();
    head
}

fn eval(head: &Db, q: &str, t: i64) -> Result<Value, QueryError> {
    Engine::new(head.querier(), QueryOptions::default())
        .instant(q, t)
        .map(|a| a.value)
}

/// The vector's (labels as `k=v,…`, value) pairs, sorted.
fn vector(head: &Db, q: &str, t: i64) -> Vec<(String, f64)> {
    let Ok(Value::Vector(v)) = eval(head, q, t) else {
        panic!("{q}: not a vector: {:?}", eval(head, q, t));
    };
    let mut out: Vec<(String, f64)> = v
        .iter()
        .map(|s: &Sample| {
            let l: Vec<String> = s
                .labels
                .iter()
                .map(|l| format!("{}={}", l.name, l.value))
                .collect();
            (l.join(","), s.v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() < 1e-9
}

fn check(head: &Db, q: &str, t: i64, want: &[(&str, f64)]) {
    let got = vector(head, q, t);
    assert_eq!(got.len(), want.len(), "{q}: {got:?}");
    for ((gl, gv), (wl, wv)) in got.iter().zip(want) {
        assert_eq!(gl, wl, "{q}");
        assert!(same(*gv, *wv), "{q}: {gl} = {gv}, want {wv}");
    }
}

#[test]
fn aggregations_with_nan_and_infinity() {
    let h = head();
    let t = 5 * M;
    // NaN poisons sum and avg; Inf dominates.
    check(&h, "sum(g)", t, &[("", f64::NAN)]);
    check(&h, r#"sum(g{k!="b"})"#, t, &[("", f64::INFINITY)]);
    check(&h, r#"sum(g{k=~"a|d"})"#, t, &[("", -1.0)]);
    check(&h, r#"avg(g{k=~"a|d"})"#, t, &[("", -0.5)]);
    // min/max skip NaN unless it is all there is.
    check(&h, "min(g)", t, &[("", -2.0)]);
    check(&h, "max(g)", t, &[("", f64::INFINITY)]);
    check(&h, r#"max(g{k="b"})"#, t, &[("", f64::NAN)]);
    check(&h, "count(g)", t, &[("", 4.0)]);
    check(
        &h,
        "count by (k) (g)",
        t,
        &[("k=a", 1.0), ("k=b", 1.0), ("k=c", 1.0), ("k=d", 1.0)],
    );
    check(&h, r#"stddev(g{k=~"a|d"})"#, t, &[("", 1.5)]);
    check(&h, r#"stdvar(g{k=~"a|d"})"#, t, &[("", 2.25)]);
    check(&h, r#"quantile(0.5, g{k=~"a|d"})"#, t, &[("", -0.5)]);
    check(&h, r#"topk(1, g{k=~"a|d"})"#, t, &[("__name__=g,k=a", 1.0)]);
    check(
        &h,
        r#"bottomk(1, g{k=~"a|d"})"#,
        t,
        &[("__name__=g,k=d", -2.0)],
    );
    check(&h, "group without (k) (g)", t, &[("", 1.0)]);
    // Nothing to aggregate: an empty result, not zero.
    check(&h, "sum(nosuch)", t, &[]);
}

#[test]
fn binary_operators_and_vector_matching() {
    let h = head();
    let t = 5 * M;
    check(&h, r#"g{k="a"} + 1"#, t, &[("k=a", 2.0)]);
    check(&h, r#"2 ^ g{k="d"}"#, t, &[("k=d", 0.25)]);
    check(&h, r#"g{k="d"} % 3"#, t, &[("k=d", -2.0)]);
    check(&h, r#"g{k="a"} / 0"#, t, &[("k=a", f64::INFINITY)]);
    // atan2 drops the name as arithmetic does (Prometheus 3; 2.x kept it),
    // between vectors and against a scalar.
    check(
        &h,
        r#"g{k="a"} atan2 one"#,
        t,
        &[("k=a", 1.0f64.atan2(100.0))],
    );
    check(
        &h,
        r#"g{k="a"} atan2 on(k) one"#,
        t,
        &[("k=a", 1.0f64.atan2(100.0))],
    );
    check(
        &h,
        r#"g{k="d"} atan2 0"#,
        t,
        &[("k=d", (-2.0f64).atan2(0.0))],
    );
    // Filtering comparisons keep the name; bool drops it.
    check(
        &h,
        "g > 0",
        t,
        &[("__name__=g,k=a", 1.0), ("__name__=g,k=c", f64::INFINITY)],
    );
    check(
        &h,
        r#"g{k=~"a|d"} > bool 0"#,
        t,
        &[("k=a", 1.0), ("k=d", 0.0)],
    );
    check(
        &h,
        "g == g",
        t,
        &[
            ("__name__=g,k=a", 1.0),
            ("__name__=g,k=c", f64::INFINITY),
            ("__name__=g,k=d", -2.0),
        ],
    );
    // Many-to-one needs group_left; labels of the "one" side come along.
    check(
        &h,
        "r / on(k) group_left one",
        t,
        &[("k=a,side=x", 0.1), ("k=a,side=y", 0.2)],
    );
    assert!(matches!(
        eval(&h, "r / on(k) one", t),
        Err(QueryError::Execution(_))
    ));
    assert!(matches!(
        eval(&h, "one / on(k) r", t),
        Err(QueryError::Execution(_))
    ));
    check(&h, "one and on(k) r", t, &[("__name__=one,k=a", 100.0)]);
    check(
        &h,
        r#"g unless on(k) r"#,
        t,
        &[
            ("__name__=g,k=b", f64::NAN),
            ("__name__=g,k=c", f64::INFINITY),
            ("__name__=g,k=d", -2.0),
        ],
    );
    let Ok(Value::Scalar(v)) = eval(&h, "1 < bool 2", t) else {
        panic!("scalar")
    };
    assert_eq!(v, 1.0);
}

#[test]
fn rates_resets_staleness_offset_and_at() {
    let h = head();
    // Counter 0,60,...,240 then reset to 0,60,...: increase over the 5m
    // window (5m, 10m] of samples 6m..10m = 60..300: 240 over 4m, extrapolated
    // by a minute at the start (gap 1m < 1.1 × spacing) but no further than
    // the counter's zero point 1m before the first sample: 300.
    check(&h, "increase(c[5m])", 10 * M, &[("k=a", 300.0)]);
    check(&h, "rate(c[5m])", 10 * M, &[("k=a", 1.0)]);
    check(&h, "resets(c[10m])", 10 * M, &[("k=a", 1.0)]);
    check(&h, "changes(c[10m])", 10 * M, &[("k=a", 9.0)]);
    check(&h, "irate(c[5m])", 10 * M, &[("k=a", 1.0)]);
    // One sample in range: no rate.
    check(&h, "rate(c[1m])", 10 * M, &[]);
    // Left-open windows: at 10m, [1m] holds only the 10m sample.
    check(&h, "count_over_time(c[1m])", 10 * M, &[("k=a", 1.0)]);
    check(&h, "count_over_time(c[1m])", 10 * M + 1, &[("k=a", 1.0)]);
    // The stale marker at 3m ends `s` at once, not 5 minutes later.
    check(&h, "s", 2 * M + 30_000, &[("__name__=s", 3.0)]);
    check(&h, "s", 3 * M, &[]);
    check(&h, "s", 4 * M, &[]);
    // …and range functions skip it.
    check(&h, "count_over_time(s[10m])", 4 * M, &[("", 3.0)]);
    // offset and @ move the selector time.
    check(&h, r#"c offset 8m"#, 10 * M, &[("__name__=c,k=a", 120.0)]);
    check(&h, r#"c @ 180"#, 10 * M, &[("__name__=c,k=a", 180.0)]);
    check(
        &h,
        r#"c @ 180 offset 1m"#,
        10 * M,
        &[("__name__=c,k=a", 120.0)],
    );
    // Lookback: nothing newer than 5m before t.
    check(&h, "g", 16 * M, &[]);
    check(&h, r#"g{k="a"}"#, 15 * M - 1, &[("__name__=g,k=a", 1.0)]);
}

#[test]
fn math_time_and_label_functions() {
    let h = head();
    let t = 5 * M;
    check(&h, r#"abs(g{k="d"})"#, t, &[("k=d", 2.0)]);
    check(&h, r#"sqrt(g{k="d"})"#, t, &[("k=d", f64::NAN)]);
    check(&h, r#"ln(g{k="c"})"#, t, &[("k=c", f64::INFINITY)]);
    check(
        &h,
        r#"clamp(g{k=~"c|d"}, -1, 1)"#,
        t,
        &[("k=c", 1.0), ("k=d", -1.0)],
    );
    check(&h, r#"clamp(g{k="a"}, 2, 1)"#, t, &[]);
    check(&h, r#"round(g{k="d"} / 4)"#, t, &[("k=d", 0.0)]); // -0.5 rounds up
    check(&h, r#"sgn(g{k=~"a|d"})"#, t, &[("k=a", 1.0), ("k=d", -1.0)]);
    check(&h, r#"timestamp(g{k="a"})"#, t + 30_000, &[("k=a", 300.0)]);
    check(&h, "vector(time())", t, &[("", 300.0)]);
    check(&h, r#"absent(nosuch{job="x"})"#, t, &[("job=x", 1.0)]);
    check(&h, r#"absent(g)"#, t, &[]);
    // A label matched more than once is dropped; an empty value sets none.
    check(
        &h,
        r#"absent(nosuch{job="a",job="b",foo="bar"})"#,
        t,
        &[("foo=bar", 1.0)],
    );
    check(&h, r#"absent(nosuch{job="a",job!="b"})"#, t, &[("", 1.0)]);
    check(
        &h,
        r#"absent(nosuch{job!="b",job="a"})"#,
        t,
        &[("job=a", 1.0)],
    );
    check(&h, r#"absent(nosuch{job=""})"#, t, &[("", 1.0)]);
    check(
        &h,
        r#"absent_over_time(nosuch{job="a",job="b",foo="bar"}[5m])"#,
        t,
        &[("foo=bar", 1.0)],
    );
    check(
        &h,
        r#"label_replace(g{k="a"}, "kk", "$1$1", "k", "(.)")"#,
        t,
        &[("__name__=g,k=a,kk=aa", 1.0)],
    );
    check(
        &h,
        r#"label_join(g{k="a"}, "j", "-", "k", "k")"#,
        t,
        &[("__name__=g,j=a-a,k=a", 1.0)],
    );
    // Dropping the name can make two series identical: an error.
    let dup = eval(&h, r#"abs({k="a", __name__=~"g|one"})"#, t);
    assert!(
        matches!(&dup, Err(QueryError::Execution(m)) if m.contains("same labelset")),
        "{dup:?}"
    );
    assert!(matches!(
        eval(&h, "label_replace(r, \"side\", \"\", \"\", \"\")", t),
        Err(QueryError::Execution(_))
    ));
}

#[test]
fn subqueries_step_on_multiples_of_their_step() {
    let h = head();
    // g{k="a"} is 1 at every point; a 5m:1m subquery at 10m has 5 steps.
    check(
        &h,
        r#"count_over_time(g{k="a"}[5m:1m])"#,
        10 * M,
        &[("k=a", 5.0)],
    );
    check(
        &h,
        r#"sum_over_time(g{k="a"}[5m:1m])"#,
        10 * M + 30_000,
        &[("k=a", 5.0)],
    );
    check(
        &h,
        r#"max_over_time(rate(c[2m])[5m:1m])"#,
        10 * M,
        &[("k=a", 1.0)],
    );
}

#[test]
fn wrong_arity_and_types_are_errors_not_panics() {
    let h = head();
    for q in [
        "scalar()",
        "sort()",
        "absent()",
        "label_replace(g)",
        "label_join(g)",
        "histogram_quantile(0.5)",
        "rate(g)",
        "quantile_over_time(0.5)",
        "round()",
        "clamp(g, 1)",
        "vector()",
        "timestamp()",
        "sort_by_label(g)",
        "topk(g, g)",
        "count_values(1, g)",
        r#"label_replace(g, "", "", "k", "(.*)")"#,
        r#"label_replace(g, "x", "", "k", "(")"#,
        "g[5m] + 1",
        r#""a" + 1"#,
    ] {
        assert!(eval(&h, q, 5 * M).is_err(), "{q} should fail");
    }
    // Parenthesised arguments are the arguments, as in Prometheus.
    for (q, plain) in [
        ("rate(((c[5m])))", "rate(c[5m])"),
        ("changes((g[5m]))", "changes(g[5m])"),
        ("timestamp((s))", "timestamp(s)"),
        (
            r#"label_replace(((g)), (("dst")), "x$1", ("k"), "(.*)")"#,
            r#"label_replace(g, "dst", "x$1", "k", "(.*)")"#,
        ),
    ] {
        let (a, b) = (vector(&h, q, 2 * M), vector(&h, plain, 2 * M));
        assert!(!b.is_empty(), "{plain}");
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "{q}");
    }
    // A k Prometheus refuses, with its words; k below 1 is an empty answer.
    for (q, want) in [
        ("topk(NaN, g)", "Parameter value is NaN"),
        ("bottomk(NaN, g)", "Parameter value is NaN"),
        (
            "topk(1e19, g)",
            "Scalar value 10000000000000000000 overflows int64",
        ),
        (
            "topk(-1e19, g)",
            "Scalar value -10000000000000000000 underflows int64",
        ),
    ] {
        let err = eval(&h, q, 5 * M).expect_err(q).to_string();
        assert!(err.contains(want), "{q}: {err}");
    }
    assert_eq!(vector(&h, "topk(0, g)", 5 * M), vec![]);
    assert_eq!(vector(&h, "topk(-1, g)", 5 * M), vec![]);
}
