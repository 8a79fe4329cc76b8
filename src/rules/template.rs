//! Alert label and annotation templates: the part of Go's `text/template`
//! and Prometheus' template functions that alert templates use, written
//! here. Text with `{{ … }}` actions (`{{-`/`-}}` trim the space beside
//! them); an action is a pipeline of commands joined by `|`, each a value
//! (`$labels`, `$labels.job`, `$value`, `$externalLabels.x`,
//! `$externalURL`, `.Labels.job`, `.Value`, a string or number) or a
//! function with arguments, the previous command's result last.
//!
//! Control: `if`/`else if`/`else`, `range` (over a query's results, a map
//! or a count; `$i, $e :=`, `else`, `break`, `continue`), `with`
//! (`else with`), variables (`$x := …`, `$x = …`) scoped as Go scopes
//! them; `.` is the data, a range's element or a with's value.
//!
//! Functions: `humanize`, `humanize1024`, `humanizeDuration`,
//! `humanizePercentage`, `humanizeTimestamp`, `printf`, `print`, `println`,
//! `toUpper`, `toLower`, `title`, `reReplaceAll`, `match`, `stripPort`,
//! `stripDomain`, `parseDuration`, `graphLink`, `tableLink`, `externalURL`,
//! `pathPrefix`, `safeHtml`, Prometheus' `query` (a PromQL query at the
//! evaluation time), `first`, `label`, `value`, `strvalue`, `sortByLabel`,
//! and Go's `len`, `index`, `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `and`,
//! `or`, `not`, `html`, `urlquery`. What this does not know (`define`,
//! `template`, `js`, `slice`, …) is an error, which the caller writes as
//! Prometheus writes a template error. A template that loops or writes
//! too much is stopped with an error.

use std::collections::BTreeMap;

/// Runs a PromQL query for a template (`query`): at the evaluation time,
/// each result's labels and value, or why it failed.
pub type QueryFn<'a> = &'a dyn Fn(&str) -> Result<Vec<QuerySample>, String>;

/// One result of a template's query: its labels and value.
pub type QuerySample = (BTreeMap<String, String>, f64);

/// What a template sees: the alert's labels, value, and the externals.
#[derive(Clone)]
pub struct Data<'a> {
    /// The result's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The result's value.
    pub value: f64,
    /// `--external-labels`.
    pub external_labels: &'a BTreeMap<String, String>,
    /// The URL Sluice is reached at.
    pub external_url: &'a str,
    /// Runs `query` (none: `query` fails).
    pub query: Option<QueryFn<'a>>,
}

impl std::fmt::Debug for Data<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Data")
            .field("labels", &self.labels)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, PartialEq)]
enum V {
    Str(String),
    Num(f64),
    Bool(bool),
    Map(BTreeMap<String, String>),
    /// A query's results.
    List(Vec<V>),
    /// One result of a query: labels and value.
    Sample(Box<QuerySample>),
    /// The template's data (`$`, and `.` outside `range` and `with`).
    Root,
    /// Go's nil.
    Nil,
}

impl V {
    fn text(&self) -> String {
        match self {
            V::Str(s) => s.clone(),
            V::Num(f) => go_float(*f),
            V::Bool(b) => b.to_string(),
            V::Map(m) => go_map(m),
            V::List(l) => format!("[{}]", l.iter().map(V::text).collect::<Vec<_>>().join(" ")),
            V::Sample(s) => format!("&{{{} {}}}", go_map(&s.0), go_float(s.1)),
            V::Root => "{…}".into(),
            V::Nil => "<no value>".into(),
        }
    }

    fn num(&self) -> Result<f64, String> {
        match self {
            V::Num(f) => Ok(*f),
            V::Str(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("strconv.ParseFloat: parsing {s:?}: invalid syntax")),
            other => Err(format!("can't convert {} to float", go_type(other))),
        }
    }

    /// Go's truth: not false, zero, nil or empty.
    fn truth(&self) -> bool {
        match self {
            V::Str(s) => !s.is_empty(),
            V::Num(f) => *f != 0.0,
            V::Bool(b) => *b,
            V::Map(m) => !m.is_empty(),
            V::List(l) => !l.is_empty(),
            V::Sample(_) | V::Root => true,
            V::Nil => false,
        }
    }
}

/// A `map[string]string` as Go's `%v` writes it.
fn go_map(m: &BTreeMap<String, String>) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("map[{}]", inner.join(" "))
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

/// A piece of a template's text: literal text, or an action's inside
/// (comments dropped, `{{-`/`-}}` trimming done).
#[derive(Debug)]
enum Item {
    Text(String),
    Action(String),
}

fn items(text: &str) -> Result<Vec<Item>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    let mut trim_next = false;
    while let Some(at) = rest.find("{{") {
        let mut lit = &rest[..at];
        if trim_next {
            lit = lit.trim_start();
        }
        let mut inner_start = at + 2;
        if rest[inner_start..].starts_with('-')
            && rest[inner_start + 1..].starts_with([' ', '\t', '\n', '\r'])
        {
            lit = lit.trim_end();
            inner_start += 1;
        }
        if !lit.is_empty() {
            out.push(Item::Text(lit.to_owned()));
        }
        let Some(close) = rest[inner_start..].find("}}") else {
            return Err("unclosed action".into());
        };
        let mut inner = &rest[inner_start..inner_start + close];
        trim_next = false;
        if inner.ends_with('-') && inner[..inner.len() - 1].ends_with([' ', '\t', '\n', '\r']) {
            inner = &inner[..inner.len() - 1];
            trim_next = true;
        }
        let inner = inner.trim();
        if !(inner.starts_with("/*") && inner.ends_with("*/")) {
            out.push(Item::Action(inner.to_owned()));
        }
        rest = &rest[inner_start + close + 2..];
    }
    let lit = if trim_next { rest.trim_start() } else { rest };
    if !lit.is_empty() {
        out.push(Item::Text(lit.to_owned()));
    }
    Ok(out)
}

