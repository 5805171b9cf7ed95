//! The table's door on its own: results, admin changes, lateness and shares go in through
//! its methods, and status, eligibility, counts and the changes to publish come out.
use std::{sync::Arc, time::Duration};

use super::{plan, Changed, OwnerId, Probed, Stamp, Table, Unsettled};
use crate::{
    changes::{Change, ChangeKind},
    config::Config,
    daemon::{checks::ProbeReport, state::Saved},
    health::Observation,
    outcome::Outcome,
    status::{AdminState, EndpointStatus as S, Health},
};

/// lb, TCP, 2 results either way, the endpoints named at 198.18.1.<n>:80.
fn table(names: &[&str]) -> Table {
    let mut text = String::from(
        "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\n\
         interval = \"1s\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n",
    );
    for (i, name) in names.iter().enumerate() {
        text.push_str(&format!(
            "\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"198.18.1.{}\"\nport = 80\n",
            i + 1
        ));
    }
    let config = Config::parse(&text, "table.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut next = 1;
    let plan = plan(&config, None, &Table::default(), &Saved::default(), &mut next).expect("plans");
    let mut table = Table::default();
    let swapped = table.swap_in(plan);
    table.settle_some(&swapped.dirty);
    table
}

fn id(table: &Table, name: &str) -> OwnerId {
    table.find("web", name).expect("an endpoint of web")
}

fn at(s: u64) -> Stamp {
    Stamp {
        ns: s * 1_000_000_000,
        unix_ms: 1_700_000_000_000 + s * 1000,
    }
}

/// Feeds one result to endpoint `id` at second `s`, and publishes its verdict if it moved:
/// what the runner does per owner of a check.
fn result(table: &mut Table, id: OwnerId, ok: bool, s: u64) -> Vec<Change> {
    let report = ProbeReport {
        healthy: ok,
        outcome: if ok { Outcome::Open } else { Outcome::Refused },
        elapsed: Duration::from_millis(2),
        reason: Arc::from(if ok { "open" } else { "refused" }),
        cert_not_after: None,
    };
    let obs = Observation {
        success: ok,
        started_ns: at(s).ns,
        finished_ns: at(s).ns + 2_000_000,
        response_us: 2000,
        outcome: report.outcome,
        reason: report.reason.clone(),
    };
    let recorded = table.record(id, &report, &obs, 0, at(s).unix_ms).expect("in the table");
    match recorded.transition {
        Some(_) => {
            let changed = table.restatus(id, ChangeKind::Health, at(s), None);
            assert!(changed.moved, "a verdict moves the status");
            changed.changes
        }
        None => Vec::new(),
    }
}

/// (endpoint, kind, from, to, eligible) of each endpoint change, and the profile changes' `to`.
fn summary(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            Change::Endpoint(e) => format!(
                "{} {:?} {:?}->{:?} eligible={}",
                e.endpoint, e.kind, e.from, e.state.status, e.state.eligible
            ),
            Change::Profile(p) => format!("profile {:?}->{:?} fail_open={}", p.from, p.to, p.fail_open),
            Change::Notice(n) => format!("{} {:?} {:?}", n.endpoint, n.kind, n.cert_not_after),
        })
        .collect()
}

fn counts_match(table: &Table) {
    for p in &table.profiles {
        let mut counts = crate::status::StatusCounts::default();
        for id in &p.owners {
            counts.add(table.targets[id].status());
        }
        assert_eq!(counts, p.counts, "profile {}", p.name);
    }
}

