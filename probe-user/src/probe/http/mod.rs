//! HTTP and HTTPS health probes (SPEC 1 and 2): one HEAD or GET per probe, TLS by rustls, one
//! deadline for connect, handshake and response. A probe on a connection of its own (what the
//! daemon runs) is one exchange of bytes (exchange.rs); kept-alive connections (`probed check
//! --keep-alive`) go through hyper's HTTP/1.1 client.
//!
//! gRPC health checks (grpc.rs) are HTTP checks too: the same connect, TLS, deadline and
//! reasons, with one HTTP/2 call in place of the HTTP/1.1 exchange. Every TLS probe reads the
//! server certificate's expiry (cert.rs).
//!
//! `HttpCheck` (request.rs) says what to send and expect; `HttpProber` runs it.
pub mod cert;
pub mod config;
pub mod error;
mod exchange;
pub mod grpc;
mod kind;
mod pool;
pub mod request;
mod sessions;
pub mod status;
pub mod task;
pub mod tls;

use std::{fmt, io, net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{body::Incoming, client::conn::http1::SendRequest, header, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::{net::TcpStream, task::JoinHandle, time::Instant};

pub use error::HttpCheckError;
pub use exchange::render_request;
pub use kind::Http;
pub use request::{HttpCheck, HttpCheckParts, HttpCheckSpec, Scheme};
pub use status::StatusSet;
pub use tls::TlsVerify;

pub use crate::rules::{Dialect, Method};

const USER_AGENT: &str = concat!("probed/", env!("CARGO_PKG_VERSION"));

/// The step a probe was in when its deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Connect,
    Tls,
    /// Request sent, waiting for the status line and headers.
    Response,
    /// Reading the body for `expect_body`.
    Body,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Tls => "tls",
            Self::Response => "response",
            Self::Body => "body",
        })
    }
}

/// What one probe found. Only `Passed` is healthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpOutcome {
    /// The status is in the healthy set (and the body matched, when asked).
    Passed(u16),
    /// A response whose status is not in the healthy set.
    BadStatus(u16),
    /// The status was healthy but the first `body_limit` bytes lack `expect_body`.
    BodyMismatch(u16),
    Timeout(Phase),
    /// The target answered the SYN with a RST (or ICMP port unreachable).
    Refused,
    /// The connection was reset after it was established.
    Reset,
    /// The server closed the connection without a complete response.
    Closed,
    /// An ICMP host/network unreachable or administratively prohibited.
    Unreachable,
    /// The TLS handshake failed (no certificate, bad certificate in strict mode, ...).
    Tls(String),
    /// Another connect error.
    Connect(String),
    /// This node is short of a resource (descriptors, buffers, ports): no verdict on the target.
    LocalError(String),
    /// A response that is not valid HTTP/1.1 (head, framing or chunking), or a gRPC answer
    /// that breaks its protocol.
    Protocol(String),
    /// gRPC: the health service answered SERVING.
    Serving,
    /// gRPC: the health service answered another status (the number when it has no name).
    NotServing(Result<grpc::ServingStatus, i32>),
    /// gRPC: the call ended with an error status (UNIMPLEMENTED, NOT_FOUND, UNAVAILABLE, ...).
    GrpcStatus {
        code: u32,
        message: String,
    },
}

impl From<&HttpOutcome> for crate::outcome::Outcome {
    fn from(o: &HttpOutcome) -> Self {
        match o {
            HttpOutcome::Passed(_) => crate::outcome::Outcome::Status,
            HttpOutcome::BadStatus(_) => crate::outcome::Outcome::BadStatus,
            HttpOutcome::BodyMismatch(_) => crate::outcome::Outcome::BodyMismatch,
            HttpOutcome::Timeout(_) => crate::outcome::Outcome::Timeout,
            HttpOutcome::Refused => crate::outcome::Outcome::Refused,
            HttpOutcome::Reset => crate::outcome::Outcome::Reset,
            HttpOutcome::Closed => crate::outcome::Outcome::Closed,
            HttpOutcome::Unreachable => crate::outcome::Outcome::Unreachable,
            HttpOutcome::Tls(_) => crate::outcome::Outcome::Tls,
            HttpOutcome::Connect(_) => crate::outcome::Outcome::ConnectError,
            HttpOutcome::LocalError(_) => crate::outcome::Outcome::LocalError,
            HttpOutcome::Protocol(_) => crate::outcome::Outcome::HttpError,
            HttpOutcome::Serving => crate::outcome::Outcome::Serving,
            HttpOutcome::NotServing(_) => crate::outcome::Outcome::NotServing,
            HttpOutcome::GrpcStatus { .. } => crate::outcome::Outcome::GrpcStatus,
        }
    }
}

