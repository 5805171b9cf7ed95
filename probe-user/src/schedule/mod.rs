//! The probe scheduler: which checks are due when, on a caller-supplied (virtual) clock.
//!
//! Sequential per check, first probes spread over the interval, identical checks deduplicated.
pub mod wheel;

use std::{collections::HashMap, fmt, hash::Hash, time::Duration};

use wheel::Wheel;

use crate::rng::SplitMix64;

/// Which interval applies to a check's next probe (HAProxy `inter` / `fastinter` / `downinter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cadence {
    /// The state is settled (or nothing is known yet): plain `interval`.
    Steady,
    /// At least one result toward a state change is pending: `fastinter`.
    Transitioning,
    /// Settled Unhealthy: `downinter`.
    Down,
}

impl Cadence {
    /// The cadence for a check shared by several owners: fast if any owner is changing state,
    /// down only when all of them are down.
    pub fn combine(cadences: impl IntoIterator<Item = Cadence>) -> Cadence {
        let mut combined = None;
        for c in cadences {
            combined = Some(match (combined, c) {
                (_, Cadence::Transitioning) | (Some(Cadence::Transitioning), _) => Cadence::Transitioning,
                (None | Some(Cadence::Down), Cadence::Down) => Cadence::Down,
                _ => Cadence::Steady,
            });
        }
        combined.unwrap_or(Cadence::Steady)
    }
}

/// Timing of one check. Left at `None`/0, the extras keep the SPEC windows exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CheckParams {
    /// Gap between the end of one probe and the start of the next.
    pub interval: Duration,
    /// Gap used while a state change is pending; `interval` when unset.
    pub fastinter: Option<Duration>,
    /// Gap used while settled Unhealthy; `interval` when unset.
    pub downinter: Option<Duration>,
    /// Up to this much extra delay, drawn at random, before the very first probe.
    pub initial_jitter: Duration,
    /// Each gap is lengthened by up to this percentage of itself, drawn at random (0..=100).
    pub jitter_percent: u8,
}

impl CheckParams {
    /// Plain `interval`, no extras.
    #[cfg(any(test, feature = "testing"))]
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            fastinter: None,
            downinter: None,
            initial_jitter: Duration::ZERO,
            jitter_percent: 0,
        }
    }

    /// Checks that every interval is positive and the jitter percentage is a percentage.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        let intervals = [
            ("interval", Some(self.interval)),
            ("fastinter", self.fastinter),
            ("downinter", self.downinter),
        ];
        for (field, value) in intervals {
            if value.is_some_and(|v| v.is_zero()) {
                return Err(ScheduleError::ZeroInterval { field });
            }
        }
        if self.jitter_percent > 100 {
            return Err(ScheduleError::JitterPercent {
                value: self.jitter_percent,
            });
        }
        Ok(())
    }

    /// The gap before the next probe for this cadence, before jitter.
    pub fn gap(&self, cadence: Cadence) -> Duration {
        match cadence {
            Cadence::Steady => self.interval,
            Cadence::Transitioning => self.fastinter.unwrap_or(self.interval),
            Cadence::Down => self.downinter.unwrap_or(self.interval),
        }
    }
}

/// Wheel geometry and the seed of the jitter generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Resolution of the wheel; due times themselves stay exact.
    pub tick: Duration,
    /// Number of wheel slots; `tick * slots` should cover the longest gap in use.
    pub slots: usize,
    /// Spread first probes across the interval; off, a new check is due at once (plus jitter).
    pub spread_first: bool,
    /// Seed of the jitter generator, so runs are reproducible.
    pub seed: u64,
}

impl Default for SchedulerConfig {
    /// 1 ms ticks over 65,536 slots: one rotation is 65.5 s, above ga's 50 s maximum interval.
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(1),
            slots: 1 << 16,
            spread_first: true,
            seed: 0x5eed_cafe_f00d_d00d,
        }
    }
}

/// Handle of a scheduled check; stale once the check is removed, even if its slot is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CheckId {
    index: u32,
    generation: Generation,
}

