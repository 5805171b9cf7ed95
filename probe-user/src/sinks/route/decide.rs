//! What a route sink announces, decided from its profile's endpoints, and how fast the
//! announcement may change (pure; the times are given).
//!
//! What counts: an endpoint *serves* the VIP when it may receive new traffic (eligible) and
//! its checks pass (Online), or when the operator set it to always-serve (Unmonitored: the
//! operator vouches for it). A Degraded endpoint that fail-open made eligible does not
//! count: fail-open keeps this node's data path answering, but a node whose backends all fail
//! must not attract traffic away from nodes whose backends pass. CheckingEndpoint does not
//! count either: a node announces what it has verified, and a restart resumes the saved
//! health, so it does not have to verify again.
use std::time::{Duration, Instant};

use crate::{changes::EndpointState, sinks::model::ProfileModel, status::EndpointStatus};

crate::wire_enum::wire_enum! {
    /// What the node says about the sink's prefixes, worst first.
    #[derive(Debug, PartialOrd, Ord)]
    pub enum Announce {
        /// No route: the routers send the VIP's traffic to other nodes.
        Withdrawn = "withdrawn",
        /// A route with the demoted metric, which the operator's routing daemon turns into
        /// worse attributes: traffic comes here only when no node announces better.
        Demoted = "demoted",
        Announced = "announced",
    }
}

/// Whether `state` serves the VIP (see the module's note).
pub fn serves(state: &EndpointState) -> bool {
    state.eligible && matches!(state.status, EndpointStatus::Online | EndpointStatus::Unmonitored)
}

/// Why the sink wants what it wants: the figures behind it, for the log and the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count {
    pub serving: usize,
    /// Endpoints checked or vouched for now (not disabled, stopped or inactive).
    pub active: usize,
    pub total: usize,
    pub min: u32,
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} endpoints serve (at least {} needed)",
            self.serving, self.total, self.min
        )?;
        if self.active == 0 {
            f.write_str("; none is enabled")?;
        }
        Ok(())
    }
}

/// What `model` asks for: announced with at least `min` serving endpoints; below that
/// demoted when `demote` is set and some endpoint is still enabled (a disabled profile or
/// one whose endpoints are all disabled withdraws), withdrawn otherwise.
pub fn wanted(model: &ProfileModel, min: u32, demote: bool) -> (Announce, Count) {
    let total = model.endpoints.len();
    let serving = model.endpoints.values().filter(|s| serves(s)).count();
    let active = model
        .endpoints
        .values()
        .filter(|s| {
            !matches!(
                s.status,
                EndpointStatus::Disabled | EndpointStatus::Stopped | EndpointStatus::Inactive
            )
        })
        .count();
    let count = Count {
        serving,
        active,
        total,
        min,
    };
    let announce = if serving >= min as usize && serving > 0 {
        Announce::Announced
    } else if demote && active > 0 {
        Announce::Demoted
    } else {
        Announce::Withdrawn
    };
    (announce, count)
}

/// What the damper says to do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Hold `Announce` from now on.
    Change(Announce),
    /// Nothing yet: ask again at this time (the wanted state may change before).
    Wait(Instant),
    /// The held state is the wanted one.
    Stay,
}

/// Damping, per sink (its prefixes move together):
/// - the first decision after a start is taken at once (a restart resumes the saved health);
/// - after that, the announcement changes at most once per `hold_down`;
/// - a change for the worse (toward withdrawn) is made as soon as that allows: traffic must
///   leave a node that cannot serve it;
/// - a change for the better is made only once the better state has held for `hold_down`
///   without a break, so that a backend that flaps faster than that never brings the route
///   back and forth: it stays at the worse state until the backend settles.
#[derive(Debug, Clone)]
pub struct Damper {
    hold_down: Duration,
    held: Option<Announce>,
    changed_at: Option<Instant>,
    /// Since when the wanted state has been this better one, without a break.
    better: Option<(Announce, Instant)>,
}

impl Damper {
    pub fn new(hold_down: Duration) -> Self {
        Damper {
            hold_down,
            held: None,
            changed_at: None,
            better: None,
        }
    }

    /// The same state under another hold-down (a reload changed it): a wait under way is
    /// measured against the new one.
    #[must_use]
    pub fn with_hold_down(self, hold_down: Duration) -> Self {
        Damper { hold_down, ..self }
    }

    pub fn held(&self) -> Option<Announce> {
        self.held
    }

