//! A runner for Prometheus' PromQL test scripts (the `.test` format of
//! prometheus/prometheus `promql/promqltest`), driving a real server over
//! HTTP: Sluice in process, or a real Prometheus 3.5.3 as the reference.
//!
//! The format, as Prometheus 3.5.3's `promqltest/test.go` reads it:
//! - `load <step>` then one `<series> <values>` per line: values at 0,
//!   step, 2·step, … in the expanding notation (`1+2x3` is 1 3 5 7, `1x2`
//!   is 1 1 1, `_` is no sample, `_x3` three of them, `stale` a staleness
//!   marker, `{{…}}` a native histogram). Loads add up until `clear`.
//! - `eval instant at <time> <expr>` or `eval range from <t> to <t> step
//!   <d> <expr>`, optionally `eval_fail`, `eval_warn`, `eval_info`,
//!   `eval_ordered`, then `expect fail|warn|info|no_warn|no_info|ordered`
//!   lines (with `msg: <text>` or `regex: <re>`), the deprecated
//!   `expected_fail_message`/`expected_fail_regexp`, and the expected
//!   series, or a bare number for a scalar.
//! - Values compare with a relative tolerance of 1e-6, NaN equal to NaN,
//!   a staleness marker only to itself. An instant eval is also run as a
//!   range query from t-1m to t+1m step 1m, whose middle step must give the
//!   same answer, as Prometheus' runner does. (Prometheus' runner also
//!   re-runs instant queries with `@ t` added to their selectors; this one
//!   does not.)
//!
//! Each `clear` (and the start of a script) starts a fresh server. Data goes
//! in by remote write 1.0, so both servers store exactly the loaded samples.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;
use sluice::histogram::{CounterResetHint, FloatHistogram, Span};
use sluice::proto::prometheus as pb;

pub type Labels = BTreeMap<String, String>;

/// One value of a series description.
#[derive(Clone, Debug, PartialEq)]
pub enum Point {
    Omitted,
    Float(f64),
    /// A native histogram (`{{…}}`).
    Histogram(Box<FloatHistogram>),
}

impl Point {
    pub fn is_histogram(&self) -> bool {
        matches!(self, Point::Histogram(_))
    }
}

/// The staleness marker Prometheus writes.
pub const STALE_NAN: u64 = 0x7ff0_0000_0000_0002;

#[derive(Clone, Debug)]
pub struct Series {
    pub labels: Labels,
    pub points: Vec<Point>,
    /// From an `@st` line: each point's start time as an offset from its
    /// own time (`None`: no start time); empty without one.
    pub starts: Vec<Option<i64>>,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Instant {
        t_ms: i64,
    },
    Range {
        start_ms: i64,
        end_ms: i64,
        step_ms: i64,
    },
}

/// A message expectation: `None` matches any message.
#[derive(Clone, Debug)]
pub enum Pattern {
    Any,
    Exact(String),
    Regex(regex::Regex),
}

