//! The one way into the parser: a query is bounded before it is parsed,
//! and its durations and times are checked after.
//!
//! The parser builds and checks its tree by recursion, and so do the
//! evaluator and `Drop`; a query nested deeper than the stack allows would
//! end the process. [`parse`] therefore scans the text first, without
//! recursion, and refuses a query longer than [`ParseLimits::max_length`]
//! or deeper than [`ParseLimits::max_depth`]. The depth it measures is an
//! upper bound on the tree's: every open bracket or parenthesis, plus every
//! operator token (binary or unary) in the brackets around the position.
//!
//! The same scan refuses a number used as a duration (inside `[…]`, or
//! after `offset`) that is not finite or too large, as Prometheus refuses
//! it ("duration out of range"); the walk after parsing holds every
//! duration and `@` time to Prometheus' ranges.

use std::time::{Duration, UNIX_EPOCH};

use crate::promql::parser::token::{T_LIMITK, T_LIMIT_RATIO};
use crate::promql::parser::{self, AtModifier, Expr, Offset, VectorSelector};

/// Bounds on a query's text, checked before parsing, and what it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseLimits {
    /// Longest query, in bytes.
    pub max_length: usize,
    /// Deepest nesting, as [`depth`] measures it.
    pub max_depth: usize,
    /// Whether Prometheus' experimental functions and aggregations may be
    /// used (`--enable-feature=promql-experimental-functions`).
    pub experimental_functions: bool,
    /// Duration expressions (`promql-duration-expr`, on by default).
    pub duration_expr: bool,
    /// `anchored` and `smoothed` (`promql-extended-range-selectors`).
    pub extended_range_selectors: bool,
    /// `fill`, `fill_left`, `fill_right` (`promql-binop-fill-modifiers`).
    pub binop_fill_modifiers: bool,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_length: 256 * 1024,
            max_depth: 1000,
            experimental_functions: false,
            duration_expr: true,
            extended_range_selectors: false,
            binop_fill_modifiers: false,
        }
    }
}

impl ParseLimits {
    /// The parser's options for these limits.
    pub fn options(&self) -> parser::Options {
        parser::Options {
            experimental_functions: self.experimental_functions,
            duration_expr: self.duration_expr,
            extended_range_selectors: self.extended_range_selectors,
            binop_fill_modifiers: self.binop_fill_modifiers,
        }
    }
}

/// The longest duration Prometheus accepts: an int64 count of nanoseconds.
pub const MAX_DURATION: Duration = Duration::from_nanos(i64::MAX as u64);

/// Why a query was refused before or after parsing: a limit it broke, a
/// duration or time out of Prometheus' range, a feature not enabled, or
/// the parser's own message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GuardError {
    /// Longer than `query-max-length`.
    #[error("the query is {len} bytes long, over the limit of {max} (query-max-length)")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Nested deeper than `query-max-depth`.
    #[error("the query nests deeper than the limit of {0} levels (query-max-depth)")]
    TooDeep(usize),
    /// A duration past an int64 of nanoseconds, negative, or not a number.
    #[error("duration out of range")]
    DurationOutOfRange,
    /// An `@` time past an int64 of milliseconds.
    #[error("timestamp out of bounds for @ modifier: {0}")]
    AtOutOfBounds(f64),
    /// An experimental aggregation without the feature flag.
    #[error("{0}() is experimental and must be enabled with --enable-feature=promql-experimental-functions")]
    ExperimentalAggregation(String),
    /// An experimental function without the feature flag.
    #[error("function {0:?} is not enabled")]
    FunctionNotEnabled(String),
    /// The parser's message.
    #[error("{0}")]
    Parse(String),
}

/// Parses `query` within `limits`: an error names the limit it broke, or is
/// the parser's message.
pub fn parse(query: &str, limits: &ParseLimits) -> Result<Expr, GuardError> {
    if query.len() > limits.max_length {
        return Err(GuardError::TooLong {
            len: query.len(),
            max: limits.max_length,
        });
    }
    let d = scan(query, limits.max_depth)?;
    if d > limits.max_depth {
        return Err(GuardError::TooDeep(limits.max_depth));
    }
    let expr =
        parser::parse(query, &limits.options()).map_err(|e| GuardError::Parse(e.to_string()))?;
    check(&expr, limits)?;
    Ok(expr)
}

/// The nesting depth of `query` as [`parse`] bounds it; an error for a
/// number in a duration's place that cannot be one.
pub fn depth(query: &str) -> Result<usize, GuardError> {
    scan(query, usize::MAX)
}

