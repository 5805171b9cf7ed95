//! Asking the agents (`probe::agent`): every endpoint of a profile with `agent_port` has its
//! agent asked every `agent_interval`, from the end of one ask to the start of the next, on
//! the L7 workers; the answers come back on their own channel and go through the table's
//! door (`Table::record_agent`), then follow like an admin change (a maint stops the
//! endpoint's check, a ready starts it again). Agents are few beside checks (one per
//! backend that runs one), so they keep a heap of their own rather than a scheduler entry:
//! the check's scheduler, its sharing and its cadences stay the check's alone.
use std::{cmp::Reverse, collections::BinaryHeap, net::SocketAddr, sync::Arc};

use tokio::sync::mpsc;

use super::Runner;
use crate::{
    daemon::table::OwnerId,
    hash::FastMap,
    probe::agent::{AgentProbe, Asked},
};

/// One endpoint's agent.
struct Poll {
    probe: Arc<AgentProbe>,
    target: SocketAddr,
    /// When its next ask is due; its heap entries with another time are stale.
    due_ns: u64,
    /// An ask is out: the next is scheduled when it comes back.
    asking: bool,
}

/// Every endpoint's agent, and the asks' answers.
pub(super) struct Agents {
    polls: FastMap<OwnerId, Poll>,
    due: BinaryHeap<Reverse<(u64, OwnerId)>>,
    tx: mpsc::UnboundedSender<(OwnerId, Asked)>,
    pub(super) rx: mpsc::UnboundedReceiver<(OwnerId, Asked)>,
}

impl Default for Agents {
    fn default() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Agents {
            polls: FastMap::default(),
            due: BinaryHeap::new(),
            tx,
            rx,
        }
    }
}

impl Agents {
    /// When the next ask is due, if any.
    pub(super) fn next_due(&self) -> Option<u64> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }
}

/// Where an endpoint's first ask falls in its interval: spread by its id, so that a fleet's
/// agents are not all asked at once.
fn first_due(now: u64, id: OwnerId, interval_ns: u64) -> u64 {
    now + crate::hash::stable(&id.to_le_bytes()) % interval_ns.max(1)
}

impl Runner {
    /// Brings the agents in step with the table after it changed (a reload, a fleet batch):
    /// new endpoints of profiles with an agent get one (asked within an interval), gone ones
    /// and those whose profile dropped its agent lose theirs, changed settings apply from
    /// the next ask. Costs the endpoints with agents, not the fleet.
    pub(super) fn sync_agents(&mut self, now: u64) {
        let mut wanted: FastMap<OwnerId, (Arc<AgentProbe>, SocketAddr)> = FastMap::default();
        for p in self.table.profiles() {
            let Some(settings) = &p.cfg.health.agent else {
                continue;
            };
            let probe = Arc::new(AgentProbe::of(settings));
            for id in &p.owners {
                let t = &self.table.targets()[id];
                wanted.insert(*id, (probe.clone(), SocketAddr::new(t.address().ip(), settings.port)));
            }
        }
        let agents = &mut self.probe.agents;
        agents.polls.retain(|id, _| wanted.contains_key(id));
        for (id, (probe, target)) in wanted {
            match agents.polls.get_mut(&id) {
                Some(poll) => {
                    if poll.probe.interval != probe.interval && !poll.asking {
                        poll.due_ns = now + u64::try_from(probe.interval.as_nanos()).unwrap_or(u64::MAX);
                        agents.due.push(Reverse((poll.due_ns, id)));
                    }
                    poll.probe = probe;
                    poll.target = target;
                }
                None => {
                    let interval = u64::try_from(probe.interval.as_nanos()).unwrap_or(u64::MAX);
                    let due_ns = first_due(now, id, interval);
                    agents.polls.insert(
                        id,
                        Poll {
                            probe,
                            target,
                            due_ns,
                            asking: false,
                        },
                    );
                    agents.due.push(Reverse((due_ns, id)));
                }
            }
        }
        // What an agent held went with its profile's agent check when the plan rebuilt the
        // profile's targets (`table::plan`).
        // Stale entries would pile up across many reloads: rebuilt when mostly stale.
        if agents_stale(&self.probe.agents) {
            let fresh: BinaryHeap<_> = self
                .probe
                .agents
                .polls
                .iter()
                .filter(|(_, p)| !p.asking)
                .map(|(id, p)| Reverse((p.due_ns, *id)))
                .collect();
            self.probe.agents.due = fresh;
        }
    }

    /// Sends every ask due at `now` to the L7 workers.
    pub(super) fn ask_agents(&mut self, now: u64) {
        let agents = &mut self.probe.agents;
        let mut out = Vec::new();
        while let Some(&Reverse((at, id))) = agents.due.peek() {
            if at > now {
                break;
            }
            agents.due.pop();
            let Some(poll) = agents.polls.get_mut(&id) else {
                continue;
            };
            if poll.due_ns != at || poll.asking {
                continue;
            }
            poll.asking = true;
            out.push((id, poll.probe.clone(), poll.target, agents.tx.clone()));
        }
        self.probe
            .tasks
            .workers
            .spawn_all(out, |(id, probe, target, tx)| async move {
                let asked = probe.ask(target).await;
                let _ = tx.send((id, asked));
            });
    }

    /// An agent's answer: recorded, followed, and the next ask scheduled an interval on.
    pub(super) fn on_agent(&mut self, id: OwnerId, asked: Asked) {
        let now = self.now();
        let agents = &mut self.probe.agents;
        let Some(poll) = agents.polls.get_mut(&id) else {
            return;
        };
        poll.asking = false;
        poll.due_ns = now + u64::try_from(poll.probe.interval.as_nanos()).unwrap_or(u64::MAX);
        agents.due.push(Reverse((poll.due_ns, id)));
        self.metrics.agent_answer(&asked.answer);
        let at_unix_ms = self.ports.clock.unix_ms_at(now);
        if let Some(unsettled) = self.table.record_agent(id, &asked.answer, at_unix_ms) {
            self.follow_table(unsettled, now);
            self.persist.dirty = true;
        }
    }
}

/// Whether the heap holds more than twice as many entries as there are agents.
fn agents_stale(agents: &Agents) -> bool {
    agents.due.len() > 2 * agents.polls.len() + 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_asks_spread_over_the_interval() {
        let interval = 1_000_000_000;
        let dues: Vec<u64> = (1..=1000).map(|id| first_due(5, id, interval) - 5).collect();
        assert!(dues.iter().all(|d| *d < interval));
        let early = dues.iter().filter(|d| **d < interval / 2).count();
        assert!((350..=650).contains(&early), "{early} of 1000 in the first half");
    }
}
