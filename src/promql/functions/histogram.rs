//! `histogram_quantile` and `histogram_fraction` over classic (`le`)
//! bucket series and native histograms.

use crate::promql::parser::Call;

use super::args::scalar_arg;
use crate::promql::annotations::Annotation;
use crate::promql::eval::{Compat, Ctx};
use crate::promql::value::{is_metadata_label, Sample, Value};
use crate::promql::QueryError;
use crate::storage::labels::Label;

pub(super) fn quantile(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let q = scalar_arg(ctx, call, 0, t)?;
    if !(0.0..=1.0).contains(&q) {
        ctx.annotate(Annotation::InvalidQuantile(q));
    }
    let v = ctx.eval_vector(&call.args.args[1], t)?;
    let (native, classic) = split(ctx, v);
    let mut out: Vec<Sample> = native
        .into_iter()
        .map(|s| {
            let h = s.h.as_deref().map_or(f64::NAN, |h| {
                // Prometheus (without delayed name removal) has dropped the
                // name before it names the metric: "".
                super::native::quantile(ctx, q, h, named(ctx, &s.labels))
            });
            float_unnamed(ctx, s.labels.to_vec(), h)
        })
        .collect();
    out.extend(histogram_quantile(ctx, q, classic));
    Ok(Value::Vector(out))
}

/// `histogram_quantiles(v, "label", q1, q2, …)` (experimental): for each
/// quantile, what `histogram_quantile` gives, each result with `label` set
/// to the quantile as OpenMetrics writes it ("0.5", "1.0").
pub(super) fn quantiles(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let label = super::args::string_arg(call, 1)?;
    let mut qs = Vec::with_capacity(call.args.args.len().saturating_sub(2));
    for i in 2..call.args.args.len() {
        let q = scalar_arg(ctx, call, i, t)?;
        if !(0.0..=1.0).contains(&q) {
            // Named at the quantile given, as Prometheus v3.14.
            let at = call.args.args[i].unparen().pos();
            let _pos = ctx.at_pos(at, at);
            ctx.annotate(Annotation::InvalidQuantile(q));
        }
        qs.push(q);
    }
    let v = ctx.eval_vector(&call.args.args[0], t)?;
    let (native, classic) = split(ctx, v);
    let mut out = Vec::new();
    for q in qs {
        let text = openmetrics_float(q);
        let with_label = |mut labels: Vec<Label>| {
            labels.retain(|l| l.name != label);
            labels.push(Label {
                name: label.as_str().into(),
                value: text.as_str().into(),
            });
            labels.sort();
            labels
        };
        for s in &native {
            let v = s.h.as_deref().map_or(f64::NAN, |h| {
                super::native::quantile(ctx, q, h, named(ctx, &s.labels))
            });
            // The name goes (or is marked to) before the label is set,
            // which may be `__name__` itself.
            let unnamed = float_unnamed(ctx, s.labels.to_vec(), v);
            out.push(Sample {
                labels: with_label(unnamed.labels.to_vec()).into(),
                ..unnamed
            });
        }
        for s in histogram_quantile(ctx, q, classic.clone()) {
            out.push(Sample {
                labels: with_label(s.labels.to_vec()).into(),
                ..s
            });
        }
    }
    Ok(Value::Vector(out))
}

/// A float as OpenMetrics writes one (Prometheus'
/// `FormatOpenMetricsFloat`): Go's shortest `%g`, with ".0" added to a
/// whole number (`1.0`, `1e+06`, `1e-05`, `NaN`, `+Inf`).
fn openmetrics_float(v: f64) -> String {
    if v == 0.0 {
        return "0.0".to_owned();
    }
    let g = crate::histogram::go_g(v);
    if v.is_finite() && !g.contains(['.', 'e']) {
        format!("{g}.0")
    } else {
        g
    }
}

