//! The HTTP edge: [`router`] wires the routes and tower layers, and
//! [`ApiError`] is the one mapping from errors to HTTP replies.

mod admin;
pub mod auth;
pub mod bucket;
mod cardinality;
mod error;
mod escaping;
mod federate;
pub mod limits;
mod metadata;
mod otlp;
pub mod params;
pub mod prom;
mod query;
mod read;
mod rules;
mod slots;
mod state;
mod status;
pub mod tenant;
mod ui;
mod write;

use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;

pub use error::ApiError;
use error::Fault;
pub use state::AppState;

/// The route pattern a request matched (axum's [`MatchedPath`]), as a
/// metric label value (`other` if a matched route had none). Patterns come only from the
/// router's own routes, a closed set, so each is kept once for the life of
/// the process and a request allocates nothing for its label.
fn route_label(path: Option<&MatchedPath>) -> &'static str {
    static SEEN: parking_lot::Mutex<Vec<&'static str>> = parking_lot::Mutex::new(Vec::new());
    let Some(path) = path.map(MatchedPath::as_str) else {
        return "other";
    };
    let mut seen = SEEN.lock();
    if let Some(&known) = seen.iter().find(|&&r| r == path) {
        return known;
    }
    let kept: &'static str = Box::leak(path.to_owned().into_boxed_str());
    seen.push(kept);
    kept
}

async fn observe(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let handler = route_label(req.extensions().get::<MatchedPath>());
    let start = Instant::now();
    let resp = next.run(req).await;
    state
        .inner
        .metrics
        .record_http(handler, resp.status().as_u16(), start.elapsed());
    if let Some(Fault(detail)) = resp.extensions().get::<Fault>() {
        tracing::error!(route = handler, status = resp.status().as_u16(), error = %detail, "request failed");
    }
    resp
}

/// Checks the login (when one is configured), then gives the request its
/// identity and its tenant; or the answer that refuses it.
async fn admit(state: &AppState, rules: &auth::Rules, req: &mut Request) -> Result<(), Response> {
    let identity = if rules.needs_login() && !auth::open_path(req.uri().path()) {
        match rules.check(req.headers().get(header::AUTHORIZATION)).await {
            Ok(user) => auth::Identity::User(user),
            Err(refusal) => {
                state
                    .inner
                    .metrics
                    .web()
                    .record_unauthorized(refusal.as_str());
                return Err(auth::refused(refusal));
            }
        }
    } else if let Some(auth::ClientCert(cn)) = req.extensions().get::<auth::ClientCert>() {
        // No login asked for: a verified client certificate names who
        // this is.
        auth::Identity::Certificate(std::sync::Arc::clone(cn))
    } else {
        auth::Identity::Anyone
    };
    let (ids, tenant) = state
        .inner
        .tenants
        .resolve(req.uri().path(), req.uri().query(), req.headers())
        .await
        .map_err(IntoResponse::into_response)?;
    let write = tenant::needs_write(req.uri().path());
    // A federated read needs each of its tenants.
    let limits = state.inner.tenant_limits.current();
    if let Some(id) = ids.iter().find(|id| !limits.allows(&identity, id, write)) {
        state.inner.metrics.web().record_forbidden();
        let user = identity.name();
        let what = if write { "write" } else { "read" };
        return Err(ApiError::Forbidden(format!(
            "user {user:?} may not {what} tenant {id} (identities in the runtime config file)"
        ))
        .into_response());
    }
    req.extensions_mut().insert(identity);
    if ids.is_empty() && req.uri().path() == "/" && state.inner.tenants.multitenancy() {
        req.extensions_mut().insert(tenant::Unchosen);
    }
    match tenant {
        tenant::Resolved::Read(scoped) => {
            req.extensions_mut().insert(scoped);
        }
        tenant::Resolved::Federated(federation) => {
            req.extensions_mut().insert(federation);
        }
        tenant::Resolved::Write(writer) => {
            req.extensions_mut().insert(writer);
        }
    }
    Ok(())
}

/// The middleware: checks the login (when one is configured), resolves the
/// tenant, and adds the configured headers to the answer, refusals
/// included.
async fn door(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let rules = state.inner.door.current();
    let mut resp = match admit(&state, &rules, &mut req).await {
        Ok(()) => next.run(req).await,
        Err(refused) => refused,
    };
    let headers = resp.headers_mut();
    for (name, value) in &rules.headers {
        headers.insert(name.clone(), value.clone());
    }
    resp
}

