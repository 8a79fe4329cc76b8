//! https and logins at the door (`--web-config-file`, Prometheus' web
//! configuration file), against the release binary, with certificates
//! made here by `openssl` and real clients: rustls over hyper, a real
//! Prometheus 3.5.3 remote-writing over https with `basic_auth`, and
//! promtool reading back with `--http.config.file`.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

#[path = "common/pki.rs"]
mod pki;
use pki::{hash, Pki};

const PASSWORD: &str = "correct horse";

/// Sluice started with `web` as its web configuration file (written into
/// the certificates' directory, so relative paths name them).
struct Door {
    child: common::KillOnDrop,
    addr: std::net::SocketAddr,
    web: PathBuf,
    _data: tempfile::TempDir,
}

impl Door {
    fn start(pki: &Pki, web: &str) -> Self {
        Self::start_with(pki, web, &[])
    }

    /// [`Door::start`] with `args` more.
    fn start_with(pki: &Pki, web: &str, args: &[&str]) -> Self {
        let data = tempfile::tempdir().expect("tempdir");
        let file = pki.path("web.yml");
        std::fs::write(&file, web).expect("web config");
        let file_arg = file.display().to_string();
        let mut all = vec!["--web-config-file", &file_arg];
        all.extend_from_slice(args);
        let (child, addr) =
            common::spawn_sluice(env!("CARGO_BIN_EXE_sluice"), data.path(), "info", &all);
        Self {
            child: common::KillOnDrop(child),
            addr,
            web: file,
            _data: data,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    fn hangup(&self) {
        let out = std::process::Command::new("kill")
            .args(["-HUP", &self.child.0.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(out.success());
    }
}

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// An https client that trusts `ca`, presenting `identity` (a name in
/// the PKI: `client`, `other`, `rogue`) when given.
fn client(pki: &Pki, identity: Option<&str>) -> Https {
    let tls = sluice::forward::TlsConfig {
        ca_file: Some(pki.path("ca.crt")),
        cert_file: identity.map(|n| pki.path(&format!("{n}.crt"))),
        key_file: identity.map(|n| pki.path(&format!("{n}.key"))),
        ..Default::default()
    }
    .client_config()
    .expect("client TLS config");
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    Client::builder(hyper_util::rt::TokioExecutor::new()).build(connector)
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

async fn ask(
    c: &Https,
    method: &str,
    url: &str,
    login: Option<(&str, &str)>,
    body: Vec<u8>,
) -> Result<Answer, String> {
    use base64::Engine as _;
    let mut req = http::Request::builder().method(method).uri(url);
    if let Some((u, p)) = login {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
        req = req.header("authorization", format!("Basic {token}"));
    }
    if method == "POST" && !body.is_empty() {
        req = req
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "snappy")
            .header("x-prometheus-remote-write-version", "0.1.0");
    }
    let resp = tokio::time::timeout(
        Duration::from_secs(20),
        c.request(req.body(Full::new(Bytes::from(body))).expect("request")),
    )
    .await
    .map_err(|_| "timed out".to_owned())?
    .map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

async fn get(c: &Https, url: &str, login: Option<(&str, &str)>) -> Answer {
    ask(c, "GET", url, login, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

fn metric(text: &str, name: &str) -> f64 {
    common::metric_value(text, name).unwrap_or(0.0)
}

/// A Prometheus that scrapes itself every second and remote-writes to
/// `url` over https trusting `ca`, as `user` (password [`PASSWORD`]), with
/// `remote_write` lines and `queue` lines more.
fn prometheus_config(url: &str, ca: &str, user: &str, remote_write: &str, queue: &str) -> String {
    format!(
        r#"global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs:
      - targets: ["127.0.0.1:{{port}}"]
remote_write:
  - url: {url}
{remote_write}    basic_auth:
      username: {user}
      password: {PASSWORD}
    tls_config:
      ca_file: {ca}
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
{queue}"#
    )
}

fn web_config(users: &[(&str, &str)], extra_tls: &str) -> String {
    let users: String = users
        .iter()
        .map(|(u, p)| format!("  {u}: '{}'\n", hash(p)))
        .collect();
    format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n{extra_tls}\
         http_server_config:\n  headers:\n    X-Frame-Options: deny\n    \
         Strict-Transport-Security: max-age=31536000\n\
         basic_auth_users:\n{users}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_over_https_are_checked_and_reloaded() {
    let pki = Pki::new();
    let door = Door::start_with(
        &pki,
        &web_config(&[("alice", PASSWORD)], ""),
        &["--http-max-header-bytes", "4096"],
    );
    let c = client(&pki, None);
    let alice = Some(("alice", PASSWORD));

    // The health checks need no login; the configured headers go on every
    // answer.
    for path in ["/-/healthy", "/-/ready"] {
        let a = get(&c, &door.url(path), None).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        assert_eq!(a.headers["x-frame-options"], "deny");
    }
    // Everything else does: 401 with WWW-Authenticate for a missing login,
    // an unknown user and a wrong password alike.
    let query = door.url("/api/v1/query?query=1%2B1");
    for login in [None, Some(("mallory", PASSWORD)), Some(("alice", "wrong"))] {
        let a = get(&c, &query, login).await;
        assert_eq!(a.status, 401, "{login:?}: {}", a.body);
        assert_eq!(a.headers["www-authenticate"], "Basic");
        assert_eq!(a.headers["strict-transport-security"], "max-age=31536000");
        assert_eq!(a.body, "Unauthorized\n");
    }
    let a = get(&c, &query, alice).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains(r#""2""#), "{}", a.body);
    assert_eq!(a.headers["x-frame-options"], "deny");
    // A write without a login stores nothing; with one, it is stored.
    let now = common::now_ms();
    let body = || {
        common::body(vec![common::series(
            &[("__name__", "door_test"), ("k", "v")],
            &[(now, 7.0)],
        )])
    };
    let w = ask(&c, "POST", &door.url("/api/v1/write"), None, body())
        .await
        .expect("answered");
    assert_eq!(w.status, 401);
    let w = ask(&c, "POST", &door.url("/api/v1/write"), alice, body())
        .await
        .expect("answered");
    assert_eq!(w.status, 204, "{}", w.body);
    let a = get(&c, &door.url("/api/v1/query?query=count(door_test)"), alice).await;
    assert!(a.body.contains(r#""1""#), "one series stored: {}", a.body);
    // An answer the connection gives itself (a head over
    // http-max-header-bytes) carries the configured headers too.
    let big = http::Request::builder()
        .uri(door.url("/-/healthy"))
        .header("x-padding", "p".repeat(6000))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let r = c.request(big).await.expect("answered");
    assert_eq!(r.status(), 431);
    assert_eq!(r.headers()["x-frame-options"], "deny");

    // Plain http to the https port gets no answer, and counts as a
    // failed handshake.
    let plain = reqwest::Client::new()
        .get(format!("http://{}/-/healthy", door.addr))
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200));
    // The server counts the failed handshake on its own task, which may
    // come after the client has given up: look again, for a bounded time.
    let mut m = String::new();
    for _ in 0..100 {
        m = get(&c, &door.url("/metrics"), alice).await.body;
        if metric(&m, "sluice_http_tls_handshake_failures_total") >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        metric(
            &m,
            r#"sluice_http_unauthorized_requests_total{reason="missing"}"#
        ),
        2.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            r#"sluice_http_unauthorized_requests_total{reason="wrong"}"#
        ),
        2.0,
        "{m}"
    );
    assert!(
        metric(&m, "sluice_http_tls_handshake_failures_total") >= 1.0,
        "{m}"
    );
    assert_eq!(metric(&m, "sluice_web_config_last_reload_successful"), 1.0);
    assert!(!m.contains(PASSWORD));

    // SIGHUP puts a new password in force.
    std::fs::write(&door.web, web_config(&[("alice", "new password")], "")).expect("rewrite");
    door.hangup();
    let new = Some(("alice", "new password"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(&c, &query, new).await.status != 200 {
        assert!(Instant::now() < deadline, "the new password never worked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        get(&c, &query, alice).await.status,
        401,
        "the old password still works"
    );

    // A bad file keeps what is in force and says so in a metric.
    std::fs::write(&door.web, "basic_auth_users:\n  alice: not-a-hash\n").expect("rewrite");
    door.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = get(&c, &door.url("/metrics"), new).await.body;
        if metric(&m, "sluice_web_config_last_reload_successful") == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bad file was never noticed: {m}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        get(&c, &query, new).await.status,
        200,
        "the old config went away"
    );

    // A change is noticed without SIGHUP too.
    std::fs::write(&door.web, web_config(&[("bob", PASSWORD)], "")).expect("rewrite");
    let bob = Some(("bob", PASSWORD));
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&c, &query, bob).await.status != 200 {
        assert!(Instant::now() < deadline, "the changed file was never read");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = get(&c, &door.url("/metrics"), bob).await.body;
    assert_eq!(
        metric(&m, "sluice_web_config_last_reload_successful"),
        1.0,
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_are_required_and_checked() {
    let pki = Pki::new();
    let door = Door::start(
        &pki,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
         client_allowed_sans: [client.example]\n  min_version: TLS13\n",
    );
    let healthy = door.url("/-/healthy");
    let a = get(&client(&pki, Some("client")), &healthy, None).await;
    assert_eq!(a.status, 200, "{}", a.body);
    for who in [None, Some("rogue"), Some("other")] {
        let r = ask(&client(&pki, who), "GET", &healthy, None, Vec::new()).await;
        assert!(
            r.is_err(),
            "{who:?} got in: {}",
            r.map(|a| a.status).unwrap_or(0)
        );
    }
}

/// A verified client certificate's subject common name is an identity:
/// `CN=<name>` in the runtime config's `identities` binds it to tenants,
/// as a login would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_subjects_are_bound_to_tenants() {
    let pki = Pki::new();
    let runtime = pki.path("runtime.yml");
    std::fs::write(
        &runtime,
        "identities:\n  CN=client: [team-a]\n  CN=other: [{tenant: team-b, access: read}]\n",
    )
    .expect("runtime config");
    let runtime_arg = runtime.display().to_string();
    let start = |client_auth_type: &str| {
        Door::start_with(
            &pki,
            &format!(
                "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
                 client_auth_type: {client_auth_type}\n  client_ca_file: ca.crt\n"
            ),
            &[
                "--multitenancy",
                "true",
                "--runtime-config-file",
                &runtime_arg,
            ],
        )
    };
    let door = start("RequireAndVerifyClientCert");
    let (client, other) = (client(&pki, Some("client")), client(&pki, Some("other")));
    let body = || {
        common::body(vec![common::series(
            &[("__name__", "up")],
            &[(common::now_ms(), 1.0)],
        )])
    };
    let as_tenant = |c: &Https, method: &str, tenant: &str, body: Vec<u8>| {
        let mut req = http::Request::builder()
            .method(method)
            .uri(door.url(if method == "POST" {
                "/api/v1/write"
            } else {
                "/api/v1/query?query=up"
            }))
            .header("X-Scope-OrgID", tenant);
        if method == "POST" {
            req = req
                .header("content-type", "application/x-protobuf")
                .header("content-encoding", "snappy");
        }
        c.request(req.body(Full::new(Bytes::from(body))).expect("request"))
    };
    let answer = |r: Result<http::Response<hyper::body::Incoming>, _>| async move {
        let r: http::Response<hyper::body::Incoming> = r.expect("answered");
        let status = r.status().as_u16();
        let body = r.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    };
    let (code, text) = answer(as_tenant(&client, "POST", "team-a", body()).await).await;
    assert_eq!(code, 204, "{text}");
    let (code, _) = answer(as_tenant(&client, "GET", "team-a", Vec::new()).await).await;
    assert_eq!(code, 200);
    let (code, text) = answer(as_tenant(&client, "POST", "team-b", body()).await).await;
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains("CN=client") && text.contains("team-b"),
        "{text}"
    );
    let (code, _) = answer(as_tenant(&other, "GET", "team-b", Vec::new()).await).await;
    assert_eq!(code, 200, "other may read team-b");
    let (code, text) = answer(as_tenant(&other, "POST", "team-b", body()).await).await;
    assert_eq!(code, 403, "other may only read: {text}");
    let (code, _) = answer(as_tenant(&other, "GET", "team-a", Vec::new()).await).await;
    assert_eq!(code, 403);
    // Where a certificate is checked only if given, a client without one
    // is no one the bindings take: it does not slip past them.
    let lenient = start("VerifyClientCertIfGiven");
    let anonymous = self::client(&pki, None);
    let r = anonymous
        .request(
            http::Request::builder()
                .uri(lenient.url("/api/v1/query?query=up"))
                .header("X-Scope-OrgID", "team-a")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("answered");
    assert_eq!(r.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_web_config_file_stops_the_start() {
    let pki = Pki::new();
    for (text, says) in [
        (
            "tls_server_config:\n  cert_file: server.crt\n",
            "missing one of key",
        ),
        (
            "tls_server_config:\n  cert_file: nope.crt\n  key_file: server.key\n",
            "nope.crt",
        ),
        ("basic_auth_users:\n  alice: hunter2\n", "not a bcrypt hash"),
        (
            "http_server_config:\n  headers:\n    Server: me\n",
            "can not be configured",
        ),
    ] {
        std::fs::write(pki.path("bad.yml"), text).expect("write");
        let data = tempfile::tempdir().expect("tempdir");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .arg("--web.config.file")
            .arg(pki.path("bad.yml"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runs");
        let mut child = common::KillOnDrop(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.0.try_wait().expect("wait") {
                break s;
            }
            assert!(Instant::now() < deadline, "{text}: Sluice started with it");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().expect("stderr"), &mut err)
            .expect("stderr read");
        assert!(!status.success(), "{text}: exited 0");
        assert!(err.contains(says), "{text}: {err}");
        assert!(!err.contains("hunter2"), "a secret in the log: {err}");
    }
}

/// A real Prometheus 3.5.3 remote-writes over https with `basic_auth` and
/// `tls_config.ca_file`, and loses nothing; promtool reads back over https
/// with a login; without one, it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_writes_and_promtool_reads_over_https_with_a_login() {
    let pki = Pki::new();
    let door = Door::start(&pki, &web_config(&[("fleet", PASSWORD)], ""));
    let ca = pki.path("ca.crt").display().to_string();
    let config = prometheus_config(&door.url("/api/v1/write"), &ca, "fleet", "", "");
    let prom = common::Prometheus::start3(&config, &[]);
    prom.ready().await;
    let paddr: std::net::SocketAddr = prom.addr().parse().expect("addr");
    let c = client(&pki, None);
    let login = Some(("fleet", PASSWORD));
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut sent, mut failed, mut ingested);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, pm) = common::get(paddr, "/metrics").await;
        sent = common::metric_total(&pm, "prometheus_remote_storage_samples_total");
        failed = common::metric_total(&pm, "prometheus_remote_storage_samples_failed_total")
            + common::metric_total(&pm, "prometheus_remote_storage_samples_dropped_total");
        let sm = get(&c, &door.url("/metrics"), login).await.body;
        ingested = common::metric_total(&sm, "sluice_ingested_samples_total");
        if sent > 1000.0 && ingested >= sent {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sent {sent} (failed {failed}), ingested {ingested}; log: {}",
            prom.log()
        );
    }
    assert_eq!(failed, 0.0, "Prometheus failed samples: {}", prom.log());

    // promtool over https, with and without the login.
    let http_config = pki.path("promtool-http.yml");
    std::fs::write(
        &http_config,
        format!("basic_auth:\n  username: fleet\n  password: {PASSWORD}\ntls_config:\n  ca_file: {ca}\n"),
    )
    .expect("write");
    let server = format!("https://127.0.0.1:{}", door.addr.port());
    let out = common::promtool3(&[
        "query",
        "instant",
        &format!("--http.config.file={}", http_config.display()),
        &server,
        "count(up{job=\"prometheus\"})",
    ]);
    assert!(out.contains("=> 1"), "promtool: {out}");
    let no_login = pki.path("promtool-nologin.yml");
    std::fs::write(&no_login, format!("tls_config:\n  ca_file: {ca}\n")).expect("write");
    let refused = std::process::Command::new(common::prometheus3("promtool"))
        .args([
            "query",
            "instant",
            &format!("--http.config.file={}", no_login.display()),
            &server,
            "up",
        ])
        .output()
        .expect("promtool runs");
    assert!(!refused.status.success(), "promtool read without a login");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("401") || said.contains("Unauthorized"),
        "{said}"
    );
}

/// Two teams' Prometheus 3.5.3 servers share one Sluice over https, each
/// with its own login bound to its own tenant. Team B is held to a rate
/// below what it sends: it is pushed back with 503 and `Retry-After`,
/// retries, and once the limit is raised (the runtime config file, reloaded
/// on SIGHUP) catches up having lost nothing; team A is never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prometheus_tenants_share_one_sluice_and_one_over_its_rate_loses_nothing() {
    let pki = Pki::new();
    let runtime = pki.path("runtime.yml");
    let bound = "identities:\n  team-a-prom: [team-a]\n  team-b-prom: [team-b]\n  \
                 grafana: [{tenant: team-a, access: read}, {tenant: team-b, access: read}]\n";
    std::fs::write(
        &runtime,
        format!("{bound}overrides:\n  team-b:\n    ingestion_rate: 200\n    ingestion_burst_size: 600\n"),
    )
    .expect("runtime config");
    let runtime_arg = runtime.display().to_string();
    let door = Door::start_with(
        &pki,
        &web_config(
            &[
                ("team-a-prom", PASSWORD),
                ("team-b-prom", PASSWORD),
                ("grafana", PASSWORD),
            ],
            "",
        ),
        &[
            "--multitenancy",
            "true",
            "--runtime-config-file",
            &runtime_arg,
        ],
    );
    let ca = pki.path("ca.crt").display().to_string();
    let config = |team: &str| {
        prometheus_config(
            &door.url("/api/v1/write"),
            &ca,
            &format!("team-{team}-prom"),
            &format!("    headers:\n      X-Scope-OrgID: team-{team}\n"),
            "      max_samples_per_send: 500\n      max_backoff: 1s\n",
        )
    };
    let (a, b) = (
        common::Prometheus::start3(&config("a"), &[]),
        common::Prometheus::start3(&config("b"), &[]),
    );
    a.ready().await;
    b.ready().await;
    let c = client(&pki, None);
    let login = Some(("grafana", PASSWORD));
    let figures = async |p: &common::Prometheus, tenant: &str| {
        let addr: std::net::SocketAddr = p.addr().parse().expect("addr");
        let (_, pm) = common::get(addr, "/metrics").await;
        let sm = get(&c, &door.url("/metrics"), login).await.body;
        let sent = common::metric_total(&pm, "prometheus_remote_storage_samples_total");
        let failed = common::metric_total(&pm, "prometheus_remote_storage_samples_failed_total")
            + common::metric_total(&pm, "prometheus_remote_storage_samples_dropped_total");
        let retried = common::metric_total(&pm, "prometheus_remote_storage_samples_retried_total");
        let ingested = metric(
            &sm,
            &format!("sluice_tenant_ingested_samples_total{{tenant=\"{tenant}\"}}"),
        );
        let limited = metric(
            &sm,
            &format!("sluice_tenant_rate_limited_requests_total{{tenant=\"{tenant}\"}}"),
        );
        (sent, failed, retried, ingested, limited)
    };
    // Team B sends more than 200 samples a second (Prometheus' own
    // metrics each second): it is pushed back, and retries.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, failed, retried, _, limited) = figures(&b, "team-b").await;
        assert_eq!(
            failed,
            0.0,
            "team B's Prometheus gave up samples: {}",
            b.log()
        );
        if limited > 0.0 && retried > 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "team B was never pushed back: {}",
            b.log()
        );
    }
    // The limit is raised: team B catches up, having lost nothing.
    std::fs::write(&runtime, bound).expect("runtime config");
    door.hangup();
    for (p, tenant) in [(&a, "team-a"), (&b, "team-b")] {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            // Prometheus counts every try as sent, and each refused try
            // as retried: what it delivered is the difference.
            let (tried, failed, retried, ingested, limited) = figures(p, tenant).await;
            let sent = tried - retried;
            assert_eq!(
                failed,
                0.0,
                "{tenant}'s Prometheus gave up samples: {}",
                p.log()
            );
            if tenant == "team-a" {
                assert_eq!(limited, 0.0, "team A was never over a limit");
            }
            if sent > 1000.0 && ingested >= sent {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{tenant}: sent {sent}, ingested {ingested}; log: {}",
                p.log()
            );
        }
    }
    // Each login sees only its own tenant; grafana reads both, writes none.
    let ask = |user: &'static str, tenant: &'static str| {
        let url = door.url("/api/v1/query?query=count(up)");
        let c = &c;
        async move {
            let req = http::Request::get(url)
                .header("X-Scope-OrgID", tenant)
                .header(
                    "authorization",
                    format!(
                        "Basic {}",
                        base64::Engine::encode(
                            &base64::engine::general_purpose::STANDARD,
                            format!("{user}:{PASSWORD}")
                        )
                    ),
                )
                .body(Full::new(Bytes::new()))
                .expect("request");
            c.request(req).await.expect("answered").status().as_u16()
        }
    };
    assert_eq!(ask("team-a-prom", "team-a").await, 200);
    assert_eq!(ask("team-a-prom", "team-b").await, 403);
    assert_eq!(ask("team-b-prom", "team-a").await, 403);
    assert_eq!(ask("grafana", "team-b").await, 200);
}
