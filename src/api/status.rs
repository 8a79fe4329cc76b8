//! Health, readiness and self-metrics endpoints.

use axum::extract::State;
use axum::http::header;
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

/// `GET /metrics`: self-metrics in the OpenMetrics text format.
pub(super) async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.inner.metrics.encode(),
    )
}
