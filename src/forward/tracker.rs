//! Which records a destination has wholly acknowledged: the position
//! before which every sample read was sent or dropped, the one saved.

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::wal::reader::Position;

/// Records read but not yet wholly acknowledged, in log order.
#[derive(Debug)]
pub(super) struct Tracker {
    inner: Mutex<Pending>,
    /// Woken when the released position moves.
    pub(super) moved: Notify,
}

#[derive(Debug)]
struct Pending {
    /// The sequence number of `entries[0]`.
    base: u64,
    /// Per record: the position just past it and its samples not yet
    /// acknowledged.
    entries: VecDeque<(Position, u32)>,
    /// Everything before this is acknowledged or dropped.
    released: Position,
    /// Samples read and not yet acknowledged or given up.
    outstanding: u64,
}

impl Tracker {
    pub(super) fn new(at: Position) -> Self {
        Self {
            inner: Mutex::new(Pending {
                base: 0,
                entries: VecDeque::new(),
                released: at,
                outstanding: 0,
            }),
            moved: Notify::new(),
        }
    }

    /// Registers a record ending at `end` with `samples` to acknowledge;
    /// its sequence number.
    pub(super) fn push(&self, end: Position, samples: u32) -> u64 {
        let mut p = self.inner.lock();
        let seq = p.base + p.entries.len() as u64;
        p.entries.push_back((end, samples));
        p.outstanding += u64::from(samples);
        if samples == 0 && p.entries.len() == 1 {
            Self::release(&mut p);
            drop(p);
            self.moved.notify_one();
        }
        seq
    }

    /// `n` samples of record `seq` are acknowledged (or refused for good).
    pub(super) fn ack(&self, seq: u64, n: u32) {
        let mut p = self.inner.lock();
        let Some(i) = seq.checked_sub(p.base) else {
            return; // given up already (lag)
        };
        let Some(e) = p.entries.get_mut(i as usize) else {
            return;
        };
        let done = e.1.min(n);
        e.1 -= done;
        let left = e.1;
        p.outstanding -= u64::from(done);
        if i == 0 && left == 0 {
            Self::release(&mut p);
            drop(p);
            self.moved.notify_one();
        }
    }

    fn release(p: &mut Pending) {
        while let Some(&(end, 0)) = p.entries.front() {
            p.entries.pop_front();
            p.base += 1;
            p.released = end;
        }
    }

    /// Gives up every record ending at or before `to`; the samples not yet
    /// acknowledged among them.
    pub(super) fn give_up_through(&self, to: Position) -> u64 {
        let mut p = self.inner.lock();
        let mut dropped = 0u64;
        while let Some(&(end, left)) = p.entries.front() {
            if end > to {
                break;
            }
            dropped += u64::from(left);
            p.outstanding -= u64::from(left);
            p.entries.pop_front();
            p.base += 1;
            p.released = end;
        }
        if p.entries.is_empty() && p.released < to {
            p.released = to;
        }
        Self::release(&mut p);
        drop(p);
        self.moved.notify_one();
        dropped
    }

    /// Whether record `seq` was given up (its samples counted dropped).
    pub(super) fn given_up(&self, seq: u64) -> bool {
        seq < self.inner.lock().base
    }

    /// Samples read and not yet acknowledged or given up: the backlog the
    /// shards hold.
    pub(super) fn outstanding(&self) -> u64 {
        self.inner.lock().outstanding
    }

    pub(super) fn released(&self) -> Position {
        self.inner.lock().released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(segment: u64, offset: u64) -> Position {
        Position { segment, offset }
    }

    #[test]
    fn the_released_position_waits_for_every_sample_of_every_earlier_record() {
        let t = Tracker::new(at(1, 0));
        let a = t.push(at(1, 10), 3);
        let b = t.push(at(1, 20), 2);
        let c = t.push(at(1, 30), 0);
        assert_eq!((a, b, c), (0, 1, 2));
        t.ack(b, 2);
        assert_eq!(t.released(), at(1, 0), "record a is not acknowledged yet");
        t.ack(a, 2);
        assert_eq!(t.released(), at(1, 0));
        assert_eq!(t.outstanding(), 1);
        t.ack(a, 1);
        assert_eq!(t.released(), at(1, 30), "a, b and the empty c are done");
        assert_eq!(t.outstanding(), 0);
        let d = t.push(at(2, 5), 0);
        assert_eq!(d, 3);
        assert_eq!(t.released(), at(2, 5));
        // Acknowledgements of records already released change nothing.
        t.ack(a, 1);
        assert_eq!(t.released(), at(2, 5));
    }

    #[test]
    fn giving_up_counts_what_was_not_acknowledged_and_ignores_late_acks() {
        let t = Tracker::new(at(1, 0));
        let a = t.push(at(1, 10), 3);
        let _b = t.push(at(2, 10), 4);
        let c = t.push(at(3, 10), 5);
        t.ack(a, 1);
        assert_eq!(t.give_up_through(at(3, 0)), 2 + 4);
        assert_eq!(t.released(), at(2, 10));
        t.ack(a, 2); // late, ignored
        t.ack(c, 5);
        assert_eq!(t.released(), at(3, 10));
    }
}