/// Where the scanner is, for the tokens that matter to it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Anywhere else.
    Any,
    /// Just after `offset` (and an optional sign): a duration.
    OffsetDuration,
}

/// [`depth`], returning as soon as the depth passes `stop_at`.
fn scan(query: &str, stop_at: usize) -> Result<usize, GuardError> {
    let b = query.as_bytes();
    // Operator tokens seen so far in each open bracket level, outermost
    // first, and their sum; the current depth is `levels.len() + ops`.
    let mut levels: Vec<(u8, usize)> = Vec::new();
    let mut top_ops = 0usize;
    let mut ops = 0usize;
    let mut max = 0usize;
    let mut expect = Expect::Any;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let in_brackets = levels.last().is_some_and(|&(open, _)| open == b'[');
        let in_braces = levels.last().is_some_and(|&(open, _)| open == b'{');
        let mut next = Expect::Any;
        match c {
            b'"' | b'\'' | b'`' => i = skip_string(b, i),
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                next = expect;
            }
            b'(' | b'[' | b'{' => {
                levels.push((c, top_ops));
                top_ops = 0;
                i += 1;
            }
            b')' | b']' | b'}' => {
                ops -= top_ops;
                top_ops = levels.pop().map_or(0, |(_, outer)| outer);
                i += 1;
            }
            b'0'..=b'9' | b'.' if !in_braces => {
                let end = number_end(b, i);
                if in_brackets || expect == Expect::OffsetDuration {
                    check_duration_number(&query[i..end])?;
                }
                i = end.max(i + 1);
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'=' | b'!' | b'<' | b'>' if !in_braces => {
                // `==`, `!=`, `<=`, `>=`, `=~`: one operator.
                let two = b.get(i + 1).is_some_and(|&n| n == b'=' || n == b'~');
                i += if two { 2 } else { 1 };
                top_ops += 1;
                ops += 1;
                if expect == Expect::OffsetDuration && (c == b'+' || c == b'-') {
                    next = Expect::OffsetDuration;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let end = i + b[i..]
                    .iter()
                    .take_while(|&&x| x.is_ascii_alphanumeric() || x == b'_' || x == b':')
                    .count();
                let word = &query[i..end];
                if !in_braces {
                    if expect == Expect::OffsetDuration
                        && (word.eq_ignore_ascii_case("inf") || word.eq_ignore_ascii_case("nan"))
                    {
                        return Err(GuardError::DurationOutOfRange);
                    }
                    if word.eq_ignore_ascii_case("offset") {
                        next = Expect::OffsetDuration;
                    } else if ["and", "or", "unless", "atan2"]
                        .iter()
                        .any(|k| word.eq_ignore_ascii_case(k))
                    {
                        top_ops += 1;
                        ops += 1;
                    }
                }
                i = end;
            }
            c if c.is_ascii_whitespace() => {
                i += 1;
                next = expect;
            }
            _ => i += 1,
        }
        expect = next;
        max = max.max(levels.len() + ops);
        if max > stop_at {
            return Ok(max);
        }
    }
    Ok(max)
}

/// The index after the string literal that opens at `start`.
fn skip_string(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if quote != b'`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// The end of the number (or duration) token that starts at `start`:
/// digits, letters (hex digits, `e`, units), `.`, `_`, and a sign right
/// after an exponent.
fn number_end(b: &[u8], start: usize) -> usize {
    let hex = b[start..].len() > 1 && b[start] == b'0' && matches!(b[start + 1], b'x' | b'X');
    let mut i = start;
    while i < b.len() {
        let c = b[i];
        let sign_after_e =
            (c == b'+' || c == b'-') && !hex && i > start && matches!(b[i - 1], b'e' | b'E');
        if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || sign_after_e {
            i += 1;
        } else {
            break;
        }
    }
    i
}

/// A number the parser would read as seconds of a duration must be
/// one Prometheus accepts; unit durations (`5m`) are checked after parsing.
fn check_duration_number(token: &str) -> Result<(), GuardError> {
    let t: String = token.chars().filter(|&c| c != '_').collect();
    let secs = if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        match u64::from_str_radix(hex, 16) {
            Ok(v) => v as f64,
            Err(_) if hex.bytes().all(|c| c.is_ascii_hexdigit()) => f64::INFINITY,
            Err(_) => return Ok(()),
        }
    } else if t.len() > 1 && t.starts_with('0') && t.bytes().all(|c| c.is_ascii_digit()) {
        // Octal, as the parser (and Go's ParseInt) reads a leading zero;
        // decimal when it has an 8 or 9.
        match i64::from_str_radix(&t[1..], 8) {
            Ok(v) => v as f64,
            Err(_) => t.parse::<f64>().unwrap_or(f64::INFINITY),
        }
    } else {
        match t.parse::<f64>() {
            Ok(v) => v,
            // A duration with units, or a token the parser will refuse.
            Err(_) => return Ok(()),
        }
    };
    if !secs.is_finite() || secs < 0.0 || secs > MAX_DURATION.as_secs_f64() {
        return Err(GuardError::DurationOutOfRange);
    }
    Ok(())
}

