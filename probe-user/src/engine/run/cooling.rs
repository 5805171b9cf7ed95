//! Flows of probes that ended a moment ago, which no new probe may take yet.
//!
//! A probe's source port is chosen at random among those no live probe uses. Taken again at
//! once, the same 4-tuple can find the target still holding the last probe's connection:
//! the RST that ended it lost or not yet there (an HTTP response the target sends again, a
//! SYN+ACK it repeats a second later). The new SYN then meets that connection, the target
//! answers with a challenge ACK instead of a SYN+ACK, and the probe times out against a
//! healthy server. A TCP stack keeps a closed 4-tuple out of use for the same reason
//! (TIME_WAIT); a flow here rests for [`COOLING`] after its probe ends.
//!
//! Only a target probed again within that time can meet its own last flow, and then the
//! flows that matter are few and recent. So the rests are kept in a fixed table indexed by
//! the flow's hash, each slot the last flow that hashed there: a rest costs a write and a
//! look a read, with no expiry to run and no memory beyond the table (2 MiB). At a million
//! targets a slot is taken over within a second or so, which costs nothing (a target probed
//! every few seconds cannot meet its last flow); a target probed hundreds of times a second
//! finds its recent flows all there.
use std::time::{Duration, Instant};

use probe_common::l4::FlowKey;

/// How long a flow rests after its probe ended: past a target's first retransmission of
/// what the RST should have ended (a SYN+ACK again after 1 s, a response after 200 ms and
/// more), whose own reset (the node's stack's, or probe_rx's late reset) then closes it.
pub const COOLING: Duration = Duration::from_secs(2);

/// Slots in the table: a power of two.
const SLOTS: usize = 1 << 18;

#[derive(Clone, Copy, Default)]
struct Slot {
    /// The high half of the flow's hash, with the low bit set (0 is an empty slot).
    tag: u32,
    /// When its rest ends, in milliseconds since `Cooling::base` (wrapping).
    until_ms: u32,
}

pub struct Cooling {
    base: Instant,
    slots: Box<[Slot]>,
}

impl Default for Cooling {
    fn default() -> Self {
        Cooling {
            base: Instant::now(),
            slots: vec![Slot::default(); SLOTS].into_boxed_slice(),
        }
    }
}

impl Cooling {
    /// `flow`'s probe ended at `now`.
    pub fn rest(&mut self, flow: &FlowKey, now: Instant) {
        let (at, tag) = place(flow);
        self.slots[at] = Slot {
            tag,
            until_ms: self.ms(now).wrapping_add(COOLING.as_millis() as u32),
        };
    }

    /// Whether `flow` is still resting at `now` (as far as its slot remembers it).
    pub fn resting(&self, flow: &FlowKey, now: Instant) -> bool {
        let (at, tag) = place(flow);
        let s = self.slots[at];
        // Wrapping: right for rests ending within 24 days either way of now.
        s.tag == tag && (s.until_ms.wrapping_sub(self.ms(now)) as i32) > 0
    }

    fn ms(&self, now: Instant) -> u32 {
        now.saturating_duration_since(self.base).as_millis() as u32
    }
}

/// A flow's slot and tag.
fn place(flow: &FlowKey) -> (usize, u32) {
    let h = crate::hash::fast_hash(flow);
    ((h as usize) & (SLOTS - 1), (h >> 32) as u32 | 1)
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
        let mut c = Cooling::default();
        let t0 = c.base + Duration::from_secs(5);
        c.rest(&flow(61000), t0);
        assert!(c.resting(&flow(61000), t0));
        assert!(c.resting(&flow(61000), t0 + COOLING - Duration::from_millis(1)));
        assert!(!c.resting(&flow(61001), t0), "another port is free");
        assert!(!c.resting(&flow(61000), t0 + COOLING), "free once the rest is over");
        assert!(
            !Cooling::default().resting(&flow(61000), t0),
            "nothing rests in a new table"
        );
    }

    #[test]
    fn recent_flows_of_one_busy_target_all_rest() {
        // A target probed a thousand times in two seconds: every one of its flows is there.
        let mut c = Cooling::default();
        let t0 = c.base;
        for sport in 61000..62000 {
            c.rest(&flow(sport), t0);
        }
        let resting = (61000..62000).filter(|&p| c.resting(&flow(p), t0)).count();
        assert!(resting >= 995, "{resting} of 1000 recent flows remembered");
    }
}
