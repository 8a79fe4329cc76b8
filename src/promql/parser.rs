//! Sluice's own PromQL parser: the language as Prometheus v3.14 speaks it,
//! each newer part behind the feature flag Prometheus puts it behind.
//!
//! - [`lex`]: tokens with their byte spans.
//! - [`parse`](mod@parse): precedence climbing into [`ast`], with
//!   Prometheus' type checks and messages.
//! - [`printer`]: the tree written back as text (`format_query`).
//! - [`function`]: the function signatures.

pub mod ast;
pub mod function;
pub mod label;
pub mod lex;
pub mod options;
mod parse;
pub mod printer;
pub mod text;
pub mod token;
pub mod tree;
pub mod value;

pub use ast::*;
pub use function::Function;
pub use options::{Options, ParseError, MAX_DURATION_SECS};

/// Parses `input` with the language `opts` enables.
pub fn parse(input: &str, opts: &Options) -> Result<Expr, ParseError> {
    let e = parse::parse(input, opts)?;
    check_selectors(&e).map_err(|m| ParseError::new(input, 0, input.len(), m))?;
    Ok(e)
}

/// Prometheus' rule that a selector must match something other than the
/// empty value (an `info()` data-label selector is let off).
fn check_selectors(e: &Expr) -> Result<(), String> {
    let check = |vs: &VectorSelector| -> Result<(), String> {
        if vs.name.is_some() || vs.bypass_empty_matcher_check {
            return Ok(());
        }
        if vs.matchers.matchers.iter().all(|m| m.compiled.matches("")) {
            return Err(format!(
                "vector selector must contain at least one non-empty matcher: {vs}"
            ));
        }
        Ok(())
    };
    let mut stack = vec![e];
    while let Some(e) = stack.pop() {
        match e {
            Expr::VectorSelector(vs) => check(vs)?,
            Expr::MatrixSelector(m) => check(&m.vs)?,
            other => stack.extend(other.children()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Options {
        Options {
            experimental_functions: true,
            duration_expr: true,
            extended_range_selectors: true,
            binop_fill_modifiers: true,
        }
    }

    fn p(q: &str) -> Expr {
        parse(q, &all()).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    fn printed(q: &str) -> String {
        p(q).to_string()
    }

    #[test]
    fn operators_bind_as_in_prometheus() {
        for (q, want) in [
            ("1 + 2 * 3", "1 + 2 * 3"),
            ("(1 + 2) * 3", "(1 + 2) * 3"),
            ("a or b and c", "a or b and c"),
            ("2 ^ 3 ^ 2", "2 ^ 3 ^ 2"),
            ("-a ^ 2", "-a ^ 2"),
            ("a - b - c", "a - b - c"),
            ("a </ b + 1", "a </ b + 1"),
            ("sum(x)by(job)", "sum by (job) (x)"),
            ("topk by (a) (3, x)", "topk by (a) (3, x)"),
            ("x offset -5m", "x offset -5m"),
            ("x[5m] @ 100 offset 1m", "x[5m] @ 100.000 offset 1m"),
            ("rate(x[5m * 2])", "rate(x[5m * 2])"),
            ("x offset (1h + step())", "x offset (1h + step())"),
            (
                "x[min_of(5m, range()):step()]",
                "x[min_of(5m, range()):step()]",
            ),
            (
                "a + on(b) group_left(c) fill(0) d",
                "a + on (b) group_left (c) fill (0) d",
            ),
            (
                "a + fill_left(1) fill_right(2) b",
                "a + fill_left (1) fill_right (2) b",
            ),
            ("x[1m] anchored", "x[1m] anchored"),
            (
                "{\"my.metric\", a=\"b\"}",
                "{__name__=\"my.metric\",a=\"b\"}",
            ),
            ("foo{NaN=\"bc\"}", "foo{NaN=\"bc\"}"),
            ("sum by (a:b) (x)", "sum by (\"a:b\") (x)"),
            ("0755 + 09", "493 + 9"),
            ("time() - 1h30m", "time() - 1h30m"),
            ("-5m", "-5m"),
            ("a + fill(1000000) b", "a + fill (1e+06) b"),
        ] {
            assert_eq!(printed(q), want, "{q}");
        }
        // `-a ^ 2` is `-(a ^ 2)`: the sign binds like `*`.
        assert!(matches!(p("-a ^ 2"), Expr::Unary(u) if matches!(*u.expr, Expr::Binary(_))));
        // `x offset -2 ^ 2` is `(x offset -2) ^ 2`.
        assert!(
            matches!(p("x offset -2 ^ 2"), Expr::Binary(b) if matches!(*b.lhs, Expr::VectorSelector(_)))
        );
    }

    #[test]
    fn mistakes_are_named_with_their_place() {
        for (q, want) in [
            ("", "no expression found in input"),
            ("sum(x", "unexpected end of input"),
            (
                "rate(x)",
                "expected type range vector in call to function \"rate\", got instant vector",
            ),
            ("foo(x)", "unknown function with name \"foo\""),
            (
                "1 > 2",
                "comparisons between scalars must use BOOL modifier",
            ),
            (
                "{a=\"\"}",
                "vector selector must contain at least one non-empty matcher",
            ),
            ("x[0s]", "duration must be greater than 0"),
            ("x[5m / 0]", "division by zero"),
            ("sum(x) offset 5m", "offset modifier must be preceded by"),
            (
                "x offset 1m offset 2m",
                "offset may not be set multiple times",
            ),
            (
                "x offset 5m [5m]",
                "no offset modifiers allowed before range",
            ),
            (
                "a and 1",
                "set operator \"and\" not allowed in binary scalar expression",
            ),
            ("x{a=~\"(\"}", "("),
            ("rate(x[5m],)", "trailing commas not allowed"),
            ("x[-1]", "duration must be greater than 0"),
            ("x[5m:-1m]", "duration must be greater than 0"),
            ("x + 300y", "duration out of range"),
            ("1e400", "bad number"),
        ] {
            let e = parse(q, &all()).expect_err(q).to_string();
            assert!(e.contains(want), "{q}: {e}");
        }
        let e = parse("a +\n  )", &all()).expect_err("paren");
        assert_eq!((e.line, e.column), (2, 3));
        // Behind flags.
        let off = Options::default();
        assert!(parse("x[1m] anchored", &off).is_err());
        assert!(parse("a + fill(0) b", &off).is_err());
        assert!(parse("limitk(1, x)", &off).is_err());
        assert!(parse(
            "x[5m * 2]",
            &Options {
                duration_expr: false,
                ..off
            }
        )
        .is_err());
        assert!(parse("x[5m * 2]", &off).is_ok());
    }

    fn normal(e: &Expr) -> String {
        let mut e = e.clone();
        let mut stack = vec![&mut e];
        while let Some(x) = stack.pop() {
            match x {
                Expr::VectorSelector(vs) => vs.matchers.matchers.sort_by_key(|m| m.to_string()),
                Expr::MatrixSelector(m) => m.vs.matchers.matchers.sort_by_key(|m| m.to_string()),
                other => stack.extend(other.children_mut()),
            }
        }
        // Where a node was written is not part of the tree's meaning.
        let positions = regex::Regex::new(r"pos: Pos\(\d+\), ").expect("valid regex");
        positions.replace_all(&format!("{e:?}"), "").into_owned()
    }

    /// Instant-vector expressions over the whole grammar: selectors with
    /// matchers and modifiers, range functions over ranges written as
    /// duration expressions and over subqueries, aggregations, binary
    /// operators with every modifier.
    fn vector() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let name = prop::sample::select(&["up", "x", "offset", "a:b", "nan_total"][..]);
        let matchers = prop::sample::select(
            &[
                "",
                "{job=~\"a|b\"}",
                "{\"my.label\"=\"v\\n\", NaN!=\"\"}",
                "{a!~\"x.*\",}",
            ][..],
        );
        let dur = prop::sample::select(
            &[
                "5m",
                "1h30m",
                "90",
                "0755",
                "5m * 2",
                "(1h + step())",
                "min_of(5m, range())",
            ][..],
        );
        let modifier = prop::sample::select(
            &[
                "",
                " offset 5m",
                " offset -1h",
                " @ 100",
                " @ end()",
                " offset (1h / 2)",
            ][..],
        );
        let selector =
            (name, matchers, modifier.clone()).prop_map(|(n, m, o)| format!("{n}{m}{o}"));
        let range_fn = (
            prop::sample::select(&["rate", "increase", "delta", "max_over_time"][..]),
            prop::sample::select(&["x", "up{a=\"b\"}"][..]),
            dur.clone(),
            prop::sample::select(&["", " anchored", " smoothed"][..]),
        )
            .prop_map(|(f, s, d, ext)| {
                // The modifiers only with the functions that take them.
                let ext = if f == "max_over_time" { "" } else { ext };
                let ext = if ext == " smoothed" && f == "rate" {
                    " smoothed"
                } else {
                    ext
                };
                format!("{f}({s}[{d}]{ext})")
            });
        let leaf = prop_oneof![selector, range_fn];
        leaf.prop_recursive(5, 40, 3, move |inner| {
            let op = prop::sample::select(
                &[
                    "+",
                    "- on (job)",
                    "* ignoring (a) group_left (b)",
                    "/ on (job) group_right",
                    "== bool",
                    "> on (a)",
                    "and",
                    "or ignoring (job)",
                    "unless",
                    "atan2",
                    "+ fill (0)",
                    "- fill_left (1) fill_right (2)",
                    "^",
                    "%",
                ][..],
            );
            prop_oneof![
                (inner.clone(), op, inner.clone()).prop_map(|(a, o, b)| format!("{a} {o} {b}")),
                (
                    inner.clone(),
                    prop::sample::select(&["2", "-1.5", "0x1F", "Inf"][..])
                )
                    .prop_map(|(a, n)| format!("({a}) * {n}")),
                (inner.clone(), prop::sample::select(&["</", ">/"][..]))
                    .prop_map(|(a, o)| format!("{a} {o} 0.5")),
                (
                    prop::sample::select(&["sum", "avg", "max", "count", "group"][..]),
                    prop::sample::select(&["", " by (job)", " without (a, \"b.c\")"][..]),
                    inner.clone(),
                )
                    .prop_map(|(a, g, e)| format!("{a}{g} ({e})")),
                (
                    prop::sample::select(&["topk", "limitk", "quantile"][..]),
                    inner.clone()
                )
                    .prop_map(|(a, e)| format!("{a}(0.5, {e})")),
                inner.clone().prop_map(|e| format!("-({e})")),
                inner.clone().prop_map(|e| format!("abs({e})")),
                (inner.clone(), dur.clone())
                    .prop_map(|(e, d)| format!("max_over_time(({e})[{d}:1m])")),
                inner.clone().prop_map(|e| format!(
                    "label_replace({e}, \"dst\", \"$1\", \"src\", \"(.*)\")"
                )),
                inner.prop_map(|e| format!("histogram_quantiles({e}, \"q\", 0.5, 0.9)")),
            ]
        })
    }

    /// Most generated queries parse (else the round trip tests little).
    #[test]
    fn most_generated_queries_parse() {
        use proptest::strategy::{Strategy, ValueTree};
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut ok, mut all_) = (0, 0);
        let mut failures = Vec::new();
        for _ in 0..200 {
            let q = vector().new_tree(&mut runner).expect("tree").current();
            all_ += 1;
            let q2 = q.clone();
            let parsed = std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn(move || parse(&q2, &all()).map(|_| ()).map_err(|e| e.to_string()))
                .expect("thread")
                .join()
                .expect("no panic");
            match parsed {
                Ok(()) => ok += 1,
                Err(e) => failures.push(format!("{q}: {e}")),
            }
        }
        assert!(
            ok * 10 >= all_ * 7,
            "{ok} of {all_} parse: {:?}",
            &failures[..failures.len().min(5)]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]
        /// What parses prints to text that parses to the same tree, and
        /// printing that again changes nothing.
        #[test]
        fn generated_queries_round_trip_through_printing(q in vector()) {
            // Deep trees are parsed on a thread sized as query threads are.
            let out = std::thread::Builder::new()
                .stack_size(64 << 20)
                .spawn(move || -> Result<(), String> {
                    let Ok(e) = parse(&q, &all()) else { return Ok(()) };
                    let text = e.to_string();
                    let again = parse(&text, &all())
                        .map_err(|err| format!("{q} printed as {text} does not parse: {err}"))?;
                    if normal(&again) != normal(&e) {
                        return Err(format!("{q} printed as {text} parses to another tree"));
                    }
                    if again.to_string() != text {
                        return Err(format!("{text} prints as {again}"));
                    }
                    Ok(())
                })
                .map(|h| h.join());
            let out = match out {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err("panicked".to_string()),
                Err(e) => Err(e.to_string()),
            };
            proptest::prop_assert!(out.is_ok(), "{}", out.err().unwrap_or_default());
        }
    }

    /// Every query of the project's scripts prints to text that parses to
    /// the same tree.
    #[test]
    fn printing_round_trips() {
        // Also another directory of scripts (Prometheus' own), if named.
        let mut dirs = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/promql")];
        dirs.extend(std::env::var_os("SLUICE_PROMQL_SCRIPTS").map(std::path::PathBuf::from));
        let mut checked = 0;
        let entries = dirs
            .iter()
            .flat_map(|d| std::fs::read_dir(d).expect("scripts"));
        for entry in entries {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|x| x != "test") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("script");
            for line in text.lines() {
                let Some(rest) = line.strip_prefix("eval") else {
                    continue;
                };
                let q = match rest.split_once(" at ") {
                    Some((_, r)) => r.split_once(char::is_whitespace).map_or("", |x| x.1),
                    None => match rest.split_once(" step ") {
                        Some((_, r)) => r.split_once(char::is_whitespace).map_or("", |x| x.1),
                        None => continue,
                    },
                };
                let Ok(e) = parse(q, &all()) else {
                    continue;
                };
                let again = parse(&e.to_string(), &all())
                    .unwrap_or_else(|err| panic!("{q} printed as {e} does not parse: {err}"));
                // As Debug text (NaN is not equal to itself), with the
                // matchers in order: printing sorts them, as Prometheus'.
                assert_eq!(normal(&again), normal(&e), "{q} printed as {e}");
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} queries checked");
    }
}
