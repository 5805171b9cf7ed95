//! `HttpCheck` tests: defaults per dialect, the rule each bad field breaks, the Host header and
//! header levels, and the typed and command-line front doors building the same check.
use super::*;

fn spec() -> HttpCheckSpec {
    HttpCheckSpec::new(Scheme::Http, Dialect::Lb, Duration::from_secs(5))
}

fn err_of(s: HttpCheckSpec) -> String {
    HttpCheck::new(&s).unwrap_err().to_string()
}

#[test]
fn defaults_follow_the_dialect() {
    let lb = HttpCheck::new(&spec()).unwrap();
    assert_eq!((lb.method(), lb.path()), (Method::Head, "/"));
    assert!(lb.status().contains(302));
    let tm = HttpCheck::new(&HttpCheckSpec::new(Scheme::Https, Dialect::Tm, Duration::from_secs(10))).unwrap();
    assert_eq!(tm.method(), Method::Get);
    assert!(!tm.status().contains(204));
}

#[test]
fn paths_allowed_and_rejected() {
    // SPEC's set has no '=', so query strings are limited to bare words.
    for good in [
        "/",
        "/health",
        "/a-b_c.d?x&y%20#frag",
        "/~!()*[]@$^:',+;",
        &"/".repeat(80),
    ] {
        let mut s = spec();
        s.path = Some(good.to_string());
        assert_eq!(HttpCheck::new(&s).unwrap().path(), good);
    }
    for bad in [
        "",
        "health",
        "/a b",
        "/é",
        "/a\"b",
        "/<x>",
        "/a{b}",
        "/a|b",
        "/a\\b",
        &"/".repeat(81),
    ] {
        let mut s = spec();
        s.path = Some(bad.to_string());
        let msg = err_of(s);
        assert!(msg.starts_with(&format!("path {bad:?} is not allowed: ")), "{msg}");
        assert!(
            msg.contains("1 to 80 characters") || msg.contains("use letters, digits"),
            "{msg}"
        );
    }
}

#[test]
fn method_and_dialect_words() {
    assert_eq!("get".parse::<Method>().unwrap(), Method::Get);
    let mut s = spec();
    s.method = Some("POST".into());
    assert_eq!(err_of(s), "method \"POST\" is not allowed: HEAD or GET");
    assert!("xx"
        .parse::<Dialect>()
        .unwrap_err()
        .to_string()
        .starts_with("dialect \"xx\""));
}

#[test]
fn host_header_forms() {
    let check = HttpCheck::new(&spec()).unwrap();
    assert_eq!(check.host_header("198.18.0.2:80".parse().unwrap()), "198.18.0.2");
    assert_eq!(check.host_header("198.18.0.2:8080".parse().unwrap()), "198.18.0.2:8080");
    assert_eq!(check.host_header("[2001:2::2]:80".parse().unwrap()), "[2001:2::2]");
    assert_eq!(check.host_header("[2001:2::2]:81".parse().unwrap()), "[2001:2::2]:81");
    let mut s = spec();
    s.domain = Some("www.example.test".into());
    let check = HttpCheck::new(&s).unwrap();
    assert_eq!(
        check.host_header("198.18.0.2:8080".parse().unwrap()),
        "www.example.test"
    );
    assert_eq!(
        check.server_name("198.18.0.2:443".parse().unwrap()).to_str(),
        "www.example.test"
    );
    s.endpoint_headers = vec!["Host: other.test:8443".into()];
    let check = HttpCheck::new(&s).unwrap();
    assert_eq!(check.host_header("198.18.0.2:80".parse().unwrap()), "other.test:8443");
    assert_eq!(
        check.server_name("198.18.0.2:80".parse().unwrap()).to_str(),
        "other.test"
    );
    assert!(check.headers().is_empty(), "Host is not sent twice");
    let https = HttpCheck::new(&HttpCheckSpec::new(Scheme::Https, Dialect::Tm, Duration::from_secs(1))).unwrap();
    assert_eq!(https.host_header("198.18.0.2:443".parse().unwrap()), "198.18.0.2");
    assert!(matches!(
        https.server_name("198.18.0.2:443".parse().unwrap()),
        rustls_pki_types::ServerName::IpAddress(_)
    ));
}

#[test]
fn endpoint_headers_win_case_insensitively() {
    let mut s = spec();
    s.profile_headers = vec!["X-Probe: profile".into(), "X-Only-Profile: p".into()];
    s.endpoint_headers = vec!["x-probe: endpoint".into()];
    let check = HttpCheck::new(&s).unwrap();
    let h: Vec<(String, String)> = check
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        h,
        [
            ("x-only-profile".into(), "p".into()),
            ("x-probe".into(), "endpoint".into())
        ]
    );
}

