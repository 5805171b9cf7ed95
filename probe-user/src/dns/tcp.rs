//! DNS over TCP (RFC 7766), with the bounds `[dns.tcp]` sets. Queries on one connection are
//! read and answered in order, so a client may pipeline them. What one client can hold:
//! - connections: at most `max_clients` in all (the DNS server's descriptor budget, apart from
//!   what probes, sinks and state use) and `max_clients_per_prefix` per source prefix (IPv4
//!   clients of a dual-stack listener by their IPv4 prefix); an IPv6 /48 holds at most a
//!   quarter of `max_clients` and a /32 half, so sources spread over many /56s of one site
//!   cannot take every place. At a cap a new connection takes the place of the one of that
//!   prefix (or, at the total, of any) idle the longest (RFC 7766 6.2.3: a server under
//!   pressure closes idle connections first), or else of one whose answer has waited for its
//!   reader more than `STALLED`, and is refused when there is none;
//! - time: a connection with no complete query for `idle_timeout` is closed, and bytes of an
//!   unfinished query do not count, so a client trickling a byte at a time cannot keep it;
//!   none lives longer than `max_lifetime`; an answer the client does not read within
//!   `idle_timeout` closes it too.
//!
//! Accept errors (a full descriptor table) are retried with backoff (`crate::accept`).
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{atomic::Ordering, Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::Notify,
    time::{timeout_at, Instant},
};

use super::shared::{Closed, Shared};

struct Conn {
    groups: Groups,
    /// Since when it waits for a query; None while it is answering one.
    idle_since: Option<Instant>,
    /// Since when its answer waits for the client to read it; None while it does not.
    writing_since: Option<Instant>,
    close: Arc<Notify>,
}

/// An answer the client has not taken for this long makes its connection as good as idle for
/// eviction: a client that pipelines queries and never reads would otherwise hold its place
/// for `idle_timeout` at a time, again and again.
const STALLED: Duration = Duration::from_secs(1);

/// The groups a connection counts in: its source prefix (`[dns.rate_limit]`'s lengths), and
/// for IPv6 its /48 and /32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Groups {
    pub prefix: u128,
    pub site: Option<u128>,
    pub block: Option<u128>,
}

impl Groups {
    /// `source`'s groups, its prefix at `v4`/`v6` bits.
    pub(super) fn of(source: std::net::IpAddr, v4: u8, v6: u8) -> Groups {
        let prefix = super::rrl::prefix_of(source, v4, v6);
        match source.to_canonical() {
            std::net::IpAddr::V6(_) => Groups {
                prefix,
                site: Some(super::rrl::prefix_of(source, v4, 48)),
                block: Some(super::rrl::prefix_of(source, v4, 32)),
            },
            std::net::IpAddr::V4(_) => Groups {
                prefix,
                site: None,
                block: None,
            },
        }
    }

    /// The counts it is in, each with its cap under `max` in all and `per_prefix`.
    fn keyed(self, max: u32, per_prefix: u32) -> impl Iterator<Item = (Key, u32)> {
        let site_cap = (max / 4).max(per_prefix);
        let block_cap = (max / 2).max(per_prefix);
        [
            Some((Key::Prefix(self.prefix), per_prefix)),
            self.site.map(|s| (Key::Site(s), site_cap)),
            self.block.map(|b| (Key::Block(b), block_cap)),
        ]
        .into_iter()
        .flatten()
    }
}

/// One count of connections: by prefix, IPv6 /48 or /32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    Prefix(u128),
    Site(u128),
    Block(u128),
}

/// The connections open now, across the listeners.
#[derive(Default)]
pub(super) struct Clients {
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    conns: HashMap<u64, Conn>,
    counts: HashMap<Key, u32>,
    /// Evicted connections whose tasks have not closed them yet, with the cap each made room
    /// under (None: the total). Their descriptors are still open: while one is pending, that
    /// cap makes no more room, so the descriptors stay within a few of `max_clients` however
    /// fast a flood reconnects.
    closing: HashMap<u64, Option<Key>>,
}

