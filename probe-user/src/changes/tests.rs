//! The change stream's queues: coalescing, capacity, independence of subscribers.
use super::bus::INDEX_KEPT;
use super::*;
use crate::{outcome::Outcome, status::EndpointStatus};
use std::{
    sync::{atomic::Ordering, Arc},
    time::Duration,
};

fn state(status: EndpointStatus) -> EndpointState {
    let mut s = EndpointState::tcp("198.18.0.1".parse().unwrap(), 80, true);
    s.status = status;
    s.eligible = status == EndpointStatus::Online;
    s
}

fn change(bus: &mut Bus, endpoint: &str, from: EndpointStatus, to: EndpointStatus) -> Change {
    Change::Endpoint(EndpointChange {
        seq: bus.next_seq(),
        at_unix_ms: 0,
        at_ns: 0,
        kind: ChangeKind::Health,
        profile: "web".into(),
        endpoint: endpoint.into(),
        from: Some(from),
        state: state(to),
        removed: false,
        transition: None,
    })
}

fn endpoint(c: &Change) -> &EndpointChange {
    match c {
        Change::Endpoint(e) => e,
        Change::Profile(_) | Change::Notice(_) => panic!("expected an endpoint change, got {c:?}"),
    }
}

#[test]
fn newest_state_per_endpoint_wins_and_keeps_the_oldest_from() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let sub = bus.subscribe("test", 16);
    for (ep, from, to) in [
        ("a", CheckingEndpoint, Online),
        ("b", CheckingEndpoint, Online),
        ("a", Online, Degraded),
    ] {
        let c = change(&mut bus, ep, from, to);
        bus.publish(c, 1);
    }
    let batch = sub.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!(batch.lost, 0);
    let got: Vec<_> = batch
        .changes
        .iter()
        .map(|c| {
            let e = endpoint(c);
            (&*e.endpoint, e.from, e.state.status, e.seq)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", Some(CheckingEndpoint), Degraded, 3),
            ("b", Some(CheckingEndpoint), Online, 2)
        ]
    );
    let stats = bus.stats(1);
    assert_eq!(stats[0].stats.coalesced.load(Ordering::Relaxed), 1);
    assert_eq!(stats[0].stats.delivered.load(Ordering::Relaxed), 2);
    assert_eq!(stats[0].pending, 0);
}

#[test]
fn a_verdict_keeps_its_evidence_when_a_fail_open_change_follows_it() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let sub = bus.subscribe("test", 16);
    let Change::Endpoint(mut verdict) = change(&mut bus, "b", Online, Degraded) else {
        unreachable!()
    };
    verdict.transition = Some(Arc::new(TransitionDetail {
        results: Vec::new(),
        measured_window_ms: 12.0,
        formula_window_ms: 10.0,
    }));
    bus.publish(Change::Endpoint(verdict), 1);
    let Change::Endpoint(mut flip) = change(&mut bus, "b", Degraded, Degraded) else {
        unreachable!()
    };
    flip.kind = ChangeKind::FailOpen;
    flip.state.eligible = true;
    bus.publish(Change::Endpoint(flip), 2);
    let batch = sub.recv_blocking(Duration::ZERO).expect("open");
    let e = endpoint(&batch.changes[0]);
    assert_eq!(
        (e.kind, e.from, e.state.status, e.state.eligible),
        (ChangeKind::Health, Some(Online), Degraded, true)
    );
    assert_eq!(e.transition.as_ref().map(|t| t.measured_window_ms), Some(12.0));
}

#[test]
fn a_second_subscriber_of_a_name_gets_its_own_label() {
    let mut bus = Bus::default();
    let _a = bus.subscribe("sink", 4);
    let _b = bus.subscribe("sink", 4);
    let names: Vec<&str> = bus.stats(0).iter().map(|s| s.name).collect();
    assert_eq!(names, ["sink", "sink#2"]);
}

#[test]
fn a_typed_follower_has_one_queue_and_a_new_one_takes_over_where_the_old_ends() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let old = bus.subscribe(Follower::Events, 8);
    let feed = bus.subscribe("feed", 8);
    let c = change(&mut bus, "a", CheckingEndpoint, Online);
    bus.publish(c, 1);
    let new = bus.subscribe(Follower::Events, 8);
    let _feed2 = bus.subscribe("feed", 8);
    let c = change(&mut bus, "b", CheckingEndpoint, Online);
    bus.publish(c, 2);
    let names: Vec<&str> = bus.stats(0).iter().map(|s| s.name).collect();
    assert_eq!(names, ["feed", "events", "feed#2"], "feeds may be many; events one");
    let before = old.recv_blocking(Duration::ZERO).expect("what was queued");
    assert_eq!(endpoint(&before.changes[0]).endpoint.as_ref(), "a");
    assert_eq!(before.changes.len(), 1);
    assert!(old.recv_blocking(Duration::ZERO).is_none() && old.replaced());
    let after = new.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!(after.changes.len(), 1);
    assert_eq!(endpoint(&after.changes[0]).endpoint.as_ref(), "b");
    assert_eq!(feed.recv_blocking(Duration::ZERO).expect("open").changes.len(), 2);
    bus.close(&Follower::Events);
    assert!(
        new.recv_blocking(Duration::ZERO).is_none() && !new.replaced(),
        "closed, not replaced"
    );
}

