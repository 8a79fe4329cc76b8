//! Sluice's chunks are byte-identical to those Prometheus' own Go encoder
//! made for the same samples (`tests/testdata/xor/README.md`).

#[path = "common/xor_data.rs"]
mod xor_data;

use sha2::{Digest, Sha256};
use sluice::storage::chunk::{XorAppender, XorIter};

/// (case, total bytes of the 1000 chunks, SHA-256 over len-prefixed chunks)
const EXPECTED: [(&str, usize, &str); 3] = [
    (
        "constant",
        47_000,
        "12f35a5e2f0abff3465f4dc8858bb3339ce541eb2ceae1e00b9b6cd10f9332ae",
    ),
    (
        "random_steps",
        426_957,
        "752bdccb2b6fd68e4c89e8e53161dca007ceb3bd40b9c998d98317d7b9971936",
    ),
    (
        "random_0-1",
        844_702,
        "81b31b35ca09d80a7e654992d3e0b9e02ad427a0de8ecebbb665d4e6cf7e82cc",
    ),
];

fn encode(samples: &[(i64, f64)]) -> Vec<u8> {
    let mut a = XorAppender::default();
    for &(t, v) in samples {
        a.append(t, v);
    }
    a.bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn chunks_match_prometheus_byte_for_byte() {
    for (case, total, sha) in EXPECTED {
        let series = xor_data::load(case);
        assert_eq!(series.len(), 1000);
        let mut hasher = Sha256::new();
        let mut bytes = 0;
        for (i, s) in series.iter().enumerate() {
            let chunk = encode(s);
            if i == 0 {
                let want = std::fs::read_to_string(xor_data::path(&format!("{case}.chunk0.hex")))
                    .expect("hex file");
                assert_eq!(hex(&chunk), want.trim(), "{case}: chunk 0");
            }
            hasher.update((chunk.len() as u32).to_le_bytes());
            hasher.update(&chunk);
            bytes += chunk.len();
        }
        assert_eq!(bytes, total, "{case}: total bytes");
        assert_eq!(hex(&hasher.finalize()), sha, "{case}: SHA-256");
    }
}

#[test]
fn reference_chunks_iterate_back_to_their_samples() {
    for case in xor_data::CASES {
        for s in xor_data::load(case).iter().take(100) {
            let chunk = encode(s);
            let mut it = XorIter::new(&chunk);
            let got: Vec<(i64, u64)> = it.by_ref().map(|(t, v)| (t, v.to_bits())).collect();
            assert_eq!(it.err(), None);
            let want: Vec<(i64, u64)> = s.iter().map(|&(t, v)| (t, v.to_bits())).collect();
            assert_eq!(got, want, "{case}");
        }
    }
}