/// The native histogram samples of `v` and the classic bucket series.
/// Where a native histogram and classic buckets have the same labels (but
/// `le`), neither is read, with Prometheus' warning.
fn split(ctx: &Ctx<'_>, v: Vec<Sample>) -> (Vec<Sample>, Vec<Sample>) {
    let (native, classic): (Vec<Sample>, Vec<Sample>) = v.into_iter().partition(|s| s.h.is_some());
    if native.is_empty() || classic.is_empty() {
        return (native, classic);
    }
    let key = |s: &Sample| -> Vec<Label> {
        s.labels
            .iter()
            .filter(|l| l.name != "le")
            .cloned()
            .collect()
    };
    let classic_keys: std::collections::HashSet<Vec<Label>> = classic.iter().map(key).collect();
    let mut clash = std::collections::HashSet::new();
    let native = native
        .into_iter()
        .filter(|s| {
            let k = key(s);
            if classic_keys.contains(&k) {
                ctx.annotate(Annotation::MixedClassicNative(metric_name(&s.labels)));
                clash.insert(k);
                return false;
            }
            true
        })
        .collect();
    let classic = classic
        .into_iter()
        .filter(|s| !clash.contains(&key(s)))
        .collect();
    (native, classic)
}

/// `histogram_fraction(lower, upper, v)` over classic `_bucket` series:
/// the estimated share of observations between `lower` and `upper`.
pub(super) fn fraction(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let lower = scalar_arg(ctx, call, 0, t)?;
    let upper = scalar_arg(ctx, call, 1, t)?;
    let v = ctx.eval_vector(&call.args.args[2], t)?;
    let (native, classic) = split(ctx, v);
    let mut out: Vec<Sample> = native
        .into_iter()
        .map(|s| {
            let f = s.h.as_deref().map_or(f64::NAN, |h| {
                super::native::fraction(ctx, lower, upper, h, named(ctx, &s.labels))
            });
            float_unnamed(ctx, s.labels.to_vec(), f)
        })
        .collect();
    out.extend(
        classic_histograms(ctx, classic)
            .into_iter()
            .map(|(labels, buckets)| {
                float_unnamed(
                    ctx,
                    labels,
                    bucket_fraction(lower, upper, buckets, ctx.opts.compat >= Compat::V3_14),
                )
            }),
    );
    Ok(Value::Vector(out))
}

/// `histogram_quantile` over classic `_bucket` series: interpolates inside
/// the bucket holding the rank. The result drops the name.
fn histogram_quantile(ctx: &Ctx<'_>, q: f64, v: Vec<Sample>) -> Vec<Sample> {
    classic_histograms(ctx, v)
        .into_iter()
        .map(|(labels, buckets)| {
            let (v, forced) = bucket_quantile(q, buckets);
            if forced {
                ctx.annotate(Annotation::ForcedMonotonicity(metric_name(&labels)));
            }
            float_unnamed(ctx, labels, v)
        })
        .collect()
}

/// A classic histogram: its labels but `le`, and its (upper bound, count)
/// buckets.
type ClassicHistogram = (Vec<Label>, Vec<(f64, f64)>);

/// Classic histograms in `v`: bucket series grouped by every label but
/// `le` (the metric name too, as Prometheus does), each with its (upper
/// bound, count) buckets. A series without a numeric `le` is left out and
/// reported.
fn classic_histograms(ctx: &Ctx<'_>, v: Vec<Sample>) -> Vec<ClassicHistogram> {
    let mut groups: Vec<ClassicHistogram> = Vec::new();
    let mut index: std::collections::HashMap<Vec<Label>, usize> = std::collections::HashMap::new();
    for s in v {
        let le = s
            .labels
            .iter()
            .find(|l| l.name == "le")
            .map_or("", |l| &l.value);
        // Rust's float parser, like Go's, takes "+Inf".
        let Ok(bound) = le.parse::<f64>() else {
            ctx.annotate(Annotation::BadBucketLabel {
                metric: metric_name(&s.labels),
                le,
            });
            continue;
        };
        let key: Vec<Label> = s
            .labels
            .iter()
            .filter(|l| l.name != "le")
            .cloned()
            .collect();
        let g = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push((bound, s.v));
    }
    groups
}

