//! WAL records: how one record is framed on disk and what it holds.
//!
//! A frame is `len: u32 LE | crc: u32 LE | kind: u8 | payload`, where `len`
//! counts `kind` and `payload`, and `crc` is the CRC32C (Castagnoli) of
//! those same bytes. Kinds:
//! - `1` series: `ref: uvarint | labels`, the labels in the head's canonical
//!   encoding (the remote-write `Label` encoding, sorted);
//! - `2` samples: `base_t: i64 LE`, then per sample
//!   `ref: uvarint | t - base_t: zigzag varint | v: f64 bits LE`;
//! - `3` one series of a checkpoint (`storage::checkpoint`'s layout);
//! - `8` the same, with sealed chunks that may be referred to in the
//!   checkpoint's chunk files rather than held (`storage::checkpoint`);
//! - `5` native histogram samples (see [`histograms`] for the layout);
//! - `4` exemplars, self-contained (keyed by labels, not references, so a
//!   checkpoint can carry them too): per exemplar `series: uvarint length |
//!   canonical labels | labels: uvarint length | canonical labels |
//!   t: zigzag varint | v: f64 bits LE`;
//! - `7` start-time runs: per run `ref: uvarint | run`, the run in
//!   `storage::starts`' layout (the log carries the bytes, the store reads
//!   them);
//! - `6` flushed: `below: i64 LE | block ULIDs: 16 big-endian bytes each`;
//! - `9` tombstones (deleted time ranges of series defined earlier): per
//!   range `ref: uvarint | mint: zigzag varint | maxt: zigzag varint`,
//!   both ends included, as Prometheus' tombstone records hold them.

pub mod histograms;

pub use histograms::Histograms;

/// Bytes before a record's kind: length and CRC.
pub const HEADER: usize = 8;

/// The largest record accepted on replay; a larger length is corruption.
pub const MAX_RECORD: usize = 64 << 20;

const SERIES: u8 = 1;
const SAMPLES: u8 = 2;
const CHECKPOINT: u8 = 3;
const EXEMPLARS: u8 = 4;
const HISTOGRAMS: u8 = 5;
const FLUSHED: u8 = 6;
const STARTS: u8 = 7;
const CHECKPOINT_REFS: u8 = 8;
const TOMBSTONES: u8 = 9;

