//! Leaf: the float statistics PromQL's aggregations and functions share,
//! computed the way Prometheus computes them. Pure over plain values; it
//! names nothing else of the engine.

/// Kahan-compensated running sum, as Prometheus sums.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Kahan {
    sum: f64,
    c: f64,
}

impl Kahan {
    pub(crate) const ZERO: Self = Self { sum: 0.0, c: 0.0 };

    /// Adds `v`.
    pub(crate) fn add(&mut self, v: f64) {
        let t = self.sum + v;
        if t.is_infinite() {
            self.c = 0.0;
        } else if self.sum.abs() >= v.abs() {
            self.c += (self.sum - t) + v;
        } else {
            self.c += (v - t) + self.sum;
        }
        self.sum = t;
    }

    /// The compensated sum.
    pub(crate) fn value(&self) -> f64 {
        if self.sum.is_infinite() {
            self.sum
        } else {
            self.sum + self.c
        }
    }
}

/// A counter's increase over `points` (at least one), as Prometheus'
/// `extrapolatedRate` adds it up: the last value less the first, then the
/// value before each reset (a value below the one before it), in order.
pub(crate) fn counter_increase(points: &[(i64, f64)]) -> f64 {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return 0.0;
    };
    let mut result = last.1 - first.1;
    let mut prev = first.1;
    for &(_, v) in &points[1..] {
        if v < prev {
            result += prev;
        }
        prev = v;
    }
    result
}

/// The positions of a series' resets (`i` where `points[i]` is below
/// `points[i - 1]`), into `out`, for [`counter_increase_in`].
pub(crate) fn counter_resets(points: &[(i64, f64)], out: &mut Vec<usize>) {
    out.clear();
    // Resets are rare: a block of pairs is tested without a branch per
    // pair, and only a block holding one is looked into.
    const BLOCK: usize = 16;
    let mut from = 1;
    while from < points.len() {
        let to = (from + BLOCK).min(points.len());
        let pairs = || points[from - 1..to].windows(2);
        if pairs().fold(false, |any, w| any | (w[1].1 < w[0].1)) {
            out.extend(
                (from..to)
                    .zip(pairs())
                    .filter(|(_, w)| w[1].1 < w[0].1)
                    .map(|(i, _)| i),
            );
        }
        from = to;
    }
}

/// [`counter_increase`] of the window `points[lo..hi]` (`lo < hi`) of a
/// series whose resets are `resets` ([`counter_resets`]): the same
/// additions in the same order, so the same bits, but only the resets
/// inside the window are visited. `from` is where to start looking in
/// `resets` and is left at the first reset at or after `lo + 1`: windows
/// visited in time order move it forward only.
#[inline]
pub(crate) fn counter_increase_in(
    points: &[(i64, f64)],
    lo: usize,
    hi: usize,
    resets: &[usize],
    from: &mut usize,
) -> f64 {
    let mut result = points[hi - 1].1 - points[lo].1;
    while *from < resets.len() && resets[*from] <= lo {
        *from += 1;
    }
    for &r in &resets[*from..] {
        if r >= hi {
            break;
        }
        result += points[r - 1].1;
    }
    result
}

/// `max_over_time` or `min_over_time` of windows that move forward over
/// a series: a queue of the positions that can still be a later window's
/// answer, so each sample is taken in and dropped once. The answer is
/// Prometheus' fold (`if m.is_nan() || v > m { m = v }` from NaN): the
/// first of the window's greatest (least) numbers, NaN when it holds
/// nothing else.
#[derive(Debug, Default)]
pub(crate) struct SlidingExtreme {
    queue: Vec<usize>,
    front: usize,
    /// Positions before this have been offered.
    next: usize,
}

impl SlidingExtreme {
    /// Ready for a new series' windows, the first starting at `lo`.
    pub(crate) fn reset(&mut self, lo: usize) {
        self.queue.clear();
        self.front = 0;
        self.next = lo;
    }

    /// The answer over `values[lo..hi]` (`lo < hi`), both bounds at or
    /// past the last call's.
    pub(crate) fn window(&mut self, values: &[(i64, f64)], lo: usize, hi: usize, max: bool) -> f64 {
        self.next = self.next.max(lo);
        while self.next < hi {
            let v = values[self.next].1;
            if !v.is_nan() {
                // Earlier numbers a later one beats can never be the
                // answer again; an equal earlier one stays first.
                while self.queue.len() > self.front {
                    let back = values[self.queue[self.queue.len() - 1]].1;
                    if (max && back < v) || (!max && back > v) {
                        self.queue.pop();
                    } else {
                        break;
                    }
                }
                self.queue.push(self.next);
            }
            self.next += 1;
        }
        while self.front < self.queue.len() && self.queue[self.front] < lo {
            self.front += 1;
        }
        match self.queue.get(self.front) {
            Some(&i) => values[i].1,
            None => f64::NAN,
        }
    }
}

