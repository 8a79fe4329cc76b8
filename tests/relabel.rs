//! Sluice's relabel engine against Prometheus 3.5.3's own: Prometheus
//! scrapes one fixed target twice, as job `raw` and as job `relabelled`
//! with `metric_relabel_configs` using every action; the engine applied to
//! the `raw` series gives exactly the `relabelled` ones. And at the door:
//! Prometheus remote-writes the `raw` scrape to a Sluice started with the
//! same rules in `--ingest-relabel-config`, which stores exactly the
//! series Prometheus' own relabelling kept.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use sluice::relabel::{RelabelConfig, Relabeler};

/// Every action Prometheus 3.5.3 has, on labels the target's series carry.
const RULES: &str = r#"
- {source_labels: [__name__], regex: 'drop_me_.*', action: drop}
- {source_labels: [__name__, kind], separator: ':', regex: '(keep|also)_.*:.*', action: keep}
- {source_labels: [a], target_label: b, action: dropequal}
- {source_labels: [port], target_label: want_port, action: keepequal}
- {source_labels: [instance], regex: '([^:]+):.*', target_label: host, replacement: '${1}'}
- {source_labels: [secret], regex: '.*', target_label: secret, replacement: ''}
- {source_labels: [Mixed], target_label: mixed_lower, action: lowercase}
- {source_labels: [Mixed], target_label: MIXED_UPPER, action: uppercase}
- {source_labels: [__name__, kind], modulus: 7, target_label: shard, action: hashmod}
- {regex: 'pod_(.+)', action: labelmap, replacement: 'k8s_$1'}
- {regex: 'pod_.*', action: labeldrop}
- {regex: '__name__|job|instance|host|k8s_.*|kind|mixed_lower|MIXED_UPPER|shard|port|want_port|a|b', action: labelkeep}
"#;

/// The target's series: some dropped by each filtering action, the others
/// rewritten by the rest.
const EXPOSITION: &str = "\
keep_a{kind=\"x\",a=\"1\",b=\"2\",port=\"80\",want_port=\"80\",pod_name=\"p1\",Mixed=\"HeLLo\",secret=\"s\"} 1
keep_a{kind=\"y\",a=\"1\",b=\"1\"} 1
keep_b{port=\"81\",want_port=\"80\"} 1
keep_c{pod_ns=\"n\",extra=\"gone\",Mixed=\"Ünïcode\",a=\"1\"} 1
also_d 1
also_e{kind=\"\",a=\"\",b=\"x\"} 1
drop_me_total{kind=\"x\"} 1
other_f{kind=\"z\"} 1
";

/// The label sets Prometheus holds for `job`, without the series a scrape
/// makes of itself (`up`, `scrape_*`).
async fn series_of(prom: &common::Prometheus, job: &str) -> BTreeSet<BTreeMap<String, String>> {
    let v = common::api_json(
        &format!("http://{}/api/v1/series", prom.addr()),
        &[("match[]", format!("{{job=\"{job}\"}}"))],
    )
    .await;
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let labels: BTreeMap<String, String> = s
                .as_object()?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            let name = labels.get("__name__")?;
            (name != "up" && !name.starts_with("scrape_")).then_some(labels)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_action_relabels_as_prometheus_3_5_3_does() {
    let addr = common::serve_exposition(EXPOSITION).await;
    let rules: String = RULES
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("      {l}\n"))
        .collect();
    let config = format!(
        "global:\n  scrape_interval: 1s\nscrape_configs:\n\
         \x20 - job_name: raw\n    static_configs: [{{targets: ['{addr}']}}]\n\
         \x20 - job_name: relabelled\n    static_configs: [{{targets: ['{addr}']}}]\n    metric_relabel_configs:\n{rules}"
    );
    // Sluice relabels at the door what Prometheus sends it of job `raw`
    // (named `relabelled` on the way, to compare label sets whole).
    let dir = tempfile::tempdir().expect("tempdir");
    let rules_file = dir.path().join("relabel.yaml");
    std::fs::write(&rules_file, RULES).expect("rules");
    let sluice = common::start(sluice::config::Config {
        ingest_relabel_config: rules_file,
        ..sluice::config::Config::default()
    })
    .await;
    let config = format!(
        "{config}remote_write:\n  - url: http://{}/api/v1/write\n    \
         queue_config: {{batch_send_deadline: 100ms}}\n    write_relabel_configs:\n      \
         - {{source_labels: [job], regex: raw, action: keep}}\n      \
         - {{target_label: job, replacement: relabelled}}\n",
        sluice.addr
    );
    let prom = common::Prometheus::start3(&config, &[]);
    prom.ready().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (raw, relabelled) = loop {
        let raw = series_of(&prom, "raw").await;
        let relabelled = series_of(&prom, "relabelled").await;
        if (!raw.is_empty() && !relabelled.is_empty()) || std::time::Instant::now() > deadline {
            break (raw, relabelled);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(
        raw.len(),
        8,
        "every series of the target: {raw:?}\n{}",
        prom.log()
    );
    let configs: Vec<RelabelConfig> = serde_yaml_ng::from_str(RULES).expect("rules");
    let engine = Relabeler::new(&configs).expect("valid rules");
    let ours: BTreeSet<BTreeMap<String, String>> = raw
        .iter()
        .filter_map(|labels| {
            let mut l = labels.clone();
            l.insert("job".into(), "relabelled".into());
            engine.apply(&mut l).then_some(l)
        })
        .collect();
    assert_eq!(ours, relabelled);
    // Each filtering action dropped something, and each rewriting one
    // wrote something: the comparison covered them all.
    // keep_a{kind="x"}, keep_c and also_e; also_d goes by `dropequal`, as
    // its absent `a` and `b` are both the empty value.
    assert_eq!(relabelled.len(), 3, "{relabelled:?}");
    for label in [
        "host",
        "mixed_lower",
        "MIXED_UPPER",
        "shard",
        "k8s_name",
        "k8s_ns",
    ] {
        assert!(
            relabelled.iter().any(|l| l.contains_key(label)),
            "{label}: {relabelled:?}"
        );
    }

    // What Sluice stored of the remote-written `raw` scrape, without the
    // scrape's own series (those the rules keep are dropped by `keep`).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let stored = loop {
        let v = common::api_json(
            &format!("http://{}/api/v1/series", sluice.addr),
            &[("match[]", r#"{job="relabelled"}"#.to_owned())],
        )
        .await;
        let stored: BTreeSet<BTreeMap<String, String>> =
            serde_json::from_value(v["data"].clone()).unwrap_or_default();
        if stored.len() >= relabelled.len() || std::time::Instant::now() > deadline {
            break stored;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    };
    assert_eq!(stored, relabelled, "{}", prom.log());
    let (_, metrics) = common::get(sluice.addr, "/metrics").await;
    assert!(
        common::metric_total(&metrics, "sluice_dropped_samples_total") > 0.0,
        "the rules dropped series, counted: {metrics}"
    );
}
