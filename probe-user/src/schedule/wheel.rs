//! A hashed timer wheel over dense `u32` slots: O(1) insert and remove, pops in slot order.
//!
//! Entries are threaded through intrusive doubly linked lists, so a million timers cost no
//! allocation per timer and a removal leaves nothing stale behind.

/// End of a list, and "not in the wheel".
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Link {
    due_ns: u64,
    next: u32,
    prev: u32,
    /// Wheel slot holding the entry, or `NIL` when it is not scheduled.
    slot: u32,
}

const UNLINKED: Link = Link {
    due_ns: 0,
    next: NIL,
    prev: NIL,
    slot: NIL,
};

/// Timers keyed by a dense index, each due at an exact nanosecond.
///
/// Slot `t % slots` holds timers whose due tick is `t`, or `t` plus whole rotations; timers due
/// more than one rotation ahead are passed over until their turn, which costs a look each
/// rotation, so size the wheel to cover the longest interval.
#[derive(Debug)]
pub struct Wheel {
    tick_ns: u64,
    mask: u64,
    heads: Vec<u32>,
    /// One bit per slot that holds at least one entry, for `next_due` to skip empty slots.
    occupied: Vec<u64>,
    /// The earliest due time in each slot (`u64::MAX` when empty), kept exact by insert,
    /// remove and drain: `next_due` reads it instead of walking the slot's list, which at
    /// 500k timers held ~250 entries, each a cache miss, on every loop turn of the runner.
    slot_min: Vec<u64>,
    /// Every slot before this tick has been drained up to the last `pop_due` time.
    cursor_tick: u64,
    links: Vec<Link>,
    len: usize,
}

impl Wheel {
    /// `slots` is rounded up to a power of two (at least 64); `tick_ns` is at least 1.
    pub fn new(tick_ns: u64, slots: usize) -> Self {
        let slots = slots.max(64).next_power_of_two();
        Self {
            tick_ns: tick_ns.max(1),
            mask: slots as u64 - 1,
            heads: vec![NIL; slots],
            occupied: vec![0; slots / 64],
            slot_min: vec![u64::MAX; slots],
            cursor_tick: 0,
            links: Vec::new(),
            len: 0,
        }
    }

    /// Makes room for indices below `indices`.
    pub fn reserve(&mut self, indices: usize) {
        self.links.reserve_exact(indices.saturating_sub(self.links.len()));
    }

