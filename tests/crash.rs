//! Crash safety of the real binary: writers push remote-write batches and
//! note which ones got a 2xx; the test `kill -9`s Sluice mid-stream (at
//! fixed points, and twice while a checkpoint is being written), restarts it
//! on the same data directory, and checks through the query API that every
//! acknowledged sample is there exactly once with its value, and that
//! nothing is there that was never sent. Then a SIGTERM must exit 0 and
//! lose nothing either.

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");
const WRITERS: usize = 4;
const SERIES_PER_WRITER: usize = 25;
/// Series written once at the start, so a checkpoint takes long enough to
/// be caught in the act.
const BULK_SERIES: usize = 30_000;

struct Sluice {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Sluice {
    fn drop(&mut self) {
        // A failed assertion must not leave a server behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kill_9(pid: u32) {
    let ok = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(ok.success(), "kill -9 {pid}");
}

fn start(data: &Path) -> Sluice {
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--log-level", "info"])
        .arg("--data-dir")
        .arg(data)
        // Checkpoint constantly and rotate segments often, so kills land
        // in every phase.
        .args([
            "--checkpoint-interval",
            "150ms",
            "--wal-segment-bytes",
            "262144",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("sluice starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!(
                "sluice exited before listening: {:?}",
                log.lock().expect("log")
            );
        };
        log.lock().expect("log").push(line.clone());
        if let Some(at) = line.find("listening addr=") {
            break line[at + "listening addr=".len()..]
                .trim()
                .parse()
                .expect("an address");
        }
    };
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().expect("log").push(line);
        }
    });
    Sluice { child, addr, log }
}

/// Timestamps: batch `b` of every writer is at `BASE + b` seconds.
/// Batches are this far apart in time: small enough that a fast machine's
/// thousands of batches stay behind the clock (a sample ahead of it is
/// refused, and not read back at `now`).
const STEP_MS: i64 = 100;

fn ts(base: i64, b: u64) -> i64 {
    base + b as i64 * STEP_MS
}

fn value(w: usize, k: usize, b: u64) -> f64 {
    b as f64 * 1000.0 + (w * SERIES_PER_WRITER + k) as f64 + 0.25
}

fn batch(base: i64, w: usize, b: u64) -> Vec<u8> {
    let ws = w.to_string();
    let series = (0..SERIES_PER_WRITER)
        .map(|k| {
            let ks = k.to_string();
            common::series(
                &[("__name__", "crash_test"), ("series", &ks), ("writer", &ws)],
                &[(ts(base, b), value(w, k, b))],
            )
        })
        .collect();
    common::body(series)
}

/// What one writer knows: batches below `next` were sent; `acked` holds the
/// ones answered 2xx.
#[derive(Debug, Default, Clone)]
struct Ledger {
    next: u64,
    acked: Vec<u64>,
}

/// Pushes batches until `stop` or until the server goes away.
async fn writer(
    addr: SocketAddr,
    base: i64,
    w: usize,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let client = reqwest::Client::new();
    while !stop.load(Ordering::Relaxed) {
        let b = {
            let mut l = ledger.lock().expect("ledger");
            l.next += 1;
            l.next - 1
        };
        let sent = client
            .post(format!("http://{addr}/api/v1/write"))
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "snappy")
            .header("x-prometheus-remote-write-version", "0.1.0")
            .body(batch(base, w, b))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => ledger.lock().expect("ledger").acked.push(b),
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                panic!("batch {b} of writer {w} refused: {status}: {text}")
            }
            Err(_) => return, // killed
        }
    }
}

/// One writer task per ledger, and the flag that stops them.
fn spawn_writers(
    addr: SocketAddr,
    base: i64,
    ledgers: &[Arc<Mutex<Ledger>>],
) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<()>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = ledgers
        .iter()
        .enumerate()
        .map(|(w, l)| tokio::spawn(writer(addr, base, w, Arc::clone(l), Arc::clone(&stop))))
        .collect();
    (stop, tasks)
}

