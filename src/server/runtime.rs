//! The runtime configuration file in force (`--runtime-config-file`):
//! loaded at start (a bad file stops the start), and again on SIGHUP and
//! whenever it changes. A reload that fails keeps the limits and bindings
//! in force, says why in the log, and sets
//! `sluice_runtime_config_last_reload_successful` to 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::reload::{self, Reloadable};
use crate::api::limits::{InForce, Limits};
use crate::config::runtime::RuntimeConfig;
use crate::telemetry::Reloads;

/// The loaded file and where its limits are put in force.
#[derive(Debug)]
pub struct RuntimeConfigFile {
    path: PathBuf,
    limits: Arc<Limits>,
    metrics: Reloads,
    /// The file's digest when it was last tried.
    seen: [u8; 32],
}

/// What the file at `path` puts in force after `previous`, or why it
/// cannot.
fn read(path: &Path, previous: &InForce) -> Result<InForce, String> {
    let config = RuntimeConfig::load(path).map_err(|e| e.to_string())?;
    InForce::after(&config, previous)
        .map_err(|e| format!("runtime config file {}: {e}", path.display()))
}

impl RuntimeConfigFile {
    /// Loads `path` and puts it in force on `limits`; the error says what
    /// is wrong with it. Blocking.
    pub fn load(
        path: &Path,
        limits: Arc<Limits>,
        metrics: Reloads,
        logins: bool,
    ) -> Result<Self, String> {
        let seen = reload::digest([path]);
        let in_force = read(path, &InForce::default())?;
        if in_force.binds() && !logins {
            tracing::warn!(
                file = %path.display(),
                "identities are bound to tenants, but no logins are configured \
                 (basic_auth_users in --web-config-file) and no client certificates are \
                 verified (client_auth_type): the bindings have no one to bind"
            );
        }
        limits.set(in_force);
        metrics.record(true);
        Ok(Self {
            path: path.to_owned(),
            limits,
            metrics,
            seen,
        })
    }
}

impl Reloadable for RuntimeConfigFile {
    fn changed(&self) -> bool {
        reload::digest([self.path.as_path()]) != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.seen = reload::digest([self.path.as_path()]);
        // An empty file at reload is most likely one being rewritten: it
        // would lift every limit and binding, so it is refused.
        let read = match std::fs::read_to_string(&self.path) {
            Ok(text) if text.trim().is_empty() => Err(format!(
                "runtime config file {} is empty (being rewritten?); to lift every limit and \
                 binding, write `limits: {{}}`",
                self.path.display()
            )),
            _ => read(&self.path, &self.limits.current()),
        };
        let was_binding = self.limits.current().binds();
        match read {
            Ok(in_force) => {
                if was_binding && !in_force.binds() {
                    tracing::warn!(file = %self.path.display(),
                        "identities are gone from the runtime config file: any login may now use any tenant");
                }
                self.limits.set(in_force);
                self.metrics.record(true);
                tracing::info!(file = %self.path.display(), why, "runtime config file reloaded");
            }
            Err(e) => {
                self.metrics.record(false);
                tracing::error!(file = %self.path.display(), why, error = %e,
                    "runtime config file not reloaded; the one loaded before stays in force");
            }
        }
    }
}
