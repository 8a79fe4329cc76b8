//! Tenant IDs as Mimir and Cortex take them in `X-Scope-OrgID`: up to 150
//! characters of letters, digits and `! - _ . * ' ( )`, and never `.` or
//! `..`, so an ID is always safe as one path segment
//! (`<data-dir>/tenants/<id>/`). With multitenancy off every request is
//! the tenant `anonymous`, whatever it sends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::forward::{Destination, Forwarders};
use crate::ingest::ha::HaTracker;
use crate::ingest::otlp::{Otlp, OtlpOptions};
use crate::ingest::{Dropped, IngestReport, Reason};
use crate::storage::{Clock, Db, DbOptions};
use crate::telemetry::{TenantFigures, TenantSource};

/// The tenant of every request when multitenancy is off (Mimir's name).
pub const ANONYMOUS: &str = "anonymous";

/// The longest tenant ID.
pub const MAX_LENGTH: usize = 150;

/// A checked tenant ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

/// Why a tenant header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantError {
    /// No tenant header, or an empty one (401, as Mimir's "no org id").
    #[error("no tenant ID: the request needs a {0} header")]
    Missing(&'static str),
    /// A character outside the allowed set (400).
    #[error("tenant ID {id:?} contains unsupported character {ch:?} (allowed: letters, digits and ! - _ . * ' ( ))")]
    Unsupported {
        /// The ID, cut to the allowed length.
        id: String,
        /// The first character refused.
        ch: char,
    },
    /// Longer than [`MAX_LENGTH`] (400).
    #[error("tenant ID is too long: max {MAX_LENGTH} characters")]
    TooLong,
    /// `.` or `..` (400).
    #[error("tenant ID is '.' or '..'")]
    Unsafe,
    /// Several tenants (`a|b`) where one is needed (400).
    #[error("this request takes one tenant ID, not several (reads over several need --tenant-federation-enabled)")]
    Several,
    /// More tenants than `--tenant-federation-max-tenants` (400).
    #[error("too many tenant IDs present in the request. max: {max} actual: {actual}")]
    TooManyTenants {
        /// The most one read may name.
        max: usize,
        /// How many it named.
        actual: usize,
    },
}

/// Whether Mimir allows `c` in a tenant ID.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '!' | '-' | '_' | '.' | '*' | '\'' | '(' | ')')
}

impl TenantId {
    /// Checks `s` as one tenant ID.
    pub fn parse(s: &str) -> Result<Self, TenantError> {
        if s.is_empty() {
            return Err(TenantError::Missing("tenant"));
        }
        if s.contains('|') {
            return Err(TenantError::Several);
        }
        if let Some(ch) = s.chars().find(|c| !allowed(*c)) {
            let id: String = s.chars().take(MAX_LENGTH).collect();
            return Err(TenantError::Unsupported { id, ch });
        }
        if s.len() > MAX_LENGTH {
            return Err(TenantError::TooLong);
        }
        if s == "." || s == ".." {
            return Err(TenantError::Unsafe);
        }
        Ok(Self(s.into()))
    }

    /// The tenant of every request when multitenancy is off.
    pub fn anonymous() -> Self {
        Self(ANONYMOUS.into())
    }