/// Every sample of `crash_test`, by (writer, series): (t, value) in order.
async fn stored(addr: SocketAddr) -> BTreeMap<(usize, usize), Vec<(i64, f64)>> {
    let now = common::now_ms() as f64 / 1000.0;
    let v = common::api_json(
        &format!("http://{addr}/api/v1/query"),
        &[
            ("query", "crash_test[1d]".to_owned()),
            ("time", now.to_string()),
        ],
    )
    .await;
    assert_eq!(v["status"], "success", "{v}");
    let mut out = BTreeMap::new();
    for s in v["data"]["result"].as_array().expect("matrix") {
        let w: usize = s["metric"]["writer"]
            .as_str()
            .expect("writer")
            .parse()
            .expect("n");
        let k: usize = s["metric"]["series"]
            .as_str()
            .expect("series")
            .parse()
            .expect("n");
        let samples = s["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|p| {
                let t = (p[0].as_f64().expect("t") * 1000.0).round() as i64;
                let v: f64 = p[1].as_str().expect("v").parse().expect("float");
                (t, v)
            })
            .collect();
        out.insert((w, k), samples);
    }
    out
}

/// Every acknowledged sample is stored exactly once with its value; every
/// stored sample was sent.
fn check(
    base: i64,
    got: &BTreeMap<(usize, usize), Vec<(i64, f64)>>,
    ledgers: &[Ledger],
    round: usize,
) {
    for (w, ledger) in ledgers.iter().enumerate() {
        for k in 0..SERIES_PER_WRITER {
            let samples = got.get(&(w, k)).map_or(&[][..], Vec::as_slice);
            assert!(
                samples.windows(2).all(|p| p[0].0 < p[1].0),
                "round {round}: writer {w} series {k} has a repeated or unordered timestamp"
            );
            for &(t, v) in samples {
                let b = (t - base) / STEP_MS;
                assert!(
                    (t - base) % STEP_MS == 0 && b >= 0 && (b as u64) < ledger.next,
                    "round {round}: writer {w} series {k} holds a sample at {t} that was never sent"
                );
                assert_eq!(
                    v,
                    value(w, k, b as u64),
                    "round {round}: wrong value at {t}"
                );
            }
            for &b in &ledger.acked {
                assert!(
                    samples.binary_search_by_key(&ts(base, b), |s| s.0).is_ok(),
                    "round {round}: acknowledged batch {b} of writer {w} lost for series {k} \
                     ({} samples stored)",
                    samples.len()
                );
            }
        }
    }
}

fn checkpoint_in_progress(data: &Path) -> bool {
    std::fs::read_dir(data).is_ok_and(|d| {
        d.filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
    })
}