/// One decoded record, borrowing the segment's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Record<'a> {
    /// A new series: its reference and canonical labels.
    Series {
        /// The series reference samples use.
        series_ref: u64,
        /// Canonical label bytes.
        labels: &'a [u8],
    },
    /// Samples for series defined earlier.
    Samples(Samples<'a>),
    /// One series of a checkpoint, in the checkpoint's own layout (see
    /// `storage::checkpoint`); never in WAL segments.
    Checkpoint(&'a [u8]),
    /// One series of a checkpoint whose sealed chunks may be held in the
    /// checkpoint's chunk files (see `storage::checkpoint`); never in WAL
    /// segments.
    CheckpointRefs(&'a [u8]),
    /// Exemplars, each with its series' labels.
    Exemplars(Exemplars<'a>),
    /// Native histogram samples for series defined earlier.
    Histograms(Histograms<'a>),
    /// Samples older than `below` logged before this record are in the
    /// blocks named, once every one of them exists (the head's late
    /// samples handed to blocks: replay drops them from here on).
    Flushed {
        /// The time the samples handed over are older than.
        below: i64,
        /// The blocks' ULIDs, 16 big-endian bytes each.
        blocks: &'a [u8],
    },
    /// Start-time runs of series defined earlier, as the store wrote them.
    Starts(&'a [u8]),
    /// Deleted time ranges of series defined earlier.
    Tombstones(Tombstones<'a>),
}

/// The ranges of a tombstones record, decoded as they are iterated (the
/// whole payload was checked when the frame was read).
#[derive(Debug, Clone, PartialEq)]
pub struct Tombstones<'a> {
    rest: &'a [u8],
}

impl Tombstones<'_> {
    /// Reads one range off the front: `(series_ref, mint, maxt)`.
    fn read_one(&mut self) -> Option<(u64, i64, i64)> {
        let mut c = crate::encoding::Cursor(self.rest);
        let r = c.uvarint()?;
        let mint = unzigzag(c.uvarint()?);
        let maxt = unzigzag(c.uvarint()?);
        self.rest = c.0;
        Some((r, mint, maxt))
    }
}

impl Iterator for Tombstones<'_> {
    /// `(series_ref, mint, maxt)`, both ends deleted.
    type Item = (u64, i64, i64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        self.read_one()
    }
}

/// Appends tombstones records of `(ref, mint, maxt)` ranges to `out`, a
/// new record every megabyte or so (a record may not pass
/// [`MAX_RECORD`]); nothing if there are none.
pub fn encode_tombstones(out: &mut Vec<u8>, ranges: impl IntoIterator<Item = (u64, i64, i64)>) {
    let mut open: Option<usize> = None;
    for (r, mint, maxt) in ranges {
        let at = *open.get_or_insert_with(|| start(out, TOMBSTONES));
        put_uvarint(out, r);
        put_uvarint(out, zigzag(mint));
        put_uvarint(out, zigzag(maxt));
        if out.len() - at >= 1 << 20 {
            finish(out, at);
            open = None;
        }
    }
    if let Some(at) = open {
        finish(out, at);
    }
}

/// The exemplars of an exemplars record, decoded as they are iterated.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplars<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Exemplars<'a> {
    /// `(series labels, exemplar labels, t, v)`, both label sets in
    /// canonical form; `None` ends early on a malformed entry.
    type Item = (&'a [u8], &'a [u8], i64, f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let mut c = crate::encoding::Cursor(self.rest);
        let series = c.bytes()?;
        let labels = c.bytes()?;
        let t = unzigzag(c.uvarint()?);
        let v = f64::from_bits(c.i64_le()? as u64);
        self.rest = c.0;
        Some((series, labels, t, v))
    }
}

/// Appends one exemplar entry (not yet a frame; see
/// [`encode_exemplars_frame`]) to `out`.
pub fn put_exemplar(out: &mut Vec<u8>, series: &[u8], labels: &[u8], t: i64, v: f64) {
    put_uvarint(out, series.len() as u64);
    out.extend_from_slice(series);
    put_uvarint(out, labels.len() as u64);
    out.extend_from_slice(labels);
    put_uvarint(out, zigzag(t));
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

/// Appends an exemplars record holding `entries` (from [`put_exemplar`])
/// to `out`; nothing if there are none.
pub fn encode_exemplars_frame(out: &mut Vec<u8>, entries: &[u8]) {
    if entries.is_empty() {
        return;
    }
    let at = start(out, EXEMPLARS);
    out.extend_from_slice(entries);
    finish(out, at);
}

/// Appends an exemplars record to `out`; nothing if `exemplars` is empty.
pub fn encode_exemplars<'e>(
    out: &mut Vec<u8>,
    exemplars: impl IntoIterator<Item = (&'e [u8], &'e [u8], i64, f64)>,
) {
    let mut entries = Vec::new();
    for (series, labels, t, v) in exemplars {
        put_exemplar(&mut entries, series, labels, t, v);
    }
    encode_exemplars_frame(out, &entries);
}

/// The samples of a samples record, decoded as they are iterated.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples<'a> {
    base_t: i64,
    rest: &'a [u8],
}

impl Iterator for Samples<'_> {
    /// `(series_ref, t, v)`; `None` ends early on a malformed entry, which
    /// the CRC makes impossible short of a bug.
    type Item = (u64, i64, f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let (r, n) = uvarint(self.rest)?;
        let (d, m) = uvarint(self.rest.get(n..)?)?;
        let v = self.rest.get(n + m..n + m + 8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(v);
        self.rest = &self.rest[n + m + 8..];
        let delta = unzigzag(d);
        Some((
            r,
            self.base_t.wrapping_add(delta),
            f64::from_bits(u64::from_le_bytes(b)),
        ))
    }
}

use crate::encoding::{put_uvarint, unzigzag, uvarint, zigzag};

/// Starts a frame of `kind` in `out`; [`finish`] fills in length and CRC.
fn start(out: &mut Vec<u8>, kind: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(kind);
    at
}

fn finish(out: &mut [u8], at: usize) {
    let body = &out[at + HEADER..];
    let len = body.len() as u32;
    let crc = crc32c::crc32c(body);
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a checkpoint record whose payload `fill` writes.
pub fn encode_checkpoint(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>)) {
    let at = start(out, CHECKPOINT);
    fill(out);
    finish(out, at);
}

/// Appends a checkpoint record whose sealed chunks may be held in chunk
/// files (kind 8), its payload written by `fill`.
pub fn encode_checkpoint_refs(out: &mut Vec<u8>, fill: impl FnOnce(&mut Vec<u8>)) {
    let at = start(out, CHECKPOINT_REFS);
    fill(out);
    finish(out, at);
}

/// Appends a histograms record of `entries` (built with
/// [`histograms::put_entry`]) to `out`; nothing if empty.
pub fn encode_histograms_frame(out: &mut Vec<u8>, entries: &[u8]) {
    if entries.is_empty() {
        return;
    }
    let at = start(out, HISTOGRAMS);
    out.extend_from_slice(entries);
    finish(out, at);
}

/// Appends a start-time runs record holding `entries` (each a series
/// reference and a run, as the store encodes them) to `out`; nothing if
/// empty.
pub fn encode_starts_frame(out: &mut Vec<u8>, entries: &[u8]) {
    if entries.is_empty() {
        return;
    }
    let at = start(out, STARTS);
    out.extend_from_slice(entries);
    finish(out, at);
}

/// Appends a flushed record to `out`: samples older than `below` logged
/// before it are in `blocks` (ULIDs as 128-bit numbers).
pub fn encode_flushed(out: &mut Vec<u8>, below: i64, blocks: &[u128]) {
    let at = start(out, FLUSHED);
    out.extend_from_slice(&below.to_le_bytes());
    for b in blocks {
        out.extend_from_slice(&b.to_be_bytes());
    }
    finish(out, at);
}

/// Appends a series record to `out`.
pub fn encode_series(out: &mut Vec<u8>, series_ref: u64, labels: &[u8]) {
    let at = start(out, SERIES);
    put_uvarint(out, series_ref);
    out.extend_from_slice(labels);
    finish(out, at);
}

/// Appends a samples record of `(ref, t, v)` to `out`; nothing if empty.
pub fn encode_samples(out: &mut Vec<u8>, samples: &[(u64, i64, f64)]) {
    let mut frame = SamplesFrame::default();
    for &(r, t, v) in samples {
        frame.push(out, r, t, v);
    }
    frame.close(out);
}

/// A samples record built one sample at a time, straight into a frame
/// buffer (the head's per-shard log buffer): no list of samples in between.
#[derive(Debug, Default)]
pub struct SamplesFrame {
    open: Option<(usize, i64)>,
}

impl SamplesFrame {
    /// Frames grow to about this size, then a new one starts.
    const TARGET: usize = 1 << 20;

    /// Adds one sample to the open samples frame in `out`, opening one if
    /// needed.
    #[inline]
    pub fn push(&mut self, out: &mut Vec<u8>, series_ref: u64, t: i64, v: f64) {
        let base_t = match self.open {
            Some((at, base_t)) if out.len() - at < Self::TARGET => base_t,
            _ => {
                self.close(out);
                let at = start(out, SAMPLES);
                out.extend_from_slice(&t.to_le_bytes());
                self.open = Some((at, t));
                t
            }
        };
        put_uvarint(out, series_ref);
        let d = t.wrapping_sub(base_t);
        put_uvarint(out, zigzag(d));
        out.extend_from_slice(&v.to_bits().to_le_bytes());
    }

    /// Fills in the open frame's length and CRC; call before other frames
    /// are appended to `out` and before `out` is handed on.
    pub fn close(&mut self, out: &mut [u8]) {
        if let Some((at, _)) = self.open.take() {
            finish(out, at);
        }
    }
}

/// Why the bytes at some offset are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the header or the length promises: a torn write.
    Truncated,
    /// The length is zero or over [`MAX_RECORD`].
    BadLength,
    /// The CRC does not match.
    BadCrc,
    /// The CRC matches but the kind or payload is not understood.
    BadPayload,
}

