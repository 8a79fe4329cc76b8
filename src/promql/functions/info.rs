//! `info(v, [data-label-selector])` (experimental): adds the labels of
//! each series' info metric (`target_info` unless the selector names
//! others) to it, matched on the identifying labels `instance` and `job`,
//! as Prometheus 3's `promql/info.go` does.

use std::collections::BTreeMap;

use crate::promql::parser::{Call, Expr, VectorSelector};

use super::args::arg;
use crate::promql::eval::Ctx;
use crate::promql::value::{Sample, Value};
use crate::promql::QueryError;
use crate::storage::index::{MatchOp, Matcher};
use crate::storage::labels::Label;

const TARGET_INFO: &str = "target_info";
const IDENTIFYING: [&str; 2] = ["instance", "job"];

pub(super) fn info(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let Some(first) = call.args.args.first() else {
        return Err(QueryError::BadData("info: missing argument".to_owned()));
    };
    let base = ctx.eval_vector(first, t)?;
    // The data label matchers, by label name; the info metric names.
    let mut data: BTreeMap<String, Vec<Matcher>> = BTreeMap::new();
    let mut names: Vec<Matcher> = Vec::new();
    match arg(call, 1) {
        None => names.push(matcher(MatchOp::Equal, "__name__", TARGET_INFO)?),
        Some(Expr::VectorSelector(vs)) => {
            for m in selector_matchers(vs)? {
                if m.name == "__name__" {
                    names.push(m);
                } else {
                    data.entry(m.name.clone()).or_default().push(m);
                }
            }
        }
        Some(_) => {
            return Err(QueryError::BadData(
                "info: the second argument must be a label selector".to_owned(),
            ))
        }
    }
    let name_of = |labels: &[Label]| -> String {
        labels
            .iter()
            .find(|l| l.name == "__name__")
            .map_or(String::new(), |l| l.value.to_string())
    };
    // The info metrics read: those the name matchers select, among the
    // `*_info` metrics when they only exclude names; `target_info` when
    // there are none.
    let names = effective_names(names)?;
    // Info series themselves (a base series whose name every name matcher
    // takes) are not enriched.
    let ignored: Vec<bool> = base
        .iter()
        .map(|s| {
            let n = name_of(&s.labels);
            names.iter().all(|m| m.matches(&n))
        })
        .collect();
    // The identifying values the base series carry.
    let mut values: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (s, _) in base.iter().zip(&ignored).filter(|(_, &i)| !i) {
        for id in IDENTIFYING {
            if let Some(l) = s
                .labels
                .iter()
                .find(|l| l.name == id && !l.value.is_empty())
            {
                let vals = values.entry(id).or_default();
                if !vals.iter().any(|v| *v == l.value) {
                    vals.push(l.value.to_string());
                }
            }
        }
    }
    // The newest info sample per (info metric, identifying labels).
    let mut infos: BTreeMap<(String, Vec<Label>), (Vec<Label>, i64)> = BTreeMap::new();
    if !values.is_empty() {
        let mut matchers = names;
        for (id, vals) in &values {
            let alternatives: Vec<String> = vals.iter().map(|v| regex::escape(v)).collect();
            matchers.push(matcher(MatchOp::Regex, id, &alternatives.join("|"))?);
        }
        matchers.extend(data.values().flatten().cloned());
        // Info series are read at the time the first selector reads,
        // moved by the subqueries around it as Prometheus moves it.
        let at = info_time(ctx, first, t);
        for (labels, ts) in ctx.latest_matching(&matchers, at)? {
            let key = (name_of(&labels), identifying(&labels));
            match infos.get(&key) {
                Some((_, seen)) if *seen > ts => {}
                Some((_, seen)) if *seen == ts => {
                    return Err(QueryError::Execution(format!(
                        "found duplicate series for info metric {}",
                        key.0
                    )))
                }
                _ => {
                    infos.insert(key, (labels, ts));
                }
            }
        }
    }
    let info_names: Vec<&String> = {
        let mut n: Vec<&String> = infos.keys().map(|(n, _)| n).collect();
        n.dedup();
        n
    };
    let all_match_empty = data.values().flatten().all(|m| m.matches(""));
    let mut out = Vec::with_capacity(base.len());
    for (s, ignore) in base.into_iter().zip(ignored) {
        if ignore {
            out.push(s);
            continue;
        }
        let id = identifying(&s.labels);
        let mut added: Vec<Label> = Vec::new();
        let mut matched = false;
        for name in &info_names {
            let Some((labels, _)) = infos.get(&((*name).clone(), id.clone())) else {
                continue;
            };
            matched = true;
            for l in labels.iter().filter(|l| l.name != "__name__") {
                if !data.is_empty() && !data.contains_key(l.name.as_str()) {
                    continue;
                }
                if let Some(prev) = added.iter().find(|a| a.name == l.name) {
                    if prev.value != l.value {
                        return Err(QueryError::Execution(format!(
                            "conflicting label: {}",
                            l.name
                        )));
                    }
                    continue;
                }
                if s.labels.iter().any(|b| b.name == l.name) {
                    continue;
                }
                added.push(l.clone());
            }
        }
        // No info series for it: kept only if every data matcher takes the
        // empty value.
        if !matched && !all_match_empty {
            continue;
        }
        if added.is_empty() {
            out.push(s);
            continue;
        }
        let mut labels: Vec<Label> = s.labels.iter().cloned().chain(added).collect();
        labels.sort();
        out.push(Sample {
            labels: labels.into(),
            v: s.v,
            h: s.h.clone(),
            drop_name: s.drop_name,
        });
    }
    Ok(Value::Vector(out))
}