/// The last window's extrapolation factor and the parts it was worked
/// out from (`Span::factor_memo` in functions/rate.rs). The factor is a
/// function of the window's gaps in whole milliseconds, its sample count
/// and range; windows of a series scraped at a regular interval, taken at
/// a regular step, mostly share them, so the same divisions are not done
/// again for each (they were most of a `rate` window's cost).
#[derive(Debug, Default)]
pub(crate) struct FactorMemo {
    /// To the range's start, to its end, first to last sample, samples,
    /// range, and whether it is a rate.
    pub(crate) key: Option<[i64; 6]>,
    /// Seconds from the range's start (extrapolated or not), to its end,
    /// and between the first and last samples.
    pub(crate) to_start: f64,
    pub(crate) to_end: f64,
    pub(crate) sampled: f64,
    /// `to_start / sampled`.
    pub(crate) start_share: f64,
    /// The factor when no zero point cuts the start short.
    pub(crate) plain: f64,
}

/// Prometheus' fold for `max_over_time` (`max`) and `min_over_time`:
/// `if m.is_nan() || v > m { m = v }` from NaN, in order, so the first of
/// the greatest (least) numbers, or the last NaN when there is nothing
/// else.
pub(crate) fn fold_extreme(p: &[(i64, f64)], max: bool) -> f64 {
    p.iter().fold(f64::NAN, |m, &(_, v)| {
        let better = if max { v > m } else { v < m };
        if m.is_nan() || better {
            v
        } else {
            m
        }
    })
}

/// [`fold_extreme`], bit for bit, in four independent lanes: a lane
/// starts at the infinity every number beats or equals, and a NaN never
/// wins a comparison, so it is passed over. Equal numbers other than zero
/// have the same bits, so which of them wins cannot show; when the answer
/// is a zero (-0 and +0 are equal but differ) or the starting infinity
/// (the window may hold only NaNs), the ordered fold decides.
pub(crate) fn extreme_of(p: &[(i64, f64)], max: bool) -> f64 {
    #[inline(always)]
    fn lanes<const MAX: bool>(p: &[(i64, f64)]) -> f64 {
        let start = if MAX {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        let pick = |a: f64, v: f64| {
            let better = if MAX { v > a } else { v < a };
            if better {
                v
            } else {
                a
            }
        };
        let mut acc = [start; 4];
        let mut quads = p.chunks_exact(4);
        for q in &mut quads {
            for (a, x) in acc.iter_mut().zip(q) {
                *a = pick(*a, x.1);
            }
        }
        let mut m = pick(pick(acc[0], acc[1]), pick(acc[2], acc[3]));
        for x in quads.remainder() {
            m = pick(m, x.1);
        }
        m
    }
    let m = if max {
        lanes::<true>(p)
    } else {
        lanes::<false>(p)
    };
    if m == 0.0
        || m == if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        }
    {
        return fold_extreme(p, max);
    }
    m
}

/// The running mean Prometheus 3 takes for `avg` and `avg_over_time`: a
/// compensated sum divided at the end while the sum stays finite; once it
/// would overflow, a compensated incremental mean from there on, which
/// keeps an infinite mean rather than turning it into NaN with `Inf - Inf`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Mean {
    sum: f64,
    mean: f64,
    c: f64,
    count: f64,
    incremental: bool,
}

/// Prometheus' `kahanSumInc`: `sum + inc` with Neumaier's compensation.
fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}

impl Mean {
    pub(crate) const ZERO: Self = Self {
        sum: 0.0,
        mean: 0.0,
        c: 0.0,
        count: 0.0,
        incremental: false,
    };

    /// Adds `f`.
    pub(crate) fn add(&mut self, f: f64) {
        self.count += 1.0;
        if !self.incremental {
            let (sum, c) = kahan_inc(f, self.sum, self.c);
            // The first value is taken as it is, even when infinite.
            if self.count == 1.0 || !sum.is_infinite() {
                (self.sum, self.c) = (sum, c);
                return;
            }
            self.incremental = true;
            self.mean = self.sum / (self.count - 1.0);
            self.c /= self.count - 1.0;
        }
        if self.mean.is_infinite() {
            // An infinite mean stays: the step below would be Inf - Inf.
            if f.is_infinite() && (self.mean > 0.0) == (f > 0.0) {
                return;
            }
            if !f.is_infinite() && !f.is_nan() {
                return;
            }
        }
        let current = self.mean + self.c;
        (self.mean, self.c) = kahan_inc(f / self.count - current / self.count, self.mean, self.c);
    }

