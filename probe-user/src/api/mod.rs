//! The HTTP/1.1 JSON API on loopback TCP or a unix socket: status (GetHealthStatus),
//! selection, enable/disable, reload and Prometheus metrics. Every handler is a request to the
//! runner through `Control`; nothing here holds state.
mod auth;
pub mod client;
mod events;
mod limits;
mod socket;
mod stream;

use std::{convert::Infallible, net::IpAddr, path::PathBuf, sync::Arc};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::{
    body::{Body, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    sync::oneshot,
};

use crate::{
    config::{Api, ApiListen},
    daemon::{Control, RequestError, SelectQuery},
    status::{AdminState, Family},
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

    fn peer_key(stream: &Self::Stream, _: &auth::Peer) -> limits::PeerKey {
        stream
            .peer_addr()
            .map_or(limits::PeerKey::Unknown, |a| limits::PeerKey::Address(a.ip()))
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
            let entry = match table.admit(key.clone(), auth::is_operator(&peer, &policy)) {
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
                if !slot.busy() {
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
    route(req, control, &access.feed).await
}

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// Whether `req` is a fleet batch, the one request with a body.
fn is_batch(req: &Request<Incoming>) -> bool {
    let segs: Vec<&str> = req.uri().path().split('/').filter(|s| !s.is_empty()).collect();
    req.method() == Method::POST && matches!(segs.as_slice(), ["v1", "profiles", _, "endpoints"])
}

/// `POST /v1/profiles/NAME/endpoints`: a batch of endpoint changes (`crate::fleet`).
async fn fleet_batch(req: Request<Incoming>, control: Control, profile: &str) -> Reply {
    let body = match http_body_util::Limited::new(req.into_body(), limits::MAX_BATCH_BYTES as usize)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let mut r = error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the batch could not be read ({e}); a body is at most {} bytes",
                    limits::MAX_BATCH_BYTES
                ),
            );
            r.headers_mut()
                .insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            return r;
        }
    };
    let batch: crate::fleet::Batch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "the body is not a batch ({e}): expected {{\"generation\": N?, \"put\": [ENDPOINT...], \
                     \"set\": [{{\"name\": NAME, KEY: VALUE...}}], \"remove\": [NAME...]}}"
                ),
            )
        }
    };
    match control.fleet(profile, batch).await {
        Err(RequestError::BadBatch(errors)) => {
            let problems: Vec<serde_json::Value> = errors
                .iter()
                .map(|e| serde_json::json!({ "field": e.field, "value": e.value, "problem": e.problem }))
                .collect();
            let body = serde_json::json!({
                "error": RequestError::BadBatch(errors.clone()).to_string(),
                "problems": problems,
            });
            Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(body.to_string().into()))
                .expect("static headers are valid")
        }
        r => json(r),
    }
}

/// The most endpoints one paged status request may ask for.
const MAX_PAGE: usize = 10_000;

