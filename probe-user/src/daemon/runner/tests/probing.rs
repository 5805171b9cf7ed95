//! Sending probes and taking their results: verdicts, lost probes, local errors,
//! lateness, the watchdog, a stopped engine.
use super::*;

#[test]
fn probes_go_through_the_port_and_verdicts_become_changes() {
    let mut h = Harness::new("verdicts", &[("a", 80), ("b", 80)]);
    assert_eq!(h.status("a"), (S::CheckingEndpoint, true));
    assert_eq!(h.profile(), (ProfileStatus::CheckingEndpoints, false));
    assert_eq!(h.l4.starts.load(std::sync::atomic::Ordering::Relaxed), 1);

    // The first request shows what the port is handed.
    h.clock.set_ns(h.runner.probe.sched.next_due().unwrap());
    h.runner.fire(h.clock.now());
    let sent = h.l4.take();
    assert_eq!(sent.len(), 1, "first probes are spread over the interval");
    assert_eq!(sent[0].timeout, Duration::from_millis(500));
    assert!(matches!(sent[0].proto, L4Proto::Tcp));
    h.runner.on_l4(L4Result {
        token: sent[0].token,
        target: sent[0].target,
        outcome: L4Outcome::Open,
        elapsed: Duration::from_millis(1),
        queued: Duration::ZERO,
    });

    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(h.status("b"), (S::Online, true));
    assert_eq!(h.profile(), (ProfileStatus::Online, false));
    let changes = h.changes();
    let mut got = endpoint_changes(&changes);
    got.sort_by_key(|c| c.0);
    assert_eq!(
        got,
        [
            (
                "a",
                ChangeKind::Health,
                Some(S::CheckingEndpoint),
                Some(S::Online),
                true
            ),
            (
                "b",
                ChangeKind::Health,
                Some(S::CheckingEndpoint),
                Some(S::Online),
                true
            ),
        ]
    );
    let Change::Endpoint(a) = changes
        .iter()
        .find(|c| matches!(c, Change::Endpoint(e) if &*e.endpoint == "a"))
        .unwrap()
    else {
        unreachable!()
    };
    let detail = a.transition.as_ref().expect("a health change carries its run");
    assert_eq!(detail.results.len(), 2, "healthy_threshold results");
    // Two probes back to back: 1 ms, the 1 s interval, 1 ms (plus the wheel's tick).
    assert!(
        (1001.0..=1004.0).contains(&detail.measured_window_ms),
        "measured {} ms",
        detail.measured_window_ms
    );
    let profile = profile_changes(&changes);
    assert_eq!(profile.len(), 1, "{profile:?}");
    assert_eq!(
        (profile[0].from, profile[0].to),
        (Some(ProfileStatus::CheckingEndpoints), Some(ProfileStatus::Online))
    );
    let view = crate::daemon::requests::status_view(&h.runner, "a");
    let last = view.last_change.expect("a has changed");
    assert_eq!(
        (last.kind, last.from, last.to),
        (ChangeKind::Health, Some(S::CheckingEndpoint), S::Online)
    );
    assert_eq!(view.health, Health::Healthy);
}

