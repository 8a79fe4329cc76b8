//! Headless Chromium (Debian's `chromium`) driven through its DevTools
//! protocol over a WebSocket: open a page, evaluate script in it, type,
//! take screenshots, and collect what it logged as errors.
//!
//! Included by the tests that drive a browser (`#[path]`), not through
//! `common`: the load generator's tests share `common` and have no
//! WebSocket client.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A Chromium process, killed (only it) when dropped.
pub struct Browser {
    child: std::process::Child,
    port: u16,
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Chromium's path; `None` (said loudly) only when `scripts/test` could
/// not install it and set SLUICE_SKIP_CHROMIUM.
pub fn chromium() -> Option<String> {
    let found = std::process::Command::new("sh")
        .args(["-c", "command -v chromium"])
        .output()
        .expect("sh runs");
    let bin = String::from_utf8_lossy(&found.stdout).trim().to_owned();
    if bin.is_empty() {
        assert!(
            std::env::var_os("SLUICE_SKIP_CHROMIUM").is_some(),
            "chromium is missing: install Debian's `chromium` package (scripts/test does)"
        );
        eprintln!("\n!!! SKIPPED: headless Chromium checks: chromium could not be installed !!!\n");
        return None;
    }
    Some(bin)
}

impl Browser {
    /// Starts headless Chromium with a fresh profile and a window of
    /// 1280×900; waits (bounded) until its DevTools port is written.
    pub fn launch(bin: &str) -> Self {
        let profile = tempfile::tempdir().expect("tempdir");
        let child = std::process::Command::new(bin)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--window-size=1280,900",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromium starts");
        let file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(60);
        let port = loop {
            if let Some(p) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
            {
                break p;
            }
            assert!(Instant::now() < deadline, "chromium wrote no DevTools port");
            std::thread::sleep(Duration::from_millis(100));
        };
        Browser {
            child,
            port,
            _profile: profile,
        }
    }

    /// A new tab, its console and errors recorded, at `url` once loaded.
    pub async fn open(&self, url: &str) -> Page {
        let text = reqwest::Client::new()
            .put(format!(
                "http://127.0.0.1:{}/json/new?about:blank",
                self.port
            ))
            .send()
            .await
            .expect("new tab")
            .text()
            .await
            .expect("body");
        let target: Value = serde_json::from_str(&text).expect("json");
        let ws = target["webSocketDebuggerUrl"]
            .as_str()
            .expect("webSocketDebuggerUrl");
        let (socket, _) = tokio_tungstenite::connect_async(ws)
            .await
            .expect("devtools socket");
        let mut page = Page {
            socket,
            next: 0,
            errors: Vec::new(),
        };
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({})).await;
        }
        page.navigate(url).await;
        page
    }
}

/// One tab.
pub struct Page {
    socket: Socket,
    next: u64,
    errors: Vec<String>,
}

impl Page {
    /// Sends a DevTools command and waits (bounded) for its answer,
    /// noting the error events that arrive meanwhile.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket
            .send(Message::Text(msg.into()))
            .await
            .expect("sent");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("{method}: no answer in a minute"));
            let Some(Ok(Message::Text(text))) = next else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).expect("json");
            if v["id"].as_u64() == Some(id) {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            self.note(&v);
        }
    }

    fn note(&mut self, event: &Value) {
        let p = &event["params"];
        match event["method"].as_str() {
            Some("Runtime.exceptionThrown") => self.errors.push(p["exceptionDetails"].to_string()),
            Some("Runtime.consoleAPICalled") if p["type"] == "error" || p["type"] == "warning" => {
                self.errors.push(p["args"].to_string())
            }
            Some("Log.entryAdded") if p["entry"]["level"] == "error" => {
                self.errors.push(p["entry"].to_string())
            }
            _ => {}
        }
    }

    /// Goes to `url` and waits until its document has loaded.
    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        self.wait_for("document.readyState === 'complete'").await;
    }

    /// The value of `expr` in the page (promises awaited).
    pub async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Waits (up to 30 s) until `expr` is truthy; its value.
    pub async fn wait_for(&mut self, expr: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v = self.eval(expr).await;
            let truthy =
                !matches!(v, Value::Null | Value::Bool(false)) && v != json!(0) && v != json!("");
            if truthy {
                return v;
            }
            assert!(Instant::now() < deadline, "never true: {expr}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Types `text` where the focus is, as a keyboard would.
    pub async fn type_text(&mut self, text: &str) {
        self.call("Input.insertText", json!({"text": text})).await;
    }

    /// A PNG of the viewport, written to `path`.
    pub async fn screenshot(&mut self, path: &std::path::Path) {
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = base64_decode(r["data"].as_str().expect("data"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("screenshot written");
    }

    /// What the page logged as errors or warnings, and what it threw.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}
