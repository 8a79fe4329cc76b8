//! Hostile input against the real binary on loopback: queries built to
//! overflow the stack, overflow arithmetic, or allocate without bound;
//! lying bodies and headers; stalled connections; and a SIGTERM while an
//! abandoned query runs. After every attack the process must still be
//! alive, answer `/-/healthy`, store a write and answer a query, and its
//! RSS must stay within a stated bound. Each answer's status and
//! `errorType` are Prometheus 3.5.3's for the same request.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use prost::Message;
use serde_json::Value;
use sluice::proto::prometheus as pb;

/// RSS the whole suite may add to the server.
const RSS_GROWTH_BOUND_KIB: u64 = 512 * 1024;

/// The real binary, killed (only it) when dropped, so that a failed
/// assertion leaves no server behind.
struct Sluice {
    child: Child,
    addr: SocketAddr,
    _data: Option<tempfile::TempDir>,
}

impl Drop for Sluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sluice {
    /// On a data directory of its own.
    fn start(extra: &[&str]) -> Self {
        let data = tempfile::tempdir().expect("tempdir");
        let mut s = Self::start_in(data.path(), extra);
        s._data = Some(data);
        s
    }

    /// On `data`, which outlives it.
    fn start_in(data: &std::path::Path, extra: &[&str]) -> Self {
        let (child, addr) = common::spawn_sluice(
            env!("CARGO_BIN_EXE_sluice"),
            data,
            "warn,sluice::server=info",
            extra,
        );
        Self {
            child,
            addr,
            _data: None,
        }
    }

    /// Sends SIGTERM and waits up to `within` for the exit; its status and
    /// how long it took.
    async fn terminate(&mut self, within: Duration) -> (std::process::ExitStatus, Duration) {
        let pid = self.child.id().to_string();
        let started = std::time::Instant::now();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success());
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status, started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("still running {within:?} after SIGTERM");
    }

    fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// The most RSS the process has had.
    fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the process is alive");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("a status field")
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Still up, and still storing and answering.
    async fn assert_alive(&mut self, after: &str) {
        assert!(
            self.child.try_wait().expect("wait").is_none(),
            "the process died after {after}"
        );
        let (code, _) = common::get(self.addr, "/-/healthy").await;
        assert_eq!(code, 200, "healthy after {after}");
        let body = common::body(vec![common::series(
            &[("__name__", "alive"), ("after", "x")],
            &[(common::now_ms(), 1.0)],
        )]);
        let (code, text) = common::push(self.addr, body).await;
        assert_eq!(code, 204, "a write after {after}: {text}");
        let v = query(self, &[("query", "1+1")]).await;
        assert_eq!(v["data"]["result"][1], "2", "a query after {after}: {v}");
    }
}

/// POSTs a form to the query API; the reply's JSON with its status code
/// as `"code"`.
async fn api(s: &Sluice, path: &str, form: &[(&str, &str)]) -> Value {
    let client = reqwest::Client::new();
    // Label values is GET only, as in Prometheus.
    let req = if path.starts_with("/api/v1/label/") {
        client.get(s.url(path)).query(form)
    } else {
        client.post(s.url(path)).form(form)
    };
    let resp = req.send().await.expect("answered");
    let code = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let mut v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path}: {code}, not JSON ({e}): {text}"));
    v["code"] = code.into();
    v
}

async fn query(s: &Sluice, form: &[(&str, &str)]) -> Value {
    api(s, "/api/v1/query", form).await
}

#[track_caller]
fn assert_error(v: &Value, code: u16, kind: &str, says: &str) {
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["status"], "error", "{v}");
    assert_eq!(v["errorType"], kind, "{v}");
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(msg.contains(says), "expected {says:?} in {v}");
}

/// Sends raw bytes on a new connection; what the server writes back until
/// it closes the connection or `wait` passes.
fn raw(addr: SocketAddr, bytes: &[u8], wait: Duration) -> String {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(wait)).expect("timeout");
    c.write_all(bytes).expect("write");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Runs the futures at once and collects their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

