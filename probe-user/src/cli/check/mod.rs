//! `probed check URL`: probe one target now, one line (or JSON line) per probe, exit 0 only
//! when every probe was healthy. This file holds the arguments and the URL; the scheme picks
//! the prober (http.rs, l4.rs), and render.rs prints every kind of probe the same way.
use std::{path::PathBuf, process::ExitCode};

use anyhow::{bail, Context};
use probed::{
    probe::http::Scheme,
    rules::limits::{MAX_PACING_MS, MAX_UDP_PAYLOAD, TIMEOUT_MS},
};

mod agent;
mod http;
mod l4;
mod render;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// What to probe: tcp://HOST:PORT, udp://HOST:PORT, http://HOST[:PORT][/PATH],
    /// https://..., grpc://HOST:PORT[/SERVICE] (gRPC health over HTTP/2 cleartext),
    /// grpcs://... (over TLS) or agent://HOST:PORT (HAProxy's agent-check: the line the
    /// backend's agent answers); IPv6 hosts in brackets.
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
    /// One timeout for connect, TLS handshake and response head (HTTP) or for the reply
    /// (TCP/UDP), in milliseconds: 100 to 60000, as in the config.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(TIMEOUT_MS.0..=TIMEOUT_MS.1))]
    pub timeout: u64,
    /// How many probes to send: 1 to 100000.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_COUNT)))]
    pub count: u32,
    /// Pause between the end of one probe and the start of the next, in milliseconds: 0 to
    /// 300000, as in the config.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(0..=MAX_PACING_MS))]
    pub interval: u64,
    /// Print one JSON object per probe.
    #[arg(long)]
    pub json: bool,
    /// HTTPS and gRPC over TLS: validate the certificate against the system roots.
    #[arg(long)]
    pub strict_tls: bool,
    /// HTTPS and gRPC over TLS: validate the certificate against the CA certificates in this
    /// PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// HTTPS and gRPC over TLS: present this client certificate (PEM, with its chain), for
    /// servers that ask for one; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM), readable by its owner alone.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// HTTPS and gRPC over TLS: the name sent as SNI and verified, instead of --host's or
    /// the URL's.
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
    /// Whose defaults apply: lb (HEAD, 2xx and 3xx) or tm (GET, 200 only).
    #[arg(long, default_value = "lb")]
    pub dialect: String,
    /// Reuse one connection across --count probes instead of one connection per probe.
    #[arg(long)]
    pub keep_alive: bool,
    /// TCP/UDP: the interface probes leave from (default: the one holding the route's source).
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// TCP/UDP: how probes are sent: auto (XDP when the device can), xdp or raw.
    #[arg(long, default_value = "auto")]
    pub tx: String,
    /// UDP: the request payload (may be empty); agent: what is written to the agent before
    /// its answer is read (agent_send). At most 500 bytes.
    #[arg(long, default_value = "", value_parser = udp_payload)]
    pub send: String,
    /// UDP: a reply must contain this string (request/response mode), at most 500 bytes;
    /// without it, silence is success and only an ICMP error fails (plain mode).
    #[arg(long, value_parser = udp_payload)]
    pub expect: Option<String>,
    /// TCP, HTTP and UDP with --expect: send the check through the data path's tunnel, as
    /// `tunnel` in the config: "ipip" (IPv4 in IPv4, IPv6 in IPv6) or "gue" (in UDP) to the
    /// URL's host, with --tunnel-vip inside. An HTTP check through a tunnel runs whole in the
    /// kernel engine (status line only: no --expect-body, no --keep-alive); a UDP one sends its
    /// request wrapped and reads the VIP's answer.
    #[arg(long, value_name = "KIND", requires = "tunnel_vip", value_parser = ["ipip", "gue"])]
    pub tunnel: Option<String>,
    /// With --tunnel gue: the UDP port the backend decapsulates on.
    #[arg(long, value_name = "PORT", default_value_t = 6080,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub tunnel_port: u16,
    /// With --tunnel: the service address inside the tunnel (the VIP the backend at the URL's
    /// host answers for, at the URL's port).
    #[arg(long, value_name = "ADDRESS", requires = "tunnel")]
    pub tunnel_vip: Option<std::net::IpAddr>,
    /// With --tunnel: the size of the client packets the tunnel must carry, as `tunnel_mtu`:
    /// the SYN's outer packet is padded to it plus the outer headers (1280 to 3000).
    #[arg(long, value_name = "BYTES", requires = "tunnel",
          value_parser = clap::value_parser!(u16).range(1280..=3000))]
    pub tunnel_mtu: Option<u16>,
    /// With --tunnel: the outer header's source, as `tunnel_source` (an address of this
    /// node's; default: the probe's own source).
    #[arg(long, value_name = "ADDRESS", requires = "tunnel")]
    pub tunnel_source: Option<std::net::IpAddr>,
}

