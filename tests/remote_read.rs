//! Remote read: a Prometheus 3.5.3 with `remote_read` pointed at Sluice
//! answers queries over data only Sluice holds (it asks for streamed XOR
//! chunks), and a client asking for samples gets every sample.

mod common;

use common::{prometheus3, Prometheus};
use prost::Message;
use sluice::config::Config;
use sluice::proto::prometheus as pb;

const SERIES: usize = 20;
const POINTS: i64 = 40;

async fn load(addr: std::net::SocketAddr, base: i64) {
    let ts = (0..SERIES)
        .map(|i| {
            let samples: Vec<(i64, f64)> = (0..POINTS)
                .map(|k| (base + k * 15_000, (i as i64 * 100 + k) as f64))
                .collect();
            common::series(
                &[("__name__", "rr_metric"), ("instance", &format!("i{i}"))],
                &samples,
            )
        })
        .collect::<Vec<_>>();
    let mut ts = ts;
    // And a native histogram series: 3 observations more every 15 s.
    let mut hist = common::series(&[("__name__", "rr_hist")], &[]);
    hist.histograms = (0..POINTS)
        .map(|k| pb::Histogram {
            count: Some(pb::histogram::Count::CountInt(3 * k as u64)),
            sum: k as f64,
            schema: 0,
            positive_spans: vec![pb::BucketSpan {
                offset: 0,
                length: 1,
            }],
            positive_deltas: vec![3 * k],
            timestamp: base + k * 15_000,
            ..Default::default()
        })
        .collect();
    ts.push(hist);
    let (status, text) = common::push(addr, common::body(ts)).await;
    assert_eq!(status, 204, "{text}");
}

fn read_request(start: i64, end: i64, types: Vec<i32>) -> Vec<u8> {
    let req = pb::ReadRequest {
        queries: vec![pb::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers: vec![pb::LabelMatcher {
                r#type: pb::label_matcher::Type::Eq as i32,
                name: "__name__".into(),
                value: "rr_metric".into(),
            }],
            hints: None,
        }],
        accepted_response_types: types,
    };
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_read_returns_every_sample_and_a_streamed_one_every_chunk() {
    let srv = common::start(Config::default()).await;
    let base = common::now_ms() - 20 * 60_000;
    load(srv.addr, base).await;
    let client = reqwest::Client::new();
    let end = base + POINTS * 15_000;
    let resp = client
        .post(format!("http://{}/api/v1/read", srv.addr))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .body(read_request(base, end, vec![0]))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-protobuf");
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&resp.bytes().await.expect("body"))
        .expect("snappy");
    let answer = pb::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
    let ts = &answer.results[0].timeseries;
    assert_eq!(ts.len(), SERIES);
    for s in ts {
        let i: i64 = s.labels[1].value[1..].parse().expect("instance");
        let want: Vec<(i64, f64)> = (0..POINTS)
            .map(|k| (base + k * 15_000, (i * 100 + k) as f64))
            .collect();
        let got: Vec<(i64, f64)> = s.samples.iter().map(|x| (x.timestamp, x.value)).collect();
        assert_eq!(got, want);
    }
    // Streamed: frames of (uvarint length, CRC32C, ChunkedReadResponse).
    let resp = client
        .post(format!("http://{}/api/v1/read", srv.addr))
        .body(read_request(base, end, vec![1, 0]))
        .send()
        .await
        .expect("sent");
    assert_eq!(
        resp.headers()["content-type"],
        "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"
    );
    let body = resp.bytes().await.expect("body");
    let mut at = 0;
    let mut seen = 0;
    while at < body.len() {
        let (len, n) = sluice::encoding::uvarint(&body[at..]).expect("length");
        let crc = u32::from_be_bytes(body[at + n..at + n + 4].try_into().expect("crc"));
        let frame = &body[at + n + 4..at + n + 4 + len as usize];
        assert_eq!(crc32c::crc32c(frame), crc);
        let f = pb::ChunkedReadResponse::decode(frame).expect("frame");
        seen += f.chunked_series.len();
        at += n + 4 + len as usize;
    }
    assert_eq!(seen, SERIES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_3_reads_what_only_sluice_holds() {
    let srv = common::start(Config::default()).await;
    let base = common::now_ms() - 20 * 60_000;
    load(srv.addr, base).await;
    let prom = Prometheus::start_bin(
        &prometheus3("prometheus"),
        &format!(
            "global:\n  scrape_interval: 1h\nremote_read:\n  - url: http://{}/api/v1/read\n    read_recent: true\n",
            srv.addr
        ),
        &[],
    );
    prom.ready().await;
    let at = (base + (POINTS - 1) * 15_000) as f64 / 1000.0;
    for (q, want) in [
        (
            "count(count_over_time(rr_metric[15m]))",
            format!("{SERIES}"),
        ),
        (
            "sum(count_over_time(rr_metric[15m]))",
            format!("{}", SERIES as i64 * POINTS),
        ),
        (
            "sum(rr_metric)",
            format!(
                "{}",
                (0..SERIES as i64)
                    .map(|i| i * 100 + POINTS - 1)
                    .sum::<i64>()
            ),
        ),
        // Histograms come back as samples (Sluice holds them so).
        ("histogram_count(rr_hist)", format!("{}", 3 * (POINTS - 1))),
        ("count_over_time(rr_hist[15m])", format!("{POINTS}")),
    ] {
        let v = common::api_json(
            &format!("http://{}/api/v1/query", prom.addr()),
            &[("query", q.to_owned()), ("time", format!("{at:.3}"))],
        )
        .await;
        assert_eq!(
            v["data"]["result"][0]["value"][1],
            want.as_str(),
            "{q}: {v}\n{}",
            prom.log()
        );
    }
    let (_, pm) = common::get(prom.addr().parse().expect("addr"), "/metrics").await;
    assert!(
        pm.lines().any(
            |l| l.starts_with("prometheus_remote_read_client_queries_total")
                && l.contains("type=\"chunked\"")
        ),
        "Prometheus read streamed chunks"
    );
    assert!(
        pm.lines().any(
            |l| l.starts_with("prometheus_remote_read_client_queries_total")
                && l.contains("type=\"sampled\"")
        ),
        "Prometheus read histograms as samples"
    );
}

/// Hostile bodies get a 400 that names the problem, and the server stays up.
#[tokio::test]
async fn bad_read_requests_are_named_400s() {
    let srv = common::start(Config::default()).await;
    let url = format!("http://{}/api/v1/read", srv.addr);
    let client = reqwest::Client::new();
    let send = |body: Vec<u8>| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let r = client.post(url).body(body).send().await.expect("sent");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        }
    };
    let (code, text) = send(b"not snappy at all".to_vec()).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("snappy"), "{text}");
    let garbage = snap::raw::Encoder::new()
        .compress_vec(&[0xff; 64])
        .expect("snappy");
    let (code, text) = send(garbage).await;
    assert_eq!((code, text.contains("ReadRequest")), (400, true), "{text}");
    let req = |m: pb::LabelMatcher| {
        let r = pb::ReadRequest {
            queries: vec![pb::Query {
                start_timestamp_ms: 0,
                end_timestamp_ms: i64::MAX,
                matchers: vec![m],
                hints: None,
            }],
            accepted_response_types: vec![0],
        };
        snap::raw::Encoder::new()
            .compress_vec(&r.encode_to_vec())
            .expect("snappy")
    };
    let (code, text) = send(req(pb::LabelMatcher {
        r#type: pb::label_matcher::Type::Re as i32,
        name: "__name__".into(),
        value: "(".into(),
    }))
    .await;
    assert_eq!(code, 400, "{text}");
    let (code, text) = send(req(pb::LabelMatcher {
        r#type: 9,
        name: "job".into(),
        value: "a".into(),
    }))
    .await;
    assert_eq!((code, text.contains("matcher type")), (400, true), "{text}");
    let (code, _) = common::get(srv.addr, "/-/ready").await;
    assert_eq!(code, 200);
}

