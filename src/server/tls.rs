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
pub struct TlsHandle(Arc<RwLock<InForce>>);

/// A server configuration, and whether it checks client certificates
/// against client CAs (only then is a certificate's name an identity).
#[derive(Clone)]
pub struct InForce {
    /// The configuration.
    pub config: Arc<ServerConfig>,
    /// Whether client certificates are verified.
    pub verifies_clients: bool,
}

impl std::fmt::Debug for TlsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsHandle")
    }
}

impl TlsHandle {
    /// A handle holding `config`, made from `t`.
    pub fn new(config: ServerConfig, t: &TlsServerConfig) -> Self {
        Self(Arc::new(RwLock::new(InForce {
            config: Arc::new(config),
            verifies_clients: verifies_clients(t),
        })))
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> InForce {
        self.0.read().clone()
    }

    /// Puts `config`, made from `t`, in force for connections accepted
    /// from now on.
    pub fn set(&self, config: ServerConfig, t: &TlsServerConfig) {
        *self.0.write() = InForce {
            config: Arc::new(config),
            verifies_clients: verifies_clients(t),
        };
    }
}

/// Whether `t` checks client certificates against client CAs it names:
/// without `client_ca_file` (or `client_ca`) the system's roots are
/// trusted, and any publicly issued certificate would name someone.
pub fn verifies_clients(t: &TlsServerConfig) -> bool {
    matches!(
        t.client_auth_type,
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert
    ) && (t.client_ca_file.is_some() || t.client_ca.is_some())
}

/// The name a verified client certificate proves: its subject's common
/// name (the last, if several), or `""` when it has none (a name no
/// binding matches). `None` if the certificate does not parse.
pub fn certificate_name(cert: &CertificateDer<'_>) -> Option<String> {
    let cert = webpki::EndEntityCert::try_from(cert).ok()?;
    Some(common_name(cert.subject()).unwrap_or_default())
}

/// The common name (OID 2.5.4.3) in a certificate subject, given as the
/// contents of its `Name` SEQUENCE (DER): the last one, if several; `None`
/// if there is none or the bytes are not a `Name`.
pub fn common_name(subject: &[u8]) -> Option<String> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    let mut found = None;
    let mut rdns = subject;
    while !rdns.is_empty() {
        let (0x31, set, rest) = tlv(rdns)? else {
            return None;
        };
        rdns = rest;
        let mut atvs = set;
        while !atvs.is_empty() {
            let (0x30, atv, rest) = tlv(atvs)? else {
                return None;
            };
            atvs = rest;
            let (0x06, oid, value) = tlv(atv)? else {
                return None;
            };
            if oid == CN {
                // UTF8String, PrintableString, TeletexString, IA5String.
                let (0x0c | 0x13 | 0x14 | 0x16, text, _) = tlv(value)? else {
                    return None;
                };
                found = Some(std::str::from_utf8(text).ok()?.to_owned());
            }
        }
    }
    found
}

/// One DER element: its tag, its contents and what follows it.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cert(names: &[(rcgen::DnType, &str)]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(vec!["client.example".to_owned()]).expect("params");
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (t, v) in names {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().clone()
    }

    #[test]
    fn a_certificate_names_its_subject_common_name() {
        use rcgen::DnType;
        assert_eq!(
            certificate_name(&cert(&[(DnType::CommonName, "prometheus-eu")])).as_deref(),
            Some("prometheus-eu")
        );
        assert_eq!(
            certificate_name(&cert(&[
                (DnType::OrganizationName, "team-a"),
                (DnType::CommonName, "prom-1"),
                (DnType::CountryName, "DE"),
            ]))
            .as_deref(),
            Some("prom-1")
        );
        // No common name: a name no binding matches.
        assert_eq!(
            certificate_name(&cert(&[(DnType::OrganizationName, "team-a")])).as_deref(),
            Some("")
        );
        assert_eq!(
            certificate_name(&CertificateDer::from(vec![0x30, 0x03])),
            None
        );
    }

    #[test]
    fn only_a_certificate_checked_against_named_cas_names_anyone() {
        let with = |auth, ca: Option<&str>| TlsServerConfig {
            client_auth_type: auth,
            client_ca_file: ca.map(Into::into),
            ..TlsServerConfig::default()
        };
        assert!(verifies_clients(&with(
            ClientAuth::RequireAndVerifyClientCert,
            Some("ca.crt")
        )));
        assert!(verifies_clients(&with(
            ClientAuth::VerifyClientCertIfGiven,
            Some("ca.crt")
        )));
        // The system's roots: any public certificate would name someone.
        assert!(!verifies_clients(&with(
            ClientAuth::RequireAndVerifyClientCert,
            None
        )));
        assert!(!verifies_clients(&with(
            ClientAuth::RequireAnyClientCert,
            Some("ca.crt")
        )));
    }

    proptest! {
        /// Any bytes: an answer or none, never a panic; a name found is
        /// shorter than the bytes it came from.
        #[test]
        fn any_subject_bytes_are_safe(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Some(name) = common_name(&bytes) {
                prop_assert!(name.len() < bytes.len());
            }
        }
    }
}
