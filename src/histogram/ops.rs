//! Arithmetic on float histograms as PromQL needs it, with Prometheus'
//! rules (`model/histogram/float_histogram.go`): adding and subtracting
//! reconcile schemas (down to the coarser one) and zero buckets (widened
//! until no populated bucket straddles the threshold); reset detection
//! compares bucket by bucket; bucket bounds come from [`super::bounds`].
//!
//! Buckets are handled here as `(index, count)` lists in index order, and
//! spans are rebuilt from them: a result's spans may be cut differently
//! from the Go code's, but they describe the same buckets with the same
//! counts, which is all a query's answer shows.

use super::bounds;
use super::{CounterResetHint, FloatHistogram, Span, CUSTOM_BUCKETS_SCHEMA};

/// Why two histograms cannot be added or subtracted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incompatible {
    /// One has custom bounds and the other exponential buckets.
    Schema,
    /// Both have custom bounds, but not the same ones.
    Bounds,
}

/// One bucket with its bounds, as Prometheus' bucket iterators give it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// The lower bound.
    pub lower: f64,
    /// The upper bound.
    pub upper: f64,
    /// Whether `lower` itself falls in the bucket.
    pub lower_inclusive: bool,
    /// Whether `upper` itself falls in the bucket.
    pub upper_inclusive: bool,
    /// The observations in it.
    pub count: f64,
}

impl Bucket {
    /// The API's boundary rule: 0 upper inclusive only, 1 lower inclusive
    /// only, 2 neither, 3 both.
    pub fn boundary_rule(&self) -> u8 {
        match (self.lower_inclusive, self.upper_inclusive) {
            (true, true) => 3,
            (true, false) => 1,
            (false, false) => 2,
            (false, true) => 0,
        }
    }
}

/// `(index, count)` of every bucket the spans cover, in index order.
fn indexed(spans: &[Span], counts: &[f64]) -> Vec<(i32, f64)> {
    let mut out = Vec::with_capacity(counts.len());
    let mut idx = 0i32;
    let mut counts = counts.iter();
    for (n, s) in spans.iter().enumerate() {
        idx = if n == 0 {
            s.offset
        } else {
            idx.saturating_add(s.offset)
        };
        for _ in 0..s.length {
            let Some(&c) = counts.next() else {
                return out;
            };
            out.push((idx, c));
            idx = idx.saturating_add(1);
        }
    }
    out
}

/// Spans and counts for buckets in index order (one span per run of
/// consecutive indexes).
fn from_indexed(buckets: &[(i32, f64)]) -> (Vec<Span>, Vec<f64>) {
    let mut spans: Vec<Span> = Vec::new();
    let mut counts = Vec::with_capacity(buckets.len());
    let mut next = 0i32;
    for &(idx, c) in buckets {
        match spans.last_mut() {
            Some(s) if idx == next => s.length += 1,
            Some(_) => spans.push(Span {
                offset: idx - next,
                length: 1,
            }),
            None => spans.push(Span {
                offset: idx,
                length: 1,
            }),
        }
        next = idx.saturating_add(1);
        counts.push(c);
    }
    (spans, counts)
}

/// The index in `target` (≤ `schema`) of bucket `idx` of `schema`.
fn target_index(idx: i32, schema: i32, target: i32) -> i32 {
    (idx.saturating_sub(1) >> (schema - target).clamp(0, 31)) + 1
}

/// Buckets merged down to schema `target`, counts of a merged bucket summed.
fn downscaled(buckets: Vec<(i32, f64)>, schema: i32, target: i32) -> Vec<(i32, f64)> {
    if target >= schema {
        return buckets;
    }
    let mut out: Vec<(i32, f64)> = Vec::with_capacity(buckets.len());
    for (idx, c) in buckets {
        let t = target_index(idx, schema, target);
        match out.last_mut() {
            Some(last) if last.0 == t => last.1 += c,
            _ => out.push((t, c)),
        }
    }
    out
}

/// `a` plus (or minus) `b`, both in index order.
fn merge(a: &[(i32, f64)], b: &[(i32, f64)], negate: bool) -> Vec<(i32, f64)> {
    let sign = if negate { -1.0 } else { 1.0 };
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x.0 == y.0 => {
                out.push((x.0, x.1 + sign * y.1));
                i += 1;
                j += 1;
            }
            (Some(&x), Some(&y)) if x.0 < y.0 => {
                out.push(x);
                i += 1;
            }
            (Some(&x), None) => {
                out.push(x);
                i += 1;
            }
            (_, Some(&y)) => {
                out.push((y.0, sign * y.1));
                j += 1;
            }
            (None, None) => break,
        }
    }
    out
}

impl FloatHistogram {
    fn positive(&self) -> Vec<(i32, f64)> {
        indexed(&self.positive_spans, &self.positive_buckets)
    }

    fn negative(&self) -> Vec<(i32, f64)> {
        indexed(&self.negative_spans, &self.negative_buckets)
    }

    fn set_positive(&mut self, buckets: &[(i32, f64)]) {
        (self.positive_spans, self.positive_buckets) = from_indexed(buckets);
    }

    fn set_negative(&mut self, buckets: &[(i32, f64)]) {
        (self.negative_spans, self.negative_buckets) = from_indexed(buckets);
    }

    fn bound(&self, idx: i32) -> f64 {
        bounds::upper(idx, self.schema, &self.custom_values)
    }

