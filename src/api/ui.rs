//! The pages a person opens: `/query` (Prometheus 3's query page links:
//! `g0.expr`, `g0.tab`, `g0.range_input`, …), `/graph` redirecting there as
//! Prometheus' does, and their scripts and styles. The assets live in
//! `src/ui/` and are compiled into the binary: the page needs no network
//! beyond this server and no build tool.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::state::AppState;

const QUERY_HTML: &str = include_str!("../ui/query.html");
const QUERY_JS: &str = include_str!("../ui/query.js");
const QUERY_CSS: &str = include_str!("../ui/query.css");

/// What the page is told at load: the PromQL functions for completion
/// (from the parser's own table), and how to name a tenant.
fn settings(state: &AppState) -> String {
    let functions: Vec<serde_json::Value> = crate::promql::parser::function::all()
        .iter()
        .map(|f| {
            serde_json::json!({
                "name": f.name,
                "argTypes": f.arg_types.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "variadic": f.variadic,
                "returnType": f.return_type.to_string(),
                "experimental": f.experimental,
            })
        })
        .collect();
    let tenants = state.tenants();
    let json = serde_json::json!({
        "functions": functions,
        "multitenant": tenants.multitenancy(),
        "tenantHeader": tenants.header().as_str(),
    })
    .to_string();
    // Inside a <script> element: no `</` may end it early.
    json.replace("</", "<\\/")
}

/// `GET /query`: the query page.
pub(super) async fn query_page(State(state): State<AppState>) -> Response {
    let html = QUERY_HTML
        .replace("{{VERSION}}", env!("CARGO_PKG_VERSION"))
        .replace(
            "{{TENANT_HIDDEN}}",
            if state.tenants().multitenancy() {
                ""
            } else {
                "hidden"
            },
        )
        .replace("{{SETTINGS}}", &settings(&state));
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        html,
    )
        .into_response()
}

/// `GET /graph`: Prometheus 3 moved its page to `/query`; old links keep
/// their query string.
pub(super) async fn graph_redirect(RawQuery(query): RawQuery) -> Response {
    let to = format!("/query?{}", query.unwrap_or_default());
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// `GET /assets/query.js`.
pub(super) async fn query_js() -> Response {
    asset("text/javascript; charset=utf-8", QUERY_JS)
}

/// `GET /assets/query.css`.
pub(super) async fn query_css() -> Response {
    asset("text/css; charset=utf-8", QUERY_CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
