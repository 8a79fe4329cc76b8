//! The query page in a real browser (headless Chromium over its DevTools
//! protocol): a Prometheus 3 link opens a graph with one line per series
//! and their label sets in the legend; the table shows what the API
//! answers; typing offers metric names, label names and values; a bad
//! query shows its parse error at its position; `/graph` links land on
//! it; nothing is logged as an error. The alerts and rules pages show the
//! rule groups' health, errors and alerts, filtered as their URL says.
//! Screenshots go to `target/ui-screenshots/`.

#[path = "common/cdp.rs"]
mod cdp;
mod common;

use std::collections::BTreeSet;

use serde_json::Value;
use sluice::config::Config;

fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots")
}

/// Three `ui_requests_total` series and one `ui_temperature`, a sample a
/// minute over the last hour.
async fn loaded() -> common::TestServer {
    let srv = common::start(Config::default()).await;
    let (status, text) = common::push(srv.addr, loaded_body()).await;
    assert_eq!(status, 204, "{text}");
    srv
}

/// What [`loaded`] writes.
fn loaded_body() -> Vec<u8> {
    let now = common::now_ms() / 60_000 * 60_000;
    let mut series = Vec::new();
    for (k, instance) in ["a", "b", "c"].iter().enumerate() {
        let samples: Vec<(i64, f64)> = (0..=60)
            .map(|i| {
                (
                    now - 3_600_000 + i * 60_000,
                    ((k + 1) * 100) as f64 + (i * (k as i64 + 1)) as f64,
                )
            })
            .collect();
        series.push(common::series(
            &[
                ("__name__", "ui_requests_total"),
                ("job", "api"),
                ("instance", instance),
            ],
            &samples,
        ));
    }
    let temps: Vec<(i64, f64)> = (0..=60)
        .map(|i| (now - 3_600_000 + i * 60_000, 20.5))
        .collect();
    series.push(common::series(
        &[("__name__", "ui_temperature"), ("room", "x")],
        &temps,
    ));
    common::body(series)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_page_graphs_tables_completes_and_shows_parse_errors() {
    let Some(bin) = cdp::chromium() else {
        return;
    };
    let srv = loaded().await;
    let base = format!("http://{}", srv.addr);
    let browser = cdp::Browser::launch(&bin);
    let mut page = browser
        .open(&format!(
            "{base}/query?g0.expr=ui_requests_total&g0.tab=graph&g0.range_input=1h"
        ))
        .await;

    // The graph: one line per series, the label sets in the legend.
    page.wait_for("document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let lines = page
        .eval("document.querySelectorAll('.panel path.series-line').length")
        .await;
    assert_eq!(lines, 3);
    let legend: BTreeSet<String> = strings(
        &page
            .eval("[...document.querySelectorAll('.panel ul.legend li')].map(li => li.textContent)")
            .await,
    )
    .into_iter()
    .collect();
    let want: BTreeSet<String> = ["a", "b", "c"]
        .iter()
        .map(|i| format!("ui_requests_total{{instance=\"{i}\", job=\"api\"}}"))
        .collect();
    assert_eq!(legend, want);
    // The line's points span the hour: its path is drawn across the plot.
    let width = page
        .eval("document.querySelector('.panel path.series-line').getBBox().width")
        .await;
    assert!(width.as_f64().is_some_and(|w| w > 800.0), "{width}");
    page.screenshot(&shots().join("query-graph.png")).await;

    // The tooltip under the cursor lists every series' value there.
    let rect = page
        .eval("(() => { const r = document.querySelector('.panel svg.graph').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
        .await;
    let r: Vec<f64> = rect
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .collect();
    let (left, top, w, h) = (r[0], r[1], r[2], r[3]);
    mouse(&mut page, "mouseMoved", left + w * 0.5, top + h * 0.5).await;
    page.wait_for("!document.querySelector('.tooltip').hidden")
        .await;
    let rows = page
        .eval("document.querySelectorAll('.tooltip .row').length")
        .await;
    assert_eq!(rows, 3);
    let tip = page
        .eval("document.querySelector('.tooltip').textContent")
        .await;
    assert!(
        tip.as_str()
            .is_some_and(|t| t.contains("UTC") && !t.contains("null")),
        "{tip}"
    );
    page.screenshot(&shots().join("query-graph-tooltip.png"))
        .await;
    // Dragging over the middle third zooms to it: about 20 minutes ending
    // 40 minutes into the hour, in the inputs and the link.
    mouse(&mut page, "mousePressed", left + w * 0.4, top + h * 0.5).await;
    mouse(&mut page, "mouseMoved", left + w * 0.6, top + h * 0.5).await;
    mouse(&mut page, "mouseReleased", left + w * 0.6, top + h * 0.5).await;
    page.wait_for("document.querySelector('.range-input').value !== '1h' && document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let zoomed = page.eval("location.search").await;
    assert!(
        zoomed
            .as_str()
            .is_some_and(|u| u.contains("g0.end_input=") && !u.contains("g0.range_input=1h&")),
        "{zoomed}"
    );
    let range = page
        .eval("document.querySelector('.range-input').value")
        .await;
    let minutes = range
        .as_str()
        .and_then(|r| r.split('m').next())
        .and_then(|m| m.parse::<u32>().ok());
    assert!(minutes.is_some_and(|m| (10..=14).contains(&m)), "{range}");
    assert_eq!(
        page.eval("document.querySelectorAll('.panel path.series-line').length")
            .await,
        3
    );
    // Back to the whole hour for what follows.
    page.navigate(&format!(
        "{base}/query?g0.expr=ui_requests_total&g0.tab=graph&g0.range_input=1h"
    ))
    .await;
    page.wait_for("document.querySelector('.panel').dataset.state === 'done'")
        .await;

    // Stacked: an area under each line.
    page.eval(
        "(() => { const s = document.querySelector('.display-mode'); s.value = 'stacked'; s.dispatchEvent(new Event('change')); })()",
    )
    .await;
    page.wait_for("document.querySelectorAll('.panel path.series-area').length === 3")
        .await;
    page.screenshot(&shots().join("query-graph-stacked.png"))
        .await;
    let url = page.eval("location.search").await;
    assert!(
        url.as_str()
            .is_some_and(|u| u.contains("g0.display_mode=stacked")
                && u.contains("g0.tab=graph")
                && u.contains("g0.range_input=1h")),
        "{url}"
    );

    // The table: the values the API answers for the same query.
    page.eval("document.querySelector('.tabs button').click()")
        .await;
    page.wait_for(
        "document.querySelector('.panel').dataset.tab === 'table' && document.querySelector('.panel').dataset.state === 'done'",
    )
    .await;
    let rows = page
        .eval("[...document.querySelectorAll('table.series tr')].map(tr => [...tr.children].map(td => td.textContent))")
        .await;
    let api = common::query_vector(srv.addr, "ui_requests_total", None).await;
    let got: BTreeSet<(String, String)> = rows
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r[0].as_str().unwrap_or_default().to_owned(),
                r[1].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = api
        .iter()
        .map(|(labels, v)| {
            (
                format!(
                    "ui_requests_total{{instance=\"{}\", job=\"api\"}}",
                    labels
                        .get("instance")
                        .map(String::as_str)
                        .unwrap_or_default()
                ),
                v.clone(),
            )
        })
        .collect();
    assert_eq!(got, want);
    page.screenshot(&shots().join("query-table.png")).await;

    // Typing a metric prefix offers its names (and not the others).
    page.eval("(() => { const t = document.querySelector('textarea'); t.value = ''; t.dispatchEvent(new Event('input')); t.focus(); })()").await;
    page.type_text("ui_req").await;
    page.wait_for("document.querySelectorAll('.complete li').length > 0")
        .await;
    let names = offered(&mut page).await;
    assert!(names.contains(&"ui_requests_total".to_owned()), "{names:?}");
    assert!(!names.contains(&"ui_temperature".to_owned()), "{names:?}");
    page.screenshot(&shots().join("query-complete.png")).await;
    // Taking it with Tab completes the word.
    page.call(
        "Input.dispatchKeyEvent",
        serde_json::json!({"type": "keyDown", "key": "Tab", "code": "Tab", "windowsVirtualKeyCode": 9}),
    )
    .await;
    let text = page.eval("document.querySelector('textarea').value").await;
    assert_eq!(text, "ui_requests_total");
    // Label names inside braces, then that label's values.
    page.type_text("{ins").await;
    page.wait_for("[...document.querySelectorAll('.complete li')].some(li => li.textContent.startsWith('instance'))")
        .await;
    page.eval("(() => { const t = document.querySelector('textarea'); t.value = 'ui_requests_total{instance=\"'; t.setSelectionRange(t.value.length, t.value.length); t.dispatchEvent(new Event('input')); })()").await;
    page.wait_for("document.querySelectorAll('.complete li').length === 3")
        .await;
    assert_eq!(offered(&mut page).await, ["a", "b", "c"]);
    // Functions come with their signature.
    page.eval("(() => { const t = document.querySelector('textarea'); t.value = ''; t.dispatchEvent(new Event('input')); })()").await;
    page.type_text("histogram_quan").await;
    page.wait_for("[...document.querySelectorAll('.complete li')].some(li => li.textContent.includes('histogram_quantile'))")
        .await;
    let kind = page
        .eval("[...document.querySelectorAll('.complete li')].find(li => li.textContent.startsWith('histogram_quantile(') || li.firstChild.textContent === 'histogram_quantile').lastChild.textContent")
        .await;
    assert!(
        kind.as_str()
            .is_some_and(|k| k.contains("scalar") && k.contains("instant vector")),
        "{kind}"
    );

    // A bad query: the parse error at its position, before running.
    page.eval("(() => { const t = document.querySelector('textarea'); t.value = ''; t.dispatchEvent(new Event('input')); })()").await;
    page.type_text("sum(rate(ui_requests_total[5m])").await;
    let error = page
        .wait_for("document.querySelector('.parse-error') && document.querySelector('.parse-error').textContent.includes('sum(rate(ui_requests_total[5m])') && document.querySelector('.parse-error').textContent")
        .await;
    let error = error.as_str().unwrap_or_default().to_owned();
    assert!(error.contains("parse error"), "{error}");
    assert!(error.starts_with("1:"), "{error}");
    assert!(
        error.contains("sum(rate(ui_requests_total[5m])\n"),
        "{error}"
    );
    page.screenshot(&shots().join("query-parse-error.png"))
        .await;

    // A Prometheus 2 `/graph` link lands on the query page, its query kept.
    page.navigate(&format!(
        "{base}/graph?g0.expr=ui_temperature&g0.tab=1&g1.expr=up&g1.tab=0"
    ))
    .await;
    page.wait_for("document.querySelectorAll('.panel').length === 2")
        .await;
    let path = page.eval("location.pathname").await;
    assert_eq!(path, "/query");
    let exprs = page
        .eval("[...document.querySelectorAll('textarea')].map(t => t.value)")
        .await;
    assert_eq!(strings(&exprs), ["ui_temperature", "up"]);
    let tabs = page
        .eval("[...document.querySelectorAll('.panel')].map(p => p.dataset.tab)")
        .await;
    assert_eq!(strings(&tabs), ["table", "graph"]);
    page.wait_for(
        "[...document.querySelectorAll('.panel')].every(p => p.dataset.state === 'done')",
    )
    .await;
    let cell = page
        .eval("document.querySelector('table.series td.value').textContent")
        .await;
    assert_eq!(cell, "20.5");

    // The one 400 the browser logs is the parse check's answer to the bad
    // query, which the page shows; anything else is a fault.
    let errors: Vec<&String> = page
        .errors()
        .iter()
        .filter(|e| {
            !(e.contains("\"source\":\"network\"")
                && e.contains("/api/v1/parse_query")
                && e.contains("status of 400"))
        })
        .collect();
    assert!(errors.is_empty(), "the page logged: {errors:?}");
}

/// The words the completion list offers.
async fn offered(page: &mut cdp::Page) -> Vec<String> {
    let js =
        "[...document.querySelectorAll('.complete li > span:first-child')].map(s => s.textContent)";
    strings(&page.eval(js).await)
}

/// A mouse event at page position (`x`, `y`), the left button held for
/// presses, releases and the moves between them.
async fn mouse(page: &mut cdp::Page, kind: &str, x: f64, y: f64) {
    let mut e = serde_json::json!({"type": kind, "x": x, "y": y});
    if kind != "mouseMoved" {
        e["button"] = "left".into();
        e["clickCount"] = 1.into();
    }
    page.call("Input.dispatchMouseEvent", e).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tsdb_status_page_shows_cardinality_and_links_each_row_to_its_series() {
    let Some(bin) = cdp::chromium() else {
        return;
    };
    let srv = loaded().await;
    let base = format!("http://{}", srv.addr);
    let browser = cdp::Browser::launch(&bin);
    let mut page = browser.open(&format!("{base}/tsdb-status")).await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let list = |id: &str| {
        format!("[...document.querySelectorAll('table[data-list={id}] tbody tr')].map(tr => [...tr.children].map(td => td.textContent))")
    };
    let metrics = page.eval(&list("metric")).await;
    assert_eq!(
        metrics,
        serde_json::json!([
            ["ui_requests_total", "3", "75.0%"],
            ["ui_temperature", "1", "25.0%"]
        ])
    );
    let head = page.eval(&list("head")).await;
    assert_eq!(head[0], serde_json::json!(["Number of series", "4"]));
    let pairs = page.eval(&list("pairs")).await;
    assert_eq!(
        pairs[0],
        serde_json::json!(["__name__=ui_requests_total", "3", "75.0%"])
    );
    page.screenshot(&shots().join("tsdb-status.png")).await;
    // A focus label adds its values; the filters go into the link.
    page.navigate(&format!(
        "{base}/tsdb-status?focusLabel=instance&scope=range&range=2h"
    ))
    .await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let focus = page.eval(&list("focus")).await;
    assert_eq!(
        focus,
        serde_json::json!([
            ["a", "1", "25.0%"],
            ["b", "1", "25.0%"],
            ["c", "1", "25.0%"]
        ])
    );
    // Each row opens the query page on its series.
    page.eval("document.querySelector('table[data-list=focus] a').click()")
        .await;
    page.wait_for("location.pathname === '/query' && document.querySelector('.panel') && document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let expr = page.eval("document.querySelector('textarea').value").await;
    assert_eq!(expr, "count by (__name__) ({instance=\"a\"})");
    let cell = page
        .eval("[...document.querySelectorAll('table.series td')].map(td => td.textContent)")
        .await;
    assert_eq!(cell, serde_json::json!(["ui_requests_total", "1"]));
    assert!(
        page.errors().is_empty(),
        "the page logged: {:?}",
        page.errors()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_histograms_draw_as_heatmaps_and_exemplars_as_points() {
    use sluice::proto::prometheus as pb;
    let Some(bin) = cdp::chromium() else {
        return;
    };
    let srv = common::start(Config::default()).await;
    let now = common::now_ms() / 60_000 * 60_000;
    // A native histogram a minute over the hour, three buckets growing.
    let mut hist = common::series(&[("__name__", "ui_latency_seconds"), ("job", "api")], &[]);
    hist.histograms = (0..=60)
        .map(|i| {
            let deltas = vec![1 + i, i, 2];
            let count: i64 = deltas
                .iter()
                .scan(0, |acc, d| {
                    *acc += d;
                    Some(*acc)
                })
                .sum();
            pb::Histogram {
                count: Some(pb::histogram::Count::CountInt(count as u64)),
                sum: count as f64 * 0.25,
                schema: 0,
                zero_threshold: 2f64.powi(-128),
                positive_spans: vec![pb::BucketSpan {
                    offset: -1,
                    length: 3,
                }],
                positive_deltas: deltas,
                timestamp: now - 3_600_000 + i * 60_000,
                ..Default::default()
            }
        })
        .collect();
    // A counter with two exemplars carrying trace IDs.
    let samples: Vec<(i64, f64)> = (0..=60)
        .map(|i| (now - 3_600_000 + i * 60_000, i as f64))
        .collect();
    let mut counter = common::series(&[("__name__", "ui_hits_total"), ("job", "api")], &samples);
    counter.exemplars = [("4bf92f3577b34da6", 20), ("00f067aa0ba902b7", 40)]
        .iter()
        .map(|(trace, i)| pb::Exemplar {
            labels: vec![pb::Label {
                name: "trace_id".into(),
                value: (*trace).into(),
            }],
            value: *i as f64,
            timestamp: now - 3_600_000 + i * 60_000,
        })
        .collect();
    let (status, text) = common::push(srv.addr, common::body(vec![hist, counter])).await;
    assert_eq!(status, 204, "{text}");

    let base = format!("http://{}", srv.addr);
    let browser = cdp::Browser::launch(&bin);
    let mut page = browser
        .open(&format!(
            "{base}/query?g0.expr=ui_latency_seconds&g0.tab=graph&g0.display_mode=heatmap&g0.range_input=1h"
        ))
        .await;
    page.wait_for("document.querySelector('.panel').dataset.state === 'done'")
        .await;
    // Three buckets at every step the hour holds a sample for.
    let cells = page
        .eval("document.querySelectorAll('.panel rect.heat-cell').length")
        .await;
    let steps = page
        .eval("new Set([...document.querySelectorAll('.panel rect.heat-cell')].map(r => r.getAttribute('x'))).size")
        .await;
    let (cells, steps) = (cells.as_u64().unwrap_or(0), steps.as_u64().unwrap_or(0));
    assert!(steps > 200, "{steps} columns");
    assert_eq!(cells, 3 * steps);
    let title = page
        .eval("document.querySelector('.band-title').textContent")
        .await;
    assert_eq!(title, "ui_latency_seconds{job=\"api\"}");
    page.screenshot(&shots().join("query-heatmap.png")).await;
    // The table gives count, sum and the buckets.
    page.eval("document.querySelector('.tabs button').click()")
        .await;
    page.wait_for("document.querySelector('.panel').dataset.tab === 'table' && document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let cell = page
        .eval("document.querySelector('table.series td.value').textContent")
        .await;
    let cell = cell.as_str().unwrap_or_default().to_owned();
    assert!(cell.starts_with("count 305, sum 76.25"), "{cell}");
    assert!(
        cell.contains("(0.25, 0.5]: 61  (0.5, 1]: 121  (1, 2]: 123"),
        "{cell}"
    );

    // Exemplars: a point each, their labels on a click, the trace ID copyable.
    page.navigate(&format!(
        "{base}/query?g0.expr=ui_hits_total&g0.tab=graph&g0.show_exemplars=1&g0.range_input=1h"
    ))
    .await;
    page.wait_for("document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let points = page
        .eval("document.querySelectorAll('.panel circle.exemplar').length")
        .await;
    assert_eq!(points, 2);
    page.eval("document.querySelector('circle.exemplar').dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        .await;
    let shown = page
        .wait_for("!document.querySelector('.exemplar-box').hidden && document.querySelector('.exemplar-box').textContent")
        .await;
    let shown = shown.as_str().unwrap_or_default().to_owned();
    assert!(shown.contains("trace_id=\"4bf92f3577b34da6\""), "{shown}");
    assert!(shown.contains("Copy trace ID"), "{shown}");
    page.screenshot(&shots().join("query-exemplars.png")).await;
    assert!(
        page.errors().is_empty(),
        "the page logged: {:?}",
        page.errors()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_and_alerts_pages_show_health_errors_and_alerts() {
    let Some(bin) = cdp::chromium() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ui.yml");
    // A rule that works, one that fails at every evaluation (three series
    // with one label set once `instance` is gone), and alerts firing,
    // pending and inactive.
    std::fs::write(
        &file,
        r#"groups:
  - name: records
    interval: 1s
    rules:
      - record: ui:requests:sum
        expr: sum(ui_requests_total)
      - record: ui:clash
        expr: label_replace(ui_requests_total, "instance", "", "", "")
  - name: alerts
    interval: 1s
    rules:
      - alert: Warm
        expr: ui_temperature > 20
        annotations: {summary: "{{ $labels.room }} is {{ $value }}"}
      - alert: Busy
        expr: ui_requests_total > 0
        for: 1h
      - alert: Never
        expr: vector(0) > 1
"#,
    )
    .expect("write");
    let srv = {
        let srv = common::start(Config {
            rule_files: vec![file.display().to_string()],
            ..Config::default()
        })
        .await;
        let (status, text) = common::push(srv.addr, loaded_body()).await;
        assert_eq!(status, 204, "{text}");
        srv
    };
    let base = format!("http://{}", srv.addr);
    // Every rule evaluated since the samples came.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, text) = common::get(srv.addr, "/api/v1/alerts").await;
        let v: Value = serde_json::from_str(&text).expect("json");
        let n = v["data"]["alerts"].as_array().map_or(0, Vec::len);
        // Each group evaluates on its own: every rule has a health.
        let (_, text) = common::get(srv.addr, "/api/v1/rules").await;
        let r: Value = serde_json::from_str(&text).expect("json");
        let healths: Vec<&Value> = r["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .map(|rule| &rule["health"])
            .collect();
        if n == 4 && healths.len() == 5 && healths.iter().all(|h| *h != "unknown") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let browser = cdp::Browser::launch(&bin);
    let mut page = browser.open(&format!("{base}/rules")).await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let rows = "[...document.querySelectorAll('section[data-group=records] tbody tr')].map(tr => [tr.children[0].textContent, tr.children[2].textContent])";
    assert_eq!(
        page.eval(rows).await,
        serde_json::json!([
            ["record: ui:requests:sum", "ok"],
            ["record: ui:clash", "err"]
        ])
    );
    let error = page
        .eval("document.querySelector('.rule-error').textContent")
        .await;
    assert!(
        error.as_str().is_some_and(|e| e.contains("same labelset")),
        "{error}"
    );
    page.screenshot(&shots().join("rules.png")).await;
    // A rule's expression opens the query page on it.
    page.eval("document.querySelector('section[data-group=records] a.expr').click()")
        .await;
    page.wait_for("location.pathname === '/query' && document.querySelector('.panel') && document.querySelector('.panel').dataset.state === 'done'")
        .await;
    let expr = page.eval("document.querySelector('textarea').value").await;
    assert_eq!(expr, "sum(ui_requests_total)");
    // The health filter, from the URL.
    page.navigate(&format!("{base}/rules?health=err")).await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let names = page
        .eval("[...document.querySelectorAll('td.rule-name')].map(td => td.textContent)")
        .await;
    assert_eq!(names, serde_json::json!(["record: ui:clash"]));

    page.navigate(&format!("{base}/alerts")).await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let summary = page
        .eval("document.querySelector('p.summary').textContent")
        .await;
    assert_eq!(summary, "1 firing, 1 pending, 1 inactive");
    let states = page
        .eval("[...document.querySelectorAll('details.alert-rule')].map(d => [d.querySelector('.rule-name').textContent, d.dataset.state, d.open])")
        .await;
    assert_eq!(
        states,
        serde_json::json!([
            ["Warm", "firing", true],
            ["Busy", "pending", true],
            ["Never", "inactive", false]
        ])
    );
    let warm = page
        .eval("[...document.querySelectorAll('details[data-state=firing] tbody td')].map(td => td.textContent)")
        .await;
    let cells: Vec<String> = strings(&warm);
    assert!(cells[0].contains(r#"room="x""#), "{cells:?}");
    assert_eq!(cells[1], "firing");
    assert_eq!(cells[3], "20.5");
    assert_eq!(cells[4], "summary: x is 20.5");
    page.screenshot(&shots().join("alerts.png")).await;
    // The state filter, from the URL.
    page.navigate(&format!("{base}/alerts?state=pending")).await;
    page.wait_for("document.body.dataset.state === 'done'")
        .await;
    let shown = page
        .eval("[...document.querySelectorAll('details.alert-rule .rule-name')].map(s => s.textContent)")
        .await;
    assert_eq!(shown, serde_json::json!(["Busy"]));
    assert!(
        page.errors().is_empty(),
        "the page logged: {:?}",
        page.errors()
    );
}
