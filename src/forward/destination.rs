//! One forward destination as configured: where, in which protocol, with
//! which headers and credentials, and how to batch. A config file lists
//! them under `forward:`; a `--forward` flag takes the same keys as
//! `key=value` pairs separated by commas.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The protocol spoken to a destination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Prometheus remote write 1.0 (snappy `prometheus.WriteRequest`).
    #[default]
    #[serde(rename = "remote-write-1")]
    RemoteWrite1,
    /// Prometheus remote write 2.0 (snappy `io.prometheus.write.v2.Request`:
    /// labels as references into a symbol table per request).
    #[serde(rename = "remote-write-2")]
    RemoteWrite2,
}

impl Protocol {
    /// The name used in config and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RemoteWrite1 => "remote-write-1",
            Self::RemoteWrite2 => "remote-write-2",
        }
    }
}

/// Where and how to forward every accepted sample. Its `Debug` (the
/// start-up log prints the configuration) leaves out credentials and
/// header values.
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
pub struct Destination {
    /// The name in self-metrics and of the saved send position (letters,
    /// digits, `-`, `_`, `.`); defaults to the URL's host and port.
    pub name: String,
    /// The receiver's URL, e.g. `http://vm:8428/api/v1/write`.
    pub url: String,
    /// `remote-write-1` or `remote-write-2`.
    pub protocol: Protocol,
    /// Extra request headers, e.g. `X-Scope-OrgID` for Mimir or
    /// `THANOS-TENANT` for Thanos Receive.
    pub headers: BTreeMap<String, String>,
    /// Basic auth user name.
    pub basic_auth_username: Option<String>,
    /// Basic auth password.
    pub basic_auth_password: Option<String>,
    /// A file whose content (trimmed) is the basic auth password, read at
    /// every send so that a rotated secret is picked up.
    pub basic_auth_password_file: Option<PathBuf>,
    /// A bearer token.
    pub bearer_token: Option<String>,
    /// A file whose content (trimmed) is the bearer token, read at every
    /// send.
    pub bearer_token_file: Option<PathBuf>,
    /// Longest wait for one send's answer.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Most samples in one request.
    pub max_samples_per_send: usize,
    /// Longest time a sample waits for its batch to fill.
    #[serde(with = "humantime_serde")]
    pub batch_send_deadline: Duration,
    /// A fixed number of concurrent senders; 0 (the default) lets the
    /// count follow the backlog between `min-shards` and `max-shards`.
    /// Each series always goes through one sender, so its samples arrive in
    /// order.
    pub shards: usize,
    /// The fewest senders when the count follows the backlog.
    pub min_shards: usize,
    /// The most senders when the count follows the backlog.
    pub max_shards: usize,
    /// Prometheus-style relabeling of each series before it is sent, in
    /// Prometheus' own keys (config file only): replace, keep, drop,
    /// hashmod, labeldrop, labelkeep, labelmap.
    #[serde(alias = "write_relabel_configs")]
    pub write_relabel_configs: Vec<crate::relabel::RelabelConfig>,
    /// TLS settings for an https URL, in Prometheus' `tls_config` keys.
    #[serde(alias = "tls_config")]
    pub tls_config: super::tls::TlsConfig,
    /// With multitenancy: the header that carries each sample's tenant ID
    /// to the destination (`X-Scope-OrgID` for Mimir, Cortex or another
    /// Sluice, `THANOS-TENANT` for Thanos Receive), so every tenant stays
    /// apart downstream.
    #[serde(alias = "tenant_header")]
    pub tenant_header: Option<String>,
    /// With multitenancy: only these tenants' samples go to the
    /// destination (all tenants when empty). In a `--forward` flag,
    /// `tenants=a|b`.
    pub tenants: Vec<String>,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |set: bool| if set { "<hidden>" } else { "-" };
        f.debug_struct("Destination")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("protocol", &self.protocol)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("basic_auth_username", &self.basic_auth_username)
            .field(
                "basic_auth_password",
                &hidden(self.basic_auth_password.is_some()),
            )
            .field("basic_auth_password_file", &self.basic_auth_password_file)
            .field("bearer_token", &hidden(self.bearer_token.is_some()))
            .field("bearer_token_file", &self.bearer_token_file)
            .field("timeout", &self.timeout)
            .field("max_samples_per_send", &self.max_samples_per_send)
            .field("batch_send_deadline", &self.batch_send_deadline)
            .field("shards", &self.shards)
            .field("min_shards", &self.min_shards)
            .field("max_shards", &self.max_shards)
            .field("write_relabel_configs", &self.write_relabel_configs.len())
            .field("tls_config", &self.tls_config)
            .field("tenant_header", &self.tenant_header)
            .field("tenants", &self.tenants)
            .finish()
    }
}

