//! What the stream carries: the changes, the states they move between, and a snapshot.
use std::{net::IpAddr, sync::Arc, time::Duration};

use serde::{Deserialize, Serialize};

use crate::wire_enum::wire_enum;

use crate::{
    outcome::Outcome,
    rules::Protocol,
    status::{AdminState, EndpointStatus, Health, ProfileStatus},
};

wire_enum! {
    /// What caused a change.
    #[derive(Debug, Hash)]
    pub enum ChangeKind {
        /// The threshold machine reached a verdict (the `transition` says on which results).
        Health = "health",
        /// Passive detection ejected the endpoint: the node's forwarded handshakes to it failed
        /// (the `transition` says how); its active check brings it back.
        Passive = "passive",
        /// An operator set the admin state through the API.
        Admin = "admin",
        /// A reload added, removed or changed the endpoint (or its profile).
        Config = "config",
        /// The profile entered or left fail-open: the endpoint's eligibility changed alone.
        FailOpen = "fail-open",
        /// Other locations' verdicts changed the endpoint's aggregate health (`[cluster]`).
        Cluster = "cluster",
        /// Its agent (`agent_port`) set its health, admin state or weight.
        Agent = "agent",
        /// A step of the endpoint's slow start: its weight's share (`ramp`) moved alone.
        SlowStart = "slow-start",
        /// Not a change but a notice (`Change::Notice`): the server's TLS certificate expires
        /// within the profile's `cert_warn_days`; the endpoint's status is as it was.
        CertExpiring = "cert-expiring",
    }
}

impl ChangeKind {
    /// Which cause a coalesced change keeps: the one that says most about what happened.
    fn weight(self) -> u8 {
        match self {
            ChangeKind::Health | ChangeKind::Passive => 4,
            ChangeKind::Cluster => 3,
            ChangeKind::Admin | ChangeKind::Agent => 2,
            ChangeKind::Config => 1,
            ChangeKind::FailOpen | ChangeKind::SlowStart | ChangeKind::CertExpiring => 0,
        }
    }
}

/// An endpoint's state as consumers need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointState {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub weight: u32,
    pub priority: u32,
    pub admin: AdminState,
    pub health: Health,
    pub status: EndpointStatus,
    /// May receive new traffic now, fail-open included.
    pub eligible: bool,
    /// Its slow start: the share of `weight` it takes now, in thousandths
    /// (`status::ramp`); whole (1000, and left out of the JSON) outside a ramp.
    #[serde(
        default = "crate::status::ramp::full",
        skip_serializing_if = "crate::status::ramp::is_full"
    )]
    pub ramp: u16,
    /// A nested endpoint's child profile (SPEC 8): it has no address of its own (`address`
    /// is unspecified, `port` 0), and data-path sinks leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<String>,
}

impl EndpointState {
    /// An enabled TCP endpoint of weight 1 whose checks pass (Healthy, Online, eligible) or
    /// fail (Unhealthy, Degraded, not eligible): the usual fixture of tests and benchmarks.
    pub fn tcp(address: IpAddr, port: u16, passing: bool) -> Self {
        EndpointState {
            address,
            port,
            protocol: Protocol::Tcp,
            weight: 1,
            priority: 1,
            admin: AdminState::Enabled,
            health: if passing { Health::Healthy } else { Health::Unhealthy },
            status: if passing {
                EndpointStatus::Online
            } else {
                EndpointStatus::Degraded
            },
            eligible: passing,
            ramp: crate::status::ramp::FULL,
            nested: None,
        }
    }

    /// Its weight as a slot table shares it while some endpoint of the table ramps
    /// (`status::ramp::fine`): every candidate scaled alike.
    pub fn fine_weight(&self) -> u32 {
        crate::status::ramp::fine(self.weight, self.ramp)
    }

    /// Its weight now, in whole units: the configured weight, or its slow start's share of it
    /// (`status::ramp::scaled`).
    pub fn weight_now(&self) -> u32 {
        crate::status::ramp::scaled(self.weight, self.ramp)
    }
}

/// One probe of the run that decided a health change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub ok: bool,
    pub outcome: Outcome,
    /// Shared with the probe's report (at start-up a million transitions carry two each).
    pub reason: Arc<str>,
    /// Whole microseconds here, `rtt_ms` on the wire (which had microsecond precision).
    #[serde(rename = "rtt_ms", with = "micros_as_ms")]
    pub rtt_us: u32,
    /// CLOCK_MONOTONIC, nanoseconds: comparable with the kernel's and the runner's clock.
    pub started_ns: u64,
    pub finished_ns: u64,
}

// A first round publishes one change per target with the run that decided it, and a slow
// consumer holds them all: as 48-byte results, three took mimalloc's 160-byte class, now 128.
const _: () = assert!(std::mem::size_of::<RunResult>() <= 40);

impl RunResult {
    pub fn rtt_ms(&self) -> f64 {
        micros_as_ms::ms(self.rtt_us)
    }
}

/// A time kept in whole microseconds, written as milliseconds (round-trip times, windows).
pub(crate) mod micros_as_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn ms(us: u32) -> f64 {
        f64::from(us) / 1000.0
    }

    /// Milliseconds to whole microseconds; `as` saturates (and takes NaN to 0): a time past
    /// 71 minutes reads as 71 minutes.
    pub fn micros(ms: f64) -> u32 {
        (ms * 1000.0).round() as u32
    }

    #[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde's `with` calls
    pub fn serialize<S: Serializer>(us: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(ms(*us))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        Ok(micros(f64::deserialize(d)?))
    }
}

