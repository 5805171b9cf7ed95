//! A small blocking HTTP/1.1 client for the CLI (`probed status`, `probed reload`) and the
//! tests: one request per connection, over the unix socket or TCP, bounded in time end to end.
use std::{
    io::{Read, Write},
    path::Path,
    time::{Duration, Instant},
};

use socket2::{Domain, SockAddr, Socket, Type};

/// The daemon's API when neither the config nor `--api` says otherwise.
pub const DEFAULT_API: &str = "unix:/run/probed/api.sock";
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a whole request may take, connect included: a stuck daemon never hangs the CLI.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read; the status of a big fleet is a few MiB.
const MAX_RESPONSE: u64 = 256 * 1024 * 1024;

/// Errors talking to the API.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connect to the API at {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("talk to the API at {addr}")]
    Io {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the API at {addr} did not answer within {after:?}")]
    Timeout { addr: String, after: Duration },
    #[error("the API at {addr} sent something that is not an HTTP response")]
    Malformed { addr: String },
    #[error("read the API token from {}", path.display())]
    Token {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr} is not an API address: write unix:/PATH or HOST:PORT")]
    BadAddress { addr: String },
}

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// One daemon's API, with what every request needs.
#[derive(Debug, Clone)]
pub struct Client {
    api: String,
    token: Option<String>,
    connect_timeout: Duration,
    timeout: Duration,
}

impl Client {
    /// `api` is `unix:/run/probed/api.sock` or `127.0.0.1:9180`.
    pub fn new(api: &str) -> Self {
        Self {
            api: api.to_string(),
            token: None,
            connect_timeout: CONNECT_TIMEOUT,
            timeout: REQUEST_TIMEOUT,
        }
    }

    /// Sends `Authorization: Bearer <token>` (what TCP needs for changes).
    #[must_use]
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.trim().to_string());
        self
    }

    /// Reads the token from `path` (its first line, surrounding whitespace ignored).
    pub fn with_token_file(self, path: &Path) -> Result<Self, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClientError::Token {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(self.with_token(&text))
    }

    #[must_use]
    pub fn with_timeouts(mut self, connect: Duration, whole: Duration) -> Self {
        self.connect_timeout = connect;
        self.timeout = whole;
        self
    }

    /// Sends `method path`; requests other than GET say `Content-Type: application/json`, as
    /// the API wants of changes.
    pub fn request(&self, method: &str, path: &str) -> Result<Response, ClientError> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        let api = self.api.as_str();
        let timed_out = || ClientError::Timeout {
            addr: api.to_string(),
            after: self.timeout,
        };
        let mut stream = self.connect(deadline)?;
        let io = |source: std::io::Error| {
            if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                timed_out()
            } else {
                ClientError::Io {
                    addr: api.to_string(),
                    source,
                }
            }
        };
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: probed\r\nConnection: close\r\nContent-Length: 0\r\n");
        if !method.eq_ignore_ascii_case("GET") && !method.eq_ignore_ascii_case("HEAD") {
            req.push_str("Content-Type: application/json\r\n");
        }
        if let Some(t) = &self.token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str("\r\n");
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        stream.set_write_timeout(Some(left)).map_err(io)?;
        stream.write_all(req.as_bytes()).map_err(io)?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            stream.set_read_timeout(Some(left)).map_err(io)?;
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
            if raw.len() as u64 > MAX_RESPONSE {
                return Err(ClientError::Malformed { addr: api.to_string() });
            }
        }
        parse(&raw).ok_or(ClientError::Malformed { addr: api.to_string() })
    }

    /// Connects within the connect timeout and what is left of the whole one. A unix connect
    /// blocks too when the daemon's backlog is full.
    fn connect(&self, deadline: Instant) -> Result<Socket, ClientError> {
        let api = self.api.as_str();
        let connect = |source| ClientError::Connect {
            addr: api.to_string(),
            source,
        };
        let (domain, addr) = match api.strip_prefix("unix:") {
            Some(p) => (Domain::UNIX, SockAddr::unix(p).map_err(connect)?),
            None => {
                use std::net::ToSocketAddrs;
                let addr = api
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or(ClientError::BadAddress { addr: api.to_string() })?;
                (Domain::for_address(addr), SockAddr::from(addr))
            }
        };
        let socket = Socket::new(domain, Type::STREAM, None).map_err(connect)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let wait = self.connect_timeout.min(left).max(Duration::from_millis(1));
        socket.connect_timeout(&addr, wait).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                ClientError::Timeout {
                    addr: api.to_string(),
                    after: wait,
                }
            } else {
                connect(e)
            }
        })?;
        Ok(socket)
    }
}

/// Sends `method path` to `api` (`unix:/run/probed/api.sock` or `127.0.0.1:9180`) with the
/// default timeouts and no token.
pub fn request(api: &str, method: &str, path: &str) -> Result<Response, ClientError> {
    Client::new(api).request(method, path)
}

fn parse(raw: &[u8]) -> Option<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut body = raw[split + 4..].to_vec();
    let status: u16 = head.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
    let chunked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Response {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked() {
        let r = parse(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "{}"));
        let r = parse(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .unwrap();
        assert_eq!((r.status, r.body.as_str()), (404, "abcde"));
        assert!(parse(b"garbage").is_none());
    }

    #[test]
    fn a_daemon_that_never_answers_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // Accepts and holds the connection without a word until the client gives up.
        let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
        let start = Instant::now();
        let e = Client::new(&addr)
            .with_timeouts(Duration::from_millis(300), Duration::from_millis(500))
            .request("GET", "/v1/status")
            .unwrap_err();
        let took = start.elapsed();
        assert!(matches!(e, ClientError::Timeout { .. }), "{e}: {e:?}");
        assert!(
            took >= Duration::from_millis(450) && took < Duration::from_secs(3),
            "{took:?}"
        );
        drop(held.join());
    }

    #[test]
    fn the_default_timeout_bounds_a_request() {
        assert!(CONNECT_TIMEOUT <= REQUEST_TIMEOUT && REQUEST_TIMEOUT <= Duration::from_secs(10));
        let c = Client::new("unix:/nonexistent");
        assert_eq!((c.connect_timeout, c.timeout), (CONNECT_TIMEOUT, REQUEST_TIMEOUT));
    }
}
