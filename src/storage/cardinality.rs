//! Cardinality of a set of series, as Prometheus' `/api/v1/status/tsdb`
//! reports it (`tsdb/index` postings stats): series by metric name, values
//! by label name, bytes by label name, series by label pair; and, as
//! VictoriaMetrics' version of that endpoint adds, series by label name,
//! series by the values of one focus label, and totals.
//!
//! The counts are over label sets, wherever they came from: the head alone
//! (Prometheus' answer) or the head and blocks over a time range.

use std::collections::HashMap;

use super::labels::{Label, LabelStr};

/// The label that names a series' metric.
const METRIC_NAME: &str = "__name__";

/// One row of a top list: a name (a metric, a label name, `name=value`)
/// and its count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// What is counted.
    pub name: String,
    /// Its count (series, values or bytes).
    pub value: u64,
}

/// The top lists of a set of series, each sorted by count, highest first,
/// then by name, and cut to the limit asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cardinality {
    /// Series counted.
    pub total_series: u64,
    /// Labels over all series counted (one per label of each series).
    pub total_label_value_pairs: u64,
    /// Distinct (name, value) pairs.
    pub label_pairs: u64,
    /// Series by metric name.
    pub series_by_metric_name: Vec<Stat>,
    /// Distinct values by label name.
    pub value_count_by_label_name: Vec<Stat>,
    /// Bytes of label sets by label name (see [`label_bytes`]).
    pub memory_by_label_name: Vec<Stat>,
    /// Series by `name=value` pair.
    pub series_by_label_value_pair: Vec<Stat>,
    /// Series carrying each label name.
    pub series_by_label_name: Vec<Stat>,
    /// Series by the values of the focus label, when one was asked for.
    pub series_by_focus_value: Option<Vec<Stat>>,
}

/// Series counts by label pair, added one label set at a time: memory
/// grows with the distinct pairs, not with the series (the strings are
/// shared with the label sets they came from).
#[derive(Debug, Default)]
pub struct Counter {
    /// name → value → series.
    by_name: HashMap<LabelStr, HashMap<LabelStr, u64>>,
    series: u64,
    labels: u64,
}

impl Counter {
    /// Counts one series' labels (a series must be added once).
    pub fn add(&mut self, labels: &[Label]) {
        for l in labels {
            let values = match self.by_name.get_mut(l.name.as_str()) {
                Some(v) => v,
                None => self.by_name.entry(l.name.clone()).or_default(),
            };
            match values.get_mut(l.value.as_str()) {
                Some(n) => *n += 1,
                None => {
                    values.insert(l.value.clone(), 1);
                }
            }
        }
        self.series += 1;
        self.labels += labels.len() as u64;
    }

    /// Distinct (name, value) pairs counted.
    pub fn label_pairs(&self) -> u64 {
        self.by_name.values().map(|v| v.len() as u64).sum()
    }

    /// The top lists, `limit` rows each, and the series by the values of
    /// `focus` when given.
    pub fn top(&self, limit: usize, focus: Option<&str>) -> Cardinality {
        let by_name = &self.by_name;
        let values_of = |name: &str| {
            by_name
                .get(name)
                .map(|values| top(values.iter().map(|(v, &n)| (v.as_str(), n)), limit))
                .unwrap_or_default()
        };
        Cardinality {
            total_series: self.series,
            total_label_value_pairs: self.labels,
            label_pairs: self.label_pairs(),
            series_by_metric_name: values_of(METRIC_NAME),
            value_count_by_label_name: top(
                by_name
                    .iter()
                    .map(|(n, values)| (n.as_str(), values.len() as u64)),
                limit,
            ),
            memory_by_label_name: top(
                by_name.iter().map(|(n, values)| {
                    let bytes = values
                        .iter()
                        .map(|(v, &count)| label_bytes(n, v) * count)
                        .sum();
                    (n.as_str(), bytes)
                }),
                limit,
            ),
            series_by_label_value_pair: top_pairs(by_name, limit),
            series_by_label_name: top(
                by_name
                    .iter()
                    .map(|(n, values)| (n.as_str(), values.values().sum())),
                limit,
            ),
            series_by_focus_value: focus.map(values_of),
        }
    }
}

/// Counts `series` (each a label set; a series must come once) and keeps
/// the `limit` highest of each list.
pub fn count(series: &[Vec<Label>], limit: usize, focus: Option<&str>) -> Cardinality {
    let mut c = Counter::default();
    for labels in series {
        c.add(labels);
    }
    c.top(limit, focus)
}

/// What a label takes in a series' label set, as Prometheus 3 counts it
/// for `memoryInBytesByLabelName` (its default `stringlabels` build: each
/// string with a length prefix of one byte, or four from 255 bytes on).
fn label_bytes(name: &str, value: &str) -> u64 {
    let prefixed = |s: &str| s.len() as u64 + if s.len() < 255 { 1 } else { 4 };
    prefixed(name) + prefixed(value)
}

/// Every `name=value` pair's series count, the highest `limit` of them.
fn top_pairs(by_name: &HashMap<LabelStr, HashMap<LabelStr, u64>>, limit: usize) -> Vec<Stat> {
    let mut rows: Vec<(&str, &str, u64)> = by_name
        .iter()
        .flat_map(|(n, values)| {
            values
                .iter()
                .map(move |(v, &c)| (n.as_str(), v.as_str(), c))
        })
        .collect();
    let order = |a: &(&str, &str, u64), b: &(&str, &str, u64)| {
        b.2.cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1)))
    };
    if rows.len() > limit {
        rows.select_nth_unstable_by(limit, order);
        rows.truncate(limit);
    }
    rows.sort_unstable_by(order);
    rows.into_iter()
        .map(|(n, v, c)| Stat {
            name: format!("{n}={v}"),
            value: c,
        })
        .collect()
}

