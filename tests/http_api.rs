//! The Prometheus HTTP API over real HTTP: queries (instant, range, format),
//! series, labels, label values, metric metadata, build info and exemplars,
//! with Prometheus' JSON envelope and errors. Grafana's health check and
//! `promtool query instant|range|series|labels` work unchanged.

mod common;

use common::{body, now_ms, push, series, start, TestServer};
use prost::Message;
use serde_json::{json, Value};
use sluice::config::Config;
use sluice::proto::prometheus as pb;

async fn api(srv: &TestServer, path: &str) -> (u16, Value) {
    let resp = reqwest::get(format!("http://{}{path}", srv.addr))
        .await
        .expect("sent");
    let code = resp.status().as_u16();
    assert_eq!(resp.headers()["content-type"], "application/json");
    (
        code,
        serde_json::from_str(&resp.text().await.expect("text")).expect("json"),
    )
}

async fn api_post(srv: &TestServer, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(format!("http://{}{path}", srv.addr))
        .form(form)
        .send()
        .await
        .expect("sent");
    let code = resp.status().as_u16();
    (
        code,
        serde_json::from_str(&resp.text().await.expect("text")).expect("json"),
    )
}

async fn loaded() -> (TestServer, i64) {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let req = vec![
        series(
            &[("__name__", "up"), ("instance", "a:9100"), ("job", "node")],
            &[(t, 1.0)],
        ),
        series(
            &[("__name__", "up"), ("instance", "b:9100"), ("job", "node")],
            &[(t, 0.0)],
        ),
        series(
            &[
                ("__name__", "http_requests_total"),
                ("code", "200"),
                ("job", "api"),
            ],
            &[(t, 5.0)],
        ),
    ];
    assert_eq!(push(srv.addr, body(req)).await.0, 204);
    (srv, t)
}

