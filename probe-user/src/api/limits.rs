//! What bounds the API's use of descriptors, memory and time: a connection cap with eviction of
//! idle connections, a cap per peer (a uid on the unix socket and over loopback TCP, an
//! address otherwise), a place kept for an operator, room made for a token holder over TCP
//! (`admit_provisional`, `promote`), a cap per peer on long-lived streams, header/idle
//! timeouts, a progress timeout for answers the client does not read, request size caps, and
//! accept-error backoff.
use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::Notify,
    time::Instant,
};

/// Connections served at once. A few operators, scrapers and load balancers poll the API; 256 is
/// far above that, and keeps the daemon's descriptors (probes need them too) well under the
/// unit's `LimitNOFILE`. At the cap, the oldest connection with no request in flight is closed
/// to make room, so a flood of idle connections cannot lock operators out.
pub(super) const MAX_CONNECTIONS: usize = 256;
/// Connections one peer (a uid on the unix socket, an address over TCP) may hold: a peer at its
/// cap makes room among its own idle connections, never among others'.
pub(super) const MAX_PER_PEER: usize = 32;
/// Of `MAX_CONNECTIONS`, the places only an operator (a peer that may change state: root, the
/// daemon's uid, the socket's group) may take, so that clients holding every other place with
/// requests in flight cannot lock operators out.
pub(super) const OPERATOR_PLACES: usize = 1;
/// Connections admitted past a full table until their request head shows whether they carry
/// the bearer token (TCP only: a unix operator is known at accept). One with the token takes a
/// place from the oldest stream of a client without one; one without is refused.
pub(super) const PROVISIONAL_PLACES: usize = 4;
/// Long-lived streams (`GET /v1/status?stream=1`, `GET /v1/events?follow=1`) one peer may hold
/// at once, unless it is an operator: a slow reader holds its stream for as long as it reads a
/// little, so a peer could otherwise hold every place with them.
pub(super) const MAX_STREAMS_PER_PEER: usize = 4;
/// A response the client has not taken a byte of for this long (its socket full: it does not
/// read) ends the connection, request in flight or not.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(10);
/// How long a client may take to send a request head, counted from the connection (or the end
/// of the previous response): this also bounds idle keep-alive connections.
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request in flight and no byte read or written for this long is closed
/// (a slow body, a client that does not read its answer).
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// hyper's read buffer, which caps a request head: the API's heads are a path and a few
/// headers. 8 KiB is the least hyper accepts.
pub(super) const MAX_BUF_SIZE: usize = 16 * 1024;
/// Header lines per request (hyper's default is 100).
pub(super) const MAX_HEADERS: usize = 64;
/// The largest request body accepted but for a fleet batch's (other POSTs are empty).
pub(super) const MAX_BODY_BYTES: u64 = 1024;
/// The largest fleet batch body: `crate::fleet::MAX_ITEMS` items of some 800 bytes.
pub(super) const MAX_BATCH_BYTES: u64 = 8 << 20;
/// The time limits of one connection; production uses `Timeouts::API`, unit tests shorter ones.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timeouts {
    pub(super) header_read: Duration,
    pub(super) idle: Duration,
    pub(super) write_stall: Duration,
}

impl Timeouts {
    pub(super) const API: Timeouts = Timeouts {
        header_read: HEADER_READ_TIMEOUT,
        idle: IDLE_TIMEOUT,
        write_stall: WRITE_STALL,
    };
}

/// Who holds a connection, for the cap per peer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum PeerKey {
    Uid(u32),
    Address(std::net::IpAddr),
    /// A loopback TCP client whose socket's owner the kernel did not tell: all such peers
    /// share one cap (an address over loopback names no one).
    Loopback,
    /// Credentials that could not be read: all such peers share one cap.
    Unknown,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The peer holds `MAX_PER_PEER` connections, each with a request in flight.
    PeerFull,
    /// Every place a peer like this may take is held by a connection with a request in flight.
    Full,
}
/// Accept errors are retried with `crate::accept::Backoff`.
pub(super) use crate::accept::Backoff as AcceptBackoff;

/// One served connection as the table sees it.
pub(super) struct Slot {
    id: u64,
    /// Requests whose response has not been handed to hyper in full.
    in_flight: AtomicUsize,
    /// Milliseconds from `born` to the last byte read or written.
    last_io_ms: AtomicU64,
    /// Milliseconds from `born` + 1 to when a write was first refused for a full socket, while
    /// it still is; 0 when writes go through.
    blocked_ms: AtomicU64,
    born: Instant,
    peer: PeerKey,
    /// Flags: `OPERATOR`, `PROVISIONAL`, `STREAMING`, `HARD`.
    flags: AtomicU8,
    /// Wakes the connection's task when it is chosen for eviction.
    pub(super) evict: Notify,
}