    /// The mean of what was added (NaN if nothing was).
    pub(crate) fn value(&self) -> f64 {
        if self.incremental {
            self.mean + self.c
        } else {
            (self.sum + self.c) / self.count
        }
    }
}

/// The mean of `values` as [`Mean`] takes it.
pub(crate) fn mean_of(values: impl Iterator<Item = f64>) -> f64 {
    let mut m = Mean::default();
    values.for_each(|v| m.add(v));
    m.value()
}

/// The means of four windows of `points` (none empty), as [`mean_of`]
/// takes each, to the bit: the four compensated sums run side by side
/// (each its own additions in its own order), so that their chains of
/// dependent additions overlap instead of waiting on one another. Where
/// a sum meets an infinity, [`Mean`] would go on differently (or keep the
/// first value): those windows are worked out by [`mean_of`].
pub(crate) fn means_of_4(points: &[(i64, f64)], windows: [(usize, usize); 4]) -> [f64; 4] {
    let n = windows.iter().map(|&(lo, hi)| hi - lo).min().unwrap_or(0);
    let lane = |l: usize| &points[windows[l].0..windows[l].1];
    let (w0, w1, w2, w3) = (lane(0), lane(1), lane(2), lane(3));
    let mut sum = [0.0f64; 4];
    let mut c = [0.0f64; 4];
    let mut infinite = false;
    // Prometheus' `kahanSumInc`, one step of each lane.
    let add = |sum: &mut f64, c: &mut f64, v: f64| {
        let t = *sum + v;
        *c += if sum.abs() >= v.abs() {
            (*sum - t) + v
        } else {
            (v - t) + *sum
        };
        *sum = t;
        t.is_infinite()
    };
    for (((a, b), d), e) in w0[..n].iter().zip(&w1[..n]).zip(&w2[..n]).zip(&w3[..n]) {
        let [s0, s1, s2, s3] = &mut sum;
        let [c0, c1, c2, c3] = &mut c;
        infinite |= add(s0, c0, a.1);
        infinite |= add(s1, c1, b.1);
        infinite |= add(s2, c2, d.1);
        infinite |= add(s3, c3, e.1);
    }
    let mut out = [0.0; 4];
    for (l, w) in [w0, w1, w2, w3].into_iter().enumerate() {
        for p in &w[n..] {
            infinite |= add(&mut sum[l], &mut c[l], p.1);
        }
        out[l] = (sum[l] + c[l]) / w.len() as f64;
    }
    if infinite {
        for (l, w) in [w0, w1, w2, w3].into_iter().enumerate() {
            out[l] = mean_of(w.iter().map(|p| p.1));
        }
    }
    out
}

/// Mean and population variance by Welford's method, as Prometheus
/// computes `stddev`/`stdvar` and their `_over_time` forms.
/// Whether `a` and `b` differ by less than `epsilon` relative to their
/// size (Prometheus' `almost.Equal`): NaN equals NaN; next to zero, the
/// difference must be below `epsilon` times the smallest normal float.
pub fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    if a.is_nan() && b.is_nan() {
        return true;
    }
    if a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < f64::MIN_POSITIVE {
        return diff < epsilon * f64::MIN_POSITIVE;
    }
    diff / abs_sum.min(f64::MAX) < epsilon
}

pub(crate) fn mean_and_variance(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let (mut count, mut mean, mut m2) = (0.0, 0.0, 0.0);
    for v in values {
        count += 1.0;
        let delta = v - mean;
        mean += delta / count;
        m2 += delta * (v - mean);
    }
    (mean, m2 / count)
}

