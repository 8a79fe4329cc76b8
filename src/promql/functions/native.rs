//! Native histogram functions: `histogram_count`, `histogram_sum`,
//! `histogram_avg`, `histogram_stddev`, `histogram_stdvar`, and the
//! native halves of `histogram_quantile` and `histogram_fraction`
//! (Prometheus' `HistogramQuantile` and `HistogramFraction`). Each reads
//! the histogram samples of its vector and drops the float ones and the
//! metric name.

use crate::promql::parser::Call;

use crate::histogram::{Bucket, FloatHistogram};
use crate::promql::annotations::Annotation;
use crate::promql::eval::{Compat, Ctx};
use crate::promql::stats::Kahan;
use crate::promql::value::{Sample, Value};
use crate::promql::QueryError;

/// A function of each histogram sample, to a float.
fn per_histogram(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    f: impl Fn(&FloatHistogram) -> f64,
) -> Result<Value, QueryError> {
    let v = super::args::first_vector(ctx, call, t)?;
    Ok(Value::Vector(
        v.into_iter()
            .filter_map(|s| {
                let h = s.h.as_ref()?;
                Some(Sample {
                    drop_name: true,
                    ..Sample::float(ctx.unnamed(&s.labels), f(h))
                })
            })
            .collect(),
    ))
}

pub(super) fn count(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    per_histogram(ctx, call, t, |h| h.count)
}

pub(super) fn sum(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    per_histogram(ctx, call, t, |h| h.sum)
}

pub(super) fn avg(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    per_histogram(ctx, call, t, |h| h.sum / h.count)
}

pub(super) fn stddev(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    per_histogram(ctx, call, t, |h| variance(h).sqrt())
}

pub(super) fn stdvar(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    per_histogram(ctx, call, t, variance)
}

/// The estimated variance of the observations: each bucket's count at
/// its middle (geometric for exponential buckets, arithmetic for custom
/// ones, 0 in the zero bucket) around the mean `sum / count`.
fn variance(h: &FloatHistogram) -> f64 {
    let mean = h.sum / h.count;
    let mut acc = Kahan::default();
    for b in h.all_buckets() {
        if b.count == 0.0 {
            continue;
        }
        let val = if h.uses_custom_buckets() {
            (b.upper + b.lower) / 2.0
        } else if b.lower <= 0.0 && b.upper >= 0.0 {
            0.0
        } else {
            let g = (b.upper * b.lower).sqrt();
            if b.upper < 0.0 {
                -g
            } else {
                g
            }
        };
        let d = val - mean;
        acc.add(b.count * d * d);
    }
    acc.value() / h.count
}

/// The `q` quantile of the observations in `h`: found by rank among the
/// buckets (from the top for q ≥ 0.5, so the +Inf side is exact), then
/// interpolated inside its bucket, exponentially for exponential buckets
/// and linearly for custom ones and the zero bucket.
pub(super) fn quantile(ctx: &Ctx<'_>, q: f64, h: &FloatHistogram, metric: &str) -> f64 {
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    if h.count == 0.0 || q.is_nan() {
        return f64::NAN;
    }
    let all = h.all_buckets();
    let forward = h.sum.is_nan() || q < 0.5;
    let mut order: Box<dyn Iterator<Item = &Bucket>> = if forward {
        Box::new(all.iter())
    } else {
        Box::new(all.iter().rev())
    };
    let mut rank = if forward {
        q * h.count
    } else {
        (1.0 - q) * h.count
    };
    let mut count = 0.0;
    let mut bucket = Bucket {
        lower: 0.0,
        upper: 0.0,
        lower_inclusive: false,
        upper_inclusive: false,
        count: 0.0,
    };
    for b in order.by_ref() {
        if b.count == 0.0 {
            continue;
        }
        bucket = *b;
        count += b.count;
        if count >= rank {
            break;
        }
    }
    let custom = h.uses_custom_buckets();
    if !custom && bucket.lower < 0.0 && bucket.upper > 0.0 {
        if h.negative_buckets.is_empty() && !h.positive_buckets.is_empty() {
            bucket.lower = 0.0;
        } else if h.positive_buckets.is_empty() && !h.negative_buckets.is_empty() {
            bucket.upper = 0.0;
        }
    } else if custom {
        if bucket.lower == f64::NEG_INFINITY {
            if bucket.upper <= 0.0 {
                return bucket.upper;
            }
            bucket.lower = 0.0;
        } else if bucket.upper == f64::INFINITY {
            return bucket.lower;
        }
    }
    if count > h.count {
        count = h.count;
    }
    if count < rank {
        if h.sum.is_nan() {
            ctx.annotate(Annotation::QuantileNaNResult(metric));
            return f64::NAN;
        }
        return bucket.upper;
    }
    if forward {
        rank -= count - bucket.count;
    } else {
        rank = count - rank;
    }
    if h.sum.is_nan() {
        let rest: f64 = order.map(|b| b.count).sum();
        if count + rest < h.count {
            ctx.annotate(Annotation::QuantileNaNSkew(metric));
        }
    }
    let fraction = rank / bucket.count;
    if custom || (bucket.lower <= 0.0 && bucket.upper >= 0.0) {
        return bucket.lower + (bucket.upper - bucket.lower) * fraction;
    }
    let log_lower = bucket.lower.abs().log2();
    let log_upper = bucket.upper.abs().log2();
    if bucket.lower > 0.0 {
        return (log_lower + (log_upper - log_lower) * fraction).exp2();
    }
    -(log_upper + (log_lower - log_upper) * (1.0 - fraction)).exp2()
}

