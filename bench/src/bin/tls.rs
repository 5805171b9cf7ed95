//! What TLS and gRPC cost a health checker: CPU microseconds per check of HTTPS (certificate
//! presented, and verified against a CA) and of gRPC health checks (h2c and over TLS), beside
//! the socket HTTP path, at each fleet size. TLS rows run two rounds over the fleet: the first
//! is all full handshakes (a new prober knows no server), the second resumes every session,
//! which is what a running daemon does round after round. So "are handshakes the cost" and
//! "what does resumption save" read off one table.
//!
//! Runs as root: a private network namespace whose loopback owns 127.0.0.0/8, so each target is
//! an address of its own; one server child (its CPU not counted) answers HTTP, HTTPS, gRPC and
//! gRPC over TLS on every address, with a wildcard certificate for *.bench.test from a CA made
//! here, session tickets on. Each TLS target is greeted as tN.bench.test. The namespace and the
//! certificate directory are removed on exit.
//!
//! `cargo xtask bench tls -- [SIZES] [CONCURRENCY]`, e.g. `1000,10000 200` (bench/src/bin/tls.rs)
use std::{
    convert::Infallible,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{body::Frame, HeaderMap};
use probed::probe::http::{Dialect, HttpCheck, HttpCheckSpec, HttpProber, Scheme, TlsVerify};
use probed_bench::{measure, Namespace, Row, Server};

const HTTP_PORT: u16 = 8080;
const HTTPS_PORT: u16 = 8443;
const GRPC_PORT: u16 = 50051;
const GRPCS_PORT: u16 = 50052;
/// Cold starts per fleet size and check; each row is the median one (by CPU per check).
const REPETITIONS: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        serve(Path::new(&args[2]));
        return;
    }
    let sizes: Vec<usize> = args
        .get(1)
        .map_or("1000,10000", String::as_str)
        .split(',')
        .map(|s| s.parse().expect("a fleet size"))
        .collect();
    let concurrency: usize = args.get(2).map_or(200, |s| s.parse().expect("a number"));
    assert!(sizes.iter().all(|n| (1..=65_000).contains(n)), "1-65000 targets");
    assert!((1..=5_000).contains(&concurrency), "1-5000 concurrent checks");

    let dir = std::env::temp_dir().join(format!("probed-bench-tls-{}", std::process::id()));
    let _cleanup = Dir(dir.clone());
    let ca_file = certificates(&dir);
    let ns = Namespace::create("tls");
    let server = Server::spawn(&[dir.as_os_str()]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "one prober thread; {concurrency} checks at a time; server in a child process (not counted); \
         median of {REPETITIONS} cold starts"
    );
    println!(
        "{:>6} {:<40} {:>10} {:>12} {:>9} {:>14} {:>9}",
        "fleet", "check", "checks/s", "CPU us/check", "x HTTP", "p50 latency us", "failures"
    );
    for &n in &sizes {
        let addrs: Vec<SocketAddr> = (0..n as u32)
            .map(|i| SocketAddr::new(Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 1)) + i).into(), 0))
            .collect();
        let mut http_cpu = None;
        for kind in Kind::ALL {
            let targets: Arc<Vec<SocketAddr>> =
                Arc::new(addrs.iter().map(|a| SocketAddr::new(a.ip(), kind.port())).collect());
            let rounds: &[&str] = if kind.tls() {
                &["full handshakes", "resumed"]
            } else {
                &[""]
            };
            // Each repetition starts cold: a new prober and new checks (new TLS clients, so
            // no session is known), then its rounds. Each row is the median repetition.
            let mut rows: Vec<Vec<Row>> = rounds.iter().map(|_| Vec::new()).collect();
            for _ in 0..REPETITIONS {
                let checks = Arc::new(checks_for(kind, n, &ca_file));
                let prober = Arc::new(HttpProber::new());
                for kept in &mut rows {
                    kept.push(rt.block_on(run(&prober, &targets, &checks, concurrency)));
                }
            }
            for (round, mut kept) in rounds.iter().zip(rows) {
                kept.sort_by(|a, b| a.cpu_us.total_cmp(&b.cpu_us));
                let row = &kept[kept.len() / 2];
                let failures: usize = kept.iter().map(|r| r.failures).sum();
                let base = *http_cpu.get_or_insert(row.cpu_us);
                let name = if round.is_empty() {
                    kind.name().to_string()
                } else {
                    format!("{}, {round}", kind.name())
                };
                println!(
                    "{n:>6} {name:<40} {:>10.0} {:>12.1} {:>9.2} {:>14} {:>9}",
                    row.per_sec,
                    row.cpu_us,
                    row.cpu_us / base,
                    row.p50_us,
                    failures
                );
            }
        }
    }
    drop(server);
    drop(ns);
}

#[derive(Clone, Copy)]
enum Kind {
    Http,
    HttpsPresence,
    HttpsVerified,
    Grpc,
    GrpcsPresence,
    GrpcsVerified,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Http,
        Kind::HttpsPresence,
        Kind::HttpsVerified,
        Kind::Grpc,
        Kind::GrpcsPresence,
        Kind::GrpcsVerified,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Http => "HTTP HEAD (socket path)",
            Self::HttpsPresence => "HTTPS, presence",
            Self::HttpsVerified => "HTTPS, verified (CA)",
            Self::Grpc => "gRPC h2c",
            Self::GrpcsPresence => "gRPC TLS, presence",
            Self::GrpcsVerified => "gRPC TLS, verified (CA)",
        }
    }

    fn port(self) -> u16 {
        match self {
            Self::Http => HTTP_PORT,
            Self::HttpsPresence | Self::HttpsVerified => HTTPS_PORT,
            Self::Grpc => GRPC_PORT,
            Self::GrpcsPresence | Self::GrpcsVerified => GRPCS_PORT,
        }
    }

    fn tls(self) -> bool {
        !matches!(self, Self::Http | Self::Grpc)
    }
}