impl Pattern {
    fn matches(&self, s: &str) -> bool {
        match self {
            Pattern::Any => true,
            Pattern::Exact(m) => m == s,
            Pattern::Regex(r) => r.is_match(s),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Expected {
    Scalar(f64),
    Series(Vec<Series>),
    /// `expect string "…"`: a string result (instant queries only).
    String(String),
}

#[derive(Clone, Debug)]
pub struct Eval {
    pub line: usize,
    pub expr: String,
    pub kind: Kind,
    pub fail: Option<Pattern>,
    pub ordered: bool,
    /// `eval_warn`/`eval_info`: at least one of that kind.
    pub any_warn: bool,
    pub any_info: bool,
    pub warn: Vec<Pattern>,
    pub info: Vec<Pattern>,
    pub no_warn: bool,
    pub no_info: bool,
    pub expected: Expected,
    /// Why the runner cannot check this eval, if it cannot.
    pub unsupported: Option<&'static str>,
    /// `expect range vector from <t> to <t> step <d>`: an instant query
    /// whose answer is a range vector, its points from the first time on
    /// every step (ms).
    pub range_vector: Option<(i64, i64)>,
}

#[derive(Clone, Debug)]
pub enum Cmd {
    Load {
        line: usize,
        step_ms: i64,
        nhcb: bool,
        series: Vec<Series>,
    },
    Clear,
    Eval(Box<Eval>),
}

/// Parses a script; errors name the line.
pub fn parse(script: &str) -> Result<Vec<Cmd>, String> {
    let lines: Vec<&str> = script
        .lines()
        .map(|l| {
            let l = l.trim();
            if l.starts_with('#') {
                ""
            } else {
                l
            }
        })
        .collect();
    let mut cmds = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let word = l
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let err = |e: String| format!("line {}: {e}", i + 1);
        if l.is_empty() {
            i += 1;
        } else if word == "clear" {
            cmds.push(Cmd::Clear);
            i += 1;
        } else if word.starts_with("load") {
            let (nhcb, step) = match l.split_once(char::is_whitespace) {
                Some((w, rest)) if w == "load" || w == "load_with_nhcb" => {
                    (w == "load_with_nhcb", rest.trim())
                }
                _ => return Err(err(format!("invalid load command {l:?}"))),
            };
            let step_ms = duration_ms(step).map_err(err)?;
            let line = i + 1;
            let mut series = Vec::new();
            i += 1;
            // An `@st` line gives the start times of the series on the
            // line after it (Prometheus v3.14's start-timestamp loads).
            let mut pending: Option<(Labels, Vec<Option<i64>>)> = None;
            while i < lines.len() && !lines[i].is_empty() {
                let at = |e: String| format!("line {}: {e}", i + 1);
                let first = lines[i].split_whitespace().next().unwrap_or("");
                if let Some(metric) = first.strip_suffix("@st") {
                    if pending.is_some() {
                        return Err(at("@st line has no following sample line".into()));
                    }
                    let rest = lines[i].trim_start()[first.len()..].to_owned();
                    let (labels, _) = parse_labels(&format!("{metric} _")).map_err(at)?;
                    let mut starts = Vec::new();
                    for tok in rest.split_whitespace() {
                        expand_starts(tok, &mut starts)
                            .ok_or_else(|| at(format!("invalid start time {tok:?}")))?;
                    }
                    pending = Some((labels, starts));
                    i += 1;
                    continue;
                }
                let mut s = parse_series(lines[i]).map_err(at)?;
                if let Some((labels, starts)) = pending.take() {
                    if labels != s.labels {
                        return Err(at(
                            "@st metric does not match the following sample line metric".into(),
                        ));
                    }
                    if starts.len() != s.points.len() {
                        return Err(at(format!(
                            "@st line has {} values but sample line has {}",
                            starts.len(),
                            s.points.len()
                        )));
                    }
                    s.starts = starts;
                }
                series.push(s);
                i += 1;
            }
            if pending.is_some() {
                return Err(format!("line {i}: @st line has no following sample line"));
            }
            cmds.push(Cmd::Load {
                line,
                step_ms,
                nhcb,
                series,
            });
        } else if word.starts_with("eval") {
            let (eval, next) = parse_eval(&lines, i)?;
            cmds.push(Cmd::Eval(Box::new(eval)));
            i = next;
        } else {
            return Err(err(format!("invalid command {l:?}")));
        }
    }
    Ok(cmds)
}

fn parse_eval(lines: &[&str], at: usize) -> Result<(Eval, usize), String> {
    let l = lines[at];
    let err = |e: String| format!("line {}: {e}", at + 1);
    let (head, rest) = l
        .split_once(char::is_whitespace)
        .ok_or_else(|| err("eval without a query".into()))?;
    let modifier = match head {
        "eval" => "",
        "eval_fail" => "fail",
        "eval_warn" => "warn",
        "eval_info" => "info",
        "eval_ordered" => "ordered",
        _ => return Err(err(format!("invalid eval command {head:?}"))),
    };
    let rest = rest.trim_start();
    let (kind, expr) = if let Some(r) = rest.strip_prefix("instant") {
        let r = r.trim_start();
        let r = r
            .strip_prefix("at")
            .ok_or_else(|| err("expected `at`".into()))?;
        let (t, expr) = r
            .trim_start()
            .split_once(char::is_whitespace)
            .ok_or_else(|| err("eval without a query".into()))?;
        (
            Kind::Instant {
                t_ms: duration_ms(t).map_err(err)?,
            },
            expr.trim(),
        )
    } else if let Some(r) = rest.strip_prefix("range") {
        let re = regex::Regex::new(r"^\s+from\s+(.+?)\s+to\s+(.+?)\s+step\s+(\S+)\s+(.+)$")
            .expect("valid regex");
        let c = re
            .captures(r)
            .ok_or_else(|| err("invalid range eval".into()))?;
        (
            Kind::Range {
                start_ms: duration_ms(&c[1]).map_err(err)?,
                end_ms: duration_ms(&c[2]).map_err(err)?,
                step_ms: duration_ms(&c[3]).map_err(err)?,
            },
            c.get(4).map_or("", |m| m.as_str()).trim(),
        )
    } else {
        return Err(err(format!("invalid eval {l:?}")));
    };
    let mut eval = Eval {
        line: at + 1,
        expr: expr.to_owned(),
        kind,
        fail: (modifier == "fail").then_some(Pattern::Any),
        ordered: modifier == "ordered",
        any_warn: modifier == "warn",
        any_info: modifier == "info",
        warn: Vec::new(),
        info: Vec::new(),
        no_warn: false,
        no_info: false,
        expected: Expected::Series(Vec::new()),
        unsupported: None,
        range_vector: None,
    };
    let expect_re = regex::Regex::new(
        r"^expect\s+(ordered|fail|warn|no_warn|info|no_info)(?:\s+(regex|msg):(.+))?$",
    )
    .expect("valid regex");
    let mut series = Vec::new();
    let mut i = at + 1;
    while i < lines.len() && !lines[i].is_empty() {
        let d = lines[i];
        let here = i + 1;
        let err = |e: String| format!("line {here}: {e}");
        i += 1;
        if eval.fail.is_some() {
            if let Some(m) = d.strip_prefix("expected_fail_message") {
                eval.fail = Some(Pattern::Exact(m.trim().to_owned()));
                break;
            }
            if let Some(m) = d.strip_prefix("expected_fail_regexp") {
                let re = regex::Regex::new(m.trim()).map_err(|e| err(e.to_string()))?;
                eval.fail = Some(Pattern::Regex(re));
                break;
            }
        }
        if let Some(r) = d.trim().strip_prefix("expect range vector") {
            let w: Vec<&str> = r.split_whitespace().collect();
            let [("from", from), ("to", _), ("step", step)] = [
                (w.first(), w.get(1)),
                (w.get(2), w.get(3)),
                (w.get(4), w.get(5)),
            ]
            .map(|(k, v)| (k.copied().unwrap_or(""), v.copied().unwrap_or(""))) else {
                return Err(err(format!("invalid expect range vector line {d:?}")));
            };
            eval.range_vector = Some((
                duration_ms(from).map_err(err)?,
                duration_ms(step).map_err(err)?,
            ));
            eval.expected = Expected::Series(Vec::new());
            continue;
        }
        if let Some(q) = d.trim().strip_prefix("expect string ") {
            let q = q.trim();
            let unquoted = if q.len() >= 2 && (q.starts_with('`') || q.starts_with('"')) {
                q[1..q.len() - 1].replace("\\\"", "\"")
            } else {
                return Err(err(format!("invalid expect string {q:?}")));
            };
            eval.expected = Expected::String(unquoted);
            break;
        }
        if d.trim().split(' ').next() == Some("expect") {
            let c = expect_re
                .captures(d)
                .ok_or_else(|| err(format!("invalid expect line {d:?}")))?;
            let pattern = match c.get(2).map(|m| m.as_str()) {
                None => Pattern::Any,
                Some("msg") => Pattern::Exact(c[3].trim().to_owned()),
                Some(_) => {
                    Pattern::Regex(regex::Regex::new(c[3].trim()).map_err(|e| err(e.to_string()))?)
                }
            };
            match &c[1] {
                "ordered" => eval.ordered = true,
                "fail" => eval.fail = Some(pattern),
                "warn" => eval.warn.push(pattern),
                "info" => eval.info.push(pattern),
                "no_warn" => eval.no_warn = true,
                _ => eval.no_info = true,
            }
            continue;
        }
        if let Some(v) = scalar_line(d) {
            eval.expected = Expected::Scalar(v);
            break;
        }
        series.push(parse_series(d).map_err(err)?);
    }
    if !series.is_empty() {
        eval.expected = Expected::Series(series);
    }
    Ok((eval, i))
}

/// A line that is one number (Go's ParseInt with base 0, then ParseFloat).
fn scalar_line(s: &str) -> Option<f64> {
    if s.contains(char::is_whitespace) || s.contains('{') {
        return None;
    }
    number(s)
}

/// A number as PromQL's lexer reads one: decimal, hexadecimal, Inf, NaN.
pub fn number(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()? as f64
    } else {
        match body.to_ascii_lowercase().as_str() {
            "inf" => f64::INFINITY,
            "nan" => f64::NAN,
            b if b.starts_with(|c: char| c.is_ascii_digit() || c == '.') => b.parse().ok()?,
            _ => return None,
        }
    };
    Some(if neg { -v } else { v })
}

/// A duration as Prometheus' `model.ParseDuration` reads one (`1h30m`,
/// `10s`, `0`), or a negative one with a leading `-`; in milliseconds.
pub fn duration_ms(s: &str) -> Result<i64, String> {
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    let mut total: i64 = 0;
    if rest.is_empty() {
        return Err(format!("invalid duration {s:?}"));
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("invalid duration {s:?}"));
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "y" => 365 * 86_400_000,
            u => return Err(format!("invalid unit {u:?} in duration {s:?}")),
        };
        rest = &rest[unit_len..];
        total += n * ms;
    }
    Ok(if neg { -total } else { total })
}

