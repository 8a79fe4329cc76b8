//! The one typed configuration tree. Every field has a default that works on
//! a laptop; a config file (YAML or TOML) uses the same kebab-case keys as
//! the command-line flags. The library never reads the environment or argv.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::forward::Destination;
use crate::ingest::otlp::names::Translation;
use crate::ingest::otlp::OtlpOptions;
use crate::ingest::validate::{LabelLimits, NameValidation};
use crate::promql::guard::ParseLimits;
use crate::promql::QueryOptions;
use crate::storage::{DbOptions, Durability, HeadOptions};
use crate::wal::commit::FsyncMode;
use crate::wal::{Repair, WalOptions};

pub mod runtime;
pub mod web;

/// Prometheus' experimental PromQL functions and aggregations.
pub const EXPERIMENTAL_FUNCTIONS: &str = "promql-experimental-functions";

/// Duration expressions in ranges, steps and offsets; on by default as in
/// Prometheus v3.14, the name accepted for configurations written for
/// older versions.
pub const DURATION_EXPR: &str = "promql-duration-expr";

/// `fill()`, `fill_left()`, `fill_right()` on binary operators.
pub const BINOP_FILL_MODIFIERS: &str = "promql-binop-fill-modifiers";

/// `anchored` and `smoothed` on range and instant selectors.
pub const EXTENDED_RANGE_SELECTORS: &str = "promql-extended-range-selectors";

/// Names dropped by functions and operators kept to the end of the query.
pub const DELAYED_NAME_REMOVAL: &str = "promql-delayed-name-removal";

/// Start times sent with samples kept (remote write 2.0, OTLP).
pub const ST_STORAGE: &str = "st-storage";

/// `rate`, `increase`, `irate`, `resets` and `start_timestamp()` read the
/// start times kept.
pub const USE_START_TIMESTAMPS: &str = "use-start-timestamps";

/// The features `--enable-feature` may name.
pub const FEATURES: [&str; 7] = [
    EXPERIMENTAL_FUNCTIONS,
    DURATION_EXPR,
    BINOP_FILL_MODIFIERS,
    EXTENDED_RANGE_SELECTORS,
    DELAYED_NAME_REMOVAL,
    ST_STORAGE,
    USE_START_TIMESTAMPS,
];

/// The largest disk reserve the WAL may hold (`wal-reserve-bytes`).
const MAX_WAL_RESERVE_BYTES: u64 = 1 << 30;

