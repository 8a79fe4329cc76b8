//! Start timestamps (Prometheus' "ST", once the "created timestamp"): for a
//! cumulative sample, when the count it holds began; for a delta sample,
//! where the interval it covers starts. Remote write 2.0 and OTLP send one
//! with each sample; `--enable-feature=st-storage` keeps them, and
//! `use-start-timestamps` lets `rate`, `increase`, `irate`, `resets` and
//! `start_timestamp()` read them.
//!
//! A series keeps them as runs, not per sample: a run starts at a sample
//! and holds for every later one until the next run, either as one start
//! time (a counter between resets), as a fixed distance before each
//! sample (deltas over a steady interval), or as unknown. A counter costs
//! one run per reset.

use crate::encoding::{put_uvarint, unzigzag, uvarint, zigzag};

fn put_varint(out: &mut Vec<u8>, v: i64) {
    put_uvarint(out, zigzag(v));
}

fn varint(b: &[u8]) -> Option<(i64, usize)> {
    uvarint(b).map(|(u, n)| (unzigzag(u), n))
}

/// What a run says of each sample's start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartKind {
    /// Not known (Prometheus' 0).
    Unknown,
    /// This start time, for every sample of the run.
    At(i64),
    /// This many ms before each sample's own time.
    Before(i64),
}

/// From the sample at `from` on, start times as `kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartRun {
    /// The time of the run's first sample.
    pub from: i64,
    /// The start times it gives.
    pub kind: StartKind,
}

impl StartRun {
    /// The start time it gives a sample at `t`; 0 when unknown.
    #[inline]
    pub fn st(&self, t: i64) -> i64 {
        match self.kind {
            StartKind::Unknown => 0,
            StartKind::At(st) => st,
            StartKind::Before(d) => t.saturating_sub(d),
        }
    }

    /// Appends the run's encoding: `from` as a varint, a kind byte (0
    /// unknown, 1 at, 2 before) and, but for unknown, its value as a varint.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.from);
        match self.kind {
            StartKind::Unknown => out.push(0),
            StartKind::At(st) => {
                out.push(1);
                put_varint(out, st);
            }
            StartKind::Before(d) => {
                out.push(2);
                put_varint(out, d);
            }
        }
    }

    /// Reads one run from the start of `b`: the run and the bytes read.
    pub fn decode(b: &[u8]) -> Option<(StartRun, usize)> {
        let (from, mut n) = varint(b)?;
        let kind = match *b.get(n)? {
            0 => {
                n += 1;
                StartKind::Unknown
            }
            k @ (1 | 2) => {
                let (v, m) = varint(b.get(n + 1..)?)?;
                n += 1 + m;
                if k == 1 {
                    StartKind::At(v)
                } else {
                    StartKind::Before(v)
                }
            }
            _ => return None,
        };
        Some((StartRun { from, kind }, n))
    }
}

/// Appends one entry of a WAL start-times record: a series reference and
/// a run.
pub fn put_entry(out: &mut Vec<u8>, series_ref: u64, run: &StartRun) {
    put_uvarint(out, series_ref);
    run.encode(out);
}

/// The entries of a WAL start-times record; stops at the first malformed
/// one.
pub fn entries(mut b: &[u8]) -> impl Iterator<Item = (u64, StartRun)> + '_ {
    std::iter::from_fn(move || {
        let (r, n) = uvarint(b)?;
        let (run, m) = StartRun::decode(b.get(n..)?)?;
        b = b.get(n + m..)?;
        Some((r, run))
    })
}

/// The name of a block's start-times file (beside `index`; Prometheus'
/// readers ignore it).
pub const BLOCK_FILE: &str = "start_times";

/// The first bytes of a block's start-times file: "SLST".
const BLOCK_MAGIC: [u8; 4] = *b"SLST";

