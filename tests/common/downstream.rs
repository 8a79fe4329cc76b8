//! Forward destinations for the forwarding tests: a real VictoriaMetrics
//! (Debian's `victoria-metrics` package), and a recording receiver that
//! decodes every remote-write request, counts each sample it receives, and
//! answers as scripted.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prost::Message as _;
use sluice::proto::prometheus as pb;

/// A sample as compared across systems: labels as `{a="b",…}` text, the
/// timestamp, and the value's bits.
pub type Key = (String, i64, u64);

/// The labels of a series as one sorted text.
pub fn labels_text<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let sorted: BTreeMap<&str, &str> = labels.into_iter().collect();
    let parts: Vec<String> = sorted.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{{{}}}", parts.join(","))
}

/// A real VictoriaMetrics on a free loopback port; killed (only it) when
/// dropped or stopped.
pub struct VictoriaMetrics {
    child: Option<std::process::Child>,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Drop for VictoriaMetrics {
    fn drop(&mut self) {
        self.stop();
    }
}

impl VictoriaMetrics {
    /// Starts `/usr/bin/victoria-metrics` with its own data directory,
    /// queries seeing data at once (no latency offset, no cache).
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut vm = Self {
            child: None,
            port,
            dir,
        };
        vm.restart();
        vm
    }

    /// Starts it again on the same port and data (after [`Self::stop`]).
    pub fn restart(&mut self) {
        assert!(
            std::path::Path::new("/usr/bin/victoria-metrics").is_file(),
            "/usr/bin/victoria-metrics is missing: install Debian's victoria-metrics package (scripts/test does)"
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("vm.log"))
            .expect("log");
        let child = std::process::Command::new("/usr/bin/victoria-metrics")
            .arg(format!("-httpListenAddr=127.0.0.1:{}", self.port))
            .arg(format!(
                "-storageDataPath={}",
                self.dir.path().join("data").display()
            ))
            .args([
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-retentionPeriod=100y",
                "-loggerLevel=ERROR",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .expect("victoria-metrics starts");
        self.child = Some(child);
    }

    /// Stops it (only it) with SIGTERM, so that it writes out what it
    /// acknowledged (it buffers recent samples in memory for a second or
    /// so); SIGKILL after 10 s.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its remote-write URL.
    pub fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Waits until it answers `/health`.
    pub async fn ready(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            if let Ok(r) = reqwest::get(format!("http://{}/health", self.addr())).await {
                if r.status().is_success() {
                    return;
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "victoria-metrics never became healthy: {}",
                std::fs::read_to_string(self.dir.path().join("vm.log")).unwrap_or_default()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// Every raw sample of the series `selector` matches, as a Prometheus-style
/// query API (Sluice, Prometheus, VictoriaMetrics) answers `selector[w]` at
/// `time` (unix seconds).
pub async fn raw_samples(base: &str, selector: &str, window: &str, time: f64) -> Vec<Key> {
    let v = super::api_json(
        &format!("{base}/api/v1/query"),
        &[
            ("query", format!("{selector}[{window}]")),
            ("time", format!("{time:.3}")),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{base}: {v}");
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().expect("a matrix") {
        let labels = labels_text(
            s["metric"]
                .as_object()
                .expect("labels")
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default())),
        );
        for p in s["values"].as_array().expect("values") {
            let t = (p[0].as_f64().expect("time") * 1000.0).round() as i64;
            let v: f64 = p[1].as_str().expect("value").parse().expect("a number");
            out.push((labels.clone(), t, v.to_bits()));
        }
    }
    out.sort();
    out
}

/// What the recording receiver answers, request by request; once the
/// script is used up it answers 204.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A status with an optional `Retry-After` (seconds).
    Status(u16, Option<u64>),
}

/// A remote-write receiver that records every sample it is sent.
#[derive(Clone, Default)]
pub struct Recorder {
    /// How often each sample arrived (in a request answered 2xx).
    pub received: Arc<Mutex<HashMap<Key, u32>>>,
    /// Requests seen, with the status given and their samples.
    pub requests: Arc<Mutex<Vec<(u16, usize)>>>,
    /// The headers of the last request.
    pub last_headers: Arc<Mutex<Vec<(String, String)>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
    down: Arc<std::sync::atomic::AtomicBool>,
    /// Milliseconds each request takes before it is answered.
    pub delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// The newest timestamp received per series, and how often a series'
    /// sample arrived older than one before it.
    newest: Arc<Mutex<HashMap<String, i64>>>,
    pub out_of_order: Arc<std::sync::atomic::AtomicU64>,
}

impl Recorder {
    /// Serves on a free loopback port; the address.
    pub async fn start(&self, script: Vec<Answer>) -> SocketAddr {
        *self.script.lock().expect("script") = script.into();
        let me = self.clone();
        let app = axum::Router::new().route(
            "/api/v1/write",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let me = me.clone();
                    async move {
                        let delay = me.delay_ms.load(std::sync::atomic::Ordering::Relaxed);
                        if delay > 0 {
                            tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                        }
                        me.handle(&headers, &body)
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        addr
    }

    fn handle(
        &self,
        headers: &axum::http::HeaderMap,
        body: &[u8],
    ) -> axum::response::Response<axum::body::Body> {
        *self.last_headers.lock().expect("headers") = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_owned()))
            .collect();
        let raw = snap::raw::Decoder::new()
            .decompress_vec(body)
            .expect("snappy");
        let req = pb::WriteRequest::decode(&raw[..]).expect("a WriteRequest");
        let samples: Vec<Key> = req
            .timeseries
            .iter()
            .flat_map(|ts| {
                let labels = labels_text(
                    ts.labels
                        .iter()
                        .map(|l| (l.name.as_str(), l.value.as_str())),
                );
                ts.samples
                    .iter()
                    .map(move |s| (labels.clone(), s.timestamp, s.value.to_bits()))
            })
            .collect();
        let answer = if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            Some(Answer::Status(503, None))
        } else {
            self.script.lock().expect("script").pop_front()
        };
        let (status, retry_after) = match answer {
            Some(Answer::Status(s, r)) => (s, r),
            None => (204, None),
        };
        self.requests
            .lock()
            .expect("requests")
            .push((status, samples.len()));
        if (200..300).contains(&status) {
            let mut newest = self.newest.lock().expect("newest");
            for (labels, t, _) in &samples {
                let last = newest.entry(labels.clone()).or_insert(i64::MIN);
                if *t <= *last {
                    self.out_of_order
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                *last = (*last).max(*t);
            }
            drop(newest);
            let mut got = self.received.lock().expect("received");
            for k in samples {
                *got.entry(k).or_default() += 1;
            }
        }
        let mut resp = axum::response::Response::new(axum::body::Body::from(format!(
            "scripted answer {status}"
        )));
        *resp.status_mut() = axum::http::StatusCode::from_u16(status).expect("status");
        if let Some(r) = retry_after {
            resp.headers_mut()
                .insert("retry-after", r.to_string().parse().expect("header"));
        }
        resp
    }

    /// While `down`, every request is answered 503 (the script waits).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::Relaxed);
    }

    /// Distinct samples received.
    pub fn distinct(&self) -> usize {
        self.received.lock().expect("received").len()
    }

    /// Samples received more than once, counting each extra copy.
    pub fn duplicates(&self) -> u64 {
        self.received
            .lock()
            .expect("received")
            .values()
            .map(|&n| u64::from(n.saturating_sub(1)))
            .sum()
    }
}
