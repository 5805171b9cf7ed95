//! Swapping in a built table: checks of endpoints that stay keep their schedule, the rest are
//! registered or removed, and every endpoint or profile whose state changed is published.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use super::{Runner, SchedKey};
use crate::{
    daemon::{
        changes::{Change, ChangeKind, EndpointState, ProfileChange},
        table::{OwnerId, Table},
    },
    hash::FastMap,
    status::ProfileStatus,
};

/// What the running table said of an endpoint before a new one replaced it, by name: an
/// endpoint whose check changed gets a new id but is the same endpoint to consumers.
struct Before {
    id: OwnerId,
    state: EndpointState,
}

type Name = (Arc<str>, Arc<str>);

impl Runner {
    pub(in crate::daemon) fn apply(&mut self, mut table: Table) {
        // Profile indices may change even for targets whose checks stay.
        self.epoch += 1;
        self.cluster_assign(&mut table);
        let now = self.now();
        let old_ids: Vec<OwnerId> = self.table.targets.keys().copied().collect();
        for id in old_ids {
            let keep = table.targets.get(&id).is_some_and(|t| t.should_probe());
            let check = self.table.targets[&id].check;
            match (check, table.targets.get_mut(&id)) {
                (Some(check), Some(new)) if keep => new.check = Some(check),
                (Some(_), new) => {
                    self.unregister(id);
                    if let Some(new) = new {
                        new.check = None;
                    }
                }
                (None, _) => {}
            }
        }
        let was_probed: FastMap<OwnerId, bool> = self
            .table
            .targets
            .iter()
            .map(|(id, t)| (*id, t.should_probe()))
            .collect();
        let before: HashMap<Name, Before> = self
            .table
            .targets
            .iter()
            .map(|(id, t)| {
                let b = Before {
                    id: *id,
                    state: t.state(),
                };
                ((t.profile.clone(), t.name.clone()), b)
            })
            .collect();
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
        let old = std::mem::replace(&mut self.table, table);
        let mut reset = false;
        let ids: Vec<OwnerId> = self.table.targets.keys().copied().collect();
        for id in ids {
            let t = &self.table.targets[&id];
            if t.should_probe() && t.check.is_none() {
                // A target that was known but not probed comes back: SPEC "re-enabled starts in
                // CheckingEndpoint". A new or resumed one keeps what `build` gave it.
                if was_probed.get(&id) == Some(&false) {
                    self.table.targets.get_mut(&id).expect("listed").tracker.reset();
                    reset = true;
                }
                self.register(id, now);
            }
        }
        if reset {
            self.table.settle();
        }
        self.publish_table_changes(&old, &before, &profiles_before, now);
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
            changes.push(Change::Endpoint(crate::daemon::changes::EndpointChange {
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
        for c in changes {
            self.publish(c, now);
        }
    }

    /// Publishes what changed between the old table and the one now live.
    fn publish_table_changes(
        &mut self,
        old: &Table,
        before: &HashMap<Name, Before>,
        profiles_before: &[(Arc<str>, ProfileStatus, bool)],
        now: u64,
    ) {
        let at_unix_ms = self.ports.clock.unix_ms();
        let mut changes = Vec::new();
        // Endpoints gone first: an endpoint whose check changed is published once, below.
        let live: HashSet<(&str, &str)> = self.table.targets.values().map(|t| (&*t.profile, &*t.name)).collect();
        for t in old.targets.values() {
            if !live.contains(&(&*t.profile, &*t.name)) {
                changes.push(Change::Endpoint(t.change(
                    ChangeKind::Config,
                    Some(t.status),
                    true,
                    at_unix_ms,
                    now,
                )));
            }
        }
        drop(live);
        for p in &self.table.profiles {
            for id in &p.owners {
                let t = self.table.targets.get_mut(id).expect("owners are targets");
                // Anything a consumer sees (address, port, weight, admin, status, eligibility)
                // or a new check (a new id) is a change.
                let from = before.get(&(t.profile.clone(), t.name.clone()));
                if from.is_some_and(|b| b.id == *id && b.state == t.state()) {
                    continue;
                }
                // An endpoint that appears has no status to change from: its last change stays
                // what it was (none, or the one resumed from the state file).
                if let Some(b) = from.filter(|b| b.state.status != t.status) {
                    t.last_change = Some(crate::daemon::views::LastChange {
                        at_unix_ms,
                        kind: ChangeKind::Config,
                        from: Some(b.state.status),
                        to: t.status,
                        measured_window_ms: 0.0,
                        formula_window_ms: 0.0,
                    });
                }
                let from = from.map(|b| b.state.status);
                changes.push(Change::Endpoint(t.change(
                    ChangeKind::Config,
                    from,
                    false,
                    at_unix_ms,
                    now,
                )));
            }
        }
        for p in &self.table.profiles {
            let was = profiles_before.iter().find(|(name, ..)| *name == p.name);
            if was.is_some_and(|(_, status, open)| *status == p.status && *open == p.fail_open) {
                continue;
            }
            changes.push(Change::Profile(ProfileChange {
                seq: 0,
                at_unix_ms,
                profile: p.name.clone(),
                from: was.map(|(_, status, _)| *status),
                to: Some(p.status),
                fail_open: p.fail_open,
            }));
        }
        for (name, status, _) in profiles_before {
            if self.table.profile(name).is_none() {
                changes.push(Change::Profile(ProfileChange {
                    seq: 0,
                    at_unix_ms,
                    profile: name.clone(),
                    from: Some(*status),
                    to: None,
                    fail_open: false,
                }));
            }
        }
        for c in changes {
            self.publish(c, now);
        }
    }

    pub(in crate::daemon) fn register(&mut self, owner: OwnerId, now: u64) {
        self.epoch += 1;
        let t = self.table.targets.get_mut(&owner).expect("registered targets exist");
        let key = SchedKey {
            key: t.check_key.clone(),
            spec: t.spec.clone(),
        };
        match self.sched.add(owner, key, t.params, now) {
            Ok(id) => t.check = Some(id),
            Err(e) => log::error!("cannot schedule {}: {e}", t.check_key),
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
        let _ = self.sched.remove(&owner, id);
    }
}
