//! Forwarding (issue 20) with real downstreams: Prometheus 3.5.3's
//! remote-write receiver and VictoriaMetrics (Debian's), and a recording
//! receiver where a scripted answer or a count of copies is needed. Each
//! test prints its figures.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::downstream::{labels_text, raw_samples, Answer, Key, Recorder, VictoriaMetrics};
use sluice::config::Config;
use sluice::forward::Destination;

/// `n` series of `fwd_test`, samples `from..to` (one per second from
/// `base`), as one remote-write body.
fn round(base: i64, series: usize, from: usize, to: usize) -> Vec<u8> {
    let ts = (0..series)
        .map(|i| {
            let inst = format!("i{i}");
            let job = format!("j{}", i % 3);
            let samples: Vec<(i64, f64)> = (from..to)
                .map(|k| (base + k as i64 * 1000, value(i, k)))
                .collect();
            common::series(
                &[("__name__", "fwd_test"), ("instance", &inst), ("job", &job)],
                &samples,
            )
        })
        .collect();
    common::body(ts)
}

fn value(i: usize, k: usize) -> f64 {
    (i * 1000 + k) as f64 * 0.25
}

/// What was sent: every (labels, t, value bits).
fn expected(base: i64, series: usize, samples: usize) -> Vec<Key> {
    let mut out: Vec<Key> = (0..series)
        .flat_map(|i| {
            let labels = labels_text([
                ("__name__", "fwd_test"),
                ("instance", format!("i{i}").as_str()),
                ("job", format!("j{}", i % 3).as_str()),
            ]);
            (0..samples).map(move |k| {
                (
                    labels.clone(),
                    base + k as i64 * 1000,
                    value(i, k).to_bits(),
                )
            })
        })
        .collect();
    out.sort();
    out
}

fn dest(spec: &str) -> Destination {
    spec.parse().expect("destination")
}

/// A base timestamp some minutes back, on a whole second.
fn base() -> i64 {
    (common::now_ms() - 20 * 60_000) / 1000 * 1000
}

/// Polls `f` until it is true, for at most `secs`; whether it became true.
async fn eventually<F, Fut>(secs: u64, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `selector`'s raw samples until at least `n` distinct ones (for up to
/// 30 s: VictoriaMetrics makes data searchable within a second or so).
async fn samples_when(base: &str, selector: &str, time: f64, n: usize) -> Vec<Key> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = raw_samples(base, selector, "1h", time).await;
        // Count distinct samples: a destination may hold a batch sent twice
        // (VictoriaMetrics keeps both copies), and copies must not make the
        // wait end before every sample is searchable.
        let distinct = got.iter().collect::<BTreeSet<_>>().len();
        if distinct >= n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prometheus 3.5.3 with its remote-write receiver (1.0 and 2.0), once its
/// storage takes writes.
async fn prometheus3_receiver() -> common::Prometheus {
    let prom = common::Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &["--web.enable-remote-write-receiver"],
    );
    prom.remote_write(common::body(vec![common::series(
        &[("__name__", "warm_up")],
        &[(common::now_ms(), 1.0)],
    )]))
    .await;
    prom
}

