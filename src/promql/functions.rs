//! PromQL functions, by name. Each family has its file; this one holds the
//! table from a function's name to its implementation.

mod args;
mod extended;
mod histogram;
mod info;
mod labels;
mod math;
mod native;
mod over_time;
mod rate;
mod start;
mod time;

use crate::promql::parser::{Call, Expr};

use super::annotations::Annotation;
use super::eval::Ctx;
use super::value::Value;
use super::QueryError;

pub use rate::{extrapolated_rate, Change};

/// A function: its call (for the arguments) evaluated at a time.
type Function = fn(&Ctx<'_>, &Call, i64) -> Result<Value, QueryError>;

/// Every function Sluice evaluates, sorted by name (a test checks).
static FUNCTIONS: &[(&str, Function)] = &[
    ("abs", math::abs),
    ("absent", labels::absent),
    ("absent_over_time", labels::absent_over_time),
    ("acos", math::acos),
    ("acosh", math::acosh),
    ("asin", math::asin),
    ("asinh", math::asinh),
    ("atan", math::atan),
    ("atanh", math::atanh),
    ("avg_over_time", over_time::avg),
    ("ceil", math::ceil),
    ("changes", rate::changes),
    ("clamp", math::clamp),
    ("clamp_max", math::clamp_max),
    ("clamp_min", math::clamp_min),
    ("cos", math::cos),
    ("cosh", math::cosh),
    ("count_over_time", over_time::count),
    ("day_of_month", time::day_of_month),
    ("day_of_week", time::day_of_week),
    ("day_of_year", time::day_of_year),
    ("days_in_month", time::days_in_month),
    ("deg", math::deg),
    ("delta", rate::delta),
    ("deriv", rate::deriv),
    (
        "double_exponential_smoothing",
        over_time::double_exponential_smoothing,
    ),
    ("exp", math::exp),
    ("first_over_time", over_time::first),
    ("floor", math::floor),
    ("histogram_avg", native::avg),
    ("histogram_count", native::count),
    ("histogram_fraction", histogram::fraction),
    ("histogram_quantile", histogram::quantile),
    ("histogram_quantiles", histogram::quantiles),
    ("histogram_stddev", native::stddev),
    ("histogram_stdvar", native::stdvar),
    ("histogram_sum", native::sum),
    ("hour", time::hour),
    ("idelta", rate::idelta),
    ("increase", start::increase),
    ("info", info::info),
    ("irate", start::irate_fn),
    ("label_join", labels::label_join),
    ("label_replace", labels::label_replace),
    ("last_over_time", over_time::last),
    ("ln", math::ln),
    ("log10", math::log10),
    ("log2", math::log2),
    ("mad_over_time", over_time::mad),
    ("max_of", math::max_of),
    ("max_over_time", over_time::max),
    ("min_of", math::min_of),
    ("min_over_time", over_time::min),
    ("minute", time::minute),
    ("month", time::month),
    ("pi", math::pi),
    ("predict_linear", rate::predict_linear),
    ("present_over_time", over_time::present),
    ("quantile_over_time", over_time::quantile_over_time),
    ("rad", math::rad),
    ("rate", start::rate),
    ("resets", start::resets_fn),
    ("round", math::round),
    ("scalar", math::scalar),
    ("sgn", math::sgn),
    ("sin", math::sin),
    ("sinh", math::sinh),
    ("sort", math::sort),
    ("sort_by_label", labels::sort_by_label),
    ("sort_by_label_desc", labels::sort_by_label_desc),
    ("sort_desc", math::sort_desc),
    ("sqrt", math::sqrt),
    ("start_timestamp", start::start_timestamp),
    ("stddev_over_time", over_time::stddev),
    ("stdvar_over_time", over_time::stdvar),
    ("sum_over_time", over_time::sum),
    ("tan", math::tan),
    ("tanh", math::tanh),
    ("time", time::time),
    ("timestamp", time::timestamp),
    ("ts_of_first_over_time", over_time::ts_of_first),
    ("ts_of_last_over_time", over_time::ts_of_last),
    ("ts_of_max_over_time", over_time::ts_of_max),
    ("ts_of_min_over_time", over_time::ts_of_min),
    ("vector", math::vector),
    ("year", time::year),
];

/// Evaluates a function call at `t`.
pub(crate) fn call(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    // The argument Prometheus names in this function's annotations: the
    // histograms of `histogram_quantile`/`histogram_fraction`, the first
    // otherwise; a quantile warning names the first. Parentheses around an
    // argument are not part of it, as Prometheus strips them.
    let at = |i: usize| args::arg(call, i).map(Expr::pos);
    let first = at(0).unwrap_or(call.pos);
    let node = match call.func.name {
        "histogram_quantile" => at(1).unwrap_or(first),
        "histogram_fraction" => at(2).unwrap_or(first),
        _ => first,
    };
    let _pos = ctx.at_pos(node, first);
    // A range query (a subquery's too) orders its series by labels
    // whatever `sort` did at each step; Prometheus v3.14 says so, unless
    // the call is evaluated once (step invariant: `sort(x @ 100)`).
    if !ctx.evaluates_once()
        && !call.step_invariant()
        && matches!(
            call.func.name,
            "sort" | "sort_desc" | "sort_by_label" | "sort_by_label_desc"
        )
    {
        let _call = ctx.at_pos(call.pos, call.pos);
        ctx.annotate(Annotation::SortInRangeQuery);
    }
    if let Some(r) = extended::eval(ctx, call, t) {
        return r;
    }
    let name = call.func.name;
    match FUNCTIONS.binary_search_by(|(n, _)| n.cmp(&name)) {
        Ok(i) => (FUNCTIONS[i].1)(ctx, call, t),
        Err(_) => Err(QueryError::Execution(format!(
            "function {name:?} is not supported yet"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::FUNCTIONS;

    #[test]
    fn the_table_is_sorted_for_the_binary_search() {
        for w in FUNCTIONS.windows(2) {
            assert!(w[0].0 < w[1].0, "{} must come after {}", w[0].0, w[1].0);
        }
    }
}