async fn route(req: Request<Incoming>, control: Control, feed: &events::Feed) -> Reply {
    let method = req.method().clone();
    let segments: Vec<String> = req
        .uri()
        .path()
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let query = req.uri().query().unwrap_or("").to_string();
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["v1", "status"]) => match param(&query, "stream").as_deref() {
            None | Some("0" | "false") => match control.status_page(None, 0, 0).await {
                Ok(profiles) => document(control, profiles, true),
                Err(e) => request_error(e),
            },
            Some("1" | "true") => Response::builder()
                .header(header::CONTENT_TYPE, "application/x-ndjson")
                .body(stream::status(control).boxed())
                .expect("static headers are valid"),
            Some(other) => error(
                StatusCode::BAD_REQUEST,
                &format!("stream={other:?}: expected 1 or true (JSON lines, a page at a time), 0 or false"),
            ),
        },
        (&Method::GET, ["v1", "status", profile]) => {
            if param(&query, "offset").is_none() && param(&query, "limit").is_none() {
                return match control.status_page(Some(profile), 0, 0).await {
                    Ok(profiles) => document(control, profiles, false),
                    Err(e) => request_error(e),
                };
            }
            let page = number(&query, "offset", 0, usize::MAX)
                .and_then(|offset| Ok((offset, number(&query, "limit", stream::PAGE, MAX_PAGE)?)));
            let (offset, limit) = match page {
                Ok(p) => p,
                Err(why) => return error(StatusCode::BAD_REQUEST, &why.to_string()),
            };
            json(
                control
                    .status_page(Some(profile), offset, limit)
                    .await
                    .and_then(|mut v| v.pop().ok_or_else(|| RequestError::NoProfile(profile.to_string()))),
            )
        }
        (&Method::GET, ["v1", "status", profile, endpoint]) => json(control.endpoint(profile, endpoint).await),
        (&Method::GET, ["v1", "select", profile]) => {
            let source = param(&query, "source");
            let Some(source) = source.and_then(|s| s.parse::<IpAddr>().ok()) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "source=IP is required, e.g. /v1/select/web?source=192.0.2.1",
                );
            };
            let family = match param(&query, "family").as_deref() {
                None => None,
                Some("ipv4") => Some(Family::Ipv4),
                Some("ipv6") => Some(Family::Ipv6),
                Some(other) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("family={other:?}: expected ipv4 (A records) or ipv6 (AAAA records)"),
                    )
                }
            };
            let select = SelectQuery {
                source,
                region: param(&query, "region"),
                family,
            };
            json(control.select(profile, select).await)
        }
        (&Method::POST, ["v1", "endpoints", profile, endpoint, action]) => {
            let state = match *action {
                "enable" => AdminState::Enabled,
                "disable" => AdminState::Disabled,
                "always-serve" => AdminState::AlwaysServe,
                "drain" => AdminState::Drain,
                _ => {
                    return error(
                        StatusCode::NOT_FOUND,
                        "actions are enable, disable, always-serve and drain",
                    )
                }
            };
            json(control.set_admin(profile, endpoint, state).await)
        }
        (&Method::GET, ["v1", "profiles", profile, "endpoints"]) => {
            // All of them unless a page is asked for: a control plane reconciles against the
            // whole set (a page at a time for large fleets, each carrying the generation).
            let page = number(&query, "offset", 0, usize::MAX)
                .and_then(|offset| Ok((offset, number(&query, "limit", usize::MAX, usize::MAX)?)));
            match page {
                Ok((offset, limit)) => json(control.fleet_view(profile, offset, limit).await),
                Err(why) => error(StatusCode::BAD_REQUEST, &why.to_string()),
            }
        }
        (&Method::POST, ["v1", "profiles", profile, "endpoints"]) => {
            let profile = profile.to_string();
            fleet_batch(req, control, &profile).await
        }
        (&Method::POST, ["v1", "profiles", profile, action]) => {
            let enabled = match *action {
                "enable" => true,
                "disable" => false,
                _ => return error(StatusCode::NOT_FOUND, "profile actions are enable and disable"),
            };
            json(control.set_profile_enabled(profile, enabled).await)
        }
        (&Method::POST, ["v1", "reload"]) => json(control.reload(None).await),
        (&Method::GET, ["v1", "sinks"]) => json(control.sinks().await),
        (&Method::GET, ["v1", "cluster"]) => json(control.cluster().await),
        (&Method::GET, ["v1", "events"]) => {
            // A misspelt profile would follow silence: name it as /v1/status would.
            if let Some(p) = param(&query, "profile") {
                if let Err(e) = control.status_page(Some(&p), 0, 0).await {
                    return request_error(e);
                }
            }
            events_reply(feed, &query)
        }
        (&Method::GET, ["metrics"]) => match control.metrics().await {
            Ok(text) => Response::builder()
                .header(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")
                .body(full(text.into()))
                .expect("static headers are valid"),
            Err(e) => request_error(e),
        },
        (_, ["v1", ..] | ["metrics"]) => error(StatusCode::NOT_FOUND, "no such route; see docs/operations/api.md"),
        _ => error(
            StatusCode::NOT_FOUND,
            "no such route; the API lives under /v1 and /metrics",
        ),
    }
}

