//! Builds the state, binds the listener and serves until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

pub mod http;

use crate::api::{self, AppState};
use crate::config::Config;
use crate::storage::checkpoint::{self, Schedule};
use crate::storage::head::Head;
use crate::storage::Clock;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The data directory could not be created.
    #[error("cannot create data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The write-ahead log could not be replayed or opened.
    #[error(transparent)]
    Wal(#[from] crate::wal::WalError),
    /// Serving failed.
    #[error("server error: {0}")]
    Serve(#[from] std::io::Error),
}

/// A bound, not yet serving, Sluice.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    state: AppState,
    data_dir: PathBuf,
    checkpoint_interval: Duration,
    retention_ms: i64,
    http: http::HttpLimits,
    forward: Vec<crate::forward::Destination>,
    forward_max_lag_bytes: u64,
    forward_shard_by_series: Option<usize>,
}

impl Server {
    /// Validates `config`, builds the head and binds the listen address.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        Self::bind_with_clock(config, Clock::system()).await
    }

    /// Like [`Server::bind`], reading time from `clock` (tests move it to
    /// exercise retention without waiting).
    pub async fn bind_with_clock(config: &Config, clock: Clock) -> Result<Self, ServerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir).map_err(|source| ServerError::DataDir {
            path: config.data_dir.clone(),
            source,
        })?;
        let head = match config.durability() {
            Some(d) => {
                let opts = config.head_options();
                tokio::task::spawn_blocking(move || Head::open(opts, &d))
                    .await
                    .map_err(|e| ServerError::Serve(std::io::Error::other(e)))??
            }
            None => Head::new(config.head_options()),
        };
        let head = Arc::new(head);
        let state = AppState::with_clock(config, head, clock);
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        Ok(Self {
            listener,
            state,
            data_dir: config.data_dir.clone(),
            checkpoint_interval: config.checkpoint_interval,
            retention_ms: i64::try_from(config.retention.as_millis()).unwrap_or(i64::MAX),
            http: config.http_limits(),
            forward: config.forward.clone(),
            forward_max_lag_bytes: config.forward_max_lag_bytes,
            forward_shard_by_series: config
                .forward_shard_by_series
                .then_some(config.forward_shard_by_series_replicas),
        })
    }

    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// The shared state, e.g. to inspect the head in tests.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then cancels running queries and
    /// lets in-flight requests finish, for up to `shutdown-timeout`.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let addr = self.local_addr()?;
        tracing::info!(%addr, "listening");
        let head = self.state.head_arc();
        let (stop_tx, stop_rx) = watch::channel(false);
        let background = tokio::spawn(maintain(
            Arc::clone(&head),
            Upkeep {
                dir: self.data_dir.clone(),
                checkpoint_interval: self.checkpoint_interval,
                retention_ms: self.retention_ms,
                clock: self.state.clock(),
            },
            stop_rx,
        ));
        let forwarders = match head.wal() {
            Some(wal) if !self.forward.is_empty() => {
                let destinations = self
                    .forward
                    .iter()
                    .map(|d| (d.clone(), self.state.forward_stats(&d.resolved_name())))
                    .collect();
                Some(crate::forward::Forwarders::start(crate::forward::Setup {
                    destinations,
                    wal_dir: self.data_dir.join("wal"),
                    data_dir: self.data_dir.clone(),
                    progress: wal.watch(),
                    max_lag_bytes: self.forward_max_lag_bytes,
                    shard_by_series: self.forward_shard_by_series,
                })?)
            }
            _ => None,
        };
        let state = self.state.clone();
        let shutdown = async move {
            shutdown.await;
            state.close_reads();
        };
        let limits = self.http;
        if !http::serve(self.listener, api::router(self.state), limits, shutdown).await {
            tracing::warn!(
                timeout = ?limits.shutdown_timeout,
                "requests still in flight at the shutdown timeout; stopping without them"
            );
        }
        // Requests are answered (or given up on: a write not yet in the WAL
        // was never acknowledged): stop background work, take a last
        // checkpoint so the next start is quick, and close the WAL.
        let _ = stop_tx.send(true);
        let _ = background.await;
        if let Some(f) = forwarders {
            tokio::task::spawn_blocking(move || f.stop())
                .await
                .map_err(std::io::Error::other)?;
        }
        let dir = self.data_dir;
        tokio::task::spawn_blocking(move || {
            if head.wal().is_some() {
                checkpoint_now(&head, &dir);
            }
            head.close_wal();
        })
        .await
        .map_err(std::io::Error::other)?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Runs Sluice with `config` until `shutdown` resolves.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    Server::bind(&config).await?.serve(shutdown).await
}

