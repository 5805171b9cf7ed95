//! The state file and the locks: resuming, refusing a second daemon, what is written.
use super::{reload::assert_shared_rules, *};

#[test]
fn a_restart_resumes_saved_health_without_probing_first() {
    let mut h = Harness::new("restart", &[("a", 80), ("b", 81), ("c", 82)]);
    h.run_for(4000, |t| {
        if t.port() == 81 {
            L4Outcome::Refused
        } else {
            L4Outcome::Open
        }
    });
    h.runner.set_admin("web", "c", AdminState::Disabled).unwrap();
    h.runner.save_if_due(true);
    h.runner.persist.saver.finish();
    let dir = h.dir.clone();
    // The second runner takes over the directory; the first must not remove it.
    h.dir = std::env::temp_dir().join("probed-runner-none");
    drop(h);

    let h = Harness::start(dir, &[("a", 80), ("b", 81), ("c", 82)]);
    assert_eq!(h.status("a"), (S::Online, true));
    assert_eq!(h.status("b"), (S::Degraded, false));
    assert_eq!(h.status("c"), (S::Disabled, false));
    let c = crate::daemon::requests::status_view(&h.runner, "c");
    assert!(c.admin_from_api, "the API's override survives a restart");
    assert_eq!(
        c.last_change.map(|l| (l.kind, l.to)),
        Some((ChangeKind::Admin, S::Disabled))
    );
    assert!(h.changes().is_empty(), "resuming is not a change");
    assert!(h.l4.take().is_empty(), "nothing was sent yet");
    assert_shared_rules(&h.runner);
}

/// The state file keeps what each check looks at: a restart with another timeout resumes the
/// saved health; one with another port starts that endpoint afresh.
#[test]
fn a_restart_with_other_timing_resumes_the_saved_health() {
    let mut h = Harness::new("restart-retime", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    h.runner.save_if_due(true);
    h.runner.persist.saver.finish();
    let dir = h.dir.clone();
    h.dir = std::env::temp_dir().join("probed-runner-none");
    drop(h);

    let text = config_text(&dir, &[("a", 80), ("b", 82)]).replace("timeout = \"500ms\"", "timeout = \"300ms\"");
    let h = Harness::start_with(dir, parse(&text));
    assert_eq!(h.status("a"), (S::Online, true), "the same address and port: resumed");
    assert_eq!(h.status("b"), (S::CheckingEndpoint, true), "another port: afresh");
}

/// A second runner on `text` beside a running one must be refused as `InUse` for `what`.
fn assert_refused_beside(h: &Harness, text: &str, what: &str) {
    let second = Runner::new(
        parse(text),
        Ports {
            clock: Box::new(FakeClock::default()),
            start_l4: starter(Arc::new(FakeL4::default())),
        },
    );
    match second {
        Err(e @ crate::daemon::DaemonError::InUse { .. }) => {
            assert!(e.to_string().contains(what), "{e}");
        }
        Err(e) => panic!("refused for the wrong reason: {e}"),
        Ok(_) => panic!("two daemons shared {what} ({})", h.dir.display()),
    }
}

#[test]
fn a_second_daemon_on_the_same_state_file_or_pins_is_refused() {
    let h = Harness::new("locked", &[("a", 80)]);
    assert_refused_beside(&h, &config_text(&h.dir, &[("a", 80)]), "the state file");
}

#[test]
fn two_daemons_cannot_share_a_pin_directory_either() {
    let h = Harness::new("pins-locked", &[("a", 80)]);
    // Its own state file, the same pin directory.
    let text = config_text(&h.dir, &[("a", 80)]).replace("state.json", "other-state.json");
    assert_refused_beside(&h, &text, "pin");
}

#[test]
fn header_values_never_reach_the_state_file() {
    let dir = std::env::temp_dir().join(format!("probed-runner-redact-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // tm: the dialect with custom headers (SPEC 2), at the profile and at the endpoint.
    let text = format!(
        "[daemon]\nevents = \"{}\"\nstate_file = \"{}\"\npin_dir = \"{}\"\n\n\
         [[profile]]\nname = \"web\"\ndialect = \"tm\"\nrouting = \"priority\"\n\n[profile.health]\n\
         protocol = \"http\"\nport = 80\ninterval = \"10s\"\ntimeout = \"5s\"\n\
         headers = [\"Authorization:Bearer s3cret-probe-token\"]\n\n\
         [[profile.endpoint]]\nname = \"a\"\naddress = \"198.18.1.1\"\npriority = 1\n\
         headers = [\"X-Api-Key:an0ther-s3cret\"]\n",
        dir.join("events.jsonl").display(),
        dir.join("state.json").display(),
        dir.join("pins").display()
    );
    let config = parse(&text);
    let ports = Ports {
        clock: Box::new(FakeClock::default()),
        start_l4: starter(Arc::new(FakeL4::default())),
    };
    let mut runner = Runner::new(config, ports).expect("runner starts");
    runner.persist.dirty = true;
    runner.save_if_due(true);
    runner.persist.saver.finish();
    let saved = std::fs::read_to_string(dir.join("state.json")).expect("the state file was written");
    assert!(saved.contains(r#""endpoint":"a""#), "{saved}");
    for secret in ["s3cret-probe-token", "an0ther-s3cret", "Authorization", "X-Api-Key"] {
        assert!(!saved.contains(secret), "{secret} leaked into the state file: {saved}");
    }
    drop(runner);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_state_file_is_rewritten_less_often_as_the_table_grows() {
    use crate::daemon::runner::persist::save_gap_ns;
    let s = 1_000_000_000;
    assert_eq!(save_gap_ns(0), s);
    assert_eq!(save_gap_ns(100_000), s);
    assert_eq!(save_gap_ns(250_000), 5 * s / 2);
    assert_eq!(save_gap_ns(1_000_000), 10 * s);
}

#[test]
fn a_snapshot_taken_in_slices_holds_every_endpoint_once() {
    use crate::daemon::runner::persist::Snapshot;
    let h = Harness::new("slices", &[("a", 80), ("b", 81), ("c", 82)]);
    let names = |s: &[crate::daemon::state::SavedTarget]| {
        s.iter()
            .map(|t| (t.profile.clone(), t.endpoint.clone()))
            .collect::<Vec<_>>()
    };
    let mut whole = Vec::new();
    assert!(Snapshot::new(1).take(&h.runner.table, usize::MAX, &mut whole));
    let mut sliced = Snapshot::new(2);
    let mut got = Vec::new();
    assert!(
        !sliced.take(&h.runner.table, 2, &mut got),
        "two of three in the first slice"
    );
    assert_eq!(got.len(), 2);
    assert!(sliced.take(&h.runner.table, 2, &mut got), "the rest in the second");
    assert_eq!(names(&got), names(&whole));
    assert_eq!(whole.len(), 3);
}
