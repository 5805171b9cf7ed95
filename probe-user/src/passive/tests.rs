use std::time::Duration;

use super::*;
use crate::config::FailureRatio;

const S: u64 = 1_000_000_000;

fn rule(consecutive: Option<u32>, ratio: Option<FailureRatio>) -> Passive {
    Passive {
        interfaces: vec!["eth1".into()],
        consecutive,
        ratio,
        timeout: Duration::from_secs(1),
        max_ejection_percent: 10,
    }
}

fn stats(completed: u64, refused: u64, peak: u64) -> PassiveStats {
    PassiveStats {
        started: completed + refused,
        completed,
        refused,
        peak,
        consecutive: peak,
        streak_first_ns: 7,
        peak_first_ns: 7,
        ..PassiveStats::default()
    }
}

#[test]
fn a_run_that_reached_the_threshold_trips_even_when_broken_before_the_read() {
    let r = rule(Some(5), None);
    let mut w = Watch::default();
    assert_eq!(w.judge(&r, &stats(10, 4, 4), S), None);
    let mut s = stats(11, 5, 5);
    s.consecutive = 0;
    assert_eq!(w.judge(&r, &s, 2 * S), Some(Trip::Consecutive { run: 5, since_ns: 7 }));
}

#[test]
fn one_run_ejects_once_and_a_new_run_after_it_again() {
    let r = rule(Some(3), None);
    let mut w = Watch::default();
    assert!(w.judge(&r, &stats(10, 3, 3), S).is_some());
    // The same run, still standing (no traffic since, or more of it): no second trip until
    // three failures more.
    assert_eq!(w.judge(&r, &stats(10, 3, 3), 2 * S), None);
    assert_eq!(w.judge(&r, &stats(10, 5, 5), 3 * S), None);
    assert!(w.judge(&r, &stats(10, 6, 6), 4 * S).is_some());
}

#[test]
fn a_ratio_trips_only_over_enough_handshakes_within_its_window() {
    let ratio = FailureRatio {
        percent: 50,
        min_attempts: 10,
        window: Duration::from_secs(10),
    };
    let r = rule(None, Some(ratio));
    let mut w = Watch::default();
    // 4 of 8: too few to judge.
    assert_eq!(w.judge(&r, &stats(4, 4, 1), S), None);
    // 5 of 10: half.
    assert_eq!(
        w.judge(&r, &stats(5, 5, 1), 2 * S),
        Some(Trip::Ratio { failed: 5, decided: 10 })
    );
    // Long after, the old samples have left the window: 2 of 4 new ones is too few.
    assert_eq!(w.judge(&r, &stats(7, 7, 1), 30 * S), None);
    // A steady 1 in 10 never trips.
    let mut w = Watch::default();
    for k in 1..100 {
        assert_eq!(w.judge(&r, &stats(9 * k, k, 1), k * S), None);
    }
}

#[test]
fn the_cap_rounds_down_but_allows_one() {
    assert_eq!(cap(10, 10), 1);
    assert_eq!(cap(4, 10), 1);
    assert_eq!(cap(4, 50), 2);
    assert_eq!(cap(25, 20), 5);
    assert_eq!(cap(4, 0), 0);
    assert_eq!(cap(0, 50), 0);
}

#[test]
fn the_reason_names_the_rule_and_the_kinds_met() {
    let mut s = stats(3, 2, 5);
    s.timed_out = 3;
    assert_eq!(
        reason(Trip::Consecutive { run: 5, since_ns: 0 }, &s),
        "passive: 5 failed client handshakes in a row (of all seen: refused 2, timed out 3)"
    );
    assert_eq!(outcome(&s), crate::outcome::Outcome::Timeout);
    assert_eq!(outcome(&stats(0, 4, 4)), crate::outcome::Outcome::Refused);
}
