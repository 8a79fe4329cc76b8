//! Self-metrics and logging. Metric names follow
//! `sluice_<subsystem>_<thing>_<unit>`; labels come from closed sets; counters
//! move once per request, never per sample; head sizes are read at scrape
//! time by a collector.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{
    exponential_buckets, Histogram, NativeHistogramConfig,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::ingest::{IngestReport, Reason};
use crate::storage::exemplars::ExemplarError;
use crate::storage::Db;

/// Labels of ingest counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ProtocolLabels {
    /// `remote_write` (1.0), `remote_write_2` or `otlp`.
    pub protocol: &'static str,
}

/// Labels of rejection counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RejectLabels {
    /// `remote_write` (1.0), `remote_write_2` or `otlp`.
    pub protocol: &'static str,
    /// One of [`Reason::as_str`].
    pub reason: &'static str,
}

/// Labels of HTTP request counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HttpLabels {
    /// The route pattern, e.g. `/api/v1/write`.
    pub handler: &'static str,
    /// The HTTP status code.
    pub code: u16,
}

/// Labels of HTTP latency histograms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct HandlerLabels {
    /// The route pattern.
    pub handler: &'static str,
}

/// Labels of forwarding metrics.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DestinationLabels {
    /// The destination's name (from the config: a closed set).
    pub destination: String,
    /// With multitenancy, the tenant whose samples these are (bounded by
    /// `--max-tenants`); without it the label is left out.
    pub tenant: Option<Arc<str>>,
}

impl EncodeLabelSet for DestinationLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("destination", self.destination.as_str()).encode(encoder.encode_label())?;
        if let Some(t) = &self.tenant {
            ("tenant", &**t).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// Labels of forwarding drop counters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DropLabels {
    /// The destination and tenant.
    pub of: DestinationLabels,
    /// `lag` or `unknown_series`.
    pub reason: &'static str,
}

impl EncodeLabelSet for DropLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        self.of.encode(encoder)?;
        ("reason", self.reason).encode(encoder.encode_label())
    }
}

/// The forwarding families, one series per destination (and tenant):
/// a handle that shares them.
#[derive(Debug, Clone)]
pub struct ForwardFamilies {
    sent: Family<DestinationLabels, Counter>,
    failed: Family<DestinationLabels, Counter>,
    retried: Family<DestinationLabels, Counter>,
    dropped: Family<DropLabels, Counter>,
    pending_bytes: Family<DestinationLabels, Gauge>,
    lag_seconds: Family<DestinationLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    highest_sent: Family<DestinationLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    shards: Family<DestinationLabels, Gauge>,
    series: Family<DestinationLabels, Gauge>,
    send_seconds: Family<DestinationLabels, Histogram, fn() -> Histogram>,
}

impl ForwardFamilies {
    fn new(registry: &mut Registry) -> Self {
        let f = Self {
            sent: Family::default(),
            failed: Family::default(),
            retried: Family::default(),
            dropped: Family::default(),
            pending_bytes: Family::default(),
            lag_seconds: Family::default(),
            highest_sent: Family::default(),
            shards: Family::default(),
            series: Family::default(),
            send_seconds: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        };
        let sub = registry.sub_registry_with_prefix("sluice_forward");
        sub.register(
            "samples_sent",
            "Samples a forward destination acknowledged",
            f.sent.clone(),
        );
        sub.register(
            "samples_failed",
            "Samples a forward destination refused with a 4xx other than 429; dropped",
            f.failed.clone(),
        );
        sub.register(
            "samples_retried",
            "Samples sent again after a 5xx, a 429 or a connection error",
            f.retried.clone(),
        );
        sub.register(
            "samples_dropped",
            "Samples not forwarded: lag (the unsent WAL outgrew forward-max-lag-bytes) or unknown_series (labels no longer known)",
            f.dropped.clone(),
        );
        sub.register(
            "pending_bytes",
            "WAL bytes from the saved forward position to the durable end",
            f.pending_bytes.clone(),
        );
        sub.register(
            "lag_seconds",
            "Seconds between now and the newest sample timestamp the destination acknowledged",
            f.lag_seconds.clone(),
        );
        sub.register(
            "highest_sent_timestamp_seconds",
            "The newest sample timestamp the destination acknowledged",
            f.highest_sent.clone(),
        );
        sub.register("shards", "Concurrent senders", f.shards.clone());
        sub.register(
            "series",
            "Series whose labels the destination's WAL reader keeps",
            f.series.clone(),
        );
        sub.register(
            "send_duration_seconds",
            "Time per send attempt",
            f.send_seconds.clone(),
        );
        f
    }

    /// Drops destination `name`'s self-metrics for `tenant` (closed).
    pub fn forget(&self, name: &str, tenant: &str) {
        let l = DestinationLabels {
            destination: name.to_owned(),
            tenant: Some(Arc::from(tenant)),
        };
        for reason in ["lag", "unknown_series"] {
            self.dropped.remove(&DropLabels {
                of: l.clone(),
                reason,
            });
        }
        self.sent.remove(&l);
        self.failed.remove(&l);
        self.retried.remove(&l);
        self.pending_bytes.remove(&l);
        self.lag_seconds.remove(&l);
        self.highest_sent.remove(&l);
        self.shards.remove(&l);
        self.series.remove(&l);
        self.send_seconds.remove(&l);
    }

