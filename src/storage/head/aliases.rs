//! Other names for series the head holds: 128-bit keys that a protocol
//! computes from a series' labels more cheaply than their canonical bytes,
//! each mapped to the [`Fingerprint`] of those bytes and the series' slot
//! in its shard, so that a known series is reached without the shard's
//! own lookup.
//!
//! Remote write 2.0 sends labels as references into a per-request symbol
//! table; building the canonical bytes of every series just to find it costs
//! more than the rest of the request. A key mixed from per-symbol hashes
//! names the same series in every request, so one lookup here stands in for
//! that work. Both sides are pure functions of the labels (and of the
//! process' seed), so an alias's fingerprint never goes stale; its slot
//! does when retention rebuilds a shard, so the head clears the map then,
//! and a slot is checked against the fingerprint before it is used. The
//! map is only bounded, not kept in step with the head: when it holds more
//! than twice the head's series (and more than a small floor) it is cleared
//! and refills itself from the next requests.

use parking_lot::{RwLock, RwLockReadGuard};

use super::shard::Fingerprint;

/// Entries never cleared for size: a small head's aliases stay put.
const FLOOR: usize = 1 << 16;

/// Keys of series not stored (dropped at the door) kept beyond the bound
/// of the head's series: a tenant that drops far more series than it
/// keeps still finds each one's outcome (32 MiB at most, counted in the
/// head's memory like the rest of the map).
const MOST_NOT_STORED: usize = 1 << 20;

/// One entry: 96 bits of the key (a false match among a million series
/// has odds of 1 in 10^22), the slot, the fingerprint. Key 0 marks an empty
/// one (a key that is 0 is not kept). 32 bytes, aligned, so an entry never
/// spans two cache lines: a lookup of a known key usually reads one line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(32))]
struct Entry {
    key: u64,
    key_high: u32,
    slot: u32,
    fp: Fingerprint,
}

impl Entry {
    #[inline]
    fn is(&self, key: u128) -> bool {
        self.key == key as u64 && self.key_high == (key >> 64) as u32
    }
}

/// A series found by its alias: fingerprint, and slot in its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The fingerprint of its canonical label bytes.
    pub fp: Fingerprint,
    /// Where it was in its shard (check it against `fp` before use).
    pub slot: u32,
}

impl Alias {
    /// What a key names when its series is not stored at all (the ingest
    /// door drops it): no series has this fingerprint at this slot, so
    /// used by mistake it finds nothing.
    pub const NOT_STORED: Alias = Alias {
        fp: Fingerprint { hash: 0, check: 0 },
        slot: u32::MAX,
    };

    /// Whether this is [`Alias::NOT_STORED`].
    pub fn is_not_stored(&self) -> bool {
        *self == Self::NOT_STORED
    }

    /// Whether this names the series with canonical label bytes `canonical`.
    pub fn is_of(&self, canonical: &[u8]) -> bool {
        super::shard::fingerprint(canonical) == self.fp
    }
}

/// Open addressing with linear probing, at most three quarters full.
#[derive(Debug, Default)]
struct Table {
    entries: Vec<Entry>,
    len: usize,
    /// Entries that are [`Alias::NOT_STORED`].
    not_stored: usize,
}

impl Table {
    #[inline]
    fn home(&self, key: u128) -> usize {
        key as usize & (self.entries.len().wrapping_sub(1))
    }

