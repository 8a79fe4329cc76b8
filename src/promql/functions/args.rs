//! What every function does with its arguments: read a range vector (in
//! place where it can), a scalar or a string, and map over series.

use std::sync::Arc;

use crate::promql::parser::{Call, Expr};

use crate::histogram::FloatHistogram;
use crate::promql::annotations::Annotation;
use crate::promql::eval::{Ctx, Sliding};
use crate::promql::value::{Hist, Labels, Name, Sample, Series, Value};
use crate::promql::QueryError;

/// The range-vector argument of `call`: its series at `t`, its range (ms)
/// and the time its window ends at (`t` moved by `offset` and `@`).
pub(crate) fn matrix_arg(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
) -> Result<(Vec<Series>, i64, i64), QueryError> {
    range_arg(ctx, call, 0, t)
}

/// Like [`matrix_arg`], for argument `i`.
pub(crate) fn range_arg(
    ctx: &Ctx<'_>,
    call: &Call,
    i: usize,
    t: i64,
) -> Result<(Vec<Series>, i64, i64), QueryError> {
    let Some(arg) = arg(call, i) else {
        return Err(QueryError::BadData(format!(
            "{}: missing argument",
            call.func.name
        )));
    };
    match arg {
        Expr::MatrixSelector(m) => {
            let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
            let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
            Ok((ctx.matrix_selector(&m.vs, &m.range, t)?, range, at))
        }
        Expr::Subquery(sq) => {
            let range = i64::try_from(sq.range.as_millis()).unwrap_or(i64::MAX);
            let at = ctx.selector_time(&sq.at, &sq.offset, t);
            Ok((ctx.subquery(sq, t)?, range, at))
        }
        _ => Err(QueryError::BadData(format!(
            "{}: expected a range vector",
            call.func.name
        ))),
    }
}

/// Applies `f` to each series of the range argument; `None` drops it.
/// `f` takes the window's points, the range, and the window's end (the
/// evaluation time moved by `@` and `offset`).
pub(crate) fn over_range(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    f: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync,
) -> Result<Value, QueryError> {
    over_range_with(ctx, call, t, name, Steps::Together, f)
}

/// Whether a range function may be computed for all of a range query's
/// steps at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Steps {
    /// Yes, when its other arguments are constant.
    Together,
    /// No: `f` captures something of the step it is called for.
    OneByOne,
}

/// [`over_range`], choosing whether steps may be computed together.
pub(crate) fn over_range_with(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    steps: Steps,
    f: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync,
) -> Result<Value, QueryError> {
    over_range_sliding(ctx, call, t, name, steps, Sliding::No, f)
}

