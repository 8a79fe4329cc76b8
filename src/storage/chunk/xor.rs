//! The XOR sample codec: delta-of-delta timestamps and XOR'd float values.

use super::{BitReader, BitWriter, ChunkError, HEADER_BYTES};

/// Sentinel for "no leading/trailing window chosen yet".
const UNSET: u8 = 0xff;

/// Appends samples to one XOR chunk. The chunk bytes are complete and valid
/// after every append, so readers may iterate a head chunk at any time.
#[derive(Debug, Clone)]
pub struct XorAppender {
    w: BitWriter,
    /// Samples in the chunk (as wide as a register: a 16-bit count was
    /// loaded 32 bits wide together with `second_end`, a load that cannot
    /// be forwarded from the 16-bit store before it, which stalled every
    /// append of a run of equal samples).
    num: u32,
    /// Bytes written when the second sample was (0 before): the samples
    /// after it are the ones a chunk's size is projected from.
    second_end: u16,
    t: i64,
    v: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
}

/// Most bytes one sample can add: a 64-bit timestamp code (4 + 64 bits)
/// and a value with new leading and trailing counts (2 + 5 + 6 + 64 bits);
/// the first two samples' varints stay under it too.
const MAX_SAMPLE_BYTES: usize = 20;

/// Samples a chunk usually holds when it is cut (Prometheus' target).
const TYPICAL_SAMPLES: usize = 120;

impl Default for XorAppender {
    /// An empty chunk whose first samples are written inline.
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl XorAppender {
    /// A new, empty chunk with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        let mut w = BitWriter::with_capacity(cap.max(HEADER_BYTES));
        w.write_bits(0, 16);
        Self {
            w,
            num: 0,
            second_end: 0,
            t: 0,
            v: 0,
            t_delta: 0,
            leading: UNSET,
            trailing: 0,
        }
    }

    /// Makes sure the sample `(t, vbits)` fits, growing the buffer only if
    /// it does not: the check before each append assumes the worst case,
    /// which would grow a buffer that is exactly full enough.
    #[cold]
    fn make_room(&mut self, t: i64, vbits: u64) {
        let need = (self.w.bit_len() + self.sample_bits(t, vbits) as usize).div_ceil(8);
        if need > self.w.capacity() {
            self.grow(need);
        }
    }

    /// Grows the buffer to hold at least `need` bytes. Instead of doubling
    /// (which leaves an open chunk up to half empty, for as long as it
    /// stays open), it grows to the size the chunk will have at a typical
    /// cut, projected from the bytes per sample so far, plus a sixteenth
    /// of what is left: a projection a little short costs a second heap
    /// block and leaves the first free in the allocator, where (at 100k
    /// series growing in step) little else reuses it. The first samples
    /// are written inline (see [`super::INLINE_BYTES`]), so a chunk's first
    /// heap block is already a projection. Before a typical chunk's
    /// samples are in, a short projection grows by one worst-case sample;
    /// past them, by an eighth. From two samples or fewer it doubles; it
    /// never grows more than eightfold at once.
    fn grow(&mut self, need: usize) {
        let len = self.w.bytes().len();
        let n = self.num as usize;
        let least = need
            + if n < TYPICAL_SAMPLES {
                MAX_SAMPLE_BYTES
            } else {
                len / 8
            };
        let target = if n > 2 {
            // The first sample holds a full timestamp and value, the
            // second a varint delta and the first XOR window: both are
            // larger than the rest, so they are left out when there are
            // samples after them.
            let (from, samples) = if n > 3 {
                (usize::from(self.second_end), n - 2)
            } else {
                (self.first_sample_end(), n - 1)
            };
            let rest = len.saturating_sub(from) * TYPICAL_SAMPLES.saturating_sub(n) / samples;
            len + rest + rest / 16
        } else {
            2 * len
        };
        self.w
            .reserve_total(target.clamp(least, (8 * len).max(least)));
    }

    /// Bits that appending `(t, vbits)` would write, by the same rules as
    /// [`XorAppender::append`].
    fn sample_bits(&self, t: i64, vbits: u64) -> u32 {
        match self.num {
            0 => 8 * uvarint_len(((t << 1) ^ (t >> 63)) as u64) + 64,
            1 => 8 * uvarint_len(t.wrapping_sub(self.t) as u64) + self.value_bits(vbits),
            _ => {
                let t_delta = t.wrapping_sub(self.t) as u64;
                let dod = t_delta.wrapping_sub(self.t_delta) as i64;
                if dod == 0 && vbits == self.v {
                    return 2;
                }
                dod_code(dod).map_or(68, |(_, width)| width) + self.value_bits(vbits)
            }
        }
    }