async fn metric(addr: SocketAddr, series: &str) -> f64 {
    common::self_metric(addr, series).await.unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_accepted_sample_reaches_prometheus_3_and_victoriametrics_unchanged() {
    let prom = prometheus3_receiver().await;
    let vm = VictoriaMetrics::start();
    vm.ready().await;
    let config = Config {
        forward: vec![
            dest(&format!(
                "http://{}/api/v1/write,name=prom,shards=2",
                prom.addr()
            )),
            dest(&format!(
                "{},name=vm,shards=3,max-samples-per-send=500",
                vm.write_url()
            )),
        ],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 300;
    const SAMPLES: usize = 30;
    let base = base();
    for r in 0..10 {
        let (status, text) = common::push(sluice.addr, round(base, SERIES, r * 3, r * 3 + 3)).await;
        assert_eq!(status, 204, "{text}");
    }
    let total = (SERIES * SAMPLES) as f64;
    let started = Instant::now();
    for name in ["prom", "vm"] {
        let series = format!("sluice_forward_samples_sent_total{{destination=\"{name}\"}}");
        let sent = common::wait_for_metric(sluice.addr, &series, |v| v >= total).await;
        assert_eq!(sent, total, "{name}");
    }
    println!(
        "forwarded {total} samples to each of 2 destinations in {:?}",
        started.elapsed()
    );
    let time = (base + SAMPLES as i64 * 1000) as f64 / 1000.0;
    let want = expected(base, SERIES, SAMPLES);
    let ours = raw_samples(&format!("http://{}", sluice.addr), "fwd_test", "1h", time).await;
    assert_eq!(ours.len(), want.len());
    assert!(ours == want, "Sluice holds what was sent");
    let prom_has = raw_samples(&format!("http://{}", prom.addr()), "fwd_test", "1h", time).await;
    assert_eq!(
        prom_has.len(),
        want.len(),
        "Prometheus 3.5.3 holds every sample"
    );
    assert!(
        prom_has == want,
        "Prometheus 3.5.3: same labels, times and values"
    );
    // VictoriaMetrics makes data searchable within a second or so.
    let vm_has = samples_when(
        &format!("http://{}", vm.addr()),
        "fwd_test",
        time,
        want.len(),
    )
    .await;
    assert_eq!(
        vm_has.len(),
        want.len(),
        "VictoriaMetrics holds every sample"
    );
    assert!(
        vm_has == want,
        "VictoriaMetrics: same labels, times and values"
    );
    for name in ["prom", "vm"] {
        for (what, series) in [
            (
                "failed",
                format!("sluice_forward_samples_failed_total{{destination=\"{name}\"}}"),
            ),
            (
                "dropped",
                format!(
                    "sluice_forward_samples_dropped_total{{destination=\"{name}\",reason=\"lag\"}}"
                ),
            ),
        ] {
            assert_eq!(metric(sluice.addr, &series).await, 0.0, "{name} {what}");
        }
        let pending = format!("sluice_forward_pending_bytes{{destination=\"{name}\"}}");
        assert!(
            eventually(10, || async { metric(sluice.addr, &pending).await == 0.0 }).await,
            "{name}: the saved position reaches the end of the WAL"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retries_429_after_retry_after_and_5xx_and_drops_what_a_400_refuses() {
    let recorder = Recorder::default();
    let addr = recorder
        .start(vec![
            Answer::Status(429, Some(1)),
            Answer::Status(503, None),
            Answer::Status(400, None),
        ])
        .await;
    let config = Config {
        forward: vec![dest(&format!(
            "http://{addr}/api/v1/write,name=stub,shards=1,max-samples-per-send=100,\
             header=X-Scope-OrgID:team-a,bearer-token=s3cret"
        ))],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    let base = base();
    let (status, _) = common::push(sluice.addr, round(base, 50, 0, 6)).await;
    assert_eq!(status, 204);
    let total = 300.0;
    let sent = common::wait_for_metric(
        sluice.addr,
        "sluice_forward_samples_sent_total{destination=\"stub\"}",
        |v| v > 0.0,
    )
    .await;
    assert!(
        eventually(20, || async {
            metric(
                sluice.addr,
                "sluice_forward_samples_sent_total{destination=\"stub\"}",
            )
            .await
                + metric(
                    sluice.addr,
                    "sluice_forward_samples_failed_total{destination=\"stub\"}",
                )
                .await
                >= total
        })
        .await,
        "sent {sent}"
    );
    let requests = recorder.requests.lock().expect("requests").clone();
    println!("requests (status, samples): {requests:?}");
    let first = requests[0].1;
    assert_eq!(
        requests[..3].iter().map(|r| r.0).collect::<Vec<_>>(),
        [429, 503, 400],
        "the same batch answered 429, then 503, then 400"
    );
    assert!(
        requests[..3].iter().all(|r| r.1 == first),
        "one batch, retried whole"
    );
    let failed = metric(
        sluice.addr,
        "sluice_forward_samples_failed_total{destination=\"stub\"}",
    )
    .await;
    let retried = metric(
        sluice.addr,
        "sluice_forward_samples_retried_total{destination=\"stub\"}",
    )
    .await;
    assert_eq!(
        failed, first as f64,
        "the 400's batch is dropped and counted"
    );
    assert_eq!(
        retried,
        2.0 * first as f64,
        "the 429 and the 503 were retried"
    );
    assert_eq!(
        recorder.distinct(),
        300 - first,
        "every other sample arrived"
    );
    assert_eq!(recorder.duplicates(), 0);
    let headers = recorder.last_headers.lock().expect("headers").clone();
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("x-scope-orgid").as_deref(), Some("team-a"));
    assert_eq!(header("authorization").as_deref(), Some("Bearer s3cret"));
    assert_eq!(header("content-encoding").as_deref(), Some("snappy"));
    assert_eq!(
        header("x-prometheus-remote-write-version").as_deref(),
        Some("0.1.0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_lag_bound_the_oldest_unsent_data_is_dropped_and_ingest_goes_on() {
    let recorder = Recorder::default();
    let addr = recorder.start(Vec::new()).await;
    recorder.set_down(true);
    let config = Config {
        wal_segment_bytes: 64 << 10,
        forward_max_lag_bytes: 256 << 10,
        forward: vec![dest(&format!(
            "http://{addr}/api/v1/write,name=stub,shards=1,max-samples-per-send=200,batch-send-deadline=50ms"
        ))],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    let base = base();
    const SERIES: usize = 200;
    const ROUNDS: usize = 60;
    for r in 0..ROUNDS {
        let (status, text) = common::push(sluice.addr, round(base, SERIES, r * 5, r * 5 + 5)).await;
        assert_eq!(status, 204, "ingest never waits for a destination: {text}");
    }
    let total = (SERIES * ROUNDS * 5) as f64;
    let dropped_series =
        "sluice_forward_samples_dropped_total{destination=\"stub\",reason=\"lag\"}";
    let dropped = common::wait_for_metric(sluice.addr, dropped_series, |v| v > 0.0).await;
    assert!(
        dropped > 0.0,
        "the oldest unsent samples are given up, counted"
    );
    let pending = metric(
        sluice.addr,
        "sluice_forward_pending_bytes{destination=\"stub\"}",
    )
    .await;
    println!("total {total}, dropped for lag {dropped}, pending bytes {pending}");
    // Once the destination answers again, the rest arrives.
    recorder.set_down(false);
    assert!(
        eventually(60, || async {
            metric(
                sluice.addr,
                "sluice_forward_pending_bytes{destination=\"stub\"}",
            )
            .await
                == 0.0
        })
        .await,
        "the backlog drains"
    );
    let dropped = metric(sluice.addr, dropped_series).await;
    let got = recorder.distinct() as f64;
    println!("received {got}, dropped {dropped}");
    assert!(got < total, "not everything could be kept");
    assert!(
        got + dropped >= total,
        "every sample is either received or counted as dropped: {got} + {dropped} < {total}"
    );
    assert!(
        got + dropped <= total + 200.0,
        "counted twice at most: the one batch in flight when it was given up ({got} + {dropped})"
    );
    let wal_bytes: u64 = std::fs::read_dir(sluice.data_dir().join("wal"))
        .expect("wal")
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    println!("WAL on disk at the end: {wal_bytes} bytes");
}

/// Pushes one sample per series at the wall-clock time every 100 ms until
/// `stop`; returns each round's timestamp.
async fn steady_load(
    addr: SocketAddr,
    series: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<i64> {
    let mut times = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let t = common::now_ms();
        let ts = (0..series)
            .map(|i| {
                common::series(
                    &[("__name__", "fwd_outage"), ("instance", &format!("i{i}"))],
                    &[(t, times.len() as f64)],
                )
            })
            .collect();
        let (status, _) = common::push(addr, common::body(ts)).await;
        assert_eq!(status, 204, "ingest goes on while the destination is down");
        times.push(t);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    times
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downstream_outage_of_a_minute_loses_nothing_and_the_lag_falls_back() {
    let mut vm = VictoriaMetrics::start();
    vm.ready().await;
    let config = Config {
        forward: vec![dest(&format!(
            "{},name=vm,shards=2,batch-send-deadline=200ms",
            vm.write_url()
        ))],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 100;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(steady_load(
        sluice.addr,
        SERIES,
        std::sync::Arc::clone(&stop),
    ));
    let lag_series = "sluice_forward_lag_seconds{destination=\"vm\"}";
    let pending_series = "sluice_forward_pending_bytes{destination=\"vm\"}";
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lag_before = metric(sluice.addr, lag_series).await;
    vm.stop();
    tokio::time::sleep(Duration::from_secs(60)).await;
    let lag_during = metric(sluice.addr, lag_series).await;
    let pending_during = metric(sluice.addr, pending_series).await;
    let retried = metric(
        sluice.addr,
        "sluice_forward_samples_retried_total{destination=\"vm\"}",
    )
    .await;
    vm.restart();
    vm.ready().await;
    let recovered = Instant::now();
    // Under the same load, the backlog drains and the lag falls back.
    let fell = eventually(60, || async { metric(sluice.addr, lag_series).await < 5.0 }).await;
    let caught_up = recovered.elapsed();
    let lag_after = metric(sluice.addr, lag_series).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let times = load.await.expect("load");
    let total = (times.len() * SERIES) as f64;
    let sent = common::wait_for_metric(
        sluice.addr,
        "sluice_forward_samples_sent_total{destination=\"vm\"}",
        |v| v >= total,
    )
    .await;
    println!(
        "outage 60 s under {SERIES} samples per 100 ms: lag before {lag_before:.1} s, during \
         {lag_during:.1} s, {lag_after:.1} s {caught_up:?} after the restart; pending during \
         {pending_during} B; samples retried {retried}; total {total}"
    );
    assert!(
        lag_during > 30.0,
        "the lag rose during the outage: {lag_during}"
    );
    assert!(pending_during > 0.0);
    assert!(fell, "the lag fell back: {lag_after}");
    assert_eq!(sent, total, "every sample sent after the outage");
    let time = *times.last().expect("rounds") as f64 / 1000.0 + 1.0;
    let vm_base = format!("http://{}", vm.addr());
    let mut theirs = samples_when(&vm_base, "fwd_outage", time, times.len() * SERIES).await;
    // Remote write is at-least-once: a batch VictoriaMetrics stored just as
    // it was killed, its answer lost, is sent again after the restart, and
    // VictoriaMetrics (no deduplication configured) keeps both copies. A
    // copy is the same sample again; a different value at the same time
    // would stay apart here and fail below.
    let held = theirs.len();
    theirs.sort();
    theirs.dedup();
    println!(
        "VictoriaMetrics held {} copies sent twice",
        held - theirs.len()
    );
    assert_eq!(
        theirs.len(),
        times.len() * SERIES,
        "VictoriaMetrics holds every sample"
    );
    let ours = raw_samples(&format!("http://{}", sluice.addr), "fwd_outage", "1h", time).await;
    assert!(
        ours == theirs,
        "VictoriaMetrics holds exactly what Sluice accepted"
    );
}

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

struct Process {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_binary(data: &std::path::Path, forward: &[String]) -> Process {
    let mut args = vec![
        "--checkpoint-interval",
        "300ms",
        "--wal-segment-bytes",
        "131072",
    ];
    for f in forward {
        args.extend(["--forward", f.as_str()]);
    }
    let (child, addr) = common::spawn_sluice(BIN, data, "info", &args);
    Process { child, addr }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_while_forwarding_loses_nothing_and_repeats_at_most_the_batches_in_flight() {
    // Prometheus 3.5.3 and VictoriaMetrics as the real destinations, and a
    // recording receiver that counts copies.
    let vm = VictoriaMetrics::start();
    vm.ready().await;
    let prom = prometheus3_receiver().await;
    let recorder = Recorder::default();
    let rec_addr = recorder.start(Vec::new()).await;
    const SHARDS: usize = 2;
    const MAX_PER_SEND: usize = 250;
    let forward = [
        format!("{},name=vm,shards={SHARDS},max-samples-per-send={MAX_PER_SEND}", vm.write_url()),
        format!(
            "http://{}/api/v1/write,name=prom,shards={SHARDS},max-samples-per-send={MAX_PER_SEND}",
            prom.addr()
        ),
        format!(
            "http://{rec_addr}/api/v1/write,name=rec,shards={SHARDS},max-samples-per-send={MAX_PER_SEND}"
        ),
    ];
    let data = tempfile::tempdir().expect("tmp");
    let base = base();
    const SERIES: usize = 100;
    let mut acked = 0usize; // rounds answered 204, one sample per series each
    const KILLS: usize = 3;
    for life in 0..=KILLS {
        let sluice = start_binary(data.path(), &forward);
        // Push rounds; kill -9 while the forwarders are busy.
        for _ in 0..40 {
            let (status, _) =
                common::push(sluice.addr, round(base, SERIES, acked, acked + 1)).await;
            assert_eq!(status, 204);
            acked += 1;
        }
        if life < KILLS {
            // At once (most still unsent), a little later (sends in
            // flight), and after the queues drained.
            tokio::time::sleep(Duration::from_millis([0, 40, 300][life])).await;
            let pid = sluice.child.id();
            let ok = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .expect("kill");
            assert!(ok.success());
            drop(sluice);
            continue;
        }
        let total = (acked * SERIES) as f64;
        // The last life sends everything, including what earlier lives
        // had not.
        assert!(
            eventually(60, || async { recorder.distinct() as f64 >= total }).await,
            "the recorder has {} of {total}",
            recorder.distinct()
        );
        for name in ["vm", "prom"] {
            let pending = format!("sluice_forward_pending_bytes{{destination=\"{name}\"}}");
            assert!(
                eventually(30, || async { metric(sluice.addr, &pending).await == 0.0 }).await,
                "{name}: the queue drains"
            );
        }
    }
    let want: BTreeSet<Key> = expected(base, SERIES, acked).into_iter().collect();
    let got: BTreeSet<Key> = recorder
        .received
        .lock()
        .expect("received")
        .keys()
        .cloned()
        .collect();
    assert!(
        got == want,
        "the recorder got exactly what was acknowledged"
    );
    let duplicates = recorder.duplicates();
    println!(
        "{KILLS} kill -9s, {} samples: {duplicates} received twice (bound {})",
        want.len(),
        KILLS * SHARDS * MAX_PER_SEND
    );
    assert!(
        duplicates as usize <= KILLS * SHARDS * MAX_PER_SEND,
        "at most the batches in flight are sent again"
    );
    let time = (base + acked as i64 * 1000) as f64 / 1000.0;
    let has = samples_when(
        &format!("http://{}", vm.addr()),
        "fwd_test",
        time,
        want.len(),
    )
    .await;
    let has: BTreeSet<Key> = has.into_iter().collect();
    assert!(
        has == want,
        "VictoriaMetrics holds every acknowledged sample"
    );
    let prom_has: BTreeSet<Key> =
        raw_samples(&format!("http://{}", prom.addr()), "fwd_test", "1h", time)
            .await
            .into_iter()
            .collect();
    assert!(
        prom_has == want,
        "Prometheus 3.5.3 holds every acknowledged sample"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sharding_by_series_over_two_victoriametrics_puts_each_series_on_exactly_one() {
    let (a, b) = (VictoriaMetrics::start(), VictoriaMetrics::start());
    a.ready().await;
    b.ready().await;
    let config = Config {
        forward: vec![
            dest(&format!(
                "{},name=vm-a,batch-send-deadline=200ms",
                a.write_url()
            )),
            dest(&format!(
                "{},name=vm-b,batch-send-deadline=200ms",
                b.write_url()
            )),
        ],
        forward_shard_by_series: true,
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 300;
    const SAMPLES: usize = 10;
    let base = base();
    let (status, _) = common::push(sluice.addr, round(base, SERIES, 0, SAMPLES)).await;
    assert_eq!(status, 204);
    let total = (SERIES * SAMPLES) as f64;
    assert!(
        eventually(30, || async {
            metric(
                sluice.addr,
                "sluice_forward_samples_sent_total{destination=\"vm-a\"}",
            )
            .await
                + metric(
                    sluice.addr,
                    "sluice_forward_samples_sent_total{destination=\"vm-b\"}",
                )
                .await
                >= total
        })
        .await,
        "both destinations together were sent everything"
    );
    let sent_a = metric(
        sluice.addr,
        "sluice_forward_samples_sent_total{destination=\"vm-a\"}",
    )
    .await;
    let time = (base + SAMPLES as i64 * 1000) as f64 / 1000.0;
    let on_a = samples_when(
        &format!("http://{}", a.addr()),
        "fwd_test",
        time,
        sent_a as usize,
    )
    .await;
    let on_b = samples_when(
        &format!("http://{}", b.addr()),
        "fwd_test",
        time,
        SERIES * SAMPLES - sent_a as usize,
    )
    .await;
    let series_of = |v: &[Key]| v.iter().map(|k| k.0.clone()).collect::<BTreeSet<_>>();
    let (sa, sb) = (series_of(&on_a), series_of(&on_b));
    println!(
        "series on vm-a {}, on vm-b {}, samples {} + {}",
        sa.len(),
        sb.len(),
        on_a.len(),
        on_b.len()
    );
    assert!(sa.is_disjoint(&sb), "no series on both");
    assert_eq!(sa.len() + sb.len(), SERIES, "every series on one of them");
    assert!(
        sa.len() > SERIES / 4 && sb.len() > SERIES / 4,
        "spread about evenly"
    );
    let mut both: Vec<Key> = on_a.into_iter().chain(on_b).collect();
    both.sort();
    assert!(
        both == expected(base, SERIES, SAMPLES),
        "together they hold everything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_relabel_configs_filter_and_rewrite_what_one_destination_gets() {
    let (kept, all) = (Recorder::default(), Recorder::default());
    let (kept_addr, all_addr) = (kept.start(Vec::new()).await, all.start(Vec::new()).await);
    let filtered: Destination = serde_yaml_ng::from_str(&format!(
        "url: http://{kept_addr}/api/v1/write\nname: filtered\nbatch-send-deadline: 100ms\n\
         write_relabel_configs:\n\
         \x20 - {{source_labels: [job], regex: j0, action: drop}}\n\
         \x20 - {{source_labels: [instance], regex: 'i(.*)', target_label: n, replacement: 'n$1'}}\n\
         \x20 - {{regex: instance, action: labeldrop}}\n"
    ))
    .expect("a Prometheus-style rule list");
    let config = Config {
        forward: vec![
            filtered,
            dest(&format!(
                "http://{all_addr}/api/v1/write,name=all,batch-send-deadline=100ms"
            )),
        ],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    let base = base();
    let (status, _) = common::push(sluice.addr, round(base, 30, 0, 2)).await;
    assert_eq!(status, 204);
    assert!(
        eventually(20, || async {
            all.distinct() == 60 && kept.distinct() == 40
        })
        .await,
        "all {} of 60, filtered {} of 40",
        all.distinct(),
        kept.distinct()
    );
    let got: BTreeSet<String> = kept
        .received
        .lock()
        .expect("received")
        .keys()
        .map(|k| k.0.clone())
        .collect();
    let want: BTreeSet<String> = (0..30)
        .filter(|i| i % 3 != 0)
        .map(|i| {
            labels_text([
                ("__name__", "fwd_test"),
                ("job", format!("j{}", i % 3).as_str()),
                ("n", format!("n{i}").as_str()),
            ])
        })
        .collect();
    assert_eq!(
        got, want,
        "job j0 dropped, instance rewritten to n and removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn remote_write_2_reaches_prometheus_3_unchanged() {
    let prom = prometheus3_receiver().await;
    let config = Config {
        forward: vec![dest(&format!(
            "http://{}/api/v1/write,name=prom2,protocol=remote-write-2,batch-send-deadline=200ms",
            prom.addr()
        ))],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 120;
    const SAMPLES: usize = 10;
    let base = base();
    let (status, _) = common::push(sluice.addr, round(base, SERIES, 0, SAMPLES)).await;
    assert_eq!(status, 204);
    let total = (SERIES * SAMPLES) as f64;
    let sent = common::wait_for_metric(
        sluice.addr,
        "sluice_forward_samples_sent_total{destination=\"prom2\"}",
        |v| v >= total,
    )
    .await;
    assert_eq!(sent, total, "{}", prom.log());
    let time = (base + SAMPLES as i64 * 1000) as f64 / 1000.0;
    let has = raw_samples(&format!("http://{}", prom.addr()), "fwd_test", "1h", time).await;
    assert!(
        has == expected(base, SERIES, SAMPLES),
        "Prometheus 3.5.3 holds what was sent in 2.0"
    );
    assert_eq!(
        metric(
            sluice.addr,
            "sluice_forward_samples_failed_total{destination=\"prom2\"}"
        )
        .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_shard_count_follows_the_backlog_and_keeps_each_series_in_order() {
    let recorder = Recorder::default();
    // A slow destination: 40 ms per request.
    recorder
        .delay_ms
        .store(40, std::sync::atomic::Ordering::Relaxed);
    let addr = recorder.start(Vec::new()).await;
    let config = Config {
        forward: vec![dest(&format!(
            "http://{addr}/api/v1/write,name=slow,min-shards=1,max-shards=8,\
             max-samples-per-send=500,batch-send-deadline=100ms"
        ))],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 500;
    const SAMPLES: usize = 400;
    let base = base();
    for r in 0..SAMPLES / 20 {
        let (status, _) = common::push(sluice.addr, round(base, SERIES, r * 20, r * 20 + 20)).await;
        assert_eq!(status, 204);
    }
    let shards = "sluice_forward_shards{destination=\"slow\"}";
    let mut most = metric(sluice.addr, shards).await;
    let total = SERIES * SAMPLES;
    let started = Instant::now();
    while recorder.distinct() < total && started.elapsed() < Duration::from_secs(120) {
        most = most.max(metric(sluice.addr, shards).await);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{total} samples through a 40 ms destination in {:?}; at most {most} shards",
        started.elapsed()
    );
    assert_eq!(recorder.distinct(), total, "everything arrived");
    assert!(most > 1.0, "the shard count rose under the backlog");
    assert_eq!(
        recorder
            .out_of_order
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "each series' samples arrived in order across reshards"
    );
    assert_eq!(recorder.duplicates(), 0);
}

/// A CA, a server certificate for `localhost` and a client certificate,
/// both signed by it, as PEM files in `dir`: (ca, server cert, server key,
/// client cert, client key).
fn certificates(dir: &std::path::Path, tag: &str) -> [std::path::PathBuf; 5] {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("sluice test CA {tag}"));
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("ca");
    let leaf = |name: &str| {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec![name.to_owned()])
            .expect("params")
            .signed_by(&key, &ca)
            .expect("signed");
        (cert.pem(), key.serialize_pem())
    };
    let (server, server_key) = leaf("localhost");
    let (client, client_key) = leaf("sluice-forwarder");
    let files = [
        ("ca.pem", ca.pem()),
        ("server.pem", server),
        ("server.key", server_key),
        ("client.pem", client),
        ("client.key", client_key),
    ];
    files.map(|(name, text)| {
        let p = dir.join(format!("{tag}-{name}"));
        std::fs::write(&p, text).expect("write pem");
        p
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_with_a_client_certificate_reaches_prometheus_3_and_a_wrong_ca_or_no_certificate_does_not(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let [ca, server, server_key, client, client_key] = certificates(dir.path(), "good");
    let [other_ca, ..] = certificates(dir.path(), "other");
    // Prometheus 3.5.3 serves https and wants a client certificate its CA
    // signed (exporter-toolkit's web config).
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {}\n",
            server.display(),
            server_key.display(),
            ca.display()
        ),
    )
    .expect("web config");
    let prom = common::Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &[
            "--web.enable-remote-write-receiver",
            &format!("--web.config.file={}", web.display()),
        ],
    );
    let url = format!("https://{}/api/v1/write", prom.addr());
    let good = format!(
        "{url},name=tls,tls-ca-file={},tls-cert-file={},tls-key-file={},tls-server-name=localhost,batch-send-deadline=200ms",
        ca.display(),
        client.display(),
        client_key.display()
    );
    let no_cert = format!(
        "{url},name=nocert,tls-ca-file={},tls-server-name=localhost,batch-send-deadline=200ms",
        ca.display()
    );
    let wrong_ca = format!(
        "{url},name=wrongca,tls-ca-file={},tls-cert-file={},tls-key-file={},tls-server-name=localhost,batch-send-deadline=200ms",
        other_ca.display(),
        client.display(),
        client_key.display()
    );
    let config = Config {
        forward: vec![dest(&good), dest(&no_cert), dest(&wrong_ca)],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    const SERIES: usize = 100;
    const SAMPLES: usize = 10;
    let base = base();
    let (status, text) = common::push(sluice.addr, round(base, SERIES, 0, SAMPLES)).await;
    assert_eq!(status, 204, "{text}");
    let total = (SERIES * SAMPLES) as f64;
    // Prometheus may still be starting: the first sends are retried.
    let started = Instant::now();
    let sent = common::wait_for_metric(
        sluice.addr,
        "sluice_forward_samples_sent_total{destination=\"tls\"}",
        |v| v >= total,
    )
    .await;
    assert_eq!(sent, total, "{}", prom.log());
    println!(
        "https with a client certificate: {total} samples acknowledged in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    // Read them back over https with the same client certificate.
    let reader = sluice::forward::TlsConfig {
        ca_file: Some(ca.clone()),
        cert_file: Some(client.clone()),
        key_file: Some(client_key.clone()),
        ..Default::default()
    }
    .client_config()
    .expect("tls config");
    let time = (base + SAMPLES as i64 * 1000) as f64 / 1000.0;
    let answer = https_get(
        reader,
        &format!(
            "https://{}/api/v1/query?query=count_over_time(fwd_test%5B1h%5D)&time={time:.3}",
            prom.addr()
        ),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&answer).expect("json");
    let counts = v["data"]["result"].as_array().expect("a vector");
    assert_eq!(counts.len(), SERIES, "{v}");
    assert!(
        counts
            .iter()
            .all(|s| s["value"][1].as_str() == Some(SAMPLES.to_string().as_str())),
        "{v}"
    );
    // Without a client certificate, or trusting another CA, every send
    // fails at the handshake: retried, never counted as sent or dropped.
    for name in ["nocert", "wrongca"] {
        let retried = common::wait_for_metric(
            sluice.addr,
            &format!("sluice_forward_samples_retried_total{{destination=\"{name}\"}}"),
            |v| v > 0.0,
        )
        .await;
        assert!(retried > 0.0, "{name}");
        for counter in ["sent", "dropped"] {
            let exposition = common::get(sluice.addr, "/metrics").await.1;
            let n: f64 = exposition
                .lines()
                .filter(|l| {
                    l.starts_with(&format!("sluice_forward_samples_{counter}_total{{"))
                        && l.contains(&format!("destination=\"{name}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            assert_eq!(n, 0.0, "{name} {counter}");
        }
    }
}

/// GETs `url` over https with `tls` (verifying the name `localhost`);
/// the body as text.
async fn https_get(tls: rustls::ClientConfig, url: &str) -> String {
    use http_body_util::BodyExt as _;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            rustls::pki_types::ServerName::try_from("localhost").expect("name"),
        ))
        .enable_http1()
        .wrap_connector(http);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, http_body_util::Empty<bytes::Bytes>>(connector);
    let resp = client
        .get(url.parse().expect("uri"))
        .await
        .expect("GET over https");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn native_histograms_are_forwarded_to_prometheus_3_in_both_protocols() {
    use sluice::proto::prometheus as pb;
    let prom = common::Prometheus::start3(
        "global:\n  scrape_interval: 1h\n",
        &[
            "--web.enable-remote-write-receiver",
            "--enable-feature=native-histograms",
        ],
    );
    prom.remote_write(common::body(vec![common::series(
        &[("__name__", "warm_up")],
        &[(common::now_ms(), 1.0)],
    )]))
    .await;
    // Each destination labels what it sends with its protocol, so that the
    // two copies are different series in the one Prometheus (the same
    // series from two senders would race and be refused out of order).
    let tagged = |name: &str, protocol: &str| -> Destination {
        serde_yaml_ng::from_str(&format!(
            "url: http://{}/api/v1/write\nname: {name}\nprotocol: {protocol}\nbatch-send-deadline: 200ms\n\
             write_relabel_configs:\n\
             \x20 - {{target_label: via, replacement: {name}}}\n",
            prom.addr()
        ))
        .expect("destination")
    };
    let config = Config {
        forward: vec![
            tagged("v1", "remote-write-1"),
            tagged("v2", "remote-write-2"),
        ],
        ..Config::default()
    };
    let sluice = common::start(config).await;
    let base = base();
    const N: i64 = 20;
    // Two series per protocol name: an integer and a float histogram each,
    // plus a float series beside them.
    let mut series = Vec::new();
    for (name, float) in [("fwd_hist_int", false), ("fwd_hist_float", true)] {
        let mut ts = common::series(&[("__name__", name)], &[]);
        for i in 0..N {
            let c = (i + 1) as u64;
            ts.histograms.push(if float {
                pb::Histogram {
                    count: Some(pb::histogram::Count::CountFloat(c as f64 * 1.5)),
                    sum: c as f64,
                    schema: 1,
                    positive_spans: vec![pb::BucketSpan {
                        offset: 0,
                        length: 2,
                    }],
                    positive_counts: vec![c as f64, c as f64 * 0.5],
                    timestamp: base + i * 1000,
                    ..Default::default()
                }
            } else {
                pb::Histogram {
                    count: Some(pb::histogram::Count::CountInt(3 * c)),
                    sum: c as f64 * 0.25,
                    schema: 3,
                    zero_count: Some(pb::histogram::ZeroCount::ZeroCountInt(c)),
                    zero_threshold: 1e-3,
                    positive_spans: vec![pb::BucketSpan {
                        offset: -2,
                        length: 2,
                    }],
                    positive_deltas: vec![c as i64, 0],
                    timestamp: base + i * 1000,
                    ..Default::default()
                }
            });
        }
        series.push(ts);
    }
    series.push(common::series(
        &[("__name__", "fwd_hist_beside")],
        &(0..N)
            .map(|i| (base + i * 1000, i as f64))
            .collect::<Vec<_>>(),
    ));
    let (status, text) = common::push(sluice.addr, common::body(series)).await;
    assert_eq!(status, 204, "{text}");
    for name in ["v1", "v2"] {
        let sent = common::wait_for_metric(
            sluice.addr,
            &format!("sluice_forward_samples_sent_total{{destination=\"{name}\"}}"),
            |v| v >= (3 * N) as f64,
        )
        .await;
        assert_eq!(sent, (3 * N) as f64, "{name}: {}", prom.log());
        assert_eq!(
            metric(
                sluice.addr,
                &format!("sluice_forward_samples_failed_total{{destination=\"{name}\"}}")
            )
            .await,
            0.0,
            "{name}: {}",
            prom.log()
        );
    }
    // Prometheus holds every histogram as each protocol sent it.
    let time = (base + N * 1000) as f64 / 1000.0;
    for (name, count_of, via) in [
        ("fwd_hist_int", (|c: f64| 3.0 * c) as fn(f64) -> f64, "v1"),
        ("fwd_hist_float", |c: f64| 1.5 * c, "v1"),
        ("fwd_hist_int", |c: f64| 3.0 * c, "v2"),
        ("fwd_hist_float", |c: f64| 1.5 * c, "v2"),
    ] {
        let v = common::api_json(
            &format!("http://{}/api/v1/query", prom.addr()),
            &[
                ("query", format!("{name}{{via=\"{via}\"}}[1h]")),
                ("time", format!("{time:.3}")),
            ],
        )
        .await;
        let hs = v["data"]["result"][0]["histograms"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(hs.len(), N as usize, "{name}: {v}");
        for (i, p) in hs.iter().enumerate() {
            let c = (i + 1) as f64;
            let count: f64 = p[1]["count"].as_str().expect("count").parse().expect("num");
            assert_eq!(count, count_of(c), "{name} #{i}: {p}");
        }
    }
    println!(
        "{} histograms and {N} floats forwarded to Prometheus 3.5.3 over 1.0 and 2.0, every one there",
        2 * N
    );
}
