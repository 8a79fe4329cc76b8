//! Alerting rules, as Prometheus evaluates them (`rules/alerting.go`): each
//! result of the query is an alert, labelled by the result (less its name),
//! the rule's labels (templates, expanded) and `alertname`; it is pending
//! from its first evaluation, firing once `for` has passed, kept firing for
//! `keep_firing_for` after its condition goes, and resolved when it has;
//! resolved alerts are kept 15 minutes (and sent, so Alertmanager resolves
//! them). Pending and firing alerts are written as `ALERTS` and
//! `ALERTS_FOR_STATE` once the rule's `for` state was restored after a
//! start ([`AlertRule::restore`]).

use std::collections::BTreeMap;

use super::file::RuleSpec;
use super::template::{expand, Data};

/// How long a resolved alert is kept (and sent).
const RESOLVED_RETENTION_MS: i64 = 15 * 60_000;

/// An alert's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum AlertState {
    /// Resolved.
    #[default]
    Inactive,
    /// Its condition holds, not yet for `for`.
    Pending,
    /// Its condition held for `for` (or holds within `keep_firing_for`).
    Firing,
}

impl AlertState {
    /// Prometheus' word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Inactive => "inactive",
            AlertState::Pending => "pending",
            AlertState::Firing => "firing",
        }
    }
}

/// One alert of a rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Its labels: the result's (no name), the rule's, `alertname`.
    pub labels: BTreeMap<String, String>,
    /// Its annotations, expanded.
    pub annotations: BTreeMap<String, String>,
    /// Where it stands.
    pub state: AlertState,
    /// The value of the result that made it.
    pub value: f64,
    /// When its condition began to hold (ms).
    pub active_at_ms: i64,
    /// When it began to fire (ms), 0 if it has not.
    pub fired_at_ms: i64,
    /// When it was resolved (ms), if it was.
    pub resolved_at_ms: Option<i64>,
    /// When it was last sent (ms), 0 if never.
    pub last_sent_ms: i64,
    /// Until when the last sending holds (ms): Alertmanager's `endsAt`.
    pub valid_until_ms: i64,
    /// Since when it fires on `keep_firing_for` alone (ms).
    pub keep_firing_since_ms: Option<i64>,
}

impl Alert {
    /// Whether it should go to Alertmanager at `ts`, as Prometheus'
    /// `needsSending`: never while pending; when resolved since it was
    /// last sent; else once the resend delay has passed.
    fn needs_sending(&self, ts: i64, resend_delay_ms: i64) -> bool {
        if self.state == AlertState::Pending {
            return false;
        }
        if self.resolved_at_ms.is_some_and(|r| r > self.last_sent_ms) {
            return true;
        }
        self.last_sent_ms + resend_delay_ms < ts
    }
}

/// What an alert is sent as: Alertmanager's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// Labels (external labels added by the sender).
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// When it began to fire (ms).
    pub starts_at_ms: i64,
    /// When it was resolved, or until when it holds (ms).
    pub ends_at_ms: i64,
    /// The link back to the rule's query.
    pub generator_url: String,
}

/// What the templates and links need from outside the rule.
#[derive(Debug, Clone, Default)]
pub struct Externals {
    /// `--external-labels`.
    pub labels: BTreeMap<String, String>,
    /// The URL Sluice is reached at.
    pub url: String,
}

/// An alerting rule's alerts, by label set.
#[derive(Debug, Clone, Default)]
pub struct AlertRule {
    /// Active and recently resolved alerts, by their labels' text.
    pub active: BTreeMap<String, Alert>,
    /// Whether `ALERTS` are written: after a start, once the `for` state
    /// was restored (see [`AlertRule::restore`]).
    pub restored: bool,
}

fn key_of(labels: &BTreeMap<String, String>) -> String {
    let mut k = String::new();
    for (n, v) in labels {
        k.push_str(n);
        k.push('\u{0}');
        k.push_str(v);
        k.push('\u{0}');
    }
    k
}

/// A label set and a value: one result of the rule's query (with its
/// name, as the templates see it), or one `ALERTS` sample to write.
pub type Labelled = (BTreeMap<String, String>, f64);