    /// Whether a XOR delta with these leading and trailing zeros fits the
    /// window of the previous value's (`10` code) rather than opening one.
    #[inline]
    fn fits_window(&self, lead: u8, trail: u8) -> bool {
        self.leading != UNSET && lead >= self.leading && trail >= self.trailing
    }

    /// Bits of the value's XOR code (see [`XorAppender::write_value`]).
    fn value_bits(&self, vbits: u64) -> u32 {
        let delta = vbits ^ self.v;
        if delta == 0 {
            return 1;
        }
        let lead = (delta.leading_zeros() as u8).min(31);
        let trail = delta.trailing_zeros() as u8;
        if self.fits_window(lead, trail) {
            2 + 64 - u32::from(self.leading) - u32::from(self.trailing)
        } else {
            13 + 64 - u32::from(lead) - u32::from(trail)
        }
    }

    /// Where the first sample ends: the header, its timestamp's varint and
    /// its 8-byte value.
    fn first_sample_end(&self) -> usize {
        let b = self.w.bytes();
        let varint = b
            .iter()
            .skip(HEADER_BYTES)
            .position(|&x| x & 0x80 == 0)
            .map_or(0, |i| i + 1);
        (HEADER_BYTES + varint + 8).min(b.len())
    }

    /// Samples in the chunk.
    #[inline]
    pub fn num_samples(&self) -> u16 {
        self.num as u16
    }

    /// The chunk bytes, header included.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.w.bytes()
    }

    /// The newest sample, if any.
    #[inline]
    pub fn last(&self) -> Option<(i64, f64)> {
        (self.num > 0).then(|| (self.t, f64::from_bits(self.v)))
    }

    /// Bytes reserved by the chunk buffer.
    pub fn capacity(&self) -> usize {
        self.w.capacity()
    }

    /// Appends a sample. The caller keeps timestamps increasing and the
    /// sample count below `u16::MAX`; the head cuts chunks long before that.
    #[inline]
    pub fn append(&mut self, t: i64, v: f64) {
        let vbits = v.to_bits();
        let t_delta = t.wrapping_sub(self.t) as u64;
        if self.num >= 2 && t_delta == self.t_delta && vbits == self.v {
            // Regular interval, same value: `0` `0`. Checked before the
            // worst-case room check, which a run of these would otherwise
            // fail for every sample in a chunk's last 20 bytes.
            if !self.w.has_room_for(2) {
                self.make_room(t, vbits);
            }
            self.w.write_zeros(2);
            self.finish(t, vbits);
            return;
        }
        if self.w.capacity() - self.w.bytes().len() < MAX_SAMPLE_BYTES {
            self.make_room(t, vbits);
        }
        match self.num {
            0 => {
                write_varint(&mut self.w, t);
                self.w.write_bits(vbits, 64);
            }
            n if n >= 2 => {
                let dod = t_delta.wrapping_sub(self.t_delta) as i64;
                self.t_delta = t_delta;
                // Timestamp code as (bits, width); the 64-bit case is rare.
                let (code, width) = match dod_code(dod) {
                    Some(code) => code,
                    None => {
                        self.w.write_bits(0b1111, 4);
                        (dod as u64, 64)
                    }
                };
                self.write_value(vbits, code, width);
            }
            _ => {
                self.t_delta = t_delta;
                write_uvarint(&mut self.w, self.t_delta);
                self.write_value(vbits, 0, 0);
                self.second_end = self.w.bytes().len() as u16;
            }
        }
        self.finish(t, vbits);
    }

    /// Records the sample as the newest and bumps the header count.
    #[inline]
    fn finish(&mut self, t: i64, vbits: u64) {
        self.t = t;
        self.v = vbits;
        self.num += 1;
        self.w.set_header((self.num as u16).to_be_bytes());
    }

    /// Writes the value's XOR code, preceded by `prefix` (the timestamp's
    /// code, `width` bits, possibly none) in the same write when they fit.
    #[inline]
    fn write_value(&mut self, vbits: u64, prefix: u64, width: u32) {
        let delta = vbits ^ self.v;
        if delta == 0 {
            // `0`: value unchanged.
            self.write_pair(prefix, width, 0, 1);
            return;
        }
        let lead = (delta.leading_zeros() as u8).min(31);
        let trail = delta.trailing_zeros() as u8;
        if self.fits_window(lead, trail) {
            // `10` then the significant bits inside the previous window.
            let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
            let payload = delta >> self.trailing;
            if sig <= 62 {
                self.write_pair(prefix, width, (0b10 << sig) | payload, sig + 2);
            } else {
                self.write_pair(prefix, width, 0b10, 2);
                self.w.write_bits(payload, sig);
            }
            return;
        }
        self.leading = lead;
        self.trailing = trail;
        let sig = 64 - u32::from(lead) - u32::from(trail);
        // `11`, 5 bits of leading zeros, 6 bits of significant-bit count
        // (64 is written as 0): 13 control bits in one write.
        let ctl = (0b11 << 11) | (u64::from(lead) << 6) | u64::from(sig & 0x3f);
        self.write_pair(prefix, width, ctl, 13);
        self.w.write_bits(delta >> trail, sig);
    }

    /// Writes `a` (`an` bits, maybe 0) then `b` (`bn` ≥ 1 bits), as one
    /// write when both fit in 64 bits.
    #[inline]
    fn write_pair(&mut self, a: u64, an: u32, b: u64, bn: u32) {
        if an == 0 {
            self.w.write_bits(b, bn);
        } else if an + bn <= 64 {
            self.w.write_bits((a << bn) | b, an + bn);
        } else {
            self.w.write_bits(a, an);
            self.w.write_bits(b, bn);
        }
    }
}

