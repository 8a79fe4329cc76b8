//! The engine: parses a query and evaluates it at one time or stepping
//! through a range, wiring the operators into the evaluator.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::promql::parser::{self, Expr};

use super::annotations::Annotations;
use super::eval::{check_unique, Ctx, MatrixBuilder, HISTOGRAM_BYTES, POINT_BYTES};
use super::guard;
use super::value::{drop_name, no_labels, Sample, Series, Value};
use super::{aggregate, binary, functions, QueryError};
use crate::storage::Querier;

pub use super::eval::{is_stale, QueryMemory, QueryOptions, STALE_NAN};

/// Evaluates PromQL over a [`Querier`].
#[derive(Debug)]
pub struct Engine<'h> {
    querier: Querier<'h>,
    opts: QueryOptions,
    /// Set by the caller to stop the evaluation, e.g. when its client is
    /// gone or its time is up.
    cancel: Option<Arc<AtomicBool>>,
}

/// The operators, dispatched for the evaluator (see [`super::eval::Operators`]).
/// Functions and binary operators may give two elements the same labels
/// (by dropping `__name__`, or by `label_replace`): that is an error at the
/// step where it happens, as in Prometheus. Aggregations are distinct by
/// construction.
fn operators(ctx: &Ctx<'_>, expr: &Expr, t: i64) -> Result<Value, QueryError> {
    let v = match expr {
        Expr::Call(call) => functions::call(ctx, call, t)?,
        Expr::Aggregate(agg) => return aggregate::eval(ctx, agg, t),
        Expr::Binary(b) => {
            let lhs = ctx.eval(&b.lhs, t)?;
            let rhs = ctx.eval(&b.rhs, t)?;
            let _pos = ctx.at_pos(expr.pos(), expr.pos());
            binary::eval(ctx, b, lhs, rhs)?
        }
        _ => {
            return Err(QueryError::Execution(
                "internal: an operand was dispatched as an operator".to_owned(),
            ))
        }
    };
    if let Value::Vector(v) = &v {
        ctx.check_unique_at(expr, v)?;
    }
    Ok(v)
}

impl<'h> Engine<'h> {
    /// An engine over `querier`.
    pub fn new(querier: Querier<'h>, opts: QueryOptions) -> Self {
        Self {
            querier,
            opts,
            cancel: None,
        }
    }

    /// The same engine, stopping with [`QueryError::Timeout`] once `flag`
    /// is set (checked wherever the deadline is).
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// Parses `query` for an evaluation over `[start, end]` at `step` (0
    /// for an instant query): duration expressions and `start()`, `end()`,
    /// `range()`, `step()` are worked out here, once.
    fn parse(&self, query: &str, start: i64, end: i64, step: i64) -> Result<Expr, QueryError> {
        let mut expr = guard::parse(query, &self.opts.parse)
            .map_err(|e| QueryError::BadData(e.to_string()))?;
        expr.resolve_durations(start, end, step)
            .map_err(QueryError::BadData)?;
        Ok(expr)
    }

    fn ctx(&self, start: i64, end: i64, step: i64) -> Ctx<'_> {
        Ctx::new(
            self.querier,
            &self.opts,
            operators,
            (start, end, step),
            Instant::now() + self.opts.timeout,
            self.cancel.as_deref(),
        )
    }

    /// Evaluates `query` at time `t` (ms).
    pub fn instant(&self, query: &str, t: i64) -> Result<Evaluated<Value>, QueryError> {
        let expr = self.parse(query, t, t, 0)?;
        let mut ctx = self.ctx(t, t, 0);
        ctx.read_stats_only(&expr);
        let delayed = self.opts.delayed_name_removal;
        let result = ctx
            .eval(&expr, t)
            .and_then(|value| {
                if delayed {
                    drop_marked_names(value)
                } else {
                    Ok(value)
                }
            })
            .map(|value| Evaluated {
                value,
                annotations: ctx.annotations(),
            });
        finish(ctx, result)
    }

    /// Evaluates `query` at every step from `start` to `end` inclusive;
    /// the result is always a matrix sorted by labels.
    pub fn range(
        &self,
        query: &str,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Evaluated<Vec<Series>>, QueryError> {
        let expr = self.parse(query, start, end, step)?;
        match expr.value_type() {
            parser::value::ValueType::Vector | parser::value::ValueType::Scalar => {}
            other => {
                return Err(QueryError::BadData(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                type_word(other)
            )))
            }
        }
        let mut ctx = self.ctx(start, end, step);
        ctx.read_stats_only(&expr);
        let result = Self::range_in(&ctx, &expr, start, end, step);
        finish(ctx, result)
    }

    fn range_in(
        ctx: &Ctx<'_>,
        expr: &Expr,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Evaluated<Vec<Series>>, QueryError> {
        // A plain selector is read in one pass (a smoothed one step by step).
        match expr {
            Expr::VectorSelector(vs) if !vs.smoothed => {
                return Ok(Evaluated {
                    value: ctx.selector_range(vs, start, end, step)?,
                    annotations: Annotations::default(),
                })
            }
            _ => {}
        }
        // A range function whose first step made a table of every step
        // (see `Ctx::range_table`) is read from the table row by row.
        let mut first = None;
        if let (Expr::Call(call), true) = (expr.unparen(), start <= end) {
            let v = ctx.eval(expr, start)?;
            if let Some((table, 0)) = ctx.tabulated(call, start) {
                if let Some(value) = ctx.table_series(&table, start, step)? {
                    return Ok(Evaluated {
                        value,
                        annotations: ctx.annotations(),
                    });
                }
            }
            first = Some(v);
        }
        // Selectors hand out the same shared labels at every step, so most
        // samples are found by their labels' address; only new label sets
        // are hashed by content.
        let mut acc = MatrixBuilder::default();
        let mut t = start;
        while t <= end {
            ctx.check_deadline("query range evaluation")?;
            let value = match first.take() {
                Some(v) => v,
                None => ctx.eval(expr, t)?,
            };
            // The answer's points are kept to the end: each step's count
            // against the query's budget before they are.
            match value {
                Value::Scalar(v) => {
                    ctx.budget()
                        .charge(1, POINT_BYTES, "query range evaluation")?;
                    acc.push(no_labels(), t, v)
                }
                Value::Vector(samples) => {
                    let hists = samples.iter().filter(|s| s.h.is_some()).count();
                    ctx.budget().charge(
                        samples.len(),
                        (samples.len() - hists) * POINT_BYTES + hists * HISTOGRAM_BYTES,
                        "query range evaluation",
                    )?;
                    for s in samples {
                        acc.push_sample(s, t);
                    }
                }
                other => {
                    return Err(QueryError::Execution(format!(
                        "unexpected {} in range query",
                        other.type_name()
                    )))
                }
            }
            t = match t.checked_add(step) {
                Some(t) => t,
                None => break,
            };
        }
        let mut value = acc.finish();
        if ctx.opts.delayed_name_removal {
            value = drop_marked_series_names(value)?;
        }
        Ok(Evaluated {
            value,
            annotations: ctx.annotations(),
        })
    }
}

