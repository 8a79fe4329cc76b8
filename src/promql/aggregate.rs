//! Aggregation operators with `by` / `without`.

use hashbrown::HashMap;
use std::sync::Arc;

use crate::promql::parser::token::{
    TokenId, T_AVG, T_BOTTOMK, T_COUNT, T_COUNT_VALUES, T_GROUP, T_LIMITK, T_LIMIT_RATIO, T_MAX,
    T_MIN, T_QUANTILE, T_STDDEV, T_STDVAR, T_SUM, T_TOPK,
};
use crate::promql::parser::{self, AggregateExpr, Expr, LabelModifier};

use super::annotations::Annotation;
use super::eval::{Compat, Ctx, RangeTable, RowFold, TABLE_CELLS_PER_WORKER};
use super::group::{group_labels, GroupMemo};
use super::stats::{mean_and_variance, quantile, Kahan, Mean};
use super::stats::{HistogramTotals, ResetHintsSeen};
use super::value::{format_float, set_label, Labels, Sample, Value};
use super::QueryError;
use crate::histogram::FloatHistogram;

struct Group {
    labels: Labels,
    members: Vec<usize>,
    /// A member's name was to be dropped: so is the group's, if it kept
    /// one (`by (__name__)`).
    drop_name: bool,
}

/// The operators [`streamed`] computes.
fn streams(op: TokenId) -> bool {
    matches!(op, T_SUM | T_AVG | T_COUNT | T_GROUP | T_MIN | T_MAX)
}

/// A streamed aggregation whose input is a range table (a range function
/// over a selector in a range query): the table's rows are read in place,
/// and each row's group is worked out once per query, so a step costs one
/// pass over the values: no label set is cloned and none is hashed.
fn from_table(
    memo: &mut GroupMemo,
    agg: &AggregateExpr,
    op: TokenId,
    table: &RangeTable,
    k: usize,
) -> Option<Vec<Sample>> {
    let table_id = table as *const RangeTable as usize;
    if memo.rows_of != table_id {
        // Every row's group, then every step's groups at once, spread over
        // the free cores; each step's result is handed out when asked for.
        memo.rows.clear();
        memo.rows.reserve(table.rows());
        for row in 0..table.rows() {
            let id = memo.group_of(table.labels(row), &agg.modifier);
            memo.rows.push(id);
        }
        memo.rows_of = table_id;
        let steps = table.steps();
        let (rows, groups) = (&memo.rows, &memo.groups);
        let min_part = TABLE_CELLS_PER_WORKER.div_ceil(table.rows().max(1));
        memo.by_step = crate::parallel::parts(steps, min_part, |r| {
            aggregate_steps(op, table, r, rows, groups)
        })
        .into_iter()
        .flatten()
        .collect();
    }
    match memo.by_step.get_mut(k).and_then(Option::take) {
        Some(out) => Some(out),
        // A folded table's steps past its first are in `by_step` alone.
        None if !table.has_step(k) => None,
        None => aggregate_steps(op, table, k..k + 1, &memo.rows, &memo.groups)
            .pop()
            .flatten(),
    }
}

/// Bytes a [`StepFold`]'s state may take: steps × groups accumulators,
/// and the samples they become.
const FOLD_STATE_BYTES: usize = 32 << 20;

/// Steps whose accumulators a [`StepFold`] keeps side by side per group:
/// a row's cells over them update one run of memory, and a run for every
/// group stays in the caches while a block's rows are folded.
const FOLD_CHUNK_STEPS: usize = 256;

/// One group's running value at one step, for one operator (what [`Acc`]
/// holds, without the operator's tag, so a fold is compiled per operator
/// and its state is as small as the operator needs).
trait Folds: Copy + Send + Sync {
    const EMPTY: Self;
    fn add(&mut self, v: f64);
    fn value(&self) -> f64;
}

impl Folds for Kahan {
    const EMPTY: Self = Kahan::ZERO;
    fn add(&mut self, v: f64) {
        Kahan::add(self, v);
    }
    fn value(&self) -> f64 {
        Kahan::value(self)
    }
}

impl Folds for Mean {
    const EMPTY: Self = Mean::ZERO;
    fn add(&mut self, v: f64) {
        Mean::add(self, v);
    }
    fn value(&self) -> f64 {
        Mean::value(self)
    }
}

/// `count`'s running count.
#[derive(Clone, Copy)]
struct Counted(f64);

impl Folds for Counted {
    const EMPTY: Self = Counted(0.0);
    fn add(&mut self, _: f64) {
        self.0 += 1.0;
    }
    fn value(&self) -> f64 {
        self.0
    }
}