/// One check per target: TLS targets are greeted by a name of their own (tN.bench.test), so
/// that each has its own session, as distinct backends do. A verified kind shares one client
/// (one CA read, one session store) across the fleet, as a profile does.
fn checks_for(kind: Kind, n: usize, ca_file: &Path) -> Vec<HttpCheck> {
    let scheme = if kind.tls() { Scheme::Https } else { Scheme::Http };
    let tls = match kind {
        Kind::HttpsVerified | Kind::GrpcsVerified => TlsVerify::strict_ca_file(ca_file).expect("the bench CA"),
        _ => TlsVerify::Presented,
    };
    (0..n)
        .map(|i| {
            let mut spec = HttpCheckSpec::new(scheme, Dialect::Lb, Duration::from_secs(5));
            if kind.tls() {
                spec.domain = Some(format!("t{i}.bench.test"));
            }
            if matches!(kind, Kind::Grpc | Kind::GrpcsPresence | Kind::GrpcsVerified) {
                spec.grpc = Some(String::new());
            }
            spec.tls = tls.clone();
            HttpCheck::new(&spec).expect("a valid check")
        })
        .collect()
}

/// One check of every target, `concurrency` at a time, through `prober`.
async fn run(
    prober: &Arc<HttpProber>,
    targets: &Arc<Vec<SocketAddr>>,
    checks: &Arc<Vec<HttpCheck>>,
    concurrency: usize,
) -> Row {
    let (prober, targets, checks) = (prober.clone(), targets.clone(), checks.clone());
    measure(targets.len(), concurrency, move |i| {
        let (prober, targets, checks) = (prober.clone(), targets.clone(), checks.clone());
        async move {
            let report = prober.probe(targets[i], &checks[i]).await;
            if !report.healthy() {
                eprintln!("{}: {}", targets[i], report.outcome);
            }
            report.healthy()
        }
    })
    .await
}

/// A CA, and a certificate for *.bench.test it signs, in `dir`; returns the CA file.
fn certificates(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let ca = probed_tests::certs::ca("probed bench CA");
    let leaf = probed_tests::certs::leaf(&ca, "*.bench.test", 2099);
    std::fs::write(dir.join("server.crt"), &leaf.cert).unwrap();
    std::fs::write(dir.join("server.key"), &leaf.key).unwrap();
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca.cert.pem()).unwrap();
    ca_file
}

/// Removes the certificate directory on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A gRPC health answer: SERVING, then `grpc-status: 0` in the trailers.
struct Serving {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Serving {
    fn new() -> Self {
        // Length-prefixed HealthCheckResponse { status: SERVING (1) }: field 1, varint 1.
        let data = Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01]);
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
        Self {
            data: Some(data),
            trailers: Some(trailers),
        }
    }
}

impl hyper::body::Body for Serving {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
}

/// The server's TLS configuration: the wildcard certificate, tickets for TLS 1.3 resumption
/// and a session cache for TLS 1.2, ALPN `alpn`.
fn tls_config(dir: &Path, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(dir.join("server.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.ticketer = rustls::crypto::ring::Ticketer::new().unwrap();
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(131_072);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// One thread; HTTP/1.1 (200 to all) on HTTP_PORT and, over TLS, HTTPS_PORT; gRPC health
/// (SERVING to all) on GRPC_PORT and, over TLS, GRPCS_PORT; on 0.0.0.0 (only the namespace's
/// loopback exists).
fn serve(dir: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let https = tokio_rustls::TlsAcceptor::from(tls_config(dir, &[]));
    let grpcs = tokio_rustls::TlsAcceptor::from(tls_config(dir, &[b"h2"]));
    rt.block_on(async {
        let listen = |port: u16| {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_reuseaddr(true).unwrap();
            socket.bind(SocketAddr::from(([0, 0, 0, 0], port))).unwrap();
            socket.listen(4096).unwrap()
        };
        let listeners = [
            (listen(HTTP_PORT), None, false),
            (listen(HTTPS_PORT), Some(https), false),
            (listen(GRPC_PORT), None, true),
            (listen(GRPCS_PORT), Some(grpcs), true),
        ];
        for (listener, tls, grpc) in listeners {
            tokio::spawn(accept(listener, tls, grpc));
        }
        println!("ready");
        probed_bench::until_parent_goes().await;
    });
}

async fn accept(listener: tokio::net::TcpListener, tls: Option<tokio_rustls::TlsAcceptor>, grpc: bool) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        answer(stream, grpc).await;
                    }
                }
                None => answer(tcp, grpc).await,
            }
        });
    }
}

async fn answer<T>(io: T, grpc: bool)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    if grpc {
        let service = hyper::service::service_fn(|_req| async {
            let mut response = hyper::Response::new(Serving::new());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/grpc"),
            );
            Ok::<_, Infallible>(response)
        });
        let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .serve_connection(io, service)
            .await;
    } else {
        let service = hyper::service::service_fn(|_req| async {
            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok\n"))))
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(io, service)
            .await;
    }
}
