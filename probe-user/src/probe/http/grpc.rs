//! gRPC health checks: one unary call of `grpc.health.v1.Health/Check` on a connection of its
//! own, over HTTP/2 (hyper's client, which is h2; cleartext by prior knowledge, or TLS with
//! ALPN h2). The request and the answer are the health protocol's two messages, derived with
//! prost; what the answer means is decided by pure functions (`verdict` and its helpers) that
//! the unit tests drive without a server.
//!
//! What counts: SERVING is healthy. NOT_SERVING, UNKNOWN and SERVICE_UNKNOWN fail with that name
//! as the reason; a gRPC error status (UNIMPLEMENTED: no health service; NOT_FOUND: a service
//! the server does not know; UNAVAILABLE; DEADLINE_EXCEEDED) fails with the code's name; an
//! HTTP status other than 200 without a gRPC status fails as a bad status. The check's timeout
//! is both the local deadline and the `grpc-timeout` the server is told.
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full, Limited};
use hyper::{header, HeaderMap, Request};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    time::Instant,
};

use super::{classify_hyper, Failed, HttpCheck, HttpOutcome, HttpReport, Phase, USER_AGENT};

/// The method every check calls.
pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
/// The most of a response body read: a health answer is a few bytes.
const BODY_LIMIT: usize = 16 * 1024;

/// `grpc.health.v1.HealthCheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

/// `grpc.health.v1.HealthCheckResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(enumeration = "ServingStatus", tag = "1")]
    status: i32,
}

/// `grpc.health.v1.HealthCheckResponse.ServingStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum ServingStatus {
    Unknown = 0,
    Serving = 1,
    NotServing = 2,
    /// Meant for Watch, but a server may answer Check with it too.
    ServiceUnknown = 3,
}

impl ServingStatus {
    pub fn name(self) -> &'static str {
        match self {
            Self::Unknown => "UNKNOWN",
            Self::Serving => "SERVING",
            Self::NotServing => "NOT_SERVING",
            Self::ServiceUnknown => "SERVICE_UNKNOWN",
        }
    }
}

/// The name of a gRPC status code, as the gRPC documentation spells it.
pub fn code_name(code: u32) -> Option<&'static str> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(usize::try_from(code).ok()?).copied()
}

/// The request body: one uncompressed length-prefixed message.
fn request_body(service: &str) -> Bytes {
    let message = prost::Message::encode_to_vec(&HealthCheckRequest {
        service: service.to_string(),
    });
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).expect("a service name is at most a few hundred bytes"));
    out.extend_from_slice(&message);
    out.freeze()
}

/// `grpc-timeout` for what is left of the probe's time: whole milliseconds, at least one, in
/// at most the eight digits the protocol allows.
fn timeout_header(left: std::time::Duration) -> String {
    let ms = left.as_millis().clamp(1, 99_999_999);
    format!("{ms}m")
}

/// The request of one check to `target`, with `left` of its time to go.
fn request(
    check: &HttpCheck,
    service: &str,
    target: std::net::SocketAddr,
    left: std::time::Duration,
) -> Request<Full<Bytes>> {
    let scheme = match check.scheme() {
        super::Scheme::Http => "http",
        super::Scheme::Https => "https",
    };
    let uri = format!("{scheme}://{}{HEALTH_CHECK_PATH}", check.host_header(target));
    let mut req = Request::new(Full::new(request_body(service)));
    *req.method_mut() = hyper::Method::POST;
    // The authority was checked as a host name or comes from an address: it always parses.
    *req.uri_mut() = uri
        .parse()
        .unwrap_or_else(|_| HEALTH_CHECK_PATH.parse().expect("a static path"));
    let h = req.headers_mut();
    // Metadata first, so that what the protocol needs cannot be replaced by it.
    for (name, value) in check.headers() {
        h.insert(name.clone(), value.clone());
    }
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/grpc"),
    );
    h.insert(header::TE, header::HeaderValue::from_static("trailers"));
    h.insert(
        "grpc-timeout",
        header::HeaderValue::from_str(&timeout_header(left)).expect("digits and a unit"),
    );
    if !h.contains_key(header::USER_AGENT) {
        h.insert(header::USER_AGENT, header::HeaderValue::from_static(USER_AGENT));
    }
    req
}

/// The gRPC status a header block carries, if any: code and (percent-decoded) message.
fn grpc_status(headers: &HeaderMap) -> Option<Result<(u32, String), String>> {
    let raw = headers.get("grpc-status")?;
    let code = raw.to_str().ok().and_then(|s| s.parse::<u32>().ok());
    let Some(code) = code else {
        return Some(Err(format!("an invalid grpc-status {raw:?}")));
    };
    let message = headers
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Some(Ok((code, message)))
}

