//! Slow starts on the runner: which returns ramp, the ramp's steps as changes, what ends one,
//! and what never starts one (the first verdicts after a start, fail-open).
use super::*;
use crate::status::ramp::{FIRST, FULL};

const SLOW: &str = "slow_start = \"20s\"\n";

/// `config_text` with `slow_start` (a line of the profile's table, or none).
fn slow_config(dir: &std::path::Path, endpoints: &[(&str, u16)], slow: &str) -> Config {
    let text =
        config_text(dir, endpoints).replace("routing = \"priority\"\n", &format!("routing = \"priority\"\n{slow}"));
    parse(&text)
}

fn slow_harness(name: &str, endpoints: &[(&str, u16)]) -> Harness {
    let dir = std::env::temp_dir().join(format!("probed-runner-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = slow_config(&dir, endpoints, SLOW);
    Harness::start_with(dir, config)
}

impl Harness {
    fn ramp(&self, endpoint: &str) -> u16 {
        let id = self.runner.table.find("web", endpoint).expect("endpoint exists");
        self.runner.table.targets()[&id].state().ramp
    }
}

/// `endpoint`'s ramps as its changes published them, with their kinds.
fn ramps_of(changes: &[Change], endpoint: &str) -> Vec<(ChangeKind, u16)> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Endpoint(e) if &*e.endpoint == endpoint => Some((e.kind, e.state.ramp)),
            _ => None,
        })
        .collect()
}

/// When `endpoint`'s changes were made.
fn at_of(changes: &[Change], endpoint: &str) -> Vec<u64> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Endpoint(e) if &*e.endpoint == endpoint => Some(e.at_ns),
            _ => None,
        })
        .collect()
}

/// 1%, then 5% more each twentieth of the period, then whole.
fn whole_ramp() -> Vec<u16> {
    (1..20).map(|k| k * 50).chain([FULL]).collect()
}

