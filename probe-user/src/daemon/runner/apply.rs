//! Swapping in a plan: checks of endpoints that stay keep their schedule, the rest are
//! registered or removed, and every endpoint or profile whose state changed is published.
use crate::changes::{Change, ChangeKind, EndpointState, ProfileChange};
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{Runner, SchedKey};
use crate::{
    daemon::table::{OwnerId, Plan, Swapped, Target},
    hash::FastMap,
    status::{self, ProfileStatus},
};

type Name = (Arc<str>, Arc<str>);

impl Runner {
    pub(in crate::daemon) fn apply(&mut self, mut plan: Plan) {
        // Profile indices may change even for targets whose checks stay.
        self.epoch += 1;
        self.cluster_share(&mut plan);
        let now = self.now();
        let nested_before: HashMap<Name, EndpointState> = self
            .table
            .profiles
            .iter()
            .flat_map(|p| {
                let protocol = p.cfg.health.protocol();
                p.nested
                    .iter()
                    .map(move |n| ((p.name.clone(), n.name.clone()), n.state(protocol)))
            })
            .collect();
        let profiles_before: Vec<(Arc<str>, ProfileStatus, bool)> = self
            .table
            .profiles
            .iter()
            .map(|p| (p.name.clone(), p.status, p.fail_open))
            .collect();
        let swapped = self.table.swap_in(plan);
        for (id, _, t) in &swapped.gone {
            // A check that did not move to a successor ends with its target.
            if let Some(check) = t.check {
                self.drop_check(*id, check);
            }
        }
        // After the gone checks have freed their places, which the new ones take first.
        self.sched.reserve(swapped.built.len());
        for &(id, was_probed) in &swapped.built {
            let t = self.table.targets.get_mut(&id).expect("built targets are in the table");
            match (t.check, t.should_probe()) {
                (Some(_), false) => self.unregister(id),
                (None, true) => {
                    // A target that was known but not probed comes back: SPEC "re-enabled
                    // starts in CheckingEndpoint". A new or resumed one keeps what the plan
                    // gave it.
                    if was_probed == Some(false) {
                        t.tracker.reset();
                    }
                    self.register(id, now);
                }
                _ => {}
            }
        }
        self.table.settle_some(&swapped.dirty);
        self.publish_table_changes(&swapped, &profiles_before, now);
        self.publish_nested_changes(&nested_before, now);
        self.cluster_applied();
        self.persist.table_replaced();
    }

    /// Publishes the nested endpoints that appeared, went or changed with the new table.
    fn publish_nested_changes(&mut self, before: &HashMap<Name, EndpointState>, now: u64) {
        let at_unix_ms = self.ports.clock.unix_ms();
        let mut changes = Vec::new();
        let mut live = HashSet::new();
        for p in &self.table.profiles {
            let protocol = p.cfg.health.protocol();
            for n in &p.nested {
                let key = (p.name.clone(), n.name.clone());
                let was = before.get(&key);
                live.insert(key);
                if was == Some(&n.state(protocol)) {
                    continue;
                }
                let from = was.map(|s| s.status);
                changes.push(Change::Endpoint(n.change(
                    &p.name,
                    protocol,
                    ChangeKind::Config,
                    from,
                    (at_unix_ms, now),
                )));
            }
        }
        for ((profile, endpoint), state) in before {
            if live.contains(&(profile.clone(), endpoint.clone())) {
                continue;
            }
            changes.push(Change::Endpoint(crate::changes::EndpointChange {
                seq: 0,
                at_unix_ms,
                at_ns: now,
                kind: ChangeKind::Config,
                profile: profile.clone(),
                endpoint: endpoint.clone(),
                from: Some(state.status),
                state: state.clone(),
                removed: true,
                transition: None,
            }));
        }
    }

