//! `histogram_quantile` over classic (`le`) bucket series.

use promql_parser::parser::Call;

use super::args::scalar_arg;
use crate::promql::eval::Ctx;
use crate::promql::value::{is_metadata_label, Sample, Value};
use crate::promql::QueryError;
use crate::storage::labels::Label;

pub(super) fn quantile(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let q = scalar_arg(ctx, call, 0, t)?;
    let v = ctx.eval_vector(&call.args.args[1], t)?;
    Ok(Value::Vector(histogram_quantile(q, v)))
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
            .filter(|l| l.name != "le" && !is_metadata_label(&l.name))
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
