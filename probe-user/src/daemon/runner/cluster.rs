//! The runner's side of `[cluster]`: which checks this node probes (its share by rendezvous
//! hashing over the live members), the verdicts it gossips (one per endpoint it probes), and
//! each endpoint's health as the aggregate of every location's verdict (SPEC 9), which is what
//! the change stream, the API, the sinks and DNS see.
//!
//! An endpoint's own tracker still counts this node's consecutive results (SPEC 9: within each
//! location); its verdict is one vote. A node that takes a check over (a member left) starts
//! its tracker from the cluster's aggregate, so the endpoint does not go back through
//! CheckingEndpoint; one that hands a check over withdraws its vote.
use crate::changes::ChangeKind;
use tokio::sync::mpsc;

use super::Runner;
use crate::{
    cluster::{
        aggregate::Verdict,
        node::{Node, Settings, Update},
        remote::Said,
        shard::{self, Member},
        transport::Key,
    },
    config::Cluster,
    daemon::{
        table::{OwnerId, Plan, Table},
        DaemonError,
    },
    hash::FastMap,
    status::Health,
};

/// The most a key file may hold: far more than any key.
const MAX_KEY_FILE: u64 = 4096;

pub(in crate::daemon) struct Link {
    pub(in crate::daemon) node: Option<Node>,
    rx: Option<mpsc::UnboundedReceiver<Update>>,
    settings: Cluster,
    members: Vec<Member>,
    /// What the other nodes say, by verdict key.
    said: FastMap<u64, Vec<Said>>,
    /// Targets by verdict key (rebuilt with every table).
    by_verdict: FastMap<u64, OwnerId>,
    /// What this node's route sinks announce, as they last said.
    routes: Vec<crate::cluster::routes::Announcement>,
}

impl Link {
    /// Before the first table: alone until gossip says otherwise, so this node probes all.
    pub(in crate::daemon) fn new(settings: &Cluster) -> Link {
        Link {
            node: None,
            rx: None,
            members: vec![Member::new(&settings.node, &settings.region)],
            settings: settings.clone(),
            said: FastMap::default(),
            by_verdict: FastMap::default(),
            routes: Vec::new(),
        }
    }

    fn owns(&self, shard_key: u64) -> bool {
        let s = &self.settings;
        shard::is_owner(
            &s.node,
            shard_key,
            &self.members,
            s.probers_per_target,
            s.distinct_regions,
        )
    }

    pub(in crate::daemon) fn members(&self) -> &[Member] {
        &self.members
    }

    /// What the other locations say about the endpoint with `verdict_key`.
    pub(in crate::daemon) fn said(&self, verdict_key: u64) -> &[Said] {
        self.said.get(&verdict_key).map_or(&[], Vec::as_slice)
    }
}

/// A tracker's state as a vote.
pub(in crate::daemon) fn verdict_of(h: Health) -> Verdict {
    match h {
        Health::Healthy => Verdict::Up,
        Health::Unhealthy => Verdict::Down,
        Health::CheckingEndpoint => Verdict::Checking,
    }
}

fn health_of(up: bool) -> Health {
    if up {
        Health::Healthy
    } else {
        Health::Unhealthy
    }
}

