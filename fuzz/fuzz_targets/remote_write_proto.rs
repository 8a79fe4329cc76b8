//! The remote-write decoder on arbitrary (decompressed) bytes: it never
//! panics, agrees with prost whenever both accept the input, and the ingest
//! path accounts for every sample it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sluice::ingest::{append_write_request, remote_write, validate::LabelLimits};
use sluice::proto::prometheus as pb;
use sluice::storage::{Db, HeadOptions};

fuzz_target!(|data: &[u8]| {
    let Ok(series) = remote_write::decode(data) else {
        return;
    };
    let views: Vec<_> = series.collect();
    let total: u64 = views.iter().map(|s| u64::from(s.samples) + u64::from(s.histograms)).sum();
    for v in &views {
        assert_eq!(v.samples().count(), v.samples as usize);
        let _ = v.labels().count();
    }
    if let Ok(req) = pb::WriteRequest::decode(data) {
        assert_eq!(req.timeseries.len(), views.len());
        for (ts, v) in req.timeseries.iter().zip(&views) {
            let ours: Vec<(i64, u64)> = v.samples().map(|(t, x)| (t, x.to_bits())).collect();
            let theirs: Vec<(i64, u64)> = ts.samples.iter().map(|s| (s.timestamp, s.value.to_bits())).collect();
            assert_eq!(ours, theirs);
        }
    }
    let head = Db::new(HeadOptions { shards: 2, max_series: 64, ..HeadOptions::default() });
    let report = append_write_request(&head, data, &LabelLimits::default(), 0).expect("checked above");
    assert_eq!(report.accepted + report.rejected_total(), total);
});
