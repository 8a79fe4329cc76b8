//! PromQL functions: the rate family, `*_over_time`, math, time and label
//! functions. Each drops `__name__` where Prometheus does.

use promql_parser::parser::{Call, Expr};

use super::eval::Ctx;
use std::sync::Arc;

use super::stats::{mean_and_variance, quantile, Kahan};
use super::value::{drop_name, no_labels, set_label, Name, Sample, Series, Value};
use super::QueryError;
use crate::storage::labels::Label;

/// The range-vector argument of `call`: its series at `t`, its range (ms)
/// and the time its window ends at (`t` moved by `offset` and `@`).
fn matrix_arg(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<(Vec<Series>, i64, i64), QueryError> {
    range_arg(ctx, call, 0, t)
}

/// Like [`matrix_arg`], for argument `i`.
fn range_arg(
    ctx: &Ctx<'_>,
    call: &Call,
    i: usize,
    t: i64,
) -> Result<(Vec<Series>, i64, i64), QueryError> {
    let Some(arg) = call.args.args.get(i) else {
        return Err(QueryError::BadData(format!(
            "{}: missing argument",
            call.func.name
        )));
    };
    match arg.as_ref() {
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
fn over_range(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    name: Name,
    f: impl Fn(&[(i64, f64)], i64, i64) -> Option<f64>,
) -> Result<Value, QueryError> {
    let mut out = Vec::new();
    // A plain range selector is read in place; a subquery is built first.
    if let Some(Expr::MatrixSelector(m)) = call.args.args.first().map(AsRef::as_ref) {
        // In a range query, every step at once (see `Ctx::range_table`),
        // unless a further argument (predict_linear's horizon) can change
        // from step to step: the table would keep the first step's.
        let fixed = call.args.args[1..].iter().all(|a| is_constant(a));
        if let (Some(k), true) = (ctx.step_of(t), fixed) {
            let key = call as *const Call as usize;
            if let Some(table) = ctx.range_table(key, &m.vs, &m.range, name, &f)? {
                return Ok(Value::Vector(table.vector(k)));
            }
        }
        let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
        let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
        ctx.range_windows(&m.vs, &m.range, t, |s, points| {
            if let Some(v) = f(points, range, at) {
                let labels = match name {
                    Name::Keep => &s.labels,
                    Name::Drop => &s.unnamed,
                };
                out.push(Sample {
                    labels: Arc::clone(labels),
                    v,
                });
            }
        })?;
    } else {
        let (series, range, at) = matrix_arg(ctx, call, t)?;
        for s in series {
            if let Some(v) = f(&s.points, range, at) {
                let labels = match name {
                    Name::Keep => s.labels,
                    Name::Drop => drop_name(&s.labels),
                };
                out.push(Sample { labels, v });
            }
        }
    }
    Ok(Value::Vector(out))
}

/// What a change over a window is reported as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Per second, counter resets added back (`rate`, `irate`).
    Rate,
    /// In all, counter resets added back (`increase`).
    Increase,
    /// In all, as a gauge's (`delta`, `idelta`).
    Delta,
}

impl Change {
    fn counter(self) -> bool {
        matches!(self, Self::Rate | Self::Increase)
    }

    fn per_second(self) -> bool {
        self == Self::Rate
    }
}

/// Prometheus' `extrapolatedRate` (v3): the change over the samples,
/// counter resets added back, extrapolated towards the range boundaries
/// when samples come close enough to them.
pub fn extrapolated_rate(
    points: &[(i64, f64)],
    range_ms: i64,
    eval_t: i64,
    change: Change,
) -> Option<f64> {
    let is_counter = change.counter();
    if points.len() < 2 {
        return None;
    }
    let range_start = eval_t - range_ms;
    let range_end = eval_t;
    let (first_t, first_v) = points[0];
    let (last_t, last_v) = points[points.len() - 1];
    let mut result = last_v - first_v;
    if is_counter {
        let mut prev = first_v;
        for &(_, v) in &points[1..] {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
    }
    let mut to_start = (first_t - range_start) as f64 / 1000.0;
    let mut to_end = (range_end - last_t) as f64 / 1000.0;
    let sampled = (last_t - first_t) as f64 / 1000.0;
    let avg_step = sampled / (points.len() - 1) as f64;
    let threshold = avg_step * 1.1;
    if to_start >= threshold {
        to_start = avg_step / 2.0;
    }
    if is_counter && result > 0.0 && first_v >= 0.0 {
        let to_zero = sampled * (first_v / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = avg_step / 2.0;
    }
    let mut factor = (sampled + to_start + to_end) / sampled;
    if change.per_second() {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

/// `irate` ([`Change::Rate`]) and `idelta` ([`Change::Delta`]): from the
/// last two samples.
fn instant_delta(points: &[(i64, f64)], change: Change) -> Option<f64> {
    let is_rate = change.per_second();
    let &[.., (t1, v1), (t2, v2)] = points else {
        return None;
    };
    let mut d = v2 - v1;
    if is_rate && v2 < v1 {
        // A counter reset: the last value is the increase since it.
        d = v2;
    }
    if is_rate {
        let dt = (t2 - t1) as f64 / 1000.0;
        if dt == 0.0 {
            return None;
        }
        d /= dt;
    }
    Some(d)
}

/// Least-squares slope and intercept at `at` (seconds from `at`).
fn linear_regression(points: &[(i64, f64)], at: i64) -> (f64, f64) {
    let n = points.len() as f64;
    let (mut sx, mut sy, mut sxy, mut sxx) = (0.0, 0.0, 0.0, 0.0);
    let const_y = points.iter().all(|&(_, v)| v == points[0].1);
    for &(t, v) in points {
        let x = (t - at) as f64 / 1000.0;
        sx += x;
        sy += v;
        sxy += x * v;
        sxx += x * x;
    }
    if const_y {
        return (0.0, points[0].1);
    }
    let cov = sxy - sx * sy / n;
    let var = sxx - sx * sx / n;
    let slope = cov / var;
    (slope, sy / n - slope * sx / n)
}

fn avg_over_time(points: &[(i64, f64)]) -> f64 {
    // Kahan-free running mean like Prometheus, switching to incremental
    // mean only when the sum would overflow.
    let mut sum = 0.0;
    let mut count = 0.0;
    let mut mean = 0.0;
    let mut incremental = false;
    for &(_, v) in points {
        count += 1.0;
        if !incremental {
            let new_sum = sum + v;
            if new_sum.is_infinite() && !v.is_infinite() && !sum.is_infinite() {
                incremental = true;
                mean = sum / (count - 1.0);
            } else {
                sum = new_sum;
                continue;
            }
        }
        if mean.is_infinite() {
            if v.is_infinite() && (mean > 0.0) == (v > 0.0) {
                continue;
            }
            if !v.is_infinite() && !v.is_nan() {
                continue;
            }
        }
        mean += v / count - mean / count;
    }
    if incremental {
        mean
    } else {
        sum / count
    }
}

/// Applies a math function to every element, dropping `__name__`.
fn map_vector(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    f: impl Fn(f64) -> f64,
) -> Result<Value, QueryError> {
    let Some(arg) = call.args.args.first() else {
        return Err(QueryError::BadData(format!(
            "{}: missing argument",
            call.func.name
        )));
    };
    let v = ctx.eval_vector(arg, t)?;
    Ok(Value::Vector(
        v.into_iter()
            .map(|s| Sample {
                labels: drop_name(&s.labels),
                v: f(s.v),
            })
            .collect(),
    ))
}

/// Whether `e` has the same value at every evaluation time.
fn is_constant(e: &Expr) -> bool {
    match e {
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => true,
        Expr::Paren(p) => is_constant(&p.expr),
        Expr::Unary(u) => is_constant(&u.expr),
        _ => false,
    }
}

fn scalar_arg(ctx: &Ctx<'_>, call: &Call, i: usize, t: i64) -> Result<f64, QueryError> {
    match call.args.args.get(i) {
        Some(e) => ctx.eval_scalar(e, t),
        None => Err(QueryError::BadData(format!(
            "{}: missing argument {}",
            call.func.name,
            i + 1
        ))),
    }
}

fn string_arg(call: &Call, i: usize) -> Result<String, QueryError> {
    match call.args.args.get(i).map(AsRef::as_ref) {
        Some(Expr::StringLiteral(s)) => Ok(s.val.clone()),
        Some(Expr::Paren(p)) => match p.expr.as_ref() {
            Expr::StringLiteral(s) => Ok(s.val.clone()),
            _ => Err(QueryError::BadData(format!(
                "{}: expected a string argument",
                call.func.name
            ))),
        },
        _ => Err(QueryError::BadData(format!(
            "{}: expected a string argument",
            call.func.name
        ))),
    }
}

/// Evaluates a function call at `t`.
pub(crate) fn call(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let name = call.func.name;
    let secs = t as f64 / 1000.0;
    match name {
        "rate" => over_range(ctx, call, t, Name::Drop, |p, r, t| {
            extrapolated_rate(p, r, t, Change::Rate)
        }),
        "increase" => over_range(ctx, call, t, Name::Drop, |p, r, t| {
            extrapolated_rate(p, r, t, Change::Increase)
        }),
        "delta" => over_range(ctx, call, t, Name::Drop, |p, r, t| {
            extrapolated_rate(p, r, t, Change::Delta)
        }),
        "irate" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            instant_delta(p, Change::Rate)
        }),
        "idelta" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            instant_delta(p, Change::Delta)
        }),
        "resets" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(p.windows(2).filter(|w| w[1].1 < w[0].1).count() as f64)
        }),
        "changes" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(
                p.windows(2)
                    .filter(|w| w[1].1 != w[0].1 && !(w[1].1.is_nan() && w[0].1.is_nan()))
                    .count() as f64,
            )
        }),
        "deriv" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            (p.len() >= 2).then(|| linear_regression(p, p[0].0).0)
        }),
        "predict_linear" => {
            let d = scalar_arg(ctx, call, 1, t)?;
            over_range(ctx, call, t, Name::Drop, |p, _, t| {
                (p.len() >= 2).then(|| {
                    let (slope, intercept) = linear_regression(p, t);
                    slope * d + intercept
                })
            })
        }
        "avg_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| Some(avg_over_time(p))),
        "sum_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            // Compensated, as Prometheus 3 sums.
            let mut k = Kahan::default();
            p.iter().for_each(|x| k.add(x.1));
            Some(k.value())
        }),
        "count_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| Some(p.len() as f64)),
        "min_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(
                p.iter()
                    .map(|x| x.1)
                    .fold(f64::NAN, |m, v| if m.is_nan() || v < m { v } else { m }),
            )
        }),
        "max_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(
                p.iter()
                    .map(|x| x.1)
                    .fold(f64::NAN, |m, v| if m.is_nan() || v > m { v } else { m }),
            )
        }),
        "last_over_time" => over_range(ctx, call, t, Name::Keep, |p, _, _| p.last().map(|x| x.1)),
        "present_over_time" => over_range(ctx, call, t, Name::Drop, |_, _, _| Some(1.0)),
        "stddev_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(mean_and_variance(p.iter().map(|&(_, v)| v)).1.sqrt())
        }),
        "stdvar_over_time" => over_range(ctx, call, t, Name::Drop, |p, _, _| {
            Some(mean_and_variance(p.iter().map(|&(_, v)| v)).1)
        }),
        "quantile_over_time" => {
            let q = scalar_arg(ctx, call, 0, t)?;
            let (series, _, _) = range_arg(ctx, call, 1, t)?;
            Ok(Value::Vector(
                series
                    .into_iter()
                    .map(|s| {
                        let mut vals: Vec<f64> = s.points.iter().map(|x| x.1).collect();
                        Sample {
                            labels: drop_name(&s.labels),
                            v: quantile(q, &mut vals),
                        }
                    })
                    .collect(),
            ))
        }
        "abs" => map_vector(ctx, call, t, f64::abs),
        "ceil" => map_vector(ctx, call, t, f64::ceil),
        "floor" => map_vector(ctx, call, t, f64::floor),
        "sqrt" => map_vector(ctx, call, t, f64::sqrt),
        "exp" => map_vector(ctx, call, t, f64::exp),
        "ln" => map_vector(ctx, call, t, f64::ln),
        "log2" => map_vector(ctx, call, t, f64::log2),
        "log10" => map_vector(ctx, call, t, f64::log10),
        "sgn" => map_vector(ctx, call, t, |v| {
            if v > 0.0 {
                1.0
            } else if v < 0.0 {
                -1.0
            } else {
                v
            }
        }),
        "sin" => map_vector(ctx, call, t, f64::sin),
        "cos" => map_vector(ctx, call, t, f64::cos),
        "tan" => map_vector(ctx, call, t, f64::tan),
        "asin" => map_vector(ctx, call, t, f64::asin),
        "acos" => map_vector(ctx, call, t, f64::acos),
        "atan" => map_vector(ctx, call, t, f64::atan),
        "sinh" => map_vector(ctx, call, t, f64::sinh),
        "cosh" => map_vector(ctx, call, t, f64::cosh),
        "tanh" => map_vector(ctx, call, t, f64::tanh),
        "asinh" => map_vector(ctx, call, t, f64::asinh),
        "acosh" => map_vector(ctx, call, t, f64::acosh),
        "atanh" => map_vector(ctx, call, t, f64::atanh),
        "deg" => map_vector(ctx, call, t, f64::to_degrees),
        "rad" => map_vector(ctx, call, t, f64::to_radians),
        "round" => {
            let to = if call.args.args.len() > 1 {
                scalar_arg(ctx, call, 1, t)?
            } else {
                1.0
            };
            // Go's math.Floor(v*(1/to)+0.5)/(1/to): rounds half up.
            let inv = 1.0 / to;
            map_vector(ctx, call, t, move |v| (v * inv + 0.5).floor() / inv)
        }
        "clamp" => {
            let (lo, hi) = (scalar_arg(ctx, call, 1, t)?, scalar_arg(ctx, call, 2, t)?);
            if lo > hi {
                return Ok(Value::Vector(Vec::new()));
            }
            map_vector(ctx, call, t, move |v| v.max(lo).min(hi))
        }
        "clamp_min" => {
            let lo = scalar_arg(ctx, call, 1, t)?;
            map_vector(ctx, call, t, move |v| v.max(lo))
        }
        "clamp_max" => {
            let hi = scalar_arg(ctx, call, 1, t)?;
            map_vector(ctx, call, t, move |v| v.min(hi))
        }
        "pi" => Ok(Value::Scalar(std::f64::consts::PI)),
        "time" => Ok(Value::Scalar(secs)),
        "vector" => Ok(Value::Vector(vec![Sample {
            labels: no_labels(),
            v: scalar_arg(ctx, call, 0, t)?,
        }])),
        "scalar" => {
            let v = ctx.eval_vector(&call.args.args[0], t)?;
            Ok(Value::Scalar(if v.len() == 1 { v[0].v } else { f64::NAN }))
        }
        "timestamp" => {
            // A plain selector gives each sample's own time; anything else
            // was computed at the evaluation time.
            let timed = match call.args.args[0].as_ref() {
                Expr::VectorSelector(vs) => ctx.vector_selector_timed(vs, t)?,
                e => ctx.eval_vector(e, t)?.into_iter().map(|s| (s, t)).collect(),
            };
            Ok(Value::Vector(
                timed
                    .into_iter()
                    .map(|(s, ts)| Sample {
                        labels: drop_name(&s.labels),
                        v: ts as f64 / 1000.0,
                    })
                    .collect(),
            ))
        }
        "sort" | "sort_desc" => {
            let mut v = ctx.eval_vector(&call.args.args[0], t)?;
            v.sort_by(|a, b| a.v.total_cmp(&b.v));
            if name == "sort_desc" {
                v.reverse();
            }
            Ok(Value::Vector(v))
        }
        "absent" => {
            let v = ctx.eval_vector(&call.args.args[0], t)?;
            if !v.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = match call.args.args[0].as_ref() {
                Expr::VectorSelector(vs) => absent_labels(vs),
                _ => Vec::new(),
            };
            Ok(Value::Vector(vec![Sample {
                labels: labels.into(),
                v: 1.0,
            }]))
        }
        "label_replace" => label_replace(ctx, call, t),
        "label_join" => label_join(ctx, call, t),
        "histogram_quantile" => {
            let q = scalar_arg(ctx, call, 0, t)?;
            let v = ctx.eval_vector(&call.args.args[1], t)?;
            Ok(Value::Vector(histogram_quantile(q, v)))
        }
        "absent_over_time" => {
            let (series, _, _) = matrix_arg(ctx, call, t)?;
            if !series.is_empty() {
                return Ok(Value::Vector(Vec::new()));
            }
            let labels = match call.args.args[0].as_ref() {
                Expr::MatrixSelector(m) => absent_labels(&m.vs),
                _ => Vec::new(),
            };
            Ok(Value::Vector(vec![Sample {
                labels: labels.into(),
                v: 1.0,
            }]))
        }
        "sort_by_label" | "sort_by_label_desc" => {
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
                            .map_or(String::new(), |l| l.value.clone())
                    })
                    .collect()
            };
            v.sort_by(|a, b| key(a).cmp(&key(b)).then_with(|| a.labels.cmp(&b.labels)));
            if name == "sort_by_label_desc" {
                v.reverse();
            }
            Ok(Value::Vector(v))
        }
        "minute" | "hour" | "day_of_week" | "day_of_month" | "day_of_year" | "days_in_month"
        | "month" | "year" => {
            let v = match call.args.args.first() {
                None => vec![Sample {
                    labels: no_labels(),
                    v: secs,
                }],
                Some(e) => ctx.eval_vector(e, t)?,
            };
            Ok(Value::Vector(
                v.into_iter()
                    .map(|s| Sample {
                        labels: drop_name(&s.labels),
                        v: date_part(name, s.v),
                    })
                    .collect(),
            ))
        }
        _ => Err(QueryError::Execution(format!(
            "function {name:?} is not supported yet"
        ))),
    }
}