    /// The histogram on the line from `a` to `b` at `t` (times in ms); for
    /// a counter that reset between them, `b` scaled from 0 (Prometheus'
    /// `interpolateHistograms`).
    pub fn interpolate(
        (t1, h1): (i64, &FloatHistogram),
        (t2, h2): (i64, &FloatHistogram),
        t: i64,
        counter: bool,
    ) -> Result<FloatHistogram, Incompatible> {
        if t == t1 {
            return Ok(h1.clone());
        }
        if t == t2 {
            return Ok(h2.clone());
        }
        let fraction = (t - t1) as f64 / (t2 - t1) as f64;
        let mut r = h2.clone();
        if counter && h2.detect_reset(h1) {
            r.mul(fraction);
            return Ok(r);
        }
        r.sub(h1)?;
        r.mul(fraction);
        r.add(h1)?;
        Ok(r)
    }

    /// Every count scaled by `factor` (Prometheus' `Mul`).
    pub fn mul(&mut self, factor: f64) {
        self.zero_count *= factor;
        self.count *= factor;
        self.sum *= factor;
        self.positive_buckets.iter_mut().for_each(|c| *c *= factor);
        self.negative_buckets.iter_mut().for_each(|c| *c *= factor);
    }

    /// Every count divided by `divisor`; dividing by zero leaves no
    /// buckets (Prometheus' `Div`).
    pub fn div(&mut self, divisor: f64) {
        self.zero_count /= divisor;
        self.count /= divisor;
        self.sum /= divisor;
        if divisor == 0.0 {
            self.positive_buckets.clear();
            self.negative_buckets.clear();
            self.positive_spans.clear();
            self.negative_spans.clear();
            return;
        }
        self.positive_buckets.iter_mut().for_each(|c| *c /= divisor);
        self.negative_buckets.iter_mut().for_each(|c| *c /= divisor);
    }

    /// Drops empty buckets (Prometheus' `Compact(0)`).
    pub fn compact(&mut self) {
        if !self.positive_buckets.contains(&0.0)
            && !self.negative_buckets.contains(&0.0)
            && self.positive_spans.iter().skip(1).all(|s| s.offset > 0)
            && self.negative_spans.iter().skip(1).all(|s| s.offset > 0)
            && self.positive_spans.iter().all(|s| s.length > 0)
            && self.negative_spans.iter().all(|s| s.length > 0)
        {
            return;
        }
        let mut p = self.positive();
        p.retain(|&(_, c)| c != 0.0);
        self.set_positive(&p);
        let mut n = self.negative();
        n.retain(|&(_, c)| c != 0.0);
        self.set_negative(&n);
    }

    /// The same histogram at a coarser schema (`target` ≤ the schema);
    /// custom buckets and finer targets are left as they are.
    pub fn to_schema(&self, target: i32) -> FloatHistogram {
        let mut h = self.clone();
        if self.uses_custom_buckets() || target >= self.schema {
            return h;
        }
        h.set_positive(&downscaled(self.positive(), self.schema, target));
        h.set_negative(&downscaled(self.negative(), self.schema, target));
        h.schema = target;
        h
    }

    /// Adds `other` (Prometheus' `Add`); the result may hold empty
    /// buckets until [`FloatHistogram::compact`].
    pub fn add(&mut self, other: &FloatHistogram) -> Result<(), Incompatible> {
        self.combine(other, false)
    }

    /// Subtracts `other` (Prometheus' `Sub`).
    pub fn sub(&mut self, other: &FloatHistogram) -> Result<(), Incompatible> {
        self.combine(other, true)
    }

    /// Adds `other` as Prometheus v3.14 does: custom-bucket histograms
    /// with different bounds are first brought to the bounds both have
    /// (each bucket folded into the first common bound at or above its
    /// own, or +Inf). Returns whether that happened.
    pub fn add_reconciling(&mut self, other: &FloatHistogram) -> Result<bool, Incompatible> {
        self.combine_reconciling(other, false)
    }

    /// Subtracts `other` as [`FloatHistogram::add_reconciling`] adds.
    pub fn sub_reconciling(&mut self, other: &FloatHistogram) -> Result<bool, Incompatible> {
        self.combine_reconciling(other, true)
    }

    fn combine_reconciling(
        &mut self,
        other: &FloatHistogram,
        negate: bool,
    ) -> Result<bool, Incompatible> {
        if !(self.uses_custom_buckets()
            && other.uses_custom_buckets()
            && !same_floats(&self.custom_values, &other.custom_values))
        {
            return self.combine(other, negate).map(|()| false);
        }
        let common = common_bounds(&self.custom_values, &other.custom_values);
        let mut slots = vec![0.0; common.len() + 1];
        fold_into(
            &mut slots,
            &self.positive(),
            &self.custom_values,
            &common,
            1.0,
        );
        let sign = if negate { -1.0 } else { 1.0 };
        fold_into(
            &mut slots,
            &other.positive(),
            &other.custom_values,
            &common,
            sign,
        );
        if !negate {
            self.hint = added_hint(self.hint, other.hint);
        }
        self.count += sign * other.count;
        self.sum += sign * other.sum;
        self.custom_values = common;
        let buckets: Vec<(i32, f64)> = slots
            .into_iter()
            .enumerate()
            .filter(|&(_, c)| c != 0.0)
            .map(|(i, c)| (i32::try_from(i).unwrap_or(i32::MAX), c))
            .collect();
        self.set_positive(&buckets);
        Ok(true)
    }