fn matcher(op: MatchOp, name: &str, value: &str) -> Result<Matcher, QueryError> {
    Matcher::new(op, name, value).map_err(|e| QueryError::BadData(e.to_string()))
}

/// The matchers of a label selector, `__name__` among them.
fn selector_matchers(vs: &VectorSelector) -> Result<Vec<Matcher>, QueryError> {
    let mut out = Vec::new();
    if let Some(name) = &vs.name {
        out.push(matcher(MatchOp::Equal, "__name__", name)?);
    }
    out.extend(vs.matchers.matchers.iter().map(|m| m.compiled.clone()));
    Ok(out)
}

/// The identifying labels a series has.
fn identifying(labels: &[Label]) -> Vec<Label> {
    labels
        .iter()
        .filter(|l| IDENTIFYING.contains(&l.name.as_str()))
        .cloned()
        .collect()
}

/// The name matchers that choose the info metrics (Prometheus'
/// `effectiveInfoNameMatchers`): as given if one of them selects (`=` or
/// `=~`); after `__name__=~".+_info"` if they only exclude; `target_info`
/// when there are none.
fn effective_names(names: Vec<Matcher>) -> Result<Vec<Matcher>, QueryError> {
    if names
        .iter()
        .any(|m| matches!(m.op, MatchOp::Equal | MatchOp::Regex))
    {
        return Ok(names);
    }
    if names.is_empty() {
        return Ok(vec![matcher(MatchOp::Equal, "__name__", TARGET_INFO)?]);
    }
    let mut out = vec![matcher(MatchOp::Regex, "__name__", ".+_info")?];
    out.extend(names);
    Ok(out)
}

/// When info series are read for `expr` at `t`: at the first vector
/// selector's `@` (or `t`) less its `offset`; a selector without `@` takes
/// the `@` of the nearest subquery around it that has one, and the offsets
/// of the subqueries on the way (Prometheus' `infoSelectTimestampAndOffset`).
fn info_time(ctx: &Ctx<'_>, expr: &Expr, t: i64) -> i64 {
    use crate::promql::parser::{AtModifier, Offset};
    fn offset_ms(o: &Option<Offset>) -> i64 {
        match o {
            Some(Offset::Pos(d)) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Some(Offset::Neg(d)) => -i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            None => 0,
        }
    }
    // Depth first, in the order written; the subqueries on the path.
    fn find<'a>(
        e: &'a Expr,
        path: &mut Vec<&'a crate::promql::parser::SubqueryExpr>,
    ) -> Option<&'a VectorSelector> {
        match e {
            Expr::VectorSelector(vs) => Some(vs),
            Expr::MatrixSelector(m) => Some(&m.vs),
            Expr::Paren(p) => find(&p.expr, path),
            Expr::Unary(u) => find(&u.expr, path),
            Expr::Binary(b) => find(&b.lhs, path).or_else(|| find(&b.rhs, path)),
            // The aggregated expression before the parameter, in
            // Prometheus' order of children.
            Expr::Aggregate(a) => {
                find(&a.expr, path).or_else(|| a.param.as_deref().and_then(|p| find(p, path)))
            }
            Expr::Call(c) => c.args.args.iter().find_map(|a| find(a, path)),
            Expr::Subquery(sq) => {
                path.push(sq);
                let found = find(&sq.expr, path);
                if found.is_none() {
                    path.pop();
                }
                found
            }
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) => None,
        }
    }
    let mut path = Vec::new();
    let Some(vs) = find(expr, &mut path) else {
        return t;
    };
    let mut at: Option<AtModifier> = vs.at;
    let mut offset = offset_ms(&vs.offset);
    for sq in path.iter().rev() {
        if at.is_some() {
            break;
        }
        offset = offset.saturating_add(offset_ms(&sq.offset));
        at = sq.at;
    }
    ctx.selector_time(&at, &None, t).saturating_sub(offset)
}
