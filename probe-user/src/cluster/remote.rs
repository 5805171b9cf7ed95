//! The other nodes' verdicts as this node knows them, from what gossip says each live node
//! holds. A node's buckets are decoded again only when their version changes, and each change
//! is turned into the targets whose set of verdicts it changed, so that the runner hears only
//! about those. A node that stops being live keeps counting for `verdict_ttl` (a short
//! partition does not empty the cluster's view); past it, its verdicts are dropped. A node that
//! comes back under a new generation (it restarted) replaces its old self at once. Pure: the
//! caller supplies the time.
//!
//! A node counts once per target even while a reload moves targets between its buckets (it
//! writes the new layout key by key, and gossip may carry the keys in any order): each vote
//! remembers the bucket and version it came from; a bucket's change removes only the votes it
//! gave itself, and when two buckets of one node hold a target, the one written last (the
//! higher version: a node's versions only grow) speaks.
use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use super::{aggregate::Verdict, shard::Member, verdicts};
use crate::hash::FastMap;

/// A live node as gossip shows it: the values of its verdict keys with their versions.
#[derive(Debug, Clone)]
pub struct LiveNode {
    pub name: String,
    pub generation: u64,
    pub region: String,
    /// What its route sinks announce (`routes::encode`).
    pub routes: String,
    /// (key, version, value) of every `v/` key; the value may be left empty when its version
    /// is the one `Remote::known_version` gives (it is not read again).
    pub buckets: Vec<(String, u64, String)>,
}

struct Known {
    generation: u64,
    region: String,
    routes: String,
    live: bool,
    last_live: Instant,
    /// By key: the version decoded and its entries.
    buckets: HashMap<String, (u64, Vec<(u64, Verdict)>)>,
}

/// What a node says about one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Said {
    pub node: Arc<str>,
    pub verdict: Verdict,
}

/// One node's figures, for the API.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeSummary {
    pub name: String,
    pub region: String,
    pub live: bool,
    /// Since it was last seen live (0 while it is).
    pub silent_ms: u64,
    pub verdicts: usize,
    /// What its route sinks announce, as it last gossiped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<super::routes::Announcement>,
}

/// A vote as held: what the node says, and the bucket (key and version) that says it.
#[derive(Debug, Clone)]
struct Held {
    node: Arc<str>,
    verdict: Verdict,
    bucket: Arc<str>,
    version: u64,
}

pub struct Remote {
    me: String,
    nodes: HashMap<String, Known>,
    by_target: FastMap<u64, Vec<Held>>,
    /// Values that would not decode, for the log: (node, error).
    pub bad_values: Vec<(String, String)>,
}

impl Remote {
    pub fn new(me: &str) -> Remote {
        Remote {
            me: me.to_string(),
            nodes: HashMap::new(),
            by_target: FastMap::default(),
            bad_values: Vec::new(),
        }
    }

    /// Takes the live set gossip reports now; returns the targets whose verdicts changed.
    pub fn observe(&mut self, live: Vec<LiveNode>, now: Instant) -> BTreeSet<u64> {
        let mut dirty = BTreeSet::new();
        let mut seen = Vec::with_capacity(live.len());
        for n in live {
            if n.name == self.me {
                continue;
            }
            // Two generations of one name live at once (the old one not yet judged dead):
            // the newer one speaks for the node.
            if let Some(k) = self.nodes.get(&n.name) {
                if k.generation > n.generation {
                    continue;
                }
                if k.generation < n.generation {
                    self.forget(&n.name, &mut dirty);
                }
            }
            seen.push(n.name.clone());
            let k = self.nodes.entry(n.name.clone()).or_insert_with(|| Known {
                generation: n.generation,
                region: n.region.clone(),
                routes: String::new(),
                live: true,
                last_live: now,
                buckets: HashMap::new(),
            });
            k.live = true;
            k.last_live = now;
            k.region.clone_from(&n.region);
            k.routes.clone_from(&n.routes);
            let node: Arc<str> = Arc::from(n.name.as_str());
            let mut present: Vec<String> = Vec::with_capacity(n.buckets.len());
            for (key, version, value) in n.buckets {
                present.push(key.clone());
                if k.buckets.get(&key).is_some_and(|(v, _)| *v == version) {
                    continue;
                }
                let entries = match verdicts::decode(&value) {
                    Ok(e) => e,
                    Err(e) => {
                        self.bad_values.push((n.name.clone(), format!("{key}: {e}")));
                        Vec::new()
                    }
                };
                let bucket: Arc<str> = Arc::from(key.as_str());
                let old = k.buckets.insert(key, (version, entries.clone())).map(|(_, e)| e);
                let change = BucketChange {
                    node: &node,
                    bucket: &bucket,
                    version,
                };
                change.apply(&mut self.by_target, old.as_deref().unwrap_or(&[]), &entries, &mut dirty);
            }
            // Buckets the node no longer has (deleted keys).
            let gone: Vec<String> = k.buckets.keys().filter(|key| !present.contains(key)).cloned().collect();
            for key in gone {
                if let Some((version, old)) = k.buckets.remove(&key) {
                    let bucket: Arc<str> = Arc::from(key.as_str());
                    let change = BucketChange {
                        node: &node,
                        bucket: &bucket,
                        version,
                    };
                    change.apply(&mut self.by_target, &old, &[], &mut dirty);
                }
            }
        }
        for (name, k) in &mut self.nodes {
            if !seen.contains(name) {
                k.live = false;
            }
        }
        dirty
    }

