//! Helpers shared by the end-to-end tests: an in-process server on a free
//! loopback port, and remote-write request builders.
#![allow(dead_code)]

use std::net::SocketAddr;

use prost::Message;
use sluice::api::AppState;
use sluice::config::Config;
use sluice::proto::prometheus as pb;
use sluice::server::Server;
use tokio::sync::oneshot;

pub mod downstream;

/// A running Sluice; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    _data: tempfile::TempDir,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl TestServer {
    /// Its data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self._data.path()
    }
}

/// Starts the built binary `bin` (`env!("CARGO_BIN_EXE_sluice")`) on
/// 127.0.0.1:0 at log level `log`, with its data under `data` and `args`
/// more; returns the process once it listens, with its address. Its later
/// log lines are read and dropped.
pub fn spawn_sluice(
    bin: &str,
    data: &std::path::Path,
    log: &str,
    args: &[&str],
) -> (std::process::Child, SocketAddr) {
    spawn_sluice_with_env(bin, data, log, args, &[])
}

/// [`spawn_sluice`] with extra environment variables.
pub fn spawn_sluice_with_env(
    bin: &str,
    data: &std::path::Path,
    log: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Child, SocketAddr) {
    spawn_sluice_limited(bin, data, log, args, env, None)
}

/// [`spawn_sluice_with_env`], with its open-files limit (soft and hard)
/// set to `open_files` when given.
pub fn spawn_sluice_limited(
    bin: &str,
    data: &std::path::Path,
    log: &str,
    args: &[&str],
    env: &[(&str, &str)],
    open_files: Option<u64>,
) -> (std::process::Child, SocketAddr) {
    use std::io::BufRead as _;
    // prlimit (util-linux) sets the limit and runs sluice in its place,
    // under the same process ID.
    let mut cmd = match open_files {
        Some(n) => {
            let mut c = std::process::Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}")).arg("--").arg(bin);
            c
        }
        None => std::process::Command::new(bin),
    };
    cmd.args(["--listen", "127.0.0.1:0", "--log-level", log])
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("sluice starts");
    let mut lines = std::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = match lines.next() {
            Some(Ok(l)) => l,
            _ => panic!("sluice exited before listening"),
        };
        if let Some(at) = line.find("listening addr=") {
            break line[at + "listening addr=".len()..]
                .trim()
                .parse()
                .expect("an address");
        }
    };
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    (child, addr)
}

/// A child process killed (SIGKILL) and reaped when dropped, so a test
/// that fails midway leaves nothing running.
pub struct KillOnDrop(pub std::process::Child);

impl KillOnDrop {
    /// Kills it now (`kill -9`) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts Sluice on 127.0.0.1:0 with `config`'s other settings.
pub async fn start(config: Config) -> TestServer {
    start_with_clock(config, sluice::storage::Clock::system()).await
}

/// Like [`start`], with time read from `clock`.
pub async fn start_with_clock(config: Config, clock: sluice::storage::Clock) -> TestServer {
    let data = tempfile::tempdir().expect("tempdir");
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: data.path().to_owned(),
        ..config
    };
    let server = Server::bind_with_clock(&config, clock).await.expect("bind");
    let addr = server.local_addr().expect("addr");
    let state = server.state().clone();
    let (stop, stopped) = oneshot::channel();
    tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    TestServer {
        addr,
        state,
        stop: Some(stop),
        _data: data,
    }
}

/// Every native histogram sample the head holds of the series matching
/// `matchers` (label, value) exactly.
pub fn stored_histograms(
    srv: &TestServer,
    matchers: &[(&str, &str)],
) -> Vec<(i64, sluice::histogram::HistSample)> {
    use sluice::storage::index::{MatchOp, Matcher};
    let m: Vec<Matcher> = matchers
        .iter()
        .map(|&(n, v)| Matcher::new(MatchOp::Equal, n, v).expect("matcher"))
        .collect();
    srv.state
        .db()
        .querier()
        .select(&m, i64::MIN, i64::MAX)
        .into_iter()
        .flat_map(|s| s.histograms)
        .collect()
}

