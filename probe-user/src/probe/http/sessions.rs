//! Where HTTPS and gRPC-over-TLS probes keep their TLS sessions for resumption
//! (`Sessions`), and the bounded map under it (`SessionMap`).
use std::{
    cell::Cell,
    collections::{HashMap, HashSet, VecDeque},
    hash::{BuildHasher, RandomState},
    net::SocketAddr,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use rustls::{
    client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue},
    pki_types::ServerName,
    NamedGroup,
};

thread_local! {
    /// The target whose TLS connection rustls is working on, while it does (`Scoped`): the
    /// session store keeps sessions by target as well as by name, and rustls tells it only
    /// the name.
    static TARGET: Cell<Option<SocketAddr>> = const { Cell::new(None) };
}

/// Runs `f` as work on `target`'s connection (see `TARGET`).
pub(crate) fn for_target<T>(target: SocketAddr, f: impl FnOnce() -> T) -> T {
    let was = TARGET.replace(Some(target));
    let out = f();
    TARGET.set(was);
    out
}

/// TLS 1.3 tickets kept per target: a probe takes one per connection and the handshake brings
/// new ones (OpenSSL sends two), so two are always enough; rustls's own cache keeps eight.
const TICKETS_PER_TARGET: usize = 2;

/// When a target's last full handshake verified its certificate, and when that certificate
/// expires.
#[derive(Debug, Clone, Copy)]
struct Verified {
    at: Instant,
    not_after: Option<i64>,
}

/// The TLS sessions of probes, kept by target and name (review M1: by name alone, one backend
/// resumed a session another made, and its own certificate was never seen), and resumed only
/// while the target's last full handshake is younger than `reverify` and its certificate has
/// not expired. Plus which targets' latest session was TLS 1.2 (set when a TLS 1.2 session is
/// stored, cleared when a TLS 1.3 ticket arrives or resuming failed). A (target, name) is a
/// 64-bit hash. Past `cap` targets, the first one kept goes (`SessionMap`); the others' maps
/// stop growing, and their targets simply make full handshakes.
#[derive(Debug)]
pub(super) struct Sessions {
    map: Mutex<SessionMap<Tls12ClientSessionValue, Tls13ClientSessionValue>>,
    /// The key exchange group a server prefers, by name: no secret of one backend.
    kx_hints: Mutex<HashMap<ServerName<'static>, NamedGroup>>,
    tls12: Mutex<HashSet<u64>>,
    verified: Mutex<HashMap<u64, Verified>>,
    hasher: RandomState,
    cap: usize,
    reverify: Duration,
}

impl Sessions {
    pub(super) fn new(cap: usize, reverify: Duration) -> Self {
        Self {
            map: Mutex::new(SessionMap::new(cap)),
            kx_hints: Mutex::new(HashMap::new()),
            tls12: Mutex::new(HashSet::new()),
            verified: Mutex::new(HashMap::new()),
            hasher: RandomState::new(),
            cap,
            reverify,
        }
    }

    pub(super) fn key(&self, target: SocketAddr, name: &ServerName<'_>) -> u64 {
        self.hasher.hash_one((target, name))
    }

    /// The key of the connection rustls works on now (None outside one: nothing is stored
    /// or resumed then).
    fn current(&self, name: &ServerName<'_>) -> Option<u64> {
        TARGET.get().map(|target| self.key(target, name))
    }

    fn map(&self) -> std::sync::MutexGuard<'_, SessionMap<Tls12ClientSessionValue, Tls13ClientSessionValue>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `key`'s sessions may be resumed now.
    pub(super) fn fresh(&self, key: u64) -> bool {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        verified.get(&key).is_some_and(|v| {
            v.at.elapsed() < self.reverify && v.not_after.is_none_or(|t| t > crate::clock::unix_ms() as i64 / 1000)
        })
    }

    pub(super) fn verified(&self, key: u64, not_after: Option<i64>) {
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        if verified.len() < self.cap || verified.contains_key(&key) {
            verified.insert(
                key,
                Verified {
                    at: Instant::now(),
                    not_after,
                },
            );
        }
    }

    pub(super) fn not_after(&self, key: u64) -> Option<i64> {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        verified.get(&key).and_then(|v| v.not_after)
    }

    pub(super) fn last_was_tls12(&self, key: u64) -> bool {
        self.tls12.lock().unwrap_or_else(PoisonError::into_inner).contains(&key)
    }

    pub(super) fn mark(&self, key: u64, tls12: bool) {
        let mut set = self.tls12.lock().unwrap_or_else(PoisonError::into_inner);
        if !tls12 {
            set.remove(&key);
        } else if set.len() < self.cap {
            set.insert(key);
        }
    }
}

