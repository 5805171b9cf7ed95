//! When probes on the wire time out: one FIFO per timeout length.
//!
//! Probes are sent in time order and every probe of one profile has the same timeout, so the
//! deadlines of one length come due in the order they were pushed: a queue per length is kept
//! sorted by appending alone. Pushing and popping cost O(1) and touch the queues' ends only,
//! where a binary heap of every probe sent in the last timeout (hundreds of thousands at large
//! fleets) cost a cache-missing sift of ~19 levels per probe, twice. Entries whose probe ended
//! before its deadline stay queued and are skipped when they come due (the slot's generation
//! no longer matches), as with the heap.
use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use crate::hash::FastMap;

/// A deadline: when, and the in-flight slot and generation it was set for.
pub(super) type Deadline = (Instant, u32, u32);

/// A deadline as queued: nanoseconds after `Deadlines::epoch`. Every probe of the last timeout
/// is queued (65k at 65k probes a second and a one-second timeout): 16 bytes each, where an
/// `Instant` took 24.
type Queued = (u64, u32, u32);

const _: () = assert!(std::mem::size_of::<Queued>() == 16);

#[derive(Default)]
pub(super) struct Deadlines {
    /// Queue index per timeout length.
    by_len: FastMap<Duration, usize>,
    queues: Vec<VecDeque<Queued>>,
    /// What the queued times count from: the first push's send time.
    epoch: Option<Instant>,
}

impl Deadlines {
    /// Slot `slot` (generation `gen`), sent at `sent`, times out `timeout` later. `sent` must
    /// not go back in time between pushes of one `timeout`.
    pub fn push(&mut self, sent: Instant, timeout: Duration, slot: u32, gen: u32) {
        let next = self.queues.len();
        let q = *self.by_len.entry(timeout).or_insert(next);
        if q == next {
            self.queues.push(VecDeque::new());
        }
        let epoch = *self.epoch.get_or_insert(sent);
        let at = Self::nanos(epoch, sent + timeout);
        let queue = &mut self.queues[q];
        debug_assert!(queue.back().is_none_or(|b| b.0 <= at), "deadlines out of order");
        queue.push_back((at, slot, gen));
    }

    /// Nanoseconds from `epoch` to `t` (0 for a time before it; saturating past 584 years).
    fn nanos(epoch: Instant, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Takes every deadline at or before `now` into `out` (appended, queue by queue).
    pub fn take_due(&mut self, now: Instant, out: &mut Vec<Deadline>) {
        let Some(epoch) = self.epoch else {
            return;
        };
        let now_ns = Self::nanos(epoch, now);
        for queue in &mut self.queues {
            while let Some(&(at, slot, gen)) = queue.front() {
                if at > now_ns {
                    break;
                }
                queue.pop_front();
                out.push((epoch + Duration::from_nanos(at), slot, gen));
            }
            // A burst (the first round) can leave a queue far larger than it now needs.
            if queue.capacity() > 4096 && queue.len() < queue.capacity() / 8 {
                queue.shrink_to(queue.len() * 2);
            }
        }
    }

    /// The earliest deadline queued.
    pub fn next(&self) -> Option<Instant> {
        let epoch = self.epoch?;
        let first = self.queues.iter().filter_map(|q| q.front().map(|d| d.0)).min()?;
        Some(epoch + Duration::from_nanos(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_deadlines_come_out_of_every_queue_and_later_ones_stay() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = Deadlines::default();
        d.push(t0, ms(500), 1, 1);
        d.push(t0, ms(100), 2, 1);
        d.push(t0 + ms(10), ms(500), 3, 1);
        d.push(t0 + ms(10), ms(100), 4, 1);
        d.push(t0 + ms(300), ms(100), 5, 1);
        assert_eq!(d.next(), Some(t0 + ms(100)));
        let mut out = Vec::new();
        d.take_due(t0 + ms(99), &mut out);
        assert!(out.is_empty());
        d.take_due(t0 + ms(110), &mut out);
        let slots = |out: &Vec<Deadline>| out.iter().map(|x| x.1).collect::<Vec<_>>();
        assert_eq!(slots(&out), [2, 4]);
        assert_eq!(out[0].0, t0 + ms(100));
        out.clear();
        d.take_due(t0 + ms(500), &mut out);
        assert_eq!(slots(&out), [1, 5]);
        out.clear();
        d.take_due(t0 + ms(10_000), &mut out);
        assert_eq!(slots(&out), [3]);
        assert_eq!(d.next(), None);
    }

    #[test]
    fn a_burst_queue_gives_its_memory_back() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        for i in 0..100_000 {
            d.push(t0, Duration::from_secs(1), i, 1);
        }
        let mut out = Vec::new();
        d.take_due(t0 + Duration::from_secs(1), &mut out);
        assert_eq!(out.len(), 100_000);
        assert!(d.queues[0].capacity() < 100_000, "{}", d.queues[0].capacity());
    }
}