impl Default for Destination {
    fn default() -> Self {
        Self {
            name: String::new(),
            url: String::new(),
            protocol: Protocol::default(),
            headers: BTreeMap::new(),
            basic_auth_username: None,
            basic_auth_password: None,
            basic_auth_password_file: None,
            bearer_token: None,
            bearer_token_file: None,
            timeout: Duration::from_secs(30),
            max_samples_per_send: 2000,
            batch_send_deadline: Duration::from_secs(5),
            shards: 0,
            min_shards: 1,
            max_shards: 16,
            write_relabel_configs: Vec::new(),
            tls_config: super::tls::TlsConfig::default(),
            tenant_header: None,
            tenants: Vec::new(),
        }
    }
}

impl std::str::FromStr for Destination {
    type Err = String;

    /// Reads `url=…,name=…,header=Name:Value,timeout=10s,…`; a bare first
    /// item is the URL.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut d = Self::default();
        for (i, item) in s.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let Some((key, value)) = item.split_once('=') else {
                if i == 0 {
                    d.url = item.to_owned();
                    continue;
                }
                return Err(format!("forward: expected key=value, got {item:?}"));
            };
            let value = value.trim();
            let number = |what: &str| {
                value
                    .parse::<usize>()
                    .map_err(|_| format!("forward: {what} must be a number, got {value:?}"))
            };
            let duration = |what: &str| {
                humantime::parse_duration(value)
                    .map_err(|e| format!("forward: {what}: {e} ({value:?})"))
            };
            match key.trim() {
                "url" => d.url = value.to_owned(),
                "name" => d.name = value.to_owned(),
                "protocol" => {
                    d.protocol = match value {
                        "remote-write-1" => Protocol::RemoteWrite1,
                        "remote-write-2" => Protocol::RemoteWrite2,
                        other => {
                            return Err(format!(
                                "forward: unknown protocol {other:?}; Sluice forwards remote-write-1 and remote-write-2"
                            ))
                        }
                    }
                }
                "header" => {
                    let (n, v) = value.split_once(':').ok_or_else(|| {
                        format!("forward: header must be Name:Value, got {value:?}")
                    })?;
                    d.headers.insert(n.trim().to_owned(), v.trim().to_owned());
                }
                "basic-auth-username" => d.basic_auth_username = Some(value.to_owned()),
                "basic-auth-password" => d.basic_auth_password = Some(value.to_owned()),
                "basic-auth-password-file" => d.basic_auth_password_file = Some(value.into()),
                "bearer-token" => d.bearer_token = Some(value.to_owned()),
                "bearer-token-file" => d.bearer_token_file = Some(value.into()),
                "timeout" => d.timeout = duration("timeout")?,
                "batch-send-deadline" => d.batch_send_deadline = duration("batch-send-deadline")?,
                "max-samples-per-send" => d.max_samples_per_send = number("max-samples-per-send")?,
                "shards" => d.shards = number("shards")?,
                "min-shards" => d.min_shards = number("min-shards")?,
                "max-shards" => d.max_shards = number("max-shards")?,
                "tls-ca-file" => d.tls_config.ca_file = Some(value.into()),
                "tls-cert-file" => d.tls_config.cert_file = Some(value.into()),
                "tls-key-file" => d.tls_config.key_file = Some(value.into()),
                "tls-server-name" => d.tls_config.server_name = Some(value.to_owned()),
                "tls-insecure-skip-verify" => {
                    d.tls_config.insecure_skip_verify = match value {
                        "true" => true,
                        "false" => false,
                        other => {
                            return Err(format!(
                                "forward: tls-insecure-skip-verify must be true or false, got {other:?}"
                            ))
                        }
                    }
                }
                "tenant-header" => d.tenant_header = Some(value.to_owned()),
                "tenants" => {
                    d.tenants = value
                        .split('|')
                        .map(|t| t.trim().to_owned())
                        .filter(|t| !t.is_empty())
                        .collect()
                }
                other => return Err(format!("forward: unknown key {other:?}")),
            }
        }
        Ok(d)
    }
}

