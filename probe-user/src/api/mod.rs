//! The HTTP/1.1 JSON API on loopback TCP or a unix socket: status (GetHealthStatus),
//! selection, enable/disable, reload and Prometheus metrics. Every handler is a request to the
//! runner through `Control`; nothing here holds state.
mod auth;
pub mod client;
mod events;
mod limits;
mod owner;
mod query;
mod reply;
mod routes;
mod socket;
mod stream;
#[cfg(test)]
mod tests;

use reply::{error, Reply};
use routes::{is_batch, route};

use std::{convert::Infallible, path::PathBuf, sync::Arc};

use http_body_util::BodyExt;
use hyper::{
    body::{Body, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
    Request, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::oneshot,
};

use crate::{
    config::{Api, ApiListen},
    daemon::Control,
};

/// Why the API could not start.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{op} {}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is {kind}, not a socket: probed never removes it; move it away or set another daemon.api_listen", path.display())]
    NotASocket { path: PathBuf, kind: &'static str },
    #[error("another daemon already serves the API socket {}", path.display())]
    InUse { path: PathBuf },
    #[error("daemon.api_socket_group = {name:?}: no such group; create it (groupadd --system {name}) or name another")]
    NoGroup { name: String },
    #[error("look up group {name:?} for daemon.api_socket_group")]
    GroupLookup {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "give the API socket group {gid} (daemon.api_socket_group): the daemon (uid {uid}) must be root or a \
         member of that group (SupplementaryGroups= in the unit)"
    )]
    Chown {
        gid: u32,
        uid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("listen for the API on {addr}")]
    Tcp {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Token(#[from] auth::TokenError),
}

/// A listening API server; `stop` closes the listener and removes a unix socket file.
pub struct Server {
    addr: String,
    unix_path: Option<PathBuf>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Binds `api.listen` and serves `control` until stopped. Reads come from whoever can
    /// connect; changes need the socket group (unix) or the bearer token (TCP), see auth.rs.
    pub async fn start(api: &Api, control: Control) -> Result<Server, ApiError> {
        let (stop, stop_rx) = oneshot::channel::<()>();
        let feed = Arc::new(events::Feed::default());
        events::Feed::start(feed.clone(), control.clone());
        let owner = crate::kernel::process::euid();
        match &api.listen {
            ApiListen::Tcp(addr) => {
                let token = api
                    .token_file
                    .as_deref()
                    .map(|p| auth::Token::from_file(p, owner))
                    .transpose()?;
                if token.is_none() {
                    log::info!("API on TCP without daemon.api_token_file: changes (POST) are refused over TCP");
                }
                let policy = Arc::new(auth::Policy {
                    group: None,
                    owner,
                    token,
                });
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| ApiError::Tcp { addr: *addr, source })?;
                let bound = listener.local_addr().map(|a| a.to_string()).unwrap_or(addr.to_string());
                let task = accept_loop(listener, stop_rx, control, policy, feed);
                Ok(Server {
                    addr: bound,
                    unix_path: None,
                    stop: Some(stop),
                    task,
                })
            }
            ApiListen::Unix(path) => {
                let group = socket::resolve_group(api)?;
                let listener = socket::bind(path, api.socket_mode, group)?;
                let policy = Arc::new(auth::Policy {
                    group,
                    owner,
                    token: None,
                });
                let task = accept_loop(listener, stop_rx, control, policy, feed);
                Ok(Server {
                    addr: format!("unix:{}", path.display()),
                    unix_path: Some(path.clone()),
                    stop: Some(stop),
                    task,
                })
            }
        }
    }

    /// `127.0.0.1:9180` or `unix:/run/probed/api.sock`, as `--api` takes it.
    pub fn addr(&self) -> String {
        self.addr.clone()
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        if let Some(p) = self.unix_path.take() {
            socket::remove(&p);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(p) = &self.unix_path {
            socket::remove(p);
        }
    }
}

/// A listener the API accepts connections on: loopback TCP or a unix socket.
trait Listener: Send + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept_stream(&self) -> impl std::future::Future<Output = std::io::Result<Self::Stream>> + Send;
    /// Who connected, as far as the transport can tell.
    fn peer(stream: &Self::Stream) -> auth::Peer;
    /// Whom the connection counts against for the cap per peer.
    fn peer_key(stream: &Self::Stream, peer: &auth::Peer) -> limits::PeerKey;
}

impl Listener for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_stream(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }

    fn peer(_: &Self::Stream) -> auth::Peer {
        auth::Peer::Tcp
    }

    /// A remote peer by its address; a loopback one by the uid that owns its socket (any
    /// local user can connect from any address of 127.0.0.0/8).
    fn peer_key(stream: &Self::Stream, _: &auth::Peer) -> limits::PeerKey {
        let Ok(peer) = stream.peer_addr() else {
            return limits::PeerKey::Unknown;
        };
        if !owner::is_loopback(peer.ip()) {
            return limits::PeerKey::Address(peer.ip());
        }
        match stream.local_addr().and_then(|local| owner::uid_of(peer, local)) {
            Ok(uid) => limits::PeerKey::Uid(uid),
            Err(e) => {
                log::debug!("API connection from {peer}: its owner is unknown ({e}); counted with such peers");
                limits::PeerKey::Loopback
            }
        }
    }
}