    #[inline]
    fn get(&self, key: u128) -> Option<Alias> {
        if self.entries.is_empty() || key as u64 == 0 {
            return None;
        }
        let mask = self.entries.len() - 1;
        let mut i = self.home(key);
        loop {
            let e = &self.entries[i];
            if e.is(key) {
                return Some(Alias {
                    fp: e.fp,
                    slot: e.slot,
                });
            }
            if e.key == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    fn insert(&mut self, key: u128, alias: Alias) {
        if key as u64 == 0 {
            return;
        }
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        let mask = self.entries.len() - 1;
        let mut i = self.home(key);
        loop {
            let e = &mut self.entries[i];
            let empty = e.key == 0;
            if empty || e.is(key) {
                let was =
                    !empty && e.fp == Alias::NOT_STORED.fp && e.slot == Alias::NOT_STORED.slot;
                self.not_stored =
                    self.not_stored + usize::from(alias.is_not_stored()) - usize::from(was);
                *e = Entry {
                    key: key as u64,
                    key_high: (key >> 64) as u32,
                    slot: alias.slot,
                    fp: alias.fp,
                };
                self.len += usize::from(empty);
                return;
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self) {
        let size = (self.entries.len() * 2).max(1024);
        let old = std::mem::replace(&mut self.entries, vec![Entry::default(); size]);
        self.len = 0;
        self.not_stored = 0;
        for e in old.into_iter().filter(|e| e.key != 0) {
            let key = u128::from(e.key) | u128::from(e.key_high) << 64;
            self.insert(
                key,
                Alias {
                    fp: e.fp,
                    slot: e.slot,
                },
            );
        }
    }
}

/// Keys to fingerprints, shared by every request.
#[derive(Debug, Default)]
pub struct Aliases {
    table: RwLock<Table>,
}

/// A read view for one request's lookups: one lock for all of them.
pub struct AliasReader<'a>(RwLockReadGuard<'a, Table>);

impl AliasReader<'_> {
    /// The series `key` stands for, if it has been seen.
    #[inline]
    pub fn get(&self, key: u128) -> Option<Alias> {
        self.0.get(key)
    }
}

impl Aliases {
    /// A view for lookups; hold it for a request's series, not longer.
    pub fn read(&self) -> AliasReader<'_> {
        AliasReader(self.table.read())
    }

    /// Adds (or updates) `new` aliases. When the map would hold more
    /// than `2 × series` entries (and more than a small floor) it is cleared
    /// first: entries of series that are gone are not tracked one by one.
    pub fn remember(&self, new: &[(u128, Alias)], series: usize) {
        if new.is_empty() {
            return;
        }
        let mut table = self.table.write();
        let bound = FLOOR.max(series.saturating_mul(2)) + table.not_stored.min(MOST_NOT_STORED);
        if table.len + new.len() > bound {
            *table = Table::default();
        }
        for &(key, alias) in new {
            table.insert(key, alias);
        }
    }

    /// Forgets every alias (their slots moved).
    pub fn clear(&self) {
        *self.table.write() = Table::default();
    }

    /// Heap bytes held.
    pub fn bytes(&self) -> usize {
        self.table.read().entries.len() * std::mem::size_of::<Entry>()
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.table.read().len
    }

    /// Whether no alias is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(i: u64) -> Alias {
        Alias {
            fp: Fingerprint { hash: i, check: !i },
            slot: i as u32,
        }
    }

    /// A key as a protocol makes one: bits spread (sequential keys would
    /// make one long probe run).
    fn spread(i: u64) -> u128 {
        (u128::from(i) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835) | 1
    }

    #[test]
    fn keys_of_dropped_series_stay_beyond_the_series_bound() {
        let a = Aliases::default();
        // A head of 10 series, and the outcomes of 3 x FLOOR dropped ones.
        for chunk in 0..3u64 {
            let new: Vec<(u128, Alias)> = (0..FLOOR as u64)
                .map(|i| (spread(chunk << 32 | i), Alias::NOT_STORED))
                .collect();
            a.remember(&new, 10);
        }
        let r = a.read();
        assert_eq!(
            r.get(spread(0)),
            Some(Alias::NOT_STORED),
            "the first ones are kept"
        );
        assert_eq!(a.table.read().not_stored, 3 * FLOOR);
        drop(r);
        // Kept series past the bound still clear the map.
        let kept: Vec<(u128, Alias)> = (0..(4 * FLOOR) as u64)
            .map(|i| (spread(1 << 40 | i), alias(i)))
            .collect();
        a.remember(&kept, 10);
        a.remember(&kept[..1], 10);
        assert!(a.len() < 4 * FLOOR, "bounded: {}", a.len());
    }

    #[test]
    fn remembers_and_finds() {
        let a = Aliases::default();
        a.remember(&[(1, alias(1)), (2 << 64 | 1, alias(2))], 10);
        let r = a.read();
        assert_eq!(r.get(1), Some(alias(1)));
        // Same low half, other high half: a different key.
        assert_eq!(r.get(2 << 64 | 1), Some(alias(2)));
        assert_eq!(r.get(3), None);
        drop(r);
        // An update replaces the slot.
        a.remember(&[(1, alias(5))], 10);
        assert_eq!(a.read().get(1), Some(alias(5)));
        assert_eq!(a.len(), 2);
        a.clear();
        assert!(a.is_empty() && a.read().get(1).is_none());
    }

    #[test]
    fn is_cleared_past_twice_the_series_and_the_floor() {
        let a = Aliases::default();
        // Keys are hashes: spread like them (the table indexes by low bits).
        let batch: Vec<(u128, Alias)> = (1..=FLOOR as u64)
            .map(|i| {
                let key = u128::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | u128::from(i) << 64;
                (key, alias(i))
            })
            .collect();
        a.remember(&batch, 10);
        assert_eq!(a.len(), FLOOR);
        // One more than the floor with few series: cleared, then added.
        a.remember(&[(u128::MAX, alias(7))], 10);
        assert_eq!(a.len(), 1);
        assert_eq!(a.read().get(u128::MAX), Some(alias(7)));
        // With many series the floor is not the bound.
        a.remember(&batch, FLOOR);
        a.remember(&[(u128::MAX - 1, alias(8))], FLOOR);
        assert_eq!(a.len(), FLOOR + 2);
        assert!(a.bytes() >= a.len() * 32);
        // Key 0 is never kept; every other key is found after growth.
        a.remember(&[(0, alias(9))], FLOOR);
        assert_eq!(a.read().get(0), None);
        let r = a.read();
        assert!(batch.iter().all(|&(k, x)| r.get(k) == Some(x)));
    }
}
