//! One probed endpoint of one profile: its check, its tracker, what it last saw, and the
//! status and eligibility derived from them. Its fields are the table's alone: everything
//! outside reads them through the accessors, and changes them through `Table`'s methods,
//! which keep status, eligibility and the profile's counts in step and return the change to
//! publish.
use std::{sync::Arc, time::Duration};

use crate::{
    changes::{ChangeKind, EndpointChange, EndpointState},
    cluster::aggregate::Verdict,
    config::Endpoint,
    daemon::{
        checks::CheckSpec,
        views::{LastChange, LastResult},
    },
    health::Tracker,
    probe::agent::AgentState,
    schedule::CheckId,
    status::{self, AdminState, EndpointInput, EndpointStatus, Health},
};

/// One endpoint of one profile.
pub(crate) struct Target {
    /// Index of its profile in `Table::profiles` (kept right by `Table::swap_in`), where its
    /// name is: a copy of the name here took 16 bytes of every target.
    pub(super) profile_ix: u32,
    pub(super) name: Arc<str>,
    pub(super) endpoint: Brief,
    /// Whether its profile is enabled, whether its first verdict starts no slow start
    /// (`quiet_start`), and whether this node probes it (`owned`): a bit each.
    pub(super) flags: Flags,
    /// The configured admin state, and the API's override of it.
    pub(super) config_admin: AdminState,
    pub(super) admin_override: Option<AdminState>,
    pub(super) spec: Arc<CheckSpec>,
    /// Registered with the scheduler: only while probed.
    pub(super) check: Option<CheckId>,
    pub(super) tracker: Tracker,
    pub(super) last: Option<LastResult>,
    /// The round-trip time of its last healthy probe.
    pub(super) last_rtt: Rtt,
    pub(super) last_change: Option<LastChange>,
    /// How late its last probe started after its due time (the scheduler's send plus any wait
    /// for an HTTP slot), in whole microseconds (`late_ns`): beyond `rules::limits::BEHIND_NS` its
    /// windows no longer hold.
    pub(super) late_us: u32,
    /// The status and eligibility last published for it (see `Table::settle_some`).
    pub(super) status: EndpointStatus,
    pub(super) eligible: bool,
    /// Its slow start's share of its weight, in thousandths (`status::ramp`); `FULL` outside
    /// a ramp. The table keeps when each ramp started (`Table::ramps`).
    pub(super) ramp: u16,
    /// This endpoint's name for verdicts, on every node that checks it with the same question
    /// (its profile, its name and what its check asks; not the check's timing, so that nodes
    /// with other timing agree). The check's name for sharding is `spec.key().question()`.
    pub(super) verdict_key: u64,
    /// With `[cluster]`: the aggregate of every location's verdict (SPEC 9), which stands
    /// for the endpoint's health; None while no location has a verdict.
    pub(super) cluster_health: Option<Health>,
    /// The verdict this node last gossiped for it (None: none, it does not probe it).
    pub(super) cluster_sent: Option<Verdict>,
    /// What its agent set (`probe::agent`): none without an agent check.
    pub(super) agent: AgentState,
}

// A million targets are a million boxes of this, in mimalloc's size classes of 160, 192, 224,
// 256 bytes: 224 with its address, its last result's and last change's times as `f64`s; 192
// with its check's key (now in the spec), its lateness in nanoseconds and its tracker's run
// as a vector.
const _: () = assert!(std::mem::size_of::<Target>() <= 160);

/// A target's yes-or-no facts, a bit each (a byte each left no room for its agent's state
/// under 160 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Flags(u8);

impl Flags {
    /// Its profile is enabled (the file's `enabled`, or the API's override).
    pub const PROFILE_ENABLED: u8 = 1;
    /// Its first verdict does not start a slow start: it was in the table probed started
    /// with, or in a profile new to a reload (`plan`). Cleared by its first status past
    /// CheckingEndpoint.
    pub const QUIET_START: u8 = 2;
    /// With `[cluster]`: this node is one of the check's k probers (always without).
    pub const OWNED: u8 = 4;

