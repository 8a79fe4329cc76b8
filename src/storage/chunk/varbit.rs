//! Prometheus' variable-width bit encoding of integers (`varbit.go`), used
//! by the histogram chunks: a unary prefix of up to eight bits picks the
//! payload width (0, 3, 6, 9, 12, 18, 25, 56 or 64 bits).

use super::bstream::BitCursor;
use super::BitWriter;

/// Payload widths by prefix length: a prefix of `k` ones then a zero
/// (`k` < 8) is followed by `WIDTHS[k]` bits; eight ones by 64.
const WIDTHS: [u32; 8] = [0, 3, 6, 9, 12, 18, 25, 56];

/// Whether `x` fits an `n`-bit field as Prometheus reads it back:
/// -(2^(n-1) - 1) ≤ x ≤ 2^(n-1).
fn fits_signed(x: i64, n: u32) -> bool {
    let half = 1i64 << (n - 1);
    -(half - 1) <= x && x <= half
}

/// Writes the prefix of `k` ones (then a zero, unless `k` is 8).
fn prefix(w: &mut BitWriter, k: u32) {
    if k == 8 {
        w.write_bits(0xff, 8);
    } else {
        // k ones then a zero: (2^k - 1) << 1.
        w.write_bits(((1u64 << k) - 1) << 1, k + 1);
    }
}

/// Writes a signed integer.
pub fn put_int(w: &mut BitWriter, v: i64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    for (k, &n) in WIDTHS.iter().enumerate().skip(1) {
        if fits_signed(v, n) {
            prefix(w, k as u32);
            w.write_bits(v as u64 & ((1u64 << n) - 1), n);
            return;
        }
    }
    prefix(w, 8);
    w.write_bits(v as u64, 64);
}

/// Writes an unsigned integer.
pub fn put_uint(w: &mut BitWriter, v: u64) {
    if v == 0 {
        w.write_bit(false);
        return;
    }
    let used = 64 - v.leading_zeros();
    for (k, &n) in WIDTHS.iter().enumerate().skip(1) {
        if used <= n {
            prefix(w, k as u32);
            w.write_bits(v, n);
            return;
        }
    }
    prefix(w, 8);
    w.write_bits(v, 64);
}

/// The prefix's length in ones (0 to 8).
fn read_prefix(r: &mut BitCursor<'_>) -> Option<u32> {
    let mut k = 0;
    while k < 8 && r.bit()? {
        k += 1;
    }
    Some(k)
}

/// Reads a signed integer written by [`put_int`].
pub fn read_int(r: &mut BitCursor<'_>) -> Option<i64> {
    let k = read_prefix(r)?;
    if k == 8 {
        return r.read(64).map(|b| b as i64);
    }
    let n = WIDTHS[k as usize];
    if n == 0 {
        return Some(0);
    }
    let bits = r.read(n)?;
    // Values above 2^(n-1) are negative.
    Some(if bits > 1 << (n - 1) {
        bits as i64 - (1i64 << n)
    } else {
        bits as i64
    })
}

/// Reads an unsigned integer written by [`put_uint`].
pub fn read_uint(r: &mut BitCursor<'_>) -> Option<u64> {
    let k = read_prefix(r)?;
    if k == 8 {
        return r.read(64);
    }
    let n = WIDTHS[k as usize];
    if n == 0 {
        return Some(0);
    }
    r.read(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bits_of(f: impl Fn(&mut BitWriter)) -> (Vec<u8>, usize) {
        let mut w = BitWriter::default();
        f(&mut w);
        (w.bytes().to_vec(), w.bit_len())
    }

    #[test]
    fn widths_switch_where_prometheus_switches() {
        // (value, bits written): 1 for 0, prefix + payload otherwise.
        for (v, len) in [
            (0i64, 1),
            (-3, 5),
            (4, 5),
            (5, 9),
            (-4, 9),
            (32, 9),
            (33, 13),
            (-31, 9),
            (-32, 13),
            (2048, 17),
            (2049, 24),
            (131_072, 24),
            (131_073, 32),
            (16_777_216, 32),
            (16_777_217, 64),
            (1 << 55, 64),
            ((1 << 55) + 1, 72),
            (i64::MIN, 72),
            (i64::MAX, 72),
        ] {
            let (_, n) = bits_of(|w| put_int(w, v));
            assert_eq!(n, len, "{v}");
        }
        for (v, len) in [
            (0u64, 1),
            (7, 5),
            (8, 9),
            (63, 9),
            (64, 13),
            (4095, 17),
            (4096, 24),
            (33_554_431, 32),
            (33_554_432, 64),
            (u64::MAX, 72),
        ] {
            let (_, n) = bits_of(|w| put_uint(w, v));
            assert_eq!(n, len, "{v}");
        }
        // 4 as 10 100; -3 as 10 101 (two's complement in 3 bits).
        assert_eq!(bits_of(|w| put_int(w, 4)).0, [0b1010_0000]);
        assert_eq!(bits_of(|w| put_int(w, -3)).0, [0b1010_1000]);
    }

    proptest! {
        #[test]
        fn ints_and_uints_round_trip(vals in proptest::collection::vec(any::<i64>(), 0..50), small in proptest::collection::vec(-300i64..300, 0..50), uvals in proptest::collection::vec(any::<u64>(), 0..50)) {
            let mut w = BitWriter::default();
            for &v in vals.iter().chain(&small) {
                put_int(&mut w, v);
            }
            for &v in &uvals {
                put_uint(&mut w, v);
            }
            let mut r = BitCursor::new(w.bytes());
            for &v in vals.iter().chain(&small) {
                prop_assert_eq!(read_int(&mut r), Some(v));
            }
            for &v in &uvals {
                prop_assert_eq!(read_uint(&mut r), Some(v));
            }
        }

        #[test]
        fn reading_any_bytes_ends_or_fails_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut r = BitCursor::new(&bytes);
            while read_int(&mut r).is_some() {}
            let mut r = BitCursor::new(&bytes);
            while read_uint(&mut r).is_some() {}
        }
    }
}
