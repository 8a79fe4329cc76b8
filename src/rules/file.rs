//! Rule files in Prometheus' format (`model/rulefmt`): `groups:` of
//! recording and alerting rules, read strictly (an unknown field is an
//! error, as Prometheus reads them) and checked as Prometheus checks them,
//! each error naming its file, group and rule.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::promql::guard::ParseLimits;
use crate::promql::parser::text::parse_prom_duration;
use crate::promql::parser::Expr;

/// A group as a rule file declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Its name, unique in its file.
    pub name: String,
    /// The file it came from, as named (part of its identity).
    pub file: String,
    /// How often it is evaluated, in ms (`None`: the global interval).
    pub interval_ms: Option<i64>,
    /// How far back of each evaluation time its queries look (`None`:
    /// the global `--rules-query-offset`).
    pub query_offset_ms: Option<i64>,
    /// Most series (or alerts) one of its rules may give; 0: no limit.
    pub limit: usize,
    /// Its rules, in file order, each with the group's labels merged under
    /// its own.
    pub rules: Vec<RuleSpec>,
}

impl GroupSpec {
    /// Prometheus' key of a group: `file;name`.
    pub fn key(&self) -> String {
        format!("{};{}", self.file, self.name)
    }
}

/// What a rule makes.
#[derive(Debug, Clone, PartialEq)]
pub enum RuleKind {
    /// A recording rule: the series it writes, named `record`.
    Record,
    /// An alerting rule: how long its condition must hold (`for`), how
    /// long it keeps firing once it does not (`keep_firing_for`), and its
    /// annotations.
    Alert {
        /// `for`, in ms.
        for_ms: i64,
        /// `keep_firing_for`, in ms.
        keep_firing_for_ms: i64,
        /// Annotations (templates), by name.
        annotations: BTreeMap<String, String>,
    },
}

/// One rule, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// The recorded series' name, or the alert's.
    pub name: String,
    /// What it is.
    pub kind: RuleKind,
    /// Its expression as written.
    pub expr: String,
    /// Its expression as Prometheus prints it (`Expr.String()`).
    pub query: String,
    /// The group's labels, then the rule's over them.
    pub labels: BTreeMap<String, String>,
}

/// A rule file that could not be loaded: each error names its file, and
/// where it is one of a rule, the group and rule as Prometheus does
/// (`group "g", rule 2, "name": …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct FileErrors(pub Vec<String>);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    groups: Vec<RawGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    #[serde(default)]
    name: String,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    query_offset: Option<String>,
    #[serde(default)]
    limit: i64,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    record: String,
    #[serde(default)]
    alert: String,
    #[serde(default)]
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// A label name as Prometheus 3 takes one in a rule (any non-empty UTF-8,
/// but not `__name__`, which the rule sets).
fn valid_label_name(n: &str) -> bool {
    !n.is_empty() && n != "__name__"
}

/// A duration field: `None` when absent.
fn duration(field: &str, v: &Option<String>) -> Result<Option<i64>, String> {
    match v.as_deref() {
        None => Ok(None),
        Some(s) => parse_prom_duration(s.trim())
            .map(Some)
            .ok_or_else(|| format!("{field}: not a valid duration string: {s:?}")),
    }
}

/// Reads and checks the rule file at `path` (named as `name`).
pub fn load(path: &Path, name: &str, limits: &ParseLimits) -> Result<Vec<GroupSpec>, FileErrors> {
    let text =
        std::fs::read_to_string(path).map_err(|e| FileErrors(vec![format!("{name}: {e}")]))?;
    parse(&text, name, limits)
}