#[test]
fn bad_headers_name_the_level_and_pair() {
    let cases: [(&str, &str); 8] = [
        ("no-colon", "name:value"),
        ("Bad Name: x", "HTTP token"),
        (": x", "HTTP token"),
        ("X-Empty:", "non-empty"),
        ("X-Ctl: a\u{7}b", "visible ASCII"),
        ("Host: *.example.test", "'*' is not allowed in a Host header"),
        ("Content-Length: 5", "the prober sets content-length itself"),
        ("Connection: keep-alive", "the prober sets connection itself"),
    ];
    for (pair, allowed) in cases {
        for endpoint in [false, true] {
            let mut s = spec();
            let field = if endpoint {
                s.endpoint_headers = vec![pair.into()];
                "endpoint_headers"
            } else {
                s.profile_headers = vec![pair.into()];
                "profile_headers"
            };
            let msg = err_of(s);
            assert!(msg.starts_with(&format!("{field} {pair:?} is not allowed: ")), "{msg}");
            assert!(msg.contains(allowed), "{msg}");
        }
    }
    let mut s = spec();
    s.profile_headers = (0..9).map(|i| format!("X-{i}: v")).collect();
    assert!(err_of(s).contains("at most 8"));
    let mut s = spec();
    s.endpoint_headers = vec!["X-A: 1".into(), "x-a: 2".into()];
    assert!(err_of(s).contains("once per level"));
}

#[test]
fn other_fields_are_checked() {
    let mut s = spec();
    s.domain = Some("*.example.test".into());
    assert!(err_of(s).starts_with("domain \"*.example.test\""));
    let mut s = spec();
    s.expect_body = Some("ok".into());
    assert!(err_of(s).contains("only with method GET"), "HEAD has no body");
    let mut s = spec();
    s.method = Some("GET".into());
    s.expect_body = Some(String::new());
    assert!(err_of(s).starts_with("expect_body \"\""));
    let mut s = spec();
    s.body_limit = Some(0);
    assert!(err_of(s).starts_with("body_limit \"0\""));
    let mut s = spec();
    s.timeout = Duration::ZERO;
    assert!(err_of(s).starts_with("timeout \"0ns\""));
    let mut s = spec();
    s.expect_status = Some("200-299, 301-301, 7xx".into());
    assert!(err_of(s).starts_with("expect_status \"200-299, 301-301, 7xx\""));
}

#[test]
fn typed_parts_and_the_command_line_build_the_same_check() {
    let mut s = HttpCheckSpec::new(Scheme::Https, Dialect::Tm, Duration::from_secs(9));
    s.path = Some("/status/ready".into());
    s.profile_headers = vec!["Host:api.example.com".into(), "X-Probe:probed".into()];
    s.endpoint_headers = vec!["Host:api-b.example.com".into()];
    s.expect_status = Some("200-299,301-301".into());
    let from_text = HttpCheck::new(&s).unwrap();
    let header = |n, v| Header::new(n, v).unwrap();
    let typed = HttpCheck::from_parts(HttpCheckParts {
        scheme: Scheme::Https,
        method: Method::Get,
        path: HttpPath::parse("/status/ready").unwrap(),
        host: None,
        profile_headers: vec![header("Host", "api.example.com"), header("X-Probe", "probed")],
        endpoint_headers: vec![header("Host", "api-b.example.com")],
        status: vec![StatusRange::CLASS_2XX, StatusRange::new(301, 301).unwrap()],
        body_match: None,
        body_limit: DEFAULT_BODY_LIMIT,
        timeout: Duration::from_secs(9),
        tls: TlsVerify::Presented,
        server_name: None,
        grpc: None,
    })
    .unwrap();
    let target: SocketAddr = "192.0.2.20:443".parse().unwrap();
    for c in [&from_text, &typed] {
        assert_eq!(
            (c.method(), c.path(), c.timeout()),
            (Method::Get, "/status/ready", Duration::from_secs(9))
        );
        assert_eq!(c.host_header(target), "api-b.example.com");
        assert_eq!(c.status().to_string(), "2xx, 301-301");
        assert_eq!(c.headers().len(), 1);
        assert_eq!(c.uri().path(), "/status/ready");
    }
}

#[test]
fn typed_parts_still_meet_the_level_and_body_rules() {
    let mut p = spec().parts().unwrap();
    p.endpoint_headers = vec![Header::new("X-A", "1").unwrap(), Header::new("x-a", "2").unwrap()];
    let msg = HttpCheck::from_parts(p).unwrap_err().to_string();
    assert!(msg.starts_with("endpoint_headers \"X-A:1, x-a:2\""), "{msg}");
    assert!(msg.contains("set twice"), "{msg}");
    let mut p = spec().parts().unwrap();
    p.status.clear();
    assert!(HttpCheck::from_parts(p).is_err(), "no healthy status at all");
    let mut p = spec().parts().unwrap();
    p.body_match = Some("ok".into());
    assert!(HttpCheck::from_parts(p)
        .unwrap_err()
        .to_string()
        .contains("only with method GET"));
}
