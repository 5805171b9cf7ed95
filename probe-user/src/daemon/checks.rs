//! What a check sends, per kind: TCP and UDP go to the kernel L4 engine in batches, HTTP(S)
//! to the HTTP prober as tasks. `CheckSpec::resolve` turns a profile and endpoint of the
//! resolved config into one, with the key that makes identical checks (same address, port,
//! kind and parameters) shared.
mod identity;

pub use identity::CheckKey;

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use crate::{
    config::{Endpoint, Probe, Profile, Protocol},
    engine::L4Proto,
    probe::http::HttpCheckError,
};

/// A check the resolved config describes but this build cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckSpecError {
    /// The HTTP prober refused values the config reader accepted; both follow `crate::rules`,
    /// so this means a prober-only limit (body, timeout) was crossed.
    #[error("profile {profile:?} endpoint {endpoint:?}: {source}")]
    Http {
        profile: String,
        endpoint: String,
        source: HttpCheckError,
    },
}

/// The kind-specific part of a check.
#[derive(Clone, Debug)]
pub enum ProbeKind {
    /// SYN or one UDP datagram through the L4 engine.
    L4(L4Proto),
    /// A request through the HTTP prober.
    Http(http::HttpProbe),
    /// UDP request/response: a datagram whose reply must contain a string (a socket per probe).
    UdpExchange(Arc<crate::probe::udp::UdpRequest>),
}

/// One check, independent of who owns it, and its identity.
#[derive(Clone, Debug)]
pub struct CheckSpec {
    /// The hashes of the key text `resolve` returns with it: a check is known by this.
    key: CheckKey,
    /// Where it goes, as an address and a port beside the protocol: a `SocketAddr` took 32
    /// bytes with room for an IPv6 flow label and scope id never set for an endpoint.
    ip: IpAddr,
    port: u16,
    pub protocol: Protocol,
    /// The probe's timeout in whole microseconds (at most a minute, `rules::limits`; it
    /// saturates at 71): 4 bytes where a `Duration` took 16.
    timeout_us: u32,
    pub kind: ProbeKind,
}

/// The verdict of one probe, whatever its kind.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub healthy: bool,
    pub outcome: crate::outcome::Outcome,
    /// Reply round-trip time, or how long the probe waited.
    pub elapsed: Duration,
    pub reason: Arc<str>,
}

// One allocation per endpoint, shared with the scheduler: with its reference counts it fits
// mimalloc's 80-byte class, its key included (a target and a scheduler entry held the key
// before, 16 bytes each).
const _: () = assert!(std::mem::size_of::<CheckSpec>() <= 64);

impl CheckSpec {
    /// Where the check goes.
    pub fn target(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// The check's identity: equal for checks that may share probes.
    pub fn key(&self) -> CheckKey {
        self.key
    }

    /// The probe's timeout, in whole microseconds.
    pub fn timeout_us(&self) -> u32 {
        self.timeout_us
    }

    /// The check for `endpoint` of `profile`, and its sharing key (see [`Specs::resolve`]).
    pub fn resolve(profile: &Profile, endpoint: &Endpoint) -> Result<Resolved, CheckSpecError> {
        Specs::new(profile).resolve(endpoint)
    }

    /// What a state file written before the key text's version `k2` holds for this check.
    /// Only a saved target that does not match the current key needs it.
    pub fn legacy_fingerprint(profile: &Profile, endpoint: &Endpoint) -> String {
        crate::hash::fingerprint(&identity::Parts::of(profile, endpoint).legacy())
    }
}

/// One endpoint's check, resolved.
pub struct Resolved {
    /// The key text (`identity`), from which `spec.key()` is hashed.
    pub text: String,
    pub spec: CheckSpec,
}

/// Resolves one profile's checks, endpoint after endpoint, sharing what endpoints without
/// settings of their own have in common: one prepared HTTP check for all of them instead of
/// one each (~320 bytes per endpoint: its path, URI, status set and headers).
pub struct Specs<'p> {
    profile: &'p Profile,
    /// The HTTP check of the profile's endpoints that add no headers.
    http: Option<http::HttpProbe>,
}

impl<'p> Specs<'p> {
    pub fn new(profile: &'p Profile) -> Self {
        Specs { profile, http: None }
    }