/// Holds every duration and `@` time of `expr` to Prometheus' ranges, and
/// refuses experimental functions unless `limits` allows them.
/// Recursion is bounded by the depth check that came before.
fn check(expr: &Expr, limits: &ParseLimits) -> Result<(), GuardError> {
    match expr {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::Paren(p) => check(&p.expr, limits),
        Expr::Unary(u) => check(&u.expr, limits),
        Expr::Binary(b) => {
            check(&b.lhs, limits)?;
            check(&b.rhs, limits)
        }
        Expr::Aggregate(a) => {
            let op = a.op.id();
            if !limits.experimental_functions && (op == T_LIMITK || op == T_LIMIT_RATIO) {
                return Err(GuardError::ExperimentalAggregation(a.op.to_string()));
            }
            if let Some(p) = &a.param {
                check(p, limits)?;
            }
            check(&a.expr, limits)
        }
        Expr::Call(c) => {
            if c.func.experimental && !limits.experimental_functions {
                return Err(GuardError::FunctionNotEnabled(c.func.name.to_string()));
            }
            c.args.args.iter().try_for_each(|a| check(a, limits))
        }
        Expr::VectorSelector(vs) => check_selector(vs),
        Expr::MatrixSelector(m) => {
            check_duration(&m.range)?;
            check_selector(&m.vs)
        }
        Expr::Subquery(sq) => {
            check_duration(&sq.range)?;
            if let Some(step) = &sq.step {
                check_duration(step)?;
            }
            check_modifiers(&sq.at, &sq.offset)?;
            check(&sq.expr, limits)
        }
    }
}

fn check_selector(vs: &VectorSelector) -> Result<(), GuardError> {
    check_modifiers(&vs.at, &vs.offset)
}

fn check_modifiers(at: &Option<AtModifier>, offset: &Option<Offset>) -> Result<(), GuardError> {
    match offset {
        Some(Offset::Pos(d) | Offset::Neg(d)) => check_duration(d)?,
        None => {}
    }
    if let Some(AtModifier::At(t)) = at {
        let (d, sign) = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => (d, 1.0),
            Err(e) => (e.duration(), -1.0),
        };
        if d.as_millis() >= i64::MAX as u128 {
            return Err(GuardError::AtOutOfBounds(sign * d.as_secs_f64()));
        }
    }
    Ok(())
}

fn check_duration(d: &Duration) -> Result<(), GuardError> {
    if *d > MAX_DURATION {
        return Err(GuardError::DurationOutOfRange);
    }
    Ok(())
}

