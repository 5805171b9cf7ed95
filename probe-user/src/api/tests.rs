use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{query::*, *};

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
        slot: entry.slot.clone(),
        table,
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