/// `metric{l="v", …} values…`, `{__name__="m"}`, `{"utf8.name"}` or `{}`.
pub fn parse_series(s: &str) -> Result<Series, String> {
    let (labels, rest) = parse_labels(s)?;
    let mut points = Vec::new();
    for tok in split_values(rest) {
        expand(&tok, &mut points)
            .ok_or_else(|| format!("invalid series value {tok:?} in {s:?}"))?;
    }
    Ok(Series {
        labels,
        points,
        starts: Vec::new(),
    })
}

/// One item of an `@st` line: `_`, `_xN`, `<d>`, `<d>xN`, `<d>+<d>xN` or
/// `<d>-<d>xN`, durations with an optional sign; `xN` gives N+1 values.
fn expand_starts(tok: &str, out: &mut Vec<Option<i64>>) -> Option<()> {
    if tok == "_" {
        out.push(None);
        return Some(());
    }
    let (head, n) = match tok.rfind('x') {
        Some(x) => (&tok[..x], Some(tok[x + 1..].parse::<usize>().ok()?)),
        None => (tok, None),
    };
    if head == "_" {
        out.extend(std::iter::repeat_n(None, n?));
        return Some(());
    }
    let signed = |s: &str| -> Option<i64> {
        match s.strip_prefix('+') {
            Some(r) => duration_ms(r).ok(),
            None => duration_ms(s).ok(),
        }
    };
    // The increment starts at a sign past the first character.
    let split = head
        .char_indices()
        .skip(1)
        .find(|&(_, c)| c == '+' || c == '-')
        .map(|(i, _)| i);
    let (base, step) = match split {
        Some(i) => (signed(&head[..i])?, signed(&head[i..])?),
        None => (signed(head)?, 0),
    };
    let count = n.map_or(1, |n| n + 1);
    out.extend((0..count as i64).map(|k| Some(base + k * step)));
    Some(())
}

