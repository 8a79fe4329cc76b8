//! Relabelling at the door: `--ingest-relabel-config` for every tenant,
//! then a tenant's `metric_relabel_configs` from the runtime config, over
//! remote write 1.0, 2.0 and OTLP. A series the rules drop is answered 2xx
//! and counted; series the rules make one are one; a series left without
//! `__name__` is refused with its reason while the rest is stored; new
//! rules (a reload) take effect for series seen before.

mod common;
#[path = "common/requests.rs"]
mod requests;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message as _;
use sluice::config::Config;

const HEADER: &str = "X-Scope-OrgID";

/// The server's rules: one of each kind the tests look for.
const SERVER_RULES: &str = r#"
- {source_labels: [__name__], regex: 'noisy_.*', action: drop}
- {regex: 'pod_uid', action: labeldrop}
- {source_labels: [instance], regex: '([^:]+):.*', target_label: host, replacement: '$1'}
- {source_labels: [strip], regex: 'yes', target_label: __name__, replacement: ''}
"#;

fn with_rules(dir: &Path, rules: &str) -> Config {
    let path = dir.join("relabel.yaml");
    std::fs::write(&path, rules).expect("write rules");
    Config {
        ingest_relabel_config: path,
        ..Config::default()
    }
}

/// GET `path` with `query` (as `tenant`, if given): the JSON answer.
async fn get_json(
    addr: SocketAddr,
    tenant: Option<&str>,
    path: &str,
    query: &[(&str, &str)],
) -> serde_json::Value {
    let mut req = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .query(query);
    if let Some(t) = tenant {
        req = req.header(HEADER, t);
    }
    let text = req
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// Every series matching `selector` (as `tenant`, if given), as label maps.
async fn series(
    addr: SocketAddr,
    tenant: Option<&str>,
    selector: &str,
) -> Vec<BTreeMap<String, String>> {
    let v = get_json(addr, tenant, "/api/v1/series", &[("match[]", selector)]).await;
    assert_eq!(v["status"], "success", "{v}");
    let mut out: Vec<BTreeMap<String, String>> =
        serde_json::from_value(v["data"].clone()).expect("label sets");
    out.sort();
    out
}

/// The samples of the one series `selector` selects over the last hour.
async fn samples(addr: SocketAddr, tenant: Option<&str>, selector: &str) -> Vec<(f64, String)> {
    let query = format!("{selector}[1h]");
    let v = get_json(addr, tenant, "/api/v1/query", &[("query", &query)]).await;
    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(result.len(), 1, "{selector}: {v}");
    serde_json::from_value(result[0]["values"].clone()).expect("points")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|&(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

/// A remote-write 1.0 request: each series one sample.
fn request(series: &[(&[(&str, &str)], i64)]) -> sluice::proto::prometheus::WriteRequest {
    sluice::proto::prometheus::WriteRequest {
        timeseries: series
            .iter()
            .map(|&(l, t)| common::series(l, &[(t, 1.0)]))
            .collect(),
        metadata: vec![],
    }
}

async fn push_v1(addr: SocketAddr, req: &sluice::proto::prometheus::WriteRequest) -> (u16, String) {
    common::push(addr, common::body(req.timeseries.clone())).await
}

async fn push_v2(addr: SocketAddr, req: &sluice::proto::prometheus::WriteRequest) -> (u16, String) {
    let raw = requests::to_v2(req).encode_to_vec();
    let body = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("compress");
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/write"))
        .header(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )
        .header("content-encoding", "snappy")
        .header("x-prometheus-remote-write-version", "2.0.0")
        .body(body)
        .send()
        .await
        .expect("sent");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

/// An OTLP/JSON gauge point of `name` at `t_ms` with string attributes.
async fn push_otlp(addr: SocketAddr, name: &str, attrs: &[(&str, &str)], t_ms: i64) -> u16 {
    let attributes: Vec<serde_json::Value> = attrs
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": {"stringValue": v}}))
        .collect();
    let body = serde_json::json!({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeMetrics": [{"metrics": [{"name": name, "gauge": {"dataPoints": [{
            "asDouble": 1.0,
            "timeUnixNano": (t_ms * 1_000_000).to_string(),
            "attributes": attributes,
        }]}}]}],
    }]});
    reqwest::Client::new()
        .post(format!("http://{addr}/v1/metrics"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_rules_drop_merge_and_rewrite_series_over_every_protocol() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = common::start(with_rules(dir.path(), SERVER_RULES)).await;
    let addr = srv.addr;
    let t = common::now_ms() - 60_000;

    for (name, v2) in [("kept_v1", false), ("kept_v2", true)] {
        let noisy = format!("noisy_{name}");
        // Twice, so the second request finds each series by its key.
        for (round, dt) in [(0, 0), (1, 1_000)] {
            let req = request(&[
                (
                    &[
                        ("__name__", name),
                        ("pod_uid", "u1"),
                        ("instance", "web-1:9100"),
                    ],
                    t + dt,
                ),
                // The same series once pod_uid is dropped: one series.
                (
                    &[
                        ("__name__", name),
                        ("pod_uid", "u2"),
                        ("instance", "web-1:9100"),
                    ],
                    t + dt + 500,
                ),
                (&[("__name__", &noisy), ("instance", "web-1:9100")], t + dt),
            ]);
            let (status, text) = match v2 {
                false => push_v1(addr, &req).await,
                true => push_v2(addr, &req).await,
            };
            assert_eq!(status, 204, "{name} round {round}: {text}");
        }
        assert_eq!(
            series(addr, None, &format!("{{__name__=~\"{name}|{noisy}\"}}")).await,
            vec![labels(&[
                ("__name__", name),
                ("host", "web-1"),
                ("instance", "web-1:9100")
            ])],
            "{name}"
        );
        let stored: Vec<f64> = samples(addr, None, name)
            .await
            .into_iter()
            .map(|(at, _)| at)
            .collect();
        let want: Vec<f64> = [0, 500, 1_000, 1_500]
            .iter()
            .map(|dt| (t + dt) as f64 / 1000.0)
            .collect();
        assert_eq!(stored, want, "{name}: both sent series' samples, once each");
    }

    // OTLP: a gauge, twice (cached the second time), and a noisy one.
    for dt in [0, 1_000] {
        let status = push_otlp(
            addr,
            "otel_kept",
            &[("pod_uid", "u9"), ("instance", "db-2:5432")],
            t + dt,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(push_otlp(addr, "noisy_otel", &[], t + dt).await, 200);
    }
    assert_eq!(
        series(addr, None, "{__name__=~\"otel_kept|noisy_otel\"}").await,
        vec![labels(&[
            ("__name__", "otel_kept"),
            ("host", "db-2"),
            ("instance", "db-2:5432"),
            ("job", "svc")
        ])]
    );
    assert_eq!(samples(addr, None, "otel_kept").await.len(), 2);

    // A series the rules leave without a name is refused with its reason;
    // the rest of its request is stored.
    let req = request(&[
        (&[("__name__", "nameless"), ("strip", "yes")], t),
        (&[("__name__", "named")], t),
    ]);
    let (status, text) = push_v1(addr, &req).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("missing_metric_name"), "{text}");
    assert_eq!(samples(addr, None, "named").await.len(), 1);

    let (_, metrics) = common::get(addr, "/metrics").await;
    for (protocol, n) in [
        ("remote_write", 2.0),
        ("remote_write_2", 2.0),
        ("otlp", 2.0),
    ] {
        assert_eq!(
            common::metric_value(
                &metrics,
                &format!(
                    "sluice_dropped_samples_total{{protocol=\"{protocol}\",reason=\"relabel\"}}"
                )
            ),
            Some(n),
            "{protocol}: {metrics}"
        );
    }
    assert_eq!(
        common::metric_value(
            &metrics,
            "sluice_ingest_relabel_config_last_reload_successful"
        ),
        Some(1.0)
    );
}

/// Waits (at most 30 s) until `ok` holds for a scrape of `/metrics`.
async fn wait_metrics(addr: SocketAddr, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, m) = common::get(addr, "/metrics").await;
        if ok(&m) || Instant::now() > deadline {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn push_as(addr: SocketAddr, tenant: &str, name: &str, t: i64) -> u16 {
    let body = common::body(vec![common::series(&[("__name__", name)], &[(t, 1.0)])]);
    common::push_with(addr, body, &[(HEADER, tenant)]).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_rules_apply_to_their_tenant_only_and_a_reload_takes_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "overrides:\n  team-a:\n    metric_relabel_configs:\n      \
         - {source_labels: [__name__], regex: 'secret_.*', action: drop}\n",
    )
    .expect("write");
    let srv = common::start(Config {
        multitenancy: true,
        runtime_config_file: runtime.clone(),
        ..with_rules(
            dir.path(),
            "- {source_labels: [__name__], regex: 'noisy', action: drop}\n",
        )
    })
    .await;
    let addr = srv.addr;
    let t = common::now_ms() - 60_000;

    for tenant in ["team-a", "team-b"] {
        for name in ["secret_x", "noisy", "plain"] {
            assert_eq!(push_as(addr, tenant, name, t).await, 204, "{tenant} {name}");
        }
    }
    let names = |v: Vec<BTreeMap<String, String>>| -> Vec<String> {
        v.into_iter().map(|l| l["__name__"].clone()).collect()
    };
    assert_eq!(
        names(series(addr, Some("team-a"), "{__name__=~\".+\"}").await),
        ["plain"],
        "team-a: the server's rule and its own"
    );
    assert_eq!(
        names(series(addr, Some("team-b"), "{__name__=~\".+\"}").await),
        ["plain", "secret_x"],
        "team-b: the server's rule only"
    );
    let (_, metrics) = common::get(addr, "/metrics").await;
    for (tenant, n) in [("team-a", 2.0), ("team-b", 1.0)] {
        assert_eq!(
            common::metric_value(
                &metrics,
                &format!(
                    "sluice_tenant_dropped_samples_total{{tenant=\"{tenant}\",reason=\"relabel\"}}"
                )
            ),
            Some(n),
            "{tenant}: {metrics}"
        );
    }

    // team-a's rule changes: what it dropped before is stored now, though
    // its key was seen under the old rules.
    std::fs::write(
        &runtime,
        "overrides:\n  team-a:\n    metric_relabel_configs:\n      \
         - {source_labels: [__name__], regex: 'plain', action: drop}\n",
    )
    .expect("rewrite");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(push_as(addr, "team-a", "secret_x", t + 1_000).await, 204);
        let got = names(series(addr, Some("team-a"), "{__name__=\"secret_x\"}").await);
        if !got.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the new rules never took effect");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A bad server rules file at reload keeps the rules in force.
    std::fs::write(
        dir.path().join("relabel.yaml"),
        "- {regex: '(', action: keep}\n",
    )
    .expect("break");
    let m = wait_metrics(addr, |m| {
        common::metric_value(m, "sluice_ingest_relabel_config_last_reload_successful") == Some(0.0)
    })
    .await;
    assert_eq!(
        common::metric_value(&m, "sluice_ingest_relabel_config_last_reload_successful"),
        Some(0.0)
    );
    assert_eq!(push_as(addr, "team-b", "noisy", t + 2_000).await, 204);
    assert_eq!(
        names(series(addr, Some("team-b"), "{__name__=\"noisy\"}").await),
        Vec::<String>::new(),
        "the old rules still drop it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rules_stop_the_start_with_the_rule_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = tempfile::tempdir().expect("tempdir");
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: data.path().to_owned(),
        ..with_rules(
            dir.path(),
            "- {source_labels: [a], target_label: t, action: hashmod}\n",
        )
    };
    let err = sluice::server::Server::bind(&config)
        .await
        .expect_err("bad rules");
    assert!(err.to_string().contains("relabel rule 0"), "{err}");
    assert!(err.to_string().contains("modulus"), "{err}");

    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "overrides:\n  team-a:\n    metric_relabel_configs: [{regex: '(', action: drop}]\n",
    )
    .expect("write");
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: data.path().to_owned(),
        runtime_config_file: runtime,
        multitenancy: true,
        ..Config::default()
    };
    let err = sluice::server::Server::bind(&config)
        .await
        .expect_err("bad tenant rules");
    assert!(
        err.to_string().contains("team-a: metric_relabel_configs"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_samples_do_not_spend_the_rate_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "limits:\n  ingestion_rate: 1\n  ingestion_burst_size: 100\n",
    )
    .expect("write");
    let srv = common::start(Config {
        multitenancy: true,
        runtime_config_file: runtime,
        ..with_rules(
            dir.path(),
            "- {source_labels: [__name__], regex: 'noisy', action: drop}\n",
        )
    })
    .await;
    let addr = srv.addr;
    let t = common::now_ms() - 600_000;
    let request = |name: &str, from: i64| {
        let samples: Vec<(i64, f64)> = (0..90).map(|i| (from + i * 1_000, 1.0)).collect();
        common::body(vec![common::series(&[("__name__", name)], &samples)])
    };
    // Far more than the bucket holds, all dropped: each request is
    // charged and then refunded, so none is pushed back.
    for round in 0..5 {
        let (status, text) = common::push_with(
            addr,
            request("noisy", t + round * 100_000),
            &[(HEADER, "a")],
        )
        .await;
        assert_eq!(status, 204, "round {round}: {text}");
    }
    // Stored samples do spend it: the second such request is over.
    let (status, _) = common::push_with(addr, request("kept", t), &[(HEADER, "a")]).await;
    assert_eq!(status, 204);
    let (status, text) =
        common::push_with(addr, request("kept", t + 100_000), &[(HEADER, "a")]).await;
    assert_eq!(status, 503, "{text}");
}