impl Listener for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_stream(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }

    fn peer(stream: &Self::Stream) -> auth::Peer {
        match socket::peer_cred(stream) {
            Ok(c) => auth::Peer::Unix(Some(c)),
            Err(e) => {
                log::debug!("API connection: cannot read the peer's credentials: {e}");
                auth::Peer::Unix(None)
            }
        }
    }

    fn peer_key(_: &Self::Stream, peer: &auth::Peer) -> limits::PeerKey {
        match peer {
            auth::Peer::Unix(Some(cred)) => limits::PeerKey::Uid(cred.uid),
            _ => limits::PeerKey::Unknown,
        }
    }
}

/// What one connection may do (its peer and the server's policy), and the server's event feed.
#[derive(Clone)]
struct Access {
    peer: Arc<auth::Peer>,
    policy: Arc<auth::Policy>,
    feed: Arc<events::Feed>,
    /// The connection's place, and the table it is in (for the caps on streams and the room
    /// a token holder is made).
    slot: Arc<limits::Slot>,
    table: Arc<limits::Table>,
}

/// Serves every connection `listener` accepts until `stop` fires. An accept error never ends
/// the loop: it is retried with backoff (see `limits`).
fn accept_loop<L: Listener>(
    listener: L,
    mut stop: oneshot::Receiver<()>,
    control: Control,
    policy: Arc<auth::Policy>,
    feed: Arc<events::Feed>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let table = Arc::new(limits::Table::default());
        let mut backoff = limits::AcceptBackoff::new("API");
        loop {
            let accepted = tokio::select! {
                _ = &mut stop => break,
                r = listener.accept_stream() => r,
            };
            let stream = match accepted {
                Ok(stream) => {
                    backoff.succeeded();
                    stream
                }
                Err(e) => {
                    let delay = backoff.failed(&e);
                    tokio::select! {
                        _ = &mut stop => break,
                        () = tokio::time::sleep(delay) => continue,
                    }
                }
            };
            let peer = L::peer(&stream);
            let key = L::peer_key(&stream, &peer);
            // At a cap the oldest idle connection makes room (the peer's own first); with
            // none idle, this one is refused (closed at once).
            let admitted = match table.admit(key.clone(), auth::is_operator(&peer, &policy)) {
                // Over TCP only the request shows a token holder: it gets a place for its
                // head, and room if it has the token (`route_limited`).
                Err(limits::Refused::Full) if auth::may_hold_token(&peer, &policy) => {
                    table.admit_provisional(key.clone())
                }
                other => other,
            };
            let entry = match admitted {
                Ok(e) => e,
                Err(why) => {
                    log::debug!("API: a connection from {key:?} refused: {why:?}");
                    continue;
                }
            };
            let access = Access {
                peer: Arc::new(peer),
                policy: policy.clone(),
                feed: feed.clone(),
                slot: entry.slot.clone(),
                table: table.clone(),
            };
            serve(stream, control.clone(), access, entry);
        }
    })
}

/// The HTTP/1 settings of every API connection.
fn http1_builder(timeouts: limits::Timeouts) -> http1::Builder {
    let mut b = http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(timeouts.header_read)
        .max_buf_size(limits::MAX_BUF_SIZE)
        .max_headers(limits::MAX_HEADERS);
    b
}

fn serve<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    control: Control,
    access: Access,
    entry: limits::Entry,
) {
    tokio::spawn(async move {
        serve_connection(stream, control, access, &entry, limits::Timeouts::API).await;
        drop(entry);
    });
}

