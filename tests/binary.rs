//! The `sluice` binary itself: help text, config file, startup on a given
//! address, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::Duration;

use sluice::config::Config;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

#[test]
fn help_explains_every_flag_with_the_real_defaults() {
    let out = Command::new(BIN).arg("--help").output().expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let d = Config::default();
    for (flag, default) in [
        ("--listen", d.listen.to_string()),
        ("--data-dir", d.data_dir.display().to_string()),
        ("--max-body-bytes", d.max_body_bytes.to_string()),
        (
            "--max-decompressed-bytes",
            d.max_decompressed_bytes.to_string(),
        ),
        (
            "--max-labels-per-series",
            d.max_labels_per_series.to_string(),
        ),
        (
            "--max-label-name-length",
            d.max_label_name_length.to_string(),
        ),
        (
            "--max-label-value-length",
            d.max_label_value_length.to_string(),
        ),
        ("--max-series", d.max_series.to_string()),
        ("--log-level", d.log_level.clone()),
        (
            "--request-timeout",
            humantime::format_duration(d.request_timeout).to_string(),
        ),
        ("--head-shards", d.head_shards.to_string()),
        (
            "--max-metadata-families",
            d.max_metadata_families.to_string(),
        ),
        (
            "--otlp-promote-resource-attributes",
            if d.otlp_promote_resource_attributes.is_empty() {
                "none".to_owned()
            } else {
                d.otlp_promote_resource_attributes.join(",")
            },
        ),
        (
            "--otlp-delta-to-cumulative",
            if d.otlp_delta_to_cumulative {
                "on"
            } else {
                "off"
            }
            .to_owned(),
        ),
        ("--wal-fsync", "always".to_owned()),
        ("--wal-segment-bytes", d.wal_segment_bytes.to_string()),
        ("--wal-repair", "off".to_owned()),
        ("--wal-disabled", "off".to_owned()),
        (
            "--checkpoint-interval",
            humantime::format_duration(d.checkpoint_interval).to_string(),
        ),
        (
            "--retention",
            humantime::format_duration(d.retention).to_string(),
        ),
        ("--max-memory", d.max_memory.to_string()),
    ] {
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} missing from help:\n{help}"));
        let section = &help[at..];
        let end = section[2..].find("\n  --").map_or(section.len(), |e| e + 2);
        assert!(
            section[..end].contains(&format!("[default: {default}]")),
            "{flag} should show default {default}:\n{}",
            &section[..end]
        );
    }
    assert!(help.contains("--config"));
}

#[test]
fn starts_from_a_config_file_serves_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("sluice.yaml");
    let data = dir.path().join("data");
    std::fs::write(
        &cfg,
        format!("listen: 127.0.0.1:0\ndata-dir: {}\n", data.display()),
    )
    .expect("write");
    let (mut child, addr, lines) = start(
        Command::new(BIN)
            .arg("--config")
            .arg(&cfg)
            .arg("--log-level=info"),
    );
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    assert!(data.is_dir(), "the data directory is created at start");
    let reply = get(&addr, "/-/ready");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with("Sluice is Ready.\n"), "{reply}");
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

/// Starts the server `cmd` describes (its log on a pipe, at info) and
/// waits for the line that names the address it listens on: the child,
/// that address, and the rest of its log.
fn start(cmd: &mut Command) -> (Child, String, Lines<BufReader<ChildStderr>>) {
    let mut child = cmd.stderr(Stdio::piped()).spawn().expect("starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("a log line before exit")
            .expect("utf-8");
        if let Some(at) = line.find("listening addr=") {
            break line[at + "listening addr=".len()..].trim().to_owned();
        }
    };
    (child, addr, lines)
}

/// The whole reply to a GET of `path`, on a connection of its own.
fn get(addr: &str, path: &str) -> String {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .expect("send");
    let mut reply = String::new();
    conn.read_to_string(&mut reply).expect("reply");
    reply
}

#[test]
fn bad_config_fails_loudly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("sluice.toml");
    std::fs::write(&cfg, "max-seriess = 3\n").expect("write");
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max-seriess") && err.contains("sluice.toml"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["--max-series", "0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("max-series must be greater than 0"));
    let out = Command::new(BIN)
        .args([
            "--enable-feature",
            "promql-experimental-functions,native-histograms",
        ])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"unknown feature "native-histograms" in enable-feature"#),
        "{err}"
    );
}

/// The README's first command is plain `cargo run --release`: with more than
/// one binary in the package, that needs `default-run` naming the server.
#[test]
fn plain_cargo_run_starts_the_server() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("Cargo.toml");
    let doc: toml::Table = manifest.parse().expect("Cargo.toml parses");
    let bins = doc
        .get("bin")
        .and_then(toml::Value::as_array)
        .map_or(0, Vec::len);
    let default_run = doc
        .get("package")
        .and_then(|p| p.get("default-run"))
        .and_then(toml::Value::as_str);
    if bins > 1 {
        assert_eq!(
            default_run,
            Some("sluice"),
            "{bins} binaries and no default-run"
        );
    }
}

/// The scheduling policy of the process's query thread (Linux's numbers:
/// 0 SCHED_OTHER, 5 SCHED_IDLE): field 41 of its `/proc/.../stat`.
#[cfg(target_os = "linux")]
fn query_thread_policy(pid: u32) -> Option<u32> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != "sluice-query" {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
        // Fields after the command's closing parenthesis start at 3.
        let rest = &stat[stat.rfind(')')? + 1..];
        return rest
            .split_whitespace()
            .nth(41 - 3)
            .and_then(|v| v.parse().ok());
    }
    None
}

#[cfg(target_os = "linux")]
#[test]
fn query_threads_run_in_the_scheduling_class_the_flag_names() {
    for (flag, policy) in [(None, 5), (Some("normal"), 0), (Some("idle"), 5)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new(BIN);
        cmd.args(["--listen", "127.0.0.1:0", "--log-level=info", "--data-dir"])
            .arg(dir.path().join("data"));
        if let Some(class) = flag {
            cmd.arg(format!("--query-thread-priority={class}"));
        }
        let (mut child, addr, _lines) = start(&mut cmd);
        let reply = get(&addr, "/api/v1/query?query=vector(1)");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        // The thread that answered is kept for the next query.
        let got = query_thread_policy(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(got, Some(policy), "--query-thread-priority {flag:?}");
    }
}
