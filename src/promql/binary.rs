//! Binary operators: arithmetic, comparison (with and without `bool`) and
//! set operators, with Prometheus' vector matching (`on`, `ignoring`,
//! `group_left`, `group_right`).

use hashbrown::{HashMap, HashSet};
use std::sync::Arc;

use crate::promql::parser::token::TokenId;
use crate::promql::parser::token::{
    T_ADD, T_ATAN2, T_DIV, T_EQLC, T_GTE, T_GTR, T_LAND, T_LOR, T_LSS, T_LTE, T_LUNLESS, T_MOD,
    T_MUL, T_NEQ, T_POW, T_SUB, T_TRIM_LOWER, T_TRIM_UPPER,
};
use crate::promql::parser::{BinModifier, BinaryExpr, LabelModifier, VectorMatchCardinality};

use super::annotations::Annotation;
use super::eval::{Compat, Ctx};
use super::group::{MatchMemo, MatchPlan};
use super::value::{drop_name, keep_labels, labels_string, Hist, Labels, Sample, Value};
use super::QueryError;
use crate::histogram::FloatHistogram;
use crate::storage::labels::Label;

/// Arithmetic and `atan2` drop `__name__`; comparisons keep it (as
/// Prometheus 3's `shouldDropMetricName`; 2.x kept it for `atan2`).
fn drops_name(op: TokenId) -> bool {
    matches!(op, T_ADD | T_SUB | T_MUL | T_DIV | T_MOD | T_POW | T_ATAN2)
}

/// The trim operators `</` and `>/`, defined for a histogram and a float.
fn is_trim(op: TokenId) -> bool {
    matches!(op, T_TRIM_UPPER | T_TRIM_LOWER)
}

fn is_comparison(op: TokenId) -> bool {
    matches!(op, T_EQLC | T_NEQ | T_GTR | T_LSS | T_GTE | T_LTE)
}

/// `lhs op rhs` for floats: the value and, for comparisons, whether it holds.
fn apply(op: TokenId, l: f64, r: f64) -> (f64, bool) {
    match op {
        T_ADD => (l + r, true),
        T_SUB => (l - r, true),
        T_MUL => (l * r, true),
        T_DIV => (l / r, true),
        T_MOD => (l % r, true),
        T_POW => (l.powf(r), true),
        T_ATAN2 => (l.atan2(r), true),
        T_EQLC => (l, l == r),
        T_NEQ => (l, l != r),
        T_GTR => (l, l > r),
        T_LSS => (l, l < r),
        T_GTE => (l, l >= r),
        T_LTE => (l, l <= r),
        _ => (f64::NAN, false),
    }
}

/// Prometheus' name of an operator, for annotations.
fn op_name(op: TokenId) -> &'static str {
    match op {
        T_ADD => "+",
        T_SUB => "-",
        T_MUL => "*",
        T_DIV => "/",
        T_MOD => "%",
        T_POW => "^",
        T_ATAN2 => "atan2",
        T_EQLC => "==",
        T_NEQ => "!=",
        T_GTR => ">",
        T_LSS => "<",
        T_GTE => ">=",
        T_LTE => "<=",
        T_TRIM_UPPER => "</",
        T_TRIM_LOWER => ">/",
        _ => "?",
    }
}

