//! Check specs from configuration: keys, identity across releases, and the HTTP prober's
//! reports.
use super::*;
use crate::config::Config;
use crate::probe::{http::task as http, TaskProbe};
use std::sync::Arc;

fn example() -> Config {
    Config::load(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/probed.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn key_of(c: &Config, profile: &str, endpoint: &str) -> String {
    let p = c.profile(profile).unwrap();
    let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
    CheckSpec::resolve(p, e).unwrap_or_else(|e| panic!("{e}")).text
}

fn legacy_of(c: &Config, profile: &str, endpoint: &str) -> String {
    let p = c.profile(profile).unwrap();
    let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
    CheckSpec::legacy_fingerprint(p, e)
}

/// The identity targets hold writes the state file's fingerprint of the text, as before
/// (saved state still resumes), and tells apart every key of the example.
#[test]
fn a_check_key_stores_what_the_text_did() {
    let c = example();
    let mut seen = std::collections::HashMap::new();
    for p in &c.profiles {
        for e in &p.endpoints {
            let r = CheckSpec::resolve(p, e).unwrap_or_else(|e| panic!("{e}"));
            let (text, key) = (r.text, r.spec.key());
            assert_eq!(key.fingerprint(), crate::hash::fingerprint(&text));
            assert_eq!(key.stable(), crate::hash::stable(text.as_bytes()));
            assert_eq!(key.question(), crate::hash::stable(r.question.as_bytes()));
            assert_eq!(key, CheckKey::of(&text.clone(), &r.question));
            if let Some(other) = seen.insert(key, text.clone()) {
                assert_eq!(other, text, "two texts, one key");
            }
        }
    }
    assert!(seen.len() > 1);
}

/// The key text is written from typed fields under its version: any change to it shows
/// here (and would reset every node's saved health, and the cluster's agreement, on
/// upgrade).
#[test]
fn key_texts_are_versioned_and_typed() {
    let c = example();
    assert_eq!(
        key_of(&c, "web", "web-1"),
        "k2;protocol=4:http;target=14:10.0.0.11:8080;interval_ns=10:2000000000;timeout_ns=10:5000000000;\
         fast_interval_ns=9:500000000;down_interval_ns=11:10000000000;initial_jitter_ns=1:0;jitter_percent=2:10;\
         method=4:HEAD;path=8:/healthz;host=15:www.example.com;status=7:200-299;status=7:300-399;"
    );
    assert_eq!(
        key_of(&c, "dns", "10.0.1.1:53"),
        "k2;protocol=3:udp;target=11:10.0.1.1:53;interval_ns=10:1000000000;timeout_ns=10:2000000000;\
         fast_interval_ns=1:-;down_interval_ns=1:-;initial_jitter_ns=1:0;jitter_percent=1:0;\
         request=4:ping;response=4:pong;"
    );
    assert_eq!(
        key_of(&c, "intranet", "office"),
        "k2;protocol=3:tcp;target=11:10.1.0.5:22;interval_ns=11:30000000000;timeout_ns=11:10000000000;\
         fast_interval_ns=1:-;down_interval_ns=1:-;initial_jitter_ns=1:0;jitter_percent=1:0;"
    );
}

/// The question is the key text less its timing, under its own version: a timing change
/// keeps it (and with it the endpoint's name in the cluster, and its pending results), a
/// change of what is asked does not.
#[test]
fn a_question_is_the_key_less_its_timing() {
    let c = example();
    let question = |c: &Config, profile: &str, endpoint: &str| {
        let p = c.profile(profile).unwrap();
        let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
        CheckSpec::resolve(p, e).unwrap_or_else(|e| panic!("{e}")).question
    };
    assert_eq!(
        question(&c, "web", "web-1"),
        "q1;protocol=4:http;target=14:10.0.0.11:8080;\
         method=4:HEAD;path=8:/healthz;host=15:www.example.com;status=7:200-299;status=7:300-399;"
    );
    assert_eq!(
        question(&c, "intranet", "office"),
        "q1;protocol=3:tcp;target=11:10.1.0.5:22;"
    );
    let mut retimed = c.clone();
    let web = retimed.profiles.iter_mut().find(|p| p.name == "web").unwrap();
    web.health.timeout = std::time::Duration::from_secs(3);
    web.health.interval = std::time::Duration::from_secs(4);
    assert_eq!(question(&retimed, "web", "web-1"), question(&c, "web", "web-1"));
    assert_ne!(key_of(&retimed, "web", "web-1"), key_of(&c, "web", "web-1"));
}

/// Keys as releases before `k2` wrote them: state files written then still resume, by the
/// fingerprint of this text.
#[test]
fn keys_are_those_of_earlier_releases() {
    let c = example();
    for (at, want) in [
        (
            "web/web-1",
            r#"http 10.0.0.11:8080 interval=2000ms timeout=5000ms pacing=Pacing { fast_interval: Some(500ms), down_interval: Some(10s), initial_jitter: 0ns, jitter_percent: 10 } HEAD /healthz host=Some("www.example.com") headers=[] status=Some("200-299,300-399") body=None"#,
        ),
        (
            "dns/10.0.1.1:53",
            r#"udp 10.0.1.1:53 interval=1000ms timeout=2000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 } req="ping" resp="pong""#,
        ),
        (
            "dns/10.0.1.2:53",
            r#"udp 10.0.1.2:53 interval=1000ms timeout=2000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 } req="ping" resp="pong""#,
        ),
        (
            "api/primary",
            r#"https 192.0.2.10:443 interval=10000ms timeout=9000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 } GET /status/ready host=None headers=["Host:api.example.com", "X-Probe:probed"] status=Some("200-299,301-301") body=None"#,
        ),
        (
            "api/secondary",
            r#"https 192.0.2.20:443 interval=10000ms timeout=9000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 } GET /status/ready host=None headers=["Host:api.example.com", "X-Probe:probed", "Host:api-b.example.com"] status=Some("200-299,301-301") body=None"#,
        ),
        (
            "intranet/office",
            "tcp 10.1.0.5:22 interval=30000ms timeout=10000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 }",
        ),
        (
            "edge/edge-eu",
            r#"http 203.0.113.10:80 interval=2000ms timeout=3000ms pacing=Pacing { fast_interval: None, down_interval: None, initial_jitter: 0ns, jitter_percent: 0 } GET /ping host=None headers=[] status=Some("200-299,300-399") body=None"#,
        ),
    ] {
        let (profile, endpoint) = at.split_once('/').unwrap();
        assert_eq!(legacy_of(&c, profile, endpoint), crate::hash::fingerprint(want), "{at}");
    }
}

#[test]
fn every_parameter_changes_the_key() {
    use crate::config::{Header, HostName, HttpPath, Method, Probe, StatusRange};
    let base = example();
    let key = |c: &Config| key_of(c, "web", "web-1");
    let udp_key = |c: &Config| key_of(c, "dns", "10.0.1.1:53");
    let same = example();
    assert_eq!(key(&same), key(&base), "identical checks share a key");
    fn http(c: &mut Config) -> &mut crate::config::HttpSettings {
        match &mut c.profiles[0].health.probe {
            Probe::Http(h) => h,
            _ => unreachable!("web is an HTTP profile"),
        }
    }
    type Change = Box<dyn Fn(&mut Config)>;
    let changes: Vec<(&str, Change)> = vec![
        ("tls", Box::new(|c| http(c).tls = true)),
        ("method", Box::new(|c| http(c).method = Method::Get)),
        ("path", Box::new(|c| http(c).path = HttpPath::parse("/other").unwrap())),
        (
            "host",
            Box::new(|c| http(c).host = Some(HostName::parse("other.example.com").unwrap())),
        ),
        ("no host", Box::new(|c| http(c).host = None)),
        (
            "headers",
            Box::new(|c| http(c).headers = vec![Header::parse("X-A:1").unwrap()]),
        ),
        (
            "status",
            Box::new(|c| http(c).healthy_status = vec![StatusRange::CLASS_2XX]),
        ),
        (
            "endpoint headers",
            Box::new(|c| {
                c.profiles[0].endpoints[0].extra = crate::config::Extra::of(crate::config::EndpointExtra {
                    headers: [Header::parse("X-A:1").unwrap()].into(),
                    ..Default::default()
                });
            }),
        ),
        ("grpc", Box::new(|c| http(c).grpc = Some(String::new()))),
        ("grpc service", Box::new(|c| http(c).grpc = Some("shop.Cart".into()))),
        (
            "endpoint's own server name",
            Box::new(|c| {
                c.profiles[0].endpoints[0].extra = crate::config::Extra::of(crate::config::EndpointExtra {
                    check: Some(Box::new(crate::config::CheckOverride {
                        server_name: Some(HostName::parse("b.example.com").unwrap()),
                        ..Default::default()
                    })),
                    ..Default::default()
                });
            }),
        ),
        ("port", Box::new(|c| c.profiles[0].endpoints[0].port = 8081)),
        ("interval", Box::new(|c| c.profiles[0].health.interval *= 2)),
        ("timeout", Box::new(|c| c.profiles[0].health.timeout *= 2)),
        ("pacing", Box::new(|c| c.profiles[0].health.pacing.jitter_percent = 11)),
    ];
    for (what, change) in &changes {
        let mut c = example();
        change(&mut c);
        assert_ne!(key(&c), key(&base), "{what}");
    }
    // A body needs GET, so the body's own effect is measured against a GET check.
    let mut get = example();
    http(&mut get).method = Method::Get;
    let mut with_body = get.clone();
    http(&mut with_body).body_match = Some("ok".into());
    assert_ne!(key(&with_body), key(&get), "body");
    let mut c = example();
    let dns = c.profiles.iter_mut().find(|p| p.name == "dns").unwrap();
    let Probe::Udp(u) = &mut dns.health.probe else {
        unreachable!("dns is a UDP profile")
    };
    u.response = Some("other".into());
    assert_ne!(udp_key(&c), udp_key(&base), "udp response");
}

#[test]
fn http_checks_get_the_configured_values() {
    let c = example();
    let check = |profile: &str, endpoint: &str| {
        let p = c.profile(profile).unwrap();
        let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
        http_of(CheckSpec::resolve(p, e).unwrap().spec.kind)
    };
    // The endpoint's Host header replaces the profile's; the other profile header stays.
    let secondary = check("api", "secondary");
    let target = "192.0.2.20:443".parse().unwrap();
    assert_eq!(secondary.check().host_header(target), "api-b.example.com");
    assert_eq!(secondary.check().headers().len(), 1);
    assert_eq!(check("api", "primary").check().host_header(target), "api.example.com");
    // tm's configured ranges, not the prober's dialect default of 200 alone.
    assert!(secondary.check().status().contains(301) && !secondary.check().status().contains(302));
    // lb: HEAD, the configured host; ga: GET, and the endpoint's address as Host.
    let web = check("web", "web-1");
    assert_eq!(web.check().method(), crate::config::Method::Head);
    assert_eq!(
        web.check().host_header("10.0.0.11:8080".parse().unwrap()),
        "www.example.com"
    );
    let edge = check("edge", "edge-eu");
    assert_eq!(edge.check().method(), crate::config::Method::Get);
    assert_eq!(
        edge.check().host_header("203.0.113.10:80".parse().unwrap()),
        "203.0.113.10"
    );
}

/// Endpoints that add no headers share their profile's prepared HTTP check; one with
/// headers of its own gets its own, and the requests say so.
#[test]
fn endpoints_without_headers_share_one_http_check() {
    let c = example();
    let p = c.profile("api").unwrap();
    let mut specs = Specs::new(p);
    let probes: Vec<Arc<dyn TaskProbe>> = p
        .endpoints
        .iter()
        .map(|e| match specs.resolve(e).unwrap().spec.kind {
            ProbeKind::Task(probe) => probe,
            other => panic!("{other:?}"),
        })
        .collect();
    let probes: Vec<&http::HttpProbe> = probes
        .iter()
        .map(|p| p.as_any().downcast_ref().expect("an HTTP check"))
        .collect();
    let [primary, secondary, last] = probes.as_slice() else {
        panic!("three endpoints")
    };
    assert!(std::ptr::eq(primary.check(), last.check()));
    assert!(!std::ptr::eq(primary.check(), secondary.check()));
    // Each is what it would be resolved alone.
    for (probe, name) in [(primary, "primary"), (secondary, "secondary"), (last, "last-resort")] {
        assert_eq!(
            format!("{:?}", probe.check()),
            format!("{:?}", http_probe("api", name).check())
        );
    }
    let host = |p: &http::HttpProbe| {
        let target = "192.0.2.10:443".parse().unwrap();
        String::from_utf8(crate::probe::http::render_request(p.check(), target)).unwrap()
    };
    assert!(host(primary).contains("api.example.com"), "{}", host(primary));
    assert!(host(secondary).contains("api-b.example.com"), "{}", host(secondary));
}

fn http_probe(profile: &str, endpoint: &str) -> HttpOf {
    let c = example();
    let p = c.profile(profile).unwrap();
    let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
    http_of(CheckSpec::resolve(p, e).unwrap().spec.kind)
}

/// A task check that must be an HTTP one, looked into.
struct HttpOf(Arc<dyn TaskProbe>);

impl std::ops::Deref for HttpOf {
    type Target = http::HttpProbe;

    fn deref(&self) -> &http::HttpProbe {
        self.0.as_any().downcast_ref().expect("an HTTP check")
    }
}

impl HttpOf {
    fn kernel_request(&self, target: std::net::SocketAddr) -> Option<Arc<[u8]>> {
        self.0.kernel_request(target)
    }

    fn kernel_report(&self, o: crate::engine::L4Outcome, elapsed: std::time::Duration) -> ProbeReport {
        self.0.kernel_report(o, elapsed)
    }
}

fn http_of(kind: ProbeKind) -> HttpOf {
    match kind {
        ProbeKind::Task(probe) if probe.as_any().is::<http::HttpProbe>() => HttpOf(probe),
        other => panic!("not an HTTP check: {other:?}"),
    }
}

#[test]
fn plain_status_checks_run_in_the_kernel_and_https_does_not() {
    let target = "10.0.0.11:8080".parse().unwrap();
    let web = http_probe("web", "web-1");
    let request = web.kernel_request(target).expect("plain HTTP, status only");
    let text = std::str::from_utf8(&request).unwrap();
    assert!(
        text.starts_with("HEAD /healthz HTTP/1.1\r\nHost: www.example.com\r\n"),
        "{text}"
    );
    assert!(text.ends_with("\r\n\r\n"), "{text}");
    assert_eq!(&*request, &crate::probe::http::render_request(web.check(), target)[..]);
    assert!(http_probe("api", "primary").kernel_request(target).is_none(), "HTTPS");
}

#[test]
fn kernel_outcomes_read_as_the_socket_prober_words_them() {
    use crate::{engine::L4Outcome as K, outcome::Outcome as O};
    let web = http_probe("web", "web-1");
    let ms = std::time::Duration::from_millis(3);
    for (kernel, healthy, outcome, reason) in [
        (K::HttpStatus { status: 204 }, true, O::Status, "status 204"),
        (K::HttpStatus { status: 302 }, true, O::Status, "status 302"),
        (K::HttpStatus { status: 503 }, false, O::BadStatus, "status 503"),
        (K::Timeout, false, O::Timeout, "timeout connect"),
        (K::HttpResponseTimeout, false, O::Timeout, "timeout response"),
        (K::Refused, false, O::Refused, "refused"),
        (K::HttpReset, false, O::Reset, "reset"),
        (K::HttpClosed, false, O::Closed, "closed"),
        (
            K::HttpMalformed,
            false,
            O::HttpError,
            "http error: the response does not start with an HTTP/1.x status line",
        ),
    ] {
        let r = web.kernel_report(kernel, ms);
        assert_eq!(
            (r.healthy, r.outcome, &*r.reason),
            (healthy, outcome, reason),
            "{kernel:?}"
        );
        assert_eq!(r.elapsed, ms);
    }
    // No verdict when the kernel could not run the probe at all.
    let r = web.kernel_report(K::HttpUnsupported, ms);
    assert_eq!((r.healthy, r.outcome), (false, O::LocalError));
    assert!(!r.outcome.is_verdict());
}