/// Declares every setting once: its documentation (the `--help` text),
/// its type, its default and its flag. From that list come [`Config`] (the
/// typed tree, read from a file with the flag names as keys), its
/// `Default`, and [`Flags`] (the command line, each flag an override).
macro_rules! settings {
    ($(
        $(#[doc = $doc:literal])*
        $(#[serde($($serde:tt)*)])?
        #[arg($($arg:tt)*)]
        $name:ident: $ty:ty = $default:expr;
    )*) => {
        /// Sluice's configuration.
        #[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
        #[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
        pub struct Config {
            $(
                $(#[doc = $doc])*
                $(#[serde($($serde)*)])?
                pub $name: $ty,
            )*
        }

        impl Default for Config {
            fn default() -> Self {
                Self { $($name: $default,)* }
            }
        }

        /// The settings as command-line flags: each one given overrides the
        /// config file, which overrides the defaults.
        #[derive(Debug, Default, clap::Args)]
        pub struct Flags {
            $(
                $(#[doc = $doc])*
                #[arg(long, $($arg)*)]
                pub $name: Option<$ty>,
            )*
        }

        impl Flags {
            /// Sets in `config` every setting given as a flag.
            pub fn apply(self, config: &mut Config) {
                $(
                    if let Some(v) = self.$name {
                        config.$name = v;
                    }
                )*
            }
        }
    };
}

settings! {
    /// Address to listen on for HTTP [default: 127.0.0.1:9201].
    #[arg(value_name = "ADDR")]
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9201));
    /// Prometheus' web configuration file (as --web.config.file): https
    /// (tls_server_config), response headers (http_server_config) and
    /// logins (basic_auth_users with bcrypt hashes). Read again on SIGHUP
    /// and when it or a file it names changes; a bad file then keeps the
    /// one in force. Empty: plain http, no logins [default: none].
    #[serde(alias = "web.config.file")]
    #[arg(value_name = "FILE", visible_alias = "web.config.file")]
    web_config_file: PathBuf = PathBuf::new();
    /// Serve Prometheus' admin API (as --web.enable-admin-api):
    /// `POST /api/v1/admin/tsdb/snapshot` hard-links the blocks and writes
    /// the head as a block under <data-dir>/snapshots/; `delete_series`
    /// deletes series from the head and the blocks; `clean_tombstones`
    /// writes the blocks again without what was deleted. Off, the admin
    /// endpoints answer 500 `admin APIs disabled`, as Prometheus'
    /// [default: false].
    #[serde(alias = "web.enable-admin-api")]
    #[arg(
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL",
        visible_alias = "web.enable-admin-api"
    )]
    web_enable_admin_api: bool = false;
    /// Serve `POST /-/reload` (as Prometheus' --web.enable-lifecycle): the
    /// rule files are read again, as on SIGHUP, and the answer says whether
    /// they loaded. Off, it answers 403 [default: false].
    #[serde(alias = "web.enable-lifecycle")]
    #[arg(
        num_args = 0..=1,
        default_missing_value = "true",
        value_name = "BOOL",
        visible_alias = "web.enable-lifecycle"
    )]
    web_enable_lifecycle: bool = false;
    /// Rule files in Prometheus' format, as globs (repeatable; Prometheus'
    /// rule_files): each group is evaluated on its interval, recording
    /// rules' results stored as any sample, alerting rules' alerts written
    /// as ALERTS and sent to --alertmanager-url. Read again on SIGHUP and when
    /// one changes; a bad file then keeps the rules in force, and at start
    /// stops it. Rules run over the `anonymous` tenant; see
    /// --ruler-storage-local-directory for other tenants' [default: none].
    #[serde(alias = "rule_files")]
    #[arg(value_name = "GLOB")]
    rule_files: Vec<String> = Vec::new();
    /// A directory of rule files per tenant, laid out as Mimir's ruler
    /// reads its local storage (-ruler-storage.local.directory):
    /// <dir>/<tenant>/<namespace>, every file in a tenant's directory a
    /// rule file in Prometheus' format, whose rules run over that tenant's
    /// data, write their results to it and send its alerts with its
    /// tenant header. Without --multitenancy only <dir>/anonymous is read.
    /// Read again on SIGHUP and when a file changes; a tenant's bad file
    /// keeps that tenant's rules in force [default: none].
    #[serde(alias = "ruler-storage.local.directory")]
    #[arg(value_name = "DIR", visible_alias = "ruler-storage.local.directory")]
    ruler_storage_local_directory: PathBuf = PathBuf::new();
    /// A rule group's evaluation interval where it sets none (Prometheus'
    /// global evaluation_interval) [default: 1m].
    #[serde(with = "humantime_serde", alias = "evaluation_interval")]
    #[arg(
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        visible_alias = "rules.evaluation-interval"
    )]
    rules_evaluation_interval: Duration = Duration::from_secs(60);
    /// How far back of its evaluation time a rule group's queries look
    /// where the group sets no query_offset (Prometheus' global
    /// rule_query_offset), for data that arrives late [default: 0s].
    #[serde(with = "humantime_serde", alias = "rule_query_offset")]
    #[arg(
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        visible_alias = "rules.query-offset"
    )]
    rules_query_offset: Duration = Duration::ZERO;
    /// Alertmanagers that alerts go to, as URLs (repeatable; as
    /// Prometheus' alertmanager_configs): POST <url>/api/v2/alerts
    /// [default: none].
    #[serde(alias = "alertmanager.url")]
    #[arg(value_name = "URL", visible_alias = "alertmanager.url")]
    alertmanager_url: Vec<String> = Vec::new();
    /// A YAML list of Prometheus relabel_configs the alerts pass through
    /// before they are sent, after the external labels are added (as
    /// Prometheus' alerting.alert_relabel_configs); an alert they drop is
    /// not sent. Read again on SIGHUP and when it changes; a bad file
    /// then keeps the rules in force, and at start stops it
    /// [default: none].
    #[arg(value_name = "FILE")]
    alert_relabel_config: PathBuf = PathBuf::new();
    /// PEM file of the CAs that sign the https Alertmanagers'
    /// certificates (Prometheus' alertmanager tls_config ca_file); without
    /// it, the system's trust store [default: none].
    #[arg(value_name = "FILE")]
    alertmanager_tls_ca_file: PathBuf = PathBuf::new();
    /// PEM client certificate for mutual TLS with the Alertmanagers
    /// (tls_config cert_file), with --alertmanager-tls-key-file
    /// [default: none].
    #[arg(value_name = "FILE")]
    alertmanager_tls_cert_file: PathBuf = PathBuf::new();
    /// PEM private key of --alertmanager-tls-cert-file (tls_config
    /// key_file) [default: none].
    #[arg(value_name = "FILE")]
    alertmanager_tls_key_file: PathBuf = PathBuf::new();
    /// The name the Alertmanagers' certificates must carry, instead of the
    /// URLs' hosts (tls_config server_name) [default: none].
    #[arg(value_name = "NAME")]
    alertmanager_tls_server_name: String = String::new();
    /// Accept any certificate from the Alertmanagers (tls_config
    /// insecure_skip_verify): anyone on the path can read and change the
    /// alerts [default: false].
    #[arg(value_name = "BOOL")]
    alertmanager_tls_insecure_skip_verify: bool = false;
    /// The user name sent to the Alertmanagers with basic auth (as
    /// Prometheus' alertmanager basic_auth), with
    /// --alertmanager-basic-auth-password-file [default: none].
    #[arg(value_name = "USER")]
    alertmanager_basic_auth_username: String = String::new();
    /// A file whose content (trimmed) is the basic auth password, read at
    /// each send so it can be rotated (basic_auth password_file)
    /// [default: none].
    #[arg(value_name = "FILE")]
    alertmanager_basic_auth_password_file: PathBuf = PathBuf::new();
    /// How long Sluice may have been down for an alert's `for` state to be
    /// restored after a start, from its ALERTS_FOR_STATE series (as
    /// Prometheus' --rules.alert.for-outage-tolerance) [default: 1h].
    #[serde(with = "humantime_serde", alias = "rules.alert.for-outage-tolerance")]
    #[arg(
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        visible_alias = "rules.alert.for-outage-tolerance"
    )]
    rules_alert_for_outage_tolerance: Duration = Duration::from_secs(3600);
    /// The least `for` left to an alert restored after a start (as
    /// Prometheus' --rules.alert.for-grace-period); rules with a shorter
    /// `for` are not restored [default: 10m].
    #[serde(with = "humantime_serde", alias = "rules.alert.for-grace-period")]
    #[arg(
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        visible_alias = "rules.alert.for-grace-period"
    )]
    rules_alert_for_grace_period: Duration = Duration::from_secs(600);
    /// How often an alert still firing is sent to Alertmanager again (as
    /// Prometheus' --rules.alert.resend-delay) [default: 1m].
    #[serde(with = "humantime_serde", alias = "rules.alert.resend-delay")]
    #[arg(
        value_name = "DURATION",
        value_parser = humantime::parse_duration,
        visible_alias = "rules.alert.resend-delay"
    )]
    rules_alert_resend_delay: Duration = Duration::from_secs(60);
    /// The URL Sluice is reached at, for alerts' links (generatorURL) and
    /// templates' $externalURL (as Prometheus' --web.external-url); empty:
    /// http://<host name>:<--listen port> [default: none].
    #[serde(alias = "web.external-url")]
    #[arg(value_name = "URL", visible_alias = "web.external-url")]
    web_external_url: String = String::new();
    /// Keep each tenant's data apart, named by --tenant-header on every
    /// request (Mimir's multitenancy): each tenant is its own database
    /// under <data-dir>/tenants/<id>/, and a request without a tenant gets
    /// 401. Off, every request is the tenant `anonymous`, stored at the
    /// top of --data-dir as before [default: false].
    #[arg(value_name = "BOOL")]
    multitenancy: bool = false;
    /// The header that names a request's tenant [default: X-Scope-OrgID].
    #[arg(value_name = "NAME")]
    tenant_header: String = "X-Scope-OrgID".to_owned();
    /// Most tenants open at once, `anonymous` included; a new tenant's
    /// writes past it get 503 [default: 1000].
    #[arg(value_name = "N")]
    max_tenants: usize = 1000;
    /// Let a read name several tenants, `a|b` (Mimir's tenant
    /// federation): the answer is their union, each series labelled
    /// __tenant_id__ with its tenant, and matchers on __tenant_id__ choose
    /// the tenants read. The login must be allowed to read each one
    /// [default: false].
    #[serde(alias = "tenant-federation.enabled")]
    #[arg(value_name = "BOOL", visible_alias = "tenant-federation.enabled")]
    tenant_federation_enabled: bool = false;
    /// Most tenants one federated read may name; 0: no limit
    /// [default: 0].
    #[serde(alias = "tenant-federation.max-tenants")]
    #[arg(value_name = "N", visible_alias = "tenant-federation.max-tenants")]
    tenant_federation_max_tenants: usize = 0;
    /// Mimir's runtime configuration file: per-tenant limits (limits:
    /// and overrides:, under Mimir's names: ingestion_rate,
    /// ingestion_burst_size, max_global_series_per_user,
    /// max_global_series_per_metric, max_label_names_per_series,
    /// max_global_exemplars_per_user, max_query_samples,
    /// max_query_concurrency) and which logins may
    /// use which tenants (identities:). Read again on SIGHUP and when it
    /// changes; a bad file then keeps the one in force. Empty: no limits
    /// but the flags', any login may use any tenant [default: none].
    #[serde(alias = "runtime-config.file")]
    #[arg(value_name = "FILE", visible_alias = "runtime-config.file")]
    runtime_config_file: PathBuf = PathBuf::new();
    /// A YAML list of Prometheus relabel_configs (every action Prometheus
    /// 3.5.3 has) applied to every series as it arrives, before the
    /// tenant's own metric_relabel_configs from the runtime configuration
    /// file; a series they drop is answered 2xx and counted in
    /// sluice_dropped_samples_total{reason="relabel"}. Read again on
    /// SIGHUP and when it changes; a bad file then keeps the rules in
    /// force. Empty: no rules [default: none].
    #[arg(value_name = "FILE")]
    ingest_relabel_config: PathBuf = PathBuf::new();
    /// Take samples older than their series' newest when they are at
    /// most this far behind the newest sample of the head, as Prometheus'
    /// storage.tsdb.out_of_order_time_window (Mimir's
    /// out_of_order_time_window, also per tenant in the runtime
    /// configuration file); older ones are out_of_bounds. They are logged
    /// like any sample, merged into queries and into the blocks cut, and
    /// counted in sluice_out_of_order_samples_total. Samples older than the
    /// last block cut are out_of_bounds whatever the window. 0: refused as
    /// out_of_order [default: 0s].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    out_of_order_time_window: Duration = Duration::ZERO;
    /// Deduplicate HA pairs, as Mimir's HA tracker: of the Prometheus
    /// servers writing with the same cluster label and different replica
    /// labels (from their external_labels), one is elected per cluster;
    /// the others' requests are answered 202 and not stored, and the
    /// replica label is removed from what is stored. Per tenant:
    /// accept_ha_samples in the runtime configuration file
    /// [default: false].
    #[serde(alias = "distributor.ha-tracker.enable")]
    #[arg(value_name = "BOOL", visible_alias = "distributor.ha-tracker.enable")]
    ha_tracker: bool = false;
    /// The label naming a request's cluster (checked in its first series);
    /// per tenant: ha_cluster_label [default: cluster].
    #[arg(value_name = "NAME")]
    ha_cluster_label: String = "cluster".to_owned();
    /// The label naming a request's replica, removed before storage; per
    /// tenant: ha_replica_label [default: __replica__].
    #[arg(value_name = "NAME")]
    ha_replica_label: String = "__replica__".to_owned();
    /// How long the elected replica of a cluster may send nothing before
    /// the next replica that writes is elected [default: 30s].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    ha_failover_timeout: Duration = Duration::from_secs(30);
    /// Most HA clusters tracked per tenant; a request naming one more is
    /// refused (400, too_many_ha_clusters); per tenant: ha_max_clusters
    /// [default: 100].
    #[arg(value_name = "N")]
    ha_max_clusters: usize = 100;
    /// The status of a write refused by its tenant's ingestion rate limit:
    /// 503 (every sender retries it) or 429 (for senders set up to retry
    /// it, as Prometheus with retry_on_http_429) [default: 503].
    #[arg(value_name = "STATUS")]
    rate_limit_status: u16 = 503;
    /// Directory for durable data: the write-ahead log (wal/) and
    /// checkpoints [default: ./data].
    #[arg(value_name = "DIR")]
    data_dir: PathBuf = PathBuf::from("./data");
    /// Largest request body, as sent (compressed); larger bodies get 413
    /// [default: 16777216].
    #[arg(value_name = "BYTES")]
    max_body_bytes: usize = 16 << 20;
    /// Largest request body after decompression, read from the snappy header
    /// before anything is allocated; larger bodies get 413 [default: 33554432].
    #[arg(value_name = "BYTES")]
    max_decompressed_bytes: usize = 32 << 20;
    /// Most labels per series, __name__ included; series with more are
    /// rejected (400) [default: 64].
    #[arg(value_name = "N")]
    max_labels_per_series: usize = 64;
    /// Longest label name in bytes [default: 1024].
    #[arg(value_name = "BYTES")]
    max_label_name_length: usize = 1024;
    /// Longest label value in bytes [default: 4096].
    #[arg(value_name = "BYTES")]
    max_label_value_length: usize = 4096;
    /// Which metric and label names ingest accepts: utf8 (any UTF-8 name,
    /// Prometheus 3's default; query them as {"http.server.duration"}) or
    /// legacy ([a-zA-Z_:][a-zA-Z0-9_:]* and [a-zA-Z_][a-zA-Z0-9_]*)
    /// [default: utf8].
    #[arg(value_name = "SCHEME", value_parser = crate::config::name_validation_parser())]
    metric_name_validation_scheme: NameValidation = NameValidation::Utf8;
    /// Most series held in memory; samples for new series beyond it are
    /// rejected (400, reason series_limit) [default: 10000000].
    #[arg(value_name = "N")]
    max_series: usize = 10_000_000;
    /// Log filter: error, warn, info, debug, trace, or tracing directives
    /// such as `sluice=debug,tower_http=debug` [default: info].
    #[arg(value_name = "FILTER")]
    log_level: String = "info".to_owned();
    /// Longest time one request other than a query may take before it is
    /// answered 503, e.g. 30s or 2m; queries have --query-timeout
    /// [default: 30s].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    request_timeout: Duration = Duration::from_secs(30);
    /// Most HTTP connections open at once; further ones wait in the
    /// kernel's backlog until one closes [default: 4096].
    #[arg(value_name = "N")]
    http_max_connections: usize = 4096;
    /// Longest wait for a request's headers (slow or stalled clients); a
    /// keep-alive connection idle this long is closed too [default: 30s].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    http_header_read_timeout: Duration = Duration::from_secs(30);
    /// Largest request head (request line, URL and headers) in bytes;
    /// larger ones get 431 [default: 1048576].
    #[arg(value_name = "BYTES")]
    http_max_header_bytes: usize = 1 << 20;
    /// On SIGTERM, longest wait for requests in flight before the last
    /// checkpoint is written and the process exits (running queries are
    /// canceled at once) [default: 30s].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration = Duration::from_secs(30);
    /// Head shards, each with its own lock; 0 picks 4x the CPU count [default: 0].
    #[arg(value_name = "N")]
    head_shards: usize = 0;
    /// Most metric families whose metadata (type, help, unit from remote
    /// write) is kept for /api/v1/metadata [default: 100000].
    #[arg(value_name = "N")]
    max_metadata_families: usize = 100_000;
    /// Most bytes of metadata text kept in all (help texts are cut at
    /// 4096 bytes, units at 256); they count toward --max-memory
    /// [default: 67108864].
    #[arg(value_name = "BYTES")]
    max_metadata_bytes: usize = 64 << 20;
    /// Most exemplars kept, over all series, in one ring (the newest
    /// replace the oldest), as Prometheus' exemplars-limit; 0 keeps none
    /// [default: 100000].
    #[arg(value_name = "N")]
    max_exemplars: usize = 100_000;
    /// Longest a query may run before it fails with errorType timeout
    /// [default: 2m].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    query_timeout: Duration = Duration::from_secs(120);
    /// Most samples one query may hold at once (selections decoded whole,
    /// the series being decoded, subquery steps and the answer, counted as
    /// they are taken) before it fails with 422, as Prometheus'
    /// --query.max-samples [default: 50000000].
    #[arg(value_name = "N")]
    query_max_samples: usize = 50_000_000;
    /// Most memory the samples one query loads and makes may take, e.g.
    /// 512MiB; past it the query fails with 422. 0 picks an eighth of the
    /// memory limit (--max-memory). All running queries together hold at
    /// most a quarter of it (or this, if larger); a query that would pass
    /// that is answered 503 with Retry-After [default: 0].
    #[arg(value_name = "BYTES", value_parser = parse_bytes)]
    query_max_memory: u64 = 0;
    /// How far back an instant selector looks for a sample; queries may
    /// override it with lookback_delta [default: 5m].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    query_lookback_delta: Duration = Duration::from_secs(300);
    /// Longest query text in bytes, for queries and match[] selectors;
    /// longer ones get 400 bad_data [default: 262144].
    #[arg(value_name = "BYTES")]
    query_max_length: usize = ParseLimits::default().max_length;
    /// Deepest query nesting (brackets, plus operators around any point);
    /// deeper queries get 400 bad_data before they are parsed, so that no
    /// query can exhaust a thread's stack [default: 1000].
    #[arg(value_name = "N")]
    query_max_depth: usize = ParseLimits::default().max_depth;
    /// Most bytes of label values one label_replace or label_join call may
    /// make; past it the query fails with errorType execution
    /// [default: 67108864].
    #[arg(value_name = "BYTES")]
    query_max_label_bytes: usize = QueryOptions::default().max_label_bytes;
    /// Most queries evaluated at once (query API, series, labels, label
    /// values, federate), as Prometheus' --query.max-concurrency; others
    /// wait for a slot up to their timeout [default: 20].
    #[arg(value_name = "N")]
    query_max_concurrency: usize = 20;
    /// Most threads one query works on (its own and helpers, as
    /// VictoriaMetrics' -search.maxWorkersPerQuery): selections of many
    /// series, their decoding and range functions are cut among free
    /// cores. Helpers come from one allowance of this many less one,
    /// shared by all queries, so queries at once add no more than that to
    /// their own threads. 0: the machine's cores; at most 1024
    /// [default: 0].
    #[arg(value_name = "N")]
    query_max_workers_per_query: usize = 0;
    /// How the threads that run queries share the cores with ingest:
    /// `idle` (Linux's SCHED_IDLE: they run on the CPU time writes and
    /// upkeep leave, so a dashboard's queries do not hold up remote
    /// write; queries slow down while the cores are busy with writes) or
    /// `normal` (evenly) [default: idle].
    #[arg(value_name = "CLASS")]
    query_thread_priority: QueryThreadPriority = QueryThreadPriority::Idle;
    /// Largest form-encoded POST body of the query API (query, series,
    /// labels, federate …), as Go's ParseForm caps it for Prometheus;
    /// larger ones get 400 bad_data [default: 10485760].
    #[arg(value_name = "BYTES")]
    query_max_form_bytes: usize = 10 << 20;
    /// Largest answer of the query API and /federate; a query whose answer
    /// would be larger gets 422 execution instead [default: 536870912].
    #[arg(value_name = "BYTES")]
    query_max_response_bytes: usize = 512 << 20;
    /// Features that are off by default, comma-separated, as Prometheus'
    /// flag of that name: `promql-experimental-functions` (limitk,
    /// limit_ratio, mad_over_time, sort_by_label, sort_by_label_desc,
    /// double_exponential_smoothing, ts_of_*_over_time, histogram_quantiles,
    /// info, start, end, range, step, min_of, max_of, start_timestamp);
    /// `promql-duration-expr` (on already: `rate(x[5m * 2])`,
    /// `offset (1h + step())`); `promql-binop-fill-modifiers`
    /// (`a + fill(0) b`, `fill_left`, `fill_right`);
    /// `promql-extended-range-selectors` (`rate(x[5m] anchored)`,
    /// `increase(x[5m] smoothed)`, `x smoothed`);
    /// `promql-delayed-name-removal` (names that functions and operators
    /// drop stay until the query ends, for `label_replace` and
    /// `by (__name__)`); `st-storage` (keep the start times remote write
    /// 2.0 and OTLP send with samples); `use-start-timestamps` (`rate`,
    /// `increase`, `irate` and `resets` use them: a start time after the
    /// previous sample is a reset, and a counter whose start falls in the
    /// range counts from zero there) [default: none].
    #[arg(value_name = "FEATURES", value_delimiter = ',')]
    enable_feature: Vec<String> = Vec::new();
    /// Which Prometheus release PromQL answers as where releases disagree:
    /// 3.5 (Prometheus 3.5.3) or 3.14 (v3.14: custom-bucket histograms with
    /// different bounds reconciled, histogram extrapolation that stops at a
    /// zero count, histogram_fraction inside the first classic bucket,
    /// conflicting counter reset warnings) [default: 3.5].
    #[arg(value_name = "VERSION")]
    promql_compatibility: crate::promql::Compat = crate::promql::Compat::V3_5;
    /// Labels naming this Sluice to the systems it feeds, `name=value`,
    /// comma-separated, as Prometheus' `global.external_labels`; served in
    /// /api/v1/status/config, where the Thanos sidecar reads them
    /// [default: none].
    #[arg(value_name = "NAME=VALUE", value_delimiter = ',')]
    external_labels: Vec<String> = Vec::new();
    /// OTLP resource attributes that become labels on every series of the
    /// resource, comma-separated, e.g. `deployment.environment,k8s.pod.name`
    /// (the rest go to target_info) [default: none].
    #[arg(value_name = "ATTRS", value_delimiter = ',')]
    otlp_promote_resource_attributes: Vec<String> = Vec::new();
    /// Store a zero sample at a remote-write 2.0 series' start (created)
    /// timestamp when that is before its first sample and newer than what
    /// the series holds, as Prometheus' created-timestamp-zero-ingestion
    /// [default: off].
    #[arg(num_args = 0..=1, default_missing_value = "true")]
    created_timestamp_zero_ingestion: bool = false;
    /// How OTLP metric names and attribute keys become Prometheus names, as
    /// Prometheus' OTLP translation_strategy: UnderscoreEscapingWithSuffixes
    /// (http_server_duration_seconds), NoUTF8EscapingWithSuffixes
    /// (http.server.duration_seconds, needs utf8 name validation) or
    /// NoTranslation (http.server.duration) [default:
    /// UnderscoreEscapingWithSuffixes].
    #[arg(value_name = "STRATEGY")]
    otlp_translation_strategy: Translation = Translation::UnderscoreEscapingWithSuffixes;
    /// Store OTLP delta sums and histograms as running totals (cumulative),
    /// kept in memory per series, instead of refusing them [default: off].
    #[arg(num_args = 0..=1, default_missing_value = "true")]
    otlp_delta_to_cumulative: bool = false;
    /// Store OTLP exponential histograms as classic `_bucket`/`_sum`/`_count`
    /// series (one series per bucket, a new set whenever the SDK rescales)
    /// instead of native histograms, for dashboards written against
    /// classic buckets [default: false].
    #[arg(num_args = 0..=1, default_missing_value = "true")]
    otlp_exponential_histograms_as_classic: bool = false;
    /// When a write is acknowledged: `always` (after its WAL records are
    /// fsynced; concurrent writes share one fsync) or `interval=<duration>`
    /// (once written; fsynced at least that often, so a crash of the machine
    /// can lose up to that much acknowledged data) [default: always].
    #[arg(value_name = "MODE")]
    wal_fsync: WalFsync = WalFsync::Always;
    /// Size at which a WAL segment file is closed and the next started
    /// [default: 134217728].
    #[arg(value_name = "BYTES")]
    wal_segment_bytes: u64 = 128 << 20;
    /// Disk space the WAL holds back in `<data-dir>/wal.reserve`, e.g.
    /// 16MiB: when the disk fills, it is given up so that writes already
    /// taken reach the log and are acknowledged, and new writes get 503
    /// with Retry-After until it can be held again (space has returned).
    /// 0 holds none; at most 1GiB [default: 8388608].
    #[arg(value_name = "BYTES", value_parser = parse_bytes)]
    wal_reserve_bytes: u64 = 8 << 20;
    /// If the WAL is corrupt in the middle (not just a torn last write),
    /// drop everything from the bad record on and start, instead of
    /// refusing to start [default: off].
    #[arg(num_args = 0..=1, default_missing_value = "true")]
    wal_repair: bool = false;
    /// Run without a write-ahead log: nothing survives a restart
    /// [default: off].
    #[arg(num_args = 0..=1, default_missing_value = "true")]
    wal_disabled: bool = false;
    /// Longest time between checkpoints of the head, after which the WAL
    /// segments they cover are deleted; a busy WAL checkpoints sooner (once
    /// it outgrows 256 MiB and the last checkpoint) [default: 30m].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    checkpoint_interval: Duration = Duration::from_secs(30 * 60);
    /// How long samples are kept: older chunks are dropped and series with
    /// no newer sample removed, e.g. 15d or 12h [default: 15days].
    #[serde(with = "humantime_serde")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration)]
    retention: Duration = Duration::from_secs(15 * 24 * 3600);
    /// Time range of the blocks the head cuts, and of its chunks: the head
    /// writes its oldest range to disk once it spans 1.5 of them, as
    /// Prometheus' --storage.tsdb.min-block-duration [default: 2h].
    #[serde(with = "humantime_serde", alias = "storage.tsdb.min-block-duration")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration, visible_aliases = ["storage.tsdb.min-block-duration", "storage.min-block-duration"])]
    storage_min_block_duration: Duration = Duration::from_secs(2 * 3600);
    /// Largest block compaction makes from the head's blocks (ranges step
    /// by 3 from the minimum); equal to the minimum turns compaction off,
    /// which the Thanos sidecar needs. 0 picks Prometheus' default: 10% of
    /// the retention, at most 31d, as --storage.tsdb.max-block-duration
    /// [default: 0].
    #[serde(with = "humantime_serde", alias = "storage.tsdb.max-block-duration")]
    #[arg(value_name = "DURATION", value_parser = humantime::parse_duration, visible_aliases = ["storage.tsdb.max-block-duration", "storage.max-block-duration"])]
    storage_max_block_duration: Duration = Duration::ZERO;
    /// Memory the head may use, e.g. 4GiB or 512MB; writes get 503 with
    /// Retry-After once the head reaches 80% of it, and queries keep
    /// working. 0 picks 60% of the machine's or cgroup's memory [default: 0].
    #[arg(value_name = "BYTES", value_parser = parse_bytes)]
    max_memory: u64 = 0;
    /// A remote-write receiver to hand every accepted sample on to
    /// (repeatable): `URL[,key=value…]` with the keys name, protocol
    /// (remote-write-1 or remote-write-2), header=Name:Value, basic-auth-username,
    /// basic-auth-password, basic-auth-password-file, bearer-token,
    /// bearer-token-file, timeout, max-samples-per-send,
    /// batch-send-deadline, shards (fixed), min-shards, max-shards, and for
    /// https tls-ca-file, tls-cert-file, tls-key-file, tls-server-name and
    /// tls-insecure-skip-verify; with multitenancy tenant-header (e.g.
    /// X-Scope-OrgID, set to each sample's tenant) and/or tenants=a|b (only
    /// those tenants' samples); in a config file, a list of maps with the
    /// same keys (TLS under tls_config, as Prometheus). Needs the WAL
    /// [default: none].
    #[arg(value_name = "DESTINATION")]
    forward: Vec<Destination> = Vec::new();
    /// Most WAL bytes kept for a forward destination that is behind; past
    /// it the oldest unsent segments are given up and counted in
    /// sluice_forward_samples_dropped_total [default: 2147483648].
    #[arg(value_name = "BYTES", value_parser = parse_bytes)]
    forward_max_lag_bytes: u64 = 2 << 30;
    /// Spread series over the forward destinations by a hash of their
    /// labels, each series to one of them (or to
    /// forward-shard-by-series-replicas of them), instead of sending
    /// everything to each [default: false].
    #[arg(value_name = "BOOL")]
    forward_shard_by_series: bool = false;
    /// With forward-shard-by-series, how many destinations take each series
    /// [default: 1].
    #[arg(value_name = "N")]
    forward_shard_by_series_replicas: usize = 1;
}

