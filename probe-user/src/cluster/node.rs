//! This node in the cluster: a thread of its own runs chitchat over the authenticated
//! transport, writes this node's verdicts into its gossip state (a bucket at a time, at most
//! once per gossip interval), and reads everyone else's as gossip brings them. The runner
//! tells it its own verdicts (`set`, `withdraw`, `replace`) and hears back, as `Update`s, the
//! live members (for sharding) and the targets whose remote verdicts changed.
//!
//! Only this node writes its state, so there is no leader and no conflict: chitchat's
//! anti-entropy carries each node's state to the others, and its phi-accrual detector says who
//! is live.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use chitchat::{spawn_chitchat, ChitchatConfig, ChitchatId, FailureDetectorConfig, NodeState};
use tokio::sync::{mpsc, oneshot};

use super::{
    aggregate::Verdict,
    remote::{LiveNode, NodeSummary, Remote, Said},
    routes,
    shard::Member,
    transport::{AuthTransport, Counters, Key},
    verdicts,
};

/// Shared by every probed cluster: a node of another program answers BadCluster.
const CLUSTER_ID: &str = "probed";
const REGION_KEY: &str = "region";
/// How often silent nodes' verdicts are checked for expiry.
const EXPIRE_EVERY: Duration = Duration::from_secs(1);

/// What a node needs to join.
#[derive(Clone)]
pub struct Settings {
    pub node: String,
    pub region: String,
    pub listen: SocketAddr,
    pub advertise: SocketAddr,
    pub seeds: Vec<SocketAddr>,
    pub gossip_interval: Duration,
    pub verdict_ttl: Duration,
    pub key: Key,
}

/// What the runner hears from the cluster.
#[derive(Debug, Default)]
pub struct Update {
    /// The live nodes, this one included, when that set changed.
    pub members: Option<Vec<Member>>,
    /// Targets whose verdicts from other nodes changed, with what those nodes say now.
    pub verdicts: Vec<(u64, Vec<Said>)>,
}

/// A change of this node's own verdicts.
#[derive(Debug)]
enum Own {
    Set(u64, Verdict),
    Withdraw(u64),
    Replace(Vec<(u64, Verdict)>),
    /// What this node's route sinks announce (`routes::encode`).
    Routes(String),
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("start the gossip thread")]
    Thread(#[source] std::io::Error),
    #[error("start the gossip thread's runtime")]
    Runtime(#[source] std::io::Error),
    #[error("join the cluster")]
    Gossip(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the gossip thread ended before it started")]
    Ended,
}

/// The figures the API and metrics show.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Snapshot {
    pub node: String,
    pub region: String,
    pub members: Vec<String>,
    pub nodes: Vec<NodeSummary>,
    /// Verdicts this node gossips.
    pub own_verdicts: usize,
}

/// The running node.
pub struct Node {
    own: mpsc::UnboundedSender<Own>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    pub counters: Arc<Counters>,
    snapshot: Arc<Mutex<Snapshot>>,
}

impl Node {
    /// Binds the gossip socket and joins through the seeds, with `initial` as this node's
    /// verdicts; `updates` hears what the cluster says. Returns once the socket is bound.
    pub fn start(
        settings: Settings,
        initial: Vec<(u64, Verdict)>,
        updates: mpsc::UnboundedSender<Update>,
    ) -> Result<Node, NodeError> {
        let (own_tx, own_rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let counters = Arc::new(Counters::default());
        let snapshot = Arc::new(Mutex::new(Snapshot {
            node: settings.node.clone(),
            region: settings.region.clone(),
            ..Snapshot::default()
        }));
        let task = Task {
            own: OwnState::new(initial),
            remote: Remote::new(&settings.node),
            updates,
            snapshot: snapshot.clone(),
            members: Vec::new(),
            settings,
        };
        let transport = AuthTransport::new(task.settings.key.clone(), counters.clone(), task.settings.advertise);
        let thread = std::thread::Builder::new()
            .name("probed-cluster".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(NodeError::Runtime(e)));
                        return;
                    }
                };
                rt.block_on(task.run(transport, own_rx, stop_rx, ready_tx));
            })
            .map_err(NodeError::Thread)?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Node {
                own: own_tx,
                stop: Some(stop_tx),
                thread: Some(thread),
                counters,
                snapshot,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(NodeError::Ended)
            }
        }
    }

    pub fn set(&self, target: u64, verdict: Verdict) {
        let _ = self.own.send(Own::Set(target, verdict));
    }

    pub fn withdraw(&self, target: u64) {
        let _ = self.own.send(Own::Withdraw(target));
    }

    /// All of this node's verdicts at once (after a reload).
    pub fn replace(&self, all: Vec<(u64, Verdict)>) {
        let _ = self.own.send(Own::Replace(all));
    }

    /// What this node's route sinks announce now.
    pub fn set_routes(&self, list: &[routes::Announcement]) {
        let _ = self.own.send(Own::Routes(routes::encode(list)));
    }

    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Leaves (the others see this node go silent) and waits for the thread.
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// This node's verdicts and the buckets not yet written to gossip.
struct OwnState {
    verdicts: BTreeMap<u64, Verdict>,
    /// What the route sinks announce, when it changed since it was last written.
    routes: Option<String>,
    written_routes: String,
    buckets: u32,
    dirty: BTreeSet<u32>,
    /// Buckets of an older, larger layout to delete.
    stale: Vec<u32>,
}

