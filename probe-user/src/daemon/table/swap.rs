//! What a reload changed, as the stream must hear it: `Table::swap_in` replaces targets and
//! profiles; these compare the new table with what consumers saw before it and hand each
//! change to the runner as it is made.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{OwnerId, Stamp, Swapped, Table, Target};
use crate::{
    changes::{Change, ChangeKind, EndpointState, ProfileChange},
    hash::FastMap,
    status::ProfileStatus,
};

/// A profile's name and an endpoint's.
pub(crate) type Name = (Arc<str>, Arc<str>);

impl Table {
    /// The nested endpoints that appeared, went or changed with the new table, to `emit`.
    pub fn nested_changes(&self, before: &HashMap<Name, EndpointState>, at: Stamp, emit: &mut dyn FnMut(Change)) {
        let (at_unix_ms, now) = (at.unix_ms, at.ns);
        let mut live = HashSet::new();
        for p in &self.profiles {
            let protocol = p.cfg.health.protocol();
            for n in &p.nested {
                let key = (p.name.clone(), n.name.clone());
                let was = before.get(&key);
                live.insert(key);
                if was == Some(&n.state(protocol)) {
                    continue;
                }
                let from = was.map(|s| s.status);
                emit(Change::Endpoint(n.change(
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
            let change = crate::changes::EndpointChange::new(
                (profile, endpoint),
                ChangeKind::Config,
                Some(state.status),
                state.clone(),
                (at_unix_ms, now),
            );
            emit(Change::Endpoint(change.gone()));
        }
    }

    /// What a swap changed, to `emit` one at a time: the endpoints that went, the ones built anew (against
    /// their running selves of the same name), the untouched ones whose eligibility moved with
    /// their profile's fail-open, and the profiles whose status moved.
    pub fn swap_changes(
        &mut self,
        swapped: &Swapped,
        profiles_before: &[(Arc<str>, ProfileStatus, bool)],
        at: Stamp,
        emit: &mut dyn FnMut(Change),
    ) {
        let (at_unix_ms, now) = (at.unix_ms, at.ns);
        // By name, once: thousands of profiles looked up in a list, each, were millions of
        // comparisons per reload.
        let before_of: HashMap<&str, (ProfileStatus, bool)> = profiles_before
            .iter()
            .map(|(name, status, open)| (&**name, (*status, *open)))
            .collect();
        // By name: a start builds every target and has nothing gone to look up.
        let built: FastMap<Name, OwnerId> = if swapped.gone.is_empty() {
            FastMap::default()
        } else {
            swapped
                .built
                .iter()
                .map(|(id, _)| {
                    let t = &self.targets[id];
                    ((self.profile_of(t).clone(), t.name.clone()), *id)
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
                None => emit(Change::Endpoint(t.change(
                    profile,
                    ChangeKind::Config,
                    Some(t.status),
                    true,
                    at_unix_ms,
                    now,
                ))),
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
            emit(Change::Endpoint(change));
        };
        for (id, _) in &swapped.built {
            let t = self.targets.get_mut(id).expect("built targets are in the table");
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
                &self.profiles[t.profile_ix as usize].name,
                t,
                was.map(|(_, state)| state),
            );
        }
        // An untouched endpoint's own inputs are the same; only its profile's fail-open can
        // move its eligibility (through its own endpoints or a nested one's child).
        let flipped: Vec<(usize, bool)> = (self.profiles.iter().enumerate())
            .filter_map(|(pix, p)| {
                let &(_, open) = before_of.get(&*p.name)?;
                (open != p.fail_open).then_some((pix, open))
            })
            .collect();
        if !flipped.is_empty() {
            let built_ids: HashSet<OwnerId> = swapped.built.iter().map(|(id, _)| *id).collect();
            for (pix, open) in flipped {
                for id in &self.profiles[pix].owners {
                    let t = self.targets.get_mut(id).expect("owners are targets");
                    let was_eligible = t.eligible_in(open);
                    if was_eligible == t.eligible || built_ids.contains(id) {
                        continue;
                    }
                    let mut was = t.state();
                    was.eligible = was_eligible;
                    publish(&self.profiles[pix].name, t, Some(was));
                }
            }
        }
        for p in &self.profiles {
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
            emit(Change::Profile(change));
        }
        let live: HashSet<&str> = self.profiles.iter().map(|p| &*p.name).collect();
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
                emit(Change::Profile(change));
            }
        }
    }
}
