//! The one typed configuration tree. Every field has a default that works on
//! a laptop; a config file (YAML or TOML) uses the same kebab-case keys as
//! the command-line flags. The library never reads the environment or argv.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ingest::otlp::OtlpOptions;
use crate::ingest::validate::LabelLimits;
use crate::promql::guard::ParseLimits;
use crate::promql::QueryOptions;
use crate::storage::head::{Durability, HeadOptions};
use crate::wal::commit::FsyncMode;
use crate::wal::WalOptions;

/// Sluice's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub listen: SocketAddr,
    /// Directory for durable data: the write-ahead log and checkpoints.
    pub data_dir: PathBuf,
    /// Largest request body accepted, in bytes, as sent (compressed).
    pub max_body_bytes: usize,
    /// Largest request body accepted after decompression, in bytes; checked
    /// from the snappy header before any buffer is allocated.
    pub max_decompressed_bytes: usize,
    /// Most labels one series may carry, `__name__` included.
    pub max_labels_per_series: usize,
    /// Longest label name, in bytes.
    pub max_label_name_length: usize,
    /// Longest label value, in bytes.
    pub max_label_value_length: usize,
    /// Most series the head holds; samples for new series beyond it are rejected.
    pub max_series: usize,
    /// Log filter: a level (`info`) or `EnvFilter` directives.
    pub log_level: String,
    /// Longest time a request other than a query may take before it is
    /// answered 503 (queries have `query-timeout`).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Most HTTP connections open at once.
    pub http_max_connections: usize,
    /// Longest wait for a request's headers; a keep-alive connection idle
    /// this long is closed too.
    #[serde(with = "humantime_serde")]
    pub http_header_read_timeout: Duration,
    /// Largest request head (request line, URL and headers), in bytes.
    pub http_max_header_bytes: usize,
    /// Longest wait at shutdown for requests in flight.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Head shards (each with its own lock); 0 picks 4× the CPU count.
    pub head_shards: usize,
    /// Most metric families whose metadata (type, help, unit) is kept.
    pub max_metadata_families: usize,
    /// Most bytes of metadata text (names, help, units) kept in all.
    pub max_metadata_bytes: usize,
    /// Longest a query may run before it fails with `timeout`.
    #[serde(with = "humantime_serde")]
    pub query_timeout: Duration,
    /// Most samples one query may load.
    pub query_max_samples: usize,
    /// How far back an instant selector looks for a sample.
    #[serde(with = "humantime_serde")]
    pub query_lookback_delta: Duration,
    /// Longest query text, in bytes (queries, `match[]` selectors).
    pub query_max_length: usize,
    /// Deepest query nesting: brackets plus operators around any point.
    pub query_max_depth: usize,
    /// Most bytes of label values one `label_replace` or `label_join` call
    /// may make.
    pub query_max_label_bytes: usize,
    /// Most queries evaluated at once (query API, series, labels,
    /// federate); more wait for a slot, up to their timeout.
    pub query_max_concurrency: usize,
    /// Largest form-encoded body of a query API request (POST), in bytes.
    pub query_max_form_bytes: usize,
    /// Largest answer of the query API and federation, in bytes; a bigger
    /// one is an error, not a body.
    pub query_max_response_bytes: usize,
    /// OTLP resource attributes that become labels on every series of the
    /// resource (as Prometheus' `otlp.promote_resource_attributes`).
    pub otlp_promote_resource_attributes: Vec<String>,
    /// Store OTLP delta sums and histograms as running totals (cumulative)
    /// instead of refusing them.
    pub otlp_delta_to_cumulative: bool,
    /// When a write is acknowledged: `always` (after its WAL records are
    /// fsynced, group-committed) or `interval=<duration>` (once written;
    /// fsynced within the interval, so a crash loses at most that much).
    pub wal_fsync: WalFsync,
    /// Size at which a WAL segment is closed and the next one started.
    pub wal_segment_bytes: u64,
    /// On corruption in the middle of the WAL, drop everything from the bad
    /// record on and start, instead of refusing to start.
    pub wal_repair: bool,
    /// Run without a WAL: nothing survives a restart (for a pure cache).
    pub wal_disabled: bool,
    /// Longest time between checkpoints of the head (which let the WAL
    /// segments before them be deleted); a busy WAL checkpoints sooner.
    #[serde(with = "humantime_serde")]
    pub checkpoint_interval: Duration,
    /// How long samples are kept: older chunks are dropped, and series
    /// with no sample this recent are removed.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// Memory the head may use, in bytes; 0 picks 60% of the machine's (or
    /// cgroup's) memory. Writes get 429 once the head's accounted bytes
    /// reach 80% of it, leaving the rest for requests and queries.
    pub max_memory: u64,
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

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9201)),
            data_dir: PathBuf::from("./data"),
            max_body_bytes: 16 << 20,
            max_decompressed_bytes: 32 << 20,
            max_labels_per_series: 64,
            max_label_name_length: 1024,
            max_label_value_length: 4096,
            max_series: 10_000_000,
            log_level: "info".to_owned(),
            request_timeout: Duration::from_secs(30),
            http_max_connections: 4096,
            http_header_read_timeout: Duration::from_secs(30),
            http_max_header_bytes: 1 << 20,
            shutdown_timeout: Duration::from_secs(30),
            head_shards: 0,
            max_metadata_families: 100_000,
            max_metadata_bytes: 64 << 20,
            query_timeout: Duration::from_secs(120),
            query_max_samples: 50_000_000,
            query_lookback_delta: Duration::from_secs(300),
            query_max_length: ParseLimits::default().max_length,
            query_max_depth: ParseLimits::default().max_depth,
            query_max_label_bytes: QueryOptions::default().max_label_bytes,
            query_max_concurrency: 20,
            // Go's ParseForm limit, so the answer is Prometheus'.
            query_max_form_bytes: 10 << 20,
            query_max_response_bytes: 512 << 20,
            otlp_promote_resource_attributes: Vec::new(),
            otlp_delta_to_cumulative: false,
            wal_fsync: WalFsync::Always,
            wal_segment_bytes: 128 << 20,
            wal_repair: false,
            wal_disabled: false,
            checkpoint_interval: Duration::from_secs(30 * 60),
            retention: Duration::from_secs(15 * 24 * 3600),
            max_memory: 0,
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
        if self.retention < Duration::from_secs(60) {
            return Err(ConfigError::Invalid("retention must be at least 1m".into()));
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
        Ok(())
    }

    /// The HTTP listener's limits.
    pub fn http_limits(&self) -> crate::server::http::HttpLimits {
        crate::server::http::HttpLimits {
            max_connections: self.http_max_connections,
            header_read_timeout: self.http_header_read_timeout,
            max_header_bytes: self.http_max_header_bytes,
            shutdown_timeout: self.shutdown_timeout,
        }
    }

    /// The label limits for ingest.
    pub fn label_limits(&self) -> LabelLimits {
        LabelLimits {
            max_labels: self.max_labels_per_series,
            max_name_len: self.max_label_name_length,
            max_value_len: self.max_label_value_length,
        }
    }

    /// The default limits of queries.
    pub fn query_options(&self) -> QueryOptions {
        QueryOptions {
            lookback_ms: i64::try_from(self.query_lookback_delta.as_millis()).unwrap_or(i64::MAX),
            max_samples: self.query_max_samples,
            timeout: self.query_timeout,
            parse: ParseLimits {
                max_length: self.query_max_length,
                max_depth: self.query_max_depth,
            },
            max_label_bytes: self.query_max_label_bytes,
        }
    }

    /// How OTLP data is translated.
    pub fn otlp_options(&self) -> OtlpOptions {
        OtlpOptions {
            promote_resource_attributes: self.otlp_promote_resource_attributes.clone(),
            delta_to_cumulative: self.otlp_delta_to_cumulative,
            target_info_interval_ms: (self.query_options().lookback_ms / 2).max(1),
        }
    }

    /// Where and how the head is made durable; `None` without a WAL.
    pub fn durability(&self) -> Option<Durability> {
        (!self.wal_disabled).then(|| Durability {
            dir: self.data_dir.clone(),
            wal: WalOptions {
                segment_bytes: self.wal_segment_bytes,
                repair: self.wal_repair,
            },
            fsync: self.wal_fsync.mode(),
        })
    }

    /// The memory limit in bytes: `max-memory`, or 60% of the machine's.
    pub fn memory_limit(&self) -> u64 {
        if self.max_memory > 0 {
            return self.max_memory;
        }
        crate::storage::machine_memory_bytes().map_or(4 << 30, |m| m / 10 * 6)
    }

    /// Every setting by its flag name, with its value as text, for the
    /// status page.
    pub fn flags(&self) -> Vec<(String, String)> {
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(self) else {
            return Vec::new();
        };
        map.into_iter()
            .map(|(k, v)| {
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

    /// The head's options.
    pub fn head_options(&self) -> HeadOptions {
        let shards = if self.head_shards == 0 {
            4 * std::thread::available_parallelism().map_or(4, usize::from)
        } else {
            self.head_shards
        };
        HeadOptions {
            shards,
            max_series: self.max_series,
            ..HeadOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
