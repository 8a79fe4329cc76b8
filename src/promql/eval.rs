//! The evaluator's core: one query's state ([`Ctx`]) with its caches keyed
//! by the expression tree, selectors with lookback and staleness, `offset`
//! and `@`, range windows and subqueries. Operators (functions,
//! aggregations, binary expressions) sit above it and reach it only
//! through [`Ctx`]; it reaches them through the [`Operators`] hook.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use crate::promql::parser::token::{T_TRIM_LOWER, T_TRIM_UPPER};
use crate::promql::parser::{self, AtModifier, Expr, Offset, Pos, SubqueryExpr, VectorSelector};

use super::annotations::{Annotation, Annotations};
use super::group::GroupMemo;
use super::guard::{millis as ms, ParseLimits};
use super::selector_matchers;
use super::stats::{counter_increase_in, counter_resets, means_of_4, FactorMemo, SlidingExtreme};
use super::value::{drop_name, no_labels, Hist, Labels, Name, Sample, Series, Value};
use super::QueryError;
use crate::histogram::{CounterResetHint, FloatHistogram, Incompatible};
use crate::parallel;
use crate::storage::index::Matcher;
use crate::storage::labels::Label;
use crate::storage::selected::SelectedSeries;
use crate::storage::Querier;
use crate::storage::{ReadBudget, Stop};

pub use crate::storage::STALE_NAN;

/// Collects into `out` the selectors below `histogram_count`,
/// `histogram_sum` or `histogram_avg` (`under`) with no subquery,
/// `histogram_quantile(s)`, `histogram_fraction` or trim operator above
/// them: those Prometheus v3.14 reads for count and sum only
/// (`detectHistogramStatsDecoding`).
fn stats_only_selectors(e: &Expr, under: bool, out: &mut HashSet<usize>) {
    let under = match e {
        Expr::Subquery(_) => return,
        Expr::Binary(b) if matches!(b.op.id(), T_TRIM_UPPER | T_TRIM_LOWER) => return,
        Expr::Call(c) => match c.func.name {
            "histogram_quantile" | "histogram_quantiles" | "histogram_fraction" => return,
            "histogram_count" | "histogram_sum" | "histogram_avg" => true,
            _ => under,
        },
        Expr::VectorSelector(vs) if under => {
            out.insert(vs as *const VectorSelector as usize);
            return;
        }
        Expr::MatrixSelector(m) if under => {
            out.insert(&m.vs as *const VectorSelector as usize);
            return;
        }
        _ => under,
    };
    for c in e.children() {
        stats_only_selectors(c, under, out);
    }
}

/// Marks each histogram whose reset hint is unknown (the first of its
/// chunk) as a reset or not against the one read before it, as Prometheus'
/// statistics-only iterator does; the first read stays unknown.
fn decide_reset_hints(hists: &mut [(i64, Hist)]) {
    // The newest histogram read that is not a stale marker (markers are
    // not remembered as the one read before).
    let mut prev: Option<usize> = None;
    for i in 0..hists.len() {
        if is_stale(hists[i].1.sum) {
            continue;
        }
        let Some(p) = prev.replace(i) else {
            continue;
        };
        if hists[i].1.hint != CounterResetHint::Unknown {
            continue;
        }
        let reset = hists[i].1.detect_reset_reconciling(&hists[p].1);
        let h = Arc::make_mut(&mut hists[i].1);
        h.hint = if reset {
            CounterResetHint::CounterReset
        } else {
            CounterResetHint::NotCounterReset
        };
    }
}

/// Whether `v` is the stale marker.
#[inline]
pub fn is_stale(v: f64) -> bool {
    v.to_bits() == STALE_NAN
}

/// Limits and defaults of one query.
#[derive(Debug, Clone)]
pub struct QueryOptions {
    /// How far back an instant selector looks for a sample (5m).
    pub lookback_ms: i64,
    /// Most samples a query may load or make at once.
    pub max_samples: usize,
    /// Most bytes the samples a query loads or makes may take.
    pub max_bytes: usize,
    /// Memory every running query draws from together, when set: a query
    /// that would take it past its bound is refused as busy (a retry can
    /// succeed once others finish).
    pub shared: Option<Arc<QueryMemory>>,
    /// Longest a query may run.
    pub timeout: Duration,
    /// Bounds on the query's text.
    pub parse: ParseLimits,
    /// Most bytes of label values one `label_replace` or `label_join` call
    /// may make.
    pub max_label_bytes: usize,
    /// `promql-delayed-name-removal`: operations that change what a value
    /// means mark its series, and the names go when the query ends, so
    /// `label_replace` and `by (__name__)` still see them.
    pub delayed_name_removal: bool,
    /// Which Prometheus' answers to give where v3.14 changed what 3.5.3
    /// answers.
    pub compat: Compat,
    /// `use-start-timestamps`: `rate`, `increase`, `irate`, `resets` and
    /// `start_timestamp()` read the start times kept with samples.
    pub use_start_timestamps: bool,
}

/// The Prometheus release whose answers PromQL gives where releases
/// disagree. Prometheus v3.14 changed a few answers 3.5.3 gives (custom
/// buckets with different bounds reconciled, not refused; histogram
/// extrapolation bounded by a zero count; `histogram_fraction` inside the
/// first classic bucket; warnings about conflicting counter resets; two
/// error texts). Everything else is the same under both.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
pub enum Compat {
    /// Prometheus 3.5.3, the long-term-support release.
    #[default]
    #[value(name = "3.5")]
    #[serde(rename = "3.5")]
    V3_5,
    /// Prometheus v3.14.
    #[value(name = "3.14")]
    #[serde(rename = "3.14")]
    V3_14,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self {
            lookback_ms: 5 * 60 * 1000,
            max_samples: 50_000_000,
            max_bytes: usize::MAX,
            shared: None,
            timeout: Duration::from_secs(120),
            parse: ParseLimits::default(),
            max_label_bytes: 64 << 20,
            delayed_name_removal: false,
            compat: Compat::V3_5,
            use_start_timestamps: false,
        }
    }
}

/// Samples of one series, loaded for a selector over the query's window.
#[derive(Debug)]
pub(crate) struct SeriesPoints {
    pub(crate) labels: Labels,
    /// `labels` without `__name__`, made once, when a function that drops
    /// it first asks (see [`SeriesPoints::unnamed`]).
    unnamed: std::cell::OnceCell<Labels>,
    pub(crate) points: Vec<(i64, f64)>,
    /// Native histogram samples, in time order (a series may switch
    /// between floats and histograms; the two never share a timestamp).
    pub(crate) hists: Vec<(i64, Hist)>,
    /// Start-time runs (`use-start-timestamps`), empty when none are kept.
    pub(crate) starts: Vec<crate::storage::selected::StartRun>,
    /// Whether `points` holds a stale marker (range windows skip them).
    has_stale: bool,
    /// Where the last window started and ended: steps move forward, so
    /// the next window is found by a short scan from here.
    lo_hint: Cell<usize>,
    hi_hint: Cell<usize>,
}

impl SeriesPoints {
    /// The labels a function that drops the metric name gives this series
    /// ([`Ctx::unnamed`]), made on first use: a selector read for another
    /// purpose (`sum by (job) (x)`) makes no second label set per series.
    pub(crate) fn unnamed(&self, ctx: &Ctx<'_>) -> &Labels {
        self.unnamed.get_or_init(|| ctx.unnamed(&self.labels))
    }

    /// The newest sample at or before `ts`, float or histogram, with its
    /// time; `None` when there is none or it is a stale marker. `i` is the
    /// index of the first float after `ts` (see [`seek`]).
    fn latest(&self, i: usize, ts: i64) -> Option<(Sample, i64)> {
        let float = i.checked_sub(1).and_then(|k| self.points.get(k));
        let hist = self
            .hists
            .partition_point(|(t, _)| *t <= ts)
            .checked_sub(1)
            .and_then(|k| self.hists.get(k));
        let sample = match (float, hist) {
            (Some(&(ft, v)), Some((ht, _))) if ft >= *ht => {
                (Sample::float(self.labels.clone(), v), ft)
            }
            (Some(&(ft, v)), None) => (Sample::float(self.labels.clone(), v), ft),
            (_, Some((ht, h))) => (Sample::histogram(self.labels.clone(), Arc::clone(h)), *ht),
            (None, None) => return None,
        };
        let stale = match &sample.0.h {
            Some(h) => is_stale(h.sum),
            None => is_stale(sample.0.v),
        };
        (!stale).then_some(sample)
    }

    /// The histograms in `(after, upto]`, stale markers left out.
    pub(crate) fn hist_window(&self, after: i64, upto: i64) -> Vec<(i64, Hist)> {
        let lo = self.hists.partition_point(|(t, _)| *t <= after);
        let hi = self.hists.partition_point(|(t, _)| *t <= upto).max(lo);
        self.hists[lo..hi]
            .iter()
            .filter(|(_, h)| !is_stale(h.sum))
            .cloned()
            .collect()
    }
}

/// The index of the first point after `bound`, scanning forward from
/// `hint` when it is at or before the answer (the common case across
/// increasing steps), else by binary search. Updates `hint`.
#[inline]
fn seek(points: &[(i64, f64)], hint: &Cell<usize>, bound: i64) -> usize {
    let mut i = hint.get().min(points.len());
    if i > 0 && points[i - 1].0 > bound {
        i = points[..i].partition_point(|&(t, _)| t <= bound);
    } else {
        let mut steps = 0;
        while i < points.len() && points[i].0 <= bound {
            i += 1;
            steps += 1;
            if steps == 16 {
                i += points[i..].partition_point(|&(t, _)| t <= bound);
                break;
            }
        }
    }
    hint.set(i);
    i
}

/// One series' answer to a plain selector at a range query's steps.
#[derive(Default)]
struct SelectorRow {
    points: Vec<(i64, f64)>,
    hists: Vec<(i64, Hist)>,
}

impl SelectorRow {
    fn is_empty(&self) -> bool {
        self.points.is_empty() && self.hists.is_empty()
    }

    /// At each step `start + k * step`, the series' newest sample at or
    /// before the selector's time `times[k]` (times that never decrease),
    /// float or histogram, where it lies in `(times[k] - lookback,
    /// times[k]]` and is not a stale marker. Where a float and a histogram
    /// share a time the float is taken, as [`SeriesPoints::latest`] does.
    fn fill(
        &mut self,
        points: &[(i64, f64)],
        hists: &[(i64, Hist)],
        times: &[i64],
        start: i64,
        step: i64,
        lookback: i64,
    ) {
        let (mut i, mut j) = (0, 0);
        for (k, &ts) in times.iter().enumerate() {
            while i < points.len() && points[i].0 <= ts {
                i += 1;
            }
            while j < hists.len() && hists[j].0 <= ts {
                j += 1;
            }
            let float = i.checked_sub(1).and_then(|x| points.get(x));
            let hist = j.checked_sub(1).and_then(|x| hists.get(x));
            let t = start + k as i64 * step;
            let after = ts.saturating_sub(lookback);
            match (float, hist) {
                (Some(&(ft, v)), h) if h.is_none_or(|(ht, _)| ft >= *ht) => {
                    // A float newer than any histogram decides, kept or not.
                    let keep = ft > after && !is_stale(v);
                    self.points.extend(keep.then_some((t, v)));
                }
                (_, Some((ht, h))) if *ht > after && !is_stale(h.sum) => {
                    self.hists.push((t, Arc::clone(h)));
                }
                _ => {}
            }
        }
    }
}

/// Cells of a table worth a helper thread (a few milliseconds of work;
/// handing a part to a kept helper and waiting for it costs microseconds).
pub(crate) const TABLE_CELLS_PER_WORKER: usize = 50_000;

/// Windows each sample lies in from which `max_over_time` and
/// `min_over_time` keep a queue of extremes rather than fold each window
/// (measured: at 10 windows a sample the fold was faster).
const EXTREMES_SLIDE_FROM: i64 = 32;

/// Most samples a selection decodes before charging them to the query
/// (16 bytes each): its limits stop it within this much of them.
const DECODE_BATCH_POINTS: usize = 1 << 20;

/// Most series a selection takes in before charging them (a series costs
/// some bytes beyond its samples).
const DECODE_BATCH_SERIES: usize = 1 << 16;

/// Samples to decode worth a helper thread.
const DECODE_POINTS_PER_WORKER: usize = 50_000;

/// A range function: a series' points in the window, the range and the
/// window's end (ms) to its value there, if any.
pub(crate) type RangeFn<'f> = dyn Fn(&[(i64, f64)], i64, i64) -> Option<f64> + Sync + 'f;

/// A counter function's value over a window whose increase is known: the
/// window's points, the increase ([`crate::promql::stats::counter_increase`]),
/// the range, the window's end (ms), and the last window's extrapolation
/// factor.
pub(crate) type CounterFn<'f> =
    dyn Fn(&[(i64, f64)], f64, i64, i64, &mut FactorMemo) -> Option<f64> + Sync + 'f;

