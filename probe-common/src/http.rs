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

/// Bytes the kernel needs to decide: the status line's first 12 and the byte after the code,
/// which must end it (a space before the reason, or CR).
pub const STATUS_HEAD_LEN: usize = STATUS_LINE_LEN + 1;

/// The smallest MSS a target may have without saying so: RFC 9293 3.7.1 (IPv4, 536) and
/// RFC 8200 5 (IPv6, the minimum MTU 1280 less 60 bytes of headers).
pub const DEFAULT_MSS_V4: u16 = 536;
pub const DEFAULT_MSS_V6: u16 = 1220;

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
    /// Word sum of the bytes, as csum::payload_sum computes it.
    pub sum: u64,
    pub bytes: [u8; HTTP_REQ_MAX],
}
const _: () = assert!(core::mem::size_of::<HttpReq>() == 16 + HTTP_REQ_MAX);

#[cfg(feature = "user")]
// SAFETY: repr(C), integers then a byte array, sizes asserted above: no implicit padding, and
// every bit pattern is a valid value.
unsafe impl aya::Pod for HttpReq {}

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
            sum: crate::csum::payload_sum(request),
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

/// What the kernel makes of the first segment of a response that starts where the target's
/// data starts: a final status, or why it cannot be sure (the socket path then decides).
/// `head` holds the first `len.min(STATUS_HEAD_LEN)` bytes of the segment.
#[inline(always)]
pub fn judge_head(head: &[u8; STATUS_HEAD_LEN], len: usize) -> Result<u16, Undecided> {
    if len < STATUS_HEAD_LEN {
        return Err(Undecided::Partial);
    }
    let mut line = [0u8; STATUS_LINE_LEN];
    let mut i = 0;
    while i < STATUS_LINE_LEN {
        line[i] = head[i];
        i += 1;
    }
    let code = parse_status(&line).ok_or(Undecided::NotStatus)?;
    if head[STATUS_LINE_LEN] != b' ' && head[STATUS_LINE_LEN] != b'\r' {
        return Err(Undecided::NotStatus);
    }
    if code < 200 {
        return Err(Undecided::Interim);
    }
    Ok(code)
}

/// The MSS a SYN+ACK announces: `first` is the first four bytes of its options (when
/// `header_len` leaves room for them). No options: the family's default; options that do
/// not start with MSS (kind 2, length 4): unknown, and the kernel steps aside.
#[inline(always)]
pub fn syn_ack_mss(header_len: usize, first: Option<[u8; 4]>, ipv6: bool) -> Result<u16, Undecided> {
    if header_len <= 20 {
        return Ok(if ipv6 { DEFAULT_MSS_V6 } else { DEFAULT_MSS_V4 });
    }
    match first {
        Some([2, 4, hi, lo]) => Ok(u16::from_be_bytes([hi, lo])),
        _ => Err(Undecided::Options),
    }
}

/// Whether a request of `req_len` bytes may go in one segment in answer to a SYN+ACK with
/// `window` (never scaled in a SYN, RFC 7323 2.2) and `mss`.
#[inline(always)]
pub fn request_fits(window: u16, mss: u16, req_len: u32) -> Result<(), Undecided> {
    if u32::from(window) < req_len {
        return Err(Undecided::Window);
    }
    if u32::from(mss) < req_len {
        return Err(Undecided::Mss);
    }
    Ok(())
}

use crate::l4::Undecided;

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

    fn judged(s: &[u8]) -> Result<u16, Undecided> {
        let mut h = [0u8; STATUS_HEAD_LEN];
        let n = s.len().min(STATUS_HEAD_LEN);
        h[..n].copy_from_slice(&s[..n]);
        judge_head(&h, s.len())
    }

    #[test]
    fn only_a_complete_final_status_line_is_decided() {
        assert_eq!(judged(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(judged(b"HTTP/1.1 503\r\n\r\n"), Ok(503), "no reason phrase");
        assert_eq!(judged(b"HTTP/1.0 404 "), Ok(404));
        // Split anywhere before the byte after the code: the rest is in a later segment.
        for cut in 0..STATUS_HEAD_LEN {
            assert_eq!(
                judged(&b"HTTP/1.1 200 OK\r\n"[..cut]),
                Err(Undecided::Partial),
                "cut {cut}"
            );
        }
        assert_eq!(judged(b"HTTP/1.1 100 Continue\r\n\r\n"), Err(Undecided::Interim));
        assert_eq!(judged(b"HTTP/1.1 103 Early Hints\r\n"), Err(Undecided::Interim));
        assert_eq!(judged(b"HTTP/1.1 101 Switching\r\n"), Err(Undecided::Interim));
        assert_eq!(
            judged(b"HTTP/1.1 2000 OK\r\n"),
            Err(Undecided::NotStatus),
            "four digits"
        );
        assert_eq!(judged(b"SSH-2.0-OpenSSH_9.2\r\n"), Err(Undecided::NotStatus));
        assert_eq!(judged(b"HTTP/2 200 OK\r\n\r\n"), Err(Undecided::NotStatus));
    }

    #[test]
    fn the_request_must_fit_the_window_and_the_mss() {
        assert_eq!(syn_ack_mss(20, None, false), Ok(DEFAULT_MSS_V4));
        assert_eq!(syn_ack_mss(20, None, true), Ok(DEFAULT_MSS_V6));
        assert_eq!(syn_ack_mss(40, Some([2, 4, 0x05, 0xb4]), false), Ok(1460));
        assert_eq!(syn_ack_mss(24, Some([1, 2, 4, 5]), false), Err(Undecided::Options));
        assert_eq!(syn_ack_mss(24, None, false), Err(Undecided::Options));
        assert_eq!(request_fits(65535, 1460, 100), Ok(()));
        assert_eq!(request_fits(0, 1460, 100), Err(Undecided::Window));
        assert_eq!(request_fits(99, 1460, 100), Err(Undecided::Window));
        assert_eq!(request_fits(100, 100, 100), Ok(()));
        assert_eq!(request_fits(65535, 88, 100), Err(Undecided::Mss));
    }

    #[test]
    fn late_segments_prove_their_probe() {
        let e = crate::l4::Ended {
            cookie: u32::MAX,
            req_len: 40,
        };
        assert!(e.acknowledged_by(0), "cookie + 1 wraps");
        assert!(e.acknowledged_by(40));
        assert!(!e.acknowledged_by(39));
        assert!(!e.acknowledged_by(41));
        assert!(!e.acknowledged_by(u32::MAX));
    }

    #[test]
    fn templates_hold_up_to_the_limit() {
        let r = HttpReq::new(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(r.len, 18);
        assert_eq!(r.sum, crate::csum::payload_sum(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(HttpReq::new(&[b'a'; HTTP_REQ_MAX]).is_some());
        assert!(HttpReq::new(&[b'a'; HTTP_REQ_MAX + 1]).is_none());
        assert!(HttpReq::new(b"").is_none());
    }
}