    /// What to do when `wanted` is asked for at `now`.
    pub fn step(&mut self, wanted: Announce, now: Instant) -> Step {
        let Some(held) = self.held else {
            return self.change(wanted, now);
        };
        if wanted == held {
            self.better = None;
            return Step::Stay;
        }
        let allowed = self.changed_at.map_or(now, |at| at + self.hold_down);
        let due = if wanted < held {
            self.better = None;
            allowed
        } else {
            let since = match self.better {
                Some((state, since)) if state == wanted => since,
                _ => {
                    self.better = Some((wanted, now));
                    now
                }
            };
            allowed.max(since + self.hold_down)
        };
        if now >= due {
            self.change(wanted, now)
        } else {
            Step::Wait(due)
        }
    }

    fn change(&mut self, to: Announce, now: Instant) -> Step {
        self.held = Some(to);
        self.changed_at = Some(now);
        self.better = None;
        Step::Change(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{AdminState, Health};
    use Announce::*;

    fn model(states: &[(EndpointStatus, bool)]) -> ProfileModel {
        let mut m = ProfileModel::default();
        for (i, &(status, eligible)) in states.iter().enumerate() {
            let mut s = EndpointState::tcp(format!("198.18.1.{i}").parse().unwrap(), 80, eligible);
            s.status = status;
            s.health = if status == EndpointStatus::Online {
                Health::Healthy
            } else {
                Health::Unhealthy
            };
            if status == EndpointStatus::Disabled {
                s.admin = AdminState::Disabled;
            }
            m.endpoints.insert(format!("e{i}").into(), s);
        }
        m
    }

    #[test]
    fn only_endpoints_that_pass_or_are_vouched_for_serve_and_fail_open_does_not_count() {
        use EndpointStatus::*;
        let m = model(&[
            (Online, true),
            (Degraded, true),
            (Unmonitored, true),
            (CheckingEndpoint, true),
        ]);
        let (a, c) = wanted(&m, 2, false);
        assert_eq!(
            (a, c.serving, c.total),
            (Announced, 2, 4),
            "Degraded under fail-open and Checking do not"
        );
        assert_eq!(wanted(&m, 3, false).0, Withdrawn);
        assert_eq!(wanted(&m, 3, true).0, Demoted, "below the minimum, demoted when asked");
        let all_failing = model(&[(Degraded, true), (Degraded, true)]);
        assert_eq!(
            wanted(&all_failing, 1, true).0,
            Demoted,
            "fail-open: demoted, not announced"
        );
        assert_eq!(wanted(&all_failing, 1, false).0, Withdrawn);
        let disabled = model(&[(Inactive, false), (Inactive, false)]);
        let (a, c) = wanted(&disabled, 1, true);
        assert_eq!(a, Withdrawn, "a disabled profile withdraws even with demote");
        assert_eq!(
            c.to_string(),
            "0 of 2 endpoints serve (at least 1 needed); none is enabled"
        );
        assert_eq!(
            wanted(&ProfileModel::default(), 0, true).0,
            Withdrawn,
            "nothing to serve with"
        );
    }

    #[test]
    fn the_first_decision_is_at_once_a_worse_one_waits_only_for_the_rate_limit() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut d = Damper::new(5 * s);
        assert_eq!(
            d.step(Announced, t0),
            Step::Change(Announced),
            "a start resumes at once"
        );
        assert_eq!(
            d.step(Withdrawn, t0 + s),
            Step::Wait(t0 + 5 * s),
            "one change per hold-down"
        );
        assert_eq!(d.step(Withdrawn, t0 + 5 * s), Step::Change(Withdrawn));
        assert_eq!(d.step(Withdrawn, t0 + 6 * s), Step::Stay);
    }

    #[test]
    fn a_better_state_must_hold_for_the_hold_down_so_a_flapping_backend_never_flaps_the_route() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut d = Damper::new(5 * s);
        assert_eq!(d.step(Withdrawn, t0), Step::Change(Withdrawn));
        // Up and down every 2 s, for a minute: the route stays withdrawn.
        for i in (10..70).step_by(4) {
            let up = t0 + i * s;
            assert!(matches!(d.step(Announced, up), Step::Wait(_)));
            assert_eq!(d.step(Withdrawn, up + 2 * s), Step::Stay);
        }
        // Settled up: back after a hold-down of it, not before.
        let up = t0 + 80 * s;
        assert_eq!(d.step(Announced, up), Step::Wait(up + 5 * s));
        assert_eq!(d.step(Announced, up + 4 * s), Step::Wait(up + 5 * s));
        assert_eq!(d.step(Announced, up + 5 * s), Step::Change(Announced));
        // Demoted is better than withdrawn and worse than announced.
        assert_eq!(d.step(Demoted, up + 10 * s), Step::Change(Demoted));
        assert_eq!(d.step(Announced, up + 11 * s), Step::Wait(up + 16 * s));
        assert_eq!(
            d.step(Demoted, up + 12 * s),
            Step::Stay,
            "a break starts the hold-down over"
        );
        assert_eq!(d.step(Announced, up + 13 * s), Step::Wait(up + 18 * s));
    }
}