    /// The self-metrics of destination `name` for `tenant`'s samples.
    pub fn stats(&self, name: &str, tenant: Option<&str>) -> crate::forward::Stats {
        let l = DestinationLabels {
            destination: name.to_owned(),
            tenant: tenant.map(Arc::from),
        };
        let drop = |reason| DropLabels {
            of: l.clone(),
            reason,
        };
        // One statement per series: a family's guard lives to the end of
        // its statement, and a second get_or_create on it would deadlock.
        let dropped_lag = self.dropped.get_or_create(&drop("lag")).clone();
        let dropped_unknown_series = self.dropped.get_or_create(&drop("unknown_series")).clone();
        crate::forward::Stats {
            dropped_lag,
            dropped_unknown_series,
            sent: self.sent.get_or_create(&l).clone(),
            failed: self.failed.get_or_create(&l).clone(),
            retried: self.retried.get_or_create(&l).clone(),
            pending_bytes: self.pending_bytes.get_or_create(&l).clone(),
            lag_seconds: self.lag_seconds.get_or_create(&l).clone(),
            highest_sent_seconds: self.highest_sent.get_or_create(&l).clone(),
            shards: self.shards.get_or_create(&l).clone(),
            series: self.series.get_or_create(&l).clone(),
            send_seconds: self.send_seconds.get_or_create(&l).clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VersionLabels {
    version: &'static str,
}

/// Every self-metric, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ingested: Family<ProtocolLabels, Counter>,
    rejected: Family<RejectLabels, Counter>,
    rejected_points: Family<RejectLabels, Counter>,
    resorted: Family<ProtocolLabels, Counter>,
    dropped: Family<RejectLabels, Counter>,
    out_of_order: Family<ProtocolLabels, Counter>,
    requests: Family<HttpLabels, Counter>,
    durations: Family<HandlerLabels, Histogram>,
    throttled: Family<ProtocolLabels, Counter>,
    rate_limited: Family<ProtocolLabels, Counter>,
    exemplars: Family<ProtocolLabels, Counter>,
    rejected_exemplars: Family<RejectLabels, Counter>,
    queries_running: Gauge,
    queries_timed_out: Counter,
    connections: ConnectionMetrics,
    web: WebMetrics,
    forward: ForwardFamilies,
}

/// The HTTP listener's connection counts.
#[derive(Debug, Clone, Default)]
pub struct ConnectionMetrics {
    /// Connections open now.
    pub open: Gauge,
    /// The connection cap in force.
    pub limit: Gauge,
    /// Connections closed without a request in flight to make room.
    pub shed: Counter,
    /// Requests answered 503 because only the reserved connections were left.
    pub reserve_refusals: Counter,
}

/// A configuration file's reloads.
#[derive(Debug, Clone, Default)]
pub struct Reloads {
    /// 1 if the last load succeeded.
    pub ok: Gauge,
    /// When a load last succeeded, in Unix seconds.
    pub time: Gauge,
}

impl Reloads {
    /// Records a load's outcome.
    pub fn record(&self, ok: bool) {
        self.ok.set(i64::from(ok));
        if ok {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            self.time.set(i64::try_from(now).unwrap_or(i64::MAX));
        }
    }

    fn register(&self, registry: &mut Registry, name: &str, file: &str) {
        registry.register(
            format!("sluice_{name}_last_reload_successful"),
            format!("Whether the last load of the {file} succeeded"),
            self.ok.clone(),
        );
        registry.register(
            format!("sluice_{name}_last_reload_success_timestamp_seconds"),
            format!("When the {file} was last loaded successfully"),
            self.time.clone(),
        );
    }
}

/// The configuration files' reloads and what the door refused.
#[derive(Debug, Clone, Default)]
pub struct WebMetrics {
    /// The web configuration file's loads.
    pub web_config: Reloads,
    /// The runtime configuration file's loads.
    pub runtime_config: Reloads,
    /// The ingest relabel configuration file's loads.
    pub ingest_relabel_config: Reloads,
    /// TLS handshakes that failed.
    pub handshake_failures: Counter,
    unauthorized: Family<ReasonLabels, Counter>,
    forbidden: Counter,
}

impl WebMetrics {
    /// Counts a request whose login may not use its tenant.
    pub fn record_forbidden(&self) {
        self.forbidden.inc();
    }

    /// Counts a request refused at the door for `reason` (`missing`,
    /// `wrong`, `busy`).
    pub fn record_unauthorized(&self, reason: &'static str) {
        self.unauthorized
            .get_or_create(&ReasonLabels { reason })
            .inc();
    }
}

/// A reason from a closed set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: &'static str,
}

/// A latency histogram in both forms: classic buckets (0.5 ms .. ~16 s)
/// for the text formats, and native buckets (schema 3, a bucket every 9%,
/// as client_golang's default factor 1.1 gives) for a scraper that asks
/// for protobuf, as Prometheus with native histograms on does.
fn latency_histogram() -> Histogram {
    Histogram::new_classic_and_native(
        exponential_buckets(0.0005, 2.0, 16),
        NativeHistogramConfig::default(),
    )
}

impl Metrics {
    /// Registers every metric; the head's sizes and the memory queries
    /// hold (`queries`, when they share a pool) are read at scrape time.
    pub fn new(db: Arc<Db>, queries: Option<Arc<crate::promql::QueryMemory>>) -> Self {
        let mut registry = Registry::default();
        let ingested = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_ingested_samples",
            "Samples stored in the head, by ingest protocol",
            ingested.clone(),
        );
        let rejected = Family::<RejectLabels, Counter>::default();
        registry.register(
            "sluice_rejected_samples",
            "Samples not stored, by ingest protocol and reason",
            rejected.clone(),
        );
        let rejected_points = Family::<RejectLabels, Counter>::default();
        registry.register(
            "sluice_rejected_data_points",
            "OTLP data points not (wholly) stored, by protocol and first reason; a histogram point is one data point and many samples",
            rejected_points.clone(),
        );
        let dropped = Family::<RejectLabels, Counter>::default();
        registry.register(
            "sluice_dropped_samples",
            "Samples left out on purpose and answered 2xx, by ingest protocol and reason: relabel (a rule of --ingest-relabel-config or metric_relabel_configs dropped the series), ha_dedupe (sent by the replica of an HA pair that is not elected)",
            dropped.clone(),
        );
        let out_of_order = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_out_of_order_samples",
            "Samples stored out of order (older than their series' newest, within --out-of-order-time-window), by ingest protocol; also in sluice_ingested_samples_total",
            out_of_order.clone(),
        );
        let resorted = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_ingest_unsorted_series",
            "New series whose labels arrived unsorted and were sorted before storing",
            resorted.clone(),
        );
        let requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "sluice_http_requests",
            "HTTP requests served, by route and status code",
            requests.clone(),
        );
        let durations = Family::<HandlerLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "sluice_http_request_duration_seconds",
            "HTTP request latency by route",
            durations.clone(),
        );
        let build = Family::<VersionLabels, Gauge>::default();
        build
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register(
            "sluice_build_info",
            "Sluice build information; always 1",
            build,
        );
        let throttled = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_write_throttled_requests",
            "Write requests answered 503 because the head was at its memory high-water mark or the WAL's disk was full",
            throttled.clone(),
        );
        let rate_limited = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_write_rate_limited_requests",
            "Write requests refused by their tenant's ingestion rate limit (ingestion_rate, ingestion_burst_size)",
            rate_limited.clone(),
        );
        let exemplars = Family::<ProtocolLabels, Counter>::default();
        registry.register(
            "sluice_ingested_exemplars",
            "Exemplars stored, by ingest protocol",
            exemplars.clone(),
        );
        let rejected_exemplars = Family::<RejectLabels, Counter>::default();
        registry.register(
            "sluice_rejected_exemplars",
            "Exemplars not stored, by ingest protocol and reason (they do not fail the request)",
            rejected_exemplars.clone(),
        );
        let queries_running = Gauge::default();
        registry.register(
            "sluice_query_running",
            "Read requests (queries, series, labels, federate) evaluating now, on query slots",
            queries_running.clone(),
        );
        let queries_timed_out = Counter::default();
        registry.register(
            "sluice_query_timed_out",
            "Read requests answered with a timeout, waiting for a slot or evaluating",
            queries_timed_out.clone(),
        );
        let web = WebMetrics::default();
        web.web_config.register(
            &mut registry,
            "web_config",
            "web configuration file (--web-config-file)",
        );
        web.runtime_config.register(
            &mut registry,
            "runtime_config",
            "runtime configuration file (--runtime-config-file)",
        );
        web.ingest_relabel_config.register(
            &mut registry,
            "ingest_relabel_config",
            "ingest relabel configuration file (--ingest-relabel-config)",
        );
        registry.register(
            "sluice_http_forbidden_requests",
            "Requests refused because their login may not use their tenant (identities in the runtime configuration file)",
            web.forbidden.clone(),
        );
        registry.register(
            "sluice_http_tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            web.handshake_failures.clone(),
        );
        registry.register(
            "sluice_http_unauthorized_requests",
            "Requests refused at the door: no or undecodable login (missing), unknown user or wrong password (wrong), too many logins waiting for a check (busy)",
            web.unauthorized.clone(),
        );
        let connections = ConnectionMetrics::default();
        registry.register(
            "sluice_http_connections",
            "HTTP connections open now",
            connections.open.clone(),
        );
        registry.register(
            "sluice_http_connections_limit",
            "The HTTP connection cap in force: http-max-connections, lowered to fit the open-files limit",
            connections.limit.clone(),
        );
        registry.register(
            "sluice_http_connections_shed",
            "Connections without a request in flight (a head still arriving, or idle) closed to make room at the connection cap",
            connections.shed.clone(),
        );
        registry.register(
            "sluice_http_reserve_refusals",
            "Requests other than health checks and writes answered 503 because only the connections reserved for those were left",
            connections.reserve_refusals.clone(),
        );
        let forward = ForwardFamilies::new(&mut registry);
        registry.register_collector(Box::new(HeadCollector { db }));
        if let Some(pool) = queries {
            registry.register_collector(Box::new(QueryMemoryCollector(pool)));
        }
        registry.register_collector(Box::new(ProcessCollector {
            start_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }));
        Self {
            registry,
            ingested,
            rejected,
            rejected_points,
            resorted,
            dropped,
            out_of_order,
            requests,
            durations,
            throttled,
            rate_limited,
            exemplars,
            rejected_exemplars,
            queries_running,
            queries_timed_out,
            connections,
            web,
            forward,
        }
    }

    /// The forwarding families, for each tenant's destinations.
    pub fn forward_families(&self) -> ForwardFamilies {
        self.forward.clone()
    }

    /// The gauge of read requests evaluating now, for the query slots.
    pub fn queries_running(&self) -> Gauge {
        self.queries_running.clone()
    }

    /// The web configuration's reloads and the door's refusals.
    pub fn web(&self) -> WebMetrics {
        self.web.clone()
    }

    /// The HTTP listener's connection counts.
    pub fn connections(&self) -> ConnectionMetrics {
        self.connections.clone()
    }

    /// The counter of read requests that timed out, for the query slots.
    pub fn queries_timed_out(&self) -> Counter {
        self.queries_timed_out.clone()
    }

    /// Samples ingested since start, over every protocol.
    pub fn ingested_total(&self) -> u64 {
        ["remote_write", "remote_write_2", "otlp"]
            .into_iter()
            .map(|protocol| {
                self.ingested
                    .get_or_create(&ProtocolLabels { protocol })
                    .get()
            })
            .sum()
    }

    /// Counts one write request pushed back for memory.
    pub fn record_throttled(&self, protocol: &'static str) {
        self.throttled
            .get_or_create(&ProtocolLabels { protocol })
            .inc();
    }

    /// Counts one write request refused by its tenant's rate limit.
    pub fn record_rate_limited(&self, protocol: &'static str) {
        self.rate_limited
            .get_or_create(&ProtocolLabels { protocol })
            .inc();
    }

    /// Counts one ingest request's outcome.
    pub fn record_ingest(&self, protocol: &'static str, report: &IngestReport) {
        self.ingested
            .get_or_create(&ProtocolLabels { protocol })
            .inc_by(report.accepted);
        if report.out_of_order > 0 {
            self.out_of_order
                .get_or_create(&ProtocolLabels { protocol })
                .inc_by(report.out_of_order);
        }
        if report.resorted_series > 0 {
            self.resorted
                .get_or_create(&ProtocolLabels { protocol })
                .inc_by(report.resorted_series);
        }
        for reason in Reason::all() {
            let n = report.rejected[reason.index()];
            if n > 0 {
                self.rejected
                    .get_or_create(&RejectLabels {
                        protocol,
                        reason: reason.as_str(),
                    })
                    .inc_by(n);
            }
        }
        for (why, &n) in crate::ingest::Dropped::ALL.iter().zip(&report.dropped) {
            if n > 0 {
                self.dropped
                    .get_or_create(&RejectLabels {
                        protocol,
                        reason: why.as_str(),
                    })
                    .inc_by(n);
            }
        }
        if report.exemplars_written > 0 {
            self.exemplars
                .get_or_create(&ProtocolLabels { protocol })
                .inc_by(report.exemplars_written);
        }
        for (e, &n) in ExemplarError::ALL.iter().zip(&report.exemplars_rejected) {
            if n > 0 {
                self.rejected_exemplars
                    .get_or_create(&RejectLabels {
                        protocol,
                        reason: e.reason(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts one OTLP request's rejected data points, by [`Reason::index`].
    pub fn record_rejected_points(&self, protocol: &'static str, by_reason: &[u64]) {
        for reason in Reason::all() {
            let n = by_reason.get(reason.index()).copied().unwrap_or(0);
            if n > 0 {
                self.rejected_points
                    .get_or_create(&RejectLabels {
                        protocol,
                        reason: reason.as_str(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Counts one HTTP request and its latency.
    pub fn record_http(&self, handler: &'static str, code: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&HttpLabels { handler, code })
            .inc();
        self.durations
            .get_or_create(&HandlerLabels { handler })
            .observe(elapsed.as_secs_f64());
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode_openmetrics(&self) -> String {
        let mut out = String::with_capacity(8192);
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
            let _ = writeln!(out, "# EOF");
        }
        out
    }

    /// The Prometheus protobuf exposition (length-delimited
    /// `io.prometheus.client.MetricFamily` messages): latency histograms
    /// carry their native buckets beside the classic ones.
    pub fn encode_protobuf(&self) -> Option<Vec<u8>> {
        prometheus_client::encoding::prometheus_protobuf::encode_to_vec(&self.registry).ok()
    }

    /// The Prometheus text format 0.0.4 exposition, for scrapers and tools
    /// that do not ask for OpenMetrics (e.g. `promtool check metrics`).
    pub fn encode_text(&self) -> String {
        openmetrics_to_text(&self.encode_openmetrics())
    }
}

/// Rewrites OpenMetrics text into Prometheus text 0.0.4: counter families
/// take their `_total` sample name in HELP and TYPE, and the OpenMetrics-only
/// `# UNIT` and `# EOF` lines go.
fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut pending_help: Option<&str> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            pending_help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let name = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            if let Some(help) = pending_help.take() {
                let text = help.split_once(' ').map_or("", |(_, t)| t);
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Reads the memory running queries hold at scrape time.
#[derive(Debug)]
struct QueryMemoryCollector(Arc<crate::promql::QueryMemory>);

impl Collector for QueryMemoryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let bytes = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "sluice_query_memory_bytes",
            "Bytes the running queries hold of their samples and points, against the pool they share",
            bytes(self.0.used()),
        )?;
        gauge(
            &mut encoder,
            "sluice_query_memory_limit_bytes",
            "Most bytes all running queries may hold together",
            bytes(self.0.max()),
        )
    }
}

/// Reads head sizes at scrape time.
#[derive(Debug)]
struct HeadCollector {
    db: Arc<Db>,
}

impl Collector for HeadCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let st = self.db.head_stats();
        let gauges = [
            ("sluice_head_series", "Series held in the head", st.series),
            (
                "sluice_head_chunks",
                "XOR chunks held in the head, open ones included",
                st.chunks,
            ),
            (
                "sluice_head_chunk_bytes",
                "Encoded bytes of all chunks in the head",
                st.chunk_bytes,
            ),
            (
                "sluice_head_samples",
                "Samples held in the head's chunks",
                st.samples,
            ),
        ];
        for (name, help, v) in gauges {
            gauge(&mut encoder, name, help, v as i64)?;
        }
        let bytes = [
            (
                "sluice_head_bytes",
                "Bytes the head accounts for: chunks, series, labels and index",
                self.db.head_bytes() as u64,
            ),
            (
                "sluice_series_aliases_bytes",
                "Bytes of the remote write 2.0 series keys that find known series (counted against max-memory)",
                self.db.aliases_bytes() as u64,
            ),
            (
                "sluice_memory_limit_bytes",
                "The memory limit (max-memory); writes get 503 at 80% of it",
                self.db.memory_limit(),
            ),
        ];
        for (name, help, v) in bytes {
            gauge(&mut encoder, name, help, v as i64)?;
        }
        gauge(
            &mut encoder,
            "sluice_exemplars",
            "Exemplars held in the ring (at most max-exemplars)",
            self.db.exemplars().len() as i64,
        )?;
        let m = self.db.head_memory();
        let mut family = encoder.encode_descriptor(
            "sluice_head_memory_bytes",
            "Bytes the head holds by part (their sum is sluice_head_bytes as of the last write)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (part, v) in [
            ("chunks", m.chunks),
            ("series", m.series),
            ("labels", m.labels),
            ("index", m.index),
        ] {
            ConstGauge::new(v as i64).encode(family.encode_family(&[("part", part)])?)?;
        }
        let r = self.db.retention_stats();
        let mut counters = vec![
            (
                "sluice_retention_removed_series",
                "Series removed from the head for having no sample within retention",
                r.series as f64,
            ),
            (
                "sluice_retention_dropped_chunks",
                "Chunks dropped for ending before the retention cutoff",
                r.chunks as f64,
            ),
        ];
        let b = self.db.block_stats();
        counters.extend([
            (
                "sluice_blocks_cut",
                "Blocks written from the head's oldest chunks",
                b.cut as f64,
            ),
            (
                "sluice_block_cut_failures",
                "Block writes from the head that failed (the head kept the samples)",
                b.cut_failures as f64,
            ),
            (
                "sluice_blocks_deleted",
                "Blocks deleted for ending before the retention cutoff",
                b.deleted as f64,
            ),
            (
                "sluice_block_compactions",
                "Compactions that merged blocks into a larger one",
                b.compactions as f64,
            ),
            (
                "sluice_block_compaction_failures",
                "Compactions that failed (their blocks stay as they are)",
                b.compaction_failures as f64,
            ),
            (
                "sluice_blocks_damaged",
                "Blocks found damaged at start and moved aside to <ULID>.damaged",
                b.damaged as f64,
            ),
            (
                "sluice_block_read_errors",
                "Block reads that failed during a query (the block's data was left out)",
                b.read_errors as f64,
            ),
        ]);
        let w = self.db.lock_waits();
        counters.extend([
            (
                "sluice_head_append_lock_waits",
                "Times an append found a head shard's lock held and waited for it",
                w.waits as f64,
            ),
            (
                "sluice_head_append_lock_wait_seconds",
                "Time appends spent waiting for head shard locks",
                w.seconds,
            ),
            (
                "sluice_head_append_lock_waits_behind_reads",
                "Of the appends' lock waits, those behind a read of the head (a query's selection of series, a label or series lookup)",
                w.behind_reads as f64,
            ),
            (
                "sluice_head_append_lock_wait_behind_reads_seconds",
                "Time appends spent waiting for head shard locks a read held",
                w.behind_reads_seconds,
            ),
        ]);
        let c = self.db.checkpoint_stats();
        counters.push((
            "sluice_wal_checkpoints",
            "Checkpoints of the head written",
            c.written as f64,
        ));
        counters.push((
            "sluice_wal_checkpoint_failures",
            "Checkpoints of the head that failed",
            c.failed as f64,
        ));
        if let Some(w) = self.db.wal_stats() {
            counters.extend([
                (
                    "sluice_wal_writes",
                    "WAL writes, one per group commit",
                    w.commits as f64,
                ),
                ("sluice_wal_fsyncs", "WAL fsyncs", w.syncs as f64),
                (
                    "sluice_wal_fsync_duration_seconds",
                    "Time spent in WAL fsyncs",
                    w.sync_nanos as f64 / 1e9,
                ),
                (
                    "sluice_wal_written_bytes",
                    "Bytes written to the WAL",
                    w.bytes as f64,
                ),
                (
                    "sluice_wal_write_failures",
                    "WAL writes and fsyncs that failed (each try of a write the disk refused)",
                    w.write_failures as f64,
                ),
            ]);
        }
        for (name, help, v) in counters {
            counter(&mut encoder, name, help, v)?;
        }
        for (name, help, v) in [
            (
                "sluice_blocks",
                "Blocks on disk being served",
                b.blocks as i64,
            ),
            (
                "sluice_block_disk_bytes",
                "Bytes of the blocks on disk",
                i64::try_from(b.disk_bytes).unwrap_or(i64::MAX),
            ),
            (
                "sluice_block_memory_bytes",
                "Bytes the open blocks' readers keep in memory (their indexes)",
                i64::try_from(b.memory_bytes).unwrap_or(i64::MAX),
            ),
            (
                "sluice_block_samples",
                "Samples in the blocks on disk",
                i64::try_from(b.samples).unwrap_or(i64::MAX),
            ),
        ] {
            gauge(&mut encoder, name, help, v)?;
        }
        if let Some(bytes) = self.db.wal_disk_bytes() {
            gauge(
                &mut encoder,
                "sluice_wal_disk_bytes",
                "Bytes of WAL segments on disk (checkpoints not included)",
                bytes as i64,
            )?;
        }
        if let Some(w) = self.db.wal_stats() {
            gauge(
                &mut encoder,
                "sluice_wal_disk_full",
                "1 while the WAL's disk reserve is given up (the disk filled) and writes are refused with 503",
                i64::from(!w.reserve_held),
            )?;
        }
        let mut seconds = vec![(
            "sluice_wal_checkpoint_last_duration_seconds",
            "How long the last checkpoint took",
            c.last_seconds,
        )];
        if let Some(r) = self.db.recovery() {
            seconds.push((
                "sluice_wal_replay_duration_seconds",
                "How long loading the checkpoint and replaying the WAL took at start",
                r.seconds,
            ));
        }
        seconds.push((
            "sluice_block_cut_last_duration_seconds",
            "How long writing the last block from the head took",
            b.last_cut_seconds,
        ));
        seconds.push((
            "sluice_block_compaction_last_duration_seconds",
            "How long the last compaction took",
            b.last_compaction_seconds,
        ));
        seconds.push((
            "sluice_wal_checkpoint_last_bytes",
            "Size of the last checkpoint, with the chunk files it refers to",
            c.last_bytes as f64,
        ));
        seconds.push((
            "sluice_wal_checkpoint_last_written_bytes",
            "Bytes the last checkpoint wrote: its file and the sealed chunks no earlier one saved",
            c.last_written_bytes as f64,
        ));
        for (name, help, v) in seconds {
            gauge(&mut encoder, name, help, v)?;
        }
        Ok(())
    }
}

/// Writes one unlabelled gauge read at scrape time.
fn gauge<N>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: N,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let g = ConstGauge::new(v);
    g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)
}

/// Writes one unlabelled counter read at scrape time.
fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    v: f64,
) -> Result<(), std::fmt::Error> {
    let c = ConstCounter::new(v);
    c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)
}

/// The standard `process_*` metrics, read from `/proc/self` at scrape time.
#[derive(Debug)]
struct ProcessCollector {
    start_time: f64,
}

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on
/// every mainstream Linux architecture).
const USER_HZ: f64 = 100.0;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                .map(|k| k * 1024.0)
        };
        let mut gauges = vec![(
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch, in seconds",
            self.start_time,
        )];
        if let Some(rss) = kib("VmRSS:") {
            gauges.push((
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                rss,
            ));
        }
        if let Some(vm) = kib("VmSize:") {
            gauges.push((
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                vm,
            ));
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            gauges.push((
                "process_open_fds",
                "Open file descriptors",
                fds.count() as f64,
            ));
        }
        for (name, help, v) in gauges {
            gauge(&mut encoder, name, help, v)?;
        }
        // utime and stime are fields 14 and 15, counted after the
        // parenthesised command name (which may hold spaces).
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
        if let (Some(u), Some(s)) = (ticks(11), ticks(12)) {
            counter(
                &mut encoder,
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                (u + s) / USER_HZ,
            )?;
        }
        Ok(())
    }
}

