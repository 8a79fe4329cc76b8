//! https at the door: a rustls server configuration made from the web
//! configuration file's `tls_server_config`, with Go's names for client
//! authentication, versions, cipher suites and curves, and a handle that
//! a reload swaps while connections keep the one they began with.

use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig};

use crate::config::web::{ClientAuth, TlsServerConfig, TlsVersion};

/// The server configuration in force; connections take it when they are
/// accepted.
#[derive(Clone)]
pub struct TlsHandle(Arc<RwLock<Arc<ServerConfig>>>);

impl std::fmt::Debug for TlsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsHandle")
    }
}

impl TlsHandle {
    /// A handle holding `config`.
    pub fn new(config: ServerConfig) -> Self {
        Self(Arc::new(RwLock::new(Arc::new(config))))
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.0.read())
    }

    /// Puts `config` in force for connections accepted from now on.
    pub fn set(&self, config: ServerConfig) {
        *self.0.write() = Arc::new(config);
    }
}

/// The rustls server configuration for `t`, reading its files now; the
/// error names the setting or file and what is wrong.
pub fn server_config(t: &TlsServerConfig) -> Result<ServerConfig, String> {
    let provider = Arc::new(provider(t)?);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [
        (TlsVersion::Tls12, &rustls::version::TLS12),
        (TlsVersion::Tls13, &rustls::version::TLS13),
    ]
    .into_iter()
    .filter(|(v, _)| {
        t.min_version.is_none_or(|lo| *v >= lo) && t.max_version.is_none_or(|hi| *v <= hi)
    })
    .map(|(_, v)| v)
    .collect();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let verifier = client_verifier(t, &provider)?;
    let chain = match (&t.cert_file, &t.cert) {
        (Some(f), _) => {
            pem_certificates(&std::fs::read(f).map_err(|e| file_err("cert_file", f, e))?)
                .map_err(|e| format!("tls_server_config cert_file {}: {e}", f.display()))?
        }
        (None, Some(text)) => {
            pem_certificates(text.as_bytes()).map_err(|e| format!("tls_server_config cert: {e}"))?
        }
        (None, None) => return Err("tls_server_config: no certificate".into()),
    };
    let key = match (&t.key_file, &t.key) {
        (Some(f), _) => PrivateKeyDer::from_pem_file(f)
            .map_err(|e| format!("tls_server_config key_file {}: {e}", f.display()))?,
        (None, Some(text)) => PrivateKeyDer::from_pem_slice(text.0.as_bytes())
            .map_err(|e| format!("tls_server_config key: {e}"))?,
        (None, None) => return Err("tls_server_config: no key".into()),
    };
    let mut config = builder
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| format!("tls_server_config: the certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn file_err(key: &str, f: &Path, e: std::io::Error) -> String {
    format!("tls_server_config {key} {}: {e}", f.display())
}

fn pem_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// ring's provider, narrowed to the cipher suites and curves named.
fn provider(t: &TlsServerConfig) -> Result<CryptoProvider, String> {
    let mut p = rustls::crypto::ring::default_provider();
    if !t.cipher_suites.is_empty() {
        // Go's list applies to TLS 1.2; TLS 1.3's suites are not chosen.
        let mut chosen: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version().version == rustls::ProtocolVersion::TLSv1_3)
            .copied()
            .collect();
        for name in &t.cipher_suites {
            let found = p.cipher_suites.iter().find(|s| {
                s.version().version == rustls::ProtocolVersion::TLSv1_2
                    && suite_name_matches(s, name)
            });
            match found {
                Some(s) => chosen.push(*s),
                None => {
                    return Err(format!(
                        "tls_server_config: cipher suite {name} is not supported (supported: {})",
                        p.cipher_suites
                            .iter()
                            .filter(|s| s.version().version == rustls::ProtocolVersion::TLSv1_2)
                            .map(|s| format!("{:?}", s.suite()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            }
        }
        p.cipher_suites = chosen;
    }
    if !t.curve_preferences.is_empty() {
        let mut groups = Vec::new();
        for name in &t.curve_preferences {
            let group = match name.as_str() {
                "X25519" => rustls::crypto::ring::kx_group::X25519,
                "CurveP256" => rustls::crypto::ring::kx_group::SECP256R1,
                "CurveP384" => rustls::crypto::ring::kx_group::SECP384R1,
                other => {
                    return Err(format!(
                        "tls_server_config: curve {other} is not supported (supported: X25519, CurveP256, CurveP384)"
                    ))
                }
            };
            groups.push(group);
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

/// Whether rustls' suite is the one Go calls `name` (Go drops the
/// `_SHA256` of the ChaCha20 suites' names).
fn suite_name_matches(s: &rustls::SupportedCipherSuite, name: &str) -> bool {
    let ours = format!("{:?}", s.suite());
    ours == name || ours.strip_suffix("_SHA256") == Some(name)
}

fn client_verifier(
    t: &TlsServerConfig,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    let any = |mandatory| -> Arc<dyn ClientCertVerifier> {
        Arc::new(AnyClientCert {
            provider: Arc::clone(provider),
            mandatory,
        })
    };
    let inner = match t.client_auth_type {
        ClientAuth::NoClientCert => return Ok(WebPkiClientVerifier::no_client_auth()),
        ClientAuth::RequestClientCert => any(false),
        ClientAuth::RequireAnyClientCert => any(true),
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let pem = match (&t.client_ca_file, &t.client_ca) {
                (Some(f), _) => {
                    Some(std::fs::read(f).map_err(|e| file_err("client_ca_file", f, e))?)
                }
                (None, Some(text)) => Some(text.as_bytes().to_vec()),
                (None, None) => None,
            };
            let mut roots = RootCertStore::empty();
            match pem {
                Some(pem) => {
                    for c in pem_certificates(&pem)
                        .map_err(|e| format!("tls_server_config client_ca: {e}"))?
                    {
                        roots
                            .add(c)
                            .map_err(|e| format!("tls_server_config client_ca: {e}"))?;
                    }
                }
                // As Go, whose verifier falls back to the system's roots.
                None => {
                    for c in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(c);
                    }
                }
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider));
            let builder = match t.client_auth_type {
                ClientAuth::VerifyClientCertIfGiven => builder.allow_unauthenticated(),
                _ => builder,
            };
            builder
                .build()
                .map_err(|e| format!("tls_server_config client_ca: {e}"))?
        }
    };
    if t.client_allowed_sans.is_empty() {
        return Ok(inner);
    }
    let mut sans = Vec::new();
    for san in &t.client_allowed_sans {
        sans.push(ServerName::try_from(san.clone()).map_err(|_| {
            format!(
                "tls_server_config client_allowed_sans: {san:?} is not a DNS name or IP address (the only kinds Sluice checks)"
            )
        })?);
    }
    Ok(Arc::new(AllowedSans { inner, sans }))
}

/// Asks for a client certificate and takes any (Go's
/// `RequestClientCert` and `RequireAnyClientCert`); the handshake's
/// signature is still checked, so the client holds the certificate's key.
#[derive(Debug)]
struct AnyClientCert {
    provider: Arc<CryptoProvider>,
    mandatory: bool,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
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
            &self.provider.signature_verification_algorithms,
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
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A verified client certificate must also name one of `sans`.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    sans: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(format!("client certificate: {e}")))?;
        // Compared as exact strings, as Go's exporter-toolkit does: an
        // allowed `prom.example` is not met by a `*.example` certificate.
        let dns: Vec<&str> = cert.valid_dns_names().collect();
        let allowed = self.sans.iter().any(|san| match san {
            ServerName::DnsName(name) => dns.iter().any(|d| d.eq_ignore_ascii_case(name.as_ref())),
            ServerName::IpAddress(_) => cert.verify_is_valid_for_subject_name(san).is_ok(),
            _ => false,
        });
        if allowed {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
