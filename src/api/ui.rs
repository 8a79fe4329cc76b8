//! The pages a person opens: `/query` (Prometheus 3's query page links:
//! `g0.expr`, `g0.tab`, `g0.range_input`, …), `/graph` redirecting there as
//! Prometheus' does, `/alerts` and `/rules` (the tenant's rule groups, as
//! Prometheus' pages of those names), and their scripts and styles. The assets live in
//! `src/ui/` and are compiled into the binary: the page needs no network
//! beyond this server and no build tool.

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::state::AppState;

const PAGE_HTML: &str = include_str!("../ui/page.html");
const QUERY_HTML: &str = include_str!("../ui/query.html");
const TSDB_STATUS_HTML: &str = include_str!("../ui/tsdb-status.html");
const COMMON_JS: &str = include_str!("../ui/common.js");
const QUERY_JS: &str = include_str!("../ui/query.js");
const TSDB_STATUS_JS: &str = include_str!("../ui/tsdb-status.js");
const RULES_HTML: &str = include_str!("../ui/rules.html");
const ALERTS_HTML: &str = include_str!("../ui/alerts.html");
const RULES_JS: &str = include_str!("../ui/rules.js");
const SLUICE_CSS: &str = include_str!("../ui/sluice.css");

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

/// The pages the navigation bar links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nav {
    Query,
    Alerts,
    Rules,
    Tsdb,
}

/// A page: the shell (navigation, tenant box, settings, shared script)
/// around `body`, running `script`.
fn page(state: &AppState, title: &str, here: Nav, body: &str, script: &str) -> Response {
    let mark = |n: Nav| if n == here { r#" class="here""# } else { "" };
    let html = PAGE_HTML
        .replace("{{TITLE}}", title)
        .replace("{{HERE_QUERY}}", mark(Nav::Query))
        .replace("{{HERE_ALERTS}}", mark(Nav::Alerts))
        .replace("{{HERE_RULES}}", mark(Nav::Rules))
        .replace("{{HERE_TSDB}}", mark(Nav::Tsdb))
        .replace("{{HERE_STATUS}}", "")
        .replace(
            "{{TENANT_HIDDEN}}",
            if state.tenants().multitenancy() {
                ""
            } else {
                "hidden"
            },
        )
        .replace("{{SCRIPT}}", script)
        .replace("{{VERSION}}", env!("CARGO_PKG_VERSION"))
        .replace("{{BODY}}", body)
        .replace("{{SETTINGS}}", &settings(state));
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        html,
    )
        .into_response()
}

/// `GET /query`: the query page.
pub(super) async fn query_page(State(state): State<AppState>) -> Response {
    page(&state, "Query", Nav::Query, QUERY_HTML, "query.js")
}

/// `GET /tsdb-status`: cardinality, from `/api/v1/status/tsdb`.
pub(super) async fn tsdb_status_page(State(state): State<AppState>) -> Response {
    page(
        &state,
        "TSDB status",
        Nav::Tsdb,
        TSDB_STATUS_HTML,
        "tsdb-status.js",
    )
}

/// `GET /rules`: the tenant's rule groups and each rule's health.
pub(super) async fn rules_page(State(state): State<AppState>) -> Response {
    page(&state, "Rules", Nav::Rules, RULES_HTML, "rules.js")
}

/// `GET /alerts`: the tenant's alerting rules by state, with their alerts.
pub(super) async fn alerts_page(State(state): State<AppState>) -> Response {
    page(&state, "Alerts", Nav::Alerts, ALERTS_HTML, "rules.js")
}

/// `GET /graph`: Prometheus 3 moved its page to `/query`; old links keep
/// their query string.
pub(super) async fn graph_redirect(RawQuery(query): RawQuery) -> Response {
    let to = format!("/query?{}", query.unwrap_or_default());
    (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
}

/// `GET /assets/<name>`: the pages' scripts and style.
pub(super) async fn asset(axum::extract::Path(name): axum::extract::Path<String>) -> Response {
    let (kind, body) = match name.as_str() {
        "common.js" => ("text/javascript; charset=utf-8", COMMON_JS),
        "query.js" => ("text/javascript; charset=utf-8", QUERY_JS),
        "tsdb-status.js" => ("text/javascript; charset=utf-8", TSDB_STATUS_JS),
        "rules.js" => ("text/javascript; charset=utf-8", RULES_JS),
        "sluice.css" => ("text/css; charset=utf-8", SLUICE_CSS),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    served(kind, body)
}

fn served(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}
