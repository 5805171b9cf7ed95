//! How the stream is carried: a queue per subscriber, the runner's `Bus` fanning out to them.
use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use super::model::*;

/// Changes taken from a queue at once, oldest first. Each is shared with the other queues it
/// went to: a change is made once, however many subscribers take it.
#[derive(Debug, Default)]
pub struct Batch {
    pub changes: Vec<Arc<Change>>,
    /// Changes dropped since the last batch because the queue was full: the consumer's view
    /// is incomplete and should be rebuilt from a snapshot.
    pub lost: u64,
}

/// Counters of one subscriber, read by the metrics scrape.
#[derive(Debug, Default)]
pub struct QueueStats {
    pub published: AtomicU64,
    pub coalesced: AtomicU64,
    pub dropped: AtomicU64,
    pub delivered: AtomicU64,
}

#[derive(Default)]
struct Queue {
    /// The changes waiting, oldest first, one per key: 8 bytes each here, the change itself
    /// (~130 bytes) shared by every queue it is in, where a copy per queue held each change as
    /// many times as there are subscribers (at a start, one change per endpoint at once).
    changes: Vec<Arc<Change>>,
    /// Where each key's change is in `changes`, found by the key's hash (the key is the
    /// change's own): 4 bytes a waiting change, where a map from keys to changes took ~200
    /// and, at a million endpoints changing at once, grew by copying them all several times.
    index: hashbrown::HashTable<u32>,
    lost: u64,
    closed: bool,
    /// Closed because a newer subscription of the same follower took over at that point of
    /// the stream (a reload, a reopened events file): its consumer goes on with that one.
    replaced: bool,
    /// Closed because the runner stopped (the daemon stops), not because its follower left.
    stopped: bool,
    /// The runner stopped because it was asked to (not by a failure).
    stop_asked: bool,
}

/// An emptied queue keeps an index of up to this many slots for the next changes; a larger
/// one, left by a burst, is let go.
pub(super) const INDEX_KEPT: usize = 4096;

struct Shared {
    /// Its label: the follower's, made unique among the bus's subscribers.
    name: String,
    follower: Follower,
    /// Only this profile's changes, when set.
    profile: Option<Arc<str>>,
    capacity: usize,
    queue: Mutex<Queue>,
    ready: Condvar,
    notify: tokio::sync::Notify,
    stats: QueueStats,
    /// CLOCK_MONOTONIC of the oldest change waiting, 0 when none: the subscriber's lag.
    oldest_ns: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A consumer that panicked while holding the lock left a consistent queue (every
        // change to it is one statement), so the poison flag carries no information.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Empties the queue: its changes are the batch, already in order, taken without a copy,
    /// so that a large batch never holds up the runner's next publish.
    fn take(&self, mut q: MutexGuard<'_, Queue>) -> Batch {
        let changes = std::mem::take(&mut q.changes);
        let lost = std::mem::take(&mut q.lost);
        if q.index.capacity() > INDEX_KEPT {
            q.index = hashbrown::HashTable::new();
        } else {
            q.index.clear();
        }
        self.oldest_ns.store(0, Ordering::Relaxed);
        drop(q);
        self.stats.delivered.fetch_add(changes.len() as u64, Ordering::Relaxed);
        Batch { changes, lost }
    }
}

/// Who follows the stream, typed: what its subscriptions are closed by, and the base of the
/// label its metrics carry (`probed_changes_*{subscriber="..."}`). Each follower but a
/// `Feed` has one subscription at most: a new one replaces the one before at the same point
/// of the stream, so that nothing is seen twice or missed between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Follower {
    /// The events file.
    Events,
    /// The DNS server's zone.
    Dns,
    /// One `[[sink]]`, by name.
    Sink(Arc<str>),
    /// A feed that comes and goes: an API client's `/v1/events`, a test.
    Feed(String),
}

impl Follower {
    /// Its label in the metrics.
    pub fn label(&self) -> String {
        match self {
            Follower::Events => "events".into(),
            Follower::Dns => "dns".into(),
            Follower::Sink(name) => format!("sink:{name}"),
            Follower::Feed(name) => name.clone(),
        }
    }
}

impl From<&str> for Follower {
    fn from(name: &str) -> Self {
        Follower::Feed(name.to_string())
    }
}

/// A consumer's end of the stream.
pub struct Subscription {
    shared: Arc<Shared>,
}

