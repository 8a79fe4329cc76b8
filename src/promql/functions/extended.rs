//! Range functions over `anchored` and `smoothed` selectors (Prometheus'
//! `promql-extended-range-selectors`).
//!
//! Both read a window widened by a lookback before the range (and, for
//! `smoothed`, after it). `anchored` takes the last sample at or before the
//! range's start as the value there; `smoothed` puts a value on the line
//! between the samples on either side of each edge. `rate`, `increase` and
//! `delta` are then the difference between the two edges (with counter
//! resets added back), without extrapolation; `anchored` also serves
//! `changes` and `resets`, counted from the anchor.

use std::sync::Arc;

use crate::histogram::{CounterResetHint, FloatHistogram, Incompatible};
use crate::promql::annotations::Annotation;
use crate::promql::eval::{interpolate, Ctx};
use crate::promql::parser::{Call, Expr, MatrixSelector};
use crate::promql::value::{Hist, Sample, Value};
use crate::promql::QueryError;

use super::args::metric_name;

/// The functions `anchored` may be used with, sorted.
const ANCHORED_SAFE: &[&str] = &["changes", "delta", "increase", "rate", "resets"];

/// The functions `smoothed` may be used with, sorted.
const SMOOTHED_SAFE: &[&str] = &["delta", "increase", "rate"];

/// Evaluates `call` when its range argument is an `anchored` or `smoothed`
/// selector; `None` for any other call.
pub(super) fn eval(ctx: &Ctx<'_>, call: &Call, t: i64) -> Option<Result<Value, QueryError>> {
    let m = call.args.args.iter().find_map(|a| match a {
        Expr::MatrixSelector(m) if m.vs.anchored || m.vs.smoothed => Some(m),
        _ => None,
    })?;
    let name = call.func.name;
    let (word, safe) = if m.vs.anchored {
        ("anchored", ANCHORED_SAFE)
    } else {
        ("smoothed", SMOOTHED_SAFE)
    };
    if !safe.contains(&name) {
        return Some(Err(QueryError::Execution(format!(
            "{word} modifier can only be used with: {} - not with {name}",
            safe.join(", ")
        ))));
    }
    Some(evaluate(ctx, name, m, t))
}

fn evaluate(ctx: &Ctx<'_>, name: &str, m: &MatrixSelector, t: i64) -> Result<Value, QueryError> {
    let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
    let end = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
    let start = end.saturating_sub(range);
    let smoothed = m.vs.smoothed;
    let mut out = Vec::new();
    ctx.extended_windows(&m.vs, range, t, |s, floats, hists| {
        if !hists.is_empty() && matches!(name, "changes" | "resets") {
            // Floats and histograms in time order, from the anchor on.
            let mut all: Vec<(i64, Result<&Hist, f64>)> = floats
                .iter()
                .map(|&(t, v)| (t, Err(v)))
                .chain(hists.iter().map(|(t, h)| (*t, Ok(h))))
                .collect();
            all.sort_by_key(|x| x.0);
            let after = all.partition_point(|x| x.0 <= start);
            if after == all.len() {
                return;
            }
            let w = &all[after.saturating_sub(1)..];
            let n = w.windows(2).filter(|p| match (&p[0].1, &p[1].1) {
                (Err(a), Err(b)) if name == "changes" => b != a && !(a.is_nan() && b.is_nan()),
                (Err(a), Err(b)) => b < a,
                (Ok(a), Ok(b)) if name == "changes" => !b.same_as(a),
                (Ok(a), Ok(b)) => ctx.hist_reset(b, a),
                _ => true,
            });
            out.push(Sample {
                drop_name: true,
                ..Sample::float(Arc::clone(s.unnamed(ctx)), n.count() as f64)
            });
            return;
        }
        if !hists.is_empty() {
            if !floats.is_empty() {
                ctx.annotate(Annotation::MixedFloatsHistograms(metric_name(&s.labels)));
                return;
            }
            let name_of = metric_name(&s.labels);
            let counter = name != "delta";
            if let Some(mut h) =
                extended_histogram_rate(ctx, hists, start, end, smoothed, counter, name_of)
            {
                if name == "rate" {
                    h.div(range as f64 / 1000.0);
                }
                out.push(Sample {
                    drop_name: true,
                    ..Sample::histogram(Arc::clone(s.unnamed(ctx)), Arc::new(h))
                });
            }
            return;
        }
        let v = match name {
            "rate" | "increase" | "delta" => {
                let v = extended_rate(floats, start, end, smoothed, name != "delta");
                match (v, name) {
                    (Some(v), "rate") => Some(v / (range as f64 / 1000.0)),
                    (v, _) => v,
                }
            }
            "changes" => anchored_from(floats, start).map(|w| {
                w.windows(2)
                    .filter(|p| p[1].1 != p[0].1 && !(p[1].1.is_nan() && p[0].1.is_nan()))
                    .count() as f64
            }),
            _ => anchored_from(floats, start)
                .map(|w| w.windows(2).filter(|p| p[1].1 < p[0].1).count() as f64),
        };
        if let Some(v) = v {
            out.push(Sample {
                drop_name: true,
                ..Sample::float(Arc::clone(s.unnamed(ctx)), v)
            });
        }
    })?;
    Ok(Value::Vector(out))
}

