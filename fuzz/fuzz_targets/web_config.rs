//! The door's untrusted input: a client certificate's subject, a web configuration file (Prometheus'
//! `--web.config.file` format), a runtime configuration file (Mimir's
//! limits and overrides, identities, metric_relabel_configs), an ingest
//! relabel file and labels run through it, an `Authorization` header and a
//! tenant header (one ID, or several for a federated read). None may panic; a file that parses must have passed
//! every check (a bcrypt hash for each user, a key with a certificate; a
//! rate a token bucket can run on), and an accepted tenant ID is one safe
//! path segment.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::api::auth::basic_credentials;
use sluice::api::tenant::{parse_federated, TenantId, MAX_LENGTH};
use sluice::api::bucket::Bucket;
use sluice::api::limits::InForce;
use sluice::config::runtime::RuntimeConfig;
use sluice::config::web::{bcrypt_cost, WebConfig};
use sluice::ingest::relabel::{Relabel, Rules};

fuzz_target!(|data: &[u8]| {
    // A client certificate's subject (bytes a client sends; with
    // RequestClientCert they are not even checked by a CA).
    if let Some(name) = sluice::server::tls::common_name(data) {
        assert!(name.len() < data.len());
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = WebConfig::parse(text) {
        for hash in c.basic_auth_users.values() {
            assert!(bcrypt_cost(&hash.0).is_some());
        }
        let t = &c.tls_server_config;
        assert!(!t.enabled() || t.key_file.is_some() || t.key.is_some());
    }
    if let Ok(c) = RuntimeConfig::parse(text) {
        if let Ok(limits) = InForce::new(&c) {
            let anonymous = TenantId::anonymous();
            let l = limits.limits(&anonymous);
            assert!(l.ingestion_rate.is_finite() && l.ingestion_rate >= 0.0);
            let now = std::time::Instant::now();
            let mut bucket = Bucket::default();
            let _ = bucket.take(data.len() as u64, &l, now);
            bucket.charge(u64::MAX, &l, now);
            let _ = bucket.check_open(&l, now);
            let _ = limits.relabel(&anonymous);
        }
    }
    if let Ok(rules) = Rules::parse(text) {
        // Rules that compiled, on labels from the same bytes: a result
        // is sorted, each name once, no empty value.
        let r = Relabel::new(rules, None);
        let (a, b) = data.split_at(data.len() / 2);
        for sent in [[(b"__name__".as_slice(), a), (b, a)], [(a, b), (b, b"x".as_slice())]] {
            if let Ok(Some(out)) = r.apply(&sent) {
                assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
                assert!(out.iter().all(|(_, v)| !v.is_empty()));
            }
        }
    }
    if let Ok(v) = http::HeaderValue::from_bytes(data) {
        if let Some((user, password)) = basic_credentials(&v) {
            assert!(!user.contains(':'));
            let _ = password;
        }
    }
    if let Ok(id) = TenantId::parse(text) {
        let s = id.as_str();
        assert!(!s.is_empty() && s.len() <= MAX_LENGTH);
        assert!(s != "." && s != "..");
        assert!(!s.contains(['/', '\\', '\0', '|']));
    }
    if let Ok(ids) = parse_federated(text, 3) {
        assert!(!ids.is_empty() && ids.len() <= 3);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "sorted, once each");
        assert!(ids.iter().all(|id| TenantId::parse(id.as_str()).as_ref() == Ok(id)));
    }
});
