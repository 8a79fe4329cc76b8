//! A real block on disk, damaged by the input (a list of byte edits to its
//! index or its chunk segment), opened the way Sluice opens blocks (files
//! read with positioned reads), walked (each series' chunks read one by
//! one and as one run, with the same outcome), and compacted: never a panic; a
//! damaged block gives errors, and a compaction of it either fails or
//! writes a block that reads back.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use sluice::storage::block::compact::{compact, Parent};
use sluice::storage::block::{
    read_meta, write_block, BlockChunk, BlockSeries, ChunkReader, Encoding, IndexReader,
};
use sluice::storage::chunk::XorAppender;

/// The pristine block's files: (index, chunk segment, meta.json).
fn pristine() -> &'static (Vec<u8>, Vec<u8>, Vec<u8>) {
    static FILES: OnceLock<(Vec<u8>, Vec<u8>, Vec<u8>)> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let series = (0..8)
            .map(|i| {
                let mut app = XorAppender::with_capacity(64);
                for k in 0..30i64 {
                    app.append(k * 15_000, (i * 10 + k) as f64);
                }
                BlockSeries {
                    starts: Vec::new(),
                    labels: vec![("__name__".into(), "m".into()), ("i".into(), i.to_string())],
                    chunks: vec![BlockChunk {
                        mint: 0,
                        maxt: 29 * 15_000,
                        encoding: Encoding::Xor,
                        data: Arc::from(app.bytes()),
                    }],
                }
            })
            .collect();
        let meta = write_block(dir.path(), series, 0, 7_200_000, 1).expect("block");
        let b = dir.path().join(meta.ulid.to_string());
        (
            std::fs::read(b.join("index")).expect("index"),
            std::fs::read(b.join("chunks/000001")).expect("chunks"),
            std::fs::read(b.join("meta.json")).expect("meta"),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let (index, chunks, meta) = pristine();
    let (mut index, mut chunks) = (index.clone(), chunks.clone());
    // Each edit: which file, where (16 bits), and the bits to flip.
    for e in data.chunks_exact(4) {
        let file = if e[0] & 1 == 0 {
            &mut index
        } else {
            &mut chunks
        };
        if file.is_empty() {
            continue;
        }
        let at = usize::from(u16::from_le_bytes([e[1], e[2]])) % file.len();
        file[at] ^= e[3];
    }
    if data.len() % 4 == 1 {
        index.truncate(usize::from(data[0]) * 8);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let name = std::str::from_utf8(meta)
        .ok()
        .and_then(|m| m.split("\"ulid\": \"").nth(1))
        .and_then(|r| r.split('"').next())
        .expect("ulid")
        .to_owned();
    let block = dir.path().join(&name);
    std::fs::create_dir_all(block.join("chunks")).expect("mkdir");
    std::fs::write(block.join("index"), &index).expect("write");
    std::fs::write(block.join("chunks/000001"), &chunks).expect("write");
    std::fs::write(block.join("meta.json"), meta).expect("write");

    let (Ok(meta), Ok(index), Ok(chunks)) = (
        read_meta(&block),
        IndexReader::open(&block.join("index")),
        ChunkReader::open(&block.join("chunks")),
    ) else {
        return;
    };
    if let Ok(ids) = index.postings("", "") {
        for id in ids.into_iter().take(64) {
            if let Ok((_, metas)) = index.series(id) {
                let refs: Vec<u64> = metas.iter().take(16).map(|m| m.chunk_ref).collect();
                let one_by_one: Vec<_> = refs.iter().map(|&r| chunks.chunk(r)).collect();
                // A series' chunks read where they lie: the same chunks,
                // or an error where reading them one by one meets one.
                let mut got = Vec::new();
                let runs = chunks.chunks(&refs, |_, enc, data| {
                    got.push((enc, data.bytes().to_vec()));
                    Ok(())
                });
                match one_by_one.into_iter().collect::<Result<Vec<_>, _>>() {
                    Ok(want) => {
                        assert!(runs.is_ok());
                        let want: Vec<_> = want.into_iter().map(|(e, d)| (e, d.to_vec())).collect();
                        assert_eq!(got, want);
                    }
                    Err(_) => assert!(runs.is_err()),
                }
            }
        }
    }
    let out = tempfile::tempdir().expect("tempdir");
    let no_starts = std::collections::HashMap::new();
    let parent = Parent {
        meta: &meta,
        index: &index,
        chunks: &chunks,
        starts: &no_starts,
        deleted: Default::default(),
        trim: |c, _| Ok(vec![c]),
    };
    if let Ok(Some(m)) = compact(out.path(), &[parent], 2, &|| true, &|_| {}) {
        let written = out.path().join(m.ulid.to_string());
        assert!(IndexReader::open(&written.join("index")).is_ok());
        assert!(read_meta(&written).is_ok());
    }
});