/// A pipeline, with the variables it declares (`$x :=`) or sets (`$x =`).
#[derive(Debug, Clone)]
struct Pipe {
    vars: Vec<String>,
    declare: bool,
    toks: Vec<String>,
}

#[derive(Debug)]
enum Node {
    Text(String),
    Out(Pipe),
    /// `if`/`with` chains: each condition and its body, then the last
    /// `else`.
    If(Vec<(Pipe, Vec<Node>)>, Vec<Node>),
    With(Vec<(Pipe, Vec<Node>)>, Vec<Node>),
    Range(Pipe, Vec<Node>, Vec<Node>),
    Break,
    Continue,
    /// An action Sluice does not run (`define`, `template`, `block`): it
    /// loads, as Prometheus loads it, and fails when expanded.
    Unsupported(String),
}

/// How deep `if`, `range` and `with` may nest.
const MAX_NESTING: usize = 64;

fn pipe_of(s: &str) -> Result<Pipe, String> {
    let toks = tokens(s)?;
    // `$a :=` / `$a, $b :=` / `$a =`
    let assign = toks.iter().position(|t| t == ":=" || t == "=");
    if let Some(at) = assign {
        let vars: Vec<String> = toks[..at]
            .iter()
            .flat_map(|t| t.split(','))
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect();
        if !vars.is_empty() && vars.len() <= 2 && vars.iter().all(|v| v.starts_with('$')) {
            return Ok(Pipe {
                vars,
                declare: toks[at] == ":=",
                toks: toks[at + 1..].to_vec(),
            });
        }
    }
    if toks.is_empty() {
        return Err("missing value for command".into());
    }
    Ok(Pipe {
        vars: Vec::new(),
        declare: false,
        toks,
    })
}

/// The first word of an action and the rest.
fn keyword(action: &str) -> (&str, &str) {
    let action = action.trim();
    match action.split_once(char::is_whitespace) {
        Some((k, rest)) => (k, rest.trim()),
        None => (action, ""),
    }
}

/// Parses `items[*at..]` up to an `end` or `else` (which is left for the
/// caller, with its position), or the end of the text.
fn parse_list(items: &[Item], at: &mut usize, depth: usize) -> Result<Vec<Node>, String> {
    if depth > MAX_NESTING {
        return Err("control structures nested too deep".into());
    }
    let mut out = Vec::new();
    while *at < items.len() {
        match &items[*at] {
            Item::Text(t) => {
                out.push(Node::Text(t.clone()));
                *at += 1;
            }
            Item::Action(a) => {
                let (k, rest) = keyword(a);
                match k {
                    "end" | "else" => return Ok(out),
                    "if" | "with" => {
                        *at += 1;
                        let mut arms = vec![(pipe_of(rest)?, parse_list(items, at, depth + 1)?)];
                        let mut otherwise = Vec::new();
                        loop {
                            let Some(Item::Action(a)) = items.get(*at) else {
                                return Err(format!("unexpected EOF in {k}"));
                            };
                            let (k2, rest2) = keyword(a);
                            *at += 1;
                            if k2 == "end" {
                                break;
                            }
                            // `else`, `else if …`, `else with …`
                            let (k3, rest3) = keyword(rest2);
                            if k3 == k && !rest3.is_empty() {
                                arms.push((pipe_of(rest3)?, parse_list(items, at, depth + 1)?));
                                continue;
                            }
                            if !rest2.is_empty() {
                                return Err(format!("unexpected {rest2:?} after else"));
                            }
                            otherwise = parse_list(items, at, depth + 1)?;
                            match items.get(*at) {
                                Some(Item::Action(a)) if keyword(a).0 == "end" => {
                                    *at += 1;
                                    break;
                                }
                                _ => return Err(format!("expected end after else in {k}")),
                            }
                        }
                        out.push(if k == "if" {
                            Node::If(arms, otherwise)
                        } else {
                            Node::With(arms, otherwise)
                        });
                    }
                    "range" => {
                        *at += 1;
                        let pipe = pipe_of(rest)?;
                        let body = parse_list(items, at, depth + 1)?;
                        let mut otherwise = Vec::new();
                        let Some(Item::Action(a)) = items.get(*at) else {
                            return Err("unexpected EOF in range".into());
                        };
                        *at += 1;
                        let (k2, rest2) = keyword(a);
                        if k2 == "else" {
                            if !rest2.is_empty() {
                                return Err(format!("unexpected {rest2:?} after else in range"));
                            }
                            otherwise = parse_list(items, at, depth + 1)?;
                            match items.get(*at) {
                                Some(Item::Action(a)) if keyword(a).0 == "end" => *at += 1,
                                _ => return Err("expected end after else in range".into()),
                            }
                        }
                        out.push(Node::Range(pipe, body, otherwise));
                    }
                    "break" => {
                        out.push(Node::Break);
                        *at += 1;
                    }
                    "continue" => {
                        out.push(Node::Continue);
                        *at += 1;
                    }
                    "define" | "block" => {
                        // Their bodies run to an `end`: passed over whole.
                        *at += 1;
                        let _ = parse_list(items, at, depth + 1)?;
                        match items.get(*at) {
                            Some(Item::Action(a)) if keyword(a).0 == "end" => *at += 1,
                            _ => return Err(format!("unexpected EOF in {k}")),
                        }
                        out.push(Node::Unsupported(k.to_owned()));
                    }
                    "template" => {
                        out.push(Node::Unsupported(k.to_owned()));
                        *at += 1;
                    }
                    _ => {
                        out.push(Node::Out(pipe_of(a)?));
                        *at += 1;
                    }
                }
            }
        }
    }
    Ok(out)
}