/// A calendar field of a unix time in seconds (UTC), as Prometheus'
/// date functions compute it; NaN stays NaN.
fn date_part(name: &str, secs: f64) -> f64 {
    use chrono::{Datelike, Timelike};
    if !secs.is_finite() {
        return f64::NAN;
    }
    let Some(t) = chrono::DateTime::from_timestamp(secs as i64, 0) else {
        return f64::NAN;
    };
    let v = match name {
        "minute" => t.minute(),
        "hour" => t.hour(),
        "day_of_week" => t.weekday().num_days_from_sunday(),
        "day_of_month" => t.day(),
        "day_of_year" => t.ordinal(),
        "days_in_month" => {
            let (y, m) = (t.year(), t.month());
            let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
            chrono::NaiveDate::from_ymd_opt(next.0, next.1, 1)
                .and_then(|d| d.pred_opt())
                .map_or(0, |d| d.day())
        }
        "month" => t.month(),
        _ => return f64::from(t.year()),
    };
    f64::from(v)
}

/// `histogram_quantile` over classic `_bucket` series: groups by every
/// label but `le`, then interpolates inside the bucket holding the rank.
fn histogram_quantile(q: f64, v: Vec<Sample>) -> Vec<Sample> {
    // (labels of the histogram, its (upper bound, count) buckets)
    type Buckets = (Vec<Label>, Vec<(f64, f64)>);
    let mut groups: Vec<Buckets> = Vec::new();
    let mut index: std::collections::HashMap<Vec<Label>, usize> = std::collections::HashMap::new();
    for s in v {
        let Some(le) = s.labels.iter().find(|l| l.name == "le") else {
            continue;
        };
        // Rust's float parser, like Go's, takes "+Inf".
        let Ok(bound) = le.value.parse::<f64>() else {
            continue;
        };
        let key: Vec<Label> = s
            .labels
            .iter()
            .filter(|l| l.name != "le" && l.name != "__name__")
            .cloned()
            .collect();
        let g = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push((bound, s.v));
    }
    groups
        .into_iter()
        .map(|(labels, buckets)| Sample {
            labels: labels.into(),
            v: bucket_quantile(q, buckets),
        })
        .collect()
}

