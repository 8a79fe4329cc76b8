//! TLS for https destinations, with Prometheus' `tls_config` keys: a CA
//! file (else the system's trust store), a client certificate and key for
//! mutual TLS, a server name to verify instead of the URL's host, and
//! `insecure_skip_verify`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};

/// A destination's TLS settings, as Prometheus' `tls_config`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CAs that sign the receiver's certificate; without
    /// it, the system's trust store.
    #[serde(alias = "ca-file")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS.
    #[serde(alias = "cert-file")]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(alias = "key-file")]
    pub key_file: Option<PathBuf>,
    /// The name the receiver's certificate must carry, instead of the
    /// URL's host.
    #[serde(alias = "server-name")]
    pub server_name: Option<String>,
    /// Accept any certificate. For tests only: anyone on the path can read
    /// and change what is sent.
    #[serde(alias = "insecure-skip-verify")]
    pub insecure_skip_verify: bool,
}

impl TlsConfig {
    /// Whether any key is set (they need an https URL).
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// The rustls client configuration, reading the files now. The error
    /// names the file and what is wrong with it.
    pub fn client_config(&self) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?;
        let builder = if self.insecure_skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                let chain = certificates(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("tls key-file {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("tls cert-file/key-file: {e}"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("tls: cert-file and key-file go together".into()),
        };
        if let Some(name) = &self.server_name {
            ServerName::try_from(name.as_str())
                .map_err(|e| format!("tls server-name {name:?}: {e}"))?;
        }
        Ok(config)
    }

    /// A configuration that trusts no server, for the connector of a
    /// plain http destination (which never makes a TLS connection).
    pub fn plain_http() -> Result<ClientConfig, String> {
        Ok(
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("tls: {e}"))?
                .with_root_certificates(RootCertStore::empty())
                .with_no_client_auth(),
        )
    }

    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        match &self.ca_file {
            Some(f) => {
                for c in certificates(f)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("tls ca-file {}: {e}", f.display()))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                for c in found.certs {
                    // A system store may hold certificates rustls cannot
                    // use; the others still count.
                    let _ = roots.add(c);
                }
                if roots.is_empty() {
                    return Err(format!(
                        "tls: the system's trust store has no usable CA ({} errors); install ca-certificates or set ca-file",
                        found.errors.len()
                    ));
                }
            }
        }
        Ok(roots)
    }
}

fn certificates(f: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(f)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls {}: {e}", f.display()))?;
    if certs.is_empty() {
        return Err(format!("tls {}: no PEM certificate in it", f.display()));
    }
    Ok(certs)
}

/// `insecure_skip_verify`: any certificate is taken, but the handshake's
/// signatures are still checked so that the connection is at least
/// encrypted to whoever answered.
#[derive(Debug)]
struct AcceptAny(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn files_that_cannot_be_used_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let junk = write(dir.path(), "junk.pem", "not a certificate\n");
        let missing = dir.path().join("missing.pem");
        for (tls, says) in [
            (
                TlsConfig {
                    ca_file: Some(junk.clone()),
                    ..TlsConfig::default()
                },
                "no PEM certificate",
            ),
            (
                TlsConfig {
                    ca_file: Some(missing),
                    ..TlsConfig::default()
                },
                "missing.pem",
            ),
            (
                TlsConfig {
                    cert_file: Some(junk),
                    ..TlsConfig::default()
                },
                "cert-file and key-file go together",
            ),
            (
                TlsConfig {
                    insecure_skip_verify: true,
                    server_name: Some("not a name!".into()),
                    ..TlsConfig::default()
                },
                "server-name",
            ),
        ] {
            let e = tls.client_config().expect_err(says);
            assert!(e.contains(says), "{tls:?}: {e}");
        }
    }

    #[test]
    fn a_generated_ca_and_client_pair_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("ca");
        let client = rcgen::generate_simple_self_signed(vec!["client".into()]).expect("client");
        let tls = TlsConfig {
            ca_file: Some(write(dir.path(), "ca.pem", &ca.cert.pem())),
            cert_file: Some(write(dir.path(), "c.pem", &client.cert.pem())),
            key_file: Some(write(
                dir.path(),
                "c.key",
                &client.signing_key.serialize_pem(),
            )),
            server_name: Some("localhost".into()),
            insecure_skip_verify: false,
        };
        let config = tls.client_config().expect("loads");
        assert!(config.client_auth_cert_resolver.has_certs());
    }
}