/// The timestamp code of a delta-of-delta as (bits, width), or `None` for
/// the 64-bit case (`1111` then the whole value).
#[inline]
fn dod_code(dod: i64) -> Option<(u64, u32)> {
    if dod == 0 {
        Some((0, 1))
    } else if bit_range(dod, 14) {
        Some(((0b10 << 14) | (dod as u64 & 0x3fff), 16))
    } else if bit_range(dod, 17) {
        Some(((0b110 << 17) | (dod as u64 & 0x1_ffff), 20))
    } else if bit_range(dod, 20) {
        Some(((0b1110 << 20) | (dod as u64 & 0xf_ffff), 24))
    } else {
        None
    }
}

/// `-(2^(n-1)-1) <= x <= 2^(n-1)`: Prometheus' asymmetric range test.
#[inline]
fn bit_range(x: i64, n: u32) -> bool {
    let half = 1i64 << (n - 1);
    -(half - 1) <= x && x <= half
}

fn write_varint(w: &mut BitWriter, v: i64) {
    write_uvarint(w, ((v << 1) ^ (v >> 63)) as u64);
}

/// Bytes of `v` as a uvarint.
fn uvarint_len(v: u64) -> u32 {
    (64 - (v | 1).leading_zeros()).div_ceil(7)
}

fn write_uvarint(w: &mut BitWriter, mut v: u64) {
    while v >= 0x80 {
        w.write_byte(v as u8 | 0x80);
        v >>= 7;
    }
    w.write_byte(v as u8);
}

fn read_uvarint(r: &mut BitReader<'_>) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = r.read_byte()?;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Iterates the samples of a chunk's bytes. A malformed chunk ends the
/// iteration early and leaves the reason in [`XorIter::err`].
#[derive(Debug, Clone)]
pub struct XorIter<'a> {
    r: BitReader<'a>,
    total: u16,
    read: u16,
    /// Samples still to return from a run of `00` codes already consumed.
    repeats: u16,
    t: i64,
    v: u64,
    t_delta: u64,
    leading: u8,
    trailing: u8,
    err: Option<ChunkError>,
}

impl<'a> XorIter<'a> {
    /// Iterates `chunk`, header included.
    pub fn new(chunk: &'a [u8]) -> Self {
        let (total, body, err) = match chunk {
            [a, b, body @ ..] => (u16::from_be_bytes([*a, *b]), body, None),
            _ => (0, &[][..], Some(ChunkError::NoHeader)),
        };
        Self {
            r: BitReader::new(body),
            total,
            read: 0,
            repeats: 0,
            t: 0,
            v: 0,
            t_delta: 0,
            leading: 0,
            trailing: 0,
            err,
        }
    }

