//! The change stream: every change of an endpoint's or a profile's state, published once by
//! the runner as a typed value, delivered to each subscriber through a queue of its own.
//!
//! A subscriber's queue holds at most one pending change per endpoint or profile: a newer
//! change for the same key is merged into the waiting one (the newest state wins, the oldest
//! `from` is kept), so a slow consumer sees fewer, later states, never stale ones, and the
//! queue never grows past the number of keys. Past `capacity` distinct keys, new keys are
//! dropped and the consumer is told how many on its next batch: it then reconciles from a
//! fresh snapshot. Publishing never blocks and never waits for a consumer; it runs only on
//! state changes, not per probe.
use std::{
    net::IpAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Condvar, Mutex, MutexGuard, PoisonError,
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::wire_enum::wire_enum;

use crate::{
    config::Protocol,
    outcome::Outcome,
    status::{AdminState, EndpointStatus, Health, ProfileStatus},
};

wire_enum! {
    /// What caused a change.
    #[derive(Debug, Hash)]
    pub enum ChangeKind {
        /// The threshold machine reached a verdict (the `transition` says on which results).
        Health = "health",
        /// An operator set the admin state through the API.
        Admin = "admin",
        /// A reload added, removed or changed the endpoint (or its profile).
        Config = "config",
        /// The profile entered or left fail-open: the endpoint's eligibility changed alone.
        FailOpen = "fail-open",
        /// Other locations' verdicts changed the endpoint's aggregate health (`[cluster]`).
        Cluster = "cluster",
        /// A step of the endpoint's slow start: its weight's share (`ramp`) moved alone.
        SlowStart = "slow-start",
        /// Not a change but a notice (`Change::Notice`): the server's TLS certificate expires
        /// within the profile's `cert_warn_days`; the endpoint's status is as it was.
        CertExpiring = "cert-expiring",
    }
}

impl ChangeKind {
    /// Which cause a coalesced change keeps: the one that says most about what happened.
    fn weight(self) -> u8 {
        match self {
            ChangeKind::Health => 4,
            ChangeKind::Cluster => 3,
            ChangeKind::Admin => 2,
            ChangeKind::Config => 1,
            ChangeKind::FailOpen | ChangeKind::SlowStart | ChangeKind::CertExpiring => 0,
        }
    }
}

/// An endpoint's state as consumers need it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndpointState {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    pub weight: u32,
    pub priority: u32,
    pub admin: AdminState,
    pub health: Health,
    pub status: EndpointStatus,
    /// May receive new traffic now, fail-open included.
    pub eligible: bool,
    /// Its slow start: the share of `weight` it takes now, in thousandths
    /// (`status::ramp`); whole (1000, and left out of the JSON) outside a ramp.
    #[serde(
        default = "crate::status::ramp::full",
        skip_serializing_if = "crate::status::ramp::is_full"
    )]
    pub ramp: u16,
    /// A nested endpoint's child profile (SPEC 8): it has no address of its own (`address`
    /// is unspecified, `port` 0), and data-path sinks leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nested: Option<String>,
}

impl EndpointState {
    /// An enabled TCP endpoint of weight 1 whose checks pass (Healthy, Online, eligible) or
    /// fail (Unhealthy, Degraded, not eligible): the usual fixture of tests and benchmarks.
    pub fn tcp(address: IpAddr, port: u16, passing: bool) -> Self {
        EndpointState {
            address,
            port,
            protocol: Protocol::Tcp,
            weight: 1,
            priority: 1,
            admin: AdminState::Enabled,
            health: if passing { Health::Healthy } else { Health::Unhealthy },
            status: if passing {
                EndpointStatus::Online
            } else {
                EndpointStatus::Degraded
            },
            eligible: passing,
            ramp: crate::status::ramp::FULL,
            nested: None,
        }
    }

