//! Reads over several databases at once, as Mimir's tenant federation
//! answers them: every series carries a `__tenant_id__` label naming the
//! tenant it came from (a label of that name it already had is kept as
//! `original___tenant_id__`), and matchers on `__tenant_id__` choose which
//! tenants are asked instead of being passed down. Series of different
//! tenants never merge: their tenant labels differ.

use super::index::{MatchOp, Matcher};
use super::labels::Label;

/// The label naming a series' tenant in a federated read.
pub const TENANT_LABEL: &str = "__tenant_id__";

/// What a series' own `__tenant_id__` label is called in a federated read.
pub const ORIGINAL_TENANT_LABEL: &str = "original___tenant_id__";

/// Whether `matchers` on the tenant label take `tenant`.
pub fn chooses(matchers: &[Matcher], tenant: &str) -> bool {
    matchers
        .iter()
        .filter(|m| m.name == TENANT_LABEL)
        .all(|m| m.matches(tenant))
}

/// The matchers to ask a chosen tenant with: all but those on the tenant
/// label, one on `original___tenant_id__` asking for the series' own
/// `__tenant_id__`. When only tenant matchers were given and `need_one` is
/// set, every named series is asked for.
pub fn down(matchers: &[Matcher], need_one: bool) -> Vec<Matcher> {
    let mut down: Vec<Matcher> = matchers
        .iter()
        .filter(|m| m.name != TENANT_LABEL)
        .map(|m| {
            if m.name == ORIGINAL_TENANT_LABEL {
                // It compiled under the other name; it compiles again.
                Matcher::new(m.op, TENANT_LABEL, &m.value).unwrap_or_else(|_| m.clone())
            } else {
                m.clone()
            }
        })
        .collect();
    if down.is_empty() && need_one && !matchers.is_empty() {
        if let Ok(all) = Matcher::new(MatchOp::Regex, "__name__", ".+") {
            down.push(all);
        }
    }
    down
}

/// Gives sorted `(name, value)` pairs of a series of `tenant` its tenant
/// label (its own is kept as `original___tenant_id__`).
pub fn tag_pairs(pairs: &mut Vec<(String, String)>, tenant: &str) {
    let mut labels: Vec<Label> = std::mem::take(pairs)
        .into_iter()
        .map(|(name, value)| Label {
            name: name.into(),
            value: value.into(),
        })
        .collect();
    tag(&mut labels, tenant);
    *pairs = labels
        .into_iter()
        .map(|l| (l.name.into(), l.value.into()))
        .collect();
}

fn insert_sorted(labels: &mut Vec<Label>, label: Label) {
    let at = labels.partition_point(|l| l.name < label.name);
    labels.insert(at, label);
}

