//! HA-pair deduplication, as Mimir's HA tracker does it: Prometheus servers
//! run in pairs that scrape the same targets, each with
//! `external_labels: {cluster: c1, __replica__: r1}` (`r2` on the other),
//! and both write. Per tenant and cluster, the first replica seen is
//! elected; a request whose first series names another replica of that
//! cluster is answered 202 and nothing of it is stored; the elected one's
//! series lose the replica label, so both replicas' series are one series.
//! When the elected replica has sent nothing for the failover timeout, the
//! next replica that writes is elected.
//!
//! The election is kept in the tenant's directory (`ha-tracker.json`,
//! written when it changes), so a restart does not flip replicas: an
//! elected replica read back at start counts as seen at that moment.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use super::relabel::Rules;
use crate::relabel::{Action, RelabelConfig};

/// How one tenant's requests are checked.
#[derive(Debug, Clone)]
pub struct HaConfig {
    /// The label naming a request's cluster (Mimir's default `cluster`).
    pub cluster_label: Arc<str>,
    /// The label naming its replica (`__replica__`), removed from what is
    /// stored.
    pub replica_label: Arc<str>,
    /// How long the elected replica may be silent before another is.
    pub failover_ms: i64,
    /// Most clusters tracked for the tenant; a request naming one more is
    /// refused (400).
    pub max_clusters: usize,
}

/// What to do with a request, from its first series' labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No cluster or no replica label: stored as sent.
    NotHa,
    /// From the elected replica: stored, without the replica label.
    Accept,
    /// From a replica that is not elected: answered 202, not stored.
    Dedupe(String),
    /// Naming a cluster past the tenant's `ha_max_clusters`.
    TooManyClusters(String),
}

/// The replica elected for one cluster.
#[derive(Debug, Clone)]
struct Elected {
    replica: String,
    /// When it last wrote, in Unix milliseconds.
    seen_ms: i64,
}

/// One tenant's elections.
#[derive(Debug, Default)]
pub struct HaTracker {
    clusters: Mutex<HashMap<String, Elected>>,
    /// Where the election is kept; `None` without a data directory.
    path: Option<PathBuf>,
    /// The rule that removes the replica label, compiled once per name.
    strip: Mutex<Option<(Arc<str>, Arc<Rules>)>>,
}

/// The file's name in a tenant's directory.
pub const FILE: &str = "ha-tracker.json";

impl HaTracker {
    /// The tracker kept at `path`, with what it held read back; each
    /// elected replica counts as seen at `now_ms`. A file that cannot be
    /// read is said so and started afresh.
    pub fn open(path: Option<PathBuf>, now_ms: i64) -> Self {
        let mut clusters = HashMap::new();
        if let Some(p) = &path {
            match std::fs::read(p) {
                Ok(bytes) => match serde_json::from_slice::<HashMap<String, String>>(&bytes) {
                    Ok(held) => {
                        clusters.extend(held.into_iter().map(|(cluster, replica)| {
                            (
                                cluster,
                                Elected {
                                    replica,
                                    seen_ms: now_ms,
                                },
                            )
                        }));
                    }
                    Err(e) => {
                        tracing::warn!(file = %p.display(), error = %e,
                            "the HA tracker's elections cannot be read; each cluster elects again");
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %p.display(), error = %e,
                        "the HA tracker's elections cannot be read; each cluster elects again");
                }
            }
        }
        Self {
            clusters: Mutex::new(clusters),
            path,
            strip: Mutex::default(),
        }
    }

    /// Checks a request whose first series has `labels` (as sent) at
    /// `now_ms`, electing or failing over as needed.
    pub fn check(&self, labels: &[(&[u8], &[u8])], config: &HaConfig, now_ms: i64) -> Verdict {
        let find = |name: &str| {
            labels
                .iter()
                .find(|(n, v)| *n == name.as_bytes() && !v.is_empty())
                .map(|(_, v)| String::from_utf8_lossy(v))
        };
        let (Some(cluster), Some(replica)) =
            (find(&config.cluster_label), find(&config.replica_label))
        else {
            return Verdict::NotHa;
        };
        let mut clusters = self.clusters.lock();
        let full = clusters.len() >= config.max_clusters;
        let changed = match clusters.get_mut(cluster.as_ref()) {
            Some(e) if e.replica == replica => {
                e.seen_ms = e.seen_ms.max(now_ms);
                return Verdict::Accept;
            }
            Some(e) if now_ms.saturating_sub(e.seen_ms) <= config.failover_ms => {
                return Verdict::Dedupe(format!(
                    "replicas did not match, samples not stored: cluster={cluster:?} \
                     replica={replica:?}, elected={:?}",
                    e.replica
                ));
            }
            Some(e) => {
                tracing::info!(%cluster, from = %e.replica, to = %replica,
                    silent_ms = now_ms.saturating_sub(e.seen_ms), "HA tracker failed over");
                *e = Elected {
                    replica: replica.into_owned(),
                    seen_ms: now_ms,
                };
                true
            }
            None if full => {
                return Verdict::TooManyClusters(format!(
                    "too many HA clusters (limit: {}, ha_max_clusters); cluster {cluster:?} not stored",
                    config.max_clusters
                ));
            }
            None => {
                clusters.insert(
                    cluster.into_owned(),
                    Elected {
                        replica: replica.into_owned(),
                        seen_ms: now_ms,
                    },
                );
                true
            }
        };
        if changed {
            self.keep(&clusters);
        }
        Verdict::Accept
    }