#[test]
fn fail_open_flips_the_eligibility_of_every_degraded_endpoint() {
    let mut h = Harness::new("fail-open", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    h.changes();
    // a fails: Degraded and out of rotation, b carries the traffic.
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(
        (h.status("a"), h.status("b")),
        ((S::Degraded, false), (S::Online, true))
    );
    assert_eq!(h.profile(), (ProfileStatus::Degraded, false));
    h.changes();
    // b fails too: every endpoint in the pool is Degraded, so all of them answer.
    h.run_for(4000, |_| L4Outcome::Timeout);
    assert_eq!(
        (h.status("a"), h.status("b")),
        ((S::Degraded, true), (S::Degraded, true))
    );
    assert_eq!(h.profile(), (ProfileStatus::Degraded, true));
    let changes = h.changes();
    assert_eq!(
        endpoint_changes(&changes),
        [
            ("b", ChangeKind::Health, Some(S::Online), Some(S::Degraded), true),
            ("a", ChangeKind::FailOpen, Some(S::Degraded), Some(S::Degraded), true),
        ]
    );
    let profile = profile_changes(&changes);
    assert_eq!(profile.len(), 1);
    assert!(profile[0].fail_open);
    // b recovers: fail-open ends and a leaves rotation again.
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(
        (h.status("a"), h.status("b")),
        ((S::Degraded, false), (S::Online, true))
    );
    assert_eq!(
        endpoint_changes(&h.changes()),
        [
            ("b", ChangeKind::Health, Some(S::Degraded), Some(S::Online), true),
            ("a", ChangeKind::FailOpen, Some(S::Degraded), Some(S::Degraded), false),
        ]
    );
}

#[test]
fn a_probe_without_a_result_is_lost_not_a_failure_and_its_check_goes_on() {
    let mut h = Harness::new("lost", &[("a", 80)]);
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    h.changes();
    // The next probe leaves and nothing ever answers it.
    let due = h.runner.probe.sched.next_due().expect("a is scheduled");
    h.clock.set_ns(due);
    h.runner.fire(due);
    let sent = h.l4.take();
    assert_eq!(sent.len(), 1);
    assert!(
        h.runner.probe.sched.next_due().is_none(),
        "in flight: not scheduled until its result"
    );
    // Past its 500 ms timeout but within the grace: still waiting.
    h.clock.advance_ms(1500);
    h.runner.reap_lost(h.clock.now(), usize::MAX);
    assert!(h.runner.probe.sched.next_due().is_none());
    h.clock.advance_ms(1100);
    h.runner.reap_lost(h.clock.now(), usize::MAX);
    let view = crate::daemon::requests::status_view(&h.runner, "a");
    let last = view.last_result.expect("a lost result is shown");
    assert_eq!((last.ok, last.outcome), (false, crate::outcome::Outcome::Lost));
    assert_eq!(
        (view.status, view.pending),
        (S::Online, 0),
        "a lost probe is no verdict on the backend"
    );
    assert!(h.changes().is_empty());
    assert!(
        h.runner.probe.sched.next_due().is_some(),
        "the check is scheduled again"
    );
    // A result for the lost probe arriving late changes nothing.
    h.runner.on_l4(L4Result {
        token: sent[0].token,
        target: sent[0].target,
        outcome: L4Outcome::Timeout,
        elapsed: Duration::from_millis(500),
        queued: Duration::ZERO,
    });
    assert_eq!(crate::daemon::requests::status_view(&h.runner, "a").pending, 0);
    h.run_for(2000, OPEN);
    assert_eq!(
        crate::daemon::requests::status_view(&h.runner, "a")
            .last_result
            .map(|r| r.outcome),
        Some(crate::outcome::Outcome::Open),
        "probing goes on"
    );
}

#[test]
fn local_resource_errors_are_no_verdict_and_real_failures_still_count() {
    let mut h = Harness::new("local-error", &[("a", 80)]);
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    h.changes();
    // The node is out of socket buffers for ten probes in a row: far past the threshold of 2.
    let enobufs = |_| L4Outcome::LocalError { errno: libc::ENOBUFS };
    h.run_for(10_000, enobufs);
    let view = crate::daemon::requests::status_view(&h.runner, "a");
    let last = view.last_result.expect("the local error is shown");
    assert_eq!((last.ok, last.outcome), (false, crate::outcome::Outcome::LocalError));
    assert_eq!((view.status, view.pending), (S::Online, 0), "no verdict on the backend");
    assert!(h.changes().is_empty());
    // Real failures after them are counted from scratch, as usual.
    h.run_for(2500, |_| L4Outcome::Refused);
    assert_eq!(h.status("a").0, S::Degraded);
}

#[test]
fn probes_started_late_are_shown_as_windows_that_do_not_hold() {
    let mut h = Harness::new("late", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    let view = crate::daemon::requests::status_view(&h.runner, "a");
    assert!(view.windows.hold && view.windows.late_ms < 50.0, "{:?}", view.windows);
    // The runner wakes 200 ms after the next due time (as if busy): that probe starts late.
    let due = h.runner.probe.sched.next_due().expect("scheduled");
    h.clock.set_ns(due + 200_000_000);
    h.runner.fire(h.clock.now());
    for req in h.l4.take() {
        h.runner.on_l4(L4Result {
            token: req.token,
            target: req.target,
            outcome: L4Outcome::Open,
            elapsed: Duration::from_millis(1),
            queued: Duration::ZERO,
        });
    }
    let late: Vec<_> = ["a", "b"]
        .iter()
        .map(|e| crate::daemon::requests::status_view(&h.runner, e).windows)
        .filter(|w| !w.hold)
        .collect();
    assert_eq!(late.len(), 1, "one probe was due then");
    assert!((200.0..201.0).contains(&late[0].late_ms), "{late:?}");
    h.runner.assess_pace(h.clock.now());
    let text = h.runner.render_metrics().0;
    assert!(
        text.contains("probed_schedule_behind_endpoints{profile=\"web\"} 1"),
        "{text}"
    );
    assert!(text.contains("probed_schedule_lag_seconds 0.2"), "{text}");
    assert_eq!(behind_counts(&h.runner), vec![1]);
    // The late endpoint is disabled, then enabled again: not probed, it is not behind.
    let name = ["a", "b"]
        .into_iter()
        .find(|e| !crate::daemon::requests::status_view(&h.runner, e).windows.hold)
        .expect("one is late");
    h.runner.set_admin("web", name, AdminState::Disabled).unwrap();
    assert_eq!(behind_counts(&h.runner), vec![0]);
    h.runner.set_admin("web", name, AdminState::Enabled).unwrap();
    assert_eq!(behind_counts(&h.runner), vec![0]);
    // On time again: the next probes of both catch up and the count drops to zero.
    h.run_for(2000, OPEN);
    h.runner.assess_pace(h.clock.now());
    let text = h.runner.render_metrics().0;
    assert!(
        text.contains("probed_schedule_behind_endpoints{profile=\"web\"} 0"),
        "{text}"
    );
}

#[test]
fn a_probe_held_in_the_engines_backlog_is_late_too() {
    let mut h = Harness::new("queued", &[("a", 80)]);
    h.run_for(4000, OPEN);
    h.runner.end_turn(false);
    let before = h.runner.render_metrics().0;
    // Fired on time, but the engine had a backlog: it went on the wire 120 ms later.
    let due = h.runner.probe.sched.next_due().expect("scheduled");
    h.clock.set_ns(due);
    h.runner.fire(h.clock.now());
    let sent = h.l4.take();
    assert_eq!(sent.len(), 1);
    h.clock.advance_ms(121);
    h.runner.on_l4(L4Result {
        token: sent[0].token,
        target: sent[0].target,
        outcome: L4Outcome::Open,
        elapsed: Duration::from_millis(1),
        queued: Duration::from_millis(120),
    });
    let w = crate::daemon::requests::status_view(&h.runner, "a").windows;
    assert!(!w.hold && (120.0..121.0).contains(&w.late_ms), "{w:?}");
    h.runner.end_turn(false);
    let after = h.runner.render_metrics().0;
    let count = |text: &str, le: &str| {
        let needle = format!("probed_schedule_lateness_seconds_bucket{{le=\"{le}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(needle.as_str()))
            .map_or(0.0, |v| v.parse::<f64>().unwrap())
    };
    // The histogram has it past 100 ms: one more probe at or below 250 ms, none more at 100.
    assert_eq!(count(&after, "0.25") - count(&before, "0.25"), 1.0, "{after}");
    assert_eq!(count(&after, "0.1"), count(&before, "0.1"), "{after}");
}

#[test]
fn a_stopped_engine_ends_the_runner_with_an_error() {
    // The fake starter keeps no sender for results: as if the engine's thread had died.
    let dir = std::env::temp_dir().join(format!("probed-runner-engine-gone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ports = Ports {
        clock: Box::new(FakeClock::default()),
        start_l4: starter(Arc::new(FakeL4::default())),
    };
    let config = parse(&config_text(&dir, &[("a", 80)]));
    let runner = Runner::new(config, ports).expect("runner starts");
    let (_commands, rx) = tokio::sync::mpsc::channel(1);
    let (_stop, stop_rx) = tokio::sync::oneshot::channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), runner.run(rx, stop_rx)).await });
    match result {
        Ok(Err(crate::daemon::DaemonError::EngineStopped)) => {}
        Ok(other) => panic!("expected EngineStopped, got {other:?}"),
        Err(_) => panic!("the runner kept going without its engine"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_watchdog_looks_over_the_slots_a_slice_at_a_time() {
    let mut h = Harness::new("lost-slices", &[("a", 80), ("b", 81)]);
    // Both first probes leave and nothing answers them.
    let mut sent = 0;
    for _ in 0..2 {
        let due = h.runner.probe.sched.next_due().expect("scheduled");
        h.clock.set_ns(due.max(h.clock.now()));
        h.runner.fire(h.clock.now());
        sent += h.l4.take().len();
    }
    assert_eq!(sent, 2);
    h.clock.advance_ms(3000);
    let lost = |h: &Harness| {
        ["a", "b"]
            .iter()
            .filter(|e| {
                crate::daemon::requests::status_view(&h.runner, e)
                    .last_result
                    .is_some_and(|l| l.outcome == crate::outcome::Outcome::Lost)
            })
            .count()
    };
    h.runner.reap_lost(h.clock.now(), 1);
    assert_eq!(lost(&h), 1, "one slot looked over");
    h.runner.reap_lost(h.clock.now(), 1);
    assert_eq!(lost(&h), 2, "then the next");
}

#[test]
fn the_watchdogs_slices_make_one_pass_a_second() {
    use crate::daemon::runner::watchdog::slice;
    assert_eq!(slice(1_000_000, 1_000_000), 1000, "a millisecond's share");
    assert_eq!(slice(1_000_000, 1_000_000_000), 1_000_000);
    assert_eq!(slice(10, 1_000_000), 1, "rounded up: a small table is not skipped");
    assert_eq!(slice(10, 0), 0);
}