impl Registry {
    /// The connection to close to make room, among those `within` takes: the one idle the
    /// longest, else the one whose answer has waited the longest past `STALLED`.
    fn victim(&self, now: Instant, within: impl Fn(&Conn) -> bool) -> Option<u64> {
        let idle = self
            .conns
            .iter()
            .filter(|(_, c)| within(c))
            .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id)))
            .min();
        let stalled = || {
            self.conns
                .iter()
                .filter(|(_, c)| within(c))
                .filter_map(|(id, c)| c.writing_since.map(|t| (t, *id)))
                .filter(|(t, _)| now.saturating_duration_since(*t) >= STALLED)
                .min()
        };
        idle.or_else(stalled).map(|(_, id)| id)
    }

    /// Takes connection `id` out of the counts and tells it to close; it stays `closing`
    /// (for the cap `under`) until its task drops it.
    fn evict(&mut self, id: u64, under: Option<Key>) {
        if let Some(c) = self.conns.remove(&id) {
            self.leave(c.groups);
            c.close.notify_one();
            self.closing.insert(id, under);
        }
    }

    /// Whether a connection evicted to make room under `cap` is still closing.
    fn pending(&self, cap: Option<Key>) -> bool {
        self.closing.values().any(|k| *k == cap)
    }

    fn leave(&mut self, groups: Groups) {
        for (key, _) in groups.keyed(u32::MAX, u32::MAX) {
            if let Some(n) = self.counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&key);
                }
            }
        }
    }
}

/// A connection's place in the registry; leaving drops it.
struct Admitted {
    clients: Arc<Clients>,
    id: u64,
    close: Arc<Notify>,
}

impl Clients {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a connection of `groups` under the caps, or says why not: at a group's cap its
    /// own longest idle (or stalled) connection makes room, at the total cap anyone's.
    fn admit(self: &Arc<Self>, groups: Groups, max: u32, per_prefix: u32, now: Instant) -> Result<Admitted, Closed> {
        let mut r = self.registry();
        for (key, cap) in groups.keyed(max, per_prefix) {
            if r.counts.get(&key).copied().unwrap_or(0) >= cap {
                let same = |c: &Conn| c.groups.keyed(max, per_prefix).any(|(k, _)| k == key);
                let victim = r.victim(now, same).filter(|_| !r.pending(Some(key)));
                let Some(victim) = victim else {
                    return Err(Closed::Prefix);
                };
                r.evict(victim, Some(key));
            }
        }
        if r.conns.len() >= max as usize {
            let victim = r.victim(now, |_| true).filter(|_| !r.pending(None));
            let Some(victim) = victim else {
                return Err(Closed::Full);
            };
            r.evict(victim, None);
        }
        r.next += 1;
        let id = r.next;
        let close = Arc::new(Notify::new());
        r.conns.insert(
            id,
            Conn {
                groups,
                idle_since: Some(now),
                writing_since: None,
                close: close.clone(),
            },
        );
        for (key, _) in groups.keyed(max, per_prefix) {
            *r.counts.entry(key).or_insert(0) += 1;
        }
        Ok(Admitted {
            clients: self.clone(),
            id,
            close,
        })
    }

    pub(super) fn open(&self) -> usize {
        self.registry().conns.len()
    }
}

impl Admitted {
    fn set_idle(&self, since: Option<Instant>) {
        if let Some(c) = self.clients.registry().conns.get_mut(&self.id) {
            c.idle_since = since;
        }
    }

    fn set_writing(&self, since: Option<Instant>) {
        if let Some(c) = self.clients.registry().conns.get_mut(&self.id) {
            c.writing_since = since;
        }
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut r = self.clients.registry();
        if let Some(c) = r.conns.remove(&self.id) {
            r.leave(c.groups);
        } else {
            r.closing.remove(&self.id);
        }
    }
}

