//! The HTTP prober against a peer that answers with the fuzzer's bytes, over loopback: the
//! status rules, the body match and its bounded read, whatever the peer sends.
//!
//! Two modes, chosen by the first byte:
//! - raw: the rest of the input, after a few check settings, is the response as sent; the
//!   prober must not panic and its outcome must agree with its own status set;
//! - built: a well-formed response (status, body, plain or chunked with fuzzed chunk sizes)
//!   whose right outcome is known, so the verdict is checked exactly.
use std::{net::SocketAddr, sync::OnceLock, time::Duration};

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use probed::probe::http::{Dialect, HttpCheck, HttpCheckSpec, HttpOutcome, HttpProber, Scheme};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    runtime::Runtime,
};

/// Short enough for many runs a second; a peer that stalls costs this much.
const TIMEOUT: Duration = Duration::from_millis(200);
const STATUS_SETS: [&str; 5] = ["2xx,3xx", "200", "200-299, 301-301", "204,404", "5xx"];

fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// Serves `response` to one connection on loopback and returns the outcome of one probe.
fn probe(check: &HttpCheck, keep_alive: bool, response: Vec<u8>) -> (HttpOutcome, Option<u16>) {
    runtime().block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr: SocketAddr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            // Read the request head (bounded), answer, then wait for the client to close
            // first so TIME_WAIT lands on the client's side.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(&response).await;
            let _ = s.shutdown().await;
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            })
            .await;
        });
        let prober = HttpProber::new().with_keep_alive(keep_alive);
        let report = prober.probe(addr, check).await;
        drop(prober);
        server.abort();
        (report.outcome, report.status)
    })
}

fn check_for(method: &str, status: &str, needle: Option<String>, limit: usize) -> Option<HttpCheck> {
    check_with(method, status, needle, limit, TIMEOUT)
}

/// `check` again (a GET with its body rule) with another timeout.
fn check_for_timeout(check: &HttpCheck, status: &str, limit: usize, timeout: Duration) -> Option<HttpCheck> {
    let needle = check.expect_body().map(|b| String::from_utf8_lossy(b).into_owned());
    check_with("GET", status, needle, limit, timeout)
}

fn check_with(method: &str, status: &str, needle: Option<String>, limit: usize, timeout: Duration) -> Option<HttpCheck> {
    let mut spec = HttpCheckSpec::new(Scheme::Http, Dialect::Lb, timeout);
    spec.method = Some(method.into());
    spec.expect_status = Some(status.into());
    spec.expect_body = needle;
    spec.body_limit = Some(limit);
    HttpCheck::new(&spec).ok()
}

/// What any outcome must agree with, whatever the peer sent.
fn consistent(check: &HttpCheck, outcome: &HttpOutcome, status: Option<u16>) {
    match *outcome {
        HttpOutcome::Passed(code) => {
            assert!(
                check.status().contains(code),
                "passed on {code}, outside {}",
                check.status()
            );
            assert_eq!(status, Some(code));
        }
        HttpOutcome::BadStatus(code) => {
            assert!(!check.status().contains(code), "{code} is in {}", check.status());
            assert_eq!(status, Some(code));
        }
        HttpOutcome::BodyMismatch(code) => {
            assert!(check.expect_body().is_some(), "a body mismatch without a body rule");
            assert!(check.status().contains(code));
        }
        _ => {}
    }
}

fn raw(u: &mut Unstructured<'_>) -> Result<()> {
    let method = if u.arbitrary()? { "GET" } else { "HEAD" };
    let keep_alive: bool = u.arbitrary()?;
    let status = *u.choose(&STATUS_SETS)?;
    let limit = u.int_in_range(1..=256)?;
    let needle = if method == "GET" && u.arbitrary()? {
        let n = u.int_in_range(1..=8)?;
        Some(String::from_utf8_lossy(u.bytes(n.min(u.len()))?).into_owned())
    } else {
        None
    };
    let Some(check) = check_for(method, status, needle, limit) else {
        return Ok(());
    };
    let rest = u.len();
    let response = u.bytes(rest)?.to_vec();
    let (outcome, code) = probe(&check, keep_alive, response);
    consistent(&check, &outcome, code);
    Ok(())
}

fn built(u: &mut Unstructured<'_>) -> Result<()> {
    let keep_alive: bool = u.arbitrary()?;
    let status_set = *u.choose(&STATUS_SETS)?;
    let code: u16 = u.int_in_range(200..=599)?;
    let limit = u.int_in_range(1..=96)?;
    let needle_len = u.int_in_range(1..=limit.min(6))?;
    let needle: Vec<u8> = (0..needle_len)
        .map(|_| u.int_in_range(b'a'..=b'c'))
        .collect::<Result<_>>()?;
    let body_len = u.int_in_range(0..=192)?;
    let body: Vec<u8> = (0..body_len)
        .map(|_| u.int_in_range(b'a'..=b'c'))
        .collect::<Result<_>>()?;
    let chunked: bool = u.arbitrary()?;
    let mut response = format!("HTTP/1.1 {code} X\r\n").into_bytes();
    if chunked {
        response.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = u.int_in_range(1..=rest.len())?;
            response.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            response.extend_from_slice(&rest[..n]);
            response.extend_from_slice(b"\r\n");
            rest = &rest[n..];
        }
        response.extend_from_slice(b"0\r\n\r\n");
    } else {
        response.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
        response.extend_from_slice(&body);
    }
    let needle_text = String::from_utf8(needle.clone()).expect("ascii");
    let Some(check) = check_for("GET", status_set, Some(needle_text), limit) else {
        return Ok(());
    };
    let (mut outcome, mut got) = probe(&check, keep_alive, response.clone());
    if matches!(outcome, HttpOutcome::Timeout(_)) {
        // On a loaded machine 200 ms can pass before a complete answer is read: that is no
        // verdict on the prober. Once more with ten times the time; a timeout then is a hang.
        let Some(patient) = check_for_timeout(&check, status_set, limit, TIMEOUT * 10) else {
            return Ok(());
        };
        (outcome, got) = probe(&patient, keep_alive, response);
    }
    // 204 and 304 carry no body, whatever follows the head.
    let body = if code == 204 || code == 304 { &[][..] } else { &body[..] };
    let window = &body[..body.len().min(limit)];
    let want = if !check.status().contains(code) {
        HttpOutcome::BadStatus(code)
    } else if window.windows(needle.len()).any(|w| w == needle) {
        HttpOutcome::Passed(code)
    } else {
        HttpOutcome::BodyMismatch(code)
    };
    assert_eq!(
        outcome,
        want,
        "status {code} in {status_set:?}, needle {:?}, limit {limit}, body {:?}",
        String::from_utf8_lossy(&needle),
        String::from_utf8_lossy(body)
    );
    assert_eq!(got, Some(code));
    Ok(())
}

pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = match u.arbitrary::<u8>() {
        Ok(b) if b & 1 == 0 => raw(&mut u),
        Ok(_) => built(&mut u),
        Err(_) => Ok(()),
    };
}
