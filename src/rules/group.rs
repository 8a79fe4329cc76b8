//! One rule group evaluated as Prometheus evaluates one (`rules/group.go`,
//! `recording.go`): at evaluation times aligned as Prometheus aligns them
//! (so that a group gives the same timestamps in Sluice and Prometheus),
//! each recording rule's query at that time less the query offset, its
//! result written through the `Appender` under the rule's name and labels,
//! and a stale marker for each series it wrote last time and not this.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::alerting::{Alert, AlertRule, AlertState, Externals, Outgoing};
use super::file::{GroupSpec, RuleKind, RuleSpec};
use crate::histogram::HistSample;
use crate::promql::value::Value;
use crate::promql::{Engine, QueryOptions};
use crate::storage::db::Db;
use crate::storage::index::{MatchOp, Matcher};
use crate::storage::labels::encode_canonical;
use crate::storage::{AppendCounts, STALE_NAN};

/// Prometheus' hash of a group: xxHash64 of the labels `{file, name}` in
/// its string encoding (each string after its length: one byte below
/// 255, else 255 and three bytes little-endian).
pub fn group_hash(file: &str, name: &str) -> u64 {
    let mut data = Vec::with_capacity(16 + file.len() + name.len());
    for s in ["file", file, "name", name] {
        let n = s.len();
        if n < 255 {
            data.push(n as u8);
        } else {
            data.extend_from_slice(&[255, n as u8, (n >> 8) as u8, (n >> 16) as u8]);
        }
        data.extend_from_slice(s.as_bytes());
    }
    xxhash_rust::xxh64::xxh64(&data, 0)
}

/// The evaluation time at or before `now_ns` on the group's grid, as
/// Prometheus' `Group.EvalTimestamp` (in ns): every `interval` from an
/// offset the group's hash picks, so groups spread over the interval.
pub fn eval_timestamp_ns(hash: u64, interval_ns: i64, now_ns: i64) -> i64 {
    let interval = interval_ns.max(1);
    let offset = (hash % interval as u64) as i64;
    let adjusted = now_ns - offset;
    let base = adjusted - adjusted.rem_euclid(interval);
    base + offset
}

/// How a rule's last evaluation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Health {
    /// Not evaluated yet.
    #[default]
    Unknown,
    /// Evaluated, and written.
    Ok,
    /// Failed (`last_error` says why).
    Err,
}

impl Health {
    /// Prometheus' word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Unknown => "unknown",
            Health::Ok => "ok",
            Health::Err => "err",
        }
    }
}

/// A rule's state as the rules API shows it.
#[derive(Debug, Clone, Default)]
pub struct RuleStatus {
    /// Its last evaluation's outcome.
    pub health: Health,
    /// Why the last evaluation failed, if it did.
    pub last_error: String,
    /// When it last started (ms since the epoch, wall clock); 0 before.
    pub last_evaluation_ms: i64,
    /// How long it took, in seconds.
    pub evaluation_seconds: f64,
    /// An alerting rule's state (the highest of its alerts').
    pub alert_state: AlertState,
    /// An alerting rule's alerts that are not resolved.
    pub alerts: Vec<Alert>,
}

/// A group's state as the rules API and the metrics show it.
#[derive(Debug, Clone, Default)]
pub struct GroupStatus {
    /// When the last evaluation started (wall clock, ms); 0 before.
    pub last_evaluation_ms: i64,
    /// How long it took, in seconds.
    pub evaluation_seconds: f64,
    /// Its rules, in file order.
    pub rules: Vec<RuleStatus>,
    /// Evaluations run, missed (the group's interval passed without one),
    /// rule evaluations and their failures.
    pub iterations: u64,
    /// Evaluation times skipped because an evaluation ran late.
    pub missed: u64,
    /// Rule evaluations.
    pub rule_evaluations: u64,
    /// Rule evaluations that failed.
    pub rule_failures: u64,
    /// Samples the last evaluation gave (the results' lengths).
    pub last_samples: u64,
}

