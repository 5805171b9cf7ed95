//! The fleet API's batches: a control plane adds, updates and removes the endpoints of a
//! profile with `endpoints_from = "api"` while it is probed, without a reload.
//!
//! A batch is checked here, away from the runner, by the file's own rules for an endpoint
//! (`config::api_endpoint`): every item is read, every problem reported with the item's
//! place, and a batch with any problem changes nothing. The runner then applies the checked
//! operations (`daemon/requests/fleet.rs`) at a cost in proportion to the batch, and the
//! journal (`journal.rs`) keeps them across restarts and reloads.
//!
//! - `put`: the whole endpoint, added or put in place of the one of its name (idempotent: a
//!   put of what is there changes nothing).
//! - `set`: some keys of an endpoint that exists, the others kept.
//! - `remove`: by name; a name that is not there is already removed.
//!
//! `generation` makes a batch conditional: it applies only while the profile's generation is
//! the one given (each batch that changes anything counts one up), so two control planes
//! cannot undo each other's changes unseen.
pub mod journal;
#[cfg(test)]
mod tests;

use std::{collections::HashMap, sync::Arc};

use serde::{Deserialize, Serialize};

use crate::{
    config::{api_endpoint, api_item, ConfigError, ConfigErrors, Endpoint, Profile, Taken},
    status::Routing,
};

/// The most items one batch may hold (puts, sets and removes together).
pub const MAX_ITEMS: usize = 10_000;

/// A batch as the API takes it (JSON).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Apply only while the profile is at this generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub put: Vec<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub set: Vec<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.put.len() + self.set.len() + self.remove.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The names the runner is asked about before the batch is checked: those a `set` or a
    /// `remove` names, and a `put` that names its endpoint.
    pub fn named(&self) -> Vec<String> {
        let named = |m: &serde_json::Map<String, serde_json::Value>| m.get("name")?.as_str().map(str::to_string);
        let mut names: Vec<String> = (self.put.iter().chain(&self.set))
            .filter_map(named)
            .chain(self.remove.iter().cloned())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// One checked change.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Add it, or put it in place of the endpoint of its name.
    Put(Endpoint),
    Remove(Arc<str>),
}

impl Op {
    pub fn name(&self) -> &Arc<str> {
        match self {
            Op::Put(e) => &e.name,
            Op::Remove(name) => name,
        }
    }
}

/// What the runner says of a profile for a batch to be checked against.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// Its settings (no endpoints).
    pub settings: Profile,
    pub generation: u64,
    /// How many endpoints it has.
    pub count: usize,
    /// The endpoints the batch names that it has, by name, with their positions.
    pub found: HashMap<String, (usize, Endpoint)>,
    /// All its endpoints, with their positions, under a routing whose keys are unique in the
    /// profile (priority, subnet, geographic); None under the others.
    pub all: Option<Vec<(usize, Endpoint)>>,
}

/// Whether endpoints of a profile routed so claim keys no other endpoint may have.
pub fn routing_claims(routing: Routing) -> bool {
    routing.needs().unique_keys
}

