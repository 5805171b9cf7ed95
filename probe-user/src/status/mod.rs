//! Endpoint and profile monitor status (SPEC section 4): derived from configuration and
//! health, never set by hand. Pure and clock-free; `routing` picks endpoints for a query.
pub mod ramp;
pub mod routing;

use serde::Serialize;

use crate::wire_enum::wire_enum;

pub use routing::{select, Answer, Candidate, Family, Method, Query, RandomSource, Routing, SplitMix64};

wire_enum! {
    /// Administrative state of an endpoint, as the operator configures it.
    #[derive(Debug, Hash)]
    pub enum AdminState {
        Enabled = "enabled",
        Disabled = "disabled",
        /// Health checks off; the endpoint always receives traffic.
        AlwaysServe = "always-serve",
        /// Probed as when enabled (its status is its health's), but no new traffic goes to
        /// it, not even through fail-open: flows already on it stay where the data path can
        /// keep them (HAProxy's drain).
        Drain = "drain",
    }
}

wire_enum! {
    /// What the API and the command line ask of an endpoint (`POST /v1/endpoints/P/E/ACTION`,
    /// `probed ACTION P E`); enable and disable also apply to a whole profile.
    #[derive(Debug)]
    pub enum AdminAction {
        Enable = "enable",
        Disable = "disable",
        AlwaysServe = "always-serve",
        Drain = "drain",
    }
}

impl AdminAction {
    /// The admin state it sets.
    pub const fn state(self) -> AdminState {
        match self {
            AdminAction::Enable => AdminState::Enabled,
            AdminAction::Disable => AdminState::Disabled,
            AdminAction::AlwaysServe => AdminState::AlwaysServe,
            AdminAction::Drain => AdminState::Drain,
        }
    }

    /// Whether a whole profile takes it too (enable and disable do; the others name an endpoint).
    pub const fn for_profiles(self) -> bool {
        matches!(self, AdminAction::Enable | AdminAction::Disable)
    }
}

wire_enum! {
    /// What the health checks say about an endpoint: the state of its threshold machine
    /// (`health::Tracker`). A new or re-enabled endpoint starts in `CheckingEndpoint`.
    #[derive(Debug, Hash)]
    pub enum Health {
        /// Probed, but no verdict yet (new or re-enabled target).
        CheckingEndpoint = "CheckingEndpoint",
        Healthy = "Healthy",
        Unhealthy = "Unhealthy",
    }
}

wire_enum! {
    /// Endpoint monitor status, the first table of SPEC section 4.
    #[derive(Debug, Hash)]
    pub enum EndpointStatus {
        Inactive = "Inactive",
        Disabled = "Disabled",
        CheckingEndpoint = "CheckingEndpoint",
        Online = "Online",
        Degraded = "Degraded",
        Stopped = "Stopped",
        Unmonitored = "Unmonitored",
    }
}

wire_enum! {
    /// Profile monitor status, the second table of SPEC section 4.
    #[derive(Debug, Hash)]
    pub enum ProfileStatus {
        Disabled = "Disabled",
        Degraded = "Degraded",
        Online = "Online",
        CheckingEndpoints = "CheckingEndpoints",
        Inactive = "Inactive",
    }
}

/// Everything the endpoint status depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointInput {
    pub profile_enabled: bool,
    pub admin: AdminState,
    /// The service behind the endpoint is known to be stopped.
    pub stopped: bool,
    pub health: Health,
}

/// The derived view of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EndpointView {
    pub status: EndpointStatus,
    /// Whether health checks run against it.
    pub probed: bool,
    /// Whether it may receive traffic on its own, before fail-open is considered.
    pub eligible: bool,
}

