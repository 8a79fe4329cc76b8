//! Loads the XOR reference samples in `tests/testdata/xor` (format in its README).

use std::path::PathBuf;

/// The three cases of Prometheus' XOR chunk benchmark.
pub const CASES: [&str; 3] = ["constant", "random_steps", "random_0-1"];

/// Path of a file in the XOR test data folder.
pub fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/xor")
        .join(name)
}

/// Every series of a case: (timestamp ms, value) samples.
pub fn load(case: &str) -> Vec<Vec<(i64, f64)>> {
    let bytes = std::fs::read(path(&format!("{case}.bin"))).expect("test data present");
    let mut pos = 0;
    let u32_at = |pos: &mut usize| {
        let v = u32::from_le_bytes(bytes[*pos..*pos + 4].try_into().expect("4 bytes"));
        *pos += 4;
        v
    };
    let n = u32_at(&mut pos);
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let k = u32_at(&mut pos);
        let mut s = Vec::with_capacity(k as usize);
        for _ in 0..k {
            let t = i64::from_le_bytes(bytes[pos..pos + 8].try_into().expect("8 bytes"));
            let v = u64::from_le_bytes(bytes[pos + 8..pos + 16].try_into().expect("8 bytes"));
            pos += 16;
            s.push((t, f64::from_bits(v)));
        }
        out.push(s);
    }
    assert_eq!(pos, bytes.len(), "{case}.bin fully read");
    out
}
