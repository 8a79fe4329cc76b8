//! The engine: parses a query and evaluates it at one time or stepping
//! through a range, wiring the operators into the evaluator.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use promql_parser::parser::{self, Expr};

use super::annotations::Annotations;
use super::eval::{Ctx, MatrixBuilder};
use super::guard;
use super::value::{no_labels, Series, Value};
use super::{aggregate, binary, functions, QueryError};
use crate::storage::Querier;

pub use super::eval::{is_stale, QueryOptions, STALE_NAN};

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

    fn parse(&self, query: &str) -> Result<Expr, QueryError> {
        guard::parse(query, &self.opts.parse).map_err(|e| QueryError::BadData(e.to_string()))
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
        let expr = self.parse(query)?;
        let ctx = self.ctx(t, t, 0);
        let value = ctx.eval(&expr, t)?;
        Ok(Evaluated {
            value,
            annotations: ctx.annotations(),
        })
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
        let expr = self.parse(query)?;
        match expr.value_type() {
            parser::value::ValueType::Vector | parser::value::ValueType::Scalar => {}
            other => {
                return Err(QueryError::BadData(format!(
                "invalid expression type \"{}\" for range query, must be Scalar or instant Vector",
                type_word(other)
            )))
            }
        }
        let ctx = self.ctx(start, end, step);
        if let Expr::VectorSelector(vs) = &expr {
            return Ok(Evaluated {
                value: ctx.selector_range(vs, start, end, step)?,
                annotations: Annotations::default(),
            });
        }
        // Selectors hand out the same shared labels at every step, so most
        // samples are found by their labels' address; only new label sets
        // are hashed by content.
        let mut acc = MatrixBuilder::default();
        let mut t = start;
        while t <= end {
            ctx.check_deadline("query range evaluation")?;
            match ctx.eval(&expr, t)? {
                Value::Scalar(v) => acc.push(no_labels(), t, v),
                Value::Vector(samples) => {
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
        Ok(Evaluated {
            value: acc.finish(),
            annotations: ctx.annotations(),
        })
    }
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