/// Accepts on `listener` for ever (the runtime's end stops it).
pub(super) async fn accept_loop(shared: Arc<Shared>, clients: Arc<Clients>, listener: TcpListener) {
    let mut backoff = crate::accept::Backoff::new("DNS over TCP");
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => {
                backoff.succeeded();
                accepted
            }
            Err(e) => {
                tokio::time::sleep(backoff.failed(&e)).await;
                continue;
            }
        };
        let (limits, groups) = {
            let zone = shared.zone();
            let rl = zone.rate_limit();
            (
                zone.tcp().clone(),
                Groups::of(peer.ip(), rl.ipv4_prefix, rl.ipv6_prefix),
            )
        };
        match clients.admit(
            groups,
            limits.max_clients,
            limits.max_clients_per_prefix,
            Instant::now(),
        ) {
            Ok(admitted) => {
                shared.counters.tcp_open.store(clients.open() as u64, Ordering::Relaxed);
                let (shared, clients) = (shared.clone(), clients.clone());
                tokio::spawn(async move {
                    let reason = serve(
                        &shared,
                        stream,
                        peer,
                        &admitted,
                        limits.idle_timeout,
                        limits.max_lifetime,
                    )
                    .await;
                    drop(admitted);
                    shared.counters.tcp_open.store(clients.open() as u64, Ordering::Relaxed);
                    if let Some(reason) = reason {
                        shared.counters.tcp_closed(reason);
                    }
                });
            }
            Err(reason) => {
                // A reset rather than a FIN: the refused connection leaves no TIME_WAIT here.
                // (A zero linger never blocks the drop, which is what the deprecation is about.)
                #[allow(deprecated)]
                let _ = stream.set_linger(Some(Duration::ZERO));
                shared.counters.tcp_closed(reason);
            }
        }
    }
}

/// Serves one connection until the client closes it (None) or the server does (why).
async fn serve(
    shared: &Shared,
    stream: TcpStream,
    peer: SocketAddr,
    admitted: &Admitted,
    idle: Duration,
    lifetime: Duration,
) -> Option<Closed> {
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let end_of_life = Instant::now() + lifetime;
    let mut last = Instant::now();
    loop {
        admitted.set_idle(Some(last));
        let idle_end = last + idle;
        let deadline = idle_end.min(end_of_life);
        let message = tokio::select! {
            () = admitted.close.notified() => return Some(Closed::Evicted),
            r = timeout_at(deadline, read_message(&mut read)) => r,
        };
        let message = match message {
            Err(_) if deadline == end_of_life => return Some(Closed::Lifetime),
            Err(_) => return Some(Closed::Idle),
            Ok(Ok(Some(m))) => m,
            Ok(Ok(None)) => return None,
            Ok(Err(_)) => return Some(Closed::Error),
        };
        admitted.set_idle(None);
        let Some(answer) = super::wire::answer_tcp(shared, message, peer) else {
            continue;
        };
        let Ok(len) = u16::try_from(answer.len()) else {
            return Some(Closed::Error);
        };
        let mut framed = Vec::with_capacity(answer.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&answer);
        // Evictable once the answer has waited `STALLED` for the reader, and closed at `idle`.
        admitted.set_writing(Some(Instant::now()));
        let sent = tokio::select! {
            () = admitted.close.notified() => return Some(Closed::Evicted),
            sent = tokio::time::timeout(idle, write.write_all(&framed)) => sent,
        };
        admitted.set_writing(None);
        match sent {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => {
                shared.counters.send_errors.fetch_add(1, Ordering::Relaxed);
                return Some(Closed::Error);
            }
        }
        last = Instant::now();
    }
}

