//! A whole remote-write body as the receiver gets it: snappy block data
//! with a decompressed-size limit read from its header, then the decoder.
//! Never panics; never allocates more than the limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::ingest::{append_write_request, validate::LabelLimits};
use sluice::storage::{Db, HeadOptions};

const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(len) = snap::raw::decompress_len(data) else {
        return;
    };
    if len > LIMIT {
        return;
    }
    let mut buf = vec![0u8; len];
    let Ok(n) = snap::raw::Decoder::new().decompress(data, &mut buf) else {
        return;
    };
    let head = Db::new(HeadOptions { shards: 2, max_series: 64, ..HeadOptions::default() });
    let _ = append_write_request(&head, &buf[..n], &LabelLimits::default(), 0);
});