pub(super) async fn recv(link: &mut Option<Link>) -> Option<Update> {
    match link.as_mut().and_then(|l| l.rx.as_mut()) {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Runner {
    /// Joins the cluster once the first table is applied: reads the key, binds gossip and
    /// gossips the verdicts this node has (resumed from the state file, or none yet).
    pub(super) fn start_cluster(&mut self) -> Result<(), DaemonError> {
        let Some(link) = &mut self.cluster else {
            return Ok(());
        };
        let s = &link.settings;
        let uid = crate::kernel::process::euid();
        let key_error = |source: crate::daemon::ClusterKeyError| DaemonError::ClusterKey {
            path: s.key_file.clone(),
            source,
        };
        let secret = crate::secret::read_private(&s.key_file, uid, MAX_KEY_FILE).map_err(|e| key_error(e.into()))?;
        let key = Key::new(&secret).map_err(|e| key_error(e.into()))?;
        let settings = Settings {
            node: s.node.clone(),
            region: s.region.clone(),
            listen: s.listen,
            advertise: s.advertise,
            seeds: s.seeds.clone(),
            gossip_interval: s.gossip_interval,
            verdict_ttl: s.verdict_ttl,
            key,
        };
        let own = own_verdicts(&self.table);
        let (tx, rx) = mpsc::unbounded_channel();
        let node = Node::start(settings, own, tx).map_err(DaemonError::Cluster)?;
        link.node = Some(node);
        link.rx = Some(rx);
        Ok(())
    }

    /// Gives the endpoints `plan` builds their share, keys and aggregate health before it is
    /// applied, so that applying it registers only this node's checks and publishes no false
    /// change. (The endpoints that stay keep theirs: a new membership reshards them.)
    pub(super) fn cluster_share(&self, plan: &mut Plan) {
        if self.cluster.is_none() {
            return;
        }
        for (profile, t) in plan.built_mut() {
            self.cluster_share_one(profile, t);
        }
    }

    /// As `cluster_share`, for one target built for `profile`.
    pub(in crate::daemon) fn cluster_share_one(
        &self,
        profile: &crate::config::Profile,
        t: &mut crate::daemon::table::Target,
    ) {
        let Some(link) = &self.cluster else {
            return;
        };
        let owned = link.owns(t.spec().key().question());
        t.share(owned, None, None);
        let own = t.should_probe().then(|| verdict_of(t.tracker().state()));
        let votes = own
            .into_iter()
            .chain(link.said(t.verdict_key()).iter().map(|s| s.verdict));
        t.share(owned, own, profile.aggregate.healthy(votes).map(health_of));
    }

    /// After a table was applied: the verdicts to gossip and the index by verdict key.
    pub(super) fn cluster_applied(&mut self) {
        let Some(link) = &mut self.cluster else {
            return;
        };
        link.by_verdict = self
            .table
            .targets()
            .iter()
            .map(|(id, t)| (t.verdict_key(), *id))
            .collect();
        if let Some(node) = &link.node {
            node.replace(own_verdicts(&self.table));
        }
    }

    /// What gossip brought: new members re-share the checks; changed verdicts re-aggregate.
    pub(super) fn on_cluster(&mut self, update: Update) {
        let now = self.now();
        let Some(link) = &mut self.cluster else {
            return;
        };
        let mut touched = Vec::with_capacity(update.verdicts.len());
        for (key, said) in update.verdicts {
            if said.is_empty() {
                link.said.remove(&key);
            } else {
                link.said.insert(key, said);
            }
            if let Some(id) = link.by_verdict.get(&key) {
                touched.push(*id);
            }
        }
        if let Some(members) = update.members {
            link.members = members;
            self.reshard(now);
        }
        for id in touched {
            self.cluster_refresh(id, now);
        }
    }

    /// Takes or hands over each check whose owners changed with the members.
    fn reshard(&mut self, now: u64) {
        let Some(link) = &self.cluster else {
            return;
        };
        let moved: Vec<(OwnerId, bool)> = self
            .table
            .targets()
            .iter()
            .filter_map(|(id, t)| {
                let owned = link.owns(t.spec().key().question());
                (owned != t.owned()).then_some((*id, owned))
            })
            .collect();
        let (mut taken, mut handed) = (0usize, 0usize);
        for (id, owned) in moved {
            // One taken over starts from the cluster's verdict (`Table::set_owned`).
            let unsettled = self.table.set_owned(id, owned);
            if owned {
                taken += 1;
            } else {
                handed += 1;
            }
            self.follow_table(unsettled, now);
        }
        if taken + handed > 0 {
            log::info!(
                "cluster: {taken} endpoint(s) taken over, {handed} handed over; {} member(s)",
                self.cluster.as_ref().map_or(0, |l| l.members.len())
            );
        }
    }

    /// Gossips endpoint `id`'s own verdict if it changed and re-aggregates its health;
    /// true when the aggregate changed (the caller publishes).
    pub(in crate::daemon) fn cluster_sync(&mut self, id: OwnerId) -> bool {
        let Some(link) = &self.cluster else {
            return false;
        };
        let Some(t) = self.table.targets().get(&id) else {
            return false;
        };
        let own = t.should_probe().then(|| verdict_of(t.tracker().state()));
        if own != t.cluster_sent() {
            if let Some(node) = &link.node {
                match own {
                    Some(v) => node.set(t.verdict_key(), v),
                    None => node.withdraw(t.verdict_key()),
                }
            }
        }
        let rule = self.table.profiles()[t.profile_ix() as usize].cfg.aggregate;
        let votes = own
            .into_iter()
            .chain(link.said(t.verdict_key()).iter().map(|s| s.verdict));
        let agg = rule.healthy(votes).map(health_of);
        self.table.set_cluster_health(id, own, agg)
    }

    /// `cluster_sync`, publishing the endpoint's change when its aggregate moved.
    pub(in crate::daemon) fn cluster_refresh(&mut self, id: OwnerId, now: u64) {
        if self.cluster_sync(id) {
            self.restatus(id, ChangeKind::Cluster, now, None);
        }
    }
}

impl Runner {
    /// Every location's verdict on the endpoints `views` show, with `[cluster]`.
    pub(in crate::daemon) fn fill_cluster<'a>(
        &self,
        views: impl Iterator<Item = &'a mut crate::daemon::views::EndpointView>,
    ) {
        let Some(link) = &self.cluster else {
            return;
        };
        let silent: FastMap<String, u64> = link
            .node
            .as_ref()
            .map(Node::snapshot)
            .unwrap_or_default()
            .nodes
            .into_iter()
            .map(|n| (n.name, n.silent_ms))
            .collect();
        for view in views {
            self.fill_one(link, &silent, view);
        }
    }

    fn fill_one(&self, link: &Link, silent: &FastMap<String, u64>, view: &mut crate::daemon::views::EndpointView) {
        use crate::daemon::views::{EndpointCluster, LocationVerdict};
        let Some(t) = self
            .table
            .find(&view.profile, &view.name)
            .and_then(|id| self.table.targets().get(&id))
        else {
            return;
        };
        let own = t.cluster_sent().map(|verdict| LocationVerdict {
            node: link.settings.node.clone(),
            verdict,
            silent_ms: 0,
        });
        let others = link.said(t.verdict_key()).iter().map(|s| LocationVerdict {
            node: s.node.to_string(),
            verdict: s.verdict,
            silent_ms: silent.get(&*s.node).copied().unwrap_or(0),
        });
        view.cluster = Some(EndpointCluster {
            probed_here: t.should_probe(),
            aggregate: self.table.profiles()[t.profile_ix() as usize].cfg.aggregate.to_string(),
            locations: own.into_iter().chain(others).collect(),
        });
    }

    /// `GET /v1/cluster`; None without `[cluster]`.
    /// The route sinks say what this node announces now: gossiped to the other nodes.
    pub(in crate::daemon) fn cluster_routes(&mut self, routes: Vec<crate::cluster::routes::Announcement>) {
        let Some(link) = self.cluster.as_mut() else {
            return;
        };
        if let Some(node) = &link.node {
            node.set_routes(&routes);
        }
        link.routes = routes;
    }

    pub(in crate::daemon) fn cluster_view(&self) -> Option<crate::daemon::views::ClusterView> {
        use std::sync::atomic::Ordering::Relaxed;
        let link = self.cluster.as_ref()?;
        let snap = link.node.as_ref().map(Node::snapshot).unwrap_or_default();
        let datagrams = link.node.as_ref().map_or_else(Default::default, |n| {
            let c = &n.counters;
            crate::daemon::views::DatagramCounts {
                bytes_sent: c.bytes_sent.load(Relaxed),
                bytes_received: c.bytes_received.load(Relaxed),
                accepted: c.accepted.load(Relaxed),
                forged: c.forged.load(Relaxed),
                stale: c.stale.load(Relaxed),
                replayed: c.replayed.load(Relaxed),
                malformed: c.malformed.load(Relaxed),
                misdirected: c.misdirected.load(Relaxed),
            }
        });
        Some(crate::daemon::views::ClusterView {
            node: link.settings.node.clone(),
            region: link.settings.region.clone(),
            probers_per_target: link.settings.probers_per_target,
            members: link.members().iter().map(|m| m.name.clone()).collect(),
            nodes: snap.nodes,
            routes: link.routes.clone(),
            probed_here: self.table.targets().values().filter(|t| t.should_probe()).count(),
            endpoints: self.table.targets().len(),
            datagrams,
        })
    }
}

/// This node's votes: every endpoint it probes, with its tracker's state.
fn own_verdicts(table: &Table) -> Vec<(u64, Verdict)> {
    table
        .targets()
        .values()
        .filter(|t| t.should_probe())
        .map(|t| (t.verdict_key(), verdict_of(t.tracker().state())))
        .collect()
}
