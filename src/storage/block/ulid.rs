//! ULIDs, the names of blocks: 48 bits of milliseconds since the epoch
//! then 80 random bits, written as 26 characters of Crockford's base 32.
//! Sorting the names sorts blocks by creation time.

use std::hash::{BuildHasher, Hasher};

/// A block's identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ulid(pub u128);

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

impl Ulid {
    /// A new ULID for the time `ms`, with random bits from the process's
    /// hash seed and a counter (distinct within a process, unpredictable
    /// enough across processes: a ULID names a directory, it is no secret).
    pub fn new(ms: u64) -> Self {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(ms);
        h.write_u64(n);
        h.write_u32(std::process::id());
        let a = h.finish();
        h.write_u64(a);
        let b = h.finish();
        let random = (u128::from(a) << 16 | u128::from(b & 0xffff)) & ((1u128 << 80) - 1);
        Ulid(u128::from(ms & ((1 << 48) - 1)) << 80 | random)
    }

    /// The milliseconds part.
    pub fn ms(&self) -> u64 {
        (self.0 >> 80) as u64
    }

    /// Reads the 26-character form (either case).
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() != 26 {
            return None;
        }
        let mut v: u128 = 0;
        for (i, c) in s.bytes().enumerate() {
            let c = c.to_ascii_uppercase();
            let d = ALPHABET.iter().position(|&a| a == c)? as u128;
            // The first character carries only 3 bits (128 = 2 + 25 × 5).
            if i == 0 && d > 7 {
                return None;
            }
            v = v << 5 | d;
        }
        Some(Ulid(v))
    }
}

impl std::fmt::Display for Ulid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = [0u8; 26];
        for (i, c) in out.iter_mut().enumerate() {
            let shift = 5 * (25 - i);
            *c = ALPHABET[((self.0 >> shift) & 31) as usize];
        }
        f.write_str(std::str::from_utf8(&out).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_and_sort_by_time() {
        let a = Ulid::new(1_700_000_000_000);
        let b = Ulid::new(1_700_000_000_001);
        assert_eq!(Ulid::parse(&a.to_string()), Some(a));
        assert_eq!(a.ms(), 1_700_000_000_000);
        assert!(a.to_string() < b.to_string());
        assert_ne!(Ulid::new(5), Ulid::new(5));
        // The first 10 characters are the time: 48 bits, base 32.
        assert_eq!(Ulid(0).to_string(), "00000000000000000000000000");
        assert_eq!(
            Ulid::parse("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"),
            Some(Ulid(u128::MAX))
        );
        let u = Ulid::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("valid");
        assert_eq!(u.to_string(), "01ARZ3NDEKTSV4RRFFQ69G5FAV");
        assert!(Ulid::new(1_469_922_850_259)
            .to_string()
            .starts_with("01ARZ3NDEK"));
        assert_eq!(Ulid::parse("81ARZ3NDEKTSV4RRFFQ69G5FAV"), None);
    }
}
