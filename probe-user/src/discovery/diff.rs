//! From records to a fleet batch: the endpoints the records make (`wanted`), and the batches
//! that take the profile from what it has to them (`batches`): a put for each endpoint new or
//! changed, a remove for each one gone, nothing for one that stays as it is (so it keeps its
//! health, its check and its place). Pure.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
};

use serde_json::{Map, Value};

use crate::fleet::Batch;

/// One endpoint the records make.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Wanted {
    /// `ADDRESS:PORT`, as an endpoint of the file is named by default.
    pub name: String,
    pub address: IpAddr,
    pub port: u16,
    pub weight: u32,
    /// SRV records' (plus one); None for A and AAAA, whose endpoints take the default.
    pub priority: Option<u32>,
}

impl Wanted {
    pub fn new(address: IpAddr, port: u16, weight: u32, priority: Option<u32>) -> Wanted {
        Wanted {
            name: SocketAddr::new(address, port).to_string(),
            address,
            port,
            weight,
            priority,
        }
    }

    /// From an SRV record's fields: weight 1 to 1000 (0 counts as 1), priority plus one (at most
    /// 1000), as `[[profile.endpoint]]` bounds them.
    pub fn of_service(address: IpAddr, port: u16, weight: u16, priority: u16) -> Wanted {
        Wanted::new(
            address,
            port,
            u32::from(weight).clamp(1, 1000),
            Some((u32::from(priority) + 1).min(1000)),
        )
    }

    fn item(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert("address".into(), Value::String(self.address.to_string()));
        m.insert("port".into(), Value::from(self.port));
        m.insert("weight".into(), Value::from(self.weight));
        if let Some(p) = self.priority {
            m.insert("priority".into(), Value::from(p));
        }
        m
    }

    /// Whether the endpoint the profile has (`item`, as the fleet API shows it) is this one:
    /// the same address, port and weight, the same priority when the records give one, and
    /// nothing else set (an admin state or headers would be the API's, not the records').
    fn is(&self, item: &Map<String, Value>) -> bool {
        let field = |k: &str| item.get(k);
        let known = ["name", "address", "port", "weight", "priority"];
        field("address")
            .and_then(Value::as_str)
            .and_then(|a| a.parse::<IpAddr>().ok())
            == Some(self.address)
            && field("port").and_then(Value::as_u64) == Some(u64::from(self.port))
            && field("weight").and_then(Value::as_u64) == Some(u64::from(self.weight))
            && self
                .priority
                .is_none_or(|p| field("priority").and_then(Value::as_u64) == Some(u64::from(p)))
            && item.keys().all(|k| known.contains(&k.as_str()))
    }
}

/// The endpoints, each once by name (the first of equal names: records are read in the order
/// of their priority), in name order.
pub(super) fn dedup(wanted: Vec<Wanted>) -> Vec<Wanted> {
    let mut by_name: BTreeMap<String, Wanted> = BTreeMap::new();
    for w in wanted {
        by_name.entry(w.name.clone()).or_insert(w);
    }
    by_name.into_values().collect()
}

