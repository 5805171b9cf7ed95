//! The one door to an endpoint's state. Its inputs (a probe's result, its admin state, its
//! profile's `enabled`, its cluster share) change through the methods here, and its status,
//! eligibility and last change, its profile's counts, status and fail-open, and the nested
//! endpoints that follow the profile catch up in `restatus` and `cascade`, which return the
//! changes to publish in the order consumers must see them. The runner publishes them and
//! does the rest (scheduling, gossip); nothing outside this folder writes a target's fields.
use std::sync::Arc;

use super::{target::Flags, OwnerId, ProfileEntry, Table, Target};
use crate::{
    changes::{micros_as_ms, Change, ChangeKind, EndpointChange, ProfileChange, TransitionDetail},
    cluster::aggregate::Verdict,
    daemon::{
        checks::ProbeReport,
        views::{LastChange, LastResult},
    },
    health::{Observation, Tracker, Transition},
    outcome::Outcome,
    schedule::{Cadence, CheckId},
    status::{self, AdminState, EndpointStatus, Health, ProfileStatus},
};

/// When a change happened: the runner's monotonic instant and the wall-clock time it stands
/// for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub ns: u64,
    pub unix_ms: u64,
}

/// What a change of inputs did: the changes to publish, in order, and whether an endpoint's
/// status moved (the state file then has news).
#[derive(Debug, Default)]
#[must_use = "the changes must be published"]
pub(crate) struct Changed {
    pub changes: Vec<Change>,
    pub moved: bool,
}

impl Changed {
    pub(super) fn push(&mut self, change: Change) {
        self.changes.push(change);
    }

    fn extend(&mut self, other: Changed) {
        self.changes.extend(other.changes);
        self.moved |= other.moved;
    }
}

/// Whether an endpoint was probed before a change of its inputs and is after: the runner
/// registers or removes its check to match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Probed {
    pub was: bool,
    pub is: bool,
}

/// An admin or share change the table has made whose statuses have not caught up: the runner
/// registers or removes each endpoint's check as `probing` says, then hands it back to
/// `Table::settle`, which brings every status, count, nested endpoint and parent up to date
/// and says what to publish. The door has two steps because a status depends on the check
/// being registered; it cannot be left half-open, since this must be used.
#[must_use = "statuses catch up only in Table::settle, once the checks follow `probing`"]
pub(crate) struct Unsettled {
    /// Each endpoint whose probing may have changed, and how, in `owners` order.
    pub probing: Vec<(OwnerId, Probed)>,
    kind: ChangeKind,
    /// A whole profile's change: its index, and its status and fail-open before.
    profile: Option<(usize, (ProfileStatus, bool))>,
    /// Each endpoint's change is published even when its status, admin state and
    /// eligibility stayed (an agent's weight alone moved).
    always: bool,
}

impl Unsettled {
    /// One endpoint's change of `kind`, published whatever moved.
    pub(super) fn one(id: OwnerId, probed: Probed, kind: ChangeKind) -> Unsettled {
        Unsettled {
            probing: vec![(id, probed)],
            kind,
            profile: None,
            always: true,
        }
    }
}

/// What one probe result brought to one owner of its check.
pub(crate) struct Recorded {
    pub profile_ix: u32,
    /// Its tracker's verdict changed (a threshold was reached).
    pub transition: Option<Transition>,
    /// The pace its tracker asks of the check now.
    pub cadence: Cadence,
}

