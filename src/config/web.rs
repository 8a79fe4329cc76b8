//! Prometheus' web configuration file (`--web-config-file`, Prometheus'
//! `--web.config.file`), read as Prometheus' exporter-toolkit reads it:
//! https (`tls_server_config`), response headers (`http_server_config`)
//! and logins (`basic_auth_users`, bcrypt hashes). Unknown keys are
//! errors, and file paths are relative to the file's own directory.
//!
//! This module only reads and checks the file; the TLS acceptor is built
//! in `server::tls` and the login check lives in `api::auth`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The web configuration file, checked.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// https; absent or without a certificate, plain http is served.
    #[serde(default)]
    pub tls_server_config: TlsServerConfig,
    /// Response headers and protocol options.
    #[serde(default)]
    pub http_server_config: HttpServerConfig,
    /// User name to bcrypt hash; when any is set, every endpoint but
    /// `/-/healthy` and `/-/ready` needs one of these logins.
    #[serde(default)]
    pub basic_auth_users: BTreeMap<String, Secret>,
}

/// A value never written to logs or `Debug` output.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "<secret>"
        })
    }
}

/// `tls_server_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsServerConfig {
    /// The server's certificate chain, PEM.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The server's private key, PEM.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The certificate chain inline, instead of `cert_file`.
    #[serde(default)]
    pub cert: Option<String>,
    /// The private key inline, instead of `key_file`.
    #[serde(default)]
    pub key: Option<Secret>,
    /// Whether and how client certificates are asked for and checked.
    #[serde(default)]
    pub client_auth_type: ClientAuth,
    /// The CAs client certificates are checked against, PEM.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// The client CAs inline, instead of `client_ca_file`.
    #[serde(default)]
    pub client_ca: Option<String>,
    /// When set, a client certificate must name one of these (DNS names
    /// or IP addresses among its subject alternative names).
    #[serde(default)]
    pub client_allowed_sans: Vec<String>,
    /// Oldest protocol version accepted.
    #[serde(default)]
    pub min_version: Option<TlsVersion>,
    /// Newest protocol version accepted.
    #[serde(default)]
    pub max_version: Option<TlsVersion>,
    /// TLS 1.2 cipher suites allowed, by Go's names; empty: the defaults.
    #[serde(default)]
    pub cipher_suites: Vec<String>,
    /// Key-exchange groups in order of preference, by Go's names.
    #[serde(default)]
    pub curve_preferences: Vec<String>,
    /// Accepted for compatibility; the server's order is always used.
    #[serde(default)]
    pub prefer_server_cipher_suites: Option<bool>,
}

impl TlsServerConfig {
    /// Whether https is asked for: a certificate is given.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some() || self.cert.is_some()
    }
}

/// `client_auth_type`, with Go's `tls.ClientAuthType` names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum ClientAuth {
    /// No client certificate is asked for.
    #[default]
    NoClientCert,
    /// One is asked for, not required and not checked.
    RequestClientCert,
    /// One is required, not checked.
    #[serde(alias = "RequireClientCert")]
    RequireAnyClientCert,
    /// One is checked against the client CAs if given.
    VerifyClientCertIfGiven,
    /// One is required and checked against the client CAs.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    /// Whether certificates are checked against `client_ca_file`.
    pub fn verifies(self) -> bool {
        matches!(
            self,
            Self::VerifyClientCertIfGiven | Self::RequireAndVerifyClientCert
        )
    }
}

/// A protocol version, by the names Prometheus' file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum TlsVersion {
    /// TLS 1.0 (refused: rustls speaks 1.2 and 1.3).
    #[serde(rename = "TLS10")]
    Tls10,
    /// TLS 1.1 (refused, as TLS 1.0).
    #[serde(rename = "TLS11")]
    Tls11,
    /// TLS 1.2, the default oldest.
    #[serde(rename = "TLS12")]
    Tls12,
    /// TLS 1.3.
    #[serde(rename = "TLS13")]
    Tls13,
}

