//! The status page at `/`: 200 with the version, head sizes, settings and
//! links; and it renders in headless Chromium (Debian's `chromium`) with no
//! console errors. `scripts/test` installs Chromium; if it cannot, it sets
//! SLUICE_SKIP_CHROMIUM=1 and this test says loudly that it skipped.

#[path = "common/cdp.rs"]
mod cdp;
mod common;

use sluice::config::Config;

#[tokio::test]
async fn the_status_page_shows_version_state_and_settings() {
    let srv = common::start(Config::default()).await;
    let body = common::body(vec![common::series(
        &[("__name__", "up"), ("job", "a")],
        &[(common::now_ms(), 1.0)],
    )]);
    assert_eq!(common::push(srv.addr, body).await.0, 204);
    let resp = reqwest::get(format!("http://{}/", srv.addr))
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200);
    assert!(resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html")));
    let html = resp.text().await.expect("body");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        html.contains(&format!("<title>Sluice {version}</title>")),
        "{html}"
    );
    assert!(
        html.contains("<tr><th>Head series</th><td>1</td></tr>"),
        "{html}"
    );
    assert!(
        html.contains("<tr><th>Samples ingested</th><td>1</td></tr>"),
        "{html}"
    );
    assert!(
        html.contains("<th>--retention</th><td>15days</td>"),
        "{html}"
    );
    assert!(
        html.contains("<th>--wal-fsync</th><td>always</td>"),
        "{html}"
    );
    // Sizes in binary units, the storage and forwarding at a glance.
    let memory = html
        .split("<tr><th>Head memory</th><td>")
        .nth(1)
        .and_then(|r| r.split("</td>").next())
        .unwrap_or_default();
    assert!(memory.contains("iB of "), "{memory}");
    assert!(memory.ends_with("; writes get 503 at 80%)"), "{memory}");
    assert!(
        html.contains("<tr><th>Blocks</th><td>0 on disk, 0 samples, 0 B"),
        "{html}"
    );
    assert!(html.contains("No forward destinations"), "{html}");
    for link in [
        "/query",
        "/tsdb-status",
        "/alerts",
        "/rules",
        "/metrics",
        "/api/v1/status/buildinfo",
        "/federate?",
        "/api/v1/labels",
    ] {
        assert!(html.contains(&format!("href=\"{link}")), "link {link}");
    }

    let Some(bin) = cdp::chromium() else {
        return;
    };
    let profile = tempfile::tempdir().expect("tempdir");
    let url = format!("http://{}/", srv.addr);
    let dir = profile.path().to_owned();
    // Blocking, on its own thread, so the server keeps serving.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", dir.display()))
            .arg("--dump-dom")
            .arg(url)
            .output()
    })
    .await
    .expect("thread")
    .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {log}");
    assert!(
        dom.contains(&format!("Sluice {version}")) && dom.contains("Head series"),
        "{dom}"
    );
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
}

#[tokio::test]
async fn the_status_page_shows_each_forward_destination() {
    let destination = sluice::forward::Destination {
        name: "downstream".into(),
        url: "http://127.0.0.1:1/api/v1/write".into(),
        ..Default::default()
    };
    let srv = common::start(Config {
        forward: vec![destination],
        ..Config::default()
    })
    .await;
    let (status, html) = common::get(srv.addr, "/").await;
    assert_eq!(status, 200);
    assert!(
        html.contains("<tr><th>downstream</th><td>0 sent, 0 refused (4xx), 0 retried, 0 dropped;"),
        "{html}"
    );
    assert!(!html.contains("No forward destinations"), "{html}");
}
