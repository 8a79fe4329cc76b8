//! The runtime configuration file (`--runtime-config.file`, Mimir's
//! `-runtime-config.file`): per-tenant limits under Mimir's names, so
//! existing overrides port, and which logins may use which tenants.
//!
//! ```yaml
//! limits:                      # every tenant's, unless overridden
//!   ingestion_rate: 50000      # samples and histograms per second
//!   ingestion_burst_size: 500000
//! overrides:
//!   team-a:
//!     max_global_series_per_user: 200000
//! identities:                  # basic-auth user: tenants it may use
//!   alice: [team-a]
//!   grafana: [{tenant: team-a, access: read}, {tenant: team-b, access: read}]
//! ```
//!
//! Unknown keys are errors, so a misspelt limit is never silently
//! ignored. This module reads and checks the file; tenant IDs are checked
//! and the limits enforced in `api::limits`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The runtime configuration file, parsed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Every tenant's limits, where `overrides` says nothing.
    #[serde(default)]
    pub limits: LimitsPatch,
    /// Per tenant: the limits that differ from `limits`.
    #[serde(default)]
    pub overrides: BTreeMap<String, LimitsPatch>,
    /// Basic-auth user name to the tenants it may use. Absent: any
    /// identity may use any tenant. Present but empty (`identities:` or
    /// `{}`), it binds no one to anything: never read as "open to all".
    #[serde(default, deserialize_with = "some_map")]
    pub identities: Option<BTreeMap<String, Vec<Binding>>>,
}

/// Limits as written: each one set or left to what is under it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPatch {
    /// Samples and histogram samples per second (0: no limit).
    pub ingestion_rate: Option<f64>,
    /// The most a tenant may send at once; a request larger than this can
    /// never pass.
    pub ingestion_burst_size: Option<u64>,
    /// Most series the tenant holds in memory (0: `--max-series`).
    pub max_global_series_per_user: Option<u64>,
    /// Most series of one metric name the tenant holds (0: no limit).
    pub max_global_series_per_metric: Option<u64>,
    /// Most exemplars the tenant holds, newest kept (0: none, as Mimir;
    /// unset: `--max-exemplars`). `max_exemplars` is taken too.
    #[serde(alias = "max_exemplars")]
    pub max_global_exemplars_per_user: Option<u64>,
    /// Most labels per series, `__name__` included (0:
    /// `--max-labels-per-series`).
    pub max_label_names_per_series: Option<u64>,
    /// Most samples one query may hold (0: `--query-max-samples`).
    pub max_query_samples: Option<u64>,
    /// Most of the tenant's queries evaluated at once; more wait for one
    /// of its own to end (0: only `--query-max-concurrency` bounds them).
    pub max_query_concurrency: Option<u64>,
    /// Prometheus `relabel_configs` applied to the tenant's series as they
    /// arrive, after the server's `--ingest-relabel-config`. A tenant's
    /// list replaces the one in `limits`, as Mimir's does.
    pub metric_relabel_configs: Option<Vec<crate::relabel::RelabelConfig>>,
    /// How far behind the tenant's newest sample a late one is still
    /// taken (unset: `--out-of-order-time-window`), e.g. `10m`.
    #[serde(default, with = "humantime_serde")]
    pub out_of_order_time_window: Option<std::time::Duration>,
    /// Most rule groups in the tenant's rule directory (0: no limit), as
    /// Mimir's ruler; past it the directory's files are refused and the
    /// rules in force kept.
    pub ruler_max_rule_groups_per_tenant: Option<u64>,
    /// Most rules in one of the tenant's rule groups (0: no limit).
    pub ruler_max_rules_per_rule_group: Option<u64>,
    /// Deduplicate the tenant's HA pairs (unset: `--ha-tracker`).
    pub accept_ha_samples: Option<bool>,
    /// The label naming an HA pair's cluster (unset: `--ha-cluster-label`).
    pub ha_cluster_label: Option<String>,
    /// The label naming its replica (unset: `--ha-replica-label`).
    pub ha_replica_label: Option<String>,
    /// Most HA clusters tracked (unset: `--ha-max-clusters`).
    pub ha_max_clusters: Option<u64>,
}

