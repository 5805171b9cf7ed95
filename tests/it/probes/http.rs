//! HTTP and HTTPS probes from a prober namespace against real hyper servers in a backend
//! namespace: status sets, request shape, failure reasons, TLS modes, body match, keep-alive.
use std::{future::Future, net::SocketAddr, time::Duration};

use probed::probe::http::{
    Dialect, HttpCheck, HttpCheckSpec, HttpOutcome, HttpProber, HttpReport, Phase, Scheme, TlsVerify,
};
use probed_tests::{
    http_server::{Route, SelfSigned},
    topo::*,
    Topology,
};

fn spec(scheme: Scheme, dialect: Dialect) -> HttpCheckSpec {
    HttpCheckSpec::new(scheme, dialect, Duration::from_millis(1500))
}

fn check(spec: &HttpCheckSpec) -> HttpCheck {
    HttpCheck::new(spec).unwrap_or_else(|e| panic!("valid check: {e}"))
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// Runs `f` on a current-thread runtime inside the prober namespace.
fn in_prober<T: Send, Fut: Future<Output = T>>(topo: &Topology, f: impl FnOnce() -> Fut + Send) -> T {
    topo.prober.enter(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f())
    })
}

fn probe_once(topo: &Topology, target: &str, check: &HttpCheck) -> HttpReport {
    let target = addr(target);
    in_prober(topo, || async { HttpProber::new().probe(target, check).await })
}

#[test]
fn status_classes_ranges_and_dialect_defaults() {
    let topo = Topology::new();
    let server = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    for code in [200, 204, 404, 503] {
        server.route(&format!("/{code}"), Route::status(code));
    }
    server.route("/301", Route::status(301).header("location", "/200"));

    let lb = spec(Scheme::Http, Dialect::Lb);
    let tm = spec(Scheme::Http, Dialect::Tm);
    let mut ranges = spec(Scheme::Http, Dialect::Tm);
    ranges.expect_status = Some("200-299, 301-301".into());
    let mut classes = spec(Scheme::Http, Dialect::Lb);
    classes.expect_status = Some("2xx,4xx".into());
    // (code, lb default, tm default, "200-299, 301-301", "2xx,4xx")
    let table = [
        (200, true, true, true, true),
        (204, true, false, true, true),
        (301, true, false, true, false),
        (404, false, false, false, true),
        (503, false, false, false, false),
    ];
    let target = addr(&format!("{BACKEND_V4}:8080"));
    in_prober(&topo, || async {
        let prober = HttpProber::new();
        for (code, in_lb, in_tm, in_ranges, in_classes) in table {
            for (name, base, expected) in [
                ("lb", &lb, in_lb),
                ("tm", &tm, in_tm),
                ("ranges", &ranges, in_ranges),
                ("classes", &classes, in_classes),
            ] {
                let mut s = base.clone();
                s.path = Some(format!("/{code}"));
                let report = prober.probe(target, &check(&s)).await;
                assert_eq!(report.status, Some(code), "{name} /{code}: {report:?}");
                assert_eq!(report.healthy(), expected, "{name} /{code}: {report:?}");
                let expected_outcome = if expected {
                    HttpOutcome::Passed(code)
                } else {
                    HttpOutcome::BadStatus(code)
                };
                assert_eq!(report.outcome, expected_outcome);
                assert_eq!(report.outcome.to_string(), format!("status {code}"));
            }
        }
    });
    // The redirect is a status: its Location was never fetched.
    let seen = server.seen();
    assert_eq!(seen.iter().filter(|s| s.target == "/301").count(), 4);
    assert_eq!(seen.iter().filter(|s| s.target == "/200").count(), 4, "{seen:?}");
}

