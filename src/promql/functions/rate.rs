//! The rate family: `rate`, `increase`, `delta`, `irate`, `idelta`,
//! `resets`, `changes`, `deriv` and `predict_linear`.

use crate::promql::parser::{Call, Expr};

use super::args::{
    arg, over_range, over_range_mixed, over_range_mixed_sliding, over_range_with, scalar_arg, Out,
    Steps, Window,
};
use crate::histogram::{CounterResetHint, FloatHistogram};
use crate::promql::annotations::{looks_like_counter, Annotation};
use crate::promql::eval::{Compat, Ctx, Sliding};
use crate::promql::stats::{counter_increase, FactorMemo};
use crate::promql::value::{Hist, Name, Value};
use crate::promql::QueryError;

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
    if points.len() < 2 {
        return None;
    }
    let result = if change.counter() {
        counter_increase(points)
    } else {
        points[points.len() - 1].1 - points[0].1
    };
    extrapolated_from(
        points,
        result,
        range_ms,
        eval_t,
        change,
        &mut FactorMemo::default(),
    )
}

/// [`extrapolated_rate`] of a window of a counter whose increase over it
/// (`result`, [`counter_increase`]) is known.
#[inline]
pub(crate) fn extrapolated_from(
    points: &[(i64, f64)],
    result: f64,
    range_ms: i64,
    eval_t: i64,
    change: Change,
    memo: &mut FactorMemo,
) -> Option<f64> {
    let is_counter = change.counter();
    if points.len() < 2 {
        return None;
    }
    let range_start = eval_t - range_ms;
    let range_end = eval_t;
    let (first_t, first_v) = points[0];
    let (last_t, _) = points[points.len() - 1];
    let span = Span {
        first_t,
        last_t,
        samples: points.len(),
        range_start,
        range_end,
    };
    let zero_point = if is_counter && result > 0.0 && first_v >= 0.0 {
        ZeroPoint::Of(first_v, result)
    } else {
        ZeroPoint::None
    };
    Some(result * span.factor_memo(memo, zero_point, change, range_ms))
}

/// Where a counter would reach zero before its first sample, as a share
/// of the sampled interval: the first value over the increase, or none.
#[derive(Clone, Copy)]
pub(crate) enum ZeroPoint {
    None,
    /// The first value and the increase (not NaN, the increase above
    /// zero): divided only where the share may matter.
    Of(f64, f64),
    /// Already divided.
    Share(f64),
}

/// Whether the sample at `cur_t` with start time `cur_st` begins anew
/// after the one at `prev_t` with start `prev_st` (Prometheus'
/// `isStartTimestampReset`): a known start after the previous sample; at
/// it, only when the previous sample's own start was known and before it
/// (a delta, not a cumulative series of unknown start).
pub(super) fn st_reset(prev_st: i64, prev_t: i64, cur_st: i64, cur_t: i64) -> bool {
    if cur_st == 0 || cur_st >= cur_t || cur_st < prev_t {
        return false;
    }
    if cur_st > prev_t {
        return true;
    }
    if prev_st > prev_t {
        return false;
    }
    prev_st != 0 && prev_st != prev_t
}

/// Where a window's samples lie in its range, for extrapolation.
pub(super) struct Span {
    pub(super) first_t: i64,
    pub(super) last_t: i64,
    pub(super) samples: usize,
    pub(super) range_start: i64,
    pub(super) range_end: i64,
}

impl Span {
    /// [`Span::factor`] for a counter taken to be zero at `start` (a start
    /// time inside the range): nothing extrapolated before the samples,
    /// the end as usual (no extrapolation from a single sample).
    pub(super) fn factor_from_start(&self, start: i64, change: Change, range_ms: i64) -> f64 {
        let mut to_end = (self.range_end - self.last_t) as f64 / 1000.0;
        let sampled = (self.last_t - start) as f64 / 1000.0;
        let avg_step = match self.samples {
            0 | 1 => 0.0,
            n => (self.last_t - self.first_t) as f64 / 1000.0 / (n - 1) as f64,
        };
        if to_end >= avg_step * 1.1 {
            to_end = avg_step / 2.0;
        }
        let mut factor = if sampled != 0.0 {
            (sampled + to_end) / sampled
        } else {
            1.0
        };
        if change.per_second() {
            factor /= range_ms as f64 / 1000.0;
        }
        factor
    }

