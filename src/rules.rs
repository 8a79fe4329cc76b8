//! Recording and alerting rules, evaluated as Prometheus evaluates them:
//! rule files in
//! Prometheus' format ([`file`]), named by `--rule-files` (globs), each
//! group evaluated on its interval at the times Prometheus would choose
//! ([`group`]), its results written through the `Appender` (logged,
//! forwarded, queried as any sample) with stale markers where a series
//! stops. Files are read again on SIGHUP and when they change; a reload
//! with an error keeps the rules in force.
//!
//! Alerting rules ([`alerting`]) move their alerts from pending to firing
//! to resolved as Prometheus' do, write `ALERTS` and `ALERTS_FOR_STATE`,
//! restore their `for` state after a start, expand their templates
//! ([`template`]) and send to Alertmanager ([`notifier`]). A set of rules
//! ([`Rules`]) runs over one tenant's database: `--rule-files` over
//! `anonymous`, each tenant's rule directory over that tenant
//! ([`RuleSets`] holds them all).

pub mod alerting;
pub mod file;
pub mod group;
pub mod notifier;
pub mod template;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::promql::QueryOptions;
use crate::storage::db::Db;
use file::{FileErrors, GroupSpec};
use group::{eval_timestamp_ns, group_hash, Group, GroupStatus};

/// What the rules are read from and evaluated with.
#[derive(Clone)]
pub struct RuleSettings {
    /// Globs naming the rule files.
    pub patterns: Vec<String>,
    /// A group's interval where it sets none, in ms.
    pub interval_ms: i64,
    /// How far back of its evaluation time a group's queries look where
    /// it sets no `query_offset`, in ms.
    pub query_offset_ms: i64,
    /// The queries' options (limits, timeout, PromQL settings).
    pub query: QueryOptions,
    /// What alerting rules need: externals, restore and resend settings.
    pub alerting: group::AlertSettings,
    /// The Alertmanagers alerts go to (their URLs).
    pub alertmanagers: Vec<String>,
    /// How the notifications reach them: TLS and login.
    pub alertmanager_transport: notifier::Transport,
    /// The alert relabelling in force (`--alert-relabel-config`).
    pub alert_relabel: notifier::AlertRelabel,
    /// Whether every file the patterns name is a rule file, directories
    /// and dot-files passed over (a tenant's rule directory), rather than
    /// every path they name (`--rule-files`, as Prometheus reads them).
    pub files_only: bool,
    /// A header the notifications carry: the tenant whose alerts they are.
    pub notify_header: Option<(http::HeaderName, http::HeaderValue)>,
    /// The most groups, and rules in a group, the files may hold (read at
    /// each load, 0: no limit): the tenant's limits.
    pub limits: Option<RuleLimits>,
}

/// The most rule groups, and rules per group, a set may hold now.
pub type RuleLimits = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

impl std::fmt::Debug for RuleSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSettings")
            .field("patterns", &self.patterns)
            .field("interval_ms", &self.interval_ms)
            .field("query_offset_ms", &self.query_offset_ms)
            .field("alertmanagers", &self.alertmanagers)
            .field("files_only", &self.files_only)
            .field("limits", &self.limits.is_some())
            .finish_non_exhaustive()
    }
}

/// One running group: its evaluation task's state and stop switch.
#[derive(Debug)]
struct Running {
    group: Arc<Mutex<Option<Group>>>,
    spec: Arc<GroupSpec>,
    status: Arc<Mutex<GroupStatus>>,
    interval_ms: i64,
    limit: usize,
    stop: watch::Sender<bool>,
}

/// A group as the rules API lists it.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// What its file says.
    pub spec: Arc<GroupSpec>,
    /// Its interval in force, in ms.
    pub interval_ms: i64,
    /// Its limit.
    pub limit: usize,
    /// How its evaluations went.
    pub status: GroupStatus,
}

