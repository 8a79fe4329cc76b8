//! Leaf: the wire formats Sluice reads, with their field numbers named
//! once. Readers walk borrowed bytes and allocate nothing per field.
//! Nothing here knows about storage or ingest; `ingest`, `forward` and
//! `api` use it, and it uses only the leaves (`encoding`, `reuse`, the
//! `histogram` model, `proto` in tests).
//!
//! - [`wire`]: the protobuf wire reader (tags, varints, fixed scalars,
//!   length-delimited slices), every length checked.
//! - [`remote_write`]: remote-write 1.0 `WriteRequest` checked and read in
//!   place; [`remote_write::encode`], the byte-level writers of 1.0 and 2.0
//!   requests for encoders without a request model; [`remote_write::v2`],
//!   a 2.0 `Request` checked and read in place, series keyed by symbol.
//! - [`histogram`]: the remote-write `Histogram` message (1.0 and 2.0), to
//!   and from the histogram model.
//! - [`otlp`]: the OTLP metrics messages as tables of field numbers, JSON
//!   names and types, driving the structural check and the JSON transcoder.

pub mod histogram;
pub mod otlp;
pub mod remote_write;
pub mod wire;

/// Labels as `{name="value", …}` for error messages, cut short after
/// about 256 bytes so a reply stays small whatever was sent.
pub(crate) fn describe_labels<'a>(labels: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> String {
    const MAX: usize = 256;
    let mut s = String::from("{");
    for (i, (n, v)) in labels.enumerate() {
        if s.len() > MAX {
            s.push_str(", …");
            break;
        }
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&String::from_utf8_lossy(&n[..n.len().min(MAX)]));
        s.push('=');
        s.push_str(&format!(
            "{:?}",
            String::from_utf8_lossy(&v[..v.len().min(MAX)])
        ));
    }
    s.push('}');
    s
}
