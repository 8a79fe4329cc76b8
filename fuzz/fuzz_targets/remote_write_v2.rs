//! The remote-write 2.0 path on arbitrary bytes, raw (a decompressed
//! `Request`) and as a snappy body: it never panics, reads what prost reads
//! whenever both accept the input, and accounts for every sample and
//! histogram it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sluice::ingest::{append_write_request_v2, remote_write::V2Options};
use sluice::proto::io::prometheus::write::v2 as pb;
use sluice::storage::{Db, DbOptions, HeadOptions};

const LIMIT: usize = 1 << 20;

fn ingest(body: &[u8]) {
    let head = Db::in_memory(DbOptions {
        head: HeadOptions { shards: 2, max_series: 64, ..HeadOptions::default() },
        max_metadata_families: 16,
        max_metadata_bytes: 1 << 16,
        ..DbOptions::default()
    });
    let Ok(report) = append_write_request_v2(&head, body, &V2Options::default(), 0)
    else {
        return;
    };
    if let Ok(req) = pb::Request::decode(body) {
        let total: u64 = req
            .timeseries
            .iter()
            .map(|ts| (ts.samples.len() + ts.histograms.len()) as u64)
            .sum();
        assert_eq!(report.accepted + report.rejected_total(), total);
        assert_eq!(report.accepted, head.head_stats().samples as u64);
    }
}

fuzz_target!(|data: &[u8]| {
    ingest(data);
    let Ok(len) = snap::raw::decompress_len(data) else {
        return;
    };
    if len > LIMIT {
        return;
    }
    let mut buf = vec![0u8; len];
    if let Ok(n) = snap::raw::Decoder::new().decompress(data, &mut buf) {
        ingest(&buf[..n]);
    }
});
