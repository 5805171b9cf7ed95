//! The target table a configuration resolves to, and an endpoint's lifecycle in one place:
//! its admin state (config and API override), whether it is probed, its derived status and
//! eligibility, and what it carries over across a reload or a restart (`plan`). Pure: no
//! clock, no I/O.
use crate::changes::{ChangeKind, EndpointChange, EndpointState};
use std::sync::Arc;

use super::views::LastChange;
use crate::{
    config::{HealthCheck, NestedEndpoint, Profile},
    hash::FastMap,
    schedule::CheckParams,
    status::{self, EndpointStatus, Health, ProfileStatus, StatusCounts},
};

mod agents;
mod certs;
mod fleet;
mod plan;
mod ramp;
mod restatus;
mod swap;
mod target;
#[cfg(test)]
mod tests;

pub(crate) use agents::AgentSeen;
pub(crate) use certs::{days_left, within_warning, CertSeen};
pub(crate) use plan::{plan, Plan, Swapped};
pub(crate) use restatus::{Changed, Probed, Stamp, Unsettled};
pub(crate) use swap::Name;
pub(crate) use target::{Brief, Rtt, Target};

/// Identifies one endpoint of one profile for as long as it keeps its check.
pub type OwnerId = u64;

/// A nested endpoint (SPEC 8): never probed; its status follows its child profile's endpoints
/// (`status::nested_status`), recomputed whenever the child's counts change.
pub(crate) struct NestedTarget {
    pub cfg: NestedEndpoint,
    pub name: Arc<str>,
    /// The child's index in `Table::profiles`.
    pub child: usize,
    pub status: EndpointStatus,
    pub eligible: bool,
    pub last_change: Option<LastChange>,
}

impl NestedTarget {
    /// What consumers see of it: no address of its own, the child's name instead.
    pub fn state(&self, protocol: crate::config::Protocol) -> EndpointState {
        EndpointState {
            address: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            port: 0,
            protocol,
            weight: self.cfg.weight,
            priority: self.cfg.priority,
            admin: self.cfg.state,
            health: match self.status {
                EndpointStatus::Online => Health::Healthy,
                EndpointStatus::Degraded => Health::Unhealthy,
                _ => Health::CheckingEndpoint,
            },
            status: self.status,
            eligible: self.eligible,
            ramp: status::ramp::FULL,
            nested: Some(self.cfg.child.clone()),
        }
    }

    /// A change of it for the stream (the runner stamps the sequence number).
    pub fn change(
        &self,
        profile: &Arc<str>,
        protocol: crate::config::Protocol,
        kind: ChangeKind,
        from: Option<EndpointStatus>,
        at: (u64, u64),
    ) -> EndpointChange {
        EndpointChange::new((profile, &self.name), kind, from, self.state(protocol), at)
    }

    /// The status its parent and child give it now.
    pub fn derive_status(&self, parent_enabled: bool, child: &ProfileEntry) -> EndpointStatus {
        status::nested_status(
            parent_enabled,
            self.cfg.state,
            child.status,
            &child.counts,
            self.cfg.min_child_endpoints,
        )
    }
}

/// One profile: its config, its endpoints in config order, and the aggregate of their
/// statuses (nested endpoints included), kept in step one change at a time. Outside this
/// module it is only ever seen through `Table::profiles`, a shared reference: its fields are
/// read there and changed by the table alone.
pub(crate) struct ProfileEntry {
    /// Its settings: its configuration without the endpoints (`endpoints` is empty; the
    /// running config has them, lined up with `owners`).
    pub cfg: Profile,
    /// Its nested endpoints, after the plain ones.
    pub nested: Vec<NestedTarget>,
    /// The API's override of `cfg.enabled`; None when it equals the configuration.
    pub enabled_override: Option<bool>,
    pub name: Arc<str>,
    /// Its thresholds and timing, shared by its endpoints' trackers.
    pub rules: Arc<crate::health::Rules>,
    pub owners: Vec<OwnerId>,
    pub counts: StatusCounts,
    pub status: ProfileStatus,
    pub fail_open: bool,
    /// Its probed endpoints whose last probe started more than `rules::limits::BEHIND_NS` late,
    /// kept in step by the runner as results come (`runner/pace.rs`).
    pub behind: u64,
}

