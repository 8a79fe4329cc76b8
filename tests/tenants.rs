//! Tenants (`--multitenancy`, `X-Scope-OrgID`): each tenant is its own
//! database; every read endpoint sees only the tenant it is asked as; a
//! request without a tenant is 401 and a malformed one 400; with
//! multitenancy off the header changes nothing; and every tenant's
//! acknowledged data survives `kill -9`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use proptest::prelude::*;
use prost::Message as _;
use serde_json::Value;
use sluice::config::Config;
use sluice::proto::prometheus as pb;

const HEADER: &str = "X-Scope-OrgID";

fn multitenant() -> Config {
    Config {
        multitenancy: true,
        ..Config::default()
    }
}

async fn write(
    addr: SocketAddr,
    tenant: Option<&str>,
    series: &[(String, i64, f64)],
) -> (u16, String) {
    let body = common::body(
        series
            .iter()
            .map(|(name, t, v)| common::series(&[("__name__", name), ("job", "j")], &[(*t, *v)]))
            .collect(),
    );
    match tenant {
        Some(t) => common::push_with(addr, body, &[(HEADER, t)]).await,
        None => common::push(addr, body).await,
    }
}

/// GET `path` (with `query`) as `tenant`; status and body.
async fn get_as(
    addr: SocketAddr,
    tenant: Option<&str>,
    path: &str,
    query: &[(&str, &str)],
) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .query(query);
    if let Some(t) = tenant {
        req = req.header(HEADER, t);
    }
    let resp = req.send().await.expect("answered");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn json_as(addr: SocketAddr, tenant: &str, path: &str, query: &[(&str, &str)]) -> Value {
    let (code, text) = get_as(addr, Some(tenant), path, query).await;
    assert_eq!(code, 200, "{path} as {tenant}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"))
}

/// The metric names a tenant sees through each read endpoint.
async fn seen_by(
    addr: SocketAddr,
    tenant: &str,
    now: i64,
) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut seen = BTreeMap::new();
    let names = |v: &Value, pick: &dyn Fn(&Value) -> Option<String>| -> BTreeSet<String> {
        v["data"]
            .as_array()
            .or_else(|| v["data"]["result"].as_array())
            .map(|a| a.iter().filter_map(pick).collect())
            .unwrap_or_default()
    };
    let t = format!("{}", now as f64 / 1000.0);
    let v = json_as(
        addr,
        tenant,
        "/api/v1/query",
        &[("query", "count by (__name__) ({job=\"j\"})"), ("time", &t)],
    )
    .await;
    seen.insert(
        "query",
        names(&v, &|s| s["metric"]["__name__"].as_str().map(str::to_owned)),
    );
    let start = format!("{}", (now - 60_000) as f64 / 1000.0);
    let v = json_as(
        addr,
        tenant,
        "/api/v1/query_range",
        &[
            ("query", "{job=\"j\"}"),
            ("start", &start),
            ("end", &t),
            ("step", "15"),
        ],
    )
    .await;
    seen.insert(
        "query_range",
        names(&v, &|s| s["metric"]["__name__"].as_str().map(str::to_owned)),
    );
    let v = json_as(
        addr,
        tenant,
        "/api/v1/series",
        &[("match[]", "{job=\"j\"}")],
    )
    .await;
    seen.insert(
        "series",
        names(&v, &|s| s["__name__"].as_str().map(str::to_owned)),
    );
    let v = json_as(addr, tenant, "/api/v1/label/__name__/values", &[]).await;
    seen.insert(
        "label_values",
        names(&v, &|s| s.as_str().map(str::to_owned)),
    );
    let (code, text) = get_as(
        addr,
        Some(tenant),
        "/federate",
        &[("match[]", "{job=\"j\"}")],
    )
    .await;
    assert_eq!(code, 200, "{text}");
    seen.insert(
        "federate",
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| l.split(['{', ' ']).next().map(str::to_owned))
            .collect(),
    );
    seen.insert("remote_read", remote_read(addr, tenant, now).await);
    let start = format!("{}", (now - 3_600_000) as f64 / 1000.0);
    for (endpoint, query) in [
        ("status_tsdb", vec![("limit", "1000")]),
        (
            "status_tsdb_ranged",
            vec![
                ("limit", "1000"),
                ("match[]", "{job=\"j\"}"),
                ("start", start.as_str()),
                ("end", t.as_str()),
            ],
        ),
    ] {
        let v = json_as(addr, tenant, "/api/v1/status/tsdb", &query).await;
        seen.insert(
            endpoint,
            v["data"]["seriesCountByMetricName"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        );
    }
    seen
}

