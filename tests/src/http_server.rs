//! A real HTTP/1.1 server (hyper) inside a namespace, with per-path status, body and delay,
//! that records every request; an HTTPS variant with a certificate made by rcgen at test
//! time (or any certificate and key), an optional pause before the TLS handshake, TLS versions
//! and the certificate that can be switched while it runs, and servers that share one ticket
//! key (a pool behind one name). Servers stop when dropped.
use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Incoming, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Netns;

/// How the server answers one path.
#[derive(Clone, Debug)]
pub struct Route {
    pub status: u16,
    /// Pause before the status line and headers are sent.
    pub delay: Duration,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl Route {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            body: format!("status {status}\n"),
            headers: Vec::new(),
        }
    }

    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// One request as the server received it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent on the request line.
    pub target: String,
    pub host: Option<String>,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The client's address: one value per TCP connection.
    pub peer: SocketAddr,
    /// Over TLS: what the connection's handshake was.
    pub tls: Option<TlsSeen>,
}

/// The TLS handshake of a connection a request came on.
#[derive(Clone, Debug)]
pub struct TlsSeen {
    /// It resumed an earlier session.
    pub resumed: bool,
    pub version: rustls::ProtocolVersion,
    pub suite: rustls::CipherSuite,
    /// The client's hello carried a key share (as every hello offering TLS 1.3 must).
    pub key_share: bool,
}

/// The TLS versions an HTTPS server accepts; switchable while it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersions {
    Both,
    Tls12Only,
    Tls13Only,
}

impl Seen {
    /// Every value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[derive(Default)]
struct State {
    routes: Mutex<HashMap<String, Route>>,
    seen: Mutex<Vec<Seen>>,
    /// TLS handshakes that failed (no request follows them).
    tls_failures: AtomicUsize,
}

/// A self-signed certificate and its key, made at test time.
pub struct SelfSigned {
    pub cert_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl SelfSigned {
    /// `names` may mix DNS names and IP addresses; IPs become IP SANs.
    pub fn new(names: &[&str]) -> Self {
        let names: Vec<String> = names.iter().map(std::string::ToString::to_string).collect();
        let certified = rcgen::generate_simple_self_signed(names).expect("rcgen makes a certificate");
        Self {
            cert_pem: certified.cert.pem(),
            cert_der: certified.cert.der().clone(),
            key_der: certified.key_pair.serialize_der(),
        }
    }

    /// Any certificate and its key (PEM, the key PKCS#8, as rcgen writes it), e.g. one a test
    /// CA signed.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Self {
        use rustls_pki_types::pem::PemObject;
        Self {
            cert_pem: cert_pem.to_string(),
            cert_der: CertificateDer::from_pem_slice(cert_pem.as_bytes()).expect("a PEM certificate"),
            key_der: PrivatePkcs8KeyDer::from_pem_slice(key_pem.as_bytes())
                .expect("a PKCS#8 PEM key")
                .secret_pkcs8_der()
                .to_vec(),
        }
    }

    /// Writes the certificate as PEM, for `--ca` / strict mode.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.cert_pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// A server configuration per `TlsVersions`, sharing `tickets` (a ticket key and session
    /// cache) so that a session made under one is resumed under another.
    fn server_configs(&self, tickets: &Tickets) -> [Arc<rustls::ServerConfig>; 3] {
        let (ticketer, storage) = (&tickets.0, &tickets.1);
        let make = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
            let mut config =
                rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_protocol_versions(versions)
                    .unwrap()
                    .with_no_client_auth()
                    .with_single_cert(vec![self.cert_der.clone()], key)
                    .expect("certificate and key match");
            config.ticketer = ticketer.clone();
            config.session_storage = storage.clone();
            Arc::new(config)
        };
        [
            make(rustls::DEFAULT_VERSIONS),
            make(&[&rustls::version::TLS12]),
            make(&[&rustls::version::TLS13]),
        ]
    }
}

/// A ticket key and a session cache: stateless session tickets, as nginx issues them
/// (resumption is bounded by what the client keeps, not by a server-side cache). Servers made
/// with the same one resume each other's sessions, as a pool sharing its ticket key does.
#[derive(Clone)]
pub struct Tickets(
    Arc<dyn rustls::server::ProducesTickets>,
    Arc<dyn rustls::server::StoresServerSessions>,
);