    /// The ID.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TenantId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tenant: its database and the state ingest keeps for it.
#[derive(Debug)]
pub struct Tenant {
    /// Its ID.
    pub id: TenantId,
    /// Its database.
    pub db: Arc<Db>,
    /// OTLP delta totals, kept per tenant so one tenant's series never
    /// meet another's.
    pub(crate) otlp: Otlp,
    /// Its ingestion rate limit's tokens.
    pub(crate) bucket: Mutex<super::bucket::Bucket>,
    /// What it wrote and what was refused, for its self-metrics.
    pub(crate) stats: TenantStats,
    /// Its HA pairs' elected replicas.
    pub(crate) ha: HaTracker,
    /// Its forwarders, reading its own WAL, once the server runs.
    forwarders: Mutex<Option<Forwarders>>,
    /// Its queries running, for its `max_query_concurrency`.
    pub(crate) queries: Arc<super::slots::QueryGate>,
    /// Its upkeep task and what stops it, once the server runs.
    upkeep: Mutex<Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>>,
    /// Whether it stands in for every tenant that is not open (an empty
    /// database read in their place): its ID is not theirs, and it has no
    /// limits or query turns of its own.
    pub(crate) stand_in: bool,
}

/// A tenant's write counts, reported per tenant in `/metrics`.
#[derive(Debug)]
pub(crate) struct TenantStats {
    ingested: AtomicU64,
    rejected: [AtomicU64; Reason::COUNT],
    dropped: [AtomicU64; Dropped::ALL.len()],
    rate_limited: AtomicU64,
}

impl Default for TenantStats {
    fn default() -> Self {
        Self {
            ingested: AtomicU64::new(0),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            dropped: std::array::from_fn(|_| AtomicU64::new(0)),
            rate_limited: AtomicU64::new(0),
        }
    }
}

impl TenantStats {
    /// Counts one request's outcome (per request, not per sample).
    pub(crate) fn record(&self, report: &IngestReport) {
        self.ingested.fetch_add(report.accepted, Ordering::Relaxed);
        let counts = self.rejected.iter().zip(&report.rejected);
        for (slot, &n) in counts.chain(self.dropped.iter().zip(&report.dropped)) {
            if n > 0 {
                slot.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    /// Counts one request refused by the rate limit.
    pub(crate) fn record_rate_limited(&self) {
        self.rate_limited.fetch_add(1, Ordering::Relaxed);
    }
}

impl Tenant {
    /// Tenant `id` over its database `db`, with nothing counted yet and
    /// its HA elections read back from its directory.
    fn new(setup: &TenantSetup, id: TenantId, db: Arc<Db>) -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let ha = HaTracker::open(db.dir().map(|d| d.join(crate::ingest::ha::FILE)), now_ms);
        Tenant {
            id,
            db,
            otlp: Otlp::new(setup.otlp.0.clone(), setup.otlp.1),
            bucket: Mutex::default(),
            stats: TenantStats::default(),
            ha,
            forwarders: Mutex::new(None),
            queries: Arc::default(),
            upkeep: Mutex::new(None),
            stand_in: false,
        }
    }

    fn figures(&self) -> TenantFigures {
        let stats = &self.stats;
        TenantFigures {
            tenant: Arc::clone(&self.id.0),
            series: self.db.series_count() as u64,
            memory_bytes: (self.db.held_bytes() + self.otlp.delta.bytes()) as u64,
            ingested: stats.ingested.load(Ordering::Relaxed),
            rejected: Reason::all()
                .map(|r| {
                    (
                        r.as_str(),
                        stats.rejected[r.index()].load(Ordering::Relaxed),
                    )
                })
                .filter(|&(_, n)| n > 0)
                .collect(),
            dropped: Dropped::ALL
                .iter()
                .map(|&d| {
                    (
                        d.as_str(),
                        stats.dropped[d as usize].load(Ordering::Relaxed),
                    )
                })
                .filter(|&(_, n)| n > 0)
                .collect(),
            rate_limited: stats.rate_limited.load(Ordering::Relaxed),
        }
    }
}

/// The open tenants, as `/metrics` reads them.
#[derive(Debug)]
struct Directory {
    anonymous: Arc<Tenant>,
    others: Arc<RwLock<HashMap<TenantId, Arc<Tenant>>>>,
}

impl TenantSource for Directory {
    fn figures(&self) -> Vec<TenantFigures> {
        let others: Vec<Arc<Tenant>> = self.others.read().values().cloned().collect();
        let mut out: Vec<TenantFigures> = std::iter::once(&self.anonymous)
            .chain(&others)
            .map(|t| t.figures())
            .collect();
        out.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        out
    }
}

/// What a new tenant's database and state are made from.
#[derive(Debug, Clone)]
pub struct TenantSetup {
    /// Whether requests name their tenant (`--multitenancy`).
    pub multitenancy: bool,
    /// The header that names it (`--tenant-header`).
    pub header: http::HeaderName,
    /// Most tenants open at once (`--max-tenants`).
    pub max_tenants: usize,
    /// The options of the root database; a tenant's differ only in where
    /// they live (`<data-dir>/tenants/<id>/`).
    pub db: DbOptions,
    /// OTLP translation, and the series bound of its delta totals.
    pub otlp: (OtlpOptions, usize),
    /// Whether a read may name several tenants (`--tenant-federation-enabled`),
    /// and how many at most (0: any number).
    pub federation: Option<usize>,
}

/// What each tenant's forwarding is made from.
#[derive(Clone)]
pub struct ForwardSetup {
    /// The destinations as configured; each tenant forwards to those
    /// [`Destination::for_tenant`] gives it.
    pub destinations: Vec<Destination>,
    /// `--forward-max-lag-bytes`.
    pub max_lag_bytes: u64,
    /// `--forward-shard-by-series` with its replicas.
    pub shard_by_series: Option<usize>,
    /// A destination's self-metrics for one tenant's samples (the tenant
    /// is `None` without multitenancy).
    pub stats: StatsOf,
    /// Drops a destination's self-metrics for a closed tenant.
    pub forget: ForgetOf,
}

/// Drops a destination's self-metrics for a tenant: name, tenant.
pub type ForgetOf = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// A destination's self-metrics for a tenant: name, tenant (`None`
/// without multitenancy).
pub type StatsOf = Arc<dyn Fn(&str, Option<&str>) -> crate::forward::Stats + Send + Sync>;

impl std::fmt::Debug for ForwardSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardSetup")
            .field("destinations", &self.destinations)
            .finish_non_exhaustive()
    }
}

/// What a tenant's background work needs, once the server runs.
struct Upkeep {
    clock: Clock,
}

/// How often tenants that hold nothing are looked for.
pub const IDLE_CHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// Starts `t`'s upkeep (cuts, compaction, retention, checkpoints), with a
/// stop of its own.
fn start_tenant_upkeep(t: &Tenant, clock: Clock) {
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn(Arc::clone(&t.db).run_upkeep(clock, stopped));
    *t.upkeep.lock() = Some((stop, running));
}

/// Every tenant's database: `anonymous` is the root database (today's
/// layout, and the only tenant with multitenancy off); the others live
/// under `<data-dir>/tenants/<id>/` and are opened on their first write
/// (or at start, when their directory exists).
pub struct Tenants {
    setup: TenantSetup,
    anonymous: Arc<Tenant>,
    others: Arc<RwLock<HashMap<TenantId, Arc<Tenant>>>>,
    /// What a read of a tenant that never wrote sees: nothing.
    empty: Arc<Tenant>,
    /// One tenant opened at a time, so two first writes open it once.
    opening: tokio::sync::Mutex<bool>,
    upkeep: Mutex<Option<Upkeep>>,
    /// All tenants' held bytes, and when they were summed (ms since
    /// `started`): summed at most every [`HELD_REFRESH_MS`], not per write.
    held: Mutex<(u64, Vec<(TenantId, usize)>)>,
    started: std::time::Instant,
    forward: ForwardSetup,
}

/// The most disk each tenant's WAL holds back for a full disk: every
/// tenant has its own, so `--wal-reserve-bytes` (8 MiB) for each of 1,000
/// tenants would be 8 GB.
const TENANT_WAL_RESERVE: u64 = 1 << 20;

/// How stale the sum of tenants' held bytes may be.
const HELD_REFRESH_MS: u64 = 100;

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants")
            .field("multitenancy", &self.setup.multitenancy)
            .field("open", &(self.others.read().len() + 1))
            .finish_non_exhaustive()
    }
}

