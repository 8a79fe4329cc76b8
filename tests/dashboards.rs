//! The shipped Grafana dashboards, provisioning and compose stack, checked
//! without Grafana or Docker (neither runs here): every dashboard parses and
//! every panel has a description, a unit and the `${datasource}` variable;
//! every panel query, with Grafana's variables substituted as Grafana would,
//! parses and evaluates against a Sluice that a real Prometheus
//! remote-writes into (it scrapes Sluice's own `/metrics`); the overview's
//! main panels return data. `compose.yaml` parses, names its services with
//! pinned images and health checks, and every file it mounts exists; the
//! Prometheus config it mounts passes `promtool check config`.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{start, Prometheus};
use sluice::config::Config;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn dashboard(name: &str) -> serde_json::Value {
    let path = Path::new(ROOT).join("dashboards").join(name);
    let text = std::fs::read_to_string(&path).expect("dashboard file");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

const DASHBOARDS: [&str; 2] = ["sluice-overview.json", "node-exporter.json"];

/// Panels that hold queries (rows hold none).
fn panels(d: &serde_json::Value) -> Vec<&serde_json::Value> {
    d["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

/// A panel expression as Grafana sends it: its interval variables replaced
/// (1 s scrapes here, so `$__rate_interval` = 4 scrape intervals is 4s; a
/// little more for margin) and multi-value variables at "All" (`.*`).
fn substitute(expr: &str) -> String {
    expr.replace("$__rate_interval", "15s")
        .replace("$__interval", "2s")
        .replace("$__range", "1m")
        .replace("$job", ".*")
        .replace("$instance", ".*")
}

#[test]
fn every_panel_has_a_description_a_unit_and_the_datasource_variable() {
    for name in DASHBOARDS {
        let d = dashboard(name);
        assert!(
            d["uid"].as_str().is_some_and(|u| !u.is_empty()),
            "{name}: uid"
        );
        let vars = d["templating"]["list"].as_array().expect("templating");
        assert!(
            vars.iter().any(|v| v["name"] == "datasource"
                && v["type"] == "datasource"
                && v["query"] == "prometheus"),
            "{name}: a datasource variable of type prometheus"
        );
        let ps = panels(&d);
        assert!(ps.len() >= 8, "{name}: {} panels", ps.len());
        for p in ps {
            let title = p["title"].as_str().unwrap_or("?");
            assert!(
                p["description"].as_str().is_some_and(|s| s.len() > 10),
                "{name} / {title}: description"
            );
            assert!(
                p["fieldConfig"]["defaults"]["unit"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name} / {title}: unit"
            );
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{name} / {title}");
            let targets = p["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{name} / {title}: targets");
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{name} / {title}");
                assert!(
                    t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                    "{name} / {title}"
                );
            }
        }
    }
}

async fn range_query(
    addr: std::net::SocketAddr,
    expr: &str,
    start: f64,
    end: f64,
) -> serde_json::Value {
    common::api_json(
        &format!("http://{addr}/api/v1/query_range"),
        &[
            ("query", expr.to_owned()),
            ("start", format!("{start:.3}")),
            ("end", format!("{end:.3}")),
            ("step", "2".to_owned()),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_runs_against_sluice_fed_by_a_real_prometheus() {
    let srv = start(Config::default()).await;
    let config = format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: ["{sluice}"]
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{port}}"]
remote_write:
  - url: http://{sluice}/api/v1/write
    queue_config:
      batch_send_deadline: 200ms
"#,
        sluice = srv.addr
    );
    let _prom = Prometheus::start(&config, &[]);
    // Wait (bounded) until Sluice holds 20 s of its own metrics, sent back
    // by Prometheus, so every rate() has samples to work with.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = common::now_ms() as f64 / 1000.0;
        let v = common::query_vector(
            srv.addr,
            "count_over_time(sluice_build_info{job=\"sluice\"}[1m])",
            Some(now),
        )
        .await;
        if v.first()
            .is_some_and(|(_, n)| n.parse::<f64>().unwrap_or(0.0) >= 20.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not remote-write Sluice's metrics: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let end = common::now_ms() as f64 / 1000.0;
    let start_t = end - 20.0;
    // Template variables resolve as Grafana asks for them.
    let (code, jobs) = common::get(
        srv.addr,
        "/api/v1/label/job/values?match[]=sluice_build_info",
    )
    .await;
    assert_eq!(code, 200);
    assert!(jobs.contains("\"sluice\""), "{jobs}");
    // The overview's main panels must show data.
    let must_have_data = [
        "Head series",
        "Ingest rate",
        "Ingest samples/s by protocol",
        "Head bytes",
        "Memory versus limit",
        "Bytes per sample",
        "Requests/s by handler",
        "Request latency p50 / p99 by handler",
        "CPU",
        "WAL fsync latency",
        "WAL size",
        "WAL write rate",
    ];
    let mut checked = 0;
    for name in DASHBOARDS {
        let d = dashboard(name);
        for p in panels(&d) {
            let title = p["title"].as_str().unwrap_or("?");
            let mut rows = 0;
            for t in p["targets"].as_array().expect("targets") {
                let expr = substitute(t["expr"].as_str().expect("expr"));
                assert!(
                    !expr.contains('$'),
                    "{name} / {title}: unsubstituted variable in {expr}"
                );
                let v = range_query(srv.addr, &expr, start_t, end).await;
                assert_eq!(v["status"], "success", "{name} / {title}: {expr}: {v}");
                rows += v["data"]["result"].as_array().map_or(0, Vec::len);
                checked += 1;
            }
            if name == "sluice-overview.json" && must_have_data.contains(&title) {
                assert!(rows > 0, "{name} / {title}: no data");
            }
        }
    }
    assert!(checked >= 40, "{checked} queries");
}

#[test]
fn compose_parses_and_everything_it_mounts_exists() {
    let root = Path::new(ROOT);
    let text = std::fs::read_to_string(root.join("compose.yaml")).expect("compose.yaml");
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let services = doc["services"].as_mapping().expect("services");
    for want in ["sluice", "prometheus", "node-exporter", "grafana"] {
        let s = &services[want];
        assert!(s.is_mapping(), "service {want}");
        assert!(
            s["healthcheck"]["test"].is_sequence(),
            "{want}: health check"
        );
        if want == "sluice" {
            assert_eq!(
                s["build"].as_str(),
                Some("."),
                "sluice is built from the Dockerfile"
            );
            assert!(root.join("Dockerfile").is_file());
        } else {
            let image = s["image"].as_str().expect("image");
            let tag = image.rsplit_once(':').map(|(_, t)| t).unwrap_or("");
            assert!(
                !tag.is_empty() && tag != "latest",
                "{want}: pinned image, got {image}"
            );
        }
        for v in s["volumes"].as_sequence().into_iter().flatten() {
            let v = v.as_str().expect("short volume syntax");
            let host = v.split(':').next().unwrap_or("");
            if host.starts_with("./") {
                assert!(
                    root.join(host).exists(),
                    "{want} mounts {host}, which is missing"
                );
            }
        }
    }
    // Sluice keeps its data on a named volume.
    let sluice_vols: Vec<&str> = services["sluice"]["volumes"]
        .as_sequence()
        .expect("volumes")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(
        sluice_vols.iter().any(|v| v.ends_with(":/data")),
        "{sluice_vols:?}"
    );
    assert!(doc["volumes"]
        .as_mapping()
        .is_some_and(|m| m.contains_key("sluice-data")));
    // The Prometheus config remote-writes to Sluice and passes promtool.
    let prom = root.join("compose/prometheus.yml");
    let cfg = std::fs::read_to_string(&prom).expect("prometheus.yml");
    assert!(
        cfg.contains("url: http://sluice:9201/api/v1/write"),
        "{cfg}"
    );
    // Debian's promtool (scripts/test installs its prometheus package).
    common::run_ok(
        "promtool",
        &["check".as_ref(), "config".as_ref(), prom.as_os_str()],
    );
    // Grafana's provisioning points at Sluice and at the dashboards.
    let ds = std::fs::read_to_string(root.join("dashboards/provisioning/datasources/sluice.yaml"))
        .expect("ds");
    let ds: serde_yaml_ng::Value = serde_yaml_ng::from_str(&ds).expect("YAML");
    assert_eq!(ds["datasources"][0]["type"].as_str(), Some("prometheus"));
    assert_eq!(
        ds["datasources"][0]["url"].as_str(),
        Some("http://sluice:9201")
    );
    let dp = std::fs::read_to_string(root.join("dashboards/provisioning/dashboards/sluice.yaml"))
        .expect("dp");
    let dp: serde_yaml_ng::Value = serde_yaml_ng::from_str(&dp).expect("YAML");
    assert_eq!(
        dp["providers"][0]["options"]["path"].as_str(),
        Some("/var/lib/grafana/dashboards")
    );
}
