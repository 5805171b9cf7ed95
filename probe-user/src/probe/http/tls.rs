//! TLS for HTTPS probes: by default a certificate must be presented but is not validated
//! (tm semantics); strict mode validates it against system roots or a given CA file.
use std::{
    fmt,
    future::Future,
    net::SocketAddr,
    path::Path,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        ResolvesClientCert,
    },
    crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms},
    pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime},
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedProtocolVersion,
};

pub(crate) use super::sessions::for_target;
use super::{error::HttpCheckError, sessions::Sessions};

/// How an HTTPS probe treats the server's certificate, and whether it presents one of its own.
#[derive(Clone, Default)]
pub enum TlsVerify {
    /// A certificate must be presented; its chain, name and dates are not checked. The
    /// prober's shared client.
    #[default]
    Presented,
    /// A client of its own: the certificate must chain to `roots` and match the server name
    /// (when there are roots), and the probe presents a client certificate (when it has one).
    Own(OwnClient),
}

/// A client built once, shared by every probe that uses it.
#[derive(Clone)]
pub struct OwnClient {
    client: Arc<TlsClient>,
    /// Unique in the process (never an address a later client could reuse).
    id: u64,
    /// The roots, when the chain is checked, and where they came from.
    roots: Option<(Arc<RootCertStore>, String)>,
    /// The client certificate and its file, when the probe presents one.
    cert: Option<(Arc<rustls::sign::CertifiedKey>, String)>,
    /// TLS 1.3 only (`min_version = "1.3"`); else 1.2 and 1.3.
    tls13_only: bool,
    /// A full handshake with each target at least this often (`tls_reverify`).
    reverify: Duration,
}

/// A session is resumed only within this of its target's last full handshake, by default
/// (`tls_reverify`): a resumed handshake carries no certificate, so a certificate that expired
/// or was replaced since is seen at the next full one.
pub const DEFAULT_REVERIFY: Duration = Duration::from_secs(DEFAULT_REVERIFY_S as u64);
pub const DEFAULT_REVERIFY_S: u32 = 300;

impl fmt::Debug for TlsVerify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Presented => f.write_str("Presented"),
            Self::Own(c) => {
                match &c.roots {
                    Some((roots, source)) => write!(f, "Strict({source}, {} roots)", roots.len())?,
                    None => f.write_str("Presented")?,
                }
                if let Some((_, cert)) = &c.cert {
                    write!(f, " with client certificate {cert}")?;
                }
                if c.tls13_only {
                    f.write_str(", TLS 1.3 only")?;
                }
                Ok(())
            }
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
        Ok(Self::strict(roots, "system roots".into()))
    }

    /// Strict mode against the certificates of one PEM file.
    pub fn strict_ca_file(path: &Path) -> Result<Self, HttpCheckError> {
        Ok(Self::strict(roots_from_file(path)?, path.display().to_string()))
    }

    fn strict(roots: RootCertStore, source: String) -> Self {
        Self::own(Some((Arc::new(roots), source)), None, (false, DEFAULT_REVERIFY))
    }

    /// A client of its own, checking the chain against `roots` (None: only a certificate's
    /// presence), presenting `cert` (None: no client certificate).
    fn own(
        roots: Option<(Arc<RootCertStore>, String)>,
        cert: Option<(Arc<rustls::sign::CertifiedKey>, String)>,
        (tls13_only, reverify): (bool, Duration),
    ) -> Self {
        let verifier: Arc<dyn ServerCertVerifier> = match &roots {
            Some((store, _)) => rustls::client::WebPkiServerVerifier::builder_with_provider(store.clone(), provider())
                .build()
                .expect("a root store with at least one root"),
            None => Arc::new(PresentedOnly {
                algorithms: ring::default_provider().signature_verification_algorithms,
            }),
        };
        let resolver: Arc<dyn ResolvesClientCert> = match &cert {
            Some((key, _)) => Arc::new(ClientCert(key.clone())),
            None => Arc::new(NoClientCert),
        };
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self::Own(OwnClient {
            client: Arc::new(TlsClient::new(verifier, resolver, tls13_only, reverify)),
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            roots,
            cert,
            tls13_only,
            reverify,
        })
    }

    /// The same client, with a full handshake with each target at least every `reverify`
    /// (`tls_reverify`).
    #[must_use]
    pub fn reverify_every(self, reverify: Duration) -> Self {
        match self {
            Self::Presented => Self::own(None, None, (false, reverify)),
            Self::Own(c) => Self::own(c.roots, c.cert, (c.tls13_only, reverify)),
        }
    }

    /// The same client, offering TLS 1.3 alone (`min_version = "1.3"`): a server that speaks
    /// only TLS 1.2 fails the handshake.
    #[must_use]
    pub fn tls13_only(self) -> Self {
        match self {
            Self::Presented => Self::own(None, None, (true, DEFAULT_REVERIFY)),
            Self::Own(c) => Self::own(c.roots, c.cert, (true, c.reverify)),
        }
    }

    /// The same check of the server's certificate, and the client certificate of `cert_file`
    /// (its chain, PEM) with the key of `key_file` (PEM; only its owner may read it, as the API
    /// token's file), presented to servers that ask for one (mTLS backends).
    pub fn with_client_cert(
        self,
        cert_file: &Path,
        (key_file, key_pem): (&Path, &[u8]),
    ) -> Result<Self, HttpCheckError> {
        let certified = Arc::new(certified_key(cert_file, (key_file, key_pem))?);
        let (roots, options) = match self {
            Self::Presented => (None, (false, DEFAULT_REVERIFY)),
            Self::Own(c) => (c.roots, (c.tls13_only, c.reverify)),
        };
        Ok(Self::own(
            roots,
            Some((certified, cert_file.display().to_string())),
            options,
        ))
    }

    /// The client of its own, if it has one (else the prober's shared one serves it).
    /// As `with_client_cert`, reading the key from `key_file`, which only its owner (root or
    /// this process's user) may read, as the API token's file.
    pub fn with_client_cert_files(self, cert_file: &Path, key_file: &Path) -> Result<Self, HttpCheckError> {
        let key = crate::secret::read_private(key_file, crate::kernel::process::euid(), 64 * 1024).map_err(|e| {
            HttpCheckError::Roots {
                field: "client_key",
                path: key_file.display().to_string(),
                reason: crate::errors::chain(&e),
            }
        })?;
        self.with_client_cert(cert_file, (key_file, &key))
    }

    pub(crate) fn own_client(&self) -> Option<&Arc<TlsClient>> {
        match self {
            Self::Presented => None,
            Self::Own(c) => Some(&c.client),
        }
    }

    /// Which client a probe uses (0: the prober's shared one): connections are pooled, and
    /// sessions resumed, only under the client that made them.
    pub(crate) fn client_id(&self) -> u64 {
        match self {
            Self::Presented => 0,
            Self::Own(c) => c.id,
        }
    }
}

