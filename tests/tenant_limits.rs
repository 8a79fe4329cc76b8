//! Per-tenant limits and bindings from the runtime configuration file
//! (`--runtime-config-file`, Mimir's names): a tenant over its ingestion
//! rate is pushed back with 503 and `Retry-After` while another writes on;
//! a request larger than its burst is a 400 that names the limit; series,
//! label and query-sample limits hold per tenant; logins bound to tenants
//! get 403 elsewhere; the file is reloaded when it changes, and a bad one
//! keeps the limits in force.

mod common;
#[path = "common/otlp_requests.rs"]
mod otlp_requests;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use prost::Message as _;
use sluice::config::Config;

const HEADER: &str = "X-Scope-OrgID";

fn with_runtime(dir: &Path, yaml: &str) -> Config {
    let path = dir.join("runtime.yaml");
    std::fs::write(&path, yaml).expect("write runtime config");
    Config {
        multitenancy: true,
        runtime_config_file: path,
        ..Config::default()
    }
}

/// Sluice with multitenancy and the runtime config `yaml` (kept in the
/// directory returned).
async fn limited(yaml: &str) -> (tempfile::TempDir, common::TestServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = common::start(with_runtime(dir.path(), yaml)).await;
    (dir, srv)
}

/// A request of `n` series of `name`, one sample each at `t`, with
/// `labels` more on each.
fn batch(name: &str, n: usize, t: i64, labels: &[(&str, &str)]) -> Vec<u8> {
    common::body(
        (0..n)
            .map(|i| {
                let i = i.to_string();
                let mut l = vec![("__name__", name), ("i", i.as_str())];
                l.extend_from_slice(labels);
                common::series(&l, &[(t, 1.0)])
            })
            .collect(),
    )
}

async fn push_as(addr: SocketAddr, tenant: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/write"))
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "snappy")
        .header(HEADER, tenant)
        .body(body)
        .send()
        .await
        .expect("answered")
}

/// GET `path` with `query` as `tenant`, which must answer 200: its JSON.
async fn json_as(
    addr: SocketAddr,
    tenant: &str,
    path: &str,
    query: &[(&str, &str)],
) -> serde_json::Value {
    let resp = reqwest::Client::new()
        .get(format!("http://{addr}{path}"))
        .query(query)
        .header(HEADER, tenant)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status(), 200);
    serde_json::from_str(&resp.text().await.expect("body")).expect("json")
}

/// How many series of `name` tenant `tenant` holds.
async fn count(addr: SocketAddr, tenant: &str, name: &str) -> usize {
    let v = json_as(addr, tenant, "/api/v1/series", &[("match[]", name)]).await;
    v["data"].as_array().map_or(0, Vec::len)
}

/// Writes `body` as `tenant`, which must be refused with a 400 saying
/// each of `says`, and counted as `refused` samples of `reason`.
async fn refused_by_name(
    addr: SocketAddr,
    tenant: &str,
    body: Vec<u8>,
    says: &[&str],
    reason: &str,
    refused: f64,
) {
    let r = push_as(addr, tenant, body).await;
    assert_eq!(r.status(), 400);
    let text = r.text().await.expect("body");
    assert!(says.iter().all(|s| text.contains(s)), "{text}");
    let series =
        format!("sluice_tenant_rejected_samples_total{{tenant=\"{tenant}\",reason=\"{reason}\"}}");
    assert_eq!(common::self_metric(addr, &series).await, Some(refused));
}

