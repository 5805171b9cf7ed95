//! The runner without root: the L4 engine is `FakeL4` (probes are answered here), time is a
//! `FakeClock`, and the change stream is read through a subscription. Each test drives the
//! runner's own functions (fire, on_l4, requests) the way its loop would.
use crate::changes::{Change, ChangeKind, EndpointChange, ProfileChange, Subscription};
use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use super::Runner;
use crate::{
    config::Config,
    daemon::{
        ports::{
            fake::{starter, FakeClock, FakeL4},
            Ports,
        },
        Options,
    },
    engine::{L4Outcome, L4Proto, L4Result},
    status::{AdminState, EndpointStatus as S, Health, ProfileStatus},
};

/// A runner on a virtual clock with its files in a private directory.
struct Harness {
    runner: Runner,
    l4: Arc<FakeL4>,
    clock: FakeClock,
    dir: PathBuf,
    changes: Subscription,
}

/// lb, TCP, interval 1 s, timeout 500 ms, 2 results either way; one endpoint per name, at
/// 198.18.1.<n>:<port>.
fn config_text(dir: &std::path::Path, endpoints: &[(&str, u16)]) -> String {
    let mut text = format!(
        "[daemon]\nevents = \"{}\"\nstate_file = \"{}\"\npin_dir = \"{}\"\n\n\
         [[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
         protocol = \"tcp\"\ninterval = \"1s\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n",
        dir.join("events.jsonl").display(),
        dir.join("state.json").display(),
        dir.join("pins").display()
    );
    for (i, (name, port)) in endpoints.iter().enumerate() {
        text.push_str(&format!(
            "\n[[profile.endpoint]]\nname = \"{name}\"\naddress = \"198.18.1.{}\"\nport = {port}\npriority = {}\n",
            i + 1,
            i + 1
        ));
    }
    text
}

