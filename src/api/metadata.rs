//! The metadata endpoints Grafana's label and metric browsers call:
//! series, label names, label values, metric metadata, build info, and
//! exemplars.

use std::collections::{BTreeMap, BTreeSet};

use axum::extract::{Path, State};
use axum::response::Response;
use serde::Serialize;

use super::error::ApiError;
use super::escaping::unescape_values;
use super::params::Params;
use super::prom::{success, success_within};
use super::state::AppState;
use super::tenant::Reads;
use super::tenant::Scoped;
use crate::storage::labels::Label;
use crate::storage::Stop;

fn truncated(n: usize, limit: usize) -> Vec<String> {
    if limit > 0 && n > limit {
        vec!["results truncated due to limit".to_owned()]
    } else {
        Vec::new()
    }
}

/// `GET|POST /api/v1/series?match[]=…&start=&end=&limit=`
pub(super) async fn series(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let selectors = p.selectors(&state.query_options().parse)?;
    if selectors.is_empty() {
        return Err(ApiError::bad_data("no match[] parameter provided"));
    }
    let (start, end) = p.time_range()?;
    let limit = p.limit("limit")?;
    let max = state.max_response_bytes();
    read(&state, move |stop| {
        let mut sets: BTreeSet<Vec<Label>> = BTreeSet::new();
        reads.with_querier(|q| -> Result<(), crate::storage::Stopped> {
            for m in &selectors {
                sets.extend(q.series_labels(m, start, end, stop)?);
            }
            Ok(())
        })?;
        let warnings = truncated(sets.len(), limit);
        let take = if limit == 0 { usize::MAX } else { limit };
        let data: Vec<BTreeMap<&str, &str>> = sets
            .iter()
            .take(take)
            .map(|ls| {
                ls.iter()
                    .map(|l| (l.name.as_str(), l.value.as_str()))
                    .collect()
            })
            .collect();
        Ok(success_within(data, &warnings, max)?)
    })
    .await
}

/// `GET|POST /api/v1/labels?match[]=…&start=&end=&limit=`
pub(super) async fn labels(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let selectors = p.selectors(&state.query_options().parse)?;
    let (start, end) = p.time_range()?;
    let limit = p.limit("limit")?;
    let max = state.max_response_bytes();
    read(&state, move |stop| {
        let mut names = BTreeSet::new();
        reads.with_querier(|q| -> Result<(), crate::storage::Stopped> {
            if selectors.is_empty() {
                names = q.label_names(&[], start, end, stop)?;
            }
            for m in &selectors {
                names.extend(q.label_names(m, start, end, stop)?);
            }
            Ok(())
        })?;
        limited(names, limit, max)
    })
    .await
}

/// `GET /api/v1/label/<name>/values?match[]=…&start=&end=&limit=`
pub(super) async fn label_values(
    State(state): State<AppState>,
    reads: Reads,
    Path(name): Path<String>,
    p: Params,
) -> Result<Response, ApiError> {
    // A UTF-8 name may come in the `U__` form; any non-empty UTF-8 name
    // is valid, as in Prometheus 3.
    let name = unescape_values(&name).into_owned();
    if name.is_empty() {
        return Err(ApiError::bad_data(format!("invalid label name: {name:?}")));
    }
    let selectors = p.selectors(&state.query_options().parse)?;
    let (start, end) = p.time_range()?;
    let limit = p.limit("limit")?;
    let max = state.max_response_bytes();
    read(&state, move |stop| {
        let mut values = BTreeSet::new();
        reads.with_querier(|q| -> Result<(), crate::storage::Stopped> {
            if selectors.is_empty() {
                values = q.label_values(&name, &[], start, end, stop)?;
            }
            for m in &selectors {
                values.extend(q.label_values(&name, m, start, end, stop)?);
            }
            Ok(())
        })?;
        limited(values, limit, max)
    })
    .await
}

/// Runs `f` on a query slot within the query timeout: walking the index
/// is CPU work that would stall the async workers (and the writes on them).
pub(super) async fn read(
    state: &AppState,
    f: impl FnOnce(&Stop<'_>) -> Result<Response, ApiError> + Send + 'static,
) -> Result<Response, ApiError> {
    state
        .read(state.query_options().timeout, move |flag| {
            f(&Stop {
                flag: Some(&flag),
                bytes: None,
                deadline: None,
            })
        })
        .await
}

fn limited(set: BTreeSet<String>, limit: usize, max: usize) -> Result<Response, ApiError> {
    let warnings = truncated(set.len(), limit);
    let take = if limit == 0 { usize::MAX } else { limit };
    Ok(success_within(
        set.into_iter().take(take).collect::<Vec<_>>(),
        &warnings,
        max,
    )?)
}

#[derive(Serialize)]
struct MetadataEntry<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    help: &'a str,
    unit: &'a str,
}

