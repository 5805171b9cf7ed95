//! `GET /v1/status[/{profile}[/{endpoint}]]`: views of the live table (SPEC section 5).
use crate::{
    clock::ms,
    daemon::{
        protocol::RequestError,
        table::{days_left, within_warning},
        table::{OwnerId, ProfileEntry, Table},
        views::{EndpointView, NestedView, Page, ProfileView, TlsCertView, Windows},
    },
    health::{fail_window, success_window},
    status::EndpointStatus,
};

/// Every profile, or the one named; with `page` (offset, limit), each holds only those of its
/// endpoints, so that no request builds more than a page of views on the runner's thread.
/// `now_unix` (seconds) dates the views' certificate days.
pub(super) fn profiles(
    table: &Table,
    profile: Option<&str>,
    page: Option<(usize, usize)>,
    now_unix: i64,
) -> Result<Vec<ProfileView>, RequestError> {
    match profile {
        None => Ok(table
            .profiles()
            .iter()
            .map(|p| profile_view(table, p, page, now_unix))
            .collect()),
        Some(name) => {
            let (_, p) = table
                .profile(name)
                .ok_or_else(|| RequestError::NoProfile(name.into()))?;
            Ok(vec![profile_view(table, p, page, now_unix)])
        }
    }
}

#[cfg(test)]
pub(super) fn endpoint(
    table: &Table,
    profile: &str,
    endpoint: &str,
    now_unix: i64,
) -> Result<EndpointView, RequestError> {
    find(table, profile, endpoint).map(|id| endpoint_view(table, id, now_unix))
}

/// The endpoint named, or the error that says which name is unknown.
pub(super) fn find(table: &Table, profile: &str, endpoint: &str) -> Result<OwnerId, RequestError> {
    table
        .profile(profile)
        .ok_or_else(|| RequestError::NoProfile(profile.into()))?;
    table.find(profile, endpoint).ok_or_else(|| RequestError::NoEndpoint {
        profile: profile.into(),
        endpoint: endpoint.into(),
    })
}

fn profile_view(table: &Table, p: &ProfileEntry, page: Option<(usize, usize)>, now_unix: i64) -> ProfileView {
    let (offset, limit) = page.unwrap_or((0, usize::MAX));
    let owners = p.owners.iter().skip(offset).take(limit);
    ProfileView {
        name: p.cfg.name.clone(),
        enabled: p.enabled(),
        enabled_from_api: p.enabled_override.is_some(),
        dialect: p.cfg.dialect.name().into(),
        routing: p.cfg.routing,
        status: p.status,
        fail_open: p.fail_open,
        endpoints: owners.map(|id| endpoint_view(table, *id, now_unix)).collect(),
        page: page.map(|(offset, limit)| Page {
            offset,
            limit,
            total: p.owners.len(),
        }),
        // The sinks are the consumers', added by `Control` (`Consumers::fill_sinks`); the
        // discovery is its thread's (`Control::fill_discovery`).
        sinks: Vec::new(),
        discovery: None,
        nested: p
            .nested
            .iter()
            .map(|n| {
                let counts = &table.profiles()[n.child].counts;
                NestedView {
                    name: n.name.to_string(),
                    profile: n.cfg.child.clone(),
                    admin: n.cfg.state,
                    status: n.status,
                    eligible: n.eligible,
                    priority: n.cfg.priority,
                    weight: n.cfg.weight,
                    min_child_endpoints: n.cfg.min_child_endpoints,
                    available_child_endpoints: [
                        EndpointStatus::Online,
                        EndpointStatus::CheckingEndpoint,
                        EndpointStatus::Unmonitored,
                    ]
                    .iter()
                    .map(|s| counts.get(*s))
                    .sum(),
                    last_change: n.last_change.clone(),
                }
            })
            .collect(),
    }
}

pub(super) fn endpoint_view(table: &Table, id: OwnerId, now_unix: i64) -> EndpointView {
    let t = &table.targets()[&id];
    let warn_days = table.profiles()[t.profile_ix() as usize]
        .cfg
        .health
        .http()
        .map_or(0, |h| h.cert_warn_days);
    let tls_cert = table.cert_of(id).map(|c| TlsCertView {
        not_after_unix: c.not_after,
        days_left: days_left(c.not_after, now_unix),
        expiring: within_warning(c.not_after, now_unix, warn_days),
    });
    let timing = t.tracker().timing();
    let th = t.tracker().thresholds();
    EndpointView {
        profile: table.profile_of(t).to_string(),
        name: t.name().to_string(),
        address: t.address().ip().to_string(),
        port: t.address().port(),
        protocol: t.spec().protocol,
        admin: t.admin(),
        admin_from_api: t.admin_override().is_some(),
        status: t.status(),
        health: t.health(),
        probed: t.should_probe(),
        eligible: t.eligible(),
        ramp: t.ramp(),
        pending: t.tracker().pending(),
        last_result: t.last().cloned(),
        last_change: t.last_change().cloned(),
        windows: Windows {
            interval_ms: ms(timing.interval),
            timeout_ms: ms(timing.timeout),
            healthy_threshold: th.healthy(),
            unhealthy_threshold: th.unhealthy(),
            fail_window_ms: ms(fail_window(timing.timeout, timing.interval, th.unhealthy())),
            success_window_ms: ms(success_window(
                t.last_rtt().get().unwrap_or_default(),
                timing.interval,
                th.healthy(),
            )),
            late_ms: ms(std::time::Duration::from_nanos(t.late_ns())),
            hold: !t.should_probe() || !t.behind(),
        },
        // Filled by the runner, which holds the cluster's view (runner/cluster.rs).
        cluster: None,
        tls_cert,
        weight: t.weight(),
        agent: agent_view(table, id),
        tunnel: t.spec().tunnel().copied(),
        // Filled by the runner, which holds the observers (runner/passive.rs).
        passive: None,
    }
}

/// What endpoint `id`'s agent holds and last said; None when its profile has no agent check.
fn agent_view(table: &Table, id: OwnerId) -> Option<crate::daemon::views::AgentView> {
    let t = &table.targets()[&id];
    table.profiles()[t.profile_ix() as usize].cfg.health.agent.as_ref()?;
    let held = t.agent();
    let seen = table.agent_seen(id);
    Some(crate::daemon::views::AgentView {
        down: held.down(),
        admin: held.admin().map(|a| a.word().to_string()),
        weight_percent: held.percent(),
        said: seen.map(|s| s.said.to_string()),
        answered: seen.is_some_and(|s| s.answered),
        at_unix_ms: seen.map(|s| s.at_unix_ms),
    })
}
