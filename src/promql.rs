//! PromQL evaluation over a storage `Querier`, with Prometheus' semantics.
//!
//! Parsing ([`parser`]) and evaluation are ours. A query first loads, once,
//! the samples every selector can touch over the whole query range (chunks
//! are shared, not copied, until decoded into that window); each step then
//! evaluates the expression tree against those windows by binary search.
//!
//! - [`guard`]: the bounds every query passes before and after parsing.
//! - [`value`]: result types and Prometheus' number and time formatting.
//! - [`engine`]: selectors, lookback and staleness, `offset`/`@`, steps.
//! - [`functions`]: the function families.
//! - [`aggregate`]: aggregation operators.
//! - [`binary`]: arithmetic, comparison and set operators with vector matching.
//! - [`stats`]: leaf float statistics (Kahan sums, Welford variance, quantile).
//! - [`annotations`]: the warnings and infos an evaluation reports.

pub mod aggregate;
pub mod annotations;
pub mod binary;
pub mod engine;
pub mod eval;
pub mod functions;
pub mod group;
pub mod guard;
pub mod parser;
pub mod stats;
pub mod value;

pub use engine::{Engine, QueryMemory, QueryOptions};
pub use eval::Compat;

use crate::storage::index::{MatchOp, Matcher};

/// Why a query failed; each maps to one Prometheus `errorType`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueryError {
    /// The query does not parse or is not valid for the request (`bad_data`).
    #[error("{0}")]
    BadData(String),
    /// Evaluation failed (`execution`), e.g. many-to-many matching.
    #[error("{0}")]
    Execution(String),
    /// The query ran past its timeout (`timeout`).
    #[error("query timed out in {0}")]
    Timeout(&'static str),
    /// The query would load more samples than allowed (`execution`).
    #[error("query processing would load too many samples into memory in {0}")]
    TooManySamples(&'static str),
    /// The query would hold more memory than allowed (`execution`).
    #[error("query processing would use more than query-max-memory ({1} bytes) in {0}")]
    TooMuchMemory(&'static str, usize),
    /// The queries running now hold all the memory set aside for queries
    /// (`unavailable`, 503): a retry can succeed once they finish.
    #[error("the queries running now hold all of the memory set aside for queries ({0} bytes); retry later")]
    Busy(usize),
}

/// Every vector selector in `expr` (inside range selectors and subqueries
/// too), in the order written, as Prometheus' `ExtractSelectors` finds them.
pub fn vector_selectors(
    expr: &crate::promql::parser::Expr,
) -> Vec<&crate::promql::parser::VectorSelector> {
    use crate::promql::parser::Expr;
    fn walk<'a>(e: &'a Expr, out: &mut Vec<&'a crate::promql::parser::VectorSelector>) {
        match e {
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
            Expr::Paren(p) => walk(&p.expr, out),
            Expr::Unary(u) => walk(&u.expr, out),
            Expr::Binary(b) => {
                walk(&b.lhs, out);
                walk(&b.rhs, out);
            }
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    walk(p, out);
                }
                walk(&a.expr, out);
            }
            Expr::Call(c) => c.args.args.iter().for_each(|a| walk(a, out)),
            Expr::VectorSelector(vs) => out.push(vs),
            Expr::MatrixSelector(m) => out.push(&m.vs),
            Expr::Subquery(sq) => walk(&sq.expr, out),
        }
    }
    let mut out = Vec::new();
    walk(expr, &mut out);
    out
}

/// The matcher sets of a parsed selector, its metric name included.
pub fn selector_matchers(
    vs: &crate::promql::parser::VectorSelector,
) -> Result<Vec<Vec<Matcher>>, String> {
    // The matchers were built (their regexes compiled) when the query was
    // parsed: cloned here, not compiled again.
    let convert = |ms: &[crate::promql::parser::label::Matcher]| -> Result<Vec<Matcher>, String> {
        let mut out = Vec::with_capacity(ms.len() + 1);
        if let Some(name) = &vs.name {
            out.push(Matcher::new(MatchOp::Equal, "__name__", name).map_err(|e| e.to_string())?);
        }
        out.extend(ms.iter().map(|m| m.compiled.clone()));
        if out.iter().all(|m| m.matches("")) {
            return Err(format!(
                "vector selector must contain at least one non-empty matcher: {vs}"
            ));
        }
        Ok(out)
    };
    Ok(vec![convert(&vs.matchers.matchers)?])
}