impl Tenants {
    /// The registry over the root database `root`; each tenant forwards
    /// its own WAL by `forward`.
    pub fn new(setup: TenantSetup, root: Arc<Db>, forward: ForwardSetup) -> Self {
        let tenant = |id, db| Arc::new(Tenant::new(&setup, id, db));
        let empty_opts = DbOptions {
            durability: None,
            ..setup.db.clone()
        };
        let empty = Tenant {
            stand_in: true,
            ..Arc::into_inner(tenant(
                TenantId::anonymous(),
                Arc::new(Db::in_memory(empty_opts)),
            ))
            .expect("made here, held nowhere else")
        };
        Self {
            anonymous: tenant(TenantId::anonymous(), root),
            empty: Arc::new(empty),
            others: Arc::default(),
            opening: tokio::sync::Mutex::new(false),
            upkeep: Mutex::new(None),
            held: Mutex::new((0, Vec::new())),
            started: std::time::Instant::now(),
            setup,
            forward,
        }
    }

    /// The open tenants' figures, for `/metrics`.
    pub fn source(&self) -> Arc<dyn TenantSource> {
        Arc::new(Directory {
            anonymous: Arc::clone(&self.anonymous),
            others: Arc::clone(&self.others),
        })
    }

    /// Whether requests name their tenant.
    pub fn multitenancy(&self) -> bool {
        self.setup.multitenancy
    }

    /// The forward destinations tenant `id` sends to (every one, when
    /// multitenancy is off), by name, with their figures for it.
    pub fn forwarding_of(&self, id: &str) -> Vec<(String, crate::forward::Stats)> {
        let label = self.setup.multitenancy.then_some(id);
        self.forward
            .destinations
            .iter()
            .filter(|d| {
                label.is_none() || d.tenants.is_empty() || d.tenants.iter().any(|t| t == id)
            })
            .map(|d| (d.name.clone(), (self.forward.stats)(&d.name, label)))
            .collect()
    }

    /// The header that names the tenant.
    pub fn header(&self) -> &http::HeaderName {
        &self.setup.header
    }

    /// The root database's tenant.
    pub fn anonymous(&self) -> Arc<Tenant> {
        Arc::clone(&self.anonymous)
    }

    /// Every open tenant, `anonymous` first.
    pub fn all(&self) -> Vec<Arc<Tenant>> {
        let mut out = vec![Arc::clone(&self.anonymous)];
        let others = self.others.read();
        let mut rest: Vec<_> = others.values().cloned().collect();
        rest.sort_by(|a, b| a.id.cmp(&b.id));
        out.extend(rest);
        out
    }

    fn dir(&self, id: &TenantId) -> Option<PathBuf> {
        self.setup
            .db
            .durability
            .as_ref()
            .map(|d| d.dir.join("tenants").join(id.as_str()))
    }

