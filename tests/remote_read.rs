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
        r#type: pb::label_matcher::Type::Eq as i32,
        name: "job".into(),
        value: String::new(),
    }))
    .await;
    assert_eq!((code, text.contains("matcher")), (400, true), "{text}");
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
