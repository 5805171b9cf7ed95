//! `tunnel = "ipip"` in the daemon (issue 49): a DSR fleet checked the way its client flows
//! reach it. Backends behind one VIP (healthy, service not on the VIP, VIP missing, strict
//! rp_filter, tunnel down, no decapsulation, a link MTU too small for full-size packets), IPv4
//! and IPv6 profiles through the tunnel (TCP, HTTP, UDP request/response) beside a plain
//! profile of the same backends: each endpoint's status is what a client routed through that
//! backend's tunnel meets, while the plain check calls every backend up. Then the healthy
//! backend loses its VIP (a typo in a deploy, a reboot that did not restore it): the tunnelled
//! profiles take it out, the plain one does not, and it comes back when the VIP does. Also:
//! `probed check` through the tunnel, and the UDP prober through it (no kernel engine).
use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use probed::{engine::Encap, probe::tcp::TunnelTo, status::EndpointStatus};
use probed_tests::{
    daemon::{last_reason, DaemonFiles, RunningDaemon},
    topo::PROBER_IF,
    tunnel::{
        backend_v4, backend_v6, dsr_rig, reference, reference_http, reference_udp, Backend, DsrRig, Wrap, BACKENDS,
        PORT, TIMEOUT, UDP_PORT, VIP4, VIP6, WEB,
    },
};

const SETTLE: Duration = Duration::from_secs(5);