impl OwnState {
    fn new(initial: Vec<(u64, Verdict)>) -> OwnState {
        let mut s = OwnState {
            verdicts: BTreeMap::new(),
            routes: None,
            written_routes: String::new(),
            buckets: 1,
            dirty: BTreeSet::new(),
            stale: Vec::new(),
        };
        s.replace(initial);
        s
    }

    fn apply(&mut self, change: Own) {
        match change {
            Own::Set(t, v) => {
                if self.verdicts.insert(t, v) != Some(v) {
                    self.dirty.insert(verdicts::bucket_of(t, self.buckets));
                }
            }
            Own::Withdraw(t) => {
                if self.verdicts.remove(&t).is_some() {
                    self.dirty.insert(verdicts::bucket_of(t, self.buckets));
                }
            }
            Own::Replace(all) => self.replace(all),
            Own::Routes(value) => {
                self.routes = (value != self.written_routes).then_some(value);
            }
        }
    }

    /// A new set: the layout follows its size; every bucket is written again.
    fn replace(&mut self, all: Vec<(u64, Verdict)>) {
        self.verdicts = all.into_iter().collect();
        let buckets = verdicts::bucket_count(self.verdicts.len());
        self.stale.extend(buckets..self.buckets);
        self.buckets = buckets;
        self.dirty = (0..buckets).collect();
    }

    /// The keys to write and to delete, and forgets that they are pending.
    fn take(&mut self) -> (Vec<(String, String)>, Vec<String>) {
        let dirty = std::mem::take(&mut self.dirty);
        let mut per_bucket: BTreeMap<u32, Vec<(u64, Verdict)>> = dirty.iter().map(|b| (*b, Vec::new())).collect();
        if !dirty.is_empty() {
            for (&t, &v) in &self.verdicts {
                if let Some(list) = per_bucket.get_mut(&verdicts::bucket_of(t, self.buckets)) {
                    list.push((t, v));
                }
            }
        }
        let mut writes: Vec<(String, String)> = per_bucket
            .into_iter()
            .map(|(b, entries)| (verdicts::key(b), verdicts::encode(&entries)))
            .collect();
        if let Some(value) = self.routes.take() {
            self.written_routes.clone_from(&value);
            writes.push((routes::KEY.to_string(), value));
        }
        let deletes = std::mem::take(&mut self.stale).into_iter().map(verdicts::key).collect();
        (writes, deletes)
    }
}

struct Task {
    settings: Settings,
    own: OwnState,
    remote: Remote,
    updates: mpsc::UnboundedSender<Update>,
    snapshot: Arc<Mutex<Snapshot>>,
    members: Vec<Member>,
}