impl Table {
    /// Records a probe's result for target `id`: its last result, its round trip when it was
    /// healthy, how late the probe started (its profile's count of endpoints behind in step),
    /// and, when the result is a verdict on the backend (not a local error nor a lost
    /// probe), its tracker. None when `id` is gone.
    pub fn record(
        &mut self,
        id: OwnerId,
        report: &ProbeReport,
        obs: &Observation,
        late_ns: u64,
        at_unix_ms: u64,
    ) -> Option<Recorded> {
        let t = self.targets.get_mut(&id)?;
        if report.healthy {
            t.last_rtt = super::Rtt::of(report.elapsed);
        }
        let rtt_us = Observation::micros(report.elapsed);
        match &mut t.last {
            // The same reason as last time, as it mostly is: no new string.
            Some(last) if *last.reason == *report.reason => {
                last.ok = report.healthy;
                last.outcome = report.outcome;
                last.rtt_us = rtt_us;
                last.at_unix_ms = at_unix_ms;
            }
            last => {
                *last = Some(LastResult {
                    ok: report.healthy,
                    outcome: report.outcome,
                    reason: report.reason.clone(),
                    rtt_us,
                    at_unix_ms,
                });
            }
        }
        let transition = if report.outcome.is_verdict() {
            t.tracker.observe(obs.clone())
        } else {
            None
        };
        note_late(&mut self.profiles, t, late_ns);
        Some(Recorded {
            profile_ix: t.profile_ix,
            transition,
            cadence: t.tracker.cadence(),
        })
    }

    /// Ejects target `id` on passive detection's evidence `obs`: its last result says why and
    /// its tracker goes Unhealthy (`Tracker::eject`). The transition, for the runner to
    /// publish as any verdict; None when it is gone or down already.
    pub fn eject(&mut self, id: OwnerId, obs: Observation, at_unix_ms: u64) -> Option<Transition> {
        let t = self.targets.get_mut(&id)?;
        let tr = t.tracker.eject(obs.clone())?;
        t.last = Some(LastResult {
            ok: false,
            outcome: obs.outcome,
            reason: obs.reason,
            rtt_us: 0,
            at_unix_ms,
        });
        Some(tr)
    }

    /// Records that target `id`'s probe was lost (no result within its timeout and a
    /// grace): its last result says so, its health stays. Its profile's index, None when gone.
    pub fn record_lost(&mut self, id: OwnerId, reason: &Arc<str>, rtt_us: u32, at_unix_ms: u64) -> Option<u32> {
        let t = self.targets.get_mut(&id)?;
        t.last = Some(LastResult {
            ok: false,
            outcome: Outcome::Lost,
            reason: reason.clone(),
            rtt_us,
            at_unix_ms,
        });
        Some(t.profile_ix)
    }

    /// Sets how late target `id`'s last probe started (0 once it is no longer probed),
    /// keeping its profile's count of endpoints behind in step.
    pub fn note_late(&mut self, id: OwnerId, late_ns: u64) {
        if let Some(t) = self.targets.get_mut(&id) {
            note_late(&mut self.profiles, t, late_ns);
        }
    }

    /// Records that target `id`'s check is `check` in the scheduler (None: no longer probed).
    /// Returns the check it had.
    pub fn set_check(&mut self, id: OwnerId, check: Option<CheckId>) -> Option<CheckId> {
        let t = self.targets.get_mut(&id)?;
        std::mem::replace(&mut t.check, check)
    }

    /// Sets the API's admin override of endpoint `id` (none when `state` is the configured
    /// one). An endpoint probed again starts over in CheckingEndpoint (SPEC 4). Its status
    /// catches up in `settle`, once the runner has registered or removed its check.
    pub fn set_admin(&mut self, id: OwnerId, state: AdminState) -> Unsettled {
        // To or from drain, what it counts as moves with its status unchanged.
        if let Some(t) = self.targets.get(&id) {
            let (before, after) = (t.counts_as(), status::counted(t.agent.admin_over(state), t.status));
            if before != after {
                let p = &mut self.profiles[t.profile_ix as usize];
                p.counts.remove(before);
                p.counts.add(after);
            }
        }
        let probed = self.probing_change(id, true, |t| {
            t.admin_override = (state != t.config_admin).then_some(state);
        });
        Unsettled {
            probing: vec![(id, probed)],
            kind: ChangeKind::Admin,
            profile: None,
            always: false,
        }
    }

