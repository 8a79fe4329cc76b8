//! The rule files in force (`--rule-files`): read at start (a bad file
//! stops the start), and again on SIGHUP and whenever one of them changes
//! or the globs name other files. A reload that fails keeps the rules in
//! force and says why in the log.
//!
//! And each tenant's rule directory (`--ruler-storage-local-directory`,
//! laid out as Mimir's ruler reads its local storage: `<dir>/<tenant>/`
//! holding one rule file per namespace): a set of rules per tenant, over
//! its database, read again on the same occasions. A tenant's bad file
//! keeps that tenant's rules in force and stops nothing else, at start
//! too.
//!
//! And the alert relabelling (`--alert-relabel-config`), read at start (a
//! bad file stops the start) and again on the same occasions, a bad file
//! then keeping the relabelling in force.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::reload::{self, Reloadable};
use crate::api::tenant::{Tenant, TenantId, ANONYMOUS};
use crate::api::AppState;
use crate::rules::{RuleSettings, Rules};

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
    let files: Vec<PathBuf> = crate::rules::file::expand(patterns, false).unwrap_or_default();
    listing_digest(String::new(), &files)
}

/// A digest of `names`, the files' names and their contents.
fn listing_digest(mut names: String, files: &[PathBuf]) -> [u8; 32] {
    names.extend(files.iter().map(|f| f.display().to_string() + "\n"));
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

/// The tenants' rule directories and the rules they put in force.
pub struct TenantRuleDirs {
    shared: Arc<Mutex<TenantDirs>>,
    /// The directories' names and files when last read.
    seen: [u8; 32],
}

/// The rule sets of the tenants that have a directory (or had one: its
/// set then holds no groups), each holding its tenant open.
struct TenantDirs {
    dir: PathBuf,
    base: RuleSettings,
    state: AppState,
    runtime: tokio::runtime::Handle,
    open: BTreeMap<TenantId, (Arc<Rules>, Arc<Tenant>)>,
}

/// The tenants with a directory under `dir`: every directory whose name is
/// a tenant ID and does not start with a dot (without multitenancy,
/// `anonymous` alone), in order.
fn tenant_dirs(dir: &Path, multitenancy: bool) -> Vec<TenantId> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<TenantId> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        // `.git`, and the `..data` links a Kubernetes ConfigMap mount makes.
        .filter(|name| !name.starts_with('.'))
        .filter_map(|name| TenantId::parse(&name).ok())
        .filter(|id| multitenancy || id.as_str() == ANONYMOUS)
        .collect();
    out.sort();
    out
}

/// The glob of every file in tenant `id`'s directory.
fn pattern(dir: &Path, id: &TenantId) -> String {
    let base = glob::Pattern::escape(&dir.join(id.as_str()).display().to_string());
    format!("{base}/*")
}

/// A digest of the tenants' directories and of every file in them.
fn dirs_digest(dir: &Path, multitenancy: bool) -> [u8; 32] {
    let ids = tenant_dirs(dir, multitenancy);
    let patterns: Vec<String> = ids.iter().map(|id| pattern(dir, id)).collect();
    let names: String = ids.iter().map(|id| format!("{}\n", id.as_str())).collect();
    let files = crate::rules::file::expand(&patterns, true).unwrap_or_default();
    listing_digest(names, &files)
}

impl TenantDirs {
    /// Reads every tenant's directory: a tenant seen for the first time
    /// is opened (as a first write opens it) and its rules started; the
    /// others' files are read again, and a tenant whose directory went
    /// keeps a set with no groups (its series marked stale). Returns each
    /// tenant whose files were bad, with why. Blocking.
    fn sync(&mut self) -> Vec<(String, String)> {
        let tenants = self.state.tenants();
        let ids = tenant_dirs(&self.dir, tenants.multitenancy());
        let mut problems = Vec::new();
        for id in &ids {
            if let Some((rules, _)) = self.open.get(id) {
                if let Err(e) = rules.reload() {
                    problems.push((id.as_str().to_owned(), e.to_string()));
                }
                continue;
            }
            let tenant = match self.runtime.block_on(tenants.for_write(id)) {
                Ok(t) => t,
                Err(e) => {
                    tracing::error!(tenant = %id.as_str(), error = %e, "a tenant with rules cannot be opened; its rules do not run");
                    problems.push((id.as_str().to_owned(), e.to_string()));
                    continue;
                }
            };
            let header = tenants.multitenancy().then(|| {
                let value = http::HeaderValue::from_str(id.as_str())
                    .unwrap_or_else(|_| http::HeaderValue::from_static(ANONYMOUS));
                (tenants.header().clone(), value)
            });
            let (limits, tenant_id) = (self.state.tenant_limits(), id.clone());
            let settings = RuleSettings {
                patterns: vec![pattern(&self.dir, id)],
                files_only: true,
                notify_header: header,
                limits: Some(Arc::new(move || {
                    let l = limits.current().limits(&tenant_id);
                    (
                        l.ruler_max_rule_groups_per_tenant,
                        l.ruler_max_rules_per_rule_group,
                    )
                })),
                ..self.base.clone()
            };
            let rules = Arc::new(Rules::new(settings, Arc::clone(&tenant.db)));
            // Listed before it starts: a shutdown meanwhile stops it.
            self.state.rule_sets().add(id.as_str(), Arc::clone(&rules));
            match rules.start(self.runtime.clone()) {
                Ok(groups) => {
                    tracing::info!(tenant = %id.as_str(), groups, "tenant's rule files loaded")
                }
                Err(e) => {
                    for problem in &e.0 {
                        tracing::error!(tenant = %id.as_str(), error = %problem, "a tenant's rule file cannot be loaded; its rules start when it is fixed");
                    }
                    problems.push((id.as_str().to_owned(), e.to_string()));
                }
            }
            self.open.insert(id.clone(), (rules, tenant));
        }
        // Tenants whose directory went: their groups are removed.
        for (id, (rules, _)) in &self.open {
            if !ids.contains(id) {
                if let Err(e) = rules.reload() {
                    problems.push((id.as_str().to_owned(), e.to_string()));
                }
            }
        }
        problems
    }
}