impl Tickets {
    pub fn new() -> Self {
        Self(
            rustls::crypto::ring::Ticketer::new().expect("a ticket key"),
            rustls::server::ServerSessionMemoryCache::new(4096),
        )
    }
}

impl Default for Tickets {
    fn default() -> Self {
        Self::new()
    }
}

struct Tls {
    /// By `TlsVersions`, in its order.
    configs: Mutex<[Arc<rustls::ServerConfig>; 3]>,
    tickets: Tickets,
    versions: Mutex<TlsVersions>,
    handshake_delay: Duration,
}

impl Tls {
    fn config(&self) -> Arc<rustls::ServerConfig> {
        let versions = *self.versions.lock().unwrap();
        self.configs.lock().unwrap()[versions as usize].clone()
    }
}

/// A running server; dropping it stops the accept loop and closes every connection.
pub struct HttpServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    tls: Option<Arc<Tls>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// Sets how `path` (without the query) is answered; unknown paths get 200 "ok".
    pub fn route(&self, path: &str, route: Route) -> &Self {
        self.state.routes.lock().unwrap().insert(path.to_string(), route);
        self
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Forgets the requests received so far.
    pub fn clear(&self) {
        self.state.seen.lock().unwrap().clear();
    }

    /// HTTPS: the TLS versions later handshakes accept.
    pub fn set_tls_versions(&self, versions: TlsVersions) {
        let tls = self.tls.as_ref().expect("an HTTPS server");
        *tls.versions.lock().unwrap() = versions;
    }

    /// HTTPS: later handshakes present `cert`; the ticket key stays, so sessions made with
    /// the old certificate may still be resumed (as a reload that keeps the ticket key allows).
    pub fn set_certificate(&self, cert: &SelfSigned) {
        let tls = self.tls.as_ref().expect("an HTTPS server");
        *tls.configs.lock().unwrap() = cert.server_configs(&tls.tickets);
    }

    /// HTTPS: the handshakes that failed so far.
    pub fn tls_failures(&self) -> usize {
        self.state.tls_failures.load(Ordering::Relaxed)
    }
}

/// An HTTPS server about to start (`Netns::https_server_with`).
pub struct HttpsServerBuilder<'n> {
    ns: &'n Netns,
    addr: String,
    tls: Tls,
}