    /// Sets the API's override of profile `ix`'s `enabled` and passes it to its endpoints,
    /// whose statuses, nested endpoints and parents catch up in `settle`.
    pub fn set_profile_enabled(&mut self, ix: usize, enabled: bool) -> Unsettled {
        let entry = &mut self.profiles[ix];
        let before = (entry.status, entry.fail_open);
        entry.set_enabled(enabled);
        // Without endpoints no restatus follows to recount it.
        if entry.owners.is_empty() && entry.nested.is_empty() {
            entry.recount();
        }
        let owners = entry.owners.clone();
        let probing = owners
            .into_iter()
            .map(|id| {
                (
                    id,
                    self.probing_change(id, true, |t| t.flags.set(Flags::PROFILE_ENABLED, enabled)),
                )
            })
            .collect();
        Unsettled {
            probing,
            kind: ChangeKind::Admin,
            profile: Some((ix, before)),
            always: false,
        }
    }

    /// Brings everything `unsettled` moved up to date (at `at`): each endpoint's status, its
    /// profile's counts and fail-open and the profile, then for a whole profile's change its
    /// nested endpoints, its own change when no endpoint carried it, and the profiles it is
    /// nested in.
    pub fn settle(&mut self, unsettled: Unsettled, at: Stamp) -> Changed {
        let mut out = Changed::default();
        for &(id, _) in &unsettled.probing {
            out.extend(self.restatus_as(id, unsettled.kind, at, None, unsettled.always));
        }
        if let Some((ix, before)) = unsettled.profile {
            for nix in 0..self.profiles[ix].nested.len() {
                out.extend(self.renest(ix, nix, at));
            }
            // A profile without endpoints has no endpoint change to carry its own.
            if unsettled.probing.is_empty() && self.profiles[ix].nested.is_empty() {
                out.changes.extend(self.profile_change(ix, before, at));
            }
            // Its status stands for it in the profiles it is nested in.
            out.extend(self.cascade(ix, at));
        }
        out
    }

    /// Starts endpoint `id` over in CheckingEndpoint (SPEC 4: re-enabled, or known but not
    /// probed and back after a reload).
    pub fn start_over(&mut self, id: OwnerId) {
        if let Some(t) = self.targets.get_mut(&id) {
            t.tracker.reset();
        }
    }

    /// Whether this node is one of endpoint `id`'s probers now (`[cluster]`). One it takes
    /// over starts from the cluster's verdict, not from CheckingEndpoint: a check that only
    /// changed hands does not flap.
    pub fn set_owned(&mut self, id: OwnerId, owned: bool) -> Unsettled {
        let probed = self.probing_change(id, false, |t| {
            if owned && !t.owned() {
                let start = t.cluster_health.unwrap_or(Health::CheckingEndpoint);
                let rules = t.tracker.rules().clone();
                t.tracker = Tracker::resume(&rules, start);
            }
            t.flags.set(Flags::OWNED, owned);
        });
        Unsettled {
            probing: vec![(id, probed)],
            kind: ChangeKind::Cluster,
            profile: None,
            always: false,
        }
    }

    /// Sets the verdict this node gossips for endpoint `id` and the cluster's aggregate that
    /// stands for its health; true when the aggregate moved (`restatus` then follows).
    #[must_use = "a moved aggregate needs the endpoint's restatus"]
    pub fn set_cluster_health(&mut self, id: OwnerId, sent: Option<Verdict>, health: Option<Health>) -> bool {
        let Some(t) = self.targets.get_mut(&id) else {
            return false;
        };
        t.cluster_sent = sent;
        std::mem::replace(&mut t.cluster_health, health) != health
    }

    /// Applies `f` to endpoint `id` and says how its probing changed; one probed again
    /// starts over in CheckingEndpoint when `start_over`.
    pub(super) fn probing_change(&mut self, id: OwnerId, start_over: bool, f: impl FnOnce(&mut Target)) -> Probed {
        let Some(t) = self.targets.get_mut(&id) else {
            return Probed { was: false, is: false };
        };
        let was = t.should_probe();
        f(t);
        let is = t.should_probe();
        if start_over && is && !was {
            t.tracker.reset();
        }
        Probed { was, is }
    }