/// A slot's generation: never 0 (so that an `Option<CheckId>`, one in every endpoint, takes 8
/// bytes, not 12) and never `u32::MAX`, which `CheckId::from_u64` gives a token no id became.
type Generation = std::num::NonZeroU32;

const _: () = assert!(std::mem::size_of::<Option<CheckId>>() == 8);

/// The generation after `g`: 1 again after the last one.
fn next_generation(g: Generation) -> Generation {
    Generation::new(g.get() % (u32::MAX - 1) + 1).expect("from 1 to u32::MAX - 1")
}

impl CheckId {
    /// The slot it occupies: dense, below the number of checks ever live at once, so callers
    /// can keep per-check data in a vector.
    pub fn index(self) -> usize {
        self.index as usize
    }

    /// Packed into one integer (for tokens), and back.
    pub fn to_u64(self) -> u64 {
        (u64::from(self.index) << 32) | u64::from(self.generation.get())
    }

    /// A token no id became (generation 0) names no check: it comes back stale.
    pub fn from_u64(v: u64) -> Self {
        Self {
            index: (v >> 32) as u32,
            generation: Generation::new(v as u32).unwrap_or(Generation::MAX),
        }
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "check {}.{}", self.index, self.generation)
    }
}

/// Errors from registering or driving checks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{field} must be longer than zero")]
    ZeroInterval { field: &'static str },
    #[error("jitter_percent = {value} is out of range; allowed 0..=100")]
    JitterPercent { value: u8 },
    #[error("{id} is already registered with other timing; identical checks must share parameters")]
    ParamsConflict { id: CheckId },
    #[error("{id} is not registered (removed, or never added)")]
    UnknownCheck { id: CheckId },
    #[error("{id} was not handed out by pop_due, so it cannot complete")]
    NotInFlight { id: CheckId },
    #[error("{id} has no such owner")]
    NotAnOwner { id: CheckId },
    #[error("more than {max} checks", max = u32::MAX - 1)]
    Full,
}

/// The owners of a check: nearly always one, kept inline so that fanning a result out reads
/// no separate allocation (at 100k probes/s every extra cache miss per probe shows).
/// A check's owners: nearly always one, kept inline; a shared check's list is boxed, so the
/// common case costs 16 bytes per check instead of a vector's 32.
#[derive(Debug)]
#[expect(clippy::box_collection, reason = "a thin pointer keeps the enum at 16 bytes")]
enum Owners<O> {
    One(O),
    Many(Box<Vec<O>>),
}

impl<O: PartialEq> Owners<O> {
    fn as_slice(&self) -> &[O] {
        match self {
            Owners::One(o) => std::slice::from_ref(o),
            Owners::Many(v) => v.as_slice(),
        }
    }

    fn add(&mut self, owner: O) {
        if self.as_slice().contains(&owner) {
            return;
        }
        match self {
            Owners::Many(v) => v.push(owner),
            Owners::One(_) => {
                let Owners::One(first) = std::mem::replace(self, Owners::Many(Box::default())) else {
                    unreachable!("matched One above");
                };
                *self = Owners::Many(Box::new(vec![first, owner]));
            }
        }
    }

    /// Drops `owner`; None if it was not one.
    fn remove(&mut self, owner: &O) -> Option<()> {
        match self {
            Owners::One(o) if o == owner => *self = Owners::Many(Box::default()),
            Owners::One(_) => return None,
            Owners::Many(v) => {
                let pos = v.iter().position(|o| o == owner)?;
                v.swap_remove(pos);
            }
        }
        Some(())
    }

    fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }
}

// Sixteen bytes a check with one owner: a million checks are a million of these.
const _: () = assert!(std::mem::size_of::<Owners<u64>>() == 16);

#[derive(Debug)]
struct Check<K, O> {
    key: K,
    owners: Owners<O>,
    /// Its timing, in `Scheduler::params`.
    params: u32,
    /// Handed out by `pop_due` and not yet `completed`; never in the wheel meanwhile.
    in_flight: bool,
}

