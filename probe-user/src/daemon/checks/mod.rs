//! What a check sends, per kind: TCP and UDP go to the kernel L4 engine in batches, the others
//! run as tasks of their kind (`probe::TaskProbe`). `CheckSpec::resolve` turns a profile and
//! endpoint of the resolved config into one, with the key that makes identical checks (same
//! address, port, kind and parameters) shared.
mod identity;
#[cfg(test)]
mod tests;

pub use identity::{CheckKey, Subject};

use std::net::{IpAddr, SocketAddr};

use crate::{
    config::{Endpoint, Profile, Protocol},
    probe::{kinds::Shared, EndpointCheck},
};

pub use crate::probe::{ProbeKind, ProbeReport};

/// A check the resolved config describes but this build cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckSpecError {
    /// A kind's prober refused values the config reader accepted; both follow
    /// `crate::rules`, so this means a prober-only limit (body, timeout) was crossed, or a
    /// file the check needs (a CA, a client certificate) could not be read.
    #[error("profile {profile:?} endpoint {endpoint:?}: {why}")]
    Kind {
        profile: String,
        endpoint: String,
        why: String,
    },
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

    /// Where the L4 engine sends its probe: the target, or through a tunnel to the endpoint
    /// the service address at the same port.
    pub fn l4_road(&self) -> (SocketAddr, Option<crate::engine::Tunnel>) {
        match self.tunnel() {
            Some(t) => (SocketAddr::new(t.vip, self.port), Some(t.engine(self.ip))),
            None => (self.target(), None),
        }
    }

    /// The data path's tunnel the check takes, if it does (a TCP or a plain HTTP check).
    pub fn tunnel(&self) -> Option<&crate::probe::tunnel::TunnelTo> {
        match &self.kind {
            ProbeKind::L4Tunnel(t) => Some(t),
            ProbeKind::Task(p) => p.tunnel(),
            ProbeKind::L4(_) => None,
        }
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
/// settings of their own have in common (`probe::kinds::Shared`: one prepared HTTP check and
/// one TLS client for all of them instead of one each).
pub struct Specs<'p> {
    profile: &'p Profile,
    shared: Shared,
}

impl<'p> Specs<'p> {
    pub fn new(profile: &'p Profile) -> Self {
        Specs {
            profile,
            shared: Shared::default(),
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
        let kind = health
            .probe
            .prepare(&check_of(endpoint), health.timeout, &mut self.shared)
            .map_err(|why| CheckSpecError::Kind {
                profile: profile.name.clone(),
                endpoint: endpoint.name.to_string(),
                why: why.to_string(),
            })?;
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

/// What `endpoint` brings to its profile's check.
pub(super) fn check_of(endpoint: &Endpoint) -> EndpointCheck<'_> {
    EndpointCheck {
        target: endpoint.socket_addr(),
        headers: endpoint.headers(),
        own: endpoint.check_override(),
    }
}