/// The batches, of at most `max_items` items each, that take `current` (the profile's
/// endpoints as the fleet API shows them) to `wanted`: removes first, so that a batch never
/// holds the old and the new endpoint of a moved address at once beyond what it must. Empty
/// when nothing differs.
pub(super) fn batches(current: &[Map<String, Value>], wanted: &[Wanted], max_items: usize) -> Vec<Batch> {
    let now: BTreeMap<&str, &Map<String, Value>> = current
        .iter()
        .filter_map(|m| Some((m.get("name")?.as_str()?, m)))
        .collect();
    let keep: BTreeSet<&str> = wanted.iter().map(|w| w.name.as_str()).collect();
    let mut removes: Vec<String> = now
        .keys()
        .filter(|n| !keep.contains(**n))
        .map(ToString::to_string)
        .collect();
    let mut puts: Vec<Map<String, Value>> = wanted
        .iter()
        .filter(|w| now.get(w.name.as_str()).is_none_or(|m| !w.is(m)))
        .map(Wanted::item)
        .collect();
    let mut out = Vec::new();
    let max_items = max_items.max(1);
    while !removes.is_empty() || !puts.is_empty() {
        let take_removes = removes.len().min(max_items);
        let remove: Vec<String> = removes.drain(..take_removes).collect();
        let take_puts = puts.len().min(max_items - take_removes);
        let put: Vec<Map<String, Value>> = puts.drain(..take_puts).collect();
        out.push(Batch {
            generation: None,
            put,
            set: Vec::new(),
            remove,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn current(items: &[(&str, &str, u16, u32)]) -> Vec<Map<String, Value>> {
        items
            .iter()
            .enumerate()
            .map(|(i, (name, address, port, weight))| {
                let mut m = Map::new();
                m.insert("name".into(), Value::from(*name));
                m.insert("address".into(), Value::from(*address));
                m.insert("port".into(), Value::from(*port));
                m.insert("weight".into(), Value::from(*weight));
                m.insert("priority".into(), Value::from(i + 1));
                m
            })
            .collect()
    }

    #[test]
    fn only_what_differs_is_put_or_removed() {
        let now = current(&[
            ("198.18.0.2:80", "198.18.0.2", 80, 1),
            ("198.18.0.3:80", "198.18.0.3", 80, 1),
            ("[2001:2::2]:80", "2001:2::2", 80, 1),
        ]);
        let wanted = dedup(vec![
            Wanted::new(ip("198.18.0.3"), 80, 1, None),
            Wanted::new(ip("2001:2::2"), 80, 1, None),
            Wanted::new(ip("198.18.0.4"), 80, 1, None),
            Wanted::new(ip("198.18.0.4"), 80, 1, None),
        ]);
        let b = batches(&now, &wanted, 100);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].remove, ["198.18.0.2:80"]);
        assert_eq!(b[0].put.len(), 1);
        assert_eq!(b[0].put[0]["name"], "198.18.0.4:80");
        assert!(
            b[0].put[0].get("priority").is_none(),
            "A records leave the priority alone"
        );
        // The same again: nothing to do.
        let after = current(&[
            ("198.18.0.3:80", "198.18.0.3", 80, 1),
            ("198.18.0.4:80", "198.18.0.4", 80, 1),
            ("[2001:2::2]:80", "2001:2::2", 80, 1),
        ]);
        assert!(batches(&after, &wanted, 100).is_empty());
    }

    #[test]
    fn a_service_record_whose_weight_moved_is_put_again_and_bounds_hold() {
        let mut now = current(&[("198.18.0.2:8080", "198.18.0.2", 8080, 30)]);
        now[0].insert("priority".into(), Value::from(2));
        let same = vec![Wanted::of_service(ip("198.18.0.2"), 8080, 30, 1)];
        assert!(batches(&now, &same, 10).is_empty());
        let heavier = vec![Wanted::of_service(ip("198.18.0.2"), 8080, 60, 1)];
        assert_eq!(batches(&now, &heavier, 10)[0].put[0]["weight"], 60);
        let w = Wanted::of_service(ip("198.18.0.2"), 1, 0, u16::MAX);
        assert_eq!((w.weight, w.priority), (1, Some(1000)));
        assert_eq!(Wanted::of_service(ip("198.18.0.2"), 1, 5000, 0).weight, 1000);
        // Set by someone else (an admin state): the records' version is put back.
        now[0].insert("state".into(), Value::from("drain"));
        assert_eq!(batches(&now, &same, 10).len(), 1);
    }

    #[test]
    fn large_changes_come_in_batches_of_at_most_max_items() {
        let now: Vec<Map<String, Value>> = (0..5)
            .flat_map(|i| current(&[(&format!("198.18.1.{i}:80"), &format!("198.18.1.{i}"), 80, 1)]))
            .collect();
        let wanted: Vec<Wanted> = (0..7)
            .map(|i| Wanted::new(ip(&format!("198.18.2.{i}")), 80, 1, None))
            .collect();
        let b = batches(&now, &dedup(wanted), 4);
        assert_eq!(b.iter().map(Batch::len).collect::<Vec<_>>(), [4, 4, 4]);
        assert_eq!(b.iter().map(|b| b.remove.len()).sum::<usize>(), 5);
        assert_eq!(b.iter().map(|b| b.put.len()).sum::<usize>(), 7);
    }
}