/// A peer that may change state (a unix operator, or a request with the bearer token):
/// never evicted to make room for another operator.
const OPERATOR: u8 = 1;
/// Admitted past a full table (`Table::admit_provisional`): its first request must carry the
/// token.
const PROVISIONAL: u8 = 2;
/// Serving a long-lived stream now.
const STREAMING: u8 = 4;
/// Evicted with a request in flight (a stream, for an operator): it closes at once rather
/// than after its answer.
const HARD: u8 = 8;

impl Slot {
    pub(super) fn busy(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) > 0
    }

    fn has(&self, flag: u8) -> bool {
        self.flags.load(Ordering::Acquire) & flag != 0
    }

    fn set(&self, flag: u8, on: bool) {
        if on {
            self.flags.fetch_or(flag, Ordering::AcqRel);
        } else {
            self.flags.fetch_and(!flag, Ordering::AcqRel);
        }
    }

    pub(super) fn peer(&self) -> &PeerKey {
        &self.peer
    }

    /// Whether it was admitted past a full table and has not shown the token yet.
    pub(super) fn provisional(&self) -> bool {
        self.has(PROVISIONAL)
    }

    /// Marks it as an operator's (it is then never evicted for another operator).
    pub(super) fn set_operator(&self) {
        self.set(OPERATOR, true);
    }

    /// Marks it as serving a long-lived stream, until its request ends.
    pub(super) fn set_streaming(&self) {
        self.set(STREAMING, true);
    }

    /// Whether it was evicted to close at once, request in flight or not.
    pub(super) fn hard_evicted(&self) -> bool {
        self.has(HARD)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_io_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Since when the client has taken no byte of a response it is sent, if it has not.
    pub(super) fn stalled_since(&self) -> Option<Instant> {
        match self.blocked_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.born + Duration::from_millis(ms - 1)),
        }
    }

    /// When the connection becomes idle-expired if nothing happens until then.
    pub(super) fn idle_deadline(&self, idle: Duration) -> Instant {
        self.born + Duration::from_millis(self.last_io_ms.load(Ordering::Relaxed)) + idle
    }

    /// Counts a request until the guard (held by the response body) is dropped.
    pub(super) fn request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        RequestGuard(self.clone())
    }
}

pub(super) struct RequestGuard(Arc<Slot>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.set(STREAMING, false);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections being served, oldest first.
#[derive(Default)]
pub(super) struct Table {
    inner: Mutex<TableInner>,
}

#[derive(Default)]
struct TableInner {
    next_id: u64,
    slots: VecDeque<Arc<Slot>>,
}

/// Why a slot may be taken out to make room.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Take {
    /// Only one with no request in flight; it closes once idle.
    Idle,
    /// Also a stream of a peer that is no operator; it closes at once.
    IdleOrStream,
}

impl TableInner {
    /// Tells the oldest idle connection `pick` accepts to close, and takes it out of the
    /// count now (its descriptor goes a moment later); false if every such one is busy.
    fn evict(&mut self, pick: impl Fn(&Slot) -> bool) -> bool {
        self.evict_as(Take::Idle, pick)
    }

    /// `evict`, or with `Take::IdleOrStream` the oldest stream of a non-operator when no
    /// connection is idle.
    fn evict_as(&mut self, take: Take, pick: impl Fn(&Slot) -> bool) -> bool {
        let idle = self.slots.iter().position(|s| !s.busy() && pick(s));
        let stream = || {
            self.slots
                .iter()
                .position(|s| s.has(STREAMING) && !s.has(OPERATOR) && pick(s))
        };
        let Some(i) = idle.or_else(|| (take == Take::IdleOrStream).then(stream).flatten()) else {
            return false;
        };
        if let Some(s) = self.slots.remove(i) {
            if s.busy() {
                s.set(HARD, true);
            }
            // notify_one keeps a permit if the task is not waiting yet.
            s.evict.notify_one();
        }
        true
    }

    fn slot(&mut self, peer: PeerKey, flags: u8) -> Arc<Slot> {
        self.next_id += 1;
        let slot = Arc::new(Slot {
            id: self.next_id,
            in_flight: AtomicUsize::new(0),
            last_io_ms: AtomicU64::new(0),
            blocked_ms: AtomicU64::new(0),
            born: Instant::now(),
            peer,
            flags: AtomicU8::new(flags),
            evict: Notify::new(),
        });
        self.slots.push_back(slot.clone());
        slot
    }
}