/// The evidence for a health change, and its windows (SPEC section 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionDetail {
    pub results: Vec<RunResult>,
    /// Start of the first result of the run to the change.
    pub measured_window_ms: f64,
    /// What the SPEC formula gives for the same settings.
    pub formula_window_ms: f64,
}

/// An endpoint changed, appeared (`from` is None) or went away (`removed`; `state` is then
/// its last state, so that a consumer knows which address to take out).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointChange {
    pub seq: u64,
    pub at_unix_ms: u64,
    /// CLOCK_MONOTONIC of the change.
    pub at_ns: u64,
    pub kind: ChangeKind,
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    pub from: Option<EndpointStatus>,
    pub state: EndpointState,
    pub removed: bool,
    pub transition: Option<Arc<TransitionDetail>>,
}

impl EndpointChange {
    /// A change of endpoint `endpoint` of `profile` to `state` at `(unix ms, runner ns)`; the
    /// runner stamps its sequence number when it publishes it.
    pub fn new(
        (profile, endpoint): (&Arc<str>, &Arc<str>),
        kind: ChangeKind,
        from: Option<EndpointStatus>,
        state: EndpointState,
        (at_unix_ms, at_ns): (u64, u64),
    ) -> Self {
        EndpointChange {
            seq: 0,
            at_unix_ms,
            at_ns,
            kind,
            profile: profile.clone(),
            endpoint: endpoint.clone(),
            from,
            state,
            removed: false,
            transition: None,
        }
    }

    /// The same change, saying the endpoint is gone.
    #[must_use]
    pub fn gone(self) -> Self {
        EndpointChange { removed: true, ..self }
    }
}

/// A profile's status or fail-open changed; `to` is None when a reload removed it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileChange {
    pub seq: u64,
    pub at_unix_ms: u64,
    pub profile: Arc<str>,
    pub from: Option<ProfileStatus>,
    pub to: Option<ProfileStatus>,
    pub fail_open: bool,
}

/// Something about an endpoint that changes none of its state, for the events file (and
/// any consumer that wants it): sinks and the DNS server pass notices by.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub seq: u64,
    pub at_unix_ms: u64,
    pub at_ns: u64,
    pub kind: ChangeKind,
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    /// Its state when the notice was made (unchanged by it).
    pub state: EndpointState,
    /// `CertExpiring`: when the certificate expires (Unix seconds).
    pub cert_not_after: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Endpoint(EndpointChange),
    Profile(ProfileChange),
    Notice(Notice),
}

#[cfg(test)]
impl Change {
    /// An endpoint's health change with `state`: the fixture of the consumers' unit tests.
    pub(crate) fn health(seq: u64, profile: &str, endpoint: &str, state: EndpointState, removed: bool) -> Change {
        Change::Endpoint(EndpointChange {
            seq,
            at_unix_ms: 0,
            at_ns: 0,
            kind: ChangeKind::Health,
            profile: profile.into(),
            endpoint: endpoint.into(),
            from: None,
            state,
            removed,
            transition: None,
        })
    }
}

impl Change {
    /// What the change is about: its profile, and its endpoint for an endpoint's; a notice
    /// is keyed apart from its endpoint's changes (the flag), so that neither folds the other
    /// away. At most one change per key waits in a queue.
    pub(super) fn key(&self) -> (&str, Option<&str>, bool) {
        match self {
            Change::Endpoint(e) => (&e.profile, Some(&e.endpoint), false),
            Change::Profile(p) => (&p.profile, None, false),
            Change::Notice(n) => (&n.profile, Some(&n.endpoint), true),
        }
    }

    /// The profile it is about.
    pub fn profile(&self) -> &Arc<str> {
        match self {
            Change::Endpoint(e) => &e.profile,
            Change::Profile(p) => &p.profile,
            Change::Notice(n) => &n.profile,
        }
    }

    pub(super) fn key_hash(&self) -> u64 {
        crate::hash::fast_hash(&self.key())
    }

    pub fn seq(&self) -> u64 {
        match self {
            Change::Endpoint(e) => e.seq,
            Change::Profile(p) => p.seq,
            Change::Notice(n) => n.seq,
        }
    }

    /// Folds a newer change of the same key into this one: the newer state, the older `from`,
    /// and the weightier cause: a health verdict and its evidence survive a fail-open or
    /// admin change that follows it in the same queue.
    pub(super) fn absorb(&mut self, newer: &Change) {
        match (self, newer.clone()) {
            (Change::Endpoint(old), Change::Endpoint(new)) => {
                let (from, kind, transition) = (old.from, old.kind, old.transition.take());
                *old = new;
                old.from = from;
                if kind.weight() > old.kind.weight() {
                    old.kind = kind;
                }
                if old.transition.is_none() {
                    old.transition = transition;
                }
            }
            (Change::Profile(old), Change::Profile(new)) => {
                let from = old.from;
                *old = new;
                old.from = from;
            }
            (old, new) => *old = new,
        }
    }
}

/// The state of every endpoint and profile at one point of the stream: a new subscriber's
/// starting point, after which its queue carries every change with a larger `seq`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The `seq` of the last change already reflected here.
    pub seq: u64,
    pub profiles: Vec<(Arc<str>, ProfileStatus, bool)>,
    pub endpoints: Vec<(Arc<str>, Arc<str>, EndpointState)>,
}

/// The endpoints' last measured round-trip times, (profile, endpoint, time), for the profiles
/// that route by them (performance routing). The runner sends them once a second beside the
/// change stream, on a watch channel: only the latest matters.
pub type Rtts = Arc<Vec<(Arc<str>, Arc<str>, Option<Duration>)>>;
