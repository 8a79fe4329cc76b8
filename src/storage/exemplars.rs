//! Exemplars: a bounded ring, as Prometheus' circular exemplar storage.
//!
//! One ring of `--max-exemplars` entries holds the newest exemplars of all
//! series; a new one overwrites the oldest. Each series' entries are chained
//! oldest to newest through the ring, so a series finds its exemplars
//! without a scan, and the ring's oldest entry is always its series'
//! oldest (entries of a series arrive in time order). Memory is bounded by
//! the ring's size and the label-set limit, whatever is sent.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::Matcher;
use super::labels::{decode_canonical, encode_canonical};

/// Most characters an exemplar's labels may hold, names and values
/// together (Prometheus' `ExemplarMaxLabelSetLength`).
pub const MAX_LABEL_CHARS: usize = 128;

/// Why an exemplar was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ExemplarError {
    /// Older than the newest exemplar of its series.
    #[error("out of order exemplar")]
    OutOfOrder,
    /// The same as the newest exemplar of its series.
    #[error("duplicate exemplar")]
    Duplicate,
    /// Its labels hold more than [`MAX_LABEL_CHARS`] characters.
    #[error("exemplar label set is longer than {MAX_LABEL_CHARS} characters")]
    LabelSetTooLong,
    /// A label name or value is not valid UTF-8, or a name is empty.
    #[error("invalid exemplar labels")]
    InvalidLabels,
    /// Exemplar storage is off (`--max-exemplars 0`).
    #[error("exemplar storage is disabled")]
    Disabled,
}

impl ExemplarError {
    /// Every reason, for metric labels.
    pub const ALL: [ExemplarError; 5] = [
        ExemplarError::OutOfOrder,
        ExemplarError::Duplicate,
        ExemplarError::LabelSetTooLong,
        ExemplarError::InvalidLabels,
        ExemplarError::Disabled,
    ];

    /// The metric label value.
    pub fn reason(self) -> &'static str {
        match self {
            ExemplarError::OutOfOrder => "out_of_order",
            ExemplarError::Duplicate => "duplicate",
            ExemplarError::LabelSetTooLong => "label_set_too_long",
            ExemplarError::InvalidLabels => "invalid_labels",
            ExemplarError::Disabled => "disabled",
        }
    }
}

/// One stored exemplar, as queries get it.
#[derive(Debug, Clone, PartialEq)]
pub struct Exemplar {
    /// Its labels (e.g. `trace_id`), sorted.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
    /// Its time, in ms.
    pub t: i64,
}

/// A series' exemplars in a time range.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesExemplars {
    /// The series' labels, sorted.
    pub series: Vec<(String, String)>,
    /// Its exemplars, oldest first.
    pub exemplars: Vec<Exemplar>,
}

const NONE: u32 = u32::MAX;

#[derive(Debug)]
struct Entry {
    /// The series' canonical label bytes, shared by its entries.
    series: Arc<[u8]>,
    /// The exemplar's labels in canonical form.
    labels: Box<[u8]>,
    value: f64,
    t: i64,
    /// The next (newer) entry of the same series.
    next: u32,
}

#[derive(Debug, Clone, Copy)]
struct Chain {
    oldest: u32,
    newest: u32,
}

#[derive(Debug, Default)]
struct Ring {
    entries: Vec<Entry>,
    /// Where the next exemplar goes once the ring is full.
    next: usize,
    series: HashMap<Arc<[u8]>, Chain>,
    /// Bytes of label data held (series keys counted once).
    bytes: usize,
}

/// The exemplar store: bounded, shared by every ingest path and the API.
#[derive(Debug)]
pub struct ExemplarStore {
    /// The most held; changed (and the ring rebuilt) under the ring's lock.
    max: std::sync::atomic::AtomicUsize,
    ring: Mutex<Ring>,
}

impl ExemplarStore {
    /// A store of at most `max` exemplars; 0 stores none.
    pub fn new(max: usize) -> Self {
        Self {
            max: std::sync::atomic::AtomicUsize::new(max.min(NONE as usize - 1)),
            ring: Mutex::new(Ring::default()),
        }
    }