fn parse(text: &str) -> Config {
    Config::parse(text, "unit.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

impl Harness {
    fn new(name: &str, endpoints: &[(&str, u16)]) -> Harness {
        let dir = std::env::temp_dir().join(format!("probed-runner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self::start(dir, endpoints)
    }

    /// A runner over `dir` (a restart when a runner used it before).
    fn start(dir: PathBuf, endpoints: &[(&str, u16)]) -> Harness {
        let l4 = Arc::new(FakeL4::default());
        let clock = FakeClock::default();
        clock.set_ns(1_000_000_000);
        let ports = Ports {
            clock: Box::new(clock.clone()),
            start_l4: starter(l4.clone()),
        };
        let config = parse(&config_text(&dir, endpoints));
        let mut runner = Runner::new(config, Options::default(), ports).expect("runner starts");
        let (_, changes) = runner.subscribe("test", 1024);
        Harness {
            runner,
            l4,
            clock,
            dir,
            changes,
        }
    }

    /// Runs the loop's work until `ms` from now: fires what is due and answers every probe
    /// 1 ms later with `answer(target)`.
    fn run_for(&mut self, ms: u64, answer: impl Fn(SocketAddr) -> L4Outcome) {
        let until = self.clock.now() + ms * 1_000_000;
        while let Some(due) = self.runner.probe.sched.next_due().filter(|d| *d <= until) {
            self.clock.set_ns(due.max(self.clock.now()));
            self.runner.fire(self.clock.now());
            self.clock.advance_ms(1);
            for req in self.l4.take() {
                let outcome = answer(req.target);
                self.runner.on_l4(L4Result {
                    token: req.token,
                    target: req.target,
                    outcome,
                    elapsed: Duration::from_millis(1),
                    queued: Duration::ZERO,
                });
            }
        }
        self.clock.set_ns(until.max(self.clock.now()));
    }

    fn status(&self, endpoint: &str) -> (S, bool) {
        let id = self.runner.table.find("web", endpoint).expect("endpoint exists");
        let t = &self.runner.table.targets[&id];
        (t.status(), t.eligible())
    }

    fn profile(&self) -> (ProfileStatus, bool) {
        let p = &self.runner.table.profiles[0];
        (p.status, p.fail_open)
    }

    /// Every change published since the last call, oldest first.
    fn changes(&self) -> Vec<Change> {
        self.changes
            .recv_blocking(Duration::ZERO)
            .map(|b| b.changes.into_iter().map(Arc::unwrap_or_clone).collect())
            .unwrap_or_default()
    }

    fn reload(
        &mut self,
        endpoints: &[(&str, u16)],
    ) -> Result<crate::daemon::ReloadReport, crate::daemon::RequestError> {
        let config = parse(&config_text(&self.dir, endpoints));
        self.runner.reload(Some(config))
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An endpoint change as (endpoint, kind, from, to, eligible after).
type Summary<'a> = (&'a str, ChangeKind, Option<S>, Option<S>, bool);

fn endpoint_changes(changes: &[Change]) -> Vec<Summary<'_>> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Endpoint(e) => Some(summary(e)),
            Change::Profile(_) => None,
        })
        .collect()
}

fn summary(e: &EndpointChange) -> Summary<'_> {
    let to = (!e.removed).then_some(e.state.status);
    (&e.endpoint, e.kind, e.from, to, !e.removed && e.state.eligible)
}

fn profile_changes(changes: &[Change]) -> Vec<&ProfileChange> {
    changes
        .iter()
        .filter_map(|c| match c {
            Change::Profile(p) => Some(p),
            Change::Endpoint(_) => None,
        })
        .collect()
}

const OPEN: fn(SocketAddr) -> L4Outcome = |_| L4Outcome::Open;
/// Probes of port 80 time out, the others find it open.
const ONLY_PORT_80_FAILS: fn(SocketAddr) -> L4Outcome = |t| {
    if t.port() == 80 {
        L4Outcome::Timeout
    } else {
        L4Outcome::Open
    }
};

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
fn a_nested_endpoint_follows_its_child_profile() {
    let mut h = Harness::new("nested", &[("a", 80)]);
    // web: a (198.18.1.1:80) and the nested profile eu, whose endpoints are at ports 90 and 91.
    let text = config_text(&h.dir, &[("a", 80)])
        + "\n[[profile.endpoint]]\nname = \"eu-pool\"\nprofile = \"eu\"\nmin_child_endpoints = 2\n"
        + "\n[[profile]]\nname = \"eu\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\n\
           interval = \"1s\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n\
           \n[[profile.endpoint]]\nname = \"e1\"\naddress = \"198.18.2.1\"\nport = 90\n\
           \n[[profile.endpoint]]\nname = \"e2\"\naddress = \"198.18.2.2\"\nport = 91\n";
    h.changes();
    h.runner.reload(Some(parse(&text))).expect("applied");
    // The reload's new nested endpoint is published like any endpoint it adds.
    let added = h.changes();
    assert!(
        endpoint_changes(&added).contains(&("eu-pool", ChangeKind::Config, None, Some(S::CheckingEndpoint), true)),
        "{added:#?}"
    );
    let nested = |h: &Harness| {
        let n = &h.runner.table.profiles[0].nested[0];
        (n.status, n.eligible)
    };
    assert_eq!(nested(&h), (S::CheckingEndpoint, true), "its child has no verdict yet");
    h.run_for(4000, OPEN);
    assert_eq!(nested(&h), (S::Online, true));
    h.changes();
    // One child endpoint fails: fewer than min_child_endpoints (2) are available.
    h.run_for(4000, |t| {
        if t.port() == 91 {
            L4Outcome::Refused
        } else {
            L4Outcome::Open
        }
    });
    assert_eq!(nested(&h), (S::Degraded, false));
    let changes = h.changes();
    assert!(
        endpoint_changes(&changes).contains(&(
            "eu-pool",
            ChangeKind::Health,
            Some(S::Online),
            Some(S::Degraded),
            false
        )),
        "{changes:#?}"
    );
    assert!(
        profile_changes(&changes)
            .iter()
            .any(|p| &*p.profile == "web" && p.to == Some(ProfileStatus::Degraded)),
        "the parent's status counts its nested endpoint"
    );
    // The child disabled through the API: its nested endpoint is Stopped.
    h.runner.set_profile_enabled("eu", false).unwrap();
    assert_eq!(nested(&h), (S::Stopped, false));
    let view = h.runner.set_profile_enabled("eu", true).unwrap();
    assert_eq!(view.status, ProfileStatus::CheckingEndpoints);
    assert_eq!(nested(&h), (S::CheckingEndpoint, true));
    let web = &crate::daemon::requests::profile_view_of(&h.runner, "web");
    assert_eq!(web.nested[0].profile, "eu");
    assert_eq!(
        (
            web.nested[0].available_child_endpoints,
            web.nested[0].min_child_endpoints
        ),
        (2, 2)
    );
}

#[test]
fn reload_carries_state_over_and_publishes_what_changed() {
    let mut h = Harness::new("reload", &[("a", 80), ("b", 80), ("c", 80)]);
    h.run_for(4000, OPEN);
    h.changes();
    // a stays, b changes its port (a new check), c goes, d comes.
    let report = h.reload(&[("a", 80), ("b", 81), ("d", 80)]).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (1, 2, 2));
    assert_eq!(h.status("a"), (S::Online, true), "a keeps its state");
    assert_eq!(h.status("b"), (S::CheckingEndpoint, true), "a new check starts over");
    let changes = h.changes();
    let mut got = endpoint_changes(&changes);
    got.sort_by_key(|c| c.0);
    assert_eq!(
        got,
        [
            (
                "b",
                ChangeKind::Config,
                Some(S::Online),
                Some(S::CheckingEndpoint),
                true
            ),
            ("c", ChangeKind::Config, Some(S::Online), None, false),
            ("d", ChangeKind::Config, None, Some(S::CheckingEndpoint), true),
        ]
    );
    // A new weight changes no status, but a data-path consumer must see it.
    let text =
        config_text(&h.dir, &[("a", 80), ("b", 81), ("d", 80)]).replace("name = \"a\"\n", "name = \"a\"\nweight = 5\n");
    let report = h.runner.reload(Some(parse(&text))).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (3, 0, 0));
    let changes = h.changes();
    assert_eq!(
        endpoint_changes(&changes),
        [("a", ChangeKind::Config, Some(S::Online), Some(S::Online), true)]
    );
    let Change::Endpoint(a) = &changes[0] else {
        unreachable!()
    };
    assert_eq!(a.state.weight, 5);
    // A configuration that cannot be applied changes nothing, and says why: here its events
    // file cannot be opened (its directory would be under a regular file).
    let mut bad = parse(&config_text(&h.dir, &[("a", 80)]));
    let blocker = h.dir.join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    bad.daemon.events = crate::config::EventsOutput::File(blocker.join("events.jsonl"));
    let err = h.runner.reload(Some(bad)).unwrap_err().to_string();
    assert!(err.contains("create the events directory"), "{err}");
    assert!(h.runner.table.find("web", "d").is_some(), "the running table stays");
    assert!(h.changes().is_empty());
    h.run_for(4000, OPEN);
    assert_eq!(h.status("d"), (S::Online, true));
}