/// A block's start-times file: magic, version 1, then per series its ID in
/// the block's index and its runs ([`encode_runs`]), and a CRC32C of all
/// before it.
pub fn encode_block_file(series: &[(u32, Vec<StartRun>)]) -> Vec<u8> {
    let mut out = BLOCK_MAGIC.to_vec();
    out.push(1);
    for (id, runs) in series {
        put_uvarint(&mut out, u64::from(*id));
        encode_runs(runs, &mut out);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Reads a block's start-times file: the runs by series ID, or why not.
pub fn decode_block_file(
    b: &[u8],
) -> Result<std::collections::HashMap<u32, Vec<StartRun>>, &'static str> {
    let body = b
        .len()
        .checked_sub(4)
        .and_then(|n| b.get(..n))
        .ok_or("too short")?;
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&b[body.len()..]);
    if crc32c::crc32c(body) != u32::from_be_bytes(crc) {
        return Err("bad checksum");
    }
    let rest = body
        .strip_prefix(&BLOCK_MAGIC[..])
        .and_then(|r| r.strip_prefix(&[1u8][..]))
        .ok_or("not a start-times file of version 1")?;
    let mut out = std::collections::HashMap::new();
    let mut at = 0;
    while at < rest.len() {
        let (id, n) = uvarint(&rest[at..]).ok_or("bad series id")?;
        let id = u32::try_from(id).map_err(|_| "bad series id")?;
        let (runs, m) = decode_runs(&rest[at + n..]).ok_or("bad runs")?;
        out.insert(id, runs);
        at += n + m;
    }
    Ok(out)
}

/// Appends a list of runs: their count, then each run.
pub fn encode_runs(runs: &[StartRun], out: &mut Vec<u8>) {
    put_uvarint(out, runs.len() as u64);
    for r in runs {
        r.encode(out);
    }
}

/// Reads a list of runs written by [`encode_runs`] from the start of `b`:
/// the runs (in time order, or `None`) and the bytes read.
pub fn decode_runs(b: &[u8]) -> Option<(Vec<StartRun>, usize)> {
    let (count, mut n) = uvarint(b)?;
    // Each run takes at least two bytes: no list longer than the input.
    let mut runs = Vec::with_capacity((count as usize).min(b.len() / 2));
    for _ in 0..count {
        let (r, m) = StartRun::decode(b.get(n..)?)?;
        if runs.last().is_some_and(|p: &StartRun| p.from >= r.from) {
            return None;
        }
        runs.push(r);
        n += m;
    }
    Some((runs, n))
}

/// The start time `runs` (in time order) give a sample at `t`; 0 when
/// unknown.
#[inline]
pub fn start_at(runs: &[StartRun], t: i64) -> i64 {
    match runs.partition_point(|r| r.from <= t) {
        0 => 0,
        i => runs[i - 1].st(t),
    }
}

/// The runs of `runs` that give start times to samples in `[mint, maxt]`:
/// the one holding at `mint` and those starting up to `maxt`.
pub fn runs_within(runs: &[StartRun], mint: i64, maxt: i64) -> &[StartRun] {
    let first = runs.partition_point(|r| r.from <= mint).saturating_sub(1);
    let end = runs.partition_point(|r| r.from <= maxt);
    runs.get(first..end).unwrap_or_default()
}

/// The runs of `runs` that hold from `first` on, the one holding at
/// `first` made to start there.
pub fn from_first(runs: &[StartRun], first: i64) -> Vec<StartRun> {
    let at = runs.partition_point(|r| r.from <= first).saturating_sub(1);
    let mut out = runs.get(at..).unwrap_or_default().to_vec();
    if let Some(r) = out.first_mut() {
        r.from = r.from.max(first);
    }
    out
}

/// Joins the runs of one series from the parts it is stored in (blocks
/// oldest first, then the head; or the parents of a compaction), each
/// part speaking for its own samples: a part's first run starts no
/// earlier than its first sample, so a part that starts later says what
/// holds from there on; a later part without runs that overlaps none
/// before it says "unknown" from its first sample; where parts overlap
/// (late samples beside in-order ones), the part added first keeps the
/// times both speak for.
#[derive(Debug, Default)]
pub struct RunJoiner {
    runs: Vec<StartRun>,
    /// The newest sample time of the parts added so far.
    until: Option<i64>,
}

