//! A block's index and a chunk segment as a damaged disk could hand them
//! over: reading never panics; whatever opens can be walked (every
//! postings list, every series they name, every chunk a series points
//! at) to an answer or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::block::{ChunkReader, IndexReader};

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = IndexReader::from_bytes(data.to_vec()) {
        let pairs: Vec<(String, String)> = index
            .label_pairs()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .take(64)
            .collect();
        let chunks = ChunkReader::from_segments(vec![data.to_vec()]).ok();
        for (n, v) in pairs {
            if let Ok(ids) = index.postings(&n, &v) {
                for id in ids.into_iter().take(64) {
                    if let (Ok((_, metas)), Some(c)) = (index.series(id), chunks.as_ref()) {
                        for m in metas.into_iter().take(16) {
                            let _ = c.chunk(m.chunk_ref);
                        }
                    }
                }
            }
        }
    }
    if let Ok(c) = ChunkReader::from_segments(vec![data.to_vec()]) {
        for at in [8u64, 9, 16, data.len() as u64, 1 << 32] {
            let _ = c.chunk(at);
        }
    }
});
