//! Prometheus' admin API, served only with `--web-enable-admin-api`
//! (alias `--web.enable-admin-api`): `snapshot` takes a snapshot of the
//! tenant's blocks and head; `delete_series` deletes samples (tombstones
//! in blocks, deleted ranges in the head) and `clean_tombstones` writes
//! the blocks again without them. Without the flag every admin endpoint
//! answers as Prometheus' do when its admin API is off: 500, error type
//! `unavailable`, `admin APIs disabled`.

use std::hash::{BuildHasher, Hasher};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::params::Params;
use super::prom::{error, success, ErrorType};
use super::state::AppState;
use super::tenant::Scoped;

fn prom(kind: ErrorType, message: impl Into<String>) -> ApiError {
    ApiError::Prom {
        kind,
        message: message.into(),
    }
}

/// `None` when the admin API is served, else Prometheus' refusal: error
/// type `unavailable` with status 500 (its mapping has no case for that
/// type), not the 503 Sluice gives a retryable `unavailable`: no retry
/// turns the API on.
fn refused(state: &AppState) -> Option<Response> {
    if state.inner.admin_api {
        return None;
    }
    let mut r = error(ErrorType::Unavailable, "admin APIs disabled");
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    Some(r)
}

/// A boolean as Go's `strconv.ParseBool` reads one.
fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// A snapshot's directory name, as Prometheus makes it: the UTC time to
/// the second, then 16 hex digits of a random non-negative 63-bit number.
fn snapshot_name(now: chrono::DateTime<chrono::Utc>) -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(now.timestamp_nanos_opt().unwrap_or_default());
    let random = h.finish() & (u64::MAX >> 1);
    format!("{}-{random:016x}", now.format("%Y%m%dT%H%M%SZ"))
}

/// `POST|PUT /api/v1/admin/tsdb/snapshot?skip_head=`: hard links of the
/// tenant's blocks, and its head written as a block unless `skip_head`,
/// under `<data dir>/snapshots/<name>`; answers the name.
pub(super) async fn snapshot(
    State(state): State<AppState>,
    Scoped(tenant): Scoped,
    p: Params,
) -> Result<Response, ApiError> {
    if let Some(r) = refused(&state) {
        return Ok(r);
    }
    let skip_head = match p.get("skip_head") {
        None | Some("") => false,
        Some(v) => parse_bool(v).ok_or_else(|| {
            ApiError::bad_param(
                "skip_head",
                format!(
                    "unable to parse boolean: strconv.ParseBool: parsing {v:?}: invalid syntax"
                ),
            )
        })?,
    };
    let Some(dir) = tenant.db.dir().map(std::path::Path::to_path_buf) else {
        return Err(prom(
            ErrorType::Internal,
            "create snapshot: this database has no data directory",
        ));
    };
    let now = chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now());
    let name = snapshot_name(now);
    let dest = dir.join("snapshots").join(&name);
    let now_ms = u64::try_from(state.now_ms()).unwrap_or(0);
    let db = std::sync::Arc::clone(&tenant.db);
    // Linking and writing the head block are blocking file work.
    let taken = tokio::task::spawn_blocking(move || db.snapshot(&dest, !skip_head, now_ms))
        .await
        .map_err(|e| prom(ErrorType::Internal, format!("create snapshot: {e}")))?;
    match taken {
        Ok(report) => {
            tracing::info!(
                snapshot = %name,
                blocks_linked = report.blocks_linked,
                head_block = ?report.head_block.map(|m| m.ulid.to_string()),
                "snapshot taken"
            );
            Ok(success(serde_json::json!({ "name": name }), &[]))
        }
        Err(e) => Err(prom(ErrorType::Internal, format!("create snapshot: {e}"))),
    }
}

/// `POST|PUT /api/v1/admin/tsdb/delete_series?match[]=…&start=&end=`:
/// deletes the samples of the matching series in `[start, end]` (the
/// whole of time by default) from the tenant's blocks and head, as
/// Prometheus does; 204 once the deletion is durable.
pub(super) async fn delete_series(
    State(state): State<AppState>,
    Scoped(tenant): Scoped,
    p: Params,
) -> Result<Response, ApiError> {
    if let Some(r) = refused(&state) {
        return Ok(r);
    }
    if p.all("match[]").next().is_none() {
        return Err(ApiError::bad_data("no match[] parameter provided"));
    }
    let (start, end) = p.time_range()?;
    // Every selector is read before anything is deleted.
    let selectors = p.selectors(&state.query_options().parse)?;
    let shown: Vec<String> = p.all("match[]").map(str::to_owned).collect();
    let db = std::sync::Arc::clone(&tenant.db);
    // Tombstone files are written and fsynced: blocking work.
    let done = tokio::task::spawn_blocking(move || db.delete(&selectors, start, end))
        .await
        .map_err(|e| prom(ErrorType::Internal, format!("delete series: {e}")))?
        .map_err(|e| prom(ErrorType::Internal, format!("delete series: {e}")))?;
    let (block_series, head_series) = (done.block_series, done.head_series);
    done.commit
        .durable()
        .await
        .map_err(|e| prom(ErrorType::Internal, format!("delete series: {e}")))?;
    tracing::info!(
        tenant = %tenant.id,
        selectors = ?shown,
        start,
        end,
        block_series,
        head_series,
        "series deleted"
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST|PUT /api/v1/admin/tsdb/clean_tombstones`: writes the tenant's
/// blocks that have tombstones again without the samples they delete;
/// 204 when done.
pub(super) async fn clean_tombstones(
    State(state): State<AppState>,
    Scoped(tenant): Scoped,
) -> Result<Response, ApiError> {
    if let Some(r) = refused(&state) {
        return Ok(r);
    }
    let now_ms = u64::try_from(state.now_ms()).unwrap_or(0);
    let db = std::sync::Arc::clone(&tenant.db);
    let cleaned = tokio::task::spawn_blocking(move || db.clean_tombstones(now_ms))
        .await
        .map_err(|e| prom(ErrorType::Internal, format!("clean tombstones: {e}")))?
        .map_err(|e| prom(ErrorType::Internal, format!("clean tombstones: {e}")))?;
    tracing::info!(tenant = %tenant.id, blocks = cleaned.len(), "tombstones cleaned");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_read_as_go_reads_them() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_bool(f), Some(false), "{f}");
        }
        for bad in ["yes", "tRue", "2", " true"] {
            assert_eq!(parse_bool(bad), None, "{bad}");
        }
    }

    #[test]
    fn snapshot_names_are_the_utc_second_and_63_random_bits() {
        let t = chrono::DateTime::parse_from_rfc3339("2017-12-10T21:12:24.5Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .expect("time");
        let a = snapshot_name(t);
        let (time, hex) = a.split_once('-').expect("dash");
        assert_eq!(time, "20171210T211224Z");
        assert_eq!(hex.len(), 16);
        let n = u64::from_str_radix(hex, 16).expect("hex");
        assert!(n < 1 << 63);
        assert_ne!(a, snapshot_name(t), "two snapshots in one second differ");
    }
}