/// A duration in milliseconds; durations past [`MAX_DURATION`] were
/// refused by [`parse`], so this cannot overflow for a parsed query.
pub fn millis(d: &Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ParseLimits {
        ParseLimits::default()
    }

    #[test]
    fn depth_counts_brackets_and_operators() {
        assert_eq!(depth("1").expect("ok"), 0);
        assert_eq!(depth("(1)").expect("ok"), 1);
        assert_eq!(depth("1+1+1").expect("ok"), 2);
        assert_eq!(depth("sum(rate(x[5m]))").expect("ok"), 3);
        // Operators inside a closed group do not count after it.
        assert_eq!(depth("(1+1+1) * 2").expect("ok"), 3);
        // Strings and label matchers are not operators.
        assert_eq!(depth(r#"x{a=~"(((", b!="-+-"}"#).expect("ok"), 1);
        assert_eq!(depth("x # ((((((\n").expect("ok"), 0);
        assert_eq!(depth("x and y or z").expect("ok"), 2);
        assert_eq!(depth("---1").expect("ok"), 3);
    }

    #[test]
    fn deep_or_long_queries_are_refused_by_name() {
        let deep = format!("{}1{}", "(".repeat(5000), ")".repeat(5000));
        let e = parse(&deep, &limits()).expect_err("too deep").to_string();
        assert!(e.contains("query-max-depth"), "{e}");
        let chain = vec!["1"; 5000].join("+");
        assert!(parse(&chain, &limits())
            .expect_err("too deep")
            .to_string()
            .contains("query-max-depth"));
        let long = "x".repeat(300 * 1024);
        assert!(parse(&long, &limits())
            .expect_err("too long")
            .to_string()
            .contains("query-max-length"));
        // The deepest query let through parses on a stack sized as query
        // threads are for the default depth (16 KiB a level).
        let ok = format!("{}1{}", "(".repeat(900), ")".repeat(900));
        let parsed = std::thread::Builder::new()
            .stack_size(1000 * (16 << 10))
            .spawn(move || parse(&ok, &limits()).is_ok())
            .expect("thread")
            .join()
            .expect("no stack overflow");
        assert!(parsed);
    }

    #[test]
    fn absurd_durations_are_refused_not_panicked_on() {
        for q in [
            "x[1e30]",
            "x offset 1e30",
            "x offset -1e30",
            "rate(x[1e300])",
            "x[5m:1e30]",
            "x[1e10]",
            "x[0xffffffffffffffffffff]",
            "x[300y]",
            "x offset 300y",
            "x[5m] offset 1e30",
            "x offset Inf",
            "x offset - NaN",
        ] {
            let e = parse(q, &limits()).expect_err(q).to_string();
            assert!(e.contains("out of range"), "{q}: {e}");
        }
        let e = parse("x @ 1e30", &limits()).expect_err("@").to_string();
        assert!(e.contains("timestamp out of bounds"), "{e}");
        for q in [
            "x[5m]",
            "x offset 1h",
            "x[5m:30s] offset -1d",
            "x[9e9]",
            "x @ 1e9",
        ] {
            assert!(parse(q, &limits()).is_ok(), "{q}");
        }
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use crate::promql::{Engine, QueryError, QueryOptions};
    use crate::storage::labels::encode_canonical;
    use crate::storage::{AppendCounts, Db, HeadOptions};

    const TOKENS: &[&str] = &[
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "1",
        "x",
        "y",
        "+",
        "-",
        "*",
        "/",
        "^",
        "==",
        "!=",
        "and",
        "or",
        "unless",
        "rate",
        "abs",
        "sum",
        "by",
        "(job)",
        "offset",
        "@",
        "5m",
        "1e30",
        "1e308",
        "0x1f",
        "Inf",
        "NaN",
        ":",
        ",",
        "\"a\"",
        "`b`",
        "=~",
        "!~",
        "job",
        "label_replace",
        "label_join",
        "vector",
        "count_values",
        "topk",
        "scalar",
        "time()",
        " ",
        "#",
        "\n",
        "[1y:1ms]",
        "[5m:]",
        "-1e30",
        "start()",
        "end()",
        "bool",
        "on",
        "group_left",
        "$1$1",
        "\"(.*)\"",
        "\")|(.*\"",
    ];

    fn head() -> Db {
        let head = Db::new(HeadOptions::default());
        let mut app = head.appender(i64::MAX);
        let mut c = AppendCounts::default();
        for (name, job) in [("x", "a"), ("x", "b"), ("y", "a")] {
            let labels = [("__name__", name), ("job", job)];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let samples = (0..40).map(|i| (i * 15_000, i as f64));
            app.append_new(&labels, &raw, samples, &mut c)
                .expect("fits");
        }
        app.commit();
        head
    }

    fn query() -> impl Strategy<Value = String> {
        let tokens =
            prop::collection::vec(prop::sample::select(TOKENS), 0..60).prop_map(|t| t.concat());
        (
            0usize..100_000,
            prop::sample::select(&["(", "abs(", "-", "1+"][..]),
            tokens,
        )
            .prop_map(|(depth, opener, rest)| {
                // Mostly shallow; sometimes up to 100,000 deep.
                let depth = if depth % 8 == 0 { depth } else { depth % 40 };
                format!("{}{rest}{}", opener.repeat(depth), ")".repeat(depth / 2))
            })
    }

    /// Expressions by PromQL's grammar, with absurd durations and numbers
    /// among the ordinary ones.
    fn expression() -> impl Strategy<Value = String> {
        let dur = || {
            prop::sample::select(
                &[
                    "5m", "1s", "1ms", "1y", "300y", "1e30", "1e10", "0x10", "90",
                ][..],
            )
        };
        let num = prop::sample::select(&["1", "NaN", "Inf", "-1", "1e308", "0", "2"][..]);
        let leaf =
            prop::sample::select(&["x", "y", "1", "vector(1)", "time()", "x{job=~\"a|b\"}"][..])
                .prop_map(str::to_owned);
        leaf.prop_recursive(8, 64, 2, move |inner| {
            prop_oneof![
                (
                    inner.clone(),
                    inner.clone(),
                    prop::sample::select(
                        &["+", "/", "^", "and", "or", "> bool", "* on(job)", "unless"][..]
                    )
                )
                    .prop_map(|(a, b, op)| format!("({a} {op} {b})")),
                inner.clone().prop_map(|a| format!("abs({a})")),
                inner.clone().prop_map(|a| format!("-{a}")),
                inner.clone().prop_map(|a| format!("sum by (job) ({a})")),
                (inner.clone(), dur(), dur())
                    .prop_map(|(a, r, st)| format!("max_over_time(({a})[{r}:{st}])")),
                (dur(), dur()).prop_map(|(r, o)| format!("rate(x[{r}] offset {o})")),
                inner.clone().prop_map(|a| format!(
                    "label_replace({a}, \"job\", \"$1$1\", \"job\", \"(.*)\")"
                )),
                (num.clone(), inner.clone()).prop_map(|(n, a)| format!("topk({n}, {a})")),
                inner
                    .clone()
                    .prop_map(|a| format!("count_values(\"v\", {a})")),
                (inner, num.clone()).prop_map(|(a, n)| format!("{a} @ {n}")),
            ]
        })
    }

    /// Duration expressions worked out to nothing usable are refused by
    /// name (400), in instant and range queries alike.
    #[test]
    fn absurd_duration_expressions_are_named_errors() {
        let head = head();
        let e = Engine::new(head.querier(), QueryOptions::default());
        for (q, why) in [
            ("rate(x[9e9 ^ 9e9])", "NaN or infinite"),
            ("rate(x[1e300])", "duration out of range"),
            ("rate(x[0 * 5m])", "greater than 0"),
            ("rate(x[5m - 10m])", "greater than 0"),
            ("x offset (9e9 ^ 9e9)", "NaN or infinite"),
            ("x offset (1e10 * 1e3)", "out of range"),
            ("rate(x[5m % (0 * 1s)])", "modulo by zero"),
            ("max_over_time(x[5m:(1s - 1s)])", "greater than 0"),
        ] {
            let err = e.instant(q, 300_000).expect_err(q);
            assert!(
                matches!(&err, QueryError::BadData(m) if m.contains(why)),
                "{q}: {err:?}"
            );
            let err = e.range(q, 0, 600_000, 60_000).err();
            assert!(err.is_some(), "{q} in a range query");
        }
        // step() is 0 in an instant query, the step in a range query.
        let err = e
            .instant("rate(x[step()])", 300_000)
            .expect_err("step() is 0");
        assert!(
            matches!(&err, QueryError::BadData(m) if m.contains("greater than 0")),
            "{err:?}"
        );
        let ok = e.range("max_over_time(x[step() * 2])", 0, 600_000, 150_000);
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn any_query_text_is_answered_or_refused_never_a_panic() {
        // The evaluator runs on a stack sized as query threads are.
        let run = std::thread::Builder::new()
            .stack_size(32 << 20)
            .spawn(|| {
                let head = head();
                // Small limits keep each case short: nested subqueries over
                // `[1y:1ms]` would otherwise run to the default timeout.
                let opts = QueryOptions {
                    max_samples: 10_000,
                    timeout: std::time::Duration::from_millis(500),
                    ..QueryOptions::default()
                };
                let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
                    cases: 128,
                    failure_persistence: None,
                    ..ProptestConfig::default()
                });
                runner
                    .run(&prop_oneof![query(), expression()], |q| {
                        let e = Engine::new(head.querier(), opts.clone());
                        let _ = e.instant(&q, 300_000);
                        let _ = e.range(&q, 0, 600_000, 150_000);
                        Ok(())
                    })
                    .map_err(|e| e.to_string())
            })
            .expect("thread");
        let result = run.join().expect("no panic escaped");
        assert!(result.is_ok(), "{result:?}");
    }
}