    /// Drops the verdicts of nodes silent for longer than `ttl`; returns the targets changed.
    pub fn expire(&mut self, now: Instant, ttl: Duration) -> BTreeSet<u64> {
        let mut dirty = BTreeSet::new();
        let gone: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, k)| !k.live && now.saturating_duration_since(k.last_live) > ttl)
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            self.forget(&name, &mut dirty);
        }
        dirty
    }

    fn forget(&mut self, name: &str, dirty: &mut BTreeSet<u64>) {
        if let Some(k) = self.nodes.remove(name) {
            for (_, entries) in k.buckets.values() {
                for (target, _) in entries {
                    if let Some(list) = self.by_target.get_mut(target) {
                        list.retain(|h| &*h.node != name);
                        if list.is_empty() {
                            self.by_target.remove(target);
                        }
                        dirty.insert(*target);
                    }
                }
            }
        }
    }

    /// The version of `key` already decoded for node `name` of `generation`: a value gossip
    /// still holds at that version need not be copied out again.
    pub fn known_version(&self, name: &str, generation: u64, key: &str) -> Option<u64> {
        let k = self.nodes.get(name).filter(|k| k.generation == generation)?;
        k.buckets.get(key).map(|(v, _)| *v)
    }

    /// What the other nodes say about `target`, one vote per node.
    pub fn said(&self, target: u64) -> Vec<Said> {
        self.by_target.get(&target).map_or_else(Vec::new, |list| {
            list.iter()
                .map(|h| Said {
                    node: h.node.clone(),
                    verdict: h.verdict,
                })
                .collect()
        })
    }

    /// The live nodes, this one (`my_region`) included, for sharding.
    pub fn members(&self, my_region: &str) -> Vec<Member> {
        let mut m: Vec<Member> = self
            .nodes
            .iter()
            .filter(|(_, k)| k.live)
            .map(|(n, k)| Member::new(n, &k.region))
            .collect();
        m.push(Member::new(&self.me, my_region));
        m.sort_by(|a, b| a.name.cmp(&b.name));
        m
    }

    pub fn summary(&self, now: Instant) -> Vec<NodeSummary> {
        let mut out: Vec<NodeSummary> = self
            .nodes
            .iter()
            .map(|(n, k)| NodeSummary {
                name: n.clone(),
                region: k.region.clone(),
                live: k.live,
                silent_ms: if k.live {
                    0
                } else {
                    u64::try_from(now.saturating_duration_since(k.last_live).as_millis()).unwrap_or(u64::MAX)
                },
                verdicts: k.buckets.values().map(|(_, e)| e.len()).sum(),
                routes: super::routes::decode(&k.routes),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// One bucket of one node rewritten (or deleted: no new entries).
struct BucketChange<'a> {
    node: &'a Arc<str>,
    bucket: &'a Arc<str>,
    /// The new version (the old one for a deleted bucket).
    version: u64,
}

impl BucketChange<'_> {
    /// Removes the votes this bucket gave and adds its new ones; a target another bucket of
    /// the node holds at a higher version keeps that vote. Targets whose votes changed go to
    /// `dirty`.
    fn apply(
        &self,
        by_target: &mut FastMap<u64, Vec<Held>>,
        old: &[(u64, Verdict)],
        new: &[(u64, Verdict)],
        dirty: &mut BTreeSet<u64>,
    ) {
        for (target, _) in old {
            if let Some(list) = by_target.get_mut(target) {
                let before = list.len();
                list.retain(|h| !(h.node == *self.node && h.bucket == *self.bucket));
                if list.len() != before {
                    dirty.insert(*target);
                }
                if list.is_empty() {
                    by_target.remove(target);
                }
            }
        }
        for &(target, verdict) in new {
            let held = Held {
                node: self.node.clone(),
                verdict,
                bucket: self.bucket.clone(),
                version: self.version,
            };
            let list = by_target.entry(target).or_default();
            match list.iter_mut().find(|h| h.node == *self.node) {
                // Another bucket of the node wrote this target later: it speaks.
                Some(h) if h.bucket != *self.bucket && h.version > self.version => continue,
                Some(h) => *h = held,
                None => list.push(held),
            }
            dirty.insert(target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Verdict::*, *};

    /// A bucket as a test writes it: key, version, entries.
    type Bucket<'a> = (&'a str, u64, &'a [(u64, Verdict)]);

    fn node(name: &str, generation: u64, buckets: &[Bucket<'_>]) -> LiveNode {
        LiveNode {
            name: name.into(),
            generation,
            region: format!("r-{name}"),
            routes: String::new(),
            buckets: buckets
                .iter()
                .map(|(k, v, e)| (k.to_string(), *v, verdicts::encode(e)))
                .collect(),
        }
    }

    fn verdicts_of(r: &Remote, target: u64) -> Vec<(String, Verdict)> {
        let mut v: Vec<(String, Verdict)> = r.said(target).iter().map(|s| (s.node.to_string(), s.verdict)).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn verdicts_follow_what_each_node_holds() {
        let t0 = Instant::now();
        let mut r = Remote::new("me");
        let dirty = r.observe(
            vec![
                node("a", 1, &[("v/0", 1, &[(10, Up), (11, Down)])]),
                node("b", 1, &[("v/0", 4, &[(10, Down)])]),
                node("me", 1, &[("v/0", 9, &[(10, Up)])]),
            ],
            t0,
        );
        assert_eq!(dirty.into_iter().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(
            verdicts_of(&r, 10),
            [("a".into(), Up), ("b".into(), Down)],
            "not my own"
        );
        // The same versions again: nothing to do.
        let again = r.observe(
            vec![
                node("a", 1, &[("v/0", 1, &[(10, Up), (11, Down)])]),
                node("b", 1, &[("v/0", 4, &[(10, Down)])]),
            ],
            t0,
        );
        assert!(again.is_empty());
        // a's bucket changes: 11 goes Up, 10 leaves a's set.
        let dirty = r.observe(
            vec![
                node("a", 1, &[("v/0", 2, &[(11, Up)])]),
                node("b", 1, &[("v/0", 4, &[(10, Down)])]),
            ],
            t0,
        );
        assert_eq!(dirty.into_iter().collect::<Vec<_>>(), [10, 11]);
        assert_eq!(verdicts_of(&r, 10), [("b".into(), Down)]);
        assert_eq!(verdicts_of(&r, 11), [("a".into(), Up)]);
        let names: Vec<String> = r.members("r-me").into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["a", "b", "me"]);
    }

    #[test]
    fn a_silent_node_counts_until_its_verdicts_expire() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(10);
        let mut r = Remote::new("me");
        r.observe(vec![node("a", 1, &[("v/0", 1, &[(10, Down)])])], t0);
        // a is no longer live: out of the members at once, its verdict still counts.
        r.observe(vec![], t0 + Duration::from_secs(1));
        assert_eq!(r.members("x").len(), 1);
        assert_eq!(verdicts_of(&r, 10).len(), 1);
        assert!(r.expire(t0 + Duration::from_secs(5), ttl).is_empty());
        let s = r.summary(t0 + Duration::from_secs(5));
        assert_eq!(
            (s[0].live, s[0].silent_ms, s[0].verdicts),
            (false, 5000, 1),
            "last seen live at t0"
        );
        let dirty = r.expire(t0 + Duration::from_secs(12), ttl);
        assert_eq!(dirty.into_iter().collect::<Vec<_>>(), [10]);
        assert!(verdicts_of(&r, 10).is_empty());
        assert!(r.summary(t0).is_empty());
    }

    #[test]
    fn a_restarted_node_replaces_its_old_generation() {
        let t0 = Instant::now();
        let mut r = Remote::new("me");
        r.observe(vec![node("a", 1, &[("v/0", 5, &[(10, Down), (12, Up)])])], t0);
        // The new generation starts over at version 1 with fewer verdicts; the old one is
        // still live a moment: the newer speaks.
        let dirty = r.observe(
            vec![
                node("a", 1, &[("v/0", 5, &[(10, Down), (12, Up)])]),
                node("a", 2, &[("v/0", 1, &[(10, Up)])]),
            ],
            t0,
        );
        assert!(dirty.contains(&10) && dirty.contains(&12));
        assert_eq!(verdicts_of(&r, 10), [("a".into(), Up)]);
        assert!(verdicts_of(&r, 12).is_empty());
    }

    #[test]
    fn deleted_buckets_and_bad_values() {
        let t0 = Instant::now();
        let mut r = Remote::new("me");
        r.observe(
            vec![node("a", 1, &[("v/0", 1, &[(10, Down)]), ("v/1", 2, &[(11, Up)])])],
            t0,
        );
        let dirty = r.observe(vec![node("a", 1, &[("v/0", 1, &[(10, Down)])])], t0);
        assert_eq!(dirty.into_iter().collect::<Vec<_>>(), [11]);
        assert!(verdicts_of(&r, 11).is_empty());
        let mut bad = node("a", 1, &[]);
        bad.buckets.push(("v/0".into(), 3, "garbage".into()));
        r.observe(vec![bad], t0);
        assert!(verdicts_of(&r, 10).is_empty(), "a bad value counts as no verdicts");
        assert_eq!(r.bad_values.len(), 1);
        assert!(r.bad_values[0].1.contains("v/0"), "{:?}", r.bad_values);
    }

    /// A reload that changes a node's bucket layout (16 buckets down to 8, or up past 16 where
    /// `v/12` sorts before `v/2`), seen in every order gossip may deliver the keys: every
    /// target keeps exactly one vote from the node throughout, the newest.
    #[test]
    fn a_bucket_layout_change_keeps_every_vote_once() {
        let t0 = Instant::now();
        type Layout = Vec<(String, u64, Vec<(u64, Verdict)>)>;
        let targets: Vec<u64> = (0..64).collect();
        // Layout of `n` buckets written at `version`: target t in bucket t % n.
        let layout = |n: u64, version: u64, verdict: Verdict| -> Layout {
            (0..n)
                .map(|b| {
                    let entries: Vec<(u64, Verdict)> =
                        targets.iter().filter(|t| *t % n == b).map(|t| (*t, verdict)).collect();
                    (format!("v/{b:x}"), version + b, entries)
                })
                .collect()
        };
        let live = |buckets: &Layout| LiveNode {
            name: "a".into(),
            generation: 1,
            region: "r".into(),
            routes: String::new(),
            buckets: buckets
                .iter()
                .map(|(k, v, e)| (k.clone(), *v, verdicts::encode(e)))
                .collect(),
        };
        for (from, to) in [(16, 8), (8, 16), (16, 24), (24, 3)] {
            let before = layout(from, 100, Up);
            let after = layout(to, 1000, Down);
            // Gossip delivers the new layout a few keys at a time, in lexical order or the
            // reverse: each observed state is the old keys overwritten by some of the new.
            for reverse in [false, true] {
                let mut r = Remote::new("me");
                r.observe(vec![live(&before)], t0);
                let mut order: Vec<usize> = (0..after.len()).collect();
                order.sort_by_key(|i| after[*i].0.clone());
                if reverse {
                    order.reverse();
                }
                let mut state: std::collections::BTreeMap<String, (u64, Vec<(u64, Verdict)>)> =
                    before.iter().map(|(k, v, e)| (k.clone(), (*v, e.clone()))).collect();
                for (step, i) in order.iter().enumerate() {
                    let (k, v, e) = &after[*i];
                    state.insert(k.clone(), (*v, e.clone()));
                    let done = step + 1 == order.len();
                    if done {
                        // The node deletes the keys it no longer has once it wrote the rest.
                        state.retain(|k, _| after.iter().any(|(a, _, _)| a == k));
                    }
                    let now: Vec<_> = state.iter().map(|(k, (v, e))| (k.clone(), *v, e.clone())).collect();
                    r.observe(vec![live(&now)], t0);
                    for t in &targets {
                        let votes = verdicts_of(&r, *t);
                        let written = now.iter().filter(|(_, _, e)| e.iter().any(|(x, _)| x == t)).count();
                        if written > 0 {
                            assert_eq!(votes.len(), 1, "{from}->{to} step {step} target {t}: {votes:?}");
                        }
                        if done {
                            assert_eq!(votes, [("a".into(), Down)], "{from}->{to} target {t}");
                        }
                    }
                }
            }
        }
    }
}
