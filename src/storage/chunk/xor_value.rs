//! The XOR coding of one float against the previous one (`xorWrite` and
//! `xorRead`), as the histogram chunks code their sums. The XOR chunk
//! has its own faster writer and reader of the same bits.

use super::bstream::BitCursor;
use super::BitWriter;

/// The window of meaningful bits the last value used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XorState {
    /// Leading zeros of the window; 0xff before the first window.
    pub leading: u8,
    /// Trailing zeros of the window.
    pub trailing: u8,
}

impl Default for XorState {
    fn default() -> Self {
        Self {
            leading: 0xff,
            trailing: 0,
        }
    }
}

/// Writes `v` against `prev`.
pub fn write_xor(w: &mut BitWriter, v: f64, prev: f64, s: &mut XorState) {
    let delta = v.to_bits() ^ prev.to_bits();
    if delta == 0 {
        w.write_bit(false);
        return;
    }
    let lead = (delta.leading_zeros() as u8).min(31);
    let trail = delta.trailing_zeros() as u8;
    if s.leading != 0xff && lead >= s.leading && trail >= s.trailing {
        // 1 0, then the bits inside the old window.
        w.write_bits(0b10, 2);
        let n = 64 - u32::from(s.leading) - u32::from(s.trailing);
        w.write_bits(delta >> s.trailing, n);
        return;
    }
    s.leading = lead;
    s.trailing = trail;
    let sig = 64 - u32::from(lead) - u32::from(trail);
    // 1 1, 5 bits of leading zeros, 6 of length (64 as 0), the bits.
    w.write_bits(0b11, 2);
    w.write_bits(u64::from(lead), 5);
    w.write_bits(u64::from(sig), 6);
    w.write_bits(delta >> trail, sig);
}

/// Reads a value written by [`write_xor`] against `prev`; `None` past the
/// end or on a window wider than 64 bits.
pub fn read_xor(r: &mut BitCursor<'_>, prev: f64, s: &mut XorState) -> Option<f64> {
    if !r.bit()? {
        return Some(prev);
    }
    let (lead, sig) = if !r.bit()? {
        // A reader starts with no window (0, 0: all 64 bits).
        let (l, t) = if s.leading == 0xff {
            (0, 0)
        } else {
            (s.leading, s.trailing)
        };
        (l, 64 - u32::from(l) - u32::from(t))
    } else {
        let lead = r.read(5)? as u8;
        let sig = match r.read(6)? as u32 {
            0 => 64,
            n => n,
        };
        if u32::from(lead) + sig > 64 {
            return None;
        }
        s.leading = lead;
        s.trailing = (64 - u32::from(lead) - sig) as u8;
        (lead, sig)
    };
    let trail = 64 - u32::from(lead) - sig;
    let bits = r.read(sig)?;
    Some(f64::from_bits(prev.to_bits() ^ (bits << trail)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn values_round_trip(vals in proptest::collection::vec(any::<f64>(), 1..60)) {
            let mut w = BitWriter::default();
            let mut s = XorState::default();
            let mut prev = 0.0;
            for &v in &vals {
                write_xor(&mut w, v, prev, &mut s);
                prev = v;
            }
            let mut r = BitCursor::new(w.bytes());
            let mut s = XorState::default();
            let mut prev = 0.0;
            for &v in &vals {
                let got = read_xor(&mut r, prev, &mut s);
                prop_assert_eq!(got.map(f64::to_bits), Some(v.to_bits()));
                prev = v;
            }
        }
    }
}