#[tokio::test]
async fn a_tenant_over_its_rate_is_pushed_back_and_the_others_write_on() {
    // One sample a second: a refusal here cannot turn into a pass on a
    // slow machine.
    let (_dir, srv) =
        limited("overrides:\n  slow:\n    ingestion_rate: 1\n    ingestion_burst_size: 1000\n")
            .await;
    let t = common::now_ms();
    // The bucket starts full: 600 of its 1,000 pass.
    let r = push_as(srv.addr, "slow", batch("a", 600, t, &[])).await;
    assert_eq!(r.status(), 204);
    // The next 500 wait for the 100 missing; nothing of them is stored.
    let r = push_as(srv.addr, "slow", batch("b", 500, t, &[])).await;
    assert_eq!(r.status(), 503);
    let wait: u64 = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((99..=100).contains(&wait), "100 samples at 1/s: {wait}");
    let text = r.text().await.expect("body");
    assert!(
        text.contains("tenant slow") && text.contains("ingestion rate limit"),
        "{text}"
    );
    assert_eq!(count(srv.addr, "slow", "b").await, 0);
    // Larger than the burst: never, said as a 400.
    let r = push_as(srv.addr, "slow", batch("c", 1001, t, &[])).await;
    assert_eq!(r.status(), 400);
    let text = r.text().await.expect("body");
    assert!(text.contains("ingestion_burst_size of 1000"), "{text}");
    // A spent bucket refuses before the body is even decoded: garbage
    // gets the same 503 as a valid request.
    let r = push_as(srv.addr, "slow", batch("d", 400, t, &[])).await;
    assert_eq!(r.status(), 204);
    let r = push_as(srv.addr, "slow", b"not snappy".to_vec()).await;
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    // Another tenant, without limits, writes on meanwhile.
    for k in 0..20 {
        let r = push_as(srv.addr, "fast", batch("a", 2000, t + k, &[])).await;
        assert_eq!(r.status(), 204, "{}", r.text().await.unwrap_or_default());
    }
    assert_eq!(count(srv.addr, "fast", "a").await, 2000);
    assert_eq!(count(srv.addr, "slow", "a").await, 600);
    let (_, metrics) = common::get(srv.addr, "/metrics").await;
    assert_eq!(
        common::metric_value(
            &metrics,
            "sluice_write_rate_limited_requests_total{protocol=\"remote_write\"}"
        ),
        Some(3.0),
        "{metrics}"
    );
    // Per tenant: what each stored and what was refused.
    for (series, want) in [
        (
            "sluice_tenant_rate_limited_requests_total{tenant=\"slow\"}",
            3.0,
        ),
        (
            "sluice_tenant_rate_limited_requests_total{tenant=\"fast\"}",
            0.0,
        ),
        (
            "sluice_tenant_ingested_samples_total{tenant=\"fast\"}",
            40_000.0,
        ),
        (
            "sluice_tenant_ingested_samples_total{tenant=\"slow\"}",
            1000.0,
        ),
        ("sluice_tenant_series{tenant=\"fast\"}", 2000.0),
        ("sluice_tenants", 3.0),
    ] {
        assert_eq!(
            common::metric_value(&metrics, series),
            Some(want),
            "{series}: {metrics}"
        );
    }
}

#[tokio::test]
async fn otlp_points_take_tokens_before_they_are_stored_and_their_samples_after() {
    let (_dir, srv) = limited("limits:\n  ingestion_rate: 1\n  ingestion_burst_size: 3000\noverrides:\n  tiny:\n    ingestion_burst_size: 500\n").await;
    let post = |tenant: &'static str, t: i64| {
        let body = otlp_requests::request(t).encode_to_vec();
        reqwest::Client::new()
            .post(format!("http://{}/v1/metrics", srv.addr))
            .header("content-type", "application/x-protobuf")
            .header(HEADER, tenant)
            .body(body)
            .send()
    };
    let t = common::now_ms();
    // 1,000 points become 2,200 samples: the first request takes 1,000
    // tokens and is charged 1,200 more, so 800 are left: the second waits.
    assert_eq!(
        post("otel", t - 1000).await.expect("answered").status(),
        200
    );
    let r = post("otel", t).await.expect("answered");
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    // 1,000 points could never fit a burst of 500.
    let r = post("tiny", t).await.expect("answered");
    assert_eq!(r.status(), 400);
    let text = r.text().await.expect("body");
    assert!(text.contains("ingestion_burst_size of 500"), "{text}");
}