/// What a range function reads of a window beyond its points, which a
/// table of every step works out once per series rather than once per
/// window (each window of a range query overlaps the ones before it).
#[derive(Clone, Copy)]
pub(crate) enum Sliding<'f> {
    /// Nothing: each window is handed to the function.
    No,
    /// A counter's increase over the window, found from the series'
    /// resets indexed once (the same additions as a scan of the window).
    Increase(&'f CounterFn<'f>),
    /// The window's greatest (`true`) or least number, as
    /// `max_over_time` and `min_over_time` fold it, kept as windows move
    /// ([`SlidingExtreme`]): the function itself is not called.
    Extreme(bool),
    /// The window's mean, as `avg_over_time` takes it: four windows at a
    /// time ([`means_of_4`]), the function called for those left over.
    Mean,
}

/// A selector's series with their chunks, not yet decoded.
struct Selection {
    series: Vec<SelectedSeries>,
    /// The time span read ([`SelectedSeries::decode_into`]'s bounds).
    lo: i64,
    hi: i64,
    /// The bytes its chunks hold, charged to the query while it lives.
    bytes: usize,
}

/// Where a table's rows' points come from (see [`Ctx::table_source`]).
enum Source {
    /// Points decoded before, for another reader.
    Loaded(Rc<Vec<SeriesPoints>>),
    /// A selection (labels taken into the table), decoded row by row,
    /// with the samples charged for the rows its workers hold at once.
    Selected(Selection, usize),
}

impl Source {
    /// What the table's workers read.
    fn rows(&self) -> Rows<'_> {
        match self {
            Self::Loaded(series) => Rows::Loaded(
                series
                    .iter()
                    .map(|s| (s.points.as_slice(), s.has_stale))
                    .collect(),
            ),
            Self::Selected(selection, _) => Rows::Selected(selection),
        }
    }
}

/// A table's rows' points, as its workers read them.
enum Rows<'a> {
    /// Each row's points, and whether they hold a stale marker.
    Loaded(Vec<(&'a [(i64, f64)], bool)>),
    Selected(&'a Selection),
}

impl Rows<'_> {
    /// About how many points a row holds (the chunks' sample counts in
    /// the span read, for a selection): what filling a row costs beyond
    /// its cells, for cutting rows among workers.
    fn points_per_row(&self) -> usize {
        let (points, rows) = match self {
            Rows::Loaded(rows) => (rows.iter().map(|(p, _)| p.len()).sum::<usize>(), rows.len()),
            Rows::Selected(s) => (
                s.series
                    .iter()
                    .map(|r| r.samples_at_most(s.lo, s.hi))
                    .sum::<usize>(),
                s.series.len(),
            ),
        };
        points / rows.max(1)
    }

    /// Row `i`'s points, stale markers kept: in place, or decoded into
    /// `buf`.
    fn with_stale<'b>(&'b self, i: usize, buf: &'b mut Vec<(i64, f64)>) -> &'b [(i64, f64)] {
        match self {
            Rows::Loaded(rows) => rows[i].0,
            Rows::Selected(selection) => {
                buf.clear();
                selection.series[i].decode_into(selection.lo, selection.hi, buf);
                buf.as_slice()
            }
        }
    }

    /// Row `i`'s points without stale markers (what range functions'
    /// windows hold), as [`Rows::with_stale`], and whether they are in
    /// time order (a damaged chunk can hold them out of it, within its
    /// claimed span).
    fn without_stale<'b>(
        &'b self,
        i: usize,
        buf: &'b mut Vec<(i64, f64)>,
    ) -> (&'b [(i64, f64)], bool) {
        // Both are looked for in one pass without a branch per point;
        // stale markers are rare, and only then taken out (which keeps
        // the order).
        let scan = |points: &[(i64, f64)]| {
            let (stale, ordered, _) = points.iter().fold(
                (false, true, i64::MIN),
                |(stale, ordered, prev), &(t, v)| (stale | is_stale(v), ordered & (prev <= t), t),
            );
            (stale, ordered)
        };
        match self {
            Rows::Loaded(rows) => {
                let (points, has_stale) = rows[i];
                let (_, ordered) = scan(points);
                if !has_stale {
                    return (points, ordered);
                }
                buf.clear();
                buf.extend(points.iter().copied().filter(|&(_, v)| !is_stale(v)));
                (buf.as_slice(), ordered)
            }
            Rows::Selected(selection) => {
                buf.clear();
                selection.series[i].decode_into(selection.lo, selection.hi, buf);
                let (stale, ordered) = scan(buf);
                if stale {
                    buf.retain(|&(_, v)| !is_stale(v));
                }
                (buf.as_slice(), ordered)
            }
        }
    }
}

/// The first position at or after `from` (and at most `end`) whose
/// point lies after `t`, for a window's end moving forward over
/// `points[..end]`. At a regular interval each step moves an end as far
/// as the last did: that guess, when it is two points or more and the
/// points are in time order (`ordered`: then the point before it
/// answers for all those before), is checked first (two comparisons
/// that come out the same way step after step), and the points are
/// walked one by one only when it misses, with `stride` left at the
/// distance found.
#[inline(always)]
fn advance_past(
    points: &[(i64, f64)],
    from: usize,
    end: usize,
    t: i64,
    ordered: bool,
    stride: &mut usize,
) -> usize {
    // A stride of one is the walk's own first comparisons.
    let guess = from + *stride;
    if ordered
        && *stride > 1
        && guess <= end
        && points[guess - 1].0 <= t
        && (guess == end || points[guess].0 > t)
    {
        return guess;
    }
    let mut at = from;
    while at < end && points[at].0 <= t {
        at += 1;
    }
    *stride = at - from;
    at
}

/// A table worker's buffers, kept from row to row.
#[derive(Default)]
struct RowScratch {
    /// A row's points, when they are not read in place.
    points: Vec<(i64, f64)>,
    /// Where its counter resets are ([`counter_resets`]).
    resets: Vec<usize>,
    /// Its windows' extremes ([`Sliding::Extreme`]).
    extreme: SlidingExtreme,
    /// The last window's extrapolation factor ([`Sliding::Increase`]).
    factors: FactorMemo,
}

/// A range function's results for every series at every step.
pub(crate) struct RangeTable {
    labels: Vec<Labels>,
    /// Whether the function dropped the series' names (see
    /// [`Sample::drop_name`]).
    drop_name: bool,
    /// Steps (columns).
    steps: usize,
    /// The leading steps whose cells the table holds: all of them, or
    /// only the first where its rows were folded into an aggregation as
    /// they were filled ([`RowFold`]).
    held: usize,
    /// Series-major, so that a series' row is filled in one sweep of its
    /// points (and rows by different workers): series `i` at step `k` is
    /// `i * held + k`.
    values: Vec<f64>,
    present: Vec<bool>,
    /// Rows whose label sets are equal (series that differ only by the
    /// name a function drops), in groups: a step where two rows of a group
    /// are present breaks the rule that a vector has unique label sets.
    same_labels: Vec<Vec<usize>>,
}

impl RangeTable {
    /// Notes the rows with equal label sets, once the rows are in.
    /// Rows keeping their names are distinct series' own label sets (a
    /// selection holds each series once), so only a table whose rows lost
    /// their names is looked through.
    fn find_same_labels(&mut self) {
        self.same_labels.clear();
        if !self.drop_name {
            return;
        }
        let mut first: hashbrown::HashMap<&Labels, usize> =
            hashbrown::HashMap::with_capacity(self.labels.len());
        let mut same: hashbrown::HashMap<usize, Vec<usize>> = hashbrown::HashMap::new();
        for (i, l) in self.labels.iter().enumerate() {
            match first.entry(l) {
                hashbrown::hash_map::Entry::Occupied(e) => {
                    let j = *e.get();
                    same.entry(j).or_insert_with(|| vec![j]).push(i);
                }
                hashbrown::hash_map::Entry::Vacant(e) => {
                    e.insert(i);
                }
            }
        }
        self.same_labels = same.into_values().collect();
    }

    /// The check every vector passes ([`check_unique`]), for step `k` read
    /// in place: the same error where two rows with equal labels are both
    /// present.
    pub(crate) fn check_unique(&self, k: usize) -> Result<(), QueryError> {
        let held = self.held;
        for rows in &self.same_labels {
            let here = rows
                .iter()
                .filter(|&&i| k < held && self.present.get(i * held + k).copied().unwrap_or(false))
                .count();
            if here > 1 {
                return Err(duplicate_labelset());
            }
        }
        Ok(())
    }

    /// Whether its rows' names are to be dropped ([`Sample::drop_name`]).
    pub(crate) fn drop_name(&self) -> bool {
        self.drop_name
    }

    /// Series (rows) in the table.
    pub(crate) fn rows(&self) -> usize {
        self.labels.len()
    }

    /// Steps (columns) in the table.
    pub(crate) fn steps(&self) -> usize {
        self.steps
    }

    /// Whether the table holds its cells at step `k` (a folded table holds
    /// only its first step's).
    pub(crate) fn has_step(&self, k: usize) -> bool {
        k < self.held
    }

    /// Makes room for the cells of the first `held` steps, none present.
    fn hold(&mut self, held: usize) {
        let cells = self.labels.len().saturating_mul(held);
        self.held = held;
        self.values = vec![0.0; cells];
        self.present = vec![false; cells];
    }

    /// The labels of row `row`.
    pub(crate) fn labels(&self, row: usize) -> &Labels {
        &self.labels[row]
    }

    /// The results at step `k` in place: (row, labels, value), in the
    /// order of [`RangeTable::vector`], without cloning a label set.
    pub(crate) fn at_step(&self, k: usize) -> impl Iterator<Item = (usize, &Labels, f64)> + '_ {
        let held = self.held;
        let k = if k < held { k } else { usize::MAX };
        self.labels
            .iter()
            .enumerate()
            .filter(move |(i, _)| k != usize::MAX && self.present[i * held + k])
            .map(move |(i, labels)| (i, labels, self.values[i * held + k]))
    }

    /// Row `row`'s results at steps `ks` (within those held), as (index in
    /// `ks`, value), read in one sweep.
    pub(crate) fn row_at(
        &self,
        row: usize,
        ks: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (usize, f64)> + '_ {
        let ks = ks.start.min(self.held)..ks.end.min(self.held);
        let at = row * self.held + ks.start..row * self.held + ks.end;
        self.values[at.clone()]
            .iter()
            .zip(&self.present[at])
            .enumerate()
            .filter(|(_, (_, &here))| here)
            .map(|(j, (&v, _))| (j, v))
    }

    /// The results at step `k`.
    pub(crate) fn vector(&self, k: usize) -> Vec<Sample> {
        self.at_step(k)
            .map(|(_, labels, v)| Sample {
                labels: Arc::clone(labels),
                v,
                h: None,
                drop_name: self.drop_name,
            })
            .collect()
    }
}

/// An aggregation that takes a range table's rows as they are filled
/// instead of reading a whole table (registered by [`Ctx::fold_into`]):
/// its results at every step are made in one sweep over blocks of rows,
/// in row order, and no table of every series at every step is held.
pub(crate) trait RowFold {
    /// Told the table's rows (their labels) and steps before any is
    /// filled: the bytes its state will hold, or `None` to decline (the
    /// table is then filled whole).
    fn start(&mut self, labels: &[Labels], steps: usize) -> Option<usize>;
    /// Folds rows `rows`, in order: their cells are `values`/`present`,
    /// `steps` per row.
    fn fold(
        &mut self,
        rows: std::ops::Range<usize>,
        values: &[f64],
        present: &[bool],
        steps: usize,
    );
    /// Hands the results over once the table (at address `table`, whose
    /// rows drop their names where `drop_name`) is kept.
    fn finish(self: Box<Self>, ctx: &Ctx<'_>, table: usize, drop_name: bool);
}

/// Cells of a block of rows filled before they are folded ([`RowFold`]):
/// a couple of MiB, so that the block is folded from the caches.
const FOLD_BLOCK_CELLS: usize = 1 << 18;

/// Parts per thread that a table's rows are cut into, taken in turn.
const ROW_PARTS_PER_THREAD: usize = 8;

/// Evaluates the operator nodes (calls, aggregations, binary
/// expressions): the engine hands its dispatcher to the evaluator, so the
/// evaluator's core knows no operator and the operators know only it.
pub(crate) type Operators = for<'a, 'e> fn(&'a Ctx<'e>, &'a Expr, i64) -> Result<Value, QueryError>;

/// State of one query's evaluation.
pub(crate) struct Ctx<'e> {
    querier: Querier<'e>,
    operators: Operators,
    pub(crate) opts: &'e QueryOptions,
    /// First and last evaluation time, and the step (ms).
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The first time it evaluates at: `start`, or a subquery's first
    /// step after its range begins (`start` is aligned below it).
    first_eval: i64,
    /// What `@ start()` and `@ end()` stand for: the query's own start and
    /// end, in subqueries too.
    at_start: i64,
    at_end: i64,
    deadline: Instant,
    cancel: Option<&'e AtomicBool>,
    loaded: RefCell<HashMap<usize, Rc<Vec<SeriesPoints>>>>,
    /// Selections made and not yet decoded, by selector address.
    selections: RefCell<HashMap<usize, Selection>>,
    /// Selectors (by address) known to hold no histogram in their span,
    /// their selection decoded into a table rather than loaded.
    floats_only: RefCell<HashSet<usize>>,
    /// Selectors (by address) whose histograms are read for their count
    /// and sum only, below `histogram_count`, `histogram_sum` or
    /// `histogram_avg` (v3.14): their reset hints are decided on reading.
    stats_only: HashSet<usize>,
    /// One evaluator per subquery node, spanning every time it is asked at.
    children: RefCell<HashMap<usize, Rc<Ctx<'e>>>>,
    /// Each aggregation node's grouping memo, by the node's address.
    pub(crate) group_memos: RefCell<HashMap<usize, GroupMemo>>,
    /// Each binary operation's matching memo, by the node's address.
    pub(crate) binary_memos: RefCell<HashMap<usize, super::group::MatchMemo>>,
    /// The step between evaluation times (0: one time only).
    step: i64,
    /// Range-function results over every step, by the call's address.
    range_tables: RefCell<HashMap<usize, Rc<RangeTable>>>,
    /// Selectors found unable to make a table ([`Ctx::selector_table`]).
    untabled: RefCell<std::collections::HashSet<usize>>,
    /// Aggregations waiting for a table's rows, by the address of the
    /// node the table is made for ([`Ctx::fold_into`]).
    folds: RefCell<HashMap<usize, Box<dyn RowFold>>>,
    budget: Rc<Budget>,
    /// What the evaluation reports beside its answer, shared with the
    /// subquery evaluators.
    annotations: Rc<RefCell<Annotations>>,
    /// The nodes (by address) whose once-per-query checks have run.
    checked: RefCell<std::collections::HashSet<usize>>,
    /// Each operator node's duplicate-labels check, by the node's address.
    unique: RefCell<HashMap<usize, UniqueCheck>>,
    /// Where in the query the node being evaluated starts: the expression
    /// its annotations name, and the parameter that quantile and ratio
    /// warnings name (see [`Ctx::at_pos`]).
    pos: Cell<(Pos, Pos)>,
}

/// Puts back the position [`Ctx::at_pos`] replaced when dropped.
pub(crate) struct PosGuard<'c> {
    cell: &'c Cell<(Pos, Pos)>,
    before: (Pos, Pos),
}

