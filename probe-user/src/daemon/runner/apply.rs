//! Swapping in a plan: checks of endpoints that stay keep their schedule, the rest are
//! registered or removed, and every endpoint or profile whose state changed is published.
use crate::changes::EndpointState;
use std::{collections::HashMap, sync::Arc};

use super::{Runner, SchedKey};
use crate::{
    daemon::table::{Name, OwnerId, Plan, Swapped, Table},
    status::ProfileStatus,
};

/// What `Runner::before_swap` keeps.
pub(in crate::daemon) struct Before {
    nested: HashMap<Name, EndpointState>,
    profiles: Vec<(Arc<str>, ProfileStatus, bool)>,
}

impl Runner {
    pub(in crate::daemon) fn apply(&mut self, mut plan: Plan) {
        // Profile indices may change even for targets whose checks stay.
        self.probe.epoch += 1;
        self.cluster_share(&mut plan);
        let before = self.before_swap();
        let swapped = self.table.swap_in(plan);
        self.after_swap(&swapped, &before, |table, swapped| table.settle_some(&swapped.dirty));
    }

    /// What consumers saw of the profiles and nested endpoints before a swap, for
    /// `after_swap` to tell what moved.
    pub(in crate::daemon) fn before_swap(&self) -> Before {
        let nested = self
            .table
            .profiles()
            .iter()
            .flat_map(|p| {
                let protocol = p.cfg.health.protocol();
                p.nested
                    .iter()
                    .map(move |n| ((p.name.clone(), n.name.clone()), n.state(protocol)))
            })
            .collect();
        let profiles = self
            .table
            .profiles()
            .iter()
            .map(|p| (p.name.clone(), p.status, p.fail_open))
            .collect();
        Before { nested, profiles }
    }

    /// After targets were swapped in (a reload's plan, a fleet batch): the checks of the gone
    /// ones end, the built ones' start, `settle` derives statuses, and every change is
    /// published.
    pub(in crate::daemon) fn after_swap(
        &mut self,
        swapped: &Swapped,
        before: &Before,
        settle: impl FnOnce(&mut Table, &Swapped),
    ) {
        let now = self.now();
        self.passive.dirty = true;
        for (id, _, t) in &swapped.gone {
            // A check that did not move to a successor ends with its target.
            if let Some(check) = t.check() {
                self.drop_check(*id, check);
            }
        }
        // After the gone checks have freed their places, which the new ones take first.
        self.probe.sched.reserve(swapped.built.len());
        for &(id, was_probed) in &swapped.built {
            let t = &self.table.targets()[&id];
            match (t.check(), t.should_probe()) {
                (Some(_), false) => self.unregister(id),
                (None, true) => {
                    // A target that was known but not probed comes back: SPEC "re-enabled
                    // starts in CheckingEndpoint". A new or resumed one keeps what the plan
                    // gave it.
                    if was_probed == Some(false) {
                        self.table.start_over(id);
                    }
                    self.register(id, now);
                }
                _ => {}
            }
        }
        settle(&mut self.table, swapped);
        self.table.ramp_swapped(swapped, now);
        // Each change goes out as it is made: at a start a list of them all was a fleet's
        // worth at once (8 MB at 65k endpoints), made even with no subscriber to take them.
        let stamp = self.stamp(now);
        let bus = &mut self.changes;
        let mut emit = |change| bus.publish_next(change, now);
        self.table.swap_changes(swapped, &before.profiles, stamp, &mut emit);
        self.table.nested_changes(&before.nested, stamp, &mut emit);
        self.cluster_applied();
        self.sync_agents(now);
        self.persist.table_replaced();
    }

    pub(in crate::daemon) fn register(&mut self, owner: OwnerId, now: u64) {
        self.probe.epoch += 1;
        let t = &self.table.targets()[&owner];
        let key = SchedKey { spec: t.spec().clone() };
        let profile = &self.table.profiles()[t.profile_ix() as usize];
        let params = crate::daemon::table::check_params(&profile.cfg.health);
        match self.probe.sched.add(owner, key, params, now) {
            Ok(id) => {
                self.table.set_check(owner, Some(id));
            }
            Err(e) => log::error!(
                "cannot schedule {}/{} ({}): {e}",
                profile.name,
                t.name(),
                t.spec().target()
            ),
        }
    }

    pub(in crate::daemon) fn unregister(&mut self, owner: OwnerId) {
        self.probe.epoch += 1;
        let Some(id) = self.table.set_check(owner, None) else {
            return;
        };
        // Not probed any more: it is not behind schedule either.
        self.table.note_late(owner, 0);
        self.drop_check(owner, id);
    }

    /// Takes `owner` off check `id` in the scheduler (the check goes with its last owner).
    fn drop_check(&mut self, owner: OwnerId, id: crate::schedule::CheckId) {
        self.probe.epoch += 1;
        let _ = self.probe.sched.remove(&owner, id);
    }
}