impl AlertRule {
    /// Evaluates `rule` on `results` (its query's at `ts` less the offset)
    /// at `ts` (ms), its templates seeing `externals` and querying by
    /// `query`, as Prometheus' `AlertingRule.Eval`: returns the
    /// `ALERTS` and `ALERTS_FOR_STATE` samples to write (labels, value;
    /// none until restored), or the error that stopped it.
    pub fn eval(
        &mut self,
        rule: &RuleSpec,
        (for_ms, keep_firing_for_ms): (i64, i64),
        annotations: &BTreeMap<String, String>,
        results: Vec<Labelled>,
        (ts, limit): (i64, usize),
        (externals, query): (&Externals, Option<super::template::QueryFn<'_>>),
    ) -> Result<Vec<Labelled>, String> {
        let mut seen: BTreeMap<String, Alert> = BTreeMap::new();
        for (metric, value) in results {
            let data = Data {
                labels: &metric,
                value,
                external_labels: &externals.labels,
                external_url: &externals.url,
                query,
            };
            let expand_or_error = |text: &str| -> String {
                expand(text, &data).unwrap_or_else(|e| {
                    tracing::warn!(alert = %rule.name, error = %e, "expanding alert template failed");
                    format!("<error expanding template: error executing template __alert_{}: {e}>", rule.name)
                })
            };
            let mut labels = metric.clone();
            labels.remove("__name__");
            for (n, v) in &rule.labels {
                let v = expand_or_error(v);
                // An empty value removes the label, as Prometheus' builder.
                if v.is_empty() {
                    labels.remove(n);
                } else {
                    labels.insert(n.clone(), v);
                }
            }
            labels.insert("alertname".into(), rule.name.clone());
            let annotations: BTreeMap<String, String> = annotations
                .iter()
                .map(|(n, v)| (n.clone(), expand_or_error(v)))
                .collect();
            let key = key_of(&labels);
            if seen.contains_key(&key) {
                return Err(
                    "vector contains metrics with the same labelset after applying alert labels"
                        .into(),
                );
            }
            seen.insert(
                key,
                Alert {
                    labels,
                    annotations,
                    state: AlertState::Pending,
                    value,
                    active_at_ms: ts,
                    fired_at_ms: 0,
                    resolved_at_ms: None,
                    last_sent_ms: 0,
                    valid_until_ms: 0,
                    keep_firing_since_ms: None,
                },
            );
        }
        let present: std::collections::BTreeSet<String> = seen.keys().cloned().collect();
        for (key, new) in seen {
            match self.active.get_mut(&key) {
                // An alert already active takes the new value and
                // annotations; a resolved one is replaced.
                Some(a) if a.state != AlertState::Inactive => {
                    a.value = new.value;
                    a.annotations = new.annotations;
                }
                _ => {
                    self.active.insert(key, new);
                }
            }
        }
        let mut pending_or_firing = 0usize;
        let keys: Vec<String> = self.active.keys().cloned().collect();
        for key in keys {
            let Some(a) = self.active.get_mut(&key) else {
                continue;
            };
            if !present.contains(&key) {
                let mut keep_firing = false;
                if a.state == AlertState::Firing && keep_firing_for_ms > 0 {
                    let since = *a.keep_firing_since_ms.get_or_insert(ts);
                    keep_firing = ts - since < keep_firing_for_ms;
                }
                if a.state == AlertState::Pending
                    || a.resolved_at_ms
                        .is_some_and(|r| ts - r > RESOLVED_RETENTION_MS)
                {
                    self.active.remove(&key);
                    continue;
                }
                if a.state != AlertState::Inactive && !keep_firing {
                    a.state = AlertState::Inactive;
                    a.resolved_at_ms = Some(ts);
                }
                if keep_firing {
                    pending_or_firing += 1;
                }
                continue;
            }
            a.keep_firing_since_ms = None;
            if a.state == AlertState::Pending && ts - a.active_at_ms >= for_ms {
                a.state = AlertState::Firing;
                a.fired_at_ms = ts;
            }
            if a.state != AlertState::Inactive {
                pending_or_firing += 1;
            }
        }
        if limit > 0 && pending_or_firing > limit {
            self.active.clear();
            return Err(format!(
                "exceeded limit of {limit} with {pending_or_firing} alerts"
            ));
        }
        if !self.restored {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for a in self.active.values() {
            if a.state == AlertState::Inactive {
                continue;
            }
            let mut base = rule.labels.clone();
            base.extend(a.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            base.insert("alertname".into(), rule.name.clone());
            let mut alerts = base.clone();
            alerts.insert("__name__".into(), "ALERTS".into());
            alerts.insert("alertstate".into(), a.state.as_str().into());
            out.push((alerts, 1.0));
            let mut for_state = base;
            for_state.insert("__name__".into(), "ALERTS_FOR_STATE".into());
            out.push((for_state, a.active_at_ms.div_euclid(1000) as f64));
        }
        Ok(out)
    }

    /// The rule's state: the highest of its alerts'.
    pub fn state(&self) -> AlertState {
        self.active
            .values()
            .map(|a| a.state)
            .max()
            .unwrap_or_default()
    }

    /// Its alerts that are not resolved (what the API lists).
    pub fn active_alerts(&self) -> Vec<Alert> {
        self.active
            .values()
            .filter(|a| a.resolved_at_ms.is_none())
            .cloned()
            .collect()
    }

    /// The alerts to send at `ts`, as Prometheus' `sendAlerts`: each is
    /// marked sent, valid until `ts + 4 × max(interval, resend delay)`.
    pub fn to_send(
        &mut self,
        ts: i64,
        interval_ms: i64,
        resend_delay_ms: i64,
        generator_url: &str,
    ) -> Vec<Outgoing> {
        let mut out = Vec::new();
        for a in self.active.values_mut() {
            if !a.needs_sending(ts, resend_delay_ms) {
                continue;
            }
            a.last_sent_ms = ts;
            a.valid_until_ms = ts + 4 * interval_ms.max(resend_delay_ms);
            out.push(Outgoing {
                labels: a.labels.clone(),
                annotations: a.annotations.clone(),
                starts_at_ms: a.fired_at_ms,
                ends_at_ms: a.resolved_at_ms.unwrap_or(a.valid_until_ms),
                generator_url: generator_url.to_owned(),
            });
        }
        out
    }

    /// Restores when each active alert became active from the newest
    /// `ALERTS_FOR_STATE` sample of its series (`last`: by the series'
    /// labels less the name, its time in ms and value), as Prometheus'
    /// `RestoreForState` at `ts` (ms): an alert that was firing keeps its
    /// time; one with less than the grace period of `for` left fires a
    /// grace period from now; the rest are moved on by the time Sluice was
    /// down. Marks the rule restored.
    pub fn restore(
        &mut self,
        for_ms: i64,
        last: &BTreeMap<BTreeMap<String, String>, (i64, f64)>,
        ts: i64,
        grace_ms: i64,
    ) {
        self.restored = true;
        if for_ms < grace_ms {
            return;
        }
        for a in self.active.values_mut() {
            let Some(&(t, v)) = last.get(&a.labels) else {
                continue;
            };
            if v.to_bits() == crate::storage::STALE_NAN {
                continue;
            }
            // Any value may have been written as ALERTS_FOR_STATE: the
            // arithmetic saturates rather than wraps.
            let down_at = t.div_euclid(1000).saturating_mul(1000);
            let mut restored = (v as i64).saturating_mul(1000);
            let remaining = for_ms.saturating_sub(down_at.saturating_sub(restored));
            if remaining <= 0 {
                // It was firing: it fires again at once if it still holds.
            } else if remaining < grace_ms {
                restored = ts.saturating_add(grace_ms).saturating_sub(for_ms);
            } else {
                restored = restored.saturating_add(ts.saturating_sub(down_at));
            }
            a.active_at_ms = restored;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::file::RuleKind;

    fn rule() -> RuleSpec {
        RuleSpec {
            name: "Hot".into(),
            kind: RuleKind::Alert {
                for_ms: 3000,
                keep_firing_for_ms: 2000,
                annotations: BTreeMap::new(),
            },
            expr: "temp > 30".into(),
            query: "temp > 30".into(),
            labels: BTreeMap::from([("severity".into(), "{{ $labels.room }}-page".into())]),
        }
    }

    fn result(room: &str, v: f64) -> Labelled {
        (
            BTreeMap::from([
                ("__name__".into(), "temp".into()),
                ("room".into(), room.into()),
            ]),
            v,
        )
    }

    #[test]
    fn pending_firing_kept_firing_resolved_as_prometheus() {
        let (r, ex) = (rule(), Externals::default());
        let ann = BTreeMap::from([(
            "summary".into(),
            "{{ $value }} in {{ $labels.room }}".into(),
        )]);
        let mut a = AlertRule {
            restored: true,
            ..AlertRule::default()
        };
        let eval = |a: &mut AlertRule, on: bool, ts: i64| {
            let results = if on { vec![result("a", 31.0)] } else { vec![] };
            a.eval(&r, (3000, 2000), &ann, results, (ts, 0), (&ex, None))
                .expect("evaluates")
        };
        let out = eval(&mut a, true, 1000);
        assert_eq!(a.state(), AlertState::Pending);
        let alert = a.active.values().next().expect("alert").clone();
        assert_eq!(alert.labels["severity"], "a-page");
        assert_eq!(alert.labels["alertname"], "Hot");
        assert!(!alert.labels.contains_key("__name__"));
        assert_eq!(alert.annotations["summary"], "31 in a");
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].0["alertstate"], "pending");
        assert_eq!(
            out[1],
            (out[1].0.clone(), 1.0),
            "ALERTS_FOR_STATE: ActiveAt in s"
        );
        eval(&mut a, true, 3000);
        assert_eq!(a.state(), AlertState::Pending);
        let out = eval(&mut a, true, 4000);
        assert_eq!(a.state(), AlertState::Firing, "3 s of `for` passed");
        assert_eq!(out[0].0["alertstate"], "firing");
        // Gone: kept firing for 2 s, then resolved.
        eval(&mut a, false, 5000);
        assert_eq!(a.state(), AlertState::Firing);
        eval(&mut a, false, 6000);
        assert_eq!(a.state(), AlertState::Firing);
        let out = eval(&mut a, false, 7000);
        assert_eq!(a.state(), AlertState::Inactive);
        assert!(out.is_empty(), "no ALERTS for a resolved alert");
        assert!(a.active_alerts().is_empty());
        // Sent once resolved, with endsAt the resolution.
        let sent = a.to_send(7000, 1000, 60_000, "u");
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].starts_at_ms, sent[0].ends_at_ms), (4000, 7000));
        // Kept for 15 minutes, then let go.
        eval(&mut a, false, 7000 + RESOLVED_RETENTION_MS);
        assert_eq!(a.active.len(), 1);
        eval(&mut a, false, 7001 + RESOLVED_RETENTION_MS);
        assert!(a.active.is_empty());
        // A pending alert that goes is dropped at once.
        eval(&mut a, true, 100_000_000);
        eval(&mut a, false, 100_001_000);
        assert!(a.active.is_empty());
    }

    #[test]
    fn unrestored_rules_write_nothing_and_limits_and_duplicates_are_errors() {
        let (r, ex) = (rule(), Externals::default());
        let mut a = AlertRule::default();
        let none = BTreeMap::new();
        let out = a
            .eval(
                &r,
                (3000, 0),
                &none,
                vec![result("a", 1.0)],
                (0, 0),
                (&ex, None),
            )
            .expect("ok");
        assert!(out.is_empty());
        let err = a
            .eval(
                &r,
                (3000, 0),
                &none,
                vec![result("a", 1.0), result("b", 1.0)],
                (1, 1),
                (&ex, None),
            )
            .expect_err("limit");
        assert_eq!(err, "exceeded limit of 1 with 2 alerts");
        let mut same = rule();
        same.labels = BTreeMap::from([("room".into(), "x".into())]);
        let err = a
            .eval(
                &same,
                (3000, 0),
                &none,
                vec![result("a", 1.0), result("b", 1.0)],
                (2, 0),
                (&ex, None),
            )
            .expect_err("duplicate");
        assert!(err.contains("same labelset after applying alert labels"));
    }
}