/// The rule groups in force and their evaluation tasks.
#[derive(Debug)]
pub struct Rules {
    settings: RuleSettings,
    db: Arc<Db>,
    /// By `file;name`, in that order.
    running: Mutex<BTreeMap<String, Running>>,
    /// The runtime the tasks run on, once started.
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    /// Reloads done and failed.
    reloads: Mutex<(u64, u64)>,
    /// Where alerts go.
    notifier: Arc<notifier::Notifier>,
    /// Stops the notifier's task.
    notifier_stop: watch::Sender<bool>,
    /// Whether the groups in force were loaded at start (their alerts'
    /// `for` state is restored) or by a reload (not).
    loaded: std::sync::atomic::AtomicBool,
    /// Held by a reload from start to end.
    applying: Mutex<()>,
    /// Set by [`Rules::stop`]: no reload starts groups after it.
    stopped: std::sync::atomic::AtomicBool,
}

impl Rules {
    /// Rules over `db`, none in force yet.
    pub fn new(settings: RuleSettings, db: Arc<Db>) -> Self {
        let notifier = Arc::new(notifier::Notifier::new(
            &settings.alertmanagers,
            settings.alerting.externals.labels.clone(),
            settings.notify_header.clone(),
            (
                settings.alertmanager_transport.clone(),
                Arc::clone(&settings.alert_relabel),
            ),
        ));
        Self {
            settings,
            db,
            running: Mutex::default(),
            runtime: Mutex::default(),
            reloads: Mutex::default(),
            notifier,
            notifier_stop: watch::channel(false).0,
            loaded: std::sync::atomic::AtomicBool::new(false),
            applying: Mutex::new(()),
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What the notifier did.
    pub fn notifier_figures(&self) -> notifier::NotifierFigures {
        self.notifier.figures()
    }

    /// Whether any rule files are named.
    pub fn configured(&self) -> bool {
        !self.settings.patterns.is_empty()
    }

    /// Reads the rule files; an error names every problem, and the
    /// groups and rules past the tenant's limits. Blocking.
    pub fn check(&self) -> Result<Vec<GroupSpec>, FileErrors> {
        let specs = file::load_all(
            &self.settings.patterns,
            self.settings.files_only,
            &self.settings.query.parse,
        )?;
        let Some(limits) = &self.settings.limits else {
            return Ok(specs);
        };
        let (max_groups, max_rules) = limits();
        let mut problems = Vec::new();
        if max_groups > 0 && specs.len() as u64 > max_groups {
            problems.push(format!(
                "{} rule groups, over the tenant's ruler_max_rule_groups_per_tenant of {max_groups}",
                specs.len()
            ));
        }
        for g in &specs {
            if max_rules > 0 && g.rules.len() as u64 > max_rules {
                problems.push(format!(
                    "{}: group {:?}: {} rules, over the tenant's ruler_max_rules_per_rule_group of {max_rules}",
                    g.file,
                    g.name,
                    g.rules.len()
                ));
            }
        }
        match problems.is_empty() {
            true => Ok(specs),
            false => Err(FileErrors(problems)),
        }
    }

    /// Starts evaluating on `runtime`: the files are read (an error is
    /// returned and nothing runs) and every group's task started.
    pub fn start(&self, runtime: tokio::runtime::Handle) -> Result<usize, FileErrors> {
        let specs = self.check();
        if self.notifier.configured() {
            runtime.spawn(Arc::clone(&self.notifier).run(self.notifier_stop.subscribe()));
        }
        // Set even when the files are bad: a later reload starts them.
        *self.runtime.lock() = Some(runtime);
        Ok(self.apply(specs?))
    }

    /// Reads the rule files again and puts them in force: groups that did
    /// not change run on untouched, changed ones take over their
    /// predecessor's state, and series no rule writes any more are marked
    /// stale. With an error, the rules in force stay. Blocking.
    pub fn reload(&self) -> Result<usize, FileErrors> {
        match self.check() {
            Ok(specs) => {
                self.reloads.lock().0 += 1;
                Ok(self.apply(specs))
            }
            Err(e) => {
                self.reloads.lock().1 += 1;
                for problem in &e.0 {
                    tracing::error!(error = %problem, "loading rule groups failed; the rules in force are kept");
                }
                Err(e)
            }
        }
    }

    /// Reloads done and failed since start.
    pub fn reload_counts(&self) -> (u64, u64) {
        *self.reloads.lock()
    }

    /// Puts `specs` in force; how many groups run.
    fn apply(&self, specs: Vec<GroupSpec>) -> usize {
        // One reload at a time, and none once stopping.
        let _applying = self.applying.lock();
        if self.stopped.load(std::sync::atomic::Ordering::Relaxed) {
            return 0;
        }
        let Some(runtime) = self.runtime.lock().clone() else {
            return 0;
        };
        // Groups of the first load restore their alerts' `for` state.
        let at_start = !self.loaded.swap(true, std::sync::atomic::Ordering::Relaxed);
        // What changes is taken out of the map under its lock; the groups
        // are taken from their tasks without it (a task gives its group up
        // once its evaluation in flight is done, which may be long, and
        // the API and /metrics read the map meanwhile).
        let (changed, removed) = {
            let mut running = self.running.lock();
            let mut changed = Vec::new();
            let wanted: std::collections::BTreeSet<String> =
                specs.iter().map(GroupSpec::key).collect();
            for spec in specs {
                let spec = Arc::new(spec);
                let key = spec.key();
                match running.get(&key) {
                    Some(old) if *old.spec == *spec => {}
                    _ => changed.push((spec, running.remove(&key))),
                }
            }
            let gone: Vec<String> = running
                .keys()
                .filter(|k| !wanted.contains(*k))
                .cloned()
                .collect();
            let removed: Vec<Running> = gone.iter().filter_map(|k| running.remove(k)).collect();
            (changed, removed)
        };
        let mut started = Vec::with_capacity(changed.len());
        for (spec, old) in changed {
            let mut group = self.new_group(Arc::clone(&spec), at_start);
            if let Some(old) = old {
                let _ = old.stop.send(true);
                if let Some(previous) = old.group.lock().take() {
                    group.take_state(previous);
                }
            }
            started.push((spec.key(), self.spawn(&runtime, group)));
        }
        // Groups no file has any more: stopped; their series marked stale
        // two intervals later, as Prometheus marks them (a group renamed
        // meanwhile writes them again first).
        for old in removed {
            let _ = old.stop.send(true);
            if let Some(previous) = old.group.lock().take() {
                let series: Vec<Vec<u8>> = previous.written().cloned().collect();
                let delay = std::time::Duration::from_millis(
                    u64::try_from(previous.interval_ms.saturating_mul(2)).unwrap_or(0),
                );
                let (db, offset) = (Arc::clone(&self.db), previous.query_offset_ms);
                let stop = self.notifier_stop.subscribe();
                runtime.spawn(async move {
                    let mut stop = stop;
                    tokio::select! {
                        () = tokio::time::sleep(delay) => mark_stale(&db, &series, offset),
                        _ = stop.wait_for(|s| *s) => {}
                    }
                });
            }
        }
        let mut running = self.running.lock();
        running.extend(started);
        let n = running.len();
        drop(running);
        tracing::info!(groups = n, "rule groups in force");
        n
    }

    fn new_group(&self, spec: Arc<GroupSpec>, at_start: bool) -> Group {
        Group::new(
            spec,
            self.settings.interval_ms,
            self.settings.query_offset_ms,
            at_start,
        )
    }

    /// Starts `group`'s evaluation task.
    fn spawn(&self, runtime: &tokio::runtime::Handle, group: Group) -> Running {
        let (stop, stopped) = watch::channel(false);
        let spec = Arc::clone(&group.spec);
        let status = Arc::clone(&group.status);
        let interval_ms = group.interval_ms;
        let limit = spec.limit;
        let cell = Arc::new(Mutex::new(Some(group)));
        runtime.spawn(run(
            Arc::clone(&cell),
            Arc::clone(&self.db),
            (self.settings.query.clone(), self.settings.alerting.clone()),
            Arc::clone(&self.notifier),
            stopped,
        ));
        Running {
            group: cell,
            spec,
            status,
            interval_ms,
            limit,
            stop,
        }
    }

    /// Every group in force, by file then name.
    pub fn groups(&self) -> Vec<GroupView> {
        self.running
            .lock()
            .values()
            .map(|r| GroupView {
                spec: Arc::clone(&r.spec),
                interval_ms: r.interval_ms,
                limit: r.limit,
                status: r.status.lock().clone(),
            })
            .collect()
    }

    /// Stops every group's task, and waits for evaluations in flight
    /// (their results are written before the database closes). Blocking.
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // A reload in progress finishes first.
        let _applying = self.applying.lock();
        let running = self.running.lock();
        for r in running.values() {
            let _ = r.stop.send(true);
        }
        for r in running.values() {
            drop(r.group.lock().take());
        }
        let _ = self.notifier_stop.send(true);
    }
}

impl crate::telemetry::RuleSource for Rules {
    fn figures(&self) -> (Vec<crate::telemetry::RuleGroupFigures>, (u64, u64)) {
        let groups = self
            .groups()
            .into_iter()
            .map(|g| crate::telemetry::RuleGroupFigures {
                key: g.spec.key(),
                iterations: g.status.iterations,
                missed: g.status.missed,
                evaluations: g.status.rule_evaluations,
                failures: g.status.rule_failures,
                interval_seconds: g.interval_ms as f64 / 1000.0,
                last_evaluation_seconds: g.status.last_evaluation_ms as f64 / 1000.0,
                last_duration_seconds: g.status.evaluation_seconds,
                rules: g.spec.rules.len() as u64,
                last_samples: g.status.last_samples,
            })
            .collect();
        (groups, self.reload_counts())
    }