/// Installs the global tracing subscriber: human-readable lines on stderr,
/// filtered by `level` (an `EnvFilter` directive such as `info` or
/// `sluice=debug,tower_http=debug`).
pub fn init_tracing(level: &str) -> Result<(), String> {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .map_err(|e| format!("invalid log level {level:?}: {e}"))?;
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_renamed_for_the_text_format() {
        let om = "# HELP a_requests Requests.\n# TYPE a_requests counter\n# UNIT a_requests x\na_requests_total{x=\"1\"} 2\n# HELP b Gauge.\n# TYPE b gauge\nb 1\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\na_requests_total{x=\"1\"} 2\n# HELP b Gauge.\n# TYPE b gauge\nb 1\n"
        );
    }
}

/// One tenant's figures, read at scrape time.
#[derive(Debug, Clone, Default)]
pub struct TenantFigures {
    /// The tenant ID.
    pub tenant: Arc<str>,
    /// Series in its head.
    pub series: u64,
    /// Bytes it holds against the memory limit.
    pub memory_bytes: u64,
    /// Samples stored.
    pub ingested: u64,
    /// Samples refused, by reason (nonzero ones only).
    pub rejected: Vec<(&'static str, u64)>,
    /// Samples left out on purpose, by reason (nonzero ones only).
    pub dropped: Vec<(&'static str, u64)>,
    /// Write requests refused by its rate limit.
    pub rate_limited: u64,
}

/// Where per-tenant figures come from (the tenant registry).
pub trait TenantSource: Send + Sync + std::fmt::Debug {
    /// Every open tenant's figures.
    fn figures(&self) -> Vec<TenantFigures>;
}

/// Per-tenant figures, one series per tenant (bounded by
/// `--max-tenants`).
#[derive(Debug)]
struct TenantCollector(Arc<dyn TenantSource>);

impl Collector for TenantCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let all = self.0.figures();
        gauge(
            &mut encoder,
            "sluice_tenants",
            "Tenants open, anonymous included (at most max-tenants)",
            all.len() as i64,
        )?;
        type Pick = fn(&TenantFigures) -> u64;
        let gauges: [(&str, &str, Pick); 2] = [
            ("sluice_tenant_series", "Series in each tenant's head", |f| {
                f.series
            }),
            (
                "sluice_tenant_memory_bytes",
                "Bytes each tenant holds against the memory limit (head, block indexes, aliases, metadata, exemplars, OTLP delta totals)",
                |f| f.memory_bytes,
            ),
        ];
        for (name, help, pick) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for f in &all {
                let v = i64::try_from(pick(f)).unwrap_or(i64::MAX);
                ConstGauge::new(v).encode(family.encode_family(&[("tenant", &*f.tenant)])?)?;
            }
        }
        let counters: [(&str, &str, Pick); 2] = [
            (
                "sluice_tenant_ingested_samples",
                "Samples (and histogram samples) stored, by tenant",
                |f| f.ingested,
            ),
            (
                "sluice_tenant_rate_limited_requests",
                "Write requests refused by the tenant's ingestion rate limit",
                |f| f.rate_limited,
            ),
        ];
        for (name, help, pick) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for f in &all {
                ConstCounter::new(pick(f) as f64)
                    .encode(family.encode_family(&[("tenant", &*f.tenant)])?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "sluice_tenant_rejected_samples",
            "Samples not stored, by tenant and reason",
            None,
            MetricType::Counter,
        )?;
        for f in &all {
            for &(reason, n) in &f.rejected {
                ConstCounter::new(n as f64)
                    .encode(family.encode_family(&[("tenant", &*f.tenant), ("reason", reason)])?)?;
            }
        }
        drop(family);
        let mut family = encoder.encode_descriptor(
            "sluice_tenant_dropped_samples",
            "Samples left out on purpose (relabel, ha_dedupe), by tenant and reason",
            None,
            MetricType::Counter,
        )?;
        for f in &all {
            for &(reason, n) in &f.dropped {
                ConstCounter::new(n as f64)
                    .encode(family.encode_family(&[("tenant", &*f.tenant), ("reason", reason)])?)?;
            }
        }
        Ok(())
    }
}

