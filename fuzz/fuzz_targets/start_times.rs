//! A block's start-times file and a WAL record's start-time runs as a bad
//! disk may leave them: never a panic; what decodes encodes back to the
//! same runs, in time order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::starts::{decode_block_file, decode_runs, encode_block_file, encode_runs};

fuzz_target!(|data: &[u8]| {
    if let Some((runs, n)) = decode_runs(data) {
        assert!(n <= data.len());
        assert!(runs.windows(2).all(|w| w[0].from < w[1].from));
        let mut again = Vec::new();
        encode_runs(&runs, &mut again);
        assert_eq!(decode_runs(&again).map(|(r, _)| r), Some(runs));
    }
    if let Ok(file) = decode_block_file(data) {
        let mut series: Vec<_> = file.into_iter().collect();
        series.sort_by_key(|(id, _)| *id);
        let again = encode_block_file(&series);
        let mut back: Vec<_> = decode_block_file(&again)
            .expect("our own file decodes")
            .into_iter()
            .collect();
        back.sort_by_key(|(id, _)| *id);
        assert_eq!(back, series);
    }
});
