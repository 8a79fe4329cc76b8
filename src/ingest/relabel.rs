//! Relabelling at the door: the server's rules (`--ingest-relabel-config`)
//! and then the tenant's (`metric_relabel_configs` in the runtime
//! config), applied to a series' labels as sent, before they are checked
//! and stored. The engine is `crate::relabel`, shared with forwarding.
//!
//! Rules are a pure function of a series' labels, so their outcome is
//! worked out once per series, not per request: the protocol keys the
//! series by its labels as sent (remote write 1.0: a hash of its label
//! bytes; 2.0: its symbol key), salted by the rules in force, and the
//! head's alias table maps the key to the relabelled series, or to
//! [`SeriesRef::NOT_STORED`] when the rules drop it. New rules come with a
//! new salt, so what older rules decided is never found again and ages
//! out of the table.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::validate::LabelError;
use crate::relabel::{RelabelConfig, Relabeler};

/// One list of rules, compiled, and the salt that keys what it decided.
#[derive(Debug)]
pub struct Rules {
    configs: Vec<RelabelConfig>,
    relabeler: Relabeler,
    salt: u128,
}

impl Rules {
    /// Compiles `configs`; `None` when there are none. The error names the
    /// rule and what is wrong with it.
    pub fn compile(configs: &[RelabelConfig]) -> Result<Option<Arc<Self>>, String> {
        if configs.is_empty() {
            return Ok(None);
        }
        let relabeler = Relabeler::new(configs)?;
        Ok(Some(Arc::new(Self {
            configs: configs.to_vec(),
            relabeler,
            salt: fresh_salt(),
        })))
    }

    /// [`Rules::compile`], keeping `old` when it holds the same rules: a
    /// reload that changes nothing keeps what the rules decided before.
    pub fn compile_over(
        configs: &[RelabelConfig],
        old: Option<&Arc<Self>>,
    ) -> Result<Option<Arc<Self>>, String> {
        match old {
            Some(old) if old.configs == configs => Ok(Some(Arc::clone(old))),
            _ => Self::compile(configs),
        }
    }

    /// Reads a file holding a YAML list of Prometheus `relabel_configs`
    /// (an empty file has none), keeping `old` if it holds the same.
    pub fn load(
        path: &std::path::Path,
        old: Option<&Arc<Self>>,
    ) -> Result<Option<Arc<Self>>, String> {
        let fail = |e: String| format!("relabel config file {}: {e}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Self::compile_over(&Self::configs(&text).map_err(fail)?, old).map_err(fail)
    }

    /// Parses and compiles a YAML list of `relabel_configs`.
    pub fn parse(text: &str) -> Result<Option<Arc<Self>>, String> {
        Self::compile(&Self::configs(text)?)
    }

    fn configs(text: &str) -> Result<Vec<RelabelConfig>, String> {
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_yaml_ng::from_str(text).map_err(|e| format!("not a list of relabel_configs: {e}"))
    }
}

/// A random, nonzero salt per compiled list of rules.
fn fresh_salt() -> u128 {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    let (a, b) = (state.hash_one(1u8), state.hash_one(2u8));
    (u128::from(a) << 64 | u128::from(b)) | 1
}

/// What one tenant's series pass through: the server's rules, then the
/// tenant's. Cheap to clone; the default changes nothing.
#[derive(Debug, Clone, Default)]
pub struct Relabel {
    /// The HA tracker's removal of the replica label, the server's rules,
    /// the tenant's, in the order they run.
    stages: [Option<Arc<Rules>>; 3],
    salt: u128,
}

impl Relabel {
    /// The server's rules, then the tenant's.
    pub fn new(server: Option<Arc<Rules>>, tenant: Option<Arc<Rules>>) -> Self {
        let salt = server.as_ref().map_or(0, |r| r.salt)
            ^ tenant.as_ref().map_or(0, |r| r.salt.rotate_left(64));
        Self {
            stages: [None, server, tenant],
            salt,
        }
    }

    /// These rules with `first` run before them (the HA tracker's removal
    /// of the replica label, which Mimir also does before relabelling).
    pub fn first(&self, first: Arc<Rules>) -> Self {
        let salt = self.salt ^ first.salt.rotate_left(32);
        let [_, server, tenant] = self.stages.clone();
        Self {
            stages: [Some(first), server, tenant],
            salt,
        }
    }

