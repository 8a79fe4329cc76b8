//! An OTLP `ExportMetricsServiceRequest` as the receiver gets it after
//! decompression: the structural check, then the walk that appends. Never
//! panics, and never reports more rejected points than it saw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::ingest::otlp::{append_export_request, Otlp, OtlpOptions};
use sluice::ingest::validate::LabelLimits;
use sluice::storage::head::{Head, HeadOptions};
use sluice::storage::metadata::MetadataStore;

fuzz_target!(|data: &[u8]| {
    let head = Head::new(HeadOptions { shards: 2, max_series: 256, ..HeadOptions::default() });
    let metadata = MetadataStore::new(16, 64 << 20);
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
    if let Ok(report) = append_export_request(&head, &metadata, &otlp, &limits, data, 1 << 40) {
        assert!(report.rejected_points_total() <= report.points);
    }
});
