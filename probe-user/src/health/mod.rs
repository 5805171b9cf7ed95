//! The per-target threshold state machine: probe results in, state transitions out.
//!
//! Pure and clock-free: times come in with each [`Observation`] and go out in each [`Transition`].
pub mod window;

use std::{sync::Arc, time::Duration};

pub use crate::rules::Thresholds;
pub use window::{fail_window, mean_response_time, success_window, ProbeTiming};

use crate::schedule::Cadence;

/// Where a target stands (a new or re-enabled target starts in `CheckingEndpoint`): the
/// status model's `Health`, so no copy of it is kept here.
pub use crate::status::Health as HealthState;

/// One probe result, with the caller's monotonic (or virtual) times in nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub success: bool,
    pub started_ns: u64,
    /// When the answer came or the timeout fired.
    pub finished_ns: u64,
    /// The response time in whole microseconds (`Observation::micros`).
    pub response_us: u32,
    pub outcome: crate::outcome::Outcome,
    /// The detail behind the outcome, e.g. "open", "timeout connect", "status 503".
    pub reason: Arc<str>,
}

// Every target of a starting fleet holds one to its threshold of these at once: with the
// response time as a `Duration` it took 56 bytes.
const _: () = assert!(std::mem::size_of::<Observation>() <= 40);

impl Observation {
    /// `d` in whole microseconds, saturating at 71 minutes (past any timeout).
    pub fn micros(d: Duration) -> u32 {
        u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
    }

    pub fn response_time(&self) -> Duration {
        Duration::from_micros(u64::from(self.response_us))
    }
}

/// A state change and the evidence for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub from: HealthState,
    pub to: HealthState,
    /// The consecutive results that reached the threshold, oldest first; as many as the threshold.
    pub run: Vec<Observation>,
    /// `finished_ns` of the last result of the run: the moment of the transition.
    pub at_ns: u64,
    /// From the start of the run's first probe to the transition.
    pub measured_window: Duration,
    /// What SPEC section 3 predicts for the same thresholds and timing (mean response time of
    /// the run for a success window). Equal to `measured_window` when probes run back to back at
    /// plain `interval` spacing and every failure is a timeout.
    pub formula_window: Duration,
}

/// Threshold state of one target.
///
/// Only results that push toward a change are kept: a Healthy target seeing successes (or an
/// Unhealthy one seeing failures) changes nothing and drops any pending run of the other kind.
/// An Unhealthy target needs `healthy` consecutive successes to return, whatever its history.
#[derive(Debug, Clone)]
pub struct Tracker {
    /// Shared by every target of a profile (at a million targets, a copy each was 32 bytes).
    rules: Arc<Rules>,
    state: HealthState,
    /// Consecutive results of one kind toward a transition; never longer than its threshold.
    /// Empty, with no allocation, while results only confirm the state. A boxed slice, not a
    /// vector: it grows one result at a time anyway, so its length is its room, and every
    /// target holds one (16 bytes where a vector took 24).
    run: Box<[Observation]>,
}

/// What a tracker's transitions depend on: the thresholds, and the timing its windows are
/// predicted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub thresholds: Thresholds,
    pub timing: ProbeTiming,
}

impl Tracker {
    /// A tracker in `CheckingEndpoint`.
    #[cfg(test)]
    pub fn new(thresholds: Thresholds, timing: ProbeTiming) -> Self {
        Self::resume(&Arc::new(Rules { thresholds, timing }), HealthState::CheckingEndpoint)
    }

    /// A tracker that resumes a state known from before a restart or reload, nothing pending:
    /// a restart must not send a settled target back through CheckingEndpoint.
    pub fn resume(rules: &Arc<Rules>, state: HealthState) -> Self {
        Self {
            rules: rules.clone(),
            state,
            run: Box::default(),
        }
    }

    /// The same state and pending run under `rules` (equal to the current ones: only which
    /// shared copy it points to changes).
    pub fn with_rules(&self, rules: &Arc<Rules>) -> Self {
        debug_assert_eq!(*self.rules, **rules);
        Self {
            rules: rules.clone(),
            state: self.state,
            run: self.run.clone(),
        }
    }