/// The application: every route, the body limit, the timeouts, the
/// request metrics, and the panic guard.
pub fn router(state: AppState) -> Router {
    let timeout = state.inner.request_timeout;
    // Reads enforce the query timeout themselves, inside evaluation, and
    // answer it in Prometheus' JSON; everything else gets the request
    // timeout (a timed-out write must be retried by the sender: 503).
    let reads = Router::new()
        .route("/api/v1/query", get(query::instant).post(query::instant))
        .route("/api/v1/query_range", get(query::range).post(query::range))
        .route(
            "/api/v1/format_query",
            get(query::format_query).post(query::format_query),
        )
        .route(
            "/api/v1/parse_query",
            get(query::parse_query).post(query::parse_query),
        )
        .route(
            "/api/v1/series",
            get(metadata::series).post(metadata::series),
        )
        .route(
            "/api/v1/labels",
            get(metadata::labels).post(metadata::labels),
        )
        .route("/api/v1/label/{name}/values", get(metadata::label_values))
        .route("/api/v1/status/tsdb", get(cardinality::tsdb_status))
        .route("/federate", get(federate::federate));
    let rest = Router::new()
        .route("/api/v1/write", post(write::remote_write))
        .route("/api/v1/read", post(read::remote_read))
        .route("/v1/metrics", post(otlp::export))
        .route("/api/v1/otlp/v1/metrics", post(otlp::export))
        .route("/api/v1/metadata", get(metadata::metadata))
        .route("/api/v1/status/buildinfo", get(metadata::buildinfo))
        .route("/api/v1/status/config", get(status::config))
        .route("/api/v1/rules", get(rules::rules))
        .route("/api/v1/alerts", get(rules::alerts))
        .route("/api/v1/status/flags", get(status::flags))
        .route("/api/v1/status/runtimeinfo", get(status::runtime_info))
        .route("/api/v1/status/walreplay", get(status::wal_replay))
        .route("/api/v1/status/tsdb/blocks", get(status::tsdb_blocks))
        .route(
            "/api/v1/query_exemplars",
            get(metadata::query_exemplars).post(metadata::query_exemplars),
        )
        .route("/query", get(ui::query_page))
        .route("/graph", get(ui::graph_redirect))
        .route("/tsdb-status", get(ui::tsdb_status_page))
        .route("/rules", get(ui::rules_page))
        .route("/alerts", get(ui::alerts_page))
        .route("/assets/{name}", get(ui::asset))
        .route("/", get(status::page))
        .route("/metrics", get(status::metrics))
        .route("/-/healthy", get(status::healthy))
        .route("/-/ready", get(status::ready))
        .route("/-/reload", post(status::reload).put(status::reload))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            timeout,
        ));
    // A snapshot writes the head as a block: it takes as long as that
    // takes, and a client cut off by a timeout would retry into a second.
    let admin = Router::new()
        .route(
            "/api/v1/admin/tsdb/snapshot",
            post(admin::snapshot).put(admin::snapshot),
        )
        .route(
            "/api/v1/admin/tsdb/delete_series",
            post(admin::delete_series).put(admin::delete_series),
        )
        .route(
            "/api/v1/admin/tsdb/clean_tombstones",
            post(admin::clean_tombstones).put(admin::clean_tombstones),
        );
    guarded(reads.merge(rest).merge(admin), state)
}

/// The layers every route has: the body limit, request metrics, and a
/// panic in a handler turned into a 500 that keeps the connection.
fn guarded(routes: Router<AppState>, state: AppState) -> Router {
    let body_limit = state.inner.max_body_bytes;
    routes
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            refuse_declared_oversize,
        ))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(middleware::from_fn_with_state(state.clone(), door))
        .route_layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// A body whose `Content-Length` is over the limit gets 413 at once,
/// before anything is read or waited for.
async fn refuse_declared_oversize(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = state.inner.max_body_bytes;
    match declared {
        Some(n) if n > limit as u64 => ApiError::TooLarge(format!(
            "request body of {n} bytes (Content-Length) is larger than the limit of {limit} \
             bytes (max-body-bytes)"
        ))
        .into_response(),
        _ => next.run(req).await,
    }
}