/// Value tokens, with `{{…}}` histograms kept whole.
fn split_values(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    for c in s.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if c.is_whitespace() && depth == 0 {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `{{schema:0 sum:5 count:4 buckets:[1 2 1] offset:1 n_buckets:[…]
/// n_offset:0 z_bucket:1 z_bucket_w:0.001 custom_values:[…]
/// counter_reset_hint:gauge}}` (Prometheus' test notation): one span per
/// side, starting at the offset.
pub fn parse_histogram(body: &str) -> Option<FloatHistogram> {
    let mut h = FloatHistogram::default();
    let (mut pos, mut neg) = (Vec::new(), Vec::new());
    let (mut pos_off, mut neg_off) = (0i32, 0i32);
    let mut rest = body.trim();
    let list = |v: &str| -> Option<Vec<f64>> { v.split_whitespace().map(number).collect() };
    while !rest.is_empty() {
        let (key, after) = rest.split_once(':')?;
        let after = after.trim_start();
        let (value, next) = if let Some(inner) = after.strip_prefix('[') {
            let end = inner.find(']')?;
            (&inner[..end], &inner[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        match key.trim() {
            "schema" => h.schema = value.parse().ok()?,
            "sum" => h.sum = number(value)?,
            "count" => h.count = number(value)?,
            "z_bucket" => h.zero_count = number(value)?,
            "z_bucket_w" => h.zero_threshold = number(value)?,
            "buckets" => pos = list(value)?,
            "n_buckets" => neg = list(value)?,
            "offset" => pos_off = value.parse().ok()?,
            "n_offset" => neg_off = value.parse().ok()?,
            "custom_values" => h.custom_values = list(value)?,
            "counter_reset_hint" => {
                h.hint = match value {
                    "unknown" => CounterResetHint::Unknown,
                    "reset" => CounterResetHint::CounterReset,
                    "not_reset" => CounterResetHint::NotCounterReset,
                    "gauge" => CounterResetHint::Gauge,
                    _ => return None,
                }
            }
            _ => return None,
        }
        rest = next.trim_start();
    }
    let span = |off: i32, n: usize| {
        if n == 0 {
            Vec::new()
        } else {
            vec![Span {
                offset: off,
                length: n as u32,
            }]
        }
    };
    h.positive_spans = span(pos_off, pos.len());
    h.negative_spans = span(neg_off, neg.len());
    h.positive_buckets = pos;
    h.negative_buckets = neg;
    Some(h)
}

/// `{{…}}`, `{{…}}x<n>`, `{{…}}+{{…}}x<n>` or `{{…}}-{{…}}x<n>`.
fn expand_histograms(tok: &str, out: &mut Vec<Point>) -> Option<()> {
    let first_end = tok.find("}}")?;
    let base = parse_histogram(tok.get(2..first_end)?)?;
    let rest = &tok[first_end + 2..];
    if rest.is_empty() {
        out.push(Point::Histogram(Box::new(base)));
        return Some(());
    }
    if let Some(n) = rest.strip_prefix('x') {
        let n: usize = n.parse().ok()?;
        for _ in 0..=n {
            out.push(Point::Histogram(Box::new(base.clone())));
        }
        return Some(());
    }
    let negate = rest.starts_with('-');
    let inc_tok = rest.get(1..)?;
    let inc_end = inc_tok.rfind("}}")?;
    let inc = parse_histogram(inc_tok.get(2..inc_end)?)?;
    let n: usize = inc_tok[inc_end + 2..].strip_prefix('x')?.parse().ok()?;
    let mut cur = base;
    out.push(Point::Histogram(Box::new(cur.clone())));
    for _ in 0..n {
        let done = if negate { cur.sub(&inc) } else { cur.add(&inc) };
        done.ok()?;
        out.push(Point::Histogram(Box::new(cur.clone())));
    }
    Some(())
}

fn expand(tok: &str, out: &mut Vec<Point>) -> Option<()> {
    if tok.starts_with("{{") {
        return expand_histograms(tok, out);
    }
    if tok == "_" {
        out.push(Point::Omitted);
        return Some(());
    }
    if tok == "stale" {
        out.push(Point::Float(f64::from_bits(STALE_NAN)));
        return Some(());
    }
    // `<a>x<n>`, `<a>+<b>x<n>`, `<a>-<b>x<n>`, `_x<n>`.
    if let Some(x) = tok.rfind('x') {
        let (head, n) = (&tok[..x], &tok[x + 1..]);
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !head.is_empty() {
            let n: usize = n.parse().ok()?;
            if head == "_" {
                out.extend(std::iter::repeat_n(Point::Omitted, n));
                return Some(());
            }
            // The increment starts at a sign that is not the first character
            // and does not follow an exponent's `e`.
            let b = head.as_bytes();
            let split = (1..b.len())
                .find(|&k| (b[k] == b'+' || b[k] == b'-') && !matches!(b[k - 1], b'e' | b'E'));
            let (start, inc) = match split {
                Some(k) => (number(&head[..k])?, number(&head[k..])?),
                None => (number(head)?, 0.0),
            };
            let mut v = start;
            for _ in 0..=n {
                out.push(Point::Float(v));
                v += inc;
            }
            return Some(());
        }
    }
    out.push(Point::Float(number(tok)?));
    Some(())
}

fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Labels::new();
    let s = s.trim_start();
    let name_end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    if name_end > 0 {
        labels.insert("__name__".into(), s[..name_end].to_owned());
    }
    let rest = &s[name_end..];
    let Some(mut rest) = rest.strip_prefix('{') else {
        return Ok((labels, rest));
    };
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let (name, r) = if rest.starts_with('"') || rest.starts_with('\'') {
            quoted(rest)?
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                return Err(format!("invalid labels in {s:?}"));
            }
            (rest[..end].to_owned(), &rest[end..])
        };
        let r = r.trim_start();
        if let Some(r) = r.strip_prefix('=') {
            let (value, r) = quoted(r.trim_start())?;
            // An empty value is no label, as every Prometheus API has it.
            if !value.is_empty() {
                labels.insert(name, value);
            }
            rest = r;
        } else {
            // A quoted name alone is the metric name.
            labels.insert("__name__".into(), name);
            rest = r;
        }
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        }
    }
}

/// A Go-quoted string at the start of `s`, and what follows it.
fn quoted(s: &str) -> Result<(String, &str), String> {
    let q = s.chars().next().ok_or("expected a quoted string")?;
    if q != '"' && q != '\'' && q != '`' {
        return Err(format!("expected a quoted string at {s:?}"));
    }
    let mut out = String::new();
    let mut chars = s[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == q {
            return Ok((out, &s[1 + i + 1..]));
        }
        if c == '\\' && q != '`' {
            let (_, e) = chars.next().ok_or("unterminated escape")?;
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                '\'' => out.push('\''),
                'x' => {
                    let h: String = (0..2)
                        .filter_map(|_| chars.next().map(|(_, c)| c))
                        .collect();
                    let b = u8::from_str_radix(&h, 16).map_err(|e| e.to_string())?;
                    // Invalid UTF-8 cannot be carried in a Rust string; keep
                    // the escape visible instead.
                    if b.is_ascii() {
                        out.push(b as char);
                    } else {
                        let _ = write!(out, "\\x{h}");
                    }
                }
                'u' => {
                    let h: String = (0..4)
                        .filter_map(|_| chars.next().map(|(_, c)| c))
                        .collect();
                    let c = u32::from_str_radix(&h, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or("invalid \\u escape")?;
                    out.push(c);
                }
                other => {
                    out.push('\\');
                    out.push(other);
                }
            }
        } else {
            out.push(c);
        }
    }
    Err(format!("unterminated string in {s:?}"))
}

/// The remote-write requests that load `series` at `step_ms`, split so
/// that none is large. A series given twice in one load is the later one,
/// as in Prometheus' runner.
/// What `load_with_nhcb` adds to a load: each classic histogram (its
/// `_bucket` series by `le`, `_count` and `_sum`, same other labels) also as
/// a native histogram with custom buckets under the base name, at every
/// time one of its series has a float, as Prometheus' test engine converts
/// them (`util/convertnhcb`): a missing `_count` is the highest bucket's, a
/// missing `+Inf` bucket is the count, and the buckets are the differences
/// of the cumulative counts with empty ones left out. A histogram those
/// rules refuse (counts not cumulative, a count that is not the `+Inf`
/// bucket's, a NaN) is left out, where Prometheus would refuse the load.
pub fn nhcb_series(series: &[Series]) -> Vec<Series> {
    #[derive(Default)]
    struct Temp {
        buckets: Vec<(f64, f64)>,
        count: Option<f64>,
        sum: f64,
    }
    // Base labels -> time step -> the histogram's parts. The last
    // definition of a series wins, as in the load itself.
    let last: BTreeMap<&Labels, usize> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.labels, i))
        .collect();
    let mut by_base: BTreeMap<Labels, BTreeMap<usize, Temp>> = BTreeMap::new();
    for (i, s) in series.iter().enumerate() {
        if last.get(&s.labels) != Some(&i) {
            continue;
        }
        let Some(name) = s.labels.get("__name__") else {
            continue;
        };
        let (base, part) = if let Some(b) = name.strip_suffix("_bucket") {
            let Some(le) = s.labels.get("le").and_then(|v| number(v)) else {
                continue;
            };
            if le.is_nan() {
                continue;
            }
            (b, Some(le))
        } else if let Some(b) = name.strip_suffix("_count") {
            (b, None)
        } else if let Some(b) = name.strip_suffix("_sum") {
            (b, None)
        } else {
            continue;
        };
        let mut labels = s.labels.clone();
        labels.insert("__name__".into(), base.to_owned());
        labels.remove("le");
        let steps = by_base.entry(labels).or_default();
        for (k, p) in s.points.iter().enumerate() {
            let Point::Float(v) = p else { continue };
            let t = steps.entry(k).or_default();
            match part {
                Some(le) => {
                    if !t.buckets.iter().any(|b| b.0 == le) {
                        t.buckets.push((le, *v));
                    }
                }
                None if name.ends_with("_count") => t.count = Some(*v),
                None => t.sum = *v,
            }
        }
    }
    let mut out = Vec::new();
    for (labels, steps) in by_base {
        let mut points = Vec::new();
        for (k, mut t) in steps {
            t.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let count = match t.count {
                Some(c) => c,
                None => match t.buckets.last() {
                    Some(b) => b.1,
                    None => continue,
                },
            };
            if t.buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
                t.buckets.push((f64::INFINITY, count));
            }
            let cumulative = t.buckets.windows(2).all(|w| w[0].1 <= w[1].1);
            let last = t.buckets.last().map_or(f64::NAN, |b| b.1);
            if !cumulative || last != count || t.buckets.iter().any(|b| b.1.is_nan() || b.1 < 0.0) {
                continue;
            }
            let mut h = FloatHistogram {
                schema: sluice::histogram::CUSTOM_BUCKETS_SCHEMA,
                count,
                sum: t.sum,
                positive_spans: vec![Span {
                    offset: 0,
                    length: t.buckets.len() as u32,
                }],
                positive_buckets: t
                    .buckets
                    .iter()
                    .scan(0.0, |prev, b| {
                        let d = b.1 - *prev;
                        *prev = b.1;
                        Some(d)
                    })
                    .collect(),
                custom_values: t.buckets[..t.buckets.len() - 1]
                    .iter()
                    .map(|b| b.0)
                    .collect(),
                ..FloatHistogram::default()
            };
            h.compact();
            if points.len() <= k {
                points.resize(k + 1, Point::Omitted);
            }
            points[k] = Point::Histogram(Box::new(h));
        }
        if !points.is_empty() {
            out.push(Series {
                labels,
                points,
                starts: Vec::new(),
            });
        }
    }
    out
}

