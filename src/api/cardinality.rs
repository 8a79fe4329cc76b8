//! `GET /api/v1/status/tsdb`: the cardinality of what a tenant holds.
//!
//! Without time parameters it answers as Prometheus 3.5 does: the series
//! in the head, with `headStats` and the four top lists, `limit` rows each
//! (default 10). Beyond Prometheus, as VictoriaMetrics' endpoint of the
//! same name: `match[]` narrows the series counted; `start`/`end` (or
//! `date=YYYY-MM-DD`, one UTC day) count every series with samples in that
//! range, in blocks too; `focusLabel` adds the series by each value of that
//! label; `topN` is read as `limit`; and the totals and series by label
//! name are always given.

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;

use super::error::ApiError;
use super::metadata::read;
use super::params::Params;
use super::prom::success_within;
use super::state::AppState;
use super::tenant::Reads;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use crate::storage::index::Matcher;
use crate::storage::labels::Label;
use crate::storage::querier::{Counter, Stat};
use crate::storage::{Querier, Stop, Stopped};

/// The rows a list may be asked for (Prometheus 3.9's cap).
const MAX_LIMIT: usize = 10_000;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct HeadStats {
    num_series: u64,
    num_label_pairs: u64,
    chunk_count: u64,
    min_time: i64,
    max_time: i64,
}

#[derive(Serialize)]
struct Row {
    name: String,
    value: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TsdbStatus {
    head_stats: HeadStats,
    series_count_by_metric_name: Vec<Row>,
    label_value_count_by_label_name: Vec<Row>,
    memory_in_bytes_by_label_name: Vec<Row>,
    series_count_by_label_value_pair: Vec<Row>,
    total_series: u64,
    total_label_value_pairs: u64,
    series_count_by_label_name: Vec<Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    series_count_by_focus_label_value: Option<Vec<Row>>,
}

fn rows(stats: Vec<Stat>) -> Vec<Row> {
    stats
        .into_iter()
        .map(|s| Row {
            name: s.name,
            value: s.value,
        })
        .collect()
}

/// `limit` (or VictoriaMetrics' `topN`): a whole number from 1 to
/// [`MAX_LIMIT`], 10 when absent.
fn limit(p: &Params) -> Result<usize, ApiError> {
    let Some(v) = p.get("limit").or_else(|| p.get("topN")) else {
        return Ok(10);
    };
    match v.trim_start_matches('+').parse::<usize>() {
        Ok(n) if n > MAX_LIMIT => Err(ApiError::bad_data(format!(
            "limit must not exceed {MAX_LIMIT}"
        ))),
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ApiError::bad_data("limit must be a positive number")),
    }
}

/// The time range to count over: `None` for the head alone (no `start`,
/// `end` or `date`).
fn range(p: &Params) -> Result<Option<(i64, i64)>, ApiError> {
    if let Some(d) = p.get("date") {
        let day = chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d").map_err(|e| {
            ApiError::bad_param("date", format!("cannot parse {d:?} as YYYY-MM-DD: {e}"))
        })?;
        let start = day
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc().timestamp_millis())
            .ok_or_else(|| ApiError::bad_param("date", "out of range"))?;
        return Ok(Some((start, start + 86_400_000 - 1)));
    }
    if p.get("start").is_none() && p.get("end").is_none() {
        return Ok(None);
    }
    let (start, end) = p.time_range()?;
    if end < start {
        return Err(ApiError::bad_param(
            "end",
            "end timestamp must not be before start time",
        ));
    }
    Ok(Some((start, end)))
}

/// Counts the series matching any of `selectors` (all when none), each
/// once, into `counter`: over the head, or over head and blocks in
/// `range`. Nothing is kept per series but, where a series may come
/// twice (several selectors, or a range that blocks and head both hold),
/// a hash of its labels.
fn gather(
    q: Querier<'_>,
    selectors: &[Vec<Matcher>],
    range: Option<(i64, i64)>,
    stop: &Stop<'_>,
    counter: &mut Counter,
) -> Result<(), Stopped> {
    let dedupe = selectors.len() > 1 || range.is_some();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut add = |labels: Vec<Label>| {
        if !dedupe || seen.insert(hash_of(&labels)) {
            counter.add(&labels);
        }
    };
    let all: [Vec<Matcher>; 1] = [Vec::new()];
    let selectors = if selectors.is_empty() {
        &all[..]
    } else {
        selectors
    };
    for m in selectors {
        match range {
            None => q.for_each_head_labels(m, stop, &mut add)?,
            Some(r) => q.for_each_series_labels(m, r, stop, &mut add)?,
        }
    }
    Ok(())
}

