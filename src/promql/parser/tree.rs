//! A parsed query as the JSON tree of Prometheus' `/api/v1/parse_query`
//! (`web/api/v1/translate_ast.go`, in its 3.14 shape: selectors carry
//! `anchored` and `smoothed`, matching carries `fillValues`, and ranges,
//! offsets and steps written as duration expressions carry them as
//! `durationExpr` nodes). Object keys come out sorted, as Go writes maps.

use std::time::UNIX_EPOCH;

use serde_json::{json, Value};

use super::ast::{AtModifier, DurationExpr, Expr, Offset, VectorMatchCardinality, VectorSelector};
use super::label::Matchers;
use super::text::number;
use super::token::{is_set_operator, text};
use super::value::ValueType;

/// The tree of `expr`.
pub fn to_json(expr: &Expr) -> Value {
    match expr {
        Expr::Aggregate(a) => json!({
            "type": "aggregation",
            "op": a.op.to_string(),
            "expr": to_json(&a.expr),
            "param": a.param.as_deref().map_or(Value::Null, to_json),
            "grouping": a.modifier.as_ref().map_or(&[][..], |m| &m.labels().labels[..]),
            "without": a.modifier.as_ref().is_some_and(|m| !m.is_include()),
        }),
        Expr::Binary(b) => {
            let vectors =
                b.lhs.value_type() == ValueType::Vector && b.rhs.value_type() == ValueType::Vector;
            let matching = if vectors {
                let m = b.modifier.clone().unwrap_or_default();
                let card = match &m.card {
                    VectorMatchCardinality::OneToOne if is_set_operator(b.op.id()) => {
                        "many-to-many"
                    }
                    VectorMatchCardinality::OneToOne => "one-to-one",
                    VectorMatchCardinality::ManyToOne(_) => "many-to-one",
                    VectorMatchCardinality::OneToMany(_) => "one-to-many",
                    VectorMatchCardinality::ManyToMany => "many-to-many",
                };
                json!({
                    "card": card,
                    "labels": m.matching.as_ref().map_or(&[][..], |l| &l.labels().labels[..]),
                    "on": m.matching.as_ref().is_some_and(|l| l.is_include()),
                    "include": m.card.labels().map_or(&[][..], |l| &l.labels[..]),
                    "fillValues": {"lhs": m.fill_values.lhs, "rhs": m.fill_values.rhs},
                })
            } else {
                Value::Null
            };
            json!({
                "type": "binaryExpr",
                "op": b.op.to_string(),
                "lhs": to_json(&b.lhs),
                "rhs": to_json(&b.rhs),
                "matching": matching,
                "bool": b.return_bool(),
            })
        }
        Expr::Call(c) => json!({
            "type": "call",
            "func": {
                "name": c.func.name,
                "argTypes": c.func.arg_types.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "variadic": c.func.variadic,
                "returnType": c.func.return_type.to_string(),
            },
            "args": c.args.args.iter().map(to_json).collect::<Vec<_>>(),
        }),
        Expr::MatrixSelector(m) => {
            let mut v = selector(&m.vs, "matrixSelector");
            v["range"] = json!(m.range.as_millis() as i64);
            v["rangeExpr"] = duration_expr(m.range_expr.as_ref());
            v
        }
        Expr::Subquery(s) => {
            let (timestamp, start_or_end) = at(s.at.as_ref());
            json!({
                "type": "subquery",
                "expr": to_json(&s.expr),
                "range": s.range.as_millis() as i64,
                "rangeExpr": duration_expr(s.range_expr.as_ref()),
                "offset": offset_ms(s.offset.as_ref()),
                "offsetExpr": duration_expr(s.offset_expr.as_ref()),
                "step": s.step.map_or(0, |d| d.as_millis() as i64),
                "stepExpr": duration_expr(s.step_expr.as_ref()),
                "timestamp": timestamp,
                "startOrEnd": start_or_end,
            })
        }
        Expr::NumberLiteral(n) => json!({"type": "numberLiteral", "val": number(n.val)}),
        Expr::Paren(p) => json!({"type": "parenExpr", "expr": to_json(&p.expr)}),
        Expr::StringLiteral(s) => json!({"type": "stringLiteral", "val": s.val}),
        Expr::Unary(u) => json!({"type": "unaryExpr", "op": "-", "expr": to_json(&u.expr)}),
        Expr::VectorSelector(vs) => selector(vs, "vectorSelector"),
    }
}

/// The fields a vector and a matrix selector share.
fn selector(vs: &VectorSelector, kind: &str) -> Value {
    let (timestamp, start_or_end) = at(vs.at.as_ref());
    json!({
        "type": kind,
        "name": vs.name.as_deref().unwrap_or(""),
        "offset": offset_ms(vs.offset.as_ref()),
        "offsetExpr": duration_expr(vs.offset_expr.as_ref()),
        "matchers": matchers(&vs.matchers, vs.name.as_deref()),
        "timestamp": timestamp,
        "startOrEnd": start_or_end,
        "anchored": vs.anchored,
        "smoothed": vs.smoothed,
    })
}

/// The matchers as written, then the metric name's when it was written
/// before the braces (Prometheus appends that one).
fn matchers(m: &Matchers, name: Option<&str>) -> Value {
    let mut out: Vec<Value> = m
        .matchers
        .iter()
        .map(|m| json!({"name": m.name, "value": m.value, "type": m.op.text()}))
        .collect();
    if let Some(n) = name {
        out.push(json!({"name": "__name__", "value": n, "type": "="}));
    }
    Value::Array(out)
}

fn offset_ms(o: Option<&Offset>) -> i64 {
    match o {
        Some(Offset::Pos(d)) => d.as_millis() as i64,
        Some(Offset::Neg(d)) => -(d.as_millis() as i64),
        None => 0,
    }
}