fn parse(text: &str) -> Result<Vec<Node>, String> {
    let items = items(text)?;
    let mut at = 0;
    let nodes = parse_list(&items, &mut at, 0)?;
    match items.get(at) {
        None => Ok(nodes),
        Some(Item::Action(a)) => Err(format!("unexpected {{{{{}}}}}", keyword(a).0)),
        Some(Item::Text(_)) => Err("unexpected text".into()),
    }
}

/// The most a template writes, and the most steps it takes (each text,
/// action and loop turn one): a template ranging over a large query is
/// stopped, not let run.
const MAX_OUTPUT: usize = 1 << 20;
const MAX_STEPS: usize = 1 << 20;
const TOO_LARGE: &str = "template too large: it writes or loops too much";
/// The most queries one expansion runs (each is a PromQL evaluation).
const MAX_QUERIES: usize = 100;

/// What an expansion carries: the data, the variables in scope, `.`, and
/// what it has spent.
struct Env<'a, 'b> {
    data: &'b Data<'a>,
    vars: Vec<(String, V)>,
    steps: usize,
    queries: usize,
}

/// How a list of nodes ended: normally, or by `break`/`continue`.
enum Flow {
    Normal,
    Break,
    Continue,
}

/// Expands `text` with `data`: the text, or why it failed.
pub fn expand(text: &str, data: &Data<'_>) -> Result<String, String> {
    let nodes = parse(text)?;
    let mut env = Env {
        data,
        vars: vec![
            ("$".into(), V::Root),
            ("$labels".into(), V::Map(data.labels.clone())),
            (
                "$externalLabels".into(),
                V::Map(data.external_labels.clone()),
            ),
            ("$externalURL".into(), V::Str(data.external_url.to_owned())),
            ("$value".into(), V::Num(data.value)),
        ],
        steps: 0,
        queries: 0,
    };
    let mut out = String::new();
    run(&nodes, &V::Root, &mut env, &mut out, false)?;
    Ok(out)
}

fn run(
    nodes: &[Node],
    dot: &V,
    env: &mut Env<'_, '_>,
    out: &mut String,
    in_range: bool,
) -> Result<Flow, String> {
    for node in nodes {
        env.steps += 1;
        if env.steps > MAX_STEPS || out.len() > MAX_OUTPUT {
            return Err(TOO_LARGE.into());
        }
        match node {
            Node::Text(t) => out.push_str(t),
            Node::Out(p) => {
                let v = eval_pipe(p, dot, env)?;
                if p.vars.is_empty() {
                    out.push_str(&v.text());
                } else {
                    bind(env, p, v)?;
                }
            }
            Node::If(arms, otherwise) | Node::With(arms, otherwise) => {
                let with = matches!(node, Node::With(..));
                let scope = env.vars.len();
                let mut taken = None;
                for (cond, body) in arms {
                    let v = eval_pipe(cond, dot, env)?;
                    if !cond.vars.is_empty() {
                        bind(env, cond, v.clone())?;
                    }
                    if v.truth() {
                        taken = Some((body, v));
                        break;
                    }
                }
                let flow = match taken {
                    Some((body, v)) => {
                        let dot = if with { v } else { dot.clone() };
                        run(body, &dot, env, out, in_range)?
                    }
                    None => run(otherwise, dot, env, out, in_range)?,
                };
                env.vars.truncate(scope);
                if !matches!(flow, Flow::Normal) {
                    return Ok(flow);
                }
            }
            Node::Range(p, body, otherwise) => {
                let scope = env.vars.len();
                let v = eval_pipe(p, dot, env)?;
                let elements: Vec<(V, V)> = match v {
                    V::List(l) => l
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| (V::Num(i as f64), e))
                        .collect(),
                    V::Map(m) => m.into_iter().map(|(k, v)| (V::Str(k), V::Str(v))).collect(),
                    V::Nil => Vec::new(),
                    // A count (Go 1.22's range over an integer), no more
                    // turns than a template may take.
                    V::Num(n) if n >= 0.0 && n.fract() == 0.0 => {
                        if n > MAX_STEPS as f64 {
                            return Err(TOO_LARGE.into());
                        }
                        (0..n as usize)
                            .map(|i| (V::Num(i as f64), V::Num(i as f64)))
                            .collect()
                    }
                    other => return Err(format!("range can't iterate over {}", other.text())),
                };
                if elements.is_empty() {
                    run(otherwise, dot, env, out, in_range)?;
                }
                for (key, element) in elements {
                    env.steps += 1;
                    if env.steps > MAX_STEPS {
                        return Err(TOO_LARGE.into());
                    }
                    match p.vars.as_slice() {
                        [] => {}
                        [e] => env.vars.push((e.clone(), element.clone())),
                        [k, e] => {
                            env.vars.push((k.clone(), key));
                            env.vars.push((e.clone(), element.clone()));
                        }
                        _ => return Err("too many declarations in range".into()),
                    }
                    let flow = run(body, &element, env, out, true)?;
                    env.vars.truncate(scope);
                    if matches!(flow, Flow::Break) {
                        break;
                    }
                }
                env.vars.truncate(scope);
            }
            Node::Break if in_range => return Ok(Flow::Break),
            Node::Continue if in_range => return Ok(Flow::Continue),
            Node::Break | Node::Continue => return Err("break or continue outside range".into()),
            Node::Unsupported(k) => {
                return Err(format!(
                    "{k:?} actions are not supported by Sluice's templates"
                ))
            }
        }
    }
    Ok(Flow::Normal)
}