/// [`over_range_with`], saying what a table of every step may work out
/// once per series instead of once per window ([`Sliding`]).
pub(crate) fn over_range_sliding(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    steps: Steps,
    sliding: Sliding<'_>,
    f: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync,
) -> Result<Value, QueryError> {
    let mut out = Vec::new();
    // A plain range selector is read in place; a subquery is built first.
    if let Some(Expr::MatrixSelector(m)) = arg(call, 0) {
        let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
        if ctx.has_histograms(&m.vs, range)? {
            // A function of floats: windows of histograms alone give
            // nothing, and mixed ones their floats, with an info.
            let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
            ctx.mixed_windows(&m.vs, &m.range, t, |s, floats, hists| {
                if floats.is_empty() {
                    return;
                }
                if !hists.is_empty() {
                    ctx.annotate(Annotation::HistogramIgnoredInMixedRange(metric_name(
                        &s.labels,
                    )));
                }
                if let Some(v) = f(floats, range, at) {
                    let labels = match name {
                        Name::Keep => &s.labels,
                        Name::Drop => s.unnamed(ctx),
                    };
                    out.push(Sample {
                        drop_name: name == Name::Drop,
                        ..Sample::float(Arc::clone(labels), v)
                    });
                }
            })?;
            return Ok(Value::Vector(out));
        }
        // In a range query, every step at once (see `Ctx::range_table`),
        // unless a further argument (predict_linear's horizon) can change
        // from step to step: the table would keep the first step's.
        let fixed = steps == Steps::Together && call.args.args[1..].iter().all(is_constant);
        if let (Some(k), true) = (ctx.step_of(t), fixed) {
            let key = call as *const Call as usize;
            if let Some(table) = ctx.range_table(key, &m.vs, &m.range, name, &f, sliding)? {
                // A table folded into an aggregation holds its first step
                // only; a step past it is worked out below.
                if table.has_step(k) {
                    return Ok(Value::Vector(table.vector(k)));
                }
            }
        }
        let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
        let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
        ctx.range_windows(&m.vs, &m.range, t, |s, points| {
            if let Some(v) = f(points, range, at) {
                let labels = match name {
                    Name::Keep => &s.labels,
                    Name::Drop => s.unnamed(ctx),
                };
                out.push(Sample {
                    labels: Arc::clone(labels),
                    v,
                    h: None,
                    drop_name: name == Name::Drop,
                });
            }
        })?;
    } else {
        let (series, range, at) = matrix_arg(ctx, call, t)?;
        for s in series {
            if s.points.is_empty() {
                continue;
            }
            if !s.histograms.is_empty() {
                ctx.annotate(Annotation::HistogramIgnoredInMixedRange(metric_name(
                    &s.labels,
                )));
            }
            if let Some(v) = f(&s.points, range, at) {
                // A subquery's series may already be marked to lose its
                // name (`last_over_time(abs(x)[5m:])`).
                let labels = match name {
                    Name::Keep => s.labels,
                    Name::Drop => ctx.unnamed(&s.labels),
                };
                out.push(Sample {
                    labels,
                    v,
                    h: None,
                    drop_name: name == Name::Drop || s.drop_name,
                });
            }
        }
    }
    Ok(Value::Vector(out))
}

/// The metric name in `labels` (empty when there is none).
pub(crate) fn metric_name(labels: &[crate::storage::labels::Label]) -> &str {
    labels
        .iter()
        .find(|l| l.name == "__name__")
        .map_or("", |l| l.value.as_str())
}

/// One series' window, for a range function that reads histograms too.
pub(crate) struct Window<'a> {
    /// The float samples in the window.
    pub floats: &'a [(i64, f64)],
    /// The histogram samples in the window.
    pub hists: &'a [(i64, Hist)],
    /// The range (ms).
    pub range: i64,
    /// The window's end (the evaluation time moved by `@` and `offset`).
    pub end: i64,
    /// The series' labels, for the metric name in annotations.
    pub labels: &'a Labels,
}

impl Window<'_> {
    /// The series' metric name.
    pub fn name(&self) -> &str {
        metric_name(self.labels)
    }

    /// The window's samples in time order: `(t, Some(h))` for histograms,
    /// `(t, None)` with the float's index for floats.
    pub fn merged(&self) -> Vec<(i64, Result<&Hist, f64>)> {
        let mut all: Vec<(i64, Result<&Hist, f64>)> = self
            .floats
            .iter()
            .map(|&(t, v)| (t, Err(v)))
            .chain(self.hists.iter().map(|(t, h)| (*t, Ok(h))))
            .collect();
        all.sort_by_key(|x| x.0);
        all
    }
}

/// What a range function gives for one series.
pub(crate) enum Out {
    /// A float.
    F(f64),
    /// A histogram.
    H(FloatHistogram),
}