/// Derives an endpoint's status. Precedence follows the table top to bottom: a disabled profile
/// hides everything, then the endpoint's own admin state, then "stopped" (a stopped service is
/// not served even when set to always-serve), then health.
pub fn endpoint_view(input: EndpointInput) -> EndpointView {
    let (status, probed) = if !input.profile_enabled {
        (EndpointStatus::Inactive, false)
    } else if input.admin == AdminState::Disabled {
        (EndpointStatus::Disabled, false)
    } else if input.stopped {
        (EndpointStatus::Stopped, false)
    } else if input.admin == AdminState::AlwaysServe {
        (EndpointStatus::Unmonitored, false)
    } else {
        let status = match input.health {
            Health::CheckingEndpoint => EndpointStatus::CheckingEndpoint,
            Health::Healthy => EndpointStatus::Online,
            Health::Unhealthy => EndpointStatus::Degraded,
        };
        (status, true)
    };
    EndpointView {
        status,
        probed,
        eligible: eligible_alone(status) && input.admin != AdminState::Drain,
    }
}

/// Eligibility of one status, before fail-open.
pub fn eligible_alone(status: EndpointStatus) -> bool {
    matches!(
        status,
        EndpointStatus::CheckingEndpoint | EndpointStatus::Online | EndpointStatus::Unmonitored
    )
}

/// Statuses that could carry traffic at all: Degraded joins them only through fail-open.
fn in_pool(status: EndpointStatus) -> bool {
    eligible_alone(status) || status == EndpointStatus::Degraded
}

/// How many endpoints of a profile are in each status: everything the profile's status and
/// fail-open depend on, kept up to date one change at a time so that a transition costs O(1)
/// however large the profile is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts([u32; 7]);

impl StatusCounts {
    pub fn of(statuses: &[EndpointStatus]) -> Self {
        let mut c = Self::default();
        for s in statuses {
            c.add(*s);
        }
        c
    }

    pub fn add(&mut self, s: EndpointStatus) {
        self.0[s as usize] += 1;
    }

    pub fn remove(&mut self, s: EndpointStatus) {
        self.0[s as usize] = self.0[s as usize].saturating_sub(1);
    }

    pub fn get(&self, s: EndpointStatus) -> u32 {
        self.0[s as usize]
    }

    /// True when fail-open applies: there is at least one endpoint in the pool and every one
    /// of them is Degraded. Answering with all of them beats answering with none (SPEC 4).
    pub fn fail_open(&self) -> bool {
        let pool: u32 = EndpointStatus::ALL
            .iter()
            .filter(|s| in_pool(**s))
            .map(|s| self.get(*s))
            .sum();
        pool > 0 && pool == self.get(EndpointStatus::Degraded)
    }

    /// The profile's status (SPEC 4, second table).
    ///
    /// SPEC leaves out a profile whose endpoints are all Unmonitored; such endpoints carry
    /// traffic, so they count as Online here.
    pub fn profile_status(&self, profile_enabled: bool) -> ProfileStatus {
        let has = |want: EndpointStatus| self.get(want) > 0;
        if !profile_enabled {
            ProfileStatus::Disabled
        } else if has(EndpointStatus::Degraded) {
            ProfileStatus::Degraded
        } else if has(EndpointStatus::Online) || has(EndpointStatus::Unmonitored) {
            ProfileStatus::Online
        } else if has(EndpointStatus::CheckingEndpoint) {
            ProfileStatus::CheckingEndpoints
        } else {
            ProfileStatus::Inactive
        }
    }
}