impl RunJoiner {
    /// Adds a part's runs, whose samples lie in `[first, last]`.
    pub fn add(&mut self, runs: &[StartRun], first: i64, last: i64) {
        let overlaps = self.until.is_some_and(|u| first <= u);
        if runs.is_empty() {
            let known = self
                .runs
                .last()
                .is_some_and(|r| r.kind != StartKind::Unknown);
            if !overlaps && known {
                self.runs.push(StartRun {
                    from: first,
                    kind: StartKind::Unknown,
                });
            }
        }
        for r in from_first(runs, first) {
            if let Err(at) = self.runs.binary_search_by_key(&r.from, |x| x.from) {
                self.runs.insert(at, r);
            }
        }
        self.until = Some(self.until.map_or(last, |u| u.max(last)));
    }

    /// Whether no part had runs.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The joined runs, a run that says what the one before says left out.
    pub fn finish(mut self) -> Vec<StartRun> {
        self.runs
            .dedup_by(|later, earlier| later.kind == earlier.kind);
        self.runs
    }
}

/// Most runs one series keeps in the head. Start times that change with
/// every sample in a way no run describes (deltas sent at uneven
/// intervals, or a sender's noise) take a run each; past this, the
/// series' start times are unknown until the head lets go of its older
/// runs.
pub const MAX_RUNS: usize = 4096;

/// One series' start times as samples arrive, in time order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StartRuns {
    runs: Vec<StartRun>,
    /// The newest sample noted and its start time.
    last: Option<(i64, i64)>,
}

impl StartRuns {
    /// Notes a sample at `t` with start time `st` (0: none sent); returns
    /// the run it starts, if it starts one. A sample at or before the
    /// newest noted is not looked at (start times follow samples in
    /// order). A series that never had a start time keeps no run.
    pub fn note(&mut self, t: i64, st: i64) -> Option<StartRun> {
        let prev = match self.last {
            Some((lt, _)) if t <= lt => return None,
            prev => prev,
        };
        self.last = Some((t, st));
        match self.runs.last() {
            Some(r) if r.st(t) == st => return None,
            Some(r) if self.runs.len() >= MAX_RUNS => {
                // Full: unknown from here on.
                if r.kind == StartKind::Unknown {
                    return None;
                }
                let run = StartRun {
                    from: t,
                    kind: StartKind::Unknown,
                };
                self.runs.push(run);
                return Some(run);
            }
            None if st == 0 => return None,
            _ => {}
        }
        // The same distance before the sample as before the one before
        // it: deltas over a steady interval, one run for all.
        let before = t.checked_sub(st);
        let kind = match prev {
            _ if st == 0 => StartKind::Unknown,
            Some((pt, pst)) if pst != 0 && before.is_some() && pt.checked_sub(pst) == before => {
                StartKind::Before(before.unwrap_or_default())
            }
            _ => StartKind::At(st),
        };
        let run = StartRun { from: t, kind };
        self.runs.push(run);
        Some(run)
    }

    /// Takes back a run noted earlier (a replay of the WAL): runs keep
    /// their order, and one at or before the newest replaces what it
    /// covers.
    pub fn restore(&mut self, run: StartRun) {
        let keep = self.runs.partition_point(|r| r.from < run.from);
        self.runs.truncate(keep);
        self.runs.push(run);
        self.last = Some((run.from, run.st(run.from)));
    }

    /// The runs, in time order.
    pub fn runs(&self) -> &[StartRun] {
        &self.runs
    }

