//! PromQL test scripts in Prometheus' `.test` format (see
//! `common/promqltest.rs`), run over HTTP:
//! - the project's own scripts (`tests/promql/*.test`), one per family, all
//!   of which must pass on Sluice, and on Prometheus 3.5.3 except evals
//!   marked `# not in 3.5.3: <why>`;
//! - Prometheus 3.5.3's own scripts, from its Debian source tarball
//!   (`scripts/fetch-prometheus3`), which must pass on Sluice except the
//!   evals listed in `tests/promql/prometheus-3.5.3-failures.txt`, each
//!   with its cause. A listed eval that passes fails the test too, so the
//!   list stays exact.

mod common;
#[path = "common/promqltest.rs"]
mod promqltest;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{prometheus3, start_with_clock, Prometheus, TestServer};
use promqltest::Cmd;
use sluice::config::Config;
use sluice::promql::Compat;

/// Far enough from the scripts' times (which start at 0) that retention and
/// the future-sample bound accept all of them.
const CLOCK_MS: i64 = 3650 * 86_400_000;

enum Server {
    Sluice(TestServer),
    Prometheus(Prometheus),
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Sluice,
    Prometheus3,
}

struct Runner {
    target: Target,
    server: Option<Server>,
    client: reqwest::Client,
    /// Whether servers start with `promql-delayed-name-removal`.
    delayed_name_removal: bool,
    /// Which release's answers Sluice gives where releases disagree.
    compat: Compat,
}

impl Runner {
    fn new(target: Target, delayed_name_removal: bool, compat: Compat) -> Self {
        Runner {
            target,
            server: None,
            client: reqwest::Client::new(),
            delayed_name_removal,
            compat,
        }
    }

    /// A fresh, empty server.
    async fn fresh(&mut self) {
        self.server = None;
        self.server = Some(match self.target {
            Target::Sluice => {
                let config = Config {
                    retention: std::time::Duration::from_secs(100 * 365 * 86_400),
                    enable_feature: sluice::config::FEATURES
                        .iter()
                        .filter(|&&f| {
                            self.delayed_name_removal || f != sluice::config::DELAYED_NAME_REMOVAL
                        })
                        .map(|f| f.to_string())
                        .collect(),
                    promql_compatibility: self.compat,
                    ..Config::default()
                };
                let clock = sluice::storage::Clock::new(|| CLOCK_MS);
                Server::Sluice(start_with_clock(config, clock).await)
            }
            Target::Prometheus3 => {
                // Loads may add samples older than a series' newest.
                let config = "storage:\n  tsdb:\n    out_of_order_time_window: 3650d\n";
                let mut flags = vec![
                    "--web.enable-remote-write-receiver",
                    "--storage.tsdb.retention.time=100y",
                    "--enable-feature=promql-experimental-functions",
                    "--enable-feature=native-histograms",
                    "--enable-feature=promql-duration-expr",
                ];
                if self.delayed_name_removal {
                    flags.push("--enable-feature=promql-delayed-name-removal");
                }
                let p = Prometheus::start_bin(&prometheus3("prometheus"), config, &flags);
                wait_ready(&self.client, &format!("http://{}", p.addr()), &p).await;
                Server::Prometheus(p)
            }
        });
    }

    fn base(&self) -> String {
        match &self.server {
            Some(Server::Sluice(s)) => format!("http://{}", s.addr),
            Some(Server::Prometheus(p)) => format!("http://{}", p.addr()),
            None => unreachable!("a server is started before the first command"),
        }
    }

    /// Writes a remote-write 2.0 request (series with start times).
    async fn write_v2(&self, body: Vec<u8>) {
        let headers = [
            (
                "content-type",
                "application/x-protobuf;proto=io.prometheus.write.v2.Request",
            ),
            ("x-prometheus-remote-write-version", "2.0.0"),
        ];
        let addr = match &self.server {
            Some(Server::Sluice(s)) => s.addr,
            Some(Server::Prometheus(p)) => p.addr().parse().expect("an address"),
            None => unreachable!("a server is started before the first command"),
        };
        let (status, text) = common::push_with(addr, body, &headers).await;
        assert!(
            status == 204 || status == 200,
            "the server refused a remote-write 2.0 load: {status} {text}"
        );
    }

    async fn write(&self, body: Vec<u8>) {
        match &self.server {
            Some(Server::Sluice(s)) => {
                let (status, text) = common::push(s.addr, body).await;
                assert!(
                    status == 204 || status == 200,
                    "Sluice refused a load: {status} {text}"
                );
            }
            Some(Server::Prometheus(p)) => p.remote_write(body).await,
            None => unreachable!("a server is started before the first command"),
        }
    }
}