impl Drop for PosGuard<'_> {
    fn drop(&mut self) {
        self.cell.set(self.before);
    }
}

/// Bytes a float point takes where a query keeps it.
pub(crate) const POINT_BYTES: usize = std::mem::size_of::<(i64, f64)>();

/// Bytes a histogram point takes where a query keeps it: the point, the
/// shared histogram and a typical dozen buckets.
pub(crate) const HISTOGRAM_BYTES: usize = 256;

/// Bytes a range table keeps per series and step (a value and a flag).
const RANGE_CELL_BYTES: usize = 9;

/// The memory all running queries hold together, against one bound, so
/// that many queries at once cannot hold many times one query's budget.
#[derive(Debug)]
pub struct QueryMemory {
    used: Arc<std::sync::atomic::AtomicUsize>,
    max: usize,
}

impl QueryMemory {
    /// A pool of `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            used: Arc::default(),
            max,
        }
    }

    /// A read budget of `max` bytes that counts what it copies in this
    /// pool as it reads.
    fn read_budget(&self, max: usize) -> ReadBudget {
        ReadBudget::pooled(max, Arc::clone(&self.used), self.max)
    }

    /// Bytes the running queries hold now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes `bytes`, or nothing when that would pass the bound.
    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&u| u <= self.max)
            })
            .is_ok()
    }

    fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// What one query holds of the samples it loads and makes, against its
/// limits (`max_samples`, `max_bytes`, and the pool every query shares):
/// charged before the samples are kept, so a query stops near its bound
/// rather than after building past it. Shared by a query's subquery
/// evaluators; what it holds goes back to the pool when it is dropped.
#[derive(Debug)]
pub(crate) struct Budget {
    samples: Cell<usize>,
    bytes: Cell<usize>,
    max_samples: usize,
    max_bytes: usize,
    peak_bytes: Cell<usize>,
    shared: Option<Arc<QueryMemory>>,
}

impl Budget {
    fn new(opts: &QueryOptions) -> Self {
        Self {
            samples: Cell::new(0),
            bytes: Cell::new(0),
            max_samples: opts.max_samples,
            max_bytes: opts.max_bytes,
            peak_bytes: Cell::new(0),
            shared: opts.shared.clone(),
        }
    }

    /// Counts `samples` taking `bytes` more, or refuses (counting nothing)
    /// when that would pass a limit.
    pub(crate) fn charge(
        &self,
        samples: usize,
        bytes: usize,
        what: &'static str,
    ) -> Result<(), QueryError> {
        let s = self.samples.get().saturating_add(samples);
        if s > self.max_samples {
            return Err(QueryError::TooManySamples(what));
        }
        let b = self.bytes.get().saturating_add(bytes);
        if b > self.max_bytes {
            return Err(QueryError::TooMuchMemory(what, self.max_bytes));
        }
        if let Some(pool) = &self.shared {
            if !pool.take(bytes) {
                return Err(QueryError::Busy(pool.max()));
            }
        }
        self.samples.set(s);
        self.bytes.set(b);
        self.peak_bytes.set(self.peak_bytes.get().max(b));
        Ok(())
    }

    /// Whether `samples` taking `bytes` more stay within this query's own
    /// limits (the pool shared with other queries is not asked).
    pub(crate) fn fits(&self, samples: usize, bytes: usize) -> bool {
        self.samples.get().saturating_add(samples) <= self.max_samples
            && self.bytes.get().saturating_add(bytes) <= self.max_bytes
    }

    /// Bytes that may still be charged before this query's own bound.
    pub(crate) fn bytes_left(&self) -> usize {
        self.max_bytes.saturating_sub(self.bytes.get())
    }

    /// Gives back what was charged and is no longer held.
    pub(crate) fn release(&self, samples: usize, bytes: usize) {
        let bytes = bytes.min(self.bytes.get());
        self.samples.set(self.samples.get().saturating_sub(samples));
        self.bytes.set(self.bytes.get() - bytes);
        if let Some(pool) = &self.shared {
            pool.give(bytes);
        }
    }

    /// The most bytes counted at once.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.peak_bytes.get()
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        if let Some(pool) = &self.shared {
            pool.give(self.bytes.get());
        }
    }
}

/// Charges made for something held only while it is built and handed on;
/// given back when dropped.
struct Held<'b> {
    budget: &'b Budget,
    samples: Cell<usize>,
    bytes: Cell<usize>,
}

impl<'b> Held<'b> {
    fn new(budget: &'b Budget) -> Self {
        Self {
            budget,
            samples: Cell::new(0),
            bytes: Cell::new(0),
        }
    }

    /// Takes over `bytes` already charged, to give them back when dropped.
    fn adopt(&self, bytes: usize) {
        self.bytes.set(self.bytes.get() + bytes);
    }

    fn charge(&self, samples: usize, bytes: usize, what: &'static str) -> Result<(), QueryError> {
        self.budget.charge(samples, bytes, what)?;
        self.samples.set(self.samples.get() + samples);
        self.bytes.set(self.bytes.get() + bytes);
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.release(self.samples.get(), self.bytes.get());
    }
}

/// Gathers points per label set across steps.
#[derive(Default)]
pub(crate) struct MatrixBuilder {
    series: Vec<Series>,
    by_content: hashbrown::HashMap<Labels, usize>,
    /// Label sets seen, by the address of their shared allocation. Every
    /// address here belongs to an `Arc` held in `keep`, so it is never reused.
    by_addr: hashbrown::HashMap<usize, usize>,
    keep: Vec<Labels>,
}

impl MatrixBuilder {
    pub(crate) fn push(&mut self, labels: Labels, t: i64, v: f64) {
        let i = self.series_of(labels);
        self.series[i].points.push((t, v));
    }

    /// Adds a sample, float or histogram. A series is marked to lose its
    /// name as its first sample is, as Prometheus' `rangeEval` marks it.
    pub(crate) fn push_sample(&mut self, s: Sample, t: i64) {
        let known = self.series.len();
        let i = self.series_of(s.labels);
        if i == known {
            self.series[i].drop_name = s.drop_name;
        }
        match s.h {
            Some(h) => self.series[i].histograms.push((t, h)),
            None => self.series[i].points.push((t, s.v)),
        }
    }

    fn series_of(&mut self, labels: Labels) -> usize {
        let addr = Arc::as_ptr(&labels) as *const Label as usize;
        let i = match self.by_addr.get(&addr) {
            Some(&i) => i,
            None => {
                let series = &mut self.series;
                let known = series.len();
                let i = *self
                    .by_content
                    .entry(Arc::clone(&labels))
                    .or_insert_with(|| {
                        series.push(Series::floats(Arc::clone(&labels), Vec::new()));
                        series.len() - 1
                    });
                // Remember the address of a set made once (a selector's),
                // but not of every copy made anew at each step: those would
                // hold memory per point.
                if i == known || self.keep.len() < 2 * self.series.len() + 64 {
                    self.by_addr.insert(addr, i);
                    self.keep.push(labels);
                }
                i
            }
        };
        i
    }

    pub(crate) fn finish(mut self) -> Vec<Series> {
        self.series.sort_by(|a, b| a.labels.cmp(&b.labels));
        self.series
    }
}

/// Checks, step after step, that one node's output holds no two elements
/// with the same labels. A node hands out the same shared label sets at
/// every step, so each set's content is hashed once and later steps only
/// look up addresses; sets made anew at each step (`label_replace`) are
/// resolved by content.
#[derive(Default)]
pub(crate) struct UniqueCheck {
    /// The address of a label set seen → the id of its content.
    by_addr: hashbrown::HashMap<usize, u32>,
    /// Content → id.
    by_content: hashbrown::HashMap<Labels, u32>,
    /// The sets whose addresses are in `by_addr`, kept alive so that no
    /// address is reused for other content while it is in the map.
    keep: Vec<Labels>,
    /// The ids seen at the current step.
    step: hashbrown::HashSet<u32>,
}

impl UniqueCheck {
    /// Errors when two elements of `v` have the same labels.
    pub(crate) fn check(&mut self, v: &[Sample]) -> Result<(), QueryError> {
        if v.len() < 2 {
            return Ok(());
        }
        // Sets made anew each step would pile up: start over past a bound
        // proportional to the output.
        if self.keep.len() > (4 * v.len()).max(1 << 16) {
            *self = Self::default();
        }
        self.step.clear();
        for s in v {
            let addr = Arc::as_ptr(&s.labels) as *const Label as usize;
            let id = match self.by_addr.get(&addr) {
                Some(&id) => id,
                None => {
                    let next = u32::try_from(self.by_content.len()).unwrap_or(u32::MAX);
                    let id = *self.by_content.entry(Arc::clone(&s.labels)).or_insert(next);
                    self.by_addr.insert(addr, id);
                    self.keep.push(Arc::clone(&s.labels));
                    id
                }
            };
            if !self.step.insert(id) {
                return Err(duplicate_labelset());
            }
        }
        Ok(())
    }
}

fn duplicate_labelset() -> QueryError {
    QueryError::Execution("vector cannot contain metrics with the same labelset".to_owned())
}

/// A vector may not hold two elements with the same labels.
pub(crate) fn check_unique(v: &[Sample]) -> Result<(), QueryError> {
    if v.len() < 2 {
        return Ok(());
    }
    // foldhash (hashbrown's default): the labels' strings are hashed
    // several times faster than by SipHash.
    let mut seen = hashbrown::HashSet::with_capacity(v.len());
    for s in v {
        if !seen.insert(&s.labels) {
            return Err(duplicate_labelset());
        }
    }
    Ok(())
}

fn offset_ms(o: &Option<Offset>) -> i64 {
    match o {
        Some(Offset::Pos(d)) => ms(d),
        Some(Offset::Neg(d)) => -ms(d),
        None => 0,
    }
}

impl<'e> Ctx<'e> {
    /// The evaluator of one query over `head`, at `start..=end` every
    /// `step` ms (one time if `step` is 0), until `deadline` or `cancel`.
    pub(crate) fn new(
        querier: Querier<'e>,
        opts: &'e QueryOptions,
        operators: Operators,
        (start, end, step): (i64, i64, i64),
        deadline: Instant,
        cancel: Option<&'e AtomicBool>,
    ) -> Self {
        Ctx {
            querier,
            operators,
            opts,
            start,
            end,
            first_eval: start,
            at_start: start,
            at_end: end,
            deadline,
            cancel,
            loaded: RefCell::new(HashMap::new()),
            selections: RefCell::default(),
            floats_only: RefCell::default(),
            stats_only: HashSet::new(),
            children: RefCell::new(HashMap::new()),
            group_memos: RefCell::new(HashMap::new()),
            binary_memos: RefCell::default(),
            step,
            range_tables: RefCell::new(HashMap::new()),
            untabled: RefCell::default(),
            folds: RefCell::default(),
            budget: Rc::new(Budget::new(opts)),
            annotations: Rc::default(),
            checked: RefCell::default(),
            unique: RefCell::default(),
            pos: Cell::default(),
        }
    }