impl Subscription {
    /// The name its metrics carry (unique among the bus's subscribers).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The next batch; None once the runner has stopped and everything was taken.
    pub async fn recv(&self) -> Option<Batch> {
        loop {
            let notified = self.shared.notify.notified();
            {
                let q = self.shared.lock();
                if !q.changes.is_empty() || q.lost > 0 {
                    return Some(self.shared.take(q));
                }
                if q.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Whether it ended because a newer subscription of its follower took over (rather than
    /// because it was closed or the runner stopped).
    pub fn replaced(&self) -> bool {
        self.shared.lock().replaced
    }

    /// Whether it ended because the runner stopped: the daemon stops, rather than a reload
    /// removing or changing its follower.
    pub fn runner_stopped(&self) -> bool {
        self.shared.lock().stopped
    }

    /// Whether the runner stopped because it was asked to (SIGTERM, a shutdown), rather than
    /// because the daemon failed: only then may a sink leave what it holds to the service
    /// manager's store.
    pub fn stop_asked(&self) -> bool {
        self.shared.lock().stop_asked
    }

    /// The next batch, waiting at most `timeout`: an empty batch when nothing came; None once
    /// the runner has stopped and everything was taken. For consumers on threads of their own.
    pub fn recv_blocking(&self, timeout: Duration) -> Option<Batch> {
        let mut q = self.shared.lock();
        if q.changes.is_empty() && q.lost == 0 && !q.closed {
            q = self
                .shared
                .ready
                .wait_timeout(q, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if q.changes.is_empty() && q.lost == 0 && q.closed {
            return None;
        }
        Some(self.shared.take(q))
    }
}

/// The runner's end: fans each change out to every subscriber.
#[derive(Default)]
pub struct Bus {
    subscribers: Vec<Arc<Shared>>,
    seq: u64,
    /// The runner stops because it was asked to (`stop_asked`): told to each subscription as
    /// the bus ends.
    stop_asked: bool,
}

/// One subscriber's figures for the metrics scrape.
pub struct SubscriberStats<'a> {
    pub name: &'a str,
    pub pending: usize,
    pub lag: Duration,
    pub stats: &'a QueueStats,
}

impl Bus {
    /// The next sequence number; the runner stamps each change with one.
    pub fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// The sequence number of the last change published.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// A new queue for `follower`; its label names it in the metrics (`label#2`, `label#3`,
    /// ... when taken).
    pub fn subscribe(&mut self, follower: impl Into<Follower>, capacity: usize) -> Subscription {
        self.subscribe_to(follower, capacity, None)
    }

    /// Subscribes each of `joins`, in order, at this one point of the stream. A join that asks
    /// for the state gets `state(profile)` as its snapshot, taken now (its `seq` is set here);
    /// one that does not gets an empty snapshot at the same `seq`.
    pub(crate) fn join(&mut self, joins: Vec<Join>, mut state: impl FnMut(Option<&str>) -> Snapshot) -> Vec<Joined> {
        joins
            .into_iter()
            .map(|join| {
                let profile = join.profile.as_deref();
                let snapshot = Snapshot {
                    seq: self.seq(),
                    ..if join.snapshot {
                        state(profile)
                    } else {
                        Snapshot::default()
                    }
                };
                Joined {
                    changes: self.subscribe_to(join.follower.clone(), join.capacity, profile),
                    follower: join.follower,
                    snapshot,
                }
            })
            .collect()
    }

    /// A new queue for the changes of one profile only (None: every change). It replaces
    /// the follower's queue before, unless the follower is a `Feed`.
    pub fn subscribe_to(
        &mut self,
        follower: impl Into<Follower>,
        capacity: usize,
        profile: Option<&str>,
    ) -> Subscription {
        let follower = follower.into();
        if !matches!(follower, Follower::Feed(_)) {
            self.end(&follower, true);
        }
        let name = follower.label();
        let mut unique = name.clone();
        let mut n = 1;
        while self.subscribers.iter().any(|s| s.name == unique) {
            n += 1;
            unique = format!("{name}#{n}");
        }
        let shared = Arc::new(Shared {
            name: unique,
            follower,
            profile: profile.map(Arc::from),
            capacity: capacity.max(1),
            queue: Mutex::new(Queue::default()),
            ready: Condvar::new(),
            notify: tokio::sync::Notify::new(),
            stats: QueueStats::default(),
            oldest_ns: AtomicU64::new(0),
        });
        self.subscribers.push(shared.clone());
        Subscription { shared }
    }

    pub fn has_subscribers(&self) -> bool {
        !self.subscribers.is_empty()
    }

    /// Stamps `change` with the next sequence number and hands it to every subscriber (with
    /// none, only the number is taken).
    pub fn publish_next(&mut self, mut change: Change, now_ns: u64) {
        let seq = self.next_seq();
        match &mut change {
            Change::Endpoint(c) => c.seq = seq,
            Change::Profile(c) => c.seq = seq,
            Change::Notice(c) => c.seq = seq,
        }
        if self.has_subscribers() {
            self.publish(change, now_ns);
        }
    }

    /// Hands `change` to every subscriber; `now_ns` dates it for the lag metric.
    pub fn publish(&mut self, change: Change, now_ns: u64) {
        let change = Arc::new(change);
        // A subscriber whose consumer is gone (its Subscription dropped) costs nothing more.
        self.subscribers.retain(|s| Arc::strong_count(s) > 1);
        let hash = change.key_hash();
        let profile = change.profile();
        for s in self
            .subscribers
            .iter()
            .filter(|s| s.profile.as_ref().is_none_or(|p| p == profile))
        {
            s.stats.published.fetch_add(1, Ordering::Relaxed);
            let mut guard = s.lock();
            let q = &mut *guard;
            let waiting = q.index.find(hash, |&i| q.changes[i as usize].key() == change.key());
            if let Some(&i) = waiting {
                // Copied only here, when the waiting change is shared with another queue.
                Arc::make_mut(&mut q.changes[i as usize]).absorb(&change);
                s.stats.coalesced.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if q.changes.len() >= s.capacity {
                q.lost += 1;
                s.stats.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                let at = u32::try_from(q.changes.len()).expect("capacity fits in 32 bits");
                q.changes.push(change.clone());
                let changes = &q.changes;
                q.index.insert_unique(hash, at, |&i| changes[i as usize].key_hash());
                let _ = s
                    .oldest_ns
                    .compare_exchange(0, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed);
            }
            drop(guard);
            s.ready.notify_one();
            s.notify.notify_one();
        }
    }

    /// Per-subscriber queue figures at `now_ns`.
    pub fn stats(&self, now_ns: u64) -> Vec<SubscriberStats<'_>> {
        self.subscribers
            .iter()
            .map(|s| {
                let oldest = s.oldest_ns.load(Ordering::Relaxed);
                SubscriberStats {
                    name: &s.name,
                    pending: s.lock().changes.len(),
                    lag: if oldest == 0 {
                        Duration::ZERO
                    } else {
                        Duration::from_nanos(now_ns.saturating_sub(oldest))
                    },
                    stats: &s.stats,
                }
            })
            .collect()
    }
}

impl Bus {
    /// The runner stops because it was asked to: its subscriptions say so when they end.
    pub fn stop_asked(&mut self, asked: bool) {
        self.stop_asked = asked;
    }

    /// Ends `follower`'s subscriptions: each consumer gets what is queued, then None.
    pub fn close(&mut self, follower: &Follower) {
        self.end(follower, false);
    }

    fn end(&mut self, follower: &Follower, replaced: bool) {
        self.subscribers.retain(|s| {
            if s.follower != *follower {
                return true;
            }
            let mut q = s.lock();
            q.closed = true;
            q.replaced = replaced;
            drop(q);
            s.ready.notify_all();
            s.notify.notify_one();
            false
        });
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        for s in &self.subscribers {
            let mut q = s.lock();
            q.closed = true;
            q.stopped = true;
            q.stop_asked = self.stop_asked;
            drop(q);
            s.ready.notify_all();
            s.notify.notify_one();
        }
    }
}

/// A consumer joining the change stream. A typed follower (not a `Feed`) has one
/// subscription: joining again ends the one before at the same point of the stream.
#[derive(Debug, Clone)]
pub(crate) struct Join {
    pub follower: Follower,
    /// How many distinct endpoints and profiles may wait in its queue.
    pub capacity: usize,
    /// Only this profile's changes (and state).
    pub profile: Option<Arc<str>>,
    /// A mirror (a sink, the DNS zone) needs the state now to start from; a recorder (the
    /// events file) only the changes.
    pub snapshot: bool,
}

/// A consumer's start on the stream: the state it joined at (empty but for `seq` when it
/// asked for none) and every change after it.
pub(crate) struct Joined {
    pub follower: Follower,
    pub snapshot: Snapshot,
    pub changes: Subscription,
}