    /// What the change between the first and last sample is multiplied
    /// by: extrapolated to the range's ends where samples come within
    /// 1.1 average intervals of them, else by half an interval; not past
    /// the point where a counter would reach zero (`zero_point`, the
    /// first value over the change, for float counters).
    pub(super) fn factor(&self, zero_point: Option<f64>, change: Change, range_ms: i64) -> f64 {
        let mut memo = FactorMemo::default();
        let zero_point = zero_point.map_or(ZeroPoint::None, ZeroPoint::Share);
        self.factor_memo(&mut memo, zero_point, change, range_ms)
    }

    /// [`Span::factor`], the same operations on the same numbers, with
    /// the parts that depend only on the window's gaps taken from `memo`
    /// when the last window it saw had the same.
    #[inline(always)]
    pub(crate) fn factor_memo(
        &self,
        memo: &mut FactorMemo,
        zero_point: ZeroPoint,
        change: Change,
        range_ms: i64,
    ) -> f64 {
        let key = [
            self.first_t.wrapping_sub(self.range_start),
            self.range_end.wrapping_sub(self.last_t),
            self.last_t.wrapping_sub(self.first_t),
            self.samples as i64,
            range_ms,
            i64::from(change.per_second()),
        ];
        // Compared field by field: a comparison of the arrays is a call.
        let same = memo
            .key
            .is_some_and(|k| k.iter().zip(&key).all(|(a, b)| a == b));
        if !same {
            let mut to_start = (self.first_t - self.range_start) as f64 / 1000.0;
            let mut to_end = (self.range_end - self.last_t) as f64 / 1000.0;
            let sampled = (self.last_t - self.first_t) as f64 / 1000.0;
            let avg_step = sampled / (self.samples - 1) as f64;
            let threshold = avg_step * 1.1;
            if to_start >= threshold {
                to_start = avg_step / 2.0;
            }
            if to_end >= threshold {
                to_end = avg_step / 2.0;
            }
            *memo = FactorMemo {
                key: Some(key),
                to_start,
                to_end,
                sampled,
                start_share: to_start / sampled,
                plain: Self::finish(sampled, to_start, to_end, change, range_ms),
            };
        }
        let z = match zero_point {
            ZeroPoint::None => return memo.plain,
            // The zero point lies `sampled * first / increase` before the
            // first sample, and cuts the start short only when that is
            // less than `to_start`. Where `first` is at least twice
            // `increase * to_start / sampled`, and that is a normal
            // number, it is not (rounding moves either side by far less
            // than twice), and the division is not done: a counter far
            // above its increase over the window, the common case. (A
            // bound that rounded to zero or below the normal numbers
            // could pass a zero `first`.)
            ZeroPoint::Of(first, increase) => {
                let bound = increase * memo.start_share;
                if bound >= f64::MIN_POSITIVE && first >= 2.0 * bound {
                    return memo.plain;
                }
                first / increase
            }
            ZeroPoint::Share(z) => z,
        };
        let to_zero = memo.sampled * z;
        if to_zero < memo.to_start {
            return Self::finish(memo.sampled, to_zero, memo.to_end, change, range_ms);
        }
        memo.plain
    }

    fn finish(sampled: f64, to_start: f64, to_end: f64, change: Change, range_ms: i64) -> f64 {
        let mut factor = (sampled + to_start + to_end) / sampled;
        if change.per_second() {
            factor /= range_ms as f64 / 1000.0;
        }
        factor
    }
}