    /// A tenant's database options: the root's, living in `dir`, with a
    /// smaller WAL space reserve (at most [`TENANT_WAL_RESERVE`]).
    fn options(&self, dir: Option<PathBuf>) -> DbOptions {
        DbOptions {
            durability: self.setup.db.durability.clone().map(|mut d| {
                d.dir = dir.unwrap_or(d.dir);
                d.wal.reserve_bytes = d.wal.reserve_bytes.min(TENANT_WAL_RESERVE);
                d
            }),
            ..self.setup.db.clone()
        }
    }

    /// The tenant `id` for a read: its database, or an empty one if it
    /// never wrote (a read creates nothing).
    pub fn for_read(&self, id: &TenantId) -> Arc<Tenant> {
        if id.as_str() == ANONYMOUS {
            return Arc::clone(&self.anonymous);
        }
        self.others
            .read()
            .get(id)
            .cloned()
            .unwrap_or_else(|| Arc::clone(&self.empty))
    }

    /// The tenant `id` for a write, opened (and its directory made) if
    /// this is its first.
    pub async fn for_write(&self, id: &TenantId) -> Result<Arc<Tenant>, OpenError> {
        if id.as_str() == ANONYMOUS {
            return Ok(Arc::clone(&self.anonymous));
        }
        if let Some(t) = self.others.read().get(id) {
            return Ok(Arc::clone(t));
        }
        let closed = self.opening.lock().await;
        if let Some(t) = self.others.read().get(id) {
            return Ok(Arc::clone(t));
        }
        if *closed {
            return Err(OpenError::Failed("the server is shutting down".into()));
        }
        // `anonymous` counts as one.
        if self.others.read().len() + 1 >= self.setup.max_tenants {
            return Err(OpenError::TooMany(self.setup.max_tenants));
        }
        let opts = self.options(self.dir(id));
        let db = tokio::task::spawn_blocking(move || Db::open(opts))
            .await
            .map_err(|e| OpenError::Failed(e.to_string()))?
            .map_err(|e| OpenError::Failed(e.to_string()))?;
        Ok(self.add(id.clone(), Arc::new(db)))
    }

    fn add(&self, id: TenantId, db: Arc<Db>) -> Arc<Tenant> {
        let t = Arc::new(Tenant::new(&self.setup, id.clone(), db));
        let clock = self.upkeep.lock().as_ref().map(|u| u.clock.clone());
        if let Some(clock) = clock {
            start_tenant_upkeep(&t, clock);
            self.start_forwarding(&t);
        }
        self.others.write().insert(id, Arc::clone(&t));
        tracing::info!(tenant = %t.id, "tenant opened");
        t
    }