    /// The most exemplars held.
    pub fn max(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Holds at most `max` exemplars from now on (0: none), keeping the
    /// newest of those held. Rebuilds the ring when the bound changes, so
    /// it costs a pass over the store then, and nothing otherwise.
    pub fn set_max(&self, max: usize) {
        use std::sync::atomic::Ordering;
        let max = max.min(NONE as usize - 1);
        let mut ring = self.ring.lock();
        let old = self.max.load(Ordering::Relaxed);
        if old == max {
            return;
        }
        let mut entries = std::mem::take(&mut ring.entries);
        let n = entries.len();
        if n > 0 && n >= old {
            // Full: the oldest is where the next one would go.
            entries.rotate_left(ring.next % n);
        }
        *ring = Ring::default();
        if max > 0 {
            for e in entries.into_iter().skip(n.saturating_sub(max)) {
                ring.push(max, e.series, e.labels, e.value, e.t);
            }
        }
        self.max.store(max, Ordering::Relaxed);
    }

    /// Exemplars held.
    pub fn len(&self) -> usize {
        self.ring.lock().entries.len()
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes held, roughly: entries, label data and the series index.
    pub fn bytes(&self) -> usize {
        let ring = self.ring.lock();
        ring.bytes
            + ring.entries.capacity() * std::mem::size_of::<Entry>()
            + ring.series.capacity() * (std::mem::size_of::<(Arc<[u8]>, Chain)>() + 1)
    }

    /// Stores an exemplar of the series whose canonical label bytes are
    /// `series` (a valid, sorted label set); `labels` are the exemplar's
    /// own, as sent.
    pub fn add(
        &self,
        series: &[u8],
        labels: &[(&[u8], &[u8])],
        value: f64,
        t: i64,
    ) -> Result<(), ExemplarError> {
        self.add_logged(series, labels, value, t, None)
    }

    /// [`ExemplarStore::add`]; a stored exemplar is also appended to `log`
    /// as a WAL exemplar entry.
    pub fn add_logged(
        &self,
        series: &[u8],
        labels: &[(&[u8], &[u8])],
        value: f64,
        t: i64,
        log: Option<&mut Vec<u8>>,
    ) -> Result<(), ExemplarError> {
        if self.max() == 0 {
            return Err(ExemplarError::Disabled);
        }
        let mut chars = 0;
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(labels.len());
        for &(n, v) in labels {
            let (Ok(n), Ok(v)) = (std::str::from_utf8(n), std::str::from_utf8(v)) else {
                return Err(ExemplarError::InvalidLabels);
            };
            // Any UTF-8 name but the empty one, as for series.
            if n.is_empty() {
                return Err(ExemplarError::InvalidLabels);
            }
            chars += n.chars().count() + v.chars().count();
            pairs.push((n, v));
        }
        if chars > MAX_LABEL_CHARS {
            return Err(ExemplarError::LabelSetTooLong);
        }
        pairs.sort_unstable();
        if pairs.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(ExemplarError::InvalidLabels);
        }
        let mut encoded = Vec::new();
        encode_canonical(pairs.iter().copied(), &mut encoded);

        let mut ring = self.ring.lock();
        // Read under the lock: `set_max` rebuilds the ring under it.
        let max = self.max();
        if max == 0 {
            return Err(ExemplarError::Disabled);
        }
        let key = match ring.series.get_key_value(series) {
            Some((key, chain)) => {
                let newest = &ring.entries[chain.newest as usize];
                if t < newest.t {
                    return Err(ExemplarError::OutOfOrder);
                }
                if t == newest.t
                    && value.to_bits() == newest.value.to_bits()
                    && *newest.labels == *encoded
                {
                    return Err(ExemplarError::Duplicate);
                }
                Arc::clone(key)
            }
            None => Arc::from(series),
        };
        if let Some(log) = log {
            crate::wal::record::put_exemplar(log, series, &encoded, t, value);
        }
        ring.push(max, key, encoded.into_boxed_slice(), value, t);
        Ok(())
    }

    /// Every exemplar as WAL exemplar entries, oldest first, for a
    /// checkpoint; `f` gets them in runs of about 1 MiB (each a record's
    /// worth, well under the WAL's record limit).
    pub fn snapshot(&self, mut f: impl FnMut(&[u8])) {
        let mut buf = Vec::new();
        let ring = self.ring.lock();
        let n = ring.entries.len();
        let first = if n < self.max() { 0 } else { ring.next };
        for k in 0..n {
            let e = &ring.entries[(first + k) % n];
            crate::wal::record::put_exemplar(&mut buf, &e.series, &e.labels, e.t, e.value);
            if buf.len() >= 1 << 20 {
                f(&buf);
                buf.clear();
            }
        }
        drop(ring);
        if !buf.is_empty() {
            f(&buf);
        }
    }

    /// Restores exemplars from a WAL or checkpoint record.
    pub fn restore(&self, record: crate::wal::record::Exemplars<'_>) {
        for (series, labels, t, v) in record {
            let Some(pairs) = decode_canonical(labels) else {
                continue;
            };
            let pairs: Vec<(&[u8], &[u8])> = pairs
                .iter()
                .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
                .collect();
            let _ = self.add(series, &pairs, v, t);
        }
    }

    /// The exemplars in `[mint, maxt]` of every series that matches all
    /// matchers of any of `sets`, series sorted by labels.
    pub fn select(&self, sets: &[Vec<Matcher>], mint: i64, maxt: i64) -> Vec<SeriesExemplars> {
        let ring = self.ring.lock();
        let mut out = Vec::new();
        for (key, chain) in &ring.series {
            let Some(labels) = decode_canonical(key) else {
                continue;
            };
            let value_of = |name: &str| {
                labels
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("", |(_, v)| *v)
            };
            let matched = sets
                .iter()
                .any(|ms| ms.iter().all(|m| m.matches(value_of(&m.name))));
            if !matched {
                continue;
            }
            let mut exemplars = Vec::new();
            let mut at = chain.oldest;
            while at != NONE {
                let e = &ring.entries[at as usize];
                if e.t >= mint && e.t <= maxt {
                    exemplars.push(Exemplar {
                        labels: decode_canonical(&e.labels)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(n, v)| (n.to_owned(), v.to_owned()))
                            .collect(),
                        value: e.value,
                        t: e.t,
                    });
                }
                at = e.next;
            }
            if !exemplars.is_empty() {
                out.push(SeriesExemplars {
                    series: labels
                        .into_iter()
                        .map(|(n, v)| (n.to_owned(), v.to_owned()))
                        .collect(),
                    exemplars,
                });
            }
        }
        out.sort_by(|a, b| a.series.cmp(&b.series));
        out
    }
}