/// One rule group's figures, as Prometheus' `prometheus_rule_*` report
/// them (see `rules`).
#[derive(Debug, Clone, Default)]
pub struct RuleGroupFigures {
    /// Prometheus' group key, `file;name`.
    pub key: String,
    /// Evaluations run (and missed, which count as run).
    pub iterations: u64,
    /// Evaluation times skipped while one ran late.
    pub missed: u64,
    /// Rule evaluations, and those that failed.
    pub evaluations: u64,
    /// Rule evaluations that failed.
    pub failures: u64,
    /// Its interval, in seconds.
    pub interval_seconds: f64,
    /// When its last evaluation started (Unix seconds; 0 before).
    pub last_evaluation_seconds: f64,
    /// How long its last evaluation took.
    pub last_duration_seconds: f64,
    /// Its rules.
    pub rules: u64,
    /// Samples its last evaluation's results held.
    pub last_samples: u64,
}

/// What the alert notifier did, as Prometheus' `prometheus_notifications_*`.
#[derive(Debug, Clone, Default)]
pub struct NotificationFigures {
    /// Per Alertmanager (its URL): alerts sent, and requests that failed.
    pub per_alertmanager: Vec<(String, u64, u64)>,
    /// Alerts dropped (queue full, or no Alertmanager took them).
    pub dropped: u64,
    /// Alerts queued now, and the most the queue holds.
    pub queued: u64,
    /// The queue's capacity.
    pub capacity: u64,
}