    fn combine(&mut self, other: &FloatHistogram, negate: bool) -> Result<(), Incompatible> {
        if self.uses_custom_buckets() != other.uses_custom_buckets() {
            return Err(Incompatible::Schema);
        }
        if self.uses_custom_buckets() && !same_floats(&self.custom_values, &other.custom_values) {
            return Err(Incompatible::Bounds);
        }
        let sign = if negate { -1.0 } else { 1.0 };
        if !negate {
            self.hint = added_hint(self.hint, other.hint);
        }
        if !self.uses_custom_buckets() {
            let other_zero = self.reconcile_zero_buckets(other);
            self.zero_count += sign * other_zero;
        }
        self.count += sign * other.count;
        self.sum += sign * other.sum;
        let target = self.schema.min(other.schema);
        let threshold = self.zero_threshold;
        let schema = self.schema;
        // Buckets of `other` inside this zero bucket are already counted in
        // its zero count.
        let outside = |mut b: Vec<(i32, f64)>| {
            if target != CUSTOM_BUCKETS_SCHEMA && threshold > 0.0 {
                let skip = b
                    .iter()
                    .take_while(|&&(i, _)| bounds::exponential(i, target) <= threshold)
                    .count();
                b.drain(..skip);
            }
            b
        };
        let op = outside(downscaled(other.positive(), other.schema, target));
        let on = outside(downscaled(other.negative(), other.schema, target));
        let hp = downscaled(self.positive(), schema, target);
        let hn = downscaled(self.negative(), schema, target);
        self.schema = target;
        self.set_positive(&merge(&hp, &op, negate));
        if !self.uses_custom_buckets() {
            self.set_negative(&merge(&hn, &on, negate));
        }
        Ok(())
    }

