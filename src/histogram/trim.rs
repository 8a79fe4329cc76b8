//! The trim operators `</` and `>/` (Prometheus v3.11): a histogram with
//! the observations above (`</`) or below (`>/`) a value taken out, the
//! bucket that holds the value split by interpolation (linear for custom
//! buckets and the zero bucket, on the log scale for exponential ones), and
//! the sum estimated again from the buckets' midpoints.

use super::FloatHistogram;

/// A bucket's bounds and count.
#[derive(Debug, Clone, Copy)]
struct B {
    lower: f64,
    upper: f64,
    count: f64,
}

impl FloatHistogram {
    /// Takes out the observations above `rhs` (`upper`, the `</` operator)
    /// or below it (`>/`), as Prometheus' `TrimBuckets`. The count and sum
    /// change only when a bucket was cut.
    pub fn trim_buckets(&mut self, rhs: f64, upper: bool) {
        let custom = self.uses_custom_buckets();
        let (mut count, mut sum) = (0.0, 0.0);
        let mut trimmed = false;
        let mut has = [false; 2];
        for (side, positive) in [(0, true), (1, false)] {
            let idxs: Vec<i64> = if positive {
                crate::histogram::BucketIndexes::new(&self.positive_spans).collect()
            } else {
                crate::histogram::BucketIndexes::new(&self.negative_spans).collect()
            };
            for (i, idx) in idxs.into_iter().enumerate() {
                let idx = i32::try_from(idx).unwrap_or(i32::MAX);
                let buckets = if positive {
                    &mut self.positive_buckets
                } else {
                    &mut self.negative_buckets
                };
                let Some(&c) = buckets.get(i) else {
                    break;
                };
                if c == 0.0 {
                    continue;
                }
                has[side] = true;
                let (lo, up) = (
                    super::bounds::upper(idx.saturating_sub(1), self.schema, &self.custom_values),
                    super::bounds::upper(idx, self.schema, &self.custom_values),
                );
                let b = if positive {
                    B {
                        lower: lo,
                        upper: up,
                        count: c,
                    }
                } else {
                    B {
                        lower: -up,
                        upper: -lo,
                        count: c,
                    }
                };
                let whole = if upper {
                    b.upper <= rhs
                } else {
                    b.lower >= rhs
                };
                let partly = if upper { b.lower < rhs } else { b.upper > rhs };
                let buckets = if positive {
                    &mut self.positive_buckets
                } else {
                    &mut self.negative_buckets
                };
                if whole {
                    count += c;
                    sum += midpoint(b.lower, b.upper, positive, custom) * c;
                } else if partly {
                    let (keep, mid) = bucket_trim(b, rhs, upper, positive, custom);
                    count += keep;
                    sum += mid * keep;
                    if buckets[i] != keep {
                        buckets[i] = keep;
                        trimmed = true;
                    }
                } else {
                    buckets[i] = 0.0;
                    trimmed = true;
                }
            }
        }
        if self.zero_count > 0.0 {
            let t = self.zero_threshold;
            let zero = B {
                lower: -t,
                upper: t,
                count: self.zero_count,
            };
            let (keep, mid) = zero_trim(zero, rhs, has[1], has[0], upper);
            if self.zero_count != keep {
                self.zero_count = keep;
                trimmed = true;
            }
            sum += mid * keep;
            count += keep;
        }
        if trimmed {
            self.count = count;
            self.sum = sum;
            self.compact();
        }
    }
}

/// The share of a bucket's width at or below `v`, `v` inside its finite
/// bounds: linear, or on the log scale for exponential buckets.
fn fraction_below(b: B, v: f64, linear: bool) -> f64 {
    if linear {
        return (v - b.lower) / (b.upper - b.lower);
    }
    let (lo, up, lv) = (b.lower.abs().log2(), b.upper.abs().log2(), v.abs().log2());
    if v > 0.0 {
        (lv - lo) / (up - lo)
    } else {
        1.0 - (lv - up) / (lo - up)
    }
}

fn midpoint(lower: f64, upper: f64, positive: bool, linear: bool) -> f64 {
    if lower.is_infinite() {
        if upper.is_infinite() {
            return 0.0;
        }
        return if upper > 0.0 { upper / 2.0 } else { upper };
    }
    if upper.is_infinite() {
        return lower;
    }
    if linear {
        return (lower + upper) / 2.0;
    }
    let g = (lower * upper).abs().sqrt();
    if positive {
        g
    } else {
        -g
    }
}

/// What is kept of a bucket that `rhs` falls in, and the midpoint of the
/// part kept.
fn bucket_trim(b: B, rhs: f64, upper: bool, positive: bool, custom: bool) -> (f64, f64) {
    if b.lower == f64::NEG_INFINITY || b.upper == f64::INFINITY {
        return infinite_bucket(b, rhs, upper);
    }
    let under = if rhs <= b.lower {
        0.0
    } else if rhs >= b.upper {
        b.count
    } else {
        b.count * fraction_below(b, rhs, custom)
    };
    if upper {
        (under, midpoint(b.lower, rhs, positive, custom))
    } else {
        (b.count - under, midpoint(rhs, b.upper, positive, custom))
    }
}

/// A bucket with an infinite bound: kept whole, cut as if it began at 0
/// (custom buckets' first), or dropped whole where nothing is known of how
/// its observations spread.
fn infinite_bucket(b: B, rhs: f64, upper: bool) -> (f64, f64) {
    let finite = |x: f64| if x.is_infinite() { 0.0 } else { x };
    if b.lower == f64::NEG_INFINITY {
        if upper {
            if rhs >= b.upper {
                return (b.count, 0.0);
            }
            if rhs > 0.0 && b.upper > 0.0 && b.upper.is_finite() {
                return (b.count * rhs / b.upper, rhs / 2.0);
            }
            if b.upper <= 0.0 {
                return (b.count, rhs);
            }
            return (0.0, finite(b.upper));
        }
        if rhs >= 0.0 && b.upper > rhs && b.upper.is_finite() {
            return (b.count * (1.0 - rhs / b.upper), (rhs + b.upper) / 2.0);
        }
        return (0.0, finite(b.upper));
    }
    // Upper bound +Inf.
    if upper {
        return (0.0, finite(b.lower));
    }
    if rhs >= b.lower {
        return (b.count, rhs);
    }
    (0.0, finite(b.lower))
}

/// What is kept of the zero bucket, taken as `[0, t]` or `[-t, 0]` when
/// the histogram has buckets on one side only.
fn zero_trim(z: B, rhs: f64, has_negative: bool, has_positive: bool, upper: bool) -> (f64, f64) {
    let mut lower = z.lower;
    let mut up = z.upper;
    if has_negative && !has_positive {
        up = 0.0;
    }
    if has_positive && !has_negative {
        lower = 0.0;
    }
    if upper {
        if rhs <= lower {
            return (0.0, 0.0);
        }
        if rhs >= up {
            return (z.count, (lower + up) / 2.0);
        }
        (z.count * (rhs - lower) / (up - lower), (lower + rhs) / 2.0)
    } else {
        if rhs <= lower {
            return (z.count, (lower + up) / 2.0);
        }
        if rhs >= up {
            return (0.0, 0.0);
        }
        (z.count * (up - rhs) / (up - lower), (rhs + up) / 2.0)
    }
}
