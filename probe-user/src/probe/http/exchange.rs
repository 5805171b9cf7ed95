//! One HTTP/1.1 request and its response on a connection of its own, without a client
//! library: the request is one write of bytes rendered from the check, the response head is
//! parsed in place (httparse), and the body is read only when a body match needs it, as far
//! as the match or `body_limit`, chunked or not. This is the probe path when connections are
//! not kept alive: a check costs its system calls and little else (no connection task, no
//! header map, no channel between a sender and a connection).
use std::fmt::Write as _;

use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::Instant,
};

use super::{classify_connect, Failed, HttpCheck, HttpOutcome, HttpReport, Method, Phase, USER_AGENT};

/// The most a response head may take. A health endpoint's head is a few hundred bytes.
pub const HEAD_LIMIT: usize = 16 * 1024;
/// Headers parsed per response head; more is a protocol error.
const MAX_HEADERS: usize = 64;

/// The request a check sends to `target`, `Connection: close` included.
pub fn render_request(check: &HttpCheck, target: std::net::SocketAddr) -> Vec<u8> {
    let mut r = String::with_capacity(128);
    let method = match check.method() {
        Method::Head => "HEAD",
        Method::Get => "GET",
    };
    let _ = write!(
        r,
        "{method} {} HTTP/1.1\r\nHost: {}\r\n",
        check.path(),
        check.host_header(target)
    );
    // A custom header replaces the default of the same name; the connection is always closed.
    let custom = |n: &str| check.headers().iter().any(|(name, _)| name.as_str() == n);
    if !custom("user-agent") {
        let _ = write!(r, "User-Agent: {USER_AGENT}\r\n");
    }
    let mut bytes = r.into_bytes();
    for (name, value) in check.headers().iter().filter(|(n, _)| n.as_str() != "connection") {
        bytes.extend_from_slice(name.as_str().as_bytes());
        bytes.extend_from_slice(b": ");
        bytes.extend_from_slice(value.as_bytes());
        bytes.extend_from_slice(b"\r\n");
    }
    bytes.extend_from_slice(b"Connection: close\r\n\r\n");
    bytes
}

/// How the body of a response is delimited (RFC 9112 section 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    /// No body: a HEAD response, 204, 304.
    None,
    Length(u64),
    Chunked,
    /// Until the server closes.
    Close,
}

/// The parts of a response head the probe uses.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    code: u16,
    len: usize,
    framing: Framing,
}

/// A response head the probe cannot use; its text is the check's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadHead {
    #[error("invalid response head: {0}")]
    Invalid(httparse::Error),
    #[error("a response head without a status")]
    NoStatus,
    #[error("an invalid Content-Length")]
    BadLength,
    #[error("two different Content-Length values")]
    TwoLengths,
}

/// A chunked body that breaks RFC 9112's framing; its text is the check's reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadChunk {
    #[error("a chunk size over 15 hex digits")]
    SizeTooLong,
    #[error("a chunk without a size")]
    NoSize,
    #[error("byte {0:#04x} in a chunk size")]
    SizeByte(u8),
    #[error("a chunk size line not ended by CR LF")]
    SizeLine,
    #[error("chunk data longer than its size")]
    TooLong,
    #[error("chunk data not ended by CR LF")]
    DataLine,
    #[error("a trailer line not ended by CR LF")]
    TrailerLine,
}

/// Parses a response head at the start of `buf`: `Ok(None)` while incomplete.
fn parse_head(buf: &[u8], method: Method) -> Result<Option<Head>, BadHead> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(BadHead::Invalid(e)),
    };
    let code = resp.code.ok_or(BadHead::NoStatus)?;
    let mut framing = Framing::Close;
    let mut chunked = false;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            // Chunked is the last coding when present (RFC 9112 6.1).
            chunked = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.rsplit(',').next())
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            let n = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or(BadHead::BadLength)?;
            if matches!(framing, Framing::Length(m) if m != n) {
                return Err(BadHead::TwoLengths);
            }
            framing = Framing::Length(n);
        }
    }
    if chunked {
        framing = Framing::Chunked;
    }
    if method == Method::Head || code == 204 || code == 304 || (100..200).contains(&code) {
        framing = Framing::None;
    }
    Ok(Some(Head { code, len, framing }))
}