    pub fn profile(&self) -> &'p Profile {
        self.profile
    }

    /// The check for `endpoint`, and its sharing key.
    ///
    /// The key is stored in the state file to decide whether saved health can be resumed: it
    /// must not change for an unchanged check, and must change with any parameter.
    pub fn resolve(&mut self, endpoint: &Endpoint) -> Result<Resolved, CheckSpecError> {
        let profile = self.profile;
        let health = &profile.health;
        let target = endpoint.socket_addr();
        let kind = match &health.probe {
            Probe::Tcp => ProbeKind::L4(L4Proto::Tcp),
            Probe::Udp(udp) => {
                let payload: Arc<[u8]> = Arc::from(udp.request.as_bytes());
                match &udp.response {
                    // Request/response mode: the reply's content decides, so a socket reads it.
                    Some(expect) => ProbeKind::UdpExchange(Arc::new(crate::probe::udp::UdpRequest {
                        target,
                        send: payload,
                        expect: Arc::from(expect.as_bytes()),
                        timeout: health.timeout,
                        source: None,
                    })),
                    None => ProbeKind::L4(L4Proto::Udp { payload }),
                }
            }
            Probe::Http(h) => {
                let shared = endpoint.headers().is_empty();
                let probe = match &self.http {
                    Some(probe) if shared => probe.clone(),
                    _ => {
                        let probe = http::HttpProbe::prepare(h, health.timeout, endpoint).map_err(|source| {
                            CheckSpecError::Http {
                                profile: profile.name.clone(),
                                endpoint: endpoint.name.to_string(),
                                source,
                            }
                        })?;
                        if shared {
                            self.http = Some(probe.clone());
                        }
                        probe
                    }
                };
                ProbeKind::Http(probe)
            }
        };
        let text = identity::Parts::of(profile, endpoint).text();
        let spec = CheckSpec {
            key: CheckKey::of(&text),
            ip: target.ip(),
            port: target.port(),
            protocol: health.protocol(),
            timeout_us: u32::try_from(health.timeout.as_micros()).unwrap_or(u32::MAX),
            kind,
        };
        Ok(Resolved { text, spec })
    }
}

/// HTTP(S) checks through `crate::probe::http`: the resolved config's typed values are handed
/// over as they are, so neither the prober's dialect defaults nor its text parsing apply.
pub mod http {
    use std::{sync::Arc, time::Duration};

    use super::ProbeReport;
    use crate::{
        config::{Endpoint, HttpCheck as HttpSettings},
        engine::L4Outcome,
        probe::http::{
            request::DEFAULT_BODY_LIMIT, HttpCheck, HttpCheckError, HttpCheckParts, HttpOutcome, Phase, Scheme,
            StatusSet, TlsVerify,
        },
    };

    /// A ready HTTP(S) check, shared by every probe of one check.
    #[derive(Clone, Debug)]
    pub struct HttpProbe {
        check: Arc<HttpCheck>,
    }

    impl HttpProbe {
        /// The check the profile's HTTP settings describe for `endpoint`.
        pub fn prepare(h: &HttpSettings, timeout: Duration, endpoint: &Endpoint) -> Result<HttpProbe, HttpCheckError> {
            let check = HttpCheck::from_parts(HttpCheckParts {
                scheme: if h.tls { Scheme::Https } else { Scheme::Http },
                method: h.method,
                path: h.path.clone(),
                host: h.host.clone(),
                profile_headers: h.headers.clone(),
                endpoint_headers: endpoint.headers().to_vec(),
                status: h.healthy_status.clone(),
                body_match: h.body_match.clone(),
                body_limit: DEFAULT_BODY_LIMIT,
                timeout,
                // SPEC 1 (tm): the certificate must be present but is not validated.
                tls: TlsVerify::Presented,
            })?;
            Ok(HttpProbe { check: Arc::new(check) })
        }

        pub fn check(&self) -> &HttpCheck {
            &self.check
        }

        /// How long one probe of this check may take.
        pub fn timeout(&self) -> Duration {
            self.check.timeout()
        }

        /// The request probe_rx sends for this check to `target`, when the check can run in
        /// the kernel: plain HTTP, the status alone decides (no body to match), and the
        /// request fits a template.
        pub fn kernel_request(&self, target: std::net::SocketAddr) -> Option<Arc<[u8]>> {
            if self.check.scheme() != Scheme::Http || self.check.expect_body().is_some() {
                return None;
            }
            let request = crate::probe::http::render_request(&self.check, target);
            (request.len() <= probe_common::http::HTTP_REQ_MAX).then(|| Arc::from(request))
        }