/// The end of a query with delayed name removal: the names of the series
/// marked [`Sample::drop_name`] go, and two series left with the same
/// labels are an error where they have points at the same time (series
/// apart in time merge), as Prometheus' `cleanupMetricLabels`.
fn drop_marked_names(value: Value) -> Result<Value, QueryError> {
    Ok(match value {
        Value::Vector(v) => Value::Vector(drop_marked_sample_names(v)?),
        Value::Matrix(m) => Value::Matrix(drop_marked_series_names(m)?),
        other => other,
    })
}

/// [`drop_marked_names`] for one step's vector.
fn drop_marked_sample_names(mut v: Vec<Sample>) -> Result<Vec<Sample>, QueryError> {
    let mut any = false;
    for s in v.iter_mut().filter(|s| s.drop_name) {
        s.labels = drop_name(&s.labels);
        s.drop_name = false;
        any = true;
    }
    if any {
        check_unique(&v)?;
    }
    Ok(v)
}

/// [`drop_marked_names`] for a range vector, or a range query's answer,
/// whose series were marked as their first samples were.
fn drop_marked_series_names(m: Vec<Series>) -> Result<Vec<Series>, QueryError> {
    if !m.iter().any(|s| s.drop_name) {
        return Ok(m);
    }
    let mut out: Vec<Series> = Vec::with_capacity(m.len());
    let mut index: hashbrown::HashMap<super::value::Labels, usize> = hashbrown::HashMap::new();
    for mut s in m {
        if s.drop_name {
            s.labels = drop_name(&s.labels);
            s.drop_name = false;
        }
        match index.get(&s.labels) {
            None => {
                index.insert(s.labels.clone(), out.len());
                out.push(s);
            }
            Some(&i) => {
                let into = &mut out[i];
                let times = |x: &Series| -> Vec<i64> {
                    x.points
                        .iter()
                        .map(|p| p.0)
                        .chain(x.histograms.iter().map(|h| h.0))
                        .collect()
                };
                let had: std::collections::HashSet<i64> = times(into).into_iter().collect();
                if times(&s).iter().any(|t| had.contains(t)) {
                    return Err(QueryError::Execution(
                        "vector cannot contain metrics with the same labelset".to_owned(),
                    ));
                }
                into.points.extend(s.points);
                into.points.sort_by_key(|p| p.0);
                into.histograms.extend(s.histograms);
                into.histograms.sort_by_key(|h| h.0);
            }
        }
    }
    out.sort_by(|a, b| a.labels.cmp(&b.labels));
    Ok(out)
}

/// A query that held at least this much gives the freed heap back to the
/// system when it ends: glibc keeps it otherwise, and one large query
/// would leave the process that much larger.
const TRIM_AFTER_BYTES: usize = crate::heap::KEEP_FREED_BYTES;

/// Ends a query's evaluation: its working state is dropped, and after a
/// large query (answered or failed) the freed heap is given back.
fn finish<T>(ctx: Ctx<'_>, result: Result<T, QueryError>) -> Result<T, QueryError> {
    let peak = ctx.budget().peak_bytes();
    drop(ctx);
    if peak >= TRIM_AFTER_BYTES {
        crate::heap::release_free_memory();
    }
    result
}

/// An answer and the warnings and infos about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated<T> {
    /// The answer.
    pub value: T,
    /// Prometheus' warnings and infos about it.
    pub annotations: Annotations,
}

fn type_word(t: parser::value::ValueType) -> &'static str {
    match t {
        parser::value::ValueType::Vector => "instant vector",
        parser::value::ValueType::Scalar => "scalar",
        parser::value::ValueType::Matrix => "range vector",
        parser::value::ValueType::String => "string",
    }
}