/// A group, ready to be evaluated: its rules and what it wrote last time.
#[derive(Debug)]
pub struct Group {
    /// What its file says.
    pub spec: Arc<GroupSpec>,
    /// Its interval and query offset, in ms, with the globals applied.
    pub interval_ms: i64,
    /// How far back of each evaluation time its queries look, in ms.
    pub query_offset_ms: i64,
    /// Per rule, the canonical label sets it wrote at its last evaluation:
    /// those it does not write next time get a stale marker.
    previous: Vec<HashSet<Vec<u8>>>,
    /// Per rule, an alerting rule's alerts (`None` for a recording rule).
    alerts: Vec<Option<AlertRule>>,
    /// Whether alerting rules' `for` state is restored after the second
    /// evaluation (a group loaded at start; one loaded by a reload is
    /// restored from the outset, as in Prometheus).
    restore_after: Option<u64>,
    /// Evaluations made.
    evals: u64,
    /// Series a reload took from this group's rules (those of rules it
    /// no longer has): marked stale at its next evaluation, as Prometheus
    /// marks them.
    stale_next: Vec<Vec<u8>>,
    /// Its state, shared with the API.
    pub status: Arc<Mutex<GroupStatus>>,
}

/// What alerting rules need from outside their group.
#[derive(Debug, Clone, Default)]
pub struct AlertSettings {
    /// External labels and URL, for templates and links.
    pub externals: Externals,
    /// How long Sluice may have been down for an alert's `for` state to be
    /// restored (`--rules-alert-for-outage-tolerance`), in ms.
    pub outage_tolerance_ms: i64,
    /// The least `for` left to an alert restored (`--rules-alert-for-grace-period`), in ms.
    pub grace_period_ms: i64,
    /// How often an alert still firing is sent again
    /// (`--rules-alert-resend-delay`), in ms.
    pub resend_delay_ms: i64,
}

/// Why one rule's evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum RuleError {
    #[error("{0}")]
    Query(String),
    #[error("rule result is not a vector or scalar")]
    NotVector,
    #[error("vector contains metrics with the same labelset after applying rule labels")]
    SameLabels,
    #[error("exceeded limit of {limit} with {got} series")]
    Limit { limit: usize, got: usize },
}

/// One recorded sample: its sorted labels, canonical bytes and value.
struct Recorded {
    labels: Vec<(String, String)>,
    canonical: Vec<u8>,
    value: RecordedValue,
}

enum RecordedValue {
    Float(f64),
    Histogram(HistSample),
}

impl Recorded {
    /// A sample of these labels, with their canonical bytes.
    fn new(labels: BTreeMap<String, String>, value: RecordedValue) -> Self {
        let labels: Vec<(String, String)> = labels.into_iter().collect();
        let mut canonical = Vec::new();
        encode_canonical(
            labels.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            &mut canonical,
        );
        Self {
            labels,
            canonical,
            value,
        }
    }
}

/// One result of a rule's query: its labels (with its name) and value.
type QueryResult = (BTreeMap<String, String>, RecordedValue);

/// A rule's query at `at`: each result's labels and value (a scalar is
/// one result without labels, as Prometheus' `EngineQueryFunc` makes it).
fn query(db: &Db, opts: &QueryOptions, expr: &str, at: i64) -> Result<Vec<QueryResult>, RuleError> {
    let value = Engine::new(db.querier(), opts.clone())
        .instant(expr, at)
        .map_err(|e| RuleError::Query(e.to_string()))?
        .value;
    match value {
        Value::Scalar(v) => Ok(vec![(BTreeMap::new(), RecordedValue::Float(v))]),
        Value::Vector(samples) => Ok(samples
            .into_iter()
            .map(|s| {
                let labels = s
                    .labels
                    .iter()
                    .map(|l| (l.name.as_str().to_owned(), l.value.as_str().to_owned()))
                    .collect();
                let value = match s.h {
                    Some(h) => RecordedValue::Histogram(HistSample::Float((*h).clone())),
                    None => RecordedValue::Float(s.v),
                };
                (labels, value)
            })
            .collect()),
        _ => Err(RuleError::NotVector),
    }
}

impl Group {
    /// A group from its spec, with the global interval and query offset
    /// for what it leaves unset.
    pub fn new(
        spec: Arc<GroupSpec>,
        global_interval_ms: i64,
        global_offset_ms: i64,
        at_start: bool,
    ) -> Self {
        let n = spec.rules.len();
        Self {
            interval_ms: spec.interval_ms.unwrap_or(global_interval_ms).max(1),
            query_offset_ms: spec.query_offset_ms.unwrap_or(global_offset_ms).max(0),
            previous: vec![HashSet::new(); n],
            alerts: spec
                .rules
                .iter()
                .map(|r| {
                    (!matches!(r.kind, RuleKind::Record)).then(|| AlertRule {
                        restored: !at_start,
                        ..AlertRule::default()
                    })
                })
                .collect(),
            restore_after: at_start.then_some(2),
            evals: 0,
            stale_next: Vec::new(),
            status: Arc::new(Mutex::new(GroupStatus {
                rules: vec![RuleStatus::default(); n],
                ..GroupStatus::default()
            })),
            spec,
        }
    }