    /// Writes the elections to the file (a new file renamed over the old
    /// one); a failure is said, and the election holds in memory.
    fn keep(&self, clusters: &HashMap<String, Elected>) {
        let Some(path) = &self.path else { return };
        let held: HashMap<&str, &str> = clusters
            .iter()
            .map(|(c, e)| (c.as_str(), e.replica.as_str()))
            .collect();
        let tmp = path.with_extension("json.tmp");
        let written = serde_json::to_vec(&held)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            tracing::warn!(file = %path.display(), error = %e,
                "the HA tracker's election was not kept; a restart may elect another replica");
        }
    }

    /// The rule that removes `replica_label` (compiled once per name);
    /// `None` if a name that long makes no regex.
    pub fn strip_rule(&self, replica_label: &Arc<str>) -> Option<Arc<Rules>> {
        let mut strip = self.strip.lock();
        if let Some((name, rules)) = strip.as_ref() {
            if name == replica_label {
                return Some(Arc::clone(rules));
            }
        }
        let rule = RelabelConfig {
            regex: regex::escape(replica_label),
            action: Action::Labeldrop,
            ..RelabelConfig::default()
        };
        let rules = Rules::compile(&[rule]).ok().flatten()?;
        *strip = Some((Arc::clone(replica_label), Arc::clone(&rules)));
        Some(rules)
    }

    /// Each cluster and its elected replica, sorted.
    pub fn elected(&self) -> Vec<(String, String)> {
        let mut out: Vec<_> = self
            .clusters
            .lock()
            .iter()
            .map(|(c, e)| (c.clone(), e.replica.clone()))
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HaConfig {
        HaConfig {
            cluster_label: "cluster".into(),
            replica_label: "__replica__".into(),
            failover_ms: 30_000,
            max_clusters: 2,
        }
    }

    fn labels<'a>(cluster: &'a str, replica: &'a str) -> Vec<(&'a [u8], &'a [u8])> {
        vec![
            (b"__name__".as_slice(), b"up".as_slice()),
            (b"cluster".as_slice(), cluster.as_bytes()),
            (b"__replica__".as_slice(), replica.as_bytes()),
        ]
    }

    #[test]
    fn first_replica_is_elected_the_other_deduped_until_failover() {
        let t = HaTracker::default();
        let c = config();
        assert_eq!(t.check(&labels("c1", "r1"), &c, 0), Verdict::Accept);
        assert!(matches!(
            t.check(&labels("c1", "r2"), &c, 10_000),
            Verdict::Dedupe(m) if m.contains("elected=\"r1\"")
        ));
        assert_eq!(t.check(&labels("c1", "r1"), &c, 20_000), Verdict::Accept);
        // 30 s after r1's last write is still within the timeout.
        assert!(matches!(
            t.check(&labels("c1", "r2"), &c, 50_000),
            Verdict::Dedupe(_)
        ));
        assert_eq!(t.check(&labels("c1", "r2"), &c, 50_001), Verdict::Accept);
        assert!(matches!(
            t.check(&labels("c1", "r1"), &c, 50_002),
            Verdict::Dedupe(_)
        ));
        // Another cluster elects on its own; a third is past the limit.
        assert_eq!(t.check(&labels("c2", "r1"), &c, 0), Verdict::Accept);
        assert!(matches!(
            t.check(&labels("c3", "r1"), &c, 0),
            Verdict::TooManyClusters(m) if m.contains("limit: 2")
        ));
        // Without either label, or with an empty one: not an HA request.
        let plain: Vec<(&[u8], &[u8])> = vec![(b"cluster", b"c1")];
        assert_eq!(t.check(&plain, &c, 0), Verdict::NotHa);
        assert_eq!(t.check(&labels("c1", ""), &c, 0), Verdict::NotHa);
    }

    #[test]
    fn the_election_survives_a_restart_and_a_bad_file_starts_afresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        let c = config();
        let t = HaTracker::open(Some(path.clone()), 0);
        assert_eq!(t.check(&labels("c1", "r2"), &c, 0), Verdict::Accept);
        drop(t);
        // Long after r2's last write: read back, it counts as seen now.
        let t = HaTracker::open(Some(path.clone()), 1_000_000);
        assert_eq!(t.elected(), [("c1".to_owned(), "r2".to_owned())]);
        assert!(matches!(
            t.check(&labels("c1", "r1"), &c, 1_000_001),
            Verdict::Dedupe(_)
        ));
        std::fs::write(&path, b"{not json").expect("damage");
        let t = HaTracker::open(Some(path), 0);
        assert!(t.elected().is_empty());
        assert_eq!(t.check(&labels("c1", "r1"), &c, 0), Verdict::Accept);
    }

    #[test]
    fn the_strip_rule_removes_exactly_the_replica_label() {
        let t = HaTracker::default();
        let name: Arc<str> = "__replica__".into();
        let rules = t.strip_rule(&name).expect("compiles");
        assert!(
            Arc::ptr_eq(&rules, &t.strip_rule(&name).expect("compiles")),
            "compiled once"
        );
        let r = super::super::relabel::Relabel::default().first(rules);
        let out = r.apply(&labels("c1", "r1")).expect("valid").expect("kept");
        assert_eq!(
            out,
            vec![
                ("__name__".to_owned(), "up".to_owned()),
                ("cluster".to_owned(), "c1".to_owned())
            ]
        );
        let dotted: Arc<str> = "a.b".into();
        let r =
            super::super::relabel::Relabel::default().first(t.strip_rule(&dotted).expect("rule"));
        let sent: Vec<(&[u8], &[u8])> = vec![(b"__name__", b"x"), (b"axb", b"1"), (b"a.b", b"2")];
        let out = r.apply(&sent).expect("valid").expect("kept");
        assert_eq!(out.len(), 2, "only the label named, not a regex match");
    }
}
