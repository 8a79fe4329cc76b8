//! Reads for queries: select series by matchers and time range, then stream
//! their samples chunk by chunk. Sealed chunks are shared (`Arc`), never
//! copied; only the small open chunk of each series is copied, because it is
//! still being appended to. No shard lock is held while samples are read.

use std::collections::BTreeSet;

use super::blocks::{leave_out, merge, BlockSet, Blocks};
pub use super::cardinality::{Cardinality, Counter, Stat};
pub use super::chunk::ChunkRef;
use super::federated::{chooses, down, tag};
pub use super::federated::{chooses as tenant_chosen, down as tenant_down, tag_pairs};
pub use super::federated::{ORIGINAL_TENANT_LABEL, TENANT_LABEL};
use super::head::deleted::deleted_whole;
use super::head::shard::{MemSeries, Shard};
use super::head::{Head, SeriesSamples};
use super::index::Matcher;
use super::labels::Label;
pub use super::selected::SelectedSeries;
use super::{Stop, Stopped};

/// The read door: series, label names and values over the head and the
/// blocks for a time range, merged so that every sample is answered once;
/// or over several databases at once, each series labelled with the
/// tenant it came from ([`super::federated`]). Cheap to copy; holds no
/// lock between calls.
#[derive(Debug, Clone, Copy)]
pub struct Querier<'d>(Over<'d>);

#[derive(Debug, Clone, Copy)]
enum Over<'d> {
    One(Single<'d>),
    Federated(&'d [Member<'d>]),
}

/// One database's reads: its head and blocks.
#[derive(Debug, Clone, Copy)]
struct Single<'d> {
    head: &'d Head,
    blocks: &'d Blocks,
}

impl<'d> Querier<'d> {
    pub(super) fn new(head: &'d Head, blocks: &'d Blocks) -> Self {
        Self(Over::One(Single { head, blocks }))
    }

    /// Reads over every one of `members` (tenant federation): each series
    /// carries a `__tenant_id__` label naming its tenant, and matchers on
    /// that label choose the members asked.
    pub fn federated(members: &'d [Member<'d>]) -> Self {
        Self(Over::Federated(members))
    }

    /// Copies out the series matching all `matchers` with their samples in
    /// `[mint, maxt]`, sorted by labels: for tests and small answers;
    /// queries stream with [`Querier::select`].
    pub fn select_samples(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Vec<SeriesSamples> {
        self.select(matchers, mint, maxt)
            .into_iter()
            .map(|s| SeriesSamples {
                samples: s.samples(mint, maxt).collect(),
                labels: s.labels,
            })
            .collect()
    }

    /// Series matching all `matchers` with samples in `[mint, maxt]`,
    /// sorted by labels.
    pub fn select(&self, matchers: &[Matcher], mint: i64, maxt: i64) -> Vec<SelectedSeries> {
        self.select_until(matchers, mint, maxt, &Stop::default())
            .unwrap_or_default()
    }

    /// [`Querier::select`], giving up when `stop` says so.
    pub fn select_until(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        self.select_reading(matchers, (mint, maxt), stop, Reading::All)
    }

    /// [`Querier::select_until`] for a reader of each series' newest
    /// sample in `[mint, maxt]` alone ([`SelectedSeries::last_sample`]):
    /// where the head knows that sample, the series' chunks are not copied.
    pub fn select_newest_until(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        self.select_reading(matchers, (mint, maxt), stop, Reading::Newest)
    }

    fn select_reading(
        &self,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        reading: Reading,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        match self.0 {
            Over::One(q) => q.select_until(matchers, (mint, maxt), stop, reading),
            Over::Federated(members) => {
                over_members::select(members, matchers, (mint, maxt), stop, reading)
            }
        }
    }

    /// Label sets (no samples) of the series matching `matchers` with
    /// samples in `[mint, maxt]`, sorted.
    pub fn series_labels(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<Vec<Label>>, Stopped> {
        match self.0 {
            Over::One(q) => q.series_labels(matchers, mint, maxt, stop),
            Over::Federated(members) => {
                over_members::series_labels(members, matchers, mint, maxt, stop)
            }
        }
    }

    /// Calls `f` with the label set of each series in the head (what
    /// Prometheus' `/api/v1/status/tsdb` counts) matching `matchers`: one
    /// at a time, none kept.
    pub fn for_each_head_labels(
        &self,
        matchers: &[Matcher],
        stop: &Stop<'_>,
        f: &mut dyn FnMut(Vec<Label>),
    ) -> Result<(), Stopped> {
        match self.0 {
            Over::One(q) => {
                q.head
                    .for_each_match(matchers, i64::MIN, i64::MAX, stop, |shard, series, _| {
                        f(shard.labels_of(series))
                    })
            }
            Over::Federated(members) => {
                over_members::for_each_head_labels(members, matchers, stop, f)
            }
        }
    }

    /// Calls `f` with the label set of each series, in blocks and head,
    /// matching `matchers` with samples in `[mint, maxt]`, one at a time:
    /// a series held in several places comes once per place.
    pub fn for_each_series_labels(
        &self,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        f: &mut dyn FnMut(Vec<Label>),
    ) -> Result<(), Stopped> {
        match self.0 {
            Over::One(q) => {
                let f = std::cell::RefCell::new(f);
                q.each_labels(
                    None,
                    matchers,
                    (mint, maxt),
                    stop,
                    |l| (f.borrow_mut())(l),
                    |shard, series, _| (f.borrow_mut())(shard.labels_of(series)),
                )
            }
            Over::Federated(_) => {
                for labels in self.series_labels(matchers, mint, maxt, stop)? {
                    f(labels);
                }
                Ok(())
            }
        }
    }

    /// Label names used by series matching `matchers` (all series when
    /// empty) with samples in `[mint, maxt]`.
    pub fn label_names(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        match self.0 {
            Over::One(q) => q.label_names(matchers, mint, maxt, stop),
            Over::Federated(members) => {
                over_members::label_names(members, matchers, mint, maxt, stop)
            }
        }
    }

    /// Values of label `name` among series matching `matchers` (all series
    /// when empty) with samples in `[mint, maxt]`.
    pub fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        match self.0 {
            Over::One(q) => q.label_values(name, matchers, mint, maxt, stop),
            Over::Federated(members) => {
                over_members::label_values(members, name, matchers, mint, maxt, stop)
            }
        }
    }
}

