//! Remote-write decoding: the hand-written walk against prost, on a
//! realistic request (2000 series, 10 labels each, one sample each, as
//! Prometheus sends them), plus the whole ingest path (decode, look up,
//! append) for series the head already holds, with 2000 series and at the
//! benchmark load's 100k (a head larger than the caches). Allocation counts per request
//! come from `cargo test --test alloc -- --nocapture`.

#[path = "../tests/common/requests.rs"]
mod requests;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use prost::Message;
use sluice::ingest::{self, remote_write, validate::LabelLimits};
use sluice::proto::prometheus as pb;
use sluice::storage::{Db, HeadOptions};
use std::hint::black_box;

const SERIES: usize = 2000;

fn bench(c: &mut Criterion) {
    let t0 = 1_700_000_000_000i64;
    let body = requests::request(SERIES, t0).encode_to_vec();
    let mut g = c.benchmark_group("remote_write_decode");
    g.throughput(Throughput::Elements(SERIES as u64));
    g.bench_with_input(
        BenchmarkId::new("hand_written", SERIES),
        &body,
        |b, body| {
            b.iter(|| {
                let mut n = 0usize;
                let mut acc = 0f64;
                for ts in remote_write::decode(black_box(body)).expect("valid") {
                    for (name, value) in ts.labels() {
                        n += name.len() + value.len();
                    }
                    for (t, v) in ts.samples() {
                        acc += v + t as f64;
                    }
                }
                black_box((n, acc))
            })
        },
    );
    g.bench_with_input(BenchmarkId::new("prost", SERIES), &body, |b, body| {
        b.iter(|| {
            let req = pb::WriteRequest::decode(black_box(&body[..])).expect("valid");
            let mut n = 0usize;
            let mut acc = 0f64;
            for ts in &req.timeseries {
                for l in &ts.labels {
                    n += l.name.len() + l.value.len();
                }
                for s in &ts.samples {
                    acc += s.value + s.timestamp as f64;
                }
            }
            black_box((n, acc))
        })
    });
    g.finish();

    // Decode + look up + append, series already in the head. Requests step
    // 15s apart; a pre-built ring of them keeps timestamps increasing.
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(SERIES as u64));
    let limits = LabelLimits::default();
    let bodies: Vec<Vec<u8>> = (0..240)
        .map(|i| requests::request(SERIES, t0 + i as i64 * 15_000).encode_to_vec())
        .collect();
    g.bench_function(BenchmarkId::new("existing_series", SERIES), |b| {
        b.iter_custom(|iters| timed_ingest(iters, &bodies[..1], &bodies[1..], &limits))
    });
    // The same series and samples as remote write 2.0.
    let bodies_v2: Vec<Vec<u8>> = (0..240)
        .map(|i| {
            requests::to_v2(&requests::request(SERIES, t0 + i as i64 * 15_000)).encode_to_vec()
        })
        .collect();
    wire_bytes(
        "2000 series x 10 labels, 1 sample each",
        &bodies,
        &bodies_v2,
    );
    g.bench_function(BenchmarkId::new("existing_series_v2", SERIES), |b| {
        b.iter_custom(|iters| timed_ingest_v2(iters, &bodies_v2[..1], &bodies_v2[1..], &limits))
    });
    // The same with a start time on every sample (counters started an
    // hour before), kept (`st-storage`): what reading and keeping them
    // costs. One run per series; nothing more after the first request.
    let bodies_st: Vec<Vec<u8>> = (0..240)
        .map(|i| {
            let mut req = requests::to_v2(&requests::request(SERIES, t0 + i as i64 * 15_000));
            for ts in &mut req.timeseries {
                for s in &mut ts.samples {
                    s.start_timestamp = t0 - 3_600_000;
                }
            }
            req.encode_to_vec()
        })
        .collect();
    let st_storage = HeadOptions {
        st_storage: true,
        ..HeadOptions::default()
    };
    let v2_opts = ingest::remote_write::V2Options {
        limits,
        ..Default::default()
    };
    g.bench_function(
        BenchmarkId::new("existing_series_v2_start_times", SERIES),
        |b| {
            b.iter_custom(|iters| {
                timed_on(
                    &st_storage,
                    iters,
                    &bodies_st[..1],
                    &bodies_st[1..],
                    |head, body| {
                        ingest::append_write_request_v2(head, body, &v2_opts, i64::MAX / 2)
                            .expect("valid")
                    },
                )
            })
        },
    );
    // The same in-order load with an out-of-order window of 1 h: what
    // the window costs samples that never use it.
    let windowed = HeadOptions {
        ooo_window_ms: 3_600_000,
        ..HeadOptions::default()
    };
    let v1 = |head: &Db, body: &[u8]| {
        ingest::append_write_request(head, body, &limits, i64::MAX / 2).expect("valid")
    };
    g.bench_function(
        BenchmarkId::new("existing_series_ooo_window", SERIES),
        |b| b.iter_custom(|iters| timed_on(&windowed, iters, &bodies[..1], &bodies[1..], v1)),
    );
    // A tenth of each request's samples late: each series skips its
    // sample one round in ten and sends one 7.5 s before its newest
    // instead, stored out of order.
    let late: Vec<Vec<u8>> = (0..240)
        .map(|i| {
            let mut req = requests::request(SERIES, t0 + i as i64 * 15_000);
            if i > 1 {
                for (j, ts) in req.timeseries.iter_mut().enumerate() {
                    if (j + i) % 10 == 0 {
                        ts.samples[0].timestamp = t0 + (i as i64 - 1) * 15_000 - 7_500;
                    }
                }
            }
            req.encode_to_vec()
        })
        .collect();
    g.bench_function(
        BenchmarkId::new("existing_series_10pct_late", SERIES),
        |b| b.iter_custom(|iters| timed_on(&windowed, iters, &late[..1], &late[1..], v1)),
    );
    g.finish();

    // Reading back: every series' samples over the hour, from a head
    // that took the in-order load, and from one that took a tenth late.
    let mut g = c.benchmark_group("read");
    g.throughput(Throughput::Elements((SERIES * 240) as u64));
    for (name, load) in [("in_order", &bodies), ("10pct_late", &late)] {
        let db = Db::new(windowed.clone());
        for body in load.iter() {
            v1(&db, body);
        }
        eprintln!(
            "head after the {name} load: {} bytes held, {} samples",
            db.held_bytes(),
            db.head_stats().samples
        );
        let all = sluice::storage::index::Matcher::new(
            sluice::storage::index::MatchOp::Regex,
            "__name__",
            ".+",
        )
        .expect("matcher");
        g.bench_function(BenchmarkId::new(name, SERIES), |b| {
            b.iter(|| {
                let selected = db
                    .querier()
                    .select(std::slice::from_ref(&all), i64::MIN, i64::MAX);
                let n: usize = selected
                    .iter()
                    .map(|s| s.samples(i64::MIN, i64::MAX).count())
                    .sum();
                black_box(n)
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(SERIES as u64));
    // The same with relabel rules at the door (`--ingest-relabel-config`)
    // that keep every series: what the rules cost a known series is its
    // key and one alias lookup, not the rules.
    let relabel = ingest::relabel::Relabel::new(
        ingest::relabel::Rules::parse(
            "- {source_labels: [__name__], regex: 'never_.*', action: drop}\n\
             - {regex: 'not_there', action: labeldrop}\n\
             - {source_labels: [instance], regex: '(.*)', target_label: host, replacement: '$1'}\n",
        )
        .expect("rules"),
        None,
    );
    g.bench_function(
        BenchmarkId::new("existing_series_relabelled", SERIES),
        |b| {
            b.iter_custom(|iters| {
                timed_with(iters, &bodies[..1], &bodies[1..], |head, body| {
                    let door = ingest::Door {
                        limits: &limits,
                        relabel: &relabel,
                        ha: None,
                    };
                    ingest::append_write_request_admitted(
                        head,
                        body,
                        &door,
                        i64::MAX / 2,
                        &mut |_| true,
                    )
                    .expect("valid")
                })
            })
        },
    );
    let v2_relabelled = ingest::remote_write::V2Options {
        limits,
        relabel: relabel.clone(),
        ..Default::default()
    };
    g.bench_function(
        BenchmarkId::new("existing_series_v2_relabelled", SERIES),
        |b| {
            b.iter_custom(|iters| {
                timed_with(iters, &bodies_v2[..1], &bodies_v2[1..], |head, body| {
                    ingest::append_write_request_v2(head, body, &v2_relabelled, i64::MAX / 2)
                        .expect("valid")
                })
            })
        },
    );

    // The same at the benchmark load's scale: 100k series with 7 labels
    // (`sluice-loadgen`'s series), 2000 samples per request, so the head
    // (~100 MB) is far larger than the caches and each series' lookup and
    // chunk write miss them, as in the server. The first round of requests
    // creates the series untimed; the later rounds are timed. WAL off.
    let rounds = requests::loadgen_rounds(t0);
    let per_round = requests::LOADGEN_SERIES / requests::LOADGEN_PER_REQUEST;
    g.throughput(Throughput::Elements(requests::LOADGEN_PER_REQUEST as u64));
    g.bench_function(
        BenchmarkId::new("existing_series", requests::LOADGEN_SERIES),
        |b| {
            b.iter_custom(|iters| {
                timed_ingest(iters, &rounds[..per_round], &rounds[per_round..], &limits)
            })
        },
    );
    let rounds_v2: Vec<Vec<u8>> = rounds
        .iter()
        .map(|b| requests::to_v2(&pb::WriteRequest::decode(&b[..]).expect("valid")).encode_to_vec())
        .collect();
    wire_bytes(
        "100k series x 7 labels, 2000 per request",
        &rounds,
        &rounds_v2,
    );
    g.bench_function(
        BenchmarkId::new("existing_series_v2", requests::LOADGEN_SERIES),
        |b| {
            b.iter_custom(|iters| {
                timed_ingest_v2(
                    iters,
                    &rounds_v2[..per_round],
                    &rounds_v2[per_round..],
                    &limits,
                )
            })
        },
    );
    g.finish();
}

/// Prints the snappy-compressed bytes per sample of the same requests as
/// 1.0 and as 2.0.
fn wire_bytes(what: &str, v1: &[Vec<u8>], v2: &[Vec<u8>]) {
    let packed = |bodies: &[Vec<u8>]| -> (usize, usize) {
        let mut enc = snap::raw::Encoder::new();
        let bytes = bodies
            .iter()
            .map(|b| enc.compress_vec(b).expect("compress").len())
            .sum();
        let samples = bodies
            .iter()
            .map(|b| {
                ingest::remote_write::decode(b)
                    .map(|s| s.map(|ts| ts.samples as usize).sum::<usize>())
                    .unwrap_or(0)
            })
            .sum();
        (bytes, samples)
    };
    let (b1, n) = packed(v1);
    let b2: usize = {
        let mut enc = snap::raw::Encoder::new();
        v2.iter()
            .map(|b| enc.compress_vec(b).expect("compress").len())
            .sum()
    };
    eprintln!(
        "wire bytes per sample ({what}): 1.0 {:.1}, 2.0 {:.1} (snappy)",
        b1 as f64 / n as f64,
        b2 as f64 / n as f64
    );
}

/// `iters` requests from `timed` appended to heads that first took `setup`
/// (untimed; a fresh head whenever `timed` runs out): their time in all.
fn timed_ingest(
    iters: u64,
    setup: &[Vec<u8>],
    timed: &[Vec<u8>],
    limits: &LabelLimits,
) -> std::time::Duration {
    timed_with(iters, setup, timed, |head, body| {
        ingest::append_write_request(head, body, limits, i64::MAX / 2).expect("valid")
    })
}

/// [`timed_ingest`] for 2.0 bodies.
fn timed_ingest_v2(
    iters: u64,
    setup: &[Vec<u8>],
    timed: &[Vec<u8>],
    limits: &LabelLimits,
) -> std::time::Duration {
    let v2 = ingest::remote_write::V2Options {
        limits: *limits,
        ..Default::default()
    };
    timed_with(iters, setup, timed, |head, body| {
        ingest::append_write_request_v2(head, body, &v2, i64::MAX / 2).expect("valid")
    })
}

fn timed_with(
    iters: u64,
    setup: &[Vec<u8>],
    timed: &[Vec<u8>],
    ingest: impl Fn(&Db, &[u8]) -> ingest::IngestReport,
) -> std::time::Duration {
    timed_on(&HeadOptions::default(), iters, setup, timed, ingest)
}

/// [`timed_with`] on heads made with `opts`.
fn timed_on(
    opts: &HeadOptions,
    iters: u64,
    setup: &[Vec<u8>],
    timed: &[Vec<u8>],
    ingest: impl Fn(&Db, &[u8]) -> ingest::IngestReport,
) -> std::time::Duration {
    let mut total = std::time::Duration::ZERO;
    let mut done = 0u64;
    while done < iters {
        let head = Db::new(opts.clone());
        for body in setup {
            ingest(&head, body);
        }
        let n = (iters - done).min(timed.len() as u64) as usize;
        let start = std::time::Instant::now();
        for body in &timed[..n] {
            black_box(ingest(&head, body));
        }
        total += start.elapsed();
        done += n as u64;
    }
    total
}

criterion_group!(benches, bench);
criterion_main!(benches);