/// `rate`, `increase` and `delta` over a window holding histograms
/// (Prometheus' `extrapolatedRate` with `histogramRate`): floats and
/// histograms together give nothing but a warning.
fn hist_extrapolated(ctx: &Ctx<'_>, w: &Window<'_>, change: Change) -> Option<Out> {
    if !w.floats.is_empty() {
        ctx.annotate(Annotation::MixedFloatsHistograms(w.name()));
        return None;
    }
    let (&(first_t, _), &(last_t, _)) = (w.hists.first()?, w.hists.last()?);
    if w.hists.len() < 2 {
        return None;
    }
    let mut h = histogram_rate(ctx, w.hists, change.counter(), w.name())?;
    let span = Span {
        first_t,
        last_t,
        samples: w.hists.len(),
        range_start: w.end - w.range,
        range_end: w.end,
    };
    // v3.14 stops extrapolating where the count would reach zero, from
    // the first sample's count (3.5.3 does not stop).
    let first_count = w.hists[0].1.count;
    let zero_point = (ctx.opts.compat >= Compat::V3_14
        && change.counter()
        && h.count > 0.0
        && first_count >= 0.0)
        .then(|| first_count / h.count);
    h.mul(span.factor(zero_point, change, w.range));
    Some(Out::H(h))
}

/// The increase (counters, resets added back) or change (gauges) of
/// histograms from the first to the last, at the coarsest schema among
/// them; `None` with a warning when their buckets cannot be combined.
fn histogram_rate(
    ctx: &Ctx<'_>,
    points: &[(i64, Hist)],
    counter: bool,
    name: &str,
) -> Option<FloatHistogram> {
    histogram_rate_with(ctx, points, counter, name, None)
}

/// [`histogram_rate`], with each sample's start time when they are read
/// (`use-start-timestamps`): a start after the sample before is a reset.
pub(super) fn histogram_rate_with(
    ctx: &Ctx<'_>,
    points: &[(i64, Hist)],
    counter: bool,
    name: &str,
    starts: Option<&[i64]>,
) -> Option<FloatHistogram> {
    let st = |i: usize| starts.and_then(|s| s.get(i).copied()).unwrap_or(0);
    let st_reset = |i: usize| {
        starts.is_some() && i > 0 && st_reset(st(i - 1), points[i - 1].0, st(i), points[i].0)
    };
    use CounterResetHint::Gauge;
    let (first, last) = (&points.first()?.1, &points.last()?.1);
    if counter && (first.hint == Gauge || last.hint == Gauge) {
        ctx.annotate(Annotation::NativeHistogramNotCounter(name));
    }
    // A reset between the first two: the first is not looked at, so its
    // layout does not matter.
    let zero;
    let mut prev: &FloatHistogram = first;
    if counter {
        if let Some((_, second)) = points.get(1) {
            if st_reset(1) || ctx.hist_reset(second, first) {
                zero = FloatHistogram {
                    schema: second.schema,
                    custom_values: second.custom_values.clone(),
                    ..Default::default()
                };
                prev = &zero;
            }
        }
    }
    let custom = prev.uses_custom_buckets();
    if last.uses_custom_buckets() != custom {
        ctx.annotate(Annotation::MixedExponentialCustom(name));
        return None;
    }
    let mut min_schema = prev.schema.min(last.schema);
    for (_, h) in &points[1..points.len() - 1] {
        if !counter {
            continue;
        }
        if h.hint == Gauge {
            ctx.annotate(Annotation::NativeHistogramNotCounter(name));
        }
        min_schema = min_schema.min(h.schema);
        if h.uses_custom_buckets() != custom {
            ctx.annotate(Annotation::MixedExponentialCustom(name));
            return None;
        }
    }
    let mut h = last.to_schema(min_schema);
    if let Err(e) = ctx.hist_combine(&mut h, prev, true, "subtraction") {
        ctx.annotate(Annotation::incompatible(e, name));
        return None;
    }
    if counter {
        for (i, (_, cur)) in points.iter().enumerate().skip(1) {
            if st_reset(i) || ctx.hist_reset(cur, prev) {
                if let Err(e) = ctx.hist_combine(&mut h, prev, false, "addition") {
                    ctx.annotate(Annotation::incompatible(e, name));
                    return None;
                }
            }
            prev = cur;
        }
    } else if first.hint != Gauge || last.hint != Gauge {
        ctx.annotate(Annotation::NativeHistogramNotGauge(name));
    }
    h.hint = Gauge;
    h.compact();
    Some(h)
}