/// [`extended_rate`] for histograms (Prometheus' `extendedHistogramRate`):
/// the difference between the edges, resets inside added back for a
/// counter; `None` (with a warning) where the histograms cannot be
/// combined.
fn extended_histogram_rate(
    ctx: &Ctx<'_>,
    h: &[(i64, Hist)],
    start: i64,
    end: i64,
    smoothed: bool,
    counter: bool,
    name: &str,
) -> Option<FloatHistogram> {
    let last = h.len().checked_sub(1)?;
    let first = h[..last]
        .partition_point(|x| x.0 <= start)
        .saturating_sub(1);
    let last = if smoothed {
        h[..last].partition_point(|x| x.0 < end)
    } else {
        last
    };
    if h[last].0 <= start || (smoothed && h[first].0 > end) {
        return None;
    }
    let custom = h[first].1.uses_custom_buckets();
    for (_, p) in &h[first..=last] {
        if p.uses_custom_buckets() != custom {
            ctx.annotate(Annotation::MixedExponentialCustom(name));
            return None;
        }
        if counter && p.hint == CounterResetHint::Gauge {
            ctx.annotate(Annotation::NativeHistogramNotCounter(name));
        }
    }
    let fail = |e| {
        ctx.annotate(Annotation::incompatible(e, name));
    };
    let at = |i: usize| (h[i].0, h[i].1.as_ref());
    let left = if smoothed && h[first].0 < start {
        FloatHistogram::interpolate(at(first), at(first + 1), start, counter)
            .map_err(fail)
            .ok()?
    } else {
        FloatHistogram::clone(&h[first].1)
    };
    let right = if smoothed && last > 0 && h[last].0 > end {
        FloatHistogram::interpolate(at(last - 1), at(last), end, counter)
            .map_err(fail)
            .ok()?
    } else {
        FloatHistogram::clone(&h[last].1)
    };
    if !counter && (left.hint != CounterResetHint::Gauge || right.hint != CounterResetHint::Gauge) {
        ctx.annotate(Annotation::NativeHistogramNotGauge(name));
    }
    let mut result = right.clone();
    ctx.hist_combine(&mut result, &left, true, "subtraction")
        .map_err(fail)
        .ok()?;
    if counter {
        // Resets between the edges: each adds back the value before it.
        let mut from = first + 1;
        let mut prev: &FloatHistogram = &left;
        if smoothed && h[first].0 < start && ctx.hist_reset(&h[first + 1].1, &h[first].1) {
            prev = &h[first + 1].1;
            from += 1;
        }
        let mut correction: Option<FloatHistogram> = None;
        let mut add = |c: &FloatHistogram| -> Result<(), Incompatible> {
            match correction.as_mut() {
                None => {
                    correction = Some(c.clone());
                    Ok(())
                }
                Some(acc) => ctx.hist_combine(acc, c, false, "addition"),
            }
        };
        if from < last {
            for (_, p) in &h[from..last] {
                if ctx.hist_reset(p, prev) {
                    add(prev).map_err(fail).ok()?;
                }
                prev = p;
            }
        }
        if from <= last && ctx.hist_reset(&right, prev) {
            add(prev).map_err(fail).ok()?;
        }
        if let Some(c) = correction {
            ctx.hist_combine(&mut result, &c, false, "addition")
                .map_err(fail)
                .ok()?;
        }
    }
    result.hint = CounterResetHint::Gauge;
    result.compact();
    Some(result)
}