/// Parses a byte size: a number with an optional unit, `k`/`KB` (1000),
/// `KiB` (1024), up to `T`/`TiB`, e.g. `512MiB` or `2GB`.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?}: expected e.g. 512MiB, 2GB or 1048576"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        u => return Err(format!("invalid size {s:?}: unknown unit {u:?}")),
    };
    Ok((n * mult as f64) as u64)
}

/// The `query-thread-priority` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum QueryThreadPriority {
    /// Linux's idle scheduling class.
    Idle,
    /// The default class, as every other thread.
    Normal,
}

impl std::str::FromStr for QueryThreadPriority {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "idle" => Ok(Self::Idle),
            "normal" => Ok(Self::Normal),
            _ => Err(format!(
                "invalid query-thread-priority {s:?}: use idle or normal"
            )),
        }
    }
}

impl From<QueryThreadPriority> for String {
    fn from(p: QueryThreadPriority) -> String {
        match p {
            QueryThreadPriority::Idle => "idle".to_owned(),
            QueryThreadPriority::Normal => "normal".to_owned(),
        }
    }
}

impl TryFrom<String> for QueryThreadPriority {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// The `wal-fsync` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum WalFsync {
    /// Acknowledge after fsync.
    Always,
    /// Acknowledge after the write; fsync at least this often.
    Interval(Duration),
}

