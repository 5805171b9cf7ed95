//! `probed check URL`: probe one target now, one line (or JSON line) per probe, exit 0 only
//! when every probe was healthy. The URL scheme picks the probe kind.
use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{bail, Context};
use probed::probe::http::{Dialect, HttpCheck, HttpCheckSpec, HttpProber, HttpReport, Method, Scheme, TlsVerify};

#[derive(clap::Args)]
pub struct CheckArgs {
    /// What to probe: http://HOST[:PORT][/PATH] or https://... (IPv6 hosts in brackets).
    pub url: String,
    /// HEAD or GET (default: the dialect's, HEAD for lb, GET for tm).
    #[arg(long)]
    pub method: Option<String>,
    /// Domain sent as the Host header (and as TLS SNI) instead of the URL's host.
    #[arg(long)]
    pub host: Option<String>,
    /// A custom request header; repeatable, at most 8.
    #[arg(long = "header", value_name = "NAME:VALUE")]
    pub headers: Vec<String>,
    /// Healthy status codes: classes and ranges, e.g. "2xx,3xx" or "200-299, 301-301".
    #[arg(long, value_name = "SET")]
    pub expect_status: Option<String>,
    /// A substring the body must contain (needs --method GET).
    #[arg(long, value_name = "TEXT")]
    pub expect_body: Option<String>,
    /// One timeout for connect, TLS handshake and response head, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout: u64,
    /// How many probes to send.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub count: u32,
    /// Pause between the end of one probe and the start of the next, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval: u64,
    /// Print one JSON object per probe.
    #[arg(long)]
    pub json: bool,
    /// HTTPS: validate the certificate against the system roots.
    #[arg(long)]
    pub strict_tls: bool,
    /// HTTPS: validate the certificate against the CA certificates in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Whose defaults apply: lb (HEAD, 2xx and 3xx) or tm (GET, 200 only).
    #[arg(long, default_value = "lb")]
    pub dialect: String,
    /// Reuse one connection across --count probes instead of one connection per probe.
    #[arg(long)]
    pub keep_alive: bool,
}

/// A probe target as the URL names it. New schemes add a variant here and a branch in `run`.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    Http {
        scheme: Scheme,
        /// The host as written, without IPv6 brackets.
        host: String,
        port: u16,
        path: String,
    },
}

/// Splits `scheme://host[:port][/path]`.
pub fn parse_target(url: &str) -> anyhow::Result<Target> {
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!("{url:?} has no scheme; write http://HOST[:PORT][/PATH] or https://...");
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    match scheme.to_ascii_lowercase().as_str() {
        s @ ("http" | "https") => {
            let scheme = if s == "http" { Scheme::Http } else { Scheme::Https };
            let (host, port) = split_authority(authority, scheme.default_port())
                .with_context(|| format!("read the host and port of {url:?}"))?;
            Ok(Target::Http {
                scheme,
                host,
                port,
                path: path.to_string(),
            })
        }
        other => bail!("unsupported scheme {other:?} in {url:?}; supported: http, https"),
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn split_authority(authority: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("an IPv6 address lacks its closing ']'")?;
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').context("expected ':PORT' after ']'")?)),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        bail!("the host is empty");
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => bail!("port {p:?} is not allowed: 1-65535"),
        },
    };
    Ok((host.to_string(), port))
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    match parse_target(&args.url)? {
        Target::Http {
            scheme,
            host,
            port,
            path,
        } => check_http(&args, scheme, &host, port, path),
    }
}

fn check_http(args: &CheckArgs, scheme: Scheme, host: &str, port: u16, path: String) -> anyhow::Result<ExitCode> {
    let dialect: Dialect = args.dialect.parse()?;
    let mut spec = HttpCheckSpec::new(scheme, dialect, Duration::from_millis(args.timeout));
    spec.method = args.method.clone();
    spec.path = Some(path);
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
    } else if args.strict_tls || args.ca.is_some() {
        bail!("--strict-tls and --ca apply to https:// targets only");
    }
    let check = HttpCheck::new(&spec)?;
    if args.count == 0 {
        bail!("count \"0\" is not allowed: at least 1 probe");
    }
    let rt = super::runtime()?;
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
            println!("{}", render(&args.url, target, &report, args.json));
        }
        Ok(if all_healthy {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
}

fn render(url: &str, addr: SocketAddr, report: &HttpReport, json: bool) -> String {
    let verdict = if report.healthy() { "healthy" } else { "unhealthy" };
    let ms = report.elapsed.as_secs_f64() * 1000.0;
    if json {
        serde_json::json!({
            "target": url,
            "address": addr.to_string(),
            "verdict": verdict,
            "outcome": report.outcome.to_string(),
            "status": report.status,
            "time_ms": (ms * 1000.0).round() / 1000.0,
        })
        .to_string()
    } else {
        format!("{url} ({addr}) {verdict} {} {ms:.2}ms", report.outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = |u| parse_target(u).unwrap();
        assert_eq!(
            t("http://198.18.0.2"),
            Target::Http {
                scheme: Scheme::Http,
                host: "198.18.0.2".into(),
                port: 80,
                path: "/".into()
            }
        );
        assert_eq!(
            t("HTTPS://[2001:2::2]:8443/health?x=1"),
            Target::Http {
                scheme: Scheme::Https,
                host: "2001:2::2".into(),
                port: 8443,
                path: "/health?x=1".into()
            }
        );
        assert_eq!(
            t("https://backend.test/"),
            Target::Http {
                scheme: Scheme::Https,
                host: "backend.test".into(),
                port: 443,
                path: "/".into()
            }
        );
        for bad in [
            "198.18.0.2",
            "ftp://x/",
            "http://:80/",
            "http://h:0/",
            "http://h:99999/",
            "http://[::1/",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
