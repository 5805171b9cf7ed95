//! Tests of the threshold state machine on a virtual clock, and a property test against a model.
use super::*;
use crate::outcome::Outcome;
use crate::rules::Dialect;
use proptest::prelude::*;

const MS: Duration = Duration::from_millis(1);
const S: Duration = Duration::from_secs(1);

/// A target probed back to back: each probe starts `interval` after the previous one finished.
struct VirtualProber {
    timing: ProbeTiming,
    clock_ns: u64,
}

impl VirtualProber {
    fn new(timing: ProbeTiming, start_ns: u64) -> Self {
        Self {
            timing,
            clock_ns: start_ns,
        }
    }

    /// A success answered after `rt`, or a failure that ran into the timeout.
    fn probe(&mut self, success: bool, rt: Duration) -> Observation {
        let took = if success { rt } else { self.timing.timeout };
        let started_ns = self.clock_ns;
        let finished_ns = started_ns + nanos(took);
        self.clock_ns = finished_ns + nanos(self.timing.interval);
        Observation {
            success,
            started_ns,
            finished_ns,
            response_us: Observation::micros(took),
            outcome: if success { Outcome::Open } else { Outcome::Timeout },
            reason: if success { "open".into() } else { "timeout".into() },
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

fn timing(interval: Duration, timeout: Duration) -> ProbeTiming {
    ProbeTiming { interval, timeout }
}

/// Thresholds from every setting each dialect accepts.
fn all_dialects() -> Vec<Thresholds> {
    let mut all = Vec::new();
    for healthy in 1..=10 {
        for unhealthy in 1..=10 {
            all.push(Thresholds::lb(healthy, unhealthy).unwrap());
        }
    }
    all.extend((0..=9).map(|tolerated| Thresholds::tm(tolerated).unwrap()));
    all.extend((2..=10).map(|threshold| Thresholds::ga(threshold).unwrap()));
    all
}

/// Feeds `n` results of one kind and returns the index (1-based) of the one that transitioned.
fn transitions_after(tracker: &mut Tracker, prober: &mut VirtualProber, success: bool, n: u32) -> Option<u32> {
    let mut at = None;
    for i in 1..=n {
        if let Some(t) = tracker.observe(prober.probe(success, MS)) {
            assert!(at.is_none(), "two transitions in one run of {n}");
            at = Some(i);
            assert_eq!(
                t.run.len() as u32,
                i,
                "the run carries exactly the results that caused it"
            );
        }
    }
    at
}

#[test]
fn every_threshold_of_every_dialect_transitions_exactly_at_the_threshold() {
    let timing = timing(20 * MS, 50 * MS);
    for th in all_dialects() {
        let (h, u) = (th.healthy(), th.unhealthy());

        // From CheckingEndpoint, in both directions.
        for success in [true, false] {
            let mut tracker = Tracker::new(th, timing);
            let mut prober = VirtualProber::new(timing, 0);
            let want = th.for_result(success);
            assert_eq!(
                transitions_after(&mut tracker, &mut prober, success, want + 5),
                Some(want),
                "{th} from CheckingEndpoint, success={success}"
            );
        }

        // Healthy -> Unhealthy -> Healthy.
        let mut tracker = Tracker::new(th, timing);
        let mut prober = VirtualProber::new(timing, 0);
        transitions_after(&mut tracker, &mut prober, true, h);
        assert_eq!(tracker.state(), HealthState::Healthy);
        assert_eq!(
            transitions_after(&mut tracker, &mut prober, false, u + 3),
            Some(u),
            "{th}"
        );
        assert_eq!(tracker.state(), HealthState::Unhealthy);
        assert_eq!(
            transitions_after(&mut tracker, &mut prober, true, h + 3),
            Some(h),
            "{th}"
        );
        assert_eq!(tracker.state(), HealthState::Healthy);
    }
}

#[test]
fn a_result_of_the_other_kind_resets_the_run() {
    let timing = timing(2 * S, 5 * S);
    let mut tracker = Tracker::new(Thresholds::lb(3, 3).unwrap(), timing);
    let mut prober = VirtualProber::new(timing, 0);
    // Healthy first.
    assert_eq!(transitions_after(&mut tracker, &mut prober, true, 3), Some(3));
    // fail, fail, ok, fail, fail: never three in a row.
    for success in [false, false, true, false, false] {
        assert_eq!(tracker.observe(prober.probe(success, MS)), None);
    }
    assert_eq!(tracker.state(), HealthState::Healthy);
    assert_eq!(tracker.pending(), 2);
    let t = tracker
        .observe(prober.probe(false, MS))
        .expect("third consecutive failure");
    assert_eq!((t.from, t.to), (HealthState::Healthy, HealthState::Unhealthy));
    assert!(t.run.iter().all(|o| !o.success && &*o.reason == "timeout"));
}

#[test]
fn checking_endpoint_switches_runs_and_first_threshold_wins() {
    let timing = timing(2 * S, 5 * S);
    let mut tracker = Tracker::new(Thresholds::lb(2, 3).unwrap(), timing);
    let mut prober = VirtualProber::new(timing, 0);
    assert_eq!(tracker.observe(prober.probe(false, MS)), None);
    assert_eq!(tracker.observe(prober.probe(false, MS)), None);
    assert_eq!(tracker.observe(prober.probe(true, MS)), None, "resets the failure run");
    let t = tracker.observe(prober.probe(true, MS)).unwrap();
    assert_eq!((t.from, t.to), (HealthState::CheckingEndpoint, HealthState::Healthy));
    assert_eq!(t.run.len(), 2);
}

#[test]
fn confirming_results_change_nothing_and_drop_the_pending_run() {
    let timing = timing(2 * S, 5 * S);
    let mut tracker = Tracker::new(Thresholds::lb(2, 2).unwrap(), timing);
    let mut prober = VirtualProber::new(timing, 0);
    transitions_after(&mut tracker, &mut prober, true, 2);
    for _ in 0..100 {
        assert_eq!(tracker.observe(prober.probe(true, MS)), None);
        assert_eq!(tracker.pending(), 0, "successes on a Healthy target are not stored");
    }
    assert_eq!(tracker.observe(prober.probe(false, MS)), None);
    assert_eq!(tracker.cadence(), Cadence::Transitioning);
    assert_eq!(tracker.observe(prober.probe(true, MS)), None);
    assert_eq!((tracker.pending(), tracker.cadence()), (0, Cadence::Steady));
    transitions_after(&mut tracker, &mut prober, false, 2);
    assert_eq!(
        (tracker.state(), tracker.cadence()),
        (HealthState::Unhealthy, Cadence::Down)
    );
    assert_eq!(tracker.observe(prober.probe(true, MS)), None);
    assert_eq!(tracker.cadence(), Cadence::Transitioning, "going back up");
}

#[test]
fn reset_returns_to_checking_endpoint() {
    let timing = timing(2 * S, 5 * S);
    let mut tracker = Tracker::new(Thresholds::lb(1, 1).unwrap(), timing);
    let mut prober = VirtualProber::new(timing, 0);
    tracker.observe(prober.probe(false, MS)).unwrap();
    tracker.reset();
    assert_eq!((tracker.state(), tracker.pending()), (HealthState::CheckingEndpoint, 0));
}

/// Runs `n` results of one kind back to back from t0 and returns the transition they cause.
fn run_to_transition(dialect: Dialect, timing: ProbeTiming, success: bool, rt: Duration) -> Transition {
    let mut tracker = Tracker::new(dialect.default_thresholds(), timing);
    // Start somewhere arbitrary: the windows are relative to the first probe of the run.
    let mut prober = VirtualProber::new(timing, 1_234_567_890);
    if !success {
        // Make the fail window start from Healthy, as in the seeds.
        while tracker.state() != HealthState::Healthy {
            tracker.observe(prober.probe(true, rt));
        }
    }
    let start = prober.clock_ns;
    loop {
        if let Some(t) = tracker.observe(prober.probe(success, rt)) {
            assert_eq!(t.run.first().unwrap().started_ns, start);
            return t;
        }
    }
}

#[test]
fn worked_example_lb_fail_19s() {
    let t = run_to_transition(Dialect::Lb, timing(2 * S, 5 * S), false, MS);
    assert_eq!(t.to, HealthState::Unhealthy);
    assert_eq!(t.measured_window, 19 * S);
    assert_eq!(t.formula_window, 19 * S);
}

#[test]
fn worked_example_lb_success_7s() {
    let t = run_to_transition(Dialect::Lb, timing(2 * S, 5 * S), true, S);
    assert_eq!((t.from, t.to), (HealthState::CheckingEndpoint, HealthState::Healthy));
    assert_eq!(t.measured_window, 7 * S);
    assert_eq!(t.formula_window, 7 * S);
}

#[test]
fn worked_example_ga_13s_and_7s() {
    let ga = timing(2 * S, 3 * S);
    let down = run_to_transition(Dialect::Ga, ga, false, MS);
    assert_eq!((down.measured_window, down.formula_window), (13 * S, 13 * S));
    let up = run_to_transition(Dialect::Ga, ga, true, S);
    assert_eq!((up.measured_window, up.formula_window), (7 * S, 7 * S));
}

#[test]
fn worked_example_tm_degraded_at_the_fourth_failure() {
    let tm = timing(30 * S, 10 * S);
    let t = run_to_transition(Dialect::Tm, tm, false, MS);
    assert_eq!(t.run.len(), 4);
    assert_eq!((t.measured_window, t.formula_window), (130 * S, 130 * S));
    // And one success brings it back.
    let mut tracker = Tracker::new(Dialect::Tm.default_thresholds(), tm);
    let mut prober = VirtualProber::new(tm, 0);
    assert_eq!(transitions_after(&mut tracker, &mut prober, false, 4), Some(4));
    assert_eq!(transitions_after(&mut tracker, &mut prober, true, 1), Some(1));
}

#[test]
fn success_window_uses_the_mean_response_time_of_the_run() {
    let timing = timing(2 * S, 5 * S);
    let mut tracker = Tracker::new(Thresholds::lb(3, 3).unwrap(), timing);
    let mut prober = VirtualProber::new(timing, 0);
    tracker.observe(prober.probe(true, 500 * MS));
    tracker.observe(prober.probe(true, S));
    let t = tracker.observe(prober.probe(true, 1500 * MS)).unwrap();
    assert_eq!(t.formula_window, 7 * S);
    assert_eq!(t.measured_window, 7 * S);
    assert_eq!(t.at_ns, prober.clock_ns - nanos(timing.interval));
}

/// The obvious counter-based reading of SPEC section 3, to compare against.
struct Model {
    healthy: u32,
    unhealthy: u32,
    state: HealthState,
    successes: u32,
    failures: u32,
}

impl Model {
    fn step(&mut self, success: bool) -> Option<(HealthState, HealthState)> {
        if success {
            self.successes += 1;
            self.failures = 0;
        } else {
            self.failures += 1;
            self.successes = 0;
        }
        let to = match self.state {
            HealthState::CheckingEndpoint | HealthState::Unhealthy if self.successes == self.healthy => {
                HealthState::Healthy
            }
            HealthState::CheckingEndpoint | HealthState::Healthy if self.failures == self.unhealthy => {
                HealthState::Unhealthy
            }
            _ => return None,
        };
        let from = self.state;
        self.state = to;
        self.successes = 0;
        self.failures = 0;
        Some((from, to))
    }

    fn pending(&self) -> u32 {
        match self.state {
            HealthState::CheckingEndpoint => self.successes.max(self.failures),
            HealthState::Healthy => self.failures,
            HealthState::Unhealthy => self.successes,
        }
    }
}

proptest! {
    #[test]
    fn tracker_matches_the_counter_model(
        healthy in 1u32..=10,
        unhealthy in 1u32..=10,
        results in proptest::collection::vec((any::<bool>(), 0u64..5_000), 0..300),
    ) {
        let timing = timing(20 * MS, 50 * MS);
        let mut tracker = Tracker::new(Thresholds::lb(healthy, unhealthy).unwrap(), timing);
        let mut model = Model { healthy, unhealthy, state: HealthState::CheckingEndpoint, successes: 0, failures: 0 };
        let mut prober = VirtualProber::new(timing, 0);
        for (success, rt_us) in results {
            let got = tracker.observe(prober.probe(success, Duration::from_micros(rt_us)));
            let want = model.step(success);
            prop_assert_eq!(got.as_ref().map(|t| (t.from, t.to)), want);
            prop_assert_eq!(tracker.state(), model.state);
            prop_assert_eq!(tracker.pending() as u32, model.pending());
            prop_assert!(tracker.pending() as u32 <= healthy.max(unhealthy));
            if let Some(t) = got {
                let threshold = if t.to == HealthState::Healthy { healthy } else { unhealthy };
                prop_assert_eq!(t.run.len() as u32, threshold);
                prop_assert!(t.run.iter().all(|o| o.success == (t.to == HealthState::Healthy)));
                // Back-to-back probes at interval spacing: the measurement is the formula, up to
                // the rounding of the mean response time to whole nanoseconds.
                let gap = t.measured_window.abs_diff(t.formula_window);
                prop_assert!(gap <= Duration::from_nanos(threshold.into()), "gap {:?}", gap);
            }
        }
    }
}

/// A run holds room for the results it has, one more at a time, and nothing once a result
/// confirms the state again: a fleet of a million starting targets holds a run each.
#[test]
fn a_run_holds_room_for_its_results_and_nothing_once_confirmed() {
    let timing = ProbeTiming {
        interval: S,
        timeout: 500 * MS,
    };
    let mut t = Tracker::new(Thresholds::lb(2, 3).unwrap(), timing);
    let mut p = VirtualProber::new(timing, 0);
    assert!(t.run.is_empty(), "a new tracker allocates nothing");
    assert!(t.observe(p.probe(true, MS)).is_none());
    assert_eq!(t.run.len(), 1);
    assert!(t.observe(p.probe(true, MS)).is_some(), "healthy after two");
    assert!(t.run.is_empty(), "the run went with the transition");
    assert!(t.observe(p.probe(false, MS)).is_none());
    assert!(t.observe(p.probe(false, MS)).is_none());
    assert_eq!(t.run.len(), 2, "two failures of the three that make it unhealthy");
    let last = t.observe(p.probe(false, MS)).expect("unhealthy after three");
    assert_eq!(
        (last.run.len(), last.run.capacity()),
        (3, 3),
        "the evidence, no spare room"
    );
    assert!(t.observe(p.probe(true, MS)).is_none());
    assert!(t.observe(p.probe(false, MS)).is_none());
    assert!(t.run.is_empty(), "a failure confirms Unhealthy: nothing held");
    let resumed = Tracker::resume(t.rules(), HealthState::Unhealthy);
    assert!(resumed.run.is_empty());
}

/// A reload that changes the thresholds or the timing keeps the state and the results toward
/// a change (one short of the new threshold at most); one that changes what the check asks
/// keeps the state alone.
#[test]
fn a_rebased_tracker_keeps_its_state_and_as_much_of_its_run_as_the_new_threshold_allows() {
    let t = timing(S, S);
    let mut prober = VirtualProber::new(t, 0);
    let mut tracker = Tracker::new(Thresholds::lb(2, 3).unwrap(), t);
    assert_eq!(transitions_after(&mut tracker, &mut prober, true, 2), Some(2));
    assert_eq!(transitions_after(&mut tracker, &mut prober, false, 2), None);
    assert_eq!((tracker.state(), tracker.pending()), (HealthState::Healthy, 2));

    let rules = |unhealthy| {
        Arc::new(Rules {
            thresholds: Thresholds::lb(2, unhealthy).unwrap(),
            timing: timing(S, 900 * MS),
        })
    };
    // Same threshold, other timeout: both failures stay; the third completes the run.
    let mut same = tracker.rebase(&rules(3), true);
    assert_eq!((same.state(), same.pending()), (HealthState::Healthy, 2));
    let done = same
        .observe(prober.probe(false, MS))
        .expect("the third failure transitions");
    assert_eq!((done.to, done.run.len()), (HealthState::Unhealthy, 3));
    // A higher threshold: both stay, two more are needed.
    let mut higher = tracker.rebase(&rules(4), true);
    assert!(higher.observe(prober.probe(false, MS)).is_none());
    let done = higher
        .observe(prober.probe(false, MS))
        .expect("the fourth failure transitions");
    assert_eq!(done.run.len(), 4);
    // A lower one: one short of it, so the next failure completes it, not the rebase itself.
    let mut lower = tracker.rebase(&rules(2), true);
    assert_eq!((lower.state(), lower.pending()), (HealthState::Healthy, 1));
    let done = lower
        .observe(prober.probe(false, MS))
        .expect("the next failure transitions");
    assert_eq!(done.run.len(), 2);
    // Another question: the state stays, the run goes.
    let asked = tracker.rebase(&rules(3), false);
    assert_eq!((asked.state(), asked.pending()), (HealthState::Healthy, 0));
}