/// [`over_range`] for a function defined over histograms as well:
/// `float` for windows of floats alone, `mixed` for any window holding a
/// histogram. A selector without histograms keeps `over_range`'s paths
/// (every step at once, windows read in place).
pub(crate) fn over_range_mixed(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    float: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync,
    mixed: impl Fn(&Window<'_>) -> Option<Out>,
) -> Result<Value, QueryError> {
    over_range_mixed_sliding(ctx, call, t, name, Sliding::No, float, mixed)
}

/// [`over_range_mixed`] with what a table of every step may work out once
/// per series ([`Sliding`]).
pub(crate) fn over_range_mixed_sliding(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    sliding: Sliding<'_>,
    float: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync,
    mixed: impl Fn(&Window<'_>) -> Option<Out>,
) -> Result<Value, QueryError> {
    let mut out = Vec::new();
    let mut emit = |labels: &Labels, unnamed: Option<&Labels>, marked: bool, r: Option<Out>| {
        let labels = match (name, unnamed) {
            (Name::Keep, _) => Arc::clone(labels),
            (Name::Drop, Some(u)) => Arc::clone(u),
            (Name::Drop, None) => ctx.unnamed(labels),
        };
        let drop_name = name == Name::Drop || marked;
        match r {
            Some(Out::F(v)) => out.push(Sample {
                drop_name,
                ..Sample::float(labels, v)
            }),
            Some(Out::H(h)) => out.push(Sample {
                drop_name,
                ..Sample::histogram(labels, Arc::new(h))
            }),
            None => {}
        }
    };
    if let Some(Expr::MatrixSelector(m)) = arg(call, 0) {
        let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
        if !ctx.has_histograms(&m.vs, range)? {
            return over_range_sliding(ctx, call, t, name, Steps::Together, sliding, float);
        }
        let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
        ctx.mixed_windows(&m.vs, &m.range, t, |s, floats, hists| {
            let r = if hists.is_empty() {
                float(floats, range, at).map(Out::F)
            } else {
                mixed(&Window {
                    floats,
                    hists,
                    range,
                    end: at,
                    labels: &s.labels,
                })
            };
            emit(&s.labels, Some(s.unnamed(ctx)), false, r);
        })?;
    } else {
        let (series, range, at) = matrix_arg(ctx, call, t)?;
        for s in series {
            let r = if s.histograms.is_empty() {
                float(&s.points, range, at).map(Out::F)
            } else {
                mixed(&Window {
                    floats: &s.points,
                    hists: &s.histograms,
                    range,
                    end: at,
                    labels: &s.labels,
                })
            };
            emit(&s.labels, None, s.drop_name, r);
        }
    }
    Ok(Value::Vector(out))
}

/// Applies a math function to every element, dropping `__name__`.
pub(crate) fn map_vector(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    f: impl Fn(f64) -> f64,
) -> Result<Value, QueryError> {
    let v = first_vector(ctx, call, t)?;
    Ok(Value::Vector(
        v.into_iter()
            .filter(|s| s.h.is_none())
            .map(|s| Sample {
                labels: ctx.unnamed(&s.labels),
                v: f(s.v),
                h: None,
                drop_name: true,
            })
            .collect(),
    ))
}

/// The call's first argument, an instant vector, at `t`.
pub(crate) fn first_vector(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Vec<Sample>, QueryError> {
    let Some(arg) = call.args.args.first() else {
        return Err(QueryError::BadData(format!(
            "{}: missing argument",
            call.func.name
        )));
    };
    ctx.eval_vector(arg, t)
}

/// Whether `e` has the same value at every evaluation time.
pub(crate) fn is_constant(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::Paren(p) => is_constant(&p.expr),
        Expr::Unary(u) => is_constant(&u.expr),
        _ => false,
    }
}

pub(crate) fn scalar_arg(ctx: &Ctx<'_>, call: &Call, i: usize, t: i64) -> Result<f64, QueryError> {
    match call.args.args.get(i) {
        Some(e) => ctx.eval_scalar(e, t),
        None => Err(QueryError::BadData(format!(
            "{}: missing argument {}",
            call.func.name,
            i + 1
        ))),
    }
}

/// Argument `i` of `call`, without the parentheses around it, as
/// Prometheus' `unwrapParenExpr` sees a function's range, selector and
/// string arguments: `changes((x[5m]))` is `changes(x[5m])`.
pub(crate) fn arg(call: &Call, i: usize) -> Option<&Expr> {
    call.args.args.get(i).map(Expr::unparen)
}

pub(crate) fn string_arg(call: &Call, i: usize) -> Result<String, QueryError> {
    match arg(call, i) {
        Some(Expr::StringLiteral(s)) => Ok(s.val.clone()),
        _ => Err(QueryError::BadData(format!(
            "{}: expected a string argument",
            call.func.name
        ))),
    }
}