impl ClientSessionStore for Sessions {
    // The key exchange group a server prefers is no secret of one backend: kept by name.
    fn set_kx_hint(&self, server_name: ServerName<'static>, group: NamedGroup) {
        let mut hints = self.kx_hints.lock().unwrap_or_else(PoisonError::into_inner);
        if hints.len() < self.cap || hints.contains_key(&server_name) {
            hints.insert(server_name, group);
        }
    }

    fn kx_hint(&self, server_name: &ServerName<'_>) -> Option<NamedGroup> {
        let hints = self.kx_hints.lock().unwrap_or_else(PoisonError::into_inner);
        hints.get(server_name).copied()
    }

    fn set_tls12_session(&self, server_name: ServerName<'static>, value: Tls12ClientSessionValue) {
        if let Some(key) = self.current(&server_name) {
            self.mark(key, true);
            self.map().entry(key).tls12 = Some(value);
        }
    }

    fn tls12_session(&self, server_name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        let key = self.current(server_name).filter(|k| self.fresh(*k))?;
        self.map().get(key).and_then(|k| k.tls12.clone())
    }

    fn remove_tls12_session(&self, server_name: &ServerName<'static>) {
        if let Some(key) = self.current(server_name) {
            self.mark(key, false);
            if let Some(k) = self.map().get_mut(key) {
                k.tls12 = None;
            }
        }
    }

    fn insert_tls13_ticket(&self, server_name: ServerName<'static>, value: Tls13ClientSessionValue) {
        if let Some(key) = self.current(&server_name) {
            self.mark(key, false);
            let mut map = self.map();
            let tickets = &mut map.entry(key).tls13;
            if tickets.len() == TICKETS_PER_TARGET {
                tickets.pop_front();
            }
            tickets.push_back(value);
        }
    }

    fn take_tls13_ticket(&self, server_name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        let key = self.current(server_name).filter(|k| self.fresh(*k))?;
        self.map().get_mut(key).and_then(|k| k.tls13.pop_back())
    }
}

/// One target's sessions.
#[derive(Debug)]
pub(super) struct Kept<T12, T13> {
    pub tls12: Option<T12>,
    pub tls13: VecDeque<T13>,
}

/// Sessions by target key, at most `cap` targets; past it the first target kept goes. Grows as
/// targets come (rustls's memory cache set aside room for all of them at once, and held an
/// eighth as many targets as it was told: issue 46, L4).
#[derive(Debug)]
pub(super) struct SessionMap<T12, T13> {
    map: HashMap<u64, Kept<T12, T13>>,
    /// Keys in the order they came, for eviction.
    order: VecDeque<u64>,
    cap: usize,
}

impl<T12, T13> SessionMap<T12, T13> {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub(super) fn get(&self, key: u64) -> Option<&Kept<T12, T13>> {
        self.map.get(&key)
    }

    pub(super) fn get_mut(&mut self, key: u64) -> Option<&mut Kept<T12, T13>> {
        self.map.get_mut(&key)
    }

    /// `key`'s sessions, made (and the first target dropped, at the cap) if it has none.
    pub(super) fn entry(&mut self, key: u64) -> &mut Kept<T12, T13> {
        if !self.map.contains_key(&key) {
            while self.map.len() >= self.cap {
                match self.order.pop_front() {
                    Some(old) => {
                        self.map.remove(&old);
                    }
                    None => break,
                }
            }
            self.order.push_back(key);
        }
        self.map.entry(key).or_insert_with(|| Kept {
            tls12: None,
            tls13: VecDeque::with_capacity(TICKETS_PER_TARGET),
        })
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_holds_as_many_targets_as_it_is_told_and_then_drops_the_first() {
        // Review L4: rustls's cache, told 131,072, kept 16,384 servers.
        let mut map: SessionMap<u32, u32> = SessionMap::new(131_072);
        for key in 0..20_000u64 {
            map.entry(key).tls13.push_back(1);
        }
        assert_eq!(map.len(), 20_000);
        assert!(map.get(0).is_some(), "the first of 20,000 targets is still there");
        let mut small: SessionMap<u32, u32> = SessionMap::new(3);
        for key in 0..4u64 {
            small.entry(key).tls12 = Some(7);
        }
        assert_eq!(small.len(), 3);
        assert!(small.get(0).is_none() && small.get(3).is_some(), "the first went");
        // Asking again for a kept target moves nothing.
        small.entry(1);
        assert_eq!(small.len(), 3);
        assert!(small.get(1).is_some() && small.get(2).is_some());
    }
}