/// `http_server_config`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpServerConfig {
    /// Accepted for compatibility; Sluice serves HTTP/1.1.
    #[serde(default)]
    pub http2: Option<bool>,
    /// Headers added to every response.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// Headers the file may set, and the values each may take (`None`: any).
/// The same list and values as Prometheus' exporter-toolkit.
const HEADERS: [(&str, Option<&[&str]>); 5] = [
    ("Content-Security-Policy", None),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-XSS-Protection", None),
    ("Strict-Transport-Security", None),
];

/// Why the file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("web config file {path}: {message}")]
pub struct WebConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl WebConfig {
    /// Reads and checks the file at `path`; relative paths in it are made
    /// relative to its directory.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let fail = |message: String| WebConfigError {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let mut config = Self::parse(&text).map_err(fail)?;
        config.resolve(path.parent().unwrap_or(Path::new(".")));
        Ok(config)
    }

    /// Parses and checks `text` (paths left as written).
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Self = if text.trim().is_empty() {
            Self::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?
        };
        config.check()?;
        Ok(config)
    }

    /// Whether logins are required.
    pub fn needs_login(&self) -> bool {
        !self.basic_auth_users.is_empty()
    }

    /// The files the configuration names (to notice when they change).
    pub fn files(&self) -> Vec<&Path> {
        let t = &self.tls_server_config;
        [&t.cert_file, &t.key_file, &t.client_ca_file]
            .into_iter()
            .flatten()
            .map(PathBuf::as_path)
            .collect()
    }

    fn resolve(&mut self, dir: &Path) {
        let t = &mut self.tls_server_config;
        for p in [&mut t.cert_file, &mut t.key_file, &mut t.client_ca_file]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
    }

    fn check(&self) -> Result<(), String> {
        // As Prometheus: a file wins over the same value inline, a client
        // CA needs a client_auth_type, and the verifying types without a
        // CA check against the system's trust store.
        let t = &self.tls_server_config;
        let has_key = t.key_file.is_some() || t.key.is_some();
        let has_ca = t.client_ca_file.is_some() || t.client_ca.is_some();
        let asks_tls =
            t.enabled() || has_key || has_ca || t.client_auth_type != ClientAuth::NoClientCert;
        if asks_tls && !t.enabled() {
            return Err("tls_server_config: missing one of cert or cert_file".into());
        }
        if asks_tls && !has_key {
            return Err("tls_server_config: missing one of key or key_file".into());
        }
        // Names are checked only on a certificate that is required and
        // verified: on an unverified one anyone can write any name, and a
        // client that sends none would skip the check.
        if !t.client_allowed_sans.is_empty()
            && t.client_auth_type != ClientAuth::RequireAndVerifyClientCert
        {
            return Err(
                "tls_server_config: client_allowed_sans needs client_auth_type RequireAndVerifyClientCert"
                    .into(),
            );
        }
        if has_ca && t.client_auth_type == ClientAuth::NoClientCert {
            return Err(
                "tls_server_config: client CAs are configured without a client_auth_type".into(),
            );
        }
        for v in [t.min_version, t.max_version].into_iter().flatten() {
            if v < TlsVersion::Tls12 {
                return Err(format!(
                    "tls_server_config: {v:?} is not supported: Sluice speaks TLS 1.2 and 1.3"
                ));
            }
        }
        if let (Some(lo), Some(hi)) = (t.min_version, t.max_version) {
            if lo > hi {
                return Err("tls_server_config: max_version is older than min_version".into());
            }
        }
        for (name, value) in &self.http_server_config.headers {
            let Some((_, allowed)) = HEADERS.iter().find(|(h, _)| h.eq_ignore_ascii_case(name))
            else {
                return Err(format!(
                    "http_server_config: header {name:?} can not be configured (allowed: {})",
                    HEADERS.map(|(h, _)| h).join(", ")
                ));
            };
            if let Some(values) = allowed {
                if !values.iter().any(|v| v.eq_ignore_ascii_case(value)) {
                    return Err(format!(
                        "http_server_config: invalid value {value:?} for header {name}"
                    ));
                }
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "http_server_config: header {name} has a value that is not a valid header value"
                ));
            }
        }
        for (user, hash) in &self.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                return Err(format!(
                    "basic_auth_users: user name {user:?} is empty or contains ':'"
                ));
            }
            if bcrypt_cost(&hash.0).is_none() {
                return Err(format!(
                    "basic_auth_users: the password of {user:?} is not a bcrypt hash ($2a$, $2b$ or $2y$); make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`"
                ));
            }
        }
        Ok(())
    }
}