/// A destination's URL, split for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Whether the URL is https.
    pub https: bool,
    /// `host:port`.
    pub authority: String,
    /// Path and query.
    pub path: String,
}

impl Destination {
    /// The fewest and most senders: both `shards` when it is set.
    pub fn shard_range(&self) -> (usize, usize) {
        if self.shards > 0 {
            (self.shards, self.shards)
        } else {
            (
                self.min_shards.max(1),
                self.max_shards.max(self.min_shards).max(1),
            )
        }
    }

    /// Checks the settings; the URL split for sending.
    pub fn target(&self) -> Result<Target, String> {
        let (https, rest) = match self.url.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            _ => {
                return Err(format!(
                    "forward: url {:?} must start with http:// or https://",
                    self.url
                ))
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "forward: url {:?} needs a host (credentials go in basic-auth-username/password)",
                self.url
            ));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'))
        {
            authority.to_owned()
        } else if https {
            format!("{authority}:443")
        } else {
            format!("{authority}:80")
        };
        Ok(Target {
            https,
            authority,
            path: path.to_owned(),
        })
    }

    /// The name, or one derived from the URL.
    pub fn resolved_name(&self) -> String {
        if !self.name.is_empty() {
            return self.name.clone();
        }
        match self.target() {
            Ok(t) => t
                .authority
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect(),
            Err(_) => String::new(),
        }
    }

    /// Everything wrong with the settings, as one message.
    pub fn validate(&self) -> Result<(), String> {
        self.target()?;
        let name = self.resolved_name();
        if !crate::wal::reader::valid_name(&name) {
            return Err(format!(
                "forward name {name:?} must be letters, digits, '-', '_' or '.', not starting with '.'"
            ));
        }
        if self.shards > 256 {
            return Err(format!(
                "forward {name}: shards must be 1 to 256 (or 0: follow the backlog)"
            ));
        }
        if self.min_shards == 0 || self.min_shards > self.max_shards || self.max_shards > 256 {
            return Err(format!(
                "forward {name}: need 1 <= min-shards <= max-shards <= 256"
            ));
        }
        if !(1..=1_000_000).contains(&self.max_samples_per_send) {
            return Err(format!(
                "forward {name}: max-samples-per-send must be 1 to 1000000"
            ));
        }
        if self.timeout.is_zero() || self.batch_send_deadline.is_zero() {
            return Err(format!(
                "forward {name}: timeout and batch-send-deadline must be greater than 0"
            ));
        }
        if self.bearer_token.is_some() as u8
            + self.bearer_token_file.is_some() as u8
            + self.basic_auth_username.is_some() as u8
            > 1
        {
            return Err(format!(
                "forward {name}: choose one of bearer-token, bearer-token-file and basic auth"
            ));
        }
        if self.basic_auth_password.is_some() && self.basic_auth_password_file.is_some() {
            return Err(format!(
                "forward {name}: basic-auth-password and basic-auth-password-file exclude each other"
            ));
        }
        if self.target()?.https {
            self.tls_config
                .client_config()
                .map_err(|e| format!("forward {name}: {e}"))?;
        } else if self.tls_config.is_set() {
            return Err(format!("forward {name}: tls settings need an https:// url"));
        }
        crate::relabel::Relabeler::new(&self.write_relabel_configs)
            .map_err(|e| format!("forward {name}: {e}"))?;
        for (k, v) in &self.headers {
            if http::HeaderName::from_bytes(k.as_bytes()).is_err()
                || http::HeaderValue::from_str(v).is_err()
            {
                return Err(format!("forward {name}: invalid header {k:?}"));
            }
        }
        if let Some(h) = &self.tenant_header {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                return Err(format!("forward {name}: invalid tenant-header {h:?}"));
            }
            if self.headers.keys().any(|k| k.eq_ignore_ascii_case(h)) {
                return Err(format!(
                    "forward {name}: tenant-header {h:?} is also a fixed header; keep one"
                ));
            }
        }
        Ok(())
    }

    /// What this destination is for tenant `tenant`'s samples: none when it
    /// is bound to other tenants; else itself, with the tenant header set
    /// to `tenant` when it has one.
    pub fn for_tenant(&self, tenant: &str) -> Option<Destination> {
        if !self.tenants.is_empty() && !self.tenants.iter().any(|t| t == tenant) {
            return None;
        }
        let mut d = self.clone();
        if let Some(h) = &self.tenant_header {
            d.headers.insert(h.clone(), tenant.to_owned());
        }
        Some(d)
    }
}

