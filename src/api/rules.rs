//! `GET /api/v1/rules`: the rule groups in force and how their last
//! evaluations went, in Prometheus' shape (`web/api/v1/api.go`), with its
//! filters (`type`, `rule_name[]`, `rule_group[]`, `file[]`, `match[]`,
//! `exclude_alerts`) and pagination (`group_limit`, `group_next_token`).

use std::collections::HashSet;

use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::params::Params;
use super::prom::success;
use super::state::AppState;
use super::tenant::Scoped;
use crate::rules::alerting::Alert;
use crate::rules::file::RuleKind;
use crate::storage::index::Matcher;

/// A time as Go's RFC3339Nano writes it (`0001-01-01T00:00:00Z` for
/// never): fractional seconds without trailing zeros.
fn go_time(ms: i64) -> String {
    if ms == 0 {
        return "0001-01-01T00:00:00Z".into();
    }
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms).unwrap_or_default();
    let mut s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = ms.rem_euclid(1000);
    if frac != 0 {
        let digits = format!("{frac:03}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// A float as Go's `strconv.FormatFloat(v, 'e', -1, 64)` writes it:
/// `1e+00`, `1.5e+01`.
fn go_e(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let s = format!("{v:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// An alert as the API shows it.
fn alert_json(a: &Alert) -> Value {
    let mut o = Map::new();
    o.insert("labels".into(), json!(a.labels));
    o.insert("annotations".into(), json!(a.annotations));
    o.insert("state".into(), json!(a.state.as_str()));
    o.insert("activeAt".into(), json!(go_time(a.active_at_ms)));
    if let Some(since) = a.keep_firing_since_ms {
        o.insert("keepFiringSince".into(), json!(go_time(since)));
    }
    o.insert("value".into(), json!(go_e(a.value)));
    Value::Object(o)
}

/// `GET /api/v1/alerts`: every alert pending or firing, as Prometheus
/// lists them.
pub(super) async fn alerts(
    State(state): State<AppState>,
    Scoped(tenant): Scoped,
) -> Result<Response, ApiError> {
    let mut alerts = Vec::new();
    for set in sets_of(&state, &tenant) {
        for g in set.groups() {
            for st in &g.status.rules {
                alerts.extend(st.alerts.iter().map(alert_json));
            }
        }
    }
    Ok(success(json!({ "alerts": alerts }), &[]))
}

/// The rule sets that run over the request's tenant: none for a tenant
/// that is not open (the empty stand-in read in its place carries no ID
/// of its own), as a tenant with rules is held open.
fn sets_of(
    state: &AppState,
    tenant: &super::tenant::Tenant,
) -> Vec<std::sync::Arc<crate::rules::Rules>> {
    match tenant.stand_in {
        true => Vec::new(),
        false => state.rule_sets().of(tenant.id.as_str()),
    }
}

/// A group's pagination token, as Prometheus makes it: the hex SHA-1 of
/// `file;name`.
fn token(file: &str, name: &str) -> String {
    use sha1::Digest;
    let sum = sha1::Sha1::digest(format!("{file};{name}").as_bytes());
    sum.iter().map(|b| format!("{b:02x}")).collect()
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::bad_data(message.into())
}

/// Whether `labels` satisfy any of `sets` (every matcher of one set).
fn matches(sets: &[Vec<Matcher>], labels: &std::collections::BTreeMap<String, String>) -> bool {
    sets.is_empty()
        || sets.iter().any(|set| {
            set.iter()
                .all(|m| m.matches(labels.get(&m.name).map_or("", String::as_str)))
        })
}

/// `GET /api/v1/rules`.
pub(super) async fn rules(
    State(state): State<AppState>,
    Scoped(tenant): Scoped,
    p: Params,
) -> Result<Response, ApiError> {
    let kind = match p.get("type").map(str::to_lowercase).as_deref() {
        None | Some("") => None,
        Some("alert") => Some(true),
        Some("record") => Some(false),
        Some(other) => {
            return Err(ApiError::bad_param(
                "type",
                format!("not supported value {other:?}"),
            ))
        }
    };
    let set = |key: &str| -> HashSet<String> { p.all(key).map(str::to_owned).collect() };
    let (names, group_names, files) = (set("rule_name[]"), set("rule_group[]"), set("file[]"));
    let sets = p.selectors(&state.query_options().parse)?;
    if sets.iter().any(|s| s.iter().all(|m| m.matches(""))) {
        return Err(bad("match[] must contain at least one non-empty matcher"));
    }
    let exclude_alerts = match p.get("exclude_alerts") {
        None | Some("") => false,
        Some(v) => match v {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => {
                return Err(bad(format!(
                "error converting exclude_alerts: strconv.ParseBool: parsing {v:?}: invalid syntax"
            )))
            }
        },
    };
    let next_token = p.get("group_next_token").filter(|t| !t.is_empty());
    let limit = match p.get("group_limit").filter(|l| !l.is_empty()) {
        None if next_token.is_some() => {
            return Err(bad(
                "group_limit needs to be present in order to paginate over the groups",
            ))
        }
        None => None,
        Some(l) => match l.parse::<i64>() {
            Err(_) => {
                return Err(bad(format!(
                    "group_limit needs to be a valid number: strconv.Atoi: parsing {l:?}: invalid syntax"
                )))
            }
            Ok(n) if n <= 0 => return Err(bad("group_limit needs to be greater than 0")),
            Ok(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        },
    };
    let mut groups = Vec::new();
    let mut found_token = next_token.is_none();
    let mut next = None;
    // The tenant's groups, from each set that runs over it, by file then
    // name as Prometheus lists them.
    let mut groups_in_force: Vec<_> = sets_of(&state, &tenant)
        .iter()
        .flat_map(|set| set.groups())
        .collect();
    groups_in_force.sort_by(|a, b| (&a.spec.file, &a.spec.name).cmp(&(&b.spec.file, &b.spec.name)));
    for g in groups_in_force {
        let spec = &g.spec;
        if !found_token {
            if Some(token(&spec.file, &spec.name).as_str()) != next_token {
                continue;
            }
            found_token = true;
        }
        if (!group_names.is_empty() && !group_names.contains(&spec.name))
            || (!files.is_empty() && !files.contains(&spec.file))
        {
            continue;
        }
        let mut rules = Vec::new();
        for (i, r) in spec.rules.iter().enumerate() {
            let alerting = !matches!(r.kind, RuleKind::Record);
            if kind.is_some_and(|want_alerts| want_alerts != alerting)
                || (!names.is_empty() && !names.contains(&r.name))
                || !matches(&sets, &r.labels)
            {
                continue;
            }
            let st = g.status.rules.get(i).cloned().unwrap_or_default();
            let labels: Map<String, Value> = r
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let mut rule = Map::new();
            match &r.kind {
                RuleKind::Record => {
                    rule.insert("name".into(), json!(r.name));
                    rule.insert("query".into(), json!(r.query));
                    if !labels.is_empty() {
                        rule.insert("labels".into(), Value::Object(labels));
                    }
                }
                RuleKind::Alert {
                    for_ms,
                    keep_firing_for_ms,
                    annotations,
                } => {
                    rule.insert("state".into(), json!(st.alert_state.as_str()));
                    rule.insert("name".into(), json!(r.name));
                    rule.insert("query".into(), json!(r.query));
                    rule.insert("duration".into(), json!(*for_ms as f64 / 1000.0));
                    rule.insert(
                        "keepFiringFor".into(),
                        json!(*keep_firing_for_ms as f64 / 1000.0),
                    );
                    rule.insert("labels".into(), Value::Object(labels));
                    rule.insert("annotations".into(), json!(annotations));
                    rule.insert(
                        "alerts".into(),
                        if exclude_alerts {
                            Value::Null
                        } else {
                            Value::Array(st.alerts.iter().map(alert_json).collect())
                        },
                    );
                }
            }
            rule.insert("health".into(), json!(st.health.as_str()));
            if !st.last_error.is_empty() {
                rule.insert("lastError".into(), json!(st.last_error));
            }
            rule.insert("evaluationTime".into(), json!(st.evaluation_seconds));
            rule.insert(
                "lastEvaluation".into(),
                json!(go_time(st.last_evaluation_ms)),
            );
            rule.insert(
                "type".into(),
                json!(if alerting { "alerting" } else { "recording" }),
            );
            rules.push(Value::Object(rule));
        }
        if rules.is_empty() {
            continue;
        }
        if limit.is_some_and(|l| groups.len() >= l) {
            next = Some(token(&spec.file, &spec.name));
            break;
        }
        groups.push(json!({
            "name": spec.name,
            "file": spec.file,
            "rules": rules,
            "interval": g.interval_ms as f64 / 1000.0,
            "limit": g.limit,
            "evaluationTime": g.status.evaluation_seconds,
            "lastEvaluation": go_time(g.status.last_evaluation_ms),
        }));
    }
    if !found_token {
        return Err(bad(format!(
            "invalid group_next_token '{}'. were rule groups changed?",
            next_token.unwrap_or_default()
        )));
    }
    let mut data = json!({ "groups": groups });
    if let Some(t) = next {
        data["groupNextToken"] = json!(t);
    }
    Ok(success(data, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_tokens_are_written_as_prometheus_writes_them() {
        assert_eq!(go_time(0), "0001-01-01T00:00:00Z");
        assert_eq!(go_time(1_700_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(go_time(1_700_000_000_500), "2023-11-14T22:13:20.5Z");
        assert_eq!(go_time(1_700_000_000_012), "2023-11-14T22:13:20.012Z");
        assert_eq!(go_e(1.0), "1e+00");
        assert_eq!(go_e(15.0), "1.5e+01");
        assert_eq!(go_e(0.001), "1e-03");
        // sha1("f;g")
        assert_eq!(token("f", "g"), "deb1bdf5e6f90ca38e6bcae5d4468f913c92c921");
    }
}
