//! Recording rules against Prometheus 3.5.3: the same rule file (same
//! path, so the same evaluation grid) and the same remote-written data in
//! both; the series each rule records, stale markers included, agree at
//! every evaluation time both made. And promtool's `check rules` and
//! Sluice agree on what is a valid file.

mod common;
#[path = "common/pki.rs"]
mod pki;
#[path = "common/promqltest.rs"]
mod promqltest;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice::proto::prometheus as pb;

/// A second apart, so that a few seconds give several evaluations; one
/// rule's output comes and goes every two seconds (stale markers), one is
/// a scalar, one is over its series limit... in its own group.
const RULES: &str = r#"groups:
  - name: rec
    interval: 1s
    labels: {source: rules}
    rules:
      - record: job:req:rate5m
        expr: sum by (job) (rate(req_total[5m]))
      - record: req:sum
        expr: sum(req_total)
        labels: {source: ""}
      - record: const:three
        expr: "3"
      - record: req:flapping
        expr: req_total{job="a"} and on() (vector(time()) % 4 < 2)
      - record: req:renamed
        expr: req_total{job="a", instance="x"} * 2
        labels: {job: renamed}
  - name: limited
    interval: 1s
    limit: 1
    rules:
      - record: req:over_limit
        expr: req_total
  - name: alerts
    interval: 1s
    labels: {team: t}
    rules:
      - record: alerts:evaluated
        expr: vector(1)
      - alert: ReqComesAndGoes
        expr: req_total{job="b"} > 0 and on() (vector(time()) % 6 < 4)
        for: 2s
        keep_firing_for: 1s
        labels: {severity: "{{ $labels.instance }}-page"}
        annotations:
          summary: "{{ $labels.job }} at {{ $value | humanize }}"
          share: "{{ humanizePercentage 0.25 }} {{ printf \"%.1f\" $value }}"
      - alert: Always
        expr: sum by (job) (req_total) > 0
        labels: {severity: info}
        annotations:
          summary: "{{ $labels.job }} sums {{ $value | humanize }} ({{ $value }})"
          share: "{{ humanizePercentage 0.25 }} {{ printf \"%.1f\" $value }} {{ $labels.job | toUpper }}"
          each: "{{ range query \"sum by (instance) (req_total{job='a'})\" | sortByLabel \"instance\" }}{{ .Labels.instance }}={{ .Value | humanize }} {{ end }}"
          top: "{{ with query \"max(req_total)\" }}{{ . | first | value | printf \"%.0f\" }}{{ else }}none{{ end }}"
          kind: "{{ if gt $value 1000.0 }}big{{ else if eq $labels.job \"a\" }}small a{{ else }}small{{ end }}"
          missing: "{{ with query \"nothing_here\" }}x{{ else }}no data{{ end }}{{ $n := 0.0 }}{{ range $i, $s := query \"req_total\" }}{{ $n = $i }}{{ end }} {{ $n }}"
"#;

/// Four series over the last four minutes, 15 s apart.
fn data(now: i64) -> Vec<u8> {
    let mut series = Vec::new();
    for (job, instance, rate) in [
        ("a", "x", 1.0),
        ("a", "y", 2.0),
        ("b", "x", 3.0),
        ("b", "y", 5.0),
    ] {
        let samples: Vec<(i64, f64)> = (0..=16)
            .map(|k| {
                let t = now - 240_000 + k * 15_000;
                (t, rate * k as f64 * 15.0)
            })
            .collect();
        series.push(common::series(
            &[
                ("__name__", "req_total"),
                ("job", job),
                ("instance", instance),
            ],
            &samples,
        ));
    }
    common::body(series)
}

/// `GET /api/v1/rules` (GET only, as Prometheus').
async fn rules_of(addr: &str) -> serde_json::Value {
    let addr: std::net::SocketAddr = addr.parse().expect("address");
    let (status, body) = common::get(addr, "/api/v1/rules").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("json")
}

/// Every recorded series (name not `req_total`) over `[start, end]` by
/// remote read: its label set to its samples (time, value bits).
async fn recorded(addr: &str, start: i64, end: i64) -> BTreeMap<String, Vec<(i64, u64)>> {
    recorded_named(addr, ".+:.+", start, end).await
}

/// The series whose name matches `names` (a regex) over `[start, end]`.
async fn recorded_named(
    addr: &str,
    names: &str,
    start: i64,
    end: i64,
) -> BTreeMap<String, Vec<(i64, u64)>> {
    let series = common::remote_read(
        addr,
        vec![common::read_matcher(
            pb::label_matcher::Type::Re,
            "__name__",
            names,
        )],
        (start, end),
    )
    .await;
    series
        .iter()
        .map(|ts| {
            let mut labels: Vec<String> = ts
                .labels
                .iter()
                .map(|l| format!("{}={:?}", l.name, l.value))
                .collect();
            labels.sort();
            (
                labels.join(","),
                ts.samples
                    .iter()
                    .map(|s| (s.timestamp, s.value.to_bits()))
                    .collect(),
            )
        })
        .collect()
}