    /// Opens every tenant with a directory under `<data-dir>/tenants/`
    /// (replaying its WAL), so what each was acknowledged is back before
    /// the first request. Blocking.
    pub fn open_existing(&self) -> Result<usize, OpenError> {
        let Some(base) = self
            .setup
            .db
            .durability
            .as_ref()
            .map(|d| d.dir.join("tenants"))
        else {
            return Ok(0);
        };
        let entries = match std::fs::read_dir(&base) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(OpenError::Failed(format!("{}: {e}", base.display()))),
        };
        let mut n = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|s| TenantId::parse(s).ok()) else {
                tracing::warn!(dir = %entry.path().display(), "not a tenant ID; left alone");
                continue;
            };
            if id.as_str() == ANONYMOUS || !entry.path().is_dir() {
                continue;
            }
            let opts = self.options(Some(entry.path()));
            // One tenant's damage does not keep the others from starting:
            // it is left closed (its writes are refused while it cannot
            // open) and said so.
            match Db::open(opts) {
                Ok(db) => {
                    self.add(id, Arc::new(db));
                    n += 1;
                }
                Err(e) => {
                    tracing::error!(tenant = %id, error = %e, "tenant's database cannot be opened; its reads are empty and its writes refused until it is repaired");
                }
            }
        }
        Ok(n)
    }

    /// Runs each tenant's upkeep (cuts, compaction, retention,
    /// checkpoints) until `stop`, for those open now and those opened
    /// later, and starts every tenant's forwarding (the root database's
    /// too). The root database's upkeep is the server's.
    pub fn start_upkeep(&self, clock: Clock) {
        let others: Vec<Arc<Tenant>> = self.others.read().values().cloned().collect();
        for t in &others {
            start_tenant_upkeep(t, clock.clone());
        }
        *self.upkeep.lock() = Some(Upkeep { clock });
        self.start_forwarding(&self.anonymous);
        for t in &others {
            self.start_forwarding(t);
        }
    }

    /// Closes every tenant that holds nothing (no series in its head, no
    /// block: retention took it all) and no request is using: its upkeep
    /// and forwarding stop, its memory is freed and its directory removed.
    /// Its next write opens it anew. Returns how many were closed.
    pub async fn close_idle(&self) -> usize {
        // No tenant opens meanwhile, so a write that finds one closed
        // waits and opens it again afterwards.
        let closed = self.opening.lock().await;
        if *closed {
            return 0;
        }
        let idle: Vec<Arc<Tenant>> = {
            let mut others = self.others.write();
            let ids: Vec<TenantId> = others
                .iter()
                // Only the directory holds it: no request has it now, and
                // none can get it while the lock is held.
                .filter(|(_, t)| {
                    Arc::strong_count(t) == 1
                        && t.db.holds_nothing()
                        // Its log is sent everywhere: closing removes it.
                        && t.forwarders.lock().as_ref().is_none_or(Forwarders::caught_up)
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| others.remove(id)).collect()
        };
        for t in &idle {
            let upkeep = t.upkeep.lock().take();
            if let Some((stop, running)) = upkeep {
                let _ = stop.send(true);
                let _ = running.await;
            }
            let forwarders = t.forwarders.lock().take();
            for d in &self.forward.destinations {
                (self.forward.forget)(&d.resolved_name(), t.id.as_str());
            }
            let (t2, dir) = (Arc::clone(t), self.dir(&t.id));
            let removed = tokio::task::spawn_blocking(move || {
                if let Some(f) = forwarders {
                    f.stop();
                }
                t2.db.close(crate::storage::Close::WalOnly);
                match dir {
                    Some(dir) => std::fs::remove_dir_all(&dir).map_err(|e| e.to_string()),
                    None => Ok(()),
                }
            })
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
            match removed {
                Ok(()) => {
                    tracing::info!(tenant = %t.id, "tenant holds nothing after retention; closed")
                }
                Err(e) => {
                    tracing::warn!(tenant = %t.id, error = %e, "tenant closed, but its directory could not be removed; it is opened again at the next start")
                }
            }
        }
        drop(closed);
        let n = idle.len();
        if n > 0 {
            drop(idle);
            crate::heap::release_free_memory();
        }
        n
    }

    /// Starts `t`'s forwarders over its WAL: the destinations bound to it,
    /// each carrying its ID when it has a tenant header. Started even with
    /// none, so the saved positions of destinations no longer configured
    /// (or no longer bound to it) are released and hold no segments.
    fn start_forwarding(&self, t: &Tenant) {
        let (Some(progress), Some(dir)) = (
            t.db.wal_progress(),
            self.setup.db.durability.as_ref().map(|d| {
                if t.id.as_str() == ANONYMOUS {
                    d.dir.clone()
                } else {
                    d.dir.join("tenants").join(t.id.as_str())
                }
            }),
        ) else {
            return;
        };
        let label = self.setup.multitenancy.then(|| t.id.as_str());
        let destinations = self
            .forward
            .destinations
            .iter()
            .filter_map(|d| d.for_tenant(t.id.as_str()))
            .map(|d| {
                let stats = (self.forward.stats)(&d.resolved_name(), label);
                (d, stats)
            })
            .collect();
        match Forwarders::start(crate::forward::Setup {
            destinations,
            wal_dir: dir.join("wal"),
            data_dir: dir,
            progress,
            max_lag_bytes: self.forward.max_lag_bytes,
            shard_by_series: self.forward.shard_by_series,
        }) {
            Ok(f) => *t.forwarders.lock() = Some(f),
            Err(e) => {
                tracing::error!(tenant = %t.id, error = %e, "cannot start forwarding; this tenant's samples are kept but not forwarded")
            }
        }
    }

    /// Stops the tenants' upkeep and waits for it, stops every tenant's
    /// forwarding (the root database's too), then closes the tenants'
    /// databases with a last checkpoint. The root database is the server's
    /// to close.
    pub async fn close(&self) {
        // No tenant opens after this: a write still in flight at the
        // shutdown timeout cannot leave one without its last checkpoint.
        *self.opening.lock().await = true;
        let open: Vec<Arc<Tenant>> = self.others.read().values().cloned().collect();
        let running: Vec<_> = open
            .iter()
            .filter_map(|t| t.upkeep.lock().take())
            .map(|(stop, running)| {
                let _ = stop.send(true);
                running
            })
            .collect();
        for h in running {
            let _ = h.await;
        }
        let anonymous = Arc::clone(&self.anonymous);
        let _ = tokio::task::spawn_blocking(move || {
            let forwarders: Vec<Forwarders> = std::iter::once(&anonymous)
                .chain(&open)
                .filter_map(|t| t.forwarders.lock().take())
                .collect();
            for f in &forwarders {
                f.signal();
            }
            for f in forwarders {
                f.stop();
            }
            for t in open {
                t.db.close(crate::storage::Close::Checkpoint);
            }
        })
        .await;
    }

    /// Bytes every tenant but `except` holds against the memory limit, as
    /// of at most [`HELD_REFRESH_MS`] ago: a write costs a lookup, not a
    /// walk over every tenant.
    pub fn held_bytes_except(&self, except: &TenantId) -> usize {
        if !self.setup.multitenancy {
            return 0;
        }
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut held = self.held.lock();
        if held.1.is_empty() || now.saturating_sub(held.0) >= HELD_REFRESH_MS {
            held.1 = self
                .all()
                .iter()
                .map(|t| (t.id.clone(), t.db.held_bytes() + t.otlp.delta.bytes()))
                .collect();
            held.0 = now;
        }
        held.1
            .iter()
            .filter(|(id, _)| id != except)
            .map(|(_, b)| b)
            .sum()
    }
}

