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
/// The largest response head (and chunk-size line) read.
const MAX_HEAD: usize = 64 * 1024;

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
    #[cfg(any(test, feature = "testing"))]
    pub fn with_timeouts(mut self, connect: Duration, whole: Duration) -> Self {
        self.connect_timeout = connect;
        self.timeout = whole;
        self
    }

    /// Sends `method path`; requests other than GET say `Content-Type: application/json`, as
    /// the API wants of changes.
    pub fn request(&self, method: &str, path: &str) -> Result<Response, ClientError> {
        self.request_with(method, path, &[])
    }

    /// `method path` with a JSON body (a fleet batch).
    pub fn request_with(&self, method: &str, path: &str, body: &[u8]) -> Result<Response, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let mut stream = self.send(method, path, body, deadline)?;
        let mut raw = Vec::new();
        self.read_to_end(&mut stream, &mut raw, deadline)?;
        parse(&raw).ok_or(self.malformed())
    }

    /// `GET path` of a streamed answer (`/v1/events?follow=1`): hands `line` each line of the
    /// body as it arrives until the daemon ends the stream or `line` returns false. The
    /// timeouts bound the connection and the response's head; the body may take forever.
    pub fn follow(&self, path: &str, mut line: impl FnMut(&str) -> bool) -> Result<Followed, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let mut stream = self.send("GET", path, &[], deadline)?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        let head_end = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if raw.len() > MAX_HEAD {
                return Err(self.malformed());
            }
            match self.read_some(&mut stream, &mut buf, deadline)? {
                0 => return Err(self.malformed()),
                n => raw.extend_from_slice(&buf[..n]),
            }
        };
        let head = Head::parse(&raw[..head_end]).ok_or(self.malformed())?;
        if head.status != 200 {
            self.read_to_end(&mut stream, &mut raw, deadline)?;
            return Ok(Followed::Refused(parse(&raw).ok_or(self.malformed())?));
        }
        stream.set_read_timeout(None).map_err(|e| self.io(e))?;
        let mut pending = raw.split_off(head_end);
        let mut body = Vec::new();
        loop {
            let done = if head.chunked {
                take_chunks(&mut pending, &mut body).ok_or(self.malformed())?
            } else {
                body.append(&mut pending);
                false
            };
            while let Some(end) = body.iter().position(|&b| b == b'\n') {
                let keep_going = line(&String::from_utf8_lossy(&body[..end]));
                body.drain(..=end);
                if !keep_going {
                    return Ok(Followed::Ended);
                }
            }
            if done {
                return Ok(Followed::Ended);
            }
            match stream.read(&mut buf) {
                Ok(0) if head.chunked => {
                    return Err(self.io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the daemon closed the stream in the middle",
                    )))
                }
                Ok(0) => return Ok(Followed::Ended),
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    /// Connects and writes the request, within `deadline`.
    fn send(&self, method: &str, path: &str, body: &[u8], deadline: Instant) -> Result<Socket, ClientError> {
        let mut stream = self.connect(deadline)?;
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: probed\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
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
        stream.set_write_timeout(Some(left)).map_err(|e| self.io(e))?;
        stream.write_all(req.as_bytes()).map_err(|e| self.io(e))?;
        stream.write_all(body).map_err(|e| self.io(e))?;
        Ok(stream)
    }

    /// Reads into `buf` what comes before `deadline`; 0 at the end of the stream.
    fn read_some(&self, stream: &mut Socket, buf: &mut [u8], deadline: Instant) -> Result<usize, ClientError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timed_out());
            }
            stream.set_read_timeout(Some(left)).map_err(|e| self.io(e))?;
            match stream.read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    /// Appends to `raw` everything up to the end of the stream, before `deadline`.
    fn read_to_end(&self, stream: &mut Socket, raw: &mut Vec<u8>, deadline: Instant) -> Result<(), ClientError> {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match self.read_some(stream, &mut buf, deadline)? {
                0 => return Ok(()),
                n => raw.extend_from_slice(&buf[..n]),
            }
            if raw.len() as u64 > MAX_RESPONSE {
                return Err(self.malformed());
            }
        }
    }

    fn timed_out(&self) -> ClientError {
        ClientError::Timeout {
            addr: self.api.clone(),
            after: self.timeout,
        }
    }

    fn malformed(&self) -> ClientError {
        ClientError::Malformed { addr: self.api.clone() }
    }

    /// A socket error; a read or write timeout is the request's timeout.
    fn io(&self, source: std::io::Error) -> ClientError {
        if matches!(
            source.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ) {
            self.timed_out()
        } else {
            ClientError::Io {
                addr: self.api.clone(),
                source,
            }
        }
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

/// How a followed stream ended.
#[derive(Debug)]
pub enum Followed {
    /// The daemon ended it (it stopped) or the caller did.
    Ended,
    /// The daemon answered with an error instead of a stream.
    Refused(Response),
}

/// What the CLI needs of a response's head.
struct Head {
    status: u16,
    chunked: bool,
}

impl Head {
    fn parse(head: &[u8]) -> Option<Head> {
        let head = std::str::from_utf8(head).ok()?;
        let status = head.lines().next()?.split_whitespace().nth(1)?.parse().ok()?;
        let chunked = head
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
        Some(Head { status, chunked })
    }
}

fn parse(raw: &[u8]) -> Option<Response> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = Head::parse(&raw[..split])?;
    let mut body = raw[split..].to_vec();
    if head.chunked {
        body = dechunk(&body)?;
    }
    Some(Response {
        status: head.status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// The body of a whole chunked response; None when it is cut short or not chunked.
fn dechunk(b: &[u8]) -> Option<Vec<u8>> {
    let mut rest = b.to_vec();
    let mut out = Vec::new();
    take_chunks(&mut rest, &mut out)?.then_some(out)
}

/// Moves the data of the complete chunks at the front of `buf` to `out`, leaving a partial
/// chunk in `buf`: Some(true) once the last (empty) chunk has been read, None when `buf` is
/// not chunked encoding.
fn take_chunks(buf: &mut Vec<u8>, out: &mut Vec<u8>) -> Option<bool> {
    let mut at = 0;
    let done = loop {
        let rest = &buf[at..];
        let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") else {
            // A size line is a few hex digits and perhaps an extension, never kilobytes.
            if rest.len() > MAX_HEAD {
                return None;
            }
            break false;
        };
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            // The last chunk: then trailers, if any, and an empty line.
            match rest[line_end..].windows(4).position(|w| w == b"\r\n\r\n") {
                Some(end) => {
                    at += line_end + end + 4;
                    break true;
                }
                None => break false,
            }
        }
        let data = line_end + 2;
        let Some(end) = data.checked_add(size).filter(|&e| e + 2 <= rest.len()) else {
            break false;
        };
        if &rest[end..end + 2] != b"\r\n" {
            return None;
        }
        out.extend_from_slice(&rest[data..end]);
        at += end + 2;
    };
    buf.drain(..at);
    Some(done)
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
        // Cut short: no last chunk.
        assert!(parse(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n").is_none());
    }

    #[test]
    fn chunks_are_taken_as_they_complete() {
        let stream = b"5\r\nab\ncd\r\n3;x=1\r\ne\nf\r\n0\r\n\r\n";
        // Fed one byte at a time, the data comes out whole chunks at a time and in order.
        let (mut buf, mut out, mut done) = (Vec::new(), Vec::new(), false);
        let mut seen = Vec::new();
        for &b in stream {
            assert!(!done, "nothing after the last chunk");
            buf.push(b);
            done = take_chunks(&mut buf, &mut out).unwrap();
            seen.push(out.len());
        }
        assert!(done && buf.is_empty());
        assert_eq!(out, b"ab\ncde\nf");
        assert!(seen.iter().all(|&n| [0, 5, 8].contains(&n)), "{seen:?}");
        assert_eq!(take_chunks(&mut b"zz\r\n".to_vec(), &mut Vec::new()), None);
        assert_eq!(take_chunks(&mut b"2\r\nabXY".to_vec(), &mut Vec::new()), None);
    }

    #[test]
    fn a_followed_stream_is_read_line_by_line_as_it_comes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (sent_first, first_sent) = std::sync::mpsc::channel::<()>();
        let (read_first, first_read) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req).unwrap();
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\none\ntw\r\n")
                .unwrap();
            sent_first.send(()).unwrap();
            // The second part only once the client has handed on the first line.
            first_read.recv_timeout(Duration::from_secs(5)).unwrap();
            s.write_all(b"4\r\no\n3\n\r\n0\r\n\r\n").unwrap();
        });
        let mut lines = Vec::new();
        let ended = Client::new(&addr)
            .follow("/v1/events?follow=1", |l| {
                if lines.is_empty() {
                    first_sent.recv_timeout(Duration::from_secs(5)).unwrap();
                    read_first.send(()).unwrap();
                }
                lines.push(l.to_string());
                true
            })
            .unwrap();
        assert!(matches!(ended, Followed::Ended));
        assert_eq!(lines, ["one", "two", "3"]);
        server.join().unwrap();
    }

    #[test]
    fn a_refused_follow_returns_the_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read(&mut [0u8; 1024]).unwrap();
            s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 7\r\n\r\n{\"e\":1}")
                .unwrap();
        });
        match Client::new(&addr).follow("/v1/events?profile=x", |_| true).unwrap() {
            Followed::Refused(r) => assert_eq!((r.status, r.body.as_str()), (404, "{\"e\":1}")),
            Followed::Ended => panic!("a 404 is not a stream"),
        }
        server.join().unwrap();
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
