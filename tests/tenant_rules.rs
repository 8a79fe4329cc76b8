//! Rules per tenant (`--ruler-storage-local-directory`, laid out as
//! Mimir's ruler reads its local storage: `<dir>/<tenant>/<namespace>`):
//! each tenant's rules run over its own data and write to it alone; the
//! rules and alerts APIs list a tenant's own; its alerts reach the
//! Alertmanager with its tenant header; a tenant added while running
//! starts, and one tenant's bad file keeps its rules and touches no
//! other's. Without multitenancy only `anonymous`'s directory is read.
//!
//! The Alertmanager here is a stand-in that records what it is sent:
//! Mimir's multi-tenant Alertmanager, which reads the header, does not
//! run here (Debian's Alertmanager 0.25, which `tests/rules.rs` uses,
//! ignores the header). What it checks is the request Mimir's ruler
//! makes: `POST /api/v2/alerts` with `X-Scope-OrgID` (Mimir's
//! `pkg/ruler/notifier.go` sets the tenant header on each request).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

const HEADER: &str = "X-Scope-OrgID";

/// `req_total{job}` for `tenant`, one sample now per value.
async fn write(addr: SocketAddr, tenant: Option<&str>, values: &[(&str, f64)]) {
    let now = common::now_ms();
    let body = common::body(
        values
            .iter()
            .map(|(job, v)| {
                common::series(&[("__name__", "req_total"), ("job", job)], &[(now, *v)])
            })
            .collect(),
    );
    let (code, text) = match tenant {
        Some(t) => common::push_with(addr, body, &[(HEADER, t)]).await,
        None => common::push(addr, body).await,
    };
    assert!((200..300).contains(&code), "{code} {text}");
}

/// GET `path` as `tenant`, its JSON.
async fn json_as(addr: SocketAddr, tenant: Option<&str>, path: &str) -> Value {
    let mut req = reqwest::Client::new().get(format!("http://{addr}{path}"));
    if let Some(t) = tenant {
        req = req.header(HEADER, t);
    }
    let resp = req.send().await.expect("answered");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    assert_eq!(status, 200, "{path} as {tenant:?}: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}"))
}

