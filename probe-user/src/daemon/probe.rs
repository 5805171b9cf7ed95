//! What a check sends, per kind: TCP and UDP go to the kernel L4 engine in batches, HTTP(S)
//! to the HTTP prober as tasks. `CheckSpec::resolve` turns a profile and endpoint into one,
//! with the key that makes identical checks (same address, port, kind and parameters) shared.
use std::{net::SocketAddr, sync::Arc, time::Duration};

use crate::{
    config::{Endpoint, Probe, Profile, Protocol},
    engine::L4Proto,
};

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

/// One check, independent of who owns it.
#[derive(Clone, Debug)]
pub struct CheckSpec {
    pub target: SocketAddr,
    pub protocol: Protocol,
    pub timeout: Duration,
    pub kind: ProbeKind,
}

/// The verdict of one probe, whatever its kind.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub healthy: bool,
    /// Reply round-trip time, or how long the probe waited.
    pub elapsed: Duration,
    pub reason: Arc<str>,
}

impl CheckSpec {
    /// The check for `endpoint` of `profile`, and its sharing key; an error names what this
    /// build cannot probe.
    pub fn resolve(profile: &Profile, endpoint: &Endpoint) -> Result<(String, CheckSpec), String> {
        let health = &profile.health;
        let target = endpoint.socket_addr();
        let (kind, detail) = match &health.probe {
            Probe::Tcp => (ProbeKind::L4(L4Proto::Tcp), String::new()),
            Probe::Udp(udp) => {
                let payload: Arc<[u8]> = Arc::from(udp.request.as_bytes());
                match &udp.response {
                    // Request/response mode: the reply's content decides, so a socket reads it.
                    Some(expect) => (
                        ProbeKind::UdpExchange(Arc::new(crate::probe::udp::UdpRequest {
                            target,
                            send: payload,
                            expect: Arc::from(expect.as_bytes()),
                            timeout: health.timeout,
                            source: None,
                        })),
                        format!(" req={:?} resp={:?}", udp.request, expect),
                    ),
                    None => (
                        ProbeKind::L4(L4Proto::Udp { payload }),
                        format!(" req={:?}", udp.request),
                    ),
                }
            }
            Probe::Http(_) => {
                let (probe, detail) = http::HttpProbe::prepare(profile, endpoint)?;
                (ProbeKind::Http(probe), detail)
            }
        };
        // Pacing is part of the key: two profiles may share a probe only if they would
        // send it at the same moments.
        let key = format!(
            "{} {} interval={}ms timeout={}ms pacing={:?}{}",
            health.protocol().name(),
            target,
            health.interval.as_millis(),
            health.timeout.as_millis(),
            health.pacing,
            detail
        );
        Ok((
            key,
            CheckSpec {
                target,
                protocol: health.protocol(),
                timeout: health.timeout,
                kind,
            },
        ))
    }
}

/// HTTP(S) checks through `crate::probe::http`: the resolved config is handed over explicitly
/// (method, path, Host, headers, healthy codes), so the prober's own dialect defaults never apply.
pub mod http {
    use std::sync::Arc;

    use super::ProbeReport;
    use crate::{
        config::{Endpoint, Header, Profile},
        probe::http::{Dialect, HttpCheck, HttpCheckSpec, Scheme},
    };

    /// A validated HTTP(S) request, shared by every probe of one check.
    #[derive(Clone, Debug)]
    pub struct HttpProbe {
        check: Arc<HttpCheck>,
    }

    fn pairs(headers: &[Header]) -> Vec<String> {
        headers.iter().map(|h| format!("{}:{}", h.name, h.value)).collect()
    }

    impl HttpProbe {
        /// The check for `endpoint`, and the part of its sharing key that HTTP adds.
        pub fn prepare(profile: &Profile, endpoint: &Endpoint) -> Result<(HttpProbe, String), String> {
            let h = profile
                .health
                .http()
                .ok_or_else(|| format!("profile {:?} has no HTTP check", profile.name))?;
            let scheme = if h.tls { Scheme::Https } else { Scheme::Http };
            let mut spec = HttpCheckSpec::new(scheme, Dialect::Lb, profile.health.timeout);
            spec.method = Some(h.method.name().to_string());
            spec.path = Some(h.path.clone());
            spec.domain = h.host.clone();
            spec.profile_headers = pairs(&h.headers);
            spec.endpoint_headers = pairs(&endpoint.headers);
            spec.expect_status = Some(
                h.healthy_status
                    .iter()
                    .map(|r| format!("{}-{}", r.first, r.last))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            spec.expect_body = h.body_match.clone();
            let check = HttpCheck::new(&spec)
                .map_err(|e| format!("profile {:?} endpoint {:?}: {e}", profile.name, endpoint.name))?;
            let detail = format!(
                " {} {} host={:?} headers={:?} status={:?} body={:?}",
                h.method.name(),
                h.path,
                h.host,
                spec.profile_headers
                    .iter()
                    .chain(&spec.endpoint_headers)
                    .collect::<Vec<_>>(),
                spec.expect_status,
                h.body_match
            );
            Ok((HttpProbe { check: Arc::new(check) }, detail))
        }
    }

    /// Runs HTTP(S) probes; cheap to clone into each probe task.
    #[derive(Clone, Default)]
    pub struct HttpProber(Arc<crate::probe::http::HttpProber>);

    impl HttpProber {
        pub fn new() -> Self {
            Self(Arc::new(crate::probe::http::HttpProber::new()))
        }

        pub async fn probe(&self, target: std::net::SocketAddr, probe: &HttpProbe) -> ProbeReport {
            let r = self.0.probe(target, &probe.check).await;
            ProbeReport {
                healthy: r.healthy(),
                elapsed: r.elapsed,
                reason: Arc::from(r.outcome.to_string()),
            }
        }
    }
}
