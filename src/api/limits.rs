//! Per-tenant limits and the bindings of logins to tenants, as the runtime
//! configuration file (`config::runtime`) puts them in force: each
//! tenant's rate (its token bucket is `api::bucket`), series, label and
//! query-sample limits, and which identity may read or write which tenant.
//! A reload swaps them whole; a request reads them once.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use super::auth::Identity;
use super::tenant::TenantId;
use crate::config::runtime::{Access, LimitsPatch, RuntimeConfig, TenantLimits};
use crate::ingest::ha::HaConfig;
use crate::ingest::relabel::{Relabel, Rules};

/// The limits and bindings in force.
#[derive(Debug, Default)]
pub struct InForce {
    defaults: TenantLimits,
    overrides: HashMap<TenantId, TenantLimits>,
    /// Every tenant's `metric_relabel_configs`, compiled.
    relabel_default: Option<Arc<Rules>>,
    /// Those of tenants whose overrides give their own.
    relabel_overrides: HashMap<TenantId, Option<Arc<Rules>>>,
    /// Every tenant's HA tracker settings, where set.
    ha_default: HaPatch,
    /// Those of tenants with overrides, over `ha_default`.
    ha_overrides: HashMap<TenantId, HaPatch>,
    /// User name to the tenants it may use; `None`: anyone may use any.
    bindings: Option<HashMap<String, Vec<(TenantId, Access)>>>,
}

impl InForce {
    /// What `config` puts in force; the error names a tenant ID that is
    /// not one.
    pub fn new(config: &RuntimeConfig) -> Result<Self, String> {
        Self::after(config, &InForce::default())
    }

    /// [`InForce::new`], keeping `previous`' compiled relabel rules where
    /// they are the same: a reload that leaves a tenant's rules alone
    /// keeps what they decided.
    pub fn after(config: &RuntimeConfig, previous: &InForce) -> Result<Self, String> {
        let id = |where_: &str, s: &str| {
            TenantId::parse(s).map_err(|e| format!("{where_}: tenant {s:?}: {e}"))
        };
        let defaults = config.defaults();
        let rules = |where_: &str, patch: &LimitsPatch, old: Option<&Arc<Rules>>| {
            let configs = patch.metric_relabel_configs.as_deref().unwrap_or_default();
            Rules::compile_over(configs, old)
                .map_err(|e| format!("{where_}: metric_relabel_configs: {e}"))
        };
        let relabel_default = rules("limits", &config.limits, previous.relabel_default.as_ref())?;
        let ha_default = HaPatch::of(&config.limits, &HaPatch::default());
        let mut overrides = HashMap::new();
        let mut relabel_overrides = HashMap::new();
        let mut ha_overrides = HashMap::new();
        for (tenant, patch) in &config.overrides {
            let tenant_id = id("overrides", tenant)?;
            ha_overrides.insert(tenant_id.clone(), HaPatch::of(patch, &ha_default));
            if patch.metric_relabel_configs.is_some() {
                let old = previous
                    .relabel_overrides
                    .get(&tenant_id)
                    .and_then(Option::as_ref);
                let compiled = rules(&format!("overrides: {tenant}"), patch, old)?;
                relabel_overrides.insert(tenant_id.clone(), compiled);
            }
            overrides.insert(tenant_id, defaults.patched(patch));
        }
        let bindings = match &config.identities {
            None => None,
            Some(ids) => {
                let mut out = HashMap::new();
                for (user, list) in ids {
                    let mut tenants = Vec::with_capacity(list.len());
                    for b in list {
                        let (tenant, access) = b.parts();
                        tenants.push((id(&format!("identities: {user}"), tenant)?, access));
                    }
                    out.insert(user.clone(), tenants);
                }
                Some(out)
            }
        };
        Ok(Self {
            defaults,
            overrides,
            relabel_default,
            relabel_overrides,
            ha_default,
            ha_overrides,
            bindings,
        })
    }