#[test]
fn server_sees_method_path_host_and_custom_headers() {
    let topo = Topology::new();
    topo.anyip("198.19.0.0/24");
    let v4 = topo.backend.http_server("0.0.0.0:80");
    let v4_8080 = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    let v6 = topo.backend.http_server(&format!("[{BACKEND_V6}]:80"));
    let v6_8080 = topo.backend.http_server(&format!("[{BACKEND_V6}]:8080"));

    let mut plain = spec(Scheme::Http, Dialect::Lb);
    plain.path = Some("/health/check.html".into());
    let mut named = spec(Scheme::Http, Dialect::Tm);
    named.domain = Some("www.backend.test".into());
    named.path = Some("/status?full".into());
    let mut custom = spec(Scheme::Http, Dialect::Lb);
    custom.profile_headers = vec![
        "X-Probe: profile".into(),
        "X-Profile-Only: yes".into(),
        "User-Agent: lb-check".into(),
    ];
    custom.endpoint_headers = vec!["x-probe: endpoint".into(), "Host: custom.backend.test".into()];

    let runs = [
        (
            format!("{BACKEND_V4}:80"),
            &plain,
            "HEAD",
            "/health/check.html",
            "198.18.0.2",
        ),
        (
            "198.19.0.77:80".to_string(),
            &plain,
            "HEAD",
            "/health/check.html",
            "198.19.0.77",
        ),
        (
            format!("{BACKEND_V4}:8080"),
            &plain,
            "HEAD",
            "/health/check.html",
            "198.18.0.2:8080",
        ),
        (
            format!("[{BACKEND_V6}]:80"),
            &plain,
            "HEAD",
            "/health/check.html",
            "[2001:2::2]",
        ),
        (
            format!("[{BACKEND_V6}]:8080"),
            &plain,
            "HEAD",
            "/health/check.html",
            "[2001:2::2]:8080",
        ),
        (
            format!("{BACKEND_V4}:8080"),
            &named,
            "GET",
            "/status?full",
            "www.backend.test",
        ),
        (
            format!("[{BACKEND_V6}]:80"),
            &custom,
            "HEAD",
            "/",
            "custom.backend.test",
        ),
    ];
    for (target, s, method, path, host) in runs {
        for server in [&v4, &v4_8080, &v6, &v6_8080] {
            server.clear();
        }
        let report = probe_once(&topo, &target, &check(s));
        assert_eq!(report.outcome, HttpOutcome::Passed(200), "{target}: {report:?}");
        let seen: Vec<_> = [&v4, &v4_8080, &v6, &v6_8080].iter().flat_map(|s| s.seen()).collect();
        assert_eq!(seen.len(), 1, "{target}: one request: {seen:?}");
        let req = &seen[0];
        assert_eq!(
            (req.method.as_str(), req.target.as_str(), req.host.as_deref()),
            (method, path, Some(host)),
            "{target}"
        );
        assert_eq!(req.header("host").len(), 1, "one Host header: {req:?}");
        assert_eq!(
            req.header("connection"),
            ["close"],
            "closed after each probe by default"
        );
    }
    let req = &v6.seen()[0];
    assert_eq!(req.header("x-probe"), ["endpoint"], "endpoint wins: {req:?}");
    assert_eq!(req.header("x-profile-only"), ["yes"]);
    assert_eq!(
        req.header("user-agent"),
        ["lb-check"],
        "a custom header replaces the default"
    );
}

#[test]
fn each_failure_has_its_own_reason() {
    let topo = Topology::new();
    let slow = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    slow.route("/slow", Route::status(200).delayed(Duration::from_secs(3)));
    let cert = SelfSigned::new(&["backend.test"]);
    let _slow_tls = topo
        .backend
        .https_server(&format!("{BACKEND_V4}:8443"), &cert, Duration::from_secs(3));
    topo.backend.nft_drop("tcp", 9000);
    topo.backend
        .nft_reject_icmp("tcp", 9001, "admin-prohibited", "admin-prohibited");
    // A listener that accepts and resets at once (SO_LINGER 0).
    let resetter = topo.backend.tcp_listen(&format!("{BACKEND_V4}:9002"));
    let reset_thread = std::thread::spawn(move || {
        let (conn, _) = resetter.accept().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let l = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: `conn` is an open socket and `l` a valid linger struct of the given size.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&conn),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&raw const l).cast(),
                size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        drop(conn);
    });

    let timeout = Duration::from_millis(700);
    let mut http = spec(Scheme::Http, Dialect::Lb);
    http.timeout = timeout;
    let mut slow_path = http.clone();
    slow_path.path = Some("/slow".into());
    let mut https = spec(Scheme::Https, Dialect::Lb);
    https.timeout = timeout;
    let cases = [
        (
            "slow header",
            format!("{BACKEND_V4}:8080"),
            &slow_path,
            HttpOutcome::Timeout(Phase::Response),
        ),
        (
            "slow tls",
            format!("{BACKEND_V4}:8443"),
            &https,
            HttpOutcome::Timeout(Phase::Tls),
        ),
        (
            "dropped",
            format!("{BACKEND_V4}:9000"),
            &http,
            HttpOutcome::Timeout(Phase::Connect),
        ),
        (
            "dropped v6",
            format!("[{BACKEND_V6}]:9000"),
            &http,
            HttpOutcome::Timeout(Phase::Connect),
        ),
        ("refused", format!("{BACKEND_V4}:9999"), &http, HttpOutcome::Refused),
        (
            "refused v6",
            format!("[{BACKEND_V6}]:9999"),
            &http,
            HttpOutcome::Refused,
        ),
        (
            "prohibited",
            format!("{BACKEND_V4}:9001"),
            &http,
            HttpOutcome::Unreachable,
        ),
        ("reset", format!("{BACKEND_V4}:9002"), &http, HttpOutcome::Reset),
        (
            "not tls",
            format!("{BACKEND_V4}:8080"),
            &https,
            HttpOutcome::Tls(String::new()),
        ),
    ];
    for (name, target, s, expected) in cases {
        let report = probe_once(&topo, &target, &check(s));
        assert!(!report.healthy(), "{name}: {report:?}");
        match (&expected, &report.outcome) {
            (HttpOutcome::Tls(_), HttpOutcome::Tls(msg)) => {
                assert!(report.outcome.to_string().starts_with("tls error: "), "{name}: {msg}");
            }
            _ => assert_eq!(report.outcome, expected, "{name}: {report:?}"),
        }
        if let HttpOutcome::Timeout(phase) = expected {
            assert_eq!(report.outcome.to_string(), format!("timeout {phase}"));
            assert!(
                report.elapsed >= timeout && report.elapsed < timeout + Duration::from_millis(500),
                "{name}: one deadline covers every phase: {:?}",
                report.elapsed
            );
        } else {
            assert!(report.elapsed < timeout, "{name}: fails fast: {report:?}");
        }
    }
    reset_thread.join().unwrap();
}

