//! Bit stream writer and reader, most-significant bit first, as Prometheus'
//! `bstream`. The writer keeps the partial last byte inside the buffer, so the
//! bytes are a valid chunk at any moment; the reader keeps up to 64 bits in a
//! register and refills eight bytes at a time.

/// Appends bits to a byte buffer, MSB first. Unused low bits of the last byte
/// stay zero, which is the padding the format expects.
#[derive(Debug, Clone, Default)]
pub struct BitWriter {
    bytes: Vec<u8>,
    /// Free bits left in the last byte (0 when the stream is byte-aligned).
    free: u32,
}

impl BitWriter {
    /// A writer with room for `cap` bytes before it reallocates.
    pub fn with_capacity(cap: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(cap),
            free: 0,
        }
    }

    /// The bytes written so far, the partial last byte included.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Mutable access for fixed-position fields such as the chunk header.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// Grows the buffer to hold `total` bytes without reallocating.
    pub fn reserve_total(&mut self, total: usize) {
        self.bytes
            .reserve_exact(total.saturating_sub(self.bytes.len()));
    }

    /// Bytes reserved by the buffer (for memory accounting).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Writes one whole byte (which straddles two bytes when unaligned).
    #[inline]
    pub fn write_byte(&mut self, b: u8) {
        self.write_bits(u64::from(b), 8);
    }

    /// Writes a single bit.
    #[inline]
    pub fn write_bit(&mut self, bit: bool) {
        if self.free == 0 {
            self.bytes.push(if bit { 0x80 } else { 0 });
            self.free = 7;
        } else {
            self.free -= 1;
            if bit {
                if let Some(last) = self.bytes.last_mut() {
                    *last |= 1 << self.free;
                }
            }
        }
    }

    /// Writes `n` zero bits (1 ≤ n ≤ 64). Free bits are already zero, so
    /// this often only moves the bit position.
    #[inline]
    pub fn write_zeros(&mut self, n: u32) {
        if n <= self.free {
            self.free -= n;
        } else {
            self.write_bits(0, n);
        }
    }

    /// Writes the low `n` bits of `v` (1 ≤ n ≤ 64), most significant first.
    ///
    /// One call fills the partial last byte, then appends the rest with a
    /// single slice copy rather than bit by bit.
    #[inline]
    pub fn write_bits(&mut self, v: u64, n: u32) {
        debug_assert!((1..=64).contains(&n));
        // Left-align the payload so the next bit to write is bit 63.
        let mut v = v << (64 - n);
        let mut n = n;
        if self.free > 0 {
            let take = self.free.min(n);
            let top = (v >> (64 - take)) as u8;
            if let Some(last) = self.bytes.last_mut() {
                *last |= top << (self.free - take);
            }
            self.free -= take;
            n -= take;
            if n == 0 {
                return;
            }
            v <<= take;
        }
        let whole = n.div_ceil(8);
        self.bytes
            .extend_from_slice(&v.to_be_bytes()[..whole as usize]);
        self.free = whole * 8 - n;
    }
}

/// Reads bits MSB first from a byte slice.
#[derive(Debug, Clone)]
pub struct BitReader<'a> {
    data: &'a [u8],
    /// Next byte of `data` not yet in `buf`.
    pos: usize,
    /// Buffered bits, left-aligned: the next bit to read is bit 63.
    buf: u64,
    /// How many bits of `buf` are valid.
    avail: u32,
}