/// The status document, streamed (`stream::document`).
fn document(control: Control, profiles: Vec<crate::daemon::views::ProfileView>, array: bool) -> Reply {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(stream::document(control, profiles, array).boxed())
        .expect("static headers are valid")
}

fn json<T: serde::Serialize>(r: Result<T, RequestError>) -> Reply {
    match r {
        Ok(v) => {
            let body = serde_json::to_vec_pretty(&v).expect("views always encode");
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(full(body.into()))
                .expect("static headers are valid")
        }
        Err(e) => request_error(e),
    }
}

fn full(bytes: Bytes) -> BoxBody<Bytes, Infallible> {
    Full::new(bytes).boxed()
}

/// `GET /v1/events[?lines=N][&follow=1][&profile=P]`: newline-delimited JSON.
fn events_reply(feed: &events::Feed, query: &str) -> Reply {
    let follow = match param(query, "follow").as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("follow={other:?}: expected 1 or true (stream new events), 0 or false"),
            )
        }
    };
    let lines = match param(query, "lines") {
        // Without follow: every line kept; following: only what happens from now on.
        None => {
            if follow {
                0
            } else {
                events::RECENT
            }
        }
        Some(n) => match n.parse::<usize>() {
            Ok(n) if n <= events::RECENT => n,
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "lines={n:?}: expected a count from 0 to {} (the events kept)",
                        events::RECENT
                    ),
                )
            }
        },
    };
    let profile = param(query, "profile");
    let ask = events::Ask {
        lines,
        follow,
        profile: profile.as_deref(),
    };
    match feed.open(&ask) {
        Ok(body) => Response::builder()
            .header(header::CONTENT_TYPE, "application/x-ndjson")
            .body(body.boxed())
            .expect("static headers are valid"),
        Err(events::TooMany) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "{} clients already follow the events; try again later",
                events::MAX_FOLLOWERS
            ),
        ),
    }
}

fn request_error(e: RequestError) -> Reply {
    let code = match e {
        RequestError::NoProfile(_) | RequestError::NoEndpoint { .. } | RequestError::NoCluster => StatusCode::NOT_FOUND,
        RequestError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        RequestError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
        RequestError::NotApi(_) | RequestError::Discovered(_) | RequestError::Generation { .. } => StatusCode::CONFLICT,
        RequestError::BadBatch(_) => StatusCode::BAD_REQUEST,
        RequestError::Unsaved(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(code, &e.to_string())
}

fn error(code: StatusCode, message: &str) -> Reply {
    let body = serde_json::json!({ "error": message });
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body.to_string().into()))
        .expect("static headers are valid")
}

/// A query parameter that is not what its key takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}={value:?}: expected a whole number from 0 to {max}")]
struct BadNumber {
    key: &'static str,
    value: String,
    max: usize,
}

/// `key`'s whole number in the query string, `default` when absent.
fn number(query: &str, key: &'static str, default: usize, max: usize) -> Result<usize, BadNumber> {
    match param(query, key) {
        None => Ok(default),
        Some(value) => value
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= max)
            .ok_or(BadNumber { key, value, max }),
    }
}

/// The value of `key` in a query string, percent-decoded.
fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

