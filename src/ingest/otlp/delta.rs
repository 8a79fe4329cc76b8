//! Delta-to-cumulative conversion for `--otlp-delta-to-cumulative`: each
//! series keeps its running total in memory, and every delta point is
//! stored as the new total, so `rate()` and `increase()` work on it as on
//! any counter. Totals are not persisted: a restart starts them at zero,
//! which queries see as a counter reset.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// Bytes held: keys plus a per-entry overhead, for the memory limit.
    bytes: AtomicUsize,
}

/// What an entry costs beyond its key: the total and its map slot.
const ENTRY_OVERHEAD: usize = 64;

/// A delta point's value to store, and the running total to keep once the
/// head has stored it ([`DeltaState::commit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Next {
    /// The value to append: the new total, or a stale marker.
    pub value: f64,
    sum: f64,
}

impl DeltaState {
    /// Empty state for at most `max_series` series.
    pub fn new(max_series: usize) -> Self {
        Self {
            totals: Mutex::new(HashMap::new()),
            max_series,
            bytes: AtomicUsize::new(0),
        }
    }

    /// What adding `delta` at time `t` to the series' total gives, without
    /// keeping it: only a point the head stores may move a total or take
    /// a slot. A stale marker passes through and leaves the total as it
    /// is. When the state is full, totals not updated since `min_valid_t`
    /// (the retention cutoff: their series are gone or going) make room.
    pub fn next(
        &self,
        series: &[u8],
        t: i64,
        delta: f64,
        min_valid_t: i64,
    ) -> Result<Next, DeltaError> {
        let stale = delta.to_bits() == crate::storage::STALE_NAN;
        let mut totals = self.totals.lock();
        if let Some(total) = totals.get(series) {
            if t <= total.last_t {
                return Err(DeltaError::OutOfOrder);
            }
            let sum = if stale { total.sum } else { total.sum + delta };
            return Ok(Next {
                value: if stale { delta } else { sum },
                sum,
            });
        }
        if totals.len() >= self.max_series {
            totals.retain(|k, total| {
                let keep = total.last_t >= min_valid_t;
                if !keep {
                    self.bytes
                        .fetch_sub(k.len() + ENTRY_OVERHEAD, Ordering::Relaxed);
                }
                keep
            });
            if totals.len() >= self.max_series {
                return Err(DeltaError::Full);
            }
        }
        let sum = if stale { 0.0 } else { delta };
        Ok(Next { value: delta, sum })
    }

    /// Keeps `next` (from [`DeltaState::next`] for the same series and
    /// `t`) as the series' running total, once the head stored its point.
    pub fn commit(&self, series: &[u8], t: i64, next: Next) {
        let mut totals = self.totals.lock();
        let total = Total {
            last_t: t,
            sum: next.sum,
        };
        match totals.get_mut(series) {
            Some(old) => *old = total,
            None => {
                self.bytes
                    .fetch_add(series.len() + ENTRY_OVERHEAD, Ordering::Relaxed);
                totals.insert(series.into(), total);
            }
        }
    }

    /// Series with a running total.
    pub fn len(&self) -> usize {
        self.totals.lock().len()
    }

    /// Whether no series has a running total.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held, for the memory limit.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `next` then `commit`, as a stored point does.
    fn add(d: &DeltaState, k: &[u8], t: i64, v: f64) -> Result<f64, DeltaError> {
        let n = d.next(k, t, v, i64::MIN)?;
        d.commit(k, t, n);
        Ok(n.value)
    }

    #[test]
    fn deltas_add_up_per_series_and_replays_are_refused() {
        let d = DeltaState::new(2);
        assert_eq!(add(&d, b"a", 10, 1.5), Ok(1.5));
        assert_eq!(add(&d, b"a", 20, 2.0), Ok(3.5));
        assert_eq!(add(&d, b"b", 20, 7.0), Ok(7.0));
        // The same delta again (a retried request) is not counted twice.
        assert_eq!(add(&d, b"a", 20, 2.0), Err(DeltaError::OutOfOrder));
        let stale = f64::from_bits(crate::storage::STALE_NAN);
        assert_eq!(
            add(&d, b"a", 30, stale).map(f64::to_bits),
            Ok(crate::storage::STALE_NAN)
        );
        assert_eq!(add(&d, b"a", 40, 1.0), Ok(4.5));
        assert_eq!(add(&d, b"c", 40, 1.0), Err(DeltaError::Full));
        assert_eq!(d.len(), 2);
        assert_eq!(d.bytes(), 2 * (1 + ENTRY_OVERHEAD));
    }

    #[test]
    fn only_committed_points_take_a_slot_and_old_totals_make_room() {
        let d = DeltaState::new(2);
        // Points the head refused were never committed: no slot taken.
        for i in 0..60 {
            assert!(d
                .next(format!("bad{i}").as_bytes(), 10, 1.0, i64::MIN)
                .is_ok());
        }
        assert!(d.is_empty());
        assert_eq!(add(&d, b"a", 10, 1.0), Ok(1.0));
        assert_eq!(add(&d, b"b", 20, 1.0), Ok(1.0));
        assert_eq!(add(&d, b"c", 30, 1.0), Err(DeltaError::Full));
        // Past the retention cutoff, a's total goes and c gets its slot.
        let n = d.next(b"c", 30, 1.0, 15).expect("room made");
        d.commit(b"c", 30, n);
        assert_eq!(d.len(), 2);
        assert_eq!(add(&d, b"b", 40, 1.0), Ok(2.0));
    }
}