    fn notifications(&self) -> crate::telemetry::NotificationFigures {
        let f = self.notifier.figures();
        crate::telemetry::NotificationFigures {
            per_alertmanager: f.per_alertmanager,
            dropped: f.dropped,
            queued: f.queued,
            capacity: notifier::QUEUE_CAPACITY as u64,
        }
    }
}

/// Every set of rules the server runs, with the tenant each runs over:
/// the `--rule-files` over `anonymous`, and each tenant's rule directory
/// (`--ruler-storage-local-directory`). Its figures are theirs together.
#[derive(Default)]
pub struct RuleSets {
    sets: parking_lot::RwLock<Vec<(String, Arc<Rules>)>>,
    /// Reads the tenants' rule directories again, once they are read.
    tenant_reload: Mutex<Option<TenantReload>>,
    /// Set by [`RuleSets::stop`]: a set added later is stopped at once.
    stopped: std::sync::atomic::AtomicBool,
}

/// Reads every tenant's rule directory again; returns each tenant whose
/// files were bad, with why. Blocking.
pub type TenantReload = Box<dyn Fn() -> Vec<(String, String)> + Send + Sync>;

impl std::fmt::Debug for RuleSets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSets")
            .field("sets", &self.sets.read().len())
            .finish_non_exhaustive()
    }
}