impl std::fmt::Debug for TenantRuleDirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.shared.lock();
        f.debug_struct("TenantRuleDirs")
            .field("dir", &d.dir)
            .field("tenants", &d.open.len())
            .finish_non_exhaustive()
    }
}

impl TenantRuleDirs {
    /// Reads every tenant's directory under `dir` and starts their rules
    /// on `runtime`, each with `base`'s settings; a bad file is said in
    /// the log, and its tenant's rules start once it is fixed. Blocking
    /// (not on the runtime's threads: opening a tenant waits on it).
    pub fn start(
        dir: PathBuf,
        base: RuleSettings,
        state: AppState,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let multitenancy = state.tenants().multitenancy();
        if !dir.is_dir() {
            tracing::warn!(dir = %dir.display(), "the tenants' rule directory does not exist (yet); it is looked at every few seconds");
        }
        let seen = dirs_digest(&dir, multitenancy);
        let shared = Arc::new(Mutex::new(TenantDirs {
            dir,
            base,
            state: state.clone(),
            runtime,
            open: BTreeMap::new(),
        }));
        let _ = shared.lock().sync();
        // Held weakly: the state holds the reload, and the directories
        // hold the state.
        let reloader = Arc::downgrade(&shared);
        state.rule_sets().set_tenant_reload(Box::new(move || {
            reloader
                .upgrade()
                .map_or_else(Vec::new, |dirs| dirs.lock().sync())
        }));
        Self { shared, seen }
    }

    /// The directories' digest, and the tenants' ruler limits: a change
    /// of limits in the runtime configuration reads the files again (a
    /// tenant refused for its size starts once its limit is raised).
    fn digest(&self) -> [u8; 32] {
        let d = self.shared.lock();
        let files = dirs_digest(&d.dir, d.state.tenants().multitenancy());
        let in_force = d.state.tenant_limits().current();
        let limits: String = d
            .open
            .keys()
            .map(|id| {
                let l = in_force.limits(id);
                format!(
                    "{}:{}:{}\n",
                    id.as_str(),
                    l.ruler_max_rule_groups_per_tenant,
                    l.ruler_max_rules_per_rule_group
                )
            })
            .collect();
        let mut both = files.to_vec();
        both.extend_from_slice(limits.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(&sha2::Digest::finalize(sha2::Digest::chain_update(
            <sha2::Sha256 as sha2::Digest>::new(),
            &both,
        )));
        out
    }
}

impl Reloadable for TenantRuleDirs {
    fn changed(&self) -> bool {
        self.digest() != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.seen = self.digest();
        let problems = self.shared.lock().sync();
        if problems.is_empty() {
            tracing::info!(why, "tenants' rule files reloaded");
        }
        for (tenant, e) in problems {
            tracing::error!(why, tenant, error = %e, "a tenant's rule files not reloaded; its rules loaded before stay in force");
        }
    }
}

/// The alert relabelling file and the cell every notifier reads it from.
#[derive(Debug)]
pub struct AlertRelabelFile {
    path: PathBuf,
    cell: crate::rules::notifier::AlertRelabel,
    /// The file's digest when it was last tried.
    seen: [u8; 32],
}

impl AlertRelabelFile {
    /// Reads `path` and puts its rules in `cell`; the error says what is
    /// wrong with it. Blocking.
    pub fn load(path: PathBuf, cell: crate::rules::notifier::AlertRelabel) -> Result<Self, String> {
        let seen = reload::digest([path.as_path()]);
        *cell.write() = Arc::new(crate::relabel::Relabeler::from_file(&path)?);
        Ok(Self { path, cell, seen })
    }
}

impl Reloadable for AlertRelabelFile {
    fn changed(&self) -> bool {
        reload::digest([self.path.as_path()]) != self.seen
    }

    fn reload_and_report(&mut self, why: &'static str) {
        self.seen = reload::digest([self.path.as_path()]);
        match crate::relabel::Relabeler::from_file(&self.path) {
            Ok(r) => {
                *self.cell.write() = Arc::new(r);
                tracing::info!(file = %self.path.display(), why, "alert relabel config reloaded");
            }
            Err(e) => tracing::error!(file = %self.path.display(), why, error = %e,
                "alert relabel config not reloaded; the rules loaded before stay in force"),
        }
    }
}