/// How often background work checks whether it is due.
const TICK: Duration = Duration::from_millis(100);

/// What background upkeep needs.
struct Upkeep {
    dir: PathBuf,
    checkpoint_interval: Duration,
    retention_ms: i64,
    clock: Clock,
}

/// How often the head checks whether it spans enough to cut a block.
const BLOCK_CHECK: Duration = Duration::from_secs(5);

/// Retention runs once its cutoff has moved this far since the last pass.
const RETENTION_STEP_MS: i64 = 60_000;

/// Background upkeep of the head until `stop` turns true: retention, and
/// checkpoints when a WAL is written.
async fn maintain(head: Arc<Head>, upkeep: Upkeep, mut stop: watch::Receiver<bool>) {
    let Upkeep {
        dir,
        checkpoint_interval,
        retention_ms,
        clock,
    } = upkeep;
    let wal_bytes = |h: &Head| h.wal().map_or(0, |w| w.stats().bytes);
    let mut schedule = Schedule::new(checkpoint_interval, wal_bytes(&head));
    let mut last_cutoff = i64::MIN;
    let mut next_block_check = Instant::now() + BLOCK_CHECK;
    loop {
        let cutoff = clock.now_ms().saturating_sub(retention_ms);
        if cutoff.saturating_sub(last_cutoff) >= RETENTION_STEP_MS {
            last_cutoff = cutoff;
            let h = Arc::clone(&head);
            if let Ok(r) = tokio::task::spawn_blocking(move || {
                let r = h.apply_retention(cutoff);
                if r.series + r.chunks > 0 {
                    crate::heap::release_free_memory();
                }
                r
            })
            .await
            {
                if r.series + r.chunks > 0 {
                    tracing::info!(
                        cutoff,
                        removed_series = r.series,
                        dropped_chunks = r.chunks,
                        "retention applied"
                    );
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(TICK) => {}
        }
        if head.wal().is_none() {
            continue;
        }
        let now = Instant::now();
        if now >= next_block_check {
            next_block_check = now + BLOCK_CHECK;
            let (h, d, now_ms) = (Arc::clone(&head), dir.clone(), clock.now_ms());
            let written = wal_bytes(&head);
            let stopping = stop.clone();
            let cut = tokio::task::spawn_blocking(move || {
                let now_ms = u64::try_from(now_ms).unwrap_or(0);
                let size = match h.cut_blocks(now_ms) {
                    // The head no longer holds what the blocks do: a
                    // checkpoint now lets the WAL segments before it go.
                    Ok(cut) if !cut.is_empty() => checkpoint_now(&h, &d),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::error!(error = %e, "block cut failed; the head keeps those samples and tries again");
                        None
                    }
                };
                // Compaction reads and writes blocks only: appends and
                // queries go on meanwhile. A shutdown stops it between
                // series and leaves the blocks as they were.
                let compacted = match h.compact_blocks(now_ms, &|| !*stopping.borrow()) {
                    Ok(done) => !done.is_empty(),
                    Err(e) => {
                        tracing::error!(error = %e, "compaction failed; its blocks stay as they are and are not compacted again until a restart");
                        true
                    }
                };
                // The head let go of a block's chunks, and the cut, the
                // checkpoint and the compaction freed what they built.
                if size.is_some() || compacted {
                    crate::heap::release_free_memory();
                }
                size
            })
            .await;
            if let Ok(Some(size)) = cut {
                schedule.done(now, written, size);
            }
        }
        if schedule.due(now, wal_bytes(&head)) {
            let (h, d) = (Arc::clone(&head), dir.clone());
            let written = wal_bytes(&head);
            if let Ok(Some(size)) = tokio::task::spawn_blocking(move || {
                let size = checkpoint_now(&h, &d);
                crate::heap::release_free_memory();
                size
            })
            .await
            {
                schedule.done(now, written, size);
            }
        }
    }
}

/// Writes a checkpoint, logging the outcome; returns its size.
fn checkpoint_now(head: &Head, dir: &Path) -> Option<u64> {
    let started = Instant::now();
    match checkpoint::write(head, dir) {
        Ok(r) => {
            head.note_checkpoint(started.elapsed(), r.bytes);
            tracing::info!(
                segment = r.segment,
                series = r.series,
                bytes = r.bytes,
                deleted_segments = r.deleted_segments,
                seconds = format_args!("{:.3}", started.elapsed().as_secs_f64()),
                "checkpoint written"
            );
            Some(r.bytes)
        }
        Err(e) => {
            head.note_checkpoint_failure();
            tracing::error!(error = %e, "checkpoint failed; the WAL keeps everything until the next one succeeds");
            None
        }
    }
}