    /// Brings endpoint `id` up to date after its health, admin state or share changed (at
    /// `at`): its status, its profile's counts and fail-open, the other endpoints of its
    /// profile whose eligibility fail-open flipped, the profile, and the nested endpoints
    /// that follow it. O(1) unless fail-open flips. `detail` is the threshold's evidence
    /// when its own verdict moved.
    pub fn restatus(
        &mut self,
        id: OwnerId,
        kind: ChangeKind,
        at: Stamp,
        detail: Option<Arc<TransitionDetail>>,
    ) -> Changed {
        self.restatus_as(id, kind, at, detail, false)
    }

    /// `restatus`, publishing the endpoint's change even when nothing consumers see moved
    /// past it when `always`.
    fn restatus_as(
        &mut self,
        id: OwnerId,
        kind: ChangeKind,
        at: Stamp,
        detail: Option<Arc<TransitionDetail>>,
        always: bool,
    ) -> Changed {
        let mut out = Changed::default();
        let Some(t) = self.targets.get_mut(&id) else {
            return out;
        };
        let Some(p) = self.profiles.get_mut(t.profile_ix as usize) else {
            return out;
        };
        let (old_status, old_state) = (t.status, t.state());
        let new_status = t.derive_status();
        if new_status != old_status {
            p.counts.remove(status::counted(t.admin(), old_status));
            t.status = new_status;
            p.counts.add(t.counts_as());
        }
        let (old_profile, old_fail_open) = p.recount();
        let was_eligible = t.eligible;
        t.eligible = t.eligible_in(p.fail_open);
        self.ramps.follow(id, t, was_eligible, p.cfg.slow_start_ns(), at.ns);
        let moved = new_status != old_status;
        if moved {
            t.last_change = Some(LastChange {
                at_unix_ms: at.unix_ms,
                kind,
                from: Some(old_status),
                to: new_status,
                measured_window_us: detail
                    .as_ref()
                    .map_or(0, |d| micros_as_ms::micros(d.measured_window_ms)),
                formula_window_us: detail.as_ref().map_or(0, |d| micros_as_ms::micros(d.formula_window_ms)),
            });
            out.moved = true;
        }
        // An admin change that leaves the status alone (under a disabled profile, say) is
        // still a change of what consumers see.
        if detail.is_none() && !always && t.state() == old_state {
            return out;
        }
        out.push(Change::Endpoint(EndpointChange {
            transition: detail,
            ..t.change(&p.name, kind, Some(old_status), false, at.unix_ms, at.ns)
        }));
        let profile_ix = t.profile_ix as usize;
        if self.profiles[profile_ix].fail_open != old_fail_open {
            self.flip_fail_open(profile_ix, Some(id), None, at, &mut out);
        }
        out.changes
            .extend(self.profile_change(profile_ix, (old_profile, old_fail_open), at));
        if moved {
            out.extend(self.cascade(profile_ix, at));
        }
        out
    }

    /// Profile `child`'s endpoints changed: the nested endpoints that stand for it in other
    /// profiles catch up, and their parents' in turn.
    pub fn cascade(&mut self, child: usize, at: Stamp) -> Changed {
        let mut out = Changed::default();
        let Some(places) = self.parents.get(&child).cloned() else {
            return out;
        };
        for (pix, nix) in places {
            out.extend(self.renest(pix, nix, at));
        }
        out
    }

