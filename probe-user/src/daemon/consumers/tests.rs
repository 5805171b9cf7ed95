//! The consumers' lifecycle against a bus of its own (the runner's part is the bus and the
//! joins, done here as the runner does them): the events file through a start, a refused
//! reload and one that moves it.
use std::path::{Path, PathBuf};

use super::*;
use crate::{
    changes::{Bus, Change, EndpointState, Snapshot},
    daemon::views::ReloadReport,
};

fn config(dir: &Path, events: &Path) -> Config {
    let text = format!(
        "[daemon]\nevents = \"{}\"\nstate_file = \"{}\"\npin_dir = \"{}\"\n\n\
         [[profile]]\nname = \"web\"\ndialect = \"lb\"\n\n[profile.health]\nprotocol = \"tcp\"\n\n\
         [[profile.endpoint]]\nname = \"a\"\naddress = \"198.18.1.1\"\nport = 80\n",
        events.display(),
        dir.join("state.json").display(),
        dir.join("pins").display()
    );
    Config::parse(&text, "unit.toml").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn publish(bus: &mut Bus, endpoint: &str) {
    let state = EndpointState::tcp("198.18.1.1".parse().unwrap(), 80, true);
    bus.publish_next(Change::health(0, "web", endpoint, state, false), 1);
}

fn endpoints_in(path: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<crate::daemon::events::Event>(l)
                .expect("an event")
                .endpoint
        })
        .collect()
}

#[test]
fn the_events_file_follows_a_reload_exactly_and_a_refused_one_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("probed-consumers-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (first, second) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    let mut bus = Bus::default();
    let (_rtts_tx, rtts) = watch::channel(Rtts::default());
    let announce: Announce = Box::new(|_| {});

    let start = config(&dir, &first);
    let prepared = Consumers::prepare_start(&start).expect("prepared");
    let joins = Consumers::start_joins(&prepared);
    assert_eq!(joins.len(), 1, "only the events file: no [dns], no [[sink]]");
    let joined = bus.join(joins, |_| Snapshot::default());
    let mut consumers = Consumers::start(&start, prepared, joined, (rtts, announce)).expect("started");
    publish(&mut bus, "before-reload");

    // A reload whose events file cannot be opened (its directory would be under a regular
    // file) is refused before anything runs, and says why.
    let blocker = dir.join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let refused = consumers.prepare(&config(&dir, &blocker.join("events.jsonl")));
    let err = crate::errors::chain(&refused.err().expect("refused"));
    assert!(err.contains("create the events directory"), "{err}");

    // One that moves it: the writer joins again before the reload's changes, which go to
    // the new file; what was queued before goes to the old one.
    let next = Arc::new(config(&dir, &second));
    let prepared = consumers.prepare(&next).expect("prepared");
    let request = consumers.reload_joins(&next, &prepared);
    assert_eq!(request.before.len(), 1);
    assert!(request.after.is_empty() && request.close.is_empty());
    let before = bus.join(request.before, |_| Snapshot::default());
    publish(&mut bus, "the-reload");
    let reloaded = Reloaded {
        report: ReloadReport::default(),
        before,
        after: Vec::new(),
    };
    consumers.refollow(next, prepared, reloaded);
    publish(&mut bus, "after-reload");

    drop(bus);
    consumers.stop();
    assert_eq!(endpoints_in(&first), ["before-reload"]);
    assert_eq!(endpoints_in(&second), ["the-reload", "after-reload"]);
    let _ = std::fs::remove_dir_all(&dir);
}
