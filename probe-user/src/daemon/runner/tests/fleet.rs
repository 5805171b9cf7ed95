//! Fleet batches on the runner: what they add, change and remove, what they leave alone, and
//! that the counts they move by the difference equal a recount.
use super::*;
use crate::{
    daemon::protocol::{FleetRequest, RequestError},
    fleet::{check, Applied, Batch},
};

/// An API profile "web" (weighted routing), otherwise as `config_text`.
pub(super) fn api_config(dir: &std::path::Path) -> Config {
    let text = config_text(dir, &[]).replace(
        "routing = \"priority\"\n",
        "routing = \"weighted\"\nendpoints_from = \"api\"\n",
    );
    parse(&text)
}

pub(super) fn batch(h: &mut Harness, b: serde_json::Value) -> Result<Applied, RequestError> {
    let b: Batch = serde_json::from_value(b).expect("a batch");
    let lookup = h.runner.fleet_lookup("web", &b.named())?;
    let ops = check(&b, &lookup).map_err(RequestError::BadBatch)?;
    let done = h.runner.fleet_apply(FleetRequest {
        profile: "web".into(),
        generation: b.generation,
        ops,
        want_config: false,
        by_discovery: false,
    })?;
    Ok(done.applied)
}

pub(super) fn put(names: &[(&str, u8)]) -> serde_json::Value {
    let items: Vec<serde_json::Value> = names
        .iter()
        .map(|(n, last)| serde_json::json!({"name": n, "address": format!("198.18.1.{last}"), "port": 80}))
        .collect();
    serde_json::json!({ "put": items })
}

/// The profile's counts as the runner kept them, after checking them against a recount.
fn counts_checked(h: &Harness) -> crate::status::StatusCounts {
    let p = &h.runner.table.profiles()[0];
    let mut counted = crate::status::StatusCounts::default();
    for id in &p.owners {
        counted.add(h.runner.table.targets()[id].counts_as());
    }
    assert_eq!(p.counts, counted, "counts kept by the difference vs a recount");
    assert_eq!(
        p.owners.len(),
        h.runner.config.profiles[0].endpoints.len(),
        "owners and endpoints in step"
    );
    for (id, e) in p.owners.iter().zip(&h.runner.config.profiles[0].endpoints) {
        assert_eq!(h.runner.table.targets()[id].name(), &e.name, "the same place in both");
    }
    behind_counts(&h.runner);
    p.counts
}

