//! `probed check tcp://...` and `udp://...`: one-shot probes through the kernel engine (UDP
//! request/response mode through a socket), printed in the same shape as the HTTP checks.
use std::{
    net::{IpAddr, SocketAddr, ToSocketAddrs},
    process::ExitCode,
    time::Duration,
};

use anyhow::{bail, Context};
use probed::engine::{
    source::probe_iface, Encap, EngineConfig, L4Engine, L4Proto, L4Request, L4Result, Tunnel, TxChoice, TxPath,
};

use probe_common::http::HTTP_REQ_MAX;
use probed::probe::http::{render_request, task::kernel_outcome, HttpCheck, HttpReport};

use super::{render::Line, CheckArgs};

/// Resolves `host` (an IP literal, or a name the resolver knows) with `port`.
pub(super) fn resolve(host: &str, port: u16) -> anyhow::Result<SocketAddr> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (host, port)
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{host} resolves to no address"))
}

fn tx_choice(tx: &str) -> anyhow::Result<TxChoice> {
    Ok(match tx {
        "auto" => TxChoice::Auto,
        "xdp" => TxChoice::Force(TxPath::Xdp),
        "raw" => TxChoice::Force(TxPath::Raw),
        other => bail!("--tx {other:?} is not allowed: auto, xdp or raw"),
    })
}

/// Starts an engine on the interface that reaches `target` (or `--iface`).
fn start_for(
    args: &CheckArgs,
    target: SocketAddr,
) -> anyhow::Result<(L4Engine, tokio::sync::mpsc::UnboundedReceiver<L4Result>)> {
    let iface = probe_iface(args.iface.as_slice(), target.ip())
        .with_context(|| format!("find the interface that reaches {}; name one with --iface", target.ip()))?;
    let pin_dir = format!("/sys/fs/bpf/probed-check-{}", std::process::id());
    let mut cfg = EngineConfig::new(&iface, pin_dir);
    cfg.tx = tx_choice(&args.tx)?;
    let started = L4Engine::start(cfg).with_context(|| {
        format!("start the kernel engine on {iface} (is another probed attached there? it needs root or CAP_BPF + CAP_NET_ADMIN)")
    })?;
    if !args.json {
        eprintln!(
            "probing from {iface}, probe_rx at {}, sending via {} ({})",
            started.0.rx_where(),
            started.0.tx_path(),
            started.0.tx_path_reason()
        );
    }
    Ok(started)
}

/// Where a check of `backend` goes: to it, or (--tunnel) to the VIP at its port, inside outer
/// headers to it.
fn road(args: &CheckArgs, backend: SocketAddr) -> anyhow::Result<(SocketAddr, Option<Tunnel>)> {
    let Some(vip) = args.tunnel_vip else {
        return Ok((backend, None));
    };
    let encap = match args.tunnel.as_deref() {
        Some("gue") => Encap::Gue { port: args.tunnel_port },
        _ => Encap::Ipip,
    };
    let via = Tunnel {
        backend: backend.ip(),
        encap,
        mtu: args.tunnel_mtu.unwrap_or(0),
        source: args.tunnel_source,
    };
    let inner = SocketAddr::new(vip, backend.port());
    via.check(&inner).map_err(anyhow::Error::msg).context("--tunnel-vip")?;
    Ok((inner, Some(via)))
}

pub(super) fn check_tcp(args: &CheckArgs, host: &str, port: u16) -> anyhow::Result<ExitCode> {
    let backend = resolve(host, port)?;
    // Through a tunnel the SYN is addressed to the VIP and its outer header to the host.
    let (target, tunnel) = road(args, backend)?;
    let timeout = Duration::from_millis(args.timeout);
    each_probe(args, backend, (target, tunnel), (L4Proto::Tcp, timeout), |result| {
        Line::l4(&args.url, result)
    })
}

/// Runs `--count` probes of `proto` to `target` (through `tunnel`) on an engine started for
/// `backend`, `--interval` apart, printing each result's `line`; success when all were
/// healthy.
fn each_probe<'a>(
    args: &'a CheckArgs,
    backend: SocketAddr,
    (target, tunnel): (SocketAddr, Option<Tunnel>),
    (proto, timeout): (L4Proto, Duration),
    line: impl Fn(&L4Result) -> Line<'a>,
) -> anyhow::Result<ExitCode> {
    let (engine, mut results) = start_for(args, backend)?;
    let mut all_healthy = true;
    for i in 0..args.count {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(args.interval));
        }
        engine.submit(vec![L4Request {
            token: u64::from(i),
            target,
            proto: proto.clone(),
            timeout,
            tunnel,
        }])?;
        let result = results.blocking_recv().context("the engine stopped")?;
        let line = line(&result);
        all_healthy &= line.healthy;
        println!("{}", line.render(args.json));
    }
    Ok(super::exit_code(all_healthy))
}