#[test]
fn a_full_queue_drops_new_keys_and_says_so() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let sub = bus.subscribe("slow", 2);
    for ep in ["a", "b", "c", "d"] {
        let c = change(&mut bus, ep, CheckingEndpoint, Online);
        bus.publish(c, 5);
    }
    // A waiting key still takes newer states while the queue is full.
    let c = change(&mut bus, "a", Online, Degraded);
    bus.publish(c, 6);
    let stats = bus.stats(1_000_000_005);
    assert_eq!((stats[0].pending, stats[0].lag), (2, Duration::from_secs(1)));
    assert_eq!(stats[0].stats.dropped.load(Ordering::Relaxed), 2);
    let batch = sub.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!(batch.lost, 2);
    assert_eq!(batch.changes.len(), 2);
    assert_eq!(endpoint(&batch.changes[0]).state.status, Degraded);
    let again = sub.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!((again.changes.len(), again.lost), (0, 0), "lost is reported once");
}

#[test]
fn subscribers_are_independent_and_see_the_end() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let fast = bus.subscribe("fast", 8);
    let gone = bus.subscribe("gone", 8);
    drop(gone);
    let c = change(&mut bus, "a", CheckingEndpoint, Online);
    bus.publish(c, 1);
    assert_eq!(bus.stats(1).len(), 1, "a dropped subscription is forgotten");
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let batch = rt.block_on(fast.recv()).expect("a batch");
    assert_eq!(batch.changes.len(), 1);
    drop(bus);
    assert!(rt.block_on(fast.recv()).is_none(), "closed once the bus is gone");
}

#[test]
fn queues_share_a_change_until_one_of_them_folds_a_newer_one_into_it() {
    use EndpointStatus::*;
    let mut bus = Bus::default();
    let (one, two) = (bus.subscribe("one", 8), bus.subscribe("two", 8));
    let c = change(&mut bus, "a", CheckingEndpoint, Online);
    bus.publish(c, 1);
    let (a, b) = (
        one.recv_blocking(Duration::ZERO).unwrap(),
        two.recv_blocking(Duration::ZERO).unwrap(),
    );
    assert!(Arc::ptr_eq(&a.changes[0], &b.changes[0]), "one change, two queues");
    drop((a, b));

    // "two" takes its change before the next one comes; "one" folds the next into its own copy.
    let first = change(&mut bus, "a", Online, Degraded);
    bus.publish(first, 2);
    let taken = two.recv_blocking(Duration::ZERO).unwrap();
    let second = change(&mut bus, "a", Degraded, Online);
    bus.publish(second, 3);
    assert_eq!(
        (
            endpoint(&taken.changes[0]).from,
            endpoint(&taken.changes[0]).state.status
        ),
        (Some(Online), Degraded),
        "a batch already taken does not change under its consumer"
    );
    let folded = one.recv_blocking(Duration::ZERO).unwrap();
    assert_eq!(folded.changes.len(), 1);
    let e = endpoint(&folded.changes[0]);
    assert_eq!((e.from, e.state.status, e.seq), (Some(Online), Online, 3));
    let later = two.recv_blocking(Duration::ZERO).unwrap();
    assert_eq!(endpoint(&later.changes[0]).seq, 3);
}

#[test]
fn a_burst_past_the_kept_index_coalesces_in_order_and_the_next_starts_clean() {
    use EndpointStatus::*;
    let n = 3 * INDEX_KEPT;
    let mut bus = Bus::default();
    let sub = bus.subscribe("test", n + 1);
    for round in [(CheckingEndpoint, Online), (Online, Degraded)] {
        for i in 0..n {
            let c = change(&mut bus, &format!("e{i}"), round.0, round.1);
            bus.publish(c, 1);
        }
    }
    // A profile change under an endpoint's name is a different key.
    let profile = Change::Profile(ProfileChange {
        seq: bus.next_seq(),
        at_unix_ms: 0,
        profile: "e0".into(),
        from: None,
        to: None,
        fail_open: false,
    });
    bus.publish(profile, 1);
    let batch = sub.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!(batch.changes.len(), n + 1, "one change per key");
    for (i, c) in batch.changes[..n].iter().enumerate() {
        let e = endpoint(c);
        assert_eq!(
            (&*e.endpoint, e.from, e.state.status),
            (format!("e{i}").as_str(), Some(CheckingEndpoint), Degraded),
            "first-published order, newest state, oldest from"
        );
    }
    assert!(matches!(*batch.changes[n], Change::Profile(_)));
    // The next change after the burst is a key of its own again.
    let c = change(&mut bus, "e0", Degraded, Online);
    bus.publish(c, 2);
    let batch = sub.recv_blocking(Duration::ZERO).expect("open");
    assert_eq!(batch.changes.len(), 1);
    assert_eq!(endpoint(&batch.changes[0]).from, Some(Degraded));
}

#[test]
fn a_results_round_trip_time_is_written_in_milliseconds_to_the_microsecond() {
    let r = RunResult {
        ok: true,
        outcome: Outcome::Open,
        reason: "open".into(),
        rtt_us: 1234,
        started_ns: 5,
        finished_ns: 1_234_005,
    };
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["rtt_ms"], 1.234);
    assert!(json.get("rtt_us").is_none(), "{json}");
    assert_eq!(serde_json::from_value::<RunResult>(json).unwrap(), r);
    let far: RunResult = serde_json::from_str(
        r#"{"ok":false,"outcome":"timeout","reason":"t","rtt_ms":1e12,"started_ns":0,"finished_ns":0}"#,
    )
    .unwrap();
    assert_eq!(far.rtt_us, u32::MAX, "saturates");
}