    /// Brings nested endpoint `nix` of profile `pix` up to date with its child and parent,
    /// as `restatus` does for a probed endpoint.
    pub fn renest(&mut self, pix: usize, nix: usize, at: Stamp) -> Changed {
        let mut out = Changed::default();
        let enabled = self.profiles[pix].enabled();
        let child = self.profiles[pix].nested[nix].child;
        let new_status = self.profiles[pix].nested[nix].derive_status(enabled, &self.profiles[child]);
        let p = &mut self.profiles[pix];
        let old_status = p.nested[nix].status;
        if new_status == old_status {
            return out;
        }
        p.counts.remove(old_status);
        p.counts.add(new_status);
        let (old_profile, old_fail_open) = p.recount();
        let (fail_open, protocol) = (p.fail_open, p.cfg.health.protocol());
        let n = &mut p.nested[nix];
        n.status = new_status;
        n.eligible = status::eligible(new_status, fail_open);
        n.last_change = Some(LastChange {
            at_unix_ms: at.unix_ms,
            kind: ChangeKind::Health,
            from: Some(old_status),
            to: new_status,
            measured_window_us: 0,
            formula_window_us: 0,
        });
        out.push(Change::Endpoint(n.change(
            &p.name,
            protocol,
            ChangeKind::Health,
            Some(old_status),
            (at.unix_ms, at.ns),
        )));
        out.moved = true;
        if fail_open != old_fail_open {
            self.flip_fail_open(pix, None, Some(nix), at, &mut out);
        }
        out.changes
            .extend(self.profile_change(pix, (old_profile, old_fail_open), at));
        out.extend(self.cascade(pix, at));
        out
    }

    /// Profile `pix`'s status and fail-open, as a change, if they differ from `before`.
    pub fn profile_change(&self, pix: usize, before: (ProfileStatus, bool), at: Stamp) -> Option<Change> {
        let p = &self.profiles[pix];
        ((p.status, p.fail_open) != before).then(|| {
            Change::Profile(ProfileChange {
                seq: 0,
                at_unix_ms: at.unix_ms,
                profile: p.name.clone(),
                from: Some(before.0),
                to: Some(p.status),
                fail_open: p.fail_open,
            })
        })
    }

    /// Fail-open of a profile flipped: every Degraded endpoint, probed or nested, but the one
    /// already published changed eligibility without changing status.
    fn flip_fail_open(
        &mut self,
        profile_ix: usize,
        except: Option<OwnerId>,
        except_nested: Option<usize>,
        at: Stamp,
        out: &mut Changed,
    ) {
        let p = &mut self.profiles[profile_ix];
        let fail_open = p.fail_open;
        let protocol = p.cfg.health.protocol();
        for (nix, n) in p.nested.iter_mut().enumerate() {
            if Some(nix) == except_nested || n.status != EndpointStatus::Degraded {
                continue;
            }
            n.eligible = status::eligible(n.status, fail_open);
            out.push(Change::Endpoint(n.change(
                &p.name,
                protocol,
                ChangeKind::FailOpen,
                Some(n.status),
                (at.unix_ms, at.ns),
            )));
        }
        let p = &self.profiles[profile_ix];
        for id in p.owners.iter().filter(|id| Some(**id) != except) {
            let t = self.targets.get_mut(id).expect("owners are targets");
            if t.status != EndpointStatus::Degraded {
                continue;
            }
            t.eligible = t.eligible_in(fail_open);
            out.push(Change::Endpoint(t.change(
                &p.name,
                ChangeKind::FailOpen,
                Some(t.status),
                false,
                at.unix_ms,
                at.ns,
            )));
        }
    }
}

/// Sets how late target `t`'s last probe started, keeping its profile's count of endpoints
/// behind in step (`t` is one of `profiles`' targets, borrowed apart from them).
fn note_late(profiles: &mut [ProfileEntry], t: &mut Target, late_ns: u64) {
    let was = t.behind();
    t.late_us = u32::try_from(late_ns / 1_000).unwrap_or(u32::MAX);
    if was == t.behind() {
        return;
    }
    if let Some(p) = profiles.get_mut(t.profile_ix as usize) {
        if t.behind() {
            p.behind += 1;
        } else {
            p.behind = p.behind.saturating_sub(1);
        }
    }
}