/// Prometheus' `quantile` over plain values (linear interpolation).
pub fn quantile(q: f64, values: &mut [f64]) -> f64 {
    if values.is_empty() || q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    // NaN sorts lowest, as in Prometheus' value heap.
    values.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) => a.total_cmp(b),
    });
    let n = values.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0) as usize;
    let upper = (rank.floor() + 1.0).min(n - 1.0) as usize;
    let weight = rank - rank.floor();
    values[lower] * (1.0 - weight) + values[upper] * weight
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    fn mean(values: &[f64]) -> f64 {
        let mut m = Mean::default();
        values.iter().for_each(|&v| m.add(v));
        m.value()
    }

    #[test]
    fn means_compensate_and_survive_overflow() {
        assert_eq!(mean(&[1.0, 1e100, 1.0, -1e100]), 0.5);
        assert_eq!(mean(&[f64::INFINITY, 1.0]), f64::INFINITY);
        assert_eq!(mean(&[1.0, f64::NEG_INFINITY, 2.0]), f64::NEG_INFINITY);
        assert_eq!(mean(&[f64::MAX, f64::MAX, f64::MAX]), f64::MAX);
        assert_eq!(mean(&[f64::MAX, -f64::MAX]), 0.0);
        assert!(mean(&[f64::INFINITY, f64::NEG_INFINITY]).is_nan());
        assert!(mean(&[1.0, f64::NAN]).is_nan());
        assert!(mean(&[]).is_nan());
        assert_eq!(mean(&[2.0, 4.0]), 3.0);
    }

    #[test]
    fn a_nan_sorts_lowest_in_quantile() {
        assert!(quantile(0.0, &mut [3.0, f64::NAN, 1.0]).is_nan());
        assert_eq!(quantile(1.0, &mut [3.0, f64::NAN, 1.0]), 3.0);
        assert_eq!(quantile(0.5, &mut [3.0, f64::NAN, 1.0]), 1.0);
    }

    #[test]
    fn quantiles_interpolate_and_handle_edges() {
        assert_eq!(quantile(0.5, &mut [1.0, 2.0, 3.0, 4.0]), 2.5);
        assert_eq!(quantile(0.0, &mut [3.0, 1.0]), 1.0);
        assert_eq!(quantile(1.0, &mut [3.0, 1.0]), 3.0);
        assert_eq!(quantile(1.5, &mut [1.0]), f64::INFINITY);
        assert_eq!(quantile(-1.0, &mut [1.0]), f64::NEG_INFINITY);
        assert!(quantile(0.5, &mut []).is_nan());
    }

    #[test]
    fn welford_gives_the_population_variance() {
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert_eq!(mean_and_variance(v), (5.0, 4.0));
    }

    proptest::proptest! {
        /// Sliding extremes and the four-lane fold are the ordered fold over
        /// each window, bit for bit
        /// (NaNs, infinities and signed zeros among the values).
        #[test]
        fn sliding_extremes_are_the_fold(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    (-5i32..5).prop_map(f64::from),
                    proptest::strategy::Just(f64::NAN),
                    proptest::strategy::Just(f64::INFINITY),
                    proptest::strategy::Just(f64::NEG_INFINITY),
                    proptest::strategy::Just(-0.0),
                ],
                1..80,
            ),
            width in 1usize..30,
            stride in 1usize..5,
            max in proptest::prelude::any::<bool>(),
        ) {
            let points: Vec<(i64, f64)> =
                values.iter().enumerate().map(|(i, &v)| (i as i64, v)).collect();
            let mut sliding = SlidingExtreme::default();
            sliding.reset(0);
            let mut hi = 1usize;
            while hi <= points.len() {
                let lo = hi.saturating_sub(width);
                let fold = fold_extreme(&points[lo..hi], max);
                let got = sliding.window(&points, lo, hi, max);
                proptest::prop_assert_eq!(fold.to_bits(), got.to_bits(), "{:?} {} {}", &points[lo..hi], lo, hi);
                let lanes = extreme_of(&points[lo..hi], max);
                proptest::prop_assert_eq!(fold.to_bits(), lanes.to_bits(), "{:?}", &points[lo..hi]);
                hi += stride;
            }
        }
    }

    proptest::proptest! {
        /// Four windows' means taken side by side are each window's
        /// [`Mean`], bit for bit: windows of different lengths, values
        /// that cancel, overflow the sum, or are infinite, NaN or -0.
        #[test]
        fn four_means_side_by_side_are_each_mean(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    6 => -1e3f64..1e3,
                    1 => (-3i32..3).prop_map(|e| 1e308 * f64::from(e)),
                    1 => proptest::strategy::Just(f64::NAN),
                    1 => proptest::strategy::Just(f64::INFINITY),
                    1 => proptest::strategy::Just(f64::NEG_INFINITY),
                    1 => proptest::strategy::Just(-0.0),
                ],
                1..120,
            ),
            windows in proptest::collection::vec((0usize..120, 1usize..40), 4),
        ) {
            let points: Vec<(i64, f64)> =
                values.iter().enumerate().map(|(i, &v)| (i as i64, v)).collect();
            let n = points.len();
            let w: Vec<(usize, usize)> = windows
                .iter()
                .map(|&(lo, len)| (lo % n, (lo % n + len).min(n)))
                .collect();
            let got = means_of_4(&points, [w[0], w[1], w[2], w[3]]);
            for (l, &(lo, hi)) in w.iter().enumerate() {
                let want = mean(&values[lo..hi]);
                proptest::prop_assert_eq!(
                    want.to_bits(), got[l].to_bits(), "{:?}: {} against {}", &values[lo..hi], want, got[l]
                );
            }
        }
    }

    proptest::proptest! {
        /// The indexed increase of every window is the plain one, bit for
        /// bit, with the windows visited in time order.
        #[test]
        fn an_indexed_increase_is_the_plain_one(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    0.0f64..100.0,
                    proptest::strategy::Just(f64::NAN),
                    proptest::strategy::Just(f64::INFINITY),
                    proptest::strategy::Just(-0.0),
                ],
                1..80,
            ),
            width in 1usize..30,
        ) {
            let points: Vec<(i64, f64)> =
                values.iter().enumerate().map(|(i, &v)| (i as i64, v)).collect();
            let mut resets = Vec::new();
            counter_resets(&points, &mut resets);
            let plain: Vec<usize> = (1..points.len())
                .filter(|&i| points[i].1 < points[i - 1].1)
                .collect();
            proptest::prop_assert_eq!(&resets, &plain);
            let mut from = 0;
            for hi in 1..=points.len() {
                let lo = hi.saturating_sub(width);
                let plain = counter_increase(&points[lo..hi]);
                let indexed = counter_increase_in(&points, lo, hi, &resets, &mut from);
                proptest::prop_assert_eq!(plain.to_bits(), indexed.to_bits());
            }
        }
    }

    #[test]
    fn kahan_keeps_what_a_plain_sum_loses() {
        let mut k = Kahan::default();
        for v in [1.0, 1e100, 1.0, -1e100] {
            k.add(v);
        }
        assert_eq!(k.value(), 2.0);
        let mut inf = Kahan::default();
        inf.add(f64::INFINITY);
        inf.add(1.0);
        assert_eq!(inf.value(), f64::INFINITY);
    }
}