/// How a round ends.
#[derive(Debug, Clone, Copy)]
enum Kill {
    /// After this long under load.
    After(Duration),
    /// As soon as a checkpoint's temporary file is seen.
    DuringCheckpoint,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_samples_survive_kill_9_and_restarts() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let base = common::now_ms() - 3_600_000;
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let rounds = [
        Kill::After(Duration::from_millis(700)),
        Kill::DuringCheckpoint,
        Kill::After(Duration::from_millis(30)),
        Kill::After(Duration::from_millis(1500)),
        Kill::DuringCheckpoint,
        Kill::After(Duration::from_millis(300)),
    ];
    let mut caught_in_checkpoint = 0;
    for (round, kill) in rounds.iter().enumerate() {
        let mut s = start(&data);
        if round == 0 {
            let bulk = (0..BULK_SERIES)
                .map(|i| {
                    common::series(
                        &[
                            ("__name__", "crash_bulk"),
                            ("i", &i.to_string()),
                            ("pad", "a-longer-label-value-to-fill-the-checkpoint"),
                        ],
                        &[(base, 1.0)],
                    )
                })
                .collect();
            let (code, text) = common::push(s.addr, common::body(bulk)).await;
            assert_eq!(code, 204, "{text}");
        }
        let (stop, tasks) = spawn_writers(s.addr, base, &ledgers);
        match *kill {
            Kill::After(d) => {
                tokio::time::sleep(d).await;
                s.child.kill().expect("kill -9");
            }
            Kill::DuringCheckpoint => {
                let data = data.clone();
                let pid = s.child.id();
                let caught = tokio::task::spawn_blocking(move || {
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while Instant::now() < deadline {
                        if checkpoint_in_progress(&data) {
                            kill_9(pid);
                            return true;
                        }
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    kill_9(pid);
                    false
                })
                .await
                .expect("poller");
                caught_in_checkpoint += usize::from(caught);
            }
        }
        let status = s.child.wait().expect("reaped");
        assert!(!status.success(), "killed, not exited");
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.expect("writer");
        }
        let snapshot: Vec<Ledger> = ledgers
            .iter()
            .map(|l| l.lock().expect("l").clone())
            .collect();
        let acked: usize = snapshot.iter().map(|l| l.acked.len()).sum();
        let s2 = start(&data);
        let got = stored(s2.addr).await;
        check(base, &got, &snapshot, round);
        let (_, bulk) = common::get(
            s2.addr,
            "/api/v1/query?query=count(last_over_time(crash_bulk%5B2h%5D))",
        )
        .await;
        assert!(
            bulk.contains(&format!("\"{BULK_SERIES}\"")),
            "round {round}: {bulk}"
        );
        eprintln!("round {round} ({kill:?}): {acked} batches acknowledged so far, all present");
        drop(s2);
        drop(s);
    }
    assert!(
        caught_in_checkpoint >= 1,
        "no kill landed while a checkpoint was being written"
    );
    // A clean stop: SIGTERM exits 0 and keeps everything too.
    let s = start(&data);
    let (stop, tasks) = spawn_writers(s.addr, base, &ledgers);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    let pid = s.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill")
        .success());
    let mut s = s;
    let status = s.child.wait().expect("reaped");
    assert!(status.success(), "SIGTERM exit: {status}");
    let snapshot: Vec<Ledger> = ledgers
        .iter()
        .map(|l| l.lock().expect("l").clone())
        .collect();
    let s3 = start(&data);
    check(base, &stored(s3.addr).await, &snapshot, rounds.len());
    // After a clean stop everything sent was acknowledged.
    let log = s3.log.lock().expect("log").join("\n");
    assert!(log.contains("checkpoint loaded"), "{log}");
    drop(s3);
}

#[tokio::test]
async fn the_binary_refuses_a_wal_corrupt_in_the_middle_until_told_to_repair() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let base = common::now_ms() - 600_000;
    let mut s = start(&data);
    for b in 0..5 {
        let (code, _) = common::push(s.addr, batch(base, 0, b)).await;
        assert_eq!(code, 204);
    }
    kill_9(s.child.id());
    let _ = s.child.wait();
    drop(s);
    let wal = data.join("wal");
    let first = std::fs::read_dir(&wal)
        .expect("ls")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 0))
        .min()
        .expect("a segment");
    let mut bytes = std::fs::read(&first).expect("read");
    bytes[10] ^= 0x20;
    std::fs::write(&first, &bytes).expect("write");
    let out = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&data)
        .output()
        .expect("runs");
    assert!(!out.status.success(), "started on a corrupt WAL");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WAL corrupt") && err.contains("--wal-repair"),
        "{err}"
    );
    // With --wal-repair it starts, says what it dropped, and serves.
    let mut child = Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--wal-repair"])
        .arg("--data-dir")
        .arg(&data)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts");
    let lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut seen = Vec::new();
    for line in lines.map_while(Result::ok) {
        seen.push(line.clone());
        if line.contains("listening addr=") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = seen.join("\n");
    assert!(
        log.contains("--wal-repair dropped everything from there on"),
        "{log}"
    );
    assert!(log.contains("listening"), "{log}");
}