#[test]
fn https_default_strict_and_given_ca() {
    let topo = Topology::new();
    let cert = SelfSigned::new(&["backend.test", BACKEND_V4, BACKEND_V6]);
    let server = topo
        .backend
        .https_server(&format!("{BACKEND_V4}:443"), &cert, Duration::ZERO);
    let _v6 = topo
        .backend
        .https_server(&format!("[{BACKEND_V6}]:8443"), &cert, Duration::ZERO);
    let ca_file = std::env::temp_dir().join(probed_tests::unique_name("probed-http-ca-") + ".pem");
    cert.write_pem(&ca_file);
    let with_ca = TlsVerify::strict_ca_file(&ca_file).unwrap();
    std::fs::remove_file(&ca_file).unwrap();

    let mut default_ip = spec(Scheme::Https, Dialect::Tm);
    default_ip.path = Some("/tls".into());
    let mut default_named = default_ip.clone();
    default_named.domain = Some("backend.test".into());
    let mut wrong_name = default_named.clone();
    wrong_name.domain = Some("other.test".into());
    let strict_system = match TlsVerify::strict_system() {
        Ok(t) => Some(t),
        // No roots under /etc/ssl: strict mode is then refused at configuration time, which is
        // also a failure to validate; the CA-file cases below still run.
        Err(e) => {
            eprintln!("system roots unavailable: {e}");
            None
        }
    };
    let v4 = format!("{BACKEND_V4}:443");
    let v6 = format!("[{BACKEND_V6}]:8443");
    let mut cases = vec![
        ("default by ip", v4.clone(), default_ip.clone(), true),
        ("default by name", v4.clone(), default_named.clone(), true),
        ("default v6", v6.clone(), default_ip.clone(), true),
        ("default, name not in cert", v4.clone(), wrong_name.clone(), true),
    ];
    for (label, base, ok_with_ca) in [
        ("ip", &default_ip, true),
        ("name", &default_named, true),
        ("wrong name", &wrong_name, false),
    ] {
        let mut s = base.clone();
        s.tls = with_ca.clone();
        cases.push((label, v4.clone(), s.clone(), ok_with_ca));
        if let Some(system) = &strict_system {
            let mut s = base.clone();
            s.tls = system.clone();
            cases.push((label, v4.clone(), s, false));
        }
    }
    let mut s = default_ip.clone();
    s.tls = with_ca.clone();
    cases.push(("ca v6", v6.clone(), s, true));

    for (label, target, s, healthy) in cases {
        let report = probe_once(&topo, &target, &check(&s));
        let mode = format!("{label} {:?}", s.tls);
        if healthy {
            assert_eq!(report.outcome, HttpOutcome::Passed(200), "{mode}: {report:?}");
        } else {
            assert!(
                matches!(&report.outcome, HttpOutcome::Tls(m) if m.contains("certificate")),
                "{mode}: {report:?}"
            );
        }
    }
    let seen = server.seen();
    assert!(seen.iter().all(|r| r.method == "GET" && r.target == "/tls"), "{seen:?}");
    assert!(seen.iter().any(|r| r.host.as_deref() == Some("backend.test")));
}

