//! Chunk bytes as a damaged checkpoint or WAL could hand them to a query:
//! iterating them never panics, returns at most the samples the header
//! claims, and says why when it returns fewer; reading them at once (the
//! bulk read queries use, with its loop for samples at a regular
//! interval) gives the same samples, bit for bit, and stops for the same
//! reason.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::chunk::XorIter;

fuzz_target!(|data: &[u8]| {
    let mut it = XorIter::new(data);
    let one: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
    let n = one.len();
    let claimed = match data {
        [a, b, ..] => usize::from(u16::from_be_bytes([*a, *b])),
        _ => 0,
    };
    assert!(n <= claimed);
    assert_eq!(n < claimed || data.len() < 2, it.err().is_some());

    // The bulk read after 0, 1 or 2 samples read one by one (it starts
    // its loop from the third).
    for first in 0..3 {
        let mut bulk = XorIter::new(data);
        let mut out: Vec<(i64, f64)> = bulk.by_ref().take(first).collect();
        bulk.append_to(&mut out);
        let at_once: Vec<(i64, u64)> = out.iter().map(|&(t, v)| (t, v.to_bits())).collect();
        assert_eq!(at_once, one);
        assert_eq!(bulk.err(), it.err());
    }
});