/// A nested endpoint's monitor status (SPEC 8), from its parent, its admin state and its child
/// profile: Stopped while the child is disabled or inactive; Degraded while fewer than
/// `min_child` of the child's endpoints are available (Online, CheckingEndpoint, Unmonitored:
/// eligible on their own, without fail-open); else Online, or CheckingEndpoint while none of
/// them has a verdict yet.
pub fn nested_status(
    parent_enabled: bool,
    admin: AdminState,
    child: ProfileStatus,
    child_counts: &StatusCounts,
    min_child: u32,
) -> EndpointStatus {
    use EndpointStatus as S;
    if !parent_enabled {
        return S::Inactive;
    }
    if admin == AdminState::Disabled {
        return S::Disabled;
    }
    if matches!(child, ProfileStatus::Disabled | ProfileStatus::Inactive) {
        return S::Stopped;
    }
    let serving = child_counts.get(S::Online) + child_counts.get(S::Unmonitored);
    let available = serving + child_counts.get(S::CheckingEndpoint);
    if available < min_child {
        S::Degraded
    } else if serving > 0 {
        S::Online
    } else {
        S::CheckingEndpoint
    }
}

/// Eligibility of one endpoint once its profile's fail-open is known.
pub fn eligible(status: EndpointStatus, fail_open: bool) -> bool {
    eligible_alone(status) || (fail_open && status == EndpointStatus::Degraded)
}

/// As `eligible`, for an endpoint in admin state `admin`: a draining one never is.
pub fn eligible_as(admin: AdminState, status: EndpointStatus, fail_open: bool) -> bool {
    admin != AdminState::Drain && eligible(status, fail_open)
}

/// What an endpoint of status `status` in admin state `admin` counts as toward its profile's
/// status and fail-open, its nested parents and the routing methods: its status, but out of
/// rotation (Disabled) while it drains and is probed, since it takes no new traffic. Draining
/// the last healthy endpoint so makes the others fail open rather than leave none.
pub fn counted(admin: AdminState, status: EndpointStatus) -> EndpointStatus {
    use EndpointStatus as S;
    if admin == AdminState::Drain && matches!(status, S::CheckingEndpoint | S::Online | S::Degraded) {
        S::Disabled
    } else {
        status
    }
}

/// True when fail-open applies to these statuses (see `StatusCounts::fail_open`).
pub fn fail_open(statuses: &[EndpointStatus]) -> bool {
    StatusCounts::of(statuses).fail_open()
}

/// Eligibility of every endpoint of a profile, with fail-open applied.
pub fn effective_eligibility(statuses: &[EndpointStatus]) -> Vec<bool> {
    let open = fail_open(statuses);
    statuses.iter().map(|s| eligible(*s, open)).collect()
}

