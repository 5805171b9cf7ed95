//! Agent checks' answers (`probe::agent`): what each endpoint's agent last said, beside the
//! targets for the endpoints that have an agent only, and the door through which an answer
//! changes an endpoint. What the agent holds (down, drain or maint, a weight) lives in the
//! target, four bytes; its health, admin state and weight combine it with the check's and
//! the operator's (`Target::health`, `admin`, `weight`).
use std::sync::Arc;

use super::{OwnerId, Table, Unsettled};
use crate::{
    changes::ChangeKind,
    probe::agent::{AgentAnswer, AgentState},
};

/// An endpoint's agent as last asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AgentSeen {
    /// Its last answer as words: the reply's, or why there was none.
    pub said: Arc<str>,
    /// Whether the last ask got a line.
    pub answered: bool,
    pub at_unix_ms: u64,
}

impl Table {
    /// Takes what endpoint `id`'s agent answered (at `at_unix_ms`): a line changes what the
    /// agent holds; no line changes nothing. Some when what the endpoint is moved: the runner
    /// follows it like an admin change (`Runner::follow_table`), since a maint stops its check
    /// and a ready starts it again.
    pub fn record_agent(&mut self, id: OwnerId, answer: &AgentAnswer, at_unix_ms: u64) -> Option<Unsettled> {
        let t = self.targets.get(&id)?;
        let said = answer.to_string();
        match self.agents_seen.get_mut(&id) {
            Some(seen) if *seen.said == said => {
                seen.at_unix_ms = at_unix_ms;
            }
            _ => {
                self.agents_seen.insert(
                    id,
                    AgentSeen {
                        said: Arc::from(said),
                        answered: matches!(answer, AgentAnswer::Reply(_)),
                        at_unix_ms,
                    },
                );
            }
        }
        let AgentAnswer::Reply(reply) = answer else {
            return None;
        };
        let next = t.agent.after(reply);
        (next != t.agent).then(|| self.set_agent(id, next))
    }

    /// Sets what endpoint `id`'s agent holds; its status catches up in `settle`. Its change
    /// is published even when only its weight moved.
    fn set_agent(&mut self, id: OwnerId, next: AgentState) -> Unsettled {
        if let Some(t) = self.targets.get(&id) {
            let before = t.counts_as();
            let after = crate::status::counted(next.admin_over(t.operator_admin()), t.status);
            if before != after {
                let p = &mut self.profiles[t.profile_ix as usize];
                p.counts.remove(before);
                p.counts.add(after);
            }
        }
        let probed = self.probing_change(id, true, |t| t.agent = next);
        Unsettled::one(id, probed, ChangeKind::Agent)
    }

    /// Forgets what the agents of endpoints no longer in the table, or no longer asked, said.
    pub(super) fn prune_agents(&mut self) {
        let targets = &self.targets;
        let profiles = &self.profiles;
        self.agents_seen.retain(|id, _| {
            targets
                .get(id)
                .is_some_and(|t| profiles[t.profile_ix as usize].cfg.health.agent.is_some())
        });
    }

    /// What endpoint `id`'s agent last said.
    pub fn agent_seen(&self, id: OwnerId) -> Option<&AgentSeen> {
        self.agents_seen.get(&id)
    }
}