/// Serves one connection until the client closes it, a timeout or limit ends it, or it is
/// evicted to make room.
async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    control: Control,
    access: Access,
    entry: &limits::Entry,
    timeouts: limits::Timeouts,
) {
    let slot = entry.slot.clone();
    let service_slot = slot.clone();
    let service = service_fn(move |req| {
        let control = control.clone();
        let access = access.clone();
        // Counted until hyper drops the response body, i.e. has taken all of it.
        let guard = service_slot.request();
        async move {
            let reply = route_limited(req, control, &access).await;
            Ok::<_, Infallible>(reply.map(|body| {
                body.map_frame(move |f| {
                    let _held = &guard;
                    f
                })
            }))
        }
    });
    let io = limits::Tracked {
        inner: stream,
        slot: slot.clone(),
    };
    let conn = http1_builder(timeouts).serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let result = loop {
        // While a request is in flight the connection is never idle; look again later, or
        // when its answer will have waited too long for the client to read it.
        // A request that arrives or a write that starts to wait does not wake this loop: it
        // looks again at least every half stall, so a stall is seen within one and a half
        // times WRITE_STALL.
        let next_look = tokio::time::Instant::now() + timeouts.write_stall / 2;
        let deadline = match (slot.busy(), slot.stalled_since()) {
            (_, Some(since)) => since + timeouts.write_stall,
            (true, None) => next_look,
            (false, None) => slot.idle_deadline(timeouts.idle).min(next_look),
        };
        tokio::select! {
            r = conn.as_mut() => break r,
            () = slot.evict.notified() => {
                if !slot.busy() || slot.hard_evicted() {
                    return;
                }
                // A request arrived after the choice: let it finish, then close.
                conn.as_mut().graceful_shutdown();
            }
            () = tokio::time::sleep_until(deadline) => {
                let now = tokio::time::Instant::now();
                if slot.stalled_since().is_some_and(|since| now >= since + timeouts.write_stall) {
                    log::debug!(
                        "API connection: closed, the client took nothing of its answer for {:?}",
                        timeouts.write_stall
                    );
                    return;
                }
                if !slot.busy() && now >= slot.idle_deadline(timeouts.idle) {
                    log::debug!("API connection: closed after {:?} idle", timeouts.idle);
                    return;
                }
            }
        }
    };
    if let Err(e) = result {
        log::debug!("API connection: {e}");
    }
}

/// Refuses request bodies the API has no use for, and changes the peer may not make, before
/// routing.
async fn route_limited(req: Request<Incoming>, control: Control, access: &Access) -> Reply {
    let upper = req.body().size_hint().upper();
    let batch = is_batch(&req);
    let too_large = match (upper, batch) {
        (Some(n), true) => n > limits::MAX_BATCH_BYTES,
        // A batch sent in chunks is cut off at the limit as it is read.
        (None, true) => false,
        (n, false) => n.is_none_or(|n| n > limits::MAX_BODY_BYTES),
    };
    if too_large {
        let why = if batch {
            format!(
                "a fleet batch body is at most {} bytes; split the batch",
                limits::MAX_BATCH_BYTES
            )
        } else {
            "request bodies are refused: only POST /v1/profiles/NAME/endpoints takes one".to_string()
        };
        let mut r = error(StatusCode::PAYLOAD_TOO_LARGE, &why);
        // The unread body would otherwise be drained or make the next request unreadable.
        r.headers_mut()
            .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        return r;
    }
    let operator = auth::is_operator(&access.peer, &access.policy)
        || auth::holds_token(req.headers(), &access.peer, &access.policy);
    if let Some(refused) = admission(&req, access, operator) {
        return refused;
    }
    if let Err(refusal) = auth::authorize(req.method(), req.headers(), &access.peer, &access.policy) {
        // Debug only: anyone who can connect could otherwise fill the journal.
        log::debug!(
            "API: refused {} {} from {:?}: {}",
            req.method(),
            req.uri().path(),
            access.peer,
            refusal.message
        );
        return error(refusal.status, &refusal.message);
    }
    route(req, control, &access.feed, operator).await
}

/// What the caps say of a request before it is routed: a provisional connection (admitted past
/// a full table) is served only with the token, and makes room; a long-lived stream counts
/// against its peer's share unless the peer is an operator. Some refusal, or None to go on.
fn admission(req: &Request<Incoming>, access: &Access, operator: bool) -> Option<Reply> {
    if access.slot.provisional() {
        if !operator {
            let mut r = error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "the API serves {} connections, all in use; a request with the bearer token is given a place",
                    limits::MAX_CONNECTIONS
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            return Some(r);
        }
        if !access.table.promote(&access.slot) {
            log::debug!("API: a token holder is served one over the connection cap (every place is busy)");
        }
    }
    if operator {
        access.slot.set_operator();
    }
    if is_stream(req) {
        if !operator && access.table.streams_of(access.slot.peer()) >= limits::MAX_STREAMS_PER_PEER {
            return Some(error(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "this client holds {} streams (status?stream=1, events?follow=1) already; close one first",
                    limits::MAX_STREAMS_PER_PEER
                ),
            ));
        }
        access.slot.set_streaming();
    }
    None
}

/// Whether `req` asks for a long-lived stream: `GET /v1/status?stream=1` or
/// `GET /v1/events?follow=1`.
fn is_stream(req: &Request<Incoming>) -> bool {
    if req.method() != hyper::Method::GET {
        return false;
    }
    let query = req.uri().query().unwrap_or("");
    let on = |name: &str| matches!(query::param(query, name).as_deref(), Some("1" | "true"));
    match req.uri().path().trim_end_matches('/') {
        "/v1/status" => on("stream"),
        "/v1/events" => on("follow"),
        _ => false,
    }
}