/// Decodes `%XX` escapes (and `+` is left alone: paths, not forms). Bad escapes stay as written.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const SHORT: limits::Timeouts = limits::Timeouts {
        header_read: Duration::from_millis(300),
        idle: Duration::from_millis(600),
        write_stall: Duration::from_millis(600),
    };

    /// Serves one in-memory connection with `timeouts`; the runner behind it is gone (503).
    fn connect(timeouts: limits::Timeouts) -> tokio::io::DuplexStream {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let table = Arc::new(limits::Table::default());
        let entry = table.admit(limits::PeerKey::Uid(0), true).unwrap();
        let control = Control {
            tx: tokio::sync::mpsc::channel(1).0,
            config_path: None,
            consumers: Arc::default(),
            journal: None,
            discovery: Arc::default(),
        };
        let access = Access {
            peer: Arc::new(auth::Peer::Unix(Some(auth::PeerCred {
                uid: 0,
                gid: 0,
                groups: vec![],
            }))),
            policy: Arc::new(auth::Policy {
                group: None,
                owner: 0,
                token: None,
            }),
            feed: Arc::default(),
        };
        tokio::spawn(async move { serve_connection(server, control, access, &entry, timeouts).await });
        client
    }

    /// Reads until the server closes, with a bound so a failing test does not hang.
    async fn read_until_closed(client: &mut tokio::io::DuplexStream) -> (Vec<u8>, Duration) {
        let start = Instant::now();
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut out))
            .await
            .expect("the server closes the connection within 5 s")
            .expect("read");
        (out, start.elapsed())
    }

    #[tokio::test]
    async fn half_a_request_head_is_closed_after_the_header_timeout() {
        let mut c = connect(SHORT);
        c.write_all(b"GET /v1/status HTTP/1.1\r\nHost: probed\r\nX-Slow: ")
            .await
            .unwrap();
        let (_, took) = read_until_closed(&mut c).await;
        assert!(
            took >= SHORT.header_read - Duration::from_millis(50),
            "closed too early: {took:?}"
        );
        assert!(took < SHORT.header_read * 3, "closed too late: {took:?}");
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed() {
        let mut c = connect(SHORT);
        c.write_all(b"GET /v1/status HTTP/1.1\r\nHost: probed\r\n\r\n")
            .await
            .unwrap();
        let (out, took) = read_until_closed(&mut c).await;
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("HTTP/1.1 503"),
            "the request is answered first: {text}"
        );
        assert!(took < SHORT.idle * 3, "an idle connection lives on: {took:?}");
    }

    #[tokio::test]
    async fn a_request_body_is_refused() {
        let mut c = connect(SHORT);
        c.write_all(b"POST /v1/reload HTTP/1.1\r\nHost: probed\r\nContent-Length: 100000\r\n\r\n")
            .await
            .unwrap();
        let (out, _) = read_until_closed(&mut c).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    }

    #[tokio::test]
    async fn an_oversized_request_head_is_refused() {
        let mut c = connect(SHORT);
        let big = format!(
            "GET /v1/status HTTP/1.1\r\nHost: probed\r\nX-Big: {}\r\n\r\n",
            "a".repeat(limits::MAX_BUF_SIZE * 2)
        );
        // The server may close before it has read everything.
        let _ = c.write_all(big.as_bytes()).await;
        let (out, _) = read_until_closed(&mut c).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.is_empty() || text.starts_with("HTTP/1.1 431"), "{text}");
    }

    #[test]
    fn production_timeouts_are_set() {
        assert_eq!(limits::Timeouts::API.header_read, limits::HEADER_READ_TIMEOUT);
        assert!(limits::HEADER_READ_TIMEOUT <= limits::IDLE_TIMEOUT);
    }

    #[test]
    fn decodes_paths_and_params() {
        assert_eq!(percent_decode("10.0.1.1%3A53"), "10.0.1.1:53");
        assert_eq!(percent_decode("%5B2001%3Adb8%3A%3A53%5D%3A53"), "[2001:db8::53]:53");
        assert_eq!(percent_decode("bad%zz%4"), "bad%zz%4");
        assert_eq!(param("source=192.0.2.1&region=eu", "region").as_deref(), Some("eu"));
        assert_eq!(param("source=192.0.2.1", "region"), None);
    }
}