#[tokio::test]
async fn rate_limit_status_429_is_for_senders_set_up_to_retry_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = common::start(Config {
        rate_limit_status: 429,
        ..with_runtime(
            dir.path(),
            "limits:\n  ingestion_rate: 1\n  ingestion_burst_size: 10\n",
        )
    })
    .await;
    let t = common::now_ms();
    assert_eq!(
        push_as(srv.addr, "t", batch("a", 10, t, &[]))
            .await
            .status(),
        204
    );
    let r = push_as(srv.addr, "t", batch("a", 10, t + 1, &[])).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().contains_key("retry-after"));
}

#[tokio::test]
async fn series_label_and_query_limits_hold_per_tenant() {
    let (_dir, srv) = limited("overrides:\n  small:\n    max_global_series_per_user: 3\n    max_label_names_per_series: 3\n    max_query_samples: 10\n    max_query_concurrency: 1\n").await;
    let t = common::now_ms();
    // Series past the tenant's limit are refused with a 400 that names
    // it; the rest of the request is stored.
    refused_by_name(
        srv.addr,
        "small",
        batch("s", 5, t, &[]),
        &["max_global_series_per_user"],
        "series_limit",
        2.0,
    )
    .await;
    assert_eq!(count(srv.addr, "small", "s").await, 3);
    let r = push_as(srv.addr, "big", batch("s", 5, t, &[])).await;
    assert_eq!(r.status(), 204);
    assert_eq!(count(srv.addr, "big", "s").await, 5);
    // Four labels: one too many for `small` only.
    let four = [("x", "1"), ("y", "2")];
    let r = push_as(srv.addr, "small", batch("l", 1, t, &four)).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.expect("body").contains("labels"));
    let r = push_as(srv.addr, "big", batch("l", 1, t, &four)).await;
    assert_eq!(r.status(), 204);
    // A query over more samples than `small` may hold.
    let ask = |tenant: &'static str| {
        reqwest::Client::new()
            .get(format!("http://{}/api/v1/query_range", srv.addr))
            .query(&[
                ("query", "sum(s) + sum(s)"),
                ("start", &(t / 1000).to_string()),
                ("end", &((t / 1000) + 60).to_string()),
                ("step", "1"),
            ])
            .header(HEADER, tenant)
            .send()
    };
    let r = ask("small").await.expect("answered");
    assert_eq!(r.status(), 422);
    assert!(r.text().await.expect("body").contains("too many samples"));
    assert_eq!(ask("big").await.expect("answered").status(), 200);
    // With max_query_concurrency 1, a failed query gave its turn back: the
    // next of `small`'s queries runs (a turn kept would time it out).
    answers(srv.addr, "small", "count(s)").await;
}

