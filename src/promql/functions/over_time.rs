//! `*_over_time`: statistics of each series over its range.

use promql_parser::parser::Call;

use super::args::{over_range, range_arg, scalar_arg};
use crate::promql::annotations::Annotation;
use crate::promql::eval::Ctx;
use crate::promql::stats::{mean_and_variance, quantile, Kahan, Mean};
use crate::promql::value::{drop_name, Name, Sample, Value};
use crate::promql::QueryError;

fn avg_over_time(points: &[(i64, f64)]) -> f64 {
    let mut m = Mean::default();
    points.iter().for_each(|&(_, v)| m.add(v));
    m.value()
}

pub(super) fn avg(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| Some(avg_over_time(p)))
}

pub(super) fn sum(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        // Compensated, as Prometheus 3 sums.
        let mut k = Kahan::default();
        p.iter().for_each(|x| k.add(x.1));
        Some(k.value())
    })
}

pub(super) fn count(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| Some(p.len() as f64))
}

pub(super) fn min(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        Some(
            p.iter()
                .map(|x| x.1)
                .fold(f64::NAN, |m, v| if m.is_nan() || v < m { v } else { m }),
        )
    })
}

pub(super) fn max(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        Some(
            p.iter()
                .map(|x| x.1)
                .fold(f64::NAN, |m, v| if m.is_nan() || v > m { v } else { m }),
        )
    })
}

pub(super) fn last(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Keep, |p, _, _| p.last().map(|x| x.1))
}

pub(super) fn present(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |_, _, _| Some(1.0))
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