impl RuleSets {
    /// Adds `rules`, which run over `tenant` (stopped at once when the
    /// sets are stopping).
    pub fn add(&self, tenant: &str, rules: Arc<Rules>) {
        self.sets
            .write()
            .push((tenant.to_owned(), Arc::clone(&rules)));
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            rules.stop();
        }
    }

    /// What reads the tenants' rule directories again.
    pub fn set_tenant_reload(&self, reload: TenantReload) {
        *self.tenant_reload.lock() = Some(reload);
    }

    /// Reads every rule file again, `--rule-files` (which run over
    /// `rule_files_tenant`) and the tenants' directories, as `POST
    /// /-/reload` asked by `caller`. The error names `caller`'s own
    /// problems alone: another tenant's files, and that they are bad, are
    /// not its business (the log has them). Blocking.
    pub fn reload(
        &self,
        rule_files: &Rules,
        rule_files_tenant: &str,
        caller: &str,
    ) -> Result<(), String> {
        let mut problems = Vec::new();
        if rule_files.configured() {
            if let Err(e) = rule_files.reload() {
                problems.push((rule_files_tenant.to_owned(), e.to_string()));
            }
        }
        if let Some(reload) = self.tenant_reload.lock().as_ref() {
            problems.extend(
                reload()
                    .into_iter()
                    .map(|(t, e)| (t.clone(), format!("tenant {t}'s rule directory: {e}"))),
            );
        }
        let own: Vec<String> = problems
            .into_iter()
            .filter(|(t, _)| t == caller)
            .map(|(_, e)| e)
            .collect();
        match own.is_empty() {
            true => Ok(()),
            false => Err(own.join("; ")),
        }
    }

    /// The sets that run over `tenant`.
    pub fn of(&self, tenant: &str) -> Vec<Arc<Rules>> {
        self.sets
            .read()
            .iter()
            .filter(|(t, _)| t == tenant)
            .map(|(_, r)| Arc::clone(r))
            .collect()
    }

    /// Whether any set has rule files to read.
    pub fn any(&self) -> bool {
        !self.sets.read().is_empty()
    }

    /// Stops every set ([`Rules::stop`]). Blocking.
    pub fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let sets: Vec<Arc<Rules>> = self
            .sets
            .read()
            .iter()
            .map(|(_, r)| Arc::clone(r))
            .collect();
        for r in sets {
            r.stop();
        }
    }
}