/// The request of one query over `[start, end]` with `matchers`, asking
/// for samples.
fn read_matchers(start: i64, end: i64, matchers: Vec<pb::LabelMatcher>) -> Vec<u8> {
    let req = pb::ReadRequest {
        queries: vec![pb::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
            hints: None,
        }],
        accepted_response_types: vec![0],
    };
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy")
}

fn matcher(t: pb::label_matcher::Type, name: &str, value: &str) -> pb::LabelMatcher {
    pb::LabelMatcher {
        r#type: t as i32,
        name: name.into(),
        value: value.into(),
    }
}

/// The series and samples of a sampled answer, sorted.
async fn read_all(base: &str, body: Vec<u8>) -> (u16, Vec<(String, Vec<(i64, u64)>)>) {
    let resp = reqwest::Client::new()
        .post(format!("{base}/api/v1/read"))
        .header("Content-Encoding", "snappy")
        .header("Content-Type", "application/x-protobuf")
        .header("X-Prometheus-Remote-Read-Version", "0.1.0")
        .body(body)
        .send()
        .await
        .expect("sent");
    let code = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    if code != 200 {
        return (code, Vec::new());
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&bytes)
        .expect("snappy");
    let answer = pb::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
    let mut out: Vec<(String, Vec<(i64, u64)>)> = answer.results[0]
        .timeseries
        .iter()
        .map(|s| {
            let mut l: Vec<String> = s
                .labels
                .iter()
                .map(|l| format!("{}={:?}", l.name, l.value))
                .collect();
            l.sort();
            let pts = s
                .samples
                .iter()
                .map(|x| (x.timestamp, x.value.to_bits()))
                .collect();
            (l.join(","), pts)
        })
        .collect();
    out.sort();
    (code, out)
}