/// The most probes one `probed check` sends.
pub const MAX_COUNT: u32 = 100_000;

/// A UDP payload as the config bounds it (the kernel path cannot send more either).
fn udp_payload(s: &str) -> Result<String, String> {
    if s.len() > MAX_UDP_PAYLOAD {
        return Err(format!(
            "{} bytes is too long: at most {MAX_UDP_PAYLOAD} bytes",
            s.len()
        ));
    }
    Ok(s.to_string())
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
    /// A TCP SYN probe through the kernel engine.
    Tcp { host: String, port: u16 },
    /// A UDP probe: through the kernel engine, or a socket in request/response mode.
    Udp { host: String, port: u16 },
    /// An agent check (HAProxy's agent-check protocol).
    Agent { host: String, port: u16 },
    /// A gRPC health check of `service` ("" for the server's own health).
    Grpc {
        tls: bool,
        host: String,
        port: u16,
        service: String,
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
        s @ ("grpc" | "grpcs") => {
            let (host, port) =
                split_authority(authority, 0).with_context(|| format!("read the host and port of {url:?}"))?;
            if port == 0 {
                bail!("{url:?} needs a port: {s}://HOST:PORT[/SERVICE]");
            }
            let service = path.strip_prefix('/').unwrap_or(path);
            if service.contains('/') {
                bail!("{url:?}: after the port comes one gRPC service name, like /shop.Cart, or nothing");
            }
            Ok(Target::Grpc {
                tls: s == "grpcs",
                host,
                port,
                service: service.to_string(),
            })
        }
        "agent" => {
            let (host, port) =
                split_authority(authority, 0).with_context(|| format!("read the host and port of {url:?}"))?;
            if port == 0 {
                bail!("{url:?} needs a port: agent://HOST:PORT");
            }
            Ok(Target::Agent { host, port })
        }
        s @ ("tcp" | "udp") => {
            let (host, port) =
                split_authority(authority, 0).with_context(|| format!("read the host and port of {url:?}"))?;
            if port == 0 {
                bail!("{url:?} needs a port: {s}://HOST:PORT");
            }
            Ok(if s == "tcp" {
                Target::Tcp { host, port }
            } else {
                Target::Udp { host, port }
            })
        }
        other => bail!("unsupported scheme {other:?} in {url:?}; supported: tcp, udp, http, https, grpc, grpcs, agent"),
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
pub(super) fn split_authority(authority: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
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
        Some(p) if default_port == 0 && p.is_empty() => 0,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => bail!("port {p:?} is not allowed: 1-65535"),
        },
    };
    Ok((host.to_string(), port))
}

