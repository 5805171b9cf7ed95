//! `probed check http://...`, `https://...`, `grpc://...` and `grpcs://...`: the URL and flags
//! become an HttpCheck, run --count times through the same prober the daemon uses.
use std::{net::SocketAddr, process::ExitCode, time::Duration};

use anyhow::{bail, Context};
use probed::probe::http::{Dialect, HttpCheck, HttpCheckSpec, HttpProber, Method, Scheme, TlsVerify};

use super::{render::Line, CheckArgs};

/// What the check asks: an HTTP request for a path, or a gRPC health call for a service.
pub(super) enum Call {
    Http { path: String },
    Grpc { service: String },
}

pub(super) fn check_http(
    args: &CheckArgs,
    scheme: Scheme,
    host: &str,
    port: u16,
    call: Call,
) -> anyhow::Result<ExitCode> {
    let dialect: Dialect = args.dialect.parse()?;
    let mut spec = HttpCheckSpec::new(scheme, dialect, Duration::from_millis(args.timeout));
    match call {
        Call::Http { path } => spec.path = Some(path),
        Call::Grpc { service } => {
            let http_only = [
                ("--method", args.method.is_some()),
                ("--expect-status", args.expect_status.is_some()),
                ("--expect-body", args.expect_body.is_some()),
                ("--keep-alive", args.keep_alive),
            ];
            if let Some((flag, _)) = http_only.iter().find(|(_, set)| *set) {
                bail!("{flag} applies to http:// and https:// targets; a gRPC check calls Health/Check and SERVING is healthy");
            }
            spec.grpc = Some(service);
        }
    }
    spec.method = args.method.clone();
    spec.domain = args.host.clone();
    spec.endpoint_headers = args.headers.clone();
    spec.expect_status = args.expect_status.clone();
    spec.expect_body = args.expect_body.clone();
    if spec.expect_body.is_some() && spec.method.is_none() && Method::default_for(dialect) == Method::Head {
        // Asking for a body only makes sense with GET; say so instead of failing.
        spec.method = Some("GET".into());
    }
    let ip = host.parse::<std::net::IpAddr>().ok();
    let named_host_header =
        args.host.is_none() && !args.headers.iter().any(|h| h.to_ascii_lowercase().starts_with("host:"));
    if ip.is_none() && named_host_header {
        // A name in the URL is what a browser would send as Host.
        let value = if port == scheme.default_port() {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        spec.profile_headers.push(format!("Host:{value}"));
    }
    if scheme == Scheme::Https {
        if let Some(ca) = &args.ca {
            spec.tls = TlsVerify::strict_ca_file(ca)?;
        } else if args.strict_tls {
            spec.tls = TlsVerify::strict_system()?;
        }
        if let (Some(cert), Some(key)) = (&args.cert, &args.key) {
            spec.tls = spec.tls.with_client_cert_files(cert, key)?;
        }
        spec.server_name = args.server_name.clone();
    } else if args.strict_tls || args.ca.is_some() || args.cert.is_some() || args.server_name.is_some() {
        bail!("--strict-tls, --ca, --cert, --key and --server-name apply to https:// and grpcs:// targets only");
    }
    let check = HttpCheck::new(&spec)?;
    if args.tunnel.is_some() {
        return super::l4::check_http_tunnelled(args, &check, host, port);
    }
    let rt = crate::cli::runtime()?;
    rt.block_on(async {
        let target = match ip {
            Some(ip) => SocketAddr::new(ip, port),
            None => tokio::net::lookup_host((host, port))
                .await
                .with_context(|| format!("resolve {host}"))?
                .next()
                .with_context(|| format!("{host} has no address"))?,
        };
        let prober = HttpProber::new().with_keep_alive(args.keep_alive);
        let mut all_healthy = true;
        for i in 0..args.count {
            if i > 0 {
                tokio::time::sleep(Duration::from_millis(args.interval)).await;
            }
            let report = prober.probe(target, &check).await;
            all_healthy &= report.healthy();
            println!("{}", Line::http(&args.url, target, &report).render(args.json));
        }
        Ok(super::exit_code(all_healthy))
    })
}