    /// `tenant`'s HA tracker settings, where the file sets them.
    pub fn ha(&self, tenant: &TenantId) -> &HaPatch {
        self.ha_overrides.get(tenant).unwrap_or(&self.ha_default)
    }

    /// `tenant`'s own relabel rules (`metric_relabel_configs`), if any.
    pub fn relabel(&self, tenant: &TenantId) -> Option<Arc<Rules>> {
        match self.relabel_overrides.get(tenant) {
            Some(own) => own.clone(),
            None => self.relabel_default.clone(),
        }
    }

    /// The limits of `tenant`.
    pub fn limits(&self, tenant: &TenantId) -> TenantLimits {
        self.overrides.get(tenant).copied().unwrap_or(self.defaults)
    }

    /// Whether identities are bound to tenants.
    pub fn binds(&self) -> bool {
        self.bindings.is_some()
    }

    /// Whether `identity` may read (or, with `write`, write) `tenant`.
    /// Without bindings, or without logins, anyone may.
    pub fn allows(&self, identity: &Identity, tenant: &TenantId, write: bool) -> bool {
        let Some(bindings) = &self.bindings else {
            return true;
        };
        let found = match identity {
            Identity::Anyone => return true,
            Identity::User(user) => bindings.get(&**user),
            Identity::Certificate(_) => bindings.get(&identity.name()),
        };
        found.is_some_and(|tenants| {
            tenants
                .iter()
                .any(|(t, access)| t == tenant && access.allows(write))
        })
    }
}

/// A tenant's HA tracker settings as the runtime configuration sets them;
/// what it leaves unset comes from the flags.
#[derive(Debug, Clone, Default)]
pub struct HaPatch {
    accept: Option<bool>,
    cluster_label: Option<Arc<str>>,
    replica_label: Option<Arc<str>>,
    max_clusters: Option<usize>,
}

impl HaPatch {
    /// `patch`'s settings over `under`'s.
    fn of(patch: &LimitsPatch, under: &HaPatch) -> Self {
        let label = |l: &Option<String>| l.as_deref().map(Arc::from);
        Self {
            accept: patch.accept_ha_samples.or(under.accept),
            cluster_label: label(&patch.ha_cluster_label).or(under.cluster_label.clone()),
            replica_label: label(&patch.ha_replica_label).or(under.replica_label.clone()),
            max_clusters: patch
                .ha_max_clusters
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .or(under.max_clusters),
        }
    }

    /// The tracker's settings for a write, over the flags' `enabled` and
    /// `flags`; `None` when HA pairs are not deduplicated.
    pub fn resolve(&self, enabled: bool, flags: &HaConfig) -> Option<HaConfig> {
        if !self.accept.unwrap_or(enabled) {
            return None;
        }
        Some(HaConfig {
            cluster_label: self
                .cluster_label
                .clone()
                .unwrap_or_else(|| Arc::clone(&flags.cluster_label)),
            replica_label: self
                .replica_label
                .clone()
                .unwrap_or_else(|| Arc::clone(&flags.replica_label)),
            failover_ms: flags.failover_ms,
            max_clusters: self.max_clusters.unwrap_or(flags.max_clusters),
        })
    }
}

/// The limits in force, swapped whole by a reload, and the server's
/// relabel rules (`--ingest-relabel-config`), swapped by theirs.
#[derive(Debug, Default)]
pub struct Limits {
    current: RwLock<Arc<InForce>>,
    server_relabel: RwLock<Option<Arc<Rules>>>,
}

impl Limits {
    /// The server's relabel rules, then `tenant`'s own, in force now.
    pub fn relabel(&self, in_force: &InForce, tenant: &TenantId) -> Relabel {
        Relabel::new(self.server_relabel.read().clone(), in_force.relabel(tenant))
    }

    /// The server's relabel rules in force.
    pub fn server_relabel(&self) -> Option<Arc<Rules>> {
        self.server_relabel.read().clone()
    }