#[test]
fn a_verdict_moves_status_counts_and_eligibility_and_comes_back_as_changes() {
    let mut t = table(&["a", "b"]);
    let (a, b) = (id(&t, "a"), id(&t, "b"));
    assert_eq!(t.targets[&a].status(), S::CheckingEndpoint);
    assert!(
        result(&mut t, a, true, 1).is_empty(),
        "one result is below the threshold"
    );
    let changes = summary(&result(&mut t, a, true, 2));
    assert_eq!(changes[0], "a Health Some(CheckingEndpoint)->Online eligible=true");
    assert_eq!(t.targets[&a].last_change().map(|c| c.to), Some(S::Online));
    result(&mut t, b, true, 1);
    result(&mut t, b, true, 2);
    counts_match(&t);
    // b fails: Degraded and not eligible while a is healthy (no fail-open).
    result(&mut t, b, false, 3);
    let changes = summary(&result(&mut t, b, false, 4));
    assert_eq!(
        changes[0], "b Health Some(Online)->Degraded eligible=false",
        "{changes:#?}"
    );
    assert!(!t.targets[&b].eligible());
    assert_eq!(t.targets[&b].last().map(|l| l.outcome), Some(Outcome::Refused));
    counts_match(&t);
}

#[test]
fn the_last_degraded_endpoint_turns_fail_open_on_and_the_others_hear_of_it() {
    let mut t = table(&["a", "b"]);
    let (a, b) = (id(&t, "a"), id(&t, "b"));
    for s in 1..=2 {
        result(&mut t, a, true, s);
        result(&mut t, b, true, s);
    }
    result(&mut t, a, false, 3);
    result(&mut t, a, false, 4);
    assert!(!t.targets[&a].eligible());
    result(&mut t, b, false, 5);
    let changes = summary(&result(&mut t, b, false, 6));
    // b's own change, then a's eligibility (fail-open), then the profile's.
    assert_eq!(changes.len(), 3, "{changes:#?}");
    assert_eq!(changes[0], "b Health Some(Online)->Degraded eligible=true");
    assert_eq!(changes[1], "a FailOpen Some(Degraded)->Degraded eligible=true");
    assert!(
        changes[2].starts_with("profile ") && changes[2].ends_with("fail_open=true"),
        "{changes:#?}"
    );
    assert!(t.targets[&a].eligible() && t.targets[&b].eligible());
}

/// The one endpoint's change of probing an admin or share change made, and what settling it
/// publishes.
fn settled(t: &mut Table, unsettled: Unsettled, s: u64) -> (Probed, Changed) {
    let [(_, probed)] = unsettled.probing[..] else {
        panic!("one endpoint's change")
    };
    (probed, t.settle(unsettled, at(s)))
}

#[test]
fn an_admin_change_says_what_probing_does_and_re_enabling_starts_over() {
    let mut t = table(&["a"]);
    let a = id(&t, "a");
    result(&mut t, a, true, 1);
    result(&mut t, a, true, 2);
    let unsettled = t.set_admin(a, AdminState::Disabled);
    // The status waits for settle: the runner removes the check first.
    assert_eq!(t.targets[&a].status(), S::Online);
    let (probed, changed) = settled(&mut t, unsettled, 3);
    assert_eq!(probed, Probed { was: true, is: false });
    assert!(changed.moved);
    assert_eq!(
        summary(&changed.changes)[0],
        "a Admin Some(Online)->Disabled eligible=false"
    );
    assert_eq!(t.targets[&a].admin_override(), Some(AdminState::Disabled));
    // The configured state again: no override kept, and the tracker starts over.
    let unsettled = t.set_admin(a, AdminState::Enabled);
    assert_eq!(t.targets[&a].admin_override(), None);
    assert_eq!(t.targets[&a].tracker().state(), Health::CheckingEndpoint);
    let (probed, changed) = settled(&mut t, unsettled, 4);
    assert_eq!(probed, Probed { was: false, is: true });
    assert_eq!(
        summary(&changed.changes)[0],
        "a Admin Some(Disabled)->CheckingEndpoint eligible=true"
    );
    counts_match(&t);
    // The same state twice is no change at all.
    let unsettled = t.set_admin(a, AdminState::Enabled);
    let (probed, changed) = settled(&mut t, unsettled, 5);
    assert_eq!(probed, Probed { was: true, is: true });
    assert!(changed.changes.is_empty());
}