    /// Why iteration stopped early, if it did.
    pub fn err(&self) -> Option<ChunkError> {
        self.err
    }

    #[inline]
    fn step(&mut self) -> Option<(i64, f64)> {
        match self.read {
            0 => {
                let zz = read_uvarint(&mut self.r)?;
                self.t = ((zz >> 1) as i64) ^ -((zz & 1) as i64);
                self.v = self.r.read_bits(64)?;
            }
            1 => {
                self.t_delta = read_uvarint(&mut self.r)?;
                self.t = self.t.wrapping_add(self.t_delta as i64);
                self.read_value()?;
            }
            _ => {
                let dod = if self.r.ensure(24) {
                    let top = self.r.peek_all();
                    if top >> 62 == 0 {
                        // Regular interval, same value: `0` `0`. They come
                        // in runs, so every pair of zeros among the valid
                        // buffered bits is taken at once (at most the
                        // samples left: the last byte's padding is zeros
                        // too), and the rest returned by `next` directly.
                        let zeros = top.leading_zeros().min(self.r.available());
                        let pairs = (zeros / 2)
                            .min(31)
                            .min(u32::from(self.total - self.read))
                            .max(1);
                        self.r.consume(2 * pairs);
                        self.repeats = (pairs - 1) as u16;
                        self.t = self.t.wrapping_add(self.t_delta as i64);
                        self.read += 1;
                        return Some((self.t, f64::from_bits(self.v)));
                    }
                    self.read_dod(top)?
                } else {
                    self.read_dod_slow()?
                };
                self.t_delta = self.t_delta.wrapping_add(dod as u64);
                self.t = self.t.wrapping_add(self.t_delta as i64);
                self.read_value()?;
            }
        }
        self.read += 1;
        Some((self.t, f64::from_bits(self.v)))
    }

    /// Decodes a delta-of-delta from `top`, the buffered bits, of which at
    /// least 24 are valid: prefix and payload of every case but the 64-bit
    /// one fit in them.
    #[inline]
    fn read_dod(&mut self, top: u64) -> Option<i64> {
        let (sz, used) = match (!top).leading_zeros() {
            0 => {
                self.r.consume(1);
                return Some(0);
            }
            1 => (14, 16),
            2 => (17, 20),
            3 => (20, 24),
            _ => {
                self.r.consume(4);
                return self.r.read_bits(64).map(|b| b as i64);
            }
        };
        let mut bits = (top >> (64 - used)) & ((1 << sz) - 1);
        self.r.consume(used);
        if bits > 1 << (sz - 1) {
            bits = bits.wrapping_sub(1 << sz);
        }
        Some(bits as i64)
    }

    /// Bit by bit, for the last few bits of a chunk.
    #[cold]
    fn read_dod_slow(&mut self) -> Option<i64> {
        let sz = match self.r.read_bit()? {
            false => return Some(0),
            true if !self.r.read_bit()? => 14,
            true if !self.r.read_bit()? => 17,
            true if !self.r.read_bit()? => 20,
            true => return self.r.read_bits(64).map(|b| b as i64),
        };
        let mut bits = self.r.read_bits(sz)?;
        if bits > 1 << (sz - 1) {
            bits = bits.wrapping_sub(1 << sz);
        }
        Some(bits as i64)
    }

    #[inline]
    fn read_value(&mut self) -> Option<()> {
        if !self.r.ensure(13) {
            return self.read_value_slow();
        }
        let top = self.r.peek_all();
        if top >> 63 == 0 {
            self.r.consume(1);
            return Some(());
        }
        if top >> 62 == 0b11 {
            // `11`, 5 bits leading, 6 bits significant count.
            self.leading = ((top >> 57) & 0x1f) as u8;
            let sig = match ((top >> 51) & 0x3f) as u8 {
                0 => 64,
                n => n,
            };
            self.r.consume(13);
            // A corrupt chunk could claim more bits than a u64 holds.
            self.trailing = 64u8.checked_sub(self.leading + sig)?;
        } else {
            self.r.consume(2);
        }
        self.read_significant()
    }