/// One of the two samples `irate` and `idelta` read: its time, its
/// histogram (none for a float), its float value and its start time (0
/// when it has none).
pub(super) type Last<'w> = (i64, Option<&'w Hist>, f64, i64);

/// The last two samples of a window, floats and histograms together, in
/// time order, with their start times (`fs` and `hs`, one per float and
/// histogram, or empty for none); `None` for fewer than two, or two at one
/// time.
pub(super) fn last_two<'w>(w: &Window<'w>, fs: &[i64], hs: &[i64]) -> Option<(Last<'w>, Last<'w>)> {
    let st = |s: &[i64], i: usize| s.get(i).copied().unwrap_or(0);
    let (nf, nh) = (w.floats.len(), w.hists.len());
    let mut last: Vec<Last<'w>> = (nf.saturating_sub(2)..nf)
        .map(|i| (w.floats[i].0, None, w.floats[i].1, st(fs, i)))
        .chain(
            (nh.saturating_sub(2)..nh).map(|i| (w.hists[i].0, Some(&w.hists[i].1), 0.0, st(hs, i))),
        )
        .collect();
    last.sort_by_key(|x| x.0);
    let [.., a, b] = last.as_slice() else {
        return None;
    };
    (b.0 != a.0).then_some((*a, *b))
}

/// `irate` and `idelta` over a window holding histograms (Prometheus'
/// `instantValue`): the last two samples, whichever kind they are.
fn hist_instant(ctx: &Ctx<'_>, w: &Window<'_>, change: Change) -> Option<Out> {
    use CounterResetHint::Gauge;
    let is_rate = change.per_second();
    let (a, b) = last_two(w, &[], &[])?;
    let dt = b.0 - a.0;
    let name = w.name();
    let mut out = match (a.1, b.1) {
        (None, None) => {
            let d = if is_rate && b.2 < a.2 { b.2 } else { b.2 - a.2 };
            Out::F(d)
        }
        (Some(ha), Some(hb)) => {
            if is_rate && (ha.hint == Gauge || hb.hint == Gauge) {
                ctx.annotate(Annotation::NativeHistogramNotCounter(name));
            }
            if !is_rate && (ha.hint != Gauge || hb.hint != Gauge) {
                ctx.annotate(Annotation::NativeHistogramNotGauge(name));
            }
            let mut h = FloatHistogram::clone(hb);
            if !is_rate || !ctx.hist_reset(hb, ha) {
                if let Err(e) = ctx.hist_combine(&mut h, ha, true, "subtraction") {
                    ctx.annotate(Annotation::incompatible(e, name));
                    return None;
                }
            }
            h.hint = Gauge;
            h.compact();
            Out::H(h)
        }
        _ => {
            ctx.annotate(Annotation::MixedFloatsHistograms(name));
            return None;
        }
    };
    if is_rate {
        let secs = dt as f64 / 1000.0;
        match &mut out {
            Out::F(v) => *v /= secs,
            Out::H(h) => h.div(secs),
        }
    }
    Some(out)
}