#[test]
fn a_batch_adds_changes_and_removes_without_touching_the_rest() {
    let dir = std::env::temp_dir().join(format!("probed-runner-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = Harness::start_with(dir.clone(), api_config(&dir));
    assert!(
        h.runner.table.profiles()[0].owners.is_empty(),
        "an API profile starts empty"
    );
    let a = batch(&mut h, put(&[("a", 1), ("b", 2), ("c", 3), ("d", 4)])).unwrap();
    assert_eq!((a.added, a.generation, a.endpoints), (4, 1, 4));
    h.run_for(3000, OPEN);
    for n in ["a", "b", "c", "d"] {
        assert_eq!(h.status(n), (S::Online, true), "{n}");
    }
    counts_checked(&h);
    h.changes();
    let before_b = h.runner.table.find("web", "b").unwrap();

    // a's weight changes (same check: its state and schedule stay), c moves to another
    // address (a new check: it starts over), d goes, e comes; b is left alone.
    let applied = batch(
        &mut h,
        serde_json::json!({
            "set": [{"name": "a", "weight": 7}],
            "put": [{"name": "c", "address": "198.18.1.33", "port": 80}, {"name": "e", "address": "198.18.1.5", "port": 80}],
            "remove": ["d", "nobody"],
        }),
    )
    .unwrap();
    assert_eq!(
        (
            applied.added,
            applied.changed,
            applied.removed,
            applied.unchanged,
            applied.endpoints,
            applied.generation
        ),
        (1, 2, 1, 1, 4, 2)
    );
    let changes = endpoint_changes(&h.changes())
        .into_iter()
        .map(|c| (c.0.to_string(), c.2, c.3))
        .collect::<Vec<_>>();
    assert!(
        changes.contains(&("a".into(), Some(S::Online), Some(S::Online))),
        "a's weight: {changes:?}"
    );
    assert!(
        changes.contains(&("c".into(), Some(S::Online), Some(S::CheckingEndpoint))),
        "{changes:?}"
    );
    assert!(changes.contains(&("d".into(), Some(S::Online), None)), "{changes:?}");
    assert!(
        changes.contains(&("e".into(), None, Some(S::CheckingEndpoint))),
        "{changes:?}"
    );
    assert!(!changes.iter().any(|c| c.0 == "b"), "b untouched: {changes:?}");
    assert_eq!(h.runner.table.find("web", "b"), Some(before_b), "b keeps its id");
    assert_eq!(h.status("a"), (S::Online, true));
    assert!(h.runner.table.find("web", "d").is_none());
    counts_checked(&h);
    h.run_for(3000, OPEN);
    for n in ["a", "b", "c", "e"] {
        assert_eq!(h.status(n), (S::Online, true), "{n}");
    }
    // The same batch again changes nothing: idempotent, the generation stays.
    let again = batch(
        &mut h,
        serde_json::json!({"put": [{"name": "e", "address": "198.18.1.5", "port": 80}], "remove": ["d"]}),
    )
    .unwrap();
    assert_eq!((again.unchanged, again.generation), (2, 2));
    // A batch against an older generation is refused and changes nothing.
    let stale = batch(&mut h, serde_json::json!({"generation": 1, "remove": ["a"]})).unwrap_err();
    assert_eq!(
        stale,
        RequestError::Generation {
            profile: "web".into(),
            expected: 1,
            current: 2
        }
    );
    assert!(h.runner.table.find("web", "a").is_some());
    counts_checked(&h);
    // Single endpoints of an API profile are found through its index, as the table walk would.
    let view = h.runner.set_admin("web", "e", AdminState::Drain).unwrap();
    assert_eq!((view.name.as_str(), view.eligible), ("e", false));
    assert_eq!(
        h.runner.set_admin("web", "d", AdminState::Drain).unwrap_err(),
        RequestError::NoEndpoint {
            profile: "web".into(),
            endpoint: "d".into()
        }
    );
    counts_checked(&h);
}

#[test]
fn removing_the_healthy_ones_flips_fail_open_and_every_endpoint_is_redone() {
    let dir = std::env::temp_dir().join(format!("probed-runner-fleet-open-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = Harness::start_with(dir.clone(), api_config(&dir));
    batch(&mut h, put(&[("a", 1), ("b", 2), ("c", 3)])).unwrap();
    // a and b fail, c serves.
    h.run_for(3000, |t| {
        if t.ip().to_string() == "198.18.1.3" {
            L4Outcome::Open
        } else {
            L4Outcome::Refused
        }
    });
    assert_eq!(h.status("a"), (S::Degraded, false));
    assert_eq!(h.status("c"), (S::Online, true));
    h.changes();
    // The last healthy one goes: no endpoint is healthy, the profile fails open (SPEC) and a
    // and b are eligible again, though the batch named neither.
    batch(&mut h, serde_json::json!({"remove": ["c"]})).unwrap();
    let (_, open) = h.profile();
    assert!(open, "fail-open with no healthy endpoint");
    assert_eq!(h.status("a"), (S::Degraded, true));
    assert_eq!(h.status("b"), (S::Degraded, true));
    let published = h.changes();
    let changes = endpoint_changes(&published);
    assert!(
        changes.iter().any(|c| c.0 == "a" && c.4),
        "a's eligibility published: {changes:?}"
    );
    counts_checked(&h);
}

#[test]
fn a_file_profile_refuses_batches_and_a_bad_item_changes_nothing() {
    let mut h = Harness::new("fleet-file", &[("a", 80)]);
    let refused = batch(&mut h, put(&[("x", 9)])).unwrap_err();
    assert_eq!(refused, RequestError::NotApi("web".into()));
    let dir = std::env::temp_dir().join(format!("probed-runner-fleet-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut h = Harness::start_with(dir.clone(), api_config(&dir));
    let bad = batch(
        &mut h,
        serde_json::json!({"put": [{"name": "ok", "address": "198.18.1.1", "port": 80}, {"name": "bad", "address": "198.18.1.2", "port": 0}]}),
    )
    .unwrap_err();
    assert!(
        bad.to_string()
            .contains("put[1].port = 0: expected a port from 1 to 65535"),
        "{bad}"
    );
    assert!(h.runner.table.profiles()[0].owners.is_empty(), "nothing of it applied");
    assert_eq!(h.runner.fleet_lookup("web", &[]).unwrap().generation, 0);
}
