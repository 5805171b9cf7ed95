//! What the query paths (`wire.rs` over UDP, `tcp.rs`) and the server's threads (`server.rs`)
//! share: the zone behind its lock and generation, the answer counters, and each thread's
//! random source. Apart from `server.rs` so that the query paths do not import the threads
//! that run them.
use std::{
    cell::RefCell,
    sync::{
        atomic::{AtomicU64, Ordering},
        PoisonError, RwLock, RwLockReadGuard,
    },
};

use super::zone::Zone;
use crate::rng::SplitMix64;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// Why the server closed a connection (a client's own close is not counted); the
    /// `reason` of `probed_dns_tcp_closed_total`.
    #[derive(Debug)]
    pub enum Closed {
        /// Refused at `max_clients`, none idle to replace.
        Full = "full",
        /// Refused at `max_clients_per_prefix` (or an IPv6 /48's or /32's share), none of that
        /// prefix idle to replace.
        Prefix = "prefix",
        /// Closed to make room for a new one at `max_clients`.
        Evicted = "evicted",
        Idle = "idle",
        Lifetime = "lifetime",
        /// A malformed frame, or an error reading or writing.
        Error = "error",
    }
}

/// Answers by outcome, read by the metrics scrape.
#[derive(Debug, Default)]
pub struct Counters {
    pub noerror: AtomicU64,
    pub nxdomain: AtomicU64,
    pub refused: AtomicU64,
    pub formerr: AtomicU64,
    pub other: AtomicU64,
    /// Answers sent over TCP (every other one went over UDP).
    pub tcp: AtomicU64,
    pub send_errors: AtomicU64,
    /// UDP answers rate limiting held back: dropped, or sent truncated instead.
    pub rrl_dropped: AtomicU64,
    pub rrl_slipped: AtomicU64,
    /// TCP connections open now, and those the server closed, by `tcp::Closed` reason.
    pub tcp_open: AtomicU64,
    tcp_closed: [AtomicU64; Closed::ALL.len()],
}

impl Counters {
    pub(super) fn tcp_closed(&self, reason: Closed) {
        self.tcp_closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// TCP connections the server closed, by reason, for the metrics scrape.
pub fn tcp_closed_values(c: &Counters) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    Closed::ALL
        .iter()
        .map(|r| (r.as_str(), c.tcp_closed[*r as usize].load(Ordering::Relaxed)))
}

/// What the query path and the follower share.
pub(super) struct Shared {
    zone: RwLock<Zone>,
    /// Bumped by every write to the zone: answers remembered under an older one are dropped.
    generation: AtomicU64,
    pub counters: Counters,
}

impl Shared {
    pub(super) fn new(zone: Zone) -> Self {
        Shared {
            zone: RwLock::new(zone),
            generation: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    pub(super) fn zone(&self) -> RwLockReadGuard<'_, Zone> {
        // A panic while the zone was being written leaves statuses of one batch half applied;
        // the next batch or reload brings it back in step, which beats answering nothing.
        self.zone.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The zone's version now. Read it before answering: an answer made while a write lands
    /// is then remembered under the version it may predate, and never served.
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub(super) fn update(&self, f: impl FnOnce(&mut Zone)) {
        let mut zone = self.zone.write().unwrap_or_else(PoisonError::into_inner);
        f(&mut zone);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

thread_local! {
    static RNG: RefCell<SplitMix64> = RefCell::new(SplitMix64(crate::clock::mono_ns()));
}

/// Runs `f` with this thread's random source (weighted answers).
pub(super) fn with_rng<T>(f: impl FnOnce(&mut SplitMix64) -> T) -> T {
    RNG.with(|r| f(&mut r.borrow_mut()))
}

/// The counters, by name, for the metrics scrape.
pub fn counter_values(c: &Counters) -> [(&'static str, u64); 5] {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    [
        ("noerror", get(&c.noerror)),
        ("nxdomain", get(&c.nxdomain)),
        ("refused", get(&c.refused)),
        ("formerr", get(&c.formerr)),
        ("other", get(&c.other)),
    ]
}
