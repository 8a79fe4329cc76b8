//! Alert label and annotation templates: the part of Go's `text/template`
//! and Prometheus' template functions that alert templates use, written
//! here. Text with `{{ … }}` actions (`{{-`/`-}}` trim the space beside
//! them); an action is a pipeline of commands joined by `|`, each a value
//! (`$labels`, `$labels.job`, `$value`, `$externalLabels.x`,
//! `$externalURL`, `.Labels.job`, `.Value`, a string or number) or a
//! function with arguments, the previous command's result last.
//!
//! Functions: `humanize`, `humanize1024`, `humanizeDuration`,
//! `humanizePercentage`, `humanizeTimestamp`, `printf`, `print`, `toUpper`,
//! `toLower`, `title`, `reReplaceAll`, `match`, `stripPort`, `stripDomain`,
//! `parseDuration`, `graphLink`, `tableLink`, `externalURL`, `pathPrefix`,
//! `safeHtml`. What this does not know (`if`, `range`, `query`, …) is an
//! error, which the caller writes as Prometheus writes a template error.

use std::collections::BTreeMap;

/// What a template sees: the alert's labels, value, and the externals.
#[derive(Debug, Clone)]
pub struct Data<'a> {
    /// The result's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The result's value.
    pub value: f64,
    /// `--external-labels`.
    pub external_labels: &'a BTreeMap<String, String>,
    /// The URL Sluice is reached at.
    pub external_url: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
enum V {
    Str(String),
    Num(f64),
    Bool(bool),
    Map(BTreeMap<String, String>),
}

impl V {
    fn text(&self) -> String {
        match self {
            V::Str(s) => s.clone(),
            V::Num(f) => go_float(*f),
            V::Bool(b) => b.to_string(),
            V::Map(m) => {
                let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("map[{}]", inner.join(" "))
            }
        }
    }

    fn num(&self) -> Result<f64, String> {
        match self {
            V::Num(f) => Ok(*f),
            V::Str(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("strconv.ParseFloat: parsing {s:?}: invalid syntax")),
            V::Bool(_) => Err("can't convert bool to float".into()),
            V::Map(_) => Err("can't convert map[string]string to float".into()),
        }
    }
}

/// A float as Go's `%v` writes it: the shortest form, in exponent form
/// from 1e6 up or below 1e-4 (`strconv`'s `'g'` with the shortest
/// precision).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let s = format!("{f:e}");
    let exp: i32 = s
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    if !(-4..6).contains(&exp) {
        // Rust writes `1e21`, `1.5e-7`; Go `1e+21`, `1.5e-07`.
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match e.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', e),
        };
        return format!("{m}e{sign}{digits:0>2}");
    }
    format!("{f}")
}

/// Expands `text` with `data`: the text, or why it failed.
pub fn expand(text: &str, data: &Data<'_>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        let mut lit = &rest[..at];
        let mut inner_start = at + 2;
        if rest[inner_start..].starts_with('-')
            && rest[inner_start + 1..].starts_with([' ', '\t', '\n', '\r'])
        {
            lit = lit.trim_end();
            inner_start += 1;
        }
        out.push_str(lit);
        let Some(close) = rest[inner_start..].find("}}") else {
            return Err("unclosed action".into());
        };
        let mut inner = &rest[inner_start..inner_start + close];
        let mut after = &rest[inner_start + close + 2..];
        if inner.ends_with('-') && inner[..inner.len() - 1].ends_with([' ', '\t', '\n', '\r']) {
            inner = &inner[..inner.len() - 1];
            after = after.trim_start();
        }
        let inner = inner.trim();
        if !(inner.starts_with("/*") && inner.ends_with("*/")) {
            out.push_str(&pipeline(inner, data)?.text());
        }
        rest = after;
    }
    out.push_str(rest);
    Ok(out)
}