/// The ring provider, named explicitly so no process-wide default has to be installed, with
/// the SHA-256 suites offered before the SHA-384 ones, in TLS 1.3 and 1.2 alike: a probe needs
/// no 256-bit keys, and SHA-384's key schedule or TLS 1.2 PRF (SHA-512 compression, without
/// hardware help in ring) was the largest hash cost per check, on both ends.
/// The roots in a PEM file of CA certificates; an error names the file and what is wrong.
/// What the config reader checks a `ca_file` with, without building a client.
pub fn roots_from_file(path: &Path) -> Result<RootCertStore, HttpCheckError> {
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
    Ok(roots)
}

/// A client certificate chain (PEM file) with its key (PEM bytes read from `key_file`),
/// checked to match. What the config reader checks a pair with, without building a client.
pub fn certified_key(
    cert_file: &Path,
    (key_file, key_pem): (&Path, &[u8]),
) -> Result<rustls::sign::CertifiedKey, HttpCheckError> {
    let err = |field: &'static str, path: &Path, reason: String| HttpCheckError::Roots {
        field,
        path: path.display().to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| err("client_cert", cert_file, format!("cannot read PEM: {e}")))?
        .collect::<Result<_, _>>()
        .map_err(|e| err("client_cert", cert_file, format!("bad PEM: {e}")))?;
    if chain.is_empty() {
        return Err(err("client_cert", cert_file, "no CERTIFICATE block".into()));
    }
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| err("client_key", key_file, format!("no private key in PEM: {e}")))?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| err("client_key", key_file, format!("an unusable key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(chain, signing);
    certified
        .keys_match()
        .map_err(|e| err("client_key", key_file, format!("does not match the certificate: {e}")))?;
    Ok(certified)
}

fn provider() -> Arc<CryptoProvider> {
    use rustls::CipherSuite as S;
    let mut p = ring::default_provider();
    p.cipher_suites.sort_by_key(|s| {
        matches!(
            s.suite(),
            S::TLS13_AES_256_GCM_SHA384
                | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
                | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        )
    });
    Arc::new(p)
}

/// The client of the default mode: a certificate must be presented, its chain is not checked.
pub(crate) fn presented_client() -> TlsClient {
    let algorithms = ring::default_provider().signature_verification_algorithms;
    TlsClient::new(
        Arc::new(PresentedOnly { algorithms }),
        Arc::new(NoClientCert),
        false,
        DEFAULT_REVERIFY,
    )
}

/// Targets whose TLS sessions are kept for resumption (`sessions::SessionMap`; rustls's own
/// cache keeps 256 servers by default). A probe
/// that resumes skips the certificate and its signature on both ends: the backend's CPU is
/// what HTTPS checks cost most, and a fleet is probed round after round. The certificate was
/// checked, in the configured mode, by the full handshake that made the session.
const RESUMABLE_TARGETS: usize = 131_072;

/// One verification mode's TLS client: a configuration offering TLS 1.3 and 1.2, and a twin
/// offering TLS 1.2 alone, both over one session store (sessions never cross modes: a session
/// made without checking the chain must not be resumed by a strict probe).
///
/// A server whose last session was TLS 1.2 is greeted by the twin: a hello that offers TLS 1.3
/// carries a key share, and making it (an X25519 key pair) was ~15% of an HTTPS probe's CPU
/// against a TLS 1.2 backend that resumes its session and never uses the share. Should the
/// server stop speaking TLS 1.2, the twin's handshake fails and the probe tries once more with
/// both versions offered (`HttpProber::tls_connect`), so the change costs a connection, never
/// a verdict.
pub(crate) struct TlsClient {
    /// Indexed by `h2`: without ALPN (HTTPS checks speak HTTP/1.1 and say nothing) and with
    /// ALPN h2 (gRPC).
    both: [Arc<ClientConfig>; 2],
    tls12: [Arc<ClientConfig>; 2],
    sessions: Arc<Sessions>,
}

impl TlsClient {
    /// Every configuration shares one verifier and one client certificate resolver: rustls
    /// resumes a session only under the very objects that made it.
    /// With `tls13_only`, both are the TLS 1.3 configuration (no TLS 1.2 session is ever
    /// made, so the twin is never asked for).
    fn new(
        verifier: Arc<dyn ServerCertVerifier>,
        client_cert: Arc<dyn ResolvesClientCert>,
        tls13_only: bool,
        reverify: Duration,
    ) -> Self {
        let provider = provider();
        let sessions = Arc::new(Sessions::new(RESUMABLE_TARGETS, reverify));
        let build = |versions: &[&'static SupportedProtocolVersion], h2: bool| {
            let mut config = ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .expect("ring supports TLS 1.2 and 1.3")
                .dangerous()
                .with_custom_certificate_verifier(verifier.clone())
                .with_client_cert_resolver(client_cert.clone());
            config.resumption = rustls::client::Resumption::store(sessions.clone());
            if h2 {
                config.alpn_protocols = vec![b"h2".to_vec()];
            }
            Arc::new(config)
        };
        let pair = |versions: &[&'static SupportedProtocolVersion]| [build(versions, false), build(versions, true)];
        if tls13_only {
            let only = pair(&[&rustls::version::TLS13]);
            return Self {
                both: only.clone(),
                tls12: only,
                sessions,
            };
        }
        Self {
            both: pair(rustls::DEFAULT_VERSIONS),
            tls12: pair(&[&rustls::version::TLS12]),
            sessions,
        }
    }

    /// The configuration to greet `name` at `target` with (offering h2 by ALPN when `h2`),
    /// and whether it is the TLS 1.2 twin.
    pub(crate) fn config_for(&self, target: SocketAddr, name: &ServerName<'_>, h2: bool) -> (Arc<ClientConfig>, bool) {
        let i = usize::from(h2);
        if self.sessions.last_was_tls12(self.sessions.key(target, name)) {
            (self.tls12[i].clone(), true)
        } else {
            (self.both[i].clone(), false)
        }
    }

    /// The twin's handshake with `name` at `target` failed: greet it with both versions
    /// from now on.
    pub(crate) fn forget_tls12(&self, target: SocketAddr, name: &ServerName<'_>) {
        self.sessions.mark(self.sessions.key(target, name), false);
    }

    /// A full handshake with `name` at `target` verified its certificate (whose leaf expires
    /// at `not_after`, Unix seconds) now: its sessions may be resumed for `reverify`.
    pub(crate) fn verified(&self, target: SocketAddr, name: &ServerName<'_>, not_after: Option<i64>) {
        self.sessions.verified(self.sessions.key(target, name), not_after);
    }

    /// When the certificate of `name` at `target`'s last full handshake expires: what a
    /// resumed connection, which carries none, reports.
    pub(crate) fn not_after(&self, target: SocketAddr, name: &ServerName<'_>) -> Option<i64> {
        self.sessions.not_after(self.sessions.key(target, name))
    }
}

/// The client certificate of a profile that has one, presented whenever a server asks.
#[derive(Debug)]
struct ClientCert(Arc<rustls::sign::CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Probes present no client certificate unless their profile gives one.
#[derive(Debug)]
struct NoClientCert;

impl ResolvesClientCert for NoClientCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<rustls::sign::CertifiedKey>> {
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

/// A TLS handshake or stream whose every poll is work on `target`'s connection: rustls may
/// store a session (a TLS 1.3 ticket comes after the handshake, read with the response) at
/// any of them.
pub(crate) struct Scoped<T> {
    pub(crate) inner: T,
    target: SocketAddr,
}

impl<T> Scoped<T> {
    pub(crate) fn new(inner: T, target: SocketAddr) -> Self {
        Self { inner, target }
    }
}

impl<T: Future + Unpin> Future for Scoped<T> {
    type Output = T::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T::Output> {
        let target = self.target;
        for_target(target, || Pin::new(&mut self.inner).poll(cx))
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Scoped<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let target = self.target;
        for_target(target, || Pin::new(&mut self.inner).poll_read(cx, buf))
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Scoped<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let target = self.target;
        for_target(target, || Pin::new(&mut self.inner).poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let target = self.target;
        for_target(target, || Pin::new(&mut self.inner).poll_flush(cx))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let target = self.target;
        for_target(target, || Pin::new(&mut self.inner).poll_shutdown(cx))
    }
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
