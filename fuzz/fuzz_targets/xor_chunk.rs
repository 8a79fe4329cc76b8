//! Chunk bytes as a damaged checkpoint or WAL could hand them to a query:
//! iterating them never panics, returns at most the samples the header
//! claims, and says why when it returns fewer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::chunk::XorIter;

fuzz_target!(|data: &[u8]| {
    let mut it = XorIter::new(data);
    let n = it.by_ref().count();
    let claimed = match data {
        [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])),
        _ => 0,
    };
    assert!(n <= claimed);
    assert_eq!(n < claimed || data.len() < 2, it.err().is_some());
});