/// Which series a destination takes when series are spread over the
/// destinations: those whose label hash, modulo `of`, is `index` or one of
/// the `replicas - 1` positions before it (as vmagent's `shardByURL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// This destination's position.
    pub index: usize,
    /// How many destinations there are.
    pub of: usize,
    /// How many destinations take each series.
    pub replicas: usize,
}

impl Split {
    /// Whether the series with these canonical labels is this
    /// destination's.
    pub fn takes(&self, labels: &[u8]) -> bool {
        let of = self.of.max(1);
        let first = (xxhash_rust::xxh3::xxh3_64(labels) % of as u64) as usize;
        (0..self.replicas.clamp(1, of)).any(|r| (first + r) % of == self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_form_reads_every_key() {
        let d: Destination =
            "http://mimir:9009/api/v1/push,name=mimir,header=X-Scope-OrgID:team-a,\
                              bearer-token-file=/run/token,timeout=10s,max-samples-per-send=500,\
                              batch-send-deadline=1s,shards=2"
                .parse()
                .expect("parse");
        assert_eq!(d.url, "http://mimir:9009/api/v1/push");
        assert_eq!(d.name, "mimir");
        assert_eq!(d.headers["X-Scope-OrgID"], "team-a");
        assert_eq!(d.bearer_token_file, Some(PathBuf::from("/run/token")));
        assert_eq!(d.timeout, Duration::from_secs(10));
        assert_eq!(d.max_samples_per_send, 500);
        assert_eq!(d.batch_send_deadline, Duration::from_secs(1));
        assert_eq!(d.shards, 2);
        d.validate().expect("valid");
        assert_eq!(
            d.target().expect("target"),
            Target {
                https: false,
                authority: "mimir:9009".into(),
                path: "/api/v1/push".into()
            }
        );
    }

    #[test]
    fn tls_reads_prometheus_tls_config_keys_in_a_file_and_tls_flags() {
        let from_file: Destination = serde_yaml_ng::from_str(
            "url: https://receive:19291/api/v1/receive\n\
             tls_config:\n  ca_file: /etc/ca.pem\n  cert_file: /etc/c.pem\n  key_file: /etc/c.key\n  \
             server_name: receive.example\n  insecure_skip_verify: true\n",
        )
        .expect("yaml");
        let from_flag: Destination =
            "https://receive:19291/api/v1/receive,tls-ca-file=/etc/ca.pem,\
             tls-cert-file=/etc/c.pem,tls-key-file=/etc/c.key,tls-server-name=receive.example,\
             tls-insecure-skip-verify=true"
                .parse()
                .expect("flag");
        assert_eq!(from_file, from_flag);
        // The protocol is spelled the same in a file as in a flag.
        for p in [Protocol::RemoteWrite1, Protocol::RemoteWrite2] {
            let d: Destination =
                serde_yaml_ng::from_str(&format!("url: http://a:1/w\nprotocol: {}\n", p.as_str()))
                    .expect("the file form takes the flag's spelling");
            assert_eq!(d.protocol, p);
        }
        assert_eq!(
            from_file.tls_config.server_name.as_deref(),
            Some("receive.example")
        );
        assert!(from_file.tls_config.insecure_skip_verify);
        assert_eq!(
            from_file.target().expect("target").authority,
            "receive:19291"
        );
        let default_port: Destination = "https://mimir/api/v1/push".parse().expect("flag");
        assert_eq!(
            default_port.target().expect("target"),
            Target {
                https: true,
                authority: "mimir:443".into(),
                path: "/api/v1/push".into()
            }
        );
    }

    #[test]
    fn debug_output_keeps_secrets_out_of_the_log() {
        let d: Destination = "http://a:1/w,bearer-token=s3cret,header=Authorization:Basic Zm9v"
            .parse()
            .expect("parse");
        let text = format!("{d:?}");
        assert!(!text.contains("s3cret") && !text.contains("Zm9v"), "{text}");
        assert!(
            text.contains("Authorization") && text.contains("<hidden>"),
            "{text}"
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (flag, says) in [
            ("url=http://a:1/w,colour=red", "unknown key \"colour\""),
            ("url=http://a:1/w,shards=x", "shards must be a number"),
            ("url=http://a:1/w,protocol=otlp", "unknown protocol"),
            ("url=http://a:1/w,header=NoColon", "Name:Value"),
        ] {
            let e = flag.parse::<Destination>().expect_err(flag);
            assert!(e.contains(says), "{flag}: {e}");
        }
        for (d, says) in [
            ("ftp://a/w", "must start with http:// or https://"),
            (
                "http://a:1/w,tls-insecure-skip-verify=true",
                "tls settings need an https:// url",
            ),
            (
                "https://a:1/w,tls-ca-file=/nonexistent/ca.pem",
                "/nonexistent/ca.pem",
            ),
            ("http://user:pw@a/w", "needs a host"),
            ("http://a:1/w,shards=300", "shards must be 1 to 256"),
            ("http://a:1/w,max-samples-per-send=0", "1 to 1000000"),
            (
                "http://a:1/w,max-samples-per-send=99999999999",
                "1 to 1000000",
            ),
            (
                "http://a:1/w,min-shards=4,max-shards=2",
                "min-shards <= max-shards",
            ),
            ("http://a:1/w,name=../x", "forward name"),
            (
                "http://a:1/w,bearer-token=t,basic-auth-username=u",
                "choose one",
            ),
        ] {
            let e = d
                .parse::<Destination>()
                .expect("parse")
                .validate()
                .expect_err(d);
            assert!(e.contains(says), "{d}: {e}");
        }
    }

    #[test]
    fn a_name_is_derived_from_the_url() {
        let d: Destination = "http://127.0.0.1:8428/api/v1/write".parse().expect("parse");
        assert_eq!(d.resolved_name(), "127_0_0_1_8428");
        let d: Destination = "http://vm/api/v1/write".parse().expect("parse");
        assert_eq!(d.target().expect("t").authority, "vm:80");
    }

    #[test]
    fn the_file_form_uses_the_same_keys() {
        let d: Destination = serde_yaml_ng::from_str(
            "url: http://vm:8428/api/v1/write\nheaders: {THANOS-TENANT: a}\ntimeout: 5s\nshards: 8\n",
        )
        .expect("yaml");
        assert_eq!(d.headers["THANOS-TENANT"], "a");
        assert_eq!(d.shards, 8);
        assert_eq!(d.timeout, Duration::from_secs(5));
        assert_eq!(d.max_samples_per_send, 2000);
        let d: Destination = serde_yaml_ng::from_str(
            "url: http://vm:8428/api/v1/write\nwrite_relabel_configs:\n  - {source_labels: [__name__], regex: 'go_.*', action: drop}\n",
        )
        .expect("Prometheus' key");
        assert_eq!(d.write_relabel_configs.len(), 1);
        d.validate().expect("valid");
    }

    #[test]
    fn a_split_gives_every_series_to_exactly_as_many_destinations_as_replicas() {
        for (of, replicas) in [(2, 1), (3, 1), (3, 2), (4, 4), (2, 5)] {
            let mut per_destination = vec![0usize; of];
            for i in 0..1000 {
                let labels = format!("series-{i}");
                let takers: Vec<usize> = (0..of)
                    .filter(|&index| {
                        Split {
                            index,
                            of,
                            replicas,
                        }
                        .takes(labels.as_bytes())
                    })
                    .collect();
                assert_eq!(takers.len(), replicas.min(of), "{of} {replicas}");
                for t in takers {
                    per_destination[t] += 1;
                }
            }
            // Spread about evenly.
            let even = 1000 * replicas.min(of) / of;
            assert!(
                per_destination.iter().all(|&n| n > even * 8 / 10),
                "{per_destination:?}"
            );
        }
    }
}
