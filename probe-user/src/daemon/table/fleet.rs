//! A fleet API batch in the table: one profile's endpoints put in place, added and removed,
//! at a cost in proportion to the batch. The profile's counts move by what went and what came
//! (`settle_fleet`), where a reload's `settle_some` recounts every endpoint of the profiles it
//! touched; only a flip of the profile's fail-open walks its endpoints, as it must.
use super::{
    plan::{build_one, Gone, Running},
    OwnerId, Swapped, Table, Target,
};
use crate::{
    config::Endpoint,
    daemon::{checks::Specs, state::Saved},
};

impl Table {
    /// A target for `endpoint` in profile `pix`: carried over from the one at `at` in the
    /// profile's owners when its check still looks at the same (`plan::Running::keeps`), else
    /// new (its id from `next_id`). Nothing in the table changes.
    pub(crate) fn build_fleet(
        &self,
        specs: &mut Specs<'_>,
        pix: usize,
        endpoint: &Endpoint,
        at: Option<usize>,
        next_id: &mut OwnerId,
    ) -> Result<(OwnerId, Box<Target>), String> {
        let entry = &self.profiles[pix];
        let running = at
            .map(|j| entry.owners[j])
            .and_then(|id| self.targets.get(&id).map(|target| Running { id, target }));
        // The profile runs: a new endpoint joins its traffic.
        let built = build_one(specs, endpoint, entry, pix, running, &Saved::default(), next_id);
        let (id, _, t) = super::plan::joins(built, true)?;
        Ok((id, t))
    }

    /// Puts `t` (id `id`) at place `at` of profile `pix`'s endpoints, or after them; what it
    /// replaced goes to `swapped.gone` (its check moved over when the check is the same).
    pub(crate) fn fleet_put(
        &mut self,
        pix: usize,
        at: Option<usize>,
        id: OwnerId,
        mut t: Box<Target>,
        swapped: &mut Swapped,
    ) {
        let p = &mut self.profiles[pix];
        let was = match at {
            Some(j) => {
                let old_id = std::mem::replace(&mut p.owners[j], id);
                let mut old = self.targets.remove(&old_id).expect("owners are targets");
                if old.spec.key() == t.spec.key() {
                    t.check = old.check.take();
                }
                let probed = old.should_probe();
                swapped.gone.push((old_id, p.name.clone(), old));
                (old_id == id).then_some(probed)
            }
            None => {
                p.owners.push(id);
                None
            }
        };
        self.targets.insert(id, t);
        swapped.built.push((id, was));
    }

    /// Removes the endpoint at place `at` of profile `pix`: the last takes its place, as
    /// `Vec::swap_remove` (and the profile's endpoints in the config beside it) does.
    pub(crate) fn fleet_remove(&mut self, pix: usize, at: usize, swapped: &mut Swapped) {
        let p = &mut self.profiles[pix];
        let id = p.owners.swap_remove(at);
        let t = self.targets.remove(&id).expect("owners are targets");
        swapped.gone.push((id, p.name.clone(), t));
    }

    /// Profile `pix`'s counts, status and fail-open after a batch: less what went (`gone`),
    /// plus what came (`built`, whose status is derived here); eligibility for the built ones,
    /// or for every endpoint when fail-open flipped; then the nested endpoints that follow it.
    pub(crate) fn settle_fleet(&mut self, pix: usize, gone: &[Gone], built: &[(OwnerId, Option<bool>)]) {
        let p = &mut self.profiles[pix];
        for (_, _, t) in gone {
            p.counts.remove(t.counts_as());
            p.behind -= u64::from(t.should_probe() && t.behind());
        }
        for (id, _) in built {
            let t = self.targets.get_mut(id).expect("built targets are in the table");
            t.status = t.derive_status();
            p.counts.add(t.counts_as());
            p.behind += u64::from(t.should_probe() && t.behind());
        }
        let (_, was_open) = p.recount();
        let flipped = was_open != p.fail_open;
        let open = p.fail_open;
        if flipped {
            for id in &p.owners {
                let t = self.targets.get_mut(id).expect("owners are targets");
                t.eligible = t.eligible_in(open);
            }
        } else {
            for (id, _) in built {
                let t = self.targets.get_mut(id).expect("built targets are in the table");
                t.eligible = t.eligible_in(open);
            }
        }
        // Its parents: their nested endpoints follow its counts.
        let mut redo = vec![false; self.profiles.len()];
        self.settle_nested(&mut redo);
        redo[pix] = false;
        self.settle_eligibility(&redo);
    }
}
