//! An OTLP `ExportMetricsServiceRequest` as the receiver gets it after
//! decompression: the structural check, then the walk that appends. Never
//! panics, and never reports more rejected points than it saw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::ingest::otlp::{append_export_request, Otlp, OtlpOptions};
use sluice::ingest::validate::LabelLimits;
use sluice::storage::{Db, DbOptions, HeadOptions};

fuzz_target!(|data: &[u8]| {
    let head = Db::in_memory(DbOptions {
        head: HeadOptions { shards: 2, max_series: 256, ..HeadOptions::default() },
        max_metadata_families: 16,
        max_metadata_bytes: 64 << 20,
        ..DbOptions::default()
    });
    // The first byte picks the options, so both delta paths are explored.
    let delta = data.first().is_some_and(|b| b & 1 == 1);
    let otlp = Otlp::new(
        OtlpOptions {
            delta_to_cumulative: delta,
            promote_resource_attributes: vec!["a".into(), "host.name".into()],
            ..OtlpOptions::default()
        },
        64,
    );
    let limits = LabelLimits { max_labels: 16, max_name_len: 64, max_value_len: 256, ..LabelLimits::default() };
    if let Ok(report) = append_export_request(&head, &otlp, &limits, data, 1 << 40) {
        assert!(report.rejected_points_total() <= report.points);
    }
});