impl HttpOutcome {
    pub fn healthy(&self) -> bool {
        matches!(self, Self::Passed(_) | Self::Serving)
    }
}

impl fmt::Display for HttpOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Passed(s) | Self::BadStatus(s) => write!(f, "status {s}"),
            Self::BodyMismatch(_) => f.write_str("body mismatch"),
            Self::Timeout(p) => write!(f, "timeout {p}"),
            Self::Refused => f.write_str("refused"),
            Self::Reset => f.write_str("reset"),
            Self::Closed => f.write_str("closed"),
            Self::Unreachable => f.write_str("unreachable"),
            Self::Tls(e) => write!(f, "tls error: {e}"),
            Self::Connect(e) => write!(f, "connect error: {e}"),
            Self::LocalError(e) => write!(f, "local error: {e}"),
            Self::Protocol(e) => write!(f, "http error: {e}"),
            Self::Serving => f.write_str("SERVING"),
            Self::NotServing(Ok(s)) => f.write_str(s.name()),
            Self::NotServing(Err(n)) => write!(f, "serving status {n}"),
            Self::GrpcStatus { code, message } => {
                match grpc::code_name(*code) {
                    Some(name) => write!(f, "grpc status {name}")?,
                    None => write!(f, "grpc status {code}")?,
                }
                // The server's words, kept short: a reason is one line in a status view.
                let message: String = message.chars().filter(|c| !c.is_control()).take(200).collect();
                if message.is_empty() {
                    Ok(())
                } else {
                    write!(f, ": {message}")
                }
            }
        }
    }
}

/// The result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpReport {
    pub outcome: HttpOutcome,
    /// From the start of the probe to the response head (or the end of the body match), or
    /// to the failure. This is the response time of the success window.
    pub elapsed: Duration,
    /// The response status, whenever a response head arrived.
    pub status: Option<u16>,
    /// Over TLS: when the server's certificate expires (its `notAfter`, Unix seconds), read
    /// from every handshake that got that far, whatever the verdict. A resumed session
    /// gives the certificate of the handshake that made it.
    pub cert_not_after: Option<i64>,
}

impl HttpReport {
    pub fn healthy(&self) -> bool {
        self.outcome.healthy()
    }
}

/// A probe's TLS stream: every read and write is work on its target's connection for the
/// session store (`tls::Scoped`).
type TlsStream = tls::Scoped<tokio_rustls::client::TlsStream<TcpStream>>;

/// Runs HTTP(S) checks. One prober serves many targets and checks; it holds the shared
/// TLS configuration and, in keep-alive mode, a few idle connections per target.
pub struct HttpProber {
    /// Built by the first HTTPS probe (a node without HTTPS checks has no use for it); its
    /// session store grows with the targets, up to `tls::RESUMABLE_TARGETS`.
    presented: std::sync::OnceLock<tls::TlsClient>,
    keep_alive: bool,
    idle: pool::Pool,
}

impl Default for HttpProber {
    fn default() -> Self {
        Self::new()
    }
}

/// A probe that ended early; `status` is set when a response head had arrived.
struct Failed {
    outcome: HttpOutcome,
    status: Option<u16>,
}

impl From<HttpOutcome> for Failed {
    fn from(outcome: HttpOutcome) -> Self {
        Self { outcome, status: None }
    }
}

impl HttpProber {
    /// A prober that opens a connection per probe and closes it afterwards.
    pub fn new() -> Self {
        Self {
            presented: std::sync::OnceLock::new(),
            keep_alive: false,
            idle: pool::Pool::new(),
        }
    }

