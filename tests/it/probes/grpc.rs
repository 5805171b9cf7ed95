//! gRPC health checks against grpcio, the reference implementation, with its standard health
//! service (tests/py/grpc_fixture.py): over HTTP/2 cleartext and over TLS, a service that is
//! SERVING, one NOT_SERVING, one the server does not know, a server without the health
//! service, one that answers past the deadline, and a closed port. grpcio's own client asks
//! the same server the same question and is the oracle: each verdict must be its verdict, and
//! each reason must name what it names. Then a service flipped while the daemon runs moves the
//! endpoint through its thresholds like any check, and `probed check grpc://` and `grpcs://`
//! (with --ca, --server-name, --cert, --key) give the oracle's verdicts too.
use std::time::Duration;

use probed::status::EndpointStatus as S;
use probed_tests::{
    certs::{ca, leaf},
    daemon::{last_reason, DaemonFiles, RunningDaemon},
    grpc::{oracle, GrpcServers},
    topo::*,
    Topology,
};

const PORT: u16 = 50051;
const NAME: &str = "grpc.example.test";
/// The checks' timeout and the oracle's deadline (the slow server answers after 3 s).
const TIMEOUT: Duration = Duration::from_secs(2);

/// An endpoint of a test profile: name, address, port.
type Endpoint = (&'static str, &'static str, u16);

