//! The query API's time and duration parameters (`time`, `start`, `end`,
//! `step`, `timeout`, `lookback_delta`): any text parses to a value in
//! range or to an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::api::params::{parse_duration, parse_time, MAX_DURATION_MS};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(ms) = parse_duration(s) {
        assert!(ms.abs() <= MAX_DURATION_MS, "{s:?} -> {ms}");
    }
    let _ = parse_time(s);
});