/// Every sample the head holds of the series named `name`.
pub fn stored(srv: &TestServer, name: &str) -> Vec<(i64, f64)> {
    use sluice::storage::index::{MatchOp, Matcher};
    let m = Matcher::new(MatchOp::Equal, "__name__", name).expect("matcher");
    srv.state
        .db()
        .querier()
        .select_samples(&[m], i64::MIN, i64::MAX)
        .into_iter()
        .flat_map(|s| s.samples)
        .collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// A series from label pairs (sent in the given order) and samples.
pub fn series(labels: &[(&str, &str)], samples: &[(i64, f64)]) -> pb::TimeSeries {
    pb::TimeSeries {
        labels: labels
            .iter()
            .map(|&(n, v)| pb::Label {
                name: n.into(),
                value: v.into(),
            })
            .collect(),
        samples: samples
            .iter()
            .map(|&(timestamp, value)| pb::Sample { value, timestamp })
            .collect(),
        ..Default::default()
    }
}

/// The snappy-compressed body of a WriteRequest.
pub fn body(timeseries: Vec<pb::TimeSeries>) -> Vec<u8> {
    let raw = pb::WriteRequest {
        timeseries,
        metadata: vec![],
    }
    .encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("compress")
}

/// POSTs a remote-write body with the standard headers; returns status and text.
pub async fn push(addr: SocketAddr, body: Vec<u8>) -> (u16, String) {
    push_with(addr, body, &[]).await
}

/// POSTs with extra or replaced headers (an empty value removes a header).
pub async fn push_with(addr: SocketAddr, body: Vec<u8>, headers: &[(&str, &str)]) -> (u16, String) {
    let mut h = vec![
        ("content-type", "application/x-protobuf"),
        ("content-encoding", "snappy"),
        ("x-prometheus-remote-write-version", "0.1.0"),
        ("user-agent", "sluice-tests/0"),
    ];
    for &(k, v) in headers {
        h.retain(|(hk, _)| *hk != k);
        if !v.is_empty() {
            h.push((k, v));
        }
    }
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/write"))
        .body(body);
    for (k, v) in h {
        req = req.header(k, v);
    }
    let resp = req.send().await.expect("request sent");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// GETs a path; returns status and text. A refused connection is tried
/// again for up to a minute: a Prometheus just started may not listen yet
/// on a cold, busy machine (a server that never listens still fails).
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let url = format!("http://{addr}{path}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let resp = loop {
        match reqwest::get(&url).await {
            Ok(r) => break r,
            Err(e) if e.is_connect() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("request sent: {e:?}"),
        }
    };
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// POSTs `form` to a query-API `url` (Sluice's or Prometheus') and parses
/// the JSON reply.
pub async fn api_json(url: &str, form: &[(&str, String)]) -> serde_json::Value {
    let text = reqwest::Client::new()
        .post(url)
        .form(form)
        .send()
        .await
        .expect("sent")
        .text()
        .await
        .expect("body");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// Runs an instant query (at `time`, unix seconds, if given); returns each
/// series' labels and value string, sorted.
pub async fn query_vector(
    addr: SocketAddr,
    query: &str,
    time: Option<f64>,
) -> Vec<(std::collections::BTreeMap<String, String>, String)> {
    let mut form = vec![("query", query.to_owned())];
    if let Some(t) = time {
        form.push(("time", t.to_string()));
    }
    let v = api_json(&format!("http://{addr}/api/v1/query"), &form).await;
    assert_eq!(v["status"], "success", "{v}");
    let mut out: Vec<_> = v["data"]["result"]
        .as_array()
        .expect("a vector")
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            (
                labels,
                s["value"][1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// `POST /-/reload`, as `tenant` (in `X-Scope-OrgID`) when given; status
/// and body.
pub async fn reload(addr: SocketAddr, tenant: Option<&str>) -> (u16, String) {
    let mut req = reqwest::Client::new().post(format!("http://{addr}/-/reload"));
    if let Some(t) = tenant {
        req = req.header("X-Scope-OrgID", t);
    }
    let r = req.send().await.expect("answered");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body"))
}

/// `sluice_rule_group_iterations_total` of the group `file;name` in an
/// exposition.
pub fn rule_group_iterations(exposition: &str, group: &str) -> Option<f64> {
    metric_value(
        exposition,
        &format!("sluice_rule_group_iterations_total{{rule_group=\"{group}\"}}"),
    )
}

/// The value of an unlabelled or labelled sample line in an exposition.
pub fn metric_value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?;
        let rest = rest.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// A real Prometheus (Debian's package) on a free loopback port, with its
/// own temporary data directory; killed (only it) when dropped.
pub struct Prometheus {
    child: std::process::Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Prometheus config that scrapes itself and Sluice (at `sluice`) every
/// second and remote-writes to Sluice; `remote_write` is the rest of the
/// remote-write entry (indented four spaces: protocol, queue settings).
/// `{port}` stays for [`Prometheus::start`] to fill in.
pub fn scrape_and_write_config(sluice: SocketAddr, remote_write: &str) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{port}}"]
  - job_name: sluice
    static_configs:
      - targets: ["{sluice}"]
remote_write:
  - url: http://{sluice}/api/v1/write
{remote_write}"#
    )
}

impl Prometheus {
    /// Starts `prometheus` with `config` (YAML) and `extra` flags; fails
    /// loudly when the binary is missing.
    pub fn start(config: &str, extra: &[&str]) -> Self {
        let found = std::process::Command::new("sh")
            .args(["-c", "command -v prometheus"])
            .output()
            .expect("sh runs");
        let bin = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        assert!(
            !bin.is_empty(),
            "the `prometheus` binary is missing: install Debian's `prometheus` package (scripts/test does)"
        );
        Self::start_bin(&bin, config, extra)
    }

    /// Starts Prometheus 3.5.3 (see [`prometheus3`]).
    pub fn start3(config: &str, extra: &[&str]) -> Self {
        Self::start_bin(&prometheus3("prometheus"), config, extra)
    }

    /// Starts the Prometheus binary `bin`.
    pub fn start_bin(bin: &str, config: &str, extra: &[&str]) -> Self {
        Self::start_bin_on(bin, config, extra, |_| {})
    }

    /// Like [`Prometheus::start_bin`], after `prepare` has put what it
    /// wants into the (not yet existing) storage directory it is given.
    pub fn start_bin_on(
        bin: &str,
        config: &str,
        extra: &[&str],
        prepare: impl FnOnce(&std::path::Path),
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("prometheus.yml");
        std::fs::write(&cfg, config.replace("{port}", &port.to_string())).expect("write config");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        prepare(&dir.path().join("data"));
        let child = std::process::Command::new(bin)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts");
        Prometheus { child, port, dir }
    }

    /// Waits (up to a minute) until it answers `/-/ready`; a slow first
    /// start on a cold machine is not a failure, a Prometheus that never
    /// gets there is, with its log.
    pub async fn ready(&self) {
        let url = format!("http://{}/-/ready", self.addr());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if reqwest::get(&url)
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "Prometheus did not become ready: {}",
                self.log()
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Its address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Remote-writes `body` to its receiver (`--web.enable-remote-write-receiver`),
    /// retrying for up to 30s while it starts.
    pub async fn remote_write(&self, body: Vec<u8>) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let sent = reqwest::Client::new()
                .post(format!("http://{}/api/v1/write", self.addr()))
                .header("content-type", "application/x-protobuf")
                .header("content-encoding", "snappy")
                .body(body.clone())
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => return,
                // Listening before its storage is ready, Prometheus answers
                // 503 for a moment (seen on a loaded machine).
                Ok(r) if r.status().is_server_error() && std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                Ok(r) => panic!(
                    "prometheus refused the data: {} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ),
                Err(_) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await
                }
                Err(e) => panic!("prometheus never came up: {e}\n{}", self.log()),
            }
        }
    }
}

/// The path of Prometheus 3.5.3's `tool` (`prometheus` or `promtool`), as
/// `scripts/fetch-prometheus3` unpacks it under `target/prometheus3/bin`
/// (or where `SLUICE_PROMETHEUS3_DIR` says); fails loudly when missing.
/// Runs `bin` with `args` and returns its standard output; fails the
/// test with both outputs when it exits non-zero.
pub fn run_ok(bin: &str, args: &[&std::ffi::OsStr]) -> String {
    let out = std::process::Command::new(bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn prometheus3(tool: &str) -> String {
    let dir = std::env::var("SLUICE_PROMETHEUS3_DIR")
        .unwrap_or_else(|_| format!("{}/target/prometheus3", env!("CARGO_MANIFEST_DIR")));
    let bin = format!("{dir}/bin/{tool}");
    assert!(
        std::path::Path::new(&bin).is_file(),
        "{bin} is missing: run ./scripts/fetch-prometheus3 (scripts/test does)"
    );
    bin
}

/// The sum of every sample of `name` (any labels) in an exposition.
pub fn metric_total(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of one sample line (name and labels as printed) in a scrape
/// of Sluice's `/metrics`.
pub async fn self_metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let (_, text) = get(addr, "/metrics").await;
    metric_value(&text, series)
}

/// Waits (bounded) until `name` in `/metrics` satisfies `ok`; returns the
/// last value seen.
pub async fn wait_for_metric(addr: SocketAddr, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v = self_metric(addr, name).await.unwrap_or(f64::NAN);
        if ok(v) || std::time::Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Runs Prometheus 3.5.3's promtool with `args`; its output.
pub fn promtool3(args: &[&str]) -> String {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    run_ok(&prometheus3("promtool"), &args)
}

/// Copies block directory `from` into `to` (created): `index`,
/// `meta.json`, `tombstones` and the chunk segments.
pub fn copy_block(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to.join("chunks")).expect("mkdir");
    for f in ["index", "meta.json", "tombstones"] {
        std::fs::copy(from.join(f), to.join(f)).expect("copy");
    }
    for e in std::fs::read_dir(from.join("chunks")).expect("chunks") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), to.join("chunks").join(e.file_name())).expect("copy");
    }
}

/// Serves the exposition `body` (Prometheus' text format) to every request
/// on 127.0.0.1: a scrape target. Its address.
pub async fn serve_exposition(body: &'static str) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// Prometheus 3.5.3 started on copies of Sluice's `blocks` (20-minute to
/// 1-hour blocks, kept for ever): a reader of them.
pub fn prometheus3_on_blocks(blocks: &[std::path::PathBuf]) -> Prometheus {
    Prometheus::start_bin_on(
        &prometheus3("prometheus"),
        "global:\n  scrape_interval: 1h\n",
        &[
            "--storage.tsdb.retention.time=100y",
            "--storage.tsdb.min-block-duration=20m",
            "--storage.tsdb.max-block-duration=1h",
        ],
        |dir| {
            for b in blocks {
                copy_block(b, &dir.join(b.file_name().expect("name")));
            }
        },
    )
}

/// Pushes `n` series `name{i="0".."n-1", extra…}` with a sample a minute
/// from `start` to `end` (both included), `value(i, t)` each, half an
/// hour per request.
pub async fn push_minutely(
    addr: SocketAddr,
    name: &str,
    extra: &[(&str, &str)],
    n: usize,
    (start, end): (i64, i64),
    value: impl Fn(usize, i64) -> f64,
) {
    const MIN: i64 = 60_000;
    for from in (start..=end).step_by(30 * MIN as usize) {
        let ts: Vec<i64> = (from..(from + 30 * MIN).min(end + 1))
            .step_by(MIN as usize)
            .collect();
        let series: Vec<_> = (0..n)
            .map(|i| {
                let samples: Vec<(i64, f64)> = ts.iter().map(|&t| (t, value(i, t))).collect();
                let i = i.to_string();
                let mut labels = vec![("__name__", name), ("i", i.as_str())];
                labels.extend_from_slice(extra);
                series(&labels, &samples)
            })
            .collect();
        let (status, text) = push(addr, body(series)).await;
        assert_eq!(status, 204, "{text}");
    }
}

/// The blocks Sluice cuts from a head spanning `[start, end]`, by
/// Prometheus' rule: while the head spans more than 3 h, its oldest
/// aligned 2 h range becomes a block.
pub fn blocks_cut_from(start: i64, end: i64) -> usize {
    const HOUR: i64 = 3_600_000;
    let (mut lo, mut n) = (start, 0);
    while end - lo > 3 * HOUR {
        lo = lo.div_euclid(2 * HOUR) * 2 * HOUR + 2 * HOUR;
        n += 1;
    }
    n
}

/// Remote read (`/api/v1/read`, samples) of the series matching
/// `matchers` over `[start, end]` from the receiver at `addr`.
pub async fn remote_read(
    addr: &str,
    matchers: Vec<pb::LabelMatcher>,
    (start, end): (i64, i64),
) -> Vec<pb::TimeSeries> {
    let req = pb::ReadRequest {
        queries: vec![pb::Query {
            start_timestamp_ms: start,
            end_timestamp_ms: end,
            matchers,
            hints: None,
        }],
        accepted_response_types: vec![],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .expect("snappy");
    let resp = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/read"))
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "snappy")
        .header("x-prometheus-remote-read-version", "0.1.0")
        .body(body)
        .send()
        .await
        .expect("answered");
    assert_eq!(resp.status().as_u16(), 200, "{addr}");
    let bytes = resp.bytes().await.expect("body");
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&bytes)
        .expect("snappy");
    let r = pb::ReadResponse::decode(raw.as_slice()).expect("ReadResponse");
    r.results.into_iter().flat_map(|q| q.timeseries).collect()
}

/// A remote-read matcher.
pub fn read_matcher(kind: pb::label_matcher::Type, name: &str, value: &str) -> pb::LabelMatcher {
    pb::LabelMatcher {
        r#type: kind as i32,
        name: name.into(),
        value: value.into(),
    }
}
