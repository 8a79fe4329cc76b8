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
    message: BadRegex,
}

/// `pattern` compiled to match whole values, as PromQL's regexes do. The
/// pattern must parse on its own first: anchoring wraps it in a group, and
/// a pattern with an unbalanced `)` (`a)|(.*`) would otherwise close that
/// group early and match everything.
pub fn anchored_regex(pattern: &str) -> Result<Regex, BadRegex> {
    regex_syntax::ast::parse::Parser::new()
        .parse(pattern)
        .map_err(|e| BadRegex::Syntax(e.kind().to_string()))?;
    Regex::new(&format!("^(?s:{pattern})$")).map_err(|e| BadRegex::Compile(e.to_string()))
}

/// Why a pattern is not a regular expression PromQL can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRegex {
    /// It does not parse.
    #[error("error parsing regexp: {0}")]
    Syntax(String),
    /// It parses but does not compile (too big, say).
    #[error("{0}")]
    Compile(String),
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
                Some(anchored_regex(value).map_err(|e| MatcherError {
                    pattern: value.to_owned(),
                    message: e,
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

/// The verdicts of a selection's regex matchers on the label values they
/// meet, kept so that a slow regex never runs long under a shard's lock.
///
/// A shard visit starts by running the regexes in place, as a cheap regex
/// should. Once that has taken a millisecond (looked at after 1, 2,
/// 4, 8 and then every 16 evaluations), the selection defers: for the rest
/// of it, [`Postings::select_judged`] takes verdicts from a cache by value
/// and notes the values it has none for; the caller lets the lock go,
/// [`Verdicts::judge`]s them (stopping when told to), and selects again.
/// Cached verdicts serve every shard, so a value is judged once per
/// selection.
#[derive(Debug)]
pub struct Verdicts {
    /// Per matcher, for regex matchers: value → whether it matches.
    known: Vec<hashbrown::HashMap<Box<str>, bool>>,
    /// Whether each matcher matches the empty value (a missing label).
    empty: Vec<bool>,
    /// Values met without a verdict: (matcher index, value).
    unjudged: Vec<(usize, Box<str>)>,
    /// Regexes are judged outside the lock from now on.
    deferred: bool,
    /// When the current shard visit started, and its regex evaluations.
    visit_started: std::time::Instant,
    evaluated: u32,
}

/// How long regexes may run under one shard lock before the selection
/// defers them to outside it.
const UNDER_LOCK_BUDGET: std::time::Duration = std::time::Duration::from_millis(1);

/// Regex evaluations outside the lock between two looks at the stop
/// condition.
const JUDGE_BATCH: usize = 16;

impl Verdicts {
    /// No verdicts yet for `matchers`.
    pub fn new(matchers: &[Matcher]) -> Self {
        Self {
            known: matchers.iter().map(|_| hashbrown::HashMap::new()).collect(),
            empty: matchers.iter().map(|m| m.matches("")).collect(),
            unjudged: Vec::new(),
            deferred: false,
            visit_started: std::time::Instant::now(),
            evaluated: 0,
        }
    }

    /// Starts the budget of a shard visit: call with the lock just taken.
    pub fn begin_visit(&mut self) {
        self.visit_started = std::time::Instant::now();
        self.evaluated = 0;
    }

    /// Whether matcher `i` matches `v`, if known. Equality matchers are
    /// answered at once; regex matchers in place while the visit's budget
    /// lasts, then from the cache, or `None` after noting `v` for
    /// [`Verdicts::judge`].
    #[inline]
    fn verdict(&mut self, i: usize, m: &Matcher, v: &str) -> Option<bool> {
        if matches!(m.op, MatchOp::Equal | MatchOp::NotEqual) {
            return Some(m.matches(v));
        }
        if !self.deferred {
            let ok = m.matches(v);
            self.evaluated += 1;
            let n = self.evaluated;
            if (n.is_power_of_two() || n.is_multiple_of(16))
                && self.visit_started.elapsed() > UNDER_LOCK_BUDGET
            {
                self.deferred = true;
            }
            return Some(ok);
        }
        let known = self.known[i].get(v).copied();
        if known.is_none() {
            self.unjudged.push((i, v.into()));
        }
        known
    }

    /// Whether values were met without a verdict.
    pub fn pending(&self) -> bool {
        !self.unjudged.is_empty()
    }

    /// Runs the regexes on the values noted without a verdict. Returns
    /// `false`, leaving the rest unjudged, once `stop` says so (it is asked
    /// every few evaluations: one regex on one long value can take
    /// milliseconds).
    pub fn judge(&mut self, matchers: &[Matcher], stop: impl Fn() -> bool) -> bool {
        let mut n = 0;
        while let Some((i, v)) = self.unjudged.pop() {
            n += 1;
            if n % JUDGE_BATCH == 0 && stop() {
                self.unjudged.push((i, v));
                return false;
            }
            if !self.known[i].contains_key(&v) {
                let ok = matchers[i].matches(&v);
                self.known[i].insert(v, ok);
            }
        }
        true
    }

    /// Defers every regex from the start (tests).
    #[cfg(test)]
    fn deferring(mut self) -> Self {
        self.deferred = true;
        self
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
    /// Runs the regexes in place: for callers that hold no lock others wait on.
    pub fn select(&self, strings: &Interner, matchers: &[Matcher], all: u32) -> Vec<u32> {
        let mut verdicts = Verdicts::new(matchers);
        loop {
            verdicts.begin_visit();
            if let Some(slots) = self.select_judged(strings, matchers, all, &mut verdicts) {
                return slots;
            }
            verdicts.judge(matchers, || false);
        }
    }

    /// [`Postings::select`] with regex verdicts from `verdicts`: `None`
    /// when a value had none yet (judge them, then call again).
    pub fn select_judged(
        &self,
        strings: &Interner,
        matchers: &[Matcher],
        all: u32,
        verdicts: &mut Verdicts,
    ) -> Option<Vec<u32>> {
        let mut result: Option<Vec<u32>> = None;
        // Positive matchers first: they shrink the set fastest.
        let mut order: Vec<usize> = (0..matchers.len()).collect();
        order.sort_by_key(|&i| verdicts.empty[i]);
        for i in order {
            let set = self.select_one(strings, i, &matchers[i], all, verdicts);
            if verdicts.pending() {
                // Go on past this matcher only to note what else it lacks.
                continue;
            }
            result = Some(match result {
                None => set,
                Some(prev) => intersect(&prev, &set),
            });
            if result.as_ref().is_some_and(Vec::is_empty) {
                break;
            }
        }
        if verdicts.pending() {
            return None;
        }
        Some(result.unwrap_or_else(|| (0..all).collect()))
    }

    fn select_one(
        &self,
        strings: &Interner,
        i: usize,
        m: &Matcher,
        all: u32,
        verdicts: &mut Verdicts,
    ) -> Vec<u32> {
        let values = strings.lookup(&m.name).and_then(|n| self.by_name.get(&n));
        if verdicts.empty[i] {
            // Every series except those whose value for the name does not match.
            let mut excluded: Vec<u32> = Vec::new();
            if let Some(values) = values {
                for (&v, slots) in values {
                    if verdicts.verdict(i, m, strings.get(v)) == Some(false) {
                        excluded.extend_from_slice(slots);
                    }
                }
            }
            if verdicts.pending() {
                return Vec::new();
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
            if verdicts.verdict(i, m, strings.get(v)) == Some(true) {
                out.extend_from_slice(slots);
            }
        }
        if verdicts.pending() {
            return Vec::new();
        }
        sorted_set(out)
    }
}

/// The union of postings lists gathered one after another, sorted once:
/// linear-logarithmic in the slots however many values a regex matches
/// (a pairwise merge would be quadratic in the values).
pub(crate) fn sorted_set(mut slots: Vec<u32>) -> Vec<u32> {
    slots.sort_unstable();
    slots.dedup();
    slots
}

/// The union of ascending lists (a block's postings lists), ascending
/// without repeats: merged two by two, round after round, so that k
/// lists of n slots in all take n·log k steps (one sort of them all
/// takes n·log n, and merging each into the union so far n·k).
pub(crate) fn union_sorted(mut lists: Vec<Vec<u32>>) -> Vec<u32> {
    while lists.len() > 1 {
        let mut next = Vec::with_capacity(lists.len().div_ceil(2));
        let mut it = lists.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => merge_sorted(&a, &b),
                None => a,
            });
        }
        lists = next;
    }
    lists.pop().unwrap_or_default()
}

/// The union of two ascending lists, without repeats.
fn merge_sorted(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let x = if a[i] <= b[j] {
            j += usize::from(a[i] == b[j]);
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        if out.last() != Some(&x) {
            out.push(x);
        }
    }
    for &x in a[i..].iter().chain(&b[j..]) {
        if out.last() != Some(&x) {
            out.push(x);
        }
    }
    out
}

/// The slots in both `a` and `b`, each ascending without repeats: a walk
/// of both where they are of like length, else a binary search of the
/// longer for each slot of the shorter.
pub(crate) fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(short.len());
    if short.len().saturating_mul(16) < long.len() {
        let mut rest = long;
        for &id in short {
            match rest.binary_search(&id) {
                Ok(k) => {
                    out.push(id);
                    rest = &rest[k + 1..];
                }
                Err(k) => rest = &rest[k..],
            }
        }
        return out;
    }
    let (mut i, mut j) = (0, 0);
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
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The union of ascending lists is the sets', in order, whatever
        /// their number.
        #[test]
        fn postings_unite_as_sets(
            lists in proptest::collection::vec(
                proptest::collection::btree_set(0u32..300, 0..60), 0..12),
        ) {
            let want: BTreeSet<u32> = lists.iter().flatten().copied().collect();
            let lists: Vec<Vec<u32>> =
                lists.iter().map(|l| l.iter().copied().collect()).collect();
            prop_assert_eq!(union_sorted(lists), want.into_iter().collect::<Vec<_>>());
        }

        /// The intersection of two postings lists is the sets', in order,
        /// whichever way it is walked (lengths alike or far apart).
        #[test]
        fn postings_intersect_as_sets(
            a in proptest::collection::btree_set(0u32..400, 0..300),
            b in proptest::collection::btree_set(0u32..400, 0..20),
        ) {
            let want: Vec<u32> = a.intersection(&b).copied().collect();
            let (va, vb): (Vec<u32>, Vec<u32>) =
                (a.iter().copied().collect(), b.iter().copied().collect());
            prop_assert_eq!(&intersect(&va, &vb), &want);
            prop_assert_eq!(&intersect(&vb, &va), &want);
            let all: BTreeSet<u32> = a.iter().chain(&b).copied().collect();
            let mut joined = va.clone();
            joined.extend(&vb);
            prop_assert_eq!(sorted_set(joined), all.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(intersect(&va, &va), va);
        }
    }

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

    #[test]
    fn regex_verdicts_are_gathered_then_judged_outside() {
        let (s, p) = shard(&[
            &[("__name__", "up"), ("job", "node")],
            &[("__name__", "up"), ("job", "api")],
            &[("__name__", "up")],
        ]);
        let ms = [
            m(MatchOp::Equal, "__name__", "up"),
            m(MatchOp::NotRegex, "job", "n.*"),
        ];
        let mut v = Verdicts::new(&ms).deferring();
        // First look: the values of `job` have no verdict yet.
        assert_eq!(p.select_judged(&s, &ms, 3, &mut v), None);
        assert!(v.pending());
        assert!(v.judge(&ms, || false));
        assert!(!v.pending());
        assert_eq!(p.select_judged(&s, &ms, 3, &mut v), Some(vec![1, 2]));
        assert_eq!(p.select(&s, &ms, 3), vec![1, 2]);
        // Verdicts are kept by value: another shard with the same values
        // needs no judging.
        let (s2, p2) = shard(&[&[("__name__", "up"), ("job", "api")]]);
        assert_eq!(p2.select_judged(&s2, &ms, 1, &mut v), Some(vec![0]));
    }

    #[test]
    fn judging_stops_when_told() {
        let series: Vec<Vec<(String, String)>> = (0..100)
            .map(|i| vec![("job".to_owned(), format!("j{i}"))])
            .collect();
        let refs: Vec<Vec<(&str, &str)>> = series
            .iter()
            .map(|l| l.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect())
            .collect();
        let slices: Vec<&[(&str, &str)]> = refs.iter().map(Vec::as_slice).collect();
        let (s, p) = shard(&slices);
        let ms = [m(MatchOp::Regex, "job", "j1.*")];
        let mut v = Verdicts::new(&ms).deferring();
        assert_eq!(p.select_judged(&s, &ms, 100, &mut v), None);
        assert!(!v.judge(&ms, || true), "stopped");
        assert!(v.judge(&ms, || false));
        assert_eq!(
            p.select_judged(&s, &ms, 100, &mut v).map(|x| x.len()),
            Some(11)
        );
    }

    #[test]
    fn a_regex_past_its_budget_under_the_lock_is_deferred() {
        let values: Vec<String> = (0..6).map(|i| format!("{i}{}", "v".repeat(4000))).collect();
        let series: Vec<[(&str, &str); 1]> =
            values.iter().map(|v| [("wide", v.as_str())]).collect();
        let slices: Vec<&[(&str, &str)]> = series.iter().map(|l| &l[..]).collect();
        let (s, p) = shard(&slices);
        // Cheap: answered in place, nothing deferred.
        let cheap = [m(MatchOp::Regex, "wide", "1v+")];
        let mut v = Verdicts::new(&cheap);
        v.begin_visit();
        assert_eq!(p.select_judged(&s, &cheap, 6, &mut v), Some(vec![1]));
        // Milliseconds per value: deferred after the first evaluation, the
        // rest noted for judging outside the lock.
        let slow = [m(MatchOp::Regex, "wide", &["(?:\\w|\\s)*?v"; 100].concat())];
        let mut v = Verdicts::new(&slow);
        v.begin_visit();
        assert_eq!(p.select_judged(&s, &slow, 6, &mut v), None);
        assert!(v.unjudged.len() >= 4, "{}", v.unjudged.len());
        assert!(v.judge(&slow, || false));
        let mut rounds = 0;
        let got = loop {
            rounds += 1;
            v.begin_visit();
            if let Some(got) = p.select_judged(&s, &slow, 6, &mut v) {
                break got;
            }
            assert!(v.judge(&slow, || false));
        };
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
        assert!(rounds <= 2, "{rounds}");
    }
}
