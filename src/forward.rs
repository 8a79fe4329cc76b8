//! Forwarding: every sample the WAL holds, handed on to remote-write
//! receivers (Mimir, VictoriaMetrics, Thanos Receive, Prometheus).
//!
//! The WAL is the queue. Each destination has a reader over the segments
//! ([`crate::wal::reader`]) whose position is saved after each
//! acknowledged send, and which keeps its segments from deletion, so a
//! restart (even after `kill -9`) resumes where sending stopped:
//! - [`queue`]: one thread per destination reads records as they become
//!   durable, keeps the series references' labels, and deals samples to
//!   shards by series, so each series' samples stay in order;
//! - [`send`]: each shard batches, snappy-compresses and posts, retrying
//!   5xx, 429 (after `Retry-After`) and connection errors with backoff,
//!   and dropping (counted, logged) what other 4xx refuse;
//! - the position saved is the point before which every sample was
//!   acknowledged or dropped, so after a crash a shard re-sends at most the
//!   batches it had in flight.
//!
//! Past `forward-max-lag-bytes` of unsent log, the oldest unsent segments
//! are given up (counted as dropped): ingest never waits for a
//! destination.

pub mod destination;
mod queue;
mod send;
pub mod stats;
pub mod tls;
mod tracker;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

pub use crate::relabel;
pub use destination::{Destination, Protocol, Split};
pub use stats::Stats;
pub use tls::TlsConfig;

use crate::wal::commit::Progress;

/// Everything forwarding needs from the server.
#[derive(Debug)]
pub struct Setup {
    /// The destinations, validated.
    pub destinations: Vec<(Destination, Stats)>,
    /// `<data-dir>/wal`.
    pub wal_dir: PathBuf,
    /// `<data-dir>`, where checkpoints are.
    pub data_dir: PathBuf,
    /// The log's progress, for its durable end.
    pub progress: watch::Receiver<Progress>,
    /// Most bytes of unsent log kept per destination.
    pub max_lag_bytes: u64,
    /// Spread series over the destinations instead of sending each all:
    /// each series goes to this many of them (see [`Split`]).
    pub shard_by_series: Option<usize>,
}

/// The running forwarders; [`Forwarders::stop`] ends them.
#[derive(Debug)]
pub struct Forwarders {
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Each destination's unsent WAL bytes.
    pending: Vec<prometheus_client::metrics::gauge::Gauge>,
}

impl Forwarders {
    /// Starts one forwarder per destination on the current tokio runtime.
    /// Saved positions of destinations no longer configured are removed,
    /// so they hold no segments.
    pub fn start(setup: Setup) -> std::io::Result<Self> {
        let names: Vec<String> = setup
            .destinations
            .iter()
            .map(|(d, _)| d.resolved_name())
            .collect();
        match crate::wal::reader::names(&setup.wal_dir) {
            Ok(saved) => {
                for old in saved.iter().filter(|n| !names.contains(n)) {
                    tracing::info!(destination = %old, "forward destination no longer configured; releasing its WAL position");
                    if let Err(e) = crate::wal::reader::remove(&setup.wal_dir, old) {
                        tracing::warn!(error = %e, "could not remove a stale forward position");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not list forward positions"),
        }
        let (stop, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Handle::current();
        let mut started = Self {
            stop,
            threads: Vec::new(),
            pending: Vec::new(),
        };
        let count = setup.destinations.len();
        for (index, (dest, stats)) in setup.destinations.into_iter().enumerate() {
            started.pending.push(stats.pending_bytes.clone());
            let q = queue::Queue {
                filter: queue::Filter {
                    split: setup.shard_by_series.map(|replicas| Split {
                        index,
                        of: count,
                        replicas,
                    }),
                    // Checked by `Destination::validate`; a rule that no
                    // longer compiles relabels nothing.
                    relabel: relabel::Relabeler::new(&dest.write_relabel_configs)
                        .unwrap_or_default(),
                },
                name: dest.resolved_name(),
                dest: Arc::new(dest),
                stats,
                wal_dir: setup.wal_dir.clone(),
                data_dir: setup.data_dir.clone(),
                progress: setup.progress.clone(),
                max_lag_bytes: setup.max_lag_bytes,
                stop: stop_rx.clone(),
                runtime: runtime.clone(),
            };
            let Some(at) = q.start_position() else {
                continue;
            };
            match std::thread::Builder::new()
                .name(format!("sluice-forward-{}", q.name))
                .spawn(move || q.run(at))
            {
                Ok(t) => started.threads.push(t),
                Err(e) => {
                    // Those already running stop, rather than run on with
                    // no one to stop them.
                    started.stop();
                    return Err(e);
                }
            }
        }
        Ok(started)
    }

    /// Whether every destination has been sent all of the log (as of the
    /// last look, at most a second ago).
    pub fn caught_up(&self) -> bool {
        self.pending.iter().all(|g| g.get() == 0)
    }

    /// Tells the forwarders to stop, without waiting: many tenants'
    /// forwarders stop together when each is told before any is waited for.
    pub fn signal(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops reading and sending, saves each position, and waits for the
    /// threads. Batches not yet acknowledged are sent after the next start.
    pub fn stop(self) {
        self.signal();
        for t in self.threads {
            let _ = t.join();
        }
    }
}