/// `probed check http://BACKEND... --tunnel`: the HTTP check `check` through the tunnel, run
/// whole by the kernel engine as the daemon runs it (a socket cannot take the tunnel).
pub(super) fn check_http_tunnelled(
    args: &CheckArgs,
    check: &HttpCheck,
    host: &str,
    port: u16,
) -> anyhow::Result<ExitCode> {
    if check.expect_body().is_some() || args.keep_alive {
        bail!("--tunnel: an HTTP check through a tunnel runs in the kernel, which reads the status line only: leave out --expect-body and --keep-alive");
    }
    let backend = resolve(host, port)?;
    let (target, tunnel) = road(args, backend)?;
    let request = render_request(check, target);
    if request.len() > HTTP_REQ_MAX {
        bail!(
            "--tunnel: the request is {} bytes; the kernel's hold at most {HTTP_REQ_MAX}: shorten the path or the headers",
            request.len()
        );
    }
    let request: std::sync::Arc<[u8]> = request.into();
    let proto = L4Proto::Http { request };
    each_probe(args, backend, (target, tunnel), (proto, check.timeout()), |result| {
        let report = HttpReport {
            outcome: kernel_outcome(result.outcome, check.status()),
            elapsed: result.elapsed,
            status: match result.outcome {
                probed::engine::L4Outcome::HttpStatus { status } => Some(status),
                _ => None,
            },
            cert_not_after: None,
        };
        Line::http(&args.url, target, &report)
    })
}

/// `probed check udp://...`: plain mode through the kernel engine (silence is success),
/// request/response mode (`--expect`) through a connected socket.
pub(super) fn check_udp(args: &CheckArgs, host: &str, port: u16) -> anyhow::Result<ExitCode> {
    use probed::probe::udp::{UdpOutcome, UdpProber, UdpRequest};
    let target = resolve(host, port)?;
    let timeout = Duration::from_millis(args.timeout);
    let send: std::sync::Arc<[u8]> = std::sync::Arc::from(args.send.as_bytes());
    let mut all_healthy = true;
    let mut print = |outcome: UdpOutcome, elapsed: Duration| {
        all_healthy &= outcome.healthy();
        println!("{}", Line::udp(&args.url, target, outcome, elapsed).render(args.json));
    };
    if let Some(expect) = &args.expect {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let prober = UdpProber::new(1);
        // Through a tunnel: the request wrapped for the host, the answer from the VIP.
        let tunnel = args.tunnel_vip.map(|vip| probed::probe::tunnel::TunnelTo {
            vip,
            encap: match args.tunnel.as_deref() {
                Some("gue") => Encap::Gue { port: args.tunnel_port },
                _ => Encap::Ipip,
            },
            mtu: None,
            source: args.tunnel_source,
        });
        if let Some(t) = &tunnel {
            t.engine(target.ip())
                .check(&SocketAddr::new(t.vip, port))
                .map_err(anyhow::Error::msg)
                .context("--tunnel-vip")?;
        }
        let req = UdpRequest {
            target,
            send,
            expect: std::sync::Arc::from(expect.as_bytes()),
            timeout,
            source: None,
            tunnel,
        };
        for i in 0..args.count {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(args.interval));
            }
            let r = rt.block_on(prober.probe(&req));
            print(r.outcome, r.elapsed);
        }
    } else {
        let (engine, mut results) = start_for(args, target)?;
        for i in 0..args.count {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(args.interval));
            }
            let proto = L4Proto::Udp { payload: send.clone() };
            engine.submit(vec![L4Request {
                token: u64::from(i),
                target,
                proto,
                timeout,
                tunnel: None,
            }])?;
            let r = results.blocking_recv().context("the engine stopped")?;
            let outcome = UdpOutcome::try_from(r.outcome)
                .map_err(|o| anyhow::anyhow!("the engine reported a TCP outcome ({o}) for a UDP probe"))?;
            print(outcome, r.elapsed);
        }
    }
    Ok(super::exit_code(all_healthy))
}
