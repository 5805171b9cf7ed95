//! The API's admin changes: an endpoint's state, a whole profile.
use super::*;

#[test]
fn admin_changes_stop_and_restart_probing() {
    let mut h = Harness::new("admin", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    h.changes();
    let view = h.runner.set_admin("web", "a", AdminState::Disabled).unwrap();
    assert_eq!(
        (view.status, view.admin_from_api, view.probed),
        (S::Disabled, true, false)
    );
    assert_eq!(
        endpoint_changes(&h.changes()),
        [("a", ChangeKind::Admin, Some(S::Online), Some(S::Disabled), false)]
    );
    h.run_for(5000, |t| {
        assert_ne!(t.port(), 80, "a disabled endpoint is not probed");
        L4Outcome::Open
    });
    // Re-enabled: CheckingEndpoint (and eligible) until the threshold is met again.
    let view = h.runner.set_admin("web", "a", AdminState::Enabled).unwrap();
    assert_eq!(
        (view.status, view.admin_from_api, view.pending),
        (S::CheckingEndpoint, false, 0)
    );
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    let view = h.runner.set_admin("web", "b", AdminState::AlwaysServe).unwrap();
    assert_eq!((view.status, view.eligible, view.probed), (S::Unmonitored, true, false));
    assert_eq!(
        h.runner.set_admin("web", "zz", AdminState::Disabled).unwrap_err(),
        crate::daemon::RequestError::NoEndpoint {
            profile: "web".into(),
            endpoint: "zz".into()
        }
    );
}

#[test]
fn a_profile_disabled_through_the_api_stops_probing_and_survives_reload_and_restart() {
    let mut h = Harness::new("profile-admin", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    h.changes();
    let view = h.runner.set_profile_enabled("web", false).unwrap();
    assert_eq!(
        (view.enabled, view.enabled_from_api, view.status),
        (false, true, ProfileStatus::Disabled)
    );
    let changes = h.changes();
    assert_eq!(
        endpoint_changes(&changes),
        [
            ("a", ChangeKind::Admin, Some(S::Online), Some(S::Inactive), false),
            ("b", ChangeKind::Admin, Some(S::Online), Some(S::Inactive), false),
        ]
    );
    assert_eq!(
        profile_changes(&changes).iter().map(|p| p.to).collect::<Vec<_>>(),
        [Some(ProfileStatus::Disabled)]
    );
    h.run_for(5000, |t| panic!("a disabled profile's endpoint {t} was probed"));
    // A reload that leaves `enabled` alone keeps the override.
    h.reload(&[("a", 80), ("b", 81)]).expect("applied");
    assert_eq!(h.profile().0, ProfileStatus::Disabled);
    h.runner.save_if_due(true);
    h.runner.persist.saver.finish();
    let dir = h.dir.clone();
    h.dir = std::env::temp_dir().join("probed-runner-none");
    drop(h);
    let mut h = Harness::start(dir, &[("a", 80), ("b", 81)]);
    assert_eq!(
        h.profile().0,
        ProfileStatus::Disabled,
        "the override survives a restart"
    );
    assert_eq!(h.status("a"), (S::Inactive, false));
    // Enabled again: every endpoint starts over in CheckingEndpoint, and is probed.
    let view = h.runner.set_profile_enabled("web", true).unwrap();
    assert_eq!((view.enabled, view.enabled_from_api), (true, false));
    assert_eq!(h.status("a"), (S::CheckingEndpoint, true));
    h.run_for(4000, OPEN);
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(
        h.runner.set_profile_enabled("nope", false).unwrap_err(),
        crate::daemon::RequestError::NoProfile("nope".into())
    );
}

#[test]
fn a_drained_endpoint_is_probed_takes_no_traffic_and_makes_the_others_fail_open() {
    let mut h = Harness::new("drain", &[("a", 80), ("b", 81)]);
    // a serves, b fails.
    h.run_for(4000, |t| {
        if t.port() == 80 {
            L4Outcome::Open
        } else {
            L4Outcome::Refused
        }
    });
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(h.status("b"), (S::Degraded, false));
    h.changes();
    let view = h.runner.set_admin("web", "a", AdminState::Drain).unwrap();
    assert_eq!(
        (view.status, view.eligible, view.probed, view.admin),
        (S::Online, false, true, AdminState::Drain),
        "its status is its health's; no new traffic"
    );
    // a takes none, and b is all that is left: the profile fails open to it.
    assert_eq!(h.status("b"), (S::Degraded, true));
    assert_eq!(h.profile(), (ProfileStatus::Degraded, true));
    let published = h.changes();
    let changes = endpoint_changes(&published);
    assert!(
        changes.contains(&("a", ChangeKind::Admin, Some(S::Online), Some(S::Online), false)),
        "{changes:?}"
    );
    assert!(
        changes.iter().any(|c| c.0 == "b" && c.4),
        "b's eligibility: {changes:?}"
    );
    // Still probed: a failure is seen, and its recovery.
    let probed_a = std::cell::Cell::new(0);
    h.run_for(4000, |t| {
        if t.port() == 80 {
            probed_a.set(probed_a.get() + 1);
        }
        L4Outcome::Refused
    });
    assert!(
        probed_a.get() >= 3,
        "a drained endpoint is still probed: {}",
        probed_a.get()
    );
    assert_eq!(h.status("a"), (S::Degraded, false));
    h.run_for(4000, |t| {
        if t.port() == 80 {
            L4Outcome::Open
        } else {
            L4Outcome::Refused
        }
    });
    assert_eq!(h.status("a"), (S::Online, false));
    // Enabled again: eligible at once, its health kept (it was probed all along).
    let view = h.runner.set_admin("web", "a", AdminState::Enabled).unwrap();
    assert_eq!((view.status, view.eligible), (S::Online, true));
    assert_eq!(h.status("b"), (S::Degraded, false), "fail-open ends");
    let p = &h.runner.table.profiles()[0];
    assert_eq!(
        (
            p.counts.get(S::Online),
            p.counts.get(S::Degraded),
            p.counts.get(S::Disabled)
        ),
        (1, 1, 0)
    );
}
