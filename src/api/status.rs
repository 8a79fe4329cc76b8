//! Health, readiness and self-metrics endpoints.

use std::fmt::Write as _;
use std::time::Instant;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse};

use super::state::AppState;

/// `GET /-/healthy`: the process is up.
pub(super) async fn healthy() -> &'static str {
    "Sluice is Healthy.\n"
}

/// `GET /api/v1/status/config`: the configuration as Prometheus reports
/// its own, YAML under `data.yaml`. The Thanos sidecar reads
/// `global.external_labels` from it (`pkg/promclient`, `ExternalLabels`).
pub(super) async fn config(State(state): State<AppState>) -> axum::response::Response {
    let inner = &state.inner;
    // JSON strings are YAML double-quoted scalars: quoting stays exact.
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut yaml = String::from("global:\n");
    if inner.external_labels.is_empty() {
        yaml.push_str("  external_labels: {}\n");
    } else {
        yaml.push_str("  external_labels:\n");
        for (n, v) in &inner.external_labels {
            yaml.push_str(&format!("    {}: {}\n", q(n), q(v)));
        }
    }
    json_reply(&serde_json::json!({"status": "success", "data": {"yaml": yaml}}))
}

/// `GET /api/v1/status/flags`: every setting by flag name as text, and the
/// ones by which Prometheus' names are read: the Thanos sidecar reads
/// `storage.tsdb.path`, `storage.tsdb.retention`, and
/// `storage.tsdb.{min,max}-block-duration` (it refuses to upload unless
/// they are equal, i.e. compaction is off).
pub(super) async fn flags(State(state): State<AppState>) -> axum::response::Response {
    let inner = &state.inner;
    let mut data = serde_json::Map::new();
    for (k, v) in &inner.flags {
        data.insert(k.clone(), v.clone().into());
    }
    let retention = prometheus_duration(inner.retention);
    for (k, v) in [
        ("storage.tsdb.path", inner.data_dir.clone()),
        ("storage.tsdb.retention", retention.clone()),
        ("storage.tsdb.retention.time", retention),
        (
            "storage.tsdb.min-block-duration",
            prometheus_duration(inner.block_durations.0),
        ),
        (
            "storage.tsdb.max-block-duration",
            prometheus_duration(inner.block_durations.1),
        ),
        ("web.enable-admin-api", inner.admin_api.to_string()),
        ("web.enable-lifecycle", "false".to_owned()),
    ] {
        data.insert(k.to_owned(), v.into());
    }
    json_reply(&serde_json::json!({"status": "success", "data": data}))
}

/// `GET /api/v1/status/runtimeinfo`: Prometheus' fields, with what
/// stands for each Go runtime figure here (`goroutineCount`: the async
/// tasks alive; `GOMAXPROCS`: the async worker threads; `GOMEMLIMIT`: the
/// head's memory limit).
pub(super) async fn runtime_info(
    State(state): State<AppState>,
    super::tenant::Scoped(tenant): super::tenant::Scoped,
) -> axum::response::Response {
    let inner = &state.inner;
    let now = std::time::SystemTime::now();
    let started = now.checked_sub(inner.started.elapsed()).unwrap_or(now);
    let web = inner.metrics.web();
    let loads = [
        &web.web_config,
        &web.runtime_config,
        &web.ingest_relabel_config,
    ];
    // A file that was never loaded has no time; one whose last reload
    // failed keeps the time of its last success and says 0.
    let failed = loads.iter().any(|r| r.time.get() > 0 && r.ok.get() == 0);
    let last_load = loads
        .iter()
        .map(|r| r.time.get())
        .max()
        .filter(|&t| t > 0)
        .and_then(|t| u64::try_from(t).ok())
        .map(|t| std::time::UNIX_EPOCH + std::time::Duration::from_secs(t))
        .unwrap_or(started);
    let rfc3339 = |t: std::time::SystemTime| {
        chrono::DateTime::<chrono::Utc>::from(t)
            .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
    };
    let corruptions = tenant
        .db
        .recovery()
        .map_or(0, |r| u64::from(r.repaired || r.dropped_bytes > 0));
    let (tasks, workers) = tokio::runtime::Handle::try_current().map_or((0, 0), |h| {
        let m = h.metrics();
        (m.num_alive_tasks(), m.num_workers())
    });
    let data = serde_json::json!({
        "startTime": rfc3339(started),
        "CWD": std::env::current_dir()
            .map_or_else(|_| "<error retrieving current working directory>".to_owned(), |d| d.display().to_string()),
        "hostname": hostname(),
        "serverTime": rfc3339(now),
        "reloadConfigSuccess": !failed,
        "lastConfigTime": rfc3339(last_load),
        "corruptionCount": corruptions,
        "goroutineCount": tasks,
        "GOMAXPROCS": workers,
        "GOMEMLIMIT": tenant.db.memory_limit(),
        "GOGC": "",
        "GODEBUG": "",
        "storageRetention": prometheus_duration(inner.retention),
    });
    json_reply(&serde_json::json!({"status": "success", "data": data}))
}