/// Why a tenant could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// `--max-tenants` are open.
    #[error("{0} tenants are open, the most max-tenants allows; this tenant's writes are refused until it is raised")]
    TooMany(usize),
    /// Its database could not be opened.
    #[error("cannot open the tenant's database: {0}")]
    Failed(String),
}

/// Paths answered without a tenant: health, self-metrics, settings, the
/// pages a browser loads (their API calls carry the tenant), and anything
/// under `/assets/`. A tenant header there is still checked when sent.
const TENANT_FREE: [&str; 13] = [
    "/-/healthy",
    "/-/ready",
    "/metrics",
    "/api/v1/status/buildinfo",
    "/api/v1/status/flags",
    "/api/v1/status/config",
    "/api/v1/format_query",
    "/api/v1/parse_query",
    "/query",
    "/graph",
    "/tsdb-status",
    "/rules",
    "/alerts",
];

/// Paths whose reads may name several tenants, with federation on.
const FEDERATED: [&str; 9] = [
    "/api/v1/query",
    "/api/v1/status/tsdb",
    "/api/v1/query_range",
    "/api/v1/series",
    "/api/v1/labels",
    "/api/v1/query_exemplars",
    "/api/v1/read",
    "/federate",
    "/api/v1/label/",
];

/// Whether a read of `path` may name several tenants.
fn federable(path: &str) -> bool {
    FEDERATED.iter().any(|p| match p.strip_suffix('/') {
        // `/api/v1/label/<name>/values`
        Some(_) => path.starts_with(p) && path.ends_with("/values"),
        None => path == *p,
    })
}

/// Paths that write: the first write of a tenant opens its database.
const WRITES: [&str; 3] = ["/api/v1/write", "/v1/metrics", "/api/v1/otlp/v1/metrics"];

/// Paths that change or copy a tenant's stored data without writing
/// samples (the admin API), or what it evaluates (`/-/reload`): a login
/// needs write access to the tenant, as for a write, though no tenant is
/// opened for them.
const MODIFIES: [&str; 4] = [
    "/-/reload",
    "/api/v1/admin/tsdb/delete_series",
    "/api/v1/admin/tsdb/clean_tombstones",
    "/api/v1/admin/tsdb/snapshot",
];

/// Whether a request to `path` needs write access to its tenant.
pub fn needs_write(path: &str) -> bool {
    WRITES.contains(&path) || MODIFIES.contains(&path)
}

/// Why a request could not be given a tenant.
#[derive(Debug, thiserror::Error)]
pub enum Unscoped {
    /// The tenant header is missing or malformed.
    #[error(transparent)]
    Header(#[from] TenantError),
    /// The tenant's database could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
}

impl axum::response::IntoResponse for Unscoped {
    fn into_response(self) -> axum::response::Response {
        use http::StatusCode;
        let (status, retry) = match &self {
            Self::Header(TenantError::Missing(_)) => (StatusCode::UNAUTHORIZED, false),
            Self::Header(_) => (StatusCode::BAD_REQUEST, false),
            Self::Open(OpenError::TooMany(_)) => (StatusCode::SERVICE_UNAVAILABLE, true),
            Self::Open(OpenError::Failed(_)) => (StatusCode::INTERNAL_SERVER_ERROR, false),
        };
        let mut resp = (
            status,
            [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("{self}\n"),
        )
            .into_response();
        if retry {
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("5"),
            );
        }
        resp
    }
}

impl Tenants {
    /// The tenant of a request to `path` with `headers`, by its ID (none
    /// for a path that needs no tenant, asked without one): `anonymous`
    /// with multitenancy off; else the one its tenant header names, opened
    /// if this is its first write.
    ///
    /// The status page (`/`), opened in a browser, may name its tenant in
    /// its URL instead (`/?tenant=<id>`), checked as the header is; asked
    /// with neither, it is answered without a tenant (a form to choose
    /// one, see [`page_tenant`]).
    pub async fn resolve(
        &self,
        path: &str,
        query: Option<&str>,
        headers: &http::HeaderMap,
    ) -> Result<(Vec<TenantId>, Resolved), Unscoped> {
        let write = WRITES.contains(&path);
        let header = headers
            .get(&self.setup.header)
            .filter(|v| !v.as_bytes().is_empty());
        let from_url = match (path, header) {
            ("/", None) => page_tenant(query),
            _ => None,
        };
        let free = TENANT_FREE.contains(&path)
            || path.starts_with("/assets/")
            || (self.setup.multitenancy && path == "/" && header.is_none() && from_url.is_none());
        let anonymous = || {
            let r = if write {
                Resolved::Write(Writer::Open(self.anonymous()))
            } else {
                Resolved::Read(Scoped(self.anonymous()))
            };
            let ids = if free {
                Vec::new()
            } else {
                vec![TenantId::anonymous()]
            };
            (ids, r)
        };
        if !self.setup.multitenancy {
            return Ok(anonymous());
        }
        let value = match &from_url {
            Some(id) => Some(Ok(id.as_str())),
            None => header.map(|v| v.to_str()),
        };
        let raw = match value {
            None | Some(Ok("")) if free => return Ok(anonymous()),
            None | Some(Ok("")) => {
                return Err(TenantError::Missing(header_name(&self.setup.header)).into())
            }
            Some(Err(_)) => {
                return Err(TenantError::Unsupported {
                    id: String::new(),
                    ch: char::REPLACEMENT_CHARACTER,
                }
                .into())
            }
            Some(Ok(v)) => v.trim(),
        };
        let ids = match self.setup.federation {
            Some(max) if raw.contains('|') && !write => parse_federated(raw, max)?,
            _ => vec![TenantId::parse(raw)?],
        };
        // A path that needs no tenant is bound to none, header or not.
        let bound = if free { Vec::new() } else { ids.clone() };
        let resolved = match &ids[..] {
            [id] if write => Resolved::Write(match self.open(id) {
                Some(t) => Writer::Open(t),
                None => Writer::New(id.clone()),
            }),
            [id] => Resolved::Read(Scoped(self.for_read(id))),
            _ if free => Resolved::Read(Scoped(self.anonymous())),
            _ if !federable(path) => return Err(TenantError::Several.into()),
            many => Resolved::Federated(Federation(
                many.iter()
                    .map(|id| (id.clone(), self.for_read(id)))
                    .collect(),
            )),
        };
        Ok((bound, resolved))
    }