    /// Publishes what a swap changed: the endpoints that went, the ones built anew (against
    /// their running selves of the same name), the untouched ones whose eligibility moved with
    /// their profile's fail-open, and the profiles whose status moved.
    fn publish_table_changes(
        &mut self,
        swapped: &Swapped,
        profiles_before: &[(Arc<str>, ProfileStatus, bool)],
        now: u64,
    ) {
        let at_unix_ms = self.ports.clock.unix_ms();
        // By name, once: thousands of profiles looked up in a list, each, were millions of
        // comparisons per reload.
        let before_of: HashMap<&str, (ProfileStatus, bool)> = profiles_before
            .iter()
            .map(|(name, status, open)| (&**name, (*status, *open)))
            .collect();
        // Each change goes out as it is made: at a start a list of them all was a fleet's worth
        // of changes at once (8 MB at 65k endpoints), made even with no subscriber to take them.
        let bus = &mut self.changes;
        // By name: a start builds every target and has nothing gone to look up.
        let built: FastMap<Name, OwnerId> = if swapped.gone.is_empty() {
            FastMap::default()
        } else {
            swapped
                .built
                .iter()
                .map(|(id, _)| {
                    let t = &self.table.targets[id];
                    ((self.table.profile_of(t).clone(), t.name.clone()), *id)
                })
                .collect()
        };
        // Endpoints gone first: one rebuilt under its name is published once, below.
        let mut before: FastMap<OwnerId, (OwnerId, EndpointState)> = FastMap::default();
        for (id, profile, t) in &swapped.gone {
            match built.get(&(profile.clone(), t.name.clone())) {
                Some(successor) => {
                    before.insert(*successor, (*id, t.state()));
                }
                None => bus.publish_next(
                    Change::Endpoint(t.change(profile, ChangeKind::Config, Some(t.status), true, at_unix_ms, now)),
                    now,
                ),
            }
        }
        let mut publish = |profile: &Arc<str>, t: &mut Target, was: Option<EndpointState>| {
            // An endpoint that appears has no status to change from: its last change stays
            // what it was (none, or the one resumed from the state file).
            if let Some(b) = was.as_ref().filter(|b| b.status != t.status) {
                t.last_change = Some(crate::daemon::views::LastChange {
                    at_unix_ms,
                    kind: ChangeKind::Config,
                    from: Some(b.status),
                    to: t.status,
                    measured_window_us: 0,
                    formula_window_us: 0,
                });
            }
            let from = was.map(|b| b.status);
            let change = t.change(profile, ChangeKind::Config, from, false, at_unix_ms, now);
            bus.publish_next(Change::Endpoint(change), now);
        };
        for (id, _) in &swapped.built {
            let t = self.table.targets.get_mut(id).expect("built targets are in the table");
            // Anything a consumer sees (address, port, weight, admin, status, eligibility) or a
            // new check (a new id) is a change.
            let was = before.remove(id);
            if was
                .as_ref()
                .is_some_and(|(was_id, state)| was_id == id && *state == t.state())
            {
                continue;
            }
            publish(
                &self.table.profiles[t.profile_ix as usize].name,
                t,
                was.map(|(_, state)| state),
            );
        }
        // An untouched endpoint's own inputs are the same; only its profile's fail-open can
        // move its eligibility (through its own endpoints or a nested one's child).
        let flipped: Vec<(usize, bool)> = (self.table.profiles.iter().enumerate())
            .filter_map(|(pix, p)| {
                let &(_, open) = before_of.get(&*p.name)?;
                (open != p.fail_open).then_some((pix, open))
            })
            .collect();
        if !flipped.is_empty() {
            let built_ids: HashSet<OwnerId> = swapped.built.iter().map(|(id, _)| *id).collect();
            for (pix, open) in flipped {
                for id in &self.table.profiles[pix].owners {
                    let t = self.table.targets.get_mut(id).expect("owners are targets");
                    let was_eligible = status::eligible(t.status, open);
                    if was_eligible == t.eligible || built_ids.contains(id) {
                        continue;
                    }
                    let mut was = t.state();
                    was.eligible = was_eligible;
                    publish(&self.table.profiles[pix].name, t, Some(was));
                }
            }
        }
        for p in &self.table.profiles {
            let was = before_of.get(&*p.name);
            if was == Some(&(p.status, p.fail_open)) {
                continue;
            }
            let change = ProfileChange {
                seq: 0,
                at_unix_ms,
                profile: p.name.clone(),
                from: was.map(|(status, _)| *status),
                to: Some(p.status),
                fail_open: p.fail_open,
            };
            self.changes.publish_next(Change::Profile(change), now);
        }
        let live: HashSet<&str> = self.table.profiles.iter().map(|p| &*p.name).collect();
        for (name, status, _) in profiles_before {
            if !live.contains(&**name) {
                let change = ProfileChange {
                    seq: 0,
                    at_unix_ms,
                    profile: name.clone(),
                    from: Some(*status),
                    to: None,
                    fail_open: false,
                };
                self.changes.publish_next(Change::Profile(change), now);
            }
        }
    }

    pub(in crate::daemon) fn register(&mut self, owner: OwnerId, now: u64) {
        self.epoch += 1;
        let t = self.table.targets.get_mut(&owner).expect("registered targets exist");
        let key = SchedKey { spec: t.spec.clone() };
        let params = crate::daemon::table::check_params(&self.table.profiles[t.profile_ix as usize].cfg.health);
        match self.sched.add(owner, key, params, now) {
            Ok(id) => t.check = Some(id),
            Err(e) => log::error!(
                "cannot schedule {}/{} ({}): {e}",
                self.table.profiles[t.profile_ix as usize].name,
                t.name,
                t.spec.target()
            ),
        }
    }

    pub(in crate::daemon) fn unregister(&mut self, owner: OwnerId) {
        self.epoch += 1;
        let Some(t) = self.table.targets.get_mut(&owner) else {
            return;
        };
        let Some(id) = t.check.take() else {
            return;
        };
        // Not probed any more: it is not behind schedule either.
        super::pace::note_late(&mut self.table.profiles, t, 0);
        self.drop_check(owner, id);
    }

    /// Takes `owner` off check `id` in the scheduler (the check goes with its last owner).
    fn drop_check(&mut self, owner: OwnerId, id: crate::schedule::CheckId) {
        self.epoch += 1;
        let _ = self.sched.remove(&owner, id);
    }
}
