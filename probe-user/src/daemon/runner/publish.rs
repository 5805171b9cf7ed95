//! The one place where an endpoint's status, its profile's aggregate and fail-open catch up
//! with a change of their inputs, and where the resulting changes enter the stream.
use crate::changes::{micros_as_ms, Change, ChangeKind, EndpointChange, ProfileChange, TransitionDetail};
use std::sync::Arc;

use super::Runner;
use crate::{
    daemon::{table::OwnerId, views::LastChange},
    status::{self, EndpointStatus, ProfileStatus},
};

impl Runner {
    /// Brings endpoint `id` up to date after its health or admin state changed (at `at_ns`),
    /// and publishes what changed: the endpoint, the other endpoints of its profile whose
    /// eligibility fail-open flipped, and the profile. O(1) unless fail-open flips.
    pub(in crate::daemon) fn restatus(
        &mut self,
        id: OwnerId,
        kind: ChangeKind,
        at_ns: u64,
        detail: Option<Arc<TransitionDetail>>,
    ) {
        let now = self.now();
        let at_unix_ms = self.ports.clock.unix_ms_at(at_ns);
        let Some(t) = self.table.targets.get_mut(&id) else {
            return;
        };
        let Some(p) = self.table.profiles.get_mut(t.profile_ix as usize) else {
            return;
        };
        let profile = p.name.clone();
        let (old_status, old_state) = (t.status, t.state());
        let new_status = t.derive_status();
        if new_status != old_status {
            p.counts.remove(old_status);
            p.counts.add(new_status);
            t.status = new_status;
        }
        let (old_profile, old_fail_open) = p.recount();
        t.eligible = status::eligible(new_status, p.fail_open);
        if new_status != old_status {
            t.last_change = Some(LastChange {
                at_unix_ms,
                kind,
                from: Some(old_status),
                to: new_status,
                measured_window_us: detail
                    .as_ref()
                    .map_or(0, |d| micros_as_ms::micros(d.measured_window_ms)),
                formula_window_us: detail.as_ref().map_or(0, |d| micros_as_ms::micros(d.formula_window_ms)),
            });
            self.persist.dirty = true;
        }
        // An admin change that leaves the status alone (under a disabled profile, say) is
        // still a change of what consumers see.
        if detail.is_none() && t.state() == old_state {
            return;
        }
        let change = Change::Endpoint(EndpointChange {
            transition: detail,
            ..t.change(&profile, kind, Some(old_status), false, at_unix_ms, at_ns)
        });
        let profile_ix = t.profile_ix as usize;
        let moved = new_status != old_status;
        self.changes.publish_next(change, now);
        if self.table.profiles[profile_ix].fail_open != old_fail_open {
            self.flip_fail_open(profile_ix, Some(id), None, at_ns);
        }
        self.publish_profile(profile_ix, (old_profile, old_fail_open), at_ns);
        if moved {
            self.cascade(profile_ix, at_ns);
        }
    }

    /// Profile `child`'s endpoints changed: the nested endpoints that stand for it in other
    /// profiles catch up, and their parents' in turn.
    pub(in crate::daemon) fn cascade(&mut self, child: usize, at_ns: u64) {
        let Some(places) = self.table.parents.get(&child).cloned() else {
            return;
        };
        for (pix, nix) in places {
            self.renest(pix, nix, at_ns);
        }
    }

    /// Brings nested endpoint `nix` of profile `pix` up to date with its child and parent, and
    /// publishes what changed, as `restatus` does for a probed endpoint.
    pub(in crate::daemon) fn renest(&mut self, pix: usize, nix: usize, at_ns: u64) {
        let now = self.now();
        let at_unix_ms = self.ports.clock.unix_ms_at(at_ns);
        let enabled = self.table.profiles[pix].enabled();
        let child = self.table.profiles[pix].nested[nix].child;
        let new_status = self.table.profiles[pix].nested[nix].derive_status(enabled, &self.table.profiles[child]);
        let p = &mut self.table.profiles[pix];
        let old_status = p.nested[nix].status;
        if new_status == old_status {
            return;
        }
        p.counts.remove(old_status);
        p.counts.add(new_status);
        let (old_profile, old_fail_open) = p.recount();
        let (fail_open, protocol) = (p.fail_open, p.cfg.health.protocol());
        let n = &mut p.nested[nix];
        n.status = new_status;
        n.eligible = status::eligible(new_status, fail_open);
        n.last_change = Some(LastChange {
            at_unix_ms,
            kind: ChangeKind::Health,
            from: Some(old_status),
            to: new_status,
            measured_window_us: 0,
            formula_window_us: 0,
        });
        let change = Change::Endpoint(n.change(
            &p.name,
            protocol,
            ChangeKind::Health,
            Some(old_status),
            (at_unix_ms, at_ns),
        ));
        self.persist.dirty = true;
        self.changes.publish_next(change, now);
        if fail_open != old_fail_open {
            self.flip_fail_open(pix, None, Some(nix), at_ns);
        }
        self.publish_profile(pix, (old_profile, old_fail_open), at_ns);
        self.cascade(pix, at_ns);
    }

    /// Publishes profile `pix`'s status and fail-open if they differ from `before`.
    pub(in crate::daemon) fn publish_profile(&mut self, pix: usize, before: (ProfileStatus, bool), at_ns: u64) {
        let p = &self.table.profiles[pix];
        if (p.status, p.fail_open) == before {
            return;
        }
        let change = Change::Profile(ProfileChange {
            seq: 0,
            at_unix_ms: self.ports.clock.unix_ms_at(at_ns),
            profile: p.name.clone(),
            from: Some(before.0),
            to: Some(p.status),
            fail_open: p.fail_open,
        });
        let now = self.now();
        self.changes.publish_next(change, now);
    }

    /// Fail-open of a profile flipped: every Degraded endpoint, probed or nested, but the one
    /// already published changed eligibility without changing status.
    fn flip_fail_open(&mut self, profile_ix: usize, except: Option<OwnerId>, except_nested: Option<usize>, at_ns: u64) {
        let now = self.now();
        let at_unix_ms = self.ports.clock.unix_ms_at(at_ns);
        let p = &mut self.table.profiles[profile_ix];
        let fail_open = p.fail_open;
        let protocol = p.cfg.health.protocol();
        let mut changes = Vec::new();
        for (nix, n) in p.nested.iter_mut().enumerate() {
            if Some(nix) == except_nested || n.status != EndpointStatus::Degraded {
                continue;
            }
            n.eligible = status::eligible(n.status, fail_open);
            changes.push(Change::Endpoint(n.change(
                &p.name,
                protocol,
                ChangeKind::FailOpen,
                Some(n.status),
                (at_unix_ms, at_ns),
            )));
        }
        let p = &self.table.profiles[profile_ix];
        for id in p.owners.iter().filter(|id| Some(**id) != except) {
            let t = self.table.targets.get_mut(id).expect("owners are targets");
            if t.status != EndpointStatus::Degraded {
                continue;
            }
            t.eligible = status::eligible(t.status, fail_open);
            changes.push(Change::Endpoint(t.change(
                &p.name,
                ChangeKind::FailOpen,
                Some(t.status),
                false,
                at_unix_ms,
                at_ns,
            )));
        }
        for c in changes {
            self.changes.publish_next(c, now);
        }
    }
}
