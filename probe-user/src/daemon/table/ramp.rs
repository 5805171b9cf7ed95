//! Slow starts in the table: which endpoint ramps, since when, and each ramp's steps. The
//! shape of a ramp is `status::ramp`'s; here an endpoint that gains its eligibility by its own
//! health and admin state starts one, one that loses it ends its own, and `Table::step_ramps`
//! moves each share when its next step is due (a heap of due steps: a thousand endpoints back
//! at once cost a thousand entries, not a walk of the fleet per step).
use std::{cmp::Reverse, collections::BinaryHeap};

use super::{OwnerId, Stamp, Swapped, Table, Target};
use crate::{
    changes::{Change, ChangeKind},
    hash::FastMap,
    status::{self, ramp, EndpointStatus},
};

/// The endpoints in a slow start.
#[derive(Default)]
pub(crate) struct Ramps {
    /// Endpoint -> when its ramp started (the runner's clock).
    started: FastMap<OwnerId, u64>,
    /// (when, endpoint, the start of its ramp then): each ramp's next step. An entry whose ramp
    /// ended or started again since is skipped when it comes up.
    due: BinaryHeap<Reverse<(u64, OwnerId, u64)>>,
}

impl Ramps {
    /// When the next step is due, if any ramp runs.
    pub fn next_due(&self) -> Option<u64> {
        self.due.peek().map(|Reverse((at, ..))| *at)
    }

    /// After `t`'s eligibility was redone at `at_ns` (it was `was_eligible`): one that gained it
    /// by its own health and admin state starts a ramp of `period_ns`, unless it is its quiet
    /// first verdict (`Target::quiet_start`); fail-open is no return to traffic and starts
    /// none. One that lost it ends its ramp.
    pub(super) fn follow(&mut self, id: OwnerId, t: &mut Target, was_eligible: bool, period_ns: u64, at_ns: u64) {
        if !t.eligible {
            if t.ramp < ramp::FULL {
                t.ramp = ramp::FULL;
                self.started.remove(&id);
            }
        } else if !was_eligible && period_ns > 0 && !t.quiet_start() && status::eligible_as(t.admin(), t.status, false)
        {
            t.ramp = ramp::permille(0, period_ns);
            self.started.insert(id, at_ns);
            if let Some(next) = ramp::next_step_ns(0, period_ns) {
                self.due.push(Reverse((at_ns.saturating_add(next), id, at_ns)));
            }
        }
        if t.status != EndpointStatus::CheckingEndpoint {
            t.flags.set(super::target::Flags::QUIET_START, false);
        }
    }
}

impl Table {
    /// Takes the ramp steps due by `at`: each endpoint's share moves to where its ramp stands
    /// now, one change of kind SlowStart each. A ramp ends when it is whole, when its endpoint
    /// went or is out of rotation, or when its profile's `slow_start` became 0.
    pub fn step_ramps(&mut self, at: Stamp) -> super::Changed {
        let mut out = super::Changed::default();
        while let Some(&Reverse((due, id, start))) = self.ramps.due.peek() {
            if due > at.ns {
                break;
            }
            self.ramps.due.pop();
            if self.ramps.started.get(&id) != Some(&start) {
                continue;
            }
            let Some(t) = self.targets.get_mut(&id) else {
                self.ramps.started.remove(&id);
                continue;
            };
            let p = &self.profiles[t.profile_ix as usize];
            let period = p.cfg.slow_start_ns();
            let elapsed = at.ns.saturating_sub(start);
            let now = if t.eligible {
                ramp::permille(elapsed, period)
            } else {
                ramp::FULL
            };
            match ramp::next_step_ns(elapsed, period).filter(|_| now < ramp::FULL) {
                Some(next) => self.ramps.due.push(Reverse((start.saturating_add(next), id, start))),
                None => {
                    self.ramps.started.remove(&id);
                }
            }
            if now != t.ramp {
                t.ramp = now;
                out.push(Change::Endpoint(t.change(
                    &p.name,
                    ChangeKind::SlowStart,
                    Some(t.status),
                    false,
                    at.unix_ms,
                    at.ns,
                )));
            }
        }
        out
    }

    /// After a swap (a reload, a fleet batch), once statuses are settled at `at_ns`: each
    /// endpoint built anew follows its eligibility from its running self's (or from none, for a
    /// new one), so that a reload that undrains or re-enables one ramps it as the API would; and
    /// every running ramp is due now, so that a changed `slow_start` takes effect at once.
    pub fn ramp_swapped(&mut self, swapped: &Swapped, at_ns: u64) {
        let was: FastMap<OwnerId, bool> = swapped
            .gone
            .iter()
            .filter(|(id, ..)| self.targets.contains_key(id))
            .map(|(id, _, t)| (*id, t.eligible))
            .collect();
        for (id, _) in &swapped.built {
            let Some(t) = self.targets.get_mut(id) else {
                continue;
            };
            let period = self.profiles[t.profile_ix as usize].cfg.slow_start_ns();
            let was_eligible = was.get(id).copied().unwrap_or(false);
            self.ramps.follow(*id, t, was_eligible, period, at_ns);
        }
        if !self.ramps.started.is_empty() {
            self.ramps.due = self
                .ramps
                .started
                .iter()
                .map(|(&id, &start)| Reverse((at_ns, id, start)))
                .collect();
        }
    }
}
