//! Leaf: the byte-level codes every wire and disk format of Sluice shares
//! (protobuf varints, zigzag, a forward byte cursor). It names nothing above
//! it, so `wal`, `storage` and `ingest` all build on it.

/// Appends `v` as a protobuf varint: seven bits a byte, low bits first.
#[inline]
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `v` takes as a varint.
#[inline]
pub const fn uvarint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The varint at the start of `b` and its length; `None` when `b` ends
/// inside it or it runs past ten bytes.
#[inline]
pub fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Zigzag: small magnitudes of either sign become small unsigned values.
#[inline]
pub const fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub const fn unzigzag(u: u64) -> i64 {
    (u >> 1) as i64 ^ -((u & 1) as i64)
}

/// Reads fields forward from a byte slice; every read is `None` past the
/// end, so a short or damaged record is refused, never a panic.
#[derive(Debug, Clone, Copy)]
pub struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    /// A varint.
    pub fn uvarint(&mut self) -> Option<u64> {
        let (v, n) = uvarint(self.0)?;
        self.0 = &self.0[n..];
        Some(v)
    }

    /// One byte.
    pub fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// A little-endian `i64`.
    pub fn i64_le(&mut self) -> Option<i64> {
        let (b, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(i64::from_le_bytes(*b))
    }

    /// Bytes preceded by their length as a varint.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.uvarint()?).ok()?;
        if n > self.0.len() {
            return None;
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(b)
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip_as_prost_writes_them(v: u64, z: i64) {
            let mut ours = Vec::new();
            put_uvarint(&mut ours, v);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(v, &mut theirs);
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(uvarint_len(v), ours.len());
            prop_assert_eq!(uvarint(&ours), Some((v, ours.len())));
            prop_assert_eq!(uvarint(&ours[..ours.len() - 1]), None);
            prop_assert_eq!(unzigzag(zigzag(z)), z);
        }
    }

    #[test]
    fn a_cursor_refuses_reads_past_the_end() {
        let mut b = Vec::new();
        put_uvarint(&mut b, 3);
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&(-5i64).to_le_bytes());
        let mut c = Cursor(&b);
        assert_eq!(c.bytes(), Some(&b"abc"[..]));
        assert_eq!(c.i64_le(), Some(-5));
        assert!(c.is_empty());
        assert_eq!(c.byte(), None);
        assert_eq!(Cursor(&[5, b'a']).bytes(), None, "length past the end");
        assert_eq!(Cursor(&[0x80; 11]).uvarint(), None, "eleven-byte varint");
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }
}
