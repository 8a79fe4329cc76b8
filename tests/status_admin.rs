//! The status and admin APIs against Prometheus 3.5.3 on the same data:
//! `/api/v1/status/tsdb` (cardinality), `/api/v1/parse_query` (the syntax
//! tree), `runtimeinfo`, `walreplay`, `tsdb/blocks`, and the admin API
//! off (Prometheus' refusal) and on (a snapshot that promtool lists and
//! Prometheus 3.5.3 and Sluice both serve).

mod common;

use std::collections::BTreeMap;

use serde_json::Value;
use sluice::config::Config;

const HOUR: i64 = 3_600_000;

/// Label values either side of 255 bytes.
const LONG_A: &str = concat!(
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
);
const LONG_B: &str = concat!(
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
);

/// Series with distinct counts per metric (7, 4, 2) and per label pair,
/// ten samples each over the last ten minutes.
fn data() -> Vec<sluice::proto::prometheus::TimeSeries> {
    let now = common::now_ms() / 1000 * 1000;
    let samples: Vec<(i64, f64)> = (0..10)
        .map(|i| (now - 600_000 + i * 60_000, i as f64))
        .collect();
    let mut out = Vec::new();
    for (metric, n) in [("requests_total", 7), ("errors_total", 4), ("up", 2)] {
        for i in 0..n {
            let instance = format!("host-{i}");
            let job = ["api", "db", "web"][i % 3];
            let mut labels = vec![
                ("__name__", metric),
                ("instance", instance.as_str()),
                ("job", job),
            ];
            if metric == "requests_total" && i < 5 {
                labels.push(("code", if i < 3 { "200" } else { "500" }));
            }
            // Long values: Prometheus counts a 4-byte length from 255 on.
            if metric == "up" {
                labels.push(("note", if i == 0 { LONG_A } else { LONG_B }));
            }
            out.push(common::series(&labels, &samples));
        }
    }
    out
}

async fn json(url: String) -> (u16, Value) {
    let resp = reqwest::get(&url).await.expect("sent");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}")),
    )
}

