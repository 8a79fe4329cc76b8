//! Prometheus' relabelling (`relabel_configs`, `metric_relabel_configs`,
//! `write_relabel_configs`), every action Prometheus 3.5.3 has: `replace`,
//! `keep`, `drop`, `keepequal`, `dropequal`, `hashmod`, `labelmap`,
//! `labeldrop`, `labelkeep`, `lowercase` and `uppercase`, with its defaults
//! (separator `;`, regex `(.*)` anchored at both ends, replacement `$1`).
//! One engine for every place Sluice relabels: a forward destination
//! applies it once per series, when it first reads the series' labels.

use std::collections::BTreeMap;

use md5::{Digest as _, Md5};
use serde::{Deserialize, Serialize};

/// What a rule does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Sets `target_label` to the expanded `replacement` when `regex`
    /// matches the joined `source_labels` (an empty result removes it).
    #[default]
    Replace,
    /// Keeps only series whose joined `source_labels` match `regex`.
    Keep,
    /// Drops series whose joined `source_labels` match `regex`.
    Drop,
    /// Sets `target_label` to the MD5 of the joined `source_labels`
    /// modulo `modulus`.
    Hashmod,
    /// Removes the labels whose names match `regex`.
    Labeldrop,
    /// Removes the labels whose names do not match `regex`.
    Labelkeep,
    /// Copies each label whose name matches `regex` to the name
    /// `replacement` expands to.
    Labelmap,
    /// Keeps only series whose joined `source_labels` equal the value of
    /// `target_label`.
    Keepequal,
    /// Drops series whose joined `source_labels` equal the value of
    /// `target_label`.
    Dropequal,
    /// Sets `target_label` to the joined `source_labels`, lowercased.
    Lowercase,
    /// Sets `target_label` to the joined `source_labels`, uppercased.
    Uppercase,
}

impl Action {
    /// Its name in a config.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replace => "replace",
            Action::Keep => "keep",
            Action::Drop => "drop",
            Action::Hashmod => "hashmod",
            Action::Labeldrop => "labeldrop",
            Action::Labelkeep => "labelkeep",
            Action::Labelmap => "labelmap",
            Action::Keepequal => "keepequal",
            Action::Dropequal => "dropequal",
            Action::Lowercase => "lowercase",
            Action::Uppercase => "uppercase",
        }
    }
}

/// One rule, in Prometheus' own keys (`source_labels`, `target_label`, …),
/// so that a Prometheus config's rules can be pasted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelabelConfig {
    /// Labels whose values are joined with `separator` and matched.
    pub source_labels: Vec<String>,
    /// Joins the source values.
    pub separator: String,
    /// Anchored at both ends, as Prometheus does.
    pub regex: String,
    /// For `hashmod`.
    pub modulus: u64,
    /// The label `replace` and `hashmod` set.
    pub target_label: String,
    /// `$1`, `${name}`… refer to the regex's groups.
    pub replacement: String,
    /// What the rule does.
    pub action: Action,
}

impl Default for RelabelConfig {
    fn default() -> Self {
        Self {
            source_labels: Vec::new(),
            separator: ";".to_owned(),
            regex: "(.*)".to_owned(),
            modulus: 0,
            target_label: String::new(),
            replacement: "$1".to_owned(),
            action: Action::Replace,
        }
    }
}

/// Rules checked and compiled; the default has none.
#[derive(Debug, Clone, Default)]
pub struct Relabeler {
    rules: Vec<(RelabelConfig, regex::Regex)>,
}

impl Relabeler {
    /// Compiles `rules`; an error names the rule and what is wrong.
    pub fn new(rules: &[RelabelConfig]) -> Result<Self, String> {
        let mut out = Vec::with_capacity(rules.len());
        let defaults = RelabelConfig::default();
        for (i, r) in rules.iter().enumerate() {
            let re = regex::Regex::new(&format!("^(?s:{})$", r.regex))
                .map_err(|e| format!("relabel rule {i}: bad regex: {e}"))?;
            let action = r.action;
            match action {
                Action::Replace
                | Action::Lowercase
                | Action::Uppercase
                | Action::Keepequal
                | Action::Dropequal
                    if r.target_label.is_empty() =>
                {
                    return Err(format!(
                        "relabel rule {i}: {} needs a target_label",
                        action.as_str()
                    ))
                }
                Action::Keepequal | Action::Dropequal
                    if r.regex != defaults.regex || r.replacement != defaults.replacement =>
                {
                    // As Prometheus: these compare values, with no regex.
                    return Err(format!(
                        "relabel rule {i}: {} takes source_labels and target_label only, not regex or replacement",
                        action.as_str()
                    ));
                }
                Action::Hashmod if r.target_label.is_empty() || r.modulus == 0 => {
                    return Err(format!(
                        "relabel rule {i}: hashmod needs a target_label and a modulus"
                    ))
                }
                _ => {}
            }
            out.push((r.clone(), re));
        }
        Ok(Self { rules: out })
    }

