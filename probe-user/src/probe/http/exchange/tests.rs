//! The exchange's pure parts on fixtures, then whole exchanges over an in-memory pipe.
use std::{net::SocketAddr, time::Duration};

use tokio::{io::AsyncWriteExt, time::Instant};

use super::*;
use crate::probe::http::{HttpCheckSpec, Scheme};
use crate::rules::Dialect;

fn check(method: &str, body: Option<&str>) -> HttpCheck {
    let mut spec = HttpCheckSpec::new(Scheme::Http, Dialect::Tm, Duration::from_secs(1));
    spec.method = Some(method.into());
    spec.path = Some("/health?full".into());
    spec.expect_body = body.map(Into::into);
    spec.profile_headers = vec!["X-Probe:probed".into()];
    HttpCheck::new(&spec).unwrap()
}

fn target() -> SocketAddr {
    "198.18.0.2:8080".parse().unwrap()
}

#[test]
fn the_request_is_one_rendered_head() {
    let r = String::from_utf8(render_request(&check("GET", None), target())).unwrap();
    assert_eq!(
        r,
        format!(
            "GET /health?full HTTP/1.1\r\nHost: 198.18.0.2:8080\r\nUser-Agent: {USER_AGENT}\r\n\
             x-probe: probed\r\nConnection: close\r\n\r\n"
        )
    );
}

#[test]
fn heads_give_status_and_framing() {
    let get = Method::Get;
    assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Le", get), Ok(None), "partial");
    let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", get)
        .unwrap()
        .unwrap();
    assert_eq!((h.code, h.framing, h.len), (200, Framing::Length(5), 38));
    let h = parse_head(b"HTTP/1.1 503 x\r\ntransfer-encoding: gzip, chunked\r\n\r\n", get)
        .unwrap()
        .unwrap();
    assert_eq!((h.code, h.framing), (503, Framing::Chunked));
    let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n", get).unwrap().unwrap();
    assert_eq!(h.framing, Framing::Close, "no length: until close");
    let h = parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Method::Head)
        .unwrap()
        .unwrap();
    assert_eq!(h.framing, Framing::None, "a HEAD response has no body");
    assert!(parse_head(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        get
    )
    .is_err());
    assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: five\r\n\r\n", get).is_err());
    assert!(parse_head(b"SMTP ready\r\n\r\n", get).is_err());
}

fn dechunk_whole(input: &[u8]) -> Result<(Vec<u8>, bool), BadChunk> {
    let mut d = Dechunker::default();
    let mut out = Vec::new();
    let done = d.feed(input, &mut out)?;
    Ok((out, done))
}

#[test]
fn chunked_bodies_decode_however_they_are_split() {
    let wire = b"5;name=value\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n";
    assert_eq!(dechunk_whole(wire), Ok((b"hello, world".to_vec(), true)));
    // Every split point, and one byte at a time.
    for cut in 0..wire.len() {
        let mut d = Dechunker::default();
        let mut out = Vec::new();
        let first = d.feed(&wire[..cut], &mut out).unwrap();
        assert!(!first, "ended early at {cut}");
        assert!(d.feed(&wire[cut..], &mut out).unwrap(), "cut at {cut}");
        assert_eq!(out, b"hello, world", "cut at {cut}");
    }
    let mut d = Dechunker::default();
    let mut out = Vec::new();
    let ended: Vec<bool> = wire.iter().map(|b| d.feed(&[*b], &mut out).unwrap()).collect();
    assert_eq!(ended.iter().filter(|e| **e).count(), 1, "ends once, at the last byte");
    assert!(ended[wire.len() - 1]);
    assert_eq!(dechunk_whole(b"0\r\n\r\n"), Ok((Vec::new(), true)), "an empty body");
}

