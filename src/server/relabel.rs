//! The server's relabel rules in force (`--ingest-relabel-config`):
//! loaded at start (a bad file stops the start), and again on SIGHUP and
//! whenever the file changes. A reload that fails keeps the rules in
//! force, says why in the log, and sets
//! `sluice_ingest_relabel_config_last_reload_successful` to 0.

use std::path::PathBuf;
use std::sync::Arc;

use super::reload::{self, Reloadable};
use crate::api::limits::Limits;
use crate::ingest::relabel::Rules;
use crate::telemetry::Reloads;

/// The loaded file and where its rules are put in force.
#[derive(Debug)]
pub struct RelabelFile {
    path: PathBuf,
    limits: Arc<Limits>,
    metrics: Reloads,
    /// The file's digest when it was last tried.
    seen: [u8; 32],
}

impl RelabelFile {
    /// Loads `path` and puts its rules in force on `limits`; the error
    /// says what is wrong with it. Blocking.
    pub fn load(path: PathBuf, limits: Arc<Limits>, metrics: Reloads) -> Result<Self, String> {
        let seen = reload::digest([path.as_path()]);
        limits.set_server_relabel(Rules::load(&path, None)?);
        metrics.record(true);
        Ok(Self {
            path,
            limits,
            metrics,
            seen,
        })
    }
}

impl Reloadable for RelabelFile {
    fn changed(&self) -> bool {
        reload::digest([self.path.as_path()]) != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.seen = reload::digest([self.path.as_path()]);
        match Rules::load(&self.path, self.limits.server_relabel().as_ref()) {
            Ok(rules) => {
                self.limits.set_server_relabel(rules);
                self.metrics.record(true);
                tracing::info!(file = %self.path.display(), why, "ingest relabel config reloaded");
            }
            Err(e) => {
                self.metrics.record(false);
                tracing::error!(file = %self.path.display(), why, error = %e,
                    "ingest relabel config not reloaded; the rules loaded before stay in force");
            }
        }
    }
}