/// The machine's name, as the kernel has it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// `GET /api/v1/status/walreplay`: the WAL segments the start-up replay
/// read. Sluice answers only once the replay is done, so `current` is
/// `max`.
pub(super) async fn wal_replay(
    super::tenant::Scoped(tenant): super::tenant::Scoped,
) -> axum::response::Response {
    let (min, max) = tenant.db.recovery().map_or((0, 0), |r| r.segments);
    json_reply(&serde_json::json!({
        "status": "success",
        "data": {"min": min, "max": max, "current": max},
    }))
}

/// `GET /api/v1/status/tsdb/blocks` (Prometheus 3.6): the metas of the
/// blocks, oldest first, as their `meta.json` files hold them.
pub(super) async fn tsdb_blocks(
    super::tenant::Scoped(tenant): super::tenant::Scoped,
) -> axum::response::Response {
    let blocks = tenant.db.block_metas_json();
    json_reply(&serde_json::json!({"status": "success", "data": {"blocks": blocks}}))
}

fn json_reply(v: &serde_json::Value) -> axum::response::Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// A duration as Prometheus writes one (`15d`, `2h`, `1d12h`, `90s`).
fn prometheus_duration(d: std::time::Duration) -> String {
    let mut ms = d.as_millis();
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000u128),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// `GET /-/ready`: ready to take writes and queries; 503 naming why not
/// while the WAL refuses writes (a full disk).
pub(super) async fn ready(State(state): State<AppState>) -> axum::response::Response {
    match state.db().admit_write() {
        Ok(()) => "Sluice is Ready.\n".into_response(),
        Err(refused) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "5")],
            format!("Sluice is not ready: {refused}.\n"),
        )
            .into_response(),
    }
}

/// `GET /metrics`: self-metrics in the Prometheus protobuf format when the
/// scraper puts it first (Prometheus does with native histograms on: the
/// latency histograms are native there), else in OpenMetrics when it asks
/// for that, else in the Prometheus text format 0.0.4.
pub(super) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> axum::response::Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let m = &state.inner.metrics;
    if first_choice_is_protobuf(accept) {
        if let Some(body) = m.encode_protobuf() {
            return (
                [(
                    header::CONTENT_TYPE,
                    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited",
                )],
                body,
            )
                .into_response();
        }
    }
    let wants_om = accept.contains("application/openmetrics-text");
    if wants_om {
        (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            m.encode_openmetrics(),
        )
            .into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            m.encode_text(),
        )
            .into_response()
    }
}

/// Whether the media type `Accept` weighs highest is Prometheus' protobuf
/// exposition (`application/vnd.google.protobuf;
/// proto=io.prometheus.client.MetricFamily`).
fn first_choice_is_protobuf(accept: &str) -> bool {
    let mut best: Option<(f64, bool)> = None;
    for part in accept.split(',') {
        let mut params = part.split(';').map(str::trim);
        let media = params.next().unwrap_or_default();
        let mut q = 1.0;
        let mut proto_ok = true;
        for p in params {
            if let Some(v) = p.strip_prefix("q=") {
                q = v.parse().unwrap_or(0.0);
            } else if let Some(v) = p.strip_prefix("proto=") {
                proto_ok = v == "io.prometheus.client.MetricFamily";
            }
        }
        let is_proto = media == "application/vnd.google.protobuf" && proto_ok;
        if best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, is_proto));
        }
    }
    best.is_some_and(|(q, p)| p && q > 0.0)
}