/// Checks `text` as Prometheus does when it loads a rule: every action
/// closed, every function one Sluice knows (or a control word, which is
/// reported when the template is expanded).
pub fn check(text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(at) = rest.find("{{") {
        let after = &rest[at + 2..];
        let Some(close) = after.find("}}") else {
            return Err("unclosed action".into());
        };
        let inner = after[..close].trim_matches(|c: char| c == '-' || c.is_whitespace());
        rest = &after[close + 2..];
        if inner.starts_with("/*") {
            continue;
        }
        let toks = tokens(inner)?;
        let mut command_start = true;
        for t in &toks {
            if t == "|" || t == "(" {
                command_start = true;
                continue;
            }
            if command_start {
                let word = t.as_str();
                let known = word.starts_with(['$', '.', '"', '`'])
                    || word.parse::<f64>().is_ok()
                    || matches!(word, "true" | "false" | ")")
                    || FUNCTIONS.contains(&word)
                    || CONTROL.contains(&word);
                if !known {
                    return Err(format!("function {word:?} not defined"));
                }
            }
            command_start = false;
        }
    }
    Ok(())
}

/// The functions [`expand`] knows.
const FUNCTIONS: [&str; 20] = [
    "humanize",
    "humanize1024",
    "humanizeDuration",
    "humanizePercentage",
    "humanizeTimestamp",
    "printf",
    "print",
    "toUpper",
    "toLower",
    "title",
    "reReplaceAll",
    "match",
    "stripPort",
    "stripDomain",
    "parseDuration",
    "graphLink",
    "tableLink",
    "externalURL",
    "pathPrefix",
    "safeHtml",
];

/// Words of Go's templates (and Prometheus' functions) that Prometheus
/// takes and Sluice's templates do not evaluate: a rule that uses them
/// loads, and its expansion says what is missing.
const CONTROL: [&str; 20] = [
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
    "and", "or", "not", "len", "index", "eq", "ne", "lt", "query", "first",
];

/// Splits an action into tokens: strings (quoted, raw), parentheses and
/// words.
fn tokens(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' {
            let mut j = i + 1;
            let mut v = String::from('"');
            while j < b.len() && b[j] != '"' {
                if b[j] == '\\' && j + 1 < b.len() {
                    v.push(b[j]);
                    j += 1;
                }
                v.push(b[j]);
                j += 1;
            }
            if j >= b.len() {
                return Err("unterminated quoted string".into());
            }
            v.push('"');
            out.push(v);
            i = j + 1;
        } else if c == '`' {
            let Some(end) = b[i + 1..].iter().position(|&x| x == '`') else {
                return Err("unterminated raw quoted string".into());
            };
            out.push(b[i..i + end + 2].iter().collect());
            i += end + 2;
        } else if c == '|' || c == '(' || c == ')' {
            out.push(c.to_string());
            i += 1;
        } else {
            let mut j = i;
            while j < b.len() && !b[j].is_whitespace() && !matches!(b[j], '|' | '(' | ')' | '"') {
                j += 1;
            }
            out.push(b[i..j].iter().collect());
            i = j;
        }
    }
    Ok(out)
}

fn pipeline(s: &str, data: &Data<'_>) -> Result<V, String> {
    let toks = tokens(s)?;
    let first = toks.first().map(String::as_str).unwrap_or_default();
    if matches!(
        first,
        "if" | "else" | "end" | "range" | "with" | "define" | "template" | "block"
    ) || first.starts_with('$') && toks.get(1).is_some_and(|t| t == ":=" || t == "=")
    {
        return Err(format!(
            "{first:?} actions are not supported by Sluice's templates"
        ));
    }
    let mut at = 0;
    eval_pipeline(&toks, &mut at, data)
}

/// How deep parentheses may nest in one action.
const MAX_DEPTH: usize = 64;

fn eval_pipeline(toks: &[String], at: &mut usize, data: &Data<'_>) -> Result<V, String> {
    eval_nested(toks, at, data, 0)
}

fn eval_nested(
    toks: &[String],
    at: &mut usize,
    data: &Data<'_>,
    depth: usize,
) -> Result<V, String> {
    if depth > MAX_DEPTH {
        return Err("parentheses nested too deep".into());
    }
    let mut prev: Option<V> = None;
    loop {
        let mut args: Vec<&str> = Vec::new();
        let mut nested: Vec<Option<V>> = Vec::new();
        while *at < toks.len() && toks[*at] != "|" && toks[*at] != ")" {
            if toks[*at] == "(" {
                *at += 1;
                let v = eval_nested(toks, at, data, depth + 1)?;
                if toks.get(*at).map(String::as_str) != Some(")") {
                    return Err("unclosed left paren".into());
                }
                args.push("");
                nested.push(Some(v));
            } else {
                args.push(&toks[*at]);
                nested.push(None);
            }
            *at += 1;
        }
        if args.is_empty() {
            return Err("missing value for command".into());
        }
        let v = command(&args, &nested, prev.take(), data)?;
        prev = Some(v);
        if toks.get(*at).map(String::as_str) == Some("|") {
            *at += 1;
            continue;
        }
        return prev.ok_or_else(|| "empty pipeline".into());
    }
}

