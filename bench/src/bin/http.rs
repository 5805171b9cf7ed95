//! HTTP checks per second and CPU microseconds per check: `HttpProber` (close and keep-alive)
//! beside a naive prober that builds a new reqwest client per check, against N targets.
//!
//! Runs as root: it makes a private network namespace whose loopback owns all of 127.0.0.0/8,
//! so each target is its own address; one fast server (a child process, so its CPU is not
//! counted) answers on all of them. The namespace is removed on exit.
//!
//! `cargo xtask bench http -- [TARGETS] [CHECKS] [CONCURRENCY]` (bench/src/bin/http.rs)
use std::{
    convert::Infallible,
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use probed::probe::http::{Dialect, HttpCheck, HttpCheckSpec, HttpProber, Scheme};
use probed_bench::{measure, Namespace, Row, Server};

const PORT: u16 = 8080;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve();
        return;
    }
    let num = |i: usize, default: usize| args.get(i).map_or(default, |s| s.parse().expect("a number"));
    let (targets, checks, concurrency) = (num(1, 1000), num(2, 20_000), num(3, 200));
    assert!((1..=65_000).contains(&targets), "1-65000 targets");
    // The open-file limit is 20,000; a check holds one socket at a time.
    assert!((1..=5_000).contains(&concurrency), "1-5000 concurrent checks");

    let ns = Namespace::create("http");
    let server = Server::spawn(&[]);
    let addrs: Arc<Vec<SocketAddr>> = Arc::new(
        (0..targets as u32)
            .map(|i| SocketAddr::new(Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 1)) + i).into(), PORT))
            .collect(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let check = Arc::new(
        HttpCheck::new(&HttpCheckSpec::new(Scheme::Http, Dialect::Lb, Duration::from_secs(3))).expect("valid check"),
    );
    println!("{targets} targets on 127.1.0.0/16 port {PORT}, {checks} HEAD checks per prober, {concurrency} at a time");
    println!(
        "{:<28} {:>10} {:>12} {:>14} {:>9}",
        "prober", "checks/s", "CPU us/check", "p50 latency us", "failures"
    );
    let mut rows = Vec::new();
    for kind in [Kind::Prober, Kind::ProberKeepAlive, Kind::ReqwestPerCheck] {
        let row = rt.block_on(run(kind, addrs.clone(), check.clone(), checks, concurrency));
        println!(
            "{:<28} {:>10.0} {:>12.1} {:>14} {:>9}",
            kind.name(),
            row.per_sec,
            row.cpu_us,
            row.p50_us,
            row.failures
        );
        rows.push(row);
    }
    println!(
        "HttpProber uses {:.1}x less CPU per check than reqwest-per-check",
        rows[2].cpu_us / rows[0].cpu_us
    );
    drop(server);
    drop(ns);
}

#[derive(Clone, Copy)]
enum Kind {
    Prober,
    ProberKeepAlive,
    ReqwestPerCheck,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Prober => "HttpProber (close)",
            Self::ProberKeepAlive => "HttpProber (keep-alive)",
            Self::ReqwestPerCheck => "reqwest, new client/check",
        }
    }
}

/// Check i goes to target i mod N, so consecutive checks of one worker hit different targets.
async fn run(kind: Kind, addrs: Arc<Vec<SocketAddr>>, check: Arc<HttpCheck>, checks: usize, concurrency: usize) -> Row {
    let prober = Arc::new(HttpProber::new().with_keep_alive(matches!(kind, Kind::ProberKeepAlive)));
    measure(checks, concurrency, move |i| {
        let (prober, check, target) = (prober.clone(), check.clone(), addrs[i % addrs.len()]);
        async move {
            match kind {
                Kind::Prober | Kind::ProberKeepAlive => prober.probe(target, &check).await.healthy(),
                Kind::ReqwestPerCheck => naive(target).await,
            }
        }
    })
    .await
}

/// What a probe written without care looks like: a fresh client (and so a fresh pool,
/// connector and resolver) for every check, redirects off.
async fn naive(target: SocketAddr) -> bool {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(3))
        .build()
        .expect("reqwest client");
    match client.head(format!("http://{target}/")).send().await {
        Ok(r) => r.status().is_success() || r.status().is_redirection(),
        Err(_) => false,
    }
}

/// One thread, one listener on 0.0.0.0 (only the namespace's loopback exists), 200 to all.
fn serve() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket.bind(SocketAddr::from(([0, 0, 0, 0], PORT))).unwrap();
        let listener = socket.listen(4096).unwrap();
        println!("ready");
        let (closed, mut eof) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            let _ = closed.send(());
        });
        loop {
            tokio::select! {
                _ = &mut eof => break,
                accepted = listener.accept() => {
                    let Ok((tcp, _)) = accepted else { continue };
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(|_req| async {
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok\n"))))
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                            .await;
                    });
                }
            }
        }
    });
}
