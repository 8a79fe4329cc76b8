//! Start times in the rate family (`use-start-timestamps`, Prometheus
//! v3.14): a sample's start time after the sample before it marks a
//! counter reset (`rate`, `increase`, `irate`, `resets`); a counter whose
//! first sample in the range started inside it counts from zero at that
//! start instead of being extrapolated; `start_timestamp()` gives them.
//! They reach these functions from a range selector read directly: a
//! subquery, or any other expression, has none (as in Prometheus).

use crate::promql::parser::{Call, Expr, MatrixSelector};

use super::args::{arg, Out, Window};
use super::rate::{self, histogram_rate_with, st_reset, Change, Span};
use crate::histogram::{CounterResetHint, FloatHistogram};
use crate::promql::annotations::Annotation;
use crate::promql::eval::{Compat, Ctx};
use crate::promql::value::{Hist, Sample, Value};
use crate::promql::QueryError;
use crate::storage::selected::start_at;
use std::sync::Arc;

/// Whether a start overlaps the sample before it without being the same
/// start (Prometheus' `checkStartTimeOverlap`).
fn overlaps(prev_st: i64, prev_t: i64, cur_st: i64) -> bool {
    cur_st != 0 && cur_st < prev_t && cur_st != prev_st
}

/// The range selector a call reads start times through: with
/// `use-start-timestamps`, a plain (not anchored or smoothed) selector
/// whose series were sent start times.
pub(super) fn reads_starts<'c>(
    ctx: &Ctx<'_>,
    call: &'c Call,
) -> Result<Option<&'c MatrixSelector>, QueryError> {
    if !ctx.opts.use_start_timestamps {
        return Ok(None);
    }
    let Some(Expr::MatrixSelector(m)) = arg(call, 0) else {
        return Ok(None);
    };
    if m.vs.anchored || m.vs.smoothed {
        return Ok(None);
    }
    Ok(ctx.selector_has_starts(&m.vs, &m.range)?.then_some(m))
}