fn bucket_quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    // Merge equal bounds, then force the counts to be monotonic.
    buckets.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
    let mut max = f64::NEG_INFINITY;
    for b in &mut buckets {
        if b.1 < max {
            b.1 = max;
        } else {
            max = b.1;
        }
    }
    if buckets.len() < 2 {
        return f64::NAN;
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|x| x.1 < rank);
    if b == buckets.len() - 1 {
        return buckets[buckets.len() - 2].0;
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return buckets[0].0;
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

fn label_join(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    let (dst, sep) = (string_arg(call, 1)?, string_arg(call, 2)?);
    let srcs: Vec<String> = (3..call.args.args.len())
        .map(|i| string_arg(call, i))
        .collect::<Result<_, _>>()?;
    if !crate::storage::labels::is_valid_label_name(dst.as_bytes()) {
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
        out.push(s);
    }
    Ok(Value::Vector(out))
}

/// The bytes of label values one call of `label_replace` or `label_join`
/// may make, across its output ([`QueryOptions::max_label_bytes`]); each
/// value is charged its largest possible size before it is built.
///
/// [`QueryOptions::max_label_bytes`]: super::QueryOptions::max_label_bytes
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

/// `absent(sel)` takes the selector's equality matchers as labels.
fn absent_labels(vs: &promql_parser::parser::VectorSelector) -> Vec<Label> {
    let mut out: Vec<Label> = vs
        .matchers
        .matchers
        .iter()
        .filter(|m| matches!(m.op, promql_parser::label::MatchOp::Equal) && m.name != "__name__")
        .map(|m| Label {
            name: m.name.clone(),
            value: m.value.clone(),
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.name == b.name);
    out
}

fn label_replace(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
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
    if !crate::storage::labels::is_valid_label_name(dst.as_bytes()) {
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
        }
        out.push(s);
    }
    Ok(Value::Vector(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_extrapolates_like_prometheus() {
        // A counter rising 1/s, sampled every 15s from t=15s to 300s,
        // evaluated at 300s over 5m: the window (0, 300] is fully covered
        // but for the 15s before the first sample, which is within 1.1 of
        // the spacing, so rate extrapolates to the start: exactly 1/s.
        let points: Vec<(i64, f64)> = (1..=20).map(|i| (i * 15_000, (i * 15) as f64)).collect();
        let r = extrapolated_rate(&points, 300_000, 300_000, Change::Rate).expect("rate");
        assert!((r - 1.0).abs() < 1e-12, "{r}");
        // increase over the same is 300.
        let inc = extrapolated_rate(&points, 300_000, 300_000, Change::Increase).expect("increase");
        assert!((inc - 300.0).abs() < 1e-9, "{inc}");
    }

    #[test]
    fn counter_resets_add_back_the_value_before_the_reset() {
        // 10, 20, 5, 15: increase is (20-10) + 5 + (15-5) = 25 over 45s of samples.
        let p = [(0, 10.0), (15_000, 20.0), (30_000, 5.0), (45_000, 15.0)];
        // Window (−15s, 45s] with range 60s at t=45s: start gap 15s < 1.1*15s,
        // but the zero point (10/25*45 = 18s) is further, so extrapolate 15s.
        let inc = extrapolated_rate(&p, 60_000, 45_000, Change::Increase).expect("increase");
        assert!((inc - 25.0 * 60.0 / 45.0).abs() < 1e-9, "{inc}");
        // delta ignores resets: 15 - 10 = 5, extrapolated the same way.
        let d = extrapolated_rate(&p, 60_000, 45_000, Change::Delta).expect("delta");
        assert!((d - 5.0 * 60.0 / 45.0).abs() < 1e-9, "{d}");
        assert_eq!(
            extrapolated_rate(&p[..1], 60_000, 45_000, Change::Rate),
            None
        );
    }

    #[test]
    fn zero_point_limits_extrapolation_of_young_counters() {
        // 0.5, 1.5, 2.5, 3.5 every 15s from 60s; rate window (45s, 105s].
        // The 15s gap before the first sample would be extrapolated, but the
        // counter reaches zero 45s * 0.5/3 = 7.5s before it, so the increase
        // stops there: 3 * (45 + 7.5) / 45 = 3.5, the counter's value.
        let p = [(60_000, 0.5), (75_000, 1.5), (90_000, 2.5), (105_000, 3.5)];
        let inc = extrapolated_rate(&p, 60_000, 105_000, Change::Increase).expect("increase");
        assert!((inc - 3.5).abs() < 1e-9, "{inc}");
        // As a gauge (delta) there is no zero point: 3 * 60 / 45.
        let d = extrapolated_rate(&p, 60_000, 105_000, Change::Delta).expect("delta");
        assert!((d - 4.0).abs() < 1e-9, "{d}");
    }

    #[test]
    fn irate_and_idelta_use_the_last_two_samples() {
        let p = [(0, 1.0), (10_000, 5.0), (20_000, 2.0)];
        assert_eq!(instant_delta(&p, Change::Delta), Some(-3.0));
        // A reset: the last value counts as the increase.
        assert_eq!(instant_delta(&p, Change::Rate), Some(0.2));
        assert_eq!(instant_delta(&p[..1], Change::Rate), None);
    }

    #[test]
    fn bucket_quantile_interpolates_within_the_bucket() {
        // 10 observations <= 0.1, 20 <= 0.5, 30 in all.
        let b = vec![(0.1, 10.0), (0.5, 20.0), (f64::INFINITY, 30.0)];
        // rank 15 lies in (0.1, 0.5]: 0.1 + 0.4 * 5/10.
        assert!((bucket_quantile(0.5, b.clone()) - 0.3).abs() < 1e-12);
        // The top rank falls in +Inf: the highest finite bound.
        assert_eq!(bucket_quantile(0.99, b.clone()), 0.5);
        // rank 3 in the first bucket, which starts at 0.
        assert!((bucket_quantile(0.1, b.clone()) - 0.03).abs() < 1e-12);
        assert!(
            bucket_quantile(0.5, vec![(0.1, 1.0)]).is_nan(),
            "no +Inf bucket"
        );
        assert!(bucket_quantile(0.5, vec![(0.1, 0.0), (f64::INFINITY, 0.0)]).is_nan());
        assert_eq!(bucket_quantile(2.0, b), f64::INFINITY);
    }

    #[test]
    fn date_parts_are_utc_calendar_fields() {
        // 2024-02-29T13:45:00Z, a Thursday.
        let t = 1_709_214_300.0;
        assert_eq!(date_part("minute", t), 45.0);
        assert_eq!(date_part("hour", t), 13.0);
        assert_eq!(date_part("day_of_week", t), 4.0);
        assert_eq!(date_part("day_of_month", t), 29.0);
        assert_eq!(date_part("day_of_year", t), 60.0);
        assert_eq!(date_part("days_in_month", t), 29.0);
        assert_eq!(date_part("month", t), 2.0);
        assert_eq!(date_part("year", t), 2024.0);
        assert!(date_part("year", f64::NAN).is_nan());
    }

    #[test]
    fn over_time_statistics() {
        let p = [
            (0, 2.0),
            (1, 4.0),
            (2, 4.0),
            (3, 4.0),
            (4, 5.0),
            (5, 5.0),
            (6, 7.0),
            (7, 9.0),
        ];
        assert_eq!(avg_over_time(&p), 5.0);
        let (mean, var) = mean_and_variance(p.iter().map(|&(_, v)| v));
        assert_eq!((mean, var), (5.0, 4.0));
        assert!(avg_over_time(&[(0, f64::NAN), (1, 1.0)]).is_nan());
        assert_eq!(
            avg_over_time(&[(0, f64::INFINITY), (1, 1.0)]),
            f64::INFINITY
        );
    }
}
