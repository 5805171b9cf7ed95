//! What a sink knows of its profile: every endpoint's state as the change stream last said,
//! built from a snapshot and kept up to date by batches. Pure.
use std::{collections::BTreeMap, sync::Arc};

use crate::changes::{Change, EndpointState, Snapshot};

/// One profile's endpoints, by name (name order is the order sinks write them in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileModel {
    pub profile: Arc<str>,
    pub endpoints: BTreeMap<Arc<str>, EndpointState>,
    /// The stream's sequence number this model reflects.
    pub seq: u64,
}

impl ProfileModel {
    /// `profile` as `snapshot` shows it (empty when the profile is not there).
    pub fn from_snapshot(profile: &str, snapshot: &Snapshot) -> Self {
        ProfileModel {
            profile: Arc::from(profile),
            endpoints: snapshot
                .endpoints
                .iter()
                .filter(|(p, _, state)| &**p == profile && state.nested.is_none())
                .map(|(_, name, state)| (name.clone(), state.clone()))
                .collect(),
            seq: snapshot.seq,
        }
    }

    /// Takes in one change; returns whether it concerned this profile's endpoints.
    pub fn apply(&mut self, change: &Change) -> bool {
        let Change::Endpoint(c) = change else {
            return false;
        };
        // Nested endpoints have no address of their own: the data path follows plain ones.
        if c.profile != self.profile || c.seq <= self.seq || c.state.nested.is_some() {
            return false;
        }
        self.seq = c.seq;
        if c.removed {
            self.endpoints.remove(&c.endpoint);
        } else {
            self.endpoints.insert(c.endpoint.clone(), c.state.clone());
        }
        true
    }

    /// The endpoints that may receive new traffic now (fail-open included), in name order.
    pub fn eligible(&self) -> impl Iterator<Item = (&str, &EndpointState)> {
        self.endpoints
            .iter()
            .filter(|(_, s)| s.eligible)
            .map(|(n, s)| (&**n, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::Health;

    fn state(last: u8, eligible: bool) -> EndpointState {
        let mut s = EndpointState::tcp(format!("198.18.1.{last}").parse().unwrap(), 80, eligible);
        s.health = Health::Healthy;
        s
    }

    fn change(seq: u64, profile: &str, name: &str, s: EndpointState, removed: bool) -> Change {
        Change::health(seq, profile, name, s, removed)
    }

    #[test]
    fn follows_its_profile_only_and_skips_what_the_snapshot_had() {
        let snapshot = Snapshot {
            seq: 5,
            profiles: Vec::new(),
            endpoints: vec![
                ("web".into(), "a".into(), state(1, true)),
                ("web".into(), "b".into(), state(2, true)),
                ("db".into(), "a".into(), state(9, true)),
            ],
        };
        let mut m = ProfileModel::from_snapshot("web", &snapshot);
        assert_eq!(m.eligible().map(|(n, _)| n).collect::<Vec<_>>(), ["a", "b"]);
        assert!(
            !m.apply(&change(4, "web", "a", state(1, false), false)),
            "older than the snapshot"
        );
        assert!(
            !m.apply(&change(6, "db", "a", state(9, false), false)),
            "another profile"
        );
        assert!(m.apply(&change(7, "web", "a", state(1, false), false)));
        assert!(m.apply(&change(8, "web", "c", state(3, true), false)));
        assert!(m.apply(&change(9, "web", "b", state(2, true), true)));
        assert_eq!(m.eligible().map(|(n, _)| n).collect::<Vec<_>>(), ["c"]);
        assert_eq!(m.seq, 9);
    }
}