/// Where a target lives: a reload that leaves an endpoint untouched keeps this.
fn target_at(h: &Harness, endpoint: &str) -> (u64, *const crate::daemon::table::Target) {
    let id = h.runner.table.find("web", endpoint).expect("endpoint exists");
    (id, &raw const *h.runner.table.targets[&id])
}

/// Every profile's counts are those of its endpoints' statuses, nested ones included.
fn assert_counts(runner: &Runner) {
    for p in &runner.table.profiles {
        let statuses: Vec<S> = (p.owners.iter().map(|id| runner.table.targets[id].status()))
            .chain(p.nested.iter().map(|n| n.status))
            .collect();
        assert_eq!(p.counts, crate::status::StatusCounts::of(&statuses), "{}", p.name);
    }
}

/// Every target's profile index names the profile that owns it.
fn assert_profile_indices(runner: &Runner) {
    for (pix, p) in runner.table.profiles.iter().enumerate() {
        for id in &p.owners {
            assert_eq!(runner.table.targets[id].profile_ix() as usize, pix, "{}", p.name);
        }
    }
    assert_eq!(
        runner.table.targets.len(),
        runner.table.profiles.iter().map(|p| p.owners.len()).sum::<usize>()
    );
}

/// Every tracker points to its profile's one copy of the thresholds and timing.
fn assert_shared_rules(runner: &Runner) {
    for p in &runner.table.profiles {
        for id in &p.owners {
            assert!(
                Arc::ptr_eq(runner.table.targets[id].tracker().rules(), &p.rules),
                "{}",
                p.name
            );
        }
    }
}