/// Matcher sets that match the empty value (`__name__=~".*"`, `job=""`,
/// `x!~"a"`) are read as Prometheus 3.5.3 reads them, over the same data:
/// the same series and samples; no matcher at all reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matchers_that_match_empty_read_as_prometheus_3_reads_them() {
    use pb::label_matcher::Type;
    let srv = common::start(Config::default()).await;
    let prom = Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &["--web.enable-remote-write-receiver"],
    );
    prom.ready().await;
    let base = common::now_ms() - 20 * 60_000;
    let mut ts = Vec::new();
    for (name, job) in [
        ("a_total", Some("x")),
        ("a_total", Some("y")),
        ("b_total", None),
    ] {
        let mut labels = vec![("__name__", name)];
        if let Some(j) = job {
            labels.push(("job", j));
        }
        let samples: Vec<(i64, f64)> = (0..10).map(|k| (base + k * 15_000, k as f64)).collect();
        ts.push(common::series(&labels, &samples));
    }
    let (status, text) = common::push(srv.addr, common::body(ts.clone())).await;
    assert_eq!(status, 204, "{text}");
    prom.remote_write(common::body(ts)).await;
    let end = base + 10 * 15_000;
    let sluice = format!("http://{}", srv.addr);
    let prometheus = format!("http://{}", prom.addr());
    for (what, matchers, series) in [
        (
            "__name__=~\".*\"",
            vec![matcher(Type::Re, "__name__", ".*")],
            3,
        ),
        ("job=\"\"", vec![matcher(Type::Eq, "job", "")], 1),
        ("job!~\"x\"", vec![matcher(Type::Nre, "job", "x")], 2),
        ("nothing", vec![], 0),
    ] {
        let (sc, s) = read_all(&sluice, read_matchers(base, end, matchers.clone())).await;
        let (pc, p) = read_all(&prometheus, read_matchers(base, end, matchers)).await;
        assert_eq!((sc, pc), (200, 200), "{what}");
        assert_eq!(s.len(), series, "{what}: {s:?}");
        assert_eq!(s, p, "{what}: Sluice and Prometheus 3.5.3 differ");
    }
}

/// VictoriaMetrics' vmctl (1.145, sid) copies everything out of Sluice in
/// its `remote-read` mode with its default filter (`__name__=~".*"`):
/// VictoriaMetrics then holds every sample Sluice holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vmctl_remote_read_copies_every_sample_out() {
    let Some(dir) = std::env::var_os("SLUICE_VM_DIR") else {
        panic!("SLUICE_VM_DIR is not set: scripts/test sets it (scripts/fetch-victoria-metrics)");
    };
    let vmctl = std::path::Path::new(&dir).join("bin/vmctl");
    let srv = common::start(Config::default()).await;
    let base = (common::now_ms() / 3_600_000 - 2) * 3_600_000;
    let mut ts = Vec::new();
    for i in 0..5 {
        let samples: Vec<(i64, f64)> = (0..60)
            .map(|k| (base + k * 60_000, (i * 1000 + k) as f64))
            .collect();
        let inst = format!("i{i}");
        ts.push(common::series(
            &[("__name__", "copied_total"), ("instance", &inst)],
            &samples,
        ));
        ts.push(common::series(
            &[("__name__", "copied_gauge"), ("instance", &inst)],
            &samples,
        ));
    }
    let (status, text) = common::push(srv.addr, common::body(ts)).await;
    assert_eq!(status, 204, "{text}");
    let vm = common::downstream::VictoriaMetrics::start();
    vm.ready().await;
    let rfc3339 = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("time")
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    let out = std::process::Command::new(&vmctl)
        .args([
            "remote-read",
            "-s",
            &format!("--remote-read-src-addr=http://{}", srv.addr),
            &format!("--remote-read-filter-time-start={}", rfc3339(base)),
            &format!(
                "--remote-read-filter-time-end={}",
                rfc3339(base + 2 * 3_600_000)
            ),
            "--remote-read-step-interval=hour",
            &format!("--vm-addr=http://{}", vm.addr()),
            "--disable-progress-bar",
        ])
        .output()
        .expect("vmctl runs");
    assert!(
        out.status.success(),
        "vmctl failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = reqwest::get(format!("http://{}/internal/force_flush", vm.addr())).await;
    let at = (base + 59 * 60_000) as f64 / 1000.0;
    let selector = "{__name__=~\"copied_.*\"}";
    let want =
        common::downstream::raw_samples(&format!("http://{}", srv.addr), selector, "2h", at).await;
    assert_eq!(want.len(), 600);
    let mut got = Vec::new();
    for _ in 0..100 {
        got = common::downstream::raw_samples(&format!("http://{}", vm.addr()), selector, "2h", at)
            .await;
        if got.len() >= want.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(got, want, "VictoriaMetrics holds what Sluice holds");
}
