//! Label functions: `label_replace`, `label_join`, `absent`,
//! `absent_over_time` and `sort_by_label`.

use crate::promql::parser::{Call, Expr};

use super::args::{matrix_arg, string_arg};
use crate::promql::eval::Ctx;
use crate::promql::value::{set_label, Sample, Value};
use crate::promql::QueryError;
use crate::storage::labels::Label;

pub(super) fn absent(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    if !v.is_empty() {
        return Ok(Value::Vector(Vec::new()));
    }
    let labels = match &call.args.args[0] {
        Expr::VectorSelector(vs) => absent_labels(vs),
        _ => Vec::new(),
    };
    Ok(Value::Vector(vec![Sample {
        labels: labels.into(),
        v: 1.0,
        h: None,
        drop_name: false,
    }]))
}

pub(super) fn absent_over_time(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let (series, _, _) = matrix_arg(ctx, call, t)?;
    if !series.is_empty() {
        return Ok(Value::Vector(Vec::new()));
    }
    let labels = match &call.args.args[0] {
        Expr::MatrixSelector(m) => absent_labels(&m.vs),
        _ => Vec::new(),
    };
    Ok(Value::Vector(vec![Sample {
        labels: labels.into(),
        v: 1.0,
        h: None,
        drop_name: false,
    }]))
}

/// Which way `sort_by_label` sorts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Ascending,
    Descending,
}

pub(super) fn sort_by_label(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    sort_by(ctx, call, t, Order::Ascending)
}

pub(super) fn sort_by_label_desc(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    sort_by(ctx, call, t, Order::Descending)
}

fn sort_by(ctx: &Ctx<'_>, call: &Call, t: i64, order: Order) -> Result<Value, QueryError> {
    let mut v = ctx.eval_vector(&call.args.args[0], t)?;
    let names: Vec<String> = (1..call.args.args.len())
        .map(|i| string_arg(call, i))
        .collect::<Result<_, _>>()?;
    let key = |s: &Sample| -> Vec<String> {
        names
            .iter()
            .map(|n| {
                s.labels
                    .iter()
                    .find(|l| &l.name == n)
                    .map_or(String::new(), |l| l.value.to_string())
            })
            .collect()
    };
    v.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.iter()
            .zip(&kb)
            .map(|(x, y)| natural_cmp(x, y))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.labels.cmp(&b.labels))
    });
    if order == Order::Descending {
        v.reverse();
    }
    Ok(Value::Vector(v))
}

/// Natural order, as Prometheus sorts label values (facette/natsort): the
/// strings as runs of digits and of other characters, digit runs compared
/// by their numbers. Unlike natsort this is a total order (equal numbers
/// written differently, `01` and `1`, fall back to their bytes), so that
/// no input can upset the sort.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    fn runs(s: &str) -> impl Iterator<Item = &str> {
        let mut rest = s;
        std::iter::from_fn(move || {
            let first = rest.chars().next()?;
            let digits = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digits)
                .unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            rest = tail;
            Some(run)
        })
    }
    let (mut ra, mut rb) = (runs(a), runs(b));
    loop {
        match (ra.next(), rb.next()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let numeric = x.starts_with(|c: char| c.is_ascii_digit())
                    && y.starts_with(|c: char| c.is_ascii_digit());
                let o = if numeric {
                    let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                    x.len().cmp(&y.len()).then_with(|| x.cmp(y))
                } else {
                    x.cmp(y)
                };
                if o.is_ne() {
                    return o;
                }
            }
        }
    }
}

pub(super) fn label_join(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    let (dst, sep) = (string_arg(call, 1)?, string_arg(call, 2)?);
    let srcs: Vec<String> = (3..call.args.args.len())
        .map(|i| string_arg(call, i))
        .collect::<Result<_, _>>()?;
    // Prometheus 3 takes any UTF-8 name but the empty one.
    if dst.is_empty() {
        return Err(QueryError::BadData(format!(
            "invalid destination label name in label_join(): {dst}"
        )));
    }
    let mut budget = LabelBudget::new(ctx, "label_join");
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let parts: Vec<&str> = srcs
            .iter()
            .map(|n| {
                s.labels
                    .iter()
                    .find(|l| &l.name == n)
                    .map_or("", |l| l.value.as_str())
            })
            .collect();
        budget.take(parts.iter().map(|p| p.len() + sep.len()).sum())?;
        let value = parts.join(&sep);
        s.labels = set_label(&s.labels, &dst, value);
        // A name written here is kept, whatever came before.
        s.drop_name &= dst != "__name__";
        out.push(s);
    }
    unique_with_names(ctx, &out)?;
    Ok(Value::Vector(out))
}