/// Derives a profile's status from its endpoints' statuses.
pub fn profile_status(profile_enabled: bool, endpoints: &[EndpointStatus]) -> ProfileStatus {
    StatusCounts::of(endpoints).profile_status(profile_enabled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdminState::*;
    use EndpointStatus as S;
    use Health::*;

    #[test]
    fn endpoint_table_every_row() {
        // (profile enabled, admin, stopped, health) -> (status, probed, eligible): SPEC 4, table 1.
        let rows = [
            (false, Enabled, false, Healthy, S::Inactive, false, false),
            (false, Disabled, false, Healthy, S::Inactive, false, false),
            (false, AlwaysServe, false, Unhealthy, S::Inactive, false, false),
            (true, Disabled, false, Healthy, S::Disabled, false, false),
            (true, Disabled, true, Unhealthy, S::Disabled, false, false),
            (true, Enabled, false, CheckingEndpoint, S::CheckingEndpoint, true, true),
            (true, Enabled, false, Healthy, S::Online, true, true),
            (true, Enabled, false, Unhealthy, S::Degraded, true, false),
            (true, Enabled, true, Healthy, S::Stopped, false, false),
            (true, AlwaysServe, true, Healthy, S::Stopped, false, false),
            (true, AlwaysServe, false, Unhealthy, S::Unmonitored, false, true),
            (true, AlwaysServe, false, CheckingEndpoint, S::Unmonitored, false, true),
            // Not in SPEC's table: probed as when enabled, never eligible.
            (true, Drain, false, Healthy, S::Online, true, false),
            (true, Drain, false, Unhealthy, S::Degraded, true, false),
            (true, Drain, false, CheckingEndpoint, S::CheckingEndpoint, true, false),
            (true, Drain, true, Healthy, S::Stopped, false, false),
            (false, Drain, false, Healthy, S::Inactive, false, false),
        ];
        for (profile_enabled, admin, stopped, health, status, probed, eligible) in rows {
            let input = EndpointInput {
                profile_enabled,
                admin,
                stopped,
                health,
            };
            assert_eq!(
                endpoint_view(input),
                EndpointView {
                    status,
                    probed,
                    eligible
                },
                "{input:?}"
            );
        }
    }

    #[test]
    fn profile_table_every_row() {
        let rows: [(bool, &[S], ProfileStatus); 10] = [
            (false, &[S::Online], ProfileStatus::Disabled),
            (false, &[], ProfileStatus::Disabled),
            (true, &[S::Online, S::Degraded], ProfileStatus::Degraded),
            (true, &[S::Degraded, S::CheckingEndpoint], ProfileStatus::Degraded),
            (
                true,
                &[S::Online, S::CheckingEndpoint, S::Disabled],
                ProfileStatus::Online,
            ),
            (
                true,
                &[S::CheckingEndpoint, S::Stopped],
                ProfileStatus::CheckingEndpoints,
            ),
            (true, &[], ProfileStatus::Inactive),
            (true, &[S::Disabled, S::Stopped], ProfileStatus::Inactive),
            (true, &[S::Unmonitored], ProfileStatus::Online),
            (true, &[S::Unmonitored, S::Degraded], ProfileStatus::Degraded),
        ];
        for (enabled, endpoints, want) in rows {
            assert_eq!(profile_status(enabled, endpoints), want, "{enabled} {endpoints:?}");
        }
    }

    #[test]
    fn fail_open_only_when_every_pool_member_is_degraded() {
        assert!(fail_open(&[S::Degraded, S::Degraded, S::Disabled, S::Stopped]));
        assert_eq!(
            effective_eligibility(&[S::Degraded, S::Disabled, S::Degraded, S::Stopped]),
            vec![true, false, true, false]
        );
        assert!(!fail_open(&[S::Degraded, S::Online]));
        assert_eq!(effective_eligibility(&[S::Degraded, S::Online]), vec![false, true]);
        assert!(!fail_open(&[S::Degraded, S::Unmonitored]));
        assert!(!fail_open(&[S::Disabled, S::Stopped]));
        assert!(!fail_open(&[]));
    }

    #[test]
    fn a_nested_endpoint_follows_its_child() {
        use ProfileStatus as P;
        let counts = |online: usize, checking: usize, degraded: usize| {
            let mut all = vec![S::Online; online];
            all.extend(vec![S::CheckingEndpoint; checking]);
            all.extend(vec![S::Degraded; degraded]);
            StatusCounts::of(&all)
        };
        let n = |enabled, admin, child, c: &StatusCounts, min| nested_status(enabled, admin, child, c, min);
        let two_up = counts(2, 0, 1);
        assert_eq!(n(true, Enabled, P::Degraded, &two_up, 1), S::Online);
        assert_eq!(
            n(true, Enabled, P::Degraded, &two_up, 3),
            S::Degraded,
            "min_child_endpoints"
        );
        assert_eq!(n(true, Enabled, P::Disabled, &two_up, 1), S::Stopped);
        assert_eq!(n(true, Enabled, P::Inactive, &counts(0, 0, 0), 1), S::Stopped);
        assert_eq!(
            n(true, Enabled, P::CheckingEndpoints, &counts(0, 2, 0), 2),
            S::CheckingEndpoint
        );
        assert_eq!(n(true, Enabled, P::Degraded, &counts(0, 0, 2), 1), S::Degraded);
        assert_eq!(n(true, Disabled, P::Online, &two_up, 1), S::Disabled);
        assert_eq!(n(false, Enabled, P::Online, &two_up, 1), S::Inactive);
    }
}