#[derive(Debug)]
struct Entry<K, O> {
    generation: Generation,
    check: Option<Check<K, O>>,
}

// One per check: with a key of one pointer (the daemon's, `runner::SchedKey`) and one owner,
// 40 bytes (56 when the daemon's key held the check's 16-byte key beside the pointer).
const _: () = assert!(std::mem::size_of::<Entry<std::sync::Arc<u8>, u64>>() <= 40);

/// Schedules checks keyed by `K` (address, port, protocol and parameters) for owners `O`.
///
/// One probe per check is ever outstanding: `pop_due` hands a check out, and it is not due again
/// until `completed` reports when that probe finished. All times are caller-supplied nanoseconds.
#[derive(Debug)]
pub struct Scheduler<K, O> {
    config: SchedulerConfig,
    wheel: Wheel,
    entries: Vec<Entry<K, O>>,
    free: Vec<u32>,
    /// Live checks by key: the entry's index, found by the key's hash (the key itself is
    /// stored once, in the entry; a map holding it again cost 32 bytes a bucket, ~65 MB at a
    /// million checks).
    by_key: hashbrown::HashTable<u32>,
    /// The distinct timings of the checks, each stored once (a configuration has a handful;
    /// at a million checks a copy in each was 72 MB), and their index. Never shrinks.
    params: Vec<CheckParams>,
    params_ix: HashMap<CheckParams, u32>,
    rng: SplitMix64,
    /// Position in a golden-ratio sequence, so first probes fill the interval evenly.
    spread: u64,
    live: usize,
}

impl<K: Hash + Eq + Clone, O: PartialEq> Scheduler<K, O> {
    pub fn new(config: SchedulerConfig) -> Self {
        let tick_ns = u64::try_from(config.tick.as_nanos()).unwrap_or(u64::MAX);
        Self {
            wheel: Wheel::new(tick_ns, config.slots),
            entries: Vec::new(),
            free: Vec::new(),
            by_key: hashbrown::HashTable::new(),
            params: Vec::new(),
            params_ix: HashMap::new(),
            rng: SplitMix64(config.seed),
            spread: 0,
            live: 0,
            config,
        }
    }