    /// Its weight as a slot table shares it while some endpoint of the table ramps
    /// (`status::ramp::fine`): every candidate scaled alike.
    pub fn fine_weight(&self) -> u32 {
        crate::status::ramp::fine(self.weight, self.ramp)
    }

    /// Its weight now, in whole units: the configured weight, or its slow start's share of it
    /// (`status::ramp::scaled`).
    pub fn weight_now(&self) -> u32 {
        crate::status::ramp::scaled(self.weight, self.ramp)
    }
}

/// One probe of the run that decided a health change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub ok: bool,
    pub outcome: Outcome,
    /// Shared with the probe's report (at start-up a million transitions carry two each).
    pub reason: Arc<str>,
    /// Whole microseconds here, `rtt_ms` on the wire (which had microsecond precision).
    #[serde(rename = "rtt_ms", with = "micros_as_ms")]
    pub rtt_us: u32,
    /// CLOCK_MONOTONIC, nanoseconds: comparable with the kernel's and the runner's clock.
    pub started_ns: u64,
    pub finished_ns: u64,
}

// A first round publishes one change per target with the run that decided it, and a slow
// consumer holds them all: as 48-byte results, three took mimalloc's 160-byte class, now 128.
const _: () = assert!(std::mem::size_of::<RunResult>() <= 40);

impl RunResult {
    pub fn rtt_ms(&self) -> f64 {
        micros_as_ms::ms(self.rtt_us)
    }
}

/// A time kept in whole microseconds, written as milliseconds (round-trip times, windows).
pub(crate) mod micros_as_ms {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn ms(us: u32) -> f64 {
        f64::from(us) / 1000.0
    }

    /// Milliseconds to whole microseconds; `as` saturates (and takes NaN to 0): a time past
    /// 71 minutes reads as 71 minutes.
    pub fn micros(ms: f64) -> u32 {
        (ms * 1000.0).round() as u32
    }

    #[allow(clippy::trivially_copy_pass_by_ref)] // the signature serde's `with` calls
    pub fn serialize<S: Serializer>(us: &u32, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(ms(*us))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        Ok(micros(f64::deserialize(d)?))
    }
}

/// The evidence for a health change, and its windows (SPEC section 3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransitionDetail {
    pub results: Vec<RunResult>,
    /// Start of the first result of the run to the change.
    pub measured_window_ms: f64,
    /// What the SPEC formula gives for the same settings.
    pub formula_window_ms: f64,
}

/// An endpoint changed, appeared (`from` is None) or went away (`removed`; `state` is then
/// its last state, so that a consumer knows which address to take out).
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointChange {
    pub seq: u64,
    pub at_unix_ms: u64,
    /// CLOCK_MONOTONIC of the change.
    pub at_ns: u64,
    pub kind: ChangeKind,
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    pub from: Option<EndpointStatus>,
    pub state: EndpointState,
    pub removed: bool,
    pub transition: Option<Arc<TransitionDetail>>,
}

impl EndpointChange {
    /// A change of endpoint `endpoint` of `profile` to `state` at `(unix ms, runner ns)`; the
    /// runner stamps its sequence number when it publishes it.
    pub fn new(
        (profile, endpoint): (&Arc<str>, &Arc<str>),
        kind: ChangeKind,
        from: Option<EndpointStatus>,
        state: EndpointState,
        (at_unix_ms, at_ns): (u64, u64),
    ) -> Self {
        EndpointChange {
            seq: 0,
            at_unix_ms,
            at_ns,
            kind,
            profile: profile.clone(),
            endpoint: endpoint.clone(),
            from,
            state,
            removed: false,
            transition: None,
        }
    }

    /// The same change, saying the endpoint is gone.
    #[must_use]
    pub fn gone(self) -> Self {
        EndpointChange { removed: true, ..self }
    }
}

/// A profile's status or fail-open changed; `to` is None when a reload removed it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileChange {
    pub seq: u64,
    pub at_unix_ms: u64,
    pub profile: Arc<str>,
    pub from: Option<ProfileStatus>,
    pub to: Option<ProfileStatus>,
    pub fail_open: bool,
}