impl<'a> BitReader<'a> {
    /// A reader positioned at the first bit of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self {
            data,
            pos: 0,
            buf: 0,
            avail: 0,
        }
    }

    /// Loads bytes until at least 57 bits are buffered or the data ends.
    #[inline]
    fn refill(&mut self) {
        if let Some(word) = self.data.get(self.pos..self.pos + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let w = u64::from_be_bytes(w);
            // `avail` < 64 here (refill runs only when more bits are needed).
            self.buf |= w >> self.avail;
            let n = (63 - self.avail) / 8;
            self.pos += n as usize;
            self.avail += n * 8;
        } else {
            while self.avail <= 56 {
                let Some(&b) = self.data.get(self.pos) else {
                    break;
                };
                self.buf |= u64::from(b) << (56 - self.avail);
                self.pos += 1;
                self.avail += 8;
            }
        }
    }

    /// Reads `n` bits (1 ≤ n ≤ 64), or `None` when the data runs out.
    #[inline]
    pub fn read_bits(&mut self, n: u32) -> Option<u64> {
        debug_assert!((1..=64).contains(&n));
        if n > 56 {
            let hi = self.read_bits(n - 32)?;
            let lo = self.read_bits(32)?;
            return Some((hi << 32) | lo);
        }
        if self.avail < n {
            self.refill();
            if self.avail < n {
                return None;
            }
        }
        let v = self.buf >> (64 - n);
        self.buf <<= n;
        self.avail -= n;
        Some(v)
    }

    /// Makes at least `n` (≤ 56) bits visible in [`BitReader::peek_all`];
    /// false when fewer remain.
    #[inline]
    pub fn ensure(&mut self, n: u32) -> bool {
        debug_assert!(n <= 56);
        if self.avail < n {
            self.refill();
        }
        self.avail >= n
    }

    /// The buffered bits, left-aligned; only the first `ensure`d ones count.
    #[inline]
    pub fn peek_all(&self) -> u64 {
        self.buf
    }

    /// Drops `n` (< 64) bits that [`BitReader::ensure`] made visible.
    #[inline]
    pub fn consume(&mut self, n: u32) {
        debug_assert!(n <= self.avail && n < 64);
        self.buf <<= n;
        self.avail -= n;
    }

    /// Reads one bit.
    #[inline]
    pub fn read_bit(&mut self) -> Option<bool> {
        self.read_bits(1).map(|b| b == 1)
    }

    /// Reads one byte.
    #[inline]
    pub fn read_byte(&mut self) -> Option<u8> {
        self.read_bits(8).map(|b| b as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn zeros_only_advance_within_a_byte() {
        let mut w = BitWriter::default();
        w.write_bit(true);
        w.write_zeros(2);
        w.write_bit(true);
        w.write_zeros(9);
        w.write_bit(true);
        // 1 00 1 000000000 1: bit 14 is set.
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0100]);
        w.write_bit(true);
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0110]);
        w.write_zeros(2);
        w.write_bit(true);
        assert_eq!(w.bytes(), &[0b1001_0000, 0b0000_0110, 0b0100_0000]);
    }

    #[test]
    fn bits_land_msb_first_and_pad_with_zeros() {
        let mut w = BitWriter::default();
        w.write_bit(true);
        w.write_bits(0b01, 2);
        w.write_bits(0xABCD, 16);
        // 1 01 1010101111001101 -> 1011 0101 0111 1001 101(0 0000)
        assert_eq!(w.bytes(), &[0b1011_0101, 0b0111_1001, 0b1010_0000]);
    }

    proptest! {
        #[test]
        fn writer_and_reader_agree(fields in proptest::collection::vec((any::<u64>(), 1u32..=64), 0..200)) {
            let mut w = BitWriter::default();
            for &(v, n) in &fields {
                w.write_bits(v, n);
            }
            let total: u32 = fields.iter().map(|f| f.1).sum();
            prop_assert_eq!(w.bytes().len() as u32, total.div_ceil(8));
            let mut r = BitReader::new(w.bytes());
            for &(v, n) in &fields {
                let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
                prop_assert_eq!(r.read_bits(n), Some(v & mask));
            }
            let pad = total.div_ceil(8) * 8 - total;
            if pad > 0 {
                prop_assert_eq!(r.read_bits(pad), Some(0));
            }
            prop_assert_eq!(r.read_bit(), None);
        }
    }
}