/// One prober's HTTPS probes of a fleet resume each target's session from the round before:
/// each backend signs once, not once per check. 300 targets, more than rustls keeps by
/// default (256), so a fleet-sized cache is what makes the second round resume.
#[test]
fn https_probes_of_a_fleet_resume_their_tls_sessions() {
    const FLEET: usize = 300;
    let topo = Topology::new();
    topo.anyip("198.19.60.0/23");
    let cert = SelfSigned::new(&["fleet.test"]);
    let server = topo.backend.https_server("0.0.0.0:443", &cert, Duration::ZERO);
    let targets: Vec<SocketAddr> = (0..FLEET)
        .map(|i| addr(&format!("198.19.{}.{}:443", 60 + i / 256, i % 256)))
        .collect();
    let c = check(&spec(Scheme::Https, Dialect::Tm));
    let reports = in_prober(&topo, || async {
        let prober = HttpProber::new();
        let mut out = Vec::new();
        for _round in 0..2 {
            for t in &targets {
                out.push(prober.probe(*t, &c).await);
            }
        }
        out
    });
    assert!(
        reports.iter().all(|r| r.outcome == HttpOutcome::Passed(200)),
        "{:?}",
        reports.iter().find(|r| r.outcome != HttpOutcome::Passed(200))
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 2 * FLEET);
    let resumed = |round: &[probed_tests::http_server::Seen]| {
        round
            .iter()
            .filter(|r| r.tls.as_ref().is_some_and(|t| t.resumed))
            .count()
    };
    assert_eq!(resumed(&seen[..FLEET]), 0, "the first round shakes hands in full");
    assert_eq!(resumed(&seen[FLEET..]), FLEET, "the second round resumes every target");
}

/// A server whose last session was TLS 1.2 is greeted with TLS 1.2 alone (a hello without a
/// key share, which only TLS 1.3 uses) and resumes; when it turns to TLS 1.3 only, the probe still passes (one failed
/// handshake, then a hello offering both) and later hellos offer TLS 1.3 again. The SHA-256
/// suites are preferred in both versions.
#[test]
fn https_probes_greet_a_tls12_server_with_tls12_alone_and_follow_it_to_tls13() {
    use probed_tests::http_server::TlsVersions;
    use rustls::{CipherSuite as S, ProtocolVersion as V};
    let topo = Topology::new();
    let cert = SelfSigned::new(&["backend.test"]);
    let server = topo
        .backend
        .https_server(&format!("{BACKEND_V4}:443"), &cert, Duration::ZERO);
    server.set_tls_versions(TlsVersions::Tls12Only);
    let target = addr(&format!("{BACKEND_V4}:443"));
    let c = check(&spec(Scheme::Https, Dialect::Tm));
    let prober = HttpProber::new();
    let round = |expected: usize| {
        let reports = in_prober(&topo, || async {
            let mut out = Vec::new();
            for _ in 0..expected {
                out.push(prober.probe(target, &c).await);
            }
            out
        });
        for r in &reports {
            assert_eq!(r.outcome, HttpOutcome::Passed(200), "{r:?}");
        }
        let seen: Vec<_> = server.seen().into_iter().map(|s| s.tls.expect("over TLS")).collect();
        server.clear();
        assert_eq!(seen.len(), expected, "{seen:?}");
        seen
    };
    let hs = |seen: &[probed_tests::http_server::TlsSeen]| {
        seen.iter()
            .map(|t| (t.key_share, t.version, t.resumed))
            .collect::<Vec<_>>()
    };

    let tls12 = round(3);
    assert_eq!(
        hs(&tls12),
        [(true, V::TLSv1_2, false), (false, V::TLSv1_2, true), (false, V::TLSv1_2, true)],
        "the first hello offers both versions (with a key share); once the server is known to speak TLS 1.2, its hellos offer TLS 1.2 alone and resume"
    );
    assert!(
        tls12
            .iter()
            .all(|t| t.suite == S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256),
        "{tls12:?}"
    );
    assert_eq!(server.tls_failures(), 0);

    server.set_tls_versions(TlsVersions::Tls13Only);
    let tls13 = round(2);
    assert_eq!(
        server.tls_failures(),
        1,
        "the TLS 1.2 hello fails once, and the same probe retries"
    );
    assert_eq!(hs(&tls13), [(true, V::TLSv1_3, false), (true, V::TLSv1_3, true)]);
    assert!(
        tls13.iter().all(|t| t.suite == S::TLS13_AES_128_GCM_SHA256),
        "{tls13:?}"
    );

    server.set_tls_versions(TlsVersions::Both);
    assert_eq!(
        hs(&round(1)),
        [(true, V::TLSv1_3, true)],
        "a TLS 1.3 server keeps being offered TLS 1.3"
    );
    assert_eq!(server.tls_failures(), 1);
}