impl Task {
    async fn run(
        mut self,
        transport: AuthTransport,
        mut own_rx: mpsc::UnboundedReceiver<Own>,
        mut stop: oneshot::Receiver<()>,
        ready: std::sync::mpsc::Sender<Result<(), NodeError>>,
    ) {
        let s = &self.settings;
        // A new generation per start: the others take a restarted node for a new member and
        // drop its old self's verdicts (remote.rs).
        let generation = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let config = ChitchatConfig {
            chitchat_id: ChitchatId::new(s.node.as_str(), generation, s.advertise),
            cluster_id: CLUSTER_ID.into(),
            gossip_interval: s.gossip_interval,
            listen_addr: s.listen,
            seed_nodes: s.seeds.iter().map(ToString::to_string).collect(),
            failure_detector_config: FailureDetectorConfig {
                // The prior mean of the heartbeat interval: the gossip interval, so that a
                // dead node is seen within about phi_threshold intervals from the start.
                initial_interval: s.gossip_interval,
                // chitchat's own copy of a dead node's state; ours (remote.rs) follows
                // verdict_ttl.
                dead_node_grace_period: Duration::from_secs(3600),
                ..FailureDetectorConfig::default()
            },
            marked_for_deletion_grace_period: Duration::from_secs(600),
            catchup_callback: None,
            extra_liveness_predicate: None,
        };
        let (writes, _) = self.own.take();
        let mut initial = vec![(REGION_KEY.to_string(), s.region.clone())];
        initial.extend(writes);
        let handle = match spawn_chitchat(config, initial, &transport).await {
            Ok(h) => h,
            Err(e) => {
                let _ = ready.send(Err(NodeError::Gossip(e.into())));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        log::info!(
            "cluster: node {} ({}) gossiping on {}, seeds {:?}",
            s.node,
            s.region,
            s.listen,
            s.seeds
        );
        let chitchat = handle.chitchat();
        let mut watcher = chitchat.lock().await.live_nodes_watcher();
        let mut flush = tokio::time::interval(s.gossip_interval);
        flush.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut expire = tokio::time::interval(EXPIRE_EVERY);
        self.publish_members();
        loop {
            tokio::select! {
                _ = &mut stop => break,
                change = own_rx.recv() => match change {
                    Some(c) => {
                        self.own.apply(c);
                        while let Ok(c) = own_rx.try_recv() {
                            self.own.apply(c);
                        }
                    }
                    None => break,
                },
                _ = flush.tick() => {
                    let (writes, deletes) = self.own.take();
                    if !writes.is_empty() || !deletes.is_empty() {
                        let mut c = chitchat.lock().await;
                        let me = c.self_node_state();
                        for (k, v) in writes {
                            me.set(k, v);
                        }
                        for k in deletes {
                            me.delete(&k);
                        }
                    }
                }
                changed = watcher.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let live = live_nodes(&watcher.borrow_and_update(), &self.remote);
                    let dirty = self.remote.observe(live, Instant::now());
                    self.report(dirty);
                }
                _ = expire.tick() => {
                    let dirty = self.remote.expire(Instant::now(), self.settings.verdict_ttl);
                    self.report(dirty);
                }
            }
        }
        if let Err(e) = handle.shutdown().await {
            log::warn!("cluster: gossip ended with an error: {e:#}");
        }
    }

    /// Sends the runner the members (when changed) and what the others say about `dirty`.
    fn report(&mut self, dirty: BTreeSet<u64>) {
        for (node, problem) in self.remote.bad_values.drain(..) {
            log::warn!(
                "cluster: node {node} gossips a verdict value this node cannot read ({problem}): another version?"
            );
        }
        let members = self.publish_members();
        if members.is_none() && dirty.is_empty() {
            return;
        }
        let verdicts = dirty.into_iter().map(|t| (t, self.remote.said(t))).collect();
        let _ = self.updates.send(Update { members, verdicts });
    }

    /// The live members, when they changed since last time; refreshes the snapshot.
    fn publish_members(&mut self) -> Option<Vec<Member>> {
        let now = self.remote.members(&self.settings.region);
        let mut snap = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        snap.members = now.iter().map(|m| m.name.clone()).collect();
        snap.nodes = self.remote.summary(Instant::now());
        snap.own_verdicts = self.own.verdicts.len();
        drop(snap);
        if now == self.members {
            return None;
        }
        log::info!(
            "cluster: members now {:?}",
            now.iter().map(|m| &m.name).collect::<Vec<_>>()
        );
        self.members.clone_from(&now);
        Some(now)
    }
}

/// The live nodes' names, regions and verdict keys, copied out of chitchat's view; only the
/// values `remote` has not decoded at their version yet are copied.
fn live_nodes(live: &BTreeMap<ChitchatId, NodeState>, remote: &Remote) -> Vec<LiveNode> {
    live.iter()
        .map(|(id, state)| LiveNode {
            name: id.node_id.to_string(),
            generation: id.generation_id,
            region: state.get(REGION_KEY).unwrap_or(&id.node_id).to_string(),
            routes: state.get(routes::KEY).unwrap_or_default().to_string(),
            buckets: state
                .iter_prefix(verdicts::PREFIX)
                .filter(|(_, v)| !v.is_deleted())
                .map(|(k, v)| {
                    let known = remote.known_version(&id.node_id, id.generation_id, k) == Some(v.version);
                    let value = if known { String::new() } else { v.value.clone() };
                    (k.to_string(), v.version, value)
                })
                .collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_verdicts_are_written_a_changed_bucket_at_a_time() {
        let mut own = OwnState::new((0..200u64).map(|t| (t, Verdict::Up)).collect());
        assert_eq!(own.buckets, 4);
        let (writes, deletes) = own.take();
        assert_eq!((writes.len(), deletes.len()), (4, 0), "everything at first");
        assert_eq!(own.take().0.len(), 0, "then nothing until a change");
        own.apply(Own::Set(7, Verdict::Down));
        own.apply(Own::Set(7, Verdict::Down));
        let (writes, _) = own.take();
        assert_eq!(writes.len(), 1);
        assert!(verdicts::decode(&writes[0].1).unwrap().contains(&(7, Verdict::Down)));
        own.apply(Own::Set(8, Verdict::Up));
        assert!(own.take().0.is_empty(), "the same verdict again is no change");
        own.apply(Own::Withdraw(7));
        let (writes, _) = own.take();
        assert!(!verdicts::decode(&writes[0].1).unwrap().iter().any(|e| e.0 == 7));
        // A smaller set: fewer buckets, the old ones deleted.
        own.apply(Own::Replace(vec![(1, Verdict::Up)]));
        let (writes, deletes) = own.take();
        assert_eq!(writes.len(), 1);
        assert_eq!(deletes, ["v/1", "v/2", "v/3"]);
    }

    fn free_port() -> SocketAddr {
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }

    fn settings(name: &str, addr: SocketAddr, seeds: Vec<SocketAddr>, key: u8) -> Settings {
        Settings {
            node: name.into(),
            region: format!("r-{name}"),
            listen: addr,
            advertise: addr,
            seeds,
            gossip_interval: Duration::from_millis(50),
            verdict_ttl: Duration::from_secs(30),
            key: Key::new(&[key; 32]).unwrap(),
        }
    }

    /// Waits (at most 10 s) until `ok` holds for what `rx` has said so far.
    fn wait(rx: &mut mpsc::UnboundedReceiver<Update>, seen: &mut Seen, what: &str, ok: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ok(seen) {
            assert!(Instant::now() < deadline, "{what}: not within 10 s; seen {seen:?}");
            match rx.try_recv() {
                Ok(u) => seen.take(u),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }

    #[derive(Debug, Default)]
    struct Seen {
        members: Vec<String>,
        verdicts: BTreeMap<u64, Vec<(String, Verdict)>>,
    }

    impl Seen {
        fn take(&mut self, u: Update) {
            if let Some(m) = u.members {
                self.members = m.into_iter().map(|m| m.name).collect();
            }
            for (t, said) in u.verdicts {
                self.verdicts
                    .insert(t, said.into_iter().map(|s| (s.node.to_string(), s.verdict)).collect());
            }
        }
    }

    /// Three real nodes gossiping over loopback UDP: they find each other through one seed,
    /// each hears the others' verdicts and their changes, and a node with another key is
    /// never let in.
    #[test]
    fn three_nodes_share_verdicts_and_a_stranger_is_kept_out() {
        let (a_addr, b_addr, c_addr, x_addr) = (free_port(), free_port(), free_port(), free_port());
        let (a_tx, mut a_rx) = mpsc::unbounded_channel();
        let (b_tx, mut b_rx) = mpsc::unbounded_channel();
        let (c_tx, mut c_rx) = mpsc::unbounded_channel();
        let (x_tx, mut x_rx) = mpsc::unbounded_channel();
        let a = Node::start(settings("a", a_addr, vec![], 1), vec![(42, Verdict::Up)], a_tx).unwrap();
        let b = Node::start(settings("b", b_addr, vec![a_addr], 1), vec![(42, Verdict::Down)], b_tx).unwrap();
        let c = Node::start(settings("c", c_addr, vec![a_addr], 1), vec![], c_tx).unwrap();
        let x = Node::start(settings("x", x_addr, vec![a_addr], 2), vec![(42, Verdict::Down)], x_tx).unwrap();
        let (mut sa, mut sb, mut sc, mut sx) = (Seen::default(), Seen::default(), Seen::default(), Seen::default());
        let all = |s: &Seen| s.members == ["a", "b", "c"];
        wait(&mut a_rx, &mut sa, "a sees a, b, c", all);
        wait(&mut b_rx, &mut sb, "b sees a, b, c", all);
        wait(&mut c_rx, &mut sc, "c sees a, b, c", all);
        wait(&mut c_rx, &mut sc, "c hears a and b on 42", |s| {
            s.verdicts.get(&42) == Some(&vec![("a".into(), Verdict::Up), ("b".into(), Verdict::Down)])
        });
        // A change travels too.
        a.set(42, Verdict::Down);
        a.set(43, Verdict::Up);
        wait(&mut c_rx, &mut sc, "c hears a's change", |s| {
            s.verdicts
                .get(&42)
                .is_some_and(|v| v.contains(&("a".into(), Verdict::Down)))
                && s.verdicts.get(&43) == Some(&vec![("a".into(), Verdict::Up)])
        });
        // b must have heard 43 before its withdrawal can be news to it: a set and a withdraw
        // within one gossip interval reach a node that missed the set as nothing at all.
        wait(&mut b_rx, &mut sb, "b hears a's 43", |s| {
            s.verdicts.get(&43) == Some(&vec![("a".into(), Verdict::Up)])
        });
        a.withdraw(43);
        wait(&mut b_rx, &mut sb, "b hears a withdraw 43", |s| {
            s.verdicts
                .get(&42)
                .is_some_and(|v| v.contains(&("a".into(), Verdict::Down)))
                && s.verdicts.get(&43).is_some_and(Vec::is_empty)
        });
        // The stranger: its datagrams are refused, it learns nobody and nobody learns it.
        assert!(a.counters.forged.load(std::sync::atomic::Ordering::Relaxed) > 0);
        while let Ok(u) = x_rx.try_recv() {
            sx.take(u);
        }
        assert!(sx.members.iter().all(|m| m == "x"), "{sx:?}");
        assert!(sx.verdicts.is_empty(), "{sx:?}");
        for s in [&sa, &sb, &sc] {
            assert!(!s.members.contains(&"x".to_string()));
            assert!(s.verdicts.values().flatten().all(|(n, _)| n != "x"), "{s:?}");
        }
        assert_eq!(c.snapshot().members, ["a", "b", "c"]);
        drop((a, b, c, x));
    }
}