/// `timestamp` (ms) and `startOrEnd` of an `@` modifier.
fn at(a: Option<&AtModifier>) -> (Value, Value) {
    match a {
        None => (Value::Null, Value::Null),
        Some(AtModifier::Start) => (Value::Null, json!("start")),
        Some(AtModifier::End) => (Value::Null, json!("end")),
        Some(AtModifier::At(t)) => {
            let ms = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => d.as_millis() as i64,
                Err(e) => -(e.duration().as_millis() as i64),
            };
            (json!(ms), Value::Null)
        }
    }
}

/// A duration expression as Prometheus 3.12's `durationExpr` nodes; a
/// number in one is a `numberLiteral` that says whether it was written as
/// a duration.
fn duration_expr(e: Option<&DurationExpr>) -> Value {
    let Some(e) = e else {
        return Value::Null;
    };
    duration_node(e, false)
}

fn duration_node(e: &DurationExpr, wrapped: bool) -> Value {
    let node = |op: &str, lhs: Value, rhs: Value| json!({"type": "durationExpr", "op": op, "lhs": lhs, "rhs": rhs, "wrapped": wrapped});
    match e {
        DurationExpr::Number(v, duration) => {
            json!({"type": "numberLiteral", "val": number(*v), "duration": duration})
        }
        DurationExpr::Step => node("step", Value::Null, Value::Null),
        DurationExpr::Range => node("range", Value::Null, Value::Null),
        DurationExpr::MinOf(a, b) => {
            node("min_of", duration_node(a, false), duration_node(b, false))
        }
        DurationExpr::MaxOf(a, b) => {
            node("max_of", duration_node(a, false), duration_node(b, false))
        }
        DurationExpr::Unary(true, x) => node("-", Value::Null, duration_node(x, false)),
        DurationExpr::Unary(false, x) => duration_node(x, wrapped),
        DurationExpr::Binary(op, a, b) => {
            node(text(*op), duration_node(a, false), duration_node(b, false))
        }
        DurationExpr::Paren(x) => duration_node(x, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promql::parser::{parse, Options};

    fn tree(q: &str) -> Value {
        to_json(&parse(q, &Options::default()).expect("parses"))
    }

    #[test]
    fn a_selector_lists_its_name_matcher_last() {
        assert_eq!(
            tree(r#"foo{a="b"} offset 5m @ 100"#),
            json!({
                "type": "vectorSelector", "name": "foo", "offset": 300000, "offsetExpr": null,
                "matchers": [
                    {"name": "a", "value": "b", "type": "="},
                    {"name": "__name__", "value": "foo", "type": "="},
                ],
                "timestamp": 100000, "startOrEnd": null, "anchored": false, "smoothed": false,
            })
        );
        let t = tree(r#"{__name__=~"x.*"}[5m] @ end()"#);
        assert_eq!(t["type"], "matrixSelector");
        assert_eq!(t["name"], "");
        assert_eq!(t["range"], 300000);
        assert_eq!(t["startOrEnd"], "end");
        assert_eq!(
            t["matchers"],
            json!([{"name": "__name__", "value": "x.*", "type": "=~"}])
        );
    }

    #[test]
    fn operators_aggregations_and_calls_carry_their_modifiers() {
        let t = tree("sum without (a) (rate(x[1m])) / on (b) group_left (c) y");
        assert_eq!(t["type"], "binaryExpr");
        assert_eq!(t["op"], "/");
        assert_eq!(
            t["matching"],
            json!({"card": "many-to-one", "labels": ["b"], "on": true, "include": ["c"],
                   "fillValues": {"lhs": null, "rhs": null}})
        );
        assert_eq!(t["lhs"]["type"], "aggregation");
        assert_eq!(t["lhs"]["op"], "sum");
        assert_eq!(t["lhs"]["without"], true);
        assert_eq!(t["lhs"]["grouping"], json!(["a"]));
        assert_eq!(t["lhs"]["param"], Value::Null);
        let call = &t["lhs"]["expr"];
        assert_eq!(
            call["func"],
            json!({"name": "rate", "argTypes": ["matrix"], "variadic": 0, "returnType": "vector"})
        );
        // Set operators match many to many; scalars do not match at all.
        assert_eq!(tree("a and b")["matching"]["card"], "many-to-many");
        assert_eq!(tree("a > bool 1")["matching"], Value::Null);
        assert_eq!(tree("a > bool 1")["bool"], true);
        assert_eq!(
            tree("topk(3, a)")["param"],
            json!({"type": "numberLiteral", "val": "3"})
        );
    }

    #[test]
    fn literals_subqueries_and_duration_expressions() {
        assert_eq!(tree("-(1)")["type"], "unaryExpr");
        assert_eq!(tree("+Inf")["val"], "+Inf");
        assert_eq!(tree("1e21")["val"], "1000000000000000000000");
        assert_eq!(tree(r#""s""#), json!({"type": "stringLiteral", "val": "s"}));
        let sq = tree("max_over_time(a[1h:5m] offset -1m)")["args"][0].clone();
        assert_eq!(sq["type"], "subquery");
        assert_eq!(
            (
                sq["range"].clone(),
                sq["step"].clone(),
                sq["offset"].clone()
            ),
            (json!(3600000), json!(300000), json!(-60000))
        );
        assert_eq!(tree("a[1h:]")["step"], 0);
        let t = tree("rate(a[5m * 2])")["args"][0].clone();
        assert_eq!(t["rangeExpr"]["type"], "durationExpr");
        assert_eq!(t["rangeExpr"]["op"], "*");
        assert_eq!(
            t["rangeExpr"]["lhs"],
            json!({"type": "numberLiteral", "val": "300", "duration": true})
        );
    }
}
