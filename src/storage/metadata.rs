//! Metric metadata (type, help, unit) as senders report it, for
//! `/api/v1/metadata`. Bounded: past the limit, new metric families are not
//! recorded (existing ones still update).

use std::collections::BTreeMap;

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
}

/// Distinct entries kept per family.
const MAX_PER_FAMILY: usize = 4;

impl MetadataStore {
    /// An empty store that records at most `max_families` families.
    pub fn new(max_families: usize) -> Self {
        Self {
            families: RwLock::new(BTreeMap::new()),
            max_families,
        }
    }

    /// Records metadata for `family`. Cheap when nothing changed.
    pub fn record(&self, family: &str, kind: &'static str, help: &str, unit: &str) {
        let known = |entries: &Vec<MetricMetadata>| {
            entries
                .iter()
                .any(|m| m.kind == kind && m.help == help && m.unit == unit)
        };
        if self.families.read().get(family).is_some_and(known) {
            return;
        }
        let mut families = self.families.write();
        if !families.contains_key(family) && families.len() >= self.max_families {
            return;
        }
        let entries = families.entry(family.to_owned()).or_default();
        if known(entries) {
            return;
        }
        if entries.len() >= MAX_PER_FAMILY {
            entries.remove(0);
        }
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
        let s = MetadataStore::new(2);
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
}
