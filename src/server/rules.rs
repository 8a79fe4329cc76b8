//! The rule files in force (`--rule-files`): read at start (a bad file
//! stops the start), and again on SIGHUP and whenever one of them changes
//! or the globs name other files. A reload that fails keeps the rules in
//! force and says why in the log.

use std::path::PathBuf;
use std::sync::Arc;

use super::reload::{self, Reloadable};
use crate::rules::Rules;

/// The rule files and the rules they put in force.
#[derive(Debug)]
pub struct RuleFiles {
    rules: Arc<Rules>,
    patterns: Vec<String>,
    /// The files' names and contents when last tried.
    seen: [u8; 32],
}

/// A digest of the files `patterns` name, and of their names.
fn digest(patterns: &[String]) -> [u8; 32] {
    let files: Vec<PathBuf> = crate::rules::file::expand(patterns).unwrap_or_default();
    let names: String = files
        .iter()
        .map(|f| f.display().to_string() + "\n")
        .collect();
    let listed = reload::digest(files.iter().map(PathBuf::as_path));
    let mut both = names.into_bytes();
    both.extend_from_slice(&listed);
    let mut out = [0u8; 32];
    out.copy_from_slice(&sha2::Digest::finalize(sha2::Digest::chain_update(
        <sha2::Sha256 as sha2::Digest>::new(),
        &both,
    )));
    out
}

impl RuleFiles {
    /// Reads the files and starts the rules' evaluation on `runtime`;
    /// the error names every problem. Blocking.
    pub fn start(
        rules: Arc<Rules>,
        patterns: Vec<String>,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, String> {
        let seen = digest(&patterns);
        let groups = rules
            .start(runtime)
            .map_err(|e| format!("rule files: {e}"))?;
        tracing::info!(groups, "rule files loaded");
        Ok(Self {
            rules,
            patterns,
            seen,
        })
    }
}

impl Reloadable for RuleFiles {
    fn changed(&self) -> bool {
        digest(&self.patterns) != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.seen = digest(&self.patterns);
        match self.rules.reload() {
            Ok(groups) => tracing::info!(groups, why, "rule files reloaded"),
            Err(_) => tracing::error!(
                why,
                "rule files not reloaded; the rules loaded before stay in force"
            ),
        }
    }
}