    /// Number of distinct checks registered.
    pub fn len(&self) -> usize {
        self.live
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Number of checks waiting in the wheel (not in flight).
    #[cfg(any(test, feature = "testing"))]
    pub fn scheduled(&self) -> usize {
        self.wheel.len()
    }

    /// Moves every waiting check `by_ns` later. For checks registered before probing could
    /// start: at a million, registering takes longer than an interval, and first probes spread
    /// from the registration's start were all overdue by the time the first could leave.
    pub fn postpone_all(&mut self, by_ns: u64) {
        self.wheel.postpone_all(by_ns);
    }

    /// Makes room for `additional` more checks at once: at a million, growing a step at a time
    /// copies (and faults in) every table several times over. Exactly that much room: a reload
    /// that adds a few checks to a full table doubled it (15 MiB more at 250k checks, kept).
    pub fn reserve(&mut self, additional: usize) {
        let more = additional.saturating_sub(self.free.len());
        self.entries.reserve_exact(more);
        let entries = &self.entries;
        self.by_key.reserve(additional, |&ix| key_hash(key_of(entries, ix)));
        self.wheel.reserve(self.entries.len() + more);
    }

    /// Registers `owner`'s interest in the check `key`. The first owner creates the check, with
    /// its first probe spread over the interval from `now_ns`; later owners share it.
    pub fn add(&mut self, owner: O, key: K, params: CheckParams, now_ns: u64) -> Result<CheckId, ScheduleError> {
        params.validate()?;
        if let Some(index) = self.find(&key) {
            let id = self.id_of(index);
            let check = self.entries[index as usize]
                .check
                .as_mut()
                .expect("keyed checks are live");
            if self.params[check.params as usize] != params {
                return Err(ScheduleError::ParamsConflict { id });
            }
            check.owners.add(owner);
            return Ok(id);
        }
        let index = self.allocate()?;
        let params = self.intern(params);
        self.entries[index as usize].check = Some(Check {
            key: key.clone(),
            owners: Owners::One(owner),
            params,
            in_flight: false,
        });
        let entries = &self.entries;
        self.by_key
            .insert_unique(key_hash(&key), index, |&ix| key_hash(key_of(entries, ix)));
        self.live += 1;
        self.schedule_first(index, now_ns);
        Ok(self.id_of(index))
    }

    /// Drops `owner` from the check; the last owner's removal removes the check (true).
    pub fn remove(&mut self, owner: &O, id: CheckId) -> Result<bool, ScheduleError> {
        let check = self.check_mut(id)?;
        if check.owners.remove(owner).is_none() {
            return Err(ScheduleError::NotAnOwner { id });
        }
        if !check.owners.is_empty() {
            return Ok(false);
        }
        let entry = &mut self.entries[id.index as usize];
        let check = entry.check.take().expect("checked above");
        // A probe still in flight completes against a stale id and is refused.
        entry.generation = next_generation(entry.generation);
        if let Ok(found) = self.by_key.find_entry(key_hash(&check.key), |&ix| ix == id.index) {
            found.remove();
        }
        self.wheel.remove(id.index);
        self.free.push(id.index);
        self.live -= 1;
        Ok(true)
    }

    /// The check registered for `key`, if any.
    #[cfg(any(test, feature = "testing"))]
    pub fn lookup(&self, key: &K) -> Option<CheckId> {
        self.find(key).map(|index| self.id_of(index))
    }

    /// The index of the live check keyed `key`.
    fn find(&self, key: &K) -> Option<u32> {
        let entries = &self.entries;
        self.by_key
            .find(key_hash(key), |&ix| key_of(entries, ix) == key)
            .copied()
    }

    /// The key of a live check.
    pub fn key(&self, id: CheckId) -> Option<&K> {
        self.check(id).ok().map(|c| &c.key)
    }

    /// Who shares the check, so its results can be fanned out; empty for an unknown id.
    pub fn owners(&self, id: CheckId) -> &[O] {
        self.check(id).map_or(&[], |c| c.owners.as_slice())
    }

    /// Prefetches check `id`'s entry (its owners, when there is one), ahead of `owners`.
    pub fn prefetch(&self, id: CheckId) {
        if let Some(e) = self.entries.get(id.index as usize) {
            crate::prefetch::line(e);
        }
    }

    #[cfg(any(test, feature = "testing"))]
    pub fn params(&self, id: CheckId) -> Option<&CheckParams> {
        self.check(id).ok().map(|c| &self.params[c.params as usize])
    }

    /// The index of `params` in `self.params`, added if new.
    fn intern(&mut self, params: CheckParams) -> u32 {
        if let Some(&ix) = self.params_ix.get(&params) {
            return ix;
        }
        let ix = u32::try_from(self.params.len()).expect("fewer timings than checks");
        self.params.push(params);
        self.params_ix.insert(params, ix);
        ix
    }

    /// When the check is next due, if it is waiting in the wheel.
    #[cfg(any(test, feature = "testing"))]
    pub fn due(&self, id: CheckId) -> Option<u64> {
        self.check(id).ok()?;
        self.wheel.due(id.index)
    }

    /// The earliest time at which `pop_due` will hand out a check. It walks the first occupied
    /// wheel slot, so a driver should wake at most once per tick and pop the whole tick.
    pub fn next_due(&self) -> Option<u64> {
        self.wheel.next_due()
    }

    /// Appends to `out` every check due at or before `now_ns`; each is in flight until `completed`.
    #[cfg(any(test, feature = "testing"))]
    pub fn pop_due(&mut self, now_ns: u64, out: &mut Vec<CheckId>) {
        self.pop_due_with(now_ns, |id, _| out.push(id));
    }

    /// As `pop_due`, handing each check to `emit` with the time it was due.
    pub fn pop_due_with(&mut self, now_ns: u64, mut emit: impl FnMut(CheckId, u64)) {
        let Self { wheel, entries, .. } = self;
        wheel.pop_due(now_ns, |index, due_ns| {
            let entry = &mut entries[index as usize];
            let check = entry.check.as_mut().expect("only live checks are in the wheel");
            check.in_flight = true;
            emit(
                CheckId {
                    index,
                    generation: entry.generation,
                },
                due_ns,
            );
        });
    }

    /// Reports that the probe handed out by `pop_due` finished at `finished_ns` (answer or
    /// timeout); the next one is due one gap for `cadence` later. Returns that due time.
    ///
    /// A disabled or always-serve endpoint is not paused here: its owner removes it, so the
    /// scheduler only ever holds checks that are probed.
    pub fn completed(&mut self, id: CheckId, finished_ns: u64, cadence: Cadence) -> Result<u64, ScheduleError> {
        let check = self.check_mut(id)?;
        if !check.in_flight {
            return Err(ScheduleError::NotInFlight { id });
        }
        check.in_flight = false;
        let ix = check.params as usize;
        let params = self.params[ix];
        let gap = nanos(params.gap(cadence));
        let jitter = self
            .rng
            .below(gap.saturating_mul(u64::from(params.jitter_percent)) / 100);
        let due = finished_ns.saturating_add(gap).saturating_add(jitter);
        self.wheel.insert(id.index, due);
        Ok(due)
    }

    fn schedule_first(&mut self, index: u32, now_ns: u64) {
        let check = self.entries[index as usize].check.as_ref().expect("live");
        let params = self.params[check.params as usize];
        let interval = nanos(params.interval);
        let offset = if self.config.spread_first {
            self.spread = self.spread.wrapping_add(GOLDEN_GAMMA);
            scale(self.spread, interval)
        } else {
            0
        };
        let jitter = self.rng.below(nanos(params.initial_jitter));
        let due = now_ns.saturating_add(offset).saturating_add(jitter);
        self.wheel.insert(index, due);
    }

    fn allocate(&mut self) -> Result<u32, ScheduleError> {
        if let Some(index) = self.free.pop() {
            return Ok(index);
        }
        // u32::MAX is the wheel's end-of-list marker.
        let index = u32::try_from(self.entries.len())
            .ok()
            .filter(|&i| i != u32::MAX)
            .ok_or(ScheduleError::Full)?;
        self.entries.push(Entry {
            generation: Generation::MIN,
            check: None,
        });
        Ok(index)
    }

    fn id_of(&self, index: u32) -> CheckId {
        CheckId {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    fn check(&self, id: CheckId) -> Result<&Check<K, O>, ScheduleError> {
        self.entries
            .get(id.index as usize)
            .filter(|e| e.generation == id.generation)
            .and_then(|e| e.check.as_ref())
            .ok_or(ScheduleError::UnknownCheck { id })
    }

    fn check_mut(&mut self, id: CheckId) -> Result<&mut Check<K, O>, ScheduleError> {
        self.entries
            .get_mut(id.index as usize)
            .filter(|e| e.generation == id.generation)
            .and_then(|e| e.check.as_mut())
            .ok_or(ScheduleError::UnknownCheck { id })
    }
}

/// 2^64 / golden ratio: successive multiples leave the largest gaps as evenly split as possible.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Maps a 64-bit fraction onto `0..range`.
fn scale(fraction: u64, range: u64) -> u64 {
    ((u128::from(fraction) * u128::from(range)) >> 64) as u64
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The hash `Scheduler::by_key` files a check under.
fn key_hash<K: Hash>(key: &K) -> u64 {
    crate::hash::fast_hash(key)
}

/// The key of the live check at `index` (only live checks are in `by_key`).
fn key_of<K, O>(entries: &[Entry<K, O>], index: u32) -> &K {
    &entries[index as usize]
        .check
        .as_ref()
        .expect("only live checks are keyed")
        .key
}

#[cfg(test)]
mod tests;