    /// Reads and compiles a YAML list of `relabel_configs` (empty text:
    /// none); the error names the file and what is wrong.
    pub fn from_file(path: &std::path::Path) -> Result<Self, String> {
        let fail = |e: String| format!("relabel config file {}: {e}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let rules: Vec<RelabelConfig> = serde_yaml_ng::from_str(&text)
            .map_err(|e| fail(format!("not a list of relabel_configs: {e}")))?;
        Self::new(&rules).map_err(fail)
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Applies the rules to `labels` (name → value); `false` when the
    /// series is dropped.
    pub fn apply(&self, labels: &mut BTreeMap<String, String>) -> bool {
        for (r, re) in &self.rules {
            let joined = || {
                r.source_labels
                    .iter()
                    .map(|n| labels.get(n).map_or("", String::as_str))
                    .collect::<Vec<_>>()
                    .join(&r.separator)
            };
            match r.action {
                Action::Keep => {
                    if !re.is_match(&joined()) {
                        return false;
                    }
                }
                Action::Drop => {
                    if re.is_match(&joined()) {
                        return false;
                    }
                }
                Action::Keepequal => {
                    if labels.get(&r.target_label).map_or("", String::as_str) != joined() {
                        return false;
                    }
                }
                Action::Dropequal => {
                    if labels.get(&r.target_label).map_or("", String::as_str) == joined() {
                        return false;
                    }
                }
                Action::Lowercase => {
                    let v = joined().to_lowercase();
                    labels.insert(r.target_label.clone(), v);
                }
                Action::Uppercase => {
                    let v = joined().to_uppercase();
                    labels.insert(r.target_label.clone(), v);
                }
                Action::Replace => {
                    let value = joined();
                    let Some(caps) = re.captures(&value) else {
                        continue;
                    };
                    let mut target = String::new();
                    caps.expand(&r.target_label, &mut target);
                    let mut out = String::new();
                    caps.expand(&r.replacement, &mut out);
                    if target.is_empty() {
                        continue;
                    }
                    if out.is_empty() {
                        labels.remove(&target);
                    } else {
                        labels.insert(target, out);
                    }
                }
                Action::Hashmod => {
                    let digest = Md5::digest(joined().as_bytes());
                    let mut last = [0u8; 8];
                    last.copy_from_slice(&digest[8..16]);
                    let m = u64::from_be_bytes(last) % r.modulus;
                    labels.insert(r.target_label.clone(), m.to_string());
                }
                Action::Labeldrop => labels.retain(|n, _| !re.is_match(n)),
                Action::Labelkeep => labels.retain(|n, _| re.is_match(n)),
                Action::Labelmap => {
                    let mut add = Vec::new();
                    for (n, v) in labels.iter() {
                        if let Some(caps) = re.captures(n) {
                            let mut name = String::new();
                            caps.expand(&r.replacement, &mut name);
                            add.push((name, v.clone()));
                        }
                    }
                    labels.extend(add);
                }
            }
        }
        labels.retain(|_, v| !v.is_empty());
        !labels.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|&(n, v)| (n.to_owned(), v.to_owned()))
            .collect()
    }

    fn rules(yaml: &str) -> Relabeler {
        let configs: Vec<RelabelConfig> = serde_yaml_ng::from_str(yaml).expect("yaml");
        Relabeler::new(&configs).expect("valid")
    }

    #[test]
    fn keep_and_drop_match_the_joined_source_values_whole() {
        let r = rules("- {source_labels: [__name__], regex: 'http_.*', action: keep}\n- {source_labels: [job, env], regex: 'api;dev', action: drop}");
        assert!(r.apply(&mut labels(&[
            ("__name__", "http_requests_total"),
            ("job", "api")
        ])));
        assert!(
            !r.apply(&mut labels(&[("__name__", "up")])),
            "keep is anchored"
        );
        assert!(!r.apply(&mut labels(&[("__name__", "xhttp_a")])));
        assert!(!r.apply(&mut labels(&[
            ("__name__", "http_a"),
            ("env", "dev"),
            ("job", "api")
        ])));
    }

    #[test]
    fn replace_expands_groups_and_an_empty_result_removes_the_label() {
        let r = rules(
            "- {source_labels: [instance], regex: '([^:]+):.*', target_label: host, replacement: '${1}'}\n\
             - {source_labels: [secret], regex: '.*', target_label: secret, replacement: ''}",
        );
        let mut l = labels(&[
            ("__name__", "up"),
            ("instance", "web-1:9100"),
            ("secret", "x"),
        ]);
        assert!(r.apply(&mut l));
        assert_eq!(l.get("host").map(String::as_str), Some("web-1"));
        assert!(!l.contains_key("secret"));
    }

    #[test]
    fn labeldrop_labelkeep_and_labelmap_work_on_names() {
        let r = rules(
            "- {regex: 'pod_(.+)', action: labelmap, replacement: 'k8s_$1'}\n\
             - {regex: 'pod_.*', action: labeldrop}",
        );
        let mut l = labels(&[("__name__", "up"), ("pod_name", "a")]);
        assert!(r.apply(&mut l));
        assert_eq!(l, labels(&[("__name__", "up"), ("k8s_name", "a")]));
        let r = rules("- {regex: '__name__|job', action: labelkeep}");
        let mut l = labels(&[("__name__", "up"), ("job", "j"), ("x", "y")]);
        assert!(r.apply(&mut l));
        assert_eq!(l, labels(&[("__name__", "up"), ("job", "j")]));
    }

    #[test]
    fn hashmod_is_prometheus_md5_modulo() {
        // md5("a") = 0cc175b9c0f1b6a8 31c399e269772661; the last 8 bytes
        // big-endian are 0x31c399e269772661.
        let r =
            rules("- {source_labels: [k], modulus: 1000, target_label: shard, action: hashmod}");
        let mut l = labels(&[("k", "a")]);
        assert!(r.apply(&mut l));
        assert_eq!(
            l["shard"],
            (0x31c3_99e2_6977_2661u64 % 1000).to_string(),
            "as Prometheus' relabel.go computes it"
        );
    }

    #[test]
    fn keepequal_dropequal_lowercase_and_uppercase_as_prometheus() {
        let r = rules(
            "- {source_labels: [__name__], target_label: name_lower, action: lowercase}\n\
             - {source_labels: [job, env], separator: '-', target_label: key, action: uppercase}\n\
             - {source_labels: [port], target_label: expected_port, action: keepequal}",
        );
        let mut l = labels(&[
            ("__name__", "HTTP_Requests"),
            ("job", "api"),
            ("env", "prod"),
            ("port", "80"),
            ("expected_port", "80"),
        ]);
        assert!(r.apply(&mut l));
        assert_eq!(l["name_lower"], "http_requests");
        assert_eq!(l["key"], "API-PROD");
        let mut other = labels(&[("__name__", "x"), ("port", "81"), ("expected_port", "80")]);
        assert!(!r.apply(&mut other), "keepequal drops a mismatch");
        // An absent label is the empty value, for both sides.
        let r = rules("- {source_labels: [a], target_label: b, action: dropequal}");
        assert!(!r.apply(&mut labels(&[("__name__", "x")])));
        assert!(r.apply(&mut labels(&[("__name__", "x"), ("a", "1")])));
        assert!(!r.apply(&mut labels(&[("__name__", "x"), ("a", "1"), ("b", "1")])));
    }

    #[test]
    fn mistakes_are_named() {
        for (yaml, says) in [
            ("- {regex: '(', action: keep}", "bad regex"),
            ("- {source_labels: [a]}", "needs a target_label"),
            (
                "- {source_labels: [a], target_label: t, action: hashmod}",
                "modulus",
            ),
            (
                "- {source_labels: [a], action: lowercase}",
                "lowercase needs a target_label",
            ),
            (
                "- {source_labels: [a], target_label: b, regex: 'x', action: keepequal}",
                "not regex or replacement",
            ),
        ] {
            let configs: Vec<RelabelConfig> = serde_yaml_ng::from_str(yaml).expect("yaml");
            let e = Relabeler::new(&configs).expect_err(yaml);
            assert!(e.contains(says), "{yaml}: {e}");
        }
        assert!(serde_yaml_ng::from_str::<Vec<RelabelConfig>>("- {action: labelcopy}").is_err());
    }
}
