//! A block's `tombstones` file, as Prometheus writes and reads it
//! (`tsdb/tombstones`): the deleted time ranges of its series.
//!
//! The file is the magic `0x0130BA30` (big-endian), the format version 1,
//! then one entry per deleted interval: the series' reference in the
//! block's index (a varint), the interval's first and last millisecond
//! (zigzag varints; both included); then the big-endian CRC32-Castagnoli
//! of the entries alone. No count, no padding. A block without the file
//! has no tombstones.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use crate::encoding::{put_uvarint, unzigzag, uvarint, zigzag};

/// The file's first four bytes.
pub const MAGIC: u32 = 0x0130_BA30;
/// The one format version.
pub const FORMAT_V1: u8 = 1;
/// The file's name in a block directory.
pub const FILE: &str = "tombstones";

/// Deleted time ranges of one series: sorted, closed at both ends, and
/// neither overlapping nor touching (`[1, 3]` and `[4, 7]` are `[1, 7]`),
/// as Prometheus' `Intervals.Add` keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Intervals(Vec<(i64, i64)>);

impl Intervals {
    /// Adds `[mint, maxt]`, merging it with what it overlaps or touches.
    /// An empty range (`mint > maxt`) adds nothing.
    pub fn add(&mut self, mint: i64, maxt: i64) {
        if mint > maxt {
            return;
        }
        // The first interval that ends at or after the new one's start
        // less one, and the first that starts after its end plus one.
        let from = self.0.partition_point(|&(_, b)| b < mint.saturating_sub(1));
        let to = self
            .0
            .partition_point(|&(a, _)| a <= maxt.saturating_add(1));
        let (mut lo, mut hi) = (mint, maxt);
        if from < to {
            lo = lo.min(self.0[from].0);
            hi = hi.max(self.0[to - 1].1);
        }
        self.0.splice(from..to.max(from), [(lo, hi)]);
    }

    /// Whether `t` is deleted.
    pub fn contains(&self, t: i64) -> bool {
        let i = self.0.partition_point(|&(_, b)| b < t);
        self.0.get(i).is_some_and(|&(a, _)| a <= t)
    }

    /// Whether one interval covers all of `[mint, maxt]` (a chunk that
    /// spans it is deleted whole).
    pub fn covers(&self, mint: i64, maxt: i64) -> bool {
        let i = self.0.partition_point(|&(_, b)| b < maxt);
        self.0.get(i).is_some_and(|&(a, _)| a <= mint)
    }

    /// Whether any interval meets `[mint, maxt]`.
    pub fn overlaps(&self, mint: i64, maxt: i64) -> bool {
        let i = self.0.partition_point(|&(_, b)| b < mint);
        self.0.get(i).is_some_and(|&(a, _)| a <= maxt)
    }

    /// The intervals, in time order.
    pub fn iter(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.0.iter().copied()
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Drops the intervals that end before `t` (a part that reaches `t`
    /// stays whole).
    pub fn drop_before(&mut self, t: i64) {
        let from = self.0.partition_point(|&(_, b)| b < t);
        self.0.drain(..from);
    }
}

/// The deleted ranges of a block's series, by series reference.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tombstones(BTreeMap<u64, Intervals>);

/// Why a tombstones file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TombstonesError {
    /// Shorter than its header and checksum.
    #[error("tombstones: {0} bytes is shorter than a header and checksum (9 bytes)")]
    TooShort(usize),
    /// Not a tombstones file.
    #[error("tombstones: invalid magic number {0:#010x}")]
    Magic(u32),
    /// A version this reader does not know.
    #[error("tombstones: invalid format version {0}")]
    Version(u8),
    /// The entries do not match their checksum.
    #[error("tombstones: checksum did not match")]
    Checksum,
    /// An entry ends early or holds a varint too long.
    #[error("tombstones: entry {0} is cut short")]
    Truncated(usize),
}

impl Tombstones {
    /// Deletes `[mint, maxt]` of series `series`.
    pub fn add(&mut self, series: u64, mint: i64, maxt: i64) {
        if mint <= maxt {
            self.0.entry(series).or_default().add(mint, maxt);
        }
    }