/// `probed check`'s exit: success when every probe was healthy.
fn exit_code(all_healthy: bool) -> ExitCode {
    if all_healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let target = parse_target(&args.url)?;
    let takes_tunnel = matches!(target, Target::Tcp { .. })
        || matches!(&target, Target::Http { scheme, .. } if *scheme == Scheme::Http)
        || matches!(target, Target::Udp { .. }) && args.expect.is_some();
    if args.tunnel.is_some() && !takes_tunnel {
        bail!(
            "--tunnel: tcp://, http:// and udp:// with --expect checks go through a tunnel (the URL's host is the \
             backend, the port the service's)"
        );
    }
    if args.tunnel_mtu.is_some() && matches!(target, Target::Udp { .. }) {
        bail!("--tunnel-mtu pads the SYN of tcp:// and http:// checks; a UDP request is sent as it is");
    }
    match target {
        Target::Http {
            scheme,
            host,
            port,
            path,
        } => http::check_http(&args, scheme, &host, port, http::Call::Http { path }),
        Target::Grpc {
            tls,
            host,
            port,
            service,
        } => {
            let scheme = if tls { Scheme::Https } else { Scheme::Http };
            http::check_http(&args, scheme, &host, port, http::Call::Grpc { service })
        }
        Target::Tcp { host, port } => l4::check_tcp(&args, &host, port),
        Target::Udp { host, port } => l4::check_udp(&args, &host, port),
        Target::Agent { host, port } => agent::check_agent(&args, &host, port),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CheckArgs,
    }

    /// The error clap gives for `flags`, or the parsed arguments.
    fn parse(flags: &[&str]) -> Result<CheckArgs, String> {
        let mut all = vec!["check", "tcp://198.18.0.2:80"];
        all.extend_from_slice(flags);
        Cmd::try_parse_from(all).map(|c| c.args).map_err(|e| e.to_string())
    }

    fn refused(flags: &[&str], words: &[&str]) {
        let e = parse(flags).err().unwrap_or_else(|| panic!("{flags:?} accepted"));
        for w in words {
            assert!(e.contains(w), "{flags:?}: {w:?} missing from: {e}");
        }
    }

    #[test]
    fn numeric_flags_are_bounded() {
        refused(&["--timeout", "0"], &["--timeout", "'0'", "100..=60000"]);
        refused(&["--timeout", "60001"], &["--timeout", "60001", "100..=60000"]);
        refused(&["--timeout", "18446744073709551615"], &["--timeout", "100..=60000"]);
        refused(&["--count", "0"], &["--count", "'0'", "1..=100000"]);
        refused(&["--count", "100001"], &["--count", "1..=100000"]);
        refused(&["--interval", "300001"], &["--interval", "0..=300000"]);
        refused(&["--interval=-1"], &["--interval", "-1"]);
        let long = "x".repeat(MAX_UDP_PAYLOAD + 1);
        refused(&["--send", &long], &["--send", "501 bytes", "at most 500 bytes"]);
        refused(&["--expect", &long], &["--expect", "at most 500 bytes"]);
    }

    #[test]
    fn bounds_are_the_configs() {
        use probed::rules::Dialect;
        let ms = std::time::Duration::from_millis;
        let any = std::time::Duration::from_secs(30);
        assert!(Dialect::Lb.check_timeout(any, ms(TIMEOUT_MS.0)).is_ok());
        assert!(Dialect::Lb.check_timeout(any, ms(TIMEOUT_MS.1)).is_ok());
        assert!(Dialect::Lb.check_timeout(any, ms(TIMEOUT_MS.0 - 1)).is_err());
        assert!(Dialect::Lb.check_timeout(any, ms(TIMEOUT_MS.1 + 1)).is_err());
        let udp = |n: usize| {
            format!(
                "[[profile]]\nname = \"u\"\ndialect = \"lb\"\n[profile.health]\nprotocol = \"udp\"\nport = 53\n\
                 request = \"{}\"\n[[profile.endpoint]]\naddress = \"192.0.2.1\"\n",
                "x".repeat(n)
            )
        };
        assert!(probed::config::Config::parse(&udp(MAX_UDP_PAYLOAD), "t.toml").is_ok());
        assert!(probed::config::Config::parse(&udp(MAX_UDP_PAYLOAD + 1), "t.toml").is_err());
    }

    #[test]
    fn edges_are_accepted() {
        let a = parse(&["--timeout", "100", "--count", "100000", "--interval", "0"]).unwrap();
        assert_eq!((a.timeout, a.count, a.interval), (100, 100_000, 0));
        let a = parse(&["--timeout", "60000", "--interval", "300000", "--send", &"x".repeat(500)]).unwrap();
        assert_eq!((a.timeout, a.interval, a.send.len()), (60_000, 300_000, 500));
    }

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
        assert_eq!(
            t("grpcs://[2001:2::2]:50051/shop.Cart"),
            Target::Grpc {
                tls: true,
                host: "2001:2::2".into(),
                port: 50051,
                service: "shop.Cart".into()
            }
        );
        assert_eq!(
            t("grpc://198.18.0.2:50051"),
            Target::Grpc {
                tls: false,
                host: "198.18.0.2".into(),
                port: 50051,
                service: String::new()
            }
        );
        assert_eq!(
            t("tcp://[2001:2::2]:22"),
            Target::Tcp {
                host: "2001:2::2".into(),
                port: 22
            }
        );
        for bad in [
            "198.18.0.2",
            "ftp://x/",
            "http://:80/",
            "http://h:0/",
            "http://h:99999/",
            "http://[::1/",
            "tcp://198.18.0.2",
            "grpc://198.18.0.2/",
            "grpc://198.18.0.2:50051/a/b",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }
}