/// What a selection's reader reads of each series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Every sample in the range.
    All,
    /// The newest sample in the range alone.
    Newest,
}

/// One database of a federated read, and its tenant's ID.
#[derive(Debug, Clone, Copy)]
pub struct Member<'d> {
    /// The tenant's ID: the value of its series' `__tenant_id__`.
    pub tenant: &'d str,
    /// Its database's reads.
    pub querier: Querier<'d>,
}

impl<'d> Single<'d> {
    /// Blocks answer for times before the floor, the head from it on.
    fn select_until(
        &self,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        reading: Reading,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        let set = self.blocks.read();
        let mut out = self.blocks.select(&set, matchers, mint, maxt, stop)?;
        let from_blocks = !out.is_empty();
        // A chunk standing for its newest sample alone must not be joined
        // with a block's chunks (joining decodes where they overlap).
        let reading = if from_blocks { Reading::All } else { reading };
        // The head answers in order from the floor on, and with late
        // samples older than it that no block holds yet.
        let floor = set.floor();
        let deleted = self.head.deleted();
        let parts = self.head.collect_matches(
            matchers,
            (mint, maxt),
            stop,
            |taken, shard, series, until| {
                // A series with deleted samples is read whole, to be cut.
                let newest = reading == Reading::Newest && deleted.get(series.id).is_none();
                taken.take(shard, series, (mint, maxt), until, floor, newest);
            },
            |id, mut s| {
                if s.chunks.is_empty() && s.histograms.is_empty() && mint < floor {
                    return None;
                }
                if let Some(ranges) = deleted.get(id) {
                    // The head's own chunks: sound, so an error is a bug,
                    // and the series is left out rather than answered
                    // with what was deleted.
                    match leave_out(&mut s, ranges) {
                        Ok(true) => {}
                        Ok(false) => return None,
                        Err(e) => {
                            tracing::error!(error = %e, "a head chunk with deleted samples does not decode");
                            return None;
                        }
                    }
                }
                Some(s)
            },
            |part| {
                if !from_blocks {
                    part.sort_unstable_by(|a, b| a.labels.cmp(&b.labels));
                }
            },
        )?;
        drop(set);
        if from_blocks {
            out.extend(parts.into_iter().flatten());
            return Ok(merge(out));
        }
        Ok(merge_sorted(parts))
    }