    /// Reads the histograms of selectors below `histogram_count`,
    /// `histogram_sum` or `histogram_avg` as Prometheus v3.14's
    /// statistics-only iterator does: a sample whose chunk leaves open
    /// whether it follows a reset is marked as a reset or not against the
    /// sample read before it. The hints then show in the conflicting
    /// counter reset warnings of `sum`, `avg`, `sum_over_time`,
    /// `avg_over_time`, `+` and `-`.
    pub(crate) fn read_stats_only(&mut self, expr: &Expr) {
        if self.opts.compat >= Compat::V3_14 {
            stats_only_selectors(expr, false, &mut self.stats_only);
        }
    }

    pub(crate) fn check_deadline(&self, what: &'static str) -> Result<(), QueryError> {
        let canceled = self.cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        if canceled || Instant::now() > self.deadline {
            return Err(QueryError::Timeout(what));
        }
        Ok(())
    }

    /// The time a selector reads at when the query evaluates at `t`.
    pub(crate) fn selector_time(
        &self,
        at: &Option<AtModifier>,
        offset: &Option<Offset>,
        t: i64,
    ) -> i64 {
        let base = match at {
            None => t,
            Some(AtModifier::Start) => self.at_start,
            Some(AtModifier::End) => self.at_end,
            Some(AtModifier::At(st)) => match st.duration_since(UNIX_EPOCH) {
                Ok(d) => ms(&d),
                Err(e) => -ms(&e.duration()),
            },
        };
        base.saturating_sub(offset_ms(offset))
    }

    /// The series of a selector, loaded once per query over every window
    /// the query can ask of it (`range` back from each selector time).
    fn load(&self, vs: &VectorSelector, range: i64) -> Result<Rc<Vec<SeriesPoints>>, QueryError> {
        self.load_keeping(vs, range, false)
    }

    /// [`Ctx::load`]; with `last_only`, each series keeps only its newest
    /// float and histogram at or before the selector's time, all that an
    /// instant vector selector evaluated once reads (no window of points
    /// is gathered per series).
    fn load_keeping(
        &self,
        vs: &VectorSelector,
        range: i64,
        last_only: bool,
    ) -> Result<Rc<Vec<SeriesPoints>>, QueryError> {
        let key = vs as *const VectorSelector as usize;
        if let Some(l) = self.loaded.borrow().get(&key) {
            return Ok(Rc::clone(l));
        }
        let selection = self.take_selection(vs, range, last_only)?;
        self.decode_selection(key, selection, last_only)
    }

    /// Calls `f` with the series `vs` (read over `range` before each
    /// step) selects, with their chunks, not decoded: made once and kept
    /// until the selector is loaded ([`Ctx::load`]) or its table made, so
    /// that what needs only labels or histograms decodes nothing.
    fn with_selection<R>(
        &self,
        vs: &VectorSelector,
        range: i64,
        f: impl FnOnce(&Selection) -> R,
    ) -> Result<R, QueryError> {
        let key = vs as *const VectorSelector as usize;
        if !self.selections.borrow().contains_key(&key) {
            let selection = self.select_now(vs, range, false)?;
            self.selections.borrow_mut().insert(key, selection);
        }
        let selections = self.selections.borrow();
        match selections.get(&key) {
            Some(selection) => Ok(f(selection)),
            None => Err(QueryError::Execution("a selection went missing".to_owned())),
        }
    }

    /// The selection [`Ctx::with_selection`] keeps for `vs`, taken out of
    /// the cache, or made now.
    fn take_selection(
        &self,
        vs: &VectorSelector,
        range: i64,
        last_only: bool,
    ) -> Result<Selection, QueryError> {
        let key = vs as *const VectorSelector as usize;
        let kept = self.selections.borrow_mut().remove(&key);
        match kept {
            Some(selection) => Ok(selection),
            None => self.select_now(vs, range, last_only),
        }
    }

    /// Selects `vs`'s series over `range` before each step; their chunks'
    /// bytes stay charged to the query while the selection lives.
    fn select_now(
        &self,
        vs: &VectorSelector,
        range: i64,
        last_only: bool,
    ) -> Result<Selection, QueryError> {
        let lo = self
            .selector_time(&vs.at, &vs.offset, self.start)
            .saturating_sub(range);
        let hi = self.selector_time(&vs.at, &vs.offset, self.end);
        let lo = lo.min(hi.saturating_sub(range));
        // A smoothed selector reads up to a lookback past its time, for
        // the sample after it.
        let hi = if vs.smoothed {
            hi.saturating_add(self.opts.lookback_ms)
        } else {
            hi
        };
        let sets = selector_matchers(vs).map_err(QueryError::BadData)?;
        let mut selected = Vec::new();
        // The chunk bytes read from blocks (mapped, not copied) count
        // against the query's bytes as they are read, and stay counted
        // while they are decoded: a bound on what one query reads. They
        // count in the pool as they are read, so that queries reading at
        // once cannot each read the whole pool.
        let read = match &self.opts.shared {
            Some(pool) => pool.read_budget(self.budget.bytes_left()),
            None => ReadBudget::new(self.budget.bytes_left()),
        };
        let give_back = |read: &ReadBudget| {
            if let Some(pool) = &self.opts.shared {
                pool.give(read.used());
            }
        };
        let stop = Stop {
            deadline: Some(self.deadline),
            flag: self.cancel,
            bytes: Some(&read),
        };
        for matchers in &sets {
            selected.extend(
                if last_only {
                    self.querier.select_newest_until(matchers, lo, hi, &stop)
                } else {
                    self.querier.select_until(matchers, lo, hi, &stop)
                }
                .map_err(|_| {
                    give_back(&read);
                    match self.opts.shared.as_ref() {
                        _ if !read.exceeded() => QueryError::Timeout("query execution"),
                        Some(pool) if read.pool_exceeded() => QueryError::Busy(pool.max()),
                        _ => QueryError::TooMuchMemory("query execution", self.opts.max_bytes),
                    }
                })?,
            );
        }
        // Counted in the pool while read; now charged to this query, which
        // takes it from the pool again.
        give_back(&read);
        self.budget.charge(0, read.used(), "query execution")?;
        if sets.len() > 1 {
            selected.sort_by(|a, b| a.labels.cmp(&b.labels));
            selected.dedup_by(|a, b| a.labels == b.labels);
        }
        Ok(Selection {
            series: selected,
            lo,
            hi,
            bytes: read.used(),
        })
    }

    /// Decodes `selection` (of the selector at `key`) into its series'
    /// points and keeps them for the rest of the query; its chunks' bytes
    /// are given back once decoded.
    fn decode_selection(
        &self,
        key: usize,
        selection: Selection,
        last_only: bool,
    ) -> Result<Rc<Vec<SeriesPoints>>, QueryError> {
        let chunks = Held::new(&self.budget);
        chunks.adopt(selection.bytes);
        let Selection {
            series: selected,
            lo,
            hi,
            ..
        } = selection;
        let mut out = Vec::with_capacity(selected.len());
        // Decoded in batches of at most DECODE_BATCH_POINTS samples, each
        // spread over the free cores; a batch is charged series by series
        // as it is taken in, so a query past its limits stops within one
        // batch of them. A series' newest sample alone costs the decoding
        // of the chunk holding it.
        let sizes: Vec<usize> = selected
            .iter()
            .map(|s| {
                if last_only {
                    s.last_sample_cost(lo, hi)
                } else {
                    s.samples_at_most(lo, hi)
                }
            })
            .collect();
        let mut series = selected.into_iter();
        let mut taken = 0;
        let mut batch_points: std::vec::IntoIter<Vec<(i64, f64)>> = Vec::new().into_iter();
        for n in 0..sizes.len() {
            if n % 256 == 255 {
                self.check_deadline("query execution")?;
            }
            let Some(s) = series.next() else {
                break;
            };
            if n == taken {
                // The next batch: this series and those after it.
                let mut end = n + 1;
                let mut points = sizes[n];
                while end < sizes.len()
                    && points + sizes[end] <= DECODE_BATCH_POINTS
                    && end - n < DECODE_BATCH_SERIES
                {
                    points += sizes[end];
                    end += 1;
                }
                let rest = series.as_slice();
                let batch: Vec<&SelectedSeries> =
                    std::iter::once(&s).chain(&rest[..end - n - 1]).collect();
                let min_part = (batch.len() * DECODE_POINTS_PER_WORKER)
                    .div_ceil(points.max(1))
                    .max(1);
                batch_points = parallel::parts(batch.len(), min_part, |r| {
                    batch[r.clone()]
                        .iter()
                        .zip(&sizes[n + r.start..])
                        .map(|(s, &size)| {
                            if last_only {
                                s.last_sample(lo, hi).into_iter().collect()
                            } else {
                                // Sized by the chunks' headers: at most
                                // what the range cuts off them too many.
                                let mut points = Vec::with_capacity(size);
                                s.decode_into(lo, hi, &mut points);
                                points
                            }
                        })
                        .collect::<Vec<Vec<(i64, f64)>>>()
                })
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .into_iter();
                taken = end;
            }
            let points = batch_points.next().unwrap_or_default();
            let mut in_window = s.histograms.iter().filter(|(t, _)| (lo..=hi).contains(t));
            let stats_only = self.stats_only.contains(&key);
            let mut hists: Vec<(i64, Hist)> = if last_only && !stats_only {
                in_window
                    .next_back()
                    .map(|(t, h)| (*t, Arc::new(h.to_float())))
                    .into_iter()
                    .collect()
            } else {
                in_window
                    .map(|(t, h)| (*t, Arc::new(h.to_float())))
                    .collect()
            };
            if stats_only {
                decide_reset_hints(&mut hists);
                if last_only {
                    hists.drain(..hists.len().saturating_sub(1));
                }
            }
            self.budget.charge(
                points.len() + hists.len(),
                points.len() * POINT_BYTES + hists.len() * HISTOGRAM_BYTES,
                "query execution",
            )?;
            let labels: Labels = s.labels.into();
            let starts = if self.opts.use_start_timestamps {
                s.starts
            } else {
                Vec::new()
            };
            out.push(SeriesPoints {
                starts,
                unnamed: std::cell::OnceCell::new(),
                labels,
                has_stale: points.iter().any(|&(_, v)| is_stale(v))
                    || hists.iter().any(|(_, h)| is_stale(h.sum)),
                lo_hint: Cell::new(0),
                hi_hint: Cell::new(0),
                points,
                hists,
            });
        }
        let out = Rc::new(out);
        self.loaded.borrow_mut().insert(key, Rc::clone(&out));
        Ok(out)
    }

    /// The series matching `matchers` with their newest sample in
    /// `(t - lookback, t]` (not a stale marker): labels and that sample's
    /// time. Selected afresh on each call (no cache), for `info()`.
    pub(crate) fn latest_matching(
        &self,
        matchers: &[Matcher],
        t: i64,
    ) -> Result<Vec<(Vec<Label>, i64)>, QueryError> {
        let lo = t.saturating_sub(self.opts.lookback_ms).saturating_add(1);
        let stop = Stop {
            deadline: Some(self.deadline),
            flag: self.cancel,
            bytes: None,
        };
        let selected = self
            .querier
            .select_until(matchers, lo, t, &stop)
            .map_err(|_| QueryError::Timeout("query execution"))?;
        let mut out = Vec::new();
        for s in selected {
            // An info series' sample must be a float (Prometheus' error).
            if s.histograms.iter().any(|(ht, _)| (lo..=t).contains(ht)) {
                return Err(QueryError::Execution(
                    "info sample should be float".to_owned(),
                ));
            }
            if let Some((pt, v)) = s.samples(lo, t).last() {
                self.budget.charge(1, POINT_BYTES, "query execution")?;
                if !is_stale(v) {
                    out.push((s.labels, pt));
                }
            }
        }
        Ok(out)
    }