    /// What the zero count would be with the larger `threshold`, and the
    /// threshold moved up to the end of a populated bucket it would cut.
    fn zero_count_for_larger_threshold(&self, mut threshold: f64) -> (f64, f64) {
        if threshold == self.zero_threshold {
            return (self.zero_count, threshold);
        }
        let positive = self.positive();
        let negative = self.negative();
        'again: loop {
            let mut count = self.zero_count;
            for &(idx, c) in &positive {
                let (lower, upper) = (self.bound(idx.saturating_sub(1)), self.bound(idx));
                if lower >= threshold {
                    break;
                }
                count += c;
                if upper > threshold {
                    if c != 0.0 {
                        threshold = upper;
                    }
                    break;
                }
            }
            for &(idx, c) in &negative {
                let (lower, upper) = (-self.bound(idx), -self.bound(idx.saturating_sub(1)));
                if upper <= -threshold {
                    break;
                }
                count += c;
                if lower < -threshold {
                    if c != 0.0 {
                        threshold = -lower;
                        continue 'again;
                    }
                    break;
                }
            }
            return (count, threshold);
        }
    }

    /// Empties the buckets inside the zero bucket (their counts are
    /// already in the zero count), then drops empty buckets.
    fn trim_buckets_in_zero_bucket(&mut self) {
        let t = self.zero_threshold;
        let mut p = self.positive();
        for b in p.iter_mut() {
            if self.bound(b.0.saturating_sub(1)) >= t {
                break;
            }
            b.1 = 0.0;
        }
        let mut n = self.negative();
        for b in n.iter_mut() {
            if -self.bound(b.0.saturating_sub(1)) <= -t {
                break;
            }
            b.1 = 0.0;
        }
        p.retain(|&(_, c)| c != 0.0);
        n.retain(|&(_, c)| c != 0.0);
        self.set_positive(&p);
        self.set_negative(&n);
    }

    /// Widens this zero bucket and `other`'s (in thought) to a common
    /// threshold; returns `other`'s zero count at it.
    fn reconcile_zero_buckets(&mut self, other: &FloatHistogram) -> f64 {
        let mut other_count = other.zero_count;
        let mut other_threshold = other.zero_threshold;
        // Each round only raises thresholds, to bucket bounds of the two.
        let mut rounds = 0;
        while other_threshold != self.zero_threshold && rounds < 10_000 {
            rounds += 1;
            if self.zero_threshold > other_threshold {
                (other_count, other_threshold) =
                    other.zero_count_for_larger_threshold(self.zero_threshold);
            }
            if other_threshold > self.zero_threshold {
                (self.zero_count, self.zero_threshold) =
                    self.zero_count_for_larger_threshold(other_threshold);
                self.trim_buckets_in_zero_bucket();
            }
        }
        other_count
    }

    /// Whether this histogram, following `previous`, starts anew
    /// (Prometheus' `DetectReset`): its hint says so, or a count fell, or
    /// a populated bucket went missing, or the layout changed in a way
    /// only a reset explains.
    pub fn detect_reset(&self, previous: &FloatHistogram) -> bool {
        match self.hint {
            CounterResetHint::CounterReset => return true,
            CounterResetHint::NotCounterReset => return false,
            _ => {}
        }
        if self.count < previous.count {
            return true;
        }
        if self.uses_custom_buckets() != previous.uses_custom_buckets()
            || (self.uses_custom_buckets()
                && !same_floats(&self.custom_values, &previous.custom_values))
        {
            return true;
        }
        if self.schema > previous.schema || self.zero_threshold < previous.zero_threshold {
            return true;
        }
        let (prev_zero, threshold) = previous.zero_count_for_larger_threshold(self.zero_threshold);
        if threshold != self.zero_threshold || self.zero_count < prev_zero {
            return true;
        }
        let start = |b: Vec<(i32, f64)>, schema: i32| -> Vec<(i32, f64)> {
            let b = downscaled(b, schema, self.schema);
            if self.uses_custom_buckets() || self.zero_threshold == 0.0 {
                return b;
            }
            let skip = b
                .iter()
                .take_while(|&&(i, _)| bounds::exponential(i, self.schema) <= self.zero_threshold)
                .count();
            b[skip..].to_vec()
        };
        let pairs = [
            (self.positive(), previous.positive()),
            (self.negative(), previous.negative()),
        ];
        pairs.into_iter().any(|(cur, prev)| {
            buckets_fell(&start(cur, self.schema), &start(prev, previous.schema))
        })
    }

    /// [`FloatHistogram::detect_reset`] as Prometheus v3.14 decides it:
    /// custom-bucket histograms with different bounds reset only when the
    /// observations up to a bound both have fell, not for the new layout.
    pub fn detect_reset_reconciling(&self, previous: &FloatHistogram) -> bool {
        let mismatched = self.uses_custom_buckets()
            && previous.uses_custom_buckets()
            && !same_floats(&self.custom_values, &previous.custom_values);
        let decided_by_hint = matches!(
            self.hint,
            CounterResetHint::CounterReset | CounterResetHint::NotCounterReset
        );
        if !mismatched || decided_by_hint || self.count < previous.count {
            return self.detect_reset(previous);
        }
        let (cur, prev) = (self.positive(), previous.positive());
        let (mut ci, mut pi) = (0, 0);
        let upper = |b: &[f64], idx: i32| {
            usize::try_from(idx)
                .ok()
                .and_then(|i| b.get(i).copied())
                .unwrap_or(f64::INFINITY)
        };
        // The buckets up to `bound` not yet counted, from `at` on.
        let roll = |buckets: &[(i32, f64)], bounds: &[f64], at: &mut usize, bound: f64| {
            let mut sum = 0.0;
            while let Some(&(idx, c)) = buckets.get(*at) {
                if upper(bounds, idx) > bound {
                    break;
                }
                sum += c;
                *at += 1;
            }
            sum
        };
        let (cb, pb) = (&self.custom_values, &previous.custom_values);
        let (mut i, mut j) = (0, 0);
        while i <= cb.len() && j <= pb.len() {
            let a = cb.get(i).copied().unwrap_or(f64::INFINITY);
            let b = pb.get(j).copied().unwrap_or(f64::INFINITY);
            if a == b {
                if roll(&cur, cb, &mut ci, a) < roll(&prev, pb, &mut pi, a) {
                    return true;
                }
                i += 1;
                j += 1;
            } else if a < b {
                i += 1;
            } else {
                j += 1;
            }
        }
        false
    }

    /// Whether `other` holds the same data, bit for bit (Prometheus'
    /// `Equals`): schema, counts, sum, zero bucket and every bucket.
    pub fn same_as(&self, other: &FloatHistogram) -> bool {
        let bits = |a: f64, b: f64| a.to_bits() == b.to_bits();
        let buckets = |a: Vec<(i32, f64)>, b: Vec<(i32, f64)>| {
            a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.0 == y.0 && bits(x.1, y.1))
        };
        self.schema == other.schema
            && bits(self.count, other.count)
            && bits(self.sum, other.sum)
            && (!self.uses_custom_buckets()
                || same_floats(&self.custom_values, &other.custom_values))
            && self.zero_threshold == other.zero_threshold
            && bits(self.zero_count, other.zero_count)
            && buckets(self.negative(), other.negative())
            && buckets(self.positive(), other.positive())
    }

    /// Every bucket in ascending order of value, as Prometheus'
    /// `AllBucketIterator` gives them: negative buckets, the zero bucket
    /// when it holds observations, positive buckets. Buckets overlapping
    /// the zero bucket are cut at its threshold.
    pub fn all_buckets(&self) -> Vec<Bucket> {
        let custom = self.uses_custom_buckets();
        let t = self.zero_threshold;
        let clamp = |mut b: Bucket| {
            if b.upper < 0.0 && b.upper > -t {
                b.upper = -t;
            } else if b.lower > 0.0 && b.lower < t {
                b.lower = t;
            }
            b
        };
        let mut out =
            Vec::with_capacity(self.positive_buckets.len() + self.negative_buckets.len() + 1);
        for &(idx, count) in self.negative().iter().rev() {
            let (lower, upper) = (-self.bound(idx), -self.bound(idx.saturating_sub(1)));
            out.push(clamp(Bucket {
                lower,
                upper,
                lower_inclusive: lower < 0.0,
                upper_inclusive: upper > 0.0,
                count,
            }));
        }
        if self.zero_count > 0.0 && !custom {
            out.push(Bucket {
                lower: -t,
                upper: t,
                lower_inclusive: true,
                upper_inclusive: true,
                count: self.zero_count,
            });
        }
        for (idx, count) in self.positive() {
            let (lower, upper) = (self.bound(idx.saturating_sub(1)), self.bound(idx));
            let b = if custom {
                Bucket {
                    lower,
                    upper,
                    lower_inclusive: idx == 0,
                    upper_inclusive: true,
                    count,
                }
            } else {
                clamp(Bucket {
                    lower,
                    upper,
                    lower_inclusive: lower < 0.0,
                    upper_inclusive: upper > 0.0,
                    count,
                })
            };
            out.push(b);
        }
        out
    }
}

