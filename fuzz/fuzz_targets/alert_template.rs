//! An alert template as anyone may write one in a rule file: checked and
//! expanded (with a query that answers two series), never a panic; what
//! it writes stays bounded however it loops, and expanding twice gives
//! the same.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use sluice::rules::template::{check, expand, Data};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = check(text);
    let labels = BTreeMap::from([("job".to_owned(), "api".to_owned())]);
    let external = BTreeMap::from([("dc".to_owned(), "eu".to_owned())]);
    let query = |q: &str| -> Result<Vec<(BTreeMap<String, String>, f64)>, String> {
        if q.is_empty() {
            return Err("empty".into());
        }
        Ok(vec![
            (BTreeMap::from([("i".to_owned(), "b".to_owned())]), 2.0),
            (BTreeMap::from([("i".to_owned(), "a".to_owned())]), f64::NAN),
        ])
    };
    let d = Data {
        labels: &labels,
        value: 1.5,
        external_labels: &external,
        external_url: "http://sluice:9201",
        query: Some(&query),
    };
    let first = expand(text, &d);
    if let Ok(out) = &first {
        // Each piece is checked before it is written, and none is
        // larger than the cap or than the text itself.
        assert!(out.len() <= 2 * (1 << 20) + text.len());
    }
    assert_eq!(first, expand(text, &d));
});
