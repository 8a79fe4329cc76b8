//! The door's untrusted text: a web configuration file (Prometheus'
//! `--web.config.file` format), an `Authorization` header and a tenant
//! header. None may panic; a file that parses must have passed every check
//! (a bcrypt hash for each user, a key with a certificate), and an
//! accepted tenant ID is one safe path segment.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::api::auth::basic_credentials;
use sluice::api::tenant::{TenantId, MAX_LENGTH};
use sluice::config::web::{bcrypt_cost, WebConfig};

fuzz_target!(|data: &[u8]| {
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
});
