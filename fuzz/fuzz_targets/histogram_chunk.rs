//! Histogram chunk bytes (integer and float encodings) as a damaged
//! checkpoint, WAL or block could hand them to a query: iterating never
//! panics, returns at most the samples the header claims, says why when it
//! returns fewer, and allocates no more buckets than the layout bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::chunk::{FloatHistogramIter, HistogramIter};

fuzz_target!(|data: &[u8]| {
    let claimed = match data {
        [a, b, _, ..] => usize::from(u16::from_be_bytes([*a, *b])),
        _ => 0,
    };
    let mut it = HistogramIter::new(data);
    let n = it.by_ref().count();
    assert!(n <= claimed);
    assert_eq!(n < claimed || data.len() < 3, it.err().is_some());
    let mut it = FloatHistogramIter::new(data);
    let n = it.by_ref().count();
    assert!(n <= claimed);
    assert_eq!(n < claimed || data.len() < 3, it.err().is_some());
});