    /// Reuses connections between probes of one target (HTTP keep-alive). The first probe
    /// pays for connect and handshake; later ones only measure the request.
    pub fn with_keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }

    /// Runs one check against `target`. Never fails: every problem is an outcome.
    pub async fn probe(&self, target: SocketAddr, check: &HttpCheck) -> HttpReport {
        self.probe_within(target, check, check.timeout()).await
    }

    /// Runs one check against `target` within `budget` instead of the check's timeout (a
    /// kernel probe settled through a socket has what is left of its time).
    pub async fn probe_within(&self, target: SocketAddr, check: &HttpCheck, budget: std::time::Duration) -> HttpReport {
        let start = Instant::now();
        let deadline = start + budget;
        let mut cert = None;
        let mut report = match self.run(target, check, start, deadline, &mut cert).await {
            Ok(report) => report,
            Err(f) => HttpReport {
                outcome: f.outcome,
                elapsed: start.elapsed(),
                status: f.status,
                cert_not_after: None,
            },
        };
        report.cert_not_after = cert;
        report
    }

    async fn run(
        &self,
        target: SocketAddr,
        check: &HttpCheck,
        start: Instant,
        deadline: Instant,
        cert: &mut Option<i64>,
    ) -> Result<HttpReport, Failed> {
        // gRPC calls always take a connection of their own (resumed TLS sessions still save
        // the full handshake).
        if !self.keeps(check) {
            return self.run_once(target, check, start, deadline, cert).await;
        }
        let key = pool::PoolKey {
            target,
            scheme: check.scheme(),
            server_name: check.server_name(target).to_str().into_owned(),
            client: check.tls().client_id(),
        };
        let mut pooled = self.idle.checkout(&key);
        let (mut sender, mut conn_task, response) = loop {
            let reused = pooled.is_some();
            let (mut sender, task) = match pooled.take() {
                Some(s) => (s, None),
                None => {
                    let (s, t) = self.connect(target, check, deadline, cert).await?;
                    (s, Some(t))
                }
            };
            let request = Self::request(target, check);
            match tokio::time::timeout_at(deadline, sender.send_request(request)).await {
                Err(_) => {
                    abort(task);
                    return Err(HttpOutcome::Timeout(Phase::Response).into());
                }
                Ok(Ok(resp)) => break (sender, task, resp),
                // An idle connection the server had already closed: try once on a new one.
                Ok(Err(_)) if reused => continue,
                Ok(Err(e)) => {
                    abort(task);
                    return Err(classify_hyper(&e).into());
                }
            }
        };
        let mut elapsed = start.elapsed();
        let code = response.status().as_u16();
        let healthy_status = check.status().contains(code);
        let mut reusable = true;
        let outcome = match check.expect_body().filter(|_| healthy_status) {
            Some(needle) => {
                let read =
                    tokio::time::timeout_at(deadline, read_body(response, Some(needle), check.body_limit())).await;
                elapsed = start.elapsed();
                let failed = |outcome| Failed {
                    outcome,
                    status: Some(code),
                };
                match read {
                    Err(_) => {
                        abort(conn_task.take());
                        return Err(failed(HttpOutcome::Timeout(Phase::Body)));
                    }
                    Ok(Err(e)) => {
                        abort(conn_task.take());
                        return Err(failed(classify_hyper(&e)));
                    }
                    Ok(Ok(BodyRead { found, complete })) => {
                        reusable &= complete;
                        if found {
                            HttpOutcome::Passed(code)
                        } else {
                            HttpOutcome::BodyMismatch(code)
                        }
                    }
                }
            }
            None => {
                if reusable && check.method() == Method::Get {
                    // The body must be drained before the connection carries another request.
                    let read = tokio::time::timeout_at(deadline, read_body(response, None, check.body_limit())).await;
                    reusable &= matches!(read, Ok(Ok(BodyRead { complete: true, .. })));
                }
                if healthy_status {
                    HttpOutcome::Passed(code)
                } else {
                    HttpOutcome::BadStatus(code)
                }
            }
        };
        // An idle connection is ready at once; one that is not within the deadline is not kept.
        let ready = reusable && matches!(tokio::time::timeout_at(deadline, sender.ready()).await, Ok(Ok(())));
        if ready {
            self.idle.checkin(key, sender);
        } else {
            abort(conn_task.take());
        }
        Ok(HttpReport {
            outcome,
            elapsed,
            status: Some(code),
            cert_not_after: None,
        })
    }

    /// A probe on a connection of its own: connect, TLS for HTTPS, then one exchange
    /// (`exchange.rs`); the connection is reset when the answer is in.
    async fn run_once(
        &self,
        target: SocketAddr,
        check: &HttpCheck,
        start: Instant,
        deadline: Instant,
        cert: &mut Option<i64>,
    ) -> Result<HttpReport, Failed> {
        if let Some(service) = check.grpc_service() {
            return match check.scheme() {
                Scheme::Http => {
                    let tcp = self.connect_tcp(target, deadline, false).await?;
                    grpc::call(tcp, check, service, target, start, deadline).await
                }
                Scheme::Https => {
                    let tls = self.tls_connect(target, check, deadline, cert).await?;
                    grpc::call(tls, check, service, target, start, deadline).await
                }
            };
        }
        let request = exchange::render_request(check, target);
        match check.scheme() {
            Scheme::Http => {
                let mut tcp = self.connect_tcp(target, deadline, false).await?;
                exchange::exchange(&mut tcp, &request, check, start, deadline).await
            }
            Scheme::Https => {
                let mut tls = self.tls_connect(target, check, deadline, cert).await?;
                exchange::exchange(&mut tls, &request, check, start, deadline).await
            }
        }
    }

    /// Whether probes of `check` keep their connection: the prober's keep-alive mode or the
    /// check's own, never for gRPC (a call takes a connection of its own).
    fn keeps(&self, check: &HttpCheck) -> bool {
        (self.keep_alive || check.keeps_alive()) && check.grpc_service().is_none()
    }

    /// A TCP connection to `target` by `deadline`, Nagle off; reset on close unless `kept`
    /// for later probes.
    async fn connect_tcp(&self, target: SocketAddr, deadline: Instant, kept: bool) -> Result<TcpStream, Failed> {
        let socket = match target {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .map_err(|e| Failed::from(classify_connect(&e)))?;
        // The request is one small write; Nagle would only delay it.
        let _ = socket.set_nodelay(true);
        if !kept {
            let sock = socket2::SockRef::from(&socket);
            // A probe's connection ends with a reset once its answer is in, as HAProxy's checks
            // do: no FIN exchange, and no TIME_WAIT left on either end (at thousands of checks
            // a second, the backend's would otherwise hold tens of thousands).
            let _ = sock.set_linger(Some(Duration::ZERO));
            // Delayed ACKs from the start: the handshake's last ACK rides on the request, and
            // the response is never acknowledged alone before the reset. Three packets to the
            // backend per check instead of five, as HAProxy's tcp-smart-connect sends.
            let _ = sock.set_tcp_quickack(false);
        }
        match tokio::time::timeout_at(deadline, socket.connect(target)).await {
            Err(_) => Err(HttpOutcome::Timeout(Phase::Connect).into()),
            Ok(Err(e)) => Err(classify_connect(&e).into()),
            Ok(Ok(s)) => Ok(s),
        }
    }

    /// A TCP connection to `target` with TLS on it (offering ALPN h2 for gRPC); `cert` gets
    /// the server certificate's expiry. A server whose last session was TLS 1.2 is greeted
    /// with TLS 1.2 alone (see `tls::TlsClient`); if that handshake fails before the deadline,
    /// the probe connects once more offering both versions, so a server that moved to TLS 1.3
    /// only costs one connection, not a failed probe.
    async fn tls_connect(
        &self,
        target: SocketAddr,
        check: &HttpCheck,
        deadline: Instant,
        cert: &mut Option<i64>,
    ) -> Result<TlsStream, Failed> {
        let client = match check.tls().own_client() {
            Some(own) => own,
            None => self.presented.get_or_init(tls::presented_client),
        };
        let name = check.server_name(target);
        let h2 = check.grpc_service().is_some();
        let (config, tls12_only) = client.config_for(target, &name, h2);
        let kept = self.keeps(check);
        let tcp = self.connect_tcp(target, deadline, kept).await?;
        let first = Self::tls_handshake(config, name.clone(), target, tcp, deadline).await;
        let stream = match first {
            Err(f) if tls12_only && matches!(f.outcome, HttpOutcome::Tls(_) | HttpOutcome::Reset) => {
                client.forget_tls12(target, &name);
                let (config, _) = client.config_for(target, &name, h2);
                let tcp = self.connect_tcp(target, deadline, kept).await?;
                Self::tls_handshake(config, name.clone(), target, tcp, deadline).await
            }
            other => other,
        }?;
        let conn = stream.inner.get_ref().1;
        *cert = if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
            // A resumed handshake carries no certificate (rustls shows the stored chain): the
            // target's own last full handshake says when its certificate expires.
            client.not_after(target, &name)
        } else {
            let not_after = conn
                .peer_certificates()
                .and_then(<[_]>::first)
                .and_then(|leaf| self::cert::not_after(leaf));
            client.verified(target, &name, not_after);
            not_after
        };
        Ok(stream)
    }

    /// The handshake with `name` at `target`, each step of it (and of the stream after)
    /// work on `target`'s connection for the session store (`tls::Scoped`).
    async fn tls_handshake(
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        target: SocketAddr,
        tcp: TcpStream,
        deadline: Instant,
    ) -> Result<TlsStream, Failed> {
        let connector = tokio_rustls::TlsConnector::from(config);
        // The hello (and the session it offers) is made here, at once.
        let shake = tls::for_target(target, || connector.connect(name, tcp));
        match tokio::time::timeout_at(deadline, tls::Scoped::new(shake, target)).await {
            Err(_) => Err(HttpOutcome::Timeout(Phase::Tls).into()),
            Ok(Err(e)) => Err(classify_tls(&e).into()),
            Ok(Ok(stream)) => Ok(tls::Scoped::new(stream, target)),
        }
    }

    fn request(target: SocketAddr, check: &HttpCheck) -> Request<Empty<Bytes>> {
        let mut req = Request::new(Empty::new());
        *req.method_mut() = match check.method() {
            Method::Head => hyper::Method::HEAD,
            Method::Get => hyper::Method::GET,
        };
        *req.uri_mut() = check.uri().clone();
        let h = req.headers_mut();
        let host = check.host_header(target);
        h.insert(
            header::HOST,
            header::HeaderValue::from_str(&host).expect("validated host is a valid header value"),
        );
        h.insert(header::USER_AGENT, header::HeaderValue::from_static(USER_AGENT));
        for (name, value) in check.headers() {
            h.insert(name.clone(), value.clone());
        }
        req
    }

    /// Connects, shakes hands (for HTTPS) and starts the HTTP/1.1 connection task: the
    /// keep-alive path, whose connections outlive a probe.
    async fn connect(
        &self,
        target: SocketAddr,
        check: &HttpCheck,
        deadline: Instant,
        cert: &mut Option<i64>,
    ) -> Result<(SendRequest<Empty<Bytes>>, JoinHandle<()>), Failed> {
        match check.scheme() {
            Scheme::Http => handshake(self.connect_tcp(target, deadline, true).await?).await,
            Scheme::Https => handshake(self.tls_connect(target, check, deadline, cert).await?).await,
        }
    }
}

