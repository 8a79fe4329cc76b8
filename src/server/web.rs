//! The web configuration file in force: loaded at start (a bad file stops
//! the start), and again on SIGHUP and whenever it or a file it names (a
//! certificate, key or CA) changes. A reload that fails keeps what is in
//! force, says why in the log, and sets
//! `sluice_web_config_last_reload_successful` to 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::reload::{self, Reloadable};
use super::tls::{self, TlsHandle};
use crate::api::auth::Door;
use crate::config::web::WebConfig;
use crate::telemetry::WebMetrics;

/// The loaded file, what it puts in force, and how to notice a change.
pub struct WebConfigFile {
    path: PathBuf,
    door: Arc<Door>,
    tls: Option<TlsHandle>,
    metrics: WebMetrics,
    /// A digest of the file and the files it names, as last loaded.
    seen: [u8; 32],
}

impl std::fmt::Debug for WebConfigFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfigFile")
            .field("path", &self.path)
            .field("https", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl WebConfigFile {
    /// Loads `path` and puts it in force on `door`; the error says what is
    /// wrong with it. Blocking (files, one bcrypt).
    pub fn load(path: &Path, door: Arc<Door>, metrics: WebMetrics) -> Result<Self, String> {
        let config = WebConfig::load(path).map_err(|e| e.to_string())?;
        let tls = match config.tls_server_config.enabled() {
            true => Some(TlsHandle::new(
                tls::server_config(&config.tls_server_config)
                    .map_err(|e| format!("web config file {}: {e}", path.display()))?,
                &config.tls_server_config,
            )),
            false => None,
        };
        if config.needs_login() && tls.is_none() {
            tracing::warn!(
                file = %path.display(),
                "logins are required over plain http: passwords cross the network readable; set tls_server_config"
            );
        }
        door.set(&config);
        metrics.web_config.record(true);
        Ok(Self {
            seen: digest(path, &config),
            path: path.to_owned(),
            door,
            tls,
            metrics,
        })
    }

    /// The https configuration, if the file asks for https.
    pub fn tls(&self) -> Option<TlsHandle> {
        self.tls.clone()
    }

    /// Loads the file again and puts it in force, or keeps what is.
    /// Blocking.
    fn reload(&mut self) -> Result<(), String> {
        let config = WebConfig::load(&self.path).map_err(|e| e.to_string())?;
        let server = match (&self.tls, config.tls_server_config.enabled()) {
            (Some(_), true) => Some(tls::server_config(&config.tls_server_config)?),
            (None, false) => None,
            _ => return Err("switching between http and https needs a restart".into()),
        };
        self.door.set(&config);
        if let (Some(handle), Some(server)) = (&self.tls, server) {
            handle.set(server, &config.tls_server_config);
        }
        Ok(())
    }

    /// A digest of the files as they are now: the file and the files it
    /// names, or the file alone while it does not parse.
    fn current(&self) -> [u8; 32] {
        match WebConfig::load(&self.path) {
            Ok(config) => digest(&self.path, &config),
            Err(_) => reload::digest([self.path.as_path()]),
        }
    }

    fn report(&mut self, why: &'static str) {
        self.seen = self.current();
        match self.reload() {
            Ok(()) => {
                self.metrics.web_config.record(true);
                tracing::info!(file = %self.path.display(), why, "web config file reloaded");
            }
            Err(e) => {
                self.metrics.web_config.record(false);
                tracing::error!(file = %self.path.display(), why, error = %e,
                    "web config file not reloaded; the one loaded before stays in force");
            }
        }
    }
}

impl Reloadable for WebConfigFile {
    fn changed(&self) -> bool {
        self.current() != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.report(why);
    }
}

/// A digest of the file at `path` and of the files `config` names.
fn digest(path: &Path, config: &WebConfig) -> [u8; 32] {
    reload::digest(std::iter::once(path).chain(config.files()))
}