        /// The report of a probe the kernel ran, in the socket prober's words.
        pub fn kernel_report(&self, outcome: L4Outcome, elapsed: Duration) -> ProbeReport {
            let o = kernel_outcome(outcome, self.check.status());
            ProbeReport {
                healthy: o.healthy(),
                outcome: (&o).into(),
                elapsed,
                reason: Arc::from(o.to_string()),
            }
        }
    }

    /// What a kernel HTTP probe's outcome means for a check whose healthy statuses are `status`.
    pub(super) fn kernel_outcome(o: L4Outcome, status: &StatusSet) -> HttpOutcome {
        match o {
            L4Outcome::HttpStatus { status: s } if status.contains(s) => HttpOutcome::Passed(s),
            L4Outcome::HttpStatus { status: s } => HttpOutcome::BadStatus(s),
            L4Outcome::Refused => HttpOutcome::Refused,
            L4Outcome::Unreachable { .. } => HttpOutcome::Unreachable,
            L4Outcome::Timeout => HttpOutcome::Timeout(Phase::Connect),
            L4Outcome::HttpResponseTimeout => HttpOutcome::Timeout(Phase::Response),
            L4Outcome::HttpReset => HttpOutcome::Reset,
            L4Outcome::HttpClosed => HttpOutcome::Closed,
            L4Outcome::HttpMalformed => {
                HttpOutcome::Protocol("the response does not start with an HTTP/1.x status line".into())
            }
            L4Outcome::NoRoute => HttpOutcome::Connect("no route to the target".into()),
            L4Outcome::LocalError { errno } => {
                HttpOutcome::LocalError(std::io::Error::from_raw_os_error(errno).to_string())
            }
            // Neither comes for an HTTP probe (Open: the kernel answers the SYN+ACK with the
            // request; Silent is UDP's); no verdict rather than a made-up one.
            L4Outcome::HttpUnsupported | L4Outcome::HttpUndecided { .. } | L4Outcome::Open | L4Outcome::Silent => {
                HttpOutcome::LocalError(format!("the kernel could not run this HTTP probe ({o})"))
            }
        }
    }

    /// Runs HTTP(S) probes; cheap to clone into each probe task.
    #[derive(Clone, Default)]
    pub struct HttpProber(Arc<crate::probe::http::HttpProber>);

    impl HttpProber {
        pub fn new() -> Self {
            Self(Arc::new(crate::probe::http::HttpProber::new()))
        }

        /// Runs one probe, within `budget` when that is shorter than the check's timeout.
        pub async fn probe(
            &self,
            target: std::net::SocketAddr,
            probe: &HttpProbe,
            budget: Option<std::time::Duration>,
        ) -> ProbeReport {
            let budget = budget.map_or(probe.check.timeout(), |b| b.min(probe.check.timeout()));
            let r = self.0.probe_within(target, &probe.check, budget).await;
            ProbeReport {
                healthy: r.healthy(),
                outcome: (&r.outcome).into(),
                elapsed: r.elapsed,
                reason: Arc::from(r.outcome.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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
                let text = key_of(&c, &p.name, &e.name);
                let key = CheckKey::of(&text);
                assert_eq!(key.fingerprint(), crate::hash::fingerprint(&text));
                assert_eq!(key.stable(), crate::hash::stable(text.as_bytes()));
                assert_eq!(key, CheckKey::of(&text.clone()));
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
        fn http(c: &mut Config) -> &mut crate::config::HttpCheck {
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
            match CheckSpec::resolve(p, e).unwrap().spec.kind {
                ProbeKind::Http(probe) => probe,
                other => panic!("{profile}/{endpoint}: {other:?}"),
            }
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
        let probes: Vec<http::HttpProbe> = p
            .endpoints
            .iter()
            .map(|e| match specs.resolve(e).unwrap().spec.kind {
                ProbeKind::Http(probe) => probe,
                other => panic!("{other:?}"),
            })
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

    fn http_probe(profile: &str, endpoint: &str) -> http::HttpProbe {
        let c = example();
        let p = c.profile(profile).unwrap();
        let e = p.endpoints.iter().find(|e| &*e.name == endpoint).unwrap();
        match CheckSpec::resolve(p, e).unwrap().spec.kind {
            ProbeKind::Http(probe) => probe,
            other => panic!("{profile}/{endpoint}: {other:?}"),
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
}