/// Applies `f` to each series' window with its samples' start times
/// (floats', then histograms'), dropping the metric name.
pub(super) fn over_starts(
    ctx: &Ctx<'_>,
    m: &MatrixSelector,
    t: i64,
    f: impl Fn(&Window<'_>, &[i64], &[i64]) -> Option<Out>,
) -> Result<Value, QueryError> {
    let range = i64::try_from(m.range.as_millis()).unwrap_or(i64::MAX);
    let at = ctx.selector_time(&m.vs.at, &m.vs.offset, t);
    let mut out = Vec::new();
    ctx.mixed_windows(&m.vs, &m.range, t, |s, floats, hists| {
        let fs: Vec<i64> = floats
            .iter()
            .map(|&(t, _)| start_at(&s.starts, t))
            .collect();
        let hs: Vec<i64> = hists.iter().map(|(t, _)| start_at(&s.starts, *t)).collect();
        let w = Window {
            floats,
            hists,
            range,
            end: at,
            labels: &s.labels,
        };
        let labels = Arc::clone(s.unnamed(ctx));
        match f(&w, &fs, &hs) {
            Some(Out::F(v)) => out.push(Sample {
                drop_name: true,
                ..Sample::float(labels, v)
            }),
            Some(Out::H(h)) => out.push(Sample {
                drop_name: true,
                ..Sample::histogram(labels, Arc::new(h))
            }),
            None => {}
        }
    })?;
    Ok(Value::Vector(out))
}

/// `rate` and `increase` with start times (Prometheus'
/// `extrapolatedRate`): resets by value or by start time added back; when
/// the first sample's start lies inside the range, the count from zero at
/// that start, not extrapolated towards the range's start.
pub(super) fn extrapolated(
    ctx: &Ctx<'_>,
    w: &Window<'_>,
    fs: &[i64],
    hs: &[i64],
    change: Change,
) -> Option<Out> {
    let range_start = w.end - w.range;
    let (first_t, last_t, n, sts) = match (w.hists.first(), w.floats.first()) {
        (Some(_), Some(_)) => {
            ctx.annotate(Annotation::MixedFloatsHistograms(w.name()));
            return None;
        }
        (Some(&(t0, _)), None) => (t0, w.hists[w.hists.len() - 1].0, w.hists.len(), hs),
        (None, Some(&(t0, _))) => (t0, w.floats[w.floats.len() - 1].0, w.floats.len(), fs),
        (None, None) => return None,
    };
    let mut result_f = 0.0;
    let mut result_h: Option<FloatHistogram> = None;
    if w.hists.is_empty() {
        let p = w.floats;
        result_f = p[n - 1].1 - p[0].1;
        let mut warned = false;
        for i in 1..n {
            if !warned && overlaps(fs[i - 1], p[i - 1].0, fs[i]) {
                ctx.annotate(Annotation::StartTimeOverlap(w.name()));
                warned = true;
            }
            if p[i].1 < p[i - 1].1 || st_reset(fs[i - 1], p[i - 1].0, fs[i], p[i].0) {
                result_f += p[i - 1].1;
            }
        }
    } else if n > 1 {
        if (1..n).any(|i| overlaps(hs[i - 1], w.hists[i - 1].0, hs[i])) {
            ctx.annotate(Annotation::StartTimeOverlap(w.name()));
        }
        result_h = Some(histogram_rate_with(ctx, w.hists, true, w.name(), Some(hs))?);
    }
    let span = Span {
        first_t,
        last_t,
        samples: n,
        range_start,
        range_end: w.end,
    };
    let st0 = sts[0];
    let factor = if st0 != 0 && st0 > range_start && st0 < first_t {
        // A zero at the start time, then the samples.
        match w.hists.first() {
            None => result_f += w.floats[0].1,
            Some((_, h0)) => match result_h.as_mut() {
                None => result_h = Some(FloatHistogram::clone(h0)),
                Some(acc) => {
                    if let Err(e) = ctx.hist_combine(acc, h0, false, "addition") {
                        ctx.annotate(Annotation::incompatible(e, w.name()));
                        return None;
                    }
                }
            },
        }
        span.factor_from_start(st0, change, w.range)
    } else if n == 1 {
        return None;
    } else {
        let zero_point = match &result_h {
            None => (result_f > 0.0 && w.floats[0].1 >= 0.0).then(|| w.floats[0].1 / result_f),
            // Histograms stop at a zero count in v3.14's answers only.
            Some(h) => {
                let c0 = w.hists[0].1.count;
                (ctx.opts.compat >= Compat::V3_14 && h.count > 0.0 && c0 >= 0.0)
                    .then(|| c0 / h.count)
            }
        };
        span.factor(zero_point, change, w.range)
    };
    Some(match result_h {
        None => Out::F(result_f * factor),
        Some(mut h) => {
            h.mul(factor);
            h.hint = CounterResetHint::Gauge;
            h.compact();
            Out::H(h)
        }
    })
}

/// `irate` with start times: the last two samples, the later one alone
/// when it starts anew (by value or by start time).
pub(super) fn irate(ctx: &Ctx<'_>, w: &Window<'_>, fs: &[i64], hs: &[i64]) -> Option<Out> {
    let (a, b) = rate::last_two(w, fs, hs)?;
    let dt = b.0 - a.0;
    let secs = dt as f64 / 1000.0;
    let starts_anew = st_reset(a.3, a.0, b.3, b.0);
    match (a.1, b.1) {
        (None, None) => {
            let d = if b.2 < a.2 || starts_anew {
                b.2
            } else {
                b.2 - a.2
            };
            Some(Out::F(d / secs))
        }
        (Some(ha), Some(hb)) => {
            if ha.hint == CounterResetHint::Gauge || hb.hint == CounterResetHint::Gauge {
                ctx.annotate(Annotation::NativeHistogramNotCounter(w.name()));
            }
            let mut h = FloatHistogram::clone(hb);
            if !(starts_anew || ctx.hist_reset(hb, ha)) {
                if let Err(e) = ctx.hist_combine(&mut h, ha, true, "subtraction") {
                    ctx.annotate(Annotation::incompatible(e, w.name()));
                    return None;
                }
            }
            h.hint = CounterResetHint::Gauge;
            h.compact();
            h.div(secs);
            Some(Out::H(h))
        }
        _ => {
            ctx.annotate(Annotation::MixedFloatsHistograms(w.name()));
            None
        }
    }
}

/// `resets` with start times: by value, by start time, or by a switch
/// between floats and histograms.
pub(super) fn resets(ctx: &Ctx<'_>, w: &Window<'_>, fs: &[i64], hs: &[i64]) -> Option<Out> {
    // Every sample in time order: (t, start, float or histogram).
    let mut all: Vec<(i64, i64, Result<&Hist, f64>)> = w
        .floats
        .iter()
        .zip(fs)
        .map(|(&(t, v), &st)| (t, st, Err(v)))
        .chain(w.hists.iter().zip(hs).map(|((t, h), &st)| (*t, st, Ok(h))))
        .collect();
    if all.is_empty() {
        return None;
    }
    all.sort_by_key(|x| x.0);
    let n = all
        .windows(2)
        .filter(|p| {
            let by_start = st_reset(p[0].1, p[0].0, p[1].1, p[1].0);
            match (&p[0].2, &p[1].2) {
                (Err(a), Err(b)) => b < a || by_start,
                (Ok(a), Ok(b)) => by_start || ctx.hist_reset(b, a),
                _ => true,
            }
        })
        .count();
    Some(Out::F(n as f64))
}

/// `start_timestamp(v)`: each sample's start time in seconds (0 when it
/// has none), for a selector read directly; nothing for any other
/// expression, or without `use-start-timestamps`.
pub(super) fn start_timestamp(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let Some(Expr::VectorSelector(vs)) = call.args.args.first().map(Expr::unparen) else {
        return Ok(Value::Vector(Vec::new()));
    };
    if !ctx.opts.use_start_timestamps {
        return Ok(Value::Vector(Vec::new()));
    }
    Ok(Value::Vector(
        ctx.vector_selector_starts(vs, t)?
            .into_iter()
            .map(|(s, st)| Sample {
                labels: ctx.unnamed(&s.labels),
                v: st as f64 / 1000.0,
                h: None,
                drop_name: true,
            })
            .collect(),
    ))
}

/// `rate`: with start times where its selector reads them.
pub(super) fn rate(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    counter(ctx, call, t, Change::Rate)
}

/// `increase`: with start times where its selector reads them.
pub(super) fn increase(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    counter(ctx, call, t, Change::Increase)
}

fn counter(ctx: &Ctx<'_>, call: &Call, t: i64, change: Change) -> Result<Value, QueryError> {
    let with_starts = dispatch(ctx, call, t, |w, fs, hs| {
        extrapolated(ctx, w, fs, hs, change)
    })?;
    match with_starts {
        Some(v) => {
            rate::note_non_counters(ctx, call, t)?;
            Ok(v)
        }
        None if change == Change::Rate => rate::rate(ctx, call, t),
        None => rate::increase(ctx, call, t),
    }
}

/// `irate`: with start times where its selector reads them.
pub(super) fn irate_fn(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    match dispatch(ctx, call, t, |w, fs, hs| irate(ctx, w, fs, hs))? {
        Some(v) => Ok(v),
        None => rate::irate(ctx, call, t),
    }
}

/// `resets`: with start times where its selector reads them.
pub(super) fn resets_fn(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    match dispatch(ctx, call, t, |w, fs, hs| resets(ctx, w, fs, hs))? {
        Some(v) => Ok(v),
        None => rate::resets(ctx, call, t),
    }
}

/// Runs the start-time form of a rate-family function when its argument
/// reads start times; `None` otherwise.
fn dispatch(
    ctx: &Ctx<'_>,
    call: &Call,
    t: i64,
    f: impl Fn(&Window<'_>, &[i64], &[i64]) -> Option<Out>,
) -> Result<Option<Value>, QueryError> {
    match reads_starts(ctx, call)? {
        Some(m) => over_starts(ctx, m, t, f).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_resets_as_prometheus_tells_them() {
        // Unknown, or after its own sample: no reset.
        assert!(!st_reset(0, 60, 0, 120));
        assert!(!st_reset(0, 60, 200, 120));
        // Before the previous sample: the same run.
        assert!(!st_reset(30, 60, 30, 120));
        // After it: a reset.
        assert!(st_reset(30, 60, 61, 120));
        // At it: a delta when the previous start was known and before it;
        // a cumulative series of unknown start (or an invalid one) not.
        assert!(st_reset(60, 120, 120, 180));
        assert!(!st_reset(0, 120, 120, 180));
        assert!(!st_reset(120, 120, 120, 180));
        assert!(!st_reset(200, 120, 120, 180));
    }
}
