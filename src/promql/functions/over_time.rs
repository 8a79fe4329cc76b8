//! `*_over_time`: statistics of each series over its range.

use crate::promql::parser::Call;

use super::args::{
    over_range, over_range_mixed, over_range_mixed_sliding, over_range_sliding, range_arg,
    scalar_arg, Out, Steps, Window,
};
use crate::promql::annotations::Annotation;
use crate::promql::eval::{Compat, Ctx, Sliding};
use crate::promql::stats::{extreme_of, mean_and_variance, mean_of, quantile, Kahan};
use crate::promql::stats::{HistogramTotals, ResetHintsSeen};
use crate::promql::value::{Name, Sample, Value};
use crate::promql::QueryError;

fn avg_over_time(points: &[(i64, f64)]) -> f64 {
    mean_of(points.iter().map(|p| p.1))
}

pub(super) fn avg(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed_sliding(
        ctx,
        call,
        t,
        Name::Drop,
        Sliding::Mean,
        |p, _, _| Some(avg_over_time(p)),
        |w| hist_over_time(ctx, w, Fold::Mean),
    )
}

fn sum_over_time(p: &[(i64, f64)]) -> f64 {
    // Compensated, as Prometheus 3 sums.
    let mut k = Kahan::default();
    p.iter().for_each(|x| k.add(x.1));
    k.value()
}

pub(super) fn sum(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| Some(sum_over_time(p)),
        |w| hist_over_time(ctx, w, Fold::Sum),
    )
}

/// How [`hist_over_time`] folds a window's histograms.
#[derive(Clone, Copy)]
enum Fold {
    Sum,
    Mean,
}

/// `sum_over_time` and `avg_over_time` of histograms (the mean as
/// Prometheus takes it, incrementally); a window mixing floats and
/// histograms gives nothing but a warning.
fn hist_over_time(ctx: &Ctx<'_>, w: &Window<'_>, fold: Fold) -> Option<Out> {
    if !w.floats.is_empty() {
        ctx.annotate(Annotation::MixedFloatsHistograms(w.name()));
        return None;
    }
    let (first, rest) = w.hists.split_first()?;
    let mut acc = crate::histogram::FloatHistogram::clone(&first.1);
    let mut totals = HistogramTotals::default();
    totals.add(&first.1);
    let mut hints = ResetHintsSeen::default();
    hints.note(first.1.hint);
    for (i, (_, h)) in rest.iter().enumerate() {
        totals.add(h);
        hints.note(h.hint);
        let step = match fold {
            Fold::Sum => ctx.hist_combine(&mut acc, h, false, "aggregation"),
            Fold::Mean => {
                let n = (i + 2) as f64;
                let mut left = crate::histogram::FloatHistogram::clone(h);
                left.div(n);
                let mut right = acc.clone();
                right.div(n);
                ctx.hist_combine(&mut left, &right, true, "aggregation")
                    .and_then(|()| ctx.hist_combine(&mut acc, &left, false, "aggregation"))
            }
        };
        if let Err(e) = step {
            ctx.annotate(Annotation::incompatible(e, w.name()));
            return None;
        }
    }
    if hints.conflict() && ctx.opts.compat >= Compat::V3_14 {
        ctx.annotate(Annotation::CounterResetCollision("aggregation"));
    }
    totals.apply(&mut acc, matches!(fold, Fold::Mean));
    Some(Out::H(acc))
}

pub(super) fn count(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| Some(p.len() as f64),
        |w| Some(Out::F((w.floats.len() + w.hists.len()) as f64)),
    )
}

pub(super) fn min(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    extreme(ctx, call, t, false)
}

pub(super) fn max(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    extreme(ctx, call, t, true)
}

/// `max_over_time` (`max`) or `min_over_time`: the first of the window's
/// greatest (least) numbers, NaN when it holds only NaNs; a table of every
/// step keeps it as the windows move.
fn extreme(ctx: &Ctx<'_>, call: &Call, t: i64, max: bool) -> Result<Value, QueryError> {
    let fold = |p: &[(i64, f64)], _, _| Some(extreme_of(p, max));
    over_range_sliding(
        ctx,
        call,
        t,
        Name::Drop,
        Steps::Together,
        Sliding::Extreme(max),
        fold,
    )
}

pub(super) fn last(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Keep,
        |p, _, _| p.last().map(|x| x.1),
        |w| match (w.floats.last(), w.hists.last()) {
            (Some(&(ft, v)), Some((ht, _))) if ft > *ht => Some(Out::F(v)),
            (_, Some((_, h))) => Some(Out::H(crate::histogram::FloatHistogram::clone(h))),
            (Some(&(_, v)), None) => Some(Out::F(v)),
            (None, None) => None,
        },
    )
}

/// `first_over_time` (experimental): keeps the name, as `last_over_time`.
pub(super) fn first(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Keep,
        |p, _, _| p.first().map(|x| x.1),
        |w| match w.merged().first()? {
            (_, Ok(h)) => Some(Out::H(crate::histogram::FloatHistogram::clone(h))),
            (_, Err(v)) => Some(Out::F(*v)),
        },
    )
}