fn hash_of(labels: &[Label]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    labels.hash(&mut h);
    h.finish()
}

/// `GET /api/v1/status/tsdb`.
pub(super) async fn tsdb_status(
    State(state): State<AppState>,
    reads: Reads,
    p: Params,
) -> Result<Response, ApiError> {
    let limit = limit(&p)?;
    let range = range(&p)?;
    let selectors = p.selectors(&state.query_options().parse)?;
    let focus = p
        .get("focusLabel")
        .filter(|f| !f.is_empty())
        .map(str::to_owned);
    let max = state.max_response_bytes();
    read(&state, move |stop| {
        let (mut series, mut chunks, mut span) = (0u64, 0u64, None::<(i64, i64)>);
        for (_, t) in reads.open_tenants() {
            let st = t.db.head_stats();
            series += st.series as u64;
            chunks += st.chunks as u64;
            if let Some((lo, hi)) = t.db.head_span() {
                span = Some(span.map_or((lo, hi), |(a, b)| (a.min(lo), b.max(hi))));
            }
        }
        let filtered = range.is_some() || !selectors.is_empty();
        let (c, head_pairs) = reads.with_querier(|q| -> Result<_, Stopped> {
            let mut counter = Counter::default();
            gather(q, &selectors, range, stop, &mut counter)?;
            // headStats describe the whole head, whatever is counted.
            let head_pairs = if filtered {
                let mut head = Counter::default();
                gather(q, &[], None, stop, &mut head)?;
                head.label_pairs()
            } else {
                counter.label_pairs()
            };
            Ok((counter.top(limit, focus.as_deref()), head_pairs))
        })?;
        let status = TsdbStatus {
            head_stats: HeadStats {
                num_series: series,
                num_label_pairs: head_pairs,
                chunk_count: chunks,
                // An empty head reports Prometheus' empty range.
                min_time: span.map_or(i64::MAX, |s| s.0),
                max_time: span.map_or(i64::MIN, |s| s.1),
            },
            series_count_by_metric_name: rows(c.series_by_metric_name),
            label_value_count_by_label_name: rows(c.value_count_by_label_name),
            memory_in_bytes_by_label_name: rows(c.memory_by_label_name),
            series_count_by_label_value_pair: rows(c.series_by_label_value_pair),
            total_series: c.total_series,
            total_label_value_pairs: c.total_label_value_pairs,
            series_count_by_label_name: rows(c.series_by_label_name),
            series_count_by_focus_label_value: c.series_by_focus_value.map(rows),
        };
        Ok(success_within(status, &[], max)?)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::from_pairs(pairs)
    }

    #[test]
    fn limits_are_positive_whole_numbers_up_to_the_cap() {
        assert_eq!(limit(&params(&[])).ok(), Some(10));
        assert_eq!(limit(&params(&[("limit", "3")])).ok(), Some(3));
        assert_eq!(limit(&params(&[("topN", "7")])).ok(), Some(7));
        assert_eq!(limit(&params(&[("limit", "+5")])).ok(), Some(5));
        assert_eq!(limit(&params(&[("limit", "10000")])).ok(), Some(10_000));
        // Empty is absent, as Prometheus reads it.
        assert_eq!(limit(&params(&[("limit", "")])).ok(), Some(10));
        for bad in ["0", "-1", "1.5", "abc"] {
            let e = limit(&params(&[("limit", bad)])).err();
            assert!(
                e.as_ref()
                    .is_some_and(|e| format!("{e:?}").contains("positive number")),
                "{bad}: {e:?}"
            );
        }
        let e = limit(&params(&[("limit", "10001")])).err();
        assert!(format!("{e:?}").contains("must not exceed 10000"), "{e:?}");
    }

    #[test]
    fn a_date_is_one_utc_day_and_no_time_is_the_head() {
        assert_eq!(range(&params(&[])).ok(), Some(None));
        assert_eq!(
            range(&params(&[("date", "2026-12-07")])).ok(),
            Some(Some((1_796_601_600_000, 1_796_687_999_999)))
        );
        assert!(range(&params(&[("date", "07/12/2026")])).is_err());
        assert_eq!(
            range(&params(&[("start", "10"), ("end", "20")])).ok(),
            Some(Some((10_000, 20_000)))
        );
        assert!(range(&params(&[("start", "20"), ("end", "10")])).is_err());
    }
}