/// A value token: a variable, field, string or number.
fn operand(t: &str, data: &Data<'_>) -> Result<V, String> {
    let field =
        |m: &BTreeMap<String, String>, k: &str| V::Str(m.get(k).cloned().unwrap_or_default());
    if let Some(q) = t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return Ok(V::Str(unquote(q)));
    }
    if let Some(q) = t.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        return Ok(V::Str(q.to_owned()));
    }
    if t == "true" || t == "false" {
        return Ok(V::Bool(t == "true"));
    }
    let (base, key) = match t.strip_prefix('.') {
        Some(rest) => (".", Some(rest)),
        None => match t.find('.') {
            Some(i) => (&t[..i], Some(&t[i + 1..])),
            None => (t, None),
        },
    };
    let v = match (base, key) {
        ("$labels", None) => V::Map(data.labels.clone()),
        ("$labels", Some(k)) => field(data.labels, k),
        ("$externalLabels", None) => V::Map(data.external_labels.clone()),
        ("$externalLabels", Some(k)) => field(data.external_labels, k),
        ("$value", None) => V::Num(data.value),
        ("$externalURL", None) => V::Str(data.external_url.to_owned()),
        (".", Some(rest)) => match rest.split_once('.') {
            Some(("Labels", k)) => field(data.labels, k),
            Some(("ExternalLabels", k)) => field(data.external_labels, k),
            None if rest == "Labels" => V::Map(data.labels.clone()),
            None if rest == "Value" => V::Num(data.value),
            None if rest == "ExternalURL" => V::Str(data.external_url.to_owned()),
            _ => return Err(format!("can't evaluate field {rest}")),
        },
        _ => {
            if let Ok(n) = t.parse::<f64>() {
                return Ok(V::Num(n));
            }
            if t.starts_with('$') {
                return Err(format!("undefined variable {t:?}"));
            }
            return Err(format!("function {t:?} not defined"));
        }
    };
    Ok(v)
}