/// grpc-message is percent-encoded UTF-8; anything that does not decode is kept as it came.
fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).expect("two hex digits"));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The health status in a response body: exactly one uncompressed message.
fn decode_answer(body: &[u8]) -> Result<i32, String> {
    let Some((&[flag, a, b, c, d], rest)) = body.split_first_chunk::<5>() else {
        return Err("an OK status without a response message".into());
    };
    if flag != 0 {
        return Err("a compressed response, though none was offered".into());
    }
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if rest.len() != len {
        return Err(format!(
            "a response message of {} bytes where its prefix says {len}",
            rest.len()
        ));
    }
    let answer: HealthCheckResponse =
        prost::Message::decode(rest).map_err(|e| format!("a response message that does not decode: {e}"))?;
    Ok(answer.status)
}

/// What a finished call means: its HTTP status and headers, and, unless the status came in
/// the headers alone, its body and trailers.
fn verdict(http_status: u16, headers: &HeaderMap, body: &[u8], trailers: Option<&HeaderMap>) -> HttpOutcome {
    let status = grpc_status(headers).or_else(|| trailers.and_then(grpc_status));
    match status {
        None if http_status != 200 => HttpOutcome::BadStatus(http_status),
        None => HttpOutcome::Protocol("a gRPC response without grpc-status".into()),
        Some(Err(e)) => HttpOutcome::Protocol(e),
        Some(Ok((0, _))) => match decode_answer(body) {
            Err(e) => HttpOutcome::Protocol(e),
            Ok(s) if s == ServingStatus::Serving as i32 => HttpOutcome::Serving,
            Ok(s) => HttpOutcome::NotServing(ServingStatus::try_from(s).map_err(|_| s)),
        },
        Some(Ok((code, message))) => HttpOutcome::GrpcStatus { code, message },
    }
}

/// One call on `io` (a connected TCP or TLS stream), by `deadline`.
/// The HTTP/2 flow-control windows of a gRPC check's connection.
const GRPC_WINDOW: u32 = 64 * 1024;

pub(super) async fn call<T>(
    io: T,
    check: &HttpCheck,
    service: &str,
    target: std::net::SocketAddr,
    start: Instant,
    deadline: Instant,
) -> Result<HttpReport, Failed>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // A health answer is a few bytes: windows of 64 KiB (hyper's defaults are 2 MiB per stream
    // and 5 MiB per connection) bound what a broken or hostile backend can make the connection
    // task take in before the body's 16 KiB limit is seen (review L5).
    let shake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(GRPC_WINDOW)
        .initial_connection_window_size(GRPC_WINDOW)
        .handshake(TokioIo::new(io));
    let (mut sender, conn) = match tokio::time::timeout_at(deadline, shake).await {
        Err(_) => return Err(HttpOutcome::Timeout(Phase::Response).into()),
        Ok(Err(e)) => return Err(classify_hyper(&e).into()),
        Ok(Ok(pair)) => pair,
    };
    // The connection task owns the socket; it ends when the call is done and `sender` dropped,
    // or is aborted on a timeout.
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = exchange(&mut sender, check, service, target, start, deadline).await;
    drop(sender);
    task.abort();
    result
}

async fn exchange(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    check: &HttpCheck,
    service: &str,
    target: std::net::SocketAddr,
    start: Instant,
    deadline: Instant,
) -> Result<HttpReport, Failed> {
    let left = deadline.saturating_duration_since(Instant::now());
    let response =
        match tokio::time::timeout_at(deadline, sender.send_request(request(check, service, target, left))).await {
            Err(_) => return Err(HttpOutcome::Timeout(Phase::Response).into()),
            Ok(Err(e)) => return Err(classify_hyper(&e).into()),
            Ok(Ok(r)) => r,
        };
    let code = response.status().as_u16();
    let failed = |outcome| Failed {
        outcome,
        status: Some(code),
    };
    let (parts, body) = response.into_parts();
    // A status in the headers alone (trailers-only) ends the call.
    if grpc_status(&parts.headers).is_some() || code != 200 {
        let outcome = verdict(code, &parts.headers, &[], None);
        return Ok(report(outcome, start, code));
    }
    let collected = match tokio::time::timeout_at(deadline, Limited::new(body, BODY_LIMIT).collect()).await {
        Err(_) => return Err(failed(HttpOutcome::Timeout(Phase::Body))),
        Ok(Err(e)) => {
            let outcome = match e.downcast::<hyper::Error>() {
                Ok(h) => classify_hyper(&h),
                Err(other) => HttpOutcome::Protocol(format!("the response body: {other}")),
            };
            return Err(failed(outcome));
        }
        Ok(Ok(c)) => c,
    };
    let trailers = collected.trailers().cloned();
    let body = collected.to_bytes();
    Ok(report(
        verdict(code, &parts.headers, &body, trailers.as_ref()),
        start,
        code,
    ))
}