    /// Takes over what `old` (the same group before a reload) wrote last,
    /// rule by rule where a rule of the same name and labels is kept, and
    /// its status; the series of rules it no longer has are marked stale
    /// at its first evaluation.
    pub fn take_state(&mut self, mut old: Group) {
        let key = |r: &RuleSpec| (r.name.clone(), r.labels.clone());
        let mut left: BTreeMap<(String, BTreeMap<String, String>), Vec<usize>> = BTreeMap::new();
        for (i, r) in old.spec.rules.iter().enumerate().rev() {
            left.entry(key(r)).or_default().push(i);
        }
        let mut previous = old.previous;
        let old_status = old.status.lock().clone();
        let mut status = self.status.lock();
        status.last_evaluation_ms = old_status.last_evaluation_ms;
        status.evaluation_seconds = old_status.evaluation_seconds;
        for (i, r) in self.spec.rules.iter().enumerate() {
            if let Some(j) = left.get_mut(&key(r)).and_then(Vec::pop) {
                self.previous[i] = std::mem::take(&mut previous[j]);
                if let (Some(Some(to)), Some(Some(from))) =
                    (self.alerts.get_mut(i), old.alerts.get(j))
                {
                    to.active = from.active.clone();
                }
                if let (Some(to), Some(from)) = (status.rules.get_mut(i), old_status.rules.get(j)) {
                    *to = from.clone();
                }
            }
        }
        let unmatched: Vec<usize> = left.into_values().flatten().collect();
        drop(status);
        self.stale_next.extend(
            unmatched
                .into_iter()
                .flat_map(|j| std::mem::take(&mut previous[j])),
        );
        self.stale_next.append(&mut old.stale_next);
    }

    /// The series this group wrote at its last evaluation.
    pub fn written(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.previous.iter().flatten()
    }

    /// Evaluates every rule at `ts` (ms, on the group's grid) over `db`:
    /// queries at `ts` less the query offset, results and stale markers
    /// written there; alerting rules' alerts move on, and those due go
    /// out. Returns the commit to wait on and the alerts to send.
    /// Blocking (PromQL).
    pub fn eval(
        &mut self,
        db: &Db,
        opts: &QueryOptions,
        alerting: &AlertSettings,
        ts: i64,
        now_ms: i64,
    ) -> (crate::storage::appender::Commit, Vec<Outgoing>) {
        let started = std::time::Instant::now();
        let at = ts - self.query_offset_ms;
        let mut app = db.appender(i64::MAX);
        let mut samples = 0u64;
        let mut counts = AppendCounts::default();
        let spec = Arc::clone(&self.spec);
        let mut evaluated = vec![false; spec.rules.len()];
        for (i, rule) in spec.rules.iter().enumerate() {
            let rule_started = std::time::Instant::now();
            let outcome = match &rule.kind {
                RuleKind::Record => self.record(db, opts, rule, at),
                RuleKind::Alert {
                    for_ms,
                    keep_firing_for_ms,
                    annotations,
                } => self.alert(
                    i,
                    db,
                    opts,
                    rule,
                    ((*for_ms, *keep_firing_for_ms), annotations),
                    (at, ts),
                    alerting,
                ),
            };
            let mut st = RuleStatus {
                last_evaluation_ms: now_ms,
                ..RuleStatus::default()
            };
            match outcome {
                Ok(recorded) => {
                    evaluated[i] = true;
                    samples += recorded.len() as u64;
                    let refused = self.write(i, &mut app, recorded, at, &mut counts);
                    if refused > 0 {
                        st.health = Health::Err;
                        st.last_error = format!(
                            "{refused} samples were not stored (out of order, duplicate, too old or over a limit)"
                        );
                    } else {
                        st.health = Health::Ok;
                    }
                }
                Err(e) => {
                    st.health = Health::Err;
                    st.last_error = e.to_string();
                    tracing::warn!(group = %spec.name, file = %spec.file, rule = %rule.name, error = %st.last_error, "evaluating rule failed");
                }
            }
            if let Some(Some(a)) = self.alerts.get(i) {
                st.alert_state = a.state();
                st.alerts = a.active_alerts();
            }
            st.evaluation_seconds = rule_started.elapsed().as_secs_f64();
            let mut status = self.status.lock();
            status.rule_evaluations += 1;
            if st.health == Health::Err {
                status.rule_failures += 1;
            }
            if let Some(slot) = status.rules.get_mut(i) {
                *slot = st;
            }
        }
        // Series of rules a reload removed.
        for gone in std::mem::take(&mut self.stale_next) {
            let stale = std::iter::once((at, f64::from_bits(STALE_NAN)));
            app.append_existing(&gone, stale, &mut counts);
        }
        let commit = app.commit();
        // Alerts due, as Prometheus sends them after each evaluation of a
        // rule that succeeded (a failing rule's alerts expire).
        let mut outgoing = Vec::new();
        for ((rule, alerts), ok) in spec
            .rules
            .iter()
            .zip(self.alerts.iter_mut())
            .zip(&evaluated)
        {
            if let (Some(a), true) = (alerts, *ok) {
                let query: String =
                    form_urlencoded::byte_serialize(rule.query.as_bytes()).collect();
                let link = format!("{}/graph?g0.expr={query}&g0.tab=1", alerting.externals.url);
                outgoing.extend(a.to_send(ts, self.interval_ms, alerting.resend_delay_ms, &link));
            }
        }
        self.evals += 1;
        if self.restore_after == Some(self.evals) {
            self.restore_after = None;
            self.restore(db, alerting, now_ms);
        }
        let mut status = self.status.lock();
        status.iterations += 1;
        status.last_evaluation_ms = now_ms;
        status.evaluation_seconds = started.elapsed().as_secs_f64();
        status.last_samples = samples;
        (commit, outgoing)
    }

