//! An OTLP JSON body: transcoded to protobuf, which must then pass the same
//! structural check (the transcoder only writes what the schema allows),
//! then appended. Never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::ingest::otlp::{append_export_request, json, schema, Otlp, OtlpOptions};
use sluice::ingest::validate::LabelLimits;
use sluice::storage::{Db, DbOptions, HeadOptions};

fuzz_target!(|data: &[u8]| {
    let mut pb = Vec::new();
    if json::to_protobuf(data, &mut pb).is_err() {
        return;
    }
    // Anything the transcoder writes is well-formed, except nesting deeper
    // than the check allows (JSON may nest array values further).
    if let Err(e) = schema::check(&pb, &schema::REQUEST) {
        assert_eq!(e.what, "messages nested too deeply", "{e}");
        return;
    }
    let head = Db::in_memory(DbOptions {
        head: HeadOptions { shards: 2, max_series: 256, ..HeadOptions::default() },
        max_metadata_families: 16,
        max_metadata_bytes: 64 << 20,
        ..DbOptions::default()
    });
    let otlp = Otlp::new(OtlpOptions::default(), 64);
    let report = append_export_request(&head, &otlp, &LabelLimits::default(), &pb, 1 << 40)
        .expect("a checked body walks");
    assert!(report.rejected_points_total() <= report.points);
});