/// Waits (10 s at most) until `endpoint` is `want` with a last reason that holds `why`; the
/// reason, or the last one seen.
fn wait_reason(
    daemon: &RunningDaemon,
    (profile, endpoint): (&str, &str),
    want: S,
    why: &str,
) -> Result<String, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let view = daemon.endpoint(profile, endpoint);
        let reason = last_reason(&view);
        if view.status == want && reason.contains(why) {
            return Ok(reason);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{:?}: {reason}", view.status));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What probed must say where the oracle says `word`: the whole verdict, and a piece of the
/// reason (None: any failure's reason; connection failures are worded per layer).
fn expected(word: &str) -> (bool, Option<&'static str>) {
    match word {
        "SERVING" => (true, Some("SERVING")),
        "NOT_SERVING" => (false, Some("NOT_SERVING")),
        "UNIMPLEMENTED" => (false, Some("grpc status UNIMPLEMENTED")),
        "NOT_FOUND" => (false, Some("grpc status NOT_FOUND")),
        // grpcio's client ends the call at its deadline; probed's says it timed out.
        "DEADLINE_EXCEEDED" => (false, Some("timeout")),
        "UNAVAILABLE" => (false, None),
        other => panic!("the oracle said {other:?}"),
    }
}

#[test]
fn grpc_checks_agree_with_grpcio_and_follow_a_flipped_service() {
    agree_with_grpcio(Topology::new());
}

/// The same on a veth pair as a user makes one (no GRO, no forwarding: probes leave by the
/// raw socket), with the prober's ephemeral ports where Windows and macOS put theirs
/// (49152-65535), over the probe source ports: the checks' own sockets draw from there, and
/// probe_rx must leave their replies to the stack.
#[test]
fn grpc_checks_agree_with_grpcio_on_a_plain_node_with_high_ephemeral_ports() {
    let topo = Topology::with(probed_tests::topo::Node::PLAIN);
    topo.prober.sysctl("net.ipv4.ip_local_port_range", "49152 65535");
    agree_with_grpcio(topo);
}

fn agree_with_grpcio(topo: Topology) {
    let files = DaemonFiles::new();
    let dir = files.dir.join("grpc");
    std::fs::create_dir_all(&dir).unwrap();
    let test_ca = ca("probed gRPC test CA");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, test_ca.cert.pem()).unwrap();
    let server = leaf(&test_ca, NAME, 2099);
    std::fs::write(dir.join("server.crt"), &server.cert).unwrap();
    std::fs::write(dir.join("server.key"), &server.key).unwrap();
    // On every address of the backend: IPv4 and IPv6.
    let servers = GrpcServers::start(&topo.backend, &dir, "::", PORT);
    // The probe's client certificate, from the test CA; its key readable by its owner alone.
    let client = leaf(&test_ca, "probe.example.test", 2099);
    let (client_cert, client_key) = (dir.join("client.crt"), dir.join("client.key"));
    std::fs::write(&client_cert, &client.cert).unwrap();
    std::fs::write(&client_key, &client.key).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&client_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    let (tls, bare, slow, mtls, closed) = (PORT + 1, PORT + 2, PORT + 3, PORT + 4, PORT + 9);
    let verify = format!(
        "tls_verify = \"ca\"\nca_file = \"{}\"\nserver_name = \"{NAME}\"\n",
        ca_file.display()
    );
    let with_client = format!(
        "{verify}client_cert = \"{}\"\nclient_key = \"{}\"\n",
        client_cert.display(),
        client_key.display()
    );
    let v4 = |name, port| (name, BACKEND_V4, port);
    let v6 = |name, port| (name, BACKEND_V6, port);
    // (profile, protocol and keys, endpoints as (name, address, port)).
    let profiles: Vec<(&str, String, Vec<Endpoint>)> = vec![
        (
            "server",
            "protocol = \"grpc\"\n".into(),
            vec![
                v4("main", PORT),
                v4("bare", bare),
                v4("slow", slow),
                v4("closed", closed),
                v4("tls-port", tls),
            ],
        ),
        (
            "cart",
            "protocol = \"grpc\"\nservice = \"shop.Cart\"\n".into(),
            vec![v4("main", PORT), v6("main-v6", PORT)],
        ),
        (
            "down",
            "protocol = \"grpc\"\nservice = \"shop.Down\"\n".into(),
            vec![v4("main", PORT)],
        ),
        (
            "nope",
            "protocol = \"grpc\"\nservice = \"shop.Nope\"\n".into(),
            vec![v4("main", PORT)],
        ),
        (
            "flip",
            "protocol = \"grpc\"\nservice = \"shop.Flip\"\n".into(),
            vec![v4("main", PORT)],
        ),
        (
            "tls",
            format!("protocol = \"grpcs\"\nservice = \"shop.Cart\"\n{verify}"),
            vec![
                v4("main", tls),
                v6("main-v6", tls),
                v4("cleartext-port", PORT),
                v4("asks-a-client-cert", mtls),
            ],
        ),
        (
            "tls-client",
            format!("protocol = \"grpcs\"\nservice = \"shop.Cart\"\n{with_client}"),
            vec![v4("asks-a-client-cert", mtls), v4("main", tls)],
        ),
        (
            "tls-down",
            format!("protocol = \"grpcs\"\nservice = \"shop.Down\"\n{verify}"),
            vec![v4("main", tls)],
        ),
        ("tls-presence", "protocol = \"grpcs\"\n".into(), vec![v4("main", tls)]),
    ];
    let mut text = files.header(PROBER_IF);
    for (name, keys, endpoints) in &profiles {
        text += &format!(
            "\n[[profile]]\nname = \"{name}\"\ndialect = \"lb\"\n\n[profile.health]\n{keys}\
             interval = \"300ms\"\ntimeout = \"2s\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n"
        );
        for (endpoint, address, port) in endpoints {
            text += &format!("\n[[profile.endpoint]]\nname = \"{endpoint}\"\naddress = \"{address}\"\nport = {port}\n");
        }
        if *name == "cart" {
            // An endpoint that asks about a service of its own.
            text += &format!(
                "\n[[profile.endpoint]]\nname = \"own-service\"\naddress = \"{BACKEND_V4}\"\nport = {PORT}\n\
                 service = \"shop.Down\"\n"
            );
        }
    }
    let daemon = RunningDaemon::start(&topo.prober, files.write_config(&text), None).expect("start");

    for (profile, keys, endpoints) in &profiles {
        let service = keys
            .lines()
            .find_map(|l| l.strip_prefix("service = "))
            .map_or("", |s| s.trim_matches('"'));
        let verified = keys.contains("tls_verify");
        for (endpoint, address, port) in endpoints {
            let target = std::net::SocketAddr::new(address.parse().unwrap(), *port).to_string();
            // grpcio cannot skip verification: the presence profile is asked as the verified one.
            let over_tls = keys.contains("grpcs").then_some((ca_file.as_path(), NAME));
            let presents = keys
                .contains("client_cert")
                .then_some((client_cert.as_path(), client_key.as_path()));
            let word = oracle(&topo.prober, &target, service, TIMEOUT, over_tls, presents);
            let (healthy, why) = expected(&word);
            let want = if healthy { S::Online } else { S::Degraded };
            daemon.wait_status(profile, endpoint, want, Duration::from_secs(10));
            // The status is the verdict; the reason is the latest result's, which one slow
            // answer of a loaded machine can change for a round: it must come to the oracle's.
            let reason = wait_reason(&daemon, (profile, endpoint), want, why.unwrap_or(""))
                .unwrap_or_else(|r| panic!("{profile}/{endpoint}: grpcio says {word}, probed {r}"));
            println!("{profile:<12} {endpoint:<14} grpcio {word:<18} -> {want:?}: {reason} (verified: {verified})");
        }
    }

    // The endpoint with a service of its own is asked about it, as grpcio is.
    let target = format!("{BACKEND_V4}:{PORT}");
    assert_eq!(
        oracle(&topo.prober, &target, "shop.Down", TIMEOUT, None, None),
        "NOT_SERVING"
    );
    let own = wait_reason(&daemon, ("cart", "own-service"), S::Degraded, "NOT_SERVING");
    assert_eq!(own.as_deref(), Ok("NOT_SERVING"));

    // The flipped service: NOT_SERVING takes the endpoint out after unhealthy_threshold results,
    // SERVING brings it back after healthy_threshold.
    servers.flip(false);
    let out = wait_reason(&daemon, ("flip", "main"), S::Degraded, "NOT_SERVING");
    assert_eq!(out.as_deref(), Ok("NOT_SERVING"));
    assert_eq!(
        oracle(&topo.prober, &target, "shop.Flip", TIMEOUT, None, None),
        "NOT_SERVING"
    );
    servers.flip(true);
    let back = wait_reason(&daemon, ("flip", "main"), S::Online, "SERVING");
    assert_eq!(back.as_deref(), Ok("SERVING"));
    // gRPC over TLS records the certificate's expiry as HTTPS does (the test's lasts to 2099).
    let cert = daemon
        .endpoint("tls", "main")
        .tls_cert
        .expect("a grpcs check records its certificate");
    assert!(cert.days_left > 20_000 && !cert.expiring, "{cert:?}");
    assert_eq!(daemon.endpoint("cart", "main").tls_cert, None, "cleartext has none");
    daemon.stop();

    // `probed check`, as an operator runs it, against the same servers.
    let (ca, cert, key) = (
        ca_file.to_str().unwrap(),
        client_cert.to_str().unwrap(),
        client_key.to_str().unwrap(),
    );
    let verified = ["--ca", ca, "--server-name", NAME];
    let presenting = ["--ca", ca, "--server-name", NAME, "--cert", cert, "--key", key];
    let cases: [(String, &[&str], &str); 7] = [
        (format!("grpc://{BACKEND_V4}:{PORT}/shop.Cart"), &[], "shop.Cart"),
        (format!("grpc://[{BACKEND_V6}]:{PORT}/shop.Down"), &[], "shop.Down"),
        (format!("grpc://{BACKEND_V4}:{bare}"), &[], ""),
        (format!("grpc://{BACKEND_V4}:{slow}"), &[], ""),
        (format!("grpcs://{BACKEND_V4}:{tls}/shop.Cart"), &verified, "shop.Cart"),
        (format!("grpcs://{BACKEND_V4}:{mtls}"), &verified, ""),
        (
            format!("grpcs://[{BACKEND_V6}]:{mtls}/shop.Cart"),
            &presenting,
            "shop.Cart",
        ),
    ];
    for (url, flags, service) in cases {
        let target = url.split("://").nth(1).unwrap().split('/').next().unwrap().to_string();
        let tls = flags.contains(&"--ca").then_some((ca_file.as_path(), NAME));
        let client = flags
            .contains(&"--cert")
            .then_some((client_cert.as_path(), client_key.as_path()));
        let word = oracle(&topo.prober, &target, service, TIMEOUT, tls, client);
        let (healthy, why) = expected(&word);
        let mut args = vec![url.as_str(), "--timeout", "2000"];
        args.extend_from_slice(flags);
        let run = probed_tests::probed_check(&topo.prober, &args);
        let code = run.status.code().unwrap_or(-1);
        let out = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
        assert_eq!(
            code == 0,
            healthy,
            "probed check {args:?}: grpcio says {word}, probed {out}"
        );
        if let Some(why) = why {
            // The slow server honours the grpc-timeout probed sends, so it may end the call
            // itself a moment before probed's own timer: the same deadline, said by the server.
            let same_deadline = why == "timeout" && out.contains("grpc status DEADLINE_EXCEEDED");
            assert!(
                out.contains(why) || same_deadline,
                "probed check {args:?}: grpcio says {word}, probed {out}"
            );
        }
        println!("probed check {url}: grpcio {word} -> exit {code}: {}", out.trim());
    }
}