#[tokio::test]
async fn series_labels_and_values() {
    let (srv, t) = loaded().await;
    let (code, v) = api(&srv, "/api/v1/series?match[]=up").await;
    assert_eq!(code, 200);
    assert_eq!(
        v,
        json!({"status": "success", "data": [
            {"__name__": "up", "instance": "a:9100", "job": "node"},
            {"__name__": "up", "instance": "b:9100", "job": "node"},
        ]})
    );
    // POST form with two selectors (their union) and a limit.
    let (code, v) = api_post(
        &srv,
        "/api/v1/series",
        &[
            ("match[]", r#"up{instance="a:9100"}"#),
            ("match[]", "http_requests_total"),
            ("limit", "1"),
        ],
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(v["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["warnings"], json!(["results truncated due to limit"]));
    // A time range before the samples finds nothing.
    let end = format!("{:.3}", (t - 10_000) as f64 / 1000.0);
    let (_, v) = api(&srv, &format!("/api/v1/series?match[]=up&end={end}")).await;
    assert_eq!(v["data"], json!([]));

    let (_, v) = api(&srv, "/api/v1/labels").await;
    assert_eq!(v["data"], json!(["__name__", "code", "instance", "job"]));
    let (_, v) = api_post(
        &srv,
        "/api/v1/labels",
        &[("match[]", "http_requests_total")],
    )
    .await;
    assert_eq!(v["data"], json!(["__name__", "code", "job"]));
    let (_, v) = api(&srv, "/api/v1/label/__name__/values").await;
    assert_eq!(v["data"], json!(["http_requests_total", "up"]));
    let (_, v) = api(&srv, "/api/v1/label/job/values?match[]=up").await;
    assert_eq!(v["data"], json!(["node"]));
    let (_, v) = api(&srv, "/api/v1/label/nosuch/values").await;
    assert_eq!(v["data"], json!([]));
}

#[tokio::test]
async fn errors_use_the_prometheus_envelope() {
    let (srv, _) = loaded().await;
    let (code, v) = api(&srv, "/api/v1/series").await;
    assert_eq!(code, 400);
    assert_eq!(
        v,
        json!({"status": "error", "errorType": "bad_data", "error": "no match[] parameter provided"})
    );
    let (code, v) = api(&srv, "/api/v1/series?match[]=up{").await;
    assert_eq!(code, 400);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(r#"invalid parameter "match[]""#)),
        "{v}"
    );
    let (code, v) = api(&srv, "/api/v1/labels?start=yesterday").await;
    assert_eq!(code, 400);
    assert_eq!(
        v["error"],
        r#"invalid parameter "start": cannot parse "yesterday" to a valid timestamp"#
    );
    // Any UTF-8 name is a label name in Prometheus 3, `U__` forms too.
    let (code, v) = api(&srv, "/api/v1/label/bad-name/values").await;
    assert_eq!((code, v["status"].as_str()), (200, Some("success")), "{v}");
}

#[tokio::test]
async fn metadata_buildinfo_and_exemplars() {
    let srv = start(Config::default()).await;
    let meta = |name: &str, kind: i32, help: &str| pb::MetricMetadata {
        r#type: kind,
        metric_family_name: name.into(),
        help: help.into(),
        unit: String::new(),
    };
    let raw = pb::WriteRequest {
        timeseries: vec![],
        metadata: vec![
            meta("up", 2, "Whether the target is up."),
            meta("http_requests_total", 1, "Requests."),
        ],
    }
    .encode_to_vec();
    let compressed = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("compress");
    assert_eq!(push(srv.addr, compressed).await.0, 204);
    let (_, v) = api(&srv, "/api/v1/metadata").await;
    assert_eq!(
        v["data"],
        json!({
            "http_requests_total": [{"type": "counter", "help": "Requests.", "unit": ""}],
            "up": [{"type": "gauge", "help": "Whether the target is up.", "unit": ""}],
        })
    );
    let (_, v) = api(&srv, "/api/v1/metadata?metric=up").await;
    assert_eq!(v["data"].as_object().map(|o| o.len()), Some(1));
    let (_, v) = api(&srv, "/api/v1/metadata?limit=1").await;
    assert_eq!(v["data"].as_object().map(|o| o.len()), Some(1));

    let (code, v) = api(&srv, "/api/v1/status/buildinfo").await;
    assert_eq!(code, 200);
    assert_eq!(v["data"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        v["data"].get("features").is_none(),
        "no features: Grafana must not take Sluice for Mimir"
    );
    for key in ["revision", "branch", "buildUser", "buildDate", "goVersion"] {
        assert!(v["data"][key].is_string(), "{key}");
    }
    // Grafana's probe sends milliseconds where seconds are expected.
    let (code, v) = api(
        &srv,
        "/api/v1/query_exemplars?query=test&start=1700000000000&end=1700000600000",
    )
    .await;
    assert_eq!((code, v), (200, json!({"status": "success", "data": []})));
}

fn promtool(args: &[&str]) -> String {
    let out = std::process::Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool runs (Debian package prometheus; scripts/test installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_reads_series_and_labels() {
    let (srv, _) = loaded().await;
    let url = format!("http://{}", srv.addr);
    let out = tokio::task::spawn_blocking(move || {
        (
            promtool(&["query", "series", "--match=up", &url]),
            promtool(&["query", "labels", &url, "job"]),
        )
    })
    .await
    .expect("joined");
    assert_eq!(
        out.0.lines().collect::<Vec<_>>(),
        [
            r#"{__name__="up", instance="a:9100", job="node"}"#,
            r#"{__name__="up", instance="b:9100", job="node"}"#
        ]
    );
    assert_eq!(out.1.lines().collect::<Vec<_>>(), ["api", "node"]);
}

#[tokio::test]
async fn grafana_health_check_and_query_shapes() {
    let (srv, t) = loaded().await;
    // Grafana's health check: instant `1+1` at time 4s.
    let (code, v) = api_post(&srv, "/api/v1/query", &[("query", "1+1"), ("time", "4")]).await;
    assert_eq!(
        (code, v),
        (
            200,
            json!({"status": "success", "data": {"resultType": "scalar", "result": [4, "2"]}})
        )
    );
    let at = format!("{}.5", t / 1000 + 1);
    let (_, v) = api(&srv, &format!("/api/v1/query?query=up&time={at}")).await;
    assert_eq!(v["data"]["resultType"], "vector");
    assert_eq!(v["data"]["result"][0]["value"][1], "1");
    assert_eq!(
        v["data"]["result"][0]["value"][0].as_f64(),
        at.parse::<f64>().ok()
    );
    let (_, v) = api(&srv, &format!("/api/v1/query?query=up[5m]&time={at}")).await;
    assert_eq!(v["data"]["resultType"], "matrix");
    // Range queries are matrices, scalars included.
    let (s, e) = (t / 1000, t / 1000 + 120);
    let (_, v) = api(
        &srv,
        &format!("/api/v1/query_range?query=1&start={s}&end={e}&step=60"),
    )
    .await;
    assert_eq!(
        v["data"],
        json!({"resultType": "matrix", "result": [{"metric": {}, "values": [[s, "1"], [s + 60, "1"], [s + 120, "1"]]}]})
    );
    // Errors, with Prometheus' types and statuses.
    let (code, v) = api(&srv, "/api/v1/query?query=sum(").await;
    assert_eq!((code, v["errorType"].as_str()), (400, Some("bad_data")));
    let (code, v) = api(
        &srv,
        &format!("/api/v1/query_range?query=up&start={e}&end={s}&step=60"),
    )
    .await;
    assert_eq!(code, 400);
    assert!(v["error"]
        .as_str()
        .is_some_and(|m| m.contains("end timestamp must not be before start time")));
    let (code, v) = api(
        &srv,
        "/api/v1/query_range?query=up&start=0&end=100000&step=1",
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|m| m.contains("11,000 points")),
        "{v}"
    );
    let (code, v) = api(
        &srv,
        &format!("/api/v1/query_range?query=up&start={s}&end={e}&step=0"),
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|m| m.contains("zero or negative")),
        "{v}"
    );
    let (code, v) = api(
        &srv,
        &format!("/api/v1/query_range?query=up[5m]&start={s}&end={e}&step=60"),
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|m| m.contains("range vector")),
        "{v}"
    );
    let (code, v) = api(
        &srv,
        "/api/v1/format_query?query=sum(rate(up%5B5m%5D))by(job)",
    )
    .await;
    assert_eq!(
        (code, v["data"].as_str()),
        (200, Some("sum by (job) (rate(up[5m]))")),
        "{v}"
    );
    // Many-to-many matching is an execution error (422).
    let (code, v) = api(
        &srv,
        &format!("/api/v1/query?query=up%20%2B%20on(job)%20up&time={at}"),
    )
    .await;
    assert_eq!(
        (code, v["errorType"].as_str()),
        (422, Some("execution")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_runs_instant_and_range_queries() {
    let (srv, t) = loaded().await;
    let url = format!("http://{}", srv.addr);
    let (at, start, end) = (
        (t / 1000 + 1).to_string(),
        (t / 1000).to_string(),
        (t / 1000 + 60).to_string(),
    );
    let out = tokio::task::spawn_blocking(move || {
        (
            promtool(&["query", "instant", "--time", &at, &url, "sum by (job) (up)"]),
            promtool(&[
                "query", "range", "--start", &start, "--end", &end, "--step", "30s", &url, "up",
            ]),
        )
    })
    .await
    .expect("joined");
    assert_eq!(
        out.0.trim(),
        format!(r#"{{job="node"}} => 1 @[{}]"#, t / 1000 + 1)
    );
    // The sample at t (ms) is first visible at the step after start.
    let (s1, s2) = (t / 1000 + 30, t / 1000 + 60);
    assert_eq!(
        out.1.lines().collect::<Vec<_>>(),
        [
            r#"up{instance="a:9100", job="node"} =>"#.to_owned(),
            format!("1 @[{s1}]"),
            format!("1 @[{s2}]"),
            r#"up{instance="b:9100", job="node"} =>"#.to_owned(),
            format!("0 @[{s1}]"),
            format!("0 @[{s2}]"),
        ]
    );
}

/// What the Thanos sidecar reads of a Prometheus, as its source reads it
/// (`pkg/promclient`: `ExternalLabels` parses `data.yaml` for
/// `global.external_labels`; `ConfiguredFlags` reads the block durations,
/// path and retention as Prometheus duration strings). No sidecar binary
/// runs here; the YAML also passes Prometheus 3.5.3's `promtool check
/// config`.
#[tokio::test]
async fn thanos_sidecar_reads_external_labels_and_block_durations() {
    let srv = common::start(Config {
        external_labels: vec!["replica=a".into(), "cluster=eu-1".into()],
        ..Config::default()
    })
    .await;
    let (code, body) = common::get(srv.addr, "/api/v1/status/config").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let yaml = v["data"]["yaml"].as_str().expect("data.yaml");
    let cfg: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).expect("YAML");
    let labels = &cfg["global"]["external_labels"];
    assert_eq!(labels["cluster"].as_str(), Some("eu-1"), "{yaml}");
    assert_eq!(labels["replica"].as_str(), Some("a"), "{yaml}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("sluice.yml");
    std::fs::write(&file, yaml).expect("write");
    common::run_ok(
        &common::prometheus3("promtool"),
        &["check".as_ref(), "config".as_ref(), file.as_os_str()],
    );

    let (code, body) = common::get(srv.addr, "/api/v1/status/flags").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let d = &v["data"];
    // Prometheus' defaults: compaction up to 10% of the retention.
    assert_eq!(d["storage.tsdb.min-block-duration"], "2h");
    assert_eq!(d["storage.tsdb.max-block-duration"], "1d12h");
    assert_eq!(d["storage.tsdb.retention"], "15d");
    assert_eq!(d["web.enable-admin-api"], "false");
    assert!(d["storage.tsdb.path"]
        .as_str()
        .is_some_and(|p| !p.is_empty()));
    // Every value is a string, as in Prometheus.
    assert!(
        d.as_object().expect("map").values().all(|x| x.is_string()),
        "{d}"
    );

    // Compaction off, as the sidecar demands before it uploads blocks.
    let srv = common::start(Config {
        storage_max_block_duration: std::time::Duration::from_secs(2 * 3600),
        ..Config::default()
    })
    .await;
    let (code, body) = common::get(srv.addr, "/api/v1/status/flags").await;
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let d = &v["data"];
    assert_eq!(
        d["storage.tsdb.min-block-duration"],
        d["storage.tsdb.max-block-duration"]
    );
    assert_eq!(d["storage.tsdb.max-block-duration"], "2h");
}