    /// Puts the server's relabel rules `rules` in force.
    pub fn set_server_relabel(&self, rules: Option<Arc<Rules>>) {
        *self.server_relabel.write() = rules;
    }

    /// What is in force now.
    pub fn current(&self) -> Arc<InForce> {
        Arc::clone(&self.current.read())
    }

    /// Puts `next` in force.
    pub fn set(&self, next: InForce) {
        *self.current.write() = Arc::new(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reload_keeps_rules_that_did_not_change() {
        let yaml = |rule: &str| {
            format!(
                "limits:\n  ingestion_rate: 5\n  metric_relabel_configs: [{{regex: a, action: labeldrop}}]\n\
                 overrides:\n  t:\n    metric_relabel_configs: [{{regex: {rule}, action: labeldrop}}]\n"
            )
        };
        let t = TenantId::parse("t").expect("id");
        let other = TenantId::parse("u").expect("id");
        let first = InForce::new(&RuntimeConfig::parse(&yaml("b")).expect("parses")).expect("ok");
        let again =
            InForce::after(&RuntimeConfig::parse(&yaml("b")).expect("parses"), &first).expect("ok");
        let same = |a: &InForce, b: &InForce, id: &TenantId| match (a.relabel(id), b.relabel(id)) {
            (Some(x), Some(y)) => Arc::ptr_eq(&x, &y),
            _ => false,
        };
        assert!(same(&first, &again, &t) && same(&first, &again, &other));
        let changed =
            InForce::after(&RuntimeConfig::parse(&yaml("c")).expect("parses"), &again).expect("ok");
        assert!(!same(&again, &changed, &t), "new rules, new salt");
        assert!(same(&again, &changed, &other), "the default is unchanged");
    }

    #[test]
    fn bindings_scope_users_to_tenants_and_their_access() {
        let c = RuntimeConfig::parse(
            "identities:\n  alice: [team-a]\n  grafana: [{tenant: team-b, access: read}]\n",
        )
        .expect("parses");
        let f = InForce::new(&c).expect("in force");
        let (a, b) = (
            TenantId::parse("team-a").expect("id"),
            TenantId::parse("team-b").expect("id"),
        );
        let alice = Identity::User("alice".into());
        let grafana = Identity::User("grafana".into());
        let mallory = Identity::User("mallory".into());
        assert!(f.allows(&alice, &a, true) && f.allows(&alice, &a, false));
        assert!(!f.allows(&alice, &b, false));
        assert!(f.allows(&grafana, &b, false) && !f.allows(&grafana, &b, true));
        assert!(!f.allows(&mallory, &a, false));
        // Without logins configured there is no identity to bind.
        assert!(f.allows(&Identity::Anyone, &b, true));
        // A verified certificate's common name is bound as `CN=<name>`.
        let c = RuntimeConfig::parse("identities:\n  CN=prom-eu: [team-a]\n  prom-eu: [team-b]\n")
            .expect("parses");
        let f2 = InForce::new(&c).expect("in force");
        let cert = Identity::Certificate("prom-eu".into());
        assert!(f2.allows(&cert, &a, true));
        assert!(
            !f2.allows(&cert, &b, true),
            "a login of the same name is another identity"
        );
        assert!(!f2.allows(&Identity::Certificate("".into()), &a, false));
        // Without bindings, any login may use any tenant.
        let open = InForce::new(&RuntimeConfig::default()).expect("in force");
        assert!(open.allows(&mallory, &a, true));
    }

    #[test]
    fn tenant_ids_in_the_file_are_checked() {
        let c =
            RuntimeConfig::parse("overrides:\n  'a/b':\n    ingestion_rate: 1\n").expect("parses");
        let err = InForce::new(&c).expect_err("a/b is no tenant ID");
        assert!(err.contains("overrides") && err.contains("a/b"), "{err}");
    }
}