/// Decodes a chunked body as it arrives (RFC 9112 section 7.1); trailers are skipped.
#[derive(Debug, Default)]
pub struct Dechunker {
    state: ChunkState,
    /// Digits of the chunk size being read.
    size: u64,
    size_digits: u8,
}

#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum ChunkState {
    /// Hex digits of a chunk size.
    #[default]
    Size,
    /// After the size: extensions, up to CR LF.
    Extension,
    SizeLf,
    Data(u64),
    DataCr,
    DataLf,
    /// After the last chunk: trailer lines, up to an empty line.
    TrailerStart,
    TrailerLine,
    TrailerLf {
        empty: bool,
    },
    Done,
}

impl Dechunker {
    /// Feeds `input`; appends the decoded body bytes to `out`. Returns whether the body has
    /// ended (the zero-size chunk and the trailer section were read).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<bool, BadChunk> {
        let mut i = 0;
        while i < input.len() {
            let b = input[i];
            match self.state {
                ChunkState::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        self.size_digits += 1;
                        if self.size_digits > 15 {
                            return Err(BadChunk::SizeTooLong);
                        }
                        self.size = self.size * 16 + u64::from(d);
                    }
                    None if self.size_digits == 0 => return Err(BadChunk::NoSize),
                    None if b == b'\r' => self.state = ChunkState::SizeLf,
                    None if b == b';' || b == b' ' || b == b'\t' => self.state = ChunkState::Extension,
                    None => return Err(BadChunk::SizeByte(b)),
                },
                ChunkState::Extension => {
                    if b == b'\r' {
                        self.state = ChunkState::SizeLf;
                    }
                }
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(BadChunk::SizeLine);
                    }
                    self.state = if self.size == 0 {
                        ChunkState::TrailerStart
                    } else {
                        ChunkState::Data(self.size)
                    };
                    self.size = 0;
                    self.size_digits = 0;
                }
                ChunkState::Data(left) => {
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(input.len() - i);
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataCr
                    } else {
                        ChunkState::Data(left)
                    };
                    continue;
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err(BadChunk::TooLong);
                    }
                    self.state = ChunkState::DataLf;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(BadChunk::DataLine);
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::TrailerStart => {
                    self.state = if b == b'\r' {
                        ChunkState::TrailerLf { empty: true }
                    } else {
                        ChunkState::TrailerLine
                    };
                }
                ChunkState::TrailerLine => {
                    if b == b'\r' {
                        self.state = ChunkState::TrailerLf { empty: false };
                    }
                }
                ChunkState::TrailerLf { empty } => {
                    if b != b'\n' {
                        return Err(BadChunk::TrailerLine);
                    }
                    if empty {
                        self.state = ChunkState::Done;
                        return Ok(true);
                    }
                    self.state = ChunkState::TrailerStart;
                }
                ChunkState::Done => return Ok(true),
            }
            i += 1;
        }
        Ok(self.state == ChunkState::Done)
    }
}

/// Whether `needle` occurs in `hay` at or after `from` (a match may straddle `from`).
fn contains_from(hay: &[u8], needle: &[u8], from: usize) -> bool {
    let start = from.saturating_sub(needle.len().saturating_sub(1));
    hay.get(start..)
        .is_some_and(|h| h.windows(needle.len()).any(|w| w == needle))
}

