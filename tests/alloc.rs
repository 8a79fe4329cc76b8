//! Allocation counts on the ingest path, measured with dhat's heap
//! profiler: a request for series the head already holds allocates nothing.
//! (One #[test]: dhat allows a single profiler per process.)

#[path = "common/otlp_requests.rs"]
mod otlp_requests;
#[path = "common/requests.rs"]
mod requests;

use prost::Message;
use sluice::ingest::otlp::{append_export_request, Otlp, OtlpOptions};
use sluice::ingest::{self, remote_write, validate::LabelLimits};
use sluice::proto::prometheus as pb;
use sluice::storage::{Db, HeadOptions};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn blocks() -> u64 {
    dhat::HeapStats::get().total_blocks
}

#[test]
fn ingest_allocates_only_for_new_series_and_new_chunks() {
    let _profiler = dhat::Profiler::builder().testing().build();
    const SERIES: usize = 1000;
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..130)
        .map(|i| requests::request(SERIES, t0 + i * 15_000).encode_to_vec())
        .collect();

    // Decoding and walking every label and sample allocates nothing.
    let before = blocks();
    let mut n = 0usize;
    for ts in remote_write::decode(&bodies[0]).expect("valid") {
        n += ts.labels().count() + ts.samples().count();
    }
    let ours = blocks() - before;
    assert_eq!(n, SERIES * 11);
    assert_eq!(ours, 0, "hand-written decoder allocations per request");
    let before = blocks();
    let req = pb::WriteRequest::decode(&bodies[0][..]).expect("valid");
    let prost = blocks() - before;
    assert_eq!(req.timeseries.len(), SERIES);
    drop(req);
    eprintln!(
        "allocations per {SERIES}-series request: hand-written decoder {ours}, prost {prost}"
    );
    assert!(prost > SERIES as u64 * 10);

    let head = Db::new(HeadOptions::default());
    let limits = LabelLimits::default();
    let now = t0 + 130 * 15_000;
    let before = blocks();
    let r = ingest::append_write_request(&head, &bodies[0], &limits, now).expect("valid");
    assert_eq!(r.accepted, SERIES as u64);
    eprintln!(
        "first request (all {SERIES} series new): {} allocations",
        blocks() - before
    );

    // The second request: every series exists and its chunk has room.
    let before = blocks();
    let r = ingest::append_write_request(&head, &bodies[1], &limits, now).expect("valid");
    assert_eq!(r.accepted, SERIES as u64);
    assert_eq!(
        blocks() - before,
        0,
        "a request of known series allocates nothing"
    );

    // Across 128 more requests (a chunk cut at 120 included) only chunk
    // growth and cuts allocate.
    let before = blocks();
    for body in &bodies[2..] {
        let r = ingest::append_write_request(&head, body, &limits, now).expect("valid");
        assert_eq!(r.rejected_total(), 0);
    }
    let samples = (SERIES * 128) as f64;
    let per_sample = (blocks() - before) as f64 / samples;
    eprintln!("steady state: {per_sample:.4} allocations per sample");
    assert!(per_sample < 0.05, "{per_sample} allocations per sample");

    remote_write_2_allocates_only_for_new_series();
    otlp_allocates_only_for_new_series();
}

/// The same for remote write 2.0: the label references of a known series
/// find it without allocating.
fn remote_write_2_allocates_only_for_new_series() {
    const SERIES: usize = 1000;
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|i| requests::to_v2(&requests::request(SERIES, t0 + i * 15_000)).encode_to_vec())
        .collect();
    let head = Db::new(HeadOptions::default());
    let v2 = ingest::remote_write::V2Options::default();
    let now = t0 + 130 * 15_000;
    for body in &bodies[..2] {
        let r = ingest::append_write_request_v2(&head, body, &v2, now).expect("valid");
        assert_eq!(r.accepted, SERIES as u64);
    }
    let before = blocks();
    let r = ingest::append_write_request_v2(&head, &bodies[2], &v2, now).expect("valid");
    assert_eq!(r.accepted, SERIES as u64);
    assert_eq!(
        blocks() - before,
        0,
        "a 2.0 request of known series allocates nothing"
    );
}

/// The same for OTLP: once the thread's buffers have grown and the metric
/// names are cached, a request of known series allocates nothing.
fn otlp_allocates_only_for_new_series() {
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..3)
        .map(|i| otlp_requests::request(t0 + i * 15_000).encode_to_vec())
        .collect();
    let head = Db::new(HeadOptions::default());
    let otlp = Otlp::new(OtlpOptions::default(), 1 << 20);
    let limits = LabelLimits::default();
    let now = t0 + 3 * 15_000;
    let before = blocks();
    let r = append_export_request(&head, &otlp, &limits, &bodies[0], now).expect("valid");
    assert_eq!(r.samples.accepted, otlp_requests::SAMPLES as u64 + 1);
    eprintln!(
        "OTLP first request ({} points, all series new): {} allocations",
        otlp_requests::POINTS,
        blocks() - before
    );
    for body in &bodies[1..] {
        let before = blocks();
        let r = append_export_request(&head, &otlp, &limits, body, now).expect("valid");
        assert_eq!(r.samples.accepted, otlp_requests::SAMPLES as u64 + 1);
        assert_eq!(r.rejected_points_total(), 0);
        assert_eq!(
            blocks() - before,
            0,
            "an OTLP request of known series allocates nothing"
        );
    }
}