    /// Writes rule `i`'s samples at `at`, and a stale marker for each
    /// series it wrote last time and not now; how many were refused.
    fn write(
        &mut self,
        i: usize,
        app: &mut crate::storage::appender::Appender<'_>,
        recorded: Vec<Recorded>,
        at: i64,
        counts: &mut AppendCounts,
    ) -> u64 {
        let mut now_written = HashSet::with_capacity(recorded.len());
        let mut refused = 0u64;
        for r in recorded {
            let labels: Vec<(&str, &str)> = r
                .labels
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            let before = counts.rejected_total();
            let stored = match &r.value {
                RecordedValue::Float(v) => {
                    app.append_existing(&r.canonical, std::iter::once((at, *v)), counts)
                        || app
                            .append_new(&labels, &r.canonical, std::iter::once((at, *v)), counts)
                            .is_ok()
                }
                RecordedValue::Histogram(h) => app
                    .append_histograms(&labels, &r.canonical, &[(at, h.clone())], counts)
                    .is_ok(),
            };
            if stored && counts.rejected_total() == before {
                now_written.insert(r.canonical);
            } else {
                refused += 1;
            }
        }
        // What it wrote last time and not now goes stale.
        if let Some(previous) = self.previous.get(i) {
            for gone in previous.difference(&now_written) {
                let stale = std::iter::once((at, f64::from_bits(STALE_NAN)));
                app.append_existing(gone, stale, counts);
            }
        }
        if let Some(slot) = self.previous.get_mut(i) {
            *slot = now_written;
        }
        refused
    }

    /// One alerting rule at `ts` (its query at `at`): its alerts move on,
    /// and its `ALERTS` and `ALERTS_FOR_STATE` samples are returned.
    #[allow(clippy::too_many_arguments)]
    fn alert(
        &mut self,
        i: usize,
        db: &Db,
        opts: &QueryOptions,
        rule: &RuleSpec,
        (durations, annotations): ((i64, i64), &BTreeMap<String, String>),
        (at, ts): (i64, i64),
        alerting: &AlertSettings,
    ) -> Result<Vec<Recorded>, RuleError> {
        // An alert's value is the result's float (0 for a histogram).
        let results: Vec<(BTreeMap<String, String>, f64)> = query(db, opts, &rule.expr, at)?
            .into_iter()
            .map(|(labels, v)| match v {
                RecordedValue::Float(f) => (labels, f),
                RecordedValue::Histogram(_) => (labels, 0.0),
            })
            .collect();
        let limit = self.spec.limit;
        let Some(Some(state)) = self.alerts.get_mut(i) else {
            return Ok(Vec::new());
        };
        // A template's `query` runs at the evaluation time, as Prometheus'
        // (the rule's own query at it less the offset).
        let template_query = |q: &str| -> Result<Vec<super::alerting::Labelled>, String> {
            Ok(query(db, opts, q, ts)
                .map_err(|e| e.to_string())?
                .into_iter()
                .map(|(labels, v)| match v {
                    RecordedValue::Float(f) => (labels, f),
                    RecordedValue::Histogram(_) => (labels, 0.0),
                })
                .collect())
        };
        let samples = state
            .eval(
                rule,
                durations,
                annotations,
                results,
                (ts, limit),
                (&alerting.externals, Some(&template_query)),
            )
            .map_err(RuleError::Query)?;
        Ok(samples
            .into_iter()
            .map(|(labels, v)| Recorded::new(labels, RecordedValue::Float(v)))
            .collect())
    }