/// `group`: 1 wherever the group has a member.
#[derive(Clone, Copy)]
struct Grouped;

impl Folds for Grouped {
    const EMPTY: Self = Grouped;
    fn add(&mut self, _: f64) {}
    fn value(&self) -> f64 {
        1.0
    }
}

/// `max` (`MAX`) or `min` so far, NaN until a number comes, as [`Acc`]
/// folds it.
#[derive(Clone, Copy)]
struct Extreme<const MAX: bool>(f64);

impl<const MAX: bool> Folds for Extreme<MAX> {
    const EMPTY: Self = Extreme(f64::NAN);
    fn add(&mut self, v: f64) {
        let better = if MAX { v > self.0 } else { v < self.0 };
        if self.0.is_nan() || better {
            self.0 = v;
        }
    }
    fn value(&self) -> f64 {
        self.0
    }
}

/// A [`StepFold`]'s accumulators: per chunk of [`FOLD_CHUNK_STEPS`] steps,
/// per group, per step of the chunk; with whether each has taken a value.
struct Cells<A> {
    accs: Vec<A>,
    seen: Vec<bool>,
}

impl<A: Folds> Cells<A> {
    fn new(groups: usize, steps: usize) -> Self {
        let n = steps.div_ceil(FOLD_CHUNK_STEPS) * FOLD_CHUNK_STEPS * groups;
        Self {
            accs: vec![A::EMPTY; n],
            seen: vec![false; n],
        }
    }

    /// Folds a block's rows ([`RowFold::fold`]) into the chunks of steps
    /// cut among free workers; `order[k]` takes each group the first time
    /// a row of it is present at step `k`.
    #[allow(clippy::too_many_arguments)]
    fn fold(
        &mut self,
        order: &mut [Vec<u32>],
        groups: usize,
        groups_of: &[u32],
        rows: std::ops::Range<usize>,
        values: &[f64],
        present: &[bool],
        steps: usize,
    ) {
        let chunks = steps.div_ceil(FOLD_CHUNK_STEPS);
        let per_chunk = FOLD_CHUNK_STEPS * groups;
        let workers = crate::parallel::Workers::for_items(
            chunks,
            TABLE_CELLS_PER_WORKER.div_ceil(rows.len().max(1) * FOLD_CHUNK_STEPS),
        );
        let mut parts = Vec::new();
        let (mut accs, mut seen, mut order) =
            (self.accs.as_mut_slice(), self.seen.as_mut_slice(), order);
        for cs in workers.bounds(chunks) {
            let (a, rest_a) = accs.split_at_mut(cs.len() * per_chunk);
            let (s, rest_s) = seen.split_at_mut(cs.len() * per_chunk);
            let ks = (cs.end * FOLD_CHUNK_STEPS).min(steps) - cs.start * FOLD_CHUNK_STEPS;
            let (o, rest_o) = order.split_at_mut(ks);
            parts.push((cs, a, s, o));
            (accs, seen, order) = (rest_a, rest_s, rest_o);
        }
        workers.run(parts, |(cs, accs, seen, order)| {
            let first = cs.start * FOLD_CHUNK_STEPS;
            for c in cs.clone() {
                let k0 = c * FOLD_CHUNK_STEPS;
                let len = FOLD_CHUNK_STEPS.min(steps - k0);
                let base = (c - cs.start) * per_chunk;
                let order = &mut order[k0 - first..][..len];
                for (j, row) in rows.clone().enumerate() {
                    let id = groups_of[row];
                    let at = base + id as usize * FOLD_CHUNK_STEPS;
                    let cells = j * steps + k0..j * steps + k0 + len;
                    let (accs, seen) = (&mut accs[at..at + len], &mut seen[at..at + len]);
                    let cells = values[cells.clone()].iter().zip(&present[cells]);
                    for ((((&v, &here), acc), seen), order) in
                        cells.zip(accs).zip(seen).zip(order.iter_mut())
                    {
                        if here {
                            if !*seen {
                                *seen = true;
                                order.push(id);
                            }
                            acc.add(v);
                        }
                    }
                }
            }
        });
    }

    /// The value of group `id` at step `k`.
    fn value(&self, groups: usize, id: u32, k: usize) -> f64 {
        let c = k / FOLD_CHUNK_STEPS;
        let at = c * FOLD_CHUNK_STEPS * groups
            + id as usize * FOLD_CHUNK_STEPS
            + (k - c * FOLD_CHUNK_STEPS);
        self.accs[at].value()
    }
}