pub fn load_requests(step_ms: i64, series: &[Series]) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    let mut batch = Vec::new();
    let mut samples = 0;
    let last: BTreeMap<&Labels, usize> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.labels, i))
        .collect();
    for (i, s) in series.iter().enumerate() {
        if last.get(&s.labels) != Some(&i) || !s.starts.is_empty() {
            continue;
        }
        let labels: Vec<pb::Label> = s
            .labels
            .iter()
            .map(|(n, v)| pb::Label {
                name: n.clone(),
                value: v.clone(),
            })
            .collect();
        // Floats and histograms go in runs of one kind, each in a request
        // of its own, in time order: a server may store a request's floats
        // before its histograms (Sluice does), which would put a histogram
        // before a later float out of order.
        let mut runs = Vec::new();
        let mut run = pb::TimeSeries {
            labels: labels.clone(),
            ..Default::default()
        };
        for (k, p) in s.points.iter().enumerate() {
            let timestamp = k as i64 * step_ms;
            match p {
                Point::Float(value) => {
                    if !run.histograms.is_empty() {
                        runs.push(std::mem::replace(
                            &mut run,
                            pb::TimeSeries {
                                labels: labels.clone(),
                                ..Default::default()
                            },
                        ));
                    }
                    run.samples.push(pb::Sample {
                        value: *value,
                        timestamp,
                    });
                }
                Point::Histogram(h) => {
                    if !run.samples.is_empty() {
                        runs.push(std::mem::replace(
                            &mut run,
                            pb::TimeSeries {
                                labels: labels.clone(),
                                ..Default::default()
                            },
                        ));
                    }
                    run.histograms.push(wire_histogram(h, timestamp));
                }
                Point::Omitted => continue,
            }
            samples += 1;
        }
        if !run.samples.is_empty() || !run.histograms.is_empty() {
            runs.push(run);
        }
        if runs.len() > 1 {
            if !batch.is_empty() {
                bodies.push(crate::common::body(std::mem::take(&mut batch)));
            }
            bodies.extend(runs.into_iter().map(|r| crate::common::body(vec![r])));
            continue;
        }
        batch.extend(runs);
        if samples > 20_000 {
            bodies.push(crate::common::body(std::mem::take(&mut batch)));
            samples = 0;
        }
    }
    if !batch.is_empty() {
        bodies.push(crate::common::body(batch));
    }
    bodies
}