/// Checks the rule file `text` (named `file`), as Prometheus' `rulefmt`
/// does: every problem, not only the first.
pub fn parse(text: &str, file: &str, limits: &ParseLimits) -> Result<Vec<GroupSpec>, FileErrors> {
    let fail = |e: String| FileErrors(vec![format!("{file}: {e}")]);
    // An empty file holds no groups, as in Prometheus.
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let raw: RawFile = serde_yaml_ng::from_str(text).map_err(|e| fail(e.to_string()))?;
    let mut errors = Vec::new();
    let mut groups = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for g in raw.groups {
        let mut err = |e: String| errors.push(format!("{file}: {e}"));
        if g.name.is_empty() {
            err("Groupname must not be empty".into());
        } else if !seen.insert(g.name.clone()) {
            err(format!(
                "groupname: \"{}\" is repeated in the same file",
                g.name
            ));
        }
        for n in g.labels.keys() {
            if !valid_label_name(n) {
                err(format!("invalid label name: {n}"));
            }
        }
        let interval_ms = duration("interval", &g.interval).unwrap_or_else(|e| {
            err(format!("group {:?}: {e}", g.name));
            None
        });
        let query_offset_ms = duration("query_offset", &g.query_offset).unwrap_or_else(|e| {
            err(format!("group {:?}: {e}", g.name));
            None
        });
        let mut rules = Vec::with_capacity(g.rules.len());
        for (i, r) in g.rules.into_iter().enumerate() {
            match rule(r, &g.labels, limits) {
                Ok(spec) => rules.push(spec),
                Err((name, problems)) => {
                    for p in problems {
                        err(format!(
                            "group {:?}, rule {}, {:?}: {p}",
                            g.name,
                            i + 1,
                            name
                        ));
                    }
                }
            }
        }
        groups.push(GroupSpec {
            name: g.name,
            file: file.to_owned(),
            // 0, as absent: the global interval.
            interval_ms: interval_ms.filter(|&ms| ms > 0),
            query_offset_ms,
            limit: usize::try_from(g.limit).unwrap_or(0),
            rules,
        });
    }
    if errors.is_empty() {
        Ok(groups)
    } else {
        Err(FileErrors(errors))
    }
}

/// Checks one rule; its name and every problem when it is not sound.
fn rule(
    r: RawRule,
    group_labels: &BTreeMap<String, String>,
    limits: &ParseLimits,
) -> Result<RuleSpec, (String, Vec<String>)> {
    let mut problems = Vec::new();
    let name = if r.alert.is_empty() {
        r.record.clone()
    } else {
        r.alert.clone()
    };
    match (r.record.is_empty(), r.alert.is_empty()) {
        (false, false) => problems.push("only one of 'record' and 'alert' must be set".into()),
        (true, true) => problems.push("one of 'record' or 'alert' must be set".into()),
        _ => {}
    }
    let mut parsed: Option<Expr> = None;
    if r.expr.is_empty() {
        problems.push("field 'expr' must be set in rule".into());
    } else {
        match crate::promql::guard::parse(&r.expr, limits) {
            Ok(e) => parsed = Some(e),
            Err(e) => problems.push(format!("could not parse expression: {e}")),
        }
    }
    let for_ms = duration("for", &r.for_).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    let keep_ms = duration("keep_firing_for", &r.keep_firing_for).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    if !r.record.is_empty() {
        if !r.annotations.is_empty() {
            problems.push("invalid field 'annotations' in recording rule".into());
        }
        if for_ms.unwrap_or(0) != 0 {
            problems.push("invalid field 'for' in recording rule".into());
        }
        if keep_ms.unwrap_or(0) != 0 {
            problems.push("invalid field 'keep_firing_for' in recording rule".into());
        }
        if r.record.contains('{') || r.record.contains('}') {
            problems.push(format!(
                "braces present in the recording rule name; should it be in expr?: {}",
                r.record
            ));
        }
    }
    for n in r.labels.keys() {
        if !valid_label_name(n) {
            problems.push(format!("invalid label name: {n}"));
        }
    }
    for n in r.annotations.keys() {
        if n.is_empty() {
            problems.push(format!("invalid annotation name: {n}"));
        }
    }
    // An alerting rule's templates are checked at load, as Prometheus
    // parses them.
    if !r.alert.is_empty() {
        for (n, v) in &r.labels {
            if let Err(e) = super::template::check(v) {
                problems.push(format!("label {n:?}: template: __alert_{}: {e}", r.alert));
            }
        }
        for (n, v) in &r.annotations {
            if let Err(e) = super::template::check(v) {
                problems.push(format!(
                    "annotation {n:?}: template: __alert_{}: {e}",
                    r.alert
                ));
            }
        }
    }
    if !problems.is_empty() {
        return Err((name, problems));
    }
    let mut labels = group_labels.clone();
    labels.extend(r.labels);
    let kind = if r.record.is_empty() {
        RuleKind::Alert {
            for_ms: for_ms.unwrap_or(0),
            keep_firing_for_ms: keep_ms.unwrap_or(0),
            annotations: r.annotations,
        }
    } else {
        RuleKind::Record
    };
    let query = parsed.map(|e| e.to_string()).unwrap_or_default();
    Ok(RuleSpec {
        name,
        kind,
        expr: r.expr,
        query,
        labels,
    })
}

