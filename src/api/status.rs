//! Health, readiness and self-metrics endpoints.

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;

use super::AppState;

/// `GET /-/healthy`: the process is up.
pub(super) async fn healthy() -> &'static str {
    "Sluice is Healthy.\n"
}

/// `GET /-/ready`: ready to take writes and queries.
pub(super) async fn ready() -> &'static str {
    "Sluice is Ready.\n"
}

/// `GET /metrics`: self-metrics, in OpenMetrics when the scraper asks for
/// it, else in the Prometheus text format 0.0.4.
pub(super) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let wants_om = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let m = &state.inner.metrics;
    if wants_om {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            m.encode_openmetrics(),
        )
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            m.encode_text(),
        )
    }
}