async fn handshake<T>(io: T) -> Result<(SendRequest<Empty<Bytes>>, JoinHandle<()>), Failed>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| Failed::from(classify_hyper(&e)))?;
    // The connection task owns the socket; aborting it closes the socket.
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, task))
}

fn abort(task: Option<JoinHandle<()>>) {
    if let Some(t) = task {
        t.abort();
    }
}

struct BodyRead {
    found: bool,
    /// The whole body was read, so the connection can carry another request.
    complete: bool,
}

/// Reads the body until `needle` shows up, the body ends, or `limit` bytes were read.
/// Without a needle it only drains.
async fn read_body(
    response: Response<Incoming>,
    needle: Option<&[u8]>,
    limit: usize,
) -> Result<BodyRead, hyper::Error> {
    let mut body = response.into_body();
    let mut seen: Vec<u8> = Vec::new();
    let mut drained = 0usize;
    let mut found = false;
    loop {
        let Some(frame) = body.frame().await else {
            return Ok(BodyRead { found, complete: true });
        };
        let Ok(data) = frame?.into_data() else { continue };
        let Some(needle) = needle else {
            drained += data.len();
            if drained > limit {
                return Ok(BodyRead { found, complete: false });
            }
            continue;
        };
        let room = limit - seen.len();
        // Only the new bytes, plus a needle's length of overlap, can hold a new match.
        let from = seen.len().saturating_sub(needle.len() - 1);
        seen.extend_from_slice(&data[..data.len().min(room)]);
        found = seen[from..].windows(needle.len()).any(|w| w == needle);
        if found || seen.len() >= limit {
            return Ok(BodyRead { found, complete: false });
        }
    }
}

