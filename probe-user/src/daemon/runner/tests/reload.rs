//! Reloads: what carries over, what is published, what stays untouched; nested profiles.
use super::*;

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
    h.runner.reload_only(parse(&text)).expect("applied");
    // The reload's new nested endpoint is published like any endpoint it adds.
    let added = h.changes();
    assert!(
        endpoint_changes(&added).contains(&("eu-pool", ChangeKind::Config, None, Some(S::CheckingEndpoint), true)),
        "{added:#?}"
    );
    let nested = |h: &Harness| {
        let n = &h.runner.table.profiles()[0].nested[0];
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
    let report = h.runner.reload_only(parse(&text)).expect("applied");
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
    h.run_for(4000, OPEN);
    assert_eq!(h.status("d"), (S::Online, true));
}

/// Where a target lives: a reload that leaves an endpoint untouched keeps this.
fn target_at(h: &Harness, endpoint: &str) -> (u64, *const crate::daemon::table::Target) {
    let id = h.runner.table.find("web", endpoint).expect("endpoint exists");
    (id, &raw const *h.runner.table.targets()[&id])
}

/// Every profile's counts are those of its endpoints' statuses, nested ones included.
fn assert_counts(runner: &Runner) {
    for p in runner.table.profiles() {
        let statuses: Vec<S> = (p.owners.iter().map(|id| runner.table.targets()[id].status()))
            .chain(p.nested.iter().map(|n| n.status))
            .collect();
        assert_eq!(p.counts, crate::status::StatusCounts::of(&statuses), "{}", p.name);
    }
}

/// Every target's profile index names the profile that owns it.
fn assert_profile_indices(runner: &Runner) {
    for (pix, p) in runner.table.profiles().iter().enumerate() {
        for id in &p.owners {
            assert_eq!(runner.table.targets()[id].profile_ix() as usize, pix, "{}", p.name);
        }
    }
    assert_eq!(
        runner.table.targets().len(),
        runner.table.profiles().iter().map(|p| p.owners.len()).sum::<usize>()
    );
}

/// Every tracker points to its profile's one copy of the thresholds and timing.
pub(super) fn assert_shared_rules(runner: &Runner) {
    for p in runner.table.profiles() {
        for id in &p.owners {
            assert!(
                Arc::ptr_eq(runner.table.targets()[id].tracker().rules(), &p.rules),
                "{}",
                p.name
            );
        }
    }
}

