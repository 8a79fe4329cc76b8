//! The state every handler shares: the database, the limits from the
//! configuration, and the query slots.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use super::error::ApiError;
use super::slots;
use super::tenant::{Tenant, Tenants};
use crate::config::runtime::TenantLimits;
use crate::config::Config;
use crate::ingest::ha::HaConfig;
use crate::ingest::relabel::Relabel;
use crate::ingest::remote_write::V2Options;
use crate::ingest::validate::LabelLimits;
use crate::promql::QueryOptions;
use crate::storage::exemplars::ExemplarStore;
use crate::storage::metadata::MetadataStore;
use crate::storage::{Clock, Db};
use crate::telemetry::Metrics;

/// Shared state of every handler: a cheap clone.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) db: Arc<Db>,
    /// Every tenant's database; `db` is the root one, `anonymous`.
    pub(super) tenants: Tenants,
    pub(super) query: QueryOptions,
    pub(super) slots: slots::Slots,
    pub(super) metrics: Metrics,
    pub(super) limits: LabelLimits,
    pub(super) v2: V2Options,
    /// Whether HA pairs are deduplicated by default, and how.
    pub(super) ha: (bool, HaConfig),
    pub(super) max_body_bytes: usize,
    pub(super) max_decompressed_bytes: usize,
    pub(super) max_form_bytes: usize,
    pub(super) max_response_bytes: usize,
    pub(super) request_timeout: Duration,
    pub(super) clock: Clock,
    /// Settings by flag name, for the status page.
    pub(super) flags: Vec<(String, String)>,
    /// `global.external_labels`, sorted by name.
    pub(super) external_labels: Vec<(String, String)>,
    /// The data directory, as `storage.tsdb.path` reports it.
    pub(super) data_dir: String,
    /// How long samples are kept.
    pub(super) retention: Duration,
    /// The range of the blocks the head cuts, and the largest block
    /// compaction makes.
    pub(super) block_durations: (Duration, Duration),
    pub(super) started: Instant,
    /// When the status page was last viewed and the samples ingested then.
    pub(super) last_view: parking_lot::Mutex<(Instant, u64)>,
    /// The logins and headers in force.
    pub(super) door: Arc<super::auth::Door>,
    /// Per-tenant limits and the bindings of logins to tenants.
    pub(super) tenant_limits: Arc<super::limits::Limits>,
    /// The status of a rate-limit refusal (`--rate-limit-status`).
    pub(super) rate_limit_status: StatusCode,
    /// Whether the admin API is served (`--web-enable-admin-api`).
    pub(super) admin_api: bool,
    /// The rule groups in force (`--rule-files`).
    pub(super) rules: Arc<crate::rules::Rules>,
    /// Every set of rules, by tenant: `rules` and the tenants' own.
    rule_sets: Arc<crate::rules::RuleSets>,
    /// The alert relabelling every set's notifier applies.
    alert_relabel: crate::rules::notifier::AlertRelabel,
    /// Whether `POST /-/reload` is served (`--web-enable-lifecycle`).
    pub(super) lifecycle: bool,
}

impl AppState {
    /// State over `db`, with the limits from `config`.
    pub fn new(config: &Config, db: Arc<Db>) -> Self {
        Self::with_clock(config, db, Clock::system())
    }

    /// The logins and headers in force, for the web configuration's
    /// reloads to swap.
    pub fn door(&self) -> Arc<super::auth::Door> {
        Arc::clone(&self.inner.door)
    }

    /// The per-tenant limits in force, for the runtime configuration's
    /// reloads to swap.
    pub fn tenant_limits(&self) -> Arc<super::limits::Limits> {
        Arc::clone(&self.inner.tenant_limits)
    }

    /// The web configuration's reload and refusal counts.
    pub fn web_metrics(&self) -> crate::telemetry::WebMetrics {
        self.inner.metrics.web()
    }

    /// The HTTP listener's connection counts.
    pub fn connection_metrics(&self) -> crate::telemetry::ConnectionMetrics {
        self.inner.metrics.connections()
    }