/// The series with start times (`@st` lines), as remote write 2.0
/// requests (snappy-compressed), one per run of floats or histograms in
/// time order: each sample's start time is its time plus the offset; 0
/// (none) where the line has none.
pub fn load_requests_v2(step_ms: i64, series: &[Series]) -> Vec<Vec<u8>> {
    use prost::Message;
    use sluice::proto::io::prometheus::write::v2;
    let mut bodies = Vec::new();
    // The last line of a series is the one loaded, as in `load_requests`.
    let last: BTreeMap<&Labels, usize> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (&s.labels, i))
        .collect();
    for (_, s) in series
        .iter()
        .enumerate()
        .filter(|&(i, s)| !s.starts.is_empty() && last.get(&s.labels) == Some(&i))
    {
        let symbols: Vec<String> = std::iter::once(String::new())
            .chain(s.labels.iter().flat_map(|(n, v)| [n.clone(), v.clone()]))
            .collect();
        let refs: Vec<u32> = (1..symbols.len() as u32).collect();
        let fresh = || v2::TimeSeries {
            labels_refs: refs.clone(),
            ..Default::default()
        };
        let mut runs = Vec::new();
        let mut run = fresh();
        for (k, p) in s.points.iter().enumerate() {
            let timestamp = k as i64 * step_ms;
            let start_timestamp = s
                .starts
                .get(k)
                .copied()
                .flatten()
                .map_or(0, |d| timestamp + d);
            match p {
                Point::Float(value) => {
                    if !run.histograms.is_empty() {
                        runs.push(std::mem::replace(&mut run, fresh()));
                    }
                    run.samples.push(v2::Sample {
                        value: *value,
                        timestamp,
                        start_timestamp,
                    });
                }
                Point::Histogram(h) => {
                    if !run.samples.is_empty() {
                        runs.push(std::mem::replace(&mut run, fresh()));
                    }
                    // Remote write 1.0's histogram message with field 17.
                    let mut msg = wire_histogram(h, timestamp).encode_to_vec();
                    if start_timestamp != 0 {
                        prost::encoding::int64::encode(17, &start_timestamp, &mut msg);
                    }
                    run.histograms
                        .push(v2::Histogram::decode(msg.as_slice()).expect("a histogram message"));
                }
                Point::Omitted => {}
            }
        }
        if !run.samples.is_empty() || !run.histograms.is_empty() {
            runs.push(run);
        }
        for r in runs {
            let req = v2::Request {
                symbols: symbols.clone(),
                timeseries: vec![r],
            };
            let raw = req.encode_to_vec();
            bodies.push(
                snap::raw::Encoder::new()
                    .compress_vec(&raw)
                    .expect("snappy compresses"),
            );
        }
    }
    bodies
}

/// A float histogram as remote write 1.0 carries it.
fn wire_histogram(h: &FloatHistogram, timestamp: i64) -> pb::Histogram {
    let spans = |s: &[Span]| -> Vec<pb::BucketSpan> {
        s.iter()
            .map(|s| pb::BucketSpan {
                offset: s.offset,
                length: s.length,
            })
            .collect()
    };
    pb::Histogram {
        count: Some(pb::histogram::Count::CountFloat(h.count)),
        sum: h.sum,
        schema: h.schema,
        zero_threshold: h.zero_threshold,
        zero_count: Some(pb::histogram::ZeroCount::ZeroCountFloat(h.zero_count)),
        negative_spans: spans(&h.negative_spans),
        negative_counts: h.negative_buckets.clone(),
        positive_spans: spans(&h.positive_spans),
        positive_counts: h.positive_buckets.clone(),
        reset_hint: i32::from(h.hint.number()),
        timestamp,
        custom_values: h.custom_values.clone(),
        ..Default::default()
    }
}

/// What a server answered to one query.
#[derive(Debug)]
pub struct Answer {
    pub result: Result<Value, String>,
    pub warnings: Vec<String>,
    pub infos: Vec<String>,
}

/// Runs a query against `base` (`http://host:port`).
pub async fn query(client: &reqwest::Client, base: &str, kind: &Kind, expr: &str) -> Answer {
    let secs = |ms: i64| format!("{}", ms as f64 / 1000.0);
    let (path, form) = match kind {
        Kind::Instant { t_ms } => (
            "/api/v1/query",
            vec![("query", expr.to_owned()), ("time", secs(*t_ms))],
        ),
        Kind::Range {
            start_ms,
            end_ms,
            step_ms,
        } => (
            "/api/v1/query_range",
            vec![
                ("query", expr.to_owned()),
                ("start", secs(*start_ms)),
                ("end", secs(*end_ms)),
                ("step", secs(*step_ms)),
            ],
        ),
    };
    let reply = client
        .post(format!("{base}{path}"))
        .form(&form)
        .send()
        .await;
    let text = match reply {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => {
            return Answer {
                result: Err(format!("request failed: {e}")),
                warnings: Vec::new(),
                infos: Vec::new(),
            }
        }
    };
    let json: Value = match serde_json::from_str(&text) {
        Ok(j) => j,
        Err(e) => {
            return Answer {
                result: Err(format!("not JSON ({e}): {text}")),
                warnings: Vec::new(),
                infos: Vec::new(),
            }
        }
    };
    let strings = |k: &str| -> Vec<String> {
        json[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let warnings = strings("warnings");
    let infos = strings("infos");
    let result = if json["status"] == "success" {
        Ok(json["data"].clone())
    } else {
        Err(json["error"].as_str().unwrap_or(&text).to_owned())
    };
    Answer {
        result,
        warnings,
        infos,
    }
}

/// Prometheus' `almost.Equal` with its test epsilon, 1e-6 relative; a
/// staleness marker equals only another.
pub fn almost_equal(a: f64, b: f64) -> bool {
    let stale = |x: f64| x.to_bits() == STALE_NAN;
    if stale(a) || stale(b) {
        return stale(a) && stale(b);
    }
    sluice::promql::stats::almost_equal(a, b, 1e-6)
}

/// A value in an answer: a float, or a histogram in the API's JSON.
#[derive(Clone, Debug)]
pub enum Got {
    F(f64),
    H(Value),
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Got::F(v) => write!(f, "{v}"),
            Got::H(h) => write!(f, "{h}"),
        }
    }
}