    pub fn of(profile_enabled: bool, quiet_start: bool, owned: bool) -> Flags {
        Flags(
            (u8::from(profile_enabled) * Self::PROFILE_ENABLED)
                | (u8::from(quiet_start) * Self::QUIET_START)
                | (u8::from(owned) * Self::OWNED),
        )
    }

    pub fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    pub fn set(&mut self, bit: u8, on: bool) {
        if on {
            self.0 |= bit;
        } else {
            self.0 &= !bit;
        }
    }
}

/// A round-trip time in whole microseconds (saturating at 71 minutes; one under a
/// microsecond counts as one), 0 for none: 4 bytes where an `Option<Duration>` took 16.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rtt(u32);

impl Rtt {
    pub fn of(d: Duration) -> Self {
        Self(crate::health::Observation::micros(d).max(1))
    }

    pub fn get(self) -> Option<Duration> {
        (self.0 > 0).then(|| Duration::from_micros(u64::from(self.0)))
    }
}

/// What a target keeps of its endpoint's configuration besides its address and port (its
/// check's, `Target::address`): what consumers see of it. The rest (subnets, region, headers)
/// stays in the running config, whose endpoints line up with each profile's `owners`: at a
/// million endpoints a second copy of each cost ~150 bytes, and one of the address 20.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Brief {
    pub weight: u32,
    pub priority: u32,
}

impl Brief {
    pub fn of(e: &Endpoint) -> Brief {
        Brief {
            weight: e.weight,
            priority: e.priority,
        }
    }
}

impl Target {
    /// Its profile's index in `Table::profiles`.
    pub fn profile_ix(&self) -> u32 {
        self.profile_ix
    }

    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Its weight and priority.
    pub fn brief(&self) -> Brief {
        self.endpoint
    }

    pub fn spec(&self) -> &Arc<CheckSpec> {
        &self.spec
    }