    /// The indices it has room for without growing.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.links.capacity()
    }

    /// Number of scheduled entries.
    #[cfg(any(test, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// When `idx` is due, if it is scheduled.
    #[cfg(any(test, feature = "testing"))]
    pub fn due(&self, idx: u32) -> Option<u64> {
        self.links.get(idx as usize).filter(|l| l.slot != NIL).map(|l| l.due_ns)
    }

    /// Schedules `idx` at `due_ns`, replacing any earlier schedule of it. A due time already in
    /// the past is popped by the next `pop_due`.
    pub fn insert(&mut self, idx: u32, due_ns: u64) {
        assert_ne!(idx, NIL, "index {NIL} is reserved");
        self.remove(idx);
        if self.links.len() <= idx as usize {
            self.links.resize(idx as usize + 1, UNLINKED);
        }
        // Never behind the cursor, or the entry would wait a whole rotation.
        let tick = (due_ns / self.tick_ns).max(self.cursor_tick);
        let slot = (tick & self.mask) as u32;
        let head = self.heads[slot as usize];
        self.links[idx as usize] = Link {
            due_ns,
            next: head,
            prev: NIL,
            slot,
        };
        if head != NIL {
            self.links[head as usize].prev = idx;
        }
        self.heads[slot as usize] = idx;
        self.occupied[slot as usize / 64] |= 1 << (slot % 64);
        let min = &mut self.slot_min[slot as usize];
        *min = (*min).min(due_ns);
        self.len += 1;
    }

    /// Unschedules `idx`; false if it was not scheduled.
    pub fn remove(&mut self, idx: u32) -> bool {
        let Some(link) = self.unlink(idx) else {
            return false;
        };
        let slot = link.slot as usize;
        // The slot's earliest left: walk what remains (a removal outside `pop_due` is rare).
        if self.slot_min[slot] == link.due_ns {
            self.slot_min[slot] = self.walk_min(slot);
        }
        true
    }

    /// Moves every entry `by_ns` later, keeping their order and spacing. Everything is taken
    /// out first and then put back: `remove` one at a time would walk a slot's list for its new
    /// minimum each time it took the minimum out (~250 entries a slot at a million timers).
    pub fn postpone_all(&mut self, by_ns: u64) {
        if by_ns == 0 {
            return;
        }
        let mut moved = Vec::with_capacity(self.len);
        for idx in 0..self.links.len() {
            let idx = u32::try_from(idx).expect("indices are u32");
            // A slot's minimum goes stale here until the slot empties, which every slot does.
            if let Some(link) = self.unlink(idx) {
                moved.push((idx, link.due_ns.saturating_add(by_ns)));
            }
        }
        for (idx, due_ns) in moved {
            self.insert(idx, due_ns);
        }
    }

    /// Takes `idx` out of its slot's list, leaving the slot's minimum to the caller (except
    /// for a slot left empty); its link as it was, or None if it was not scheduled.
    fn unlink(&mut self, idx: u32) -> Option<Link> {
        let link = self.links.get(idx as usize).copied()?;
        if link.slot == NIL {
            return None;
        }
        if link.prev == NIL {
            self.heads[link.slot as usize] = link.next;
            if link.next == NIL {
                self.occupied[link.slot as usize / 64] &= !(1 << (link.slot % 64));
                self.slot_min[link.slot as usize] = u64::MAX;
            }
        } else {
            self.links[link.prev as usize].next = link.next;
        }
        if link.next != NIL {
            self.links[link.next as usize].prev = link.prev;
        }
        self.links[idx as usize] = UNLINKED;
        self.len -= 1;
        Some(link)
    }

    /// Removes every entry due at or before `now_ns` and hands each index to `emit`, slot by
    /// slot in time order (entries within one tick come in no particular order).
    pub fn pop_due(&mut self, now_ns: u64, mut emit: impl FnMut(u32, u64)) {
        let now_tick = now_ns / self.tick_ns;
        let end_tick = now_tick.max(self.cursor_tick);
        // Past one rotation every slot has been looked at once; looking again finds nothing new.
        let ticks = (end_tick - self.cursor_tick).min(self.mask) + 1;
        for tick in self.cursor_tick..self.cursor_tick + ticks {
            if self.len == 0 {
                break;
            }
            self.drain_slot((tick & self.mask) as usize, now_ns, &mut emit);
        }
        self.cursor_tick = end_tick;
    }

    fn drain_slot(&mut self, slot: usize, now_ns: u64, emit: &mut impl FnMut(u32, u64)) {
        let mut idx = self.heads[slot];
        let mut left = u64::MAX;
        while idx != NIL {
            let link = self.links[idx as usize];
            if link.due_ns <= now_ns {
                self.unlink(idx);
                emit(idx, link.due_ns);
            } else {
                left = left.min(link.due_ns);
            }
            idx = link.next;
        }
        self.slot_min[slot] = left;
    }

    /// The earliest due time of any entry, found by walking occupied slots from the cursor.
    pub fn next_due(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let slots = self.mask + 1;
        let mut best = u64::MAX;
        let mut offset = 0;
        while offset < slots {
            let tick = self.cursor_tick + offset;
            let Some(skip) = self.next_occupied((tick & self.mask) as usize, slots - offset) else {
                break;
            };
            let tick = tick + skip;
            // Every entry in this or a later slot of this rotation is due no earlier than this.
            if tick.saturating_mul(self.tick_ns) > best {
                break;
            }
            best = best.min(self.slot_min[(tick & self.mask) as usize]);
            offset += skip + 1;
        }
        Some(best)
    }

    fn walk_min(&self, slot: usize) -> u64 {
        let mut best = u64::MAX;
        let mut idx = self.heads[slot];
        while idx != NIL {
            let link = &self.links[idx as usize];
            best = best.min(link.due_ns);
            idx = link.next;
        }
        best
    }

    /// Distance from `slot` to the next occupied slot (circular), looking at most `limit` slots.
    fn next_occupied(&self, slot: usize, limit: u64) -> Option<u64> {
        let slots = self.mask + 1;
        let mut dist = 0u64;
        while dist < limit {
            let pos = ((slot as u64 + dist) & self.mask) as usize;
            let word = self.occupied[pos / 64] >> (pos % 64);
            if word != 0 {
                let found = dist + u64::from(word.trailing_zeros());
                return (found < limit).then_some(found);
            }
            // Jump to the start of the next word.
            dist += 64 - (pos % 64) as u64;
            debug_assert!(dist <= slots + 64);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn pops_in_time_order_at_exact_due_times() {
        let mut wheel = Wheel::new(1_000, 64);
        wheel.insert(1, 5_500);
        wheel.insert(2, 2_000);
        wheel.insert(3, 2_999);
        assert_eq!(wheel.next_due(), Some(2_000));
        let mut out = Vec::new();
        wheel.pop_due(1_999, |i, _| out.push(i));
        assert!(out.is_empty());
        wheel.pop_due(2_500, |i, _| out.push(i));
        assert_eq!(out, [2]);
        assert_eq!(wheel.next_due(), Some(2_999));
        wheel.pop_due(10_000, |i, _| out.push(i));
        assert_eq!(out, [2, 3, 1]);
        assert!(wheel.is_empty());
        // Each entry comes out with the due time it went in with.
        wheel.insert(4, 12_345);
        let mut got = Vec::new();
        wheel.pop_due(20_000, |i, due| got.push((i, due)));
        assert_eq!(got, [(4, 12_345)]);
        assert_eq!(wheel.next_due(), None);
    }

    #[test]
    fn postponing_moves_every_entry_and_keeps_their_spacing() {
        let mut wheel = Wheel::new(1_000, 64);
        wheel.insert(1, 2_000);
        wheel.insert(2, 3_500);
        wheel.insert(3, 40_000);
        wheel.remove(3);
        wheel.insert(4, 9_000);
        wheel.postpone_all(100_000);
        assert_eq!(wheel.len(), 3);
        assert_eq!(wheel.next_due(), Some(102_000));
        let mut out = Vec::new();
        wheel.pop_due(101_999, |i, due| out.push((i, due)));
        assert!(out.is_empty(), "nothing is due at the old times: {out:?}");
        wheel.pop_due(200_000, |i, due| out.push((i, due)));
        assert_eq!(out, [(1, 102_000), (2, 103_500), (4, 109_000)]);
        assert_eq!(wheel.due(3), None, "a removed entry stays out");
    }

    #[test]
    fn entries_beyond_one_rotation_wait_their_turn() {
        let mut wheel = Wheel::new(1, 64);
        wheel.insert(7, 64 * 3 + 5);
        wheel.insert(8, 5);
        let mut out = Vec::new();
        wheel.pop_due(100, |i, _| out.push(i));
        assert_eq!(out, [8]);
        assert_eq!(wheel.next_due(), Some(64 * 3 + 5));
        wheel.pop_due(64 * 3 + 4, |i, _| out.push(i));
        assert_eq!(out, [8]);
        wheel.pop_due(64 * 3 + 5, |i, _| out.push(i));
        assert_eq!(out, [8, 7]);
    }

    #[test]
    fn past_due_inserts_pop_next_time() {
        let mut wheel = Wheel::new(10, 64);
        wheel.pop_due(10_000, |_, _| unreachable!());
        wheel.insert(0, 3);
        assert_eq!(wheel.next_due(), Some(3));
        let mut out = Vec::new();
        wheel.pop_due(10_000, |i, _| out.push(i));
        assert_eq!(out, [0]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u64),
        Remove(u32),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..40, 0u64..3_000).prop_map(|(i, d)| Op::Insert(i, d)),
            (0u32..40).prop_map(Op::Remove),
            (0u64..400).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Against a sorted map: same entries popped at each step, same next due time.
        #[test]
        fn wheel_matches_a_sorted_map(tick in 1u64..20, ops in proptest::collection::vec(op(), 0..200)) {
            let mut wheel = Wheel::new(tick, 64);
            let mut model: BTreeMap<u32, u64> = BTreeMap::new();
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Insert(i, delay) => {
                        wheel.insert(i, now + delay);
                        model.insert(i, now + delay);
                    }
                    Op::Remove(i) => prop_assert_eq!(wheel.remove(i), model.remove(&i).is_some()),
                    Op::Advance(by) => {
                        now += by;
                        let mut got = Vec::new();
                        wheel.pop_due(now, |i, _| got.push(i));
                        got.sort_unstable();
                        let want: Vec<u32> = model.iter().filter(|(_, &d)| d <= now).map(|(&i, _)| i).collect();
                        model.retain(|_, d| *d > now);
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(wheel.len(), model.len());
                prop_assert_eq!(wheel.next_due(), model.values().min().copied());
            }
        }
    }
}
