//! Endpoint and profile monitor status (SPEC.md section 4): derived from configuration and
//! health, never set by hand. Pure and clock-free; `select` picks endpoints for a query.
pub mod select;

use serde::Serialize;

pub use select::{select, Answer, Candidate, Query, RandomSource, Routing, SplitMix64};

/// Administrative state of an endpoint, as the operator configures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdminState {
    Enabled,
    Disabled,
    /// Health checks off; the endpoint always receives traffic.
    AlwaysServe,
}

/// What the health checks say about an endpoint. The integrator maps its state machine onto this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Health {
    /// Probed, but no verdict yet (new or re-enabled target).
    CheckingEndpoint,
    Healthy,
    Unhealthy,
}

/// Endpoint monitor status, the first table of SPEC.md section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum EndpointStatus {
    Inactive,
    Disabled,
    CheckingEndpoint,
    Online,
    Degraded,
    Stopped,
    Unmonitored,
}

/// Profile monitor status, the second table of SPEC.md section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ProfileStatus {
    Disabled,
    Degraded,
    Online,
    CheckingEndpoints,
    Inactive,
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
        eligible: eligible_alone(status),
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

/// True when fail-open applies: there is at least one endpoint in the pool and every one of
/// them is Degraded. Answering with all of them beats answering with none (SPEC.md 4).
pub fn fail_open(statuses: &[EndpointStatus]) -> bool {
    let mut pool = statuses.iter().copied().filter(|s| in_pool(*s)).peekable();
    pool.peek().is_some() && pool.all(|s| s == EndpointStatus::Degraded)
}

/// Eligibility of every endpoint of a profile, with fail-open applied.
pub fn effective_eligibility(statuses: &[EndpointStatus]) -> Vec<bool> {
    let open = fail_open(statuses);
    statuses
        .iter()
        .map(|s| eligible_alone(*s) || (open && *s == EndpointStatus::Degraded))
        .collect()
}

/// Derives a profile's status from its endpoints' statuses.
///
/// SPEC.md leaves out a profile whose endpoints are all Unmonitored; such endpoints carry traffic,
/// so they count as Online here.
pub fn profile_status(profile_enabled: bool, endpoints: &[EndpointStatus]) -> ProfileStatus {
    let has = |want: EndpointStatus| endpoints.contains(&want);
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

#[cfg(test)]
mod tests {
    use super::*;
    use AdminState::*;
    use EndpointStatus as S;
    use Health::*;

    #[test]
    fn endpoint_table_every_row() {
        // (profile enabled, admin, stopped, health) -> (status, probed, eligible): SPEC.md 4, table 1.
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
}
