//! A driver for instruction counts of the remote-write ingest path: 61
//! requests of the same 2000 series (the criterion bench's request), as
//! 1.0 or 2.0, into one head; with `100k`, 8 rounds of the load
//! generator's 100k series, 2000 per request. Run it under callgrind
//! (or cachegrind), collecting only the ingest call:
//!
//! ```text
//! cargo build --release --example ingest_profile
//! valgrind --tool=callgrind \
//!   --toggle-collect='sluice::ingest::remote_write::append_write_request' \
//!   --toggle-collect='sluice::ingest::remote_write::append_write_request_v2' \
//!   target/release/examples/ingest_profile v1   # or v2; then 100k
//! ```

#[path = "../tests/common/requests.rs"]
mod requests;

use prost::Message;
use sluice::ingest::{self, remote_write::V2Options};
use sluice::proto::prometheus as pb;
use sluice::storage::{Db, HeadOptions};

fn main() -> Result<(), String> {
    let v2 = match std::env::args().nth(1).as_deref() {
        Some("v1") => false,
        Some("v2") => true,
        _ => return Err("usage: ingest_profile v1|v2".to_owned()),
    };
    let t0 = 1_700_000_000_000i64;
    let requests: Vec<pb::WriteRequest> = if std::env::args().nth(2).as_deref() == Some("100k") {
        requests::loadgen_rounds(t0)
            .iter()
            .map(|raw| pb::WriteRequest::decode(&raw[..]).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?
    } else {
        (0..61)
            .map(|i| requests::request(2000, t0 + i * 15_000))
            .collect()
    };
    // A third argument: use only the first n requests (to subtract the
    // first round, which creates the series, from a whole run).
    let n = std::env::args()
        .nth(3)
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    let bodies: Vec<Vec<u8>> = requests
        .iter()
        .take(n)
        .map(|r| {
            if v2 {
                requests::to_v2(r).encode_to_vec()
            } else {
                r.encode_to_vec()
            }
        })
        .collect();
    let head = Db::new(HeadOptions::default());
    let opts = V2Options::default();
    let first_round = if bodies.len() > 61 { 50 } else { 1 };
    let mut timed = std::time::Duration::ZERO;
    for (k, body) in bodies.iter().enumerate() {
        let start = std::time::Instant::now();
        let report = if v2 {
            ingest::append_write_request_v2(&head, body, &opts, i64::MAX / 2)
                .map_err(|e| e.to_string())?
        } else {
            ingest::append_write_request(&head, body, &opts.limits, i64::MAX / 2)
                .map_err(|e| e.to_string())?
        };
        std::hint::black_box(report);
        if k >= first_round {
            timed += start.elapsed();
        }
    }
    let n = bodies.len().saturating_sub(first_round).max(1);
    eprintln!(
        "{} µs per request after the first round",
        timed.as_micros() / n as u128
    );
    Ok(())
}