    /// Calls `f` with the labels of each series, in blocks and head, that
    /// matches `matchers` with samples in `[mint, maxt]` (a series in
    /// several once per place). With `tables`, blocks are not read series
    /// by series: `tables` is given the set instead.
    fn each_labels(
        &self,
        tables: Option<&mut dyn FnMut(&BlockSet)>,
        matchers: &[Matcher],
        (mint, maxt): (i64, i64),
        stop: &Stop<'_>,
        mut blocks: impl FnMut(Vec<Label>),
        head: impl FnMut(&Shard, &MemSeries, i64),
    ) -> Result<(), Stopped> {
        let set = self.blocks.read();
        match tables {
            Some(f) => f(&set),
            None => self
                .blocks
                .for_each_labels(&set, matchers, mint, maxt, stop, &mut blocks)?,
        }
        // The whole range: late samples older than the floor may be in the
        // head alone.
        self.head.for_each_match(matchers, mint, maxt, stop, head)?;
        Ok(())
    }

    fn series_labels(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<Vec<Label>>, Stopped> {
        let mut from_blocks = Vec::new();
        let mut out = Vec::new();
        let deleted = self.head.deleted();
        self.each_labels(
            None,
            matchers,
            (mint, maxt),
            stop,
            |l| from_blocks.push(l),
            |shard, series, _| {
                // A series whose samples in the range are all deleted is
                // not listed.
                let gone = deleted
                    .get(series.id)
                    .is_some_and(|r| deleted_whole(shard, series, r, mint, maxt));
                if !gone {
                    out.push(shard.labels_of(series));
                }
            },
        )?;
        let merged = !from_blocks.is_empty();
        out.append(&mut from_blocks);
        out.sort();
        if merged {
            out.dedup();
        }
        Ok(out)
    }

    fn label_names(
        &self,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        if matchers.is_empty() {
            let mut out = BTreeSet::new();
            let set = self.blocks.read();
            self.blocks.all_label_names(&set, mint, maxt, &mut out);
            self.head
                .for_each_match(&[], mint, maxt, stop, |shard, series, _| {
                    for &(n, _) in shard.labels(series).iter() {
                        let name = shard.strings.get(n);
                        if !out.contains(name) {
                            out.insert(name.to_owned());
                        }
                    }
                })?;
            return Ok(out);
        }
        let out = std::cell::RefCell::new(BTreeSet::new());
        self.each_labels(
            None,
            matchers,
            (mint, maxt),
            stop,
            |labels| {
                out.borrow_mut()
                    .extend(labels.into_iter().map(|l| String::from(l.name)))
            },
            |shard, series, _| {
                let mut out = out.borrow_mut();
                for &(n, _) in shard.labels(series).iter() {
                    let name = shard.strings.get(n);
                    if !out.contains(name) {
                        out.insert(name.to_owned());
                    }
                }
            },
        )?;
        Ok(out.into_inner())
    }

    fn label_values(
        &self,
        name: &str,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        // Without matchers, blocks answer from their postings offset
        // tables alone (no series is read).
        let out = std::cell::RefCell::new(BTreeSet::new());
        let mut tables = |set: &BlockSet| {
            self.blocks
                .all_label_values(set, name, mint, maxt, &mut out.borrow_mut())
        };
        self.each_labels(
            matchers
                .is_empty()
                .then_some(&mut tables as &mut dyn FnMut(&BlockSet)),
            matchers,
            (mint, maxt),
            stop,
            |labels| {
                if let Some(l) = labels.into_iter().find(|l| l.name == name) {
                    out.borrow_mut().insert(l.value.into());
                }
            },
            |shard, series, _| {
                let Some(id) = shard.strings.lookup(name) else {
                    return;
                };
                if let Some(&(_, v)) = shard.labels(series).iter().find(|&&(n, _)| n == id) {
                    let value = shard.strings.get(v);
                    let mut out = out.borrow_mut();
                    if !out.contains(value) {
                        out.insert(value.to_owned());
                    }
                }
            },
        )?;
        Ok(out.into_inner())
    }
}

/// Parts each sorted by labels, merged into one sorted vector (a series
/// is in one part only: the head's shards hold distinct series).
fn merge_sorted(mut parts: Vec<Vec<SelectedSeries>>) -> Vec<SelectedSeries> {
    while parts.len() > 1 {
        let b = parts.pop().unwrap_or_default();
        let a = parts.pop().unwrap_or_default();
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.labels <= y.labels,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            out.extend(if take_a { a.next() } else { b.next() });
        }
        parts.push(out);
    }
    parts.pop().unwrap_or_default()
}

/// Reads over several databases (tenant federation): the rules of the
/// tenant label are in [`super::federated`].
mod over_members {
    use std::collections::BTreeSet;

    use super::{
        chooses, down, tag, Label, Matcher, Member, Reading, SelectedSeries, Stop, Stopped,
        ORIGINAL_TENANT_LABEL, TENANT_LABEL,
    };