/// A top list as a map, name → value (the order of equal counts is not
/// Prometheus' to promise).
fn as_map(list: &Value) -> BTreeMap<String, u64> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_owned(),
                r["value"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

async fn both_started() -> (common::TestServer, common::Prometheus) {
    let sluice = common::start(Config::default()).await;
    let prom = common::Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &["--web.enable-remote-write-receiver"],
    );
    prom.ready().await;
    let body = common::body(data());
    prom.remote_write(body.clone()).await;
    let (status, text) = common::push(sluice.addr, body).await;
    assert_eq!(status, 204, "{text}");
    (sluice, prom)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_tsdb_counts_as_prometheus_3_does() {
    let (sluice, prom) = both_started().await;
    let (s, p) = (
        format!("http://{}/api/v1/status/tsdb", sluice.addr),
        format!("http://{}/api/v1/status/tsdb", prom.addr()),
    );
    let (ss, sj) = json(format!("{s}?limit=100")).await;
    let (ps, pj) = json(format!("{p}?limit=100")).await;
    assert_eq!((ss, ps), (200, 200), "{sj}\n{pj}");
    let (sd, pd) = (&sj["data"], &pj["data"]);
    for list in [
        "seriesCountByMetricName",
        "labelValueCountByLabelName",
        "memoryInBytesByLabelName",
        "seriesCountByLabelValuePair",
    ] {
        assert_eq!(as_map(&sd[list]), as_map(&pd[list]), "{list}:\n{sd}\n{pd}");
        assert!(!as_map(&sd[list]).is_empty(), "{list}");
    }
    for stat in ["numSeries", "numLabelPairs", "minTime", "maxTime"] {
        assert_eq!(
            sd["headStats"][stat], pd["headStats"][stat],
            "{stat}:\n{sd}\n{pd}"
        );
    }
    assert_eq!(sd["headStats"]["numSeries"], 13);
    // The default limit, and a limit that cuts: the same first rows
    // (7, 4, 2 series: no ties).
    let (_, sj) = json(s.clone()).await;
    let (_, pj) = json(p.clone()).await;
    assert_eq!(
        sj["data"]["seriesCountByMetricName"],
        pj["data"]["seriesCountByMetricName"]
    );
    let (_, sj) = json(format!("{s}?limit=2")).await;
    let (_, pj) = json(format!("{p}?limit=2")).await;
    assert_eq!(
        sj["data"]["seriesCountByMetricName"],
        pj["data"]["seriesCountByMetricName"]
    );
    assert_eq!(
        sj["data"]["seriesCountByMetricName"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    // The same refusal of a bad limit.
    for bad in ["0", "-3", "x"] {
        let (ss, sj) = json(format!("{s}?limit={bad}")).await;
        let (ps, pj) = json(format!("{p}?limit={bad}")).await;
        assert_eq!(
            (ss, &sj["errorType"], &sj["error"]),
            (ps, &pj["errorType"], &pj["error"])
        );
        assert_eq!(ss, 400);
    }
    // Beyond Prometheus: a selection, a focus label and totals.
    let (_, sj) = json(format!(
        "{s}?match[]={}&focusLabel=job",
        "requests_total%7Bcode%21%3D%22%22%7D"
    ))
    .await;
    let d = &sj["data"];
    assert_eq!(d["totalSeries"], 5, "{d}");
    assert_eq!(
        as_map(&d["seriesCountByFocusLabelValue"]),
        BTreeMap::from([("api".into(), 2), ("db".into(), 2), ("web".into(), 1)]),
        "{d}"
    );
    assert_eq!(as_map(&d["seriesCountByLabelName"])["code"], 5, "{d}");
    // Over a time range (head and blocks): the same series.
    let (_, sj) = json(format!("{s}?start=0&end=9999999999&limit=100")).await;
    assert_eq!(
        as_map(&sj["data"]["seriesCountByMetricName"]),
        as_map(&pd["seriesCountByMetricName"])
    );
}

/// Drops what Prometheus added to the tree after 3.5 (selectors'
/// `anchored`/`smoothed`, matching's `fillValues`, duration expressions).
fn as_of_3_5(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in [
                "anchored",
                "smoothed",
                "fillValues",
                "rangeExpr",
                "offsetExpr",
                "stepExpr",
            ] {
                m.remove(k);
            }
            m.values_mut().for_each(as_of_3_5);
        }
        Value::Array(a) => a.iter_mut().for_each(as_of_3_5),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parse_query_trees_are_prometheus_3s() {
    let (sluice, prom) = both_started().await;
    let queries = [
        "up",
        r#"requests_total{job=~"a.*", code!="500"} offset 5m"#,
        "rate(requests_total[5m] @ 1700000000)",
        "sum without (instance) (rate(requests_total[5m])) / on (job) group_left (code) errors_total",
        "topk(3, up) or vector(1)",
        "quantile_over_time(0.9, up[1h:1m] offset -2m @ end())",
        r#"label_replace(up, "a", "$1", "job", "(.*)") > bool 0.5"#,
        "-(1 + 2) * -Inf",
        r#"count_values("v", {__name__=~"up|x"})"#,
        "histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))",
        "absent_over_time(nope[10m]) unless ignoring (a) up",
    ];
    let tree = |addr: String, q: &str| {
        let enc: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
        json(format!("http://{addr}/api/v1/parse_query?query={enc}"))
    };
    for q in queries {
        let (ss, mut sj) = tree(sluice.addr.to_string(), q).await;
        let (ps, pj) = tree(prom.addr(), q).await;
        assert_eq!((ss, ps), (200, 200), "{q}: {sj} {pj}");
        as_of_3_5(&mut sj);
        assert_eq!(sj, pj, "{q}");
    }
    for bad in ["sum(", "", "rate(up)"] {
        let (ss, sj) = tree(sluice.addr.to_string(), bad).await;
        let (ps, pj) = tree(prom.addr(), bad).await;
        assert_eq!(
            (ss, &sj["errorType"]),
            (ps, &pj["errorType"]),
            "{bad}: {sj} {pj}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_endpoints_and_a_disabled_admin_api_answer_in_prometheus_shape() {
    let (sluice, prom) = both_started().await;
    let keys = |v: &Value| -> Vec<String> {
        v["data"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    for path in ["/api/v1/status/runtimeinfo", "/api/v1/status/walreplay"] {
        let (ss, sj) = json(format!("http://{}{path}", sluice.addr)).await;
        let (ps, pj) = json(format!("http://{}{path}", prom.addr())).await;
        assert_eq!((ss, ps), (200, 200), "{path}");
        assert_eq!(keys(&sj), keys(&pj), "{path}:\n{sj}\n{pj}");
    }
    let (_, rt) = json(format!("http://{}/api/v1/status/runtimeinfo", sluice.addr)).await;
    assert_eq!(rt["data"]["storageRetention"], "15d", "{rt}");
    assert_eq!(rt["data"]["reloadConfigSuccess"], true, "{rt}");
    assert!(
        rt["data"]["startTime"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{rt}"
    );
    let (_, blocks) = json(format!("http://{}/api/v1/status/tsdb/blocks", sluice.addr)).await;
    assert_eq!(blocks["data"], serde_json::json!({"blocks": []}));
    // Off by default: the same 500 and body as Prometheus'.
    let client = reqwest::Client::new();
    for path in [
        "/api/v1/admin/tsdb/snapshot",
        "/api/v1/admin/tsdb/delete_series?match[]=up",
        "/api/v1/admin/tsdb/clean_tombstones",
    ] {
        let mut got = Vec::new();
        for addr in [sluice.addr.to_string(), prom.addr()] {
            let r = client
                .post(format!("http://{addr}{path}"))
                .send()
                .await
                .expect("sent");
            let status = r.status().as_u16();
            let body: Value = serde_json::from_str(&r.text().await.expect("body")).expect("json");
            got.push((status, body));
        }
        assert_eq!(got[0], got[1], "{path}");
        assert_eq!(got[0].0, 500, "{path}");
    }
}

fn blocks_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(sluice::storage::block::Ulid::parse)
                .is_some()
        })
        .map(|e| e.path())
        .filter(|p| p.join("meta.json").exists())
        .collect();
    out.sort();
    out
}

async fn count_over(addr: &str, q: &str, at: i64) -> BTreeMap<String, String> {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query"),
        &[
            ("query", q.to_owned()),
            ("time", (at as f64 / 1000.0).to_string()),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    v["data"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metric"]["i"].as_str().unwrap_or_default().to_owned(),
                s["value"][1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_links_the_blocks_writes_the_head_and_opens_elsewhere() {
    const N: usize = 20;
    const MIN: i64 = 60_000;
    let data = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_sluice");
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &["--web.enable-admin-api"]);
    let _child = common::KillOnDrop(child);
    // 5 h a minute apart, ending 30 min ago: the oldest whole 2 h range
    // (or two) is cut into a block, the rest stays in the head.
    let end = (common::now_ms() - 30 * MIN) / MIN * MIN;
    let start = end - 5 * HOUR;
    common::push_minutely(addr, "snap_me", &[], N, (start, end), |i, t| {
        (i as i64 * t) as f64
    })
    .await;
    let want = common::blocks_cut_from(start, end);
    let cut = common::wait_for_metric(addr, "sluice_blocks_cut_total", |v| v >= want as f64).await;
    assert_eq!(cut, want as f64, "blocks cut within 20 s");
    let held = blocks_in(data.path());
    let q = "count_over_time(snap_me[6h])";
    let want = count_over(&addr.to_string(), q, end).await;
    assert_eq!(want.len(), N);
    assert!(want.values().all(|v| v == "301"), "{want:?}");

    let client = reqwest::Client::new();
    let take = |skip: bool| {
        let client = client.clone();
        async move {
            let r = client
                .post(format!(
                    "http://{addr}/api/v1/admin/tsdb/snapshot?skip_head={skip}"
                ))
                .send()
                .await
                .expect("sent");
            assert_eq!(r.status().as_u16(), 200);
            let v: Value = serde_json::from_str(&r.text().await.expect("body")).expect("json");
            v["data"]["name"].as_str().expect("name").to_owned()
        }
    };
    let with_head = data.path().join("snapshots").join(take(false).await);
    let without_head = data.path().join("snapshots").join(take(true).await);
    assert_ne!(with_head, without_head);
    let snap = blocks_in(&with_head);
    assert_eq!(snap.len(), held.len() + 1, "{snap:?} {held:?}");
    assert_eq!(blocks_in(&without_head).len(), held.len());
    // Linked, not copied: the same inode as the served block's index.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let first = &held[0];
        let linked = without_head.join(first.file_name().expect("name"));
        assert_eq!(
            std::fs::metadata(first.join("index")).expect("index").ino(),
            std::fs::metadata(linked.join("index"))
                .expect("index")
                .ino()
        );
    }
    // promtool reads every block of it.
    let listed = common::promtool3(&["tsdb", "list", with_head.to_str().expect("utf-8")]);
    for b in &snap {
        let name = b.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(listed.contains(name), "{name} in:\n{listed}");
    }
    // Prometheus 3.5.3 on the snapshot's blocks answers what Sluice did.
    let prom = common::prometheus3_on_blocks(&snap);
    prom.ready().await;
    assert_eq!(
        count_over(&prom.addr(), q, end).await,
        want,
        "{}",
        prom.log()
    );
    drop(prom);
    // And so does a Sluice started on it.
    let copy = tempfile::tempdir().expect("tempdir");
    for b in &snap {
        common::copy_block(b, &copy.path().join(b.file_name().expect("name")));
    }
    let (child, addr2) = common::spawn_sluice(bin, copy.path(), "info", &[]);
    let _second = common::KillOnDrop(child);
    assert_eq!(count_over(&addr2.to_string(), q, end).await, want);
}

/// Remote read (`/api/v1/read`, samples) of `name` over `[start, end]`:
/// each series' `i` label to its sample times, as runs a minute apart
/// (first, last) so that a difference reads at a glance.
async fn read_times(
    addr: &str,
    name: &str,
    (start, end): (i64, i64),
) -> BTreeMap<String, Vec<(i64, i64)>> {
    use sluice::proto::prometheus as pb;
    let series = common::remote_read(
        addr,
        vec![common::read_matcher(
            pb::label_matcher::Type::Eq,
            "__name__",
            name,
        )],
        (start, end),
    )
    .await;
    series
        .iter()
        .map(|ts| {
            let i = ts
                .labels
                .iter()
                .find(|l| l.name == "i")
                .map(|l| l.value.clone());
            let mut runs: Vec<(i64, i64)> = Vec::new();
            for s in &ts.samples {
                match runs.last_mut() {
                    Some(r) if s.timestamp == r.1 + 60_000 => r.1 = s.timestamp,
                    _ => runs.push((s.timestamp, s.timestamp)),
                }
            }
            (i.unwrap_or_default(), runs)
        })
        .collect()
}

/// `match[]` values of `/api/v1/series` over all time: the `i` labels.
async fn series_of(addr: &str, selector: &str) -> Vec<String> {
    let v = common::api_json(
        &format!("http://{addr}/api/v1/series"),
        &[("match[]", selector.to_owned())],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    let mut out: Vec<String> = v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| s["i"].as_str().unwrap_or_default().to_owned())
        .collect();
    out.sort();
    out
}

async fn admin(addr: &str, path: &str, form: &[(&str, String)]) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/admin/tsdb/{path}"))
        .form(form)
        .send()
        .await
        .expect("sent");
    let status = r.status().as_u16();
    assert_eq!(
        status,
        204,
        "{addr} {path}: {}",
        r.text().await.unwrap_or_default()
    );
}

/// What each reader answers of `del_me`: the counts per series at `at`,
/// the series listed, and the sample times remote read gives.
type Answers = (
    BTreeMap<String, String>,
    Vec<String>,
    BTreeMap<String, Vec<(i64, i64)>>,
);

async fn answers(addr: &str, span: (i64, i64)) -> Answers {
    (
        count_over(addr, "count_over_time(del_me[6h])", span.1).await,
        series_of(addr, "del_me").await,
        read_times(addr, "del_me", span).await,
    )
}

/// Prometheus' answers without the series that have no sample left:
/// Prometheus 3.5.3 still lists a head series deleted whole, and remote
/// read gives it with no samples (its open head chunk ends at "forever"
/// in the head's index, so no tombstone covers it), until the head is
/// compacted; then, as Sluice does throughout, it lists it nowhere.
async fn answers_without_emptied(addr: &str, span: (i64, i64)) -> Answers {
    let (counts, mut listed, mut read) = answers(addr, span).await;
    let emptied: Vec<String> = read
        .iter()
        .filter(|(_, runs)| runs.is_empty())
        .map(|(i, _)| i.clone())
        .collect();
    read.retain(|_, runs| !runs.is_empty());
    listed.retain(|i| !emptied.contains(i));
    (counts, listed, read)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_series_leave_every_read_as_in_prometheus_3_survive_kill_9_and_are_cleaned() {
    const N: usize = 6;
    const MIN: i64 = 60_000;
    let data = tempfile::tempdir().expect("tempdir");
    let bin = env!("CARGO_BIN_EXE_sluice");
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &["--web.enable-admin-api"]);
    let mut sluice = common::KillOnDrop(child);
    let prom = common::Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &[
            "--web.enable-remote-write-receiver",
            "--web.enable-admin-api",
        ],
    );
    prom.ready().await;
    let prom_addr: std::net::SocketAddr = prom.addr().parse().expect("address");
    // 5 h a minute apart up to the last whole minute: the oldest 2 h
    // range (or two) is cut into a block, the rest stays in the head.
    let end = common::now_ms() / MIN * MIN - MIN;
    let start = end - 5 * HOUR;
    for to in [addr, prom_addr] {
        common::push_minutely(to, "del_me", &[], N, (start, end), |i, t| {
            (i as i64 * t) as f64
        })
        .await;
    }
    let want = common::blocks_cut_from(start, end);
    let cut = common::wait_for_metric(addr, "sluice_blocks_cut_total", |v| v >= want as f64).await;
    assert_eq!(cut, want as f64, "blocks cut within 20 s");
    let span = (start, end);
    let (s, p) = (addr.to_string(), prom.addr());
    let before = answers(&s, span).await;
    assert_eq!(before.0.len(), N);
    assert_eq!(before, answers(&p, span).await, "the same data");

    // One series whole (all of time, the default), one across the blocks
    // and the head, one in the head alone, one by two selectors at once.
    let secs = |t: i64| (t as f64 / 1000.0).to_string();
    let deletions: Vec<Vec<(&str, String)>> = vec![
        vec![("match[]", "del_me{i=\"1\"}".into())],
        vec![
            ("match[]", "del_me{i=\"2\"}".into()),
            ("start", secs(start + 30 * MIN)),
            ("end", secs(end - 30 * MIN)),
        ],
        vec![
            ("match[]", "del_me{i=\"3\"}".into()),
            ("start", secs(end - 60 * MIN)),
        ],
        vec![
            ("match[]", "del_me{i=\"4\"}".into()),
            ("match[]", "{__name__=\"del_me\",i=\"5\"}".into()),
            ("start", secs(start)),
            ("end", secs(start + 10 * MIN)),
        ],
    ];
    for form in &deletions {
        admin(&s, "delete_series", form).await;
        admin(&p, "delete_series", form).await;
    }
    let after = answers(&s, span).await;
    assert_eq!(
        after,
        answers_without_emptied(&p, span).await,
        "deleted as Prometheus 3.5.3 deletes"
    );
    assert!(
        !after.0.contains_key("1") && !after.1.contains(&"1".to_owned()),
        "{after:?}"
    );
    assert_eq!(after.0["2"], "60", "an hour left of i=2: {after:?}");
    assert_eq!(after.0["3"], "240", "{after:?}");
    assert_eq!(
        (&after.0["4"], &after.0["5"]),
        (&"290".to_owned(), &"290".to_owned())
    );
    // /federate: the newest sample of i=3 is gone, so is i=3 there.
    let (code, fed) = common::get(addr, "/federate?match[]=del_me").await;
    assert_eq!(code, 200, "{fed}");
    let federated: Vec<&str> = fed.lines().filter(|l| l.starts_with("del_me{")).collect();
    assert_eq!(federated.len(), N - 2, "{fed}");
    assert!(
        !fed.contains("i=\"3\"") && !fed.contains("i=\"1\""),
        "{fed}"
    );

    // kill -9, and a start on the same directory answers the same.
    sluice.kill();
    let (child, addr) = common::spawn_sluice(bin, data.path(), "info", &["--web.enable-admin-api"]);
    let _sluice = common::KillOnDrop(child);
    let s = addr.to_string();
    assert_eq!(answers(&s, span).await, after, "after kill -9");

    // clean_tombstones writes the blocks again: no tombstone left, the
    // same answers, and promtool's dump of them has no deleted sample.
    admin(&s, "clean_tombstones", &[]).await;
    admin(&p, "clean_tombstones", &[]).await;
    assert_eq!(answers(&s, span).await, after, "after clean_tombstones");
    assert_eq!(answers_without_emptied(&p, span).await, after);
    let (_, blocks) = json(format!("http://{s}/api/v1/status/tsdb/blocks")).await;
    let metas = blocks["data"]["blocks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!metas.is_empty(), "{blocks}");
    for m in &metas {
        // Left out at 0, as Prometheus' `omitempty` leaves it.
        assert_eq!(m["stats"]["numTombstones"].as_u64().unwrap_or(0), 0, "{m}");
        assert_eq!(
            m["compaction"]["parents"].as_array().map(Vec::len),
            Some(1),
            "{m}"
        );
    }
    let copy = tempfile::tempdir().expect("tempdir");
    for b in blocks_in(data.path()) {
        common::copy_block(&b, &copy.path().join(b.file_name().expect("name")));
    }
    // promtool opens the directory as Prometheus' own: it wants a WAL.
    std::fs::create_dir(copy.path().join("wal")).expect("wal dir");
    let dump = common::promtool3(&["tsdb", "dump", copy.path().to_str().expect("utf-8")]);
    let deleted = |line: &str| {
        let t: i64 = line
            .rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        line.contains("i=\"1\"")
            || (line.contains("i=\"2\"") && (start + 30 * MIN..=end - 30 * MIN).contains(&t))
            || ((line.contains("i=\"4\"") || line.contains("i=\"5\"")) && t <= start + 10 * MIN)
    };
    let dumped: Vec<&str> = dump
        .lines()
        .filter(|l| l.starts_with("{__name__=\"del_me\""))
        .collect();
    assert!(!dumped.is_empty(), "{dump}");
    assert!(dumped.iter().all(|l| !deleted(l)), "{dump}");
}