    /// A `smoothed` instant selector at `t` (Prometheus'
    /// `promql-extended-range-selectors`): the sample at its time, or the
    /// line between the samples on either side of it within a lookback,
    /// or the last one before it when none follows; stamped `t`. A window
    /// mixing floats and histograms gives nothing and a warning.
    fn smoothed_selector(
        &self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<(Sample, i64)>, QueryError> {
        let lookback = self.opts.lookback_ms;
        let series = self.load(vs, lookback)?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let (from, upto) = (ts.saturating_sub(lookback), ts.saturating_add(lookback));
        let _pos = self.at_pos(vs.pos, vs.pos);
        let mut out = Vec::new();
        each_window(&series, from, upto, |s, floats, hists| {
            let name = s.labels.iter().find(|l| l.name == "__name__");
            let name = name.map_or("", |l| l.value.as_str());
            if !hists.is_empty() {
                if !floats.is_empty() {
                    self.annotate(Annotation::MixedFloatsHistograms(name));
                    return;
                }
                let i = hists.partition_point(|(pt, _)| *pt < ts);
                let h = match (hists.get(i), i.checked_sub(1).and_then(|k| hists.get(k))) {
                    (Some((pt, h)), _) if *pt == ts => crate::histogram::FloatHistogram::clone(h),
                    (Some((nt, next)), Some((pt, prev))) => {
                        if prev.uses_custom_buckets() != next.uses_custom_buckets() {
                            self.annotate(Annotation::MixedExponentialCustom(name));
                            return;
                        }
                        let counter = prev.hint != CounterResetHint::Gauge
                            || next.hint != CounterResetHint::Gauge;
                        match crate::histogram::FloatHistogram::interpolate(
                            (*pt, prev),
                            (*nt, next),
                            ts,
                            counter,
                        ) {
                            Ok(h) => h,
                            Err(e) => {
                                self.annotate(Annotation::incompatible(e, name));
                                return;
                            }
                        }
                    }
                    (None, Some((_, prev))) => {
                        // Carried forward: the hint said how it followed
                        // the sample before it, which no longer holds.
                        let mut h = crate::histogram::FloatHistogram::clone(prev);
                        h.hint = CounterResetHint::Unknown;
                        h
                    }
                    _ => return,
                };
                out.push((Sample::histogram(Arc::clone(&s.labels), Arc::new(h)), t));
                return;
            }
            let i = floats.partition_point(|&(pt, _)| pt < ts);
            let v = match (floats.get(i), i.checked_sub(1).and_then(|k| floats.get(k))) {
                (Some(&(pt, v)), _) if pt == ts => v,
                (Some(&next), Some(&prev)) => interpolate(prev, next, ts, false),
                (None, Some(&(_, v))) => v,
                _ => return,
            };
            out.push((Sample::float(Arc::clone(&s.labels), v), t));
        });
        Ok(out)
    }

    /// For a range function over an `anchored` or `smoothed` selector at
    /// `t`: each series' floats and histograms in the window widened by a
    /// lookback, `(ts - range - lookback, ts]`, and for `smoothed` up to
    /// `ts + lookback` too, stale markers left out.
    pub(crate) fn extended_windows(
        &self,
        vs: &VectorSelector,
        range: i64,
        t: i64,
        f: impl FnMut(&SeriesPoints, &[(i64, f64)], &[(i64, Hist)]),
    ) -> Result<(), QueryError> {
        let lookback = self.opts.lookback_ms;
        let series = self.load(vs, range.saturating_add(lookback))?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let from = ts.saturating_sub(range).saturating_sub(lookback);
        let upto = if vs.smoothed {
            ts.saturating_add(lookback)
        } else {
            ts
        };
        each_window(&series, from, upto, f);
        Ok(())
    }

    /// `x[range] anchored` (or `smoothed`) as a range vector: each series'
    /// samples inside the range with a point added at each end, the
    /// anchor's value (or the interpolated one) at its start and the last
    /// (or interpolated) at its end (Prometheus' `extendFloats`). Floats
    /// only, as in Prometheus.
    fn extended_matrix(
        &self,
        vs: &VectorSelector,
        range: i64,
        t: i64,
    ) -> Result<Vec<Series>, QueryError> {
        let word = if vs.anchored { "anchored" } else { "smoothed" };
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let (mint, maxt) = (ts.saturating_sub(range), ts);
        let mut out = Vec::new();
        let mut histograms = false;
        self.extended_windows(vs, range, t, |s, f, hists| {
            if !hists.is_empty() {
                histograms = true;
                return;
            }
            let Some(last) = f.len().checked_sub(1) else {
                return;
            };
            let mut first = f[..last].partition_point(|p| p.0 <= mint).saturating_sub(1);
            let last = if vs.smoothed {
                f[..last].partition_point(|p| p.0 < maxt)
            } else {
                last
            };
            if f[last].0 <= mint {
                return;
            }
            let left = if vs.smoothed && f[first].0 < mint {
                interpolate(f[first], f[first + 1], mint, false)
            } else {
                f[first].1
            };
            let right = if vs.smoothed && last > 0 && f[last].0 > maxt {
                interpolate(f[last - 1], f[last], maxt, false)
            } else {
                f[last].1
            };
            if f[first].0 <= mint {
                first += 1;
            }
            let upto = if f[last].0 >= maxt { last } else { last + 1 };
            let mut points = Vec::with_capacity(upto.saturating_sub(first) + 2);
            points.push((mint, left));
            points.extend_from_slice(f.get(first..upto).unwrap_or_default());
            points.push((maxt, right));
            out.push(Series::floats(s.labels.clone(), points));
        })?;
        if histograms {
            return Err(QueryError::Execution(format!(
                "{word} modifier is not supported with histograms"
            )));
        }
        Ok(out)
    }

    /// An instant vector selector at evaluation time `t`.
    fn vector_selector(&self, vs: &VectorSelector, t: i64) -> Result<Vec<Sample>, QueryError> {
        Ok(self
            .vector_selector_timed(vs, t)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// An instant vector selector at `t`, with each sample's own timestamp.
    pub(crate) fn vector_selector_timed(
        &self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<(Sample, i64)>, QueryError> {
        if vs.smoothed {
            return self.smoothed_selector(vs, t);
        }
        self.latest_each(vs, t, |_, pt| pt)
    }

    /// [`Ctx::vector_selector_timed`], with each sample's start time (0
    /// when it has none) instead of its time.
    pub(crate) fn vector_selector_starts(
        &self,
        vs: &VectorSelector,
        t: i64,
    ) -> Result<Vec<(Sample, i64)>, QueryError> {
        self.latest_each(vs, t, |s, pt| {
            crate::storage::selected::start_at(&s.starts, pt)
        })
    }

    /// Each series' newest sample in the selector's lookback at `t`, with
    /// what `f` makes of the series and that sample's time.
    fn latest_each(
        &self,
        vs: &VectorSelector,
        t: i64,
        f: impl Fn(&SeriesPoints, i64) -> i64,
    ) -> Result<Vec<(Sample, i64)>, QueryError> {
        let lookback = self.opts.lookback_ms;
        // Evaluated once (an instant query), a series' newest sample is
        // all the selector reads.
        let once = self.start == self.end;
        let series = self.load_keeping(vs, lookback, once)?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let mut out = Vec::with_capacity(series.len());
        for s in series.iter() {
            let i = seek(&s.points, &s.hi_hint, ts);
            // The window is (ts - lookback, ts]; a stale marker ends the series.
            if let Some((sample, pt)) = s.latest(i, ts) {
                if pt > ts.saturating_sub(lookback) {
                    out.push((sample, f(s, pt)));
                }
            }
        }
        Ok(out)
    }

    /// Whether any series of a range selector was sent start times.
    pub(crate) fn selector_has_starts(
        &self,
        vs: &VectorSelector,
        range: &Duration,
    ) -> Result<bool, QueryError> {
        Ok(self
            .load(vs, ms(range))?
            .iter()
            .any(|s| !s.starts.is_empty()))
    }

    /// A plain selector over a range query's steps, each series' answer
    /// at every step at once. A selection nothing has decoded yet is
    /// decoded series by series (in batches spread over the free cores),
    /// each series' samples dropped once its answer is made: the query
    /// holds its answer, not every sample of the range, as Prometheus
    /// counts it.
    pub(crate) fn selector_range(
        &self,
        vs: &VectorSelector,
        start: i64,
        end: i64,
        step: i64,
    ) -> Result<Vec<Series>, QueryError> {
        let what = "query range evaluation";
        let lookback = self.opts.lookback_ms;
        let steps = usize::try_from((end - start) / step + 1).unwrap_or(0);
        let times: Vec<i64> = (0..steps)
            .map(|k| self.selector_time(&vs.at, &vs.offset, start + k as i64 * step))
            .collect();
        let answer = |points: &[(i64, f64)], hists: &[(i64, Hist)]| {
            let mut row = SelectorRow::default();
            row.fill(points, hists, &times, start, step, lookback);
            row
        };
        let key = vs as *const VectorSelector as usize;
        let decoded = self.loaded.borrow().contains_key(&key)
            || self.stats_only.contains(&key)
            || self.opts.use_start_timestamps;
        let mut out = Vec::new();
        if decoded {
            let series = self.load(vs, lookback)?;
            for (n, s) in series.iter().enumerate() {
                if n % 256 == 255 {
                    self.check_deadline(what)?;
                }
                self.keep_row(&mut out, &s.labels, answer(&s.points, &s.hists))?;
            }
        } else {
            let Selection {
                series: selected,
                lo,
                hi,
                bytes,
            } = self.take_selection(vs, lookback, false)?;
            let chunks = Held::new(&self.budget);
            chunks.adopt(bytes);
            let sizes: Vec<usize> = selected.iter().map(|s| s.samples_at_most(lo, hi)).collect();
            // Each worker holds one series' samples at a time.
            let row_most = sizes.iter().copied().max().unwrap_or(0);
            let workers = parallel::max_threads().min(selected.len());
            let rows_held = row_most.saturating_mul(workers);
            chunks.charge(rows_held, rows_held.saturating_mul(POINT_BYTES), what)?;
            // Batches of at most DECODE_BATCH_POINTS samples read and
            // answer points made, charged series by series once made.
            let mut n = 0;
            while n < selected.len() {
                self.check_deadline(what)?;
                let (mut end, mut points) = (n + 1, sizes[n]);
                while end < selected.len()
                    && points + sizes[end] <= DECODE_BATCH_POINTS
                    && (end - n + 1).saturating_mul(steps) <= DECODE_BATCH_POINTS
                {
                    points += sizes[end];
                    end += 1;
                }
                let batch = &selected[n..end];
                let min_part = (batch.len() * DECODE_POINTS_PER_WORKER)
                    .div_ceil(points.max(1))
                    .max(1);
                let rows = parallel::parts(batch.len(), min_part, |r| {
                    let (mut floats, mut hists) = (Vec::new(), Vec::new());
                    batch[r]
                        .iter()
                        .map(|s| {
                            floats.clear();
                            s.decode_into(lo, hi, &mut floats);
                            hists.clear();
                            hists.extend(
                                s.histograms
                                    .iter()
                                    .filter(|(t, _)| (lo..=hi).contains(t))
                                    .map(|(t, h)| (*t, Arc::new(h.to_float()))),
                            );
                            answer(&floats, &hists)
                        })
                        .collect::<Vec<_>>()
                });
                for (s, row) in batch.iter().zip(rows.into_iter().flatten()) {
                    if !row.is_empty() {
                        self.keep_row(&mut out, &s.labels.as_slice().into(), row)?;
                    }
                }
                n = end;
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(out)
    }

    /// Charges one series' answer to a plain selector over the steps and
    /// keeps it in `out` (nothing for an empty one).
    fn keep_row(
        &self,
        out: &mut Vec<Series>,
        labels: &Labels,
        row: SelectorRow,
    ) -> Result<(), QueryError> {
        if row.is_empty() {
            return Ok(());
        }
        let SelectorRow {
            mut points,
            mut hists,
        } = row;
        points.shrink_to_fit();
        hists.shrink_to_fit();
        self.budget.charge(
            points.len() + hists.len(),
            points.len() * POINT_BYTES + hists.len() * HISTOGRAM_BYTES,
            "query range evaluation",
        )?;
        out.push(Series {
            labels: Arc::clone(labels),
            points,
            histograms: hists,
            drop_name: false,
        });
        Ok(())
    }

    /// A range vector selector at `t`: samples in `(ts - range, ts]`,
    /// stale markers left out.
    pub(crate) fn matrix_selector(
        &self,
        vs: &VectorSelector,
        range: &Duration,
        t: i64,
    ) -> Result<Vec<Series>, QueryError> {
        let range = ms(range);
        if vs.anchored || vs.smoothed {
            return self.extended_matrix(vs, range, t);
        }
        let series = self.load(vs, range)?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let mut out = Vec::new();
        for s in series.iter() {
            let lo = s
                .points
                .partition_point(|&(pt, _)| pt <= ts.saturating_sub(range));
            let hi = s.points.partition_point(|&(pt, _)| pt <= ts);
            let points: Vec<(i64, f64)> = s.points[lo..hi]
                .iter()
                .copied()
                .filter(|&(_, v)| !is_stale(v))
                .collect();
            let histograms = s.hist_window(ts.saturating_sub(range), ts).to_vec();
            if !points.is_empty() || !histograms.is_empty() {
                out.push(Series {
                    labels: s.labels.clone(),
                    points,
                    histograms,
                    drop_name: false,
                });
            }
        }
        Ok(out)
    }

    /// Calls `f` with each series' samples in `(ts - range, ts]` (stale
    /// markers left out), borrowed from the loaded window: no copies.
    pub(crate) fn range_windows(
        &self,
        vs: &VectorSelector,
        range: &Duration,
        t: i64,
        mut f: impl FnMut(&SeriesPoints, &[(i64, f64)]),
    ) -> Result<(), QueryError> {
        let range = ms(range);
        let series = self.load(vs, range)?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        let mut scratch = Vec::new();
        for s in series.iter() {
            let lo = seek(&s.points, &s.lo_hint, ts.saturating_sub(range));
            let hi = seek(&s.points, &s.hi_hint, ts).max(lo);
            let window = &s.points[lo..hi];
            if s.has_stale {
                scratch.clear();
                scratch.extend(window.iter().copied().filter(|&(_, v)| !is_stale(v)));
                if !scratch.is_empty() {
                    f(s, &scratch);
                }
            } else if !window.is_empty() {
                f(s, window);
            }
        }
        Ok(())
    }

    /// Whether any series `vs` selects over the query (with `range` before
    /// its first step) holds a native histogram sample.
    pub(crate) fn has_histograms(
        &self,
        vs: &VectorSelector,
        range: i64,
    ) -> Result<bool, QueryError> {
        let key = vs as *const VectorSelector as usize;
        if let Some(series) = self.loaded.borrow().get(&key) {
            return Ok(series.iter().any(|s| !s.hists.is_empty()));
        }
        if self.floats_only.borrow().contains(&key) {
            return Ok(false);
        }
        // What the selection would decode to: its histograms in the span.
        self.with_selection(vs, range, |selection| {
            let (lo, hi) = (selection.lo, selection.hi);
            selection
                .series
                .iter()
                .any(|s| s.histograms.iter().any(|(t, _)| (lo..=hi).contains(t)))
        })
    }

    /// Like [`Ctx::range_windows`], for functions that read histograms as
    /// well: `f` gets each series' floats and histograms in the window
    /// (stale markers left out), when there is at least one of either.
    pub(crate) fn mixed_windows(
        &self,
        vs: &VectorSelector,
        range: &Duration,
        t: i64,
        f: impl FnMut(&SeriesPoints, &[(i64, f64)], &[(i64, Hist)]),
    ) -> Result<(), QueryError> {
        let range = ms(range);
        let series = self.load(vs, range)?;
        let ts = self.selector_time(&vs.at, &vs.offset, t);
        each_window(&series, ts.saturating_sub(range), ts, f);
        Ok(())
    }

    /// Adds histogram `b` to `a`, or subtracts it, as this query's
    /// Prometheus release does: v3.14 brings custom buckets with different
    /// bounds to the bounds they share and notes it as done `during` an
    /// addition, subtraction or aggregation; 3.5.3 refuses them.
    pub(crate) fn hist_combine(
        &self,
        a: &mut FloatHistogram,
        b: &FloatHistogram,
        sub: bool,
        during: &'static str,
    ) -> Result<(), Incompatible> {
        if self.opts.compat < Compat::V3_14 {
            return if sub { a.sub(b) } else { a.add(b) };
        }
        let reconciled = if sub {
            a.sub_reconciling(b)?
        } else {
            a.add_reconciling(b)?
        };
        if reconciled {
            self.annotate(Annotation::CustomBucketsReconciled(during));
        }
        Ok(())
    }

    /// Whether histogram `cur` starts anew after `prev`, as this query's
    /// Prometheus release decides: for v3.14 a change of custom bounds
    /// alone is no reset.
    pub(crate) fn hist_reset(&self, cur: &FloatHistogram, prev: &FloatHistogram) -> bool {
        if self.opts.compat < Compat::V3_14 {
            cur.detect_reset(prev)
        } else {
            cur.detect_reset_reconciling(prev)
        }
    }

    /// Reports `a` beside the answer.
    pub(crate) fn annotate(&self, a: Annotation<'_>) {
        let (node, param) = self.pos.get();
        let pos = if a.is_about_param() { param } else { node };
        self.annotations.borrow_mut().add(a, pos);
    }

    /// Names `node` (and `param`, for warnings about a quantile or ratio
    /// parameter) as where the annotations made until the guard is dropped
    /// are about, as each Prometheus function and operator names one of
    /// its arguments.
    pub(crate) fn at_pos(&self, node: Pos, param: Pos) -> PosGuard<'_> {
        PosGuard {
            cell: &self.pos,
            before: self.pos.replace((node, param)),
        }
    }

    /// What this query holds against its limits.
    pub(crate) fn budget(&self) -> &Budget {
        &self.budget
    }

    /// `labels` as an operation that changes what the value means leaves
    /// them: without `__name__`, `__type__` and `__unit__`; or, with
    /// delayed name removal (`promql-delayed-name-removal`), unchanged until
    /// the end of the query, the sample marked [`Sample::drop_name`].
    pub(crate) fn unnamed(&self, labels: &Labels) -> Labels {
        if self.opts.delayed_name_removal {
            Arc::clone(labels)
        } else {
            drop_name(labels)
        }
    }

    /// Whether it evaluates at one time only (an instant query, or a
    /// subquery of one step), as Prometheus' evaluator with equal start and
    /// end.
    pub(crate) fn evaluates_once(&self) -> bool {
        self.first_eval >= self.end
    }

    /// What has been reported so far.
    pub(crate) fn annotations(&self) -> Annotations {
        self.annotations.borrow().clone()
    }

    /// Errors when `v`, the output of `node` at one step, holds two
    /// elements with the same labels (see [`UniqueCheck`]).
    pub(crate) fn check_unique_at(&self, node: &Expr, v: &[Sample]) -> Result<(), QueryError> {
        // With delayed name removal, names still tell series apart here;
        // the check runs once they are gone, on the answer.
        if self.opts.delayed_name_removal {
            return Ok(());
        }
        if self.step == 0 {
            return check_unique(v);
        }
        let key = node as *const Expr as usize;
        self.unique.borrow_mut().entry(key).or_default().check(v)
    }

    /// True the first time it is asked for `node` (an AST node's address):
    /// for checks that need to run once per query, not once per step.
    pub(crate) fn first_time(&self, node: usize) -> bool {
        self.checked.borrow_mut().insert(node)
    }

    /// The names of the series `vs[range]` selects over the whole query
    /// that have at least `min_points` samples, each name once.
    pub(crate) fn selected_names(
        &self,
        vs: &VectorSelector,
        range: &Duration,
        min_points: usize,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, QueryError> {
        let key = vs as *const VectorSelector as usize;
        if !self.loaded.borrow().contains_key(&key) {
            // No name wanted among those selected: no sample need be read.
            let any = self.with_selection(vs, ms(range), |selection| {
                selection.series.iter().any(|s| {
                    s.labels
                        .iter()
                        .find(|l| l.name == "__name__")
                        .is_some_and(|n| wanted(&n.value))
                })
            })?;
            if !any {
                return Ok(Vec::new());
            }
        }
        let series = self.load(vs, ms(range))?;
        let mut names: Vec<String> = Vec::new();
        for s in series.iter() {
            if s.points.len() < min_points {
                continue;
            }
            if let Some(n) = s.labels.iter().find(|l| l.name == "__name__") {
                if wanted(&n.value) && !names.iter().any(|x| *x == n.value) {
                    names.push(n.value.to_string());
                }
            }
        }
        Ok(names)
    }

    /// Evaluates `expr` at time `t`.
    pub(crate) fn eval(&self, expr: &Expr, t: i64) -> Result<Value, QueryError> {
        match expr {
            Expr::NumberLiteral(n) => Ok(Value::Scalar(n.val)),
            Expr::StringLiteral(s) => Ok(Value::String(s.val.clone())),
            Expr::Paren(p) => self.eval(&p.expr, t),
            Expr::Unary(u) => Ok(match self.eval(&u.expr, t)? {
                Value::Scalar(v) => Value::Scalar(-v),
                Value::Vector(v) => {
                    let v: Vec<Sample> = v
                        .into_iter()
                        .map(|s| Sample {
                            labels: self.unnamed(&s.labels),
                            drop_name: true,
                            v: -s.v,
                            h: s.h.map(|h| {
                                let mut h = Arc::unwrap_or_clone(h);
                                h.mul(-1.0);
                                Arc::new(h)
                            }),
                        })
                        .collect();
                    self.check_unique_at(expr, &v)?;
                    Value::Vector(v)
                }
                other => {
                    return Err(QueryError::Execution(format!(
                        "unary minus on {}",
                        other.type_name()
                    )))
                }
            }),
            Expr::VectorSelector(vs) => Ok(Value::Vector(self.vector_selector(vs, t)?)),
            Expr::MatrixSelector(m) => Ok(Value::Matrix(self.matrix_selector(&m.vs, &m.range, t)?)),
            Expr::Call(_) | Expr::Aggregate(_) | Expr::Binary(_) => (self.operators)(self, expr, t),
            Expr::Subquery(sq) => Ok(Value::Matrix(self.subquery(sq, t)?)),
        }
    }

    /// A subquery at `t`: the inner expression evaluated at every multiple
    /// of its step inside `(end - range, end]`, where `end` is `t` moved by
    /// the subquery's `offset` and `@`. The step defaults to 1m, Prometheus'
    /// default evaluation interval.
    pub(crate) fn subquery(&self, sq: &SubqueryExpr, t: i64) -> Result<Vec<Series>, QueryError> {
        let step = sq.step.as_ref().map_or(60_000, ms).max(1);
        let range = ms(&sq.range);
        let end = self.selector_time(&sq.at, &sq.offset, t);
        let child = self.child(sq, step, range)?;
        let from = end.saturating_sub(range);
        let mut first = step * (from / step);
        if first <= from {
            first += step;
        }
        let mut acc = MatrixBuilder::default();
        // The result's points count against the query's budget as they are
        // made, before they are kept, and are given back once the result
        // is handed on (its caller holds one at a time).
        let held = Held::new(&self.budget);
        let mut ti = first;
        while ti <= end {
            self.check_deadline("subquery evaluation")?;
            match child.eval(&sq.expr, ti)? {
                Value::Vector(v) => {
                    let hists = v.iter().filter(|s| s.h.is_some()).count();
                    held.charge(
                        v.len(),
                        (v.len() - hists) * POINT_BYTES + hists * HISTOGRAM_BYTES,
                        "subquery evaluation",
                    )?;
                    for mut s in v {
                        // A subquery may skip the sample a reset hint was
                        // about, or return it many times: its histograms'
                        // resets are found by comparing, as floats' are.
                        if let Some(h) = &mut s.h {
                            if matches!(
                                h.hint,
                                CounterResetHint::CounterReset | CounterResetHint::NotCounterReset
                            ) {
                                Arc::make_mut(h).hint = CounterResetHint::Unknown;
                            }
                        }
                        acc.push_sample(s, ti);
                    }
                }
                Value::Scalar(v) => {
                    held.charge(1, POINT_BYTES, "subquery evaluation")?;
                    acc.push(no_labels(), ti, v);
                }
                other => {
                    return Err(QueryError::Execution(format!(
                        "subquery over {}",
                        other.type_name()
                    )));
                }
            }
            ti = match ti.checked_add(step) {
                Some(t) => t,
                None => break,
            };
        }
        Ok(acc.finish())
    }

    /// The index of evaluation time `t` among this evaluator's steps, if
    /// it is one of them. An instant query has one step, its time.
    pub(crate) fn step_of(&self, t: i64) -> Option<usize> {
        if self.step <= 0 {
            return (self.start == self.end && t == self.start).then_some(0);
        }
        if t < self.start || t > self.end || (t - self.start) % self.step != 0 {
            return None;
        }
        Some(((t - self.start) / self.step) as usize)
    }

    /// The range table already made for `call` (see [`Ctx::range_table`])
    /// and the index of `t` among the steps, if both exist.
    pub(crate) fn tabulated(&self, call: &parser::Call, t: i64) -> Option<(Rc<RangeTable>, usize)> {
        let k = self.step_of(t)?;
        let key = call as *const parser::Call as usize;
        let table = self.range_tables.borrow().get(&key).cloned()?;
        Some((table, k))
    }

    /// `f` (a range function) over the series of `vs[range]` at every step
    /// of this evaluator, worked out series by series on the first call and
    /// kept for the others (by `key`, the call's address). A series' points
    /// stay in cache while its window slides over all steps, where stepping
    /// through every series at each step would load them all again. `None`
    /// when the table would exceed the query's memory.
    pub(crate) fn range_table(
        &self,
        key: usize,
        vs: &VectorSelector,
        range: &Duration,
        name: Name,
        f: &RangeFn<'_>,
        sliding: Sliding<'_>,
    ) -> Result<Option<Rc<RangeTable>>, QueryError> {
        if let Some(t) = self.range_tables.borrow().get(&key) {
            return Ok(Some(Rc::clone(t)));
        }
        let range_ms = ms(range);
        let what = "range function evaluation";
        let Some((mut table, source)) = self.table_source(vs, range_ms, name, false, what)? else {
            return Ok(None);
        };
        let rows = source.rows();
        // A queue of extremes costs a mispredicted branch or two per
        // sample; folding a window costs a cycle or two per sample in it:
        // the queue pays where each sample lies in many windows.
        let slide_extremes = self.step > 0 && range_ms / self.step >= EXTREMES_SLIDE_FROM;
        let fold = self.fill_table(
            key,
            vs,
            &mut table,
            rows.points_per_row(),
            what,
            |i, times, values, present, scratch| {
                let RowScratch {
                    points: kept,
                    resets,
                    extreme,
                    factors,
                } = scratch;
                // Windows leave stale markers out: so does the whole row.
                let (points, ordered) = rows.without_stale(i, kept);
                if let Sliding::Increase(_) = sliding {
                    counter_resets(points, resets);
                }
                let mut from = 0;
                // Windows waiting for their mean: (step, lo, hi).
                let mut means = [(0usize, 0usize, 0usize); 4];
                let mut waiting = 0;
                // The window (ts - range, ts]; both ends only move forward,
                // from where the first step's window lies. `range` is a
                // local copy, which the loop keeps in a register.
                let range = range_ms;
                let (mut lo, mut hi) = match times.first() {
                    Some(&t0) => {
                        let hi = points.partition_point(|p| p.0 <= t0);
                        let after = t0.saturating_sub(range);
                        (points.partition_point(|p| p.0 <= after).min(hi), hi)
                    }
                    None => (0, 0),
                };
                extreme.reset(lo);
                // How far each end moved at the last step: at a regular
                // interval, as far again.
                let (mut hi_stride, mut lo_stride) = (0, 0);
                for (k, &ts) in times.iter().enumerate() {
                    hi = advance_past(points, hi, points.len(), ts, ordered, &mut hi_stride);
                    let after = ts.saturating_sub(range);
                    lo = advance_past(points, lo, hi, after, ordered, &mut lo_stride);
                    if lo >= hi {
                        continue;
                    }
                    let window = &points[lo..hi];
                    let v = match sliding {
                        Sliding::Mean => {
                            means[waiting] = (k, lo, hi);
                            waiting += 1;
                            if waiting == 4 {
                                let m = means_of_4(points, means.map(|(_, lo, hi)| (lo, hi)));
                                for (&(k, _, _), v) in means.iter().zip(m) {
                                    values[k] = v;
                                    present[k] = true;
                                }
                                waiting = 0;
                            }
                            continue;
                        }
                        Sliding::No => f(window, range_ms, ts),
                        Sliding::Increase(g) => {
                            let inc = counter_increase_in(points, lo, hi, resets, &mut from);
                            g(window, inc, range_ms, ts, factors)
                        }
                        Sliding::Extreme(max) if slide_extremes => {
                            Some(extreme.window(points, lo, hi, max))
                        }
                        Sliding::Extreme(_) => f(window, range_ms, ts),
                    };
                    if let Some(v) = v {
                        values[k] = v;
                        present[k] = true;
                    }
                }
                for &(k, lo, hi) in &means[..waiting] {
                    if let Some(v) = f(&points[lo..hi], range_ms, times[k]) {
                        values[k] = v;
                        present[k] = true;
                    }
                }
            },
        )?;
        Ok(Some(self.finish_table(key, table, source, fold)))
    }

    /// An empty table for the series `vs` selects over `range` before each
    /// step, their labels in (without their names for [`Name::Drop`]),
    /// and where the rows' points come from: those a reader before decoded
    /// ([`Ctx::load`]), or the selection itself, decoded row by row as the
    /// table is filled, when nothing has decoded it yet and it holds no
    /// histogram. Decoded row by row, the samples held are the rows the
    /// workers hold at once, which is what is charged, with the table's
    /// bytes (as Prometheus counts the samples a range query holds, not
    /// those it has read): a long range of a few steps answers within a
    /// sample limit its samples would pass. `None` without a table: past
    /// the memory left, or, with `floats_only`, a selection holding
    /// histograms.
    fn table_source(
        &self,
        vs: &VectorSelector,
        range: i64,
        name: Name,
        floats_only: bool,
        what: &'static str,
    ) -> Result<Option<(RangeTable, Source)>, QueryError> {
        let key = vs as *const VectorSelector as usize;
        let loaded = self.loaded.borrow().get(&key).cloned();
        let series = match loaded {
            Some(series) => series,
            None => {
                let mut selection = self.take_selection(vs, range, false)?;
                let (lo, hi) = (selection.lo, selection.hi);
                let histograms = selection
                    .series
                    .iter()
                    .any(|s| s.histograms.iter().any(|(t, _)| (lo..=hi).contains(t)));
                // Each worker holds one row's points at a time, at most what
                // the longest series' chunks hold.
                let row_most = selection
                    .series
                    .iter()
                    .map(|s| s.samples_at_most(lo, hi))
                    .max()
                    .unwrap_or(0);
                let workers = parallel::max_threads().min(selection.series.len());
                let rows_held = row_most.saturating_mul(workers);
                let cells = selection.series.len().saturating_mul(self.steps());
                let row_by_row = !histograms
                    && !self.opts.use_start_timestamps
                    && self.budget.fits(
                        rows_held,
                        rows_held
                            .saturating_mul(POINT_BYTES)
                            .saturating_add(cells.saturating_mul(RANGE_CELL_BYTES)),
                    )
                    && self
                        .budget
                        .charge(rows_held, rows_held.saturating_mul(POINT_BYTES), what)
                        .is_ok();
                if !row_by_row {
                    self.decode_selection(key, selection, false)?
                } else {
                    let Some((mut table, _)) =
                        self.empty_table(selection.series.len(), name == Name::Drop, what)
                    else {
                        self.budget
                            .release(rows_held, rows_held.saturating_mul(POINT_BYTES));
                        self.decode_selection(key, selection, false)?;
                        return Ok(None);
                    };
                    self.floats_only.borrow_mut().insert(key);
                    for s in &mut selection.series {
                        let labels: Labels = std::mem::take(&mut s.labels).into();
                        table.labels.push(match name {
                            Name::Keep => labels,
                            Name::Drop => self.unnamed(&labels),
                        });
                    }
                    return Ok(Some((table, Source::Selected(selection, rows_held))));
                }
            }
        };
        if floats_only && series.iter().any(|s| !s.hists.is_empty()) {
            return Ok(None);
        }
        let Some((mut table, _)) = self.empty_table(series.len(), name == Name::Drop, what) else {
            return Ok(None);
        };
        for s in series.iter() {
            table.labels.push(Arc::clone(match name {
                Name::Keep => &s.labels,
                Name::Drop => s.unnamed(self),
            }));
        }
        Ok(Some((table, Source::Loaded(series))))
    }

    /// Keeps a filled table by `key`, and hands an aggregation that
    /// folded its rows its results; a selection decoded row by row gives
    /// back its chunks' bytes and the rows its workers held.
    fn finish_table(
        &self,
        key: usize,
        table: RangeTable,
        source: Source,
        fold: Option<Box<dyn RowFold>>,
    ) -> Rc<RangeTable> {
        if let Source::Selected(selection, rows_held) = source {
            self.budget.release(
                rows_held,
                selection
                    .bytes
                    .saturating_add(rows_held.saturating_mul(POINT_BYTES)),
            );
        }
        let drop_name = table.drop_name;
        let table = self.keep_table(key, table);
        if let Some(fold) = fold {
            fold.finish(self, Rc::as_ptr(&table) as usize, drop_name);
        }
        table
    }

    /// Whether this evaluator is asked for each of its steps once, in
    /// order, from its first: a query's own, not a subquery's (whose
    /// steps start one past its aligned start and are asked again for
    /// each outer step). Only its tables may be folded ([`RowFold`]): a
    /// folded table answers each step once.
    pub(crate) fn steps_asked_once(&self) -> bool {
        self.first_eval == self.start
    }

    /// Has the table made next for the node at `key` (a range function's
    /// call or a plain selector) fold its rows into `fold` as they are
    /// filled, rather than be kept whole; `fold` may decline. Taken back
    /// by [`Ctx::unfold`] if no table is made.
    pub(crate) fn fold_into(&self, key: usize, fold: Box<dyn RowFold>) {
        self.folds.borrow_mut().insert(key, fold);
    }

    /// Forgets a fold [`Ctx::fold_into`] left for `key` that no table took.
    pub(crate) fn unfold(&self, key: usize) {
        self.folds.borrow_mut().remove(&key);
    }

    /// Steps of this evaluator.
    fn steps(&self) -> usize {
        usize::try_from(self.end.saturating_sub(self.start) / self.step.max(1))
            .map_or(usize::MAX, |n| n.saturating_add(1))
    }

    /// Fills `table` (its labels in, one row per series), row by row:
    /// `row(i, times, values, present, scratch)` writes series `i`'s value
    /// at each selector time `times[k]` into `values[k]`, with
    /// `present[k]` set, where it has one; `scratch` is the worker's own.
    /// Where an aggregation asked to fold the table's rows
    /// ([`Ctx::fold_into`]) and takes them (no two rows share a label set,
    /// and its state fits), the rows are filled a block at a time and
    /// folded in row order, and the table keeps only its first step's
    /// cells (what that step's vector reads); the fold is handed back, to
    /// be given its results once the table is kept.
    fn fill_table(
        &self,
        key: usize,
        vs: &VectorSelector,
        table: &mut RangeTable,
        row_points: usize,
        what: &'static str,
        row: impl Fn(usize, &[i64], &mut [f64], &mut [bool], &mut RowScratch) + Sync,
    ) -> Result<Option<Box<dyn RowFold>>, QueryError> {
        let n = table.labels.len();
        let steps = table.steps;
        // A row costs its cells and the points read for them.
        let row_cost = steps.saturating_add(row_points);
        let times: Vec<i64> = (0..steps)
            .map(|k| self.selector_time(&vs.at, &vs.offset, self.start + k as i64 * self.step))
            .collect();
        table.find_same_labels();
        let asked = self.folds.borrow_mut().remove(&key);
        let fold = asked.and_then(|mut fold| {
            if !table.same_labels.is_empty() || n == 0 || steps < 2 {
                return None;
            }
            let bytes = fold.start(&table.labels, steps)?;
            // Its state is held for the rest of the query.
            self.budget.charge(0, bytes, what).ok()?;
            Some(fold)
        });
        let Some(mut fold) = fold else {
            table.hold(steps);
            self.fill_rows(
                &times,
                row_cost,
                0..n,
                &mut table.values,
                &mut table.present,
                what,
                &row,
            )?;
            return Ok(None);
        };
        table.hold(1);
        let unheld = n.saturating_mul(steps - 1);
        self.budget
            .release(0, unheld.saturating_mul(RANGE_CELL_BYTES));
        let block = (FOLD_BLOCK_CELLS / steps).clamp(1, n);
        let scratch = Held::new(&self.budget);
        scratch.charge(0, block * steps * RANGE_CELL_BYTES, what)?;
        let (mut values, mut present) = (vec![0.0; block * steps], vec![false; block * steps]);
        let mut from = 0;
        while from < n {
            let to = (from + block).min(n);
            let cells = (to - from) * steps;
            present[..cells].fill(false);
            self.fill_rows(
                &times,
                row_cost,
                from..to,
                &mut values[..cells],
                &mut present[..cells],
                what,
                &row,
            )?;
            for (j, i) in (from..to).enumerate() {
                table.values[i] = values[j * steps];
                table.present[i] = present[j * steps];
            }
            fold.fold(from..to, &values[..cells], &present[..cells], steps);
            // A block may be fewer rows than the workers' checks come at.
            self.check_deadline(what)?;
            from = to;
        }
        Ok(Some(fold))
    }

    /// Fills the cells of rows `rows` (`times.len()` per row, from the
    /// start of `values` and `present`) as [`Ctx::fill_table`] says. The
    /// rows are cut among free workers (by `row_cost`, a row's cells and
    /// points), each reading a series' points in one sweep while they are
    /// in cache.
    #[allow(clippy::too_many_arguments)]
    fn fill_rows(
        &self,
        times: &[i64],
        row_cost: usize,
        rows: std::ops::Range<usize>,
        values: &mut [f64],
        present: &mut [bool],
        what: &'static str,
        row: &(impl Fn(usize, &[i64], &mut [f64], &mut [bool], &mut RowScratch) + Sync),
    ) -> Result<(), QueryError> {
        let n = rows.len();
        let steps = times.len();
        let workers =
            parallel::Workers::for_items(n, TABLE_CELLS_PER_WORKER.div_ceil(row_cost.max(1)));
        // Rows cost unequally (series of other metrics decode at other
        // speeds), so each thread takes the next few rows as it finishes
        // its last, rather than half of them.
        let part_rows = n.div_ceil(workers.count() * ROW_PARTS_PER_THREAD).max(1);
        let mut parts = Vec::with_capacity(n.div_ceil(part_rows));
        let (mut values, mut present) = (values, present);
        let mut from = rows.start;
        while from < rows.end {
            let to = (from + part_rows).min(rows.end);
            let (v, rest_v) = values.split_at_mut((to - from) * steps);
            let (p, rest_p) = present.split_at_mut((to - from) * steps);
            parts.push((from..to, v, p));
            (values, present, from) = (rest_v, rest_p, to);
        }
        let (deadline, cancel) = (self.deadline, self.cancel);
        let expired =
            || Instant::now() > deadline || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        let done = workers.run_queue(parts, RowScratch::default, |scratch, part| {
            let (rows, values, present) = part;
            if expired() {
                return Err(QueryError::Timeout(what));
            }
            let cells = values
                .chunks_mut(steps.max(1))
                .zip(present.chunks_mut(steps.max(1)));
            for (j, (i, (values, present))) in rows.zip(cells).enumerate() {
                if j % 256 == 255 && expired() {
                    return Err(QueryError::Timeout(what));
                }
                row(i, times, values, present, scratch);
            }
            Ok(())
        });
        done.into_iter().collect()
    }

    /// A table of `rows` series at every step of this evaluator, empty; it
    /// is kept for the whole query, so its cells' bytes are counted for
    /// good, or it is not made (past the memory left: the caller then
    /// works step by step). Its cells are not counted as
    /// samples: what reads them (an aggregation, the answer) counts what
    /// it makes of them, as Prometheus counts a range query's output
    /// rather than its intermediate vectors twice. With the number of
    /// steps.
    fn empty_table(
        &self,
        rows: usize,
        drop_name: bool,
        what: &'static str,
    ) -> Option<(RangeTable, usize)> {
        let steps = self.steps();
        let cells = rows.saturating_mul(steps);
        if self
            .budget
            .charge(0, cells.saturating_mul(RANGE_CELL_BYTES), what)
            .is_err()
        {
            return None;
        }
        // Its cells are made once it is known whether they are all kept
        // ([`Ctx::fill_table`]).
        let table = RangeTable {
            labels: Vec::with_capacity(rows),
            drop_name,
            steps,
            held: 0,
            values: Vec::new(),
            present: Vec::new(),
            same_labels: Vec::new(),
        };
        Some((table, steps))
    }

    /// Finishes a table and keeps it, by `key`, for the rest of the query.
    fn keep_table(&self, key: usize, table: RangeTable) -> Rc<RangeTable> {
        let table = Rc::new(table);
        self.range_tables
            .borrow_mut()
            .insert(key, Rc::clone(&table));
        table
    }

    /// A plain instant selector's values at every step of this evaluator
    /// (a range query), as [`Ctx::range_table`] holds a range function's:
    /// each series' newest sample in `(ts - lookback, ts]` unless it is a
    /// stale marker, found in one sweep of its points. Made on first use
    /// and kept by the selector's address, so that an aggregation over the
    /// selector reads each step in place instead of building a vector.
    /// `None` where the table cannot stand in: one step, a `smoothed`
    /// selector, series holding histograms, or more cells than the
    /// query's memory allows.
    pub(crate) fn selector_table(
        &self,
        vs: &VectorSelector,
    ) -> Result<Option<Rc<RangeTable>>, QueryError> {
        if self.step == 0 || self.start == self.end || vs.smoothed {
            return Ok(None);
        }
        let key = vs as *const VectorSelector as usize;
        if let Some(t) = self.range_tables.borrow().get(&key) {
            return Ok(Some(Rc::clone(t)));
        }
        if self.untabled.borrow().contains(&key) {
            return Ok(None);
        }
        let lookback = self.opts.lookback_ms;
        let what = "query range evaluation";
        let Some((mut table, source)) = self.table_source(vs, lookback, Name::Keep, true, what)?
        else {
            self.untabled.borrow_mut().insert(key);
            return Ok(None);
        };
        let rows = source.rows();
        let fold = self.fill_table(
            key,
            vs,
            &mut table,
            rows.points_per_row(),
            what,
            |i, times, values, present, scratch| {
                let points = rows.with_stale(i, &mut scratch.points);
                let mut hi = 0;
                for (k, &ts) in times.iter().enumerate() {
                    while hi < points.len() && points[hi].0 <= ts {
                        hi += 1;
                    }
                    let Some(&(pt, v)) = hi.checked_sub(1).and_then(|j| points.get(j)) else {
                        continue;
                    };
                    if pt > ts.saturating_sub(lookback) && !is_stale(v) {
                        values[k] = v;
                        present[k] = true;
                    }
                }
            },
        )?;
        Ok(Some(self.finish_table(key, table, source, fold)))
    }

    /// A range table holding every step of this evaluator as the answer
    /// of a range query, row by row, with what the answer gathered step by
    /// step has: each row's points where it is present (charged to the
    /// query), rows with equal labels (names dropped) as one series, the
    /// same error at a step where two of them are present, series in
    /// label order. `None` where it cannot stand in: a table folded into
    /// an aggregation, or names dropped only at the end
    /// (`delayed_name_removal`).
    pub(crate) fn table_series(
        &self,
        table: &RangeTable,
        start: i64,
        step: i64,
    ) -> Result<Option<Vec<Series>>, QueryError> {
        let steps = table.steps();
        if steps != self.steps() || !table.has_step(steps - 1) || self.opts.delayed_name_removal {
            return Ok(None);
        }
        for k in 0..steps {
            table.check_unique(k)?;
        }
        let mut out: Vec<Series> = Vec::with_capacity(table.rows());
        // The first row of each row's group of equal labels (rows alone
        // are not in it), and the answer's series of each group.
        let mut first_of: HashMap<usize, usize> = HashMap::new();
        for rows in &table.same_labels {
            for &row in &rows[1..] {
                first_of.insert(row, rows[0]);
            }
        }
        let mut series_of_row: HashMap<usize, usize> = HashMap::new();
        for row in 0..table.rows() {
            if row % 256 == 255 {
                self.check_deadline("query range evaluation")?;
            }
            let points: Vec<(i64, f64)> = table
                .row_at(row, 0..steps)
                .map(|(k, v)| (start + k as i64 * step, v))
                .collect();
            if points.is_empty() {
                continue;
            }
            self.budget.charge(
                points.len(),
                points.len() * POINT_BYTES,
                "query range evaluation",
            )?;
            let first = first_of.get(&row).copied().unwrap_or(row);
            match series_of_row.get(&first).copied() {
                Some(i) => {
                    // Present at other steps than the earlier row (checked
                    // above): their points interleave in time.
                    out[i].points.extend(points);
                    out[i].points.sort_by_key(|p| p.0);
                }
                None => {
                    series_of_row.insert(first, out.len());
                    out.push(Series {
                        labels: Arc::clone(table.labels(row)),
                        points,
                        histograms: Vec::new(),
                        drop_name: table.drop_name(),
                    });
                }
            }
        }
        out.sort_by(|a, b| a.labels.cmp(&b.labels));
        Ok(Some(out))
    }

    /// The evaluator for a subquery node, covering all of this query's steps.
    fn child(&self, sq: &SubqueryExpr, step: i64, range: i64) -> Result<Rc<Ctx<'e>>, QueryError> {
        let key = sq as *const SubqueryExpr as usize;
        if let Some(c) = self.children.borrow().get(&key) {
            return Ok(Rc::clone(c));
        }
        let lo = self
            .selector_time(&sq.at, &sq.offset, self.start)
            .saturating_sub(range);
        let hi = self.selector_time(&sq.at, &sq.offset, self.end);
        let mut first_eval = step * (lo / step);
        if first_eval <= lo {
            first_eval += step;
        }
        let child = Rc::new(Ctx {
            querier: self.querier,
            operators: self.operators,
            opts: self.opts,
            start: step * (lo / step),
            end: hi,
            first_eval,
            at_start: self.at_start,
            at_end: self.at_end,
            deadline: self.deadline,
            cancel: self.cancel,
            loaded: RefCell::new(HashMap::new()),
            selections: RefCell::default(),
            floats_only: RefCell::default(),
            stats_only: HashSet::new(),
            children: RefCell::new(HashMap::new()),
            group_memos: RefCell::new(HashMap::new()),
            binary_memos: RefCell::default(),
            step,
            range_tables: RefCell::new(HashMap::new()),
            untabled: RefCell::default(),
            folds: RefCell::default(),
            budget: Rc::clone(&self.budget),
            annotations: Rc::clone(&self.annotations),
            checked: RefCell::default(),
            unique: RefCell::default(),
            pos: Cell::default(),
        });
        self.children.borrow_mut().insert(key, Rc::clone(&child));
        Ok(child)
    }

    /// Evaluates an argument that must be an instant vector.
    pub(crate) fn eval_vector(&self, expr: &Expr, t: i64) -> Result<Vec<Sample>, QueryError> {
        match self.eval(expr, t)? {
            Value::Vector(v) => Ok(v),
            other => Err(QueryError::Execution(format!(
                "expected instant vector, got {}",
                other.type_name()
            ))),
        }
    }

    /// Evaluates an argument that must be a scalar.
    pub(crate) fn eval_scalar(&self, expr: &Expr, t: i64) -> Result<f64, QueryError> {
        match self.eval(expr, t)? {
            Value::Scalar(v) => Ok(v),
            other => Err(QueryError::Execution(format!(
                "expected scalar, got {}",
                other.type_name()
            ))),
        }
    }
}

/// Calls `f` with each series' floats and histograms in `(from, upto]`
/// (stale markers left out), where it has any.
fn each_window(
    series: &[SeriesPoints],
    from: i64,
    upto: i64,
    mut f: impl FnMut(&SeriesPoints, &[(i64, f64)], &[(i64, Hist)]),
) {
    for s in series {
        let lo = s.points.partition_point(|&(pt, _)| pt <= from);
        let hi = s.points.partition_point(|&(pt, _)| pt <= upto).max(lo);
        let floats: Vec<(i64, f64)> = s.points[lo..hi]
            .iter()
            .copied()
            .filter(|&(_, v)| !is_stale(v))
            .collect();
        let hists = s.hist_window(from, upto);
        if !floats.is_empty() || !hists.is_empty() {
            f(s, &floats, &hists);
        }
    }
}

/// The value at `t` on the line from `p1` to `p2`; for a counter that
/// reset between them, the line from 0 (Prometheus' `interpolate`).
pub(crate) fn interpolate(p1: (i64, f64), p2: (i64, f64), t: i64, is_counter: bool) -> f64 {
    let (y1, y2) = (p1.1, p2.1);
    let y1 = if is_counter && y2 < y1 { 0.0 } else { y1 };
    y1 + (y2 - y1) * (t - p1.0) as f64 / (p2.0 - p1.0) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A window's ends moved by stride guesses land where the walk
        /// lands, step after step, for points in time order or not (a
        /// damaged chunk's), at regular steps and irregular ones.
        #[test]
        fn window_ends_land_where_the_walk_lands(
            gaps in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(15i64), 0i64..40, -20i64..20],
                0..120,
            ),
            steps in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(60i64), 0i64..90],
                1..60,
            ),
            range in 0i64..400,
        ) {
            let mut t = 0;
            let points: Vec<(i64, f64)> = gaps
                .iter()
                .map(|g| {
                    t += g;
                    (t, 0.0)
                })
                .collect();
            let ordered = points.windows(2).all(|w| w[0].0 <= w[1].0);
            let walk = |from: usize, end: usize, t: i64| {
                let mut at = from;
                while at < end && points[at].0 <= t {
                    at += 1;
                }
                at
            };
            let (mut hi, mut lo, mut hi_stride, mut lo_stride) = (0, 0, 0, 0);
            let mut ts = -30;
            for step in steps {
                ts += step;
                let (want_hi, want_lo) = {
                    let h = walk(hi, points.len(), ts);
                    (h, walk(lo, h, ts - range))
                };
                hi = advance_past(&points, hi, points.len(), ts, ordered, &mut hi_stride);
                lo = advance_past(&points, lo, hi, ts - range, ordered, &mut lo_stride);
                proptest::prop_assert_eq!((hi, lo), (want_hi, want_lo));
            }
        }
    }