/// Sends `request` on `io` and reads the answer: the outcome, with the response time of the
/// success window measured from `start` to the head (or to the end of the body match).
pub async fn exchange<S>(
    io: &mut S,
    request: &[u8],
    check: &HttpCheck,
    start: Instant,
    deadline: Instant,
) -> Result<HttpReport, Failed>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let io_failed = |e: &std::io::Error| -> Failed {
        match classify_connect(e) {
            HttpOutcome::Connect(m) => HttpOutcome::Protocol(m),
            other => other,
        }
        .into()
    };
    match tokio::time::timeout_at(deadline, io.write_all(request)).await {
        Err(_) => return Err(HttpOutcome::Timeout(Phase::Response).into()),
        Ok(Err(e)) => return Err(io_failed(&e)),
        Ok(Ok(())) => {}
    }
    let mut buf = Vec::with_capacity(1024);
    let head = loop {
        if let Some(h) =
            parse_head(&buf, check.method()).map_err(|m| Failed::from(HttpOutcome::Protocol(m.to_string())))?
        {
            if (100..200).contains(&h.code) && h.code != 101 {
                // An interim response (100 Continue, 103 Early Hints): the real one follows.
                buf.drain(..h.len);
                continue;
            }
            break h;
        }
        if buf.len() >= HEAD_LIMIT {
            return Err(HttpOutcome::Protocol(format!("a response head over {HEAD_LIMIT} bytes")).into());
        }
        match read_some(io, &mut buf, HEAD_LIMIT, deadline).await {
            Err(()) => return Err(HttpOutcome::Timeout(Phase::Response).into()),
            Ok(Err(e)) => return Err(io_failed(&e)),
            Ok(Ok(0)) => return Err(HttpOutcome::Closed.into()),
            Ok(Ok(_)) => {}
        }
    };
    let code = head.code;
    let mut report = HttpReport {
        outcome: if check.status().contains(code) {
            HttpOutcome::Passed(code)
        } else {
            HttpOutcome::BadStatus(code)
        },
        elapsed: start.elapsed(),
        status: Some(code),
        cert_not_after: None,
    };
    let Some(needle) = check.expect_body().filter(|_| report.outcome.healthy()) else {
        return Ok(report);
    };
    let failed = |outcome| Failed {
        outcome,
        status: Some(code),
    };
    let limit = check.body_limit();
    let mut body = Vec::with_capacity(limit.min(4096));
    let mut chunks = Dechunker::default();
    // What the head's read already brought of the body.
    let mut fresh: Vec<u8> = buf.split_off(head.len);
    let mut left = match head.framing {
        Framing::None => 0,
        Framing::Length(n) => n,
        Framing::Chunked | Framing::Close => u64::MAX,
    };
    let mut ended = head.framing == Framing::None;
    loop {
        let before = body.len();
        match head.framing {
            Framing::Chunked => {
                ended = chunks
                    .feed(&fresh, &mut body)
                    .map_err(|m| failed(HttpOutcome::Protocol(format!("chunked body: {m}"))))?;
            }
            _ => {
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(fresh.len());
                body.extend_from_slice(&fresh[..take]);
                left -= take as u64;
                ended |= left == 0;
            }
        }
        body.truncate(limit);
        if contains_from(&body, needle, before) {
            report.elapsed = start.elapsed();
            return Ok(report);
        }
        if ended || body.len() >= limit {
            break;
        }
        fresh.clear();
        match read_some(io, &mut fresh, 16 * 1024, deadline).await {
            Err(()) => return Err(failed(HttpOutcome::Timeout(Phase::Body))),
            Ok(Err(e)) => return Err(failed(io_failed(&e).outcome)),
            Ok(Ok(0)) if head.framing == Framing::Close => break,
            Ok(Ok(0)) => return Err(failed(HttpOutcome::Closed)),
            Ok(Ok(_)) => {}
        }
    }
    report.elapsed = start.elapsed();
    report.outcome = HttpOutcome::BodyMismatch(code);
    Ok(report)
}

/// One read of up to `max - buf.len()` more bytes (at least 1 KiB) onto the end of `buf`,
/// by `deadline`; `Err(())` when the deadline passes first.
async fn read_some<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    max: usize,
    deadline: Instant,
) -> Result<std::io::Result<usize>, ()> {
    let room = max.saturating_sub(buf.len()).max(1024);
    buf.reserve(room);
    let mut limited = (&mut *io).take(room as u64);
    tokio::time::timeout_at(deadline, limited.read_buf(buf))
        .await
        .map_err(|_| ())
}

#[cfg(test)]
mod tests;