fn unquote(q: &str) -> String {
    let mut out = String::new();
    let mut chars = q.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

fn command(
    args: &[&str],
    nested: &[Option<V>],
    prev: Option<V>,
    data: &Data<'_>,
) -> Result<V, String> {
    let value_of = |i: usize| -> Result<V, String> {
        match &nested[i] {
            Some(v) => Ok(v.clone()),
            None => operand(args[i], data),
        }
    };
    let name = args[0];
    let is_function = nested[0].is_none()
        && !name.starts_with(['$', '.', '"', '`'])
        && name.parse::<f64>().is_err()
        && name != "true"
        && name != "false";
    if !is_function {
        if args.len() > 1 || prev.is_some() {
            return Err(format!("can't give argument to non-function {name}"));
        }
        return value_of(0);
    }
    let mut vals = Vec::with_capacity(args.len());
    for i in 1..args.len() {
        vals.push(value_of(i)?);
    }
    vals.extend(prev);
    let one = |vals: &[V]| -> Result<V, String> {
        match vals {
            [v] => Ok(v.clone()),
            _ => Err(format!(
                "wrong number of args for {name}: want 1 got {}",
                vals.len()
            )),
        }
    };
    Ok(match name {
        "humanize" => V::Str(humanize(one(&vals)?.num()?)),
        "humanize1024" => V::Str(humanize1024(one(&vals)?.num()?)),
        "humanizeDuration" => V::Str(humanize_duration(one(&vals)?.num()?)),
        "humanizePercentage" => V::Str(format!("{}%", go_g4(one(&vals)?.num()? * 100.0))),
        "humanizeTimestamp" => V::Str(humanize_timestamp(one(&vals)?.num()?)),
        "toUpper" => V::Str(one(&vals)?.text().to_uppercase()),
        "toLower" => V::Str(one(&vals)?.text().to_lowercase()),
        "title" => V::Str(title(&one(&vals)?.text())),
        "safeHtml" => V::Str(one(&vals)?.text()),
        "stripPort" => V::Str(strip_port(&one(&vals)?.text())),
        "stripDomain" => V::Str(strip_domain(&one(&vals)?.text())),
        "parseDuration" => {
            let s = one(&vals)?.text();
            let ms = crate::promql::parser::text::parse_prom_duration(&s)
                .ok_or_else(|| format!("not a valid duration string: {s:?}"))?;
            V::Num(ms as f64 / 1000.0)
        }
        "graphLink" | "tableLink" => {
            let expr = one(&vals)?.text();
            let tab = if name == "graphLink" { 0 } else { 1 };
            let q: String = form_urlencoded::byte_serialize(expr.as_bytes()).collect();
            V::Str(format!("/graph?g0.expr={q}&g0.tab={tab}"))
        }
        "externalURL" => V::Str(data.external_url.to_owned()),
        "pathPrefix" => V::Str(path_of(data.external_url)),
        "match" => match vals.as_slice() {
            [re, s] => {
                let re = regex::Regex::new(&re.text()).map_err(|e| e.to_string())?;
                V::Bool(re.is_match(&s.text()))
            }
            _ => return Err("wrong number of args for match: want 2".into()),
        },
        "reReplaceAll" => match vals.as_slice() {
            [re, repl, s] => {
                let re = regex::Regex::new(&re.text()).map_err(|e| e.to_string())?;
                V::Str(
                    re.replace_all(&s.text(), go_replacement(&repl.text()))
                        .into_owned(),
                )
            }
            _ => return Err("wrong number of args for reReplaceAll: want 3".into()),
        },
        "print" => V::Str(vals.iter().map(V::text).collect::<Vec<_>>().join("")),
        "printf" => match vals.split_first() {
            Some((format, rest)) => V::Str(printf(&format.text(), rest)?),
            None => return Err("wrong number of args for printf".into()),
        },
        other => return Err(format!("function {other:?} not defined")),
    })
}

/// Go's `$1`/`${name}` replacement syntax, as the regex crate reads it.
fn go_replacement(r: &str) -> String {
    r.to_owned()
}

fn path_of(url: &str) -> String {
    url.split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_owned()))
        .unwrap_or_default()
}

fn strip_port(s: &str) -> String {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, port)) = rest.split_once("]:") {
            if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
                return host.to_owned();
            }
        }
        return s.to_owned();
    }
    match s.rsplit_once(':') {
        Some((host, _)) if !host.contains(':') => host.to_owned(),
        _ => s.to_owned(),
    }
}

fn strip_domain(s: &str) -> String {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (s, None),
    };
    if host.parse::<std::net::IpAddr>().is_ok() {
        return s.to_owned();
    }
    let first = host.split('.').next().unwrap_or(host);
    match port {
        Some(p) => format!("{first}:{p}"),
        None => first.to_owned(),
    }
}

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = !c.is_alphanumeric() && c != '\'';
    }
    out
}

/// `%.4g`, as Go writes it.
fn go_g4(v: f64) -> String {
    go_g(v, 4)
}

/// `%.{p}g`, as Go writes it (exponent form below 1e-4 or from 10^p).
fn go_g(v: f64, p: usize) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let p = p.max(1);
    let e = format!("{:.*e}", p - 1, v);
    let (m, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s.to_owned()
        }
    };
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(m), exp.abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        trim(&format!("{v:.decimals$}"))
    }
}

fn humanize(v: f64) -> String {
    if v == 0.0 || v.is_nan() || v.is_infinite() {
        return go_g4(v);
    }
    let mut v = v;
    if v.abs() >= 1.0 {
        let mut prefix = "";
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"] {
            if v.abs() < 1000.0 {
                break;
            }
            prefix = p;
            v /= 1000.0;
        }
        return format!("{}{prefix}", go_g4(v));
    }
    let (v, prefix) = scaled_up(v);
    format!("{}{prefix}", go_g4(v))
}

/// `v` (below 1 in size) times 1000 until it is not, and the SI prefix
/// of the last step (`m`, `u`, `n`, …), as Prometheus' humanize scales.
fn scaled_up(mut v: f64) -> (f64, &'static str) {
    let mut prefix = "";
    for p in ["m", "u", "n", "p", "f", "a", "z", "y"] {
        if v.abs() >= 1.0 {
            break;
        }
        prefix = p;
        v *= 1000.0;
    }
    (v, prefix)
}