    /// The deleted ranges of `series`, if it has any.
    pub fn get(&self, series: u64) -> Option<&Intervals> {
        self.0.get(&series)
    }

    /// Every series with deleted ranges, by reference.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Intervals)> + '_ {
        self.0.iter().map(|(&r, i)| (r, i))
    }

    /// Intervals in all (`meta.json`'s `stats.numTombstones`).
    pub fn total(&self) -> u64 {
        self.0.values().map(|i| i.len() as u64).sum()
    }

    /// Whether nothing is deleted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_be_bytes().to_vec();
        out.push(FORMAT_V1);
        let body = out.len();
        for (&series, intervals) in &self.0 {
            for (mint, maxt) in intervals.iter() {
                put_uvarint(&mut out, series);
                put_uvarint(&mut out, zigzag(mint));
                put_uvarint(&mut out, zigzag(maxt));
            }
        }
        let crc = crc32c::crc32c(&out[body..]);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// Reads a file's bytes: entries in any order, repeated or
    /// overlapping, merge as Prometheus merges them.
    pub fn decode(b: &[u8]) -> Result<Self, TombstonesError> {
        let (Some(head), Some(body), Some(crc)) = (
            b.get(..5),
            b.get(5..b.len().saturating_sub(4)),
            b.len().checked_sub(4).and_then(|at| b.get(at..)),
        ) else {
            return Err(TombstonesError::TooShort(b.len()));
        };
        if b.len() < 9 {
            return Err(TombstonesError::TooShort(b.len()));
        }
        let magic = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if magic != MAGIC {
            return Err(TombstonesError::Magic(magic));
        }
        if head[4] != FORMAT_V1 {
            return Err(TombstonesError::Version(head[4]));
        }
        if crc32c::crc32c(body).to_be_bytes() != crc {
            return Err(TombstonesError::Checksum);
        }
        let mut out = Self::default();
        let mut at = 0;
        let mut entry = 0;
        while at < body.len() {
            let mut field = || {
                let (v, n) = uvarint(&body[at..]).ok_or(TombstonesError::Truncated(entry))?;
                at += n;
                Ok::<u64, TombstonesError>(v)
            };
            let series = field()?;
            let mint = unzigzag(field()?);
            let maxt = unzigzag(field()?);
            out.add(series, mint, maxt);
            entry += 1;
        }
        Ok(out)
    }
}

/// The tombstones of the block in `dir`: none when it has no file.
pub fn read(dir: &Path) -> io::Result<Tombstones> {
    match std::fs::read(dir.join(FILE)) {
        Ok(b) => Tombstones::decode(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Tombstones::default()),
        Err(e) => Err(e),
    }
}

