//! HTTP probes in the kernel: the request templates probe_rx sends after a target's SYN+ACK,
//! and the status-line reader it applies to the first bytes of the response.
//!
//! A check whose verdict is its status code alone (no body to match, no TLS) needs no
//! socket: probe_rx turns the SYN+ACK into the ACK that carries the request, reads the
//! status code from the first segment of the response and turns that segment into the RST
//! that ends the connection. Userspace renders each distinct request once into a template.

/// The longest request a template holds; longer ones go through a socket.
pub const HTTP_REQ_MAX: usize = 256;

/// Most templates at once (PROBE_HTTP_REQS entries, allocated as used).
pub const MAX_HTTP_REQS: u32 = 1 << 20;

/// Bytes of the response probe_rx reads: "HTTP/1.1 200".
pub const STATUS_LINE_LEN: usize = 12;

/// The window our request segment offers (scaled by the SYN's window scale 7: 64 KiB), so the
/// target may send its response at once.
pub const REQUEST_WINDOW: u16 = 502;

/// One request, rendered: its bytes and their one's-complement word sum.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpReq {
    /// Bytes used in `bytes` (1..=HTTP_REQ_MAX).
    pub len: u32,
    pub _pad: u32,
    /// Word sum of the bytes, as frame::payload_sum computes it.
    pub sum: u64,
    pub bytes: [u8; HTTP_REQ_MAX],
}
const _: () = assert!(core::mem::size_of::<HttpReq>() == 16 + HTTP_REQ_MAX);

impl HttpReq {
    /// The template of `request`, or None when it is empty or longer than HTTP_REQ_MAX.
    pub fn new(request: &[u8]) -> Option<Self> {
        if request.is_empty() || request.len() > HTTP_REQ_MAX {
            return None;
        }
        let mut bytes = [0u8; HTTP_REQ_MAX];
        bytes[..request.len()].copy_from_slice(request);
        Some(Self {
            len: request.len() as u32,
            _pad: 0,
            sum: crate::frame::payload_sum(request),
            bytes,
        })
    }
}

/// The status code of a response that starts with `head`: "HTTP/1." then a digit, a space
/// and three digits (100-999). None for anything else.
#[inline(always)]
pub fn parse_status(head: &[u8; STATUS_LINE_LEN]) -> Option<u16> {
    let prefix = *b"HTTP/1.";
    let mut i = 0;
    while i < prefix.len() {
        if head[i] != prefix[i] {
            return None;
        }
        i += 1;
    }
    if !head[7].is_ascii_digit() || head[8] != b' ' {
        return None;
    }
    let (a, b, c) = (head[9], head[10], head[11]);
    if !(a.is_ascii_digit() && b.is_ascii_digit() && c.is_ascii_digit()) || a == b'0' {
        return None;
    }
    Some(u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> [u8; STATUS_LINE_LEN] {
        s.as_bytes()[..STATUS_LINE_LEN].try_into().unwrap()
    }

    #[test]
    fn status_lines() {
        assert_eq!(parse_status(&head("HTTP/1.1 200 OK\r\n")), Some(200));
        assert_eq!(parse_status(&head("HTTP/1.0 503 Service")), Some(503));
        assert_eq!(parse_status(&head("HTTP/1.1 301 Moved")), Some(301));
        assert_eq!(parse_status(&head("HTTP/1.1 999 x")), Some(999));
        assert_eq!(parse_status(&head("HTTP/1.1 099 x")), None, "no leading zero");
        assert_eq!(parse_status(&head("HTTP/2.0 200 OK")), None);
        assert_eq!(parse_status(&head("HTTP/1.1  200 ")), None);
        assert_eq!(
            parse_status(&head("http/1.1 200 OK")),
            None,
            "the version is case-sensitive"
        );
        assert_eq!(parse_status(&head("SSH-2.0-OpenSSH")), None);
        assert_eq!(parse_status(&head("HTTP/1.1 2x0 OK")), None);
    }

    #[test]
    fn templates_hold_up_to_the_limit() {
        let r = HttpReq::new(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.len, 18);
        assert_eq!(r.sum, crate::frame::payload_sum(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(HttpReq::new(&[b'a'; HTTP_REQ_MAX]).is_some());
        assert!(HttpReq::new(&[b'a'; HTTP_REQ_MAX + 1]).is_none());
        assert!(HttpReq::new(b"").is_none());
    }
}