/// One tenant's limits in force. Zero means "no limit beyond the server's
/// flags".
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantLimits {
    /// Samples and histogram samples per second.
    pub ingestion_rate: f64,
    /// The token bucket's size.
    pub ingestion_burst_size: u64,
    /// Most series held.
    pub max_global_series_per_user: u64,
    /// Most series of one metric name held.
    pub max_global_series_per_metric: u64,
    /// Most exemplars held; `None`: the server's `--max-exemplars`.
    pub max_global_exemplars_per_user: Option<u64>,
    /// Most labels per series.
    pub max_label_names_per_series: u64,
    /// Most samples per query.
    pub max_query_samples: u64,
    /// Most queries at once.
    pub max_query_concurrency: u64,
    /// The out-of-order window; `None`: the flag's.
    pub out_of_order_time_window: Option<std::time::Duration>,
    /// Most rule groups of its rule directory (0: no limit).
    pub ruler_max_rule_groups_per_tenant: u64,
    /// Most rules in one of its rule groups (0: no limit).
    pub ruler_max_rules_per_rule_group: u64,
}

impl Default for TenantLimits {
    /// No limits but the flags'; the burst is Mimir's default, used once a
    /// rate is set.
    fn default() -> Self {
        Self {
            ingestion_rate: 0.0,
            ingestion_burst_size: 200_000,
            max_global_series_per_user: 0,
            max_global_series_per_metric: 0,
            max_global_exemplars_per_user: None,
            max_label_names_per_series: 0,
            max_query_samples: 0,
            max_query_concurrency: 0,
            out_of_order_time_window: None,
            ruler_max_rule_groups_per_tenant: 0,
            ruler_max_rules_per_rule_group: 0,
        }
    }
}

impl TenantLimits {
    /// These limits with `patch`'s set values over them.
    pub fn patched(self, patch: &LimitsPatch) -> Self {
        Self {
            ingestion_rate: patch.ingestion_rate.unwrap_or(self.ingestion_rate),
            ingestion_burst_size: patch
                .ingestion_burst_size
                .unwrap_or(self.ingestion_burst_size),
            max_global_series_per_user: patch
                .max_global_series_per_user
                .unwrap_or(self.max_global_series_per_user),
            max_global_series_per_metric: patch
                .max_global_series_per_metric
                .unwrap_or(self.max_global_series_per_metric),
            max_global_exemplars_per_user: patch
                .max_global_exemplars_per_user
                .or(self.max_global_exemplars_per_user),
            max_label_names_per_series: patch
                .max_label_names_per_series
                .unwrap_or(self.max_label_names_per_series),
            max_query_samples: patch.max_query_samples.unwrap_or(self.max_query_samples),
            max_query_concurrency: patch
                .max_query_concurrency
                .unwrap_or(self.max_query_concurrency),
            out_of_order_time_window: patch
                .out_of_order_time_window
                .or(self.out_of_order_time_window),
            ruler_max_rule_groups_per_tenant: patch
                .ruler_max_rule_groups_per_tenant
                .unwrap_or(self.ruler_max_rule_groups_per_tenant),
            ruler_max_rules_per_rule_group: patch
                .ruler_max_rules_per_rule_group
                .unwrap_or(self.ruler_max_rules_per_rule_group),
        }
    }

