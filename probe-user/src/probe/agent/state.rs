//! What an endpoint's agent has set, and how it combines with the endpoint's own health, its
//! operator's admin state and its configured weight, as HAProxy combines them:
//! - health: `down` (or `fail`, `stopped`) holds the endpoint down whatever its check says,
//!   until the agent says `up`; `up` lets the check's verdict stand. An agent that cannot be
//!   reached, times out or answers no line changes nothing (the check tests connectivity).
//! - admin: `drain` and `maint` hold until `ready`. The operator's own state (the file's
//!   `state`, the API's override) is kept apart and the stricter of the two applies:
//!   maintenance over drain over enabled; `always-serve` is the operator's and stands.
//! - weight: a percentage of the configured weight, kept until the next one; HAProxy caps
//!   the result at its largest weight, 256, probed at its own, `MAX_WEIGHT`.
use super::reply::{AgentAdmin, AgentHealth, AgentReply};
use crate::status::{AdminState, Health};

/// The largest weight an agent can give (the config's largest).
pub const MAX_WEIGHT: u32 = 1000;

/// An endpoint's agent overlay: three bytes of each target, aligned to one (a million
/// targets fit mimalloc's 160-byte class only so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentState {
    /// `DOWN`, and the admin state held (`Held`) shifted by one.
    bits: u8,
    /// The percentage, or `NO_PERCENT` for none, little-endian.
    percent: [u8; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Ready = 0,
    Drain = 1,
    Maint = 2,
}

const DOWN: u8 = 1;

const NO_PERCENT: u16 = u16::MAX;

const _: () = assert!(std::mem::size_of::<AgentState>() == 3 && std::mem::align_of::<AgentState>() == 1);

impl AgentState {
    /// Nothing set: the endpoint is as its check and its operator say.
    pub const NONE: AgentState = AgentState {
        bits: 0,
        percent: NO_PERCENT.to_le_bytes(),
    };

    /// This overlay after `reply`: each kind of word the reply has replaces what it set.
    pub fn after(self, reply: &AgentReply) -> AgentState {
        let mut next = self;
        let (mut down, mut held) = (self.down(), self.held());
        if let Some(h) = reply.health {
            down = matches!(h, AgentHealth::Down(_));
        }
        if let Some(a) = reply.admin {
            held = match a {
                AgentAdmin::Ready => Held::Ready,
                AgentAdmin::Drain => Held::Drain,
                AgentAdmin::Maint => Held::Maint,
            };
        }
        next.bits = u8::from(down) | (held as u8) << 1;
        if let Some(p) = reply.percent {
            next.percent = p.to_le_bytes();
        }
        next
    }

    /// Whether the agent holds the endpoint down.
    pub fn down(self) -> bool {
        self.bits & DOWN != 0
    }

    fn held(self) -> Held {
        match self.bits >> 1 {
            1 => Held::Drain,
            2 => Held::Maint,
            _ => Held::Ready,
        }
    }

    /// The admin state the agent holds, if any (`ready` holds none).
    pub fn admin(self) -> Option<AgentAdmin> {
        match self.held() {
            Held::Ready => None,
            Held::Drain => Some(AgentAdmin::Drain),
            Held::Maint => Some(AgentAdmin::Maint),
        }
    }

    /// The weight percentage the agent set, if any.
    pub fn percent(self) -> Option<u16> {
        let p = u16::from_le_bytes(self.percent);
        (p != NO_PERCENT).then_some(p)
    }

    /// The endpoint's health: the check's (or the cluster's), unless the agent holds it down.
    pub fn health(self, checked: Health) -> Health {
        if self.down() {
            Health::Unhealthy
        } else {
            checked
        }
    }

    /// The admin state that applies: the operator's `operator`, or the agent's when it is
    /// stricter.
    pub fn admin_over(self, operator: AdminState) -> AdminState {
        match (operator, self.held()) {
            (AdminState::Disabled | AdminState::AlwaysServe, _) | (_, Held::Ready) => operator,
            (_, Held::Maint) => AdminState::Disabled,
            (AdminState::Enabled | AdminState::Drain, Held::Drain) => AdminState::Drain,
        }
    }

    /// The weight that applies: `configured` scaled by the agent's percentage (rounded down,
    /// as HAProxy does), at most `MAX_WEIGHT`.
    pub fn weight(self, configured: u32) -> u32 {
        match self.percent() {
            None => configured,
            Some(p) => (u64::from(configured) * u64::from(p) / 100).min(u64::from(MAX_WEIGHT)) as u32,
        }
    }
}

impl Default for AgentState {
    fn default() -> Self {
        AgentState::NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(words: &[&str]) -> AgentState {
        words.iter().fold(AgentState::NONE, |s, w| {
            s.after(&AgentReply::parse(format!("{w}\n").as_bytes()).unwrap())
        })
    }

    #[test]
    fn each_kind_holds_until_the_agent_says_otherwise() {
        // As HAProxy 2.6 does (the oracle test compares the two on real agents).
        let s = after(&["down", "50%", "ready"]);
        assert!(s.down(), "ready is no health word: the agent still holds it down");
        assert_eq!(s.weight(100), 50);
        let s = after(&["down", "up"]);
        assert!(!s.down());
        assert_eq!(after(&["drain", "up"]).admin(), Some(AgentAdmin::Drain));
        assert_eq!(after(&["drain 30%", "ready"]).admin(), None);
        assert_eq!(after(&["drain 30%", "ready"]).weight(100), 30);
        assert_eq!(after(&["maint", "hello"]).admin(), Some(AgentAdmin::Maint));
    }

    #[test]
    fn the_stricter_admin_state_applies() {
        let maint = after(&["maint"]);
        let drain = after(&["drain"]);
        assert_eq!(maint.admin_over(AdminState::Enabled), AdminState::Disabled);
        assert_eq!(maint.admin_over(AdminState::Drain), AdminState::Disabled);
        assert_eq!(drain.admin_over(AdminState::Enabled), AdminState::Drain);
        assert_eq!(drain.admin_over(AdminState::Disabled), AdminState::Disabled);
        assert_eq!(drain.admin_over(AdminState::AlwaysServe), AdminState::AlwaysServe);
        assert_eq!(AgentState::NONE.admin_over(AdminState::Drain), AdminState::Drain);
    }

    #[test]
    fn weights_scale_round_down_and_cap() {
        assert_eq!(after(&["33%"]).weight(10), 3);
        assert_eq!(after(&["0%"]).weight(100), 0);
        assert_eq!(after(&["300%"]).weight(100), 300);
        assert_eq!(after(&["25600%"]).weight(1000), MAX_WEIGHT);
        assert_eq!(AgentState::NONE.weight(7), 7);
    }

    #[test]
    fn a_down_agent_overrides_the_check_and_up_defers_to_it() {
        assert_eq!(after(&["down"]).health(Health::Healthy), Health::Unhealthy);
        assert_eq!(after(&["up"]).health(Health::Unhealthy), Health::Unhealthy);
        assert_eq!(
            after(&["up"]).health(Health::CheckingEndpoint),
            Health::CheckingEndpoint
        );
    }
}