    /// Bit by bit, for the last few bits of a chunk.
    #[cold]
    fn read_value_slow(&mut self) -> Option<()> {
        if !self.r.read_bit()? {
            return Some(());
        }
        if self.r.read_bit()? {
            let ctl = self.r.read_bits(11)?;
            self.leading = (ctl >> 6) as u8;
            let sig = match (ctl & 0x3f) as u8 {
                0 => 64,
                n => n,
            };
            self.trailing = 64u8.checked_sub(self.leading + sig)?;
        }
        self.read_significant()
    }

    #[inline]
    fn read_significant(&mut self) -> Option<()> {
        let sig = 64 - u32::from(self.leading) - u32::from(self.trailing);
        if sig == 0 {
            return None;
        }
        let bits = self.r.read_bits(sig)?;
        self.v ^= bits << self.trailing;
        Some(())
    }
}

impl Iterator for XorIter<'_> {
    type Item = (i64, f64);

    #[inline]
    fn next(&mut self) -> Option<(i64, f64)> {
        if self.read >= self.total || self.err.is_some() {
            return None;
        }
        if self.repeats > 0 {
            self.repeats -= 1;
            self.t = self.t.wrapping_add(self.t_delta as i64);
            self.read += 1;
            return Some((self.t, f64::from_bits(self.v)));
        }
        let s = self.step();
        if s.is_none() {
            self.err = Some(ChunkError::Truncated);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(samples: &[(i64, f64)]) -> Vec<u8> {
        let mut a = XorAppender::default();
        for &(t, v) in samples {
            a.append(t, v);
        }
        a.bytes().to_vec()
    }

    /// Buffer sizes an appender goes through over `n` samples.
    fn growth(n: i64, value: impl Fn(i64) -> f64) -> (Vec<usize>, usize) {
        let mut a = XorAppender::default();
        let mut caps = vec![a.capacity()];
        for i in 0..n {
            a.append(1_700_000_000_000 + i * 15_000, value(i));
            if a.capacity() != *caps.last().expect("one") {
                caps.push(a.capacity());
            }
        }
        (caps, a.bytes().len())
    }

    #[test]
    fn buffers_grow_to_their_projected_size_in_few_steps() {
        // A gauge wandering by tenths and a counter rising by whole
        // amounts, as the benchmark load sends them.
        let gauge = |i: i64| 50.0 + ((i * 7919) % 23) as f64 / 10.0;
        let counter = |i: i64| (i * 3 + (i * 7) % 5) as f64;
        for (name, (caps, len)) in [
            ("gauge", growth(120, gauge)),
            ("counter", growth(120, counter)),
        ] {
            // The first buffer, one projection, at most one correction
            // (growing at most twofold took 128, 216, 432, 864).
            assert!(caps.len() <= 3, "{name}: {caps:?}");
            // The projection does not leave the chunk a third empty.
            let cap = *caps.last().expect("one");
            assert!(cap * 2 <= len * 3, "{name}: {len} bytes in {caps:?}");
        }
    }

    #[test]
    fn first_samples_stay_inline() {
        let mut a = XorAppender::default();
        assert!(!a.w.on_heap());
        a.append(1_700_000_000_000, 50.0);
        a.append(1_700_000_015_000, 50.1);
        a.append(1_700_000_030_000, 50.3);
        assert!(!a.w.on_heap(), "{} bytes", a.bytes().len());
        for i in 3..120 {
            a.append(1_700_000_000_000 + i * 15_000, 50.0 + i as f64 / 10.0);
        }
        assert!(a.w.on_heap());
        let got: Vec<_> = XorIter::new(a.bytes()).map(|(_, v)| v).collect();
        assert_eq!(got.len(), 120);
        assert_eq!(got[1], 50.1);
    }

    // Golden chunks derived by hand from the format in wire-formats.md §4.
    //
    // Sample (1000, 1.0):
    //   header            00 01
    //   ts_0 zig-zag(1000) = 2000 = 0b1111_1010000 -> uvarint D0 0F
    //   v_0 bits of 1.0   3F F0 00 00 00 00 00 00
    const ONE: &[u8] = &[0x00, 0x01, 0xD0, 0x0F, 0x3F, 0xF0, 0, 0, 0, 0, 0, 0];

    #[test]
    fn golden_single_sample() {
        assert_eq!(encode(&[(1000, 1.0)]), ONE);
    }

    // Add (2000, 1.0):
    //   ts_1_delta 1000 = 0b111_1101000 -> uvarint E8 07
    //   value unchanged -> bit `0`, padded to one zero byte 00
    #[test]
    fn golden_second_sample_same_value() {
        let mut want = ONE.to_vec();
        want[1] = 2;
        want.extend_from_slice(&[0xE8, 0x07, 0x00]);
        assert_eq!(encode(&[(1000, 1.0), (2000, 1.0)]), want);
    }

    // Add (3010, 3.0) and then (4020, 1.0):
    //   v_1 `0`
    //   t_2 dod = 1010-1000 = 10 -> `10` + 14 bits 00000000001010
    //   v_2 3.0^1.0 = 0x7FF8000000000000: 1 leading, 51 trailing zeros, 12 sig
    //       bits; no window yet -> `11` 00001 001100 + 12 ones
    //   t_3 dod = 0 -> `0`
    //   v_3 1.0^3.0 is the same delta: fits the window -> `10` + 12 ones
    // Stream: 0 10 00000000001010 11 00001 001100 111111111111 0 10 111111111111
    //   0100_0000 0000_0101 0110_0001 0011_0011 1111_1111 1101_0111 1111_1111 1(000_0000)
    //   = 40 05 61 33 FF D7 FF 80
    #[test]
    fn golden_dod_and_xor_windows() {
        let mut want = ONE.to_vec();
        want[1] = 4;
        want.extend_from_slice(&[0xE8, 0x07, 0x40, 0x05, 0x61, 0x33, 0xFF, 0xD7, 0xFF, 0x80]);
        let got = encode(&[(1000, 1.0), (2000, 1.0), (3010, 3.0), (4020, 1.0)]);
        assert_eq!(got, want);
        // After three samples the stream stops at 42 bits: the last byte is 11 + 6 pad zeros.
        let three = encode(&[(1000, 1.0), (2000, 1.0), (3010, 3.0)]);
        assert_eq!(&three[14..], &[0x40, 0x05, 0x61, 0x33, 0xFF, 0xC0]);
    }

    // A negative first timestamp: zig-zag(-1) = 1 -> 01.
    #[test]
    fn golden_negative_timestamp() {
        assert_eq!(encode(&[(-1, 0.0)]), &[0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn truncated_chunk_reports_error() {
        let bytes = encode(&[(1000, 1.0), (2000, 2.0), (3000, 5.0)]);
        let mut it = XorIter::new(&bytes[..bytes.len() - 2]);
        assert_eq!(it.by_ref().count(), 2);
        assert_eq!(it.err(), Some(ChunkError::Truncated));
        assert_eq!(XorIter::new(&[1]).err(), Some(ChunkError::NoHeader));
    }

    fn value() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>(),
            Just(f64::NAN),
            Just(f64::from_bits(0x7ff0_0000_0000_0002)),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0),
            Just(0.0),
            (-1000i32..1000).prop_map(f64::from),
        ]
    }

    fn step() -> impl Strategy<Value = i64> {
        prop_oneof![
            Just(15_000i64),
            (14_950i64..15_050),
            (1i64..10_000_000),
            (1i64..i64::MAX / 1024),
        ]
    }

    proptest! {
        #[test]
        fn round_trip(t0 in -(1i64 << 50)..(1i64 << 50),
                      steps in proptest::collection::vec((step(), value(), any::<bool>()), 0..300)) {
            let mut samples = Vec::new();
            let mut t = t0;
            let mut last = 0.0f64;
            for (dt, v, repeat) in steps {
                let v = if repeat { last } else { v };
                samples.push((t, v));
                last = v;
                t = match t.checked_add(dt) { Some(t) => t, None => break };
            }
            // The size check before each append predicts every sample's
            // bits exactly.
            let mut a = XorAppender::default();
            for &(t, v) in &samples {
                let before = a.w.bit_len();
                let predicted = a.sample_bits(t, v.to_bits()) as usize;
                a.append(t, v);
                prop_assert_eq!(a.w.bit_len() - before, predicted);
            }
            let bytes = encode(&samples);
            prop_assert_eq!(a.bytes(), &bytes[..]);
            let mut it = XorIter::new(&bytes);
            let got: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            let want: Vec<(i64, u64)> = samples.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            prop_assert_eq!(it.err(), None);
            prop_assert_eq!(got, want);
        }
    }
}