/// The reply to a handler's panic: logged, and a plain 500.
fn panicked(what: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let what = what
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| what.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    ApiError::Internal(format!("a handler panicked: {what}")).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::storage::Db;
    use std::sync::Arc;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_panicking_handler_is_a_500_and_the_router_keeps_serving() {
        let head = Arc::new(Db::in_memory(Config::default().db_options()));
        let state = AppState::new(&Config::default(), head);
        async fn boom() -> &'static str {
            panic!("handler bug")
        }
        let app = guarded(
            Router::new()
                .route("/boom", get(boom))
                .route("/-/healthy", get(status::healthy)),
            state,
        );
        let req = |uri: &str| {
            Request::builder()
                .uri(uri)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        let resp = app.clone().oneshot(req("/boom")).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .expect("body");
        assert_eq!(&body[..], b"internal error; see the server log\n");
        let resp = app.oneshot(req("/-/healthy")).await.expect("answered");
        assert_eq!(resp.status(), StatusCode::OK);
    }

    /// The router over an empty head, with `config`'s limits.
    fn app(config: &Config) -> Router {
        let head = Arc::new(Db::in_memory(config.db_options()));
        router(AppState::new(config, head))
    }

    async fn send(app: &Router, req: Request) -> (StatusCode, String) {
        let resp = app.clone().oneshot(req).await.expect("answered");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn write(body: &'static [u8], headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method("POST").uri("/api/v1/write");
        for &(k, v) in headers {
            b = b.header(k, v);
        }
        b.body(axum::body::Body::from(body)).expect("request")
    }

    fn get_uri(uri: &str) -> Request {
        Request::builder()
            .uri(uri)
            .body(axum::body::Body::empty())
            .expect("request")
    }

    #[tokio::test]
    async fn status_parse_and_admin_routes_map_to_their_statuses() {
        let off = app(&Config::default());
        let post = |uri: &str| {
            Request::builder()
                .method("POST")
                .uri(uri)
                .body(axum::body::Body::empty())
                .expect("request")
        };
        for (uri, want) in [
            ("/api/v1/status/tsdb", 200),
            ("/api/v1/status/tsdb?limit=0", 400),
            ("/api/v1/status/tsdb?limit=10001", 400),
            ("/api/v1/status/tsdb?date=yesterday", 400),
            ("/api/v1/status/tsdb?match[]=%7B", 400),
            ("/api/v1/status/tsdb?start=0&end=10&focusLabel=job", 200),
            ("/api/v1/status/runtimeinfo", 200),
            ("/api/v1/status/walreplay", 200),
            ("/api/v1/status/tsdb/blocks", 200),
            ("/api/v1/parse_query?query=up", 200),
            ("/api/v1/parse_query?query=sum(", 400),
            ("/api/v1/admin/tsdb/snapshot", 405),
        ] {
            let (status, body) = send(&off, get_uri(uri)).await;
            assert_eq!(status.as_u16(), want, "{uri}: {body}");
        }
        for uri in [
            "/api/v1/admin/tsdb/snapshot",
            "/api/v1/admin/tsdb/delete_series",
            "/api/v1/admin/tsdb/clean_tombstones",
        ] {
            let (status, body) = send(&off, post(uri)).await;
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{uri}");
            assert!(body.contains("admin APIs disabled"), "{body}");
        }
        let on = app(&Config {
            web_enable_admin_api: true,
            ..Config::default()
        });
        let (status, body) = send(&on, post("/api/v1/admin/tsdb/snapshot?skip_head=maybe")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("skip_head"), "{body}");
        // An in-memory database has no directory to snapshot into.
        let (status, body) = send(&on, post("/api/v1/admin/tsdb/snapshot")).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
        assert!(body.contains("no data directory"), "{body}");
        // Deletion needs a selector, and reads every one before deleting.
        let (status, body) = send(&on, post("/api/v1/admin/tsdb/delete_series")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("no match[] parameter provided"), "{body}");
        let (status, body) = send(
            &on,
            post("/api/v1/admin/tsdb/delete_series?match[]=up&match[]=%7B"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("match[]"), "{body}");
        let (status, body) = send(
            &on,
            post("/api/v1/admin/tsdb/delete_series?match[]=up&start=yesterday"),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(body.contains("start"), "{body}");
        for uri in [
            "/api/v1/admin/tsdb/delete_series?match[]=up",
            "/api/v1/admin/tsdb/clean_tombstones",
        ] {
            let (status, body) = send(&on, post(uri)).await;
            assert_eq!(status, StatusCode::NO_CONTENT, "{uri}: {body}");
            assert!(body.is_empty(), "{body}");
        }
    }

    #[tokio::test]
    async fn the_query_page_its_assets_and_the_graph_redirect() {
        let a = app(&Config::default());
        let resp = a
            .clone()
            .oneshot(get_uri("/graph?g0.expr=up&g0.tab=0"))
            .await
            .expect("answered");
        assert_eq!(resp.status(), StatusCode::FOUND);
        assert_eq!(
            resp.headers().get("location").and_then(|v| v.to_str().ok()),
            Some("/query?g0.expr=up&g0.tab=0")
        );
        let resp = a
            .clone()
            .oneshot(get_uri("/graph"))
            .await
            .expect("answered");
        assert_eq!(
            resp.headers().get("location").and_then(|v| v.to_str().ok()),
            Some("/query?")
        );
        let (status, html) = send(&a, get_uri("/query")).await;
        assert_eq!(status, StatusCode::OK);
        // The parser's functions, for completion, and no placeholder left.
        assert!(html.contains(r#""name":"histogram_quantile""#), "{html}");
        assert!(!html.contains("{{"), "{html}");
        for (uri, kind) in [
            ("/assets/query.js", "text/javascript"),
            ("/assets/sluice.css", "text/css"),
            ("/assets/common.js", "text/javascript"),
            ("/assets/tsdb-status.js", "text/javascript"),
        ] {
            let resp = a.clone().oneshot(get_uri(uri)).await.expect("answered");
            assert_eq!(resp.status(), StatusCode::OK, "{uri}");
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok());
            assert!(ct.is_some_and(|c| c.starts_with(kind)), "{uri}: {ct:?}");
        }
    }

    #[tokio::test]
    async fn every_error_maps_to_its_status() {
        let config = Config {
            max_body_bytes: 64,
            ..Config::default()
        };
        let a = app(&config);
        // 400: not snappy.
        let (status, body) = send(&a, write(b"not snappy at all", &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        // 405: a write must be a POST.
        let (status, _) = send(&a, get_uri("/api/v1/write")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        // 413: a declared length over max-body-bytes.
        let (status, body) = send(&a, write(&[0; 100], &[("content-length", "100")])).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        // 415: an encoding remote write does not use.
        let (status, body) = send(&a, write(b"x", &[("content-encoding", "gzip")])).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        // 422: a query that fails while it runs.
        let (status, body) = send(
            &a,
            get_uri("/api/v1/query?query=count_values(%22%22,vector(1))&time=1"),
        )
        .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body.contains(r#""errorType":"execution""#), "{body}");
        // 503: a query past its timeout (a millisecond).
        let (status, body) = send(
            &a,
            get_uri("/api/v1/query?query=max_over_time(vector(1)[10m:1ms])&time=1&timeout=1ms"),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains(r#""errorType":"timeout""#), "{body}");
        // 503 with Retry-After: the head at its memory high-water mark
        // (every sender retries a 503; a stock Prometheus drops a 429).
        let full = app(&Config {
            max_memory: 1,
            ..Config::default()
        });
        let resp = full
            .clone()
            .oneshot(write(b"", &[]))
            .await
            .expect("infallible");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            resp.headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.as_bytes()),
            Some(&b"5"[..])
        );
    }

    #[tokio::test]
    async fn requests_are_counted_by_the_route_pattern_they_matched() {
        let a = app(&Config::default());
        send(&a, get_uri("/api/v1/label/job/values")).await;
        send(&a, get_uri("/api/v1/label/instance/values")).await;
        let (_, metrics) = send(&a, get_uri("/metrics")).await;
        assert!(
            metrics.contains(
                r#"sluice_http_requests_total{handler="/api/v1/label/{name}/values",code="200"} 2"#
            ),
            "{metrics}"
        );
    }
}