/// Replaces the tombstones of the block in `dir`, as Prometheus does: a
/// temporary file written and synced, renamed over the old one, and the
/// directory synced. A crash leaves the old file or the new one.
pub fn write(dir: &Path, t: &Tombstones) -> io::Result<()> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&t.encode())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, dir.join(FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn files_are_byte_for_byte_prometheus_s() {
        // tsdb/testdata/index_format_v1/tombstones: no entries.
        assert_eq!(
            Tombstones::default().encode(),
            [0x01, 0x30, 0xBA, 0x30, 0x01, 0, 0, 0, 0]
        );
        // Series 1, [0, 1000]: 01 00 D0 0F, then their CRC32C.
        let mut t = Tombstones::default();
        t.add(1, 0, 1000);
        let b = t.encode();
        assert_eq!(
            &b[..9],
            [0x01, 0x30, 0xBA, 0x30, 0x01, 0x01, 0x00, 0xD0, 0x0F]
        );
        assert_eq!(
            &b[9..],
            crc32c::crc32c(&[0x01, 0x00, 0xD0, 0x0F]).to_be_bytes()
        );
        assert_eq!(Tombstones::decode(&b), Ok(t));
    }

    #[test]
    fn dropping_before_a_time_keeps_what_reaches_it() {
        let mut i = Intervals::default();
        i.add(1, 3);
        i.add(6, 9);
        i.add(12, 14);
        i.drop_before(6);
        assert_eq!(i.iter().collect::<Vec<_>>(), [(6, 9), (12, 14)]);
        i.drop_before(10);
        assert_eq!(i.iter().collect::<Vec<_>>(), [(12, 14)]);
        i.drop_before(15);
        assert!(i.is_empty());
    }

    #[test]
    fn damage_is_named() {
        let mut t = Tombstones::default();
        t.add(7, -5, 5);
        let good = t.encode();
        assert_eq!(
            Tombstones::decode(&good[..8]),
            Err(TombstonesError::TooShort(8))
        );
        let mut bad = good.clone();
        bad[0] = 0;
        assert!(matches!(
            Tombstones::decode(&bad),
            Err(TombstonesError::Magic(_))
        ));
        let mut bad = good.clone();
        bad[4] = 2;
        assert_eq!(Tombstones::decode(&bad), Err(TombstonesError::Version(2)));
        let mut bad = good.clone();
        bad[6] ^= 1;
        assert_eq!(Tombstones::decode(&bad), Err(TombstonesError::Checksum));
        // A cut entry with a checksum that matches it.
        let mut cut = good[..good.len() - 5].to_vec();
        let crc = crc32c::crc32c(&cut[5..]);
        cut.extend_from_slice(&crc.to_be_bytes());
        assert_eq!(Tombstones::decode(&cut), Err(TombstonesError::Truncated(0)));
    }

    #[test]
    fn touching_and_overlapping_intervals_merge() {
        let mut i = Intervals::default();
        i.add(1, 3);
        i.add(4, 7);
        assert_eq!(i.iter().collect::<Vec<_>>(), [(1, 7)]);
        i.add(10, 12);
        i.add(9, 9);
        assert_eq!(i.iter().collect::<Vec<_>>(), [(1, 7), (9, 12)]);
        i.add(i64::MIN, 0);
        i.add(20, i64::MAX);
        assert_eq!(
            i.iter().collect::<Vec<_>>(),
            [(i64::MIN, 7), (9, 12), (20, i64::MAX)]
        );
        assert!(!i.contains(8) && i.contains(9) && i.contains(i64::MAX));
        assert!(i.covers(9, 12) && !i.covers(8, 12) && i.overlaps(8, 9));
        i.add(5, 30);
        assert_eq!(i.iter().collect::<Vec<_>>(), [(i64::MIN, i64::MAX)]);
    }

    proptest! {
        /// Intervals hold exactly the times added, kept sorted, apart and
        /// not touching; the file round-trips.
        #[test]
        fn intervals_hold_exactly_what_was_added(
            adds in proptest::collection::vec((0u64..4, -40i64..40, 0i64..12), 0..30),
        ) {
            let mut t = Tombstones::default();
            let mut deleted = std::collections::BTreeSet::new();
            for &(s, from, len) in &adds {
                t.add(s, from, from + len);
                for x in from..=from + len {
                    deleted.insert((s, x));
                }
            }
            for s in 0..4u64 {
                let iv = t.get(s).cloned().unwrap_or_default();
                let v: Vec<_> = iv.iter().collect();
                prop_assert!(v.windows(2).all(|w| w[0].1 + 1 < w[1].0), "{v:?}");
                for x in -45..60 {
                    prop_assert_eq!(iv.contains(x), deleted.contains(&(s, x)), "{} {}", s, x);
                }
            }
            prop_assert_eq!(Tombstones::decode(&t.encode()), Ok(t.clone()));
            prop_assert_eq!(t.total(), (0..4).map(|s| t.get(s).map_or(0, |i| i.len() as u64)).sum::<u64>());
        }
    }

    #[test]
    fn a_missing_file_is_none_and_a_write_replaces_the_file() {
        let dir = tempfile::tempdir().expect("tmp");
        assert_eq!(read(dir.path()).ok(), Some(Tombstones::default()));
        let mut t = Tombstones::default();
        t.add(3, 10, 20);
        write(dir.path(), &t).expect("written");
        assert_eq!(read(dir.path()).ok(), Some(t));
        assert!(!dir.path().join("tombstones.tmp").exists());
        std::fs::write(dir.path().join(FILE), b"nope").expect("damaged");
        assert!(read(dir.path()).is_err());
    }
}