/// Every target's name is the running config's copy, not one of its own or of a replaced
/// config.
fn assert_shared_names(runner: &Runner) {
    for (entry, profile) in runner.table.profiles.iter().zip(&runner.config.profiles) {
        assert_eq!(entry.owners.len(), profile.endpoints.len(), "{}", profile.name);
        for (id, endpoint) in entry.owners.iter().zip(&profile.endpoints) {
            assert!(
                Arc::ptr_eq(&runner.table.targets[id].name(), &endpoint.name),
                "{}/{}",
                profile.name,
                endpoint.name
            );
        }
    }
}

#[test]
fn a_reload_leaves_the_endpoints_it_does_not_change_untouched() {
    let mut h = Harness::new("untouched", &[("a", 80), ("b", 80), ("c", 80)]);
    h.run_for(4000, OPEN);
    h.changes();
    let (a, c) = (target_at(&h, "a"), target_at(&h, "c"));
    let b = target_at(&h, "b").0;
    let report = h.reload(&[("a", 80), ("b", 81), ("c", 80)]).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (2, 1, 1));
    assert_counts(&h.runner);
    assert_eq!(
        (target_at(&h, "a"), target_at(&h, "c")),
        (a, c),
        "the same targets, not copies"
    );
    assert_ne!(target_at(&h, "b").0, b, "a new check, a new id");
    assert_shared_names(&h.runner);
    assert_eq!(
        endpoint_changes(&h.changes()),
        [(
            "b",
            ChangeKind::Config,
            Some(S::Online),
            Some(S::CheckingEndpoint),
            true
        )]
    );
    // The untouched ones keep being probed on their schedule; b's new check starts over.
    h.run_for(3000, OPEN);
    assert_eq!(
        (h.status("a"), h.status("b"), h.status("c")),
        ((S::Online, true), (S::Online, true), (S::Online, true))
    );
    assert_eq!(h.runner.probe.sched.len(), 3);
    behind_counts(&h.runner);
    h.changes();
    // A profile setting that changes (here its routing) rebuilds its endpoints with their
    // state: the same ids, Online still, nothing for consumers to see.
    let text = config_text(&h.dir, &[("a", 80), ("b", 81), ("c", 80)]).replace("\"priority\"", "\"weighted\"");
    let report = h.runner.reload(Some(parse(&text))).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (3, 0, 0));
    assert_eq!(target_at(&h, "a").0, a.0);
    assert_ne!(target_at(&h, "a").1, a.1, "rebuilt with the new routing");
    assert_eq!(h.status("a"), (S::Online, true));
    let changes = h.changes();
    assert!(endpoint_changes(&changes).is_empty(), "{changes:#?}");
    assert_shared_rules(&h.runner);
    // A new threshold: new rules, shared again, the state carried.
    let text = text.replace("healthy_threshold = 2", "healthy_threshold = 3");
    h.runner.reload(Some(parse(&text))).expect("applied");
    assert_shared_rules(&h.runner);
    assert_eq!(h.runner.table.profiles[0].rules.thresholds.healthy(), 3);
    assert_eq!(h.status("a"), (S::Online, true));
}

