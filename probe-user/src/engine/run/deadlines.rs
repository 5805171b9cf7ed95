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

/// Deadlines in a chunk: 8 KiB.
const CHUNK: usize = 512;

/// A FIFO of deadlines kept in chunks: its room follows its length to within a chunk, where a
/// `VecDeque`'s doubling held room for up to twice the entries (2 MiB at 65k probes a second
/// and a one-second timeout), and a drained chunk is freed at once.
#[derive(Default)]
struct Fifo {
    chunks: VecDeque<Vec<Queued>>,
    /// Entries already taken from the front chunk.
    taken: usize,
}

impl Fifo {
    fn push(&mut self, q: Queued) {
        match self.chunks.back_mut() {
            Some(chunk) if chunk.len() < CHUNK => chunk.push(q),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(q);
                self.chunks.push_back(chunk);
            }
        }
    }

    fn front(&self) -> Option<&Queued> {
        self.chunks.front().and_then(|c| c.get(self.taken))
    }

    fn back(&self) -> Option<&Queued> {
        self.chunks.back().and_then(|c| c.last())
    }

    fn pop_front(&mut self) {
        let Some(front) = self.chunks.front() else {
            return;
        };
        self.taken += 1;
        if self.taken >= front.len() {
            self.chunks.pop_front();
            self.taken = 0;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.chunks.iter().map(Vec::len).sum::<usize>() - self.taken
    }
}

#[derive(Default)]
pub(super) struct Deadlines {
    /// Queue index per timeout length.
    by_len: FastMap<Duration, usize>,
    queues: Vec<Fifo>,
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
            self.queues.push(Fifo::default());
        }
        let epoch = *self.epoch.get_or_insert(sent);
        let at = Self::nanos(epoch, sent + timeout);
        let queue = &mut self.queues[q];
        debug_assert!(queue.back().is_none_or(|b| b.0 <= at), "deadlines out of order");
        queue.push((at, slot, gen));
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
            d.push(t0 + Duration::from_nanos(u64::from(i)), Duration::from_secs(1), i, 1);
        }
        assert_eq!(d.queues[0].len(), 100_000);
        assert!(d.queues[0].chunks.len() <= 100_000 / CHUNK + 1);
        let mut out = Vec::new();
        d.take_due(t0 + Duration::from_secs(1) + Duration::from_nanos(49_999), &mut out);
        assert_eq!(out.len(), 50_000);
        assert!(out.iter().enumerate().all(|(i, d)| d.1 as usize == i), "in push order");
        assert_eq!(d.queues[0].len(), 50_000);
        assert!(
            d.queues[0].chunks.len() <= 50_000 / CHUNK + 2,
            "drained chunks are freed"
        );
        out.clear();
        d.take_due(t0 + Duration::from_secs(2), &mut out);
        assert_eq!(out.len(), 50_000);
        assert_eq!(out[0].1, 50_000);
        assert!(d.queues[0].chunks.is_empty());
        assert_eq!(d.next(), None);
        d.push(t0 + Duration::from_secs(3), Duration::from_secs(1), 7, 2);
        assert_eq!(d.next(), Some(t0 + Duration::from_secs(4)));
    }
}