/// Queries `query` as `tenant` (within 5 s), which must answer 200.
async fn answers(addr: SocketAddr, tenant: &str, query: &str) {
    let r = reqwest::Client::new()
        .get(format!("http://{addr}/api/v1/query"))
        .query(&[("query", query), ("timeout", "5s")])
        .header(HEADER, tenant)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

#[tokio::test]
async fn the_per_metric_series_limit_holds_per_tenant() {
    let (_dir, srv) = limited("overrides:\n  small:\n    max_global_series_per_metric: 3\n").await;
    let t = common::now_ms();
    // Five series of m and two of n in one request: two of m are refused
    // by name, the rest is stored.
    let mut body = pb_series("m", 5, t);
    body.extend(pb_series("n", 2, t));
    refused_by_name(
        srv.addr,
        "small",
        common::body(body),
        &[
            "per-metric series limit of 3",
            "max_global_series_per_metric",
        ],
        "per_metric_series_limit",
        2.0,
    )
    .await;
    assert_eq!(count(srv.addr, "small", "m").await, 3);
    assert_eq!(count(srv.addr, "small", "n").await, 2);
    // Another tenant is not limited.
    let r = push_as(srv.addr, "big", batch("m", 5, t, &[])).await;
    assert_eq!(r.status(), 204);
}

/// `max_global_exemplars_per_user` (or `max_exemplars`) bounds each
/// tenant's exemplars, newest kept; 0 keeps none; a tenant without an
/// override keeps `--max-exemplars`.
#[tokio::test]
async fn the_exemplar_limit_holds_per_tenant() {
    let (_dir, srv) = limited("overrides:\n  small:\n    max_exemplars: 2\n  none:\n    max_global_exemplars_per_user: 0\n").await;
    let t = common::now_ms();
    let held = |tenant: &'static str| async move {
        let (start, end) = (
            format!("{}", (t - 60_000) as f64 / 1000.0),
            format!("{}", (t + 60_000) as f64 / 1000.0),
        );
        let query = [("query", "rpc_total"), ("start", &start), ("end", &end)];
        let v = json_as(srv.addr, tenant, "/api/v1/query_exemplars", &query).await;
        v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["exemplars"].as_array().cloned().unwrap_or_default())
            .map(|e| e["labels"]["trace_id"].as_str().unwrap_or("?").to_owned())
            .collect::<Vec<_>>()
    };
    for tenant in ["small", "none", "big"] {
        for k in 0..5 {
            let mut ts = common::series(&[("__name__", "rpc_total")], &[(t + k * 1000, 1.0)]);
            ts.exemplars.push(sluice::proto::prometheus::Exemplar {
                labels: vec![sluice::proto::prometheus::Label {
                    name: "trace_id".into(),
                    value: format!("t{k}"),
                }],
                value: 1.0,
                timestamp: t + k * 1000,
            });
            let r = push_as(srv.addr, tenant, common::body(vec![ts])).await;
            assert_eq!(r.status(), 204, "{tenant}");
        }
    }
    assert_eq!(held("small").await, ["t3", "t4"]);
    assert!(held("none").await.is_empty());
    assert_eq!(held("big").await, ["t0", "t1", "t2", "t3", "t4"]);
}

/// Tenants that never wrote take no query turns: a federated query naming
/// several of them, under a concurrency of one each, runs at once (they
/// once shared one stand-in's turn, and the query waited on itself).
#[tokio::test]
async fn a_federated_query_over_tenants_that_never_wrote_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = common::start(Config {
        tenant_federation_enabled: true,
        ..with_runtime(dir.path(), "limits:\n  max_query_concurrency: 1\n")
    })
    .await;
    let r = push_as(srv.addr, "big", batch("m", 2, common::now_ms(), &[])).await;
    assert_eq!(r.status(), 204);
    answers(srv.addr, "big|nobody-1|nobody-2", "count(m)").await;
}

/// Sluice with multitenancy and federation of at most `max` tenants (0:
/// any number).
async fn federating(max: usize) -> (tempfile::TempDir, common::TestServer) {
    let dir = tempfile::tempdir().expect("tempdir");
    let srv = common::start(Config {
        tenant_federation_enabled: true,
        tenant_federation_max_tenants: max,
        ..with_runtime(dir.path(), "")
    })
    .await;
    (dir, srv)
}

/// A federated read naming thousands of tenants (within the head size
/// limit) is answered, not refused by the door or left hanging; past
/// `--tenant-federation-max-tenants` it is a 400 that names the count.
#[tokio::test]
async fn a_federated_read_naming_thousands_of_tenants_is_answered_or_refused_by_name() {
    let many: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
    let header = many.join("|");
    let ask = |addr: SocketAddr| {
        reqwest::Client::new()
            .get(format!("http://{addr}/api/v1/query"))
            .query(&[("query", "count(m)")])
            .header(HEADER, header.as_str())
            .send()
    };
    let (_dir, open) = limited("").await;
    let (_dir2, bounded) = federating(100).await;
    let r = ask(open.addr).await.expect("answered");
    // Federation is off there: several tenants are refused by name.
    assert_eq!(r.status(), 400);
    assert!(r.text().await.expect("body").contains("not several"));
    let r = ask(bounded.addr).await.expect("answered");
    assert_eq!(r.status(), 400);
    let text = r.text().await.expect("body");
    assert!(text.contains("max: 100 actual: 5000"), "{text}");
    let (_dir3, unbounded) = federating(0).await;
    let r = ask(unbounded.addr).await.expect("answered");
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
}