/// `irate` ([`Change::Rate`]) and `idelta` ([`Change::Delta`]): from the
/// last two samples.
pub(crate) fn instant_delta(points: &[(i64, f64)], change: Change) -> Option<f64> {
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
pub(crate) fn linear_regression(points: &[(i64, f64)], at: i64) -> (f64, f64) {
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

/// `rate`, `increase` and `delta` over floats or histograms; the counter
/// ones say when a name does not look like a counter's.
fn extrapolated(ctx: &Ctx<'_>, call: &Call, t: i64, change: Change) -> Result<Value, QueryError> {
    if change.counter() {
        note_non_counters(ctx, call, t)?;
    }
    let increase = |p: &[(i64, f64)], inc, r, t, m: &mut FactorMemo| {
        extrapolated_from(p, inc, r, t, change, m)
    };
    let sliding = if change.counter() {
        Sliding::Increase(&increase)
    } else {
        Sliding::No
    };
    over_range_mixed_sliding(
        ctx,
        call,
        t,
        Name::Drop,
        sliding,
        |p, r, t| extrapolated_rate(p, r, t, change),
        |w| hist_extrapolated(ctx, w, change),
    )
}

/// `irate` and `idelta` over floats or histograms.
fn instant(ctx: &Ctx<'_>, call: &Call, t: i64, change: Change) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| instant_delta(p, change),
        |w| hist_instant(ctx, w, change),
    )
}

pub(super) fn rate(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    extrapolated(ctx, call, t, Change::Rate)
}

pub(super) fn increase(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    extrapolated(ctx, call, t, Change::Increase)
}

/// Prometheus' info for `rate`/`increase` over a metric whose name does
/// not end as a counter's does; once per call, for each such name among
/// the series that can give a value (two samples or more).
pub(super) fn note_non_counters(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<(), QueryError> {
    if !ctx.first_time(call as *const Call as usize) {
        return Ok(());
    }
    let names = match arg(call, 0) {
        Some(Expr::MatrixSelector(m)) => {
            ctx.selected_names(&m.vs, &m.range, 2, |n| !looks_like_counter(n))?
        }
        Some(Expr::Subquery(sq)) => {
            let mut names = Vec::new();
            for s in ctx.subquery(sq, t)? {
                if s.points.len() < 2 {
                    continue;
                }
                if let Some(n) = s.labels.iter().find(|l| l.name == "__name__") {
                    if !names.iter().any(|x: &String| *x == n.value) {
                        names.push(n.value.to_string());
                    }
                }
            }
            names
        }
        _ => Vec::new(),
    };
    for n in names.iter().filter(|n| !looks_like_counter(n)) {
        ctx.annotate(Annotation::PossibleNonCounter(n));
    }
    Ok(())
}

pub(super) fn delta(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    extrapolated(ctx, call, t, Change::Delta)
}

pub(super) fn irate(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    instant(ctx, call, t, Change::Rate)
}

pub(super) fn idelta(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    instant(ctx, call, t, Change::Delta)
}

pub(super) fn resets(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| Some(p.windows(2).filter(|w| w[1].1 < w[0].1).count() as f64),
        // A switch between floats and histograms counts as a reset.
        |w| {
            let all = w.merged();
            let n = all.windows(2).filter(|p| match (&p[0].1, &p[1].1) {
                (Err(a), Err(b)) => b < a,
                (Ok(a), Ok(b)) => ctx.hist_reset(b, a),
                _ => true,
            });
            Some(Out::F(n.count() as f64))
        },
    )
}

pub(super) fn changes(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range_mixed(
        ctx,
        call,
        t,
        Name::Drop,
        |p, _, _| {
            Some(
                p.windows(2)
                    .filter(|w| w[1].1 != w[0].1 && !(w[1].1.is_nan() && w[0].1.is_nan()))
                    .count() as f64,
            )
        },
        |w| {
            let all = w.merged();
            let n = all.windows(2).filter(|p| match (&p[0].1, &p[1].1) {
                (Err(a), Err(b)) => b != a && !(a.is_nan() && b.is_nan()),
                (Ok(a), Ok(b)) => !b.same_as(a),
                _ => true,
            });
            Some(Out::F(n.count() as f64))
        },
    )
}

pub(super) fn deriv(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    over_range(ctx, call, t, Name::Drop, |p, _, _| {
        (p.len() >= 2).then(|| linear_regression(p, p[0].0).0)
    })
}

/// Predicts from the evaluation time, not from the window's end: with `@`
/// or `offset` the regression runs over the moved window and is read at
/// the step's own time, as Prometheus' `funcPredictLinear` (`enh.Ts`).
pub(super) fn predict_linear(ctx: &Ctx<'_>, call: &Call, t: i64) -> Result<Value, QueryError> {
    let d = scalar_arg(ctx, call, 1, t)?;
    let moved = match arg(call, 0) {
        Some(Expr::MatrixSelector(m)) => m.vs.at.is_some() || m.vs.offset.is_some(),
        Some(Expr::Subquery(sq)) => sq.at.is_some() || sq.offset.is_some(),
        _ => false,
    };
    // Unmoved, the window's end is the step's time, and steps may go
    // together; moved, each step reads its own `t`.
    let steps = if moved {
        Steps::OneByOne
    } else {
        Steps::Together
    };
    over_range_with(ctx, call, t, Name::Drop, steps, |p, _, end| {
        let at = if moved { t } else { end };
        (p.len() >= 2).then(|| {
            let (slope, intercept) = linear_regression(p, at);
            slope * d + intercept
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A factor taken with the memo of earlier windows is the one
        /// the formula before the memo gives, bit for bit: windows with the same gaps (drawn
        /// from few so that they repeat), with zero points that cut the
        /// start short or not, of rates and increases.
        #[test]
        fn memoised_factors_are_fresh_ones(
            windows in proptest::collection::vec(
                (
                    0i64..4,
                    0i64..4,
                    2usize..5,
                    proptest::option::of((
                        proptest::prop_oneof![proptest::strategy::Just(0.0f64), 0.0f64..4.0],
                        proptest::prop_oneof![
                            5e-324f64..1e-320,
                            1e-310f64..1e-300,
                            1e-3f64..1e3,
                            1e300f64..1e308,
                        ],
                        0u8..4,
                        -8i32..8,
                    )),
                    proptest::bool::ANY,
                    0i64..2,
                ),
                1..60,
            ),
        ) {
            // Span::factor as it was before the memo, step by step.
            let reference = |s: &Span, zero_point: Option<f64>, change: Change, range_ms: i64| {
                let mut to_start = (s.first_t - s.range_start) as f64 / 1000.0;
                let mut to_end = (s.range_end - s.last_t) as f64 / 1000.0;
                let sampled = (s.last_t - s.first_t) as f64 / 1000.0;
                let avg_step = sampled / (s.samples - 1) as f64;
                let threshold = avg_step * 1.1;
                if to_start >= threshold {
                    to_start = avg_step / 2.0;
                }
                if let Some(z) = zero_point {
                    let to_zero = sampled * z;
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
                factor
            };
            let mut memo = FactorMemo::default();
            for (start_gap, end_gap, samples, zero, rate, range) in windows {
                let range_ms = 300_000 + range * 60_000;
                let range_end = 1_000_000;
                let range_start = range_end - range_ms;
                // Gaps up to past 1.1 average intervals (so that the start
                // is also taken as half an interval).
                let first_t = range_start + 1 + start_gap * 40_000;
                let last_t = range_end - end_gap * 30_000;
                let span = Span { first_t, last_t, samples, range_start, range_end };
                let change = if rate { Change::Rate } else { Change::Increase };
                // The share of the sampled interval the start lies at,
                // as the memo keeps it.
                let sampled = (last_t - first_t) as f64 / 1000.0;
                let avg_step = sampled / (samples - 1) as f64;
                let mut to_start = (first_t - range_start) as f64 / 1000.0;
                if to_start >= avg_step * 1.1 {
                    to_start = avg_step / 2.0;
                }
                let start_share = to_start / sampled;
                // A zero point as a share, or as the first value and the
                // increase it is divided from (where the division may be
                // skipped): shares drawn at large, zero among them, a few
                // ulps either side of where they start to cut the start
                // short, and at the skip's own bound and one ulp under
                // it; with increases from the least subnormal to near the
                // greatest number.
                let (zero, share) = match zero {
                    None => (ZeroPoint::None, None),
                    Some((z, _, 0, _)) => (ZeroPoint::Share(z), Some(z)),
                    Some((z, increase, how, k)) => {
                        let first = match how {
                            1 => z * increase,
                            2 => start_share * (1.0 + f64::from(k) * f64::EPSILON) * increase,
                            _ => {
                                let bound = 2.0 * (increase * start_share);
                                if k < 0 && bound > 0.0 && bound.is_finite() {
                                    f64::from_bits(bound.to_bits() - 1)
                                } else {
                                    bound
                                }
                            }
                        };
                        (ZeroPoint::Of(first, increase), Some(first / increase))
                    }
                };
                let fresh = reference(&span, share, change, range_ms);
                let memoised = span.factor_memo(&mut memo, zero, change, range_ms);
                proptest::prop_assert_eq!(fresh.to_bits(), memoised.to_bits());
                proptest::prop_assert_eq!(fresh.to_bits(), span.factor(share, change, range_ms).to_bits());
            }
        }
    }

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
}