impl ProfileEntry {
    pub fn enabled(&self) -> bool {
        self.enabled_override.unwrap_or(self.cfg.enabled)
    }

    /// Sets the API's override; None when it equals the configuration.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled_override = (enabled != self.cfg.enabled).then_some(enabled);
    }

    /// Recomputes status and fail-open from the counts; returns the old pair.
    pub fn recount(&mut self) -> (ProfileStatus, bool) {
        let old = (self.status, self.fail_open);
        self.status = self.counts.profile_status(self.enabled());
        self.fail_open = self.counts.fail_open();
        old
    }
}

/// A resolved configuration, before it is applied.
///
/// Its fields are this module's alone: everything outside reads them through the accessors
/// below and changes them only through the table's methods (`restatus.rs` is the door).
#[derive(Default)]
pub(crate) struct Table {
    profiles: Vec<ProfileEntry>,
    /// Child profile index -> its (parent index, nested index) places.
    parents: FastMap<usize, Vec<(usize, usize)>>,
    /// Boxed: a hash map's slots (up to twice the entries, and three times while it grows)
    /// would each hold a whole target.
    targets: FastMap<OwnerId, Box<Target>>,
    /// TLS endpoints' certificates (`certs.rs`).
    certs: FastMap<OwnerId, CertSeen>,
    /// The endpoints in a slow start (`ramp.rs`).
    ramps: ramp::Ramps,
    /// What the agents of endpoints with an agent check last said (`agents.rs`).
    agents_seen: FastMap<OwnerId, AgentSeen>,
}

/// Why a configuration cannot be applied: one line per problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct BuildError(pub Vec<String>);

/// The scheduler's parameters for a profile's check: its interval and optional pacing.
pub(crate) fn check_params(health: &HealthCheck) -> CheckParams {
    let p = health.pacing;
    CheckParams {
        interval: health.interval,
        fastinter: p.fast_interval,
        downinter: p.down_interval,
        initial_jitter: p.initial_jitter,
        jitter_percent: p.jitter_percent,
    }
}

/// An endpoint's name in the cluster's verdicts: the same on every node whose check of it asks
/// the same question (`question`, the check's identity less its timing), and different for
/// each profile that probes the same check (their thresholds may differ).
pub(crate) fn verdict_key(profile: &str, endpoint: &str, question: &str) -> u64 {
    let mut named = Vec::with_capacity(profile.len() + endpoint.len() + question.len() + 2);
    for part in [profile, endpoint, question] {
        named.extend_from_slice(part.as_bytes());
        named.push(0);
    }
    crate::hash::stable(&named)
}

impl Table {
    /// The profiles, in configuration order.
    pub fn profiles(&self) -> &[ProfileEntry] {
        &self.profiles
    }

    /// The probed endpoints, by owner id.
    pub fn targets(&self) -> &FastMap<OwnerId, Box<Target>> {
        &self.targets
    }

    /// The TLS endpoints' certificates as last seen.
    pub fn certs(&self) -> &FastMap<OwnerId, CertSeen> {
        &self.certs
    }

    /// The endpoints in a slow start.
    pub fn ramps(&self) -> &ramp::Ramps {
        &self.ramps
    }