    /// Whether no rule applies: series are stored as sent.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.stages.iter().all(Option::is_none)
    }

    /// The key of a series whose label bytes, as sent, are `sent`.
    #[inline]
    pub fn key_of_bytes(&self, sent: &[u8]) -> u128 {
        xxhash_rust::xxh3::xxh3_128_with_seed(sent, self.salt as u64) ^ self.salt
    }

    /// The key of a series a protocol already keys by `key`.
    #[inline]
    pub fn key_of_key(&self, key: u128) -> u128 {
        key ^ self.salt
    }

    /// The labels `sent` (name, value pairs as sent) after the rules,
    /// sorted by name; `None` when a rule drops the series, or none is
    /// left. Empty values are absent labels, as Prometheus has them.
    pub fn apply(
        &self,
        sent: &[(&[u8], &[u8])],
    ) -> Result<Option<Vec<(String, String)>>, LabelError> {
        let mut labels = BTreeMap::new();
        for &(name, value) in sent {
            if value.is_empty() {
                continue;
            }
            let (Ok(n), Ok(v)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
                return Err(LabelError::InvalidUtf8);
            };
            if labels.insert(n.to_owned(), v.to_owned()).is_some() {
                return Err(LabelError::DuplicateLabelName);
            }
        }
        for rules in self.stages.iter().flatten() {
            if !rules.relabeler.apply(&mut labels) {
                return Ok(None);
            }
        }
        Ok(Some(labels.into_iter().collect()))
    }
}

/// Labels after the rules, borrowed as the pipeline takes them.
pub(super) fn as_raw(labels: &[(String, String)]) -> Vec<(&[u8], &[u8])> {
    labels
        .iter()
        .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs<'a>(l: &'a [(&'a str, &'a str)]) -> Vec<(&'a [u8], &'a [u8])> {
        l.iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect()
    }

    #[test]
    fn server_rules_run_before_the_tenants_and_either_can_drop() {
        let server = Rules::parse("- {regex: 'secret', action: labeldrop}\n").expect("rules");
        let tenant = Rules::parse(
            "- {source_labels: [__name__], regex: 'noisy_.*', action: drop}\n\
             - {source_labels: [secret], regex: '(.+)', target_label: leaked, replacement: '$1'}\n",
        )
        .expect("rules");
        let r = Relabel::new(server, tenant);
        let out = r
            .apply(&pairs(&[("__name__", "up"), ("secret", "s"), ("job", "j")]))
            .expect("valid");
        // The server's labeldrop ran first: nothing left to copy.
        assert_eq!(
            out,
            Some(vec![
                ("__name__".into(), "up".into()),
                ("job".into(), "j".into())
            ])
        );
        assert_eq!(r.apply(&pairs(&[("__name__", "noisy_x")])), Ok(None));
        assert_eq!(
            r.apply(&pairs(&[("__name__", "a"), ("__name__", "b")])),
            Err(LabelError::DuplicateLabelName)
        );
        assert_eq!(
            r.apply(&[(b"__name__".as_slice(), b"\xff".as_slice())]),
            Err(LabelError::InvalidUtf8)
        );
    }

    #[test]
    fn keys_differ_between_rule_sets_and_from_no_rules() {
        let a = Relabel::new(
            Rules::parse("- {regex: x, action: labeldrop}").expect("a"),
            None,
        );
        let b = Relabel::new(
            Rules::parse("- {regex: x, action: labeldrop}").expect("b"),
            None,
        );
        let none = Relabel::default();
        assert!(none.is_empty() && !a.is_empty());
        let sent = b"\x08__name__\x02up";
        assert_ne!(a.key_of_bytes(sent), b.key_of_bytes(sent));
        assert_ne!(a.key_of_key(7), none.key_of_key(7));
        assert_eq!(none.key_of_key(7), 7);
        assert_eq!(a.key_of_bytes(sent), a.key_of_bytes(sent));
    }

    #[test]
    fn mistakes_are_named() {
        assert!(Rules::parse("- {regex: '(', action: keep}")
            .expect_err("bad regex")
            .contains("bad regex"));
        assert!(Rules::parse("action: keep")
            .expect_err("not a list")
            .contains("not a list"));
        assert!(Rules::parse("  \n").expect("empty").is_none());
    }
}
