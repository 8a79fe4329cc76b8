//! WAL segment and checkpoint bytes as a crash or a bad disk may leave
//! them: frames are decoded one after another until the first bad one.
//! Never panics; every frame it accepts re-encodes to a frame that decodes
//! the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::storage::checkpoint::{parse, parse_refs, ChunkFiles};
use sluice::wal::record::{
    decode, encode_checkpoint, encode_checkpoint_refs, encode_exemplars, encode_flushed, encode_histograms_frame, encode_samples,
    encode_series, encode_starts_frame, encode_tombstones, histograms, Record,
};

/// A histograms record's entries, re-encoded: equal bytes, equal entries
/// (floats bit for bit).
fn histogram_bytes(h: &sluice::wal::record::Histograms<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    for (r, t, x) in h.clone() {
        histograms::put_entry(&mut out, r, t, &x);
    }
    out
}

fn samples(rec: &Record<'_>) -> Vec<(u64, i64, u64)> {
    match rec {
        Record::Samples(s) => s.clone().map(|(r, t, v)| (r, t, v.to_bits())).collect(),
        Record::Series { .. }
        | Record::Checkpoint(_)
        | Record::CheckpointRefs(_)
        | Record::Exemplars(_)
        | Record::Histograms(_)
        | Record::Flushed { .. }
        | Record::Starts(_)
        | Record::Tombstones(_) => Vec::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    // A checkpoint record's payload behind a valid CRC is rare in fuzzed
    // input, so its parser also gets the raw bytes.
    if let Some(image) = parse(data) {
        assert!(image.labels.len() <= data.len());
    }
    let mut pos = 0;
    while let Ok((rec, len)) = decode(&data[pos..]) {
        let mut again = Vec::new();
        match &rec {
            Record::Series { series_ref, labels } => encode_series(&mut again, *series_ref, labels),
            Record::Samples(s) => {
                let all: Vec<_> = s.clone().collect();
                encode_samples(&mut again, &all);
            }
            Record::Checkpoint(payload) => {
                // The checkpoint layout parser must not panic either.
                let _ = parse(payload);
                encode_checkpoint(&mut again, |out| out.extend_from_slice(payload));
            }
            Record::CheckpointRefs(payload) => {
                // With no chunk file, only inline chunks parse.
                let _ = parse_refs(payload, &ChunkFiles::default());
                encode_checkpoint_refs(&mut again, |out| out.extend_from_slice(payload));
            }
            Record::Exemplars(e) => encode_exemplars(&mut again, e.clone()),
            Record::Histograms(h) => encode_histograms_frame(&mut again, &histogram_bytes(h)),
            Record::Flushed { below, blocks } => {
                let names: Vec<u128> = blocks
                    .chunks_exact(16)
                    .map(|b| u128::from_be_bytes(b.try_into().expect("16 bytes")))
                    .collect();
                encode_flushed(&mut again, *below, &names);
            }
            Record::Starts(entries) => {
                // The store's reading of the entries must not panic, and
                // what it reads re-encodes to a prefix of what was there.
                let mut back = Vec::new();
                for (r, run) in sluice::storage::starts::entries(entries) {
                    sluice::storage::starts::put_entry(&mut back, r, &run);
                }
                assert!(entries.len() >= back.len());
                encode_starts_frame(&mut again, entries);
            }
            // Decoded whole when the frame was read: every range comes.
            Record::Tombstones(t) => encode_tombstones(&mut again, t.clone()),
        }
        if !again.is_empty() {
            let (back, n) = decode(&again).expect("our own frame decodes");
            assert_eq!(n, again.len());
            match (&rec, &back) {
                (Record::Series { .. }, Record::Series { .. })
                | (Record::Checkpoint(_), Record::Checkpoint(_))
                | (Record::CheckpointRefs(_), Record::CheckpointRefs(_))
                | (Record::Flushed { .. }, Record::Flushed { .. })
                | (Record::Starts(_), Record::Starts(_)) => assert_eq!(rec, back),
                (Record::Exemplars(a), Record::Exemplars(b)) => {
                    let bits = |e: &sluice::wal::record::Exemplars<'_>| -> Vec<_> {
                        e.clone().map(|(s, l, t, v)| (s.to_vec(), l.to_vec(), t, v.to_bits())).collect()
                    };
                    assert_eq!(bits(a), bits(b));
                }
                (Record::Samples(_), Record::Samples(_)) => assert_eq!(samples(&rec), samples(&back)),
                (Record::Tombstones(a), Record::Tombstones(b)) => {
                    assert_eq!(a.clone().collect::<Vec<_>>(), b.clone().collect::<Vec<_>>())
                }
                (Record::Histograms(a), Record::Histograms(b)) => {
                    assert_eq!(histogram_bytes(a), histogram_bytes(b))
                }
                _ => panic!("record kind changed"),
            }
        }
        pos += len;
    }
});