/// [`Cells`] for the operator folded.
enum Folding {
    Sum(Cells<Kahan>),
    Avg(Cells<Mean>),
    Count(Cells<Counted>),
    Group(Cells<Grouped>),
    Min(Cells<Extreme<false>>),
    Max(Cells<Extreme<true>>),
}

/// Runs `$body` with `$cells` bound to the [`Cells`] inside `$folding`.
macro_rules! with_cells {
    ($folding:expr, $cells:ident => $body:expr) => {
        match $folding {
            Folding::Sum($cells) => $body,
            Folding::Avg($cells) => $body,
            Folding::Count($cells) => $body,
            Folding::Group($cells) => $body,
            Folding::Min($cells) => $body,
            Folding::Max($cells) => $body,
        }
    };
}

impl Folding {
    /// Bytes one accumulator takes, with its flag.
    fn cell_bytes(op: TokenId) -> Option<usize> {
        use std::mem::size_of;
        Some(
            1 + match op {
                T_SUM => size_of::<Kahan>(),
                T_AVG => size_of::<Mean>(),
                T_COUNT => size_of::<Counted>(),
                T_GROUP => 0,
                T_MIN | T_MAX => size_of::<f64>(),
                _ => return None,
            },
        )
    }

    fn new(op: TokenId, groups: usize, steps: usize) -> Option<Self> {
        Some(match op {
            T_SUM => Self::Sum(Cells::new(groups, steps)),
            T_AVG => Self::Avg(Cells::new(groups, steps)),
            T_COUNT => Self::Count(Cells::new(groups, steps)),
            T_GROUP => Self::Group(Cells::new(groups, steps)),
            T_MIN => Self::Min(Cells::new(groups, steps)),
            T_MAX => Self::Max(Cells::new(groups, steps)),
            _ => return None,
        })
    }
}

/// A streamed aggregation over a range table, folded from the table's
/// rows as they are filled ([`RowFold`]): what [`aggregate_steps`] makes
/// of a whole table (at each step the groups in the order their first
/// row comes, each group's values folded in row order, so the same
/// results to the bit), without a table of every series at every step.
struct StepFold {
    /// The aggregation node's address (its memo's key).
    agg: usize,
    op: TokenId,
    modifier: Option<LabelModifier>,
    /// The rows' groups (`rows`) and the groups' labels.
    memo: GroupMemo,
    /// Per step: its groups (memo numbers) in the order they come.
    order: Vec<Vec<u32>>,
    cells: Option<Folding>,
}

impl StepFold {
    fn new(agg: &AggregateExpr, op: TokenId) -> Self {
        Self {
            agg: agg as *const AggregateExpr as usize,
            op,
            modifier: agg.modifier.clone(),
            memo: GroupMemo::default(),
            order: Vec::new(),
            cells: None,
        }
    }
}

impl RowFold for StepFold {
    fn start(&mut self, labels: &[Labels], steps: usize) -> Option<usize> {
        // Only `count_values` streams without being folded here.
        let cell_bytes = Folding::cell_bytes(self.op)?;
        let mut groups = GroupMemo::default();
        let rows: Vec<u32> = labels
            .iter()
            .map(|l| groups.group_of(l, &self.modifier))
            .collect();
        let g = groups.groups.len();
        // Folding pays where groups are fewer than rows; its state is
        // bounded.
        let accumulators = steps.div_ceil(FOLD_CHUNK_STEPS) * FOLD_CHUNK_STEPS * g;
        // Each accumulator, its group's place in its step's order, and
        // the sample it becomes.
        let bytes = accumulators.saturating_mul(
            cell_bytes + std::mem::size_of::<u32>() + std::mem::size_of::<Sample>(),
        );
        if g * 2 > labels.len() || bytes > FOLD_STATE_BYTES {
            return None;
        }
        self.cells = Some(Folding::new(self.op, g, steps)?);
        groups.rows = rows;
        self.memo = groups;
        self.order = vec![Vec::new(); steps];
        Some(bytes + steps * std::mem::size_of::<Vec<u32>>())
    }

    fn fold(
        &mut self,
        rows: std::ops::Range<usize>,
        values: &[f64],
        present: &[bool],
        steps: usize,
    ) {
        let g = self.memo.groups.len();
        let (order, groups_of) = (&mut self.order, &self.memo.rows);
        if let Some(folding) = &mut self.cells {
            with_cells!(folding, cells => cells.fold(order, g, groups_of, rows, values, present, steps));
        }
    }