impl Table {
    /// Admits a connection from `peer` under the caps, making room among idle connections
    /// (the peer's own first, when it is at its cap); it leaves the table when the returned
    /// entry is dropped. An operator may take the places kept for operators.
    pub(super) fn admit(self: &Arc<Self>, peer: PeerKey, operator: bool) -> Result<Entry, Refused> {
        let mut t = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // At its cap, the peer's new connection replaces one of its own: the count stays.
        let replaces = t.slots.iter().filter(|s| s.peer == peer).count() >= MAX_PER_PEER;
        if replaces && !t.evict(|s| s.peer == peer) {
            return Err(Refused::PeerFull);
        }
        let places = if operator {
            MAX_CONNECTIONS
        } else {
            MAX_CONNECTIONS - OPERATOR_PLACES
        };
        let settled = t.slots.iter().filter(|s| !s.has(PROVISIONAL)).count();
        if !replaces && settled >= places && !t.evict(|s| !s.has(PROVISIONAL)) {
            return Err(Refused::Full);
        }
        let slot = t.slot(peer, if operator { OPERATOR } else { 0 });
        Ok(Entry {
            table: self.clone(),
            slot,
        })
    }

    /// Admits a TCP connection the table had no place for (`Refused::Full`) until its first
    /// request shows whether it carries the token (`promote`); at most `PROVISIONAL_PLACES` at
    /// once.
    pub(super) fn admit_provisional(self: &Arc<Self>, peer: PeerKey) -> Result<Entry, Refused> {
        let mut t = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if t.slots.iter().filter(|s| s.has(PROVISIONAL)).count() >= PROVISIONAL_PLACES {
            return Err(Refused::Full);
        }
        let slot = t.slot(peer, PROVISIONAL);
        Ok(Entry {
            table: self.clone(),
            slot,
        })
    }

    /// A provisional connection showed the token: it becomes an operator's, and the table
    /// makes room for it by closing the oldest idle connection or, with none, the oldest
    /// stream of a peer that is no operator (a stream is read-only; the token holder's change
    /// or scrape is what the place is kept for). False when nothing could be taken (every
    /// place is an operator's or busy with a short request): it is served anyway, one over the
    /// cap until something ends, within `PROVISIONAL_PLACES`.
    pub(super) fn promote(&self, slot: &Slot) -> bool {
        let mut t = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.set(PROVISIONAL, false);
        slot.set(OPERATOR, true);
        let id = slot.id;
        let settled = t.slots.iter().filter(|s| !s.has(PROVISIONAL)).count();
        settled <= MAX_CONNECTIONS || t.evict_as(Take::IdleOrStream, |s| s.id != id && !s.has(PROVISIONAL))
    }

    /// The long-lived streams `peer` holds now.
    pub(super) fn streams_of(&self, peer: &PeerKey) -> usize {
        let t = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        t.slots.iter().filter(|s| s.peer == *peer && s.has(STREAMING)).count()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.inner.lock().expect("the table lock is never poisoned").slots.len()
    }
}

pub(super) struct Entry {
    table: Arc<Table>,
    pub(super) slot: Arc<Slot>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut t = self
            .table
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let id = self.slot.id;
        t.slots.retain(|s| s.id != id);
    }
}

