//! What a check sends, per kind: TCP and UDP go to the kernel L4 engine in batches, the others
//! run as tasks of their kind (`probe::TaskProbe`). `CheckSpec::resolve` turns a profile and
//! endpoint of the resolved config into one, with the key that makes identical checks (same
//! address, port, kind and parameters) shared.
mod identity;
#[cfg(test)]
mod tests;

pub use identity::{CheckKey, Subject};

use crate::probe::http::task as http;

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

use crate::{
    config::{Endpoint, Probe, Profile, Protocol},
    engine::L4Proto,
    probe::{http::HttpCheckError, TaskProbe},
};

pub use crate::probe::ProbeReport;

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

/// How a check is sent: by the kernel engine, or as a task of its kind.
#[derive(Clone, Debug)]
pub enum ProbeKind {
    /// SYN or one UDP datagram through the L4 engine.
    L4(L4Proto),
    /// A probe that runs as a task (HTTP(S), gRPC, UDP request/response, ...).
    Task(Arc<dyn TaskProbe>),
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

// One allocation per endpoint, shared with the scheduler: with its reference counts it fits
// mimalloc's 80-byte class, its key included (a target and a scheduler entry held the key
// before, 16 bytes each).
const _: () = assert!(std::mem::size_of::<CheckSpec>() <= 64);

impl CheckSpec {
    /// Where the check goes.
    pub fn target(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// What it looks at: a change of this starts the endpoint over.
    pub fn subject(&self) -> Subject {
        Subject {
            protocol: self.protocol,
            target: self.target(),
        }
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
    /// The question text (`identity::Parts::texts`): what the check asks, less its timing.
    pub question: String,
    pub spec: CheckSpec,
}

/// Resolves one profile's checks, endpoint after endpoint, sharing what endpoints without
/// settings of their own have in common: one prepared HTTP check for all of them instead of
/// one each (~320 bytes per endpoint: its path, URI, status set and headers).
pub struct Specs<'p> {
    profile: &'p Profile,
    /// The HTTP check of the profile's endpoints that add no headers.
    http: Option<Arc<dyn TaskProbe>>,
    /// The profile's TLS client, made once (a CA file is read once per profile).
    tls: Option<crate::probe::http::TlsVerify>,
    /// The TLS clients of endpoints with TLS keys of their own, by those keys (few: a linear
    /// search).
    own_tls: Vec<(TlsClientKey, crate::probe::http::TlsVerify)>,
}

/// What makes a TLS client: verification, client certificate, TLS 1.3 alone.
type TlsClientKey = (
    crate::config::TlsVerifySetting,
    Option<crate::config::ClientCertFiles>,
    bool,
    u32,
);

impl<'p> Specs<'p> {
    pub fn new(profile: &'p Profile) -> Self {
        Specs {
            profile,
            http: None,
            tls: None,
            own_tls: Vec::new(),
        }
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
                    Some(expect) => ProbeKind::Task(Arc::new(crate::probe::udp::UdpRequest {
                        target,
                        send: payload,
                        expect: Arc::from(expect.as_bytes()),
                        timeout: health.timeout,
                        source: None,
                    })),
                    None => ProbeKind::L4(L4Proto::Udp { payload }),
                }
            }
            Probe::Http(profile_http) => {
                let own = endpoint.check_override();
                let shared = endpoint.headers().is_empty() && own.is_none();
                let probe = match &self.http {
                    Some(probe) if shared => probe.clone(),
                    _ => {
                        let failed = |source| CheckSpecError::Http {
                            profile: profile.name.clone(),
                            endpoint: endpoint.name.to_string(),
                            source,
                        };
                        let merged = own.map(|o| profile_http.with_override(o));
                        let h = merged.as_ref().unwrap_or(profile_http);
                        let tls = match (&self.tls, own.is_some_and(crate::config::CheckOverride::changes_client)) {
                            (Some(tls), false) => tls.clone(),
                            // An endpoint's own verification or client certificate: its own
                            // client (endpoints with the same keys share one).
                            (_, true) => {
                                let key = (
                                    h.tls_verify.clone(),
                                    h.client_cert.clone(),
                                    h.tls13_only,
                                    h.tls_reverify_s,
                                );
                                match self.own_tls.iter().find(|(k, _)| *k == key) {
                                    Some((_, tls)) => tls.clone(),
                                    None => {
                                        let tls = http::tls_client(h).map_err(failed)?;
                                        self.own_tls.push((key, tls.clone()));
                                        tls
                                    }
                                }
                            }
                            (None, false) => {
                                let tls = http::tls_client(h).map_err(failed)?;
                                self.tls = Some(tls.clone());
                                tls
                            }
                        };
                        let probe: Arc<dyn TaskProbe> = Arc::new(
                            http::HttpProbe::prepare(h, health.timeout, endpoint.headers(), tls).map_err(failed)?,
                        );
                        if shared {
                            self.http = Some(probe.clone());
                        }
                        probe
                    }
                };
                ProbeKind::Task(probe)
            }
        };
        let (text, question) = identity::Parts::of(profile, endpoint).texts();
        let spec = CheckSpec {
            key: CheckKey::of(&text, &question),
            ip: target.ip(),
            port: target.port(),
            protocol: health.protocol(),
            timeout_us: u32::try_from(health.timeout.as_micros()).unwrap_or(u32::MAX),
            kind,
        };
        Ok(Resolved { text, question, spec })
    }
}