    fn finish(self: Box<Self>, ctx: &Ctx<'_>, table: usize, drop_name: bool) {
        let Self {
            agg,
            mut memo,
            order,
            cells,
            ..
        } = *self;
        let Some(cells) = cells else {
            return;
        };
        let (groups, g) = (&memo.groups, memo.groups.len());
        let by_step = order
            .into_iter()
            .enumerate()
            .map(|(k, ids)| {
                Some(
                    ids.into_iter()
                        .map(|id| Sample {
                            labels: Arc::clone(&groups[id as usize]),
                            v: with_cells!(&cells, c => c.value(g, id, k)),
                            h: None,
                            drop_name,
                        })
                        .collect(),
                )
            })
            .collect();
        memo.by_step = by_step;
        memo.rows_of = table;
        memo.fold_asked = true;
        ctx.group_memos.borrow_mut().insert(agg, memo);
    }
}

/// Whether `agg`, at its first step of a range query, asks for its input
/// table's rows as they are filled (see [`StepFold`]); asked once.
fn ask_fold(ctx: &Ctx<'_>, agg: &AggregateExpr, t: i64) -> bool {
    if ctx.step_of(t) != Some(0) || !ctx.steps_asked_once() {
        return false;
    }
    let mut memos = ctx.group_memos.borrow_mut();
    let memo = memos
        .entry(agg as *const AggregateExpr as usize)
        .or_default();
    !std::mem::replace(&mut memo.fold_asked, true)
}

/// Accumulators a block of [`aggregate_steps`] holds at once (steps ×
/// groups): a few MiB.
const BLOCK_ACCUMULATORS: usize = 1 << 16;

/// Steps `ks` of [`from_table`]: at each, the rows present aggregated by
/// their groups (`rows[row]`, labels in `groups`), the groups in the
/// order their first row comes and each group's values folded in row
/// order, as [`streamed`] folds a vector. The table is read row by row
/// over a block of steps, so each row's cells are read in one sweep.
fn aggregate_steps(
    op: TokenId,
    table: &RangeTable,
    ks: std::ops::Range<usize>,
    rows: &[u32],
    groups: &[Labels],
) -> Vec<Option<Vec<Sample>>> {
    let Some(empty) = Acc::new(op) else {
        return ks.map(|_| None).collect();
    };
    let g = groups.len().max(1);
    let block = (BLOCK_ACCUMULATORS / g).clamp(1, ks.len().max(1));
    let mut out = Vec::with_capacity(ks.len());
    // Per step of the block: each memo group's place among the step's
    // groups, the groups in order, and their accumulators.
    let mut slot = vec![GroupMemo::NONE; block * g];
    let mut ids: Vec<Vec<u32>> = vec![Vec::new(); block];
    let mut accs: Vec<Vec<Acc>> = vec![Vec::new(); block];
    let mut from = ks.start;
    while from < ks.end {
        let to = (from + block).min(ks.end);
        for (row, &id) in rows.iter().enumerate().take(table.rows()) {
            let id = id as usize;
            for (j, v) in table.row_at(row, from..to) {
                let s = &mut slot[j * g + id];
                if *s == GroupMemo::NONE {
                    *s = ids[j].len() as u32;
                    ids[j].push(id as u32);
                    accs[j].push(empty);
                }
                accs[j][*s as usize].add(op, v);
            }
        }
        for j in 0..to - from {
            for &id in &ids[j] {
                slot[j * g + id as usize] = GroupMemo::NONE;
            }
            out.push(Some(
                ids[j]
                    .drain(..)
                    .zip(accs[j].drain(..))
                    .map(|(id, acc)| Sample {
                        labels: Arc::clone(&groups[id as usize]),
                        v: acc.value(),
                        h: None,
                        drop_name: table.drop_name(),
                    })
                    .collect(),
            ));
        }
        from = to;
    }
    out
}

/// One group's running aggregation for the operators [`streamed`] folds.
#[derive(Debug, Clone, Copy)]
enum Acc {
    Sum(Kahan),
    Mean(Mean),
    Count(f64),
    Group,
    /// `min` or `max` so far (NaN until a number comes).
    Extreme(f64),
}

impl Acc {
    /// The empty accumulator for `op`, if `op` is folded so.
    fn new(op: TokenId) -> Option<Self> {
        Some(match op {
            T_SUM => Self::Sum(Kahan::default()),
            T_AVG => Self::Mean(Mean::default()),
            T_COUNT | T_COUNT_VALUES => Self::Count(0.0),
            T_GROUP => Self::Group,
            T_MIN | T_MAX => Self::Extreme(f64::NAN),
            _ => return None,
        })
    }