fn report(outcome: HttpOutcome, start: Instant, code: u16) -> HttpReport {
    HttpReport {
        outcome,
        elapsed: start.elapsed(),
        status: Some(code),
        cert_not_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(*n, header::HeaderValue::from_static(v));
        }
        h
    }

    fn answer(status: i32) -> Vec<u8> {
        let msg = prost::Message::encode_to_vec(&HealthCheckResponse { status });
        let mut out = vec![0];
        out.extend_from_slice(&u32::try_from(msg.len()).unwrap().to_be_bytes());
        out.extend_from_slice(&msg);
        out
    }

    #[test]
    fn the_request_is_one_uncompressed_message_naming_the_service() {
        let body = request_body("shop.Cart");
        assert_eq!(body[0], 0);
        assert_eq!(
            u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize,
            body.len() - 5
        );
        let decoded: HealthCheckRequest = prost::Message::decode(&body[5..]).unwrap();
        assert_eq!(decoded.service, "shop.Cart");
        // The server's overall health: an empty message.
        assert_eq!(&request_body("")[..], &[0, 0, 0, 0, 0]);
    }

    #[test]
    fn serving_alone_is_healthy_and_every_other_status_is_named() {
        let ok = map(&[("grpc-status", "0")]);
        assert_eq!(
            verdict(200, &HeaderMap::new(), &answer(1), Some(&ok)),
            HttpOutcome::Serving
        );
        for (n, name) in [(0, "UNKNOWN"), (2, "NOT_SERVING"), (3, "SERVICE_UNKNOWN")] {
            let o = verdict(200, &HeaderMap::new(), &answer(n), Some(&ok));
            assert!(!o.healthy());
            assert_eq!(o.to_string(), name);
        }
        let odd = verdict(200, &HeaderMap::new(), &answer(9), Some(&ok));
        assert_eq!(odd.to_string(), "serving status 9");
    }

    #[test]
    fn error_statuses_fail_with_their_names_from_headers_or_trailers() {
        let only = map(&[("grpc-status", "12")]);
        let o = verdict(200, &only, &[], None);
        assert_eq!(o.to_string(), "grpc status UNIMPLEMENTED");
        let t = map(&[("grpc-status", "5"), ("grpc-message", "unknown%20service%3A shop")]);
        let o = verdict(200, &HeaderMap::new(), &[], Some(&t));
        assert_eq!(o.to_string(), "grpc status NOT_FOUND: unknown service: shop");
        assert_eq!(crate::outcome::Outcome::from(&o), crate::outcome::Outcome::GrpcStatus);
    }

    #[test]
    fn an_http_error_without_a_grpc_status_is_a_bad_status() {
        assert_eq!(verdict(503, &HeaderMap::new(), &[], None), HttpOutcome::BadStatus(503));
        // With one, the gRPC status speaks.
        let h = map(&[("grpc-status", "14")]);
        assert_eq!(verdict(503, &h, &[], None).to_string(), "grpc status UNAVAILABLE");
    }

    #[test]
    fn broken_answers_are_protocol_errors() {
        let ok = map(&[("grpc-status", "0")]);
        for body in [&[][..], &[1, 0, 0, 0, 0], &[0, 0, 0, 0, 9, 8]] {
            assert!(matches!(
                verdict(200, &HeaderMap::new(), body, Some(&ok)),
                HttpOutcome::Protocol(_)
            ));
        }
        assert!(matches!(
            verdict(200, &HeaderMap::new(), &answer(1), None),
            HttpOutcome::Protocol(_)
        ));
        let bad = map(&[("grpc-status", "x")]);
        assert!(matches!(verdict(200, &bad, &[], None), HttpOutcome::Protocol(_)));
    }

    #[test]
    fn the_deadline_is_sent_in_milliseconds_within_eight_digits() {
        assert_eq!(timeout_header(std::time::Duration::from_millis(1500)), "1500m");
        assert_eq!(timeout_header(std::time::Duration::ZERO), "1m");
        assert_eq!(timeout_header(std::time::Duration::from_secs(1_000_000)), "99999999m");
    }

    #[test]
    fn code_names_follow_the_protocol() {
        assert_eq!(code_name(0), Some("OK"));
        assert_eq!(code_name(4), Some("DEADLINE_EXCEEDED"));
        assert_eq!(code_name(16), Some("UNAUTHENTICATED"));
        assert_eq!(code_name(17), None);
    }
}
