//! Bad remote-write input over real HTTP: each gets the right status and a
//! message naming the problem, and afterwards a good request still works and
//! nothing stored before is lost.

mod common;

use common::{body, get, metric_value, now_ms, push, push_with, series, start, stored, TestServer};
use sluice::config::Config;
use sluice::ingest::validate::NameValidation;

/// Pushes one good sample to `good` at `t` and checks all earlier ones are intact.
async fn still_works(srv: &TestServer, t: i64, expect_before: usize) {
    let (code, text) = push(
        srv.addr,
        body(vec![series(&[("__name__", "good")], &[(t, 1.0)])]),
    )
    .await;
    assert_eq!(code, 204, "{text}");
    assert_eq!(stored(srv, "good").len(), expect_before + 1);
}

#[tokio::test]
async fn bad_bodies_and_headers_are_refused_clearly() {
    let srv = start(Config {
        max_body_bytes: 4096,
        max_decompressed_bytes: 8192,
        ..Config::default()
    })
    .await;
    let t0 = now_ms() - 60_000;
    still_works(&srv, t0, 0).await;

    let (code, text) = push(srv.addr, b"this is not snappy at all".to_vec()).await;
    assert_eq!(code, 400);
    assert!(text.contains("snappy"), "{text}");
    still_works(&srv, t0 + 1, 1).await;

    // Valid snappy around a truncated protobuf: refused whole, nothing stored.
    let raw = {
        use prost::Message;
        sluice::proto::prometheus::WriteRequest {
            timeseries: vec![series(&[("__name__", "trunc")], &[(t0, 1.0)])],
            metadata: vec![],
        }
        .encode_to_vec()
    };
    let cut = snap::raw::Encoder::new()
        .compress_vec(&raw[..raw.len() - 3])
        .expect("compress");
    let (code, text) = push(srv.addr, cut).await;
    assert_eq!(code, 400);
    assert!(
        text.contains("cannot decode WriteRequest") && text.contains("invalid protobuf"),
        "{text}"
    );
    assert!(stored(&srv, "trunc").is_empty());
    still_works(&srv, t0 + 2, 2).await;

    // The framed snappy format instead of the block format.
    let mut framed = Vec::new();
    {
        use std::io::Write;
        let mut w = snap::write::FrameEncoder::new(&mut framed);
        w.write_all(&raw).expect("frame");
    }
    let (code, text) = push(srv.addr, framed).await;
    assert_eq!(code, 400);
    assert!(text.contains("framed format"), "{text}");
    still_works(&srv, t0 + 3, 3).await;

    let ok = body(vec![series(&[("__name__", "x")], &[(t0, 1.0)])]);
    let (code, text) = push_with(srv.addr, ok.clone(), &[("content-encoding", "gzip")]).await;
    assert_eq!(code, 415);
    assert!(
        text.contains("Content-Encoding") && text.contains("gzip"),
        "{text}"
    );
    let (code, text) = push_with(
        srv.addr,
        ok.clone(),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(code, 415);
    assert!(text.contains("Content-Type"), "{text}");
    let (code, text) = push_with(
        srv.addr,
        ok.clone(),
        &[(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v3.Request",
        )],
    )
    .await;
    assert_eq!(code, 415);
    assert!(text.contains("io.prometheus.write.v2.Request"), "{text}");
    // A 1.0 body labelled 2.0: its fields are the ones 2.0 reserves.
    let (code, text) = push_with(
        srv.addr,
        ok.clone(),
        &[(
            "content-type",
            "application/x-protobuf;proto=io.prometheus.write.v2.Request",
        )],
    )
    .await;
    assert_eq!(code, 400);
    assert!(text.contains("looks like a remote write 1.0"), "{text}");
    // No Content-Type or Content-Encoding at all: 1.0 with snappy is assumed.
    let (code, _) = push_with(
        srv.addr,
        ok,
        &[("content-type", ""), ("content-encoding", "")],
    )
    .await;
    assert_eq!(code, 204);
    still_works(&srv, t0 + 4, 4).await;

    // Over the body limit as sent.
    let (code, text) = push(srv.addr, vec![0u8; 5000]).await;
    assert_eq!(code, 413);
    assert!(text.contains("max-body-bytes"), "{text}");
    // A small body whose snappy header claims a huge decompressed length.
    let mut liar = Vec::new();
    let mut n: u64 = 1 << 31;
    while n >= 0x80 {
        liar.push(n as u8 | 0x80);
        n >>= 7;
    }
    liar.push(n as u8);
    liar.extend_from_slice(&[0; 16]);
    let (code, text) = push(srv.addr, liar).await;
    assert_eq!(code, 413);
    assert!(
        text.contains("2147483648") && text.contains("max-decompressed-bytes"),
        "{text}"
    );
    still_works(&srv, t0 + 5, 5).await;

    let (code, _) = get(srv.addr, "/api/v1/write").await;
    assert_eq!(code, 405);
}

#[tokio::test]
async fn invalid_series_are_rejected_and_valid_ones_stored() {
    // With the classic name grammar; UTF-8 names (the default) are
    // accepted, see `utf8_names_are_accepted_but_empty_or_invalid_ones_not`.
    let srv = start(Config {
        max_labels_per_series: 4,
        metric_name_validation_scheme: NameValidation::Legacy,
        ..Config::default()
    })
    .await;
    let t = now_ms() - 60_000;
    let req = vec![
        series(
            &[("__name__", "ok_a"), ("job", "j")],
            &[(t, 1.0), (t + 1000, 2.0)],
        ),
        series(&[("__name__", "bad"), ("1abc", "x")], &[(t, 1.0)]),
        series(
            &[("__name__", "bad"), ("job", "a"), ("job", "b")],
            &[(t, 1.0), (t + 1, 1.0)],
        ),
        series(
            &[
                ("__name__", "bad"),
                ("a", "1"),
                ("b", "1"),
                ("c", "1"),
                ("d", "1"),
            ],
            &[(t, 1.0)],
        ),
        series(&[("__name__", "bad-name")], &[(t, 1.0)]),
        series(&[("job", "nameless")], &[(t, 1.0)]),
        // Unsorted but otherwise valid: sorted and stored.
        series(&[("job", "j"), ("__name__", "ok_b")], &[(t, 3.0)]),
    ];
    let (code, text) = push(srv.addr, body(req)).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.starts_with("rejected 6 of 9 samples"), "{text}");
    for reason in [
        "invalid_label_name: 1",
        "duplicate_label_name: 2",
        "too_many_labels: 1",
        "invalid_metric_name: 1",
        "missing_metric_name: 1",
    ] {
        assert!(text.contains(reason), "{reason} in {text}");
    }
    assert!(
        text.contains(r#"__name__="bad""#),
        "names the series: {text}"
    );
    assert_eq!(stored(&srv, "ok_a"), vec![(t, 1.0), (t + 1000, 2.0)]);
    assert_eq!(stored(&srv, "ok_b"), vec![(t, 3.0)]);
    assert!(stored(&srv, "bad").is_empty());

    let (_, metrics) = get(srv.addr, "/metrics").await;
    assert_eq!(
        metric_value(
            &metrics,
            r#"sluice_rejected_samples_total{protocol="remote_write",reason="duplicate_label_name"}"#
        ),
        Some(2.0)
    );
    assert_eq!(
        metric_value(
            &metrics,
            r#"sluice_ingested_samples_total{protocol="remote_write"}"#
        ),
        Some(3.0)
    );
    assert_eq!(
        metric_value(
            &metrics,
            r#"sluice_ingest_unsorted_series_total{protocol="remote_write"}"#
        ),
        Some(1.0)
    );
    assert_eq!(metric_value(&metrics, "sluice_head_series"), Some(2.0));
}

#[tokio::test]
async fn out_of_order_and_duplicates_follow_the_head_rules() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let s = |samples: &[(i64, f64)]| body(vec![series(&[("__name__", "m"), ("i", "1")], samples)]);
    assert_eq!(
        push(srv.addr, s(&[(t, 1.0), (t + 15_000, 2.0)])).await.0,
        204
    );
    // Exact duplicate: accepted silently.
    let (code, text) = push(srv.addr, s(&[(t + 15_000, 2.0)])).await;
    assert_eq!(code, 204, "{text}");
    let (code, text) = push(srv.addr, s(&[(t + 15_000, 9.0)])).await;
    assert_eq!(code, 400);
    assert!(text.contains("duplicate_sample_for_timestamp: 1"), "{text}");
    let (code, text) = push(srv.addr, s(&[(t + 5_000, 9.0), (t + 30_000, 3.0)])).await;
    assert_eq!(code, 400);
    assert!(
        text.contains("rejected 1 of 2 samples") && text.contains("out_of_order: 1"),
        "{text}"
    );
    let future = now_ms() + 11 * 60_000;
    let (code, text) = push(srv.addr, s(&[(future, 1.0)])).await;
    assert_eq!(code, 400);
    assert!(
        text.contains("out_of_bounds: 1") && text.contains("too far in the future"),
        "{text}"
    );
    let stale = f64::from_bits(0x7ff0_0000_0000_0002);
    assert_eq!(push(srv.addr, s(&[(t + 45_000, stale)])).await.0, 204);
    let got: Vec<(i64, u64)> = stored(&srv, "m")
        .into_iter()
        .map(|(t, v)| (t, v.to_bits()))
        .collect();
    assert_eq!(
        got,
        vec![
            (t, 1.0f64.to_bits()),
            (t + 15_000, 2.0f64.to_bits()),
            (t + 30_000, 3.0f64.to_bits()),
            (t + 45_000, 0x7ff0_0000_0000_0002)
        ]
    );
}

