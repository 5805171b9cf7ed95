use serde_json::json;

use super::{
    check,
    journal::{read_file, replay, Entry, Fleet, Journal},
    Batch, Lookup, Op,
};
use crate::config::{api_item, Config, Endpoint};

fn profile(routing: &str) -> crate::config::Profile {
    let text = format!(
        "[[profile]]\nname = \"web\"\ndialect = \"lb\"\nrouting = \"{routing}\"\nendpoints_from = \"api\"\n\n\
         [profile.health]\nprotocol = \"tcp\"\nport = 8080\n"
    );
    Config::parse(&text, "t.toml")
        .expect("a valid config")
        .profiles
        .remove(0)
}

fn batch(v: serde_json::Value) -> Batch {
    serde_json::from_value(v).expect("a batch")
}

fn lookup(routing: &str, have: &[Endpoint]) -> Lookup {
    let settings = profile(routing);
    let claims = super::routing_claims(settings.routing);
    Lookup {
        settings,
        generation: 3,
        count: have.len(),
        found: have
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.to_string(), (i, e.clone())))
            .collect(),
        all: claims.then(|| have.iter().cloned().enumerate().collect()),
    }
}

fn put(lookup: &Lookup, item: serde_json::Value) -> Endpoint {
    match check(&batch(json!({ "put": [item] })), lookup)
        .expect("a good item")
        .remove(0)
    {
        Op::Put(e) => e,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_put_reads_as_the_file_reads_an_endpoint_and_reads_back_the_same() {
    let l = lookup("weighted", &[]);
    let e = put(&l, json!({"address": "198.18.0.7", "weight": 5}));
    assert_eq!(&*e.name, "198.18.0.7:8080", "the file's default name: address:port");
    assert_eq!((e.port, e.weight, e.priority), (8080, 5, 1));
    // What the API shows of it is read back to the very same endpoint.
    let again = put(&l, serde_json::Value::Object(api_item(&e)));
    assert_eq!(again, e);
}

#[test]
fn every_bad_item_is_named_with_its_field_and_value_and_nothing_is_returned() {
    let l = lookup("weighted", &[]);
    let b = batch(json!({
        "put": [
            {"name": "a", "address": "198.18.0.7"},
            {"name": "b", "address": "not-an-ip", "port": 70000},
            {"name": "c", "address": "198.18.0.9", "weight": null},
            {"name": "d", "address": "198.18.0.10", "ca_file": "/etc/ca.pem"},
        ],
        "remove": ["x"],
    }));
    let errors = check(&b, &l).expect_err("bad items").to_string();
    for want in [
        "put[1].address = \"not-an-ip\": expected a unicast IPv4 or IPv6 address",
        "put[1].port = 70000: expected a port from 1 to 65535",
        "put[2].weight = null: null is not a value here",
        "put[3].ca_file = \"/etc/ca.pem\": nested profiles and an endpoint's own TLS",
    ] {
        assert!(errors.contains(want), "{want:?} not in:\n{errors}");
    }
    assert!(!errors.contains("put[0]"), "{errors}");
}

#[test]
fn a_set_changes_the_keys_it_gives_and_keeps_the_others() {
    let have = put(
        &lookup("weighted", &[]),
        json!({"name": "a", "address": "198.18.0.7", "weight": 5}),
    );
    let l = lookup("weighted", std::slice::from_ref(&have));
    let ops = check(&batch(json!({"set": [{"name": "a", "weight": 9}]})), &l).unwrap();
    let Op::Put(e) = &ops[0] else { panic!("{ops:?}") };
    assert_eq!((e.address, e.port, e.weight), (have.address, 8080, 9));
    let missing = check(&batch(json!({"set": [{"name": "zz", "weight": 9}]})), &l).unwrap_err();
    assert!(
        missing
            .to_string()
            .contains("set[0].name = \"zz\": the profile has no endpoint of this name; put adds one"),
        "{missing}"
    );
}

#[test]
fn a_name_changed_twice_in_one_batch_is_refused() {
    let l = lookup("weighted", &[]);
    let b = batch(json!({"put": [{"name": "a", "address": "198.18.0.7"}], "remove": ["a"]}));
    let e = check(&b, &l).unwrap_err().to_string();
    assert!(
        e.contains("remove[0] = \"a\": put[0] already changes this endpoint"),
        "{e}"
    );
}

#[test]
fn priorities_stay_unique_under_priority_routing_against_what_the_profile_keeps() {
    let a = put(
        &lookup("priority", &[]),
        json!({"name": "a", "address": "198.18.0.7", "priority": 1}),
    );
    let l = lookup("priority", std::slice::from_ref(&a));
    let clash = check(
        &batch(json!({"put": [{"name": "b", "address": "198.18.0.8", "priority": 1}]})),
        &l,
    )
    .unwrap_err()
    .to_string();
    assert!(
        clash.contains("put[0].priority = 1: another endpoint of this profile has this priority"),
        "{clash}"
    );
    // Replacing "a" itself frees its priority.
    check(
        &batch(json!({"put": [{"name": "a", "address": "198.18.0.9", "priority": 1}]})),
        &l,
    )
    .expect("a put over itself keeps its own priority");
}

#[test]
fn the_journal_replays_puts_in_place_and_removes_as_the_runner_does() {
    let item = |n: &str| json!({"name": n, "address": "198.18.0.1"}).as_object().unwrap().clone();
    let mut fleet = Fleet::new();
    let entry = |generation, put: &[&str], remove: &[&str]| Entry {
        profile: "web".into(),
        generation,
        reset: false,
        put: put.iter().map(|n| item(n)).collect(),
        remove: remove.iter().map(ToString::to_string).collect(),
    };
    replay(&mut fleet, entry(1, &["a", "b", "c", "d"], &[]));
    replay(&mut fleet, entry(2, &["b"], &["a"]));
    let names: Vec<&str> = fleet["web"].items.keys().map(String::as_str).collect();
    // a's place taken by the last (d), as Vec::swap_remove does.
    assert_eq!(names, ["d", "b", "c"]);
    assert_eq!(fleet["web"].generation, 2);
}

#[test]
fn the_journal_survives_a_reopen_and_leaves_out_a_cut_last_line() {
    let dir = std::env::temp_dir().join(format!("probed-fleet-journal-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("state.fleet");
    let mut fleet = read_file(&path).unwrap();
    let mut j = Journal::start(&path, &fleet).unwrap();
    assert!(fleet.is_empty());
    let e = Entry {
        profile: "web".into(),
        generation: 1,
        reset: false,
        put: vec![json!({"name": "a", "address": "198.18.0.1"})
            .as_object()
            .unwrap()
            .clone()],
        remove: vec![],
    };
    replay(&mut fleet, e.clone());
    j.append(&e).unwrap();
    drop(j);
    // A batch cut short by a crash: never acknowledged.
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut f, b"{\"profile\":\"web\",\"generation\":2,\"put\":[{\"na").unwrap();
    drop(f);
    let again = read_file(&path).unwrap();
    assert_eq!(again, fleet);
    // A line changed by hand in the middle is an error, not a silent loss.
    std::fs::write(&path, "{\"profile\":1}\n{\"profile\":\"web\",\"generation\":1}\n").unwrap();
    let err = read_file(&path).expect_err("a bad line");
    assert!(err.to_string().contains("line 1 is not a journal entry"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
