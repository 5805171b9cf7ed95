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
                if udp.response.is_some() {
                    return Err(format!(
                        "profile {:?}: UDP checks with a response string need the UDP request/response \
                         prober, which is not built in yet; remove `response` to use silence-means-healthy",
                        profile.name
                    ));
                }
                let payload: Arc<[u8]> = Arc::from(udp.request.as_bytes());
                (
                    ProbeKind::L4(L4Proto::Udp { payload }),
                    format!(" req={:?}", udp.request),
                )
            }
            Probe::Http(_) => {
                let (probe, detail) = http::HttpProbe::prepare(profile, endpoint)?;
                (ProbeKind::Http(probe), detail)
            }
        };
        let key = format!(
            "{} {} interval={}ms timeout={}ms{}",
            health.protocol().name(),
            target,
            health.interval.as_millis(),
            health.timeout.as_millis(),
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

/// HTTP(S) checks. The HTTP prober lives on its own branch; until it is merged, a profile with
/// an HTTP check is refused when the configuration is loaded, with a sentence saying so.
pub mod http {
    use super::ProbeReport;
    use crate::config::{Endpoint, Profile};

    /// A prepared HTTP(S) request.
    #[derive(Clone, Debug)]
    pub struct HttpProbe {
        _never: std::convert::Infallible,
    }

    impl HttpProbe {
        pub fn prepare(profile: &Profile, _endpoint: &Endpoint) -> Result<(HttpProbe, String), String> {
            Err(format!(
                "profile {:?}: http prober not available in this build (HTTP/HTTPS checks need it)",
                profile.name
            ))
        }
    }

    /// Runs HTTP(S) probes.
    #[derive(Clone, Default)]
    pub struct HttpProber;

    impl HttpProber {
        pub fn new() -> Self {
            Self
        }

        pub async fn probe(&self, _target: std::net::SocketAddr, probe: &HttpProbe) -> ProbeReport {
            match probe._never {}
        }
    }
}