/// The estimated share of the observations in `h` between `lower` and
/// `upper`, interpolated inside the buckets the two fall in.
pub(super) fn fraction(
    ctx: &Ctx<'_>,
    lower: f64,
    upper: f64,
    h: &FloatHistogram,
    metric: &str,
) -> f64 {
    if h.count == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    let custom = h.uses_custom_buckets();
    let (mut count, mut rank) = (0.0, 0.0);
    let (mut lower_rank, mut upper_rank) = (0.0, 0.0);
    let (mut lower_set, mut upper_set) = (false, false);
    let all = h.all_buckets();
    let mut it = all.iter();
    for b in it.by_ref() {
        let mut b = *b;
        count += b.count;
        let mut zero_bucket = false;
        if b.lower <= 0.0 && b.upper >= 0.0 {
            zero_bucket = true;
            if h.negative_buckets.is_empty() && !h.positive_buckets.is_empty() {
                b.lower = 0.0;
            } else if h.positive_buckets.is_empty() && !h.negative_buckets.is_empty() {
                b.upper = 0.0;
            }
        }
        let linear = |v: f64| {
            // v3.14: the whole of a first bucket from -Inf lies below a
            // limit inside it (3.5.3: NaN).
            if b.lower == f64::NEG_INFINITY && ctx.opts.compat >= Compat::V3_14 {
                b.count
            } else {
                rank + b.count * (v - b.lower) / (b.upper - b.lower)
            }
        };
        let exponential = |v: f64| {
            let (ll, lu, lv) = (b.lower.abs().log2(), b.upper.abs().log2(), v.abs().log2());
            let f = if v > 0.0 {
                (lv - ll) / (lu - ll)
            } else {
                1.0 - ((lv - lu) / (ll - lu))
            };
            rank + b.count * f
        };
        let interpolate = |v: f64| {
            if custom || zero_bucket {
                linear(v)
            } else {
                exponential(v)
            }
        };
        if !lower_set && b.lower >= lower {
            lower_rank = rank;
            lower_set = true;
        }
        if !upper_set && b.lower >= upper {
            upper_rank = rank;
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        if !lower_set && b.lower < lower && b.upper > lower {
            lower_rank = interpolate(lower);
            lower_set = true;
        }
        if !upper_set && b.lower < upper && b.upper > upper {
            upper_rank = interpolate(upper);
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        rank += b.count;
    }
    if h.sum.is_nan() {
        count += it.map(|b| b.count).sum::<f64>();
        if count < h.count {
            ctx.annotate(Annotation::FractionNaNs(metric));
        }
    } else {
        count = h.count;
    }
    if !lower_set || lower_rank > count {
        lower_rank = count;
    }
    if !upper_set || upper_rank > count {
        upper_rank = count;
    }
    (upper_rank - lower_rank) / h.count
}