fn times_of(got: &BTreeMap<String, Vec<(i64, u64)>>, series: &str) -> Vec<i64> {
    got.iter()
        .find(|(k, _)| k.contains(series))
        .map(|(_, s)| s.iter().map(|p| p.0).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_series_agree_with_prometheus_3_at_every_evaluation_both_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rules.yml");
    std::fs::write(&file, RULES).expect("rules");
    let path = file.display().to_string();
    // promtool accepts the file too.
    let checked = common::promtool3(&["check", "rules", &path]);
    assert!(checked.contains("SUCCESS: 9 rules found"), "{checked}");

    let prom = common::Prometheus::start3(
        &format!(
            "global:\n  scrape_interval: 1h\n  evaluation_interval: 1s\nrule_files:\n  - {path}\n"
        ),
        &["--web.enable-remote-write-receiver"],
    );
    let data_dir = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_sluice");
    let (child, addr) =
        common::spawn_sluice(bin, data_dir.path(), "info", &["--rule-files", &path]);
    let _sluice = common::KillOnDrop(child);
    prom.ready().await;
    let now = common::now_ms();
    let body = data(now);
    prom.remote_write(body.clone()).await;
    let (status, text) = common::push(addr, body).await;
    assert_eq!(status, 204, "{text}");
    // Evaluations from a second after the data is in both.
    let from = common::now_ms() + 1000;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let to = common::now_ms();
    let (s, p) = (addr.to_string(), prom.addr());
    let (ours, theirs) = (recorded(&s, from, to).await, recorded(&p, from, to).await);
    // The evaluation times both made: the constant's samples.
    let (a, b) = (
        times_of(&ours, "const:three"),
        times_of(&theirs, "const:three"),
    );
    assert!(a.len() >= 5, "Sluice evaluated at {a:?}");
    assert!(
        b.len() >= 5,
        "Prometheus evaluated at {b:?}\n{}",
        prom.log()
    );
    let common: Vec<i64> = a.iter().filter(|t| b.contains(t)).copied().collect();
    assert!(
        common.len() >= 5,
        "the same grid: Sluice {a:?}, Prometheus {b:?}"
    );
    let (lo, hi) = (common[0], common[common.len() - 1]);
    let within = |m: &BTreeMap<String, Vec<(i64, u64)>>| -> BTreeMap<String, Vec<(i64, u64)>> {
        m.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter()
                        .filter(|p| lo <= p.0 && p.0 <= hi)
                        .copied()
                        .collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect()
    };
    let (ours, theirs) = (within(&ours), within(&theirs));
    assert_eq!(ours, theirs, "Sluice, then Prometheus 3.5.3");
    // What the comparison covers: the labels merged as Prometheus merges
    // them, the flapping series' stale markers, no series over a limit.
    let keys: Vec<&String> = ours.keys().collect();
    assert!(
        keys.iter()
            .any(|k| k.contains("job:req:rate5m") && k.contains("source=\"rules\"")),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|k| k.starts_with("__name__=\"req:sum\"") && !k.contains("source")),
        "{keys:?}"
    );
    assert!(
        keys.iter().any(|k| k.contains("job=\"renamed\"")),
        "{keys:?}"
    );
    assert!(!keys.iter().any(|k| k.contains("over_limit")), "{keys:?}");
    let stale = 0x7ff0_0000_0000_0002u64;
    let flapping = ours
        .iter()
        .find(|(k, _)| k.contains("req:flapping"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(flapping.iter().any(|p| p.1 == stale), "{flapping:?}");
    assert!(flapping.iter().any(|p| p.1 != stale), "{flapping:?}");

    // Alerts: ALERTS and ALERTS_FOR_STATE agree from the first evaluation
    // at which both had restored their `for` state (each restores after
    // its second evaluation, and writes ALERTS from its third).
    let all_ours = recorded_named(&s, "alerts:evaluated|ALERTS|ALERTS_FOR_STATE", 0, to).await;
    let all_theirs = recorded_named(&p, "alerts:evaluated|ALERTS|ALERTS_FOR_STATE", 0, to).await;
    let third =
        |m: &BTreeMap<String, Vec<(i64, u64)>>| times_of(m, "alerts:evaluated").get(2).copied();
    let (Some(a3), Some(b3)) = (third(&all_ours), third(&all_theirs)) else {
        panic!("three evaluations of the alerts group in each: {all_ours:?} {all_theirs:?}");
    };
    let from_alerts = a3.max(b3).max(from);
    let alerts_times: Vec<i64> = times_of(&all_ours, "alerts:evaluated")
        .into_iter()
        .filter(|t| *t >= from_alerts && times_of(&all_theirs, "alerts:evaluated").contains(t))
        .collect();
    assert!(
        alerts_times.len() >= 3,
        "common alert evaluations: {alerts_times:?}"
    );
    let (alo, ahi) = (alerts_times[0], alerts_times[alerts_times.len() - 1]);
    let only_alerts = |m: &BTreeMap<String, Vec<(i64, u64)>>| -> BTreeMap<String, Vec<(i64, u64)>> {
        m.iter()
            .filter(|(k, _)| k.contains("ALERTS"))
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.iter()
                        .filter(|p| alo <= p.0 && p.0 <= ahi)
                        .copied()
                        .collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect()
    };
    let (ours_alerts, theirs_alerts) = (only_alerts(&all_ours), only_alerts(&all_theirs));
    assert_eq!(
        ours_alerts, theirs_alerts,
        "ALERTS: Sluice, then Prometheus 3.5.3"
    );
    assert!(
        ours_alerts
            .keys()
            .any(|k| k.contains("alertname=\"Always\"") && k.contains("alertstate=\"firing\"")),
        "{:?}",
        ours_alerts.keys()
    );
    assert!(
        ours_alerts
            .keys()
            .any(|k| k.contains("ReqComesAndGoes") && k.contains("severity=\"x-page\"")),
        "{:?}",
        ours_alerts.keys()
    );
    // /api/v1/alerts: the same alerts, labels and expanded annotations.
    let alerts_of = |v: serde_json::Value| -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = v["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["labels"]["alertname"] == "Always")
            .map(|a| {
                (
                    a["labels"].to_string(),
                    a["annotations"].to_string(),
                    a["state"].to_string(),
                )
            })
            .collect();
        out.sort();
        out
    };
    let api = |addr: String| async move {
        let addr: std::net::SocketAddr = addr.parse().expect("address");
        let (_, body) = common::get(addr, "/api/v1/alerts").await;
        serde_json::from_str::<serde_json::Value>(&body).expect("json")
    };
    let (ours_api, theirs_api) = (api(s.clone()).await, api(p.clone()).await);
    assert_eq!(alerts_of(ours_api.clone()), alerts_of(theirs_api.clone()));
    // Those with control structures and queries expanded, not failed.
    let job_a = ours_api["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["labels"]["alertname"] == "Always" && a["labels"]["job"] == "a")
        .cloned()
        .expect("job a's alert");
    let ann = &job_a["annotations"];
    assert_eq!(ann["each"], "x=240 y=480 ", "{ann}");
    assert_eq!(ann["top"], "1200", "{ann}");
    assert_eq!(ann["kind"], "small a", "{ann}");
    assert_eq!(ann["missing"], "no data 3", "{ann}");
    assert_eq!(alerts_of(ours_api).len(), 2, "one per job");

    // The rules API: the limited group's rule says why it wrote nothing.
    let v = rules_of(&s).await;
    assert_eq!(v["status"], "success", "{v}");
    let groups = v["data"]["groups"].as_array().cloned().unwrap_or_default();
    assert_eq!(groups.len(), 3, "{v}");
    let limited = groups
        .iter()
        .find(|g| g["name"] == "limited")
        .expect("limited");
    assert_eq!(limited["rules"][0]["health"], "err", "{limited}");
    assert_eq!(
        limited["rules"][0]["lastError"], "exceeded limit of 1 with 4 series",
        "{limited}"
    );
    let theirs = rules_of(&p).await;
    let their_limited = theirs["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["name"] == "limited")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        their_limited["rules"][0]["lastError"],
        limited["rules"][0]["lastError"]
    );
    // The same queries, as Prometheus prints them, and the same keys.
    for (g_ours, g_theirs) in groups
        .iter()
        .zip(theirs["data"]["groups"].as_array().into_iter().flatten())
    {
        let keys = |g: &serde_json::Value| -> Vec<String> {
            g.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(keys(g_ours), keys(g_theirs));
        for (r_ours, r_theirs) in g_ours["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .zip(g_theirs["rules"].as_array().into_iter().flatten())
        {
            assert_eq!(r_ours["query"], r_theirs["query"]);
            assert_eq!(r_ours["labels"], r_theirs["labels"]);
            assert_eq!(r_ours["type"], r_theirs["type"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rule_files_stop_the_start_and_a_bad_reload_keeps_the_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.yml");
    std::fs::write(
        &file,
        "groups:\n  - name: g\n    rules:\n      - record: x\n        expr: sum(\n",
    )
    .expect("write");
    let path = file.display().to_string();
    // promtool refuses it too.
    let out = std::process::Command::new(common::prometheus3("promtool"))
        .args(["check", "rules", &path])
        .output()
        .expect("promtool runs");
    assert!(!out.status.success());
    let data = tempfile::tempdir().expect("tempdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--rule-files",
            &path,
            "--data-dir",
        ])
        .arg(data.path())
        .output()
        .expect("sluice runs");
    assert!(!out.status.success(), "a bad rule file stops the start");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("group \"g\", rule 1, \"x\": could not parse expression"),
        "{err}"
    );

    // A good file, then a bad one: the group stays, its rule still runs.
    std::fs::write(
        &file,
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: one:one\n        expr: vector(1)\n",
    )
    .expect("write");
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "info",
        &["--rule-files", &path, "--web-enable-lifecycle"],
    );
    let _child = common::KillOnDrop(child);
    std::fs::write(&file, "groups:\n  - name: g\n    bogus: 1\n").expect("write");
    // POST /-/reload says why, as Prometheus' does.
    let (code, text) = common::reload(addr, None).await;
    assert_eq!(code, 500);
    assert!(
        text.starts_with("failed to reload config: ") && text.contains("bogus"),
        "{text}"
    );
    // Looked at every 2 s: after a few, the rule still answers.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let v = rules_of(&addr.to_string()).await;
    assert_eq!(v["data"]["groups"][0]["rules"][0]["name"], "one:one", "{v}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = common::query_vector(addr, "one:one", None).await;
        if !got.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the rule never wrote");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its figures, as Prometheus' prometheus_rule_* by group; the failed
    // reload is counted.
    let (_, metrics) = common::get(addr, "/metrics").await;
    let group = format!("rule_group=\"{path};g\"");
    let iterations = common::rule_group_iterations(&metrics, &format!("{path};g"));
    assert!(iterations.is_some_and(|n| n >= 1.0), "{metrics}");
    assert_eq!(
        common::metric_value(&metrics, &format!("sluice_rule_group_rules{{{group}}}")),
        Some(1.0)
    );
    assert!(
        common::metric_value(
            &metrics,
            "sluice_rule_file_reloads_total{result=\"failure\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    // A good file again, reloaded on request: the group has two rules.
    std::fs::write(
        &file,
        "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: one:one\n        expr: vector(1)\n      - record: two:two\n        expr: vector(2)\n",
    )
    .expect("write");
    assert_eq!(common::reload(addr, None).await.0, 200);
    let v = rules_of(&addr.to_string()).await;
    assert_eq!(v["data"]["groups"][0]["rules"][1]["name"], "two:two", "{v}");
}

/// Debian's Alertmanager 0.25 on a free port, with one receiver that
/// does nothing: a place for alerts to arrive and be listed. With `web`,
/// its web configuration file (https and logins): it is then asked with
/// curl, trusting `ca` and logging in as `login`.
struct Alertmanager {
    child: common::KillOnDrop,
    port: u16,
    web: Option<(std::path::PathBuf, (String, String))>,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    async fn start_with(web: Option<(String, std::path::PathBuf, (String, String))>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("am.yml");
        std::fs::write(
            &config,
            "route:\n  receiver: none\n  group_wait: 1s\nreceivers:\n  - name: none\n",
        )
        .expect("config");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut cmd = std::process::Command::new("prometheus-alertmanager");
        cmd.arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--cluster.listen-address=");
        let web = web.map(|(text, ca, login)| {
            let file = dir.path().join("web.yml");
            std::fs::write(&file, text).expect("web config");
            cmd.arg(format!("--web.config.file={}", file.display()));
            (ca, login)
        });
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("prometheus-alertmanager runs (scripts/test installs Debian's package)");
        let am = Self {
            child: common::KillOnDrop(child),
            port,
            web,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while am.get("/-/ready").await.0 != 200 {
            assert!(Instant::now() < deadline, "alertmanager never got ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        am
    }

    /// GET `path`: status and body (0 when it does not answer).
    async fn get(&self, path: &str) -> (u16, String) {
        let Some((ca, (user, password))) = &self.web else {
            let addr: std::net::SocketAddr =
                format!("127.0.0.1:{}", self.port).parse().expect("addr");
            return common::get(addr, path).await;
        };
        let mut cmd = std::process::Command::new("curl");
        cmd.args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--cacert",
        ])
        .arg(ca)
        .args(["-u", &format!("{user}:{password}")])
        .arg(format!("https://127.0.0.1:{}{path}", self.port));
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .expect("joined")
            .expect("curl runs (scripts/test installs it)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse().unwrap_or(0), body.to_owned())
    }

    /// The alerts it holds as active (not resolved).
    async fn alerts(&self) -> Vec<serde_json::Value> {
        let (status, body) = self.get("/api/v2/alerts").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Vec<serde_json::Value>>(&body).expect("alerts")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alertmanager_0_25_receives_the_alerts_with_their_annotations_and_their_resolution() {
    let am = Alertmanager::start().await;
    let _ = &am.child;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alerts.yml");
    std::fs::write(
        &file,
        r#"groups:
  - name: page
    interval: 1s
    rules:
      - alert: DiskFull
        expr: disk_used_ratio > 0.9
        labels: {severity: page}
        annotations:
          summary: "{{ $labels.host }} is {{ $value | humanizePercentage }} full"
      - alert: Noise
        expr: disk_used_ratio > 0
"#,
    )
    .expect("rules");
    // Prometheus' alert_relabel_configs: Noise is dropped, DiskFull gets a
    // team from its severity and loses the external label it was given.
    let relabel = dir.path().join("alert-relabel.yml");
    std::fs::write(
        &relabel,
        "- source_labels: [alertname]\n  regex: Noise\n  action: drop\n- source_labels: [severity, dc]\n  regex: (.+);(.+)\n  target_label: team\n  replacement: ops-$1-$2\n- action: labeldrop\n  regex: dc\n",
    )
    .expect("relabel");
    let data = tempfile::tempdir().expect("tempdir");
    let url = format!("http://127.0.0.1:{}", am.port);
    let (child, addr) = common::spawn_sluice(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "info",
        &[
            "--rule-files",
            &file.display().to_string(),
            "--alertmanager-url",
            &url,
            "--external-labels",
            "dc=eu",
            "--web-external-url",
            "http://sluice.example:9201",
            "--alert-relabel-config",
            &relabel.display().to_string(),
        ],
    );
    let _sluice = common::KillOnDrop(child);
    let push = |v: f64| {
        let body = common::body(vec![common::series(
            &[("__name__", "disk_used_ratio"), ("host", "db-1")],
            &[(common::now_ms(), v)],
        )]);
        common::push(addr, body)
    };
    assert_eq!(push(0.95).await.0, 204);
    // It arrives, expanded, with the external label and a link back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let alert = loop {
        let got = am.alerts().await;
        if let Some(a) = got
            .into_iter()
            .find(|a| a["labels"]["alertname"] == "DiskFull")
        {
            break a;
        }
        assert!(
            Instant::now() < deadline,
            "the alert never reached Alertmanager"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        alert["annotations"]["summary"], "db-1 is 95% full",
        "{alert}"
    );
    assert_eq!(alert["labels"]["severity"], "page");
    // Relabelled after the external labels were added, as Prometheus'.
    assert_eq!(alert["labels"]["team"], "ops-page-eu", "{alert}");
    assert!(alert["labels"].get("dc").is_none(), "{alert}");
    assert!(
        !am.alerts()
            .await
            .iter()
            .any(|a| a["labels"]["alertname"] == "Noise"),
        "a dropped alert is not sent"
    );
    assert_eq!(alert["labels"]["host"], "db-1");
    assert!(
        alert["generatorURL"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://sluice.example:9201/graph?g0.expr=")),
        "{alert}"
    );
    assert_eq!(alert["status"]["state"], "active", "{alert}");
    // Sluice lists it firing.
    let (_, body) = common::get(addr, "/api/v1/alerts").await;
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["data"]["alerts"][0]["state"], "firing", "{v}");

    // The disk is freed: the resolution reaches Alertmanager, which no
    // longer lists it as active.
    assert_eq!(push(0.5).await.0, 204);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = am.alerts().await;
        if !got.iter().any(|a| a["labels"]["alertname"] == "DiskFull") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resolution never reached Alertmanager: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, metrics) = common::get(addr, "/metrics").await;
    let sent = common::metric_value(
        &metrics,
        &format!("sluice_notifications_sent_total{{alertmanager=\"{url}/api/v2/alerts\"}}"),
    );
    assert!(sent.is_some_and(|n| n >= 2.0), "{metrics}");
    assert_eq!(
        common::metric_value(&metrics, "sluice_notifications_dropped_total"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_reach_an_alertmanager_over_https_with_a_login() {
    let pki = pki::Pki::new();
    const PASSWORD: &str = "alert horse";
    let web = format!(
        "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  sluice: {}\n",
        pki.path("server.crt").display(),
        pki.path("server.key").display(),
        pki::hash(PASSWORD)
    );
    let am = Alertmanager::start_with(Some((
        web,
        pki.path("ca.crt"),
        ("sluice".into(), PASSWORD.into()),
    )))
    .await;
    let _ = &am.child;
    // Without the login, Alertmanager refuses.
    let open = Alertmanager {
        child: common::KillOnDrop(std::process::Command::new("true").spawn().expect("true")),
        port: am.port,
        web: Some((pki.path("ca.crt"), ("sluice".into(), "wrong".into()))),
        _dir: tempfile::tempdir().expect("tempdir"),
    };
    assert_eq!(open.get("/api/v2/alerts").await.0, 401);

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alerts.yml");
    std::fs::write(
        &file,
        "groups:\n  - name: tls\n    interval: 1s\n    rules:\n      - alert: OverTls\n        expr: vector(1)\n        annotations: {summary: sent over https}\n",
    )
    .expect("rules");
    let good = dir.path().join("password");
    std::fs::write(&good, format!("{PASSWORD}\n")).expect("password");
    let bad = dir.path().join("bad-password");
    std::fs::write(&bad, "wrong\n").expect("password");
    let url = format!("https://127.0.0.1:{}", am.port);
    let start = |password: &std::path::Path| {
        let data = tempfile::tempdir().expect("tempdir");
        let (child, addr) = common::spawn_sluice(
            env!("CARGO_BIN_EXE_sluice"),
            data.path(),
            "info",
            &[
                "--rule-files",
                &file.display().to_string(),
                "--alertmanager-url",
                &url,
                "--alertmanager-tls-ca-file",
                &pki.path("ca.crt").display().to_string(),
                "--alertmanager-basic-auth-username",
                "sluice",
                "--alertmanager-basic-auth-password-file",
                &password.display().to_string(),
            ],
        );
        (common::KillOnDrop(child), addr, data)
    };
    let (_good_sluice, good_addr, _d1) = start(&good);
    let (_bad_sluice, bad_addr, _d2) = start(&bad);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = am.alerts().await;
        if let Some(a) = got.iter().find(|a| a["labels"]["alertname"] == "OverTls") {
            assert_eq!(a["annotations"]["summary"], "sent over https");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the alert never arrived: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let errors = |text: &str| {
        common::metric_value(
            text,
            &format!("sluice_notifications_errors_total{{alertmanager=\"{url}/api/v2/alerts\"}}"),
        )
    };
    let (_, metrics) = common::get(good_addr, "/metrics").await;
    assert_eq!(errors(&metrics), Some(0.0), "{metrics}");
    // A wrong password: Alertmanager's 401 is counted, and the password
    // is in no metric.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = common::get(bad_addr, "/metrics").await;
        assert!(!metrics.contains(PASSWORD) && !metrics.contains("wrong"));
        if errors(&metrics).is_some_and(|n| n >= 1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no failed send counted: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The ALERTS_FOR_STATE samples of `alertname` (time, value).
async fn for_state(addr: std::net::SocketAddr, alertname: &str) -> Vec<(i64, f64)> {
    let got = recorded_named(
        &addr.to_string(),
        "ALERTS_FOR_STATE",
        0,
        common::now_ms() + 60_000,
    )
    .await;
    got.iter()
        .filter(|(k, _)| k.contains(&format!("alertname=\"{alertname}\"")))
        .flat_map(|(_, v)| v.iter().map(|&(t, bits)| (t, f64::from_bits(bits))))
        .filter(|(_, v)| !v.is_nan())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_alert_continues_from_its_for_state_after_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alerts.yml");
    std::fs::write(
        &file,
        "groups:\n  - name: slow\n    interval: 1s\n    rules:\n      - alert: Slow\n        expr: latency_seconds > 1\n        for: 10m\n",
    )
    .expect("rules");
    let data = tempfile::tempdir().expect("tempdir");
    let args = [
        "--rule-files",
        &file.display().to_string(),
        // A `for` of 10 m is restored only with a grace period below it.
        "--rules-alert-for-grace-period",
        "1m",
    ]
    .map(str::to_owned);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let bin = env!("CARGO_BIN_EXE_sluice");
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &args);
    let mut sluice = common::KillOnDrop(child);
    let body = common::body(vec![common::series(
        &[("__name__", "latency_seconds")],
        &[(common::now_ms(), 2.0)],
    )]);
    assert_eq!(common::push(addr, body).await.0, 204);
    // Pending, its state written (from the third evaluation on), for a
    // few seconds more.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (active_at, last) = loop {
        let s = for_state(addr, "Slow").await;
        if let (Some(first), Some(last)) = (s.first(), s.last()) {
            if last.0 - first.0 >= 5_000 {
                break (first.1, last.0);
            }
        }
        assert!(Instant::now() < deadline, "ALERTS_FOR_STATE never written");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    sluice.kill();

    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &args);
    let _sluice = common::KillOnDrop(child);
    // After the restart, the state written again carries the old time,
    // moved on by the outage (about a second or two), not the time of the
    // first evaluation after the restart.
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let s: Vec<(i64, f64)> = for_state(addr, "Slow")
            .await
            .into_iter()
            .filter(|&(t, _)| t > last)
            .collect();
        if let Some(&first) = s.first() {
            break first;
        }
        assert!(
            Instant::now() < deadline,
            "ALERTS_FOR_STATE never written after the restart"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let down_secs = (last / 1000) as f64;
    let first_eval_secs = (after.0 / 1000) as f64;
    assert!(
        after.1 >= active_at && after.1 < first_eval_secs - 3.0,
        "restored {} from {active_at} (down at {down_secs}, evaluated again at {first_eval_secs})",
        after.1
    );
    let v: serde_json::Value =
        serde_json::from_str(&common::get(addr, "/api/v1/alerts").await.1).expect("json");
    assert_eq!(v["data"]["alerts"][0]["state"], "pending", "{v}");
}

/// Prometheus' own `promtool test rules` files (`cmd/promtool/testdata` of
/// v3.5.0, copied under `tests/testdata/promtool`): their input series
/// loaded into Sluice, its rule groups evaluated at the test's times, and
/// the alerts firing at each `alert_rule_test` time and the answers to
/// each `promql_expr_test` compared with what the file expects, native
/// histograms included.
mod promtool_tests {
    use super::*;
    use sluice::config::Config;
    use sluice::promql::parser::text::parse_prom_duration;

    /// A duration as the files write them (`1m`, `0`, `2m59s999ms`).
    fn duration(v: &serde_yaml_ng::Value) -> i64 {
        let s = match v {
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            serde_yaml_ng::Value::String(s) => s.clone(),
            _ => "0".into(),
        };
        parse_prom_duration(&s).unwrap_or_else(|| panic!("duration {s:?}"))
    }

    fn text(v: &serde_yaml_ng::Value) -> String {
        match v {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            _ => String::new(),
        }
    }

    fn map(v: &serde_yaml_ng::Value) -> BTreeMap<String, String> {
        v.as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, v)| (text(k), text(v)))
            .collect()
    }

    /// Runs every test group of `file`; the checks made.
    async fn run(file: &str) -> usize {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/promtool");
        let doc: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join(file)).expect("read"))
                .expect("yaml");
        let eval_interval = doc.get("evaluation_interval").map_or(60_000, duration);
        let rule_files: Vec<String> = doc["rule_files"]
            .as_sequence()
            .into_iter()
            .flatten()
            .map(|f| dir.join(text(f)).display().to_string())
            .collect();
        let mut checks = 0;
        for (n, tg) in doc["tests"].as_sequence().into_iter().flatten().enumerate() {
            let interval = tg.get("interval").map_or(eval_interval, duration);
            // A fresh server per test group, its clock far past the data.
            let config = Config {
                retention: Duration::from_secs(100 * 365 * 86_400),
                ..Config::default()
            };
            let srv =
                common::start_with_clock(config, sluice::storage::Clock::new(|| 3650 * 86_400_000))
                    .await;
            let mut series = Vec::new();
            for s in tg["input_series"].as_sequence().into_iter().flatten() {
                let line = format!("{} {}", text(&s["series"]), text(&s["values"]));
                series.push(promqltest::parse_series(&line).expect("series"));
            }
            for body in promqltest::load_requests(interval, &series) {
                let (status, text) = common::push(srv.addr, body).await;
                assert_eq!(status, 204, "{text}");
            }
            let db = srv.state.db_arc();
            let limits = sluice::promql::guard::ParseLimits::default();
            let mut groups: Vec<sluice::rules::group::Group> = rule_files
                .iter()
                .flat_map(|f| {
                    sluice::rules::file::load(std::path::Path::new(f), f, &limits).expect("rules")
                })
                .map(|spec| sluice::rules::group::Group::new(Arc::new(spec), interval, 0, false))
                .collect();
            let alerting = sluice::rules::group::AlertSettings {
                externals: sluice::rules::alerting::Externals {
                    labels: map(&tg["external_labels"]),
                    url: text(&tg["external_url"]),
                },
                ..Default::default()
            };
            let opts = Config::default().query_options();
            let alert_tests: Vec<&serde_yaml_ng::Value> = tg["alert_rule_test"]
                .as_sequence()
                .into_iter()
                .flatten()
                .collect();
            let expr_tests: Vec<&serde_yaml_ng::Value> = tg["promql_expr_test"]
                .as_sequence()
                .into_iter()
                .flatten()
                .collect();
            let max_t = alert_tests
                .iter()
                .chain(&expr_tests)
                .map(|t| duration(&t["eval_time"]))
                .max()
                .unwrap_or(0);
            let mut ts = 0;
            while ts <= max_t {
                for g in &mut groups {
                    let (commit, _) = g.eval(&db, &opts, &alerting, ts, ts);
                    commit.durable().await.expect("durable");
                    let st = g.status.lock();
                    for r in &st.rules {
                        assert!(
                            r.last_error.is_empty(),
                            "test group {n}, {ts} ms: {}",
                            r.last_error
                        );
                    }
                }
                for t in &alert_tests {
                    let at = duration(&t["eval_time"]);
                    if !(ts <= at && at < ts + eval_interval) {
                        continue;
                    }
                    let name = text(&t["alertname"]);
                    let mut want: Vec<(BTreeMap<String, String>, BTreeMap<String, String>)> = t
                        ["exp_alerts"]
                        .as_sequence()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            let mut labels = map(&a["exp_labels"]);
                            labels.insert("alertname".into(), name.clone());
                            (labels, map(&a["exp_annotations"]))
                        })
                        .collect();
                    let mut got = Vec::new();
                    for g in &groups {
                        let st = g.status.lock();
                        for (spec, rs) in g.spec.rules.iter().zip(&st.rules) {
                            if spec.name != name {
                                continue;
                            }
                            got.extend(
                                rs.alerts
                                    .iter()
                                    .filter(|a| {
                                        a.state == sluice::rules::alerting::AlertState::Firing
                                    })
                                    .map(|a| (a.labels.clone(), a.annotations.clone())),
                            );
                        }
                    }
                    want.sort();
                    got.sort();
                    assert_eq!(got, want, "{file}, test group {n}: alert {name} at {at} ms");
                    checks += 1;
                }
                ts += eval_interval;
            }
            for t in &expr_tests {
                let expr = text(&t["expr"]);
                let at = duration(&t["eval_time"]);
                let samples: Vec<&serde_yaml_ng::Value> = t["exp_samples"]
                    .as_sequence()
                    .into_iter()
                    .flatten()
                    .collect();
                if samples.iter().any(|s| s.get("histogram").is_some()) {
                    // Native histograms: each expected one against the
                    // API's answer, as Prometheus' own test scripts are.
                    let v = common::api_json(
                        &format!("http://{}/api/v1/query", srv.addr),
                        &[
                            ("query", expr.clone()),
                            ("time", (at as f64 / 1000.0).to_string()),
                        ],
                    )
                    .await;
                    let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
                    assert_eq!(result.len(), samples.len(), "{file}: {expr}: {v}");
                    for want in &samples {
                        let labels =
                            promqltest::parse_series(&format!("{} 0", text(&want["labels"])))
                                .expect("labels")
                                .labels;
                        let notation = text(&want["histogram"]);
                        let body = notation
                            .trim()
                            .trim_start_matches("{{")
                            .trim_end_matches("}}");
                        let h = promqltest::parse_histogram(body).expect("histogram");
                        let got = result
                            .iter()
                            .find(|r| {
                                r["metric"].as_object().is_some_and(|m| {
                                    m.len() == labels.len()
                                        && labels.iter().all(|(k, v)| {
                                            m.get(k).and_then(|x| x.as_str()) == Some(v)
                                        })
                                })
                            })
                            .unwrap_or_else(|| panic!("{file}: {expr}: no {labels:?} in {v}"));
                        assert!(
                            promqltest::histogram_matches(&h, &got["histogram"][1]),
                            "{file}, test group {n}: {expr} at {at} ms: {got} for {want:?}"
                        );
                    }
                    checks += 1;
                    continue;
                }
                let mut want: Vec<(BTreeMap<String, String>, f64)> = samples
                    .iter()
                    .map(|s| {
                        let labels = text(&s["labels"]);
                        let labels = match labels.trim() {
                            "" => BTreeMap::new(),
                            l => {
                                promqltest::parse_series(&format!("{l} 0"))
                                    .expect("labels")
                                    .labels
                            }
                        };
                        let v = match &s["value"] {
                            serde_yaml_ng::Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                            other => text(other).parse().unwrap_or(f64::NAN),
                        };
                        (labels, v)
                    })
                    .collect();
                let got = common::query_vector(srv.addr, &expr, Some(at as f64 / 1000.0)).await;
                let mut got: Vec<(BTreeMap<String, String>, f64)> = got
                    .into_iter()
                    .map(|(l, v)| (l, v.parse().unwrap_or(f64::NAN)))
                    .collect();
                want.sort_by(|a, b| a.0.cmp(&b.0));
                got.sort_by(|a, b| a.0.cmp(&b.0));
                assert_eq!(
                    got.iter().map(|g| &g.0).collect::<Vec<_>>(),
                    want.iter().map(|w| &w.0).collect::<Vec<_>>(),
                    "{file}, test group {n}: {expr} at {at} ms"
                );
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        promqltest::almost_equal(g.1, w.1),
                        "{file}, test group {n}: {expr} at {at} ms: {} for {}",
                        g.1,
                        w.1
                    );
                }
                checks += 1;
            }
        }
        checks
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prometheus_own_promtool_rule_tests_pass() {
        // Every check, the native histograms' too.
        assert_eq!(run("unittest.yml").await, 26);
        assert_eq!(run("no-test-group-interval.yml").await, 2);
    }
}