/// Declares or sets `p`'s variable to `v`.
fn bind(env: &mut Env<'_, '_>, p: &Pipe, v: V) -> Result<(), String> {
    let name = p.vars.first().cloned().unwrap_or_default();
    if p.declare {
        env.vars.push((name, v));
        // Variables hold at most a few times what a template may write.
        if env.vars.iter().map(|(_, v)| size_of(v)).sum::<usize>() > 4 * MAX_OUTPUT {
            return Err(TOO_LARGE.into());
        }
        return Ok(());
    }
    match env.vars.iter_mut().rev().find(|(n, _)| *n == name) {
        Some(slot) => {
            slot.1 = v;
            Ok(())
        }
        None => Err(format!("undefined variable {name:?}")),
    }
}

/// Checks `text` as Prometheus does when it loads a rule: every action
/// closed, every control structure ended, every function one Sluice
/// knows.
pub fn check(text: &str) -> Result<(), String> {
    fn walk(nodes: &[Node]) -> Result<(), String> {
        for n in nodes {
            match n {
                Node::Out(p) => known(p)?,
                Node::If(arms, otherwise) | Node::With(arms, otherwise) => {
                    for (p, body) in arms {
                        known(p)?;
                        walk(body)?;
                    }
                    walk(otherwise)?;
                }
                Node::Range(p, body, otherwise) => {
                    known(p)?;
                    walk(body)?;
                    walk(otherwise)?;
                }
                Node::Text(_) | Node::Break | Node::Continue | Node::Unsupported(_) => {}
            }
        }
        Ok(())
    }
    fn known(p: &Pipe) -> Result<(), String> {
        let mut command_start = true;
        for t in &p.toks {
            if t == "|" || t == "(" {
                command_start = true;
                continue;
            }
            if command_start {
                let word = t.as_str();
                let ok = word.starts_with(['$', '.', '"', '`'])
                    || word.parse::<f64>().is_ok()
                    || matches!(word, "true" | "false" | "nil" | ")")
                    || FUNCTIONS.contains(&word);
                if !ok {
                    return Err(format!("function {word:?} not defined"));
                }
            }
            command_start = false;
        }
        Ok(())
    }
    walk(&parse(text)?)
}

/// The functions [`expand`] knows.
const FUNCTIONS: [&str; 42] = [
    "humanize",
    "humanize1024",
    "humanizeDuration",
    "humanizePercentage",
    "humanizeTimestamp",
    "printf",
    "print",
    "println",
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
    "query",
    "first",
    "label",
    "value",
    "strvalue",
    "sortByLabel",
    "len",
    "index",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "and",
    "or",
    "not",
    "html",
    "urlquery",
    "js",
    "slice",
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
            // `:=` and `=` are tokens of their own (`{{$x:=.Value}}`).
            if c == '=' {
                out.push("=".into());
                i += 1;
                continue;
            }
            if c == ':' && b.get(i + 1) == Some(&'=') {
                out.push(":=".into());
                i += 2;
                continue;
            }
            let mut j = i;
            let ends = |j: usize| {
                b[j].is_whitespace()
                    || matches!(b[j], '|' | '(' | ')' | '"' | '=')
                    || (b[j] == ':' && b.get(j + 1) == Some(&'='))
            };
            while j < b.len() && !ends(j) {
                j += 1;
            }
            out.push(b[i..j].iter().collect());
            i = j;
        }
    }
    Ok(out)
}

/// How deep parentheses may nest in one action.
const MAX_DEPTH: usize = 64;

fn eval_pipe(p: &Pipe, dot: &V, env: &mut Env<'_, '_>) -> Result<V, String> {
    let mut at = 0;
    let v = eval_nested(&p.toks, &mut at, dot, env, 0)?;
    if at < p.toks.len() {
        return Err(format!("unexpected {:?} in operand", p.toks[at]));
    }
    Ok(v)
}

/// An argument of a command: a token, or a parenthesised pipeline (the
/// tokens between its parentheses), evaluated when the command asks.
#[derive(Clone, Copy)]
enum Arg<'t> {
    Tok(&'t str),
    Paren(usize, usize),
}

