//! The `sluice` binary: parse flags and the optional config file, set up
//! logging, and run the server until SIGINT or SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use sluice::config::{Config, Flags};

/// Sluice: a Prometheus remote-write receiver with an XOR-compressed,
/// in-memory hot tier. Point Prometheus' `remote_write` at
/// http://<listen>/api/v1/write.
///
/// Flags override the config file; both override the built-in defaults.
#[derive(Debug, Parser)]
#[command(name = "sluice", version)]
struct Cli {
    /// Optional YAML (.yaml/.yml) or TOML (.toml) file with the same keys as
    /// these flags, e.g. `max-series: 100000`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    flags: Flags,
}

impl Cli {
    fn into_config(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        self.flags.apply(&mut c);
        c.validate()?;
        Ok(c)
    }
}

/// Installs the SIGINT and SIGTERM handlers now and returns a future that
/// resolves on the first of them. The handlers must exist before the server
/// says it is listening: a supervisor (or a test) may send SIGTERM as soon as
/// it sees that line, and a signal without a handler kills the process.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down: finishing in-flight requests");
    })
}

fn main() -> anyhow::Result<()> {
    // Before any other thread exists: the allocator's settings are not
    // changed safely while others allocate.
    let kept = sluice::heap::keep_freed_memory_for_reuse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(run(kept))
}

async fn run(kept: bool) -> anyhow::Result<()> {
    let config = Cli::parse().into_config()?;
    sluice::telemetry::init_tracing(&config.log_level).map_err(anyhow::Error::msg)?;
    if !kept {
        tracing::warn!("the allocator keeps its default trim settings (not glibc, or not set before threads started)");
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        ?config,
        "starting sluice"
    );
    // The server's own threads only: a test or tool that runs queries in
    // its process keeps them in the normal class.
    sluice::parallel::set_idle_class(
        config.query_thread_priority == sluice::config::QueryThreadPriority::Idle,
    );
    // For the crash tests only: the step of a block cut or compaction at
    // which to kill the process.
    if let Ok(point) = std::env::var("SLUICE_TEST_KILL_AT") {
        if !sluice::crash::arm(&point) {
            anyhow::bail!(
                "SLUICE_TEST_KILL_AT={point:?} is not one of {:?}",
                sluice::crash::POINTS
            );
        }
        tracing::warn!(point, "crash point armed: this process kills itself there");
    }
    let stop = shutdown_signal()?;
    // SIGHUP reloads the web configuration file, as it reloads
    // Prometheus' configuration; without a handler it would kill us, so
    // the handler is in place before a long WAL replay.
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let server = sluice::server::Server::bind(&config)
        .await
        .context("sluice could not start")?;
    let hangup = server.hangup();
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading");
            hangup.notify();
        }
    });
    server
        .serve(stop)
        .await
        .context("sluice stopped with an error")
}
