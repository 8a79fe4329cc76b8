//! Query text as any client can send it: bounded by the guard, parsed,
//! printed (format_query) and evaluated over a small head, on a stack
//! sized as query threads are. Never a panic; every failure is an error.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice::promql::guard::{self, ParseLimits};
use sluice::promql::{Engine, QueryOptions};
use sluice::storage::{AppendCounts, Db, HeadOptions};
use sluice::storage::labels::encode_canonical;

fn head() -> &'static Db {
    static HEAD: OnceLock<Db> = OnceLock::new();
    HEAD.get_or_init(|| {
        let head = Db::new(HeadOptions::default());
        let mut app = head.appender(i64::MAX);
        let mut c = AppendCounts::default();
        for job in ["a", "b"] {
            let labels = [("__name__", "x"), ("job", job)];
            let mut raw = Vec::new();
            encode_canonical(labels.iter().copied(), &mut raw);
            let samples = (0..40).map(|i| (i * 15_000, i as f64));
            let _ = app.append_new(&labels, &raw, samples, &mut c);
        }
        app.commit();
        head
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(q) = std::str::from_utf8(data) else {
        return;
    };
    let q = q.to_owned();
    let run = std::thread::Builder::new()
        .stack_size(32 << 20)
        .spawn(move || {
            if let Ok(expr) = guard::parse(&q, &ParseLimits::default()) {
                let _ = expr.prettify();
            }
            let opts = QueryOptions {
                max_samples: 10_000,
                timeout: std::time::Duration::from_millis(500),
                ..QueryOptions::default()
            };
            let e = Engine::new(head().querier(), opts);
            let _ = e.instant(&q, 300_000);
            let _ = e.range(&q, 0, 600_000, 60_000);
        })
        .expect("thread");
    assert!(run.join().is_ok(), "a query panicked");
});