    /// Whether no run is kept.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Forgets the runs no sample from `t` on reads (the head let go of
    /// what is older).
    pub fn drop_before(&mut self, t: i64) {
        let first = self.runs.partition_point(|r| r.from <= t).saturating_sub(1);
        self.runs.drain(..first);
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<StartRun>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counters_take_a_run_per_reset_and_steady_deltas_one() {
        let mut c = StartRuns::default();
        for (t, st) in [(60, 30), (120, 30), (180, 30), (240, 200), (300, 200)] {
            c.note(t, st);
        }
        assert_eq!(
            c.runs(),
            &[
                StartRun {
                    from: 60,
                    kind: StartKind::At(30)
                },
                StartRun {
                    from: 240,
                    kind: StartKind::At(200)
                }
            ]
        );
        let mut d = StartRuns::default();
        for t in 1..100 {
            d.note(t * 60, t * 60 - 60);
        }
        assert_eq!(d.runs().len(), 2, "{:?}", d.runs());
        assert_eq!(start_at(d.runs(), 600), 540);
        // Nothing sent, nothing kept.
        let mut none = StartRuns::default();
        assert_eq!(none.note(1, 0), None);
        assert!(none.is_empty());
        // Noise: a run per sample, up to the bound, then unknown.
        let mut noise = StartRuns::default();
        for t in 1..10_000i64 {
            noise.note(t * 10, t * 7 % 13 + 1);
        }
        assert_eq!(noise.runs().len(), MAX_RUNS + 1);
        assert_eq!(start_at(noise.runs(), 99_990), 0);
        // Extreme start times give back what was sent.
        let mut far = StartRuns::default();
        far.note(10, i64::MIN + 5);
        far.note(20, i64::MIN + 15);
        assert_eq!(start_at(far.runs(), 20), i64::MIN + 15);
    }

    proptest! {
        /// Whatever start times arrive, the runs give each sample the
        /// start time it came with, and survive their encoding.
        #[test]
        fn runs_give_back_every_start_time(
            steps in prop::collection::vec((1i64..100, 0u8..4, -50i64..50), 1..200),
        ) {
            let mut runs = StartRuns::default();
            let (mut t, mut sent) = (0i64, Vec::new());
            for (gap, how, x) in steps {
                t += gap;
                let st = match how {
                    0 => 0,
                    1 => t - 60,
                    2 => sent.last().map_or(t - 1, |&(_, s): &(i64, i64)| if s == 0 { t - 1 } else { s }),
                    _ => t + x,
                };
                runs.note(t, st);
                sent.push((t, st));
            }
            for &(t, st) in &sent {
                prop_assert_eq!(start_at(runs.runs(), t), st);
            }
            let mut b = Vec::new();
            encode_runs(runs.runs(), &mut b);
            let (back, n) = decode_runs(&b).expect("decodes");
            prop_assert_eq!(n, b.len());
            prop_assert_eq!(&back[..], runs.runs());
            // A window's runs give its samples the same start times.
            let (lo, hi) = (sent[sent.len() / 3].0, sent[sent.len() * 2 / 3].0);
            let within = runs_within(runs.runs(), lo, hi);
            for &(t, st) in sent.iter().filter(|&&(t, _)| (lo..=hi).contains(&t)) {
                prop_assert_eq!(start_at(within, t), st);
            }
            // Split in two at any sample and joined again: the same.
            let cut = sent.len() / 2;
            let (a, b) = sent.split_at(cut);
            let mut j = RunJoiner::default();
            for part in [a, b] {
                if let (Some(f), Some(l)) = (part.first(), part.last()) {
                    j.add(runs_within(runs.runs(), f.0, l.0), f.0, l.0);
                }
            }
            let merged = j.finish();
            for &(t, st) in &sent {
                prop_assert_eq!(start_at(&merged, t), st);
            }
            // A later part that was sent none: unknown from its first
            // sample, whatever the part before said.
            let mut j = RunJoiner::default();
            j.add(runs.runs(), sent[0].0, t);
            j.add(&[], t + 1, t + 100);
            prop_assert_eq!(start_at(&j.finish(), t + 50), 0);
        }

        /// Any bytes decode to runs in time order, or to nothing; never a
        /// panic.
        #[test]
        fn decoding_any_bytes_is_safe(b in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Some((runs, n)) = decode_runs(&b) {
                prop_assert!(n <= b.len());
                prop_assert!(runs.windows(2).all(|w| w[0].from < w[1].from));
            }
        }
    }
}