/// `GET /api/v1/metadata?metric=&limit=&limit_per_metric=`
pub(super) async fn metadata(Scoped(tenant): Scoped, p: Params) -> Result<Response, ApiError> {
    let limit = p.limit_or_unlimited("limit")?;
    let per_metric = p.limit_or_unlimited("limit_per_metric")?;
    let list = tenant
        .db
        .metadata()
        .list(p.get("metric"), limit, per_metric);
    let data: BTreeMap<&str, Vec<MetadataEntry<'_>>> = list
        .iter()
        .map(|(name, entries)| {
            let entries = entries
                .iter()
                .map(|m| MetadataEntry {
                    kind: m.kind,
                    help: &m.help,
                    unit: &m.unit,
                })
                .collect();
            (name.as_str(), entries)
        })
        .collect();
    Ok(success(data, &[]))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BuildInfo {
    version: &'static str,
    revision: &'static str,
    branch: &'static str,
    build_user: &'static str,
    build_date: &'static str,
    go_version: &'static str,
}

/// `GET /api/v1/status/buildinfo`. No `features` field: Grafana then
/// treats Sluice as Prometheus rather than Mimir.
pub(super) async fn buildinfo() -> Response {
    success(
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            revision: "",
            branch: "",
            build_user: "",
            build_date: "",
            go_version: "",
        },
        &[],
    )
}

/// `GET|POST /api/v1/query_exemplars?query=&start=&end=`: the stored
/// exemplars of every series a selector of `query` matches, in
/// Prometheus' shape (`seriesLabels`, `exemplars[{labels,value,timestamp}]`).
pub(super) async fn query_exemplars(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let Some(query) = p.get("query") else {
        return Err(ApiError::bad_param("query", "query must not be empty"));
    };
    let (start, end) = p.time_range()?;
    // Parsing recurses: on a query thread, whose stack fits the deepest
    // query the limits let through.
    let limits = state.query_options().parse;
    let query = query.to_owned();
    let sets = state
        .read(state.query_options().timeout, move |_| {
            let expr = crate::promql::guard::parse(&query, &limits)
                .map_err(|e| ApiError::bad_param("query", e))?;
            let mut sets = Vec::new();
            for vs in crate::promql::vector_selectors(&expr) {
                sets.extend(
                    crate::promql::selector_matchers(vs)
                        .map_err(|e| ApiError::bad_param("query", e))?,
                );
            }
            Ok(sets)
        })
        .await?;
    let found = match &reads {
        Reads::One(tenant) => tenant.db.exemplars().select(&sets, start, end),
        // Federated: each tenant's, chosen and labelled as its series are.
        Reads::Many(list) => {
            use crate::storage::querier::{tag_pairs, tenant_chosen, tenant_down};
            let mut all = Vec::new();
            for (id, tenant) in list.iter() {
                let asked: Vec<Vec<_>> = sets
                    .iter()
                    .filter(|m| tenant_chosen(m, id.as_str()))
                    .map(|m| tenant_down(m, true))
                    .collect();
                if asked.is_empty() {
                    continue;
                }
                for mut s in tenant.db.exemplars().select(&asked, start, end) {
                    tag_pairs(&mut s.series, id.as_str());
                    all.push(s);
                }
            }
            all.sort_by(|a, b| a.series.cmp(&b.series));
            all
        }
    };
    let pairs = |l: &[(String, String)]| -> serde_json::Map<String, serde_json::Value> {
        l.iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone())))
            .collect()
    };
    let data: Vec<serde_json::Value> = found
        .iter()
        .map(|s| {
            serde_json::json!({
                "seriesLabels": pairs(&s.series),
                "exemplars": s.exemplars.iter().map(|e| {
                    let mut value = String::new();
                    crate::promql::value::format_float(e.value, &mut value);
                    serde_json::json!({
                        "labels": pairs(&e.labels),
                        "value": value,
                        "timestamp": e.t as f64 / 1000.0,
                    })
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(success(data, &[]))
}
