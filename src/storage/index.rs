//! The inverted index of one shard: for each label name, its values, and for
//! each (name, value) the sorted list of series slots that carry it. Matchers
//! are evaluated against it with Prometheus' semantics, where a label that a
//! series lacks counts as the empty string.

use std::collections::HashMap;

use regex::Regex;

use super::labels::{Interner, StrId};

/// How a matcher compares a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchOp {
    /// `=`
    Equal,
    /// `!=`
    NotEqual,
    /// `=~` (fully anchored)
    Regex,
    /// `!~` (fully anchored)
    NotRegex,
}

/// Why a matcher could not be built.
#[derive(Debug, thiserror::Error)]
#[error("invalid regular expression {pattern:?}: {message}")]
pub struct MatcherError {
    pattern: String,
    message: String,
}

/// `pattern` compiled to match whole values, as PromQL's regexes do. The
/// pattern must parse on its own first: anchoring wraps it in a group, and
/// a pattern with an unbalanced `)` (`a)|(.*`) would otherwise close that
/// group early and match everything.
pub fn anchored_regex(pattern: &str) -> Result<Regex, String> {
    regex_syntax::ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| format!("error parsing regexp: {}", e.kind()))?;
    Regex::new(&format!("^(?s:{pattern})$")).map_err(|e| e.to_string())
}

/// A label matcher, e.g. `job=~"node|api"`.
#[derive(Debug, Clone)]
pub struct Matcher {
    /// The label name.
    pub name: String,
    /// The comparison.
    pub op: MatchOp,
    /// The value or pattern as written.
    pub value: String,
    re: Option<Regex>,
}

impl Matcher {
    /// Builds a matcher; regex patterns are anchored at both ends, as in PromQL.
    pub fn new(op: MatchOp, name: &str, value: &str) -> Result<Self, MatcherError> {
        let re = match op {
            MatchOp::Regex | MatchOp::NotRegex => {
                Some(anchored_regex(value).map_err(|message| MatcherError {
                    pattern: value.to_owned(),
                    message,
                })?)
            }
            _ => None,
        };
        Ok(Self {
            name: name.to_owned(),
            op,
            value: value.to_owned(),
            re,
        })
    }

    /// Whether a label value (empty for a missing label) matches.
    pub fn matches(&self, v: &str) -> bool {
        match (self.op, &self.re) {
            (MatchOp::Equal, _) => v == self.value,
            (MatchOp::NotEqual, _) => v != self.value,
            (MatchOp::Regex, Some(re)) => re.is_match(v),
            (MatchOp::NotRegex, Some(re)) => !re.is_match(v),
            _ => false,
        }
    }
}

/// Postings for one shard: name → value → ascending series slots.
#[derive(Debug, Default)]
pub struct Postings {
    by_name: HashMap<StrId, HashMap<StrId, Vec<u32>>>,
    /// Slot ids stored, over all lists.
    entries: usize,
    /// (name, value) lists.
    lists: usize,
}

impl Postings {
    /// Records that series `slot` carries every pair in `labels`. Slots are
    /// handed out in increasing order, so each list stays sorted.
    pub fn add(&mut self, slot: u32, labels: &[(StrId, StrId)]) {
        for &(n, v) in labels {
            let list = self.by_name.entry(n).or_default().entry(v).or_default();
            self.lists += usize::from(list.is_empty());
            list.push(slot);
        }
        self.entries += labels.len();
    }

    /// Heap bytes held, estimated from counts: each list costs its map
    /// entry and vector header, each entry four bytes plus growth slack.
    pub fn heap_bytes(&self) -> usize {
        self.lists * 48 + self.entries * 6
    }

    /// The values a label name takes in this shard.
    pub fn values(&self, name: StrId) -> impl Iterator<Item = StrId> + '_ {
        self.by_name
            .get(&name)
            .into_iter()
            .flat_map(|m| m.keys().copied())
    }

    /// Every label name in this shard.
    pub fn names(&self) -> impl Iterator<Item = StrId> + '_ {
        self.by_name.keys().copied()
    }

    /// Slots of the series that match all `matchers`, ascending. `all` is the
    /// number of series slots, used when a matcher also matches the empty value.
    pub fn select(&self, strings: &Interner, matchers: &[Matcher], all: u32) -> Vec<u32> {
        let mut result: Option<Vec<u32>> = None;
        // Positive matchers first: they shrink the set fastest.
        let mut order: Vec<&Matcher> = matchers.iter().collect();
        order.sort_by_key(|m| m.matches(""));
        for m in order {
            let set = self.select_one(strings, m, all);
            result = Some(match result {
                None => set,
                Some(prev) => intersect(&prev, &set),
            });
            if result.as_ref().is_some_and(Vec::is_empty) {
                break;
            }
        }
        result.unwrap_or_else(|| (0..all).collect())
    }

    fn select_one(&self, strings: &Interner, m: &Matcher, all: u32) -> Vec<u32> {
        let values = strings.lookup(&m.name).and_then(|n| self.by_name.get(&n));
        if m.matches("") {
            // Every series except those whose value for the name does not match.
            let mut excluded: Vec<u32> = Vec::new();
            if let Some(values) = values {
                for (&v, slots) in values {
                    if !m.matches(strings.get(v)) {
                        excluded.extend_from_slice(slots);
                    }
                }
            }
            return difference(all, &sorted_set(excluded));
        }
        let Some(values) = values else {
            return Vec::new();
        };
        if m.op == MatchOp::Equal {
            return strings
                .lookup(&m.value)
                .and_then(|v| values.get(&v))
                .cloned()
                .unwrap_or_default();
        }
        let mut out = Vec::new();
        for (&v, slots) in values {
            if m.matches(strings.get(v)) {
                out.extend_from_slice(slots);
            }
        }
        sorted_set(out)
    }
}