fn eval_nested(
    toks: &[String],
    at: &mut usize,
    dot: &V,
    env: &mut Env<'_, '_>,
    depth: usize,
) -> Result<V, String> {
    if depth > MAX_DEPTH {
        return Err("parentheses nested too deep".into());
    }
    let mut prev: Option<V> = None;
    loop {
        let mut args: Vec<Arg<'_>> = Vec::new();
        while *at < toks.len() && toks[*at] != "|" && toks[*at] != ")" {
            if toks[*at] == "(" {
                let start = *at + 1;
                let mut open = 1usize;
                let mut end = start;
                while end < toks.len() {
                    match toks[end].as_str() {
                        "(" => open += 1,
                        ")" => {
                            open -= 1;
                            if open == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    end += 1;
                }
                if end >= toks.len() {
                    return Err("unclosed left paren".into());
                }
                args.push(Arg::Paren(start, end));
                *at = end + 1;
            } else {
                args.push(Arg::Tok(&toks[*at]));
                *at += 1;
            }
        }
        if args.is_empty() {
            return Err("missing value for command".into());
        }
        let v = command(&args, toks, prev.take(), dot, env, depth)?;
        // No value grows past what a template may write (a string
        // doubled in a loop would, in few steps).
        if matches!(&v, V::Str(s) if s.len() > MAX_OUTPUT) {
            return Err(TOO_LARGE.into());
        }
        prev = Some(v);
        if toks.get(*at).map(String::as_str) == Some("|") {
            *at += 1;
            continue;
        }
        return prev.ok_or_else(|| "empty pipeline".into());
    }
}

/// The value of `arg`.
fn arg_value(
    arg: Arg<'_>,
    toks: &[String],
    dot: &V,
    env: &mut Env<'_, '_>,
    depth: usize,
) -> Result<V, String> {
    match arg {
        Arg::Tok(t) => operand(t, dot, env),
        Arg::Paren(start, end) => {
            let mut at = start;
            let v = eval_nested(&toks[..end], &mut at, dot, env, depth + 1)?;
            if at != end {
                return Err(format!("unexpected {:?} in operand", toks[at]));
            }
            Ok(v)
        }
    }
}

/// Field `name` of `v`, as Go's template looks it up.
fn field(v: &V, name: &str, data: &Data<'_>) -> Result<V, String> {
    let from = |m: &BTreeMap<String, String>| V::Str(m.get(name).cloned().unwrap_or_default());
    Ok(match v {
        V::Map(m) => from(m),
        V::Root => match name {
            "Labels" => V::Map(data.labels.clone()),
            "Value" => V::Num(data.value),
            "ExternalLabels" => V::Map(data.external_labels.clone()),
            "ExternalURL" => V::Str(data.external_url.to_owned()),
            _ => return Err(format!("can't evaluate field {name}")),
        },
        V::Sample(s) => match name {
            "Labels" => V::Map(s.0.clone()),
            "Value" => V::Num(s.1),
            _ => {
                return Err(format!(
                    "can't evaluate field {name} in type *template.sample"
                ))
            }
        },
        V::Nil => return Err(format!("nil pointer evaluating .{name}")),
        other => {
            return Err(format!(
                "can't evaluate field {name} in type {}",
                go_type(other)
            ))
        }
    })
}

/// A value token: `.`, a field chain, a variable (and its fields), a
/// string, number or boolean.
fn operand(t: &str, dot: &V, env: &mut Env<'_, '_>) -> Result<V, String> {
    if let Some(q) = t.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        return Ok(V::Str(unquote(q)));
    }
    if let Some(q) = t.strip_prefix('`').and_then(|r| r.strip_suffix('`')) {
        return Ok(V::Str(q.to_owned()));
    }
    match t {
        "true" | "false" => return Ok(V::Bool(t == "true")),
        "nil" => return Ok(V::Nil),
        "." => return Ok(dot.clone()),
        _ => {}
    }
    let (mut v, path) = if let Some(rest) = t.strip_prefix('.') {
        (dot.clone(), rest)
    } else if t.starts_with('$') {
        let (name, path) = match t.find('.') {
            Some(i) => (&t[..i], &t[i + 1..]),
            None => (t, ""),
        };
        let v = env
            .vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("undefined variable {name:?}"))?;
        (v, path)
    } else {
        if let Ok(n) = t.parse::<f64>() {
            return Ok(V::Num(n));
        }
        return Err(format!("function {t:?} not defined"));
    };
    for name in path.split('.').filter(|s| !s.is_empty()) {
        v = field(&v, name, env.data)?;
    }
    // A large value read costs steps as it is copied.
    env.steps += size_of(&v) / 1024;
    Ok(v)
}