#[test]
fn broken_chunking_is_an_error() {
    for bad in [
        &b"\r\n"[..],
        b"zz\r\n",
        b"5\r\nhello world\r\n",
        b"5\rhello",
        b"1234567890abcdef0\r\n",
        b"0\r\nX: 1\rY",
    ] {
        assert!(dechunk_whole(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(
        dechunk_whole(b"5\r\nhel"),
        Ok((b"hel".to_vec(), false)),
        "incomplete is not an error"
    );
}

#[test]
fn a_needle_across_two_reads_is_found() {
    assert!(contains_from(b"xxhealthy", b"healthy", 4), "straddles the new bytes");
    assert!(
        !contains_from(b"healthyxx", b"healthy", 8),
        "wholly in the old bytes: seen before"
    );
    assert!(contains_from(b"ok", b"ok", 0));
}

/// Runs the exchange against a peer that reads the request and writes `answer` in `parts`
/// (with a pause between them), then closes (or stays open with `hold`).
async fn against(check: &HttpCheck, parts: &[&[u8]], hold: bool) -> Result<HttpReport, Failed> {
    let (mut ours, mut theirs) = tokio::io::duplex(64 * 1024);
    let parts: Vec<Vec<u8>> = parts.iter().map(|p| p.to_vec()).collect();
    let peer = tokio::spawn(async move {
        let mut req = vec![0u8; 4096];
        let _ = tokio::io::AsyncReadExt::read(&mut theirs, &mut req).await;
        for p in parts {
            theirs.write_all(&p).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if hold {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
    let start = Instant::now();
    let request = render_request(check, target());
    let r = exchange(&mut ours, &request, check, start, start + Duration::from_millis(300)).await;
    peer.abort();
    r
}

#[tokio::test]
async fn status_only_checks_stop_at_the_head() {
    let c = check("GET", None);
    let r = against(&c, &[b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\npartial"], true)
        .await
        .map_err(|f| f.outcome)
        .unwrap();
    assert_eq!(r.outcome, HttpOutcome::Passed(200));
    let r = against(&c, &[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 Busy\r\n\r\n"], false)
        .await
        .map_err(|f| f.outcome)
        .unwrap();
    assert_eq!(r.outcome, HttpOutcome::BadStatus(503), "interim responses are skipped");
    let r = against(&c, &[b"HTTP/1.1 2"], false).await.err().unwrap().outcome;
    assert_eq!(r, HttpOutcome::Closed, "closed inside the head");
    let r = against(&c, &[b"HTTP/1.1 200 OK\r\n"], true)
        .await
        .err()
        .unwrap()
        .outcome;
    assert_eq!(r, HttpOutcome::Timeout(Phase::Response));
}

#[tokio::test]
async fn body_matches_read_as_far_as_needed() {
    let c = check("GET", Some("healthy"));
    let chunked: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nheal",
        b"\r\n3\r\nthy\r\n0\r\n\r\n",
    ];
    assert_eq!(
        against(&c, chunked, false).await.ok().unwrap().outcome,
        HttpOutcome::Passed(200)
    );
    let length: &[&[u8]] = &[b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nall is well!"];
    assert_eq!(
        against(&c, length, true).await.ok().unwrap().outcome,
        HttpOutcome::BodyMismatch(200)
    );
    // The needle beyond Content-Length (bytes the server should not have sent) does not count.
    let past: &[&[u8]] = &[b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokhealthy"];
    assert_eq!(
        against(&c, past, true).await.ok().unwrap().outcome,
        HttpOutcome::BodyMismatch(200)
    );
    let close: &[&[u8]] = &[b"HTTP/1.0 200 OK\r\n\r\nstill ", b"healthy"];
    assert_eq!(
        against(&c, close, false).await.ok().unwrap().outcome,
        HttpOutcome::Passed(200)
    );
    let stalled: &[&[u8]] = &[b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nnot yet"];
    let f = against(&c, stalled, true).await.err().unwrap();
    assert_eq!((f.outcome, f.status), (HttpOutcome::Timeout(Phase::Body), Some(200)));
    let bad: &[&[u8]] = &[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n"];
    let f = against(&c, bad, true).await.err().unwrap();
    assert!(matches!(f.outcome, HttpOutcome::Protocol(_)), "{:?}", f.outcome);
    // An unhealthy status is not read further: the body is not what decides.
    let down: &[&[u8]] = &[b"HTTP/1.1 500 Down\r\nContent-Length: 7\r\n\r\nhealthy"];
    assert_eq!(
        against(&c, down, true).await.ok().unwrap().outcome,
        HttpOutcome::BadStatus(500)
    );
}
