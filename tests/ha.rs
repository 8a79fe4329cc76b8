//! HA-pair deduplication (`--ha-tracker`, Mimir's HA tracker): one
//! replica per cluster is stored, without its replica label; the other's
//! requests are answered 202 and counted; failover after the elected one's
//! silence; the election survives `kill -9`; per tenant; the cluster limit.
//! And two real Prometheus 3.5.3 servers as an HA pair.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use sluice::config::Config;

const HEADER: &str = "X-Scope-OrgID";

/// A request of one series `name` from `replica` of `cluster`, sample at `t`.
fn from(
    cluster: &str,
    replica: &str,
    name: &str,
    t: i64,
) -> sluice::proto::prometheus::WriteRequest {
    let mut labels = vec![("__name__", name), ("job", "node")];
    if !cluster.is_empty() {
        labels.push(("cluster", cluster));
    }
    if !replica.is_empty() {
        labels.push(("__replica__", replica));
    }
    sluice::proto::prometheus::WriteRequest {
        timeseries: vec![common::series(&labels, &[(t, 1.0)])],
        metadata: vec![],
    }
}

/// Pushes `req` as remote write 1.0 (or 2.0) as `tenant` (if given).
async fn push(
    addr: SocketAddr,
    req: &sluice::proto::prometheus::WriteRequest,
    v2: bool,
    tenant: Option<&str>,
) -> (u16, String) {
    let raw = match v2 {
        false => req.encode_to_vec(),
        true => requests::to_v2(req).encode_to_vec(),
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("compress");
    let mut r = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/write"))
        .header("content-encoding", "snappy")
        .body(body);
    r = match v2 {
        false => r.header("content-type", "application/x-protobuf"),
        true => r
            .header(
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            )
            .header("x-prometheus-remote-write-version", "2.0.0"),
    };
    if let Some(t) = tenant {
        r = r.header(HEADER, t);
    }
    let resp = r.send().await.expect("sent");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

#[path = "common/requests.rs"]
mod requests;

/// Every series of `name` (as `tenant`), and their sample timestamps.
async fn stored(
    addr: SocketAddr,
    tenant: Option<&str>,
    name: &str,
) -> Vec<(BTreeMap<String, String>, Vec<f64>)> {
    let mut r = reqwest::Client::new()
        .get(format!("http://{addr}/api/v1/query"))
        .query(&[("query", format!("{name}[1d]"))]);
    if let Some(t) = tenant {
        r = r.header(HEADER, t);
    }
    let text = r
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let mut out: Vec<(BTreeMap<String, String>, Vec<f64>)> = v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let labels = serde_json::from_value(s["metric"].clone()).unwrap_or_default();
            let ts = s["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p[0].as_f64())
                .collect();
            (labels, ts)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn ha_config() -> Config {
    Config {
        ha_tracker: true,
        ..Config::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_is_stored_the_other_answered_202_until_failover() {
    let start = common::now_ms() - 3_600_000;
    let now = Arc::new(AtomicI64::new(start));
    let clock = {
        let now = Arc::clone(&now);
        sluice::storage::Clock::new(move || now.load(Ordering::Relaxed))
    };
    let srv = common::start_with_clock(ha_config(), clock).await;
    let addr = srv.addr;
    let t = start - 1_000;

    for (i, v2) in [(0, false), (1, true)] {
        let (name, dt) = (format!("m{i}"), i * 10);
        let (s, text) = push(addr, &from("c1", "r1", &name, t + dt), v2, None).await;
        assert_eq!(s, 204, "{text}");
        let (s, text) = push(addr, &from("c1", "r2", &name, t + dt + 1), v2, None).await;
        assert_eq!(s, 202, "{text}");
        assert!(text.contains("elected=\"r1\""), "{text}");
        let (s, _) = push(addr, &from("c1", "r1", &name, t + dt + 2), v2, None).await;
        assert_eq!(s, 204);
        let got = stored(addr, None, &name).await;
        assert_eq!(got.len(), 1, "one series: {got:?}");
        assert!(!got[0].0.contains_key("__replica__"), "{got:?}");
        assert_eq!(got[0].0["cluster"], "c1");
        assert_eq!(
            got[0].1,
            [(t + dt) as f64 / 1000.0, (t + dt + 2) as f64 / 1000.0],
            "r1's samples only"
        );
    }

    // A cluster label without a replica label (and the reverse): stored
    // as sent.
    let (s, _) = push(addr, &from("c1", "", "plain", t), false, None).await;
    assert_eq!(s, 204);
    let (s, _) = push(addr, &from("", "r9", "lone", t), false, None).await;
    assert_eq!(s, 204);
    assert_eq!(stored(addr, None, "plain").await.len(), 1);
    assert_eq!(stored(addr, None, "lone").await[0].0["__replica__"], "r9");

    // r1 is silent for the failover timeout (30 s): r2 is elected at its
    // next write, and r1 is then the one answered 202.
    now.fetch_add(30_000, Ordering::Relaxed);
    let (s, _) = push(addr, &from("c1", "r2", "m0", t + 100), false, None).await;
    assert_eq!(s, 202, "30 s is within the timeout");
    now.fetch_add(1, Ordering::Relaxed);
    let (s, text) = push(addr, &from("c1", "r2", "m0", t + 101), false, None).await;
    assert_eq!(s, 204, "{text}");
    let (s, _) = push(addr, &from("c1", "r1", "m0", t + 102), false, None).await;
    assert_eq!(s, 202);
    let got = stored(addr, None, "m0").await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1.len(), 3, "r1's two, then r2's one: {got:?}");

    let (_, metrics) = common::get(addr, "/metrics").await;
    for (protocol, n) in [("remote_write", 3.0), ("remote_write_2", 1.0)] {
        assert_eq!(
            common::metric_value(
                &metrics,
                &format!(
                    "sluice_dropped_samples_total{{protocol=\"{protocol}\",reason=\"ha_dedupe\"}}"
                )
            ),
            Some(n),
            "{protocol}: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_election_survives_kill_9() {
    let data = tempfile::tempdir().expect("tempdir");
    let t = common::now_ms() - 60_000;
    let args = ["--ha-tracker", "true", "--ha-failover-timeout", "1s"];
    let (child, addr) =
        common::spawn_sluice(env!("CARGO_BIN_EXE_sluice"), data.path(), "info", &args);
    let mut child = common::KillOnDrop(child);
    assert_eq!(
        push(addr, &from("c1", "r2", "m", t), false, None).await.0,
        204
    );
    assert_eq!(
        push(addr, &from("c1", "r1", "m", t + 1), false, None)
            .await
            .0,
        202
    );
    child.kill();
    // Longer than the failover timeout later, r1 writes first: r2 is
    // still elected, counted as seen at the restart.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (child, addr) =
        common::spawn_sluice(env!("CARGO_BIN_EXE_sluice"), data.path(), "info", &args);
    let _child = common::KillOnDrop(child);
    let (s, text) = push(addr, &from("c1", "r1", "m", t + 2), false, None).await;
    assert_eq!(s, 202, "{text}");
    assert!(text.contains("elected=\"r2\""), "{text}");
    assert_eq!(
        push(addr, &from("c1", "r2", "m", t + 3), false, None)
            .await
            .0,
        204
    );
    let got = stored(addr, None, "m").await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1.len(), 2, "r2's two samples: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_settings_and_the_cluster_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "overrides:\n  team-a:\n    accept_ha_samples: true\n    ha_max_clusters: 1\n    \
         ha_replica_label: prometheus_replica\n",
    )
    .expect("write");
    let srv = common::start(Config {
        multitenancy: true,
        runtime_config_file: runtime,
        ..Config::default()
    })
    .await;
    let addr = srv.addr;
    let t = common::now_ms() - 60_000;
    let pair = |replica: &str, cluster: &str, dt: i64| sluice::proto::prometheus::WriteRequest {
        timeseries: vec![common::series(
            &[
                ("__name__", "m"),
                ("cluster", cluster),
                ("prometheus_replica", replica),
            ],
            &[(t + dt, 1.0)],
        )],
        metadata: vec![],
    };
    // team-a deduplicates on its own replica label; team-b keeps both.
    for tenant in ["team-a", "team-b"] {
        assert_eq!(
            push(addr, &pair("a", "c1", 0), false, Some(tenant)).await.0,
            204
        );
        let s = push(addr, &pair("b", "c1", 1), false, Some(tenant)).await.0;
        assert_eq!(s, if tenant == "team-a" { 202 } else { 204 }, "{tenant}");
    }
    assert_eq!(stored(addr, Some("team-a"), "m").await.len(), 1);
    assert_eq!(stored(addr, Some("team-b"), "m").await.len(), 2);
    // A second cluster is past team-a's ha_max_clusters: 400, named.
    let (s, text) = push(addr, &pair("a", "c2", 2), false, Some("team-a")).await;
    assert_eq!(s, 400, "{text}");
    assert!(
        text.contains("too_many_ha_clusters") && text.contains("limit: 1"),
        "{text}"
    );
    assert_eq!(stored(addr, Some("team-a"), "m").await.len(), 1);
}

fn prometheus(target: SocketAddr, sluice: SocketAddr, replica: &str) -> common::Prometheus {
    let config = format!(
        "global:\n  scrape_interval: 1s\n  external_labels: {{cluster: c1, __replica__: {replica}}}\n\
         scrape_configs:\n  - job_name: pair\n    static_configs: [{{targets: ['{target}']}}]\n\
         remote_write:\n  - url: http://{sluice}/api/v1/write\n    \
         queue_config: {{batch_send_deadline: 100ms, max_samples_per_send: 100}}\n"
    );
    common::Prometheus::start3(&config, &[])
}

/// The sample times Sluice holds of `ha_pair_metric`, once it holds
/// one series of it with a sample after `after` (seconds), within 60 s.
async fn wait_past(addr: SocketAddr, after: f64) -> Vec<(BTreeMap<String, String>, Vec<f64>)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = stored(addr, None, "ha_pair_metric").await;
        let past = got
            .iter()
            .any(|(_, ts)| ts.last().is_some_and(|&l| l > after));
        if past || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prometheus_3_5_3_replicas_are_stored_once_and_fail_over() {
    let srv = common::start(Config {
        ha_tracker: true,
        ha_failover_timeout: Duration::from_secs(3),
        ..Config::default()
    })
    .await;
    let addr = srv.addr;
    let target = common::serve_exposition("ha_pair_metric{kind=\"x\"} 1\nha_pair_other 2\n").await;
    let r1 = prometheus(target, addr, "r1");
    r1.ready().await;
    let got = wait_past(addr, 0.0).await;
    assert_eq!(got.len(), 1, "r1 elected and stored: {got:?}\n{}", r1.log());
    let r2 = prometheus(target, addr, "r2");
    r2.ready().await;
    // Both write for a while; one series, no replica label, r2 refused.
    let deduped = common::wait_for_metric(
        addr,
        r#"sluice_dropped_samples_total{protocol="remote_write",reason="ha_dedupe"}"#,
        |v| v > 0.0,
    )
    .await;
    assert!(deduped > 0.0, "r2's samples were deduplicated");
    let both = wait_past(addr, common::now_ms() as f64 / 1000.0).await;
    assert_eq!(both.len(), 1, "one series for both replicas: {both:?}");
    assert_eq!(
        both[0].0,
        [
            ("__name__", "ha_pair_metric"),
            ("cluster", "c1"),
            ("instance", &target.to_string()),
            ("job", "pair"),
            ("kind", "x")
        ]
        .iter()
        .map(|&(n, v)| (n.to_owned(), v.to_owned()))
        .collect::<BTreeMap<_, _>>()
    );

    // The elected replica stops: within the failover timeout and a scrape
    // interval or so, r2's samples are stored.
    drop(r1);
    let stopped = common::now_ms() as f64 / 1000.0;
    let after = wait_past(addr, stopped + 1.0).await;
    assert!(
        after[0].1.last().is_some_and(|&l| l > stopped + 1.0),
        "r2 took over: {after:?}\n{}",
        r2.log()
    );
    // No sample twice: one replica's scrapes at a time, never interleaved
    // (the two replicas scrape at different offsets within the second).
    let ts = &after[0].1;
    assert!(
        ts.windows(2).all(|w| w[1] - w[0] >= 0.5),
        "samples closer than half a scrape interval: {ts:?}"
    );
}