/// One element's operation where either side is a histogram (Prometheus'
/// `vectorElemBinop`): `h + h`, `h - h`, `h * f`, `f * h` and `h / f`
/// give histograms; `==` and `!=` compare histograms exactly; anything
/// else has no meaning and gives nothing but an info. The result is the
/// value, the histogram, and whether the element is kept.
fn apply_hist(
    ctx: &Ctx<'_>,
    op: TokenId,
    (l, lh): (f64, Option<&Hist>),
    (r, rh): (f64, Option<&Hist>),
) -> Option<(f64, Option<Hist>, bool)> {
    let scaled = |h: &Hist, by: f64, div: bool| {
        let mut h = FloatHistogram::clone(h);
        if div {
            h.div(by);
        } else {
            h.mul(by);
        }
        h.compact();
        Some((0.0, Some(std::sync::Arc::new(h)), true))
    };
    let kind = |h: Option<&Hist>| if h.is_some() { "histogram" } else { "float" };
    match (lh, rh, op) {
        (None, Some(h), T_MUL) => return scaled(h, l, false),
        (Some(h), None, T_MUL) => return scaled(h, r, false),
        (Some(h), None, T_DIV) => return scaled(h, r, true),
        (Some(h), None, T_TRIM_UPPER | T_TRIM_LOWER) => {
            let mut h = FloatHistogram::clone(h);
            h.trim_buckets(r, op == T_TRIM_UPPER);
            return Some((0.0, Some(std::sync::Arc::new(h)), true));
        }
        (Some(a), Some(b), T_ADD | T_SUB) => {
            use crate::histogram::CounterResetHint::{CounterReset, NotCounterReset};
            // v3.14: a reset and a not-reset together is a conflict that
            // drops the element.
            if ctx.opts.compat >= Compat::V3_14
                && matches!(
                    (a.hint, b.hint),
                    (CounterReset, NotCounterReset) | (NotCounterReset, CounterReset)
                )
            {
                let during = if op == T_ADD {
                    "addition"
                } else {
                    "subtraction"
                };
                ctx.annotate(Annotation::CounterResetCollision(during));
                return None;
            }
            let mut res = FloatHistogram::clone(a);
            let during = if op == T_ADD {
                "addition"
            } else {
                "subtraction"
            };
            let done = ctx.hist_combine(&mut res, b, op == T_SUB, during);
            if done.is_err() {
                ctx.annotate(Annotation::IncompatibleBucketLayoutInBinOp(op_name(op)));
                return None;
            }
            res.compact();
            return Some((0.0, Some(std::sync::Arc::new(res)), true));
        }
        (Some(a), Some(b), T_EQLC | T_NEQ) => {
            let same = a.same_as(b);
            return Some((0.0, Some(std::sync::Arc::clone(a)), same == (op == T_EQLC)));
        }
        _ => {}
    }
    ctx.annotate(Annotation::IncompatibleTypesInBinOp(
        kind(lh),
        op_name(op),
        kind(rh),
    ));
    None
}

/// `b` over its evaluated sides.
pub(crate) fn eval(
    ctx: &Ctx<'_>,
    b: &BinaryExpr,
    lhs: Value,
    rhs: Value,
) -> Result<Value, QueryError> {
    let op = b.op.id();
    let return_bool = b.modifier.as_ref().is_some_and(|m| m.return_bool);
    match (lhs, rhs) {
        (Value::Scalar(_), Value::Scalar(_)) if is_trim(op) => Err(QueryError::Execution(format!(
            "operator {:?} not allowed for Scalar operations",
            op_name(op)
        ))),
        (Value::Scalar(l), Value::Scalar(r)) => {
            let (v, keep) = apply(op, l, r);
            Ok(Value::Scalar(if is_comparison(op) {
                f64::from(u8::from(keep))
            } else {
                v
            }))
        }
        (Value::Vector(v), Value::Scalar(s)) => Ok(Value::Vector(vector_scalar(
            ctx,
            op,
            v,
            s,
            false,
            return_bool,
        ))),
        (Value::Scalar(s), Value::Vector(v)) => Ok(Value::Vector(vector_scalar(
            ctx,
            op,
            v,
            s,
            true,
            return_bool,
        ))),
        (Value::Vector(l), Value::Vector(r)) => {
            let default = BinModifier {
                card: VectorMatchCardinality::OneToOne,
                matching: None,
                return_bool: false,
                fill_values: Default::default(),
            };
            let m = b.modifier.as_ref().unwrap_or(&default);
            match op {
                T_LAND | T_LOR | T_LUNLESS => Ok(Value::Vector(set_op(op, l, r, m))),
                _ => {
                    let key = b as *const BinaryExpr as usize;
                    vector_vector(ctx, key, op, l, r, m, return_bool).map(Value::Vector)
                }
            }
        }
        (l, r) => Err(QueryError::Execution(format!(
            "binary operator not defined between {} and {}",
            l.type_name(),
            r.type_name()
        ))),
    }
}

