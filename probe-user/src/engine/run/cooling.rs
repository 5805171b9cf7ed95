//! Flows of probes that ended a moment ago, which no new probe may take yet.
//!
//! A probe's source port is chosen at random among those no live probe uses. Taken again at
//! once, the same 4-tuple can find the target still holding the last probe's connection:
//! the RST that ended it lost or not yet there (an HTTP response the target sends again, a
//! SYN+ACK it repeats a second later). The new SYN then meets that connection, the target
//! answers with a challenge ACK instead of a SYN+ACK, and the probe times out against a
//! healthy server. A TCP stack keeps a closed 4-tuple out of use for the same reason
//! (TIME_WAIT); a flow here rests for [`COOLING`] after its probe ends.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use probe_common::l4::FlowKey;

use crate::hash::FastMap;

/// How long a flow rests after its probe ended: past a target's first retransmission of
/// what the RST should have ended (a SYN+ACK again after 1 s, a response after 200 ms and
/// more), whose own reset (the node's stack's, or probe_rx's late reset) then closes it.
pub const COOLING: Duration = Duration::from_secs(2);

/// The most flows resting at once: two seconds at 65,000 probes a second. Beyond it the
/// oldest rest is cut short rather than the memory growing.
pub const MAX_COOLING: usize = 1 << 17;

#[derive(Default)]
pub struct Cooling {
    /// Each resting flow and when its rest ends.
    until: FastMap<FlowKey, Instant>,
    /// The same, in the order they began to rest (their ends in order too).
    order: VecDeque<(Instant, FlowKey)>,
}

impl Cooling {
    /// `flow`'s probe ended at `now`.
    pub fn rest(&mut self, flow: FlowKey, now: Instant) {
        if self.order.len() >= MAX_COOLING {
            self.pop_oldest();
        }
        let end = now + COOLING;
        self.until.insert(flow, end);
        self.order.push_back((end, flow));
    }

    /// Whether `flow` is still resting at `now`.
    pub fn resting(&self, flow: &FlowKey, now: Instant) -> bool {
        self.until.get(flow).is_some_and(|&end| end > now)
    }

    /// Forgets the rests that ended by `now`, and gives memory back once few remain.
    pub fn expire(&mut self, now: Instant) {
        while self.order.front().is_some_and(|(end, _)| *end <= now) {
            self.pop_oldest();
        }
        if self.until.capacity() > 4096 && self.until.len() < self.until.capacity() / 8 {
            self.until.shrink_to(self.until.len() * 2);
            self.order.shrink_to(self.order.len() * 2);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.order.len()
    }

    fn pop_oldest(&mut self) {
        if let Some((end, flow)) = self.order.pop_front() {
            // A flow rests once at a time (a resting flow is never picked), but a rest cut
            // short by the cap may have begun again since: only its own entry goes.
            if self.until.get(&flow) == Some(&end) {
                self.until.remove(&flow);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(sport: u16) -> FlowKey {
        FlowKey::v4(
            [198, 18, 0, 1],
            [198, 18, 0, 2],
            sport,
            80,
            probe_common::packet::IPPROTO_TCP,
        )
    }

    #[test]
    fn a_flow_rests_for_the_cooling_time_and_then_is_free() {
        let t0 = Instant::now();
        let mut c = Cooling::default();
        c.rest(flow(61000), t0);
        assert!(c.resting(&flow(61000), t0));
        assert!(c.resting(&flow(61000), t0 + COOLING - Duration::from_millis(1)));
        assert!(!c.resting(&flow(61001), t0), "another port is free");
        assert!(!c.resting(&flow(61000), t0 + COOLING), "free once the rest is over");
        c.expire(t0 + COOLING - Duration::from_millis(1));
        assert_eq!(c.len(), 1, "not expired early");
        c.expire(t0 + COOLING);
        assert_eq!(c.len(), 0);
        assert!(!c.resting(&flow(61000), t0));
    }

    #[test]
    fn the_cap_cuts_the_oldest_rest_short() {
        let t0 = Instant::now();
        let mut c = Cooling::default();
        let wide = |i: usize| FlowKey::v4([198, 18, 0, 1], [198, 19, (i >> 16) as u8, 2], i as u16, 80, 6);
        for i in 0..MAX_COOLING {
            c.rest(wide(i), t0);
        }
        assert_eq!(c.len(), MAX_COOLING);
        let later = t0 + Duration::from_millis(5);
        c.rest(wide(MAX_COOLING), later);
        assert_eq!(c.len(), MAX_COOLING, "no more than the cap");
        assert!(!c.resting(&wide(0), t0), "the oldest rest was cut short");
        assert!(c.resting(&wide(1), t0));
        // Cut short, the flow is picked again, ends and rests anew: that rest holds.
        c.rest(wide(0), later);
        c.expire(t0 + COOLING);
        assert_eq!(c.len(), 2);
        assert!(c.resting(&wide(0), t0 + COOLING));
        assert!(c.resting(&wide(MAX_COOLING), t0 + COOLING));
    }
}