/// A profile's tunnel and the VIP inside it, or none.
type Via = Option<(Wrap, &'static str)>;

/// What a profile checks.
#[derive(Clone, Copy)]
enum Check {
    Tcp,
    /// An HTTP GET of this path, run whole by the kernel through the tunnel.
    Http(&'static str),
    /// UDP request/response: the request wrapped by a raw socket, the VIP's answer read.
    Udp,
}

/// The profiles: (name, its tunnel, IPv6, what it checks).
const PROFILES: [(&str, Via, bool, Check); 8] = [
    ("dsr4", Some((Wrap::Ipip, VIP4)), false, Check::Tcp),
    ("dsr6", Some((Wrap::Ipip, VIP6)), true, Check::Tcp),
    ("gue4", Some((Wrap::Gue, VIP4)), false, Check::Tcp),
    ("gue6", Some((Wrap::Gue, VIP6)), true, Check::Tcp),
    ("own4", None, false, Check::Tcp),
    ("web4", Some((Wrap::Gue, VIP4)), false, Check::Http("/health")),
    ("web6", Some((Wrap::Ipip, VIP6)), true, Check::Http("/health")),
    ("dns4", Some((Wrap::Ipip, VIP4)), false, Check::Udp),
];

fn config(files: &DaemonFiles) -> String {
    let mut text = files.header(PROBER_IF);
    for (name, vip, v6, check) in PROFILES {
        let check = match check {
            Check::Tcp => format!("protocol = \"tcp\"\nport = {PORT}"),
            Check::Http(path) => {
                format!("protocol = \"http\"\nport = {WEB}\nmethod = \"GET\"\npath = \"{path}\"")
            }
            Check::Udp => {
                format!("protocol = \"udp\"\nport = {UDP_PORT}\nrequest = \"ping\"\nresponse = \"pong\"")
            }
        };
        text += &format!(
            "[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n[profile.health]\n{check}\n\
             interval = \"200ms\"\ntimeout = \"300ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n"
        );
        if let Some((wrap, vip)) = vip {
            let kind = if wrap == Wrap::Gue { "gue" } else { "ipip" };
            text += &format!("tunnel = \"{kind}\"\ntunnel_vip = \"{vip}\"\n");
        }
        for k in 0..BACKENDS.len() {
            let address = if v6 { backend_v6(k) } else { backend_v4(k) };
            text += &format!("[[profile.endpoint]]\nname = \"b{k}\"\naddress = \"{address}\"\n");
        }
    }
    text
}

/// Waits until endpoint `b<k>` of `profile` is Online (`up`) or Degraded, and returns its
/// last result's reason.
fn settle(d: &RunningDaemon, profile: &str, k: usize, up: bool) -> String {
    let want = if up {
        EndpointStatus::Online
    } else {
        EndpointStatus::Degraded
    };
    let v = d.wait_status(profile, &format!("b{k}"), want, SETTLE);
    last_reason(&v)
}

/// What the reference client meets through backend k's tunnel to the profile's VIP (an HTTP
/// client for an HTTP profile: a 200 is up; a UDP one for a UDP profile: an answer is up); a
/// plain profile's reference is the backend's own address, where every backend listens.
fn client_gets_through(rig: &DsrRig, k: usize, vip: Via, check: Check) -> bool {
    vip.is_none_or(|(wrap, vip)| match check {
        Check::Tcp => reference(rig, k, vip.parse().unwrap(), wrap) == "open",
        Check::Http(path) => reference_http(rig, k, vip.parse().unwrap(), wrap, path) == "200",
        Check::Udp => reference_udp(rig, k, vip.parse().unwrap(), wrap) == "reply",
    })
}

#[test]
fn a_dsr_fleet_is_checked_through_its_tunnel_and_a_backend_that_loses_its_vip_leaves() {
    let rig = dsr_rig();
    let files = DaemonFiles::new();
    let config = files.write_config(&config(&files));
    let d = RunningDaemon::start(&rig.topo.prober, config, Some(&files.config_path())).expect("daemon starts");

    let mut table = String::new();
    for (profile, vip, _, path) in PROFILES {
        for (k, case) in BACKENDS.into_iter().enumerate() {
            let up = client_gets_through(&rig, k, vip, path);
            let reason = settle(&d, profile, k, up);
            table.push_str(&format!(
                "  {profile:<5} b{k} {:<24} client {:<5} probed {} ({reason})\n",
                format!("{case:?}"),
                if up { "up" } else { "down" },
                if up { "Online" } else { "Degraded" }
            ));
        }
    }
    eprintln!("{table}");
    // The status view names the road: the VIP and the encapsulation, the endpoint's address the
    // outer destination.
    for (profile, via, _, _) in PROFILES {
        let v = d.endpoint(profile, "b0");
        let want = via.map(|(wrap, vip)| TunnelTo {
            vip: vip.parse().unwrap(),
            encap: match wrap {
                Wrap::Ipip => Encap::Ipip,
                Wrap::Gue => Encap::Gue { port: 6080 },
            },
            mtu: None,
            source: None,
        });
        assert_eq!(v.tunnel, want, "{profile}");
    }
    let json = d.get("/v1/status/gue6/b0");
    assert_eq!(json["tunnel"]["vip"], VIP6, "{json}");
    assert_eq!(
        (
            json["tunnel"]["encap"]["kind"].as_str(),
            json["tunnel"]["encap"]["port"].as_u64()
        ),
        (Some("gue"), Some(6080)),
        "{json}"
    );

    // The healthy backend (b0) loses its VIP: through the tunnel it is down, plainly it is not.
    let b0 = &rig.backends[0];
    b0.ip(&["addr", "del", &format!("{VIP4}/32"), "dev", "lo"]);
    b0.ip(&["-6", "addr", "del", &format!("{VIP6}/128"), "dev", "lo"]);
    for (profile, vip, _, path) in PROFILES {
        let up = client_gets_through(&rig, 0, vip, path);
        assert_eq!(up, vip.is_none(), "{profile}: the reference client without the VIP");
        settle(&d, profile, 0, up);
    }
    // The plain profile never noticed.
    let own = d.endpoint("own4", "b0");
    assert_eq!(own.status, EndpointStatus::Online);
    // Nothing the daemon sent reached a VIP unwrapped (requests and RSTs included).
    assert_eq!(rig.unwrapped_to_vip(), 0);

    // The VIP is back: so is the backend.
    b0.ip(&["addr", "add", &format!("{VIP4}/32"), "dev", "lo"]);
    b0.ip(&["-6", "addr", "add", &format!("{VIP6}/128"), "dev", "lo", "nodad"]);
    for (profile, vip, _, path) in PROFILES {
        assert!(
            client_gets_through(&rig, 0, vip, path),
            "{profile}: the reference client with the VIP"
        );
        settle(&d, profile, 0, true);
    }
    d.stop();
}

/// `probed check tcp://BACKEND:PORT --tunnel ipip --tunnel-vip VIP` gives the reference
/// client's verdict per backend; the same URL without the tunnel says the backend is up. The
/// same for `http://` through the tunnel, against a reference HTTP client.
#[test]
fn probed_check_takes_the_tunnel_too() {
    let rig = dsr_rig();
    let run = |args: &[&str]| {
        let out = probed_tests::probed_check(&rig.topo.prober, args);
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for (vip, backend, wrap) in [
            (VIP4, backend_v4(k), Wrap::Ipip),
            (VIP6, backend_v6(k), Wrap::Ipip),
            (VIP4, backend_v4(k), Wrap::Gue),
        ] {
            let url = match backend {
                std::net::IpAddr::V4(a) => format!("tcp://{a}:{PORT}"),
                std::net::IpAddr::V6(a) => format!("tcp://[{a}]:{PORT}"),
            };
            let kind = if wrap == Wrap::Gue { "gue" } else { "ipip" };
            let (code, out) = run(&[
                &url,
                "--tunnel",
                kind,
                "--tunnel-vip",
                vip,
                "--timeout",
                "300",
                "--json",
            ]);
            let up = reference(&rig, k, vip.parse().unwrap(), wrap) == "open";
            assert_eq!(code == 0, up, "{case:?} {url} through the tunnel: {out}");
            let line: serde_json::Value =
                serde_json::from_str(out.lines().next().unwrap_or("{}")).expect("a JSON line");
            assert_eq!(line["verdict"], if up { "healthy" } else { "unhealthy" }, "{out}");
            let (code, out) = run(&[&url, "--timeout", "300"]);
            assert_eq!(code, 0, "{case:?} {url} plainly: {out}");
        }
    }
    // The tunnel's VIP must be of the backend's family; other schemes take no tunnel.
    let (code, _) = run(&[
        &format!("tcp://{}:{PORT}", backend_v4(0)),
        "--tunnel",
        "ipip",
        "--tunnel-vip",
        VIP6,
    ]);
    assert_eq!(code, 1);
    let (code, _) = run(&[
        &format!("https://{}:{PORT}/", backend_v4(0)),
        "--tunnel",
        "ipip",
        "--tunnel-vip",
        VIP4,
    ]);
    assert_eq!(code, 1);
    // HTTP through the tunnel, in the kernel: the status each backend gives a client that
    // takes its tunnel (a 503 path fails everywhere; a broken road, as the TCP check says).
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for path in ["/health", "/down"] {
            let url = format!("http://[{}]:{WEB}{path}", backend_v6(k));
            let (code, out) = run(&[
                &url,
                "--tunnel",
                "gue",
                "--tunnel-vip",
                VIP6,
                "--timeout",
                "300",
                "--json",
            ]);
            let oracle = reference_http(&rig, k, VIP6.parse().unwrap(), Wrap::Gue, path);
            assert_eq!(
                code == 0,
                oracle == "200",
                "{case:?} {url} through the tunnel: {out} (reference {oracle})"
            );
            let line: serde_json::Value =
                serde_json::from_str(out.lines().next().unwrap_or("{}")).expect("a JSON line");
            let status = oracle.parse::<u64>().ok();
            assert_eq!(
                line["status"].as_u64(),
                status,
                "{case:?} {url}: {out} (reference {oracle})"
            );
        }
    }
    let (code, out) = run(&[
        &format!("http://{}:{WEB}/", backend_v4(0)),
        "--tunnel",
        "ipip",
        "--tunnel-vip",
        VIP4,
        "--expect-body",
        "ok",
    ]);
    assert_eq!(code, 1, "{out}");
    // UDP request/response through the tunnel: healthy where the client gets the VIP's answer.
    for (k, case) in BACKENDS.into_iter().enumerate() {
        let url = format!("udp://{}:{UDP_PORT}", backend_v4(k));
        let (code, out) = run(&[
            &url,
            "--send",
            "ping",
            "--expect",
            "pong",
            "--tunnel",
            "gue",
            "--tunnel-vip",
            VIP4,
            "--timeout",
            "300",
        ]);
        let oracle = reference_udp(&rig, k, VIP4.parse().unwrap(), Wrap::Gue);
        assert_eq!(
            code == 0,
            oracle == "reply",
            "{case:?} {url} through the tunnel: {out} (reference {oracle})"
        );
    }
    // Plain UDP (silence is healthy) cannot take a tunnel.
    let (code, _) = run(&[
        &format!("udp://{}:{UDP_PORT}", backend_v4(0)),
        "--tunnel",
        "ipip",
        "--tunnel-vip",
        VIP4,
    ]);
    assert_eq!(code, 1);
}

/// UDP request/response through the tunnel: the request leaves wrapped by a raw socket, the
/// VIP's answer comes straight back to a socket of the prober's. Each backend's verdict is the
/// reference client's (a socket connected to the VIP through that backend's tunnel). Two
/// differences in kind, both unhealthy either way: a GUE backend without its decapsulation
/// answers "port unreachable" about the outer datagram, whose source port is the probe
/// socket's, so the probe fails as `refused` at once where the client times out (its tunnel
/// device takes the error); and ICMPv6 "no route" (1/0, the VIP missing) is read by the
/// probe's socket (IP_RECVERR) but not by a plain one, for which it is not fatal.
#[test]
fn udp_request_response_through_the_tunnel_gets_the_answer_a_tunnelled_client_gets() {
    use probed::probe::{
        tunnel::TunnelTo,
        udp::{UdpOutcome, UdpProber, UdpRequest},
    };
    let rig = dsr_rig();
    let vips: [IpAddr; 2] = [VIP4.parse().unwrap(), VIP6.parse().unwrap()];
    let mut reqs = Vec::new();
    for k in 0..BACKENDS.len() {
        for wrap in [Wrap::Ipip, Wrap::Gue] {
            for (f, vip) in vips.iter().enumerate() {
                let backend = if f == 0 { backend_v4(k) } else { backend_v6(k) };
                reqs.push(UdpRequest {
                    target: SocketAddr::new(backend, UDP_PORT),
                    send: std::sync::Arc::from(&b"ping"[..]),
                    expect: std::sync::Arc::from(&b"pong"[..]),
                    timeout: TIMEOUT,
                    source: None,
                    tunnel: Some(TunnelTo {
                        vip: *vip,
                        encap: encap(wrap),
                        mtu: None,
                        source: None,
                    }),
                });
            }
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = rig
        .topo
        .prober
        .enter(|| rt.block_on(UdpProber::new(64).probe_all(reqs.clone())));
    let mut table = String::new();
    let mut wrong = Vec::new();
    let mut i = 0;
    for (k, case) in BACKENDS.into_iter().enumerate() {
        for wrap in [Wrap::Ipip, Wrap::Gue] {
            for (f, vip) in vips.iter().enumerate() {
                let got = &results[i].outcome;
                i += 1;
                let class = match got {
                    UdpOutcome::Reply => "reply",
                    UdpOutcome::PortUnreachable => "refused",
                    UdpOutcome::Timeout => "timeout",
                    UdpOutcome::Unreachable { .. } => "unreachable",
                    _ => "other",
                };
                let oracle = reference_udp(&rig, k, *vip, wrap);
                table.push_str(&format!(
                    "  {:<24} {:<5} {:<13} tunnel {:<22} reference {oracle}\n",
                    format!("{case:?}"),
                    format!("{wrap:?}"),
                    if f == 0 { backend_v4(k) } else { backend_v6(k) }.to_string(),
                    got.to_string(),
                ));
                let agrees = match (case, wrap, f) {
                    (Backend::NoTunnel, Wrap::Gue, _) => (class, oracle) == ("refused", "timeout"),
                    (Backend::VipMissing, _, 1) => (class, oracle) == ("unreachable", "timeout"),
                    _ => class == oracle,
                };
                if !agrees || got.healthy() != (oracle == "reply") {
                    wrong.push(format!(
                        "{case:?} {wrap:?} family {f}: tunnel {got}, reference {oracle}"
                    ));
                }
            }
        }
    }
    eprintln!("UDP through the tunnel:\n{table}");
    assert!(wrong.is_empty(), "{wrong:#?}\n{table}");
    assert!(results.iter().any(|r| r.outcome == UdpOutcome::Reply), "{table}");
    assert_eq!(rig.unwrapped_to_vip(), 0, "a datagram reached a VIP unwrapped");
}

/// The engine's encapsulation for a reference client's wrapping.
fn encap(wrap: Wrap) -> Encap {
    match wrap {
        Wrap::Ipip => Encap::Ipip,
        Wrap::Gue => Encap::Gue { port: 6080 },
    }
}