fn vector_scalar(
    ctx: &Ctx<'_>,
    op: TokenId,
    v: Vec<Sample>,
    s: f64,
    scalar_left: bool,
    return_bool: bool,
) -> Vec<Sample> {
    let cmp = is_comparison(op);
    v.into_iter()
        .filter_map(|smp| {
            // Trimming means something for a histogram only; the helper
            // says so for floats.
            if smp.h.is_some() || is_trim(op) {
                let (l, r) = if scalar_left {
                    ((s, None), (smp.v, smp.h.as_ref()))
                } else {
                    ((smp.v, smp.h.as_ref()), (s, None))
                };
                let (v, h, keep) = apply_hist(ctx, op, l, r)?;
                return hist_result(ctx, op, smp, v, h, keep, return_bool);
            }
            let (l, r) = if scalar_left { (s, smp.v) } else { (smp.v, s) };
            let (mut value, keep) = apply(op, l, r);
            // A comparison keeps the vector element's value, whichever side it is on.
            if cmp && scalar_left {
                value = smp.v;
            }
            if cmp && !return_bool {
                return keep.then_some(Sample { v: value, ..smp });
            }
            let v = if return_bool {
                f64::from(u8::from(keep))
            } else {
                value
            };
            let unnamed = drops_name(op) || return_bool;
            let labels = if unnamed {
                ctx.unnamed(&smp.labels)
            } else {
                smp.labels
            };
            Some(Sample {
                labels,
                v,
                h: None,
                drop_name: smp.drop_name || unnamed,
            })
        })
        .collect()
}

/// The element an operation on a histogram leaves, if any: a histogram,
/// or with `bool` the comparison's 0 or 1.
fn hist_result(
    ctx: &Ctx<'_>,
    op: TokenId,
    smp: Sample,
    v: f64,
    h: Option<Hist>,
    keep: bool,
    return_bool: bool,
) -> Option<Sample> {
    let unnamed = drops_name(op) || return_bool;
    let labels = if unnamed {
        ctx.unnamed(&smp.labels)
    } else {
        smp.labels
    };
    let drop_name = smp.drop_name || unnamed;
    if return_bool {
        return Some(Sample {
            drop_name,
            ..Sample::float(labels, f64::from(u8::from(keep)))
        });
    }
    keep.then_some(Sample {
        labels,
        v,
        h,
        drop_name,
    })
}

/// The matching key of a series' labels.
fn signature(labels: &[Label], matching: &Option<LabelModifier>) -> Labels {
    keep_labels(labels, matching)
}

fn set_op(op: TokenId, l: Vec<Sample>, r: Vec<Sample>, m: &BinModifier) -> Vec<Sample> {
    let rsigs: HashSet<Labels> = r
        .iter()
        .map(|s| signature(&s.labels, &m.matching))
        .collect();
    match op {
        T_LAND => l
            .into_iter()
            .filter(|s| rsigs.contains(&signature(&s.labels, &m.matching)))
            .collect(),
        T_LUNLESS => l
            .into_iter()
            .filter(|s| !rsigs.contains(&signature(&s.labels, &m.matching)))
            .collect(),
        _ => {
            let lsigs: HashSet<Labels> = l
                .iter()
                .map(|s| signature(&s.labels, &m.matching))
                .collect();
            let mut out = l;
            out.extend(
                r.into_iter()
                    .filter(|s| !lsigs.contains(&signature(&s.labels, &m.matching))),
            );
            out
        }
    }
}

