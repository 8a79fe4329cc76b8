//! Prost-generated types for the protos in `proto/`. The ingest hot path does
//! not use them (see [`crate::ingest`]); tests, benches and encoders do.
#![allow(missing_docs, clippy::all)]

/// Remote-write 1.0 messages (`package prometheus`).
pub mod prometheus {
    include!(concat!(env!("OUT_DIR"), "/prometheus.rs"));
}