    /// The same state under other `rules` (a reload changed the thresholds or the timing, or
    /// what the check asks), as the new check's starting point. With `keep_run` the results
    /// so far toward a change stay pending, at most one short of the new threshold (so the
    /// next result of the same kind completes it); without, they are dropped (they answered
    /// another question).
    pub fn rebase(&self, rules: &Arc<Rules>, keep_run: bool) -> Self {
        let run = match self.run.first() {
            Some(first) if keep_run => {
                let need = rules.thresholds.for_result(first.success) as usize;
                let keep = self.run.len().min(need.saturating_sub(1));
                self.run[self.run.len() - keep..].to_vec().into_boxed_slice()
            }
            _ => Box::default(),
        };
        Self {
            rules: rules.clone(),
            state: self.state,
            run,
        }
    }

    pub fn state(&self) -> HealthState {
        self.state
    }

    pub fn rules(&self) -> &Arc<Rules> {
        &self.rules
    }

    pub fn thresholds(&self) -> Thresholds {
        self.rules.thresholds
    }

    pub fn timing(&self) -> ProbeTiming {
        self.rules.timing
    }

    /// Consecutive results so far toward a transition (0 when the last result confirmed the state).
    pub fn pending(&self) -> usize {
        self.run.len()
    }

    /// The interval class the scheduler should use next (HAProxy fastinter / downinter).
    pub fn cadence(&self) -> Cadence {
        match (self.run.is_empty(), self.state) {
            (false, _) => Cadence::Transitioning,
            (true, HealthState::Unhealthy) => Cadence::Down,
            (true, _) => Cadence::Steady,
        }
    }

    /// Back to `CheckingEndpoint` with nothing pending, as for a re-enabled target.
    pub fn reset(&mut self) {
        self.state = HealthState::CheckingEndpoint;
        self.run = Box::default();
    }

    /// Feeds one probe result; returns the transition it completes, if any.
    pub fn observe(&mut self, obs: Observation) -> Option<Transition> {
        if confirms(self.state, obs.success) {
            // Nothing pending, nothing held: a flap's run is freed, not kept for the next one.
            self.run = Box::default();
            return None;
        }
        let mut run = std::mem::take(&mut self.run).into_vec();
        if run.first().is_some_and(|first| first.success != obs.success) {
            run = Vec::new();
        }
        let success = obs.success;
        let need = self.rules.thresholds.for_result(success) as usize;
        // Room for one more result at a time: every target of a starting fleet holds a run at
        // once, for most of the run with fewer results than its threshold (at 65k targets and
        // a threshold of 3, room for all three from the first result was 3 MB more at the
        // first round's peak; growing by doubling gave room for four). The reallocations come
        // once per result toward a state change, and going back to a box reallocates nothing.
        run.reserve_exact(1);
        run.push(obs);
        if run.len() < need {
            self.run = run.into_boxed_slice();
            return None;
        }
        let from = self.state;
        self.state = if success {
            HealthState::Healthy
        } else {
            HealthState::Unhealthy
        };
        Some(self.transition(from, run))
    }

    /// Takes the target out at once on evidence from outside its checks (passive detection's
    /// `obs`), whatever its thresholds: Unhealthy, with nothing pending, so it returns only
    /// after `healthy` consecutive successes of its own check. None when it is Unhealthy
    /// already. The transition's formula window is the checks' own failure window, for
    /// comparison.
    pub fn eject(&mut self, obs: Observation) -> Option<Transition> {
        if self.state == HealthState::Unhealthy {
            return None;
        }
        let from = self.state;
        self.state = HealthState::Unhealthy;
        self.run = Box::default();
        Some(self.transition(from, vec![obs]))
    }

    fn transition(&self, from: HealthState, run: Vec<Observation>) -> Transition {
        let first = run.first().expect("a transition needs at least one result");
        let last = run.last().expect("a transition needs at least one result");
        let measured_window = Duration::from_nanos(last.finished_ns.saturating_sub(first.started_ns));
        let formula_window = if last.success {
            let mean = mean_response_time(run.iter().map(Observation::response_time));
            success_window(mean, self.rules.timing.interval, self.rules.thresholds.healthy())
        } else {
            fail_window(
                self.rules.timing.timeout,
                self.rules.timing.interval,
                self.rules.thresholds.unhealthy(),
            )
        };
        Transition {
            from,
            to: self.state,
            at_ns: last.finished_ns,
            run,
            measured_window,
            formula_window,
        }
    }
}

/// True when a result of this kind only confirms the current state.
fn confirms(state: HealthState, success: bool) -> bool {
    matches!(
        (state, success),
        (HealthState::Healthy, true) | (HealthState::Unhealthy, false)
    )
}

#[cfg(test)]
mod tests;