/// The reset hints met among histograms added together: Prometheus v3.14
/// warns of conflicting counter resets when one is marked a reset and
/// another not (gauges and unknown hints count for neither).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ResetHintsSeen {
    reset: bool,
    not_reset: bool,
}

impl ResetHintsSeen {
    /// Notes one histogram's hint.
    pub(crate) fn note(&mut self, hint: crate::histogram::CounterResetHint) {
        use crate::histogram::CounterResetHint as H;
        match hint {
            H::CounterReset => self.reset = true,
            H::NotCounterReset => self.not_reset = true,
            H::Unknown | H::Gauge => {}
        }
    }

    /// Whether both were met.
    pub(crate) fn conflict(&self) -> bool {
        self.reset && self.not_reset
    }
}

/// The count and the sum of observations of histograms added together,
/// with compensated (Kahan) summation, as Prometheus v3.14 adds them in
/// `sum`, `avg`, `sum_over_time` and `avg_over_time`: `1e100 + 1 - 1e100`
/// of the sums is 1, not 0. The buckets are added as the histograms are.
#[derive(Debug, Default)]
pub(crate) struct HistogramTotals {
    count: Kahan,
    sum: Kahan,
    n: f64,
    /// Whether an input's count or sum was itself infinite (an observed
    /// infinity), where the total is right and the running mean NaN.
    infinite_input: bool,
}

impl HistogramTotals {
    /// Adds one histogram's totals.
    pub(crate) fn add(&mut self, h: &crate::histogram::FloatHistogram) {
        self.count.add(h.count);
        self.sum.add(h.sum);
        self.n += 1.0;
        self.infinite_input |= h.count.is_infinite() || h.sum.is_infinite();
    }

    /// Puts the compensated totals into `acc`, the histograms' sum (or,
    /// `mean`, their mean). A total past the float range keeps what `acc`
    /// holds (a mean taken step by step stays finite).
    pub(crate) fn apply(&self, acc: &mut crate::histogram::FloatHistogram, mean: bool) {
        let div = if mean { self.n } else { 1.0 };
        for (total, field) in [(&self.count, &mut acc.count), (&self.sum, &mut acc.sum)] {
            // Past the float range from finite inputs, the running mean
            // stays (it does not overflow); from an infinite input the
            // total is the answer.
            let v = total.value();
            if v.is_finite() || !mean || self.infinite_input {
                *field = v / div;
            }
        }
    }
}