    /// Points every target's name at `config`'s copy of the same string. A target that stayed
    /// through a reload (its endpoint and profile unchanged) kept the replaced config's copy,
    /// which then stayed alive beside the new config's: 6 MiB at 250k endpoints. `config` is
    /// the one the table was planned from, whose endpoints line up with each profile's owners.
    pub fn share_names(&mut self, config: &crate::config::Config) {
        for (entry, profile) in self.profiles.iter().zip(&config.profiles) {
            for (id, endpoint) in entry.owners.iter().zip(&profile.endpoints) {
                if let Some(t) = self.targets.get_mut(id) {
                    if !Arc::ptr_eq(&t.name, &endpoint.name) && t.name == endpoint.name {
                        t.name = endpoint.name.clone();
                    }
                }
            }
        }
    }

    /// The name of `t`'s profile.
    pub fn profile_of(&self, t: &Target) -> &Arc<str> {
        &self.profiles[t.profile_ix as usize].name
    }

    /// Derives the status of every endpoint of the profiles `dirty` names, their counts and
    /// their count of endpoints behind schedule, then the nested endpoints, which follow their
    /// children and may be nested in turn: rounds until nothing moves, at most one per profile
    /// (configurations have no loops). Eligibility is redone wherever a profile's status or
    /// fail-open may have moved. The other profiles' endpoints are not read: a reload that
    /// changes a few endpoints of a large fleet settles only their profiles.
    pub fn settle_some(&mut self, dirty: &[bool]) {
        let mut redo: Vec<bool> = (0..self.profiles.len()).map(|i| dirty.get(i) == Some(&true)).collect();
        for (p, _) in self.profiles.iter_mut().zip(&redo).filter(|(_, d)| **d) {
            p.counts = StatusCounts::default();
            p.behind = 0;
            for id in &p.owners {
                let t = self.targets.get_mut(id).expect("owners are targets");
                t.status = t.derive_status();
                p.counts.add(t.counts_as());
                p.behind += u64::from(t.should_probe() && t.behind());
            }
            for n in &p.nested {
                p.counts.add(n.status);
            }
            p.recount();
        }
        self.settle_nested(&mut redo);
        self.settle_eligibility(&redo);
    }

    /// Derives the nested endpoints' statuses from their children, in rounds until nothing
    /// moves (at most one per profile: configurations have no loops); marks in `redo` each
    /// profile whose nested endpoints moved.
    fn settle_nested(&mut self, redo: &mut [bool]) {
        for _ in 0..=self.profiles.len() {
            let mut moved = false;
            for (pix, redo) in redo.iter_mut().enumerate() {
                let enabled = self.profiles[pix].enabled();
                for nix in 0..self.profiles[pix].nested.len() {
                    let child = self.profiles[pix].nested[nix].child;
                    let status = self.profiles[pix].nested[nix].derive_status(enabled, &self.profiles[child]);
                    let p = &mut self.profiles[pix];
                    let was = std::mem::replace(&mut p.nested[nix].status, status);
                    if was != status {
                        // Its parents read its counts, not only its status.
                        p.counts.remove(was);
                        p.counts.add(status);
                        p.recount();
                        moved = true;
                        *redo = true;
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Redoes the eligibility of every endpoint, plain and nested, of the profiles `redo` marks.
    fn settle_eligibility(&mut self, redo: &[bool]) {
        for (p, _) in self.profiles.iter_mut().zip(redo).filter(|(_, d)| **d) {
            for id in &p.owners {
                let t = self.targets.get_mut(id).expect("owners are targets");
                t.eligible = t.eligible_in(p.fail_open);
            }
            for n in &mut p.nested {
                n.eligible = status::eligible(n.status, p.fail_open);
            }
        }
    }

    /// The profile named `name` and its index.
    pub fn profile(&self, name: &str) -> Option<(usize, &ProfileEntry)> {
        self.profiles.iter().enumerate().find(|(_, p)| &*p.name == name)
    }

    /// The endpoint `endpoint` of profile `profile`.
    pub fn find(&self, profile: &str, endpoint: &str) -> Option<OwnerId> {
        let (_, p) = self.profile(profile)?;
        p.owners.iter().copied().find(|id| &*self.targets[id].name == endpoint)
    }
}