/// The highest `limit` of `rows` by count, ties by name.
fn top<'a>(rows: impl Iterator<Item = (&'a str, u64)>, limit: usize) -> Vec<Stat> {
    let mut rows: Vec<(&str, u64)> = rows.collect();
    let order = |a: &(&str, u64), b: &(&str, u64)| b.1.cmp(&a.1).then(a.0.cmp(b.0));
    if rows.len() > limit {
        rows.select_nth_unstable_by(limit, order);
        rows.truncate(limit);
    }
    rows.sort_unstable_by(order);
    rows.into_iter()
        .map(|(name, value)| Stat {
            name: name.to_owned(),
            value,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<Label> {
        let mut v: Vec<Label> = pairs
            .iter()
            .map(|(n, v)| Label {
                name: (*n).into(),
                value: (*v).into(),
            })
            .collect();
        v.sort();
        v
    }

    fn stats(rows: &[(&str, u64)]) -> Vec<Stat> {
        rows.iter()
            .map(|(n, v)| Stat {
                name: (*n).to_owned(),
                value: *v,
            })
            .collect()
    }

    #[test]
    fn counts_as_prometheus_postings_stats_do() {
        let series = vec![
            set(&[("__name__", "up"), ("job", "a"), ("instance", "x")]),
            set(&[("__name__", "up"), ("job", "b"), ("instance", "y")]),
            set(&[("__name__", "http_total"), ("job", "a"), ("instance", "x")]),
            set(&[("__name__", "http_total"), ("job", "a"), ("instance", "y")]),
            set(&[("__name__", "http_total"), ("job", "a"), ("code", "500")]),
        ];
        let c = count(&series, 10, Some("job"));
        assert_eq!(c.total_series, 5);
        assert_eq!(c.total_label_value_pairs, 15);
        // __name__: 2 values, job: 2, instance: 2, code: 1.
        assert_eq!(c.label_pairs, 7);
        assert_eq!(
            c.series_by_metric_name,
            stats(&[("http_total", 3), ("up", 2)])
        );
        assert_eq!(
            c.value_count_by_label_name,
            stats(&[("__name__", 2), ("instance", 2), ("job", 2), ("code", 1)])
        );
        assert_eq!(
            c.series_by_label_value_pair[..3],
            stats(&[("job=a", 4), ("__name__=http_total", 3), ("__name__=up", 2)])[..]
        );
        assert_eq!(
            c.series_by_label_name,
            stats(&[("__name__", 5), ("job", 5), ("instance", 4), ("code", 1)])
        );
        assert_eq!(c.series_by_focus_value, Some(stats(&[("a", 4), ("b", 1)])));
        // (len+1) per string, times the series holding the pair:
        // job=a 4×(4+2), job=b 1×(4+2).
        let job = c.memory_by_label_name.iter().find(|s| s.name == "job");
        assert_eq!(job.map(|s| s.value), Some(30));
        // A long value's length takes four bytes.
        let long = "v".repeat(300);
        let c = count(&[set(&[("k", &long)])], 10, None);
        assert_eq!(c.memory_by_label_name, stats(&[("k", 2 + 304)]));
        assert_eq!(c.series_by_focus_value, None);
    }

    #[test]
    fn an_empty_set_has_empty_lists() {
        let c = count(&[], 10, Some("job"));
        assert_eq!(c.total_series, 0);
        assert!(c.series_by_metric_name.is_empty());
        assert_eq!(c.series_by_focus_value, Some(Vec::new()));
    }

    proptest! {
        /// The top lists are the first `limit` rows of the full lists,
        /// ordered by count then name.
        #[test]
        fn a_limit_keeps_the_head_of_the_full_order(
            raw in proptest::collection::vec(
                proptest::collection::btree_map("[a-c]", "[a-e]", 1..4), 0..40),
            limit in 1usize..6,
        ) {
            let series: Vec<Vec<Label>> = raw
                .iter()
                .map(|m| set(&m.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect::<Vec<_>>()))
                .collect();
            let full = count(&series, usize::MAX, Some("a"));
            let cut = count(&series, limit, Some("a"));
            for (f, c) in [
                (&full.value_count_by_label_name, &cut.value_count_by_label_name),
                (&full.memory_by_label_name, &cut.memory_by_label_name),
                (&full.series_by_label_value_pair, &cut.series_by_label_value_pair),
                (&full.series_by_label_name, &cut.series_by_label_name),
            ] {
                prop_assert_eq!(&f[..f.len().min(limit)], &c[..]);
                for w in f.windows(2) {
                    prop_assert!(w[0].value > w[1].value
                        || (w[0].value == w[1].value && w[0].name < w[1].name));
                }
            }
            // Each pair's count is the number of series that carry it.
            for s in &full.series_by_label_value_pair {
                let (n, v) = s.name.split_once('=').unwrap_or_default();
                let carrying = raw.iter().filter(|m| m.get(n).map(String::as_str) == Some(v)).count();
                prop_assert_eq!(s.value, carrying as u64);
            }
        }
    }
}