/// One length-prefixed message; None at a clean end of the stream before its first byte.
async fn read_message<R: AsyncReadExt + Unpin>(read: &mut R) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 2];
    match read.read(&mut len[..1]).await? {
        0 => return Ok(None),
        _ => read.read_exact(&mut len[1..]).await?,
    };
    let len = usize::from(u16::from_be_bytes(len));
    if len < 12 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "shorter than a header",
        ));
    }
    let mut message = vec![0u8; len];
    read.read_exact(&mut message).await?;
    Ok(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(prefix: u128) -> Groups {
        Groups {
            prefix,
            site: None,
            block: None,
        }
    }

    async fn told_to_close(a: &Admitted) -> bool {
        tokio::time::timeout(Duration::from_millis(10), a.close.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn caps_hold_per_prefix_and_in_all_and_the_longest_idle_makes_room() {
        let clients = Arc::new(Clients::default());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = clients.admit(v4(1), 3, 2, at(0)).unwrap();
        let b = clients.admit(v4(1), 3, 2, at(1)).unwrap();
        // At its prefix's cap: that prefix's longest idle (a) makes room (review M2).
        let a2 = clients.admit(v4(1), 3, 2, at(2)).unwrap();
        assert!(told_to_close(&a).await, "a was evicted for its own prefix");
        // One replacement at a time: until a's task closes it, its descriptor is still open.
        assert_eq!(
            clients.admit(v4(1), 3, 2, at(2)).err(),
            Some(Closed::Prefix),
            "no second eviction while the first is closing"
        );
        drop(a);
        // Both of prefix 1 busy: a third is refused.
        b.set_idle(None);
        a2.set_idle(None);
        assert_eq!(clients.admit(v4(1), 3, 2, at(3)).err(), Some(Closed::Prefix));
        let c = clients.admit(v4(2), 3, 2, at(4)).unwrap();
        assert_eq!(clients.open(), 3);
        // Full: the one idle the longest (c, the only idle one) gives way.
        let d = clients.admit(v4(3), 3, 2, at(5)).unwrap();
        assert!(told_to_close(&c).await, "c was evicted");
        drop(c);
        // All busy: a fourth is refused.
        d.set_idle(None);
        assert_eq!(clients.admit(v4(4), 3, 2, at(6)).err(), Some(Closed::Full));
        drop(d);
        assert_eq!(clients.open(), 2);
        assert!(clients.admit(v4(2), 3, 2, at(7)).is_ok(), "room again");
    }

    #[tokio::test]
    async fn an_answer_the_client_does_not_read_makes_its_connection_evictable() {
        let clients = Arc::new(Clients::default());
        let t0 = Instant::now();
        let a = clients.admit(v4(1), 2, 2, t0).unwrap();
        let b = clients.admit(v4(2), 2, 2, t0).unwrap();
        for x in [&a, &b] {
            x.set_idle(None);
        }
        // b's answer waits for its reader: under STALLED it is still busy.
        b.set_writing(Some(t0));
        let soon = t0 + STALLED / 2;
        assert_eq!(clients.admit(v4(3), 2, 2, soon).err(), Some(Closed::Full));
        let late = t0 + STALLED + Duration::from_millis(1);
        let _c = clients.admit(v4(3), 2, 2, late).unwrap();
        assert!(told_to_close(&b).await, "the stalled reader gave way");
        assert!(!told_to_close(&a).await, "the one busy answering stays");
    }

    #[tokio::test]
    async fn an_ipv6_site_spread_over_many_prefixes_holds_a_quarter_at_most() {
        let clients = Arc::new(Clients::default());
        let t0 = Instant::now();
        let source = |s: &str| Groups::of(s.parse().unwrap(), 24, 56);
        // max 16, 4 per /56: a /48 holds 4 at most, a /32 8, whatever its /56s.
        let mut held = Vec::new();
        for (i, s) in [
            "2001:2:0:100::1",
            "2001:2:0:200::1",
            "2001:2:0:300::1",
            "2001:2:0:400::1",
        ]
        .iter()
        .enumerate()
        {
            let a = clients
                .admit(source(s), 16, 4, t0 + Duration::from_millis(i as u64))
                .unwrap();
            a.set_idle(None);
            held.push(a);
        }
        assert_eq!(
            clients.admit(source("2001:2:0:500::1"), 16, 4, t0).err(),
            Some(Closed::Prefix),
            "a fifth /56 of the same /48, all busy"
        );
        // Another /48 of the same /32 has room, up to the /32's half.
        for i in 1..=4u16 {
            let a = clients.admit(source(&format!("2001:2:{i}:100::1")), 16, 4, t0).unwrap();
            a.set_idle(None);
            held.push(a);
        }
        assert_eq!(
            clients.admit(source("2001:2:9:100::1"), 16, 4, t0).err(),
            Some(Closed::Prefix),
            "the /32 holds half of max_clients"
        );
        // Elsewhere, and IPv4 clients of a dual-stack socket by their own /24, still get in.
        assert!(clients.admit(source("2001:3::1"), 16, 4, t0).is_ok());
        assert!(clients.admit(source("::ffff:198.18.1.1"), 16, 4, t0).is_ok());
        assert_eq!(source("::ffff:198.18.1.1"), v4(source("198.18.1.9").prefix));
    }
}
