//! A small blocking HTTP/1.1 client for the CLI (`probed status`, `probed reload`) and the
//! tests: one request per connection, over loopback TCP or the unix socket.
use std::{
    io::{Read, Write},
    time::Duration,
};

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
    #[error("the API at {addr} sent something that is not an HTTP response")]
    Malformed { addr: String },
}

/// A response: status code and body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// Sends `method path` to `api` (`127.0.0.1:9180` or `unix:/run/probed.sock`).
pub fn request(api: &str, method: &str, path: &str) -> Result<Response, ClientError> {
    let timeout = Some(Duration::from_secs(15));
    let connect = |source| ClientError::Connect {
        addr: api.to_string(),
        source,
    };
    let mut stream: Box<dyn ReadWrite> = match api.strip_prefix("unix:") {
        Some(p) => {
            let s = std::os::unix::net::UnixStream::connect(p).map_err(connect)?;
            let _ = s.set_read_timeout(timeout);
            Box::new(s)
        }
        None => {
            let s = std::net::TcpStream::connect(api).map_err(connect)?;
            let _ = s.set_read_timeout(timeout);
            Box::new(s)
        }
    };
    let io = |source| ClientError::Io {
        addr: api.to_string(),
        source,
    };
    let req = format!("{method} {path} HTTP/1.1\r\nHost: probed\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    stream.write_all(req.as_bytes()).map_err(io)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(io)?;
    parse(&raw).ok_or(ClientError::Malformed { addr: api.to_string() })
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

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
}