/// Something about an endpoint that changes none of its state, for the events file (and
/// any consumer that wants it): sinks and the DNS server pass notices by.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub seq: u64,
    pub at_unix_ms: u64,
    pub at_ns: u64,
    pub kind: ChangeKind,
    pub profile: Arc<str>,
    pub endpoint: Arc<str>,
    /// Its state when the notice was made (unchanged by it).
    pub state: EndpointState,
    /// `CertExpiring`: when the certificate expires (Unix seconds).
    pub cert_not_after: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Endpoint(EndpointChange),
    Profile(ProfileChange),
    Notice(Notice),
}

#[cfg(test)]
impl Change {
    /// An endpoint's health change with `state`: the fixture of the consumers' unit tests.
    pub(crate) fn health(seq: u64, profile: &str, endpoint: &str, state: EndpointState, removed: bool) -> Change {
        Change::Endpoint(EndpointChange {
            seq,
            at_unix_ms: 0,
            at_ns: 0,
            kind: ChangeKind::Health,
            profile: profile.into(),
            endpoint: endpoint.into(),
            from: None,
            state,
            removed,
            transition: None,
        })
    }
}

impl Change {
    /// What the change is about: its profile, and its endpoint for an endpoint's; a notice
    /// is keyed apart from its endpoint's changes (the flag), so that neither folds the other
    /// away. At most one change per key waits in a queue.
    fn key(&self) -> (&str, Option<&str>, bool) {
        match self {
            Change::Endpoint(e) => (&e.profile, Some(&e.endpoint), false),
            Change::Profile(p) => (&p.profile, None, false),
            Change::Notice(n) => (&n.profile, Some(&n.endpoint), true),
        }
    }

    /// The profile it is about.
    pub fn profile(&self) -> &Arc<str> {
        match self {
            Change::Endpoint(e) => &e.profile,
            Change::Profile(p) => &p.profile,
            Change::Notice(n) => &n.profile,
        }
    }

    fn key_hash(&self) -> u64 {
        crate::hash::fast_hash(&self.key())
    }

    pub fn seq(&self) -> u64 {
        match self {
            Change::Endpoint(e) => e.seq,
            Change::Profile(p) => p.seq,
            Change::Notice(n) => n.seq,
        }
    }

    /// Folds a newer change of the same key into this one: the newer state, the older `from`,
    /// and the weightier cause: a health verdict and its evidence survive a fail-open or
    /// admin change that follows it in the same queue.
    fn absorb(&mut self, newer: &Change) {
        match (self, newer.clone()) {
            (Change::Endpoint(old), Change::Endpoint(new)) => {
                let (from, kind, transition) = (old.from, old.kind, old.transition.take());
                *old = new;
                old.from = from;
                if kind.weight() > old.kind.weight() {
                    old.kind = kind;
                }
                if old.transition.is_none() {
                    old.transition = transition;
                }
            }
            (Change::Profile(old), Change::Profile(new)) => {
                let from = old.from;
                *old = new;
                old.from = from;
            }
            (old, new) => *old = new,
        }
    }
}

/// The state of every endpoint and profile at one point of the stream: a new subscriber's
/// starting point, after which its queue carries every change with a larger `seq`.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The `seq` of the last change already reflected here.
    pub seq: u64,
    pub profiles: Vec<(Arc<str>, ProfileStatus, bool)>,
    pub endpoints: Vec<(Arc<str>, Arc<str>, EndpointState)>,
}

/// The endpoints' last measured round-trip times, (profile, endpoint, time), for the profiles
/// that route by them (performance routing). The runner sends them once a second beside the
/// change stream, on a watch channel: only the latest matters.
pub type Rtts = Arc<Vec<(Arc<str>, Arc<str>, Option<Duration>)>>;

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
const INDEX_KEPT: usize = 4096;

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

#[cfg(test)]
mod tests;