    /// Its check in the scheduler, while it is probed.
    pub fn check(&self) -> Option<CheckId> {
        self.check
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    pub fn last(&self) -> Option<&LastResult> {
        self.last.as_ref()
    }

    pub fn last_rtt(&self) -> Rtt {
        self.last_rtt
    }

    pub fn last_change(&self) -> Option<&LastChange> {
        self.last_change.as_ref()
    }

    /// The status and eligibility last published for it.
    pub fn status(&self) -> EndpointStatus {
        self.status
    }

    pub fn eligible(&self) -> bool {
        self.eligible
    }

    /// The API's override of its configured admin state.
    pub fn admin_override(&self) -> Option<AdminState> {
        self.admin_override
    }

    pub fn owned(&self) -> bool {
        self.flags.has(Flags::OWNED)
    }

    pub(super) fn profile_enabled(&self) -> bool {
        self.flags.has(Flags::PROFILE_ENABLED)
    }

    pub(super) fn quiet_start(&self) -> bool {
        self.flags.has(Flags::QUIET_START)
    }

    pub fn verdict_key(&self) -> u64 {
        self.verdict_key
    }

    pub fn cluster_sent(&self) -> Option<Verdict> {
        self.cluster_sent
    }

    /// Sets its cluster share while it is a plan's (not yet in the table, whose status it
    /// has not been given): whether this node probes it, the verdict it gossips, and the
    /// aggregate that stands for its health. A target in the table changes these through
    /// `Table::set_owned` and `Table::set_cluster_health`, which keep its status in step.
    pub fn share(&mut self, owned: bool, sent: Option<Verdict>, health: Option<Health>) {
        self.flags.set(Flags::OWNED, owned);
        self.cluster_sent = sent;
        self.cluster_health = health;
    }

    /// Asks the CPU for the lines `Table::record` reads (`Runner::warm`): at a million
    /// targets each was a cache miss otherwise.
    pub fn prefetch(&self) {
        crate::prefetch::line(&self.profile_ix);
        crate::prefetch::line(&self.late_us);
        crate::prefetch::line(&self.last);
        crate::prefetch::line(&self.tracker);
    }

    /// The endpoint's address and port: where its check goes (`CheckSpec::resolve`).
    pub fn address(&self) -> std::net::SocketAddr {
        self.spec.target()
    }

    /// How late its last probe started, in nanoseconds (whole microseconds kept).
    pub fn late_ns(&self) -> u64 {
        u64::from(self.late_us) * 1_000
    }

    /// Whether its last probe started too late for its windows to hold.
    pub fn behind(&self) -> bool {
        self.late_ns() > crate::rules::limits::BEHIND_NS
    }

    /// Its slow start's share of its weight, in thousandths (`status::ramp`).
    pub fn ramp(&self) -> u16 {
        self.ramp
    }

    /// The admin state that applies: the operator's (the file's, or the API's override), or
    /// its agent's when that is stricter.
    pub fn admin(&self) -> AdminState {
        self.agent.admin_over(self.operator_admin())
    }

    /// The operator's admin state: the file's, or the API's override.
    pub fn operator_admin(&self) -> AdminState {
        self.admin_override.unwrap_or(self.config_admin)
    }

    /// What its agent set.
    pub fn agent(&self) -> AgentState {
        self.agent
    }

    /// Its weight now, before any slow start: the configured one, as its agent scales it.
    pub fn weight(&self) -> u32 {
        self.agent.weight(self.endpoint.weight)
    }

    pub fn should_probe(&self) -> bool {
        self.profile_enabled() && matches!(self.admin(), AdminState::Enabled | AdminState::Drain) && self.owned()
    }

    /// What it counts as toward its profile's status, fail-open and nested parents
    /// (`status::counted`): its status, or Disabled while it drains. Its profile's counts hold
    /// this for every endpoint: an admin change moves them (`Table::set_admin`), and a status
    /// change (`Table::restatus`).
    pub fn counts_as(&self) -> EndpointStatus {
        status::counted(self.admin(), self.status)
    }

    /// Whether it may take new traffic, with its profile's fail-open `fail_open`.
    pub fn eligible_in(&self, fail_open: bool) -> bool {
        status::eligible_as(self.admin(), self.status, fail_open)
    }

    /// The endpoint's health: its locations' aggregate in a cluster, else its own verdict.
    pub fn health(&self) -> Health {
        self.agent
            .health(self.cluster_health.unwrap_or_else(|| self.tracker.state()))
    }

    /// The status its inputs give now (SPEC section 4), which `status` catches up with.
    pub fn derive_status(&self) -> EndpointStatus {
        status::endpoint_view(EndpointInput {
            profile_enabled: self.profile_enabled(),
            admin: self.admin(),
            stopped: false,
            health: self.health(),
        })
        .status
    }

    /// A change of this endpoint for the stream, from status `from`; `removed` for an endpoint
    /// a reload took away. The runner stamps the sequence number when it publishes.
    pub fn change(
        &self,
        profile: &Arc<str>,
        kind: ChangeKind,
        from: Option<EndpointStatus>,
        removed: bool,
        at_unix_ms: u64,
        at_ns: u64,
    ) -> EndpointChange {
        let change = EndpointChange::new((profile, &self.name), kind, from, self.state(), (at_unix_ms, at_ns));
        if removed {
            change.gone()
        } else {
            change
        }
    }

    pub fn state(&self) -> EndpointState {
        let address = self.address();
        EndpointState {
            address: address.ip(),
            port: address.port(),
            protocol: self.spec.protocol,
            weight: self.weight(),
            priority: self.endpoint.priority,
            admin: self.admin(),
            health: self.health(),
            status: self.status,
            eligible: self.eligible,
            ramp: self.ramp,
            nested: None,
        }
    }
}