#[test]
fn a_reload_that_leaves_only_degraded_endpoints_turns_fail_open_on_for_the_untouched_ones() {
    let mut h = Harness::new("reload-fail-open", &[("a", 80), ("b", 81)]);
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(
        (h.status("a"), h.status("b")),
        ((S::Degraded, false), (S::Online, true))
    );
    h.changes();
    let a = target_at(&h, "a");
    // b goes: a, untouched, is the whole pool and Degraded, so it answers again.
    let report = h.reload(&[("a", 80)]).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (1, 0, 1));
    assert_eq!(target_at(&h, "a"), a);
    assert_eq!(h.status("a"), (S::Degraded, true));
    assert_eq!(h.profile(), (ProfileStatus::Degraded, true));
    let changes = h.changes();
    let mut got = endpoint_changes(&changes);
    got.sort_by_key(|c| c.0);
    assert_eq!(
        got,
        [
            ("a", ChangeKind::Config, Some(S::Degraded), Some(S::Degraded), true),
            ("b", ChangeKind::Config, Some(S::Online), None, false),
        ]
    );
    assert!(profile_changes(&changes).iter().any(|p| p.fail_open));
    // b comes back: fail-open ends, a leaves rotation again.
    h.reload(&[("a", 80), ("b", 81)]).expect("applied");
    assert_eq!(h.status("a"), (S::Degraded, false));
    assert!(!h.profile().1, "fail-open ends");
}

#[test]
fn a_reload_of_a_child_profile_that_turns_its_parents_fail_open_on_publishes_the_parents_endpoints() {
    let mut h = Harness::new("reload-nested-fail-open", &[("a", 80)]);
    // web: a (port 80, failing) and eu-pool, nested from eu (ports 90 and 91, answering).
    let dir = h.dir.clone();
    let text = |child_ports: &[u16]| {
        let mut t = config_text(&dir, &[("a", 80)])
            + "\n[[profile.endpoint]]\nname = \"eu-pool\"\nprofile = \"eu\"\nmin_child_endpoints = 2\n"
            + "\n[[profile]]\nname = \"eu\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\n\
               interval = \"1s\"\ntimeout = \"500ms\"\nhealthy_threshold = 2\nunhealthy_threshold = 2\n";
        for (i, port) in child_ports.iter().enumerate() {
            t += &format!("\n[[profile.endpoint]]\nname = \"e{i}\"\naddress = \"198.18.2.{i}\"\nport = {port}\n");
        }
        t
    };
    h.runner.reload(Some(parse(&text(&[90, 91])))).expect("applied");
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a"), (S::Degraded, false), "eu-pool carries web");
    h.changes();
    let a = target_at(&h, "a");
    // Only eu changes: one endpoint fewer than eu-pool needs, so web's pool is all Degraded
    // and a, untouched in an unchanged profile, answers again.
    h.runner.reload(Some(parse(&text(&[90])))).expect("applied");
    assert_eq!(target_at(&h, "a"), a);
    assert_counts(&h.runner);
    assert_eq!(h.status("a"), (S::Degraded, true));
    let changes = h.changes();
    assert!(
        endpoint_changes(&changes).contains(&("a", ChangeKind::Config, Some(S::Degraded), Some(S::Degraded), true)),
        "{changes:#?}"
    );
}

#[test]
fn profiles_and_endpoints_that_move_in_the_file_stay_untouched() {
    let h_text = |dir: &std::path::Path, swapped: bool| {
        let base = config_text(dir, &[("a", 80), ("b", 81)]);
        let (head, web) = base.split_at(base.find("[[profile]]").unwrap());
        let api = web
            .replace("name = \"web\"", "name = \"api\"")
            .replace("198.18.1.", "198.18.2.");
        if swapped {
            // api first, and web's endpoints in the other order (each keeps its address).
            let (top, eps) = web.split_at(web.find("[[profile.endpoint]]").unwrap());
            let (ea, eb) = eps.split_at(eps.find("\n[[profile.endpoint]]").unwrap());
            format!("{head}{api}\n{top}{}\n{ea}\n", eb.trim_start())
        } else {
            format!("{head}{web}\n{api}")
        }
    };
    let mut h = Harness::new("moved", &[]);
    h.runner.reload(Some(parse(&h_text(&h.dir, false)))).expect("applied");
    h.run_for(4000, OPEN);
    h.changes();
    let (a, b) = (target_at(&h, "a"), target_at(&h, "b"));
    let report = h.runner.reload(Some(parse(&h_text(&h.dir, true)))).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (4, 0, 0));
    assert_eq!((target_at(&h, "a"), target_at(&h, "b")), (a, b));
    assert_eq!(h.runner.table.profiles[0].name.as_ref(), "api");
    let web = &h.runner.table.profiles[1];
    assert_eq!(web.owners, [b.0, a.0], "owners follow the file's order");
    assert_profile_indices(&h.runner);
    assert!(endpoint_changes(&h.changes()).is_empty());
    behind_counts(&h.runner);
}

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