/// The samples from the anchor (the last at or before `start`, if any)
/// on; `None` when none is after `start`.
fn anchored_from(floats: &[(i64, f64)], start: i64) -> Option<&[(i64, f64)]> {
    let after = floats.partition_point(|&(t, _)| t <= start);
    if after == floats.len() {
        return None;
    }
    Some(&floats[after.saturating_sub(1)..])
}

/// The change over `(start, end]` between the values at its edges: the
/// anchor (or, smoothed, the line across the edge) at `start`, the last
/// sample (or the line across `end`) at `end`; counter resets inside are
/// added back when `counter`. Prometheus' `extendedRate`.
fn extended_rate(
    f: &[(i64, f64)],
    start: i64,
    end: i64,
    smoothed: bool,
    counter: bool,
) -> Option<f64> {
    let last = f.len().checked_sub(1)?;
    // The last sample at or before `start`, or the first sample.
    let mut first = f[..last]
        .partition_point(|&(t, _)| t <= start)
        .saturating_sub(1);
    // Smoothed: the first sample at or after `end`, or the last.
    let last = if smoothed {
        f[..last].partition_point(|&(t, _)| t < end)
    } else {
        last
    };
    if f[last].0 <= start || (smoothed && f[first].0 > end) {
        return None;
    }
    let left = if smoothed && f[first].0 < start {
        interpolate(f[first], f[first + 1], start, counter)
    } else {
        f[first].1
    };
    let right = if smoothed && last > 0 && f[last].0 > end {
        interpolate(f[last - 1], f[last], end, counter)
    } else {
        f[last].1
    };
    let mut result = right - left;
    if counter {
        // The edges already allow for resets across them; the samples
        // strictly inside are checked here.
        if f[first].0 <= start {
            first += 1;
        }
        let upto = if f[last].0 >= end { last } else { last + 1 };
        let inside = f.get(first..upto).unwrap_or_default();
        let mut prev = left;
        for &(_, v) in inside {
            if v < prev {
                result += prev;
            }
            prev = v;
        }
        if right < prev {
            result += prev;
        }
    }
    Some(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(i64, f64)]) -> Vec<(i64, f64)> {
        v.to_vec()
    }

    #[test]
    fn anchored_increase_is_the_difference_from_the_anchor() {
        // 1..5 every 15 s, then 9..13: as Prometheus' extended_vectors.test.
        let f = pts(&[
            (0, 1.0),
            (15, 2.0),
            (30, 3.0),
            (45, 4.0),
            (60, 5.0),
            (75, 9.0),
        ]);
        assert_eq!(extended_rate(&f[..2], -340, 20, false, true), Some(1.0));
        assert_eq!(extended_rate(&f, 20, 80, false, true), Some(7.0));
        // Nothing after the start: nothing.
        assert_eq!(extended_rate(&f[..2], 20, 80, false, true), None);
    }

    #[test]
    fn smoothed_increase_interpolates_at_both_edges() {
        let f = pts(&[(0, 1.0), (15, 2.0), (30, 3.0), (45, 4.0)]);
        // At 5 with a 60-wide range: the left edge is before every sample,
        // so it is the first sample; the right edge is on the line from
        // 0 to 15 at 5: 1 + 1/3.
        let v = extended_rate(&f, -55, 5, true, true).expect("value");
        assert!((v - 1.0 / 3.0).abs() < 1e-9, "{v}");
    }

    #[test]
    fn a_reset_inside_is_added_back() {
        let f = pts(&[(0, 5.0), (10, 8.0), (20, 2.0), (30, 4.0)]);
        // 8 before the reset, then 0 -> 4: 3 + 4 = 7, as (8 - 5) + 4.
        assert_eq!(extended_rate(&f, 0, 30, false, true), Some(7.0));
        assert_eq!(extended_rate(&f, 0, 30, false, false), Some(-1.0));
    }
}