fn parse_num(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// Whether the API's histogram `got` is `want`: count and sum, and the
/// non-empty buckets with their boundary rules, bounds and counts.
pub fn histogram_matches(want: &FloatHistogram, got: &Value) -> bool {
    let num = |v: &Value| v.as_str().and_then(parse_num).unwrap_or(f64::NAN);
    if !almost_equal(want.count, num(&got["count"])) || !almost_equal(want.sum, num(&got["sum"])) {
        return false;
    }
    let want: Vec<_> = want
        .all_buckets()
        .into_iter()
        .filter(|b| b.count != 0.0)
        .collect();
    let got = got["buckets"].as_array().cloned().unwrap_or_default();
    want.len() == got.len()
        && want.iter().zip(&got).all(|(w, g)| {
            g[0].as_u64() == Some(u64::from(w.boundary_rule()))
                && almost_equal(w.lower, num(&g[1]))
                && almost_equal(w.upper, num(&g[2]))
                && almost_equal(w.count, num(&g[3]))
        })
}

fn point_matches(want: &Point, got: &Got) -> bool {
    match (want, got) {
        (Point::Float(w), Got::F(g)) => almost_equal(*w, *g),
        (Point::Histogram(w), Got::H(g)) => histogram_matches(w, g),
        _ => false,
    }
}

fn got_of(v: &Value, histogram: bool) -> Result<(i64, Got), String> {
    if !histogram {
        return value_of(v).map(|(t, f)| (t, Got::F(f)));
    }
    let t = v[0]
        .as_f64()
        .ok_or_else(|| format!("no timestamp in {v}"))?;
    Ok(((t * 1000.0).round() as i64, Got::H(v[1].clone())))
}

fn value_of(v: &Value) -> Result<(i64, f64), String> {
    let t = v[0]
        .as_f64()
        .ok_or_else(|| format!("no timestamp in {v}"))?;
    let s = v[1].as_str().ok_or_else(|| format!("no value in {v}"))?;
    let f = match s {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        s => s.parse().map_err(|_| format!("bad value {s:?}"))?,
    };
    Ok(((t * 1000.0).round() as i64, f))
}

fn labels_of(v: &Value) -> Labels {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn show(l: &Labels) -> String {
    let mut s = String::new();
    if let Some(n) = l.get("__name__") {
        s.push_str(n);
    }
    s.push('{');
    let rest: Vec<String> = l
        .iter()
        .filter(|(k, _)| *k != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    s.push_str(&rest.join(", "));
    s.push('}');
    s
}

/// A result as one vector of (labels, value): an instant query's answer,
/// or the step at `t_ms` of a range query's.
type Flat = Vec<(Labels, Got)>;

fn compare_vector(e: &Eval, got: &Flat, scalar: bool) -> Result<(), String> {
    match &e.expected {
        Expected::Scalar(want) => {
            if !scalar {
                return Err(format!(
                    "expected scalar {want}, got a vector of {}",
                    got.len()
                ));
            }
            let v = match got.first() {
                Some((_, Got::F(v))) => *v,
                _ => f64::NAN,
            };
            if !almost_equal(*want, v) {
                return Err(format!("expected scalar {want} but got {v}"));
            }
            Ok(())
        }
        Expected::String(want) => Err(format!("expected string {want:?}, got a vector or scalar")),
        Expected::Series(want) => {
            if scalar {
                return Err("expected a vector, got a scalar".into());
            }
            let mut seen = vec![false; want.len()];
            for (pos, (labels, v)) in got.iter().enumerate() {
                let Some(k) = want.iter().position(|w| &w.labels == labels) else {
                    return Err(format!(
                        "unexpected metric {} in result, has value {v}",
                        show(labels)
                    ));
                };
                if e.ordered && k != pos {
                    return Err(format!(
                        "expected metric {} at position {} but was at {}",
                        show(labels),
                        k + 1,
                        pos + 1
                    ));
                }
                match want[k].points.first() {
                    Some(w) if point_matches(w, v) => {}
                    w => return Err(format!("expected {w:?} for {} but got {v}", show(labels))),
                }
                seen[k] = true;
            }
            if let Some(k) = seen.iter().position(|s| !s) {
                return Err(format!(
                    "expected metric {} not found",
                    show(&want[k].labels)
                ));
            }
            Ok(())
        }
    }
}

fn flat_instant(data: &Value) -> Result<(Flat, bool), String> {
    match data["resultType"].as_str() {
        Some("vector") => {
            let mut out = Vec::new();
            for s in data["result"].as_array().into_iter().flatten() {
                let got = match s.get("histogram") {
                    Some(h) => got_of(h, true)?.1,
                    None => got_of(&s["value"], false)?.1,
                };
                out.push((labels_of(&s["metric"]), got));
            }
            Ok((out, false))
        }
        Some("scalar") => Ok((
            vec![(Labels::new(), Got::F(value_of(&data["result"])?.1))],
            true,
        )),
        other => Err(format!("unexpected result type {other:?}")),
    }
}

/// A range query's series: labels and (time, value) points.
type Matrix = Vec<(Labels, Vec<(i64, Got)>)>;

fn matrix(data: &Value) -> Result<Matrix, String> {
    if data["resultType"] != "matrix" {
        return Err(format!("expected a matrix, got {}", data["resultType"]));
    }
    let mut out = Vec::new();
    for s in data["result"].as_array().into_iter().flatten() {
        let mut pts = Vec::new();
        for v in s["values"].as_array().into_iter().flatten() {
            pts.push(got_of(v, false)?);
        }
        for v in s["histograms"].as_array().into_iter().flatten() {
            pts.push(got_of(v, true)?);
        }
        pts.sort_by_key(|p| p.0);
        out.push((labels_of(&s["metric"]), pts));
    }
    Ok(out)
}

fn compare_matrix(e: &Eval, got: &[(Labels, Vec<(i64, Got)>)]) -> Result<(), String> {
    let (start_ms, step_ms) = match (e.kind.clone(), e.range_vector) {
        (_, Some(r)) => r,
        (
            Kind::Range {
                start_ms, step_ms, ..
            },
            None,
        ) => (start_ms, step_ms),
        _ => return Err("not a range eval".into()),
    };
    let Expected::Series(want) = &e.expected else {
        return Err("expected a scalar, got a matrix".into());
    };
    for w in got.windows(2) {
        if w[0].0 > w[1].0 {
            return Err(format!(
                "matrix not sorted by labels: {} before {}",
                show(&w[0].0),
                show(&w[1].0)
            ));
        }
    }
    let mut seen = vec![false; want.len()];
    for (labels, pts) in got {
        let Some(k) = want.iter().position(|w| &w.labels == labels) else {
            return Err(format!(
                "unexpected metric {} in result, has {pts:?}",
                show(labels)
            ));
        };
        seen[k] = true;
        let expected: Vec<(i64, &Point)> = want[k]
            .points
            .iter()
            .enumerate()
            .filter(|(_, p)| **p != Point::Omitted)
            .map(|(i, p)| (start_ms + i as i64 * step_ms, p))
            .collect();
        if expected.len() != pts.len() {
            return Err(format!(
                "expected {} points for {}, got {pts:?}",
                expected.len(),
                show(labels)
            ));
        }
        for ((et, ev), (gt, gv)) in expected.iter().zip(pts) {
            if et != gt || !point_matches(ev, gv) {
                return Err(format!(
                    "expected ({et}, {ev:?}) for {}, got ({gt}, {gv}) in {pts:?}",
                    show(labels)
                ));
            }
        }
    }
    if let Some(k) = seen.iter().position(|s| !s) {
        return Err(format!(
            "expected metric {} not found",
            show(&want[k].labels)
        ));
    }
    Ok(())
}

fn check_annotations(e: &Eval, a: &Answer) -> Result<(), String> {
    if e.any_warn && a.warnings.is_empty() {
        return Err("expected warnings but got none".into());
    }
    if e.any_info && a.infos.is_empty() {
        return Err("expected info annotations but got none".into());
    }
    // The API ends each annotation with the position of the expression it
    // is about, ` (1:6)`; newer scripts expect it, older ones give the
    // message alone.
    let position = regex::Regex::new(r" \(\d+:\d+\)$").expect("valid regex");
    for (kind, want, got) in [("warn", &e.warn, &a.warnings), ("info", &e.info, &a.infos)] {
        if want.is_empty() {
            continue;
        }
        if got.is_empty() {
            return Err(format!("expected {kind} annotations but none were found"));
        }
        let matches = |w: &Pattern, g: &String| w.matches(g) || w.matches(&position.replace(g, ""));
        for w in want {
            if !got.iter().any(|g| matches(w, g)) {
                return Err(format!(
                    "expected a {kind} annotation matching {w:?}, found {got:?}"
                ));
            }
        }
        for g in got {
            if !want.iter().any(|w| matches(w, g)) {
                return Err(format!("unexpected {kind} annotation {g:?}"));
            }
        }
    }
    if e.no_warn && !a.warnings.is_empty() {
        return Err(format!("unexpected warnings {:?}", a.warnings));
    }
    if e.no_info && !a.infos.is_empty() {
        return Err(format!("unexpected infos {:?}", a.infos));
    }
    Ok(())
}

/// Runs one eval against the server at `base`; `Err` says what differed.
pub async fn run_eval(client: &reqwest::Client, base: &str, e: &Eval) -> Result<(), String> {
    let a = query(client, base, &e.kind, &e.expr).await;
    let data = match (&a.result, &e.fail) {
        (Err(msg), Some(p)) => {
            return if p.matches(msg) {
                Ok(())
            } else {
                Err(format!("expected an error matching {p:?}, got {msg:?}"))
            };
        }
        (Err(msg), None) => return Err(format!("error: {msg}")),
        (Ok(_), Some(_)) => return Err("expected an error but got none".into()),
        (Ok(d), None) => d,
    };
    check_annotations(e, &a)?;
    if let Expected::String(want) = &e.expected {
        return if data["resultType"] == "string" && data["result"][1].as_str() == Some(want) {
            Ok(())
        } else {
            Err(format!("expected string {want:?}, got {data}"))
        };
    }
    if e.range_vector.is_some() {
        return compare_matrix(e, &matrix(data)?);
    }
    match e.kind {
        Kind::Range { .. } => compare_matrix(e, &matrix(data)?),
        Kind::Instant { t_ms } => {
            let (flat, scalar) = flat_instant(data)?;
            compare_vector(e, &flat, scalar)?;
            // The same query as a range query, read at its middle step;
            // not for queries whose value depends on the query's range
            // (as Prometheus' runner leaves them out).
            let context =
                regex::Regex::new(r"\b(range|step|start|end)\(\s*\)").expect("valid regex");
            if context.is_match(&e.expr) {
                return Ok(());
            }
            let around = Kind::Range {
                start_ms: t_ms - 60_000,
                end_ms: t_ms + 60_000,
                step_ms: 60_000,
            };
            let r = query(client, base, &around, &e.expr).await;
            let data = r.result.map_err(|m| format!("error in range mode: {m}"))?;
            let m = matrix(&data).map_err(|m| format!("range mode: {m}"))?;
            let mut at_t = Vec::new();
            for (labels, pts) in m {
                if let Some((_, v)) = pts.iter().find(|(t, _)| *t == t_ms) {
                    at_t.push((labels, v.clone()));
                }
            }
            if e.ordered {
                return Ok(());
            }
            compare_vector(e, &at_t, scalar).map_err(|m| format!("range mode: {m}"))
        }
    }
}