fn humanize1024(v: f64) -> String {
    if v.abs() <= 1.0 || v.is_nan() || v.is_infinite() {
        return go_g4(v);
    }
    let mut v = v;
    let mut prefix = "";
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"] {
        if v.abs() < 1024.0 {
            break;
        }
        prefix = p;
        v /= 1024.0;
    }
    format!("{}{prefix}", go_g4(v))
}

fn humanize_duration(v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        return go_g4(v);
    }
    if v == 0.0 {
        return "0s".into();
    }
    if v.abs() >= 1.0 {
        let sign = if v < 0.0 { "-" } else { "" };
        let v = v.abs();
        let total = v as i64;
        let (days, hours, minutes) = (total / 86_400, total / 3600 % 24, total / 60 % 60);
        let seconds = total % 60;
        if days != 0 {
            return format!("{sign}{days}d {hours}h {minutes}m {seconds}s");
        }
        if hours != 0 {
            return format!("{sign}{hours}h {minutes}m {seconds}s");
        }
        if minutes != 0 {
            return format!("{sign}{minutes}m {seconds}s");
        }
        return format!("{sign}{}s", go_g4(v));
    }
    let (v, prefix) = scaled_up(v);
    format!("{}{prefix}s", go_g4(v))
}

fn humanize_timestamp(v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        return go_g4(v);
    }
    // As Prometheus: nanoseconds, then its millisecond time.
    let ms = (v * 1e9) as i64 / 1_000_000;
    let Some(t) = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms) else {
        return go_g4(v);
    };
    let mut s = t.format("%Y-%m-%d %H:%M:%S").to_string();
    let frac = ms.rem_euclid(1000);
    if frac != 0 {
        let digits = format!("{frac:03}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push_str(" +0000 UTC");
    s
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%s %v %d %f %e %g %q
/// %%` with flags, width and precision.
fn printf(format: &str, args: &[V]) -> Result<String, String> {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut flags = String::new();
        while let Some(&f) = chars.peek() {
            if matches!(f, '-' | '+' | ' ' | '0' | '#') {
                flags.push(f);
                chars.next();
            } else {
                break;
            }
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        // Go's bounds: a width or precision past 1e6 is refused.
        if width.len() > 7 || width.parse::<usize>().is_ok_and(|w| w > 1_000_000) {
            out.push_str("%!(BADWIDTH)");
            width.clear();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = match p.parse::<usize>() {
                Ok(n) if n <= 1_000_000 && p.len() <= 7 => Some(n),
                Ok(_) | Err(_) if p.is_empty() => Some(0),
                _ => {
                    out.push_str("%!(BADPREC)");
                    None
                }
            };
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        let body = match verb {
            's' | 'v' => {
                let t = arg.text();
                match precision {
                    Some(p) if verb == 's' => t.chars().take(p).collect(),
                    _ => t,
                }
            }
            'q' => format!("{:?}", arg.text()),
            'd' => match arg {
                V::Num(f) if f.fract() == 0.0 => format!("{}", *f as i64),
                other => format!("%!d({})", go_type(other)),
            },
            'f' | 'F' => format!("{:.*}", precision.unwrap_or(6), arg.num()?),
            'e' => {
                let s = format!("{:.*e}", precision.unwrap_or(6), arg.num()?);
                let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
                let e: i32 = e.parse().unwrap_or(0);
                format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
            }
            'g' => match precision {
                Some(p) => go_g(arg.num()?, p),
                None => go_float(arg.num()?),
            },
            other => format!("%!{other}({})", arg.text()),
        };
        let body = if flags.contains('+')
            && matches!(verb, 'd' | 'f' | 'e' | 'g')
            && !body.starts_with('-')
        {
            format!("+{body}")
        } else {
            body
        };
        let w: usize = width.parse().unwrap_or(0);
        let n = body.chars().count();
        if n < w {
            let pad = w - n;
            if flags.contains('-') {
                out.push_str(&body);
                out.push_str(&" ".repeat(pad));
            } else if flags.contains('0') && matches!(verb, 'd' | 'f' | 'e' | 'g') {
                let (sign, digits) = match body.strip_prefix('-') {
                    Some(d) => ("-", d),
                    None => ("", body.as_str()),
                };
                out.push_str(sign);
                out.push_str(&"0".repeat(pad));
                out.push_str(digits);
            } else {
                out.push_str(&" ".repeat(pad));
                out.push_str(&body);
            }
        } else {
            out.push_str(&body);
        }
    }
    let extra: Vec<String> = args
        .map(|a| format!("{}={}", go_type(a), a.text()))
        .collect();
    if !extra.is_empty() {
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    Ok(out)
}

fn go_type(v: &V) -> &'static str {
    match v {
        V::Str(_) => "string",
        V::Num(_) => "float64",
        V::Bool(_) => "bool",
        V::Map(_) => "map[string]string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(t: &str, value: f64) -> Result<String, String> {
        let labels = BTreeMap::from([
            ("job".to_owned(), "api".to_owned()),
            ("instance".to_owned(), "host-1.example.com:9100".to_owned()),
        ]);
        let external = BTreeMap::from([("dc".to_owned(), "eu".to_owned())]);
        expand(
            t,
            &Data {
                labels: &labels,
                value,
                external_labels: &external,
                external_url: "http://sluice:9201/prefix",
            },
        )
    }

    #[test]
    fn what_alert_templates_write_comes_out_as_prometheus_writes_it() {
        let cases = [
            ("{{ $labels.job }} is down", 1.0, "api is down"),
            ("{{ .Labels.job }}/{{ $externalLabels.dc }}", 1.0, "api/eu"),
            ("{{ $value }}", 0.5, "0.5"),
            ("{{ $value }}", 1e6, "1e+06"),
            ("{{ $value }}", 123456.0, "123456"),
            ("{{ $value | humanize }}", 1234567.0, "1.235M"),
            ("{{ humanize $value }}", 0.12, "120m"),
            ("{{ $value | humanize1024 }}", 1048576.0, "1Mi"),
            ("{{ humanizeDuration $value }}", 60.0, "1m 0s"),
            ("{{ humanizeDuration $value }}", 1.2345, "1.234s"),
            ("{{ humanizeDuration $value }}", 0.12345, "123.5ms"),
            ("{{ humanizeDuration $value }}", 183845.0, "2d 3h 4m 5s"),
            ("{{ humanizePercentage $value }}", 0.1234567, "12.35%"),
            (
                "{{ humanizeTimestamp $value }}",
                1435065584.128,
                "2015-06-23 13:19:44.128 +0000 UTC",
            ),
            ("{{ printf \"%.2f\" $value }}", 12.3456, "12.35"),
            ("{{ printf \"%s=%d\" $labels.job 3 }}", 0.0, "api=3"),
            (
                "{{ $labels.instance | stripPort }}",
                0.0,
                "host-1.example.com",
            ),
            ("{{ $labels.instance | stripDomain }}", 0.0, "host-1:9100"),
            (
                "{{ toUpper $labels.job }} {{ title \"aa bb CC\" }}",
                0.0,
                "API Aa Bb CC",
            ),
            (
                "{{ reReplaceAll \"(.*)-1\" \"$1\" \"host-1\" }}",
                0.0,
                "host",
            ),
            ("a {{- \" b \" -}} c", 0.0, "a b c"),
            (
                "{{ graphLink \"up == 0\" }}",
                0.0,
                "/graph?g0.expr=up+%3D%3D+0&g0.tab=0",
            ),
            (
                "{{ pathPrefix }} {{ externalURL }}",
                0.0,
                "/prefix http://sluice:9201/prefix",
            ),
            ("{{ $labels.missing }}", 0.0, ""),
            ("{{/* a comment */}}x", 0.0, "x"),
            ("{{ printf \"%99999999s\" 1 }}", 0.0, "%!(BADWIDTH)1"),
        ];
        for (t, v, want) in cases {
            assert_eq!(run(t, v).as_deref(), Ok(want), "{t}");
        }
        assert_eq!(
            check("{{ nope }}"),
            Err("function \"nope\" not defined".into())
        );
        assert_eq!(
            check("{{ $value | humanize }} {{ if true }}{{ end }}"),
            Ok(())
        );
        assert!(check("{{ $value").is_err());
        for bad in [
            "{{ if $value }}x{{ end }}",
            "{{ query \"up\" }}",
            "{{ $nope }}",
            "{{ $labels.job",
            &format!("{{{{ {}1{} }}}}", "(".repeat(100), ")".repeat(100)),
        ] {
            assert!(run(bad, 0.0).is_err(), "{bad}");
        }
    }
}