/// Checks `batch` against the profile `lookup` describes: the operations, or every problem.
pub fn check(batch: &Batch, lookup: &Lookup) -> Result<Vec<Op>, ConfigErrors> {
    let mut errors = Vec::new();
    if batch.len() > MAX_ITEMS {
        errors.push(ConfigError::batch(
            String::new(),
            Some(batch.len().to_string()),
            format!("a batch holds at most {MAX_ITEMS} items (put, set and remove together); split it"),
        ));
        return Err(ConfigErrors(errors));
    }
    let p = &lookup.settings;
    // First each item alone: its name, and every problem that is its own.
    let mut puts = read_items(batch, lookup, None, &mut errors);
    if errors.is_empty() {
        // Each name once in a batch: two changes of one endpoint would depend on their order.
        let mut seen: HashMap<Arc<str>, String> = HashMap::new();
        for (at, e) in &puts {
            if let Some(first) = seen.insert(e.name.clone(), at.clone()) {
                errors.push(ConfigError::batch(
                    format!("{at}.name"),
                    Some(format!("{:?}", &*e.name)),
                    format!("{first} already changes this endpoint; name each endpoint once in a batch"),
                ));
            }
        }
        for (i, name) in batch.remove.iter().enumerate() {
            let at = format!("remove[{i}]");
            if let Some(first) = seen.insert(Arc::from(name.as_str()), at.clone()) {
                errors.push(ConfigError::batch(
                    at,
                    Some(format!("{name:?}")),
                    format!("{first} already changes this endpoint; name each endpoint once in a batch"),
                ));
            }
        }
        // Then together, against what the profile keeps: priorities, subnets and regions
        // unique under the routings that need them.
        if errors.is_empty() {
            if let Some(all) = &lookup.all {
                let kept = all
                    .iter()
                    .filter(|(_, e)| !seen.contains_key(&e.name))
                    .map(|(i, e)| (*i, e));
                let mut taken = Taken::claimed(kept, p.routing);
                puts = read_items(batch, lookup, Some(&mut taken), &mut errors);
            }
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    let mut ops: Vec<Op> = puts.into_iter().map(|(_, e)| Op::Put(e)).collect();
    ops.extend(batch.remove.iter().map(|n| Op::Remove(Arc::from(n.as_str()))));
    Ok(ops)
}

/// The batch's puts and sets read as endpoints, each with its place in the batch, against
/// `shared` (what the profile and the items before claimed) or, with None, each alone; their
/// problems onto `errors`.
fn read_items(
    batch: &Batch,
    lookup: &Lookup,
    mut shared: Option<&mut Taken>,
    errors: &mut Vec<ConfigError>,
) -> Vec<(String, Endpoint)> {
    let p = &lookup.settings;
    let rules = (&p.health, p.dialect, p.routing);
    // The default priority of an endpoint the profile does not have is its place after them.
    let mut next = lookup.count;
    let mut read = |item: &serde_json::Map<String, serde_json::Value>, at: &str| {
        let mut own = Taken::default();
        let taken = shared.as_deref_mut().unwrap_or(&mut own);
        let named = item.get("name").and_then(|n| n.as_str());
        // An endpoint it has keeps its priority unless the item sets one (its place moves as
        // others are removed: a default from it would make a repeated put a change).
        let position = match named.and_then(|n| lookup.found.get(n)) {
            Some((_, current)) => current.priority.saturating_sub(1) as usize,
            None => {
                next += 1;
                next - 1
            }
        };
        api_endpoint(item, at, position, rules, taken)
    };
    let mut out = Vec::new();
    for (i, item) in batch.put.iter().enumerate() {
        let at = format!("put[{i}]");
        match read(item, &at) {
            Ok(e) => out.push((at, e)),
            Err(e) => errors.extend(e),
        }
    }
    for (i, item) in batch.set.iter().enumerate() {
        let at = format!("set[{i}]");
        let Some(merged) = merged(item, &at, lookup, errors) else {
            continue;
        };
        match read(&merged, &at) {
            Ok(e) => out.push((at, e)),
            Err(e) => errors.extend(e),
        }
    }
    out
}

/// A profile's endpoints read again by its rules, in order: the journal's at a start, or a
/// running profile's when a reload changed its check or routing. Every problem is reported,
/// under `endpoints[NAME]`.
pub fn readmit<'i>(
    profile: &Profile,
    items: impl Iterator<Item = &'i journal::Item>,
) -> Result<Vec<Endpoint>, ConfigErrors> {
    let rules = (&profile.health, profile.dialect, profile.routing);
    let mut taken = Taken::default();
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, item) in items.enumerate() {
        let name = item.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        match api_endpoint(item, &format!("endpoints[{name}]"), i, rules, &mut taken) {
            Ok(e) => out.push(e),
            Err(e) => errors.extend(e),
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// The journal's line for `ops` applied to `profile`, bringing it to `generation`.
pub fn entry(profile: &str, generation: u64, ops: &[Op]) -> journal::Entry {
    let mut entry = journal::Entry {
        profile: profile.to_string(),
        generation,
        ..journal::Entry::default()
    };
    for op in ops {
        match op {
            Op::Put(e) => entry.put.push(api_item(e)),
            Op::Remove(n) => entry.remove.push(n.to_string()),
        }
    }
    entry
}

/// A `set` item over the endpoint it names: that endpoint's keys, with the item's in place.
fn merged(
    item: &serde_json::Map<String, serde_json::Value>,
    at: &str,
    lookup: &Lookup,
    errors: &mut Vec<ConfigError>,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let Some(name) = item.get("name") else {
        errors.push(ConfigError::batch(
            format!("{at}.name"),
            None,
            "a set names the endpoint it changes".into(),
        ));
        return None;
    };
    let Some(name) = name.as_str() else {
        errors.push(ConfigError::batch(
            format!("{at}.name"),
            Some(name.to_string()),
            "expected a string".into(),
        ));
        return None;
    };
    let Some((_, current)) = lookup.found.get(name) else {
        errors.push(ConfigError::batch(
            format!("{at}.name"),
            Some(format!("{name:?}")),
            "the profile has no endpoint of this name; put adds one".into(),
        ));
        return None;
    };
    let mut merged = api_item(current);
    for (k, v) in item {
        merged.insert(k.clone(), v.clone());
    }
    Some(merged)
}

/// What a batch did, as the API answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub profile: String,
    /// The profile's generation after the batch (the same as before when nothing changed).
    pub generation: u64,
    /// Endpoints added, changed in place, removed; puts of what was there already and
    /// removes of names that were not.
    pub added: usize,
    pub changed: usize,
    pub removed: usize,
    pub unchanged: usize,
    /// How many endpoints the profile has now.
    pub endpoints: usize,
    /// The runner's time on it, in microseconds: what probing waited for (checking the batch
    /// and writing the journal happen elsewhere).
    #[serde(default)]
    pub runner_us: u64,
}

/// A profile's endpoints as the fleet API shows them (`GET /v1/profiles/NAME/endpoints`),
/// all of them or one page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetView {
    pub profile: String,
    /// "api" or "file": whether batches may change them.
    pub endpoints_from: String,
    pub generation: u64,
    /// How many endpoints the profile has; `endpoints` holds those from `offset` on.
    pub total: usize,
    pub offset: usize,
    /// Each as a `put` takes it.
    pub endpoints: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// What the runner hands over for a `FleetView`: the page's endpoints as they are, turned into
/// items off its thread.
pub struct FleetPage {
    pub profile: String,
    pub endpoints_from: crate::config::EndpointSource,
    pub generation: u64,
    pub total: usize,
    pub offset: usize,
    pub endpoints: Vec<Endpoint>,
}

impl FleetPage {
    pub fn view(self) -> FleetView {
        FleetView {
            profile: self.profile,
            endpoints_from: self.endpoints_from.name().to_string(),
            generation: self.generation,
            total: self.total,
            offset: self.offset,
            endpoints: self.endpoints.iter().map(api_item).collect(),
        }
    }
}