    fn add(&mut self, op: TokenId, v: f64) {
        match self {
            Self::Sum(k) => k.add(v),
            Self::Mean(m) => m.add(v),
            Self::Count(c) => *c += 1.0,
            Self::Group => {}
            Self::Extreme(m) => {
                let better = if op == T_MIN { v < *m } else { v > *m };
                if m.is_nan() || better {
                    *m = v;
                }
            }
        }
    }

    fn value(&self) -> f64 {
        match self {
            Self::Sum(k) => k.value(),
            Self::Mean(m) => m.value(),
            Self::Count(c) => *c,
            Self::Group => 1.0,
            Self::Extreme(m) => *m,
        }
    }
}

/// `sum`, `avg`, `count`, `group`, `min` and `max` per group in one pass
/// over `input`, where `of[i]` is the group of `input[i]`; `None` for the
/// other operators.
fn streamed(op: TokenId, input: &[f64], of: &[u32], groups: usize) -> Option<Vec<f64>> {
    let mut accs = vec![Acc::new(op)?; groups];
    for (&v, &g) in input.iter().zip(of) {
        accs[g as usize].add(op, v);
    }
    Some(accs.iter().map(Acc::value).collect())
}

/// Evaluates an aggregation at `t`.
pub(crate) fn eval(ctx: &Ctx<'_>, agg: &AggregateExpr, t: i64) -> Result<Value, QueryError> {
    let op = agg.op.id();
    // Prometheus names the aggregated expression in annotations (the
    // aggregation itself for `topk`/`bottomk`), the parameter in those
    // about it.
    let node = match op {
        T_TOPK | T_BOTTOMK => agg.pos,
        _ => agg.expr.unparen().pos(),
    };
    let param = agg.param.as_deref().map_or(node, |p| p.unparen().pos());
    let _pos = ctx.at_pos(node, param);
    // In a range query, a range function's output (its table, once made)
    // or a plain selector's (its table of values at every step) is read in
    // place at each step.
    // At its first step, the aggregation asks to fold the table's rows as
    // they are filled; the vector evaluated to make the table is kept for
    // the step should no table come of it.
    let mut input = None;
    if streams(op) {
        let tabled = match (&*agg.expr, agg.expr.unparen()) {
            (Expr::Call(call), _) => match ctx.tabulated(call, t) {
                Some(found) => Some(found),
                None if ask_fold(ctx, agg, t) => {
                    let key = call as *const parser::Call as usize;
                    ctx.fold_into(key, Box::new(StepFold::new(agg, op)));
                    let v = ctx.eval_vector(&agg.expr, t);
                    ctx.unfold(key);
                    input = Some(v?);
                    ctx.tabulated(call, t)
                }
                None => None,
            },
            (_, Expr::VectorSelector(vs)) => match ctx.step_of(t) {
                Some(k) => {
                    let key = vs as *const parser::VectorSelector as usize;
                    if ask_fold(ctx, agg, t) {
                        ctx.fold_into(key, Box::new(StepFold::new(agg, op)));
                    }
                    let table = ctx.selector_table(vs);
                    ctx.unfold(key);
                    table?.map(|table| (table, k))
                }
                None => None,
            },
            _ => None,
        };
        if let Some((table, k)) = tabled {
            // Read in place, the output passes the check it would pass as
            // a vector.
            table.check_unique(k)?;
            let mut memos = ctx.group_memos.borrow_mut();
            let memo = memos
                .entry(agg as *const AggregateExpr as usize)
                .or_default();
            if let Some(out) = from_table(memo, agg, op, &table, k) {
                return Ok(Value::Vector(out));
            }
        }
    }
    let mut input = match input {
        Some(input) => input,
        None => ctx.eval_vector(&agg.expr, t)?,
    };
    if input.iter().any(|s| s.h.is_some()) {
        let ignoring = match op {
            T_SUM | T_AVG => return with_histograms(ctx, agg, op, &input),
            T_MIN => "min",
            T_MAX => "max",
            T_STDDEV => "stddev",
            T_STDVAR => "stdvar",
            T_QUANTILE => "quantile",
            T_TOPK => "topk",
            T_BOTTOMK => "bottomk",
            _ => "",
        };
        if !ignoring.is_empty() {
            ctx.annotate(Annotation::HistogramIgnoredInAggregation(ignoring));
            input.retain(|s| s.h.is_none());
        }
    }
    let count_label = count_values_label(agg, op)?;
    let (groups, of) = {
        let mut memos = ctx.group_memos.borrow_mut();
        let memo = memos
            .entry(agg as *const AggregateExpr as usize)
            .or_default();
        memo.once = ctx.evaluates_once();
        group_input(memo, agg, &input, count_label.as_deref())
    };

    // Sums, counts and extremes accumulate in one pass over the input; the
    // other operators need each group's members side by side.
    let vals: Vec<f64> = input.iter().map(|s| s.v).collect();
    if let Some(v) = streamed(op, &vals, &of, groups.len()) {
        return Ok(Value::Vector(
            groups
                .into_iter()
                .zip(v)
                .map(|(g, v)| Sample {
                    labels: g.labels,
                    v,
                    h: None,
                    drop_name: g.drop_name,
                })
                .collect(),
        ));
    }
    let param = || -> Result<f64, QueryError> {
        match &agg.param {
            Some(p) => ctx.eval_scalar(p, t),
            None => Err(QueryError::BadData(
                "aggregation needs a parameter".to_owned(),
            )),
        }
    };
    let param = match op {
        T_TOPK | T_BOTTOMK | T_LIMITK => check_k(param()?)?,
        T_LIMIT_RATIO => {
            let r = param()?;
            if r.is_nan() {
                return Err(QueryError::Execution(if ctx.opts.compat >= Compat::V3_14 {
                    "Ratio value is NaN".to_owned()
                } else {
                    format!("Ratio value {} is NaN", format_go(r))
                }));
            }
            let capped = r.clamp(-1.0, 1.0);
            if capped != r {
                ctx.annotate(Annotation::InvalidRatio(r, capped));
            }
            capped
        }
        T_QUANTILE => {
            let q = param()?;
            if !(0.0..=1.0).contains(&q) {
                ctx.annotate(Annotation::InvalidQuantile(q));
            }
            q
        }
        _ => 0.0,
    };
    by_members(op, groups, &of, &input, param).map(Value::Vector)
}

