//! Delta-to-cumulative conversion for `--otlp-delta-to-cumulative`: each
//! series keeps its running total in memory, and every delta point is
//! stored as the new total, so `rate()` and `increase()` work on it as on
//! any counter. Totals are not persisted: a restart starts them at zero,
//! which queries see as a counter reset.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Why a delta could not be accumulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaError {
    /// Not newer than the last delta of the series: adding it again would
    /// count it twice.
    OutOfOrder,
    /// The state holds its maximum number of series.
    Full,
}

/// The last delta's time and the running total of one series.
#[derive(Debug, Clone, Copy)]
struct Total {
    last_t: i64,
    sum: f64,
}

/// Running totals by series (canonical label bytes).
#[derive(Debug)]
pub struct DeltaState {
    totals: Mutex<HashMap<Box<[u8]>, Total>>,
    max_series: usize,
}

impl DeltaState {
    /// Empty state for at most `max_series` series.
    pub fn new(max_series: usize) -> Self {
        Self {
            totals: Mutex::new(HashMap::new()),
            max_series,
        }
    }

    /// Adds `delta` at time `t` to the series' total and returns the new
    /// total. A stale marker passes through and leaves the total as it is.
    pub fn accumulate(&self, series: &[u8], t: i64, delta: f64) -> Result<f64, DeltaError> {
        let mut totals = self.totals.lock();
        if let Some(total) = totals.get_mut(series) {
            if t <= total.last_t {
                return Err(DeltaError::OutOfOrder);
            }
            total.last_t = t;
            if delta.to_bits() == crate::storage::STALE_NAN {
                return Ok(delta);
            }
            total.sum += delta;
            return Ok(total.sum);
        }
        if totals.len() >= self.max_series {
            return Err(DeltaError::Full);
        }
        let sum = if delta.to_bits() == crate::storage::STALE_NAN {
            0.0
        } else {
            delta
        };
        totals.insert(series.into(), Total { last_t: t, sum });
        Ok(delta)
    }

    /// Series with a running total.
    pub fn len(&self) -> usize {
        self.totals.lock().len()
    }

    /// Whether no series has a running total.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_add_up_per_series_and_replays_are_refused() {
        let d = DeltaState::new(2);
        assert_eq!(d.accumulate(b"a", 10, 1.5), Ok(1.5));
        assert_eq!(d.accumulate(b"a", 20, 2.0), Ok(3.5));
        assert_eq!(d.accumulate(b"b", 20, 7.0), Ok(7.0));
        // The same delta again (a retried request) is not counted twice.
        assert_eq!(d.accumulate(b"a", 20, 2.0), Err(DeltaError::OutOfOrder));
        let stale = f64::from_bits(crate::storage::STALE_NAN);
        assert_eq!(
            d.accumulate(b"a", 30, stale).map(f64::to_bits),
            Ok(crate::storage::STALE_NAN)
        );
        assert_eq!(d.accumulate(b"a", 40, 1.0), Ok(4.5));
        assert_eq!(d.accumulate(b"c", 40, 1.0), Err(DeltaError::Full));
        assert_eq!(d.len(), 2);
    }
}