/// A stream that records in its slot the time of its last read or write, and since when a
/// write has waited for the client to read.
pub(super) struct Tracked<S> {
    pub(super) inner: S,
    pub(super) slot: Arc<Slot>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.slot.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        match &r {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.slot.touch();
                self.slot.blocked_ms.store(0, Ordering::Relaxed);
            }
            Poll::Pending if self.slot.blocked_ms.load(Ordering::Relaxed) == 0 => {
                let since = self.slot.now_ms() + 1;
                self.slot.blocked_ms.store(since, Ordering::Relaxed);
            }
            _ => {}
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eviction_picks_the_oldest_idle_connection_and_peers_keep_to_their_share() {
        let table = Arc::new(Table::default());
        let op = PeerKey::Uid(0);
        let mut held = Vec::new();
        // Seven users fill all places but the operator's with busy connections.
        for i in 0..(MAX_CONNECTIONS - OPERATOR_PLACES) {
            let peer = PeerKey::Uid(1000 + u32::try_from(i / MAX_PER_PEER).unwrap());
            let e = table.admit(peer, false).unwrap();
            let g = e.slot.request();
            held.push((e, g));
        }
        assert_eq!(table.admit(PeerKey::Uid(2000), false).err(), Some(Refused::Full));
        // A peer at its cap with all busy is refused as such.
        assert_eq!(table.admit(PeerKey::Uid(1000), false).err(), Some(Refused::PeerFull));
        // The operator gets the place kept for it, then nothing more.
        let operator = table.admit(op.clone(), true).unwrap();
        let _g = operator.slot.request();
        assert_eq!(table.admit(op.clone(), true).err(), Some(Refused::Full));
        // One of the first peer's connections goes idle: a new one from that peer takes its
        // place (the peer's own), and the idle one is told to close.
        let (first, guard) = held.remove(0);
        drop(guard);
        let again = table.admit(PeerKey::Uid(1000), false).unwrap();
        tokio::time::timeout(Duration::from_millis(100), first.slot.evict.notified())
            .await
            .expect("the peer's idle connection is told to close");
        assert_eq!(table.len(), MAX_CONNECTIONS, "the evicted one left the count at once");
        drop(first);
        assert_eq!(table.len(), MAX_CONNECTIONS);
        drop(again);
        // Another peer at the total cap makes room among anyone's idle connections.
        let (second, guard) = held.remove(0);
        drop(guard);
        let _other = table
            .admit(PeerKey::Address("198.18.0.9".parse().unwrap()), false)
            .unwrap();
        tokio::time::timeout(Duration::from_millis(100), second.slot.evict.notified())
            .await
            .expect("an idle connection makes room");
    }

    /// Fills every place but the operator's with streams from peers that are no operator (a
    /// busy stream each, the way slow readers hold them).
    fn full_of_streams(table: &Arc<Table>) -> Vec<(Entry, RequestGuard)> {
        (0..(MAX_CONNECTIONS - OPERATOR_PLACES))
            .map(|i| {
                let peer = PeerKey::Address(std::net::IpAddr::from([198, 18, 1, u8::try_from(i / 4).unwrap()]));
                let e = table.admit(peer, false).unwrap();
                let g = e.slot.request();
                e.slot.set_streaming();
                (e, g)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_token_holder_past_a_full_table_takes_the_oldest_stream_and_others_are_refused() {
        let table = Arc::new(Table::default());
        let held = full_of_streams(&table);
        let op = table.admit(PeerKey::Uid(0), true).unwrap();
        let _busy = op.slot.request();
        let peer = PeerKey::Address("198.18.3.1".parse().unwrap());
        assert_eq!(table.admit(peer.clone(), false).err(), Some(Refused::Full));
        // Admitted for its head, at most PROVISIONAL_PLACES at once.
        let provisional: Vec<Entry> = (0..PROVISIONAL_PLACES)
            .map(|_| table.admit_provisional(peer.clone()).unwrap())
            .collect();
        assert!(table.admit_provisional(peer.clone()).is_err());
        assert!(provisional.iter().all(|e| e.slot.provisional()));
        // One shows the token: the oldest stream is told to close at once, and is out of the
        // count.
        assert!(table.promote(&provisional[0].slot));
        let (oldest, _g) = &held[0];
        tokio::time::timeout(Duration::from_millis(100), oldest.slot.evict.notified())
            .await
            .expect("the oldest stream is told to close");
        assert!(oldest.slot.hard_evicted(), "closed with its stream in flight");
        assert!(!provisional[0].slot.provisional());
        assert_eq!(table.len(), MAX_CONNECTIONS - 1 + PROVISIONAL_PLACES);
        // Only the oldest went.
        assert!(!held[1].0.slot.hard_evicted());
        // The others, shown no token, are refused by the router; the table lets them go.
        drop(provisional);
        assert_eq!(table.len(), MAX_CONNECTIONS - 1);
    }

    #[tokio::test]
    async fn streams_are_counted_per_peer_and_end_with_their_request() {
        let table = Arc::new(Table::default());
        let peer = PeerKey::Uid(1000);
        let entries: Vec<Entry> = (0..3).map(|_| table.admit(peer.clone(), false).unwrap()).collect();
        let guards: Vec<RequestGuard> = entries
            .iter()
            .map(|e| {
                let g = e.slot.request();
                e.slot.set_streaming();
                g
            })
            .collect();
        assert_eq!(table.streams_of(&peer), 3);
        assert_eq!(table.streams_of(&PeerKey::Uid(1001)), 0);
        drop(guards);
        assert_eq!(table.streams_of(&peer), 0, "a stream ends with its request");
    }
}