/// Each profile's count of endpoints behind schedule, as the runner keeps it, after checking
/// it against a count of the probed endpoints' lateness.
fn behind_counts(runner: &Runner) -> Vec<u64> {
    let kept: Vec<u64> = runner.table.profiles.iter().map(|p| p.behind).collect();
    let mut counted = vec![0u64; kept.len()];
    for t in runner.table.targets.values() {
        if t.should_probe() && t.behind() {
            counted[t.profile_ix() as usize] += 1;
        }
    }
    assert_eq!(kept, counted, "counts kept as results come vs counted");
    kept
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
    let runner = Runner::new(config, Options::default(), ports).expect("runner starts");
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

/// A second runner on `text` beside a running one must be refused as `InUse` for `what`.
fn assert_refused_beside(h: &Harness, text: &str, what: &str) {
    let second = Runner::new(
        parse(text),
        Options::default(),
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
    let mut runner = Runner::new(config, Options::default(), ports).expect("runner starts");
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
    use super::persist::save_gap_ns;
    let s = 1_000_000_000;
    assert_eq!(save_gap_ns(0), s);
    assert_eq!(save_gap_ns(100_000), s);
    assert_eq!(save_gap_ns(250_000), 5 * s / 2);
    assert_eq!(save_gap_ns(1_000_000), 10 * s);
}

#[test]
fn a_snapshot_taken_in_slices_holds_every_endpoint_once() {
    use super::persist::Snapshot;
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
    use super::watchdog::slice;
    assert_eq!(slice(1_000_000, 1_000_000), 1000, "a millisecond's share");
    assert_eq!(slice(1_000_000, 1_000_000_000), 1_000_000);
    assert_eq!(slice(10, 1_000_000), 1, "rounded up: a small table is not skipped");
    assert_eq!(slice(10, 0), 0);
}

#[test]
fn the_engines_first_target_is_found_in_the_config_as_the_built_table_would_give_it() {
    use super::{config_specs, first_l4, FirstL4};
    use crate::daemon::{state::Saved, table::Table};
    let dir = std::env::temp_dir();
    let http = "[[profile]]\nname = \"api\"\ndialect = \"lb\"\nrouting = \"priority\"\n\n[profile.health]\n\
                protocol = \"http\"\nport = 8080\ninterval = \"1s\"\ntimeout = \"500ms\"\n\n\
                [[profile.endpoint]]\nname = \"h\"\naddress = \"198.18.2.1\"\npriority = 1\n\n";
    let web = "[[profile]]\nname = \"web\"";
    // An HTTP profile ahead of the TCP one: the TCP check is the one that needs the engine.
    let mixed = parse(&config_text(&dir, &[("a", 80), ("b", 81)]).replacen(web, &format!("{http}{web}"), 1));
    let http_only = config_text(&dir, &[]);
    let http_only = &http_only[..http_only.find(web).expect("a profile")];
    let kernel = parse(&format!("{http_only}{http}"));
    let sockets =
        parse(&format!("{http_only}{http}").replacen("[daemon]\n", "[daemon]\nhttp_probes = \"sockets\"\n", 1));
    let at = |s: &str| s.parse::<SocketAddr>().unwrap();
    for (config, want) in [
        (&mixed, FirstL4::Required(at("198.18.1.1:80"))),
        (&kernel, FirstL4::Http(at("198.18.2.1:8080"))),
        (&sockets, FirstL4::None),
    ] {
        assert_eq!(first_l4(config_specs(config), config), want);
        let plan = crate::daemon::table::plan(config, None, &Table::default(), &Saved::default(), &mut 1)
            .expect("the table builds");
        assert_eq!(
            first_l4(plan.built().map(|t| &**t.spec()), config),
            want,
            "the built table"
        );
    }
}
