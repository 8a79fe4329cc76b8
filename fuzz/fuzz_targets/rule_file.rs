//! A rule file as anyone may write one: read and checked, never a panic;
//! a file that is accepted names every group's key and every rule's
//! printed query, and reading the same text again gives the same groups.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::promql::guard::ParseLimits;
use sluice::rules::file::parse;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let limits = ParseLimits::default();
    let first = parse(text, "fuzz.yml", &limits);
    let again = parse(text, "fuzz.yml", &limits);
    assert_eq!(first, again);
    if let Ok(groups) = first {
        for g in &groups {
            assert!(g.key().starts_with("fuzz.yml;"));
            for r in &g.rules {
                assert!(!r.query.is_empty());
            }
        }
    }
});
