//! Grouping for aggregations (`by` / `without`) and matching for binary
//! operations, remembered per node for the whole query.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use crate::promql::parser::LabelModifier;

use super::value::{keep_labels, keeps_label, no_labels, Labels, Sample};
use crate::storage::labels::Label;

/// The labels of the group a series falls into (none without `by`/`without`).
pub(crate) fn group_labels(labels: &[Label], modifier: &Option<LabelModifier>) -> Labels {
    match modifier {
        None => no_labels(),
        Some(_) => keep_labels(labels, modifier),
    }
}

/// One aggregation node's grouping of the series it has seen in a query:
/// each distinct group gets a number, and each series (by the address of
/// its shared labels) the number of its group, worked out once per query.
/// Every address here belongs to an `Arc` held in `keep`, so it is never
/// reused for other labels while the memo lives.
#[derive(Default)]
pub(crate) struct GroupMemo {
    pub(crate) by_addr: hashbrown::HashMap<usize, u32>,
    pub(crate) keep: Vec<Labels>,
    /// Group numbers by the hash of their labels: a series finds its group
    /// by hashing the labels it keeps in place, and only a new group's
    /// labels are built.
    by_labels: hashbrown::HashTable<u32>,
    /// hashbrown's default (foldhash, seeded per process): several times
    /// faster than SipHash on label strings, which are most of grouping's
    /// cost for a selection of thousands of series.
    hasher: hashbrown::DefaultHashBuilder,
    pub(crate) groups: Vec<Labels>,
    /// The node is evaluated once (an instant query): remembering each
    /// series' group by address would cost more than it saves.
    pub(crate) once: bool,
    /// Scratch for one step: memo group number → index in that step's groups.
    pub(crate) at_step: Vec<u32>,
    /// The group of each row of the range table at `rows_of` (its address),
    /// `NONE` until the row is first present.
    pub(crate) rows: Vec<u32>,
    pub(crate) rows_of: usize,
    /// The aggregation of the table at `rows_of` at each step, each taken
    /// when that step is evaluated.
    pub(crate) by_step: Vec<Option<Vec<crate::promql::value::Sample>>>,
    /// Whether the node asked for its input table's rows to be folded as
    /// they are filled (asked once, at its first step).
    pub(crate) fold_asked: bool,
}

impl GroupMemo {
    /// Series remembered per node at most; past it (inputs whose labels are
    /// rebuilt at every step) a series' group is looked up by content.
    const MAX: usize = 1 << 20;
    pub(crate) const NONE: u32 = u32::MAX;

    /// The index of memo group `id` among the current step's groups, and
    /// whether it is new to the step: the caller then adds it, at `next`
    /// (the step's group count so far).
    pub(crate) fn step_index(&mut self, id: u32, next: usize) -> (u32, bool) {
        let id = id as usize;
        if self.at_step.len() <= id {
            self.at_step.resize(id + 1, Self::NONE);
        }
        let new = self.at_step[id] == Self::NONE;
        if new {
            self.at_step[id] = next as u32;
        }
        (self.at_step[id], new)
    }

    pub(crate) fn group_of(&mut self, labels: &Labels, modifier: &Option<LabelModifier>) -> u32 {
        let addr = Arc::as_ptr(labels) as *const Label as usize;
        if let Some(&g) = self.by_addr.get(&addr) {
            return g;
        }
        let kept = || {
            labels
                .iter()
                .filter(move |l| modifier.is_some() && keeps_label(&l.name, modifier))
        };
        let hash = hash_labels(&self.hasher, kept());
        let Self {
            by_labels,
            groups,
            hasher,
            ..
        } = self;
        let found = by_labels.find(hash, |&g| {
            let group = &groups[g as usize];
            group.len() == kept().count() && group.iter().zip(kept()).all(|(a, b)| a == b)
        });
        let g = match found {
            Some(&g) => g,
            None => {
                groups.push(group_labels(labels, modifier));
                let g = (groups.len() - 1) as u32;
                by_labels
                    .insert_unique(hash, g, |&k| hash_labels(hasher, groups[k as usize].iter()));
                g
            }
        };
        if !self.once && self.keep.len() < Self::MAX {
            self.by_addr.insert(addr, g);
            self.keep.push(Arc::clone(labels));
        }
        g
    }
}