fn nested(open: &str, inner: &str, close: &str, n: usize) -> String {
    format!("{}{inner}{}", open.repeat(n), close.repeat(n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_prometheus_answers_and_the_process_stays_up() {
    let mut s = Sluice::start(&[
        "--query-max-samples",
        "200000",
        "--query-max-concurrency",
        "2",
        "--http-header-read-timeout",
        "2s",
        // Long enough that a request left waiting for its body would
        // still be waiting when the test reads the answer.
        "--request-timeout",
        "10m",
    ]);
    let rss_before = s.rss_kib();
    let wide = "v".repeat(4000);
    let body = common::body(vec![common::series(
        &[("__name__", "x"), ("wide", &wide)],
        &[(common::now_ms(), 1.0)],
    )]);
    assert_eq!(common::push(s.addr, body).await.0, 204);
    s.assert_alive("start").await;

    // Deep nesting: each would overflow a stack; 400 bad_data naming the limit.
    let deep: Vec<(&str, String)> = vec![
        ("parentheses", nested("(", "1", ")", 10_000)),
        ("a sum of 10,000 terms", vec!["1"; 10_000].join("+")),
        ("a sum of 100,000 terms", vec!["1"; 100_000].join("+")),
        (
            "abs() 10,000 deep",
            nested("abs(", "vector(1)", ")", 10_000),
        ),
        (
            "unary minus 10,000 deep",
            format!("{}1", "-".repeat(10_000)),
        ),
    ];
    for (what, q) in &deep {
        for path in ["/api/v1/query", "/api/v1/format_query"] {
            let v = api(&s, path, &[("query", q)]).await;
            assert_error(&v, 400, "bad_data", "query-max-depth");
        }
        s.assert_alive(what).await;
    }
    let sel = nested("(", "up", ")", 10_000);
    for path in [
        "/api/v1/series",
        "/api/v1/labels",
        "/api/v1/label/job/values",
    ] {
        let v = api(&s, path, &[("match[]", &sel)]).await;
        assert_error(&v, 400, "bad_data", "query-max-depth");
    }
    let long = format!("x{{a=\"{}\"}}", "a".repeat(300 * 1024));
    assert_error(
        &query(&s, &[("query", &long)]).await,
        400,
        "bad_data",
        "query-max-length",
    );
    // The deepest query the limit lets through is evaluated, and parsed
    // wherever a query is taken.
    let ok = nested("abs(", "vector(1)", ")", 999);
    assert_eq!(query(&s, &[("query", &ok)]).await["status"], "success");
    let parens = nested("(", "up", ")", 999);
    for path in ["/api/v1/query_exemplars", "/api/v1/format_query"] {
        let v = api(&s, path, &[("query", &parens)]).await;
        assert_eq!(v["status"], "success", "{path}: {v}");
    }
    s.assert_alive("deep queries").await;

    // Absurd durations: Prometheus' parse errors, never a panic.
    for q in [
        "x[1e30]",
        "x offset 1e30",
        "rate(x[1e300])",
        "x[5m:1e30]",
        "x[1e10]",
        "x offset -1e30",
    ] {
        assert_error(
            &query(&s, &[("query", q)]).await,
            400,
            "bad_data",
            "duration out of range",
        );
        assert_error(
            &api(&s, "/api/v1/format_query", &[("query", q)]).await,
            400,
            "bad_data",
            "duration out of range",
        );
        for path in [
            "/api/v1/series",
            "/api/v1/labels",
            "/api/v1/label/job/values",
        ] {
            let v = api(&s, path, &[("match[]", q)]).await;
            assert_eq!(v["code"], 400, "{path} {q}: {v}");
        }
        let fed = reqwest::Client::new()
            .get(s.url("/federate"))
            .query(&[("match[]", q)])
            .send()
            .await
            .expect("answered");
        assert_eq!(fed.status().as_u16(), 400, "federate {q}");
    }
    assert_error(
        &query(&s, &[("query", "x @ 1e30")]).await,
        400,
        "bad_data",
        "timestamp out of bounds for @ modifier",
    );
    s.assert_alive("absurd durations").await;

    // Absurd ranges, steps and lookbacks.
    let ranges: [(&[(&str, &str)], &str); 3] = [
        (
            &[
                ("query", "1"),
                ("start", "-9e15"),
                ("end", "9e15"),
                ("step", "1"),
            ],
            "11,000 points",
        ),
        (
            &[
                ("query", "x"),
                ("start", "0"),
                ("end", "100"),
                ("step", "1e6"),
                ("lookback_delta", "9e15"),
            ],
            "overflows int64",
        ),
        (
            &[
                ("query", "1"),
                ("start", "0"),
                ("end", "100"),
                ("step", "1e30"),
            ],
            "overflows int64",
        ),
    ];
    for (form, says) in ranges {
        let v = api(&s, "/api/v1/query_range", form).await;
        assert_error(&v, 400, "bad_data", says);
    }
    assert_error(
        &query(&s, &[("query", "1"), ("timeout", "1e30")]).await,
        400,
        "bad_data",
        "overflows int64",
    );
    // A timeout at or below zero: Prometheus' query fails under a deadline
    // already past, as it is parsed.
    for t in ["-1", "0"] {
        assert_error(
            &query(&s, &[("query", "1"), ("timeout", t)]).await,
            400,
            "bad_data",
            "invalid parameter \"query\": context deadline exceeded",
        );
    }
    s.assert_alive("absurd ranges").await;

    // Queries that build data: bounded by the samples limit or the label
    // bytes limit, 422 execution.
    for q in [
        "count_over_time(vector(1)[1y:1ms])",
        "count_over_time(vector(1)[1d:1ms])",
    ] {
        assert_error(
            &query(&s, &[("query", q)]).await,
            422,
            "execution",
            "too many samples",
        );
    }
    let mut doubling = "x".to_owned();
    for _ in 0..9 {
        doubling =
            format!(r#"label_replace({doubling}, "wide", "$1$1$1$1$1$1$1$1", "wide", "(.*)")"#);
    }
    assert_error(
        &query(&s, &[("query", &doubling)]).await,
        422,
        "execution",
        "query-max-label-bytes",
    );
    let srcs = vec![r#""wide""#; 20].join(", ");
    let mut joined = "x".to_owned();
    for _ in 0..5 {
        joined = format!(r#"label_join({joined}, "wide", "", {srcs})"#);
    }
    assert_error(
        &query(&s, &[("query", &joined)]).await,
        422,
        "execution",
        "query-max-label-bytes",
    );
    s.assert_alive("queries that build data").await;

    // Regexes cannot escape their anchoring.
    for q in [r#"x{wide=~"zzz)|(.*"}"#, r#"x{wide!~"zzz)|(.*"}"#] {
        assert_error(&query(&s, &[("query", q)]).await, 400, "bad_data", "regexp");
    }
    let v = query(
        &s,
        &[("query", r#"label_replace(x, "a", "b", "wide", "zzz)|(.*")"#)],
    )
    .await;
    assert_eq!(v["code"], 400, "{v}");

    // Experimental functions are off unless enabled, as in Prometheus.
    assert_error(
        &query(&s, &[("query", "mad_over_time(x[5m])")]).await,
        400,
        "bad_data",
        r#"function "mad_over_time" is not enabled"#,
    );
    assert_error(
        &query(&s, &[("query", "limitk(1, x)")]).await,
        400,
        "bad_data",
        "limitk() is experimental and must be enabled with --enable-feature=promql-experimental-functions",
    );

    // Smaller differences, as Prometheus 3.5.3 answers them.
    assert_error(
        &query(&s, &[("query", r#"count_values("", x)"#)]).await,
        422,
        "execution",
        "invalid label name",
    );
    let v = query(&s, &[("query", r#"count_values("a-b", x)"#)]).await;
    assert_eq!(v["status"], "success", "UTF-8 names are valid: {v}");
    let v = api(&s, "/api/v1/series", &[("match[]", "x"), ("limit", "-1")]).await;
    assert_error(&v, 400, "bad_data", "limit must be non-negative");

    // Samples the next retention pass would drop are out of bounds, not
    // acknowledged and then lost.
    for t in [0, i64::MIN] {
        let body = common::body(vec![common::series(
            &[("__name__", "ancient")],
            &[(t, 1.0)],
        )]);
        let (code, text) = common::push(s.addr, body).await;
        assert_eq!(code, 400, "{text}");
        assert!(text.contains("older than the retention cutoff"), "{text}");
    }

    // Metadata with huge help texts: cut, and bounded in all.
    for i in 0..16 {
        let help = format!("{i}{}", "h".repeat(24 << 20));
        let req = pb::WriteRequest {
            timeseries: vec![common::series(
                &[("__name__", "meta")],
                &[(common::now_ms(), 1.0)],
            )],
            metadata: vec![pb::MetricMetadata {
                r#type: 2,
                metric_family_name: format!("family{i}"),
                help,
                unit: "u".repeat(1 << 20),
            }],
        };
        let body = snap::raw::Encoder::new()
            .compress_vec(&req.encode_to_vec())
            .expect("compress");
        let (code, text) = common::push(s.addr, body).await;
        assert_eq!(code, 204, "{text}");
    }
    let meta = reqwest::get(s.url("/api/v1/metadata"))
        .await
        .expect("answered")
        .text()
        .await
        .expect("body");
    assert!(
        meta.len() < 16 * 8192,
        "/api/v1/metadata is {} bytes",
        meta.len()
    );
    s.assert_alive("metadata with huge texts").await;

    // OTLP JSON whose 30 MB of ignored values gzip to a few KB: skipped
    // as read, four at once.
    let ignored = format!(
        r#"{{"resourceMetrics":[{{"unknown":[{}0]}}]}}"#,
        "0,".repeat(15 << 20)
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(ignored.as_bytes()).expect("gzip");
    let packed = gz.finish().expect("gzip");
    drop(ignored);
    let before_json = s.peak_rss_kib();
    let sends = (0..4).map(|_| {
        reqwest::Client::new()
            .post(s.url("/v1/metrics"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(packed.clone())
            .send()
    });
    for r in futures_join(sends).await {
        assert_eq!(r.expect("answered").status().as_u16(), 200);
    }
    let json_growth = s.peak_rss_kib().saturating_sub(before_json);
    eprintln!("peak RSS growth for 4 ignored-array OTLP JSON bodies: {json_growth} KiB");
    assert!(
        json_growth < 256 * 1024,
        "4 ignored-array bodies raised peak RSS by {json_growth} KiB"
    );
    s.assert_alive("OTLP JSON with ignored arrays").await;

    // Lying bodies and headers.
    let answer = raw(
        s.addr,
        b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
          Content-Encoding: snappy\r\nContent-Length: 1000000000000\r\n\r\n",
        Duration::from_secs(60),
    );
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // A 9-byte body whose header claims 32 MB.
    let mut lying = vec![0x80, 0x80, 0x80, 0x10];
    lying.extend_from_slice(&[0; 5]);
    let (code, text) = common::push(s.addr, lying).await;
    assert_eq!(code, 400, "{text}");
    assert!(text.contains("claims"), "{text}");
    let huge_header = format!(
        "GET /-/healthy HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(2 << 20)
    );
    let answer = raw(s.addr, huge_header.as_bytes(), Duration::from_secs(60));
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    s.assert_alive("lying bodies and headers").await;

    // A stalled request head is dropped at the header deadline (2s here).
    let answer = raw(
        s.addr,
        b"GET /-/healthy HTTP/1.1\r\nHost:",
        Duration::from_secs(60),
    );
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    s.assert_alive("a stalled request head").await;

    // A query past its timeout answers errorType timeout, and stops: its
    // slot comes back. Two slots; each slow query is abandoned at 1s.
    let slow = [
        ("query", "max_over_time(vector(1)[1m:1ms])"),
        ("start", "0"),
        ("end", "10000"),
        ("step", "1"),
        ("timeout", "1s"),
    ];
    for _ in 0..3 {
        let v = api(&s, "/api/v1/query_range", &slow).await;
        assert_error(&v, 503, "timeout", "timed out");
    }
    let (_, metrics) = common::get(s.addr, "/metrics").await;
    let timed_out = common::metric_value(&metrics, "sluice_query_timed_out_total");
    assert!(timed_out >= Some(3.0), "{timed_out:?}");
    assert!(metrics.contains("sluice_query_running"), "{metrics}");
    s.assert_alive("timed-out queries").await;

    let growth = s.rss_kib().saturating_sub(rss_before);
    eprintln!("RSS growth over the attacks: {growth} KiB");
    assert!(
        growth < RSS_GROWTH_BOUND_KIB,
        "RSS grew by {growth} KiB over the attacks"
    );

    // SIGTERM while an abandoned slow query runs and a connection sits
    // on a half-sent head: a clean exit 0, within the shutdown timeout.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let mut long = slow.to_vec();
    long[4] = ("timeout", "10m");
    let _ = client
        .post(s.url("/api/v1/query_range"))
        .form(&long)
        .send()
        .await;
    let mut half = TcpStream::connect(s.addr).expect("connect");
    half.write_all(b"GET /-/healthy HTTP/1.1\r\n")
        .expect("write");
    let (status, _) = s.terminate(Duration::from_secs(60)).await;
    assert!(status.success(), "exit status {status}");
}

/// A regex that takes about 13 ms per 4 KB label value in a release build
/// of the regex crate (1.2 KB of lazy repetitions: the lazy DFA gives up
/// and the matcher falls back to its slower engines).
fn slow_regex() -> String {
    ["(?:\\w|\\s)*?v"; 100].concat()
}

/// Pushes `n` series named `name`, each with a 4 KB `wide` label value,
/// in requests of 500.
async fn push_wide(addr: SocketAddr, name: &str, n: usize) {
    let now = common::now_ms();
    for first in (0..n).step_by(500) {
        let series = (first..(first + 500).min(n))
            .map(|i| {
                let wide = format!("{i:05}{}", "v".repeat(4000));
                common::series(&[("__name__", name), ("wide", &wide)], &[(now, 1.0)])
            })
            .collect();
        let (code, text) = common::push(addr, common::body(series)).await;
        assert_eq!(code, 204, "{text}");
    }
}

/// Label values are matched against a regex with the shard locks let go,
/// so a slow regex over 2,000 values of 4 KB (~26 s of matching) holds no
/// write back, and it stops at the query's deadline (5 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_regex_holds_no_write_back_and_stops_at_its_deadline() {
    // 5 s leaves a busy machine ample time for the write, and is still
    // far short of the ~26 s the matching would take.
    let mut s = Sluice::start(&["--query-timeout", "5s", "--query-max-concurrency", "2"]);
    push_wide(s.addr, "wide", 2000).await;
    // In a PromQL string, the regex's backslashes are escaped.
    let selector = format!("wide{{wide=~\"{}\"}}", slow_regex().replace('\\', "\\\\"));
    for (path, key) in [("/api/v1/query", "query"), ("/api/v1/series", "match[]")] {
        let url = s.url(path);
        let form = [(key.to_owned(), selector.clone())];
        let slow = tokio::spawn(async move {
            let resp = reqwest::Client::new()
                .post(url)
                .form(&form)
                .send()
                .await
                .expect("answered");
            let code = resp.status().as_u16();
            let mut v: Value =
                serde_json::from_str(&resp.text().await.expect("body")).expect("JSON");
            v["code"] = code.into();
            v
        });
        // Once the regex is running, writes to every shard go through
        // while it still runs: its shard locks are not held meanwhile.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let series = (0..200)
            .map(|i| {
                common::series(
                    &[("__name__", "during"), ("i", &i.to_string())],
                    &[(common::now_ms(), 1.0)],
                )
            })
            .collect();
        let (code, text) = common::push(s.addr, common::body(series)).await;
        assert_eq!(code, 204, "{text}");
        if slow.is_finished() {
            let v = slow.await.expect("task");
            panic!("{path}: the write waited for the slow regex to finish: {v}");
        }
        let v = slow.await.expect("task");
        assert_error(&v, 503, "timeout", "timed out");
    }
    // The abandoned matching stops (its slots come back) and the process
    // still stores and answers.
    s.assert_alive("slow regexes").await;
    let v = query(&s, &[("query", "count(during)")]).await;
    assert_eq!(v["data"]["result"][0]["value"][1], "200", "{v}");
}

/// Counts the open file descriptors of process `pid`.
/// `n` connections, each sent `bytes`.
fn open_with(addr: SocketAddr, n: usize, bytes: &[u8]) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.write_all(bytes).expect("write");
            c
        })
        .collect()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(Iterator::count)
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_answers_and_idle_connections_are_bounded() {
    // Room for 2,000 connections on both ends (the server raises its own).
    let soft = rlimit::increase_nofile_limit(8192).expect("raise the open-files limit");
    assert!(
        soft >= 4500,
        "open-files limit {soft} is too low for this test"
    );
    let mut s = Sluice::start(&[
        "--query-max-response-bytes",
        "1000000",
        // Long enough for all 2,000 connections to be open at once, even
        // on a machine busy with the other tests.
        "--http-header-read-timeout",
        "30s",
    ]);
    // 500 series of 4 KB label values: every listing of them is ~2 MB.
    push_wide(s.addr, "wide", 500).await;

    // A form body past query-max-form-bytes (10 MiB): Go's ParseForm
    // answer, as Prometheus gives it.
    let pad = "a".repeat(11 << 20);
    for path in ["/api/v1/query", "/api/v1/series"] {
        let v = api(
            &s,
            path,
            &[("query", "1"), ("match[]", "up"), ("pad", &pad)],
        )
        .await;
        assert_error(&v, 400, "bad_data", "query-max-form-bytes");
    }
    drop(pad);

    // Answers past query-max-response-bytes are refused, not built.
    let range = [
        ("query", "wide"),
        ("start", "0"),
        ("end", "1"),
        ("step", "1"),
    ];
    let mut now_range = range;
    let now = (common::now_ms() / 1000 + 1).to_string();
    now_range[1].1 = &now;
    now_range[2].1 = &now;
    let refused = [
        api(&s, "/api/v1/query", &[("query", "wide")]).await,
        api(&s, "/api/v1/query_range", &now_range).await,
        api(&s, "/api/v1/series", &[("match[]", "wide")]).await,
        api(&s, "/api/v1/label/wide/values", &[]).await,
    ];
    for v in &refused {
        assert_error(v, 422, "execution", "query-max-response-bytes");
    }
    let fed = reqwest::Client::new()
        .get(s.url("/federate"))
        .query(&[("match[]", "wide")])
        .send()
        .await
        .expect("answered");
    assert_eq!(fed.status().as_u16(), 422);
    // Smaller answers over the same data are served.
    let v = query(&s, &[("query", "count(wide)")]).await;
    assert_eq!(v["data"]["result"][0]["value"][1], "500", "{v}");
    let v = api(
        &s,
        "/api/v1/series",
        &[("match[]", "wide"), ("limit", "10")],
    )
    .await;
    assert_eq!(v["data"].as_array().map(Vec::len), Some(10), "{v}");
    s.assert_alive("answers past the limit").await;

    // 2,000 keep-alive connections, each answered once and then left idle.
    let pid = s.child.id();
    let fds_before = open_fds(pid);
    let rss_before = s.rss_kib();
    let mut idle = open_with(s.addr, 2000, b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n");
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).expect("an answer");
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    }
    let held = open_fds(pid).saturating_sub(fds_before);
    let rss_growth = s.rss_kib().saturating_sub(rss_before);
    eprintln!("2000 idle keep-alive connections: {held} descriptors, RSS +{rss_growth} KiB");
    // (The count before included connections of earlier requests, some
    // closed since.)
    assert!(held >= 1800, "only {held} connections are open");
    assert!(
        rss_growth < 64 * 1024,
        "2000 idle connections grew RSS by {rss_growth} KiB"
    );
    // The server still answers while they are open.
    s.assert_alive("2000 idle keep-alive connections").await;
    // Each is closed by the server once idle for the header timeout.
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        match c.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("an idle connection was not closed: {other:?}"),
        }
    }
    drop(idle);
    let mut left = usize::MAX;
    for _ in 0..100 {
        left = open_fds(pid).saturating_sub(fds_before);
        if left < 50 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        left < 50,
        "{left} descriptors still held after the idle timeout"
    );
    s.assert_alive("idle connections closed").await;
}

/// Queries that would make more than their budget stop near it: the
/// points of subquery steps and of a range answer are counted as they are
/// made, against --query-max-samples and a per-query memory budget (a
/// quarter of --max-memory), and the heap is trimmed after.
/// Writes 6,000 series with a sample a minute over the last 20 minutes;
/// the minute they end at.
async fn six_thousand_series(s: &Sluice) -> i64 {
    let now = common::now_ms() / 60_000 * 60_000;
    for first in (0..6000).step_by(500) {
        let series = (first..first + 500)
            .map(|i| {
                let samples: Vec<(i64, f64)> =
                    (0..20).map(|k| (now - (19 - k) * 60_000, 1.0)).collect();
                common::series(
                    &[("__name__", &format!("m{}", i % 10)), ("i", &i.to_string())],
                    &samples,
                )
            })
            .collect();
        let (code, text) = common::push(s.addr, common::body(series)).await;
        assert_eq!(code, 204, "{text}");
    }
    now
}

/// The range query of `{__name__=~".+"}` over 6,000 series x 11,001 steps
/// ending at `now`: 66 M points, past every memory limit.
fn every_series_range(now: i64) -> Vec<(&'static str, String)> {
    let start = (now - 1_100_000) as f64 / 1000.0;
    vec![
        ("query", r#"{__name__=~".+"}"#.to_owned()),
        ("start", format!("{start}")),
        ("end", format!("{}", start + 1100.0)),
        ("step", "0.1".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_stop_near_their_memory_budget() {
    let s = Sluice::start(&["--max-memory", "1GiB"]);
    let now = six_thousand_series(&s).await;
    let base_hwm = s.peak_rss_kib();
    // The probe's subqueries: 86.4 M and 31.5 G steps of one point each.
    for q in [
        "count_over_time(vector(1)[1d:1ms])",
        "count_over_time(vector(1)[1y:1ms])",
    ] {
        let started = std::time::Instant::now();
        let v = query(&s, &[("query", q)]).await;
        assert_error(&v, 422, "execution", "query-max-memory");
        eprintln!("{q}: refused in {:?}", started.elapsed());
    }
    let range = every_series_range(now);
    let form: Vec<(&str, &str)> = range.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let started = std::time::Instant::now();
    let v = api(&s, "/api/v1/query_range", &form).await;
    assert_error(&v, 422, "execution", "query-max-memory");
    eprintln!(
        "the 66 M-point range query: refused in {:?}",
        started.elapsed()
    );
    let peak = s.peak_rss_kib().saturating_sub(base_hwm);
    eprintln!("peak RSS over the queries: +{peak} KiB (budget 128 MiB)");
    // The budget is 128 MiB (an eighth of 1 GiB) of points; a growing
    // vector may hold twice what it counted for a moment.
    assert!(peak < 320 << 10, "peak RSS grew by {peak} KiB");
    let rss = s.rss_kib();
    assert!(
        rss < base_hwm + (64 << 10),
        "RSS {rss} KiB after the queries"
    );
    // A query within the budget still answers.
    let v = query(&s, &[("query", "count({__name__=~\"m.\"})")]).await;
    assert_eq!(v["data"]["result"][0]["value"][1], "6000", "{v}");
    let (_, metrics) = common::get(s.addr, "/metrics").await;
    assert!(
        metrics.contains("\nsluice_query_memory_bytes 0\n"),
        "queries that ended still hold memory:\n{metrics}"
    );
}

/// Queries at once draw from one pool: four every-series queries, each
/// allowed the whole pool, hold no more together than one would. Each is
/// refused either for its own budget (422) or as busy (503 with
/// `Retry-After`, since it can succeed once the others end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queries_share_one_memory_pool() {
    // The pool is a quarter of 1 GiB, as much as one query may take.
    let s = Sluice::start(&["--max-memory", "1GiB", "--query-max-memory", "256MiB"]);
    let now = six_thousand_series(&s).await;
    let base_hwm = s.peak_rss_kib();
    let client = reqwest::Client::new();
    let url = s.url("/api/v1/query_range");
    let form = every_series_range(now);
    let asks: Vec<_> = (0..4)
        .map(|_| {
            let req = client.post(&url).form(&form).send();
            tokio::spawn(async move {
                let resp = req.await.expect("answered");
                let code = resp.status().as_u16();
                let retry = resp.headers().get("retry-after").is_some();
                let text = resp.text().await.expect("body");
                let v: Value = serde_json::from_str(&text).expect("JSON");
                (code, retry, v)
            })
        })
        .collect();
    let mut answers = Vec::new();
    for ask in asks {
        answers.push(ask.await.expect("the request task"));
    }
    let mut busy = 0;
    for (code, retry, v) in &answers {
        match code {
            422 => assert!(
                v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("query-max-memory"),
                "{v}"
            ),
            503 => {
                busy += 1;
                assert!(*retry, "a busy refusal without Retry-After: {v}");
                assert_eq!(v["errorType"], "unavailable", "{v}");
                assert!(
                    v["error"]
                        .as_str()
                        .unwrap_or_default()
                        .contains("retry later"),
                    "{v}"
                );
            }
            _ => panic!("{code}: {v}"),
        }
    }
    let peak = s.peak_rss_kib().saturating_sub(base_hwm);
    eprintln!("four queries at once: {busy} refused as busy, peak RSS +{peak} KiB (pool 256 MiB)");
    // Four queries of 256 MiB each would pass 1 GiB; the pool holds them to
    // 256 MiB, and growing vectors to about twice that.
    assert!(peak < 600 << 10, "peak RSS grew by {peak} KiB");
    let (_, metrics) = common::get(s.addr, "/metrics").await;
    assert!(
        metrics.contains("\nsluice_query_memory_bytes 0\n"),
        "queries that ended still hold memory:\n{metrics}"
    );
    assert!(
        metrics.contains("\nsluice_query_memory_limit_bytes 268435456\n"),
        "{metrics}"
    );
}

/// The status line of the answer to `head` (sent whole, then read).
fn status_of(addr: SocketAddr, head: &[u8]) -> String {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    // The server may answer and close before the whole head is sent.
    let _ = c.write_all(head);
    let mut out = vec![0u8; 64];
    let n = c.read(&mut out).unwrap_or(0);
    String::from_utf8_lossy(&out[..n])
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_limit_holds_at_its_exact_number() {
    let mut s = Sluice::start(&[]);
    // The default http-max-header-bytes, 1,048,576: a head of exactly that
    // is served, one 45 bytes over is 431 (hyper alone let it through).
    let head = |total: usize| {
        let start = "GET /-/healthy HTTP/1.1\r\nHost: x\r\nX-Pad: ";
        let end = "\r\n\r\n";
        let pad = "a".repeat(total - start.len() - end.len());
        format!("{start}{pad}{end}").into_bytes()
    };
    for (bytes, want) in [
        (1_048_576, "HTTP/1.1 200"),
        (1_048_577, "HTTP/1.1 431"),
        (1_048_621, "HTTP/1.1 431"),
        (1_200_000, "HTTP/1.1 431"),
    ] {
        let line = status_of(s.addr, &head(bytes));
        assert!(line.starts_with(want), "{bytes}-byte head: {line:?}");
    }
    s.assert_alive("heads at the limit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_cannot_keep_health_checks_and_writes_out() {
    // 256 descriptors, as the probe had: the connection cap comes down to
    // fit (192), and 300 connections that send half a head and stall take
    // all of it, and more.
    let data = tempfile::tempdir().expect("tempdir");
    let (child, addr) = common::spawn_sluice_limited(
        env!("CARGO_BIN_EXE_sluice"),
        data.path(),
        "warn,sluice::server=info",
        &["--http-header-read-timeout", "5m"],
        &[],
        Some(256),
    );
    let mut s = Sluice {
        child,
        addr,
        _data: Some(data),
    };
    let (_, metrics) = common::get(s.addr, "/metrics").await;
    assert_eq!(
        common::metric_value(&metrics, "sluice_http_connections_limit"),
        Some(192.0),
        "the cap fits the open-files limit"
    );
    let rss_before = s.rss_kib();
    let mut stalled = open_with(s.addr, 300, b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n");
    // Served while they stall (the header timeout, 5 minutes, has not
    // freed any): each new connection displaces the oldest stalled one.
    let started = std::time::Instant::now();
    s.assert_alive("300 stalled connections").await;
    let body = common::body(vec![common::series(
        &[("__name__", "through_the_door")],
        &[(common::now_ms(), 1.0)],
    )]);
    assert_eq!(common::push(s.addr, body).await.0, 204);
    let took = started.elapsed();
    eprintln!("served past 300 stalled connections in {took:?}");
    assert!(
        took < Duration::from_secs(60),
        "answers waited {took:?}: for the stalled connections to time out"
    );
    let (_, metrics) = common::get(s.addr, "/metrics").await;
    let shed = common::metric_value(&metrics, "sluice_http_connections_shed_total");
    assert!(shed >= Some(100.0), "shed {shed:?}");
    let open = common::metric_value(&metrics, "sluice_http_connections");
    assert!(open <= Some(192.0), "open {open:?}");
    assert!(open_fds(s.child.id()) < 256, "descriptors within the limit");
    // The oldest stalled connections were closed by the server.
    let mut closed = 0;
    for c in stalled.iter_mut().take(50) {
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        // Closed: end of stream or a reset; a read timeout means open.
        match c.read(&mut buf) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => closed += 1,
            _ => {}
        }
    }
    assert_eq!(closed, 50, "the oldest stalled connections are closed");
    let growth = s.rss_kib().saturating_sub(rss_before);
    eprintln!("RSS growth with 300 stalled connections: {growth} KiB");
    assert!(growth < 64 * 1024, "RSS grew by {growth} KiB");
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_does_not_wait_for_a_half_sent_head() {
    let mut s = Sluice::start(&[
        "--http-header-read-timeout",
        "5m",
        "--shutdown-timeout",
        "5m",
    ]);
    // A half-sent head, an idle keep-alive and an empty connection.
    let mut half = TcpStream::connect(s.addr).expect("connect");
    half.write_all(b"POST /api/v1/write HTTP/1.1\r\nHost: x\r\nContent-")
        .expect("write");
    let mut idle = TcpStream::connect(s.addr).expect("connect");
    idle.write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut buf = [0u8; 256];
    let n = idle.read(&mut buf).expect("an answer");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let _empty = TcpStream::connect(s.addr).expect("connect");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, took) = s.terminate(Duration::from_secs(120)).await;
    eprintln!("exited {took:?} after SIGTERM with a half-sent head open");
    assert!(status.success(), "exit status {status}");
    // The shutdown timeout is 5 minutes: an exit well before it did not
    // wait for the half-sent head.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    half.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    assert!(matches!(half.read(&mut buf), Ok(0) | Err(_)));
}

/// A tmpfs of `bytes` mounted for the test; unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
    sudo: bool,
}

impl SmallDisk {
    /// `None` when this machine does not let the test mount one.
    fn mount(bytes: usize) -> Option<Self> {
        let dir = tempfile::tempdir().expect("tempdir");
        let size = format!("size={bytes}");
        for sudo in [false, true] {
            let mut cmd = if sudo {
                let mut c = Command::new("sudo");
                c.args(["-n", "mount"]);
                c
            } else {
                Command::new("mount")
            };
            let ok = cmd
                .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
                .arg(dir.path())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Some(Self { dir, sudo });
            }
        }
        None
    }
}

impl SmallDisk {
    /// Grows the filesystem to `bytes` in place.
    fn grow(&self, bytes: usize) -> bool {
        let mut cmd = if self.sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "mount"]);
            c
        } else {
            Command::new("mount")
        };
        cmd.args(["-o", &format!("remount,size={bytes}")])
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let mut cmd = if self.sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "umount"]);
            c
        } else {
            Command::new("umount")
        };
        let _ = cmd.arg(self.dir.path()).status();
    }
}

/// Fills the filesystem at `dir` with one file, to the last byte.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    let block = vec![0xa5u8; 64 << 10];
    let mut small = false;
    loop {
        let chunk = if small { &block[..512] } else { &block[..] };
        match f.write_all(chunk) {
            Ok(()) => {}
            Err(_) if !small => small = true,
            Err(_) => break,
        }
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_503_keeps_nothing_of_them_and_heals() {
    let Some(disk) = SmallDisk::mount(12 << 20) else {
        eprintln!(
            "!!! SKIPPED: cannot mount a tmpfs here (needs root or passwordless sudo); \
             the full-disk WAL test did not run !!!"
        );
        return;
    };
    let data = disk.dir.path().join("data");
    let args = ["--checkpoint-interval", "1h", "--wal-reserve-bytes", "2MiB"];
    let mut first = Sluice::start_in(&data, &args);
    let addr = first.addr;
    let push = |name: &str, n: usize| {
        let series = (0..n)
            .map(|i| {
                common::series(
                    &[("__name__", name), ("i", &i.to_string())],
                    &[(common::now_ms(), i as f64)],
                )
            })
            .collect();
        common::body(series)
    };
    let count = |name: String| async move {
        let v = common::query_vector(addr, &format!("count({name})"), None).await;
        v.first().map(|(_, n)| n.clone())
    };
    assert_eq!(common::push(addr, push("before", 10)).await.0, 204);

    // Writes while the disk is full: each is acknowledged (the reserve
    // took what was in flight when the disk filled) or refused with 503
    // and Retry-After, never 500.
    let filler = fill(disk.dir.path());
    let mut codes = Vec::new();
    for k in 0..20 {
        let resp = reqwest::Client::new()
            .post(format!("http://{addr}/api/v1/write"))
            .header("Content-Encoding", "snappy")
            .header("Content-Type", "application/x-protobuf")
            .body(push(&format!("while_full_{k}"), 2000))
            .send()
            .await
            .expect("answered");
        let code = resp.status().as_u16();
        assert!(code == 503 || code == 204, "{code}");
        if code == 503 {
            assert!(resp.headers().contains_key("retry-after"));
        }
        codes.push(code);
    }
    let refused: Vec<usize> = (0..codes.len()).filter(|&k| codes[k] == 503).collect();
    assert!(refused.len() >= 15, "writes on a full disk: {codes:?}");
    let (ready, text) = common::get(addr, "/-/ready").await;
    assert_eq!(ready, 503, "{text}");
    assert!(text.contains("disk is full"), "{text}");
    let (_, metrics) = common::get(addr, "/metrics").await;
    assert_eq!(
        common::metric_value(&metrics, "sluice_wal_disk_full"),
        Some(1.0)
    );
    assert!(common::metric_value(&metrics, "sluice_wal_write_failures_total") >= Some(1.0));

    // However long it stays full, refused writes hold no memory.
    let rss_before = first.rss_kib();
    let started = std::time::Instant::now();
    let mut more = 0;
    while started.elapsed() < Duration::from_secs(3) {
        let (code, _) = common::push(addr, push("flood", 2000)).await;
        assert_eq!(code, 503);
        more += 1;
    }
    let growth = first.rss_kib().saturating_sub(rss_before);
    eprintln!("{more} writes refused on a full disk: RSS +{growth} KiB");
    assert!(growth < 16 << 10, "RSS grew by {growth} KiB");

    // Space returns: the first write is taken.
    std::fs::remove_file(&filler).expect("free the disk");
    assert_eq!(common::push(addr, push("after", 10)).await.0, 204);
    assert_eq!(common::get(addr, "/-/ready").await.0, 200);
    // Nothing of a refused write was kept, not even once the log moved on.
    for (k, &code) in codes.iter().enumerate() {
        let name = format!("while_full_{k}");
        if code == 204 {
            assert_eq!(count(name.clone()).await.as_deref(), Some("2000"), "{name}");
        } else {
            assert_eq!(
                count(name.clone()).await,
                None,
                "{name} was refused, yet kept"
            );
            let (_, series) = common::get(addr, &format!("/api/v1/series?match[]={name}")).await;
            assert!(series.contains(r#""data":[]"#), "{name}: {series}");
        }
    }
    assert_eq!(count("flood".into()).await, None);

    // Full again, then the filesystem grows (as the probe did): the first
    // write after is taken.
    let filler = fill(disk.dir.path());
    let mut full_again = false;
    for k in 0..20 {
        if common::push(addr, push(&format!("again_{k}"), 2000))
            .await
            .0
            == 503
        {
            full_again = true;
            break;
        }
    }
    assert!(full_again, "the disk did not fill again");
    assert!(disk.grow(64 << 20), "remount larger");
    assert_eq!(common::push(addr, push("grown", 10)).await.0, 204);
    drop(filler);

    // The log is valid: a restart replays what was acknowledged, and
    // nothing refused.
    let pid = first.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill")
        .success());
    let _ = first.child.wait();
    let second = Sluice::start_in(&data, &args);
    let addr = second.addr;
    let count = |name: String| async move {
        let v = common::query_vector(addr, &format!("count({name})"), None).await;
        v.first().map(|(_, n)| n.clone())
    };
    for name in ["before", "after", "grown"] {
        assert_eq!(count(name.into()).await.as_deref(), Some("10"), "{name}");
    }
    for (k, &code) in codes.iter().enumerate() {
        let want = (code == 204).then(|| "2000".to_owned());
        assert_eq!(
            count(format!("while_full_{k}")).await,
            want,
            "while_full_{k}"
        );
    }
    assert_eq!(count("flood".into()).await, None);
}