/// The union of postings lists gathered one after another: sorted once
/// (merging them pairwise was quadratic in the number of values, and a
/// regex over instances matches thousands).
fn sorted_set(mut slots: Vec<u32>) -> Vec<u32> {
    slots.sort_unstable();
    slots.dedup();
    slots
}

fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// `0..all` minus the sorted `excluded`.
fn difference(all: u32, excluded: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(all as usize - excluded.len().min(all as usize));
    let mut ex = excluded.iter().peekable();
    for s in 0..all {
        if ex.peek() == Some(&&s) {
            ex.next();
        } else {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(series: &[&[(&str, &str)]]) -> (Interner, Postings) {
        let mut strings = Interner::default();
        let mut p = Postings::default();
        for (slot, labels) in series.iter().enumerate() {
            let ids: Vec<_> = labels
                .iter()
                .map(|&(n, v)| (strings.intern(n), strings.intern(v)))
                .collect();
            p.add(slot as u32, &ids);
        }
        (strings, p)
    }

    fn m(op: MatchOp, n: &str, v: &str) -> Matcher {
        Matcher::new(op, n, v).expect("valid matcher")
    }

    #[test]
    fn matchers_follow_prometheus_semantics() {
        let (s, p) = shard(&[
            &[("__name__", "up"), ("job", "node")],
            &[("__name__", "up"), ("job", "api")],
            &[("__name__", "up")],
            &[("__name__", "down"), ("job", "node")],
        ]);
        let up = m(MatchOp::Equal, "__name__", "up");
        assert_eq!(p.select(&s, std::slice::from_ref(&up), 4), vec![0, 1, 2]);
        assert_eq!(
            p.select(&s, &[up.clone(), m(MatchOp::Equal, "job", "node")], 4),
            vec![0]
        );
        // `!=` keeps series that lack the label.
        assert_eq!(
            p.select(&s, &[up.clone(), m(MatchOp::NotEqual, "job", "node")], 4),
            vec![1, 2]
        );
        // Regexes are anchored.
        assert_eq!(
            p.select(&s, &[m(MatchOp::Regex, "job", "nod")], 4),
            Vec::<u32>::new()
        );
        assert_eq!(
            p.select(&s, &[m(MatchOp::Regex, "job", "node|api")], 4),
            vec![0, 1, 3]
        );
        // `=~".*"` matches the missing label too; `job=""` selects only series without it.
        assert_eq!(
            p.select(&s, &[m(MatchOp::Regex, "job", ".*")], 4),
            vec![0, 1, 2, 3]
        );
        assert_eq!(p.select(&s, &[m(MatchOp::Equal, "job", "")], 4), vec![2]);
        assert_eq!(
            p.select(&s, &[up, m(MatchOp::NotRegex, "job", "n.*")], 4),
            vec![1, 2]
        );
        assert_eq!(
            p.select(&s, &[m(MatchOp::Equal, "nosuch", "x")], 4),
            Vec::<u32>::new()
        );
    }

    #[test]
    fn bad_regex_is_an_error() {
        assert!(Matcher::new(MatchOp::Regex, "job", "(").is_err());
        // A pattern cannot close the anchoring group and match everything.
        for escape in ["zzz)|(.*", ")|(", "a))|((b"] {
            assert!(
                Matcher::new(MatchOp::Regex, "job", escape).is_err(),
                "{escape}"
            );
            assert!(
                Matcher::new(MatchOp::NotRegex, "job", escape).is_err(),
                "{escape}"
            );
        }
        let literal_paren = Matcher::new(MatchOp::Regex, "job", r"a\)|b").expect("valid");
        assert!(literal_paren.matches("a)") && literal_paren.matches("b"));
        assert!(!literal_paren.matches("anything"));
    }
}