fn classify_connect(e: &io::Error) -> HttpOutcome {
    use io::ErrorKind as K;
    if e.raw_os_error().is_some_and(crate::outcome::is_local_resource_errno) {
        return HttpOutcome::LocalError(e.to_string());
    }
    match e.kind() {
        K::ConnectionRefused => HttpOutcome::Refused,
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => HttpOutcome::Reset,
        K::HostUnreachable | K::NetworkUnreachable => HttpOutcome::Unreachable,
        K::TimedOut => HttpOutcome::Timeout(Phase::Connect),
        _ => match e.raw_os_error() {
            Some(libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EACCES | libc::EPERM) => HttpOutcome::Unreachable,
            _ => HttpOutcome::Connect(e.to_string()),
        },
    }
}

fn classify_tls(e: &io::Error) -> HttpOutcome {
    use io::ErrorKind as K;
    if let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
        return HttpOutcome::Tls(tls.to_string());
    }
    match e.kind() {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => HttpOutcome::Reset,
        K::UnexpectedEof => HttpOutcome::Tls("connection closed during the handshake".into()),
        _ => HttpOutcome::Tls(e.to_string()),
    }
}

fn classify_hyper(e: &hyper::Error) -> HttpOutcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            return match classify_connect(io) {
                HttpOutcome::Connect(m) => HttpOutcome::Protocol(m),
                other => other,
            };
        }
        source = s.source();
    }
    if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
        HttpOutcome::Closed
    } else {
        HttpOutcome::Protocol(e.to_string())
    }
}