    /// Why these limits cannot be enforced, if they cannot.
    fn check(&self) -> Result<(), String> {
        if !self.ingestion_rate.is_finite() || self.ingestion_rate < 0.0 {
            return Err(format!(
                "ingestion_rate must be a number of samples per second, 0 or more, not {}",
                self.ingestion_rate
            ));
        }
        if self.ingestion_rate > 0.0 && self.ingestion_burst_size == 0 {
            return Err(
                "ingestion_burst_size must be above 0 when ingestion_rate is set: \
                 no request could ever pass"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What an identity may do in a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Queries and every other read.
    Read,
    /// Remote write and OTLP.
    Write,
    /// Both.
    ReadWrite,
}

impl Access {
    /// Whether this access allows a write (`write`) or a read.
    pub fn allows(self, write: bool) -> bool {
        match self {
            Access::ReadWrite => true,
            Access::Write => write,
            Access::Read => !write,
        }
    }
}

/// A tenant an identity may use: its ID alone (read and write), or with
/// an access.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Binding {
    /// Read and write.
    Tenant(String),
    /// As `access` says.
    Scoped {
        /// The tenant ID.
        tenant: String,
        /// What the identity may do there.
        #[serde(default = "read_write")]
        access: Access,
    },
}

fn some_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, Vec<Binding>>>, D::Error> {
    BTreeMap::deserialize(d).map(Some)
}

fn read_write() -> Access {
    Access::ReadWrite
}

impl Binding {
    /// The tenant ID and the access.
    pub fn parts(&self) -> (&str, Access) {
        match self {
            Binding::Tenant(t) => (t, Access::ReadWrite),
            Binding::Scoped { tenant, access } => (tenant, *access),
        }
    }
}

/// Why a runtime configuration file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("runtime config file {path}: {message}")]
pub struct RuntimeConfigError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl RuntimeConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, RuntimeConfigError> {
        let fail = |message: String| RuntimeConfigError {
            path: path.to_owned(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        Self::parse(&text).map_err(fail)
    }

    /// Parses and checks `text`. An empty file is no limits and no
    /// bindings.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let config: Self = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        config
            .defaults()
            .check()
            .map_err(|e| format!("limits: {e}"))?;
        let rules = |patch: &LimitsPatch| {
            patch
                .metric_relabel_configs
                .as_deref()
                .map_or(Ok(()), |r| crate::relabel::Relabeler::new(r).map(|_| ()))
        };
        rules(&config.limits).map_err(|e| format!("limits: metric_relabel_configs: {e}"))?;
        let names = |patch: &LimitsPatch| {
            let empty = |n: &Option<String>| n.as_deref().is_some_and(str::is_empty);
            match empty(&patch.ha_cluster_label) || empty(&patch.ha_replica_label) {
                true => Err("ha_cluster_label and ha_replica_label must name a label"),
                false => Ok(()),
            }
        };
        names(&config.limits).map_err(|e| format!("limits: {e}"))?;
        for (tenant, patch) in &config.overrides {
            config
                .defaults()
                .patched(patch)
                .check()
                .map_err(|e| format!("overrides: {tenant}: {e}"))?;
            rules(patch)
                .map_err(|e| format!("overrides: {tenant}: metric_relabel_configs: {e}"))?;
            names(patch).map_err(|e| format!("overrides: {tenant}: {e}"))?;
        }
        Ok(config)
    }

    /// The limits of a tenant without overrides.
    pub fn defaults(&self) -> TenantLimits {
        TenantLimits::default().patched(&self.limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mimir_names_parse_and_overrides_patch_the_defaults() {
        let c = RuntimeConfig::parse(
            "limits:\n  ingestion_rate: 1000\noverrides:\n  team-a:\n    ingestion_burst_size: 5000\n    max_global_series_per_user: 10\n\
             identities:\n  alice: [team-a]\n  bob: [{tenant: team-b, access: read}, {tenant: team-a}]\n",
        )
        .expect("parses");
        assert_eq!(c.defaults().ingestion_rate, 1000.0);
        assert_eq!(c.defaults().ingestion_burst_size, 200_000);
        let a = c.defaults().patched(&c.overrides["team-a"]);
        assert_eq!(
            (
                a.ingestion_rate,
                a.ingestion_burst_size,
                a.max_global_series_per_user
            ),
            (1000.0, 5000, 10)
        );
        let more = RuntimeConfig::parse(
            "limits:\n  max_global_series_per_metric: 7\n  max_exemplars: 3\n\
             overrides:\n  t:\n    max_global_exemplars_per_user: 0\n",
        )
        .expect("parses");
        let d = more.defaults();
        assert_eq!(
            (
                d.max_global_series_per_metric,
                d.max_global_exemplars_per_user
            ),
            (7, Some(3))
        );
        let t = d.patched(&more.overrides["t"]);
        assert_eq!(t.max_global_exemplars_per_user, Some(0));
        assert_eq!(
            TenantLimits::default().max_global_exemplars_per_user,
            None,
            "unset: the server's --max-exemplars"
        );
        let ids = c.identities.expect("identities");
        assert_eq!(ids["alice"][0].parts(), ("team-a", Access::ReadWrite));
        assert_eq!(ids["bob"][0].parts(), ("team-b", Access::Read));
        assert_eq!(ids["bob"][1].parts(), ("team-a", Access::ReadWrite));
        assert!(Access::Read.allows(false) && !Access::Read.allows(true));
        assert!(Access::Write.allows(true) && !Access::Write.allows(false));
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("limits:\n  ingestion_rat: 5\n", "ingestion_rat"),
            ("limits:\n  ingestion_rate: -1\n", "ingestion_rate"),
            ("limits:\n  ingestion_rate: .nan\n", "ingestion_rate"),
            ("limits:\n  ingestion_rate: .inf\n", "ingestion_rate"),
            (
                "limits:\n  ingestion_burst_size: -5\n",
                "ingestion_burst_size",
            ),
            (
                "limits:\n  max_global_series_per_user: 1e30\n",
                "max_global_series_per_user",
            ),
            (
                "overrides:\n  t:\n    ingestion_rate: 5\n    ingestion_burst_size: 0\n",
                "overrides: t: ingestion_burst_size",
            ),
            ("identities:\n  alice: [{tenant: a, access: admin}]\n", ""),
            ("nonsense: 1\n", "nonsense"),
            // The issue-34 settings: an empty label name, a negative or
            // unreadable window, a rule that does not compile, a negative
            // cluster count.
            ("limits:\n  ha_replica_label: ''\n", "ha_replica_label"),
            (
                "overrides:\n  t:\n    ha_cluster_label: ''\n",
                "overrides: t: ha_cluster_label",
            ),
            (
                "limits:\n  out_of_order_time_window: -5m\n",
                "out_of_order_time_window",
            ),
            (
                "limits:\n  out_of_order_time_window: soon\n",
                "out_of_order_time_window",
            ),
            (
                "limits:\n  metric_relabel_configs: [{regex: '(', action: drop}]\n",
                "limits: metric_relabel_configs",
            ),
            ("limits:\n  ha_max_clusters: -1\n", "ha_max_clusters"),
        ] {
            let err = RuntimeConfig::parse(text).expect_err(text);
            assert!(err.contains(says), "{text}: {err}");
        }
        assert_eq!(RuntimeConfig::parse("\n"), Ok(RuntimeConfig::default()));
        // Absurd but meaningful values are taken: a rate no one reaches, a
        // burst of every sample there is.
        let huge = RuntimeConfig::parse(
            "limits:\n  ingestion_rate: 1e30\n  ingestion_burst_size: 18446744073709551615\n",
        )
        .expect("parses");
        assert_eq!(huge.defaults().ingestion_burst_size, u64::MAX);
        // A window of centuries is taken (it saturates in milliseconds).
        let wide =
            RuntimeConfig::parse("limits:\n  out_of_order_time_window: 100000y\n").expect("parses");
        assert!(wide
            .defaults()
            .out_of_order_time_window
            .is_some_and(|d| d.as_secs() > 3_000_000_000_000));
        // An empty `identities:` binds no one to anything; it never opens
        // every tenant to every login.
        let empty = RuntimeConfig::parse("identities:\n").expect("parses");
        assert_eq!(empty.identities, Some(BTreeMap::new()));
    }
}