async fn wait_ready(client: &reqwest::Client, base: &str, p: &Prometheus) {
    for _ in 0..300 {
        if let Ok(r) = client.get(format!("{base}/-/ready")).send().await {
            if r.status().is_success() {
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("Prometheus 3.5.3 did not become ready:\n{}", p.log());
}

/// What became of one eval.
#[derive(Debug)]
enum Outcome {
    Pass,
    Fail(String),
    Skip(&'static str),
}

/// Runs one script; returns each eval's line and outcome. `skip_lines`
/// are evals not to run on this target. Prometheus' own scripts are
/// written for its test engine, which removes names late
/// (`promql-delayed-name-removal`); the project's run as a server does by
/// default, but for a script with a line `# with promql-delayed-name-removal`.
/// Sluice answers as `compat` says, or as v3.14 in a script with a line
/// `# with promql-compatibility 3.14`.
async fn run_script(
    target: Target,
    script: &str,
    skip_lines: &BTreeSet<usize>,
    prometheus_script: bool,
    compat: Compat,
) -> Vec<(usize, String, Outcome)> {
    let cmds = promqltest::parse(script).unwrap_or_else(|e| panic!("script does not parse: {e}"));
    let delayed = prometheus_script
        || script
            .lines()
            .any(|l| l.trim() == "# with promql-delayed-name-removal");
    let compat = if script
        .lines()
        .any(|l| l.trim() == "# with promql-compatibility 3.14")
    {
        Compat::V3_14
    } else {
        compat
    };
    let mut runner = Runner::new(target, delayed, compat);
    runner.fresh().await;
    let mut out = Vec::new();
    for cmd in cmds {
        match cmd {
            Cmd::Clear => runner.fresh().await,
            Cmd::Load {
                step_ms,
                nhcb,
                mut series,
                ..
            } => {
                // `load_with_nhcb` adds each classic histogram as a native
                // one with custom buckets too, as Prometheus' test engine.
                if nhcb {
                    let converted = promqltest::nhcb_series(&series);
                    series.extend(converted);
                }
                for body in promqltest::load_requests(step_ms, &series) {
                    runner.write(body).await;
                }
                for body in promqltest::load_requests_v2(step_ms, &series) {
                    runner.write_v2(body).await;
                }
            }
            Cmd::Eval(e) => {
                let outcome = if skip_lines.contains(&e.line) {
                    Outcome::Skip("marked for this target")
                } else if let Some(why) = e.unsupported {
                    Outcome::Skip(why)
                } else {
                    match promqltest::run_eval(&runner.client, &runner.base(), &e).await {
                        Ok(()) => Outcome::Pass,
                        Err(m) => Outcome::Fail(m),
                    }
                };
                out.push((e.line, e.expr.clone(), outcome));
            }
        }
    }
    out
}

/// Evals preceded by a `# not in 3.5.3: <why>` comment line.
fn not_in_prometheus3(script: &str) -> BTreeSet<usize> {
    let lines: Vec<&str> = script.lines().collect();
    let mut out = BTreeSet::new();
    for (i, l) in lines.iter().enumerate() {
        if l.trim_start().starts_with("# not in 3.5.3:") {
            if let Some(k) =
                (i + 1..lines.len()).find(|&k| lines[k].trim_start().starts_with("eval"))
            {
                out.insert(k + 1);
            }
        }
    }
    out
}

fn own_scripts() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/promql");
    scripts_in(&dir)
}

fn scripts_in(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "test"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .test scripts in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (name, text)
        })
        .collect()
}

/// Runs scripts on `target`; returns `(file:line, query, failure)` for
/// each failed eval and prints the counts.
async fn run_all(
    target: Target,
    scripts: &[(String, String)],
    skips: impl Fn(&str) -> BTreeSet<usize>,
    prometheus_scripts: bool,
) -> BTreeMap<String, (String, String)> {
    let mut failed = BTreeMap::new();
    let (mut pass, mut skip) = (0, BTreeMap::<&str, usize>::new());
    for (name, text) in scripts {
        for (line, expr, outcome) in
            run_script(target, text, &skips(text), prometheus_scripts, Compat::V3_5).await
        {
            match outcome {
                Outcome::Pass => pass += 1,
                Outcome::Skip(why) => *skip.entry(why).or_default() += 1,
                Outcome::Fail(m) => {
                    failed.insert(format!("{name}:{line}"), (expr, m));
                }
            }
        }
    }
    println!(
        "{} evals: {pass} passed, {} failed, skipped {skip:?}",
        pass + failed.len() + skip.values().sum::<usize>(),
        failed.len()
    );
    failed
}

fn report(failed: &BTreeMap<String, (String, String)>) -> String {
    failed
        .iter()
        .map(|(at, (expr, m))| format!("{at}: {expr}\n    {m}\n"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_scripts_pass_on_sluice() {
    let failed = run_all(Target::Sluice, &own_scripts(), |_| BTreeSet::new(), false).await;
    assert!(
        failed.is_empty(),
        "evals that failed on Sluice:\n{}",
        report(&failed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_scripts_pass_on_prometheus_3() {
    let failed = run_all(
        Target::Prometheus3,
        &own_scripts(),
        not_in_prometheus3,
        false,
    )
    .await;
    assert!(
        failed.is_empty(),
        "evals that failed on Prometheus 3.5.3 (the scripts' facts are wrong, or the eval needs `# not in 3.5.3: <why>`):\n{}",
        report(&failed)
    );
}

fn prometheus_scripts() -> Vec<(String, String)> {
    let bin = prometheus3("prometheus");
    let dir = Path::new(&bin)
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("promqltest"))
        .expect("prometheus3 directory");
    scripts_in(&dir)
}

/// `tests/promql/prometheus-3.5.3-failures.txt`: `file:line cause` lines.
fn known_failures() -> BTreeMap<String, String> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/promql/prometheus-3.5.3-failures.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once(char::is_whitespace) {
            Some((at, why)) => (at.to_owned(), why.trim().to_owned()),
            None => (l.to_owned(), String::new()),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scripts_pass_on_sluice_but_the_listed_failures() {
    let failed = run_all(
        Target::Sluice,
        &prometheus_scripts(),
        |_| BTreeSet::new(),
        true,
    )
    .await;
    let known = known_failures();
    let new: BTreeMap<_, _> = failed
        .iter()
        .filter(|(at, _)| !known.contains_key(*at))
        .map(|(a, b)| (a.clone(), b.clone()))
        .collect();
    let fixed: Vec<&String> = known
        .keys()
        .filter(|at| !failed.contains_key(*at))
        .collect();
    assert!(
        new.is_empty() && fixed.is_empty(),
        "evals that fail and are not listed in tests/promql/prometheus-3.5.3-failures.txt:\n{}\nlisted evals that now pass (remove them): {fixed:?}",
        report(&new)
    );
}

/// The runner itself, checked on Prometheus 3.5.3's own scripts against
/// Prometheus 3.5.3: slow (a Prometheus start per `clear`), so run it by
/// hand: `cargo test --test promql_scripts -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn prometheus_scripts_on_prometheus_3() {
    let failed = run_all(
        Target::Prometheus3,
        &prometheus_scripts(),
        |_| BTreeSet::new(),
        true,
    )
    .await;
    println!("{}", report(&failed));
}

/// Another Prometheus version's scripts, from the directory named by
/// `SLUICE_PROMQL_SCRIPTS` (Prometheus v3.14's `promql/promqltest/testdata`,
/// say), on Sluice with every feature it has enabled and answers as v3.14
/// (`--promql-compatibility=3.14`): prints the passes and
/// failures per file. Run by hand:
/// `SLUICE_PROMQL_SCRIPTS=<dir> cargo test --test promql_scripts -- --ignored other_scripts --nocapture`;
/// with `SLUICE_PROMQL_TARGET=prometheus3` the same scripts run on
/// Prometheus 3.5.3 instead, to see what it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn other_scripts_on_sluice() {
    let Ok(dir) = std::env::var("SLUICE_PROMQL_SCRIPTS") else {
        panic!("SLUICE_PROMQL_SCRIPTS names no directory");
    };
    let target = match std::env::var("SLUICE_PROMQL_TARGET").as_deref() {
        Ok("prometheus3") => Target::Prometheus3,
        Ok("sluice") | Err(_) => Target::Sluice,
        Ok(other) => panic!("SLUICE_PROMQL_TARGET={other}: sluice or prometheus3"),
    };
    let scripts = scripts_in(Path::new(&dir));
    let (mut all_pass, mut all_fail) = (0, 0);
    let mut failures = String::new();
    for (name, text) in &scripts {
        let (mut pass, mut fail, mut skip) = (0, 0, 0);
        if let Err(e) = promqltest::parse(text) {
            // Syntax the runner does not read: every eval fails.
            let evals = text.lines().filter(|l| l.starts_with("eval")).count();
            println!("{name}: 0 passed, {evals} failed (the runner cannot read it: {e})");
            all_fail += evals;
            continue;
        }
        for (line, expr, outcome) in
            run_script(target, text, &BTreeSet::new(), true, Compat::V3_14).await
        {
            match outcome {
                Outcome::Pass => pass += 1,
                Outcome::Skip(_) => skip += 1,
                Outcome::Fail(m) => {
                    fail += 1;
                    failures.push_str(&format!("{name}:{line}: {expr}\n    {m}\n"));
                }
            }
        }
        println!("{name}: {pass} passed, {fail} failed, {skip} skipped");
        all_pass += pass;
        all_fail += fail;
    }
    println!("{failures}");
    println!(
        "all: {all_pass} passed, {all_fail} failed ({:.1}%)",
        100.0 * all_pass as f64 / (all_pass + all_fail).max(1) as f64
    );
}