/// The files `patterns` name (globs, as Prometheus' `rule_files`), sorted
/// and each once; a pattern that matches nothing names nothing.
pub fn expand(patterns: &[String], files_only: bool) -> Result<Vec<PathBuf>, String> {
    let mut out = std::collections::BTreeSet::new();
    for p in patterns {
        let matched = glob::glob(p).map_err(|e| format!("rule files {p:?}: {e}"))?;
        for m in matched {
            let path = m.map_err(|e| format!("rule files {p:?}: {e}"))?;
            if files_only && (path.is_dir() || hidden(&path)) {
                continue;
            }
            out.insert(path);
        }
    }
    Ok(out.into_iter().collect())
}

/// Whether a file's name starts with a dot (an editor's swap file, say).
fn hidden(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// Reads and checks every file `patterns` name (with `files_only`, every
/// file: directories and names starting with a dot are passed over).
pub fn load_all(
    patterns: &[String],
    files_only: bool,
    limits: &ParseLimits,
) -> Result<Vec<GroupSpec>, FileErrors> {
    let files = expand(patterns, files_only).map_err(|e| FileErrors(vec![e]))?;
    let mut groups = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let name = f.display().to_string();
        match load(&f, &name, limits) {
            Ok(g) => groups.extend(g),
            Err(FileErrors(e)) => errors.extend(e),
        }
    }
    if errors.is_empty() {
        Ok(groups)
    } else {
        Err(FileErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str) -> Result<Vec<GroupSpec>, FileErrors> {
        parse(text, "r.yml", &ParseLimits::default())
    }

    #[test]
    fn a_file_prometheus_accepts_is_read_with_labels_merged() {
        let groups = check(
            r#"
groups:
  - name: g
    interval: 30s
    query_offset: 1m
    limit: 10
    labels: {team: a, env: x}
    rules:
      - record: job:up:sum
        expr: sum by (job) (up)
        labels: {env: y}
      - alert: Down
        expr: up == 0
        for: 5m
        keep_firing_for: 1m
        annotations: {summary: "{{ $labels.job }} is down"}
"#,
        )
        .expect("valid");
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!(
            (g.interval_ms, g.query_offset_ms, g.limit),
            (Some(30_000), Some(60_000), 10)
        );
        assert_eq!(g.key(), "r.yml;g");
        assert_eq!(g.rules[0].name, "job:up:sum");
        assert_eq!(g.rules[0].query, "sum by (job) (up)");
        assert_eq!(
            g.rules[0].labels,
            BTreeMap::from([("env".into(), "y".into()), ("team".into(), "a".into())])
        );
        assert!(matches!(
            g.rules[1].kind,
            RuleKind::Alert {
                for_ms: 300_000,
                keep_firing_for_ms: 60_000,
                ..
            }
        ));
        assert_eq!(check("").expect("empty"), Vec::new());
        assert_eq!(check("groups: []").expect("none"), Vec::new());
    }

    #[test]
    fn each_problem_is_named_with_its_file_group_and_rule() {
        let err = check(
            r#"
groups:
  - name: g
    rules:
      - record: a
        alert: b
        expr: up
      - record: c
        expr: sum(
      - record: d
        expr: up
        for: 1m
        annotations: {x: y}
      - alert: e
      - alert: f
        expr: up
        annotations: {x: "{{ nope }}"}
  - name: g
    rules: []
  - name: ""
"#,
        )
        .expect_err("invalid");
        let want = [
            "r.yml: group \"g\", rule 1, \"b\": only one of 'record' and 'alert' must be set",
            "r.yml: group \"g\", rule 2, \"c\": could not parse expression:",
            "r.yml: group \"g\", rule 3, \"d\": invalid field 'annotations' in recording rule",
            "r.yml: group \"g\", rule 3, \"d\": invalid field 'for' in recording rule",
            "r.yml: group \"g\", rule 4, \"e\": field 'expr' must be set in rule",
            "r.yml: group \"g\", rule 5, \"f\": annotation \"x\": template: __alert_f: function \"nope\" not defined",
            "r.yml: groupname: \"g\" is repeated in the same file",
            "r.yml: Groupname must not be empty",
        ];
        assert_eq!(err.0.len(), want.len(), "{err:?}");
        for (got, want) in err.0.iter().zip(want) {
            assert!(got.starts_with(want), "{got:?} is not {want:?}");
        }
        // Unknown fields are errors, as Prometheus reads rule files.
        let err = check("groups:\n  - name: g\n    evaluation: 1m\n").expect_err("strict");
        assert!(err.0[0].contains("evaluation"), "{err:?}");
        let err = check("groups:\n  - name: g\n    interval: 1x\n").expect_err("duration");
        assert!(err.0[0].contains("interval"), "{err:?}");
    }
}