    /// Like [`AppState::new`], reading time from `clock`.
    pub fn with_clock(config: &Config, db: Arc<Db>, clock: Clock) -> Self {
        let query = config.query_options();
        let mut metrics = Metrics::new(Arc::clone(&db), query.shared.clone());
        let families = metrics.forward_families();
        let tenants = Tenants::new(
            config.tenant_setup(),
            Arc::clone(&db),
            super::tenant::ForwardSetup {
                destinations: config.forward.clone(),
                max_lag_bytes: config.forward_max_lag_bytes,
                shard_by_series: config
                    .forward_shard_by_series
                    .then_some(config.forward_shard_by_series_replicas),
                stats: {
                    let families = families.clone();
                    Arc::new(move |name, tenant| families.stats(name, tenant))
                },
                forget: Arc::new(move |name, tenant| families.forget(name, tenant)),
            },
        );
        if config.multitenancy {
            metrics.add_tenants(tenants.source());
        }
        let alert_relabel = crate::rules::notifier::AlertRelabel::default();
        let rules = Arc::new(crate::rules::Rules::new(
            crate::rules::RuleSettings {
                alert_relabel: Arc::clone(&alert_relabel),
                ..config.rule_settings()
            },
            Arc::clone(&db),
        ));
        let rule_sets = Arc::new(crate::rules::RuleSets::default());
        if rules.configured() {
            rule_sets.add(super::tenant::ANONYMOUS, Arc::clone(&rules));
        }
        if rules.configured() || config.ruler_dir().is_some() {
            metrics.add_rules(Arc::clone(&rule_sets) as Arc<dyn crate::telemetry::RuleSource>);
        }
        crate::parallel::set_max_workers(config.query_max_workers_per_query);
        let slots = slots::Slots::new(
            config.query_max_concurrency,
            config.query_max_depth,
            metrics.queries_running(),
            metrics.queries_timed_out(),
        );
        Self {
            inner: Arc::new(Inner {
                metrics,
                slots,
                clock,
                flags: config.flags(),
                external_labels: config.external_labels(),
                data_dir: config.data_dir().display().to_string(),
                retention: config.retention(),
                block_durations: config.block_durations(),
                started: Instant::now(),
                last_view: parking_lot::Mutex::new((Instant::now(), 0)),
                door: Arc::default(),
                tenant_limits: Arc::default(),
                rate_limit_status: config.rate_limit_status(),
                admin_api: config.web_enable_admin_api,
                rules,
                rule_sets,
                alert_relabel,
                lifecycle: config.web_enable_lifecycle,
                tenants,
                db,
                query,
                limits: config.label_limits(),
                v2: V2Options {
                    limits: config.label_limits(),
                    relabel: Relabel::default(),
                    created_timestamp_zero_ingestion: config.created_timestamp_zero_ingestion,
                },
                ha: config.ha(),
                max_body_bytes: config.max_body_bytes,
                max_decompressed_bytes: config.max_decompressed_bytes,
                max_form_bytes: config.query_max_form_bytes,
                max_response_bytes: config.query_max_response_bytes,
                request_timeout: config.request_timeout,
            }),
        }
    }

    /// The rule groups of `--rule-files`.
    pub fn rules(&self) -> Arc<crate::rules::Rules> {
        Arc::clone(&self.inner.rules)
    }

    /// Every set of rules in force, by tenant.
    pub fn rule_sets(&self) -> Arc<crate::rules::RuleSets> {
        Arc::clone(&self.inner.rule_sets)
    }

    /// The alert relabelling in force, shared by every set's notifier.
    pub fn alert_relabel(&self) -> crate::rules::notifier::AlertRelabel {
        Arc::clone(&self.inner.alert_relabel)
    }

    /// Now, in Unix milliseconds, by the state's clock.
    pub fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The clock, for background tasks.
    pub fn clock(&self) -> Clock {
        self.inner.clock.clone()
    }

    /// Refuses a write to `tenant` while its WAL cannot take it (its disk
    /// is full, or it failed for good), or while every tenant's databases,
    /// with the OTLP delta totals kept for them, are at the memory
    /// high-water mark.
    pub(crate) fn check_writable(
        &self,
        tenant: &Tenant,
        protocol: &'static str,
    ) -> Result<(), ApiError> {
        tenant.db.admit_write().map_err(|refused| {
            self.inner.metrics.record_throttled(protocol);
            ApiError::from(refused)
        })?;
        let others = self.inner.tenants.held_bytes_except(&tenant.id);
        tenant
            .db
            .check_memory(tenant.otlp.delta.bytes() + others)
            .map_err(|full| {
                self.inner.metrics.record_throttled(protocol);
                ApiError::from(full)
            })
    }

    /// Every tenant's database.
    pub fn tenants(&self) -> &Tenants {
        &self.inner.tenants
    }

    /// The root database (the tenant `anonymous`).
    pub fn db(&self) -> &Db {
        &self.inner.db
    }

    /// A shared handle to the database, for work moved off the async
    /// threads.
    pub fn db_arc(&self) -> Arc<Db> {
        Arc::clone(&self.inner.db)
    }

    /// Default limits of queries.
    pub fn query_options(&self) -> &QueryOptions {
        &self.inner.query
    }

    /// Largest form body of a query API request.
    pub(crate) fn max_form_bytes(&self) -> usize {
        self.inner.max_form_bytes
    }

    /// Largest answer of the query API and federation.
    pub(crate) fn max_response_bytes(&self) -> usize {
        self.inner.max_response_bytes
    }