impl std::fmt::Display for FloatHistogram {
    /// Prometheus' `String`: `{count:20, sum:10, [-2,-1):2, (0.5,1]:1}`,
    /// the non-empty buckets in ascending order, numbers as Go's `%g`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{{count:{}, sum:{}", go_g(self.count), go_g(self.sum))?;
        let custom = self.uses_custom_buckets();
        let bucket = |f: &mut std::fmt::Formatter<'_>, b: &Bucket| {
            write!(
                f,
                ", {}{},{}{}:{}",
                if b.lower_inclusive { '[' } else { '(' },
                go_g(b.lower),
                go_g(b.upper),
                if b.upper_inclusive { ']' } else { ')' },
                go_g(b.count)
            )
        };
        for &(idx, count) in self.negative().iter().rev() {
            if count != 0.0 {
                let (lower, upper) = (-self.bound(idx), -self.bound(idx.saturating_sub(1)));
                let b = Bucket {
                    lower,
                    upper,
                    lower_inclusive: lower < 0.0,
                    upper_inclusive: upper > 0.0,
                    count,
                };
                bucket(f, &b)?;
            }
        }
        if self.zero_count != 0.0 {
            let t = self.zero_threshold;
            let b = Bucket {
                lower: -t,
                upper: t,
                lower_inclusive: true,
                upper_inclusive: true,
                count: self.zero_count,
            };
            bucket(f, &b)?;
        }
        for (idx, count) in self.positive() {
            if count != 0.0 {
                let (lower, upper) = (self.bound(idx.saturating_sub(1)), self.bound(idx));
                let b = Bucket {
                    lower,
                    upper,
                    lower_inclusive: if custom { idx == 0 } else { lower < 0.0 },
                    upper_inclusive: custom || upper > 0.0,
                    count,
                };
                bucket(f, &b)?;
            }
        }
        write!(f, "}}")
    }
}

/// A float as Go's `%g` writes it: the shortest digits, in exponent form
/// (`1e+06`, `1e-05`) below 1e-4 and from 1e6 on.
pub fn go_g(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let e = format!("{v:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.unsigned_abs());
    }
    format!("{v}")
}

/// Whether a populated bucket of `prev` is missing from `cur` or holds
/// more than the same bucket there.
fn buckets_fell(cur: &[(i32, f64)], prev: &[(i32, f64)]) -> bool {
    let mut j = 0;
    for &(idx, c) in prev {
        while j < cur.len() && cur[j].0 < idx {
            j += 1;
        }
        match cur.get(j) {
            Some(&(ci, cc)) if ci == idx => {
                if cc < c {
                    return true;
                }
            }
            _ => {
                if c != 0.0 {
                    return true;
                }
            }
        }
    }
    false
}

/// The hint of a sum (Prometheus' rules in `Add`).
fn added_hint(a: CounterResetHint, b: CounterResetHint) -> CounterResetHint {
    use CounterResetHint::*;
    match (a, b) {
        _ if a == b => a,
        (Gauge, _) | (_, Gauge) => Gauge,
        _ => Unknown,
    }
}