/// Reads the frame at the start of `buf`: the record and the frame's size.
pub fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), FrameError> {
    if buf.len() < HEADER {
        return Err(FrameError::Truncated);
    }
    let mut w = [0u8; 4];
    w.copy_from_slice(&buf[..4]);
    let len = u32::from_le_bytes(w) as usize;
    w.copy_from_slice(&buf[4..8]);
    let crc = u32::from_le_bytes(w);
    if len == 0 || len > MAX_RECORD {
        return Err(FrameError::BadLength);
    }
    let Some(body) = buf.get(HEADER..HEADER + len) else {
        return Err(FrameError::Truncated);
    };
    if crc32c::crc32c(body) != crc {
        return Err(FrameError::BadCrc);
    }
    let (kind, payload) = (body[0], &body[1..]);
    let record = match kind {
        SERIES => {
            let (series_ref, n) = uvarint(payload).ok_or(FrameError::BadPayload)?;
            Record::Series {
                series_ref,
                labels: &payload[n..],
            }
        }
        SAMPLES => {
            let b = payload.get(..8).ok_or(FrameError::BadPayload)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Record::Samples(Samples {
                base_t: i64::from_le_bytes(a),
                rest: &payload[8..],
            })
        }
        CHECKPOINT => Record::Checkpoint(payload),
        CHECKPOINT_REFS => Record::CheckpointRefs(payload),
        EXEMPLARS => Record::Exemplars(Exemplars { rest: payload }),
        HISTOGRAMS => Record::Histograms(Histograms { rest: payload }),
        STARTS => Record::Starts(payload),
        TOMBSTONES => {
            // Checked whole here, so that the iterator cannot end early.
            let mut all = Tombstones { rest: payload };
            while !all.rest.is_empty() {
                all.read_one().ok_or(FrameError::BadPayload)?;
            }
            Record::Tombstones(Tombstones { rest: payload })
        }
        FLUSHED => {
            let (below, blocks) = payload
                .split_first_chunk::<8>()
                .ok_or(FrameError::BadPayload)?;
            if blocks.len() % 16 != 0 {
                return Err(FrameError::BadPayload);
            }
            Record::Flushed {
                below: i64::from_le_bytes(*below),
                blocks,
            }
        }
        _ => return Err(FrameError::BadPayload),
    };
    Ok((record, HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exemplar_records_round_trip() {
        let mut buf = Vec::new();
        encode_exemplars(&mut buf, std::iter::empty());
        assert!(buf.is_empty(), "no exemplars, no frame");
        let want: Vec<(&[u8], &[u8], i64, f64)> = vec![
            (b"\x0a\x03abc", b"\x0a\x01t", -5, 1.5),
            (b"", b"", i64::MAX, f64::INFINITY),
        ];
        encode_exemplars(&mut buf, want.iter().copied());
        let (rec, n) = decode(&buf).expect("exemplars");
        assert_eq!(n, buf.len());
        let Record::Exemplars(got) = rec else {
            panic!("kind {rec:?}");
        };
        assert_eq!(got.collect::<Vec<_>>(), want);
    }

    #[test]
    fn flushed_records_round_trip_and_a_torn_list_is_refused() {
        let mut buf = Vec::new();
        encode_flushed(&mut buf, -7, &[1, u128::MAX]);
        let (rec, n) = decode(&buf).expect("flushed");
        assert_eq!(n, buf.len());
        let Record::Flushed { below, blocks } = rec else {
            panic!("kind {rec:?}");
        };
        assert_eq!(below, -7);
        assert_eq!(blocks.len(), 32);
        assert_eq!(blocks[15], 1);
        // A ULID cut short is a bad payload, not a panic.
        let mut bad = Vec::new();
        let at = start(&mut bad, FLUSHED);
        bad.extend_from_slice(&[0; 8 + 5]);
        finish(&mut bad, at);
        assert_eq!(decode(&bad).err(), Some(FrameError::BadPayload));
    }

    #[test]
    fn tombstone_records_round_trip_and_a_torn_range_is_refused() {
        let mut buf = Vec::new();
        encode_tombstones(&mut buf, std::iter::empty());
        assert!(buf.is_empty(), "no ranges, no frame");
        let want = vec![(7, -5, 9), (u64::MAX, i64::MIN, i64::MAX), (0, 0, 0)];
        encode_tombstones(&mut buf, want.iter().copied());
        let (rec, n) = decode(&buf).expect("tombstones");
        assert_eq!(n, buf.len());
        let Record::Tombstones(got) = rec else {
            panic!("kind {rec:?}");
        };
        assert_eq!(got.collect::<Vec<_>>(), want);
        // Many ranges make several records, none much over a megabyte.
        let many: Vec<(u64, i64, i64)> =
            (0..200_000i64).map(|i| (i.unsigned_abs(), -i, i)).collect();
        let mut big = Vec::new();
        encode_tombstones(&mut big, many.iter().copied());
        let (mut pos, mut got, mut records) = (0, Vec::new(), 0);
        while pos < big.len() {
            let (rec, n) = decode(&big[pos..]).expect("a record");
            assert!(n < (1 << 20) + 64, "a record of {n} bytes");
            let Record::Tombstones(t) = rec else {
                panic!("kind {rec:?}");
            };
            got.extend(t);
            pos += n;
            records += 1;
        }
        assert!(records > 1, "one record of {} bytes", big.len());
        assert_eq!(got, many);
        // A range cut short is a bad payload, not a shorter list.
        let mut bad = Vec::new();
        let at = start(&mut bad, TOMBSTONES);
        bad.extend_from_slice(&[7, 9]);
        finish(&mut bad, at);
        assert_eq!(decode(&bad).err(), Some(FrameError::BadPayload));
    }

    #[test]
    fn frames_round_trip_and_damage_is_detected() {
        let mut buf = Vec::new();
        encode_series(&mut buf, 7, b"\x0a\x03abc");
        let first = buf.len();
        encode_samples(
            &mut buf,
            &[(7, 1000, 1.5), (9, 990, f64::NAN), (7, 2000, -0.0)],
        );
        let (rec, n) = decode(&buf).expect("series");
        assert_eq!(n, first);
        assert_eq!(
            rec,
            Record::Series {
                series_ref: 7,
                labels: b"\x0a\x03abc"
            }
        );
        let (rec, m) = decode(&buf[n..]).expect("samples");
        assert_eq!(n + m, buf.len());
        let Record::Samples(s) = rec else {
            panic!("samples expected")
        };
        let got: Vec<_> = s.map(|(r, t, v)| (r, t, v.to_bits())).collect();
        assert_eq!(
            got,
            vec![
                (7, 1000, 1.5f64.to_bits()),
                (9, 990, f64::NAN.to_bits()),
                (7, 2000, (-0.0f64).to_bits())
            ]
        );
        for cut in 0..first {
            assert_eq!(
                decode(&buf[..cut]).unwrap_err(),
                FrameError::Truncated,
                "{cut}"
            );
        }
        for bit in 0..first * 8 {
            let mut bad = buf[..first].to_vec();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode(&bad).is_err(), "flipped bit {bit} accepted");
        }
    }

    proptest! {
        #[test]
        fn samples_round_trip(samples in prop::collection::vec((any::<u64>(), any::<i64>(), any::<f64>()), 1..50)) {
            let mut buf = Vec::new();
            encode_samples(&mut buf, &samples);
            let (rec, n) = decode(&buf).expect("valid");
            prop_assert_eq!(n, buf.len());
            let Record::Samples(s) = rec else { panic!("samples expected") };
            let got: Vec<_> = s.map(|(r, t, v)| (r, t, v.to_bits())).collect();
            let want: Vec<_> = samples.iter().map(|&(r, t, v)| (r, t, v.to_bits())).collect();
            prop_assert_eq!(got, want);
        }
    }
}