fn pb_series(name: &str, n: usize, t: i64) -> Vec<sluice::proto::prometheus::TimeSeries> {
    (0..n)
        .map(|i| common::series(&[("__name__", name), ("i", &i.to_string())], &[(t, 1.0)]))
        .collect()
}

#[tokio::test]
async fn logins_bound_to_tenants_are_refused_elsewhere_with_403() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hash = bcrypt::hash("pw", 4).expect("bcrypt");
    let web = dir.path().join("web.yaml");
    std::fs::write(
        &web,
        format!("basic_auth_users:\n  alice: {hash}\n  grafana: {hash}\n  mallory: {hash}\n"),
    )
    .expect("write web config");
    let srv = common::start(Config {
        web_config_file: web,
        tenant_federation_enabled: true,
        web_enable_admin_api: true,
        ..with_runtime(
            dir.path(),
            "identities:\n  alice: [team-a]\n  grafana: [{tenant: team-a, access: read}, {tenant: team-b, access: read}]\n",
        )
    })
    .await;
    let t = common::now_ms();
    let write = |user: &'static str, tenant: &'static str| {
        reqwest::Client::new()
            .post(format!("http://{}/api/v1/write", srv.addr))
            .basic_auth(user, Some("pw"))
            .header("content-type", "application/x-protobuf")
            .header(HEADER, tenant)
            .body(batch("w", 1, t, &[]))
            .send()
    };
    let read = |user: &'static str, tenant: &'static str| {
        reqwest::Client::new()
            .get(format!("http://{}/api/v1/query", srv.addr))
            .query(&[("query", "w")])
            .basic_auth(user, Some("pw"))
            .header(HEADER, tenant)
            .send()
    };
    let status = |r: Result<reqwest::Response, reqwest::Error>| r.expect("answered").status();
    assert_eq!(status(write("alice", "team-a").await), 204);
    assert_eq!(status(read("alice", "team-a").await), 200);
    assert_eq!(status(read("grafana", "team-a").await), 200);
    assert_eq!(status(read("grafana", "team-b").await), 200);
    for (refused, why) in [
        (write("alice", "team-b").await, "alice writes team-b"),
        (write("grafana", "team-a").await, "grafana may only read"),
        (
            write("mallory", "team-a").await,
            "mallory is bound to nothing",
        ),
    ] {
        let r = refused.expect("answered");
        assert_eq!(r.status(), 403, "{why}");
        let text = r.text().await.expect("body");
        assert!(text.contains("may not write tenant"), "{why}: {text}");
    }
    assert_eq!(status(read("alice", "team-b").await), 403);
    assert_eq!(status(read("mallory", "team-a").await), 403);
    // The admin API changes a tenant's data: write access, not read.
    let admin = |user: &'static str, tenant: &'static str, path: &'static str| {
        reqwest::Client::new()
            .post(format!("http://{}/api/v1/admin/tsdb/{path}", srv.addr))
            .basic_auth(user, Some("pw"))
            .header(HEADER, tenant)
            .form(&[("match[]", "w")])
            .send()
    };
    for path in ["delete_series", "clean_tombstones"] {
        let r = admin("grafana", "team-a", path).await.expect("answered");
        assert_eq!(r.status(), 403, "grafana may only read: {path}");
        let text = r.text().await.expect("body");
        assert!(text.contains("may not write tenant"), "{text}");
    }
    assert_eq!(
        status(read("grafana", "team-a").await),
        200,
        "nothing deleted"
    );
    assert_eq!(status(admin("alice", "team-a", "delete_series").await), 204);
    // The status page's tenant in its URL is checked as the header is.
    let page = |user: &'static str, tenant: &'static str| {
        reqwest::Client::new()
            .get(format!("http://{}/", srv.addr))
            .query(&[("tenant", tenant)])
            .basic_auth(user, Some("pw"))
            .send()
    };
    assert_eq!(status(page("alice", "team-a").await), 200);
    assert_eq!(status(page("alice", "team-b").await), 403);
    // A federated read needs every one of its tenants.
    assert_eq!(status(read("grafana", "team-a|team-b").await), 200);
    let r = read("alice", "team-a|team-b").await.expect("answered");
    assert_eq!(r.status(), 403);
    let text = r.text().await.expect("body");
    assert!(text.contains("may not read tenant team-b"), "{text}");
    // A refused write opened nothing: team-b holds nothing.
    assert_eq!(srv.state.tenants().all().len(), 2, "anonymous and team-a");
    // A wrong password is still 401, before any binding is asked.
    let r = reqwest::Client::new()
        .get(format!("http://{}/api/v1/query", srv.addr))
        .query(&[("query", "w")])
        .basic_auth("alice", Some("nope"))
        .header(HEADER, "team-a")
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), 401);
    let metrics = reqwest::Client::new()
        .get(format!("http://{}/metrics", srv.addr))
        .basic_auth("mallory", Some("pw"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("body");
    assert_eq!(
        common::metric_value(&metrics, "sluice_http_forbidden_requests_total"),
        Some(9.0),
        "{metrics}"
    );
}

/// Polls `ok` until it holds, for at most a minute (the file is looked at
/// every 2 s).
async fn until(mut ok: impl AsyncFnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_file_is_reloaded_when_it_changes_and_a_bad_one_keeps_the_limits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = with_runtime(dir.path(), "");
    let path = config.runtime_config_file.clone();
    let srv = common::start(config).await;
    let t = common::now_ms();
    assert_eq!(
        push_as(srv.addr, "t", batch("a", 5, t, &[])).await.status(),
        204
    );
    std::fs::write(
        &path,
        "overrides:\n  t:\n    ingestion_rate: 1\n    ingestion_burst_size: 2\n",
    )
    .expect("rewrite");
    let mut k = 0;
    until(
        async || {
            k += 1;
            push_as(srv.addr, "t", batch("a", 5, t + k, &[]))
                .await
                .status()
                == 400
        },
        "the new burst refuses 5 samples",
    )
    .await;
    std::fs::write(&path, "overrides:\n  t:\n    ingestion_rat: 1\n").expect("rewrite");
    until(
        async || {
            common::self_metric(srv.addr, "sluice_runtime_config_last_reload_successful").await
                == Some(0.0)
        },
        "the bad file is reported",
    )
    .await;
    // The limits loaded before stay in force.
    assert_eq!(
        push_as(srv.addr, "t", batch("a", 5, t + 1000, &[]))
            .await
            .status(),
        400
    );
}

#[tokio::test]
async fn a_bad_file_stops_the_start_and_says_where() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (yaml, says) in [
        ("limits:\n  ingestion_rat: 1\n", "ingestion_rat"),
        (
            "overrides:\n  'a/b':\n    ingestion_rate: 1\n",
            "overrides: tenant \"a/b\"",
        ),
    ] {
        let config = Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().join("data"),
            ..with_runtime(dir.path(), yaml)
        };
        let err = sluice::server::Server::bind(&config)
            .await
            .expect_err("a bad runtime config file stops the start")
            .to_string();
        assert!(
            err.contains("runtime.yaml") && err.contains(says),
            "{yaml}: {err}"
        );
    }
}