impl HttpsServerBuilder<'_> {
    /// Waits `delay` after accepting a connection before the TLS handshake.
    pub fn delayed_handshake(mut self, delay: Duration) -> HttpServer {
        self.tls.handshake_delay = delay;
        self.start()
    }

    pub fn start(self) -> HttpServer {
        self.ns.serve(&self.addr, Some(self.tls))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Netns {
    /// An HTTP/1.1 server listening on `addr` inside this namespace.
    pub fn http_server(&self, addr: &str) -> HttpServer {
        self.serve(addr, None)
    }

    /// An HTTPS server presenting `cert`; it waits `handshake_delay` after accepting a
    /// connection before it starts the TLS handshake.
    pub fn https_server(&self, addr: &str, cert: &SelfSigned, handshake_delay: Duration) -> HttpServer {
        self.https_server_with(addr, cert, &Tickets::new())
            .delayed_handshake(handshake_delay)
    }

    /// An HTTPS server presenting `cert`, issuing and taking the tickets of `tickets`.
    pub fn https_server_with(&self, addr: &str, cert: &SelfSigned, tickets: &Tickets) -> HttpsServerBuilder<'_> {
        HttpsServerBuilder {
            ns: self,
            addr: addr.to_string(),
            tls: Tls {
                configs: Mutex::new(cert.server_configs(tickets)),
                tickets: tickets.clone(),
                versions: Mutex::new(TlsVersions::Both),
                handshake_delay: Duration::ZERO,
            },
        }
    }

    fn serve(&self, addr: &str, tls: Option<Tls>) -> HttpServer {
        let listener = self.tcp_listen(addr);
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        let tls = tls.map(Arc::new);
        let tls_handle = tls.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        accepted = listener.accept() => {
                            let Ok((tcp, peer)) = accepted else { continue };
                            tokio::spawn(connection(tcp, peer, shared.clone(), tls.clone()));
                        }
                    }
                }
            });
            // Dropping the runtime drops every connection task, closing their sockets.
        });
        HttpServer {
            addr,
            state,
            tls: tls_handle,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

async fn connection(tcp: tokio::net::TcpStream, peer: SocketAddr, state: Arc<State>, tls: Option<Arc<Tls>>) {
    let http = hyper::server::conn::http1::Builder::new();
    match tls {
        None => {
            let service = service_fn(move |req| answer(req, peer, None, state.clone()));
            let _ = http.serve_connection(TokioIo::new(tcp), service).await;
        }
        Some(tls) => {
            tokio::time::sleep(tls.handshake_delay).await;
            let failed = |state: &State| state.tls_failures.fetch_add(1, Ordering::Relaxed);
            let key_share = peek_hello(&tcp)
                .await
                .is_some_and(|hello| hello_has_extension(&hello, KEY_SHARE));
            let Ok(start) = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await
            else {
                failed(&state);
                return;
            };
            let Ok(stream) = start.into_stream(tls.config()).await else {
                failed(&state);
                return;
            };
            let conn = stream.get_ref().1;
            let seen = TlsSeen {
                resumed: conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
                version: conn.protocol_version().expect("a finished handshake has a version"),
                suite: conn.negotiated_cipher_suite().expect("and a cipher suite").suite(),
                key_share,
            };
            let service = service_fn(move |req| answer(req, peer, Some(seen.clone()), state.clone()));
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

/// The TLS extension a hello offering TLS 1.3 carries its key shares in (RFC 8446 4.2).
const KEY_SHARE: u16 = 51;

/// The client's first TLS record (its hello), peeked without consuming it, waiting up to
/// ~100 ms for all of it to arrive.
async fn peek_hello(tcp: &tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 1 << 14];
    for _ in 0..50 {
        let n = tcp.peek(&mut buf).await.ok().filter(|&n| n > 0)?;
        if n >= 5 {
            let end = 5 + usize::from(u16::from_be_bytes([buf[3], buf[4]]));
            if n >= end {
                buf.truncate(end);
                return Some(buf);
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// Whether a TLS record holding a ClientHello lists extension `ext`.
fn hello_has_extension(record: &[u8], ext: u16) -> bool {
    fn skip(b: &[u8], n: usize) -> Option<&[u8]> {
        b.get(n..)
    }
    fn u16_at(b: &[u8]) -> Option<usize> {
        Some(usize::from(u16::from_be_bytes([*b.first()?, *b.get(1)?])))
    }
    let walk = || -> Option<bool> {
        // Record header (5), handshake header (4), client version (2), random (32).
        let b = skip(record, 5 + 4 + 2 + 32)?;
        let b = skip(b, 1 + usize::from(*b.first()?))?; // session id
        let b = skip(b, 2 + u16_at(b)?)?; // cipher suites
        let b = skip(b, 1 + usize::from(*b.first()?))?; // compression methods
        let mut exts = b.get(2..2 + u16_at(b)?)?;
        while exts.len() >= 4 {
            if u16_at(exts)? == usize::from(ext) {
                return Some(true);
            }
            exts = skip(exts, 4 + u16_at(&exts[2..])?)?;
        }
        Some(false)
    };
    walk().unwrap_or(false)
}

async fn answer(
    req: Request<Incoming>,
    peer: SocketAddr,
    tls: Option<TlsSeen>,
    state: Arc<State>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    state.seen.lock().unwrap().push(Seen {
        method: req.method().as_str().to_string(),
        target: req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        host: req
            .headers()
            .get(hyper::header::HOST)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()),
        headers,
        peer,
        tls,
    });
    let route = state
        .routes
        .lock()
        .unwrap()
        .get(req.uri().path())
        .cloned()
        .unwrap_or_else(|| Route::status(200).body("ok\n"));
    tokio::time::sleep(route.delay).await;
    let mut resp = Response::new(Full::new(Bytes::from(route.body)));
    *resp.status_mut() = hyper::StatusCode::from_u16(route.status).unwrap();
    for (n, v) in route.headers {
        resp.headers_mut().insert(
            hyper::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
            hyper::header::HeaderValue::from_str(&v).unwrap(),
        );
    }
    Ok(resp)
}