/// Label functions may give two series the same labels even while names
/// are kept to the end (delayed name removal, where the evaluator leaves the
/// check to the answer): that is an error here, as in Prometheus. Without
/// delayed removal the evaluator checks every function's output.
fn unique_with_names(
    ctx: &Ctx<'_>,
    out: &[crate::promql::value::Sample],
) -> Result<(), QueryError> {
    if ctx.opts.delayed_name_removal {
        crate::promql::eval::check_unique(out)?;
    }
    Ok(())
}

/// The bytes of label values one call of `label_replace` or `label_join`
/// may make, across its output ([`QueryOptions::max_label_bytes`]); each
/// value is charged its largest possible size before it is built.
///
/// [`QueryOptions::max_label_bytes`]: crate::promql::QueryOptions::max_label_bytes
struct LabelBudget {
    left: usize,
    max: usize,
    function: &'static str,
}

impl LabelBudget {
    fn new(ctx: &Ctx<'_>, function: &'static str) -> Self {
        let max = ctx.opts.max_label_bytes;
        Self {
            left: max,
            max,
            function,
        }
    }

    fn take(&mut self, bytes: usize) -> Result<(), QueryError> {
        self.left = self.left.checked_sub(bytes).ok_or_else(|| {
            QueryError::Execution(format!(
                "{}() would make more than {} bytes of label values (query-max-label-bytes)",
                self.function, self.max
            ))
        })?;
        Ok(())
    }
}

/// `absent(sel)` takes the selector's equality matchers as labels, as
/// Prometheus does: a label's first equality matcher sets it, and any other
/// matcher on the same label (a second equality, or any other kind) drops
/// it, so `{job="a",job="b"}` and `{job="a",job!="b"}` give no `job`. An
/// empty value sets nothing.
fn absent_labels(vs: &crate::promql::parser::VectorSelector) -> Vec<Label> {
    let mut out: Vec<Label> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for m in &vs.matchers.matchers {
        if m.name == "__name__" {
            continue;
        }
        let first = !seen.contains(&m.name.as_str());
        out.retain(|l| l.name != m.name);
        if matches!(m.op, crate::promql::parser::label::MatchOp::Equal) && first {
            seen.push(&m.name);
            if !m.value.is_empty() {
                out.push(Label {
                    name: m.name.as_str().into(),
                    value: m.value.as_str().into(),
                });
            }
        }
    }
    out.sort();
    out
}

pub(super) fn label_replace(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    let (dst, repl, src, re) = (
        string_arg(call, 1)?,
        string_arg(call, 2)?,
        string_arg(call, 3)?,
        string_arg(call, 4)?,
    );
    let re = crate::storage::index::anchored_regex(&re).map_err(|e| {
        QueryError::BadData(format!(
            "invalid regular expression in label_replace(): {e}"
        ))
    })?;
    // Prometheus 3 takes any UTF-8 name but the empty one.
    let valid = matches!(super::args::arg(call, 1), Some(Expr::StringLiteral(s)) if s.valid_utf8());
    if dst.is_empty() || !valid {
        return Err(QueryError::BadData(format!(
            "invalid destination label name in label_replace(): {dst}"
        )));
    }
    // Each `$` of the replacement can expand to the whole source value.
    let refs = repl.bytes().filter(|&c| c == b'$').count();
    let mut budget = LabelBudget::new(ctx, "label_replace");
    let mut out = Vec::with_capacity(v.len());
    for mut s in v {
        let src_val = s
            .labels
            .iter()
            .find(|l| l.name == src)
            .map_or("", |l| l.value.as_str())
            .to_owned();
        if let Some(caps) = re.captures(&src_val) {
            budget.take(
                repl.len()
                    .saturating_add(refs.saturating_mul(src_val.len())),
            )?;
            let mut value = String::new();
            caps.expand(&repl, &mut value);
            s.labels = set_label(&s.labels, &dst, value);
            s.drop_name &= dst != "__name__";
        }
        out.push(s);
    }
    unique_with_names(ctx, &out)?;
    Ok(Value::Vector(out))
}

#[cfg(test)]
mod tests {
    use super::natural_cmp;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    #[test]
    fn numbers_sort_by_value() {
        let mut v = vec!["a10", "a9", "a1", "b", "a", "a01", "10", "9x"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, ["9x", "10", "a", "a01", "a1", "a9", "a10", "b"]);
    }

    proptest! {
        // A total order, whatever the input: Rust's sort may panic otherwise.
        #[test]
        fn is_a_total_order(a in "[a0-9.]{0,6}", b in "[a0-9.]{0,6}", c in "[a0-9.]{0,6}") {
            prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
            prop_assert_eq!(natural_cmp(&a, &b) == Ordering::Equal, a == b);
            if natural_cmp(&a, &b).is_le() && natural_cmp(&b, &c).is_le() {
                prop_assert!(natural_cmp(&a, &c).is_le());
            }
        }
    }
}