fn vector_vector(
    ctx: &Ctx<'_>,
    key: usize,
    op: TokenId,
    l: Vec<Sample>,
    r: Vec<Sample>,
    m: &BinModifier,
    return_bool: bool,
) -> Result<Vec<Sample>, QueryError> {
    let fill = m.fill_values;
    if (l.is_empty() || r.is_empty()) && !fill.any() {
        return Ok(Vec::new());
    }
    let cmp = is_comparison(op);
    // group_right: the right side is the "many" side; swap so that the
    // left is always "many" (or one-to-one). The fill values keep their
    // places, as in Prometheus: `fill_right` stands in for a missing
    // "one" side, `fill_left` for a missing "many" side.
    let (include, swap) = match &m.card {
        VectorMatchCardinality::ManyToOne(ls) => (ls.labels.clone(), false),
        VectorMatchCardinality::OneToMany(ls) => (ls.labels.clone(), true),
        VectorMatchCardinality::OneToOne => (Vec::new(), false),
        VectorMatchCardinality::ManyToMany => {
            return Err(QueryError::Execution(
                "many-to-many matching not allowed".to_owned(),
            ))
        }
    };
    let one_to_one = matches!(m.card, VectorMatchCardinality::OneToOne);
    let (many, one) = if swap { (r, l) } else { (l, r) };
    // Remembered across steps, unless the operation is evaluated once.
    let mut memos = ctx.binary_memos.borrow_mut();
    let mut scratch = MatchMemo::default();
    let memo = if ctx.evaluates_once() {
        &mut scratch
    } else {
        memos.entry(key).or_default()
    };
    memo.begin_step();
    // Floats alone: what is matched, and every error, follows from the
    // series, so a step with the last one's series replays its plan.
    let floats = !is_trim(op) && many.iter().chain(&one).all(|s| s.h.is_none());
    let replays = floats && !ctx.evaluates_once();
    if replays {
        if let Some(plan) = memo.plan.as_ref().filter(|p| p.fits(&many, &one)) {
            let mut out = Vec::with_capacity(plan.pairs.len());
            for (s, o, labels) in &plan.pairs {
                let value = |side: &[Sample], at: &Option<usize>, fill: Option<f64>| match at {
                    Some(i) => side[*i].v,
                    None => fill.unwrap_or_default(),
                };
                let (s, o) = (value(&many, s, fill.lhs), value(&one, o, fill.rhs));
                let (value, keep) = if swap {
                    apply(op, o, s)
                } else {
                    apply(op, s, o)
                };
                if cmp && !return_bool && !keep {
                    continue;
                }
                out.push(Sample {
                    labels: Arc::clone(labels),
                    v: if return_bool {
                        f64::from(u8::from(keep))
                    } else {
                        value
                    },
                    h: None,
                    drop_name: return_bool,
                });
            }
            return Ok(out);
        }
    }
    let one_sigs: Vec<Labels> = one
        .iter()
        .map(|s| memo.signature(&s.labels, &m.matching))
        .collect();
    let many_sigs: Vec<Labels> = many
        .iter()
        .map(|s| memo.signature(&s.labels, &m.matching))
        .collect();
    // By the address of the (shared) signature.
    let mut one_by_sig: hashbrown::HashMap<usize, usize> =
        hashbrown::HashMap::with_capacity(one.len());
    for (j, (s, sig)) in one.iter().zip(&one_sigs).enumerate() {
        if let Some(&first) = one_by_sig.get(&MatchMemo::addr(sig)) {
            let first = &one[first];
            let side = if swap { "left" } else { "right" };
            // The later series first, as Prometheus 3.5.3 writes them;
            // v3.14 sorts the two.
            let (mut a, mut b) = (labels_string(&s.labels), labels_string(&first.labels));
            if ctx.opts.compat >= Compat::V3_14 && a > b {
                std::mem::swap(&mut a, &mut b);
            }
            return Err(QueryError::Execution(format!(
                "found duplicate series for the match group {} on the {side} hand-side of the operation: [{a}, {b}];many-to-many matching not allowed: matching labels must be unique on one side",
                labels_string(sig),
            )));
        }
        one_by_sig.insert(MatchMemo::addr(sig), j);
    }
    // Signatures matched (one-to-one), or per signature the result label
    // sets made (many-to-one): a second match is an error even where the
    // comparison then drops the element, as in Prometheus.
    // One element from a "many" side sample (or fill) and a "one" side
    // sample (or fill) of signature `sig`.
    type Seen = (
        hashbrown::HashSet<usize>,
        HashMap<Labels, HashSet<Labels>>,
        Vec<Sample>,
    );
    // Result labels come from the "many" side. Arithmetic between vectors
    // drops the name at once, delayed removal or not; `bool` marks it to
    // go (at once without delayed removal); a comparison between vectors
    // clears the mark, so that with delayed removal
    // `rate(a[5m]) > rate(b[5m])` keeps the name: all as Prometheus.
    let build = |s: &Sample, o: &Sample| -> Labels {
        let base: Labels = if drops_name(op) {
            drop_name(&s.labels)
        } else if return_bool {
            ctx.unnamed(&s.labels)
        } else {
            s.labels.clone()
        };
        let mut built: Vec<Label> = base.iter().cloned().collect();
        if one_to_one {
            match &m.matching {
                Some(LabelModifier::Include(on)) => {
                    built.retain(|l| on.labels.iter().any(|n| *n == l.name))
                }
                Some(LabelModifier::Exclude(ign)) => {
                    built.retain(|l| !ign.labels.iter().any(|n| *n == l.name))
                }
                None => {}
            }
        }
        for name in &include {
            built.retain(|l| &l.name != name);
            if let Some(l) = o.labels.iter().find(|l| &l.name == name) {
                built.push(l.clone());
            }
        }
        built.sort();
        built.into()
    };
    let combine = |s: &Sample,
                   o: &Sample,
                   sig: &Labels,
                   labels: Labels,
                   st: &mut Seen|
     -> Result<(), QueryError> {
        let (matched, made, out) = st;
        let (ls, rs) = if swap { (o, s) } else { (s, o) };
        let mut hist = None;
        let (value, keep) = if ls.h.is_some() || rs.h.is_some() || is_trim(op) {
            match apply_hist(ctx, op, (ls.v, ls.h.as_ref()), (rs.v, rs.h.as_ref())) {
                Some((v, h, keep)) => {
                    hist = h.filter(|_| !return_bool);
                    (v, keep)
                }
                None => return Ok(()),
            }
        } else {
            apply(op, ls.v, rs.v)
        };
        let drop_name = return_bool;
        if one_to_one {
            if !matched.insert(MatchMemo::addr(sig)) {
                return Err(QueryError::Execution(
                    "multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)".to_owned(),
                ));
            }
        } else if !made.entry(sig.clone()).or_default().insert(labels.clone()) {
            return Err(QueryError::Execution(
                "multiple matches for labels: grouping labels must ensure unique matches"
                    .to_owned(),
            ));
        }
        if (cmp || hist.is_some()) && !return_bool && !keep {
            return Ok(());
        }
        let v = if return_bool {
            f64::from(u8::from(keep))
        } else {
            value
        };
        out.push(Sample {
            labels,
            v,
            h: hist,
            drop_name,
        });
        Ok(())
    };
    let mut st: Seen = (hashbrown::HashSet::new(), HashMap::new(), Vec::new());
    // The elements made, for the next step's replay.
    let mut pairs = Vec::new();
    let mut made = |at: (Option<usize>, Option<usize>), labels: &Labels| {
        if replays {
            pairs.push((at.0, at.1, Arc::clone(labels)));
        }
    };
    for (i, (s, sig)) in many.iter().zip(&many_sigs).enumerate() {
        match one_by_sig.get(&MatchMemo::addr(sig)) {
            Some(&j) => {
                let o = &one[j];
                let labels = memo.result(&s.labels, &o.labels, || build(s, o));
                made((Some(i), Some(j)), &labels);
                combine(s, o, sig, labels, &mut st)?
            }
            None => {
                if let Some(v) = fill.rhs {
                    // The fill stands for the missing side with the
                    // signature's (shared) labels.
                    let o = Sample::float(Arc::clone(sig), v);
                    let labels = memo.result(&s.labels, sig, || build(s, &o));
                    made((Some(i), None), &labels);
                    combine(s, &o, sig, labels, &mut st)?;
                }
            }
        }
    }
    if let Some(v) = fill.lhs {
        for (j, (o, sig)) in one.iter().zip(&one_sigs).enumerate() {
            let done = if one_to_one {
                st.0.contains(&MatchMemo::addr(sig))
            } else {
                st.1.get(sig).is_some_and(|m| !m.is_empty())
            };
            if !done {
                let s = Sample::float(Arc::clone(sig), v);
                let labels = memo.result(sig, &o.labels, || build(&s, o));
                made((None, Some(j)), &labels);
                combine(&s, o, sig, labels, &mut st)?;
            }
        }
    }
    memo.plan = replays.then(|| MatchPlan {
        many: many.iter().map(|s| Arc::clone(&s.labels)).collect(),
        one: one.iter().map(|s| Arc::clone(&s.labels)).collect(),
        pairs,
    });
    Ok(st.2)
}
