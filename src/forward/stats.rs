//! A destination's self-metrics: handles into the registry's families,
//! which `telemetry` owns and names.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// One destination's self-metrics (handles into the registry's families).
#[derive(Debug, Clone)]
pub struct Stats {
    /// Samples the destination acknowledged.
    pub sent: Counter,
    /// Samples the destination refused with a 4xx other than 429: dropped.
    pub failed: Counter,
    /// Samples sent again after a 5xx, a 429 or a connection error.
    pub retried: Counter,
    /// Samples given up because the unsent log outgrew
    /// `forward-max-lag-bytes`.
    pub dropped_lag: Counter,
    /// Samples whose series' labels were no longer in the log or any
    /// checkpoint (their series was removed before they were read).
    pub dropped_unknown_series: Counter,
    /// WAL bytes from the saved position to the durable end.
    pub pending_bytes: Gauge,
    /// Seconds between now and the newest sample timestamp acknowledged.
    pub lag_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The newest sample timestamp acknowledged, in seconds.
    pub highest_sent_seconds: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Senders running.
    pub shards: Gauge,
    /// Series whose labels the reader keeps.
    pub series: Gauge,
    /// Time per send attempt.
    pub send_seconds: Histogram,
}