/// The cost of a bcrypt hash in its modular-crypt form
/// (`$2y$10$` + 53 characters), or `None` if it is not one.
pub fn bcrypt_cost(hash: &str) -> Option<u32> {
    let rest = hash
        .strip_prefix("$2a$")
        .or_else(|| hash.strip_prefix("$2b$"))
        .or_else(|| hash.strip_prefix("$2y$"))
        .or_else(|| hash.strip_prefix("$2x$"))?;
    let (cost, salt_and_hash) = rest.split_once('$')?;
    let cost: u32 = cost.parse().ok()?;
    let ok = (4..=31).contains(&cost)
        && salt_and_hash.len() == 53
        && salt_and_hash
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
    ok.then_some(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";

    #[test]
    fn an_empty_file_is_plain_http_without_logins() {
        let c = WebConfig::parse("").expect("empty");
        assert!(!c.tls_server_config.enabled());
        assert!(!c.needs_login());
    }

    #[test]
    fn prometheus_files_parse() {
        let c = WebConfig::parse(&format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
             client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
             min_version: TLS13\nhttp_server_config:\n  http2: false\n  headers:\n    \
             X-Frame-Options: deny\n    Strict-Transport-Security: max-age=31536000\n\
             basic_auth_users:\n  alice: {HASH}\n"
        ))
        .expect("valid");
        assert!(c.tls_server_config.enabled());
        assert_eq!(c.tls_server_config.min_version, Some(TlsVersion::Tls13));
        assert!(c.needs_login());
        assert_eq!(format!("{:?}", c.basic_auth_users["alice"]), "<secret>");
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("tls_server_config:\n  cert_file: a\n", "missing one of key"),
            ("tls_server_config:\n  key_file: a\n", "missing one of cert"),
            (
                "tls_server_config:\n  client_auth_type: RequireAndVerifyClientCert\n",
                "missing one of cert",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n",
                "without a client_auth_type",
            ),
            (
                "tls_server_config:\n  client_auth_type: Nope\n",
                "unknown variant",
            ),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
                "not supported",
            ),
            (
                "http_server_config:\n  headers:\n    X-Powered-By: me\n",
                "can not be configured",
            ),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                "invalid value",
            ),
            ("basic_auth_users:\n  alice: hunter2\n", "not a bcrypt hash"),
            (
                "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAnyClientCert\n  client_allowed_sans: [x]\n",
                "needs client_auth_type RequireAndVerifyClientCert",
            ),
            ("basic_auth_userz:\n  alice: x\n", "unknown field"),
        ] {
            let e = WebConfig::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("hunter2"), "a secret in an error: {e}");
        }
    }

    #[test]
    fn paths_are_relative_to_the_file() {
        let dir = std::env::temp_dir().join(format!("sluice-web-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("web.yml");
        std::fs::write(
            &f,
            "tls_server_config:\n  cert_file: c.pem\n  key_file: /abs/k.pem\n",
        )
        .expect("write");
        let c = WebConfig::load(&f).expect("valid");
        assert_eq!(c.tls_server_config.cert_file, Some(dir.join("c.pem")));
        assert_eq!(
            c.tls_server_config.key_file,
            Some(PathBuf::from("/abs/k.pem"))
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn bcrypt_hashes_are_recognised() {
        assert_eq!(bcrypt_cost(HASH), Some(10));
        assert_eq!(bcrypt_cost("$2y$10$short"), None);
        assert_eq!(bcrypt_cost("$1$abc"), None);
    }
}