impl Ring {
    fn push(&mut self, max: usize, series: Arc<[u8]>, labels: Box<[u8]>, value: f64, t: i64) {
        let at = if self.entries.len() < max {
            self.entries.len()
        } else {
            let at = self.next;
            self.evict(at);
            at
        };
        self.next = (at + 1) % max;
        self.bytes += labels.len();
        let entry = Entry {
            series: Arc::clone(&series),
            labels,
            value,
            t,
            next: NONE,
        };
        if at == self.entries.len() {
            self.entries.push(entry);
        } else {
            self.entries[at] = entry;
        }
        let at = at as u32;
        match self.series.get_mut(&series) {
            Some(chain) => {
                let newest = chain.newest as usize;
                chain.newest = at;
                self.entries[newest].next = at;
            }
            None => {
                self.bytes += series.len();
                self.series.insert(
                    series,
                    Chain {
                        oldest: at,
                        newest: at,
                    },
                );
            }
        }
    }

    /// Drops the entry at `at`, the ring's oldest, from its series' chain.
    fn evict(&mut self, at: usize) {
        let (next, key) = {
            let e = &self.entries[at];
            self.bytes -= e.labels.len();
            (e.next, Arc::clone(&e.series))
        };
        if next == NONE {
            if self.series.remove(&key).is_some() {
                self.bytes -= key.len();
            }
        } else if let Some(chain) = self.series.get_mut(&key) {
            chain.oldest = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::index::MatchOp;

    fn series(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut v = Vec::new();
        encode_canonical(pairs.iter().copied(), &mut v);
        v
    }

    fn trace(id: &str) -> [(&'static [u8], &[u8]); 1] {
        [(b"trace_id", id.as_bytes())]
    }

    fn all() -> Vec<Vec<Matcher>> {
        vec![vec![
            Matcher::new(MatchOp::Regex, "__name__", ".+").expect("m")
        ]]
    }

    #[test]
    fn the_ring_keeps_the_newest_and_each_series_its_own() {
        let s = ExemplarStore::new(3);
        let a = series(&[("__name__", "a")]);
        let b = series(&[("__name__", "b")]);
        s.add(&a, &trace("1"), 1.0, 10).expect("stored");
        s.add(&b, &trace("2"), 2.0, 10).expect("stored");
        s.add(&a, &trace("3"), 3.0, 20).expect("stored");
        s.add(&b, &trace("4"), 4.0, 30).expect("stored");
        // The oldest (a@10) is gone; a keeps a@20, b keeps both.
        let got = s.select(&all(), i64::MIN, i64::MAX);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].series, vec![("__name__".into(), "a".into())]);
        assert_eq!(
            got[0].exemplars.iter().map(|e| e.t).collect::<Vec<_>>(),
            vec![20]
        );
        assert_eq!(
            got[1].exemplars.iter().map(|e| e.value).collect::<Vec<_>>(),
            vec![2.0, 4.0]
        );
        assert_eq!(
            got[1].exemplars[1].labels,
            vec![("trace_id".into(), "4".into())]
        );
        // Two more evict b@10 and a@20: a's chain empties and it leaves.
        s.add(&b, &trace("5"), 5.0, 40).expect("stored");
        s.add(&b, &trace("6"), 6.0, 50).expect("stored");
        let got = s.select(&all(), i64::MIN, i64::MAX);
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].exemplars.iter().map(|e| e.t).collect::<Vec<_>>(),
            vec![30, 40, 50]
        );
        assert_eq!(s.len(), 3);
        // Time range and matchers narrow the answer.
        assert_eq!(s.select(&all(), 35, 45)[0].exemplars.len(), 1);
        let none = vec![vec![
            Matcher::new(MatchOp::Equal, "__name__", "a").expect("m")
        ]];
        assert!(s.select(&none, i64::MIN, i64::MAX).is_empty());
    }

    #[test]
    fn a_new_bound_keeps_the_newest_exemplars_and_zero_keeps_none() {
        let ts = |s: &ExemplarStore| -> Vec<i64> {
            let mut t: Vec<i64> = s
                .select(&all(), i64::MIN, i64::MAX)
                .iter()
                .flat_map(|x| x.exemplars.iter().map(|e| e.t))
                .collect();
            t.sort();
            t
        };
        let s = ExemplarStore::new(4);
        let (a, b) = (series(&[("__name__", "a")]), series(&[("__name__", "b")]));
        // Six into four: the ring has wrapped, so its oldest is mid-vector.
        for t in 1..=6 {
            let which = if t % 2 == 0 { &a } else { &b };
            s.add(which, &trace(&t.to_string()), 1.0, t)
                .expect("stored");
        }
        assert_eq!(ts(&s), vec![3, 4, 5, 6]);
        s.set_max(2);
        assert_eq!(ts(&s), vec![5, 6]);
        // Room again: newer ones are added, and the oldest go first.
        s.set_max(3);
        s.add(&a, &trace("7"), 1.0, 8).expect("stored");
        s.add(&b, &trace("8"), 1.0, 9).expect("stored");
        assert_eq!(ts(&s), vec![6, 8, 9]);
        assert_eq!(s.len(), 3);
        s.set_max(0);
        assert!(s.is_empty());
        assert_eq!(
            s.add(&a, &trace("9"), 1.0, 10),
            Err(ExemplarError::Disabled)
        );
        s.set_max(10);
        s.add(&a, &trace("9"), 1.0, 10).expect("enabled again");
        assert_eq!(ts(&s), vec![10]);
    }

    #[test]
    fn out_of_order_duplicates_and_long_label_sets_are_refused() {
        let s = ExemplarStore::new(10);
        let a = series(&[("__name__", "a")]);
        s.add(&a, &trace("x"), 1.0, 100).expect("stored");
        assert_eq!(
            s.add(&a, &trace("x"), 1.0, 100),
            Err(ExemplarError::Duplicate)
        );
        assert_eq!(
            s.add(&a, &trace("y"), 1.0, 99),
            Err(ExemplarError::OutOfOrder)
        );
        s.add(&a, &trace("y"), 1.0, 100)
            .expect("same time, other labels");
        let long = "x".repeat(MAX_LABEL_CHARS);
        assert_eq!(
            s.add(&a, &trace(&long), 1.0, 200),
            Err(ExemplarError::LabelSetTooLong)
        );
        assert_eq!(
            s.add(&a, &[(b"", b"v")], 1.0, 200),
            Err(ExemplarError::InvalidLabels)
        );
        assert_eq!(
            s.add(&a, &[(b"trace\xff", b"v")], 1.0, 200),
            Err(ExemplarError::InvalidLabels)
        );
        s.add(&a, &[(b"trace.id", b"v")], 1.0, 200)
            .expect("UTF-8 names are valid");
        assert_eq!(
            ExemplarStore::new(0).add(&a, &trace("x"), 1.0, 1),
            Err(ExemplarError::Disabled)
        );
    }

    #[test]
    fn memory_stays_bounded_by_the_ring() {
        let s = ExemplarStore::new(100);
        for i in 0..10_000i64 {
            let key = series(&[("__name__", "m"), ("i", &i.to_string())]);
            s.add(&key, &trace(&format!("{i:032x}")), 1.0, i)
                .expect("stored");
        }
        assert_eq!(s.len(), 100);
        let one = s.bytes();
        for i in 10_000..20_000i64 {
            let key = series(&[("__name__", "m"), ("i", &i.to_string())]);
            s.add(&key, &trace(&format!("{i:032x}")), 1.0, i)
                .expect("stored");
        }
        assert_eq!(s.len(), 100);
        assert!(s.bytes() <= one * 2, "{} then {}", one, s.bytes());
        assert_eq!(s.select(&all(), i64::MIN, i64::MAX).len(), 100);
    }
}