/// The time of a sample, in seconds.
fn secs(t: i64) -> f64 {
    t as f64 / 1000.0
}

/// `ts_of_first_over_time` (experimental).
pub(super) fn ts_of_first(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| p.first().map(|x| secs(x.0)),
        |w| w.merged().first().map(|x| Out::F(secs(x.0))),
    )
}

/// `ts_of_last_over_time` (experimental).
pub(super) fn ts_of_last(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| p.last().map(|x| secs(x.0)),
        |w| w.merged().last().map(|x| Out::F(secs(x.0))),
    )
}

/// The time of the sample `better` picks over the one kept so far; a NaN
/// kept is always replaced, so NaNs count only when all are NaN.
fn time_of(p: &[(i64, f64)], better: impl Fn(f64, f64) -> bool) -> Option<f64> {
    let (&first, rest) = p.split_first()?;
    let (t, _) = rest.iter().fold(first, |kept, &cur| {
        if better(cur.1, kept.1) || kept.1.is_nan() {
            cur
        } else {
            kept
        }
    });
    Some(secs(t))
}

/// `ts_of_max_over_time` (experimental): the last time the maximum occurs.
pub(super) fn ts_of_max(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        time_of(p, |c, m| c >= m)
    })
}

/// `ts_of_min_over_time` (experimental): the last time the minimum occurs.
pub(super) fn ts_of_min(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        time_of(p, |c, m| c <= m)
    })
}

/// `mad_over_time` (experimental): the median absolute deviation from the
/// median.
pub(super) fn mad(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        // A NaN makes the median, and so the deviation, undefined.
        if p.iter().any(|x| x.1.is_nan()) {
            return Some(f64::NAN);
        }
        let mut v: Vec<f64> = p.iter().map(|x| x.1).collect();
        let median = quantile(0.5, &mut v);
        let mut dev: Vec<f64> = p.iter().map(|x| (x.1 - median).abs()).collect();
        Some(quantile(0.5, &mut dev))
    })
}

/// `double_exponential_smoothing(v[r], sf, tf)` (experimental; Holt's
/// linear method, once `holt_winters`): the smoothed value at the window's
/// end, from series with two samples or more.
pub(super) fn double_exponential_smoothing(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
) -> Result<Value, QueryError> {
    let sf = scalar_arg(ctx, call, 1, t)?;
    let tf = scalar_arg(ctx, call, 2, t)?;
    // Prometheus checks the factors for each series it smooths.
    let invalid = if !(sf > 0.0 && sf < 1.0) {
        Some(format!(
            "invalid smoothing factor. Expected: 0 < sf < 1, got: {sf:.6}"
        ))
    } else if !(tf > 0.0 && tf < 1.0) {
        Some(format!(
            "invalid trend factor. Expected: 0 < tf < 1, got: {tf:.6}"
        ))
    } else {
        None
    };
    if let Some(msg) = invalid {
        let (series, _, _) = range_arg(ctx, call, 0, t)?;
        if series.is_empty() {
            return Ok(Value::Vector(Vec::new()));
        }
        return Err(QueryError::Execution(msg));
    }
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        if p.len() < 2 {
            return None;
        }
        let (mut s0, mut s1) = (0.0, p[0].1);
        let mut trend = p[1].1 - p[0].1;
        for (i, &(_, v)) in p.iter().enumerate().skip(1) {
            if i > 1 {
                trend = tf * (s1 - s0) + (1.0 - tf) * trend;
            }
            let next = sf * v + (1.0 - sf) * (s1 + trend);
            s0 = s1;
            s1 = next;
        }
        Some(s1)
    })
}

pub(super) fn present(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |_, _, _| Some(1.0),
        |_| Some(Out::F(1.0)),
    )
}

pub(super) fn stddev(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        Some(mean_and_variance(p.iter().map(|&(_, v)| v)).1.sqrt())
    })
}

pub(super) fn stdvar(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        Some(mean_and_variance(p.iter().map(|&(_, v)| v)).1)
    })
}

pub(super) fn quantile_over_time(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let q = scalar_arg(ctx, call, 0, t)?;
    let (series, _, _) = range_arg(ctx, call, 1, t)?;
    if !series.is_empty() && !(0.0..=1.0).contains(&q) {
        ctx.annotate(Annotation::InvalidQuantile(q));
    }
    Ok(Value::Vector(
        series
            .into_iter()
            .filter(|s| !s.points.is_empty())
            .map(|s| {
                if !s.histograms.is_empty() {
                    ctx.annotate(Annotation::HistogramIgnoredInMixedRange(
                        super::args::metric_name(&s.labels),
                    ));
                }
                let mut vals: Vec<f64> = s.points.iter().map(|x| x.1).collect();
                Sample {
                    labels: ctx.unnamed(&s.labels),
                    v: quantile(q, &mut vals),
                    h: None,
                    drop_name: true,
                }
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
