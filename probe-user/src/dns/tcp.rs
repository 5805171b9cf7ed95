//! DNS over TCP (RFC 7766), with the bounds `[dns.tcp]` sets. Queries on one connection are
//! read and answered in order, so a client may pipeline them. What one client can hold:
//! - connections: at most `max_clients` in all (the DNS server's descriptor budget, apart from
//!   what probes, sinks and state use) and `max_clients_per_prefix` per source prefix; at the
//!   total cap a new connection takes the place of the one idle the longest (RFC 7766 6.2.3:
//!   a server under pressure closes idle connections first), and is refused when none is idle;
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
    prefix: u128,
    /// Since when it waits for a query; None while it is answering one.
    idle_since: Option<Instant>,
    close: Arc<Notify>,
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
    by_prefix: HashMap<u128, u32>,
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

    /// Admits a connection from `prefix` under the caps, or says why not.
    fn admit(self: &Arc<Self>, prefix: u128, max: u32, per_prefix: u32, now: Instant) -> Result<Admitted, Closed> {
        let mut r = self.registry();
        if r.by_prefix.get(&prefix).copied().unwrap_or(0) >= per_prefix {
            return Err(Closed::Prefix);
        }
        if r.conns.len() >= max as usize {
            let oldest = r
                .conns
                .iter()
                .filter_map(|(id, c)| c.idle_since.map(|t| (t, *id)))
                .min()
                .map(|(_, id)| id);
            let Some(oldest) = oldest else {
                return Err(Closed::Full);
            };
            // It leaves the count now; its task sees the notice and closes.
            if let Some(c) = r.conns.remove(&oldest) {
                leave_prefix(&mut r.by_prefix, c.prefix);
                c.close.notify_one();
            }
        }
        r.next += 1;
        let id = r.next;
        let close = Arc::new(Notify::new());
        r.conns.insert(
            id,
            Conn {
                prefix,
                idle_since: Some(now),
                close: close.clone(),
            },
        );
        *r.by_prefix.entry(prefix).or_insert(0) += 1;
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
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut r = self.clients.registry();
        if let Some(c) = r.conns.remove(&self.id) {
            leave_prefix(&mut r.by_prefix, c.prefix);
        }
    }
}

fn leave_prefix(by_prefix: &mut HashMap<u128, u32>, prefix: u128) {
    if let Some(n) = by_prefix.get_mut(&prefix) {
        *n -= 1;
        if *n == 0 {
            by_prefix.remove(&prefix);
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
        let (limits, prefix) = {
            let zone = shared.zone();
            let rl = zone.rate_limit();
            (
                zone.tcp().clone(),
                super::rrl::prefix_of(peer.ip(), rl.ipv4_prefix, rl.ipv6_prefix),
            )
        };
        match clients.admit(
            prefix,
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
        let sent = tokio::time::timeout(idle, write.write_all(&framed)).await;
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

    #[tokio::test]
    async fn caps_hold_per_prefix_and_in_all_and_the_longest_idle_makes_room() {
        let clients = Arc::new(Clients::default());
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let a = clients.admit(1, 3, 2, at(0)).unwrap();
        let b = clients.admit(1, 3, 2, at(1)).unwrap();
        assert_eq!(clients.admit(1, 3, 2, at(2)).err(), Some(Closed::Prefix));
        let c = clients.admit(2, 3, 2, at(3)).unwrap();
        assert_eq!(clients.open(), 3);
        // Full: the one idle the longest (a) gives way, and is told to close.
        let d = clients.admit(3, 3, 2, at(4)).unwrap();
        assert_eq!(clients.open(), 3);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), a.close.notified())
                .await
                .is_ok(),
            "a was evicted"
        );
        // Busy connections are never evicted: with all three busy, a fourth is refused.
        for x in [&b, &c, &d] {
            x.set_idle(None);
        }
        assert_eq!(clients.admit(4, 3, 2, at(5)).err(), Some(Closed::Full));
        drop(a);
        assert_eq!(clients.open(), 3, "an evicted connection left the count already");
        drop(c);
        assert_eq!(clients.open(), 2);
        assert!(clients.admit(2, 3, 2, at(6)).is_ok(), "its prefix has room again");
    }
}