/// One hash of a label sequence, however it is held.
fn hash_labels<'l>(
    hasher: &hashbrown::DefaultHashBuilder,
    labels: impl Iterator<Item = &'l Label>,
) -> u64 {
    let mut h = hasher.build_hasher();
    for l in labels {
        l.name.hash(&mut h);
        l.value.hash(&mut h);
    }
    h.finish()
}

/// One binary operation's label work across the steps of a query: each
/// input series' signature, and the result labels of each pair of series
/// matched, by the addresses of their shared labels. Operands hand out the
/// same label sets at every step, so after the first step a pair's result
/// is looked up, not built, and it is the same shared set at every step
/// (which the duplicate check and the range query's answer then find by
/// address). Equal signatures are one shared set, so series are matched
/// by the address of their signature. Every address here belongs to an
/// `Arc` held in `keep`, so it is never reused while the memo lives; past
/// a bound (inputs rebuilt at every step) it starts over, between steps.
#[derive(Default)]
pub(crate) struct MatchMemo {
    sigs: hashbrown::HashMap<usize, Labels>,
    interned: hashbrown::HashMap<Labels, Labels>,
    results: hashbrown::HashMap<(usize, usize), Labels>,
    keep: Vec<Labels>,
    /// The last step's matching, where its two sides held floats only.
    pub(crate) plan: Option<MatchPlan>,
}

/// One step's matching of two float vectors, to replay at a step whose
/// sides hold the same series in the same order: which elements were
/// made (from which side's sample, or a fill where a side had none) and
/// their labels, in the order they were made. What a step matches and
/// which errors it meets depend on its series alone where no histogram
/// is involved, so such a step's answer is the plan's pairs with this
/// step's values.
pub(crate) struct MatchPlan {
    /// The series of the "many" (or left, one-to-one) side, and of the
    /// "one" side, as they were (held, so their addresses stay theirs).
    pub(crate) many: Vec<Labels>,
    pub(crate) one: Vec<Labels>,
    /// Each element: the "many" side's sample and the "one" side's (an
    /// index, or `None` for the fill), and its labels.
    pub(crate) pairs: Vec<(Option<usize>, Option<usize>, Labels)>,
}

impl MatchPlan {
    /// Whether `many` and `one` hold the series the plan was made for, in
    /// its order.
    pub(crate) fn fits(&self, many: &[Sample], one: &[Sample]) -> bool {
        let same = |held: &[Labels], now: &[Sample]| {
            held.len() == now.len() && held.iter().zip(now).all(|(a, b)| Arc::ptr_eq(a, &b.labels))
        };
        same(&self.many, many) && same(&self.one, one)
    }
}

impl MatchMemo {
    const MAX: usize = 1 << 20;

    pub(crate) fn addr(labels: &Labels) -> usize {
        Arc::as_ptr(labels) as *const Label as usize
    }

    /// Starts over past the bound: called before a step's work, so that
    /// the signatures of one step all come from one memo.
    pub(crate) fn begin_step(&mut self) {
        if self.keep.len() >= Self::MAX {
            *self = Self::default();
        }
    }

    fn hold(&mut self, labels: &Labels) {
        self.keep.push(Arc::clone(labels));
    }

    /// The signature of `labels`: the one shared set for its content.
    pub(crate) fn signature(
        &mut self,
        labels: &Labels,
        matching: &Option<LabelModifier>,
    ) -> Labels {
        let addr = Self::addr(labels);
        if let Some(sig) = self.sigs.get(&addr) {
            return Arc::clone(sig);
        }
        let sig = keep_labels(labels, matching);
        let sig = Arc::clone(self.interned.entry(Arc::clone(&sig)).or_insert(sig));
        self.hold(labels);
        self.sigs.insert(addr, Arc::clone(&sig));
        sig
    }

    pub(crate) fn result(
        &mut self,
        many: &Labels,
        one: &Labels,
        build: impl FnOnce() -> Labels,
    ) -> Labels {
        let key = (Self::addr(many), Self::addr(one));
        if let Some(r) = self.results.get(&key) {
            return Arc::clone(r);
        }
        let r = build();
        self.hold(many);
        self.hold(one);
        self.results.insert(key, Arc::clone(&r));
        r
    }
}