impl crate::telemetry::RuleSource for RuleSets {
    fn figures(&self) -> (Vec<crate::telemetry::RuleGroupFigures>, (u64, u64)) {
        let mut groups = Vec::new();
        let (mut reloaded, mut failed) = (0, 0);
        for (_, r) in self.sets.read().iter() {
            let (g, (ok, bad)) = r.figures();
            groups.extend(g);
            reloaded += ok;
            failed += bad;
        }
        (groups, (reloaded, failed))
    }

    fn notifications(&self) -> crate::telemetry::NotificationFigures {
        let mut all = crate::telemetry::NotificationFigures {
            per_alertmanager: Vec::new(),
            dropped: 0,
            queued: 0,
            capacity: 0,
        };
        for (_, r) in self.sets.read().iter() {
            let n = r.notifications();
            for (am, sent, errors) in n.per_alertmanager {
                match all.per_alertmanager.iter_mut().find(|(a, _, _)| *a == am) {
                    Some(e) => {
                        e.1 += sent;
                        e.2 += errors;
                    }
                    None => all.per_alertmanager.push((am, sent, errors)),
                }
            }
            all.dropped += n.dropped;
            all.queued += n.queued;
            all.capacity += n.capacity;
        }
        all
    }
}

/// Writes a stale marker now (less `offset_ms`) for each series
/// (canonical labels) no rule writes any more.
fn mark_stale(db: &Db, series: &[Vec<u8>], offset_ms: i64) {
    if series.is_empty() {
        return;
    }
    let at = wall_ms() - offset_ms;
    let mut app = db.appender(i64::MAX);
    let mut counts = crate::storage::AppendCounts::default();
    for s in series {
        let stale = std::iter::once((at, f64::from_bits(crate::storage::STALE_NAN)));
        app.append_existing(s, stale, &mut counts);
    }
    // Logged with the next commit's wait; a crash first loses only the
    // markers, which staleness by lookback stands in for.
    drop(app.commit());
}

/// The wall clock, in ns since the epoch.
fn wall_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

fn wall_ms() -> i64 {
    wall_ns() / 1_000_000
}