async fn remote_read(addr: SocketAddr, tenant: &str, now: i64) -> BTreeSet<String> {
    let req = pb::ReadRequest {
        queries: vec![pb::Query {
            start_timestamp_ms: now - 3_600_000,
            end_timestamp_ms: now + 60_000,
            matchers: vec![pb::LabelMatcher {
                r#type: pb::label_matcher::Type::Eq as i32,
                name: "job".into(),
                value: "j".into(),
            }],
            hints: None,
        }],
        accepted_response_types: vec![],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy");
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/read"))
        .header(HEADER, tenant)
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "snappy")
        .body(body)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    let bytes = resp.bytes().await.expect("body");
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&bytes)
        .expect("snappy");
    let r = pb::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
    r.results
        .iter()
        .flat_map(|q| &q.timeseries)
        .filter_map(|ts| {
            ts.labels
                .iter()
                .find(|l| l.name == "__name__")
                .map(|l| l.value.clone())
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random tenants write random series; asked as each tenant, every read
    /// endpoint shows exactly that tenant's series, and a tenant that never
    /// wrote sees nothing; asked as two tenants at once (federation on),
    /// exactly the two tenants' series.
    #[test]
    fn no_read_crosses_tenants(
        writes in prop::collection::btree_map(
            "[a-z][a-z0-9_.-]{0,12}",
            prop::collection::btree_set("[a-z][a-z0-9_]{0,10}", 1..6),
            1..5,
        )
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        rt.block_on(async move {
            let srv = common::start(Config { tenant_federation_enabled: true, ..multitenant() }).await;
            let now = common::now_ms();
            for (tenant, names) in &writes {
                // Names carry their tenant, so a crossing is visible.
                let series: Vec<_> = names.iter().map(|n| (format!("{n}_{}", tenant.replace(['.', '-'], "_")), now - 1000, 1.0)).collect();
                let (code, text) = write(srv.addr, Some(tenant), &series).await;
                assert_eq!(code, 204, "{text}");
            }
            let mut asked: Vec<&str> = writes.keys().map(String::as_str).collect();
            asked.push("never-wrote");
            for tenant in asked {
                let want: BTreeSet<String> = writes
                    .get(tenant)
                    .map(|names| names.iter().map(|n| format!("{n}_{}", tenant.replace(['.', '-'], "_"))).collect())
                    .unwrap_or_default();
                for (endpoint, got) in seen_by(srv.addr, tenant, now).await {
                    assert_eq!(got, want, "{endpoint} as {tenant}");
                }
            }
            let own = |tenant: &str| -> BTreeSet<String> {
                writes
                    .get(tenant)
                    .map(|names| names.iter().map(|n| format!("{n}_{}", tenant.replace(['.', '-'], "_"))).collect())
                    .unwrap_or_default()
            };
            let ids: Vec<&str> = writes.keys().map(String::as_str).collect();
            let (first, last) = (ids[0], ids[ids.len() - 1]);
            let pair = format!("{last}|{first}|never-wrote");
            let want: BTreeSet<String> = own(first).union(&own(last)).cloned().collect();
            for (endpoint, got) in seen_by(srv.addr, &pair, now).await {
                assert_eq!(got, want, "{endpoint} as {pair}");
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_a_good_tenant_are_refused() {
    let srv = common::start(multitenant()).await;
    let series = [("m".to_owned(), common::now_ms(), 1.0)];
    let (code, text) = write(srv.addr, None, &series).await;
    assert_eq!(code, 401, "{text}");
    assert!(text.contains("X-Scope-OrgID"), "{text}");
    let (code, _) = get_as(srv.addr, None, "/api/v1/query", &[("query", "1")]).await;
    assert_eq!(code, 401);
    for bad in [".", "..", "a/b", "a|b", &"x".repeat(151)] {
        let (code, text) = write(srv.addr, Some(bad), &series).await;
        assert_eq!(code, 400, "{bad:?}: {text}");
        let (code, _) = get_as(srv.addr, Some(bad), "/api/v1/series", &[("match[]", "m")]).await;
        assert_eq!(code, 400, "{bad:?}");
    }
    // Health, readiness and self-metrics need no tenant.
    for path in [
        "/-/healthy",
        "/-/ready",
        "/metrics",
        "/query",
        "/assets/query.js",
        "/api/v1/parse_query?query=up",
    ] {
        let (code, _) = get_as(srv.addr, None, path, &[]).await;
        assert_eq!(code, 200, "{path}");
    }
    // A write refused before it is decoded opens no tenant either.
    let body = common::body(vec![common::series(
        &[("__name__", "m")],
        &[(common::now_ms(), 1.0)],
    )]);
    let (code, text) = common::push_with(
        srv.addr,
        body,
        &[(HEADER, "ghost"), ("content-encoding", "zstd")],
    )
    .await;
    assert!((400..500).contains(&code), "{code}: {text}");
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/metrics", srv.addr))
        .header(HEADER, "ghost-otlp")
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "br")
        .body(vec![1u8, 2, 3])
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 415);
    // Nothing was opened for the refused tenants.
    assert_eq!(srv.state.tenants().all().len(), 1, "only anonymous");
    // An accepted OTLP write as a tenant opens it, and is its own.
    let resp = reqwest::Client::new()
        .post(format!("http://{}/v1/metrics", srv.addr))
        .header(HEADER, "otel")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(srv.state.tenants().all().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_multitenancy_the_header_changes_nothing() {
    let srv = common::start(Config::default()).await;
    let now = common::now_ms();
    let (code, text) = write(srv.addr, Some("team-a"), &[("shared".to_owned(), now, 1.0)]).await;
    assert_eq!(code, 204, "{text}");
    let (code, text) = get_as(
        srv.addr,
        Some("team-b"),
        "/api/v1/query",
        &[("query", "shared")],
    )
    .await;
    assert_eq!(code, 200);
    assert!(text.contains("\"shared\""), "{text}");
    let (code, text) = get_as(srv.addr, None, "/api/v1/query", &[("query", "shared")]).await;
    assert_eq!(code, 200);
    assert!(text.contains("\"shared\""), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_tenants_past_the_limit_are_pushed_back() {
    let srv = common::start(Config {
        max_tenants: 2,
        ..multitenant()
    })
    .await;
    let now = common::now_ms();
    let s = [("m".to_owned(), now, 1.0)];
    assert_eq!(write(srv.addr, Some("first"), &s).await.0, 204);
    let resp = reqwest::Client::new()
        .post(format!("http://{}/api/v1/write", srv.addr))
        .header(HEADER, "second")
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "snappy")
        .body(common::body(vec![common::series(
            &[("__name__", "m")],
            &[(now, 1.0)],
        )]))
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    assert!(resp.text().await.expect("body").contains("max-tenants"));
    // The open ones still take writes; `anonymous` is the root database.
    assert_eq!(write(srv.addr, Some("first"), &s).await.0, 204);
    assert_eq!(write(srv.addr, Some("anonymous"), &s).await.0, 204);
}

/// `kill -9` with several tenants: each one's acknowledged samples are
/// back after the restart, and still apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tenant_survives_kill_9() {
    let data = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_sluice");
    let args = ["--multitenancy", "true"];
    let (child, addr) = common::spawn_sluice(bin, data.path(), "warn,sluice::server=info", &args);
    let mut child = common::KillOnDrop(child);
    let now = common::now_ms();
    let tenants = ["alpha", "beta", "gamma.prod", "anonymous"];
    for (i, t) in tenants.iter().enumerate() {
        let series: Vec<_> = (0..50)
            .map(|k| (format!("m{k}"), now - 1000, (i * 100 + k) as f64))
            .collect();
        let (code, text) = write(addr, Some(t), &series).await;
        assert_eq!(code, 204, "{t}: {text}");
    }
    child.kill();
    let (child, addr) = common::spawn_sluice(bin, data.path(), "warn,sluice::server=info", &args);
    let _child = common::KillOnDrop(child);
    let t = format!("{}", now as f64 / 1000.0);
    for (i, tenant) in tenants.iter().enumerate() {
        let v = json_as(
            addr,
            tenant,
            "/api/v1/query",
            &[("query", "sum({__name__=~\"m.*\"})"), ("time", &t)],
        )
        .await;
        let want = (0..50).map(|k| (i * 100 + k) as f64).sum::<f64>();
        assert_eq!(
            v["data"]["result"][0]["value"][1],
            want.to_string(),
            "{tenant}: {v}"
        );
    }
}

/// Sluice with multitenancy, forwarding to the destinations `specs`
/// (`--forward` flags).
async fn forwarding(specs: &[String]) -> common::TestServer {
    common::start(Config {
        forward: specs
            .iter()
            .map(|f| f.parse().expect("destination"))
            .collect(),
        ..multitenant()
    })
    .await
}

/// Forwarding with multitenancy: a destination with `tenant-header`
/// (another Sluice, which keeps tenants apart by `X-Scope-OrgID`) gets
/// each tenant's samples under that tenant's ID; one bound to `tenants`
/// (VictoriaMetrics 1.79) gets only those tenants' samples; each tenant's
/// forwarding is counted under its own `tenant` label.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forwarding_carries_each_tenant_on_or_sends_only_the_bound_ones() {
    let vm = common::downstream::VictoriaMetrics::start();
    vm.ready().await;
    let down = common::start(multitenant()).await;
    let forward = [
        format!(
            "http://{}/api/v1/write,name=down,tenant-header={HEADER},batch-send-deadline=100ms",
            down.addr
        ),
        format!(
            "{},name=vm,tenants=team-a,batch-send-deadline=100ms",
            vm.write_url()
        ),
    ];
    let up = forwarding(&forward).await;
    let now = common::now_ms();
    let team = |name: &str| -> Vec<(String, i64, f64)> {
        (0..5)
            .map(|i| (name.to_owned(), now - 1000 * (4 - i), i as f64))
            .collect()
    };
    for (tenant, name) in [("team-a", "a_only"), ("team-b", "b_only")] {
        let (code, text) = write(up.addr, Some(tenant), &team(name)).await;
        assert_eq!(code, 204, "{text}");
    }
    // Downstream, each tenant sees its own samples, and only them.
    let t = format!("{}", now as f64 / 1000.0);
    let names_as = |tenant: &'static str| {
        let t = t.clone();
        async move {
            let v = json_as(
                down.addr,
                tenant,
                "/api/v1/query",
                &[("query", "{job=\"j\"}[1m]"), ("time", &t)],
            )
            .await;
            v["data"]["result"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| {
                            (
                                s["metric"]["__name__"].as_str().unwrap_or("?").to_owned(),
                                s["values"].as_array().map_or(0, Vec::len),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        }
    };
    let mut seen = (Vec::new(), Vec::new());
    for _ in 0..150 {
        seen = (names_as("team-a").await, names_as("team-b").await);
        if !seen.0.is_empty() && !seen.1.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(seen.0, vec![("a_only".to_owned(), 5)]);
    assert_eq!(seen.1, vec![("b_only".to_owned(), 5)]);
    // VictoriaMetrics, bound to team-a, has a_only and never b_only.
    let base = format!("http://{}", vm.addr());
    let mut got = Vec::new();
    for _ in 0..150 {
        got =
            common::downstream::raw_samples(&base, "{job=\"j\"}", "1m", now as f64 / 1000.0).await;
        if got.len() >= 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.iter().all(|(l, _, _)| l.contains("a_only")), "{got:?}");
    // Each tenant's forwarding is its own series in /metrics.
    for (dest, tenant) in [("down", "team-a"), ("down", "team-b"), ("vm", "team-a")] {
        let series = format!(
            "sluice_forward_samples_sent_total{{destination=\"{dest}\",tenant=\"{tenant}\"}}"
        );
        let sent = common::wait_for_metric(up.addr, &series, |v| v == 5.0).await;
        assert_eq!(sent, 5.0, "{series}");
    }
    let (_, metrics) = common::get(up.addr, "/metrics").await;
    assert!(
        !metrics
            .contains("sluice_forward_samples_sent_total{destination=\"vm\",tenant=\"team-b\"}"),
        "team-b has no forwarder to vm"
    );
}

/// Forward destinations that would mix tenants downstream, or bind
/// tenants without multitenancy, are refused at start by name.
#[test]
fn forwarding_that_would_mix_tenants_is_refused() {
    for (multitenancy, spec, says) in [
        (true, "http://a:1/w", "set tenant-header"),
        (true, "http://a:1/w,tenants=a|b", "would arrive mixed"),
        (
            false,
            "http://a:1/w,tenants=x",
            "tenants needs --multitenancy",
        ),
        (true, "http://a:1/w,tenants=a/b", "tenants: tenant ID"),
        (
            true,
            "http://a:1/w,tenant-header=X-Scope-OrgID,header=x-scope-orgid:t",
            "also a fixed header",
        ),
    ] {
        let config = Config {
            multitenancy,
            forward: vec![spec.parse().expect("destination")],
            ..Config::default()
        };
        let e = config.validate().expect_err(spec).to_string();
        assert!(e.contains(says), "{spec}: {e}");
    }
}

/// With --tenant-federation-enabled a read may name several tenants,
/// `a|b`: every read endpoint answers their union, each series labelled
/// `__tenant_id__`; matchers on that label choose tenants; a write, or a
/// read of an endpoint that takes one tenant, still needs one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn federated_reads_answer_the_union_labelled_by_tenant() {
    let srv = common::start(Config {
        tenant_federation_enabled: true,
        tenant_federation_max_tenants: 2,
        ..multitenant()
    })
    .await;
    let now = common::now_ms();
    for (tenant, names) in [
        ("team-a", ["a_only", "both"]),
        ("team-b", ["b_only", "both"]),
        ("team-c", ["c_only", "c_too"]),
    ] {
        let series: Vec<(String, i64, f64)> =
            names.iter().map(|n| ((*n).to_owned(), now, 1.0)).collect();
        let (code, text) = write(srv.addr, Some(tenant), &series).await;
        assert_eq!(code, 204, "{text}");
    }
    let union: BTreeSet<String> = ["a_only", "b_only", "both"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    // Unsorted and repeated IDs name the same two tenants.
    for (endpoint, names) in seen_by(srv.addr, "team-b|team-a|team-b", now).await {
        assert_eq!(names, union, "{endpoint}");
    }
    let t = format!("{}", now as f64 / 1000.0);
    let tenants_of = |v: &Value| -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = v["data"]["result"]
            .as_array()
            .expect("a vector")
            .iter()
            .map(|s| {
                (
                    s["metric"]["__name__"].as_str().unwrap_or("").to_owned(),
                    s["metric"]["__tenant_id__"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                )
            })
            .collect();
        out.sort();
        out
    };
    for (query, want) in [
        ("both", [("both", "team-a"), ("both", "team-b")]),
        (
            "{job=\"j\", __tenant_id__=\"team-b\"}",
            [("b_only", "team-b"), ("both", "team-b")],
        ),
    ] {
        let v = json_as(
            srv.addr,
            "team-a|team-b",
            "/api/v1/query",
            &[("query", query), ("time", &t)],
        )
        .await;
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect();
        assert_eq!(tenants_of(&v), want, "{query}");
    }
    let v = json_as(
        srv.addr,
        "team-a|team-b",
        "/api/v1/label/__tenant_id__/values",
        &[],
    )
    .await;
    assert_eq!(v["data"], serde_json::json!(["team-a", "team-b"]));
    let v = json_as(srv.addr, "team-a|team-b", "/api/v1/labels", &[]).await;
    assert!(
        v["data"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n == "__tenant_id__")),
        "{v}"
    );
    // One tenant named twice is one tenant: no tenant label.
    let v = json_as(
        srv.addr,
        "team-a|team-a",
        "/api/v1/query",
        &[("query", "both"), ("time", &t)],
    )
    .await;
    assert_eq!(tenants_of(&v), [("both".to_owned(), String::new())]);
    // Past --tenant-federation-max-tenants, a write, or an endpoint that
    // reads one tenant: refused by name.
    let (code, text) = get_as(
        srv.addr,
        Some("team-a|team-b|team-c"),
        "/api/v1/query",
        &[("query", "both")],
    )
    .await;
    assert_eq!(code, 400);
    assert!(text.contains("max: 2 actual: 3"), "{text}");
    let (code, text) = write(srv.addr, Some("team-a|team-b"), &[("x".into(), now, 1.0)]).await;
    assert_eq!(code, 400);
    assert!(text.contains("not several"), "{text}");
    let (code, text) = get_as(srv.addr, Some("team-a|team-b"), "/api/v1/metadata", &[]).await;
    assert_eq!(code, 400);
    assert!(text.contains("not several"), "{text}");
    // Exemplars too: each tenant's, labelled with it.
    for tenant in ["team-a", "team-b"] {
        let mut ts = common::series(&[("__name__", "traced"), ("job", "j")], &[(now, 1.0)]);
        ts.exemplars.push(pb::Exemplar {
            labels: vec![pb::Label {
                name: "trace_id".into(),
                value: tenant.into(),
            }],
            value: 1.0,
            timestamp: now,
        });
        let (code, text) =
            common::push_with(srv.addr, common::body(vec![ts]), &[(HEADER, tenant)]).await;
        assert_eq!(code, 204, "{text}");
    }
    let from = format!("{}", (now - 60_000) as f64 / 1000.0);
    let v = json_as(
        srv.addr,
        "team-a|team-b",
        "/api/v1/query_exemplars",
        &[("query", "traced"), ("start", &from), ("end", &t)],
    )
    .await;
    let got: Vec<(String, String)> = v["data"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["seriesLabels"]["__tenant_id__"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                s["exemplars"][0]["labels"]["trace_id"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("team-a".to_owned(), "team-a".to_owned()),
            ("team-b".to_owned(), "team-b".to_owned())
        ]
    );
}

/// A tenant that holds nothing after retention is closed: it leaves the
/// open tenants and `/metrics` (its forwarding metrics too), its directory
/// is removed, and its next write opens it anew. A tenant that holds
/// data, one a request is using, or one whose log a destination has not
/// been sent yet stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_holds_nothing_is_closed_and_opens_again() {
    let down = common::start(multitenant()).await;
    let forward = [
        format!(
            "http://{}/api/v1/write,name=down,tenant-header={HEADER},batch-send-deadline=100ms",
            down.addr
        ),
        // Nothing listens on port 1: `stuck`'s samples stay unsent.
        "http://127.0.0.1:1/api/v1/write,name=dead,tenants=stuck".to_owned(),
    ];
    let srv = forwarding(&forward).await;
    let now = common::now_ms();
    for tenant in ["gone", "kept", "stuck"] {
        let (code, text) = write(srv.addr, Some(tenant), &[("up".into(), now, 1.0)]).await;
        assert_eq!(code, 204, "{text}");
    }
    let sent = "sluice_forward_samples_sent_total{destination=\"down\",tenant=\"gone\"}";
    assert_eq!(
        common::wait_for_metric(srv.addr, sent, |v| v == 1.0).await,
        1.0
    );
    let pending = |dest: &str, tenant: &str| {
        format!("sluice_forward_pending_bytes{{destination=\"{dest}\",tenant=\"{tenant}\"}}")
    };
    let gone_pending = pending("down", "gone");
    assert_eq!(
        common::wait_for_metric(srv.addr, &gone_pending, |v| v == 0.0).await,
        0.0
    );
    let stuck_pending = pending("dead", "stuck");
    assert!(common::wait_for_metric(srv.addr, &stuck_pending, |v| v > 0.0).await > 0.0);
    let tenants = srv.state.tenants();
    let dir = srv.data_dir().join("tenants").join("gone");
    assert!(dir.is_dir());
    // Nothing to close while all hold a series.
    assert_eq!(tenants.close_idle().await, 0);
    // Retention takes everything `gone` and `stuck` hold.
    let open = tenants.all();
    for t in open
        .iter()
        .filter(|t| ["gone", "stuck"].contains(&t.id.as_str()))
    {
        t.db.apply_retention(now + 1);
    }
    // While a request holds it, it stays.
    assert_eq!(tenants.close_idle().await, 0);
    drop(open);
    assert_eq!(tenants.close_idle().await, 1, "gone, not stuck");
    let open: Vec<String> = tenants.all().iter().map(|t| t.id.to_string()).collect();
    assert_eq!(open, ["anonymous", "kept", "stuck"]);
    assert!(!dir.exists(), "its directory is removed");
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert!(!metrics.contains("tenant=\"gone\""), "{metrics}");
    assert!(
        metrics.contains("sluice_tenant_series{tenant=\"kept\"} 1"),
        "{metrics}"
    );
    // Its next write opens it again, empty but for the write.
    let (code, text) = write(srv.addr, Some("gone"), &[("again".into(), now, 2.0)]).await;
    assert_eq!(code, 204, "{text}");
    assert!(dir.is_dir());
    let seen = seen_by(srv.addr, "gone", now).await;
    assert_eq!(
        seen["series"],
        ["again".to_owned()].into_iter().collect::<BTreeSet<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_and_deletion_are_each_tenants_own() {
    let srv = common::start(Config {
        web_enable_admin_api: true,
        ..multitenant()
    })
    .await;
    let now = common::now_ms();
    for (tenant, names) in [
        ("team-a", ["shared", "only_a"]),
        ("team-b", ["shared", "only_b"]),
    ] {
        let series: Vec<(String, i64, f64)> =
            names.iter().map(|n| ((*n).to_owned(), now, 1.0)).collect();
        let (code, text) = write(srv.addr, Some(tenant), &series).await;
        assert_eq!(code, 204, "{text}");
    }
    // A browser names no tenant: a form to name one, no tenant's figures.
    let (code, html) = get_as(srv.addr, None, "/", &[]).await;
    assert_eq!(code, 200, "{html}");
    assert!(
        html.contains("<form") && html.contains("name=\"tenant\""),
        "{html}"
    );
    assert!(!html.contains("Head series"), "{html}");
    // Named in the URL or in the header, it is that tenant's page.
    for (tenant, query) in [("team-a", Some("team-a")), ("team-b", None)] {
        let q: Vec<(&str, &str)> = query.map(|t| ("tenant", t)).into_iter().collect();
        let header = query.is_none().then_some(tenant);
        let (code, html) = get_as(srv.addr, header, "/", &q).await;
        assert_eq!(code, 200, "{html}");
        assert!(
            html.contains(&format!("<th>Tenant</th><td>{tenant}</td>")),
            "{html}"
        );
        assert!(html.contains("<th>Head series</th><td>2</td>"), "{html}");
    }
    // A bad ID in the URL is refused as in the header.
    let (code, _) = get_as(srv.addr, None, "/", &[("tenant", "a/b")]).await;
    assert_eq!(code, 400);

    // Deleting as one tenant leaves the other's series alone.
    let resp = reqwest::Client::new()
        .post(format!(
            "http://{}/api/v1/admin/tsdb/delete_series",
            srv.addr
        ))
        .header(HEADER, "team-a")
        .form(&[("match[]", "{__name__=~\"shared|only_a\"}")])
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 204);
    let names = |v: Value| -> BTreeSet<String> {
        v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["__name__"].as_str().map(str::to_owned))
            .collect()
    };
    let q = [("match[]", "{job=\"j\"}")];
    let a = names(json_as(srv.addr, "team-a", "/api/v1/series", &q).await);
    let b = names(json_as(srv.addr, "team-b", "/api/v1/series", &q).await);
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(
        b,
        BTreeSet::from(["only_b".to_owned(), "shared".to_owned()])
    );
}