/// `GET /`: a small status page in the spirit of Prometheus' own: version,
/// uptime, head sizes, ingest rate, settings, and links. No scripts, no
/// external assets.
pub(super) async fn page(
    State(state): State<AppState>,
    super::tenant::Scoped(tenant): super::tenant::Scoped,
    unchosen: Option<axum::Extension<super::tenant::Unchosen>>,
) -> Html<String> {
    if unchosen.is_some() {
        return Html(choose_tenant_page());
    }
    let inner = &state.inner;
    let now = Instant::now();
    let ingested = inner.metrics.ingested_total();
    let uptime = now.duration_since(inner.started);
    let (since_last, rate_last) = {
        let mut last = inner.last_view.lock();
        let secs = now.duration_since(last.0).as_secs_f64();
        let rate = (ingested.saturating_sub(last.1)) as f64 / secs.max(1e-3);
        *last = (now, ingested);
        (secs, rate)
    };
    let db = &tenant.db;
    let st = db.head_stats();
    let mut rows = String::new();
    let mut row = |k: &str, v: &str| {
        let _ = write!(
            rows,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(k),
            escape(v)
        );
    };
    row("Version", env!("CARGO_PKG_VERSION"));
    row(
        "Uptime",
        &humantime::format_duration(std::time::Duration::from_secs(uptime.as_secs())).to_string(),
    );
    if state.tenants().multitenancy() {
        row("Tenant", tenant.id.as_str());
    }
    row("Head series", &st.series.to_string());
    row("Head samples", &st.samples.to_string());
    row("Head chunks", &st.chunks.to_string());
    let (held, limit) = (db.head_bytes(), db.memory_limit());
    row(
        "Head memory",
        &format!(
            "{} of {} ({:.1}%; writes get 503 at 80%)",
            human_bytes(held as u64),
            human_bytes(limit),
            100.0 * held as f64 / limit.max(1) as f64
        ),
    );
    row(
        "Series limit",
        &format!("{} of {}", db.series_count(), db.max_series()),
    );
    // Ingest is counted for the process, not per tenant.
    let all = if state.tenants().multitenancy() {
        " (all tenants)"
    } else {
        ""
    };
    row(
        &format!("Ingest rate{all}"),
        &format!(
            "{} samples/s over the {since_last:.0} s since this page was last viewed; \
             {} samples/s on average since start",
            human_count(rate_last),
            human_count(ingested as f64 / uptime.as_secs_f64().max(1e-3))
        ),
    );
    row(&format!("Samples ingested{all}"), &ingested.to_string());

    let mut storage = String::new();
    let mut srow = |k: &str, v: String| {
        let _ = write!(
            storage,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(k),
            escape(&v)
        );
    };
    let b = db.block_stats();
    srow(
        "Blocks",
        format!(
            "{} on disk, {} samples, {} ({} of index in memory)",
            b.blocks,
            human_count(b.samples as f64),
            human_bytes(b.disk_bytes),
            human_bytes(b.memory_bytes as u64)
        ),
    );
    srow(
        "Blocks written",
        format!(
            "{} cut from the head ({} failed), {} compactions ({} failed), {} deleted by retention, {} damaged and moved aside",
            b.cut, b.cut_failures, b.compactions, b.compaction_failures, b.deleted, b.damaged
        ),
    );
    if let Some(wal) = db.wal_disk_bytes() {
        srow("WAL on disk", human_bytes(wal));
    }
    let cp = db.checkpoint_stats();
    srow(
        "Checkpoints",
        format!("{} written since start, {} failed", cp.written, cp.failed),
    );
    srow(
        "Retention",
        format!(
            "{} (blocks older are deleted)",
            humantime::format_duration(inner.retention)
        ),
    );
    if let Some(r) = db.recovery() {
        srow(
            "Last start",
            format!(
                "WAL replayed in {:.1} s: {} records, {} samples{}",
                r.seconds,
                r.records,
                r.samples,
                if r.dropped_bytes > 0 {
                    format!(
                        ", {} of torn or damaged log dropped",
                        human_bytes(r.dropped_bytes)
                    )
                } else {
                    String::new()
                }
            ),
        );
    }

    let mut forwarding = String::new();
    for (name, f) in state.tenants().forwarding_of(tenant.id.as_str()) {
        let lag = f.lag_seconds.get();
        let _ = write!(
            forwarding,
            "<tr><th>{}</th><td>{} sent, {} refused (4xx), {} retried, {} dropped; {} behind, {} of WAL unsent</td></tr>",
            escape(&name),
            human_count(f.sent.get() as f64),
            human_count(f.failed.get() as f64),
            human_count(f.retried.get() as f64),
            human_count((f.dropped_lag.get() + f.dropped_unknown_series.get()) as f64),
            if lag > 0.0 {
                humantime::format_duration(std::time::Duration::from_secs(lag as u64)).to_string()
            } else {
                "0s".to_owned()
            },
            human_bytes(u64::try_from(f.pending_bytes.get()).unwrap_or(0)),
        );
    }
    let forwarding = if forwarding.is_empty() {
        "<p>No forward destinations (<code>--forward</code>).</p>".to_owned()
    } else {
        format!("<table>{forwarding}</table>")
    };

    let mut flags = String::new();
    for (k, v) in &inner.flags {
        let _ = write!(
            flags,
            "<tr><th>--{}</th><td>{}</td></tr>",
            escape(k),
            escape(v)
        );
    }
    Html(format!(
        r#"{head}<main>
<h1>Sluice {version}</h1>
<p>A Prometheus-compatible remote-write receiver. Point Prometheus' <code>remote_write</code> at <code>/api/v1/write</code>, OTLP exporters at <code>/v1/metrics</code>, and Grafana's Prometheus data source at this address. <a href="/query">Query the data</a> or <a href="/tsdb-status">find the biggest metrics</a>.</p>
<h2>Status</h2>
<table>{rows}</table>
<h2>Storage</h2>
<table>{storage}</table>
<h2>Forwarding</h2>
{forwarding}
<h2>Endpoints</h2>
<ul>
<li><a href="/query">/query</a>: the query page (graph, table; Prometheus' <code>/graph</code> links work), <a href="/tsdb-status">/tsdb-status</a>: cardinality, <a href="/alerts">/alerts</a> and <a href="/rules">/rules</a>: rule groups and their alerts</li>
<li><a href="/metrics">/metrics</a>: Sluice's own metrics</li>
<li><a href="/api/v1/status/buildinfo">/api/v1/status/buildinfo</a>, <a href="/api/v1/status/runtimeinfo">/api/v1/status/runtimeinfo</a>, <a href="/api/v1/status/tsdb">/api/v1/status/tsdb</a>, <a href="/api/v1/status/tsdb/blocks">/api/v1/status/tsdb/blocks</a></li>
<li><a href="/api/v1/labels">/api/v1/labels</a>, <a href="/api/v1/label/__name__/values">metric names</a>, <a href="/api/v1/metadata">/api/v1/metadata</a></li>
<li><a href="/api/v1/query?query=sum%20by%20(job)%20(up)">/api/v1/query</a>, <code>/api/v1/query_range</code>, <code>/api/v1/series</code></li>
<li><a href="/federate?match[]=%7Bjob%3D~%22.%2B%22%7D">/federate</a>: the newest samples, for another Prometheus</li>
<li><a href="/-/healthy">/-/healthy</a>, <a href="/-/ready">/-/ready</a></li>
</ul>
<h2>Dashboards</h2>
<p>Grafana dashboards ship in <code>dashboards/</code>: <code>sluice-overview.json</code> (Sluice itself) and <code>node-exporter.json</code> (the data flowing through it). With the repository's <code>compose.yaml</code>, Grafana runs on <a href="http://localhost:3000/">http://localhost:3000/</a> with both provisioned.</p>
<h2>Settings</h2>
<table>{flags}</table>
</main>
</body>
</html>
"#,
        head = page_head(),
        version = env!("CARGO_PKG_VERSION"),
    ))
}

/// The status page's `<head>` and navigation bar, up to its `<main>`.
fn page_head() -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>Sluice {version}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 0; color: #222; }}
nav {{ display: flex; gap: 1.2rem; padding: 0.6rem 1.2rem; background: #24292f; }}
nav a {{ color: #d0d7de; text-decoration: none; }} nav a.brand, nav a.here {{ color: #fff; font-weight: 600; }}
main {{ padding: 0 2rem 2rem; }}
h1 {{ font-size: 1.5rem; }} h2 {{ font-size: 1.1rem; margin-top: 2rem; }}
table {{ border-collapse: collapse; }}
th, td {{ text-align: left; padding: 0.2rem 1rem 0.2rem 0; vertical-align: top; }}
th {{ font-weight: 600; white-space: nowrap; }}
code {{ background: #f3f3f3; padding: 0 0.2rem; }}
</style>
</head>
<body>
<nav><a class="brand" href="/">Sluice</a><a href="/query">Query</a><a href="/alerts">Alerts</a><a href="/rules">Rules</a><a href="/tsdb-status">TSDB status</a><a class="here" href="/">Status</a></nav>
"#,
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// The status page asked with multitenancy on and no tenant named: a
/// form that names one in the URL (`/?tenant=`).
fn choose_tenant_page() -> String {
    format!(
        r#"{head}<main>
<h1>Sluice {version}</h1>
<p>This Sluice keeps each tenant's data apart (<code>--multitenancy</code>). Its status is per tenant: name one.</p>
<form method="get" action="/"><label>Tenant <input name="tenant" autofocus required></label> <button type="submit">Show</button></form>
<p>The <a href="/query">query page</a>, the <a href="/alerts">alerts</a> and <a href="/rules">rules</a> pages and the <a href="/tsdb-status">TSDB status page</a> have a tenant box of their own.</p>
</main>
</body>
</html>
"#,
        head = page_head(),
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// Bytes in binary units, as a person reads them: `4.3 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// A count or rate with an SI suffix past ten thousand: `1.2M`.
fn human_count(v: f64) -> String {
    let a = v.abs();
    for (size, unit) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")] {
        if a >= size {
            let scaled = if unit == "k" { v / 1e3 } else { v / size };
            return format!("{scaled:.1}{unit}");
        }
    }
    format!("{v:.0}")
}

/// Escapes text for HTML.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `POST|PUT /-/reload`, with `--web-enable-lifecycle`: reads the rule
/// files and the tenants' rule directories again, as SIGHUP does; 200 when
/// the asking tenant's loaded, 500 `failed to reload config: …` naming its
/// problems (the rules in force kept) when not. Off: 403, as
/// Prometheus answers with its lifecycle API off.
pub(super) async fn reload(
    State(state): State<AppState>,
    super::tenant::Scoped(tenant): super::tenant::Scoped,
) -> axum::response::Response {
    if !state.inner.lifecycle {
        return (
            axum::http::StatusCode::FORBIDDEN,
            "Lifecycle API is not enabled.\n",
        )
            .into_response();
    }
    let (rules, sets) = (state.rules(), state.rule_sets());
    // A tenant not open has no rules of its own: no problem is its.
    let caller = match tenant.stand_in {
        true => String::new(),
        false => tenant.id.as_str().to_owned(),
    };
    let anonymous = super::tenant::ANONYMOUS;
    match tokio::task::spawn_blocking(move || sets.reload(&rules, anonymous, &caller)).await {
        Ok(Ok(_)) => axum::http::StatusCode::OK.into_response(),
        Ok(Err(e)) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to reload config: {e}\n"),
        )
            .into_response(),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("failed to reload config: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::{first_choice_is_protobuf, human_bytes, human_count, prometheus_duration};
    use std::time::Duration;

    #[test]
    fn sizes_and_counts_read_as_a_person_reads_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4_522_300), "4.3 MiB");
        assert_eq!(human_bytes(15_165_721_800), "14.1 GiB");
        assert_eq!(human_count(999.4), "999");
        assert_eq!(human_count(12_345.0), "12.3k");
        assert_eq!(human_count(2_500_000.0), "2.5M");
    }

    #[test]
    fn durations_read_as_prometheus_writes_them() {
        assert_eq!(prometheus_duration(Duration::from_secs(15 * 86_400)), "15d");
        assert_eq!(prometheus_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(prometheus_duration(Duration::from_secs(129_600)), "1d12h");
        assert_eq!(prometheus_duration(Duration::from_millis(1500)), "1s500ms");
        assert_eq!(prometheus_duration(Duration::ZERO), "0s");
    }

    #[test]
    fn protobuf_is_served_only_when_it_weighs_highest() {
        // What Prometheus 3 sends with native histograms on.
        assert!(first_choice_is_protobuf(
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.6,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        ));
        // Its default without them: OpenMetrics first.
        assert!(!first_choice_is_protobuf(
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        ));
        assert!(!first_choice_is_protobuf(""));
        assert!(!first_choice_is_protobuf(
            "application/vnd.google.protobuf;proto=other.Message"
        ));
    }
}