    /// The tenant `id`, if it is open.
    fn open(&self, id: &TenantId) -> Option<Arc<Tenant>> {
        if id.as_str() == ANONYMOUS {
            return Some(self.anonymous());
        }
        self.others.read().get(id).cloned()
    }
}

/// Marks a request for the status page with multitenancy on and no
/// tenant named: it answers with a form to name one.
#[derive(Debug, Clone, Copy)]
pub struct Unchosen;

/// The tenant the status page's URL names (`tenant=`), if any.
pub fn page_tenant(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, v)| k == "tenant" && !v.is_empty())
        .map(|(_, v)| v.into_owned())
}

/// Several tenant IDs of a federated read, `a|b`: each checked, sorted,
/// once each (as Mimir), at most `max` (0: any number).
pub fn parse_federated(raw: &str, max: usize) -> Result<Vec<TenantId>, TenantError> {
    let mut ids = raw
        .split('|')
        .map(|s| TenantId::parse(s.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    ids.sort();
    ids.dedup();
    if max > 0 && ids.len() > max {
        return Err(TenantError::TooManyTenants {
            max,
            actual: ids.len(),
        });
    }
    Ok(ids)
}

/// What the door gives a request: the tenant it reads, the tenants of a
/// federated read, or the one it writes (not opened before its body has
/// been checked).
#[derive(Debug, Clone)]
pub enum Resolved {
    /// A read's tenant.
    Read(Scoped),
    /// A federated read's tenants.
    Federated(Federation),
    /// A write's tenant.
    Write(Writer),
}

/// The tenants of a federated read, sorted, each with its database (an
/// empty one for a tenant that never wrote).
#[derive(Debug, Clone)]
pub struct Federation(pub Arc<[(TenantId, Arc<Tenant>)]>);

/// What a read endpoint that takes federated reads reads: one tenant, or
/// several.
#[derive(Debug, Clone)]
pub enum Reads {
    /// One tenant.
    One(Arc<Tenant>),
    /// Several (`a|b`): their union, each series labelled with its tenant.
    Many(Arc<[(TenantId, Arc<Tenant>)]>),
}

impl Reads {
    /// Runs `f` over the read's databases: one tenant's, or a federated
    /// querier over all of them.
    pub fn with_querier<R>(&self, f: impl FnOnce(crate::storage::Querier<'_>) -> R) -> R {
        match self {
            Reads::One(t) => f(t.db.querier()),
            Reads::Many(list) => {
                let members: Vec<crate::storage::querier::Member<'_>> = list
                    .iter()
                    .map(|(id, t)| crate::storage::querier::Member {
                        tenant: id.as_str(),
                        querier: t.db.querier(),
                    })
                    .collect();
                f(crate::storage::Querier::federated(&members))
            }
        }
    }

    /// The open tenants read, each with its ID (a tenant that is not open
    /// reads as empty: it has no limits or query turns to take).
    pub fn open_tenants(&self) -> Vec<(TenantId, Arc<Tenant>)> {
        match self {
            Reads::One(t) if t.stand_in => Vec::new(),
            Reads::One(t) => vec![(t.id.clone(), Arc::clone(t))],
            Reads::Many(list) => list.iter().filter(|(_, t)| !t.stand_in).cloned().collect(),
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Reads {
    type Rejection = super::error::ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        if let Some(Federation(list)) = parts.extensions.get::<Federation>() {
            return Ok(Reads::Many(Arc::clone(list)));
        }
        parts
            .extensions
            .get::<Scoped>()
            .map(|Scoped(t)| Reads::One(Arc::clone(t)))
            .ok_or_else(|| {
                super::error::ApiError::Internal("the request's tenant was not resolved".into())
            })
    }
}

/// A write's tenant: open already, or to be opened once the write's body
/// has passed its checks, so a request that is refused opens nothing.
#[derive(Debug, Clone)]
pub enum Writer {
    /// Open.
    Open(Arc<Tenant>),
    /// Its first write.
    New(TenantId),
}

impl Writer {
    /// The tenant, opened if this is its first write.
    pub async fn open(self, tenants: &Tenants) -> Result<Arc<Tenant>, OpenError> {
        match self {
            Self::Open(t) => Ok(t),
            Self::New(id) => tenants.for_write(&id).await,
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Writer {
    type Rejection = super::error::ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Writer>().cloned().ok_or_else(|| {
            super::error::ApiError::Internal("the write's tenant was not resolved".into())
        })
    }
}

impl From<OpenError> for super::error::ApiError {
    fn from(e: OpenError) -> Self {
        match e {
            OpenError::TooMany(_) => Self::Overloaded(e.to_string()),
            OpenError::Failed(_) => Self::Internal(e.to_string()),
        }
    }
}

/// The header's name as configured, for messages.
fn header_name(h: &http::HeaderName) -> &'static str {
    if h.as_str() == "x-scope-orgid" {
        "X-Scope-OrgID"
    } else {
        "tenant (--tenant-header)"
    }
}

/// The request's tenant, as the door resolved it.
#[derive(Debug, Clone)]
pub struct Scoped(pub Arc<Tenant>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Scoped {
    type Rejection = super::error::ApiError;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Scoped>().cloned().ok_or_else(|| {
            super::error::ApiError::Internal("the request's tenant was not resolved".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mimir_ids_are_taken_and_others_named() {
        for ok in [
            "team-a",
            "A_b.c",
            "x!*'()",
            "anonymous",
            &"a".repeat(150),
            "...",
        ] {
            assert_eq!(
                TenantId::parse(ok).map(|t| t.to_string()),
                Ok(ok.to_owned())
            );
        }
        assert_eq!(TenantId::parse(""), Err(TenantError::Missing("tenant")));
        assert_eq!(TenantId::parse("."), Err(TenantError::Unsafe));
        assert_eq!(TenantId::parse(".."), Err(TenantError::Unsafe));
        assert_eq!(TenantId::parse(&"a".repeat(151)), Err(TenantError::TooLong));
        assert_eq!(TenantId::parse("a|b"), Err(TenantError::Several));
        for bad in ["a/b", "a b", "../x", "é", "a\0", "a\\b", "a:b"] {
            assert!(
                matches!(TenantId::parse(bad), Err(TenantError::Unsupported { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn federated_ids_are_sorted_once_each_and_bounded() {
        let ids = |raw, max| {
            parse_federated(raw, max).map(|v| v.iter().map(|t| t.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(ids("b|a|b", 0), Ok(vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(ids("a|a", 1), Ok(vec!["a".to_owned()]));
        assert_eq!(
            ids("a|b|c", 2),
            Err(TenantError::TooManyTenants { max: 2, actual: 3 })
        );
        assert_eq!(ids("a||b", 0), Err(TenantError::Missing("tenant")));
        assert!(matches!(
            ids("a|../x", 0),
            Err(TenantError::Unsupported { .. })
        ));
    }

    proptest! {
        /// Whatever is sent, a federated read names valid IDs, sorted, once each.
        #[test]
        fn federated_ids_are_each_valid(s in "[a-c|./]{0,12}") {
            if let Ok(ids) = parse_federated(&s, 0) {
                prop_assert!(!ids.is_empty());
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
                for id in &ids {
                    let again = TenantId::parse(id.as_str());
                    prop_assert_eq!(again.as_ref(), Ok(id));
                }
            }
        }

        /// Whatever is sent, an accepted ID is one safe path segment.
        #[test]
        fn accepted_ids_are_one_path_segment(s in "\\PC{0,160}") {
            if let Ok(id) = TenantId::parse(&s) {
                let p = std::path::Path::new("tenants").join(id.as_str());
                prop_assert_eq!(p.components().count(), 2);
                prop_assert!(p.starts_with("tenants"));
                prop_assert!(id.as_str().len() <= MAX_LENGTH);
                prop_assert!(!id.as_str().contains(['/', '\0', '|']));
            }
        }
    }
}