impl std::str::FromStr for WalFsync {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "always" {
            return Ok(Self::Always);
        }
        let bad = || {
            format!("invalid wal-fsync {s:?}: use always or interval=<duration>, e.g. interval=1s")
        };
        let d = s.strip_prefix("interval=").ok_or_else(bad)?;
        let d = humantime::parse_duration(d).map_err(|_| bad())?;
        if d.is_zero() {
            return Err(bad());
        }
        Ok(Self::Interval(d))
    }
}

impl From<WalFsync> for String {
    fn from(w: WalFsync) -> String {
        match w {
            WalFsync::Always => "always".to_owned(),
            WalFsync::Interval(d) => format!("interval={}", humantime::format_duration(d)),
        }
    }
}

impl TryFrom<String> for WalFsync {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl WalFsync {
    fn mode(self) -> FsyncMode {
        match self {
            Self::Always => FsyncMode::Always,
            Self::Interval(d) => FsyncMode::Interval(d),
        }
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML or TOML for this tree.
    #[error("invalid config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Reads a YAML (`.yml`/`.yaml`) or TOML (`.toml`) file; missing keys
    /// keep their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let parsed = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => toml::from_str(&text).map_err(|e| e.to_string()),
            _ => serde_yaml_ng::from_str(&text).map_err(|e| e.to_string()),
        };
        parsed.map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Checks ranges that the types cannot express.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("max-body-bytes", self.max_body_bytes),
            ("max-decompressed-bytes", self.max_decompressed_bytes),
            ("max-labels-per-series", self.max_labels_per_series),
            ("max-label-name-length", self.max_label_name_length),
            ("max-label-value-length", self.max_label_value_length),
            ("max-series", self.max_series),
            ("query-max-length", self.query_max_length),
            ("query-max-depth", self.query_max_depth),
            ("query-max-concurrency", self.query_max_concurrency),
            ("query-max-form-bytes", self.query_max_form_bytes),
            ("query-max-response-bytes", self.query_max_response_bytes),
            ("max-tenants", self.max_tenants),
            ("http-max-connections", self.http_max_connections),
            ("http-max-header-bytes", self.http_max_header_bytes),
            (
                "wal-segment-bytes",
                usize::try_from(self.wal_segment_bytes).unwrap_or(usize::MAX),
            ),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be greater than 0"
                )));
            }
        }
        for url in &self.alertmanager_url {
            let host = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .unwrap_or_default();
            if host.is_empty() || host.starts_with('/') {
                return Err(ConfigError::Invalid(format!(
                    "alertmanager-url {url:?}: an http:// or https:// URL with a host"
                )));
            }
            // Its URL is a label of the notification metrics and in logs:
            // no `@` before the query or fragment (a login, whatever it
            // holds).
            let before_query = host.split(['?', '#']).next().unwrap_or_default();
            if before_query.contains('@') {
                return Err(ConfigError::Invalid(format!(
                    "alertmanager-url {:?}: no login in the URL; use --alertmanager-basic-auth-username and --alertmanager-basic-auth-password-file",
                    url.split('@').next_back().unwrap_or_default()
                )));
            }
        }
        let transport = self.alertmanager_transport();
        let any_https = self
            .alertmanager_url
            .iter()
            .any(|u| u.starts_with("https://"));
        if transport.tls.is_set() && !any_https {
            return Err(ConfigError::Invalid(
                "alertmanager-tls-* settings need an https:// alertmanager-url".into(),
            ));
        }
        if any_https {
            transport
                .tls
                .client_config()
                .map_err(|e| ConfigError::Invalid(format!("alertmanager {e}")))?;
        }
        if self.alertmanager_basic_auth_username.is_empty()
            != self
                .alertmanager_basic_auth_password_file
                .as_os_str()
                .is_empty()
        {
            return Err(ConfigError::Invalid(
                "alertmanager-basic-auth-username and alertmanager-basic-auth-password-file go together".into(),
            ));
        }
        if let Some((_, file)) = &transport.basic_auth {
            std::fs::read(file).map_err(|e| {
                ConfigError::Invalid(format!(
                    "alertmanager-basic-auth-password-file {}: {e}",
                    file.display()
                ))
            })?;
        }
        if self.otlp_translation_strategy.keeps_names()
            && self.metric_name_validation_scheme == NameValidation::Legacy
        {
            return Err(ConfigError::Invalid(format!(
                "otlp-translation-strategy {} keeps UTF-8 names, which metric-name-validation-scheme legacy refuses",
                self.otlp_translation_strategy
            )));
        }
        let mut names = std::collections::HashSet::new();
        for d in &self.forward {
            d.validate().map_err(ConfigError::Invalid)?;
            if !names.insert(d.resolved_name()) {
                return Err(ConfigError::Invalid(format!(
                    "two forward destinations are named {:?}; give each a name=",
                    d.resolved_name()
                )));
            }
        }
        if self.forward_shard_by_series
            && !(1..=self.forward.len()).contains(&self.forward_shard_by_series_replicas)
        {
            return Err(ConfigError::Invalid(format!(
                "forward-shard-by-series-replicas must be 1 to the number of forward destinations ({})",
                self.forward.len()
            )));
        }
        if self.forward_max_lag_bytes == 0 {
            return Err(ConfigError::Invalid(
                "forward-max-lag-bytes must be greater than 0".into(),
            ));
        }
        if self.query_max_workers_per_query > MAX_WORKERS_PER_QUERY {
            return Err(ConfigError::Invalid(format!(
                "query-max-workers-per-query must be at most {MAX_WORKERS_PER_QUERY} (0: the machine's cores)"
            )));
        }
        if !self.forward.is_empty() && self.wal_disabled {
            return Err(ConfigError::Invalid(
                "forward reads the WAL, which wal-disabled turns off".into(),
            ));
        }
        for l in &self.external_labels {
            match l.split_once('=') {
                Some((n, _)) if !n.is_empty() => {}
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "external label {l:?} is not name=value"
                    )))
                }
            }
        }
        for f in &self.enable_feature {
            if !FEATURES.contains(&f.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "unknown feature {f:?} in enable-feature; Sluice has: {}",
                    FEATURES.join(", ")
                )));
            }
        }
        if self.retention < Duration::from_secs(60) {
            return Err(ConfigError::Invalid("retention must be at least 1m".into()));
        }
        // Written out in full at start: a mistyped size would fill the
        // disk before a single write.
        if self.wal_reserve_bytes > MAX_WAL_RESERVE_BYTES {
            return Err(ConfigError::Invalid(format!(
                "wal-reserve-bytes must be at most {MAX_WAL_RESERVE_BYTES} (1GiB)"
            )));
        }
        // At most 31 days: the head holds 1.5 of them, and the largest
        // block Prometheus makes by default is 31 days.
        if self.storage_min_block_duration < Duration::from_secs(60)
            || self.storage_min_block_duration > Duration::from_secs(31 * 86_400)
        {
            return Err(ConfigError::Invalid(
                "storage-min-block-duration must be 1m to 31d".into(),
            ));
        }
        if self.storage_max_block_duration > Duration::from_secs(100 * 365 * 86_400) {
            return Err(ConfigError::Invalid(
                "storage-max-block-duration must be at most 100y".into(),
            ));
        }
        if !self.storage_max_block_duration.is_zero()
            && self.storage_max_block_duration < self.storage_min_block_duration
        {
            return Err(ConfigError::Invalid(
                "storage-max-block-duration must be 0 (the default) or at least storage-min-block-duration".into(),
            ));
        }
        if self.checkpoint_interval.is_zero() {
            return Err(ConfigError::Invalid(
                "checkpoint-interval must be greater than 0".into(),
            ));
        }
        if self.http_header_read_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "http-header-read-timeout must be greater than 0".into(),
            ));
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "request-timeout must be greater than 0".into(),
            ));
        }
        if http::HeaderName::from_bytes(self.tenant_header.as_bytes()).is_err() {
            return Err(ConfigError::Invalid(format!(
                "tenant-header {:?} is not a valid HTTP header name",
                self.tenant_header
            )));
        }
        if self.ha_cluster_label.is_empty() || self.ha_replica_label.is_empty() {
            return Err(ConfigError::Invalid(
                "ha-cluster-label and ha-replica-label must name a label".into(),
            ));
        }
        if !matches!(self.rate_limit_status, 429 | 503) {
            return Err(ConfigError::Invalid(format!(
                "rate-limit-status must be 429 or 503, not {}",
                self.rate_limit_status
            )));
        }
        if self.tenant_federation_enabled && !self.multitenancy {
            return Err(ConfigError::Invalid(
                "tenant-federation-enabled needs --multitenancy: without it there is one tenant"
                    .into(),
            ));
        }
        for d in &self.forward {
            let name = d.resolved_name();
            for t in &d.tenants {
                crate::api::tenant::TenantId::parse(t)
                    .map_err(|e| ConfigError::Invalid(format!("forward {name}: tenants: {e}")))?;
            }
            if !self.multitenancy && !d.tenants.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "forward {name}: tenants needs --multitenancy (without it every sample is tenant anonymous)"
                )));
            }
            // Without either, every tenant's samples would arrive mixed
            // into one stream downstream, undoing the separation here.
            if self.multitenancy && d.tenant_header.is_none() && d.tenants.len() != 1 {
                return Err(ConfigError::Invalid(format!(
                    "forward {name}: with multitenancy, set tenant-header (e.g. X-Scope-OrgID: each tenant's samples carry its ID), or bind it to one tenant (tenants=<id>): several tenants without a header would arrive mixed"
                )));
            }
        }
        Ok(())
    }

    /// The status of a rate-limit refusal.
    pub fn rate_limit_status(&self) -> http::StatusCode {
        match self.rate_limit_status {
            429 => http::StatusCode::TOO_MANY_REQUESTS,
            _ => http::StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// How HA pairs are deduplicated by default: whether they are, and
    /// the tracker's settings.
    pub fn ha(&self) -> (bool, crate::ingest::ha::HaConfig) {
        (
            self.ha_tracker,
            crate::ingest::ha::HaConfig {
                cluster_label: self.ha_cluster_label.as_str().into(),
                replica_label: self.ha_replica_label.as_str().into(),
                failover_ms: i64::try_from(self.ha_failover_timeout.as_millis())
                    .unwrap_or(i64::MAX),
                max_clusters: self.ha_max_clusters,
            },
        )
    }

    /// The HTTP listener's limits.
    pub fn http_limits(&self) -> HttpLimits {
        HttpLimits {
            max_connections: self.http_max_connections,
            header_read_timeout: self.http_header_read_timeout,
            max_header_bytes: self.http_max_header_bytes,
            shutdown_timeout: self.shutdown_timeout,
        }
    }

    /// Whether `--enable-feature` names `feature`.
    pub fn feature(&self, feature: &str) -> bool {
        self.enable_feature.iter().any(|f| f == feature)
    }

    /// The label limits for ingest.
    pub fn label_limits(&self) -> LabelLimits {
        LabelLimits {
            max_labels: self.max_labels_per_series,
            max_name_len: self.max_label_name_length,
            max_value_len: self.max_label_value_length,
            names: self.metric_name_validation_scheme,
        }
    }

    /// How notifications reach the Alertmanagers: TLS and login.
    pub fn alertmanager_transport(&self) -> crate::rules::notifier::Transport {
        let path = |p: &PathBuf| (!p.as_os_str().is_empty()).then(|| p.clone());
        crate::rules::notifier::Transport {
            tls: crate::forward::TlsConfig {
                ca_file: path(&self.alertmanager_tls_ca_file),
                cert_file: path(&self.alertmanager_tls_cert_file),
                key_file: path(&self.alertmanager_tls_key_file),
                server_name: (!self.alertmanager_tls_server_name.is_empty())
                    .then(|| self.alertmanager_tls_server_name.clone()),
                insecure_skip_verify: self.alertmanager_tls_insecure_skip_verify,
            },
            basic_auth: path(&self.alertmanager_basic_auth_password_file)
                .filter(|_| !self.alertmanager_basic_auth_username.is_empty())
                .map(|f| (self.alertmanager_basic_auth_username.clone(), f)),
        }
    }

    /// The alert relabelling file, if one is named.
    pub fn alert_relabel_file(&self) -> Option<&std::path::Path> {
        let f = self.alert_relabel_config.as_path();
        (!f.as_os_str().is_empty()).then_some(f)
    }

    /// The directory of per-tenant rule files, if one is named.
    pub fn ruler_dir(&self) -> Option<&std::path::Path> {
        let d = self.ruler_storage_local_directory.as_path();
        (!d.as_os_str().is_empty()).then_some(d)
    }

    /// Where the rules are read from and how they are evaluated.
    pub fn rule_settings(&self) -> crate::rules::RuleSettings {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        crate::rules::RuleSettings {
            patterns: self.rule_files.clone(),
            interval_ms: ms(self.rules_evaluation_interval).max(1),
            query_offset_ms: ms(self.rules_query_offset),
            query: self.query_options(),
            alerting: crate::rules::group::AlertSettings {
                externals: crate::rules::alerting::Externals {
                    labels: self.external_labels().into_iter().collect(),
                    url: self.external_url(),
                },
                outage_tolerance_ms: ms(self.rules_alert_for_outage_tolerance),
                grace_period_ms: ms(self.rules_alert_for_grace_period),
                resend_delay_ms: ms(self.rules_alert_resend_delay),
            },
            alertmanagers: self.alertmanager_url.clone(),
            alertmanager_transport: self.alertmanager_transport(),
            alert_relabel: crate::rules::notifier::AlertRelabel::default(),
            files_only: false,
            notify_header: None,
            limits: None,
        }
    }

    /// `--web-external-url`, or `http://<host name>:<listen port>` as
    /// Prometheus makes its default; no trailing `/`.
    pub fn external_url(&self) -> String {
        if !self.web_external_url.is_empty() {
            return self.web_external_url.trim_end_matches('/').to_owned();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("http://{host}:{}", self.listen.port())
    }

    /// The default limits of queries.
    pub fn query_options(&self) -> QueryOptions {
        QueryOptions {
            lookback_ms: i64::try_from(self.query_lookback_delta.as_millis()).unwrap_or(i64::MAX),
            max_samples: self.query_max_samples,
            max_bytes: usize::try_from(self.query_memory_limit()).unwrap_or(usize::MAX),
            shared: Some(std::sync::Arc::new(crate::promql::QueryMemory::new(
                usize::try_from(self.query_memory_pool()).unwrap_or(usize::MAX),
            ))),
            timeout: self.query_timeout,
            parse: ParseLimits {
                max_length: self.query_max_length,
                max_depth: self.query_max_depth,
                experimental_functions: self.feature(EXPERIMENTAL_FUNCTIONS),
                binop_fill_modifiers: self.feature(BINOP_FILL_MODIFIERS),
                extended_range_selectors: self.feature(EXTENDED_RANGE_SELECTORS),
                ..ParseLimits::default()
            },
            max_label_bytes: self.query_max_label_bytes,
            delayed_name_removal: self.feature(DELAYED_NAME_REMOVAL),
            compat: self.promql_compatibility,
            use_start_timestamps: self.feature(USE_START_TIMESTAMPS),
        }
    }

    /// How OTLP data is translated.
    pub fn otlp_options(&self) -> OtlpOptions {
        OtlpOptions {
            promote_resource_attributes: self.otlp_promote_resource_attributes.clone(),
            delta_to_cumulative: self.otlp_delta_to_cumulative,
            exponential_as_classic: self.otlp_exponential_histograms_as_classic,
            translation: self.otlp_translation_strategy,
            target_info_interval_ms: (self.query_options().lookback_ms / 2).max(1),
        }
    }

    /// Where and how the head is made durable; `None` without a WAL.
    pub fn durability(&self) -> Option<Durability> {
        (!self.wal_disabled).then(|| Durability {
            dir: self.data_dir.clone(),
            wal: WalOptions {
                segment_bytes: self.wal_segment_bytes,
                repair: match self.wal_repair {
                    true => Repair::DropFromDamage,
                    false => Repair::Refuse,
                },
                reserve_bytes: self.wal_reserve_bytes,
            },
            fsync: self.wal_fsync.mode(),
        })
    }

    /// Most bytes one query may hold: `query-max-memory`, or an eighth of
    /// the memory limit.
    pub fn query_memory_limit(&self) -> u64 {
        if self.query_max_memory > 0 {
            return self.query_max_memory;
        }
        (self.memory_limit() / 8).max(1 << 20)
    }

    /// Most bytes all running queries may hold together: a quarter of the
    /// memory limit, and never less than one query's.
    pub fn query_memory_pool(&self) -> u64 {
        (self.memory_limit() / 4).max(self.query_memory_limit())
    }

    /// The memory limit in bytes: `max-memory`, or 60% of the machine's.
    pub fn memory_limit(&self) -> u64 {
        if self.max_memory > 0 {
            return self.max_memory;
        }
        crate::storage::machine_memory_bytes().map_or(4 << 30, |m| m / 10 * 6)
    }

    /// The external labels, sorted by name.
    pub fn external_labels(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .external_labels
            .iter()
            .filter_map(|l| l.split_once('='))
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        out.sort();
        out
    }

    /// The data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data_dir
    }

    /// How long samples are kept.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The range of the blocks the head cuts, and the largest block
    /// compaction makes (Prometheus' default when none is set).
    pub fn block_durations(&self) -> (Duration, Duration) {
        let min = self.storage_min_block_duration;
        let max = if self.storage_max_block_duration.is_zero() {
            let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            let max = crate::storage::block::compact::default_max_block_range(
                ms(self.retention),
                ms(min),
            );
            Duration::from_millis(u64::try_from(max).unwrap_or(0))
        } else {
            self.storage_max_block_duration
        };
        (min, max.max(min))
    }

    /// Every setting by its flag name, with its value as text, for the
    /// status page.
    pub fn flags(&self) -> Vec<(String, String)> {
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        map.into_iter()
            .map(|(k, v)| {
                if k == "forward" {
                    // Names and URLs only: headers and credentials stay off
                    // the status page.
                    let text = self
                        .forward
                        .iter()
                        .map(|d| format!("{}={}", d.resolved_name(), d.url))
                        .collect::<Vec<_>>()
                        .join(",");
                    return (k, text);
                }
                let text = match v {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Array(a) => a
                        .iter()
                        .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect()
    }

    /// How the database is opened and kept.
    pub fn db_options(&self) -> DbOptions {
        DbOptions {
            head: self.head_options(),
            durability: self.durability(),
            max_metadata_families: self.max_metadata_families,
            max_metadata_bytes: self.max_metadata_bytes,
            memory_limit: self.memory_limit(),
            checkpoint_interval: self.checkpoint_interval,
            retention: self.retention,
        }
    }

    /// How tenants are told apart, and what a new one is made from.
    pub fn tenant_setup(&self) -> crate::api::tenant::TenantSetup {
        crate::api::tenant::TenantSetup {
            multitenancy: self.multitenancy,
            header: http::HeaderName::from_bytes(self.tenant_header.as_bytes())
                .unwrap_or_else(|_| http::HeaderName::from_static("x-scope-orgid")),
            max_tenants: self.max_tenants.max(1),
            db: self.db_options(),
            otlp: (self.otlp_options(), self.max_series),
            federation: self
                .tenant_federation_enabled
                .then_some(self.tenant_federation_max_tenants),
        }
    }

    /// The head's options.
    pub fn head_options(&self) -> HeadOptions {
        let shards = if self.head_shards == 0 {
            4 * std::thread::available_parallelism().map_or(4, usize::from)
        } else {
            self.head_shards
        };
        let (min, max) = self.block_durations();
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        HeadOptions {
            shards,
            max_series: self.max_series,
            max_exemplars: self.max_exemplars,
            chunk_range_ms: ms(min),
            max_block_range_ms: ms(max),
            ooo_window_ms: ms(self.out_of_order_time_window),
            st_storage: self.feature(ST_STORAGE),
            ..HeadOptions::default()
        }
    }
}

/// `--metric-name-validation-scheme`'s values, listed in `--help`.
pub(crate) fn name_validation_parser(
) -> impl clap::builder::TypedValueParser<Value = NameValidation> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(NameValidation::ALL.map(NameValidation::as_str))
        .try_map(|s| s.parse::<NameValidation>())
}

/// The HTTP listener's limits.
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// Most connections open at once; past it, new ones wait in the
    /// kernel's backlog.
    pub max_connections: usize,
    /// Longest wait for a request's headers, idle keep-alive included.
    pub header_read_timeout: Duration,
    /// Largest request head (request line and headers), in bytes.
    pub max_header_bytes: usize,
    /// Longest wait for in-flight requests at shutdown.
    pub shutdown_timeout: Duration,
}

/// Most threads a query may be allowed: the helpers are a pool of that
/// many threads less one, so an absurd allowance would start thousands.
const MAX_WORKERS_PER_QUERY: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    /// The query threads' class is `idle` or `normal`, from a flag or a
    /// file; anything else is refused naming the setting.
    #[test]
    fn query_thread_priority_is_idle_or_normal() {
        assert_eq!(
            Config::default().query_thread_priority,
            QueryThreadPriority::Idle
        );
        for (text, want) in [
            ("idle", QueryThreadPriority::Idle),
            ("normal", QueryThreadPriority::Normal),
        ] {
            assert_eq!(text.parse::<QueryThreadPriority>(), Ok(want));
            let c: Config =
                serde_yaml_ng::from_str(&format!("query-thread-priority: {text}")).expect("parses");
            assert_eq!(c.query_thread_priority, want);
            assert_eq!(String::from(want), text);
        }
        for bad in ["", "IDLE", "low", "idle ", "-1", "1e30"] {
            let err = bad.parse::<QueryThreadPriority>().expect_err("refused");
            assert!(err.contains("query-thread-priority"), "{err}");
            let err = serde_yaml_ng::from_str::<Config>(&format!("query-thread-priority: '{bad}'"))
                .expect_err("refused");
            assert!(err.to_string().contains("query-thread-priority"), "{err}");
        }
    }

    /// An absurd worker allowance is refused by name; 0 and sane ones
    /// pass.
    #[test]
    fn workers_per_query_are_bounded() {
        let with = |n: usize| Config {
            query_max_workers_per_query: n,
            ..Config::default()
        };
        for ok in [0, 1, 2, 64, MAX_WORKERS_PER_QUERY] {
            assert!(with(ok).validate().is_ok(), "{ok}");
        }
        for bad in [MAX_WORKERS_PER_QUERY + 1, usize::MAX] {
            let err = with(bad).validate().expect_err("absurd");
            assert!(
                err.to_string().contains("query-max-workers-per-query"),
                "{err}"
            );
        }
    }

    #[test]
    fn yaml_and_toml_use_the_flag_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = dir.path().join("c.yaml");
        std::fs::write(
            &yaml,
            "listen: 127.0.0.1:1234\nmax-series: 5\nrequest-timeout: 2m\n",
        )
        .expect("write");
        let c = Config::from_file(&yaml).expect("valid yaml");
        assert_eq!(c.listen.port(), 1234);
        assert_eq!(c.max_series, 5);
        assert_eq!(c.request_timeout, Duration::from_secs(120));
        assert_eq!(c.max_body_bytes, Config::default().max_body_bytes);
        let toml = dir.path().join("c.toml");
        std::fs::write(&toml, "data-dir = \"/tmp/x\"\nmax-label-name-length = 7\n").expect("write");
        let c = Config::from_file(&toml).expect("valid toml");
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.max_label_name_length, 7);
        std::fs::write(&yaml, "max_series: 5\n").expect("write");
        let err = Config::from_file(&yaml).expect_err("snake_case is not a key");
        assert!(err.to_string().contains("max_series"), "{err}");
    }

    /// Absurd block durations get an error naming the flag; sane ones
    /// give Prometheus' ranges.
    #[test]
    fn block_durations_are_checked() {
        let with = |min: u64, max: u64| Config {
            storage_min_block_duration: Duration::from_secs(min),
            storage_max_block_duration: Duration::from_secs(max),
            ..Config::default()
        };
        for (min, max) in [
            (0, 0),
            (59, 0),
            (32 * 86_400, 0),
            (u64::MAX / 2, 0),
            (7200, 3600),
            (7200, u64::MAX / 2),
        ] {
            let err = with(min, max).validate().expect_err("refused");
            assert!(err.to_string().contains("block-duration"), "{err}");
        }
        let c = with(7200, 7200);
        c.validate().expect("compaction off");
        assert_eq!(c.head_options().max_block_range_ms, 7_200_000);
        let c = Config::default();
        assert_eq!(
            c.block_durations(),
            (Duration::from_secs(7200), Duration::from_secs(36 * 3600))
        );
        let c = with(31 * 86_400, 0);
        c.validate().expect("31 days");
        assert_eq!(c.head_options().chunk_range_ms, 31 * 86_400_000);
    }

    /// Each flag's help names its default; it must be the default.
    #[test]
    fn help_states_the_true_defaults() {
        use clap::Args as _;
        let cmd = Flags::augment_args(clap::Command::new("sluice"));
        let defaults: std::collections::HashMap<String, String> =
            Config::default().flags().into_iter().collect();
        let mut checked = 0;
        for arg in cmd.get_arguments() {
            let name = arg.get_long().expect("every setting is a long flag");
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let stated = help
                .rsplit_once("[default: ")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(v, _)| v)
                .unwrap_or_else(|| panic!("--{name}'s help names no default: {help}"));
            let stated = match stated {
                "off" => "false",
                "none" => "",
                v => v,
            };
            let actual = &defaults[name];
            let as_duration = |v: &str| humantime::parse_duration(v).ok();
            let same = stated == actual
                || as_duration(stated).is_some_and(|d| as_duration(actual) == Some(d));
            assert!(
                same,
                "--{name}: help says {stated:?}, the default is {actual:?}"
            );
            checked += 1;
        }
        assert_eq!(checked, defaults.len(), "one flag per setting");
    }

    #[test]
    fn names_features_and_strategies_read_as_prometheus_spells_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = dir.path().join("c.yaml");
        std::fs::write(
            &yaml,
            "metric-name-validation-scheme: legacy\n\
             otlp-translation-strategy: NoUTF8EscapingWithSuffixes\n\
             enable-feature: [promql-experimental-functions]\n",
        )
        .expect("write");
        let c = Config::from_file(&yaml).expect("valid yaml");
        assert_eq!(c.metric_name_validation_scheme, NameValidation::Legacy);
        assert_eq!(
            c.otlp_translation_strategy,
            Translation::NoUtf8EscapingWithSuffixes
        );
        assert!(c.query_options().parse.experimental_functions);
        // Prometheus refuses UTF-8 OTLP names under legacy validation too.
        let err = c.validate().expect_err("conflict");
        assert!(
            err.to_string().contains("otlp-translation-strategy"),
            "{err}"
        );
        let c = Config {
            enable_feature: vec!["exemplar-storage".into()],
            ..Config::default()
        };
        let err = c.validate().expect_err("unknown feature");
        assert!(err.to_string().contains("exemplar-storage"), "{err}");
    }

    #[test]
    fn forward_settings_that_cannot_work_are_refused_by_name() {
        let dest = |s: &str| s.parse::<Destination>().expect("destination");
        for (says, c) in [
            (
                "two forward destinations are named",
                Config {
                    forward: vec![dest("http://a:1/w,name=x"), dest("http://b:1/w,name=x")],
                    ..Config::default()
                },
            ),
            (
                "wal-disabled",
                Config {
                    forward: vec![dest("http://a:1/w")],
                    wal_disabled: true,
                    ..Config::default()
                },
            ),
            (
                "forward-shard-by-series-replicas",
                Config {
                    forward: vec![dest("http://a:1/w")],
                    forward_shard_by_series: true,
                    forward_shard_by_series_replicas: 2,
                    ..Config::default()
                },
            ),
            (
                "forward-max-lag-bytes",
                Config {
                    forward_max_lag_bytes: 0,
                    ..Config::default()
                },
            ),
            (
                "must start with http://",
                Config {
                    forward: vec![dest("")],
                    ..Config::default()
                },
            ),
            (
                "no login in the URL",
                Config {
                    alertmanager_url: vec!["https://u:secret@am:9093".into()],
                    ..Config::default()
                },
            ),
            (
                "no login in the URL",
                Config {
                    alertmanager_url: vec!["http://u:pa/ss@am:9093".into()],
                    ..Config::default()
                },
            ),
            (
                "need an https:// alertmanager-url",
                Config {
                    alertmanager_url: vec!["http://am:9093".into()],
                    alertmanager_tls_server_name: "am".into(),
                    ..Config::default()
                },
            ),
            (
                "alertmanager tls /nonexistent/ca.pem: I/O error",
                Config {
                    alertmanager_url: vec!["https://am:9093".into()],
                    alertmanager_tls_ca_file: "/nonexistent/ca.pem".into(),
                    ..Config::default()
                },
            ),
            (
                "go together",
                Config {
                    alertmanager_url: vec!["https://am:9093".into()],
                    alertmanager_basic_auth_username: "u".into(),
                    ..Config::default()
                },
            ),
        ] {
            let e = c.validate().expect_err(says).to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        let ok = Config {
            forward: vec![dest("http://a:1/w"), dest("http://b:1/w")],
            forward_shard_by_series: true,
            forward_shard_by_series_replicas: 2,
            ..Config::default()
        };
        ok.validate()
            .expect("two destinations, each series on both");
        let secret = Config {
            alertmanager_url: vec!["https://u:secret@am:9093".into()],
            ..Config::default()
        };
        let e = secret.validate().expect_err("login in URL").to_string();
        assert!(!e.contains("secret"), "the password is not repeated: {e}");
    }

    #[test]
    fn zero_limits_are_refused() {
        let c = Config {
            max_series: 0,
            ..Config::default()
        };
        assert!(c
            .validate()
            .expect_err("zero")
            .to_string()
            .contains("max-series"));
        assert!(Config::default().validate().is_ok());
        let huge = Config {
            wal_reserve_bytes: 1 << 40,
            ..Config::default()
        };
        let err = huge.validate().expect_err("a 1 TiB reserve").to_string();
        assert!(err.contains("wal-reserve-bytes"), "{err}");
        for (name, c) in [
            (
                "query-max-form-bytes",
                Config {
                    query_max_form_bytes: 0,
                    ..Config::default()
                },
            ),
            (
                "query-max-response-bytes",
                Config {
                    query_max_response_bytes: 0,
                    ..Config::default()
                },
            ),
        ] {
            let err = c.validate().expect_err("zero").to_string();
            assert!(err.contains(name), "{err}");
        }
    }
}
