//! Certificates made with openssl for a test, and bcrypt hashes for web
//! configuration files: shared by the tests that speak https.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Certificates for one test, made with openssl: a CA, a server
/// certificate for 127.0.0.1 and localhost, two client certificates from
/// the CA (names `client.example` and `other.example`) and one from a
/// CA nobody trusts.
pub struct Pki {
    dir: tempfile::TempDir,
}

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs: install Debian's openssl package (scripts/test does)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for ca in ["ca", "rogue-ca"] {
            openssl(
                d,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN={ca}"),
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.crt"),
                ],
            );
        }
        let leaf = |name: &str, ca: &str, san: &str, usage: &str| {
            std::fs::write(
                d.join(format!("{name}.ext")),
                format!(
                    "subjectAltName={san}\nbasicConstraints=CA:FALSE\n\
                     keyUsage=digitalSignature\nextendedKeyUsage={usage}\n"
                ),
            )
            .expect("ext file");
            openssl(
                d,
                &[
                    "req",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-subj",
                    &format!("/CN={name}"),
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                ],
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    &format!("{ca}.crt"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-out",
                    &format!("{name}.crt"),
                ],
            );
        };
        leaf("server", "ca", "DNS:localhost,IP:127.0.0.1", "serverAuth");
        leaf("client", "ca", "DNS:client.example", "clientAuth");
        leaf("other", "ca", "DNS:other.example", "clientAuth");
        leaf("rogue", "rogue-ca", "DNS:client.example", "clientAuth");
        Self { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A bcrypt hash of `password` at cost 4 (Prometheus takes any cost; 4
/// keeps the tests quick).
pub fn hash(password: &str) -> String {
    bcrypt::hash(password, 4).expect("bcrypt")
}
