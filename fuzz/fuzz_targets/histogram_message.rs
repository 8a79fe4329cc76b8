//! A remote-write `Histogram` message as a sender could send it: decoding
//! never panics; one that passes validation encodes back to a message that
//! decodes to the same histogram; and PromQL's arithmetic on it (adding it
//! to itself, subtracting, reset detection, bucket bounds, printing) never
//! panics and keeps counts consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::protocol::histogram::{decode, encode};

fuzz_target!(|data: &[u8]| {
    let Ok(wire) = decode(data) else {
        return;
    };
    if wire.validate().is_err() {
        return;
    }
    let (t, h) = wire.into_sample();
    let mut again = Vec::new();
    encode(t, &h, &mut again);
    let back = decode(&again).expect("re-encoded histogram decodes");
    let (t2, h2) = back.into_sample();
    assert_eq!(t, t2);
    assert!(h.same(&h2), "{h:?} became {h2:?}");

    let f = h.to_float();
    let mut twice = f.clone();
    twice.add(&f).expect("a histogram adds to itself");
    if f.count.is_finite() && f.count < 1e15 {
        assert_eq!(twice.count, 2.0 * f.count);
    }
    let _ = twice.detect_reset(&f);
    let mut none = twice.clone();
    none.sub(&twice).expect("a histogram subtracts from itself");
    none.compact();
    let _ = f.all_buckets();
    let _ = f.to_string();
    let coarser = f.to_schema(f.schema - 1);
    let _ = coarser.detect_reset(&f);
});
