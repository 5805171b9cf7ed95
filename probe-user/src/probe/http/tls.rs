//! TLS for HTTPS probes: by default a certificate must be presented but is not validated
//! (tm semantics); strict mode validates it against system roots or a given CA file.
use std::{fmt, path::Path, sync::Arc};

use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms},
    pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime},
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::error::HttpCheckError;

/// How an HTTPS probe treats the server's certificate.
#[derive(Clone, Default)]
pub enum TlsVerify {
    /// A certificate must be presented; its chain, name and dates are not checked.
    #[default]
    Presented,
    /// The certificate must chain to one of these roots and match the server name.
    Strict(StrictRoots),
}

/// A client configuration built once from a root store, shared by every probe that uses it.
#[derive(Clone)]
pub struct StrictRoots {
    config: Arc<ClientConfig>,
    source: String,
    count: usize,
}

impl fmt::Debug for TlsVerify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Presented => f.write_str("Presented"),
            Self::Strict(r) => write!(f, "Strict({}, {} roots)", r.source, r.count),
        }
    }
}

impl TlsVerify {
    /// Strict mode against the system's roots (whatever /etc/ssl holds).
    pub fn strict_system() -> Result<Self, HttpCheckError> {
        let loaded = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (count, _bad) = roots.add_parsable_certificates(loaded.certs);
        if count == 0 {
            let reason = match loaded.errors.first() {
                Some(e) => format!("no usable root certificates ({e})"),
                None => "no root certificates found".to_string(),
            };
            return Err(HttpCheckError::Roots {
                field: "strict_tls",
                path: "system roots".into(),
                reason,
            });
        }
        Ok(Self::strict(roots, "system roots".into(), count))
    }

    /// Strict mode against the certificates of one PEM file.
    pub fn strict_ca_file(path: &Path) -> Result<Self, HttpCheckError> {
        let err = |reason: String| HttpCheckError::Roots {
            field: "ca",
            path: path.display().to_string(),
            reason,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| err(format!("cannot read PEM: {e}")))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(format!("bad PEM: {e}")))?;
        let mut roots = RootCertStore::empty();
        let (count, bad) = roots.add_parsable_certificates(certs);
        if count == 0 {
            return Err(err(format!(
                "no usable CA certificate ({bad} rejected); a PEM file with CERTIFICATE blocks is expected"
            )));
        }
        Ok(Self::strict(roots, path.display().to_string(), count))
    }

    fn strict(roots: RootCertStore, source: String, count: usize) -> Self {
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.resumption = resumption();
        Self::Strict(StrictRoots {
            config: Arc::new(config),
            source,
            count,
        })
    }

    pub(crate) fn strict_config(&self) -> Option<&Arc<ClientConfig>> {
        match self {
            Self::Presented => None,
            Self::Strict(r) => Some(&r.config),
        }
    }

    pub fn is_strict(&self) -> bool {
        matches!(self, Self::Strict(_))
    }
}

/// The ring provider, named explicitly so no process-wide default has to be installed, with
/// AES-128-GCM-SHA256 offered first: a probe needs no 256-bit keys, and SHA-384's key schedule
/// (SHA-512 compression, without hardware help in ring) was the largest hash cost per check.
fn provider() -> Arc<CryptoProvider> {
    let mut p = ring::default_provider();
    p.cipher_suites
        .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(p)
}

/// The client configuration of the default mode.
pub(crate) fn presented_config() -> Arc<ClientConfig> {
    let provider = provider();
    let verifier = PresentedOnly {
        algorithms: provider.signature_verification_algorithms,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    config.resumption = resumption();
    Arc::new(config)
}

/// Targets whose TLS sessions are kept for resumption (rustls keeps 256 by default). A probe
/// that resumes skips the certificate and its signature on both ends: the backend's CPU is
/// what HTTPS checks cost most, and a fleet is probed round after round. The certificate was
/// checked, in the configured mode, by the full handshake that made the session.
const RESUMABLE_TARGETS: usize = 131_072;

fn resumption() -> rustls::client::Resumption {
    rustls::client::Resumption::in_memory_sessions(RESUMABLE_TARGETS)
}

/// Accepts any certificate the server presents (rustls itself refuses a handshake without
/// one), but still checks the handshake signature against the certificate's key, so the
/// server has to hold the private key of what it presents.
#[derive(Debug)]
struct PresentedOnly {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PresentedOnly {
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
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ca_file_errors_name_the_field_and_path() {
        let missing = TlsVerify::strict_ca_file(Path::new("/nonexistent/ca.pem")).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("ca \"/nonexistent/ca.pem\": cannot read"),
            "{missing}"
        );
        let dir = std::env::temp_dir().join(format!("probed-ca-test-{}", std::process::id()));
        std::fs::write(&dir, "not a certificate\n").unwrap();
        let empty = TlsVerify::strict_ca_file(&dir).unwrap_err().to_string();
        std::fs::remove_file(&dir).unwrap();
        assert!(empty.contains("no usable CA certificate"), "{empty}");
    }
}