    /// Restores the `for` state of every alerting rule's alerts from the
    /// `ALERTS_FOR_STATE` series of the last outage tolerance, as
    /// Prometheus' `RestoreForState` at `now` (ms).
    fn restore(&mut self, db: &Db, alerting: &AlertSettings, now: i64) {
        let spec = Arc::clone(&self.spec);
        for (rule, alerts) in spec.rules.iter().zip(self.alerts.iter_mut()) {
            let (Some(a), RuleKind::Alert { for_ms, .. }) = (alerts.as_mut(), &rule.kind) else {
                continue;
            };
            let mut matchers = Vec::new();
            let eq = |n: &str, v: &str| Matcher::new(MatchOp::Equal, n, v).ok();
            matchers.extend(eq("__name__", "ALERTS_FOR_STATE"));
            matchers.extend(eq("alertname", &rule.name));
            for (n, v) in &rule.labels {
                matchers.extend(eq(n, v));
            }
            let (lo, hi) = (now - alerting.outage_tolerance_ms, now);
            let mut last = BTreeMap::new();
            if *for_ms >= alerting.grace_period_ms {
                for s in db.querier().select(&matchers, lo, hi) {
                    let Some(sample) = s.last_sample(lo, hi) else {
                        continue;
                    };
                    let labels: BTreeMap<String, String> = s
                        .labels
                        .iter()
                        .filter(|l| l.name.as_str() != "__name__")
                        .map(|l| (l.name.as_str().to_owned(), l.value.as_str().to_owned()))
                        .collect();
                    last.insert(labels, sample);
                }
            }
            a.restore(*for_ms, &last, now, alerting.grace_period_ms);
        }
    }

    /// One recording rule's samples at `at`: its query's result, named and
    /// labelled, checked for duplicate label sets and the group's limit.
    fn record(
        &self,
        db: &Db,
        opts: &QueryOptions,
        rule: &RuleSpec,
        at: i64,
    ) -> Result<Vec<Recorded>, RuleError> {
        let results = query(db, opts, &rule.expr, at)?;
        let mut out = Vec::with_capacity(results.len());
        let mut seen = HashSet::with_capacity(results.len());
        for (mut labels, value) in results {
            labels.insert("__name__".to_owned(), rule.name.clone());
            for (n, v) in &rule.labels {
                // An empty value removes the label, as in Prometheus.
                if v.is_empty() {
                    labels.remove(n);
                } else {
                    labels.insert(n.clone(), v.clone());
                }
            }
            let r = Recorded::new(labels, value);
            if !seen.insert(r.canonical.clone()) {
                return Err(RuleError::SameLabels);
            }
            out.push(r);
        }
        let limit = self.spec.limit;
        if limit > 0 && out.len() > limit {
            return Err(RuleError::Limit {
                limit,
                got: out.len(),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_spread_over_their_interval_as_prometheus_spreads_them() {
        let h = group_hash("rules.yml", "g");
        let interval = 60_000_000_000i64;
        let at = eval_timestamp_ns(h, interval, 1_700_000_000_123_456_789);
        assert!(at <= 1_700_000_000_123_456_789 && at > 1_700_000_000_123_456_789 - interval);
        assert_eq!((at - (h % interval as u64) as i64).rem_euclid(interval), 0);
        // The same slot for every time within it.
        assert_eq!(eval_timestamp_ns(h, interval, at), at);
        assert_eq!(eval_timestamp_ns(h, interval, at + interval - 1), at);
        assert_eq!(eval_timestamp_ns(h, interval, at + interval), at + interval);
        // Long names take the 4-byte length.
        assert_ne!(
            group_hash(&"f".repeat(300), "g"),
            group_hash(&"f".repeat(301), "g")
        );
    }
}
