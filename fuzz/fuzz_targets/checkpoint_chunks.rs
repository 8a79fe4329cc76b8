//! A checkpoint's chunk file and a checkpoint record that refers into it,
//! as a crash or a bad disk may leave them. The input's first byte splits
//! it into the chunk file and the record's payload. Never panics; a chunk
//! it reads back lies inside the file and matches its CRC.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::encoding::uvarint;
use sluice::storage::checkpoint::{parse_refs, ChunkFiles};

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let at = (cut as usize * rest.len()) / 256;
    let (file, payload) = rest.split_at(at);
    // The file as number 0 and as number 1, with and without the header.
    let mut headed = b"SLCH\x01\0\0\0".to_vec();
    headed.extend_from_slice(file);
    let files = ChunkFiles::from_files([(0, file.to_vec()), (1, headed.clone())]);
    if let Some(image) = parse_refs(payload, &files) {
        assert!(image.labels.len() <= payload.len());
        for (_, _, bytes, _) in &image.sealed {
            assert!(bytes.len() <= payload.len().max(headed.len()));
        }
    }
    // Every offset of the headed file as a chunk's location.
    for offset in 0..headed.len().min(4096) as u64 {
        if let Some(chunk) = files.chunk(1 << 40 | offset) {
            // The record there: its length, the chunk, its CRC.
            let (len, n) = uvarint(&headed[offset as usize..]).expect("a length");
            assert_eq!(len, chunk.len() as u64);
            let start = offset as usize + n;
            assert_eq!(&headed[start..start + chunk.len()], chunk);
            assert_eq!(
                crc32c::crc32c(chunk).to_le_bytes()[..],
                headed[start + chunk.len()..][..4],
                "a chunk read back passes its CRC"
            );
        }
    }
});