#[tokio::test]
async fn series_limit_rejects_only_new_series() {
    let srv = start(Config {
        max_series: 2,
        ..Config::default()
    })
    .await;
    let t = now_ms() - 60_000;
    let one = |name: &str, t: i64| series(&[("__name__", name)], &[(t, 1.0)]);
    assert_eq!(
        push(srv.addr, body(vec![one("a", t), one("b", t)])).await.0,
        204
    );
    let (code, text) = push(srv.addr, body(vec![one("a", t + 1), one("c", t)])).await;
    assert_eq!(code, 400);
    assert!(
        text.contains("series_limit: 1") && text.contains("series limit of 2"),
        "{text}"
    );
    assert_eq!(stored(&srv, "a").len(), 2);
}

#[tokio::test]
async fn health_endpoints_answer() {
    let srv = start(Config::default()).await;
    assert_eq!(
        get(srv.addr, "/-/healthy").await,
        (200, "Sluice is Healthy.\n".into())
    );
    assert_eq!(
        get(srv.addr, "/-/ready").await,
        (200, "Sluice is Ready.\n".into())
    );
    let resp = reqwest::Client::new()
        .post(format!("http://{}/api/v1/write", srv.addr))
        .header("content-encoding", "snappy")
        .body(body(vec![]))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(resp.headers()["x-prometheus-remote-write-version"], "0.1.0");
}

#[tokio::test]
async fn utf8_names_are_accepted_but_empty_or_invalid_ones_not() {
    let srv = start(Config::default()).await;
    let t = now_ms() - 60_000;
    let req = vec![
        series(
            &[("__name__", "http.server.duration"), ("1abc", "x")],
            &[(t, 1.0)],
        ),
        series(&[("__name__", "bad-name")], &[(t, 2.0)]),
        series(&[("__name__", "empty_label"), ("", "x")], &[(t, 1.0)]),
    ];
    let (code, text) = push(srv.addr, body(req)).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.starts_with("rejected 1 of 3 samples"), "{text}");
    assert!(
        text.contains(
            "invalid label name (must be non-empty UTF-8, --metric-name-validation-scheme=utf8)"
        ),
        "{text}"
    );
    assert_eq!(stored(&srv, "http.server.duration"), vec![(t, 1.0)]);
    assert_eq!(stored(&srv, "bad-name"), vec![(t, 2.0)]);
}
