//! A driver for instruction counts of the OTLP ingest path: 61 requests of
//! the `otlp_decode` bench's shape (every point type, 15 s apart) into one
//! database. Run it under callgrind, collecting only the ingest call:
//!
//! ```text
//! cargo build --release --example otlp_profile
//! valgrind --tool=callgrind \
//!   --toggle-collect='sluice::ingest::otlp::append_export_request' \
//!   target/release/examples/otlp_profile
//! ```

#[path = "../tests/common/otlp_requests.rs"]
mod otlp_requests;

use prost::Message;
use sluice::ingest::otlp::{append_export_request, Otlp, OtlpOptions};
use sluice::ingest::validate::LabelLimits;
use sluice::storage::{Db, HeadOptions};

fn main() -> Result<(), String> {
    let t0 = 1_700_000_000_000i64;
    let bodies: Vec<Vec<u8>> = (0..61)
        .map(|i| otlp_requests::request(t0 + i * 15_000).encode_to_vec())
        .collect();
    let db = Db::new(HeadOptions::default());
    let otlp = Otlp::new(OtlpOptions::default(), 1 << 20);
    let limits = LabelLimits::default();
    let mut stored = 0;
    for body in &bodies {
        let report = append_export_request(&db, &otlp, &limits, body, i64::MAX / 2)
            .map_err(|e| e.to_string())?;
        stored += report.samples.accepted;
    }
    eprintln!("otlp_profile: {stored} samples stored");
    Ok(())
}