/// Every target's name is the running config's copy, not one of its own or of a replaced
/// config.
fn assert_shared_names(runner: &Runner) {
    for (entry, profile) in runner.table.profiles().iter().zip(&runner.config.profiles) {
        assert_eq!(entry.owners.len(), profile.endpoints.len(), "{}", profile.name);
        for (id, endpoint) in entry.owners.iter().zip(&profile.endpoints) {
            assert!(
                Arc::ptr_eq(runner.table.targets()[id].name(), &endpoint.name),
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
    let report = h.runner.reload_only(parse(&text)).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (3, 0, 0));
    assert_eq!(target_at(&h, "a").0, a.0);
    assert_ne!(target_at(&h, "a").1, a.1, "rebuilt with the new routing");
    assert_eq!(h.status("a"), (S::Online, true));
    let changes = h.changes();
    assert!(endpoint_changes(&changes).is_empty(), "{changes:#?}");
    assert_shared_rules(&h.runner);
    // A new threshold: new rules, shared again, the state carried.
    let text = text.replace("healthy_threshold = 2", "healthy_threshold = 3");
    h.runner.reload_only(parse(&text)).expect("applied");
    assert_shared_rules(&h.runner);
    assert_eq!(h.runner.table.profiles()[0].rules.thresholds.healthy(), 3);
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
    h.runner.reload_only(parse(&text(&[90, 91]))).expect("applied");
    h.run_for(4000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a"), (S::Degraded, false), "eu-pool carries web");
    h.changes();
    let a = target_at(&h, "a");
    // Only eu changes: one endpoint fewer than eu-pool needs, so web's pool is all Degraded
    // and a, untouched in an unchanged profile, answers again.
    h.runner.reload_only(parse(&text(&[90]))).expect("applied");
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
    h.runner.reload_only(parse(&h_text(&h.dir, false))).expect("applied");
    h.run_for(4000, OPEN);
    h.changes();
    let (a, b) = (target_at(&h, "a"), target_at(&h, "b"));
    let report = h.runner.reload_only(parse(&h_text(&h.dir, true))).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (4, 0, 0));
    assert_eq!((target_at(&h, "a"), target_at(&h, "b")), (a, b));
    assert_eq!(h.runner.table.profiles()[0].name.as_ref(), "api");
    let web = &h.runner.table.profiles()[1];
    assert_eq!(web.owners, [b.0, a.0], "owners follow the file's order");
    assert_profile_indices(&h.runner);
    assert!(endpoint_changes(&h.changes()).is_empty());
    behind_counts(&h.runner);
}

#[test]
fn the_engines_first_target_is_found_in_the_config_as_the_built_table_would_give_it() {
    use crate::daemon::runner::{config_specs, first_l4, FirstL4};
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

/// The check every endpoint of the harness's profile is scheduled with now.
fn scheduled_timeouts(h: &Harness) -> Vec<u32> {
    let mut out: Vec<u32> = (h.runner.table.targets().values())
        .map(|t| {
            assert!(t.check().is_some(), "every endpoint is scheduled");
            t.spec().timeout_us()
        })
        .collect();
    out.sort_unstable();
    out
}

/// A reload that changes only when and how long the check waits (timeout, interval) or what
/// it takes to change (thresholds) keeps every endpoint's health, eligibility, id and results
/// toward a change, publishes nothing, and schedules the new check in place of the old one;
/// one that changes where the check goes starts that endpoint over (as above).
#[test]
fn a_reload_of_timing_and_thresholds_keeps_health_and_pending_results() {
    let mut h = Harness::new("retime", &[("a", 80), ("b", 81)]);
    h.run_for(4000, OPEN);
    assert_eq!((h.status("a"), h.status("b")), ((S::Online, true), (S::Online, true)));
    // One failure of a toward the threshold of two.
    let a = h.runner.table.find("web", "a").unwrap();
    h.run_for(1000, ONLY_PORT_80_FAILS);
    assert_eq!(h.runner.table.targets()[&a].tracker().pending(), 1);
    h.changes();
    let before_ids = (target_at(&h, "a").0, target_at(&h, "b").0);
    let text = config_text(&h.dir, &[("a", 80), ("b", 81)])
        .replace("timeout = \"500ms\"", "timeout = \"400ms\"")
        .replace("interval = \"1s\"", "interval = \"2s\"")
        .replace("unhealthy_threshold = 2", "unhealthy_threshold = 3");
    let report = h.runner.reload_only(parse(&text)).expect("applied");
    assert_eq!((report.kept, report.added, report.removed), (2, 0, 0));
    assert_eq!((target_at(&h, "a").0, target_at(&h, "b").0), before_ids, "the same ids");
    assert_eq!((h.status("a"), h.status("b")), ((S::Online, true), (S::Online, true)));
    assert_eq!(
        h.runner.table.targets()[&a].tracker().pending(),
        1,
        "a's failure still counts"
    );
    let changes = h.changes();
    assert!(endpoint_changes(&changes).is_empty(), "{changes:#?}");
    assert!(profile_changes(&changes).is_empty(), "{changes:#?}");
    assert_eq!(scheduled_timeouts(&h), [400_000, 400_000], "the new check is scheduled");
    assert_eq!(h.runner.probe.sched.len(), 2, "and the old one is gone");
    assert_shared_rules(&h.runner);
    // Two more failures make three, the new threshold: a leaves then, not sooner.
    h.run_for(2000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a"), (S::Online, true), "two of three");
    h.run_for(2000, ONLY_PORT_80_FAILS);
    assert_eq!(h.status("a").0, S::Degraded, "three of three");
    assert_eq!(h.status("b"), (S::Online, true));
    behind_counts(&h.runner);
}
