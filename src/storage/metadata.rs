//! Metric metadata (type, help, unit) as senders report it, for
//! `/api/v1/metadata`. Bounded three ways: help and unit texts are cut at
//! [`MAX_HELP_BYTES`] and [`MAX_UNIT_BYTES`]; past `max_families`, new
//! families are not recorded (existing ones still update); and past
//! `max_bytes` of text in all, nothing new is recorded. The bytes held
//! count in the memory limit that pushes writes back.

use std::collections::BTreeMap;

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;

/// One metric family's metadata.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct MetricMetadata {
    /// `counter`, `gauge`, `histogram`, `gaugehistogram`, `summary`, `info`,
    /// `stateset` or `unknown`.
    pub kind: &'static str,
    /// Help text.
    pub help: String,
    /// Unit.
    pub unit: String,
}

/// Metadata by metric family name; each family keeps its distinct entries
/// (at most a few), newest last.
#[derive(Debug)]
pub struct MetadataStore {
    families: RwLock<BTreeMap<String, Vec<MetricMetadata>>>,
    max_families: usize,
    max_bytes: usize,
    /// Bytes of names and texts held, with a per-entry overhead.
    bytes: AtomicUsize,
}

/// Longest help text kept, in bytes; longer ones are cut at a character
/// boundary.
pub const MAX_HELP_BYTES: usize = 4096;

/// Longest unit kept, in bytes.
pub const MAX_UNIT_BYTES: usize = 256;

/// What an entry costs beyond its text: the struct and its map slot.
const ENTRY_OVERHEAD: usize = 96;

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Distinct entries kept per family.
const MAX_PER_FAMILY: usize = 4;

impl MetadataStore {
    /// An empty store that records at most `max_families` families and
    /// `max_bytes` of text.
    pub fn new(max_families: usize, max_bytes: usize) -> Self {
        Self {
            families: RwLock::new(BTreeMap::new()),
            max_families,
            max_bytes,
            bytes: AtomicUsize::new(0),
        }
    }

    /// Bytes held, for the memory limit.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Records metadata for `family`. Cheap when nothing changed.
    pub fn record(&self, family: &str, kind: &'static str, help: &str, unit: &str) {
        let (help, unit) = (cut(help, MAX_HELP_BYTES), cut(unit, MAX_UNIT_BYTES));
        let known = |entries: &Vec<MetricMetadata>| {
            entries
                .iter()
                .any(|m| m.kind == kind && m.help == help && m.unit == unit)
        };
        if self.families.read().get(family).is_some_and(known) {
            return;
        }
        let mut families = self.families.write();
        let new_family = !families.contains_key(family);
        if new_family && families.len() >= self.max_families {
            return;
        }
        let cost =
            help.len() + unit.len() + ENTRY_OVERHEAD + if new_family { family.len() } else { 0 };
        if self.bytes().saturating_add(cost) > self.max_bytes {
            return;
        }
        let entries = families.entry(family.to_owned()).or_default();
        if known(entries) {
            return;
        }
        let mut held = self.bytes() + cost;
        if entries.len() >= MAX_PER_FAMILY {
            let old = entries.remove(0);
            held -= old.help.len() + old.unit.len() + ENTRY_OVERHEAD;
        }
        self.bytes.store(held, Ordering::Relaxed);
        entries.push(MetricMetadata {
            kind,
            help: help.to_owned(),
            unit: unit.to_owned(),
        });
    }

    /// Families and their entries, optionally just `metric`, with at most
    /// `limit` families and `per_metric` entries each (0 = no limit).
    pub fn list(
        &self,
        metric: Option<&str>,
        limit: usize,
        per_metric: usize,
    ) -> Vec<(String, Vec<MetricMetadata>)> {
        let families = self.families.read();
        let pick = |entries: &Vec<MetricMetadata>| {
            let n = if per_metric == 0 {
                entries.len()
            } else {
                per_metric.min(entries.len())
            };
            entries[..n].to_vec()
        };
        let limit = if limit == 0 { usize::MAX } else { limit };
        match metric {
            Some(m) => families
                .get(m)
                .map(|e| vec![(m.to_owned(), pick(e))])
                .unwrap_or_default(),
            None => families
                .iter()
                .take(limit)
                .map(|(k, e)| (k.clone(), pick(e)))
                .collect(),
        }
    }
}

/// The API name of a remote-write 1.0 `MetricType` number.
pub fn type_name(t: u64) -> &'static str {
    match t {
        1 => "counter",
        2 => "gauge",
        3 => "histogram",
        4 => "gaugehistogram",
        5 => "summary",
        6 => "info",
        7 => "stateset",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_distinct_entries_within_bounds() {
        let s = MetadataStore::new(2, 1 << 20);
        s.record("up", "gauge", "Up.", "");
        s.record("up", "gauge", "Up.", "");
        s.record("a_total", "counter", "A.", "");
        s.record("b", "gauge", "B.", "");
        let all = s.list(None, 0, 0);
        assert_eq!(all.len(), 2, "the third family is over the bound");
        assert_eq!(all[1].0, "up");
        assert_eq!(all[1].1.len(), 1);
        s.record("up", "gauge", "Up, reworded.", "");
        assert_eq!(s.list(Some("up"), 0, 0)[0].1.len(), 2);
        assert_eq!(s.list(Some("up"), 0, 1)[0].1.len(), 1);
        assert_eq!(s.list(None, 1, 0).len(), 1);
        assert!(s.list(Some("nope"), 0, 0).is_empty());
    }

    #[test]
    fn texts_are_cut_and_the_store_holds_at_most_its_bytes() {
        let s = MetadataStore::new(1000, 64 << 10);
        let huge = "é".repeat(10 << 20);
        s.record("a", "gauge", &huge, &huge);
        let a = &s.list(Some("a"), 0, 0)[0].1[0];
        assert!(a.help.len() <= MAX_HELP_BYTES && a.help.len() > MAX_HELP_BYTES - 2);
        assert!(a.unit.len() <= MAX_UNIT_BYTES);
        assert!(a.help.chars().all(|c| c == 'é'));
        // Distinct texts fill the byte budget, then are not recorded.
        for i in 0..1000 {
            s.record(&format!("m{i}"), "gauge", &format!("{i}{huge}"), "");
        }
        assert!(s.bytes() <= 64 << 10, "{}", s.bytes());
        assert!(s.list(None, 0, 0).len() < 20);
        // Replacing a family's oldest entry gives its bytes back.
        let t = MetadataStore::new(10, 1 << 20);
        for i in 0..100 {
            t.record("x", "gauge", &format!("{i:0>1000}"), "");
        }
        assert_eq!(t.bytes(), 1 + 4 * (1000 + ENTRY_OVERHEAD));
    }
}