/// About how many bytes `v` holds.
fn size_of(v: &V) -> usize {
    let map =
        |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>();
    match v {
        V::Str(s) => s.len(),
        V::Map(m) => map(m),
        V::List(l) => l.iter().map(size_of).sum(),
        V::Sample(s) => map(&s.0) + 8,
        V::Num(_) | V::Bool(_) | V::Root | V::Nil => 8,
    }
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
    args: &[Arg<'_>],
    toks: &[String],
    prev: Option<V>,
    dot: &V,
    env: &mut Env<'_, '_>,
    depth: usize,
) -> Result<V, String> {
    let name = match args[0] {
        Arg::Tok(t) => t,
        Arg::Paren(..) => "",
    };
    let is_function = !name.is_empty()
        && !name.starts_with(['$', '.', '"', '`'])
        && name.parse::<f64>().is_err()
        && !matches!(name, "true" | "false" | "nil");
    if !is_function {
        if args.len() > 1 || prev.is_some() {
            return Err(format!("can't give argument to non-function {name}"));
        }
        return arg_value(args[0], toks, dot, env, depth);
    }
    // `and` and `or` stop at the argument that decides, as Go's do.
    if name == "and" || name == "or" {
        let n = args.len() - 1 + usize::from(prev.is_some());
        if n == 0 {
            return Err(format!(
                "wrong number of args for {name}: want at least 1 got 0"
            ));
        }
        let (mut last, mut prev) = (V::Nil, prev);
        for k in 0..n {
            last = match args.get(k + 1) {
                Some(&a) => arg_value(a, toks, dot, env, depth)?,
                None => prev.take().unwrap_or(V::Nil),
            };
            if last.truth() == (name == "or") {
                break;
            }
        }
        return Ok(last);
    }
    let mut vals = Vec::with_capacity(args.len());
    for &a in &args[1..] {
        vals.push(arg_value(a, toks, dot, env, depth)?);
    }
    vals.extend(prev);

    let data = env.data;
    let one = |vals: &[V]| -> Result<V, String> {
        match vals {
            [v] => Ok(v.clone()),
            _ => Err(format!(
                "wrong number of args for {name}: want 1 got {}",
                vals.len()
            )),
        }
    };
    let two = |vals: &[V]| -> Result<(V, V), String> {
        match vals {
            [a, b] => Ok((a.clone(), b.clone())),
            _ => Err(format!(
                "wrong number of args for {name}: want 2 got {}",
                vals.len()
            )),
        }
    };
    let sample = |v: V| -> Result<Box<QuerySample>, String> {
        match v {
            V::Sample(s) => Ok(s),
            other => Err(format!(
                "wrong type for value; expected *template.sample; got {}",
                go_type(&other)
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
                let (s, repl) = (s.text(), go_replacement(&repl.text()));
                // What it would write, bounded before it is built.
                let matches = re.find_iter(&s).take(MAX_OUTPUT + 1).count();
                if s.len() + matches.saturating_mul(repl.len()) > MAX_OUTPUT {
                    return Err(TOO_LARGE.into());
                }
                V::Str(re.replace_all(&s, repl.as_str()).into_owned())
            }
            _ => return Err("wrong number of args for reReplaceAll: want 3".into()),
        },
        "print" => V::Str(go_print(&vals)?),
        "println" => V::Str(go_print(&vals)? + "\n"),
        "printf" => match vals.split_first() {
            Some((format, rest)) => V::Str(printf(&format.text(), rest)?),
            None => return Err("wrong number of args for printf".into()),
        },
        "query" => {
            let q = one(&vals)?.text();
            env.queries += 1;
            if env.queries > MAX_QUERIES {
                return Err(format!(
                    "error calling query: more than {MAX_QUERIES} queries in one template"
                ));
            }
            let run = data
                .query
                .ok_or_else(|| "error calling query: no query engine".to_owned())?;
            let results = run(&q).map_err(|e| format!("error calling query: {e}"))?;
            // Each result costs a step: a query of many series is bounded.
            env.steps += results.len();
            V::List(
                results
                    .into_iter()
                    .map(|r| V::Sample(Box::new(r)))
                    .collect(),
            )
        }
        "first" => match one(&vals)? {
            V::List(l) => l.into_iter().next().ok_or_else(|| {
                "error calling first: first() called on vector with no elements".to_owned()
            })?,
            other => {
                return Err(format!(
                    "wrong type for value; expected template.queryResult; got {}",
                    go_type(&other)
                ))
            }
        },
        "label" => {
            let (label, s) = two(&vals)?;
            let s = sample(s)?;
            V::Str(s.0.get(&label.text()).cloned().unwrap_or_default())
        }
        "value" => V::Num(sample(one(&vals)?)?.1),
        "strvalue" => {
            let s = sample(one(&vals)?)?;
            V::Str(s.0.get("__value__").cloned().unwrap_or_default())
        }
        "sortByLabel" => {
            let (label, list) = two(&vals)?;
            let label = label.text();
            let V::List(mut l) = list else {
                return Err("wrong type for value; expected template.queryResult".into());
            };
            let key = |v: &V| match v {
                V::Sample(s) => s.0.get(&label).cloned().unwrap_or_default(),
                _ => String::new(),
            };
            l.sort_by_key(key);
            V::List(l)
        }
        "len" => match one(&vals)? {
            V::Str(s) => V::Num(s.len() as f64),
            V::Map(m) => V::Num(m.len() as f64),
            V::List(l) => V::Num(l.len() as f64),
            other => {
                return Err(format!(
                    "error calling len: len of type {}",
                    go_type(&other)
                ))
            }
        },
        "index" => match vals.as_slice() {
            [V::Map(m), key] => V::Str(m.get(&key.text()).cloned().unwrap_or_default()),
            [V::List(l), i] => {
                let i = i.num()?;
                l.get(i as usize)
                    .filter(|_| i >= 0.0)
                    .cloned()
                    .ok_or_else(|| format!("error calling index: index out of range: {i}"))?
            }
            [v] => v.clone(),
            _ => return Err("error calling index: can't index item".into()),
        },
        "eq" | "ne" | "lt" | "le" | "gt" | "ge" => {
            let (first, rest) = vals
                .split_first()
                .ok_or_else(|| format!("wrong number of args for {name}"))?;
            if rest.is_empty() {
                return Err(format!("wrong number of args for {name}: want 2 got 1"));
            }
            if name == "eq" {
                let mut any = false;
                for r in rest {
                    if go_eq(first, r)? {
                        any = true;
                        break;
                    }
                }
                V::Bool(any)
            } else {
                let (a, b) = two(&vals)?;
                // As Go: le is lt or eq, gt not le, ge not lt (so a NaN
                // is greater than anything, and not less).
                V::Bool(match name {
                    "ne" => !go_eq(&a, &b)?,
                    "lt" => go_lt(&a, &b)?,
                    "le" => go_lt(&a, &b)? || go_eq(&a, &b)?,
                    "gt" => !(go_lt(&a, &b)? || go_eq(&a, &b)?),
                    _ => !go_lt(&a, &b)?,
                })
            }
        }
        "not" => V::Bool(!one(&vals)?.truth()),
        "html" => V::Str(html_escape(&go_print(&vals)?)),
        "urlquery" => V::Str(query_escape(&go_print(&vals)?)),
        other => {
            return Err(format!(
                "function {other:?} is not supported by Sluice's templates"
            ))
        }
    })
}

/// Go's `print`: operands' text, a space between two that are not
/// strings; too large an answer is refused before it is built.
fn go_print(vals: &[V]) -> Result<String, String> {
    let texts: Vec<String> = vals.iter().map(V::text).collect();
    if texts.iter().map(String::len).sum::<usize>() > MAX_OUTPUT {
        return Err(TOO_LARGE.into());
    }
    let mut out = String::new();
    for (i, (v, t)) in vals.iter().zip(&texts).enumerate() {
        let spaced = i > 0 && !matches!(v, V::Str(_)) && !matches!(vals[i - 1], V::Str(_));
        if spaced {
            out.push(' ');
        }
        out.push_str(t);
    }
    Ok(out)
}

/// Go's `url.QueryEscape`: letters, digits and `-_.~` kept, a space as
/// `+`, every other byte `%XX`.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `eq` on two basic values of one kind (a whole number and a float
/// count as numbers both; a NaN equals nothing).
fn go_eq(a: &V, b: &V) -> Result<bool, String> {
    match (a, b) {
        (V::Num(x), V::Num(y)) => Ok(x == y),
        (V::Str(x), V::Str(y)) => Ok(x == y),
        (V::Bool(x), V::Bool(y)) => Ok(x == y),
        (V::Nil, V::Nil) => Ok(true),
        _ => Err("error calling eq: incompatible types for comparison".into()),
    }
}

/// Go's `lt`, on numbers and strings (a NaN is less than nothing).
fn go_lt(a: &V, b: &V) -> Result<bool, String> {
    match (a, b) {
        (V::Num(x), V::Num(y)) => Ok(x < y),
        (V::Str(x), V::Str(y)) => Ok(x < y),
        (V::Bool(_), V::Bool(_)) | (V::Nil, V::Nil) => {
            Err("error calling lt: invalid type for comparison".into())
        }
        _ => Err("error calling lt: incompatible types for comparison".into()),
    }
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
        if out.len() > MAX_OUTPUT {
            return Err(TOO_LARGE.into());
        }
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
        V::List(_) => "template.queryResult",
        V::Sample(_) => "*template.sample",
        V::Root => "*template.tmplData",
        V::Nil => "<nil>",
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
                query: Some(&|q: &str| match q {
                    "up" => Ok(vec![
                        (
                            BTreeMap::from([("instance".to_owned(), "b".to_owned())]),
                            0.0,
                        ),
                        (
                            BTreeMap::from([("instance".to_owned(), "a".to_owned())]),
                            1.0,
                        ),
                    ]),
                    "none" => Ok(Vec::new()),
                    _ => Err("bad query".to_owned()),
                }),
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
        // Control structures, variables, and Prometheus' query functions.
        let control = [
            ("{{ if gt $value 1.0 }}big{{ else if eq $value 1.0 }}one{{ else }}small{{ end }}", 2.0, "big"),
            ("{{ if gt $value 1.0 }}big{{ else if eq $value 1.0 }}one{{ else }}small{{ end }}", 1.0, "one"),
            ("{{ if gt $value 1.0 }}big{{ else if eq $value 1.0 }}one{{ else }}small{{ end }}", 0.5, "small"),
            ("{{ range query \"up\" }}{{ .Labels.instance }}={{ .Value }};{{ end }}", 0.0, "b=0;a=1;"),
            (
                "{{ range $i, $s := query \"up\" | sortByLabel \"instance\" }}{{ $i }}:{{ label \"instance\" $s }} {{ end }}",
                0.0,
                "0:a 1:b ",
            ),
            ("{{ with query \"up\" }}{{ . | first | value | humanize }}{{ end }}", 0.0, "0"),
            ("{{ with query \"none\" }}x{{ else }}no data{{ end }}", 0.0, "no data"),
            ("{{ range query \"none\" }}x{{ else }}empty{{ end }}", 0.0, "empty"),
            ("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", 0.0, "2"),
            ("{{ range $k, $v := $labels }}{{ $k }}={{ $v }},{{ end }}", 0.0, "instance=host-1.example.com:9100,job=api,"),
            ("{{ len $labels }} {{ index $labels \"job\" }}", 0.0, "2 api"),
            ("{{ if and (eq $labels.job \"api\") (not (eq $value 0.0)) }}y{{ end }}", 1.0, "y"),
            ("{{ range query \"up\" }}{{ if eq .Value 0.0 }}{{ continue }}{{ end }}{{ .Labels.instance }}{{ end }}", 0.0, "a"),
            ("{{ range query \"up\" }}{{ .Labels.instance }}{{ break }}{{ end }}", 0.0, "b"),
            ("{{ range query \"up\" }}{{ $labels.job }}{{ $.Labels.job }}{{ end }}", 0.0, "apiapiapiapi"),
            ("{{ with $labels.job }}{{ . }}{{ end }}{{ with $labels.nope }}x{{ else with $labels.job }}{{ . }}!{{ end }}", 0.0, "apiapi!"),
            ("{{ or $labels.nope \"fallback\" }} {{ and 1.0 \"\" }}.", 0.0, "fallback ."),
            ("{{- range query \"up\" }}\n  {{ .Labels.instance -}}\n{{ end }}", 0.0, "\n  b\n  a"),
            ("{{ \"<a>\" | html }} {{ urlquery \"a b\" }}", 0.0, "&lt;a&gt; a+b"),
        ];
        for (t, v, want) in control {
            assert_eq!(run(t, v).as_deref(), Ok(want), "{t}");
        }
        // Go's comparisons with a NaN, `and` and `or` that stop at the
        // deciding argument, compact declarations, define/template loading.
        let more = [
            ("{{ if gt $value 0.5 }}high{{ else }}low{{ end }}", f64::NAN, "high"),
            ("{{ if lt $value 0.5 }}low{{ else }}not{{ end }}", f64::NAN, "not"),
            ("{{ eq $value $value }} {{ ne $value $value }} {{ ge $value 1.0 }}", f64::NAN, "false true true"),
            ("{{ $r := query \"none\" }}{{ if and $r (gt ($r | first | value) 1.0) }}hi{{ else }}none{{ end }}", 0.0, "none"),
            ("{{ or $labels.job (query \"none\" | first) }}", 0.0, "api"),
            ("{{$x:=$value}}{{$x}} {{$x=2.0}}{{$x}}", 1.5, "1.5 2"),
            ("{{ eq $labels.job \"api\" 1.0 }}", 0.0, "true"),
            ("{{ urlquery \"a b*~\" }}", 0.0, "a+b%2A~"),
        ];
        for (t, v, want) in more {
            assert_eq!(run(t, v).as_deref(), Ok(want), "{t}");
        }
        assert_eq!(
            check("{{ define \"x\" }}y{{ end }}{{ template \"x\" }}"),
            Ok(())
        );
        assert!(run("{{ template \"x\" }}", 0.0).is_err_and(|e| e.contains("not supported")));
        assert!(check("{{ range 3 }}{{ else if true }}{{ end }}").is_err());
        for huge in [
            "{{ range 1e12 }}{{ end }}",
            "{{ range 1e300 }}{{ end }}",
            "{{ $x := printf \"%999999s\" \"\" }}{{ reReplaceAll \"\" $x $x }}",
            "{{ $x := printf \"%999999s\" \"\" }}{{ range 300000 }}{{ if $x }}{{ end }}{{ end }}",
            "{{ range 400 }}{{ query \"up\" }}{{ end }}",
        ] {
            assert!(run(huge, 0.0).is_err(), "{huge}");
        }
        // A string doubled in a loop is stopped, as is one printf's
        // padding over and over.
        let doubling =
            "{{ $x := \"ab\" }}{{ range 64 }}{{ $x = printf \"%s%s\" $x $x }}{{ end }}{{ len $x }}";
        assert!(run(doubling, 0.0).is_err_and(|e| e.contains("too large")));
        let padded = format!(
            "{{{{ printf \"{}\"{} }}}}",
            "%999999s".repeat(64),
            " 1".repeat(64)
        );
        assert!(run(&padded, 0.0).is_err_and(|e| e.contains("too large")));
        // A loop over its own output is stopped.
        let big = format!(
            "{{{{ range {n} }}}}{{{{ range {n} }}}}x{{{{ end }}}}{{{{ end }}}}",
            n = 1 << 12
        );
        assert!(run(&big, 0.0).is_err_and(|e| e.contains("too large")));
        assert_eq!(
            check("{{ if $value }}{{ end"),
            Err("unclosed action".into())
        );
        assert!(check("{{ if $value }}x").is_err());
        assert!(check("{{ range query \"up\" }}{{ nope . }}{{ end }}").is_err());
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
            "{{ if $value }}x",
            "{{ end }}",
            "{{ template \"x\" }}",
            "{{ break }}",
            "{{ query \"bad\" }}",
            "{{ query \"none\" | first }}",
            "{{ $nope }}",
            "{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}",
            "{{ $labels.job",
            &format!("{{{{ {}1{} }}}}", "(".repeat(100), ")".repeat(100)),
        ] {
            assert!(run(bad, 0.0).is_err(), "{bad}");
        }
    }
}