    /// Runs read work (`work` gets a stop flag) on a query slot, within
    /// `timeout`.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        timeout: std::time::Duration,
        work: impl FnOnce(Arc<std::sync::atomic::AtomicBool>) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.inner.slots.run(timeout, work).await
    }

    /// Stops running queries and refuses new ones: the server is shutting
    /// down.
    pub fn close_reads(&self) {
        self.inner.slots.close();
    }

    /// Metric metadata reported by senders (to the root database).
    pub fn metadata(&self) -> &MetadataStore {
        self.inner.db.metadata()
    }

    /// Exemplars reported by senders (to the root database).
    pub fn exemplars(&self) -> &ExemplarStore {
        self.inner.db.exemplars()
    }
}

/// What one write to a tenant is held to.
#[derive(Debug)]
pub(super) struct WriteRules {
    /// Its rate and series limits.
    pub(super) limits: TenantLimits,
    /// The label limits of its series.
    pub(super) labels: LabelLimits,
    /// The relabel rules its series pass through.
    pub(super) relabel: Relabel,
    /// How its HA pairs are deduplicated, if they are.
    pub(super) ha: Option<HaConfig>,
}

impl AppState {
    /// `tenant`'s limits in force for one write: its series limit set on
    /// its database, the label limits of its series, and the relabel
    /// rules they pass through.
    pub(super) fn write_limits(&self, tenant: &Tenant) -> WriteRules {
        let in_force = self.inner.tenant_limits.current();
        let limits = in_force.limits(&tenant.id);
        let relabel = self.inner.tenant_limits.relabel(&in_force, &tenant.id);
        let (enabled, flags) = &self.inner.ha;
        let ha = in_force.ha(&tenant.id).resolve(*enabled, flags);
        let series = usize::try_from(limits.max_global_series_per_user).unwrap_or(usize::MAX);
        let series = (series > 0).then_some(series);
        if series.unwrap_or(tenant.db.default_max_series()) != tenant.db.max_series() {
            tenant.db.set_max_series(series);
        }
        tenant.db.set_max_series_per_metric(
            usize::try_from(limits.max_global_series_per_metric).unwrap_or(usize::MAX),
        );
        tenant.db.set_ooo_window(
            limits
                .out_of_order_time_window
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        );
        tenant.db.set_max_exemplars(
            limits
                .max_global_exemplars_per_user
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        );
        let mut labels = self.inner.limits;
        if limits.max_label_names_per_series > 0 {
            labels.max_labels =
                usize::try_from(limits.max_label_names_per_series).unwrap_or(usize::MAX);
        }
        WriteRules {
            limits,
            labels,
            relabel,
            ha,
        }
    }

    /// Refuses a write to `tenant` before its body is decoded while its
    /// rate limit has no token left: a tenant far over its rate costs
    /// little more than reading its requests.
    pub(super) fn check_rate_open(
        &self,
        tenant: &Tenant,
        limits: &TenantLimits,
        protocol: &'static str,
    ) -> Result<(), ApiError> {
        let checked = tenant.bucket.lock().check_open(limits, Instant::now());
        checked.map_err(|refused| {
            self.inner.metrics.record_rate_limited(protocol);
            tenant.stats.record_rate_limited();
            self.rate_refusal(tenant, refused)
        })
    }

    /// Takes `samples` from `tenant`'s rate limit, or the refusal.
    pub(super) fn take_rate(
        &self,
        tenant: &Tenant,
        limits: &TenantLimits,
        samples: u64,
    ) -> Result<(), ApiError> {
        tenant
            .bucket
            .lock()
            .take(samples, limits, Instant::now())
            .map_err(|refused| self.rate_refusal(tenant, refused))
            .inspect_err(|_| tenant.stats.record_rate_limited())
    }

    /// The answer to a write refused by `tenant`'s rate limit.
    pub(super) fn rate_refusal(
        &self,
        tenant: &Tenant,
        refused: super::bucket::RateRefusal,
    ) -> ApiError {
        use super::bucket::RateRefusal;
        let message = refused.message(tenant.id.as_str());
        match refused {
            RateRefusal::TooLarge { .. } => ApiError::BadRequest(message),
            RateRefusal::Wait { wait_secs, .. } => ApiError::RateLimited {
                message,
                retry_after: wait_secs,
                status: self.inner.rate_limit_status,
            },
        }
    }

    /// The body of a write request, or the error that says why it could
    /// not be read (413 over `--max-body-bytes`).
    pub(super) fn write_body(
        &self,
        body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
    ) -> Result<axum::body::Bytes, ApiError> {
        body.map_err(|e| match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::TooLarge(format!(
                "request body is larger than the limit of {} bytes (max-body-bytes)",
                self.inner.max_body_bytes
            )),
            _ => ApiError::BadRequest(format!("cannot read request body: {e}")),
        })
    }
}