/// A group's task: at each time on its grid, one evaluation (on a
/// blocking thread: PromQL is work, not waiting), then its commit awaited;
/// times that passed during a late evaluation are skipped and counted.
/// Ends when stopped, or when a reload took its group.
async fn run(
    cell: Arc<Mutex<Option<Group>>>,
    db: Arc<Db>,
    (opts, alerting): (QueryOptions, group::AlertSettings),
    notifier: Arc<notifier::Notifier>,
    mut stop: watch::Receiver<bool>,
) {
    let Some((hash, interval_ns)) = cell.lock().as_ref().map(|g| {
        (
            group_hash(&g.spec.file, &g.spec.name),
            g.interval_ms.saturating_mul(1_000_000),
        )
    }) else {
        return;
    };
    // As Prometheus: the first evaluation one interval after the slot
    // that holds now.
    let mut ts = eval_timestamp_ns(hash, interval_ns, wall_ns()) + interval_ns;
    loop {
        let mut wait = ts - wall_ns();
        if wait > interval_ns {
            // The wall clock went back: the next slot from now, rather
            // than nothing until it catches up.
            ts = eval_timestamp_ns(hash, interval_ns, wall_ns()) + interval_ns;
            wait = ts - wall_ns();
        }
        if wait > 0 {
            let sleep = tokio::time::sleep(std::time::Duration::from_nanos(wait as u64));
            tokio::select! {
                () = sleep => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        if *stop.borrow() {
            return;
        }
        let missed = (wall_ns() - ts) / interval_ns;
        if missed > 0 {
            ts += missed * interval_ns;
            if let Some(g) = cell.lock().as_ref() {
                let mut st = g.status.lock();
                st.missed += missed as u64;
                st.iterations += missed as u64;
            }
        }
        let (cell2, db2, opts2, alerting2) = (
            Arc::clone(&cell),
            Arc::clone(&db),
            opts.clone(),
            alerting.clone(),
        );
        let at_ms = ts / 1_000_000;
        let done = tokio::task::spawn_blocking(move || {
            let mut guard = cell2.lock();
            let g = guard.as_mut()?;
            Some(g.eval(&db2, &opts2, &alerting2, at_ms, wall_ms()))
        })
        .await;
        match done {
            Ok(Some((commit, alerts))) => {
                if let Err(e) = commit.durable().await {
                    tracing::warn!(error = %e, "rule results could not be made durable");
                }
                notifier.send(alerts);
            }
            // A reload took the group: its successor runs.
            Ok(None) => return,
            Err(e) => {
                tracing::error!(error = %e, "a rule group's evaluation failed; the group is evaluated again at its next time");
            }
        }
        ts += interval_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn recorded_series_appear_on_the_groups_grid_and_a_reload_keeps_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rules = dir.path().join("r.yml");
        std::fs::write(
            &rules,
            "groups:\n  - name: g\n    interval: 1s\n    rules:\n      - record: two\n        expr: vector(2)\n        labels: {k: v}\n",
        )
        .expect("write");
        let db = Arc::new(Db::in_memory(crate::storage::DbOptions::default()));
        let r = Rules::new(
            RuleSettings {
                patterns: vec![rules.display().to_string()],
                interval_ms: 60_000,
                query_offset_ms: 0,
                query: QueryOptions::default(),
                alerting: group::AlertSettings::default(),
                alertmanagers: Vec::new(),
                alertmanager_transport: notifier::Transport::default(),
                alert_relabel: notifier::AlertRelabel::default(),
                files_only: false,
                notify_header: None,
                limits: None,
            },
            Arc::clone(&db),
        );
        assert_eq!(
            r.start(tokio::runtime::Handle::current()).expect("loads"),
            1
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let recorded = loop {
            let got = db.querier().select_samples(
                &[crate::storage::index::Matcher::new(
                    crate::storage::index::MatchOp::Equal,
                    "__name__",
                    "two",
                )
                .expect("m")],
                i64::MIN,
                i64::MAX,
            );
            if got.first().is_some_and(|s| s.samples.len() >= 2)
                || std::time::Instant::now() > deadline
            {
                break got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        assert_eq!(recorded.len(), 1, "{recorded:?}");
        let s = &recorded[0];
        assert!(s.labels.iter().any(|l| &*l.name == "k" && &*l.value == "v"));
        let hash = group_hash(&rules.display().to_string(), "g");
        for &(t, v) in &s.samples {
            assert_eq!(v, 2.0);
            // The grid is in ns; a sample's time is its ms, cut down.
            let slot = eval_timestamp_ns(hash, 1_000_000_000, t * 1_000_000 + 999_999);
            assert_eq!(slot / 1_000_000, t, "{t} is on the grid");
        }
        // A bad file keeps the group in force.
        std::fs::write(
            &rules,
            "groups:\n  - name: g\n    rules:\n      - record: x\n",
        )
        .expect("write");
        assert!(r.reload().is_err());
        assert_eq!(r.groups().len(), 1);
        assert_eq!(r.reload_counts(), (0, 1));
        r.stop();
    }
}
