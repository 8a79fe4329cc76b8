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

/// Mean and population variance by Welford's method, as Prometheus
/// computes `stddev`/`stdvar` and their `_over_time` forms.
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
    values.sort_by(|a, b| a.total_cmp(b));
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