/// `sum` and `avg` over input holding histograms: a group of histograms
/// gives their sum or mean, a group of floats theirs; a group of both, or
/// of histograms that cannot be added, gives nothing but a warning.
fn with_histograms(
    ctx: &Ctx<'_>,
    agg: &AggregateExpr,
    op: TokenId,
    input: &[Sample],
) -> Result<Value, QueryError> {
    let (groups, of) = {
        let mut memos = ctx.group_memos.borrow_mut();
        let memo = memos
            .entry(agg as *const AggregateExpr as usize)
            .or_default();
        memo.once = ctx.evaluates_once();
        group_input(memo, agg, input, None)
    };
    #[derive(Default)]
    struct Acc {
        floats: Vec<f64>,
        hist: Option<FloatHistogram>,
        hists: usize,
        broken: bool,
        totals: HistogramTotals,
        hints: ResetHintsSeen,
    }
    let mut accs: Vec<Acc> = (0..groups.len()).map(|_| Acc::default()).collect();
    for (s, &g) in input.iter().zip(&of) {
        let a = &mut accs[g as usize];
        let Some(h) = &s.h else {
            a.floats.push(s.v);
            continue;
        };
        a.hists += 1;
        if a.broken {
            continue;
        }
        a.totals.add(h);
        a.hints.note(h.hint);
        let Some(acc) = a.hist.as_mut() else {
            a.hist = Some(FloatHistogram::clone(h));
            continue;
        };
        let step = if op == T_AVG {
            // Prometheus' incremental mean: mean += h/n - mean/n.
            let n = a.hists as f64;
            let mut left = FloatHistogram::clone(h);
            left.div(n);
            let mut right = acc.clone();
            right.div(n);
            ctx.hist_combine(&mut left, &right, true, "aggregation")
                .and_then(|()| ctx.hist_combine(acc, &left, false, "aggregation"))
        } else {
            ctx.hist_combine(acc, h, false, "aggregation")
        };
        if let Err(e) = step {
            let name = s
                .labels
                .iter()
                .find(|l| l.name == "__name__")
                .map_or("", |l| l.value.as_str());
            ctx.annotate(Annotation::incompatible(e, name));
            a.broken = true;
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for (g, a) in groups.into_iter().zip(accs) {
        if a.hists > 0 && !a.floats.is_empty() {
            ctx.annotate(Annotation::MixedFloatsHistogramsAgg);
            continue;
        }
        if a.broken {
            continue;
        }
        if a.hints.conflict() && ctx.opts.compat >= Compat::V3_14 {
            ctx.annotate(Annotation::CounterResetCollision("aggregation"));
        }
        if let Some(mut h) = a.hist {
            a.totals.apply(&mut h, op == T_AVG);
            h.compact();
            out.push(Sample {
                drop_name: g.drop_name,
                ..Sample::histogram(g.labels, Arc::new(h))
            });
        } else {
            let of = vec![0u32; a.floats.len()];
            if let Some(v) = streamed(op, &a.floats, &of, 1) {
                out.push(Sample {
                    drop_name: g.drop_name,
                    ..Sample::float(g.labels, v[0])
                });
            }
        }
    }
    Ok(Value::Vector(out))
}

/// `topk`'s and `bottomk`'s `k`, refused as Prometheus refuses it when it
/// is NaN or does not fit an int64 (with Prometheus' words).
fn check_k(k: f64) -> Result<f64, QueryError> {
    // The largest and smallest float64 that convert to an int64.
    const MAX: f64 = 9_223_372_036_854_774_784.0;
    const MIN: f64 = -9_223_372_036_854_775_808.0;
    if k.is_nan() {
        return Err(QueryError::Execution("Parameter value is NaN".to_owned()));
    }
    let text = || {
        let mut s = String::new();
        super::value::format_float(k, &mut s);
        s
    };
    if k <= MIN {
        return Err(QueryError::Execution(format!(
            "Scalar value {} underflows int64",
            text()
        )));
    }
    if k >= MAX {
        return Err(QueryError::Execution(format!(
            "Scalar value {} overflows int64",
            text()
        )));
    }
    Ok(k)
}

/// `count_values`' label name (its parameter); `None` for other operators.
fn count_values_label(agg: &AggregateExpr, op: TokenId) -> Result<Option<String>, QueryError> {
    if op != T_COUNT_VALUES {
        return Ok(None);
    }
    let mut param = agg.param.as_deref();
    while let Some(Expr::Paren(p)) = param {
        param = Some(&p.expr);
    }
    match param {
        // Prometheus 3 takes any UTF-8 name but the empty one.
        Some(Expr::StringLiteral(s)) if s.val.is_empty() || !s.valid_utf8() => Err(
            QueryError::Execution(format!("invalid label name {}", s.go_quoted())),
        ),
        Some(Expr::StringLiteral(s)) => Ok(Some(s.val.clone())),
        _ => Err(QueryError::BadData(
            "count_values needs a label name".to_owned(),
        )),
    }
}

/// The step's groups in first-seen order, and the group of each input
/// sample. A series' group is worked out once per query (the memo, by the
/// address of the series' shared labels); at each step a sample finds its
/// group by the memo's number for it. `count_values` groups by value too.
fn group_input(
    memo: &mut GroupMemo,
    agg: &AggregateExpr,
    input: &[Sample],
    count_label: Option<&str>,
) -> (Vec<Group>, Vec<u32>) {
    memo.at_step.iter_mut().for_each(|g| *g = GroupMemo::NONE);
    let mut index: HashMap<Labels, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    let mut of = Vec::with_capacity(input.len());
    for s in input {
        if let Some(name) = count_label {
            let mut v = String::new();
            match &s.h {
                Some(h) => v = h.to_string(),
                None => format_float(s.v, &mut v),
            }
            let key = set_label(&group_labels(&s.labels, &agg.modifier), name, v);
            let g = *index.entry(key.clone()).or_insert_with(|| {
                groups.push(Group {
                    labels: key,
                    members: Vec::new(),
                    drop_name: false,
                });
                groups.len() - 1
            });
            // count_values' groups are never marked, as in Prometheus.
            of.push(g as u32);
            continue;
        }
        let id = memo.group_of(&s.labels, &agg.modifier);
        let (at, new) = memo.step_index(id, groups.len());
        if new {
            groups.push(Group {
                labels: Arc::clone(&memo.groups[id as usize]),
                members: Vec::new(),
                drop_name: false,
            });
        }
        groups[at as usize].drop_name |= s.drop_name;
        of.push(at);
    }
    (groups, of)
}

/// The operators that need each group's members side by side: `topk`,
/// `bottomk` (with `k` as `param`), `quantile` (with φ), `stddev`, `stdvar`.
fn by_members(
    op: TokenId,
    mut groups: Vec<Group>,
    of: &[u32],
    input: &[Sample],
    param: f64,
) -> Result<Vec<Sample>, QueryError> {
    for (i, &g) in of.iter().enumerate() {
        groups[g as usize].members.push(i);
    }
    let mut out = Vec::with_capacity(groups.len());
    if op == T_LIMITK {
        // The first k of each group, in input order.
        if param < 1.0 {
            return Ok(Vec::new());
        }
        for g in &groups {
            out.extend(
                g.members
                    .iter()
                    .take(param.min(usize::MAX as f64) as usize)
                    .map(|&i| input[i].clone()),
            );
        }
        return Ok(out);
    }
    if op == T_LIMIT_RATIO {
        // A series is kept by where its label hash falls in [0, 1], so
        // that the same series are kept at every step, and `limit_ratio(r)`
        // and `limit_ratio(-(1 - r))` split the input between them.
        let r = param;
        return Ok(input
            .iter()
            .filter(|s| {
                let offset = prometheus_hash(&s.labels) as f64 / u64::MAX as f64;
                (r >= 0.0 && offset < r) || (r < 0.0 && offset >= 1.0 + r)
            })
            .cloned()
            .collect());
    }
    if op == T_TOPK || op == T_BOTTOMK {
        let k = param;
        if k.is_nan() || k < 1.0 {
            return Ok(Vec::new());
        }
        let k = if k >= input.len() as f64 {
            input.len()
        } else {
            k as usize
        };
        for g in &groups {
            let kept = top_k(op == T_TOPK, k, g.members.iter().map(|&i| &input[i]));
            out.extend(kept.into_iter().cloned());
        }
        return Ok(out);
    }
    for g in groups {
        let vals = g.members.iter().map(|&i| input[i].v);
        let v = match op {
            T_STDDEV | T_STDVAR => {
                let (_, var) = mean_and_variance(vals);
                if op == T_STDDEV {
                    var.sqrt()
                } else {
                    var
                }
            }
            T_QUANTILE => {
                let mut v: Vec<f64> = vals.collect();
                quantile(param, &mut v)
            }
            _ => {
                return Err(QueryError::Execution(
                    "aggregation is not supported yet".to_owned(),
                ))
            }
        };
        out.push(Sample {
            labels: g.labels,
            v,
            h: None,
            drop_name: g.drop_name,
        });
    }
    Ok(out)
}

/// The `k` largest (`topk`) or smallest of `members`, chosen and ordered
/// as Prometheus 3.5.3 does, so that ties between equal values keep the
/// same series: a binary heap of up to `k` (Go's `container/heap`) with
/// the one to go at its root, which a later member replaces only if
/// strictly better; NaN is worse than any number. The kept are then put in
/// order best first by insertion sort, as Go sorts up to 12 elements (past
/// 12 Go's pdqsort may order equal values otherwise: the instant answer's
/// order then differs among ties, the series kept do not).
fn top_k<'s>(top: bool, k: usize, members: impl Iterator<Item = &'s Sample>) -> Vec<&'s Sample> {
    // Prometheus' heap order: `less(a, b)` puts `a` nearer the root.
    let less = |a: f64, b: f64| a.is_nan() || if top { a < b } else { a > b };
    let mut heap: Vec<&Sample> = Vec::with_capacity(k.min(1024));
    let up = |heap: &mut Vec<&Sample>, mut j: usize| {
        while j > 0 {
            let i = (j - 1) / 2;
            if !less(heap[j].v, heap[i].v) {
                break;
            }
            heap.swap(i, j);
            j = i;
        }
    };
    let down = |heap: &mut Vec<&Sample>, mut i: usize| {
        let n = heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let mut j = left;
            if left + 1 < n && less(heap[left + 1].v, heap[left].v) {
                j = left + 1;
            }
            if !less(heap[j].v, heap[i].v) {
                break;
            }
            heap.swap(i, j);
            i = j;
        }
    };
    for s in members {
        if heap.len() < k {
            heap.push(s);
            let last = heap.len() - 1;
            up(&mut heap, last);
            continue;
        }
        let root = heap[0].v;
        let better = if top { root < s.v } else { root > s.v };
        if better || (root.is_nan() && !s.v.is_nan()) {
            heap[0] = s;
            // Go's heap.Fix: down, else up (the root cannot go up).
            down(&mut heap, 0);
        }
    }
    // sort.Sort(sort.Reverse(heap)): best first; insertion sort, as Go
    // sorts so few.
    for i in 1..heap.len() {
        let mut j = i;
        while j > 0 && less(heap[j - 1].v, heap[j].v) {
            heap.swap(j, j - 1);
            j -= 1;
        }
    }
    heap
}

/// Prometheus' `Labels.Hash`: xxHash64 of each name and value followed by
/// a 0xff byte, in label order.
fn prometheus_hash(labels: &[crate::storage::labels::Label]) -> u64 {
    let mut h = xxhash_rust::xxh64::Xxh64::new(0);
    for l in labels {
        h.update(l.name.as_bytes());
        h.update(&[0xff]);
        h.update(l.value.as_bytes());
        h.update(&[0xff]);
    }
    h.digest()
}

/// A float as Go's `%v` prints it in Prometheus' messages.
fn format_go(v: f64) -> String {
    let mut s = String::new();
    format_float(v, &mut s);
    s
}