#[test]
fn a_backend_back_from_degraded_ramps_in_twenty_steps_and_the_first_verdicts_do_not() {
    let mut h = slow_harness("ramp-back", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    assert!(
        ramps_of(&h.changes(), "a").iter().all(|&(_, r)| r == FULL),
        "the first verdicts after a start take no slow start"
    );
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a"), (S::Degraded, false));
    h.changes();
    // Back: the change that puts it in rotation carries its first step.
    h.run_for(2500, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    let changes = h.changes();
    assert_eq!(ramps_of(&changes, "a"), [(ChangeKind::Health, FIRST)]);
    let back_ns = at_of(&changes, "a")[0];
    // Then a step each twentieth of the 20 s, alone (no status moves), the last one whole.
    // (A subscriber that reads late gets each endpoint's latest state: read after each step.)
    let (mut steps, mut at) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        h.run_for(1000, OPEN);
        let changes = h.changes();
        steps.extend(ramps_of(&changes, "a"));
        at.extend(at_of(&changes, "a"));
        assert!(ramps_of(&changes, "b").is_empty(), "b is left alone");
    }
    assert!(steps.iter().all(|&(k, _)| k == ChangeKind::SlowStart), "{steps:?}");
    assert_eq!(steps.iter().map(|s| s.1).collect::<Vec<_>>(), whole_ramp());
    let after: Vec<u64> = at.iter().map(|at| at - back_ns).collect();
    let expected: Vec<u64> = (1..=20).map(|k| k * 1_000_000_000).collect();
    assert_eq!(after, expected, "each step on time, from the return");
    assert_eq!(h.ramp("a"), FULL);
    assert_eq!(h.runner.table.ramps().next_due(), None, "no ramp left");
}

#[test]
fn undrained_and_re_enabled_endpoints_ramp_and_leaving_rotation_ends_a_ramp() {
    let mut h = slow_harness("ramp-admin", &[("a", 80), ("b", 81), ("c", 82)]);
    h.run_for(4000, OPEN);
    h.runner.set_admin("web", "a", AdminState::Drain).unwrap();
    assert_eq!(h.status("a"), (S::Online, false));
    h.run_for(3000, OPEN);
    h.changes();
    h.runner.set_admin("web", "a", AdminState::Enabled).unwrap();
    assert_eq!(ramps_of(&h.changes(), "a"), [(ChangeKind::Admin, FIRST)]);
    h.run_for(10_000, OPEN);
    assert_eq!(h.ramp("a"), 500, "half way at half the period");
    // Out of rotation mid-ramp: the ramp ends; back again, it starts over.
    h.run_for(3000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a"), (S::Degraded, false));
    assert_eq!(h.ramp("a"), FULL);
    h.run_for(3000, OPEN);
    assert_eq!(h.ramp("a"), 50, "a new ramp, 1 s in");
    // Disabled, then enabled: CheckingEndpoint takes traffic, so the ramp starts there.
    h.runner.set_admin("web", "b", AdminState::Disabled).unwrap();
    h.run_for(1000, OPEN);
    assert_eq!(h.ramp("b"), FULL);
    h.runner.set_admin("web", "b", AdminState::Enabled).unwrap();
    assert_eq!(h.status("b"), (S::CheckingEndpoint, true));
    assert_eq!(h.ramp("b"), FIRST);
    h.run_for(20_000, OPEN);
    assert_eq!((h.ramp("a"), h.ramp("b"), h.ramp("c")), (FULL, FULL, FULL));
    assert_eq!(h.runner.table.ramps().next_due(), None);
}

#[test]
fn fail_open_is_no_return_and_takes_no_ramp() {
    let mut h = slow_harness("ramp-fail-open", &[("a", 80)]);
    h.run_for(4000, |_| L4Outcome::Timeout);
    // Its only endpoint Degraded: the profile fails open and serves it anyway.
    assert_eq!(h.status("a"), (S::Degraded, true));
    assert_eq!(h.ramp("a"), FULL);
    assert_eq!(h.runner.table.ramps().next_due(), None);
    // Back by its own health: still in rotation, so no ramp either (its share never left).
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(h.ramp("a"), FULL);
}

#[test]
fn an_endpoint_a_reload_adds_ramps_and_a_reload_that_ends_slow_start_ends_every_ramp() {
    let mut h = slow_harness("ramp-reload", &[("a", 80)]);
    h.run_for(4000, OPEN);
    let reload = |h: &mut Harness, endpoints: &[(&str, u16)], slow: &str| {
        let config = slow_config(&h.dir, endpoints, slow);
        h.runner.reload_only(config).expect("applied");
    };
    reload(&mut h, &[("a", 80), ("b", 81)], SLOW);
    assert_eq!(h.status("b"), (S::CheckingEndpoint, true));
    assert_eq!((h.ramp("a"), h.ramp("b")), (FULL, FIRST), "b joins with its first step");
    h.run_for(5000, OPEN);
    assert_eq!(h.ramp("b"), 250);
    // A reload of another setting keeps the ramp where it is, on time.
    let timeout = slow_config(&h.dir, &[("a", 80), ("b", 81)], SLOW);
    let text = config_text(&h.dir, &[("a", 80), ("b", 81)])
        .replace("routing = \"priority\"\n", &format!("routing = \"priority\"\n{SLOW}"))
        .replace("timeout = \"500ms\"", "timeout = \"400ms\"");
    assert_ne!(parse(&text), timeout);
    h.runner.reload_only(parse(&text)).expect("applied");
    assert_eq!(h.ramp("b"), 250);
    h.run_for(1000, OPEN);
    assert_eq!(h.ramp("b"), 300);
    // slow_start off: the ramp ends at once.
    h.changes();
    reload(&mut h, &[("a", 80), ("b", 81)], "");
    h.run_for(1, OPEN);
    assert_eq!(h.ramp("b"), FULL);
    assert_eq!(ramps_of(&h.changes(), "b").last(), Some(&(ChangeKind::SlowStart, FULL)));
    assert_eq!(h.runner.table.ramps().next_due(), None);
    // And with it off, a return takes its whole weight at once.
    h.run_for(4000, ONLY_PORT_80_FAILS);
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(h.ramp("a"), FULL);
}

#[test]
fn an_endpoint_a_fleet_batch_adds_ramps_and_the_others_do_not() {
    let dir = std::env::temp_dir().join(format!("probed-runner-ramp-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = config_text(&dir, &[]).replace(
        "routing = \"priority\"\n",
        &format!("routing = \"weighted\"\nendpoints_from = \"api\"\n{SLOW}"),
    );
    let mut h = Harness::start_with(dir, parse(&text));
    super::fleet::batch(&mut h, super::fleet::put(&[("a", 1), ("b", 2)])).unwrap();
    h.run_for(4000, OPEN);
    // The profile ran (empty) before them: they join it, together, so their shares stay
    // equal while they ramp.
    assert_eq!((h.ramp("a"), h.ramp("b")), (200, 200));
    super::fleet::batch(&mut h, super::fleet::put(&[("c", 3)])).unwrap();
    assert_eq!(h.ramp("c"), FIRST);
    h.run_for(20_000, OPEN);
    assert_eq!(h.ramp("c"), FULL);
}
