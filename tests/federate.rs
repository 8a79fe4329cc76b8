//! `/federate` by Prometheus' contract, then scraped by a real Prometheus
//! (Debian's package) with `honor_labels: true`, next to Sluice's own
//! `/metrics`: Prometheus' query API must then return the very samples
//! Sluice holds.

mod common;

use std::time::{Duration, Instant};

use common::{get, now_ms, start, Prometheus};
use sluice::config::Config;

async fn prom_query(port: u16, query: &str) -> serde_json::Value {
    let v = common::api_json(
        &format!("http://127.0.0.1:{port}/api/v1/query"),
        &[("query", query.to_owned())],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federate_follows_prometheus_and_a_real_prometheus_scrapes_it() {
    let srv = start(Config::default()).await;
    let now = now_ms();
    let t = now - 10_000;
    let stale = f64::from_bits(sluice::storage::STALE_NAN);
    let body = common::body(vec![
        common::series(
            &[("__name__", "fed_a"), ("job", "x"), ("zone", "eu")],
            &[(t - 15_000, 1.0), (t, 2.5)],
        ),
        common::series(
            &[("__name__", "fed_a"), ("job", "y"), ("instance", "h:1")],
            &[(t, f64::INFINITY)],
        ),
        common::series(&[("__name__", "fed_b"), ("path", "a\"b\\c")], &[(t, -3.0)]),
        // Newest sample stale: left out.
        common::series(
            &[("__name__", "fed_gone"), ("job", "x")],
            &[(t - 15_000, 1.0), (t, stale)],
        ),
        // Older than the lookback: left out.
        common::series(
            &[("__name__", "fed_old"), ("job", "x")],
            &[(now - 600_000, 1.0)],
        ),
    ]);
    assert_eq!(common::push(srv.addr, body).await.0, 204);

    let (code, text) = get(srv.addr, "/federate").await;
    assert_eq!((code, text.as_str()), (200, ""), "no match[]: empty 200");
    let (code, text) = get(srv.addr, "/federate?match[]=fed_a{").await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("match[]"), "{text}");
    let (code, text) = get(
        srv.addr,
        "/federate?match[]=fed_a&match[]=%7B__name__%3D~%22fed_.*%22%7D&match[]=fed_b",
    )
    .await;
    assert_eq!(code, 200);
    let want = format!(
        "# TYPE fed_a untyped\n\
         fed_a{{instance=\"h:1\",job=\"y\"}} +Inf {t}\n\
         fed_a{{instance=\"\",job=\"x\",zone=\"eu\"}} 2.5 {t}\n\
         # TYPE fed_b untyped\n\
         fed_b{{instance=\"\",path=\"a\\\"b\\\\c\"}} -3 {t}\n"
    );
    assert_eq!(
        text, want,
        "the union, each series once, newest sample, stale and old left out"
    );

    // A real Prometheus federates from Sluice and scrapes its /metrics.
    let config = format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: federate
    honor_labels: true
    metrics_path: /federate
    params:
      'match[]': ['{{__name__=~"fed_.*"}}']
    static_configs:
      - targets: ["{sluice}"]
  - job_name: sluice
    static_configs:
      - targets: ["{sluice}"]
"#,
        sluice = srv.addr
    );
    let prom = Prometheus::start(&config, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = format!("http://127.0.0.1:{}/-/ready", prom.port);
    while !reqwest::get(&ready)
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "Prometheus did not get ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let got = loop {
        let v = prom_query(prom.port, "fed_a or fed_b").await;
        let n = v["data"]["result"].as_array().map_or(0, Vec::len);
        let up = prom_query(prom.port, "up{job=\"sluice\"} == 1").await;
        let sluice_up = up["data"]["result"].as_array().map_or(0, Vec::len);
        if (n == 3 && sluice_up == 1) || Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let mut series: Vec<(String, String, f64)> = got["data"]["result"]
        .as_array()
        .expect("vector")
        .iter()
        .map(|s| {
            let m = &s["metric"];
            (
                format!(
                    "{}{{instance={},job={}}}",
                    m["__name__"].as_str().unwrap_or(""),
                    m["instance"],
                    m["job"]
                ),
                s["value"][1].as_str().unwrap_or("").to_owned(),
                s["value"][0].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    series.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<(&str, &str)> = series
        .iter()
        .map(|(n, v, _)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            // honor_labels keeps Sluice's labels (job) instead of the scrape's.
            ("fed_a{instance=\"h:1\",job=\"y\"}", "+Inf"),
            ("fed_a{instance=null,job=\"x\"}", "2.5"),
            // No job of its own: the scrape's. instance="" (added by
            // /federate) keeps Prometheus from adding the target's.
            ("fed_b{instance=null,job=\"federate\"}", "-3"),
        ],
        "{got}"
    );
    // The samples keep Sluice's timestamps.
    let ts = prom_query(prom.port, "timestamp(fed_a{job=\"x\"})").await;
    assert_eq!(
        ts["data"]["result"][0]["value"][1],
        format!("{}", t as f64 / 1000.0),
        "{ts}"
    );
    // Sluice's own metrics arrive too.
    let v = prom_query(prom.port, "sluice_head_series{job=\"sluice\"}").await;
    assert_eq!(v["data"]["result"][0]["value"][1], "5", "{v}");
}

/// Prometheus' `/api/v1/query` answer's series, as (labels, value).
async fn prom_series(port: u16, query: &str) -> Vec<(serde_json::Value, String)> {
    let v = prom_query(port, query).await;
    v["data"]["result"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["metric"].clone(),
                        s["value"][1].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// UTF-8 names (as OpenTelemetry senders make them) go in by remote
/// write, are queried in the quoted form, listed by the label APIs (also
/// in the `U__` form), and federated: escaped with `_` for a client that
/// does not ask (Debian's Prometheus 2.42), as they are for Prometheus
/// 3.5.3, which asks with `escaping=allow-utf-8`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utf8_names_are_stored_queried_listed_and_federated() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 5_000;
    let body = common::body(vec![common::series(
        &[
            ("__name__", "http.server.duration"),
            ("service.name", "api"),
        ],
        &[(t, 42.0)],
    )]);
    let (code, text) = common::push(srv.addr, body).await;
    assert_eq!(code, 204, "{text}");

    let base = format!("http://{}", srv.addr);
    let v = common::api_json(
        &format!("{base}/api/v1/query"),
        &[(
            "query",
            r#"{"http.server.duration", "service.name"="api"}"#.to_owned(),
        )],
    )
    .await;
    assert_eq!(v["data"]["result"][0]["value"][1], "42", "{v}");
    assert_eq!(
        v["data"]["result"][0]["metric"]["service.name"], "api",
        "{v}"
    );
    let v = common::api_json(&format!("{base}/api/v1/labels"), &[]).await;
    assert!(
        v["data"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n == "service.name")),
        "{v}"
    );
    for name in ["service.name", "U__service_2e_name"] {
        let (code, text) = get(srv.addr, &format!("/api/v1/label/{name}/values")).await;
        assert_eq!(code, 200, "{name}: {text}");
        assert!(text.contains(r#""data":["api"]"#), "{name}: {text}");
    }

    // Federation, escaped or quoted as the client asks.
    let fed = format!(
        "{base}/federate?match[]={}",
        "%7B%22http.server.duration%22%7D"
    );
    let plain = reqwest::get(&fed).await.expect("federate");
    assert!(
        plain.headers()["content-type"]
            .to_str()
            .is_ok_and(|c| c.ends_with("escaping=underscores")),
        "{:?}",
        plain.headers()
    );
    let text = plain.text().await.expect("body");
    assert!(
        text.contains(r#"http_server_duration{instance="",service_name="api"} 42 "#),
        "{text}"
    );
    let quoted = reqwest::Client::new()
        .get(&fed)
        .header("accept", "text/plain;version=0.0.4;escaping=allow-utf-8")
        .send()
        .await
        .expect("federate")
        .text()
        .await
        .expect("body");
    assert!(
        quoted.contains(r#"{"http.server.duration",instance="","service.name"="api"} 42 "#),
        "{quoted}"
    );

    // Real scrapers: Prometheus 3.5.3 keeps the names, 2.42 gets them escaped.
    let config = format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: federate
    honor_labels: true
    metrics_path: /federate
    params:
      'match[]': ['{{"http.server.duration"}}']
    static_configs:
      - targets: ["{sluice}"]
"#,
        sluice = srv.addr
    );
    let p3 = Prometheus::start3(&config, &[]);
    let p2 = Prometheus::start(&config, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut got3, mut got2) = (Vec::new(), Vec::new());
    while Instant::now() < deadline && (got3.is_empty() || got2.is_empty()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ready = |p: u16| format!("http://127.0.0.1:{p}/-/ready");
        if !reqwest::get(ready(p3.port))
            .await
            .is_ok_and(|r| r.status().is_success())
            || !reqwest::get(ready(p2.port))
                .await
                .is_ok_and(|r| r.status().is_success())
        {
            continue;
        }
        got3 = prom_series(p3.port, r#"{"http.server.duration"}"#).await;
        got2 = prom_series(p2.port, "http_server_duration").await;
    }
    assert_eq!(got3.len(), 1, "Prometheus 3.5.3 got {got3:?}\n{}", p3.log());
    assert_eq!(got3[0].0["service.name"], "api", "{got3:?}");
    assert_eq!(got3[0].1, "42");
    assert_eq!(got2.len(), 1, "Prometheus 2.42 got {got2:?}\n{}", p2.log());
    assert_eq!(got2[0].0["service_name"], "api", "{got2:?}");
}
