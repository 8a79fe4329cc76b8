//! One PromQL range query over the `promql_eval` bench's head, for
//! callgrind (`--toggle-collect='*Engine*range*'` counts the query alone)
//! or a native timing: `query_profile [sum_rate|histogram_quantile|regex_selector|<query>] [runs] [instant]`.
//! With `instant`, the query runs as an instant query at the hour's end.

#[path = "../tests/common/promql_head.rs"]
mod promql_head;

use sluice::promql::{Engine, QueryOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next().unwrap_or_else(|| "sum_rate".to_owned());
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(1);
    let instant = args.next().is_some_and(|a| a == "instant");
    let q = match promql_head::QUERIES.iter().find(|(n, _)| *n == name) {
        Some((_, q)) => q.to_string(),
        None => name.clone(),
    };
    let head = promql_head::head();
    let engine = Engine::new(head.querier(), QueryOptions::default());
    let (start, end, step) = promql_head::range();
    let t = std::time::Instant::now();
    let mut series = 0;
    for _ in 0..runs {
        series = if instant {
            match engine.instant(&q, end).map(|a| a.value) {
                Ok(sluice::promql::value::Value::Vector(v)) => v.len(),
                Ok(_) => 1,
                Err(e) => {
                    eprintln!("{e}");
                    0
                }
            }
        } else {
            engine
                .range(&q, start, end, step)
                .map_or(0, |a| a.value.len())
        };
    }
    eprintln!(
        "{name}: {series} series, {:?} per run",
        t.elapsed() / runs as u32
    );
}