    /// The members that `matchers` on the tenant label choose, and the
    /// other matchers, to ask them with.
    fn plan<'a, 'd>(
        members: &'a [Member<'d>],
        matchers: &[Matcher],
    ) -> (Vec<&'a Member<'d>>, Vec<Matcher>) {
        let chosen = members
            .iter()
            .filter(|m| chooses(matchers, m.tenant))
            .collect();
        (chosen, down(matchers, true))
    }

    /// [`Querier::select_until`] over `members`.
    pub(super) fn select(
        members: &[Member<'_>],
        matchers: &[Matcher],
        range: (i64, i64),
        stop: &Stop<'_>,
        reading: Reading,
    ) -> Result<Vec<SelectedSeries>, Stopped> {
        let (chosen, down) = plan(members, matchers);
        let mut out = Vec::new();
        for m in chosen {
            for mut s in m.querier.select_reading(&down, range, stop, reading)? {
                tag(&mut s.labels, m.tenant);
                out.push(s);
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// [`Querier::series_labels`] over `members`.
    pub(super) fn series_labels(
        members: &[Member<'_>],
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<Vec<Vec<Label>>, Stopped> {
        let (chosen, down) = plan(members, matchers);
        let mut out = Vec::new();
        for m in chosen {
            for mut labels in m.querier.series_labels(&down, mint, maxt, stop)? {
                tag(&mut labels, m.tenant);
                out.push(labels);
            }
        }
        out.sort();
        Ok(out)
    }

    /// [`Querier::for_each_head_labels`] over `members`.
    pub(super) fn for_each_head_labels(
        members: &[Member<'_>],
        matchers: &[Matcher],
        stop: &Stop<'_>,
        f: &mut dyn FnMut(Vec<Label>),
    ) -> Result<(), Stopped> {
        let (chosen, down) = plan(members, matchers);
        for m in chosen {
            m.querier
                .for_each_head_labels(&down, stop, &mut |mut labels| {
                    tag(&mut labels, m.tenant);
                    f(labels)
                })?;
        }
        Ok(())
    }

    /// [`Querier::label_names`] over `members`: theirs, and `__tenant_id__`
    /// (a series' own `__tenant_id__` is `original___tenant_id__`).
    pub(super) fn label_names(
        members: &[Member<'_>],
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        let (chosen, down) = plan(members, matchers);
        let mut out = BTreeSet::new();
        for m in chosen {
            for name in m.querier.label_names(&down, mint, maxt, stop)? {
                if name == TENANT_LABEL {
                    out.insert(ORIGINAL_TENANT_LABEL.to_owned());
                } else {
                    out.insert(name);
                }
            }
        }
        out.insert(TENANT_LABEL.to_owned());
        Ok(out)
    }

    /// [`Querier::label_values`] over `members`. The values of
    /// `__tenant_id__` are the tenants its matchers choose (no database is
    /// asked).
    pub(super) fn label_values(
        members: &[Member<'_>],
        name: &str,
        matchers: &[Matcher],
        mint: i64,
        maxt: i64,
        stop: &Stop<'_>,
    ) -> Result<BTreeSet<String>, Stopped> {
        let (chosen, down) = plan(members, matchers);
        if name == TENANT_LABEL {
            return Ok(chosen.iter().map(|m| m.tenant.to_owned()).collect());
        }
        let asked = if name == ORIGINAL_TENANT_LABEL {
            TENANT_LABEL
        } else {
            name
        };
        let mut out = BTreeSet::new();
        for m in chosen {
            out.extend(m.querier.label_values(asked, &down, mint, maxt, stop)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::head::{AppendCounts, HeadOptions};
    use crate::storage::index::MatchOp;
    use crate::storage::labels::encode_canonical;

    type Fixture<'a> = (&'a [(&'a str, &'a str)], &'a [(i64, f64)]);

    fn head_with(series: &[Fixture<'_>]) -> Head {
        let head = Head::new(HeadOptions {
            shards: 4,
            ..HeadOptions::default()
        });
        let mut c = AppendCounts::default();
        for (labels, samples) in series {
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            head.append_labels(labels, &raw, samples.iter().copied(), i64::MAX, &mut c)
                .expect("fits");
        }
        head
    }

    fn m(op: MatchOp, n: &str, v: &str) -> Matcher {
        Matcher::new(op, n, v).expect("matcher")
    }

    #[test]
    fn select_streams_samples_in_range_across_chunks() {
        // 300 samples 1s apart: the 240-sample cap cuts a second chunk.
        let samples: Vec<(i64, f64)> = (0..300).map(|i| (i * 1000, i as f64)).collect();
        let head = head_with(&[
            (&[("__name__", "a"), ("job", "x")], &samples),
            (&[("__name__", "a"), ("job", "y")], &[(500_000, 1.0)]),
            (&[("__name__", "b")], &[(1000, 1.0)]),
        ]);
        let got = head
            .querier()
            .select(&[m(MatchOp::Equal, "__name__", "a")], 100_000, 250_000);
        assert_eq!(got.len(), 1, "job=y has no sample in range");
        assert_eq!(got[0].label("job"), Some("x"));
        assert!(got[0].chunks.len() >= 2);
        let s: Vec<_> = got[0].samples(100_000, 250_000).collect();
        assert_eq!(s.len(), 151);
        assert_eq!(s[0], (100_000, 100.0));
        assert_eq!(s[150], (250_000, 250.0));
        // Sorted by labels.
        let all = head
            .querier()
            .select(&[m(MatchOp::Regex, "__name__", ".+")], 0, i64::MAX);
        let names: Vec<_> = all
            .iter()
            .map(|s| (s.label("__name__"), s.label("job")))
            .collect();
        assert_eq!(
            names,
            vec![
                (Some("a"), Some("x")),
                (Some("a"), Some("y")),
                (Some("b"), None)
            ]
        );
    }

    proptest::proptest! {
        /// Reading the newest sample alone gives what reading every
        /// sample gives last, for any range: in, before, after and across
        /// the open chunk, with late samples merged in.
        #[test]
        fn the_newest_reading_is_the_last_of_all(
            lens in proptest::collection::vec(0usize..300, 1..6),
            late in proptest::collection::vec(0i64..300, 0..5),
            mint in 0i64..320_000,
            span in 0i64..320_000,
        ) {
            let head = Head::new(HeadOptions {
                shards: 2,
                ooo_window_ms: 600_000,
                ..HeadOptions::default()
            });
            let mut c = AppendCounts::default();
            for (k, &n) in lens.iter().enumerate() {
                let job = k.to_string();
                let labels = [("__name__", "a"), ("job", job.as_str())];
                let mut raw = Vec::new();
                encode_canonical(labels.iter().copied(), &mut raw);
                let samples = (0..n as i64).map(|i| (i * 1000, i as f64));
                head.append_labels(&labels, &raw, samples, i64::MAX, &mut c)
                    .expect("fits");
                if k == 0 {
                    // Late samples, between the in-order ones.
                    let late = late.iter().map(|&i| (i * 1000 + 500, -1.0));
                    let _ = head.append_labels(&labels, &raw, late, i64::MAX, &mut c);
                }
            }
            let all = [m(MatchOp::Equal, "__name__", "a")];
            let maxt = mint + span;
            let q = head.querier();
            let every = q.select_until(&all, mint, maxt, &Stop::default()).expect("no stop");
            let newest = q.select_newest_until(&all, mint, maxt, &Stop::default()).expect("no stop");
            proptest::prop_assert_eq!(every.len(), newest.len());
            for (e, n) in every.iter().zip(&newest) {
                proptest::prop_assert_eq!(&e.labels, &n.labels);
                proptest::prop_assert_eq!(e.samples(mint, maxt).last(), n.last_sample(mint, maxt));
            }
        }
    }

    #[test]
    fn label_names_and_values_respect_matchers_and_time() {
        let head = head_with(&[
            (&[("__name__", "a"), ("job", "x")], &[(1000, 1.0)]),
            (
                &[("__name__", "a"), ("job", "y"), ("zone", "z")],
                &[(9000, 1.0)],
            ),
            (&[("__name__", "b"), ("env", "p")], &[(1000, 1.0)]),
        ]);
        let names = head
            .querier()
            .label_names(&[], i64::MIN, i64::MAX, &Stop::default())
            .expect("no stop");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["__name__", "env", "job", "zone"]
        );
        let names = head
            .querier()
            .label_names(
                &[m(MatchOp::Equal, "__name__", "a")],
                0,
                5000,
                &Stop::default(),
            )
            .expect("no stop");
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["__name__", "job"]);
        let values = head
            .querier()
            .label_values("job", &[], i64::MIN, i64::MAX, &Stop::default())
            .expect("no stop");
        assert_eq!(values.into_iter().collect::<Vec<_>>(), ["x", "y"]);
        let values = head
            .querier()
            .label_values("__name__", &[], 5000, 10_000, &Stop::default())
            .expect("no stop");
        assert_eq!(values.into_iter().collect::<Vec<_>>(), ["a"]);
        let sets = head
            .querier()
            .series_labels(
                &[m(MatchOp::Equal, "job", "y")],
                i64::MIN,
                i64::MAX,
                &Stop::default(),
            )
            .expect("no stop");
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].len(), 3);
    }
}