/// The custom bounds `a` and `b` share, in order.
fn common_bounds(a: &[f64], b: &[f64]) -> Vec<f64> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
        if x == y {
            out.push(x);
            i += 1;
            j += 1;
        } else if x < y {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// Adds `sign` times each custom bucket (by index into `bounds`) to the
/// slot of the first `common` bound at or above its upper bound, or to
/// the last slot (+Inf).
fn fold_into(slots: &mut [f64], buckets: &[(i32, f64)], bounds: &[f64], common: &[f64], sign: f64) {
    let inf = slots.len() - 1;
    let mut at = 0;
    for &(idx, c) in buckets {
        let mut slot = inf;
        if let Some(&bound) = usize::try_from(idx).ok().and_then(|i| bounds.get(i)) {
            while let Some(&cb) = common.get(at) {
                if cb >= bound {
                    slot = at;
                    break;
                }
                at += 1;
            }
        }
        slots[slot] += sign * c;
    }
}

/// Whether two lists of bounds are the same, NaN equal to NaN.
fn same_floats(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(schema: i32, zero: f64, pos: &[(i32, f64)], neg: &[(i32, f64)]) -> FloatHistogram {
        let mut f = FloatHistogram {
            schema,
            zero_threshold: 0.001,
            zero_count: zero,
            ..Default::default()
        };
        f.set_positive(pos);
        f.set_negative(neg);
        f.count = zero + pos.iter().chain(neg).map(|b| b.1).sum::<f64>();
        f.sum = f.count;
        f
    }

    use proptest::prelude::*;

    /// Buckets in index order: a start, then runs with gaps between them.
    fn buckets() -> impl Strategy<Value = Vec<(i32, f64)>> {
        (-8i32..30, prop::collection::vec((0i32..4, 1usize..6), 0..4)).prop_flat_map(
            |(start, runs)| {
                let mut idx = start;
                let mut at = Vec::new();
                for (gap, len) in runs {
                    idx += gap;
                    for _ in 0..len {
                        at.push(idx);
                        idx += 1;
                    }
                }
                let n = at.len();
                prop::collection::vec(0u32..100, n).prop_map(move |counts| {
                    at.iter()
                        .zip(counts)
                        .map(|(&i, c)| (i, f64::from(c)))
                        .collect()
                })
            },
        )
    }

    fn histogram() -> impl Strategy<Value = FloatHistogram> {
        (-4i32..=8, prop::bool::ANY, 0u32..20, buckets(), buckets()).prop_map(
            |(schema, wide_zero, zero, pos, neg)| {
                let mut f = h(schema, f64::from(zero), &pos, &neg);
                f.zero_threshold = if wide_zero { 0.01 } else { 0.001 };
                f
            },
        )
    }

    /// Whether a bucket lies inside a zero bucket of width `t`: Prometheus
    /// counts such buckets in the zero bucket (adding skips them), so
    /// valid data has none.
    fn inside_zero(f: &FloatHistogram, t: f64) -> bool {
        f.positive()
            .iter()
            .chain(f.negative().iter())
            .any(|&(i, _)| bounds::exponential(i, f.schema) <= t)
    }

    /// Whether a bucket reaches into a zero bucket of width `t`. Adding
    /// widens the narrower zero bucket over such buckets, and Prometheus'
    /// `addBuckets` then skips only those still inside it at the coarser
    /// schema: a bucket counted into the zero bucket whose coarser bucket
    /// reaches past it is counted twice, there as here (found by the
    /// adding test with schemas 0 and -2, thresholds 0.001 and 0.01).
    fn reaches_zero(f: &FloatHistogram, t: f64) -> bool {
        f.positive()
            .iter()
            .chain(f.negative().iter())
            .any(|&(i, _)| bounds::exponential(i.saturating_sub(1), f.schema) < t)
    }

    /// Observations in all: the zero bucket and every bucket.
    fn total(f: &FloatHistogram) -> f64 {
        f.zero_count
            + f.positive_buckets
                .iter()
                .chain(&f.negative_buckets)
                .sum::<f64>()
    }

    proptest! {
        /// Adding moves observations between buckets (to a coarser schema,
        /// into a wider zero bucket) but never loses or makes any.
        #[test]
        fn adding_keeps_every_observation(a in histogram(), b in histogram()) {
            let t = a.zero_threshold.max(b.zero_threshold);
            prop_assume!(!reaches_zero(&a, t) && !reaches_zero(&b, t));
            let mut s = a.clone();
            s.add(&b).expect("exponential histograms add");
            prop_assert!((total(&s) - total(&a) - total(&b)).abs() < 1e-9);
            prop_assert_eq!(s.count, a.count + b.count);
            prop_assert_eq!(s.schema, a.schema.min(b.schema));
        }

        /// What is added can be taken away again, bucket for bucket, when
        /// the sum keeps the first one's schema and zero bucket.
        #[test]
        fn subtracting_undoes_adding(a in histogram(), b in histogram()) {
            prop_assume!(a.schema <= b.schema && a.zero_threshold == b.zero_threshold);
            prop_assume!(!inside_zero(&a, a.zero_threshold) && !inside_zero(&b, b.zero_threshold));
            let mut s = a.clone();
            s.add(&b).expect("add");
            prop_assume!(s.zero_threshold == a.zero_threshold);
            s.sub(&b).expect("sub");
            s.compact();
            let mut want = a;
            want.compact();
            prop_assert_eq!(s.positive(), want.positive());
            prop_assert_eq!(s.negative(), want.negative());
            prop_assert_eq!(s.zero_count, want.zero_count);
        }

        /// A counter that only grew is no reset; one that lost observations is.
        #[test]
        fn growth_is_no_reset_and_loss_is(a in histogram(), b in histogram()) {
            prop_assume!(a.schema <= b.schema && a.zero_threshold == b.zero_threshold);
            prop_assume!(!inside_zero(&a, a.zero_threshold) && !inside_zero(&b, b.zero_threshold));
            let mut grown = a.clone();
            grown.add(&b).expect("add");
            prop_assume!(grown.zero_threshold == a.zero_threshold);
            prop_assert!(!grown.detect_reset(&a));
            if total(&b) > 0.0 {
                prop_assert!(a.detect_reset(&grown));
            }
        }

        /// Buckets come in ascending order, each with its bounds in order
        /// and none overlapping the next.
        #[test]
        fn buckets_ascend_without_overlap(a in histogram()) {
            prop_assume!(!inside_zero(&a, a.zero_threshold));
            let all = a.all_buckets();
            for b in &all {
                prop_assert!(b.lower < b.upper, "{:?}", b);
            }
            for w in all.windows(2) {
                prop_assert!(w[0].upper <= w[1].lower + 1e-12 * w[1].lower.abs(), "{:?}", w);
            }
        }
    }

    #[test]
    fn spans_round_trip_through_indexed_buckets() {
        let b = vec![(-3, 1.0), (-2, 2.0), (4, 3.0), (5, 0.0), (9, 1.0)];
        let (spans, counts) = from_indexed(&b);
        assert_eq!(
            spans,
            vec![
                Span {
                    offset: -3,
                    length: 2
                },
                Span {
                    offset: 5,
                    length: 2
                },
                Span {
                    offset: 3,
                    length: 1
                },
            ]
        );
        assert_eq!(indexed(&spans, &counts), b);
    }

    #[test]
    fn adding_merges_buckets_at_the_coarser_schema() {
        // Schema 1 buckets 1, 2 (→ schema 0 bucket 1) and 3 (→ 2).
        let mut a = h(1, 1.0, &[(1, 1.0), (2, 2.0), (3, 4.0)], &[]);
        let b = h(0, 2.0, &[(1, 10.0), (5, 1.0)], &[(0, 3.0)]);
        a.add(&b).expect("compatible");
        assert_eq!(a.schema, 0);
        assert_eq!(a.zero_count, 3.0);
        assert_eq!(a.positive(), vec![(1, 13.0), (2, 4.0), (5, 1.0)]);
        assert_eq!(a.negative(), vec![(0, 3.0)]);
        assert_eq!(a.count, 8.0 + 16.0);
    }

    #[test]
    fn subtracting_what_was_added_gives_back_the_counts() {
        let a = h(2, 1.0, &[(0, 1.0), (3, 2.0)], &[(1, 5.0)]);
        let b = h(2, 4.0, &[(1, 7.0), (3, 1.0)], &[]);
        let mut s = a.clone();
        s.add(&b).expect("add");
        s.sub(&b).expect("sub");
        s.compact();
        let mut want = a.clone();
        want.compact();
        assert_eq!(s.positive(), want.positive());
        assert_eq!(s.negative(), want.negative());
        assert_eq!(
            (s.count, s.zero_count, s.sum),
            (a.count, a.zero_count, a.sum)
        );
    }

    #[test]
    fn custom_and_exponential_do_not_mix() {
        let mut a = h(0, 0.0, &[(1, 1.0)], &[]);
        let mut c = FloatHistogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            custom_values: vec![1.0, 2.0],
            ..Default::default()
        };
        assert_eq!(a.add(&c), Err(Incompatible::Schema));
        let d = FloatHistogram {
            custom_values: vec![1.0, 3.0],
            ..c.clone()
        };
        assert_eq!(c.add(&d), Err(Incompatible::Bounds));
    }

    #[test]
    fn a_wider_zero_bucket_swallows_the_buckets_inside_it() {
        // Schema 0: bucket 0 is (0.5, 1], bucket 1 is (1, 2].
        let mut a = h(0, 1.0, &[(0, 2.0), (1, 3.0)], &[]);
        let mut b = h(0, 1.0, &[(1, 4.0)], &[]);
        b.zero_threshold = 1.0;
        a.add(&b).expect("add");
        assert_eq!(a.zero_threshold, 1.0);
        assert_eq!(a.zero_count, 1.0 + 2.0 + 1.0);
        assert_eq!(a.positive(), vec![(1, 7.0)]);
    }

    #[test]
    fn resets_are_falls_in_any_count_or_lost_buckets() {
        let prev = h(0, 1.0, &[(1, 2.0), (2, 3.0)], &[]);
        let grown = h(0, 1.0, &[(1, 2.0), (2, 4.0), (3, 1.0)], &[]);
        assert!(!grown.detect_reset(&prev));
        let fell = h(0, 1.0, &[(1, 1.0), (2, 9.0)], &[]);
        assert!(fell.detect_reset(&prev));
        let lost = h(0, 3.0, &[(2, 9.0)], &[]);
        assert!(lost.detect_reset(&prev));
        // A finer schema can only come with a reset; a coarser one merges.
        let finer = h(1, 1.0, &[(2, 2.0), (4, 3.0)], &[]);
        assert!(finer.detect_reset(&prev));
        let coarser = h(-1, 1.0, &[(1, 5.0)], &[]);
        assert!(!coarser.detect_reset(&prev));
        let mut hinted = grown;
        hinted.hint = CounterResetHint::CounterReset;
        assert!(hinted.detect_reset(&prev));
    }

    #[test]
    fn histograms_print_as_prometheus_prints_them() {
        let mut f = h(0, 2.0, &[(0, 1.0), (1, 2.0)], &[(0, 1.0), (1, 2.0)]);
        f.count = 20.0;
        f.sum = 10.0;
        assert_eq!(
            f.to_string(),
            "{count:20, sum:10, [-2,-1):2, [-1,-0.5):1, [-0.001,0.001]:2, (0.5,1]:1, (1,2]:2}"
        );
        assert_eq!(go_g(1e6), "1e+06");
        assert_eq!(go_g(123456.0), "123456");
        assert_eq!(go_g(0.0001), "0.0001");
        assert_eq!(go_g(0.00001234), "1.234e-05");
        assert_eq!(go_g(-2.5), "-2.5");
    }

    #[test]
    fn all_buckets_run_from_negative_through_zero_to_positive() {
        let f = h(0, 2.0, &[(0, 1.0), (1, 3.0)], &[(1, 4.0)]);
        let b = f.all_buckets();
        let bounds: Vec<(f64, f64, u8, f64)> = b
            .iter()
            .map(|b| (b.lower, b.upper, b.boundary_rule(), b.count))
            .collect();
        assert_eq!(
            bounds,
            vec![
                (-2.0, -1.0, 1, 4.0),
                (-0.001, 0.001, 3, 2.0),
                (0.5, 1.0, 0, 1.0),
                (1.0, 2.0, 0, 3.0),
            ]
        );
        let c = FloatHistogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            custom_values: vec![1.0, 2.0],
            positive_spans: vec![Span {
                offset: 0,
                length: 3,
            }],
            positive_buckets: vec![1.0, 2.0, 3.0],
            ..Default::default()
        };
        let b: Vec<(f64, f64, u8)> = c
            .all_buckets()
            .iter()
            .map(|b| (b.lower, b.upper, b.boundary_rule()))
            .collect();
        assert_eq!(
            b,
            vec![
                (f64::NEG_INFINITY, 1.0, 3),
                (1.0, 2.0, 0),
                (2.0, f64::INFINITY, 0)
            ]
        );
    }

    /// A custom-bucket histogram: bounds, and a count for each bucket
    /// (the last one +Inf).
    fn nhcb(bounds: &[f64], counts: &[f64]) -> FloatHistogram {
        let mut f = FloatHistogram {
            schema: CUSTOM_BUCKETS_SCHEMA,
            custom_values: bounds.to_vec(),
            ..Default::default()
        };
        let b: Vec<(i32, f64)> = counts
            .iter()
            .enumerate()
            .filter(|&(_, &c)| c != 0.0)
            .map(|(i, &c)| (i as i32, c))
            .collect();
        f.set_positive(&b);
        f.count = counts.iter().sum();
        f.sum = f.count;
        f
    }

    #[test]
    fn different_custom_bounds_meet_at_the_ones_they_share() {
        // (-Inf,1] (1,2] (2,5] (5,+Inf] with (-Inf,2] (2,3] (3,5] (5,+Inf].
        let mut a = nhcb(&[1.0, 2.0, 5.0], &[1.0, 2.0, 3.0, 4.0]);
        let b = nhcb(&[2.0, 3.0, 5.0], &[10.0, 20.0, 30.0, 40.0]);
        assert_eq!(a.clone().add(&b), Err(Incompatible::Bounds));
        assert_eq!(a.add_reconciling(&b), Ok(true));
        assert_eq!(a.custom_values, vec![2.0, 5.0]);
        assert_eq!(a.positive(), vec![(0, 13.0), (1, 53.0), (2, 44.0)]);
        assert_eq!(a.count, 110.0);
        // Nothing shared: everything is in +Inf; empty buckets go.
        let mut c = nhcb(&[1.0], &[1.0, 1.0]);
        assert_eq!(c.sub_reconciling(&nhcb(&[4.0], &[2.0, 0.0])), Ok(true));
        assert!(c.custom_values.is_empty());
        assert_eq!(c.positive(), Vec::<(i32, f64)>::new());
        // Same bounds: the ordinary addition.
        let mut d = nhcb(&[1.0], &[1.0, 1.0]);
        assert_eq!(d.add_reconciling(&nhcb(&[1.0], &[1.0, 0.0])), Ok(false));
        // Custom and exponential still do not mix.
        let mut e = nhcb(&[1.0], &[1.0, 1.0]);
        assert_eq!(
            e.add_reconciling(&h(0, 0.0, &[(1, 1.0)], &[])),
            Err(Incompatible::Schema)
        );
    }

    #[test]
    fn new_custom_bounds_alone_are_no_reset_in_v3_14() {
        let before = nhcb(&[5.0], &[1.0, 0.0]);
        let after = nhcb(&[5.0, 10.0], &[1.0, 0.0, 0.0]);
        assert!(after.detect_reset(&before));
        assert!(!after.detect_reset_reconciling(&before));
        // Observations moved from below 2 to above it, with the count the
        // same: fewer at or below the shared bound 2.
        let before = nhcb(&[2.0, 4.0], &[2.0, 0.0, 0.0]);
        let after = nhcb(&[1.0, 2.0, 3.0], &[0.0, 1.0, 1.0, 0.0]);
        assert!(after.detect_reset_reconciling(&before));
        let after = nhcb(&[1.0, 2.0, 3.0], &[1.0, 1.0, 0.0, 0.0]);
        assert!(!after.detect_reset_reconciling(&before));
    }

    /// Bounds: a sorted subset of 0.5, 1, 1.5 … 8.
    fn bounds() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::btree_set(1u8..=16, 0..8)
            .prop_map(|s| s.into_iter().map(|b| f64::from(b) / 2.0).collect())
    }

    fn nhcb_strategy() -> impl Strategy<Value = FloatHistogram> {
        bounds().prop_flat_map(|b| {
            let n = b.len() + 1;
            prop::collection::vec(0u32..50, n)
                .prop_map(move |c| nhcb(&b, &c.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()))
        })
    }

    proptest! {
        /// Reconciling keeps every observation, in a bucket whose upper
        /// bound both had, at or above the one it came from; and the sum
        /// does not reset against either part.
        #[test]
        fn reconciling_moves_observations_up_only(a in nhcb_strategy(), b in nhcb_strategy()) {
            let mut s = a.clone();
            s.add_reconciling(&b).expect("custom buckets reconcile");
            prop_assert_eq!(total(&s), total(&a) + total(&b));
            for v in &s.custom_values {
                prop_assert!(a.custom_values.contains(v) && b.custom_values.contains(v));
            }
            // Below each shared bound, the sum holds at most what the two
            // held below it (observations only move up).
            for (i, &bound) in s.custom_values.iter().enumerate() {
                let below = |x: &FloatHistogram| -> f64 {
                    x.positive()
                        .iter()
                        .filter(|&&(j, _)| x.custom_values.get(j as usize).is_some_and(|&u| u <= bound))
                        .map(|b| b.1)
                        .sum()
                };
                let got: f64 = s.positive().iter().filter(|&&(j, _)| j as usize <= i).map(|b| b.1).sum();
                prop_assert_eq!(got, below(&a) + below(&b));
            }
            // The sum holds at least what `a` held up to each bound they
            // share: it follows `a` without a reset.
            prop_assert!(!s.detect_reset_reconciling(&a));
        }
    }
}
