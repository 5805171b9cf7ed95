//! A real HTTP/1.1 server (hyper) inside a namespace, with per-path status, body and delay,
//! that records every request; an HTTPS variant with a certificate made by rcgen at test
//! time and an optional pause before the TLS handshake. Servers stop when dropped.
use std::{
    collections::HashMap,
    net::SocketAddr,
    path::Path,
    sync::{Arc, Mutex},
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
    /// Over TLS: whether the connection resumed an earlier session.
    pub resumed: Option<bool>,
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

    /// Writes the certificate as PEM, for `--ca` / strict mode.
    pub fn write_pem(&self, path: &Path) {
        std::fs::write(path, &self.cert_pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)
            .expect("certificate and key match");
        // Stateless session tickets, as nginx issues them: resumption is bounded by what the
        // client keeps, not by a server-side cache.
        let mut config = config;
        config.ticketer = rustls::crypto::ring::Ticketer::new().expect("a ticket key");
        Arc::new(config)
    }
}

struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    handshake_delay: Duration,
}

/// A running server; dropping it stops the accept loop and closes every connection.
pub struct HttpServer {
    pub addr: SocketAddr,
    state: Arc<State>,
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
        let tls = Tls {
            acceptor: tokio_rustls::TlsAcceptor::from(cert.server_config()),
            handshake_delay,
        };
        self.serve(addr, Some(tls))
    }

    fn serve(&self, addr: &str, tls: Option<Tls>) -> HttpServer {
        let listener = self.tcp_listen(addr);
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        let tls = tls.map(Arc::new);
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
            let Ok(stream) = tls.acceptor.accept(tcp).await else {
                return;
            };
            let resumed = stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            let service = service_fn(move |req| answer(req, peer, Some(resumed), state.clone()));
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

async fn answer(
    req: Request<Incoming>,
    peer: SocketAddr,
    resumed: Option<bool>,
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
        resumed,
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