/// An instant query as `tenant`: each series' name and value.
async fn query_as(addr: SocketAddr, tenant: Option<&str>, q: &str) -> Vec<(String, String)> {
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/query"))
        .form(&[("query", q)]);
    if let Some(t) = tenant {
        req = req.header(HEADER, t);
    }
    let text = req
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("body");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(v["status"], "success", "{v}");
    let mut out: Vec<(String, String)> = v["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| {
            (
                s["metric"]["__name__"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                s["value"][1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Waits (up to 30 s) until `q` as `tenant` answers something.
async fn wait_for(addr: SocketAddr, tenant: Option<&str>, q: &str) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = query_as(addr, tenant, q).await;
        if !got.is_empty() {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{q} as {tenant:?} never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The groups `/api/v1/rules` lists for `tenant`: (file, name).
async fn groups_of(addr: SocketAddr, tenant: Option<&str>) -> Vec<(String, String)> {
    let v = json_as(addr, tenant, "/api/v1/rules").await;
    v["data"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["file"].as_str().unwrap_or_default().to_owned(),
                g["name"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A stand-in Alertmanager: records each request's tenant header and
/// body, answers 200.
async fn alert_sink() -> (SocketAddr, Arc<parking_lot::Mutex<Vec<(String, Value)>>>) {
    let got: Arc<parking_lot::Mutex<Vec<(String, Value)>>> = Arc::default();
    let seen = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/api/v2/alerts",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let seen = Arc::clone(&seen);
            async move {
                let tenant = headers
                    .get(HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let v = serde_json::from_str(&body).unwrap_or(Value::Null);
                seen.lock().push((tenant, v));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, got)
}

fn put(dir: &std::path::Path, tenant: &str, file: &str, text: &str) {
    let d = dir.join(tenant);
    std::fs::create_dir_all(&d).expect("tenant dir");
    std::fs::write(d.join(file), text).expect("rule file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_runs_its_own_rules_over_its_own_data() {
    let rules = tempfile::tempdir().expect("tempdir");
    let dir = rules.path();
    put(
        dir,
        "team-a",
        "web.yml",
        "groups:\n  - name: sums\n    interval: 1s\n    rules:\n      - record: job:req:sum\n        expr: sum(req_total)\n      - alert: Busy\n        expr: sum(req_total) > 0\n        labels: {severity: page}\n        annotations: {summary: \"{{ $value }} requests\"}\n",
    );
    put(
        dir,
        "team-b",
        "db.yml",
        "groups:\n  - name: sums\n    interval: 1s\n    rules:\n      - record: job:req:sum\n        expr: sum(req_total) * 10\n",
    );
    // Passed over: a hidden file, a directory inside a tenant's, and a
    // directory whose name is no tenant ID.
    put(dir, "team-a", ".web.yml.swp", "not yaml: [");
    std::fs::create_dir_all(dir.join("team-a/old")).expect("dir");
    put(dir, "a|b", "x.yml", "not yaml: [");
    put(dir, ".git", "HEAD", "ref: refs/heads/main");
    put(
        dir,
        "anonymous",
        "own.yml",
        "groups:\n  - name: anon\n    interval: 1s\n    rules:\n      - alert: AnonAlways\n        expr: vector(1)\n",
    );
    let (sink, alerts) = alert_sink().await;
    let data = tempfile::tempdir().expect("tempdir");
    let am = format!("http://{sink}");
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "info",
        &[
            "--multitenancy",
            "true",
            "--web-enable-lifecycle",
            "true",
            "--ruler-storage-local-directory",
            &dir.display().to_string(),
            "--alertmanager-url",
            &am,
        ],
    );
    let _child = common::KillOnDrop(child);
    write(addr, Some("team-a"), &[("x", 1.0), ("y", 2.0)]).await;
    write(addr, Some("team-b"), &[("x", 5.0)]).await;

    // Each tenant's rule over its own samples, written to it alone.
    let a = wait_for(addr, Some("team-a"), "job:req:sum").await;
    assert_eq!(a, vec![("job:req:sum".to_owned(), "3".to_owned())]);
    let b = wait_for(addr, Some("team-b"), "job:req:sum").await;
    assert_eq!(b, vec![("job:req:sum".to_owned(), "50".to_owned())]);
    assert!(query_as(addr, Some("team-c"), "job:req:sum")
        .await
        .is_empty());
    assert!(query_as(addr, Some("anonymous"), "job:req:sum")
        .await
        .is_empty());

    // The APIs list a tenant's own groups and alerts.
    let file_a = dir.join("team-a/web.yml").display().to_string();
    let file_b = dir.join("team-b/db.yml").display().to_string();
    assert_eq!(
        groups_of(addr, Some("team-a")).await,
        vec![(file_a.clone(), "sums".into())]
    );
    assert_eq!(
        groups_of(addr, Some("team-b")).await,
        vec![(file_b, "sums".into())]
    );
    assert!(groups_of(addr, Some("team-c")).await.is_empty());
    // anonymous' own rules are anonymous' alone: a tenant that never
    // wrote (read through an empty stand-in) does not see them.
    assert_eq!(groups_of(addr, Some("anonymous")).await.len(), 1);
    assert!(groups_of(addr, Some("team-z")).await.is_empty());
    let v = json_as(addr, Some("team-z"), "/api/v1/alerts").await;
    assert_eq!(v["data"]["alerts"], serde_json::json!([]), "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = json_as(addr, Some("team-a"), "/api/v1/alerts").await;
        let firing = v["data"]["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["labels"]["alertname"] == "Busy"));
        if firing {
            break;
        }
        assert!(Instant::now() < deadline, "Busy never fired: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let v = json_as(addr, Some("team-b"), "/api/v1/alerts").await;
    assert_eq!(v["data"]["alerts"], serde_json::json!([]), "{v}");
    // team-a's alert went out with its tenant header.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sent: Vec<(String, Value)> = alerts.lock().clone();
        if let Some((tenant, body)) = sent
            .iter()
            .find(|(_, b)| b[0]["labels"]["alertname"] == "Busy")
        {
            assert_eq!(tenant, "team-a");
            assert_eq!(body[0]["annotations"]["summary"], "3 requests");
            break;
        }
        assert!(Instant::now() < deadline, "no alert sent: {sent:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each alert carries its own tenant: anonymous' too.
    for (tenant, body) in alerts.lock().iter() {
        for a in body.as_array().into_iter().flatten() {
            let want = match a["labels"]["alertname"].as_str() {
                Some("Busy") => "team-a",
                Some("AnonAlways") => "anonymous",
                other => panic!("unexpected alert {other:?}"),
            };
            assert_eq!(tenant, want, "{a}");
        }
    }

    // A tenant given a directory while running: its rules start.
    put(
        dir,
        "team-c",
        "new.yml",
        "groups:\n  - name: one\n    interval: 1s\n    rules:\n      - record: c:one\n        expr: vector(1)\n",
    );
    let c = wait_for(addr, Some("team-c"), "c:one").await;
    assert_eq!(c, vec![("c:one".to_owned(), "1".to_owned())]);
    assert!(query_as(addr, Some("team-a"), "c:one").await.is_empty());

    // team-b's file goes bad: the reload names it, its rules stay, and
    // team-a's run on.
    put(
        dir,
        "team-b",
        "db.yml",
        "groups:\n  - name: sums\n    bogus: 1\n",
    );
    // Reloading needs a tenant's write access, as the admin API.
    let (code, text) = common::reload(addr, Some("team-b")).await;
    assert_eq!(code, 500);
    assert!(
        text.contains("tenant team-b's rule directory: ") && text.contains("bogus"),
        "{text}"
    );
    // Another tenant is told of its own files alone: team-a's loaded.
    let (code, text) = common::reload(addr, Some("team-a")).await;
    assert_eq!(code, 200, "{text}");
    let groups = groups_of(addr, Some("team-b")).await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    write(addr, Some("team-b"), &[("x", 7.0)]).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while query_as(addr, Some("team-b"), "job:req:sum").await[0].1 != "70" {
        assert!(Instant::now() < deadline, "team-b's rule stopped");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Their figures, one group per tenant's file.
    let (_, metrics) = common::get(addr, "/metrics").await;
    let iterations = common::rule_group_iterations(&metrics, &format!("{file_a};sums"));
    assert!(iterations.is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(
        metrics
            .lines()
            .filter(
                |l| l.starts_with("# TYPE sluice_rule_group_iterations") && !l.contains("missed")
            )
            .count(),
        1,
        "one family for every tenant's groups"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_multitenancy_only_anonymous_rules_run() {
    let rules = tempfile::tempdir().expect("tempdir");
    let dir = rules.path();
    put(
        dir,
        "anonymous",
        "a.yml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: anon:one\n        expr: vector(1)\n",
    );
    put(
        dir,
        "team-a",
        "a.yml",
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: team:one\n        expr: vector(1)\n",
    );
    let data = tempfile::tempdir().expect("tempdir");
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "info",
        &[
            "--ruler-storage-local-directory",
            &dir.display().to_string(),
        ],
    );
    let _child = common::KillOnDrop(child);
    write(addr, None, &[("x", 1.0)]).await;
    let got = wait_for(addr, None, "anon:one").await;
    assert_eq!(got, vec![("anon:one".to_owned(), "1".to_owned())]);
    let groups = groups_of(addr, None).await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert!(query_as(addr, None, "team:one").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_ruler_limits_keeps_its_rules_and_touches_no_other() {
    let rules = tempfile::tempdir().expect("tempdir");
    let dir = rules.path();
    let group = |name: &str, rules: usize| {
        let mut g = format!("  - name: {name}\n    interval: 1s\n    rules:\n");
        for k in 0..rules {
            g.push_str(&format!(
                "      - record: {name}:r{k}\n        expr: vector({k})\n"
            ));
        }
        g
    };
    // team-x: two groups, over its limit of one.
    put(
        dir,
        "team-x",
        "x.yml",
        &format!("groups:\n{}{}", group("a", 1), group("b", 1)),
    );
    put(
        dir,
        "team-y",
        "y.yml",
        &format!("groups:\n{}{}", group("c", 3), group("d", 1)),
    );
    let runtime = rules.path().join("runtime.yml");
    std::fs::write(
        &runtime,
        "overrides:\n  team-x:\n    ruler_max_rule_groups_per_tenant: 1\n    ruler_max_rules_per_rule_group: 2\n",
    )
    .expect("runtime config");
    let data = tempfile::tempdir().expect("tempdir");
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "info",
        &[
            "--multitenancy",
            "true",
            "--web-enable-lifecycle",
            "true",
            "--runtime-config-file",
            &runtime.display().to_string(),
            "--ruler-storage-local-directory",
            &dir.display().to_string(),
        ],
    );
    let _child = common::KillOnDrop(child);
    // team-y has no limit: its rules run; team-x's do not.
    wait_for(addr, Some("team-y"), "c:r2").await;
    assert!(groups_of(addr, Some("team-x")).await.is_empty());
    let (code, text) = common::reload(addr, Some("team-x")).await;
    assert_eq!(code, 500);
    assert!(
        text.contains("2 rule groups, over the tenant's ruler_max_rule_groups_per_tenant of 1"),
        "{text}"
    );
    // One group, but of three rules: still over.
    put(
        dir,
        "team-x",
        "x.yml",
        &format!("groups:\n{}", group("a", 3)),
    );
    let (code, text) = common::reload(addr, Some("team-x")).await;
    assert_eq!(code, 500);
    assert!(
        text.contains(
            "group \"a\": 3 rules, over the tenant's ruler_max_rules_per_rule_group of 2"
        ),
        "{text}"
    );
    // Within both: it runs.
    put(
        dir,
        "team-x",
        "x.yml",
        &format!("groups:\n{}", group("a", 2)),
    );
    let (code, text) = common::reload(addr, Some("team-x")).await;
    assert_eq!(code, 200, "{text}");
    wait_for(addr, Some("team-x"), "a:r1").await;
    assert_eq!(common::reload(addr, Some("team-y")).await.0, 200);
}