    #[test]
    fn unique_check_finds_duplicates_by_content_whatever_the_addresses() {
        let labels = |v: &str| -> Labels {
            vec![Label {
                name: "k".into(),
                value: v.into(),
            }]
            .into()
        };
        let sample = |l: &Labels| Sample::float(Arc::clone(l), 1.0);
        let (a, b) = (labels("a"), labels("b"));
        let mut u = UniqueCheck::default();
        // The same sets at every step: fine.
        for _ in 0..3 {
            u.check(&[sample(&a), sample(&b)]).expect("distinct");
        }
        // One set twice at a step.
        assert!(u.check(&[sample(&a), sample(&a)]).is_err());
        // The same content in two allocations, new at this step.
        let a2 = labels("a");
        assert!(u.check(&[sample(&a2), sample(&a)]).is_err());
        // Sets made anew at every step, as label_replace makes them.
        for _ in 0..3 {
            u.check(&[sample(&labels("a")), sample(&labels("b"))])
                .expect("distinct");
            assert!(u
                .check(&[sample(&labels("c")), sample(&labels("c"))])
                .is_err());
        }
    }

    #[test]
    fn seek_finds_the_first_point_after_a_bound_from_any_hint() {
        let points: Vec<(i64, f64)> = (0..100).map(|i| (i * 10, 0.0)).collect();
        let hint = Cell::new(0);
        for bound in [-5, 0, 5, 95, 96, 500, 990, 2000, 15, 0, -1, 999] {
            let want = points.partition_point(|&(t, _)| t <= bound);
            assert_eq!(seek(&points, &hint, bound), want, "bound {bound}");
            assert_eq!(hint.get(), want);
        }
        assert_eq!(seek(&[], &Cell::new(7), 5), 0);
    }
}
