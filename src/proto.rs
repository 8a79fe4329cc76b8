//! Prost-generated types for the protos in `proto/`. The ingest hot path does
//! not use them (see [`crate::ingest`]); tests, benches and encoders do.
#![allow(missing_docs, clippy::all)]

/// Remote-write 1.0 messages (`package prometheus`).
pub mod prometheus {
    include!(concat!(env!("OUT_DIR"), "/prometheus.rs"));
}

/// Remote-write 2.0 messages (`package io.prometheus.write.v2`).
pub mod io {
    /// `io.prometheus`
    pub mod prometheus {
        /// `io.prometheus.write`
        pub mod write {
            /// `io.prometheus.write.v2`
            pub mod v2 {
                include!(concat!(env!("OUT_DIR"), "/io.prometheus.write.v2.rs"));
            }
        }
    }
}

/// `google.rpc.Status`, the body of OTLP/HTTP error replies.
pub mod google {
    /// `google.rpc`
    pub mod rpc {
        include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
    }
}

/// OTLP metrics messages, nested as their packages are
/// (`opentelemetry.proto.<area>.v1`), as prost's cross-references expect.
pub mod opentelemetry {
    /// `opentelemetry.proto`
    pub mod proto {
        /// `opentelemetry.proto.common`
        pub mod common {
            /// `opentelemetry.proto.common.v1`
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.common.v1.rs"
                ));
            }
        }
        /// `opentelemetry.proto.resource`
        pub mod resource {
            /// `opentelemetry.proto.resource.v1`
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.resource.v1.rs"
                ));
            }
        }
        /// `opentelemetry.proto.metrics`
        pub mod metrics {
            /// `opentelemetry.proto.metrics.v1`
            pub mod v1 {
                include!(concat!(
                    env!("OUT_DIR"),
                    "/opentelemetry.proto.metrics.v1.rs"
                ));
            }
        }
        /// `opentelemetry.proto.collector`
        pub mod collector {
            /// `opentelemetry.proto.collector.metrics`
            pub mod metrics {
                /// `opentelemetry.proto.collector.metrics.v1`
                pub mod v1 {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/opentelemetry.proto.collector.metrics.v1.rs"
                    ));
                }
            }
        }
    }
}
