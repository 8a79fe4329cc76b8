//! A block's tombstones file as a bad disk or a hostile copy may leave it:
//! never a panic; what decodes encodes to a file that decodes the same,
//! its intervals sorted and apart.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::block::tombstones::Tombstones;

fuzz_target!(|data: &[u8]| {
    if let Ok(t) = Tombstones::decode(data) {
        for (_, intervals) in t.iter() {
            let v: Vec<(i64, i64)> = intervals.iter().collect();
            assert!(v.iter().all(|&(a, b)| a <= b));
            assert!(v.windows(2).all(|w| w[0].1 < w[1].0.saturating_sub(1)));
        }
        assert_eq!(Tombstones::decode(&t.encode()), Ok(t));
    }
});