/// Where rule groups' figures come from (the rules in force).
pub trait RuleSource: Send + Sync + std::fmt::Debug {
    /// Every group's figures, and the rule files' reloads that succeeded
    /// and failed.
    fn figures(&self) -> (Vec<RuleGroupFigures>, (u64, u64));
    /// What the alert notifier did.
    fn notifications(&self) -> NotificationFigures;
}

/// Rule groups' figures, one series per group (as many as the rule files
/// hold).
#[derive(Debug)]
struct RuleCollector(Arc<dyn RuleSource>);

impl Collector for RuleCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let (groups, (reloaded, failed)) = self.0.figures();
        let n = self.0.notifications();
        for (name, help, pick) in [
            (
                "sluice_notifications_sent",
                "Alerts sent to each Alertmanager, delivered or not (Prometheus' prometheus_notifications_sent_total)",
                1usize,
            ),
            (
                "sluice_notifications_errors",
                "Requests to each Alertmanager that failed",
                2,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (am, sent, errors) in &n.per_alertmanager {
                let v = if pick == 1 { *sent } else { *errors };
                ConstCounter::new(v as f64)
                    .encode(family.encode_family(&[("alertmanager", am.as_str())])?)?;
            }
        }
        counter(
            &mut encoder,
            "sluice_notifications_dropped",
            "Alerts dropped: the queue was full, or no Alertmanager took them",
            n.dropped as f64,
        )?;
        gauge(
            &mut encoder,
            "sluice_notifications_queue_length",
            "Alerts waiting to be sent",
            i64::try_from(n.queued).unwrap_or(i64::MAX),
        )?;
        gauge(
            &mut encoder,
            "sluice_notifications_queue_capacity",
            "The most alerts the queue holds",
            i64::try_from(n.capacity).unwrap_or(i64::MAX),
        )?;
        let mut family = encoder.encode_descriptor(
            "sluice_rule_file_reloads",
            "Reloads of the rule files, by result (a failed one keeps the rules in force)",
            None,
            MetricType::Counter,
        )?;
        for (result, n) in [("success", reloaded), ("failure", failed)] {
            ConstCounter::new(n as f64).encode(family.encode_family(&[("result", result)])?)?;
        }
        drop(family);
        type Pick = fn(&RuleGroupFigures) -> f64;
        let counters: [(&str, &str, Pick); 4] = [
            (
                "sluice_rule_group_iterations",
                "Evaluations of the group, missed ones included (Prometheus' prometheus_rule_group_iterations_total)",
                |g| g.iterations as f64,
            ),
            (
                "sluice_rule_group_iterations_missed",
                "Evaluation times the group skipped because an evaluation ran late",
                |g| g.missed as f64,
            ),
            (
                "sluice_rule_evaluations",
                "Rule evaluations, by group",
                |g| g.evaluations as f64,
            ),
            (
                "sluice_rule_evaluation_failures",
                "Rule evaluations that failed, by group",
                |g| g.failures as f64,
            ),
        ];
        for (name, help, pick) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for g in &groups {
                ConstCounter::new(pick(g))
                    .encode(family.encode_family(&[("rule_group", g.key.as_str())])?)?;
            }
        }
        let gauges: [(&str, &str, Pick); 5] = [
            (
                "sluice_rule_group_interval_seconds",
                "The group's evaluation interval",
                |g| g.interval_seconds,
            ),
            (
                "sluice_rule_group_last_evaluation_timestamp_seconds",
                "When the group's last evaluation started (Unix seconds)",
                |g| g.last_evaluation_seconds,
            ),
            (
                "sluice_rule_group_last_duration_seconds",
                "How long the group's last evaluation took",
                |g| g.last_duration_seconds,
            ),
            ("sluice_rule_group_rules", "The group's rules", |g| {
                g.rules as f64
            }),
            (
                "sluice_rule_group_last_evaluation_samples",
                "Samples the results of the group's last evaluation held",
                |g| g.last_samples as f64,
            ),
        ];
        for (name, help, pick) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for g in &groups {
                ConstGauge::new(pick(g))
                    .encode(family.encode_family(&[("rule_group", g.key.as_str())])?)?;
            }
        }
        Ok(())
    }
}

impl Metrics {
    /// Reports each tenant's figures from `source` (with multitenancy).
    pub fn add_tenants(&mut self, source: Arc<dyn TenantSource>) {
        self.registry
            .register_collector(Box::new(TenantCollector(source)));
    }

    /// Reports the rule groups' figures from `source`.
    pub fn add_rules(&mut self, source: Arc<dyn RuleSource>) {
        self.registry
            .register_collector(Box::new(RuleCollector(source)));
    }
}