#[test]
fn a_disabled_profile_passes_its_state_to_every_endpoint() {
    let mut t = table(&["a", "b"]);
    let unsettled = t.set_profile_enabled(0, false);
    assert_eq!(unsettled.probing.len(), 2);
    assert!(unsettled
        .probing
        .iter()
        .all(|(_, p)| *p == Probed { was: true, is: false }));
    let changed = t.settle(unsettled, at(1));
    assert!(t.targets.values().all(|x| x.status() == S::Inactive));
    // Each endpoint's change, then the profile's, once.
    let summary = summary(&changed.changes);
    assert_eq!(summary.len(), 3, "{summary:?}");
    assert_eq!(t.profiles[0].enabled_override, Some(false));
    counts_match(&t);
}

#[test]
fn lateness_keeps_the_profiles_count_of_endpoints_behind() {
    let mut t = table(&["a", "b"]);
    let (a, b) = (id(&t, "a"), id(&t, "b"));
    let late = crate::rules::limits::BEHIND_NS + 1_000;
    t.note_late(a, late);
    t.note_late(a, late);
    t.note_late(b, late);
    assert_eq!(t.profiles[0].behind, 2);
    t.note_late(a, 0);
    assert_eq!(t.profiles[0].behind, 1);
    assert!(t.targets[&b].behind() && !t.targets[&a].behind());
}

#[test]
fn a_cluster_aggregate_stands_for_the_endpoints_health() {
    let mut t = table(&["a"]);
    let a = id(&t, "a");
    assert!(
        t.set_cluster_health(a, None, Some(Health::Healthy)),
        "the aggregate moved"
    );
    assert!(
        !t.set_cluster_health(a, None, Some(Health::Healthy)),
        "the same again is no move"
    );
    let changed = t.restatus(a, ChangeKind::Cluster, at(1), None);
    assert_eq!(
        summary(&changed.changes)[0],
        "a Cluster Some(CheckingEndpoint)->Online eligible=true"
    );
    // Handed over to another node: no longer probed here, its health still the cluster's.
    let unsettled = t.set_owned(a, false);
    let (probed, changed) = settled(&mut t, unsettled, 2);
    assert_eq!(probed, Probed { was: true, is: false });
    assert!(changed.changes.is_empty());
    // Taken back: the tracker resumes from the aggregate, not from CheckingEndpoint.
    let unsettled = t.set_owned(a, true);
    let (probed, _) = settled(&mut t, unsettled, 3);
    assert_eq!(probed, Probed { was: false, is: true });
    assert_eq!(
        t.targets[&a].tracker().state(),
        Health::Healthy,
        "no flap for a check that changed hands"
    );
}

/// Review L3: a certificate that flips between two expiries (one inside `cert_warn_days`, one
/// outside) gives one notice, not one per flip; a third expiry inside the window gives its own.
#[test]
fn a_flipping_certificate_warns_once_for_each_expiry() {
    let text = "[[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"https\"\n\
                cert_warn_days = 14\n\n[[profile.endpoint]]\nname = \"a\"\naddress = \"198.18.1.1\"\n";
    let config = Config::parse(text, "table.toml").unwrap_or_else(|e| panic!("{e}"));
    let mut next = 1;
    let plan = plan(&config, None, &Table::default(), &Saved::default(), &mut next).expect("plans");
    let mut table = Table::default();
    let swapped = table.swap_in(plan);
    table.settle_some(&swapped.dirty);
    let a = id(&table, "a");
    let now = i64::try_from(at(0).unix_ms / 1000).unwrap();
    let (near, far, nearer) = (now + 5 * 86_400, now + 60 * 86_400, now + 3 * 86_400);
    let mut notices = 0;
    for s in 0..20 {
        let seen = if s % 2 == 0 { near } else { far };
        notices += usize::from(table.record_cert(a, seen, at(s)).is_some());
    }
    assert_eq!(notices, 1, "twenty flips, one notice");
    assert!(
        table.record_cert(a, nearer, at(21)).is_some(),
        "another expiry in the window"
    );
    assert!(table.record_cert(a, near, at(22)).is_none());
    assert_eq!(table.cert_of(a).map(|c| c.not_after), Some(near));
}