/// Gives a series of `tenant` its tenant label (its own is kept as
/// `original___tenant_id__`).
pub fn tag(labels: &mut Vec<Label>, tenant: &str) {
    if let Ok(i) = labels.binary_search_by(|l| l.name.as_str().cmp(TENANT_LABEL)) {
        let own = labels.remove(i);
        // One name, one label: an `original___tenant_id__` it had already
        // is replaced, as Mimir's label builder sets it.
        labels.retain(|l| l.name != ORIGINAL_TENANT_LABEL);
        insert_sorted(
            labels,
            Label {
                name: ORIGINAL_TENANT_LABEL.into(),
                value: own.value,
            },
        );
    }
    insert_sorted(
        labels,
        Label {
            name: TENANT_LABEL.into(),
            value: tenant.into(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::querier::{Member, Querier};
    use crate::storage::{AppendCounts, Db, DbOptions, Stop};

    fn db(series: &[&[(&str, &str)]]) -> Db {
        let db = Db::in_memory(DbOptions::default());
        let mut app = db.appender(i64::MAX);
        let mut c = AppendCounts::default();
        for labels in series {
            let mut canonical = Vec::new();
            crate::storage::labels::encode_canonical(labels.iter().copied(), &mut canonical);
            app.append_new(labels, &canonical, std::iter::once((1000, 1.0)), &mut c)
                .expect("within limits");
        }
        drop(app.commit());
        db
    }

    fn m(op: MatchOp, n: &str, v: &str) -> Matcher {
        Matcher::new(op, n, v).expect("matcher")
    }

    fn text(labels: &[Label]) -> String {
        labels
            .iter()
            .map(|l| format!("{}={}", l.name, l.value))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn each_series_names_its_tenant_and_tenant_matchers_choose_tenants() {
        let a = db(&[&[("__name__", "up"), ("job", "x")]]);
        let b = db(&[
            &[("__name__", "up"), ("job", "x")],
            &[("__name__", "up"), ("__tenant_id__", "spoof"), ("job", "y")],
        ]);
        let members = [
            Member {
                tenant: "a",
                querier: a.querier(),
            },
            Member {
                tenant: "b",
                querier: b.querier(),
            },
        ];
        let q = Querier::federated(&members);
        let up = m(MatchOp::Equal, "__name__", "up");
        let got: Vec<String> = q
            .select(std::slice::from_ref(&up), 0, 2000)
            .iter()
            .map(|s| text(&s.labels))
            .collect();
        assert_eq!(
            got,
            [
                "__name__=up,__tenant_id__=a,job=x",
                "__name__=up,__tenant_id__=b,job=x",
                "__name__=up,__tenant_id__=b,job=y,original___tenant_id__=spoof",
            ]
        );
        // A series with both labels keeps one of each name.
        let c = db(&[&[
            ("__name__", "both"),
            ("__tenant_id__", "x"),
            ("original___tenant_id__", "y"),
        ]]);
        let one = [Member {
            tenant: "c",
            querier: c.querier(),
        }];
        let got: Vec<String> = Querier::federated(&one)
            .select(&[m(MatchOp::Equal, "__name__", "both")], 0, 2000)
            .iter()
            .map(|s| text(&s.labels))
            .collect();
        assert_eq!(
            got,
            ["__name__=both,__tenant_id__=c,original___tenant_id__=x"]
        );
        // A matcher on the tenant label picks tenants; it is not asked of
        // them (their series have no such label).
        let only_b = q.select(&[up, m(MatchOp::Equal, TENANT_LABEL, "b")], 0, 2000);
        assert_eq!(only_b.len(), 2);
        let not_b = q.select(&[m(MatchOp::NotEqual, TENANT_LABEL, "b")], 0, 2000);
        assert_eq!(not_b.len(), 1, "all of a's series, none of b's");
        // The series' own label is reached under its new name.
        let spoof = q.select(
            &[m(MatchOp::Equal, ORIGINAL_TENANT_LABEL, "spoof")],
            0,
            2000,
        );
        assert_eq!(spoof.len(), 1);
        let stop = Stop::default();
        let names = q.label_names(&[], 0, 2000, &stop).expect("no stop");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["__name__", TENANT_LABEL, "job", ORIGINAL_TENANT_LABEL]
        );
        let tenants = q
            .label_values(
                TENANT_LABEL,
                &[m(MatchOp::NotEqual, TENANT_LABEL, "a")],
                0,
                2000,
                &stop,
            )
            .expect("no stop");
        assert_eq!(tenants.into_iter().collect::<Vec<_>>(), ["b"]);
        let jobs = q
            .label_values(
                "job",
                &[m(MatchOp::Equal, TENANT_LABEL, "a")],
                0,
                2000,
                &stop,
            )
            .expect("no stop");
        assert_eq!(jobs.into_iter().collect::<Vec<_>>(), ["x"]);
        let own = q
            .label_values(ORIGINAL_TENANT_LABEL, &[], 0, 2000, &stop)
            .expect("no stop");
        assert_eq!(own.into_iter().collect::<Vec<_>>(), ["spoof"]);
        let sets = q
            .series_labels(&[m(MatchOp::Equal, "job", "x")], 0, 2000, &stop)
            .expect("no stop");
        assert_eq!(sets.len(), 2);
    }
}