/// A result that drops its input's name: at once, or with delayed name
/// removal at the end of the query (see [`Ctx::unnamed`]).
fn float_unnamed(ctx: &Ctx<'_>, mut labels: Vec<Label>, v: f64) -> Sample {
    if !ctx.opts.delayed_name_removal {
        labels.retain(|l| !is_metadata_label(&l.name));
    }
    Sample {
        drop_name: true,
        ..Sample::float(labels.into(), v)
    }
}

/// The metric name annotations about a native histogram name: none
/// without delayed name removal, where Prometheus has dropped it first.
fn named<'l>(ctx: &Ctx<'_>, labels: &'l [Label]) -> &'l str {
    if ctx.opts.delayed_name_removal {
        super::args::metric_name(labels)
    } else {
        ""
    }
}

/// Sorts buckets by upper bound and merges equal bounds.
fn coalesce(buckets: &mut Vec<(f64, f64)>) {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
}

/// The share of observations in `[lower, upper]`, interpolating linearly
/// inside the buckets that hold either end (Prometheus' `BucketFraction`).
///
/// Under v3.14's answers (`first_from_zero`) the first bucket starts at 0
/// when its upper bound is positive, and a limit inside a first bucket
/// that starts at -Inf counts the whole bucket below it; 3.5.3 answers NaN
/// for a limit inside the first bucket.
fn bucket_fraction(
    lower: f64,
    upper: f64,
    mut buckets: Vec<(f64, f64)>,
    first_from_zero: bool,
) -> f64 {
    if buckets.is_empty() {
        return f64::NAN;
    }
    coalesce(&mut buckets);
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    let count = buckets[buckets.len() - 1].1;
    if count == 0.0 || lower.is_nan() || upper.is_nan() {
        return f64::NAN;
    }
    if lower >= upper {
        return 0.0;
    }
    let (mut rank, mut lower_rank, mut upper_rank) = (0.0, 0.0, 0.0);
    let (mut lower_set, mut upper_set) = (false, false);
    for (i, &(upper_bound, bucket_count)) in buckets.iter().enumerate() {
        let lower_bound = if i > 0 {
            buckets[i - 1].0
        } else if first_from_zero && upper_bound > 0.0 {
            0.0
        } else {
            f64::NEG_INFINITY
        };
        let interpolate = |v: f64| {
            if first_from_zero && lower_bound == f64::NEG_INFINITY {
                bucket_count
            } else {
                rank + (bucket_count - rank) * (v - lower_bound) / (upper_bound - lower_bound)
            }
        };
        if !lower_set && lower_bound >= lower {
            lower_rank = rank;
            lower_set = true;
        }
        if !upper_set && lower_bound >= upper {
            upper_rank = rank;
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        if !lower_set && lower_bound < lower && upper_bound > lower {
            lower_rank = interpolate(lower);
            lower_set = true;
        }
        if !upper_set && lower_bound < upper && upper_bound > upper {
            upper_rank = interpolate(upper);
            upper_set = true;
        }
        if lower_set && upper_set {
            break;
        }
        rank = bucket_count;
    }
    if !lower_set || lower_rank > count {
        lower_rank = count;
    }
    if !upper_set || upper_rank > count {
        upper_rank = count;
    }
    (upper_rank - lower_rank) / count
}

fn metric_name(labels: &[Label]) -> &str {
    labels
        .iter()
        .find(|l| l.name == "__name__")
        .map_or("", |l| &l.value)
}

/// Differences between bucket counts smaller than this (relative) are
/// floating-point noise, smoothed over without a note.
const SMALL_DELTA: f64 = 1e-12;

/// Makes the cumulative counts non-decreasing, as Prometheus does: a
/// count within [`SMALL_DELTA`] of the last kept one takes its value (in
/// either direction), a real decrease is lifted to it and reported (true).
fn force_monotonic(buckets: &mut [(f64, f64)]) -> bool {
    let Some(&(_, mut prev)) = buckets.first() else {
        return false;
    };
    let mut forced = false;
    for b in &mut buckets[1..] {
        let curr = b.1;
        if curr == prev {
            continue;
        }
        if crate::promql::stats::almost_equal(prev, curr, SMALL_DELTA) {
            b.1 = prev;
            continue;
        }
        if curr < prev {
            b.1 = prev;
            forced = true;
            continue;
        }
        prev = curr;
    }
    forced
}

/// The `q` quantile of cumulative `(upper bound, count)` buckets, and
/// whether their counts had to be made monotonic.
fn bucket_quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> (f64, bool) {
    if q.is_nan() {
        return (f64::NAN, false);
    }
    if q < 0.0 {
        return (f64::NEG_INFINITY, false);
    }
    if q > 1.0 {
        return (f64::INFINITY, false);
    }
    // Merge equal bounds, then force the counts to be monotonic.
    coalesce(&mut buckets);
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return (f64::NAN, false);
    }
    let forced = force_monotonic(&mut buckets);
    if buckets.len() < 2 {
        return (f64::NAN, false);
    }
    let observations = buckets[buckets.len() - 1].1;
    if observations == 0.0 {
        return (f64::NAN, forced);
    }
    let mut rank = q * observations;
    let b = buckets[..buckets.len() - 1].partition_point(|x| x.1 < rank);
    if b == buckets.len() - 1 {
        return (buckets[buckets.len() - 2].0, forced);
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return (buckets[0].0, forced);
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    (start + (end - start) * (rank / count), forced)
}

#[cfg(test)]
mod tests {

    #[test]
    fn quantile_labels_are_written_as_openmetrics_writes_floats() {
        for (q, want) in [
            (0.5, "0.5"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "0.0"),
            (0.00001, "1e-05"),
            (1e6, "1e+06"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(super::openmetrics_float(q), want, "{q}");
        }
    }
    use super::*;

    #[test]
    fn bucket_quantile_interpolates_within_the_bucket() {
        // 10 observations <= 0.1, 20 <= 0.5, 30 in all.
        let b = vec![(0.1, 10.0), (0.5, 20.0), (f64::INFINITY, 30.0)];
        // rank 15 lies in (0.1, 0.5]: 0.1 + 0.4 * 5/10.
        assert!((bucket_quantile(0.5, b.clone()).0 - 0.3).abs() < 1e-12);
        // The top rank falls in +Inf: the highest finite bound.
        assert_eq!(bucket_quantile(0.99, b.clone()), (0.5, false));
        // rank 3 in the first bucket, which starts at 0.
        assert!((bucket_quantile(0.1, b.clone()).0 - 0.03).abs() < 1e-12);
        assert!(
            bucket_quantile(0.5, vec![(0.1, 1.0)]).0.is_nan(),
            "no +Inf bucket"
        );
        assert!(bucket_quantile(0.5, vec![(0.1, 0.0), (f64::INFINITY, 0.0)])
            .0
            .is_nan());
        assert_eq!(bucket_quantile(2.0, b), (f64::INFINITY, false));
    }

    #[test]
    fn decreasing_counts_are_lifted_and_reported_noise_is_not() {
        // 10 <= 1, 8 (a real decrease) <= 2, 20 in all.
        let b = vec![(1.0, 10.0), (2.0, 8.0), (f64::INFINITY, 20.0)];
        let (v, forced) = bucket_quantile(0.5, b);
        assert!(forced);
        // Lifted to 10: rank 10 falls at the top of the first bucket.
        assert_eq!(v, 1.0);
        // A decrease of one part in 1e15 is noise: smoothed, not reported.
        let b = vec![(1.0, 10.0), (2.0, 10.0 - 1e-14), (f64::INFINITY, 20.0)];
        assert!(!bucket_quantile(0.5, b).1);
    }
}