#[test]
fn body_match_reads_a_bounded_prefix() {
    let topo = Topology::new();
    let server = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    server.route("/ready", Route::status(200).body("service: ready\n"));
    let late = format!("{}needle", "x".repeat(100_000));
    server.route("/late", Route::status(200).body(late));
    server.route("/down", Route::status(503).body("ready"));

    let get = |path: &str, needle: &str, limit: Option<usize>| {
        let mut s = spec(Scheme::Http, Dialect::Tm);
        s.path = Some(path.into());
        s.expect_body = Some(needle.into());
        s.body_limit = limit;
        check(&s)
    };
    let target = format!("{BACKEND_V4}:8080");
    let cases = [
        (get("/ready", "ready", None), HttpOutcome::Passed(200)),
        (get("/ready", "down", None), HttpOutcome::BodyMismatch(200)),
        (get("/late", "needle", None), HttpOutcome::BodyMismatch(200)),
        (get("/late", "needle", Some(200_000)), HttpOutcome::Passed(200)),
        (get("/down", "ready", None), HttpOutcome::BadStatus(503)),
    ];
    for (c, expected) in cases {
        let report = probe_once(&topo, &target, &c);
        assert_eq!(
            report.outcome,
            expected,
            "{} {:?}: {report:?}",
            c.path(),
            c.expect_body()
        );
        assert_eq!(report.status, Some(expected_status(&expected)));
    }
    assert_eq!(HttpOutcome::BodyMismatch(200).to_string(), "body mismatch");
}

fn expected_status(o: &HttpOutcome) -> u16 {
    match o {
        HttpOutcome::Passed(s) | HttpOutcome::BadStatus(s) | HttpOutcome::BodyMismatch(s) => *s,
        other => panic!("no status in {other:?}"),
    }
}

#[test]
fn keep_alive_reuses_one_connection_per_target() {
    let topo = Topology::new();
    let server = topo.backend.http_server(&format!("{BACKEND_V4}:8080"));
    let tls_server = topo.backend.https_server(
        &format!("{BACKEND_V4}:8443"),
        &SelfSigned::new(&["backend.test"]),
        Duration::ZERO,
    );
    let head = check(&spec(Scheme::Http, Dialect::Lb));
    let get = check(&spec(Scheme::Http, Dialect::Tm));
    let tls = check(&spec(Scheme::Https, Dialect::Tm));
    let plain = addr(&format!("{BACKEND_V4}:8080"));
    let secure = addr(&format!("{BACKEND_V4}:8443"));
    let connections = |seen: Vec<probed_tests::http_server::Seen>| {
        let mut peers: Vec<_> = seen.iter().map(|s| s.peer).collect();
        peers.dedup();
        (seen.len(), peers.len())
    };
    in_prober(&topo, || async {
        let prober = HttpProber::new().with_keep_alive(true);
        for c in [&head, &get, &head, &get] {
            let r = prober.probe(plain, c).await;
            assert_eq!(r.outcome, HttpOutcome::Passed(200), "{r:?}");
        }
        for _ in 0..3 {
            let r = prober.probe(secure, &tls).await;
            assert_eq!(r.outcome, HttpOutcome::Passed(200), "{r:?}");
        }
    });
    assert_eq!(connections(server.seen()), (4, 1), "four probes, one connection");
    assert_eq!(connections(tls_server.seen()), (3, 1), "three probes, one handshake");
    assert!(server.seen().iter().all(|s| s.header("connection").is_empty()));
    server.clear();
    in_prober(&topo, || async {
        let prober = HttpProber::new();
        for _ in 0..3 {
            assert!(prober.probe(plain, &head).await.healthy());
        }
    });
    assert_eq!(connections(server.seen()), (3, 3), "closed after each probe by default");
}
