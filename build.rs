//! Compiles `proto/` with protox (a pure-Rust protobuf compiler), so building
//! Sluice never needs `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/prometheus/remote.proto",
        "proto/io/prometheus/write/v2/types.proto",
        "proto/opentelemetry/proto/collector/metrics/v1/metrics_service.proto",
        "proto/google/rpc/status.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
